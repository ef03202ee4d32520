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
// cost 10: never on the io thread), one check at a time, chosen by the
// standing of the client's address (Authenticator, below). A credential that
// passed is remembered (by user, hash and a SHA-256 of the password; at
// most 128 of them), so that a scrape does not pay bcrypt each time; one
// that failed is not. An unknown user is checked against a hash of the
// same cost all the same, so that timing does not tell which users exist.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <boost/asio/ssl.hpp>

#include "asio.hpp"
#include "nodewatch/fs_helper.hpp"
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
//
// One thread runs bcrypt, one check at a time, and chooses which queued
// check goes next by the standing of the client's address (an IPv4 address,
// or an IPv6 /64, which one host usually holds whole), not by arrival:
//   1. an address whose credentials have passed before, and that has not
//      failed three times since (decayed, below), goes first;
//   2. then the address with the fewest failures, each failure's weight
//      halving every minute; a new address has none;
//   3. then the check that waited longest.
// So wrong passwords from other addresses never queue ahead of a client
// that has logged in or has not yet failed: it waits for at most the check
// that is running and those of addresses as clean as its own, and the
// bcrypt work an address that keeps failing gets is what is left over.
// A queued check can be withdrawn (the connection waiting on it lost its
// slot): it then costs no bcrypt, and its caller is told kDenied.
class Authenticator {
 public:
  Authenticator();
  ~Authenticator();
  Authenticator(const Authenticator&) = delete;
  Authenticator& operator=(const Authenticator&) = delete;

  enum class Verdict { kAllowed, kDenied };

  // A check that has not been answered yet; its methods are thread-safe.
  class Pending {
   public:
    // True while its bcrypt has not started (so its caller may be dropped
    // without wasting one).
    bool queued() const { return state_.load() == kQueued; }
    // Withdraws it if it has not started: true when no bcrypt will run.
    bool withdraw() {
      int expected = kQueued;
      return state_.compare_exchange_strong(expected, kWithdrawn);
    }

   private:
    friend class Authenticator;
    static constexpr int kQueued = 0, kRunning = 1, kWithdrawn = 2;
    std::atomic<int> state_{kQueued};
  };

  // Checks the Authorization header value of a request from `client`
  // against `security`'s users and calls `done` with the verdict on
  // `executor` (the session's strand or io_context). A cached success, or
  // a value that is not Basic credentials, is answered at once, before
  // returning, and the answer is null; otherwise it is the queued check.
  std::shared_ptr<Pending> check(std::shared_ptr<const WebSecurity> security,
                                 std::string_view authorization, const asio::ip::address& client,
                                 asio::any_io_executor executor, std::function<void(Verdict)> done);

  // The decayed count of failed checks of `client`'s address now (eviction
  // takes the connections of the worst addresses first).
  double failures(const asio::ip::address& client) const;

  // Successes remembered now, and checks that ran bcrypt (tests).
  std::size_t cached() const;
  std::size_t hashed() const;
  // While held, no queued check is taken (tests: a queue laid out whole,
  // then released, is taken in the order the rules above give).
  void hold(bool held);

 private:
  using Clock = std::chrono::steady_clock;
  // What an address has earned: failures, decayed to `at`; a success.
  struct Standing {
    double failures = 0;
    Clock::time_point at{};
    bool succeeded = false;
  };
  struct Job {
    std::shared_ptr<const WebSecurity> security;
    std::string user, password, key, client;
    asio::any_io_executor executor;
    std::function<void(Verdict)> done;
    std::shared_ptr<Pending> pending;
    std::uint64_t seq = 0;
  };
  void run();
  static bool verify(const std::string& password, const std::string& hash);
  // Under mu_: the standing of `client` decayed to `now`.
  Standing& standing(const std::string& client, Clock::time_point now) const;
  // Under mu_: the queued job to run next (withdrawn ones are answered and
  // dropped on the way); queue_.end() when none.
  std::vector<Job>::iterator next_job(Clock::time_point now);

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Job> queue_;
  std::uint64_t seq_ = 0;
  std::size_t hashed_ = 0;
  mutable std::map<std::string, Standing> standings_;
  std::map<std::string, std::chrono::steady_clock::time_point> cache_;  // key -> when added
  std::string dummy_hash(const WebSecurity& security);                  // the checking thread only

  bool stop_ = false;
  bool held_ = false;
  std::map<int, std::string> dummies_;  // by cost; the checking thread only
  std::thread thread_;
};

// What a client address is known by (an Authenticator's standing, a rate
// limit's bucket): the address, or its /64 for IPv6, which one host
// usually holds whole; an IPv4 address seen through a dual-stack socket is
// that IPv4 address.
std::string client_key(const asio::ip::address& a);

// The user and password of a "Basic <base64>" Authorization value.
std::optional<std::pair<std::string, std::string>> parse_basic_authorization(std::string_view v);

// The rate limit: a token bucket per client address (an IPv4 address, or
// an IPv6 /64, as the Authenticator keys its standings), `interval` per
// token, `burst` tokens at most. So clients that spend their tokens, with
// credentials or without, never spend those of another address: a scraper
// keeps its own burst whatever the others send. At most kMaxClients
// addresses are kept; a new one past that forgets the address heard from
// longest ago, which comes back with a full bucket, so a flood of
// addresses costs bounded memory (about 100 bytes an address) and the
// clients still sending keep their buckets. Not thread-safe: the io
// thread's.
class RateLimiter {
 public:
  static constexpr std::size_t kMaxClients = 4096;
  void configure(std::chrono::nanoseconds interval, int burst);
  // True when a request from `client` may go on now (takes a token).
  bool allow(const asio::ip::address& client,
             std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now());
  // The addresses whose buckets are kept now.
  std::size_t clients() const { return buckets_.size(); }

 private:
  struct Bucket {
    std::string key;
    double tokens = 0;
    std::chrono::steady_clock::time_point last{};
  };
  std::chrono::nanoseconds interval_{0};
  double burst_ = 0;
  std::list<Bucket> buckets_;  // the address heard from last first
  std::unordered_map<std::string, std::list<Bucket>::iterator> by_key_;
};

}  // namespace nodewatch
