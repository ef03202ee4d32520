#pragma once
// The HTTP server (Boost.Beast on the io_context's thread).
//
// It knows nothing of metrics: a Handler turns a parsed request into a
// response. The server enforces the limits that keep a hostile or broken
// client from hurting the daemon: header size (431 past the limit), a read
// deadline per request (a client that trickles bytes is dropped), an idle
// timeout between keep-alive requests, a write timeout (a client that does
// not read its response loses the connection), and the connection slots:
//   - at most max_connections_per_client connections from one address; past
//     it, a new one from there gets an immediate 503 and is closed;
//   - at most max_connections in all; when they are taken, a new connection
//     takes the slot of the one waiting longest (over 250 ms) on its client
//     (a TLS handshake, a request trickling in, an idle keep-alive), else
//     of the one whose response has waited longest (over 1 s) for its
//     client to read it, else of one whose credentials wait in the checking
//     queue (of the address with the most failed checks first; its check
//     is withdrawn), else of one whose scrape waits for the first round,
//     else of one that has waited on its client for less
//     than 250 ms; a connection being served, one whose bcrypt is running
//     and a write that progresses are never taken. Only when every slot is
//     busy so does a new connection get the 503. So misbehaving clients,
//     wrong passwords included, hold slots only until a well-behaved
//     scraper needs one, and one address never holds more than its share.
//     Every connection dropped so is counted by reason.
//
// TLS, basic authentication, the extra headers and the rate limit come from
// the web configuration (web_security.hpp): each connection takes the
// WebSecurity current when it is accepted. A TLS handshake must complete
// within read_timeout (a client that stalls in it is dropped) and one that
// fails is counted. A request is then, in order: rate limited (429, by its
// client address's bucket),
// authenticated (401 with WWW-Authenticate; /-/healthy may be exempted),
// and handed to the Handler. A request with "Expect: 100-continue" and a
// body gets its 100 (Continue) once its header is read. Every response, the 503 of a refused
// connection included, carries X-Content-Type-Options: nosniff.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <boost/beast/http.hpp>
#include "asio.hpp"
#include "logging.hpp"
#include "nodewatch/failure_log.hpp"
#include "web_security.hpp"

namespace nodewatch {

namespace http = boost::beast::http;
using HttpRequest = http::request<http::string_body>;
using HttpResponse = http::response<http::string_body>;

struct HttpLimits {
  std::size_t max_connections = 64;
  std::size_t header_limit = 8 * 1024;
  std::size_t body_limit = 64 * 1024;
  std::chrono::milliseconds read_timeout{10000};
  std::chrono::milliseconds idle_timeout{60000};
  std::chrono::milliseconds write_timeout{5000};
  std::size_t max_connections_per_client = 8;
  bool healthy_without_auth = false;  // /-/healthy and /-/node-health answer without credentials
};

class HttpServer {
 public:
  using Handler = std::function<HttpResponse(const HttpRequest&)>;
  // Told of every response sent: the request target (or "" when none was
  // parsed) and the status code.
  using Observer = std::function<void(std::string_view target, unsigned status)>;
  // Told of every TLS handshake that did not complete: "timeout" or "failed".
  using TlsObserver = std::function<void(std::string_view reason)>;
  // Told of every connection dropped for want of a slot or for a client that
  // did not read: "server_limit", "client_limit", "evicted", "write_timeout".
  using DropObserver = std::function<void(std::string_view reason)>;

  HttpServer(asio::io_context& io, Handler handler, Observer observer = nullptr);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  void set_limits(const HttpLimits& limits) { limits_ = limits; }
  const HttpLimits& limits() const { return limits_; }
  // The web configuration new connections take (start and reload; between
  // them the server follows its files itself: web_security.hpp).
  void set_security(std::shared_ptr<const WebSecurity> security);
  std::shared_ptr<const WebSecurity> security() const { return security_; }
  // Tells whether the first round of collection has finished. Until it
  // has, a GET or HEAD of /metrics waits for it, checked every 10 ms, for
  // at most kFirstRoundWait and 0.5 s less than the scrape timeout
  // Prometheus sends (X-Prometheus-Scrape-Timeout-Seconds); past that it
  // gets 503. So a scrape just after a start gets the first round's
  // results, not a 200 that says every collector is down. None set: no wait.
  static constexpr std::chrono::milliseconds kFirstRoundWait{5000};
  void set_first_round(std::function<bool()> finished) { first_round_ = std::move(finished); }
  void set_tls_observer(TlsObserver o) { tls_observer_ = std::move(o); }
  void set_drop_observer(DropObserver o) { drop_observer_ = std::move(o); }
  Authenticator& authenticator() { return *auth_; }

  // Serves exactly `addresses` ("host:port" forms of ListenAddress). An
  // address already served keeps its socket; new ones are bound. All or
  // nothing: on any failure the previous set stays and the error is returned.
  std::string listen(const std::vector<std::string>& addresses);
  // Takes over already-listening sockets (systemd socket activation).
  std::string adopt(const std::vector<int>& fds);
  std::vector<asio::ip::tcp::endpoint> local_endpoints() const;

  // Stops accepting; open connections finish the response in progress and
  // close; idle ones close now.
  void stop();
  std::size_t active_connections() const { return *active_; }

  struct SessionBase;
  struct Shared;

 private:
  void accept(const std::shared_ptr<asio::ip::tcp::acceptor>& acc);
  // The follower thread's loop: takes up a changed web configuration
  // (checked once a second).
  void follow_web_config();
  void refuse(asio::ip::tcp::socket socket, std::string_view reason);
  // Closes the connection a new one may take the slot of (see above); false
  // when there is none.
  bool evict_one();

  asio::io_context& io_;
  Handler handler_;
  Observer observer_;
  HttpLimits limits_;
  struct Listener {
    std::string address;  // as configured (or "fd N"), for messages
    std::shared_ptr<asio::ip::tcp::acceptor> acceptor;
  };
  std::shared_ptr<asio::ip::tcp::acceptor> bind_address(const std::string& text, std::string* err);
  // True when `l` already listens where `text` asks (same address and port).
  static bool serves(const Listener& l, const std::string& text);

  std::vector<Listener> acceptors_;
  FailureLog accept_failures_;
  std::shared_ptr<std::size_t> active_;
  std::shared_ptr<std::set<SessionBase*>> sessions_;
  std::shared_ptr<std::map<asio::ip::address, std::size_t>> per_client_;
  bool stopped_ = false;
  std::shared_ptr<const WebSecurity> security_;
  std::unique_ptr<Authenticator> auth_;
  RateLimiter rate_;
  TlsObserver tls_observer_;
  DropObserver drop_observer_;
  std::function<bool()> first_round_;
  std::unique_ptr<Shared> shared_;
  FailureLog web_failures_;  // the follower thread's
  std::thread web_thread_;
  std::mutex web_mu_;
  std::condition_variable web_cv_;
  bool web_stop_ = false;                       // under web_mu_
  std::shared_ptr<const WebSecurity> watched_;  // under web_mu_: what the follower compares with
};

}  // namespace nodewatch
