#pragma once
// Test PKI and clients for the TLS and authentication tests: a CA, a server
// certificate for localhost and 127.0.0.1, client certificates with chosen
// SANs, all made with Debian's openssl command in a scratch directory; a
// bcrypt hash made with libxcrypt (what htpasswd -B makes); curl run as a
// child process, its status code and exit status read back.

#include <crypt.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

namespace nodewatch::testing {

// Runs `command` with /bin/sh; its exit status (or -1).
inline int Shell(const std::string& command) {
  int st = std::system(command.c_str());
  return st == -1 ? -1 : WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

// Runs `command` and returns its standard output.
inline std::string ShellOutput(const std::string& command, int* status = nullptr) {
  std::string out;
  FILE* p = ::popen(command.c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  std::size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int st = ::pclose(p);
  if (status != nullptr) *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

class TestPki {
 public:
  explicit TestPki(std::filesystem::path dir) : dir_(std::move(dir)) {
    ok_ = Run("req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "
              "'/CN=nodewatch test CA' -keyout " +
              Q("ca.key") + " -out " + Q("ca.crt")) &&
          Issue("server", "DNS:localhost,IP:127.0.0.1");
  }
  bool ok() const { return ok_; }

  // Makes <name>.crt and <name>.key, signed by the CA, with `sans`
  // ("DNS:a,IP:1.2.3.4,URI:spiffe://x,email:a@b"). Returns false on failure.
  bool Issue(const std::string& name, const std::string& sans) {
    std::FILE* f = std::fopen((dir_ / (name + ".ext")).c_str(), "w");
    if (f == nullptr) return false;
    std::fprintf(f, "subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n", sans.c_str());
    std::fclose(f);
    return Run("req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj '/CN=" + name +
               "' -keyout " + Q(name + ".key") + " -out " + Q(name + ".csr")) &&
           Run("x509 -req -in " + Q(name + ".csr") + " -CA " + Q("ca.crt") + " -CAkey " +
               Q("ca.key") + " -CAcreateserial -days 2 -extfile " + Q(name + ".ext") + " -out " +
               Q(name + ".crt"));
  }
  // A self-signed certificate no CA of ours vouches for.
  bool IssueSelfSigned(const std::string& name) {
    return Run("req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj '/CN=" +
               name + "' -keyout " + Q(name + ".key") + " -out " + Q(name + ".crt"));
  }

  std::filesystem::path Path(const std::string& file) const { return dir_ / file; }
  // The serial number of the certificate the server at 127.0.0.1:port sends.
  std::string ServedSerial(std::uint16_t port) const {
    return ShellOutput("echo | openssl s_client -connect 127.0.0.1:" + std::to_string(port) +
                       " -CAfile " + Q("ca.crt") +
                       " 2>/dev/null | openssl x509 -noout -serial 2>/dev/null");
  }
  std::string Serial(const std::string& name) const {
    return ShellOutput("openssl x509 -noout -serial -in " + Q(name + ".crt"));
  }

 private:
  std::string Q(const std::string& file) const { return "'" + (dir_ / file).string() + "'"; }
  bool Run(const std::string& args) const {
    return Shell("openssl " + args + " >/dev/null 2>&1") == 0;
  }
  std::filesystem::path dir_;
  bool ok_ = false;
};

// A bcrypt hash of `password` at `cost`, as htpasswd -B makes one.
inline std::string BcryptHash(const std::string& password, int cost = 10) {
  char salt[CRYPT_GENSALT_OUTPUT_SIZE];
  if (crypt_gensalt_rn("$2y$", cost, nullptr, 0, salt, sizeof salt) == nullptr) return {};
  crypt_data data{};
  const char* h = crypt_rn(password.c_str(), salt, &data, sizeof data);
  return h != nullptr && h[0] != '*' ? std::string(h) : std::string();
}

struct CurlResult {
  int exit = -1;     // curl's exit status: 0, or e.g. 35/56 for a refused handshake
  int status = 0;    // the HTTP status code, 0 when none came
  std::string body;  // with -o: the response body
};

// curl against https://localhost:<port><path> with `args` (e.g. "--cacert
// ca.crt -u alice:pw"); -k is never implied.
inline CurlResult Curl(std::uint16_t port, const std::string& path, const std::string& args,
                       const std::filesystem::path& scratch, const std::string& scheme = "https") {
  CurlResult r;
  const std::filesystem::path body = scratch / "curl.body";
  std::string out =
      ShellOutput("curl -s --max-time 10 -o '" + body.string() + "' -w '%{http_code}' " + args +
                      " " + scheme + "://localhost:" + std::to_string(port) + path,
                  &r.exit);
  r.status = std::atoi(out.c_str());
  if (FILE* f = std::fopen(body.c_str(), "r")) {
    char buf[4096];
    std::size_t n = 0;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) r.body.append(buf, n);
    std::fclose(f);
  }
  std::filesystem::remove(body);
  return r;
}

}  // namespace nodewatch::testing
