#pragma once
// What the web configuration (web_config.hpp) becomes for the HTTP server:
// an OpenSSL server context, the users and their bcrypt hashes, the extra
// response headers and the rate limit, as one immutable WebSecurity that a
// connection takes when it is accepted.
//
// The configuration and the files it names (certificate, key, client CAs)
// are watched: when one of them changes (its inode, size or modification
// time), the next connection accepted (at most once a second) builds a new
// WebSecurity from them, all or nothing. A file that does not parse or a
// certificate that does not load keeps the running one, and is logged and
// counted; so rotating a certificate on disk needs no restart and a
// half-written one never takes the server down.
//
// Basic authentication: a credential is checked with libxcrypt's crypt_rn
// against the user's hash on a thread of its own (bcrypt costs ~70 ms at
// cost 10: never on the io thread), one check at a time. A credential that
// passed is remembered (by user, hash and a SHA-256 of the password; at
// most 128 of them), so that a scrape does not pay bcrypt each time; one
// that failed is not. An unknown user is checked against a hash of the
// same cost all the same, so that timing does not tell which users exist.

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/ssl.hpp>

#include "asio.hpp"
#include "nodewatch/helper.hpp"
#include "web_config.hpp"

namespace nodewatch {

class WebSecurity {
 public:
  // Builds from the configuration at `path` ("" for none: plain HTTP, no
  // authentication). Errors are the configuration's and the files'.
  struct Built {
    std::shared_ptr<const WebSecurity> security;
    std::vector<std::string> errors;
  };
  static Built build(const std::string& path);

  const std::string& path() const { return path_; }
  bool tls() const { return tls_ != nullptr; }
  asio::ssl::context& tls_context() const { return *tls_; }
  const WebConfig& config() const { return config_; }
  bool authenticates() const { return !config_.basic_auth_users.empty(); }
  // True when client_allowed_sans is set: a client without a certificate
  // cannot carry one of them.
  bool client_cert_required_by_sans() const {
    return config_.tls && !config_.tls->client_allowed_sans.empty();
  }
  // One line for the log and the landing page.
  std::string summary() const;

  // True when the configuration or a file it names differs from what this
  // was built from. With `fs`, each file is stat()ed by that helper within
  // 1 s (a file on a hung mount cannot hold the caller); one that does not
  // answer sets `*unanswered` and the answer is false.
  bool changed_on_disk(helper::Fs* fs = nullptr, bool* unanswered = nullptr) const;

 private:
  struct FileId {
    std::string path;
    bool exists = false;
    std::uint64_t inode = 0, size = 0;
    std::int64_t mtime_ns = 0;
    bool operator==(const FileId&) const = default;
  };
  static FileId identify(const std::string& path);

  std::string path_;
  WebConfig config_;
  std::shared_ptr<asio::ssl::context> tls_;
  std::vector<FileId> files_;
};

// Checks basic-authentication credentials off the io thread.
class Authenticator {
 public:
  Authenticator();
  ~Authenticator();
  Authenticator(const Authenticator&) = delete;
  Authenticator& operator=(const Authenticator&) = delete;

  enum class Verdict { kAllowed, kDenied };
  // Checks the Authorization header value against `security`'s users and
  // calls `done` with the verdict on `executor` (the session's strand or
  // io_context). A cached success answers at once, before returning.
  void check(std::shared_ptr<const WebSecurity> security, std::string_view authorization,
             asio::any_io_executor executor, std::function<void(Verdict)> done);

  // Successes remembered now (tests).
  std::size_t cached() const;

 private:
  struct Job {
    std::shared_ptr<const WebSecurity> security;
    std::string user, password, key;
    asio::any_io_executor executor;
    std::function<void(Verdict)> done;
  };
  void run();
  static bool verify(const std::string& password, const std::string& hash);

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Job> queue_;
  std::map<std::string, std::chrono::steady_clock::time_point> cache_;  // key -> when added
  std::string dummy_hash(const WebSecurity& security);                  // the checking thread only

  bool stop_ = false;
  std::map<int, std::string> dummies_;  // by cost; the checking thread only
  std::thread thread_;
};

// The user and password of a "Basic <base64>" Authorization value.
std::optional<std::pair<std::string, std::string>> parse_basic_authorization(std::string_view v);

// A token bucket: `interval` per token, `burst` tokens at most.
class RateLimiter {
 public:
  void configure(std::chrono::nanoseconds interval, int burst);
  // True when a request may go on now (takes a token).
  bool allow(std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now());

 private:
  std::chrono::nanoseconds interval_{0};
  double burst_ = 0;
  double tokens_ = 0;
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace nodewatch
