#include "web_config.hpp"

#include "nodewatch/fs_helper.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <utility>

#include <yaml-cpp/yaml.h>

namespace nodewatch {
namespace {

namespace fs = std::filesystem;

// Go's TLS 1.0-1.2 cipher suite names (crypto/tls CipherSuites() and
// InsecureCipherSuites()), which are the IANA names OpenSSL knows as
// SSL_CIPHER_standard_name (web_security.cpp finds each one there).
constexpr std::array<std::string_view, 22> kGoTls12Suites = {
    "TLS_RSA_WITH_RC4_128_SHA",
    "TLS_RSA_WITH_3DES_EDE_CBC_SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA256",
    "TLS_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_RC4_128_SHA",
    "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
};
// TLS 1.3's, which Go does not let a configuration choose: accepted, no effect.
constexpr std::array<std::string_view, 3> kGoTls13Suites = {
    "TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"};

struct Curve {
  std::string_view go, openssl;
};
constexpr std::array<Curve, 4> kCurves = {{
    {"CurveP256", "P-256"},
    {"CurveP384", "P-384"},
    {"CurveP521", "P-521"},
    {"X25519", "X25519"},
}};

struct Version {
  std::string_view name;
  TlsVersion value;
};
constexpr std::array<Version, 4> kVersions = {{
    {"TLS10", 0x0301},
    {"TLS11", 0x0302},
    {"TLS12", 0x0303},
    {"TLS13", 0x0304},
}};

struct Auth {
  std::string_view name;
  ClientAuth value;
};
constexpr std::array<Auth, 5> kAuths = {{
    {"NoClientCert", ClientAuth::kNone},
    {"RequestClientCert", ClientAuth::kRequest},
    {"RequireAnyClientCert", ClientAuth::kRequireAny},
    {"VerifyClientCertIfGiven", ClientAuth::kVerifyIfGiven},
    {"RequireAndVerifyClientCert", ClientAuth::kRequireAndVerify},
}};

// The response headers the toolkit lets a configuration set.
constexpr std::array<std::string_view, 5> kHeaders = {
    "Strict-Transport-Security", "X-Content-Type-Options", "X-Frame-Options", "X-XSS-Protection",
    "Content-Security-Policy"};

class Reader {
 public:
  Reader(std::string file, std::vector<ConfigError>* errors)
      : file_(std::move(file)), errors_(errors) {}

  void error(const YAML::Node& at, const std::string& key, std::string message) {
    const YAML::Mark m = at.Mark();
    ConfigError e;
    e.file = file_;
    e.line = m.line >= 0 ? m.line + 1 : 0;
    e.column = m.column >= 0 ? m.column + 1 : 0;
    e.key = key;
    e.message = std::move(message);
    errors_->push_back(std::move(e));
  }

  // The map at `node` (null or absent: none); every key must be in `known`.
  bool map(const YAML::Node& node, const std::string& key,
           std::initializer_list<std::string_view> known) {
    if (!node || node.IsNull()) return false;
    if (!node.IsMap()) {
      error(node, key, "must be a mapping");
      return false;
    }
    for (const auto& kv : node) {
      std::string k = kv.first.Scalar();
      if (!kv.first.IsScalar() ||
          std::find(known.begin(), known.end(), std::string_view(k)) == known.end()) {
        error(kv.first, key.empty() ? k : key + "." + k, "unknown key");
      }
    }
    return true;
  }

  std::optional<std::string> string(const YAML::Node& node, const std::string& key) {
    if (!node || node.IsNull()) return std::nullopt;
    if (!node.IsScalar()) {
      error(node, key, "must be a string");
      return std::nullopt;
    }
    return node.Scalar();
  }

  std::optional<bool> boolean(const YAML::Node& node, const std::string& key) {
    if (!node || node.IsNull()) return std::nullopt;
    bool v = false;
    if (!node.IsScalar() || !YAML::convert<bool>::decode(node, v)) {
      error(node, key, "must be true or false");
      return std::nullopt;
    }
    return v;
  }

  std::vector<std::string> strings(const YAML::Node& node, const std::string& key) {
    std::vector<std::string> out;
    if (!node || node.IsNull()) return out;
    if (!node.IsSequence()) {
      error(node, key, "must be a list of strings");
      return out;
    }
    for (const auto& el : node) {
      if (!el.IsScalar()) {
        error(el, key, "must be a list of strings");
        continue;
      }
      out.push_back(el.Scalar());
    }
    return out;
  }

  // A path relative to the file's directory, as the toolkit resolves them.
  std::string path(const std::string& p) const {
    if (p.empty() || p[0] == '/') return p;
    return (fs::path(file_).parent_path() / p).lexically_normal().string();
  }

 private:
  std::string file_;
  std::vector<ConfigError>* errors_;
};

void read_tls(Reader& r, const YAML::Node& node, WebConfig* out) {
  const std::string k = "tls_server_config";
  if (!r.map(node, k,
             {"cert", "key", "client_ca", "cert_file", "key_file", "client_auth_type",
              "client_ca_file", "client_allowed_sans", "min_version", "max_version",
              "cipher_suites", "curve_preferences", "prefer_server_cipher_suites"}))
    return;
  TlsServerConfig t;
  t.cert_file = r.path(r.string(node["cert_file"], k + ".cert_file").value_or(""));
  t.key_file = r.path(r.string(node["key_file"], k + ".key_file").value_or(""));
  t.cert = r.string(node["cert"], k + ".cert").value_or("");
  t.key = r.string(node["key"], k + ".key").value_or("");
  t.client_ca = r.string(node["client_ca"], k + ".client_ca").value_or("");
  bool auth_set = false;
  if (auto a = r.string(node["client_auth_type"], k + ".client_auth_type")) {
    auth_set = true;
    auto it =
        std::find_if(kAuths.begin(), kAuths.end(), [&](const Auth& x) { return x.name == *a; });
    if (a->empty()) {
      t.client_auth = ClientAuth::kNone;
    } else if (*a == "RequireClientCert") {  // the toolkit's older name
      t.client_auth = ClientAuth::kRequireAny;
    } else if (it == kAuths.end())
      r.error(node["client_auth_type"], k + ".client_auth_type",
              "\"" + *a +
                  "\" is not one of NoClientCert, RequestClientCert, RequireAnyClientCert, "
                  "VerifyClientCertIfGiven, RequireAndVerifyClientCert");
    else
      t.client_auth = it->value;
  }
  t.client_ca_file = r.path(r.string(node["client_ca_file"], k + ".client_ca_file").value_or(""));
  t.client_allowed_sans = r.strings(node["client_allowed_sans"], k + ".client_allowed_sans");
  auto version = [&](const char* key, TlsVersion def) {
    auto v = r.string(node[key], k + "." + key);
    if (!v) return def;
    auto it = std::find_if(kVersions.begin(), kVersions.end(),
                           [&](const Version& x) { return x.name == *v; });
    if (it == kVersions.end()) {
      r.error(node[key], k + "." + key, "\"" + *v + "\" is not one of TLS10, TLS11, TLS12, TLS13");
      return def;
    }
    return it->value;
  };
  t.min_version = version("min_version", t.min_version);
  t.max_version = version("max_version", t.max_version);
  if (t.min_version > t.max_version)
    r.error(node["max_version"] ? node["max_version"] : node["min_version"], k + ".max_version",
            "is below min_version");
  for (const std::string& s : r.strings(node["cipher_suites"], k + ".cipher_suites")) {
    if (std::find(kGoTls12Suites.begin(), kGoTls12Suites.end(), s) != kGoTls12Suites.end())
      t.cipher_suites.push_back(s);
    else if (std::find(kGoTls13Suites.begin(), kGoTls13Suites.end(), s) == kGoTls13Suites.end())
      r.error(node["cipher_suites"], k + ".cipher_suites", "\"" + s + "\" is not a cipher suite");
  }
  for (const std::string& c : r.strings(node["curve_preferences"], k + ".curve_preferences")) {
    auto it =
        std::find_if(kCurves.begin(), kCurves.end(), [&](const Curve& x) { return x.go == c; });
    if (it == kCurves.end())
      r.error(node["curve_preferences"], k + ".curve_preferences",
              "\"" + c + "\" is not one of CurveP256, CurveP384, CurveP521, X25519");
    else
      t.curve_preferences.emplace_back(it->openssl);
  }
  r.boolean(node["prefer_server_cipher_suites"], k + ".prefer_server_cipher_suites");

  // The toolkit's rules: TLS is on when any of the certificate, key, CA or
  // client_auth_type is given, and then needs a certificate and a key; a
  // file wins over the inline PEM of the same thing.
  const bool has_cert = !t.cert_file.empty() || !t.cert.empty();
  const bool has_key = !t.key_file.empty() || !t.key.empty();
  const bool has_ca = !t.client_ca_file.empty() || !t.client_ca.empty();
  if (!has_cert && !has_key && !has_ca && !auth_set) return;  // an empty section: plain HTTP
  if (!has_cert) {
    r.error(node, k, "missing one of cert or cert_file");
    return;
  }
  if (!has_key) {
    r.error(node, k, "missing one of key or key_file");
    return;
  }
  if (has_ca && t.client_auth == ClientAuth::kNone)
    r.error(node["client_auth_type"] ? node["client_auth_type"] : node, k + ".client_auth_type",
            "client CAs are configured but client certificates are not asked for (NoClientCert)");
  out->tls = std::move(t);
}

void read_http(Reader& r, const YAML::Node& node, WebConfig* out) {
  const std::string k = "http_server_config";
  if (!r.map(node, k, {"http2", "headers"})) return;
  out->http2_asked = r.boolean(node["http2"], k + ".http2").value_or(false);
  const YAML::Node h = node["headers"];
  if (!h || h.IsNull()) return;
  if (!h.IsMap()) {
    r.error(h, k + ".headers", "must be a mapping of header names to values");
    return;
  }
  for (const auto& kv : h) {
    const std::string name = kv.first.Scalar();
    const std::string key = k + ".headers." + name;
    auto allowed = std::find(kHeaders.begin(), kHeaders.end(), name);  // exact, as the toolkit
    if (allowed == kHeaders.end()) {
      r.error(kv.first, key,
              "not a header that may be set (Strict-Transport-Security, X-Content-Type-Options, "
              "X-Frame-Options, X-XSS-Protection, Content-Security-Policy)");
      continue;
    }
    auto value = r.string(kv.second, key);
    if (!value) continue;
    if (*allowed == "X-Content-Type-Options" && *value != "nosniff") {
      r.error(kv.second, key, "must be nosniff");
      continue;
    }
    if (*allowed == "X-Frame-Options" && *value != "deny" && *value != "sameorigin") {
      r.error(kv.second, key, "must be deny or sameorigin");
      continue;
    }
    if (value->find_first_of("\r\n") != std::string::npos) {
      r.error(kv.second, key, "must be one line");
      continue;
    }
    out->headers.emplace_back(std::string(*allowed), *value);
  }
}

void read_users(Reader& r, const YAML::Node& node, WebConfig* out) {
  const std::string k = "basic_auth_users";
  if (!node || node.IsNull()) return;
  if (!node.IsMap()) {
    r.error(node, k, "must be a mapping of user names to bcrypt hashes");
    return;
  }
  for (const auto& kv : node) {
    const std::string user = kv.first.Scalar();
    const std::string key = k + "." + user;
    auto hash = r.string(kv.second, key);
    if (!hash) continue;
    if (user.find(':') != std::string::npos) {
      r.error(kv.first, key, "a user name cannot hold ':' (basic authentication splits on it)");
      continue;
    }
    if (!is_bcrypt_hash(*hash)) {
      r.error(kv.second, key,
              "is not a bcrypt hash ($2a$, $2b$ or $2y$, a cost 04-31, 53 characters; "
              "e.g. htpasswd -nBC 10 USER)");
      continue;
    }
    out->basic_auth_users[user] = *hash;
  }
}

void read_rate_limit(Reader& r, const YAML::Node& node, WebConfig* out) {
  const std::string k = "rate_limit";
  if (!r.map(node, k, {"interval", "burst"})) return;
  if (auto i = r.string(node["interval"], k + ".interval")) {
    auto d = parse_go_duration(*i);
    if (!d)
      r.error(node["interval"], k + ".interval",
              "\"" + *i + "\" is not a duration (\"1s\", \"500ms\")");
    else
      out->rate_interval = *d;
  }
  if (node["burst"] && !node["burst"].IsNull()) {
    int b = 0;
    if (!node["burst"].IsScalar() || !YAML::convert<int>::decode(node["burst"], b) || b < 0)
      r.error(node["burst"], k + ".burst", "must be a whole number, 0 or more");
    else
      out->rate_burst = b;
  }
  if (out->rate_interval.count() > 0 && out->rate_burst == 0)
    r.error(node, k + ".burst",
            "must be at least 1 when interval is set (0 would refuse every request)");
}

}  // namespace

std::optional<std::chrono::nanoseconds> parse_go_duration(std::string_view s) {
  // Go's time.ParseDuration for what a rate needs: one or more
  // <number><unit>, units ns us ms s m h; "0" alone is zero.
  if (s == "0") return std::chrono::nanoseconds(0);
  if (s.empty()) return std::nullopt;
  double total = 0;
  std::size_t i = 0;
  while (i < s.size()) {
    std::size_t j = i;
    while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) || s[j] == '.')) ++j;
    if (j == i) return std::nullopt;
    double v = 0;
    try {
      v = std::stod(std::string(s.substr(i, j - i)));
    } catch (...) {
      return std::nullopt;
    }
    std::size_t u = j;
    while (u < s.size() && std::isalpha(static_cast<unsigned char>(s[u]))) ++u;
    std::string_view unit = s.substr(j, u - j);
    double scale = 0;
    if (unit == "ns")
      scale = 1;
    else if (unit == "us" || unit == "\xc2\xb5s")
      scale = 1e3;
    else if (unit == "ms")
      scale = 1e6;
    else if (unit == "s")
      scale = 1e9;
    else if (unit == "m")
      scale = 60e9;
    else if (unit == "h")
      scale = 3600e9;
    else
      return std::nullopt;
    total += v * scale;
    i = u;
  }
  if (total > 1e18) return std::nullopt;
  return std::chrono::nanoseconds(static_cast<std::int64_t>(total));
}

bool is_bcrypt_hash(std::string_view h) {
  static constexpr std::string_view kAlphabet =
      "./ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  if (h.size() != 60 || h[0] != '$' || h[1] != '2' || h[3] != '$' || h[6] != '$') return false;
  if (h[2] != 'a' && h[2] != 'b' && h[2] != 'y') return false;
  if (!std::isdigit(static_cast<unsigned char>(h[4])) ||
      !std::isdigit(static_cast<unsigned char>(h[5])))
    return false;
  const int cost = (h[4] - '0') * 10 + (h[5] - '0');
  if (cost < 4 || cost > 31) return false;
  return h.substr(7).find_first_not_of(kAlphabet) == std::string_view::npos;
}

WebConfigResult parse_web_config(std::string_view text, const std::string& file) {
  WebConfigResult result;
  Reader r(file, &result.errors);
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    ConfigError err;
    err.file = file;
    err.line = e.mark.line >= 0 ? e.mark.line + 1 : 0;
    err.column = e.mark.column >= 0 ? e.mark.column + 1 : 0;
    err.message = "not valid YAML: " + e.msg;
    result.errors.push_back(std::move(err));
    return result;
  }
  WebConfig cfg;
  cfg.source = file;
  if (root && !root.IsNull()) {
    if (r.map(root, "",
              {"tls_server_config", "http_server_config", "basic_auth_users", "rate_limit"})) {
      read_tls(r, root["tls_server_config"], &cfg);
      read_http(r, root["http_server_config"], &cfg);
      read_users(r, root["basic_auth_users"], &cfg);
      read_rate_limit(r, root["rate_limit"], &cfg);
    }
  }
  if (result.errors.empty()) result.config = std::move(cfg);
  return result;
}

WebConfigResult load_web_config(const std::string& path) {
  // Read by a helper within its timeout, regular files only (fs_helper.hpp).
  helper::OperatorFile f = helper::read_operator_file(path, kMaxConfigBytes);
  if (!f.ok) {
    WebConfigResult r;
    ConfigError e;
    e.file = path;
    e.message = f.error.rfind("larger than", 0) == 0 ? f.error : "cannot be read: " + f.error;
    r.errors.push_back(std::move(e));
    return r;
  }
  std::string text = std::move(f.text);
  return parse_web_config(text, path);
}

}  // namespace nodewatch
