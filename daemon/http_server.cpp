#include "http_server.hpp"

#include <algorithm>
#include <map>
#include <tuple>

#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <openssl/ssl.h>
#include <boost/beast/core.hpp>
#include <boost/beast/ssl.hpp>

#include "config.hpp"

namespace nodewatch {

namespace beast = boost::beast;
using tcp = asio::ip::tcp;

struct HttpServer::SessionBase {
  // Where a connection is: waiting on its client (handshake, between
  // requests, reading one), waiting for its credentials to be checked,
  // being served, its scrape waiting for the first round, or writing to
  // its client.
  enum class Phase {
    kHandshake,
    kIdle,
    kReading,
    kAuthenticating,
    kServing,
    kFirstRound,
    kWriting
  };
  virtual ~SessionBase() = default;
  virtual void close_if_idle() = 0;
  // Closes it now, whatever it is doing (a new connection needs its slot).
  virtual void evict() = 0;
  void enter(Phase p) {
    phase = p;
    since = std::chrono::steady_clock::now();
  }
  Phase phase = Phase::kHandshake;
  std::chrono::steady_clock::time_point since = std::chrono::steady_clock::now();
  asio::ip::address peer;
  // In kAuthenticating: the check, while it is not answered.
  std::shared_ptr<Authenticator::Pending> pending;
};

// What every session of the server reads: the server's own members, by
// reference (sessions never outlive the server: stop() closes them and the
// io_context runs them out before it goes).
struct HttpServer::Shared {
  const Handler& handler;
  const Observer& observer;
  const TlsObserver& tls_observer;
  const HttpLimits& limits;
  std::shared_ptr<std::size_t> active;
  std::shared_ptr<std::set<SessionBase*>> sessions;
  std::shared_ptr<std::map<asio::ip::address, std::size_t>> per_client;
  const DropObserver& drop_observer;
  const bool& stopping;
  Authenticator* auth;
  RateLimiter& rate;
  const std::function<bool()>& first_round;
};

namespace {

HttpResponse plain_response(http::status status, unsigned version, std::string body) {
  HttpResponse res{status, version};
  res.set(http::field::content_type, "text/plain; charset=utf-8");
  res.body() = std::move(body);
  res.prepare_payload();
  return res;
}

// False for a request with a Transfer-Encoding whose last coding is not
// "chunked" (RFC 9112 §6.3).
bool framed_by_chunks_if_encoded(const HttpRequest& req) {
  auto [first, end] = req.equal_range(http::field::transfer_encoding);
  if (first == end) return true;
  std::string_view last;  // the last coding of the last field
  for (auto f = first; f != end; ++f)
    for (auto coding : http::token_list(f->value())) last = coding;
  return beast::iequals(last, "chunked");
}

// One connection: Stream is beast::tcp_stream, or an ssl_stream over one.
template <class Stream>
class Session : public HttpServer::SessionBase,
                public std::enable_shared_from_this<Session<Stream>> {
 public:
  static constexpr bool kTls = !std::is_same_v<Stream, beast::tcp_stream>;

  Session(Stream stream, HttpServer::Shared& shared, std::shared_ptr<const WebSecurity> security,
          asio::ip::address from)
      : stream_(std::move(stream)),
        shared_(shared),
        security_(std::move(security)),
        active_(shared.active),
        sessions_(shared.sessions),
        per_client_(shared.per_client) {
    peer = from;
    ++*active_;
    sessions_->insert(this);
    ++(*per_client_)[peer];
  }
  // May run after the server is gone (the io_context destroying a pending
  // handler): touches only what it holds itself.
  ~Session() override {
    --*active_;
    sessions_->erase(this);
    auto it = per_client_->find(peer);
    if (it != per_client_->end() && --it->second == 0) per_client_->erase(it);
  }

  void start() {
    if constexpr (kTls) {
      // The handshake is bounded like a request: a client that stalls in
      // it is dropped at read_timeout.
      beast::get_lowest_layer(stream_).expires_after(shared_.limits.read_timeout);
      stream_.async_handshake(
          asio::ssl::stream_base::server,
          [self = this->shared_from_this()](beast::error_code ec) { self->on_handshake(ec); });
    } else {
      read();
    }
  }

  void close_if_idle() override {
    if (!writing_ && !checking_) evict();
  }

  void evict() override {
    // A check still queued for it costs no bcrypt now.
    if (pending) pending->withdraw();
    dropped_ = true;
    beast::error_code ec;
    beast::get_lowest_layer(stream_).socket().shutdown(tcp::socket::shutdown_both, ec);
    beast::get_lowest_layer(stream_).socket().close(ec);
  }

 private:
  void on_handshake(beast::error_code ec) {
    if constexpr (kTls) {
      // Not failures: a handshake closed for a new connection's slot (it is
      // counted as evicted), and one the server finished whose last write
      // (a TLS 1.3 server's session tickets) met the reset of a client that
      // closed right after its Finished.
      SSL* ssl = stream_.native_handle();
      if (ec && (dropped_ || SSL_is_init_finished(ssl) ||
                 SSL_get_state(ssl) == TLS_ST_SW_SESSION_TICKET)) {
        spdlog::debug("TLS connection closed {}: {}",
                      dropped_ ? "for another's slot" : "after its handshake", ec.message());
        close();
        return;
      }
      if (!ec && security_->client_cert_required_by_sans()) {
        // Allowed SANs with an optional client certificate: none sent is
        // not one of them.
        X509* peer = SSL_get1_peer_certificate(ssl);
        if (peer == nullptr) ec = asio::error::access_denied;
        X509_free(peer);
      }
      if (ec) {
        const bool timeout = ec == beast::error::timeout;
        if (shared_.tls_observer) shared_.tls_observer(timeout ? "timeout" : "failed");
        spdlog::debug("TLS handshake {}: {}", timeout ? "timed out" : "failed", ec.message());
        close();
        return;
      }
    }
    read();
  }

  // Between keep-alive requests: wait up to idle_timeout for the first byte
  // of the next one, then give the whole request read_timeout. (A single
  // deadline of idle_timeout would let a trickling client hold a connection
  // for the idle time instead of the read time.)
  void wait_next() {
    if (buffer_.size() > 0) {  // a pipelined request is already here
      read();
      return;
    }
    enter(Phase::kIdle);
    beast::get_lowest_layer(stream_).expires_after(shared_.limits.idle_timeout);
    stream_.async_read_some(buffer_.prepare(4096),
                            [self = this->shared_from_this()](beast::error_code ec, std::size_t n) {
                              if (ec) {
                                self->close();
                                return;
                              }
                              self->buffer_.commit(n);
                              self->read();
                            });
  }

  void read() {
    enter(Phase::kReading);
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(shared_.limits.header_limit));
    parser_->body_limit(shared_.limits.body_limit);
    // One deadline covers the whole request: header and body. A client that
    // trickles bytes cannot extend it.
    beast::get_lowest_layer(stream_).expires_after(shared_.limits.read_timeout);
    http::async_read_header(stream_, buffer_, *parser_,
                            [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
                              self->on_header(ec);
                            });
  }

  // RFC 9110 §10.1.1: a client that sent "Expect: 100-continue" waits for
  // a 100 (Continue) before it sends the body (curl for a second, others
  // until their timeout); an HTTP/1.0 request's expectation is ignored. The
  // interim response is written within the request's deadline.
  void on_header(beast::error_code ec) {
    if (ec || parser_->is_done()) {
      on_read(ec);
      return;
    }
    auto read_body = [self = this->shared_from_this()](beast::error_code e, std::size_t) {
      if (e) {
        self->on_read(e);
        return;
      }
      http::async_read(self->stream_, self->buffer_, *self->parser_,
                       [self](beast::error_code e2, std::size_t) { self->on_read(e2); });
    };
    const HttpRequest& head = parser_->get();
    if (head.version() >= 11 && beast::iequals(head[http::field::expect], "100-continue")) {
      static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      asio::async_write(stream_, asio::buffer(kContinue.data(), kContinue.size()),
                        std::move(read_body));
      return;
    }
    read_body({}, 0);
  }

  void on_read(beast::error_code ec) {
    if (ec == http::error::header_limit) {
      send(plain_response(http::status::request_header_fields_too_large, 11,
                          "request header larger than " +
                              std::to_string(shared_.limits.header_limit) + " bytes\n"),
           "", false);
      return;
    }
    if (ec == http::error::body_limit) {
      send(plain_response(http::status::payload_too_large, 11, "request body too large\n"), "",
           false);
      return;
    }
    if (ec) {
      // A request that is not HTTP gets a 400 while the socket is still
      // writable; end of stream, a timeout or a reset just close.
      bool protocol_error =
          ec.category() == http::make_error_code(http::error::bad_target).category() &&
          ec != http::error::end_of_stream && ec != http::error::partial_message;
      if (protocol_error && !shared_.stopping) {
        send(plain_response(http::status::bad_request, 11, "malformed request\n"), "", false);
        return;
      }
      close();
      return;
    }
    request_ = parser_->release();
    enter(Phase::kServing);
    if (!framed_by_chunks_if_encoded(request_)) {
      // RFC 9112 §6.3: its length cannot be known, so neither can where
      // the next request starts; what follows is not read.
      send(plain_response(http::status::bad_request, request_.version(),
                          "Transfer-Encoding must end in chunked\n"),
           std::string(request_.target()), false);
      return;
    }
    const bool keep = request_.keep_alive() && !shared_.stopping;
    const std::string target(request_.target());
    if (!shared_.rate.allow(peer)) {
      HttpResponse res = plain_response(http::status::too_many_requests, request_.version(),
                                        "Too Many Requests\n");
      res.set(http::field::retry_after, "1");
      send(std::move(res), target, keep);
      return;
    }
    const std::string_view path = std::string_view(target).substr(0, target.find('?'));
    const bool exempt =
        shared_.limits.healthy_without_auth && (path == "/-/healthy" || path == "/-/node-health");
    if (!security_->authenticates() || exempt) {
      respond(keep);
      return;
    }
    // Checked off the io thread (bcrypt). While the check is queued the
    // connection may lose its slot to a new one (HttpServer::evict_one).
    checking_ = true;
    enter(Phase::kAuthenticating);
    pending = shared_.auth->check(
        security_, request_[http::field::authorization], peer,
        beast::get_lowest_layer(stream_).get_executor(),
        [self = this->shared_from_this(), keep](Authenticator::Verdict v) {
          self->checking_ = false;
          self->pending.reset();
          if (self->dropped_) return;
          self->enter(Phase::kServing);
          if (v == Authenticator::Verdict::kAllowed) {
            self->respond(keep);
            return;
          }
          HttpResponse res = plain_response(http::status::unauthorized, self->request_.version(),
                                            "Unauthorized\n");
          res.set(http::field::www_authenticate, "Basic realm=\"nodewatch\", charset=\"UTF-8\"");
          self->send(std::move(res), std::string(self->request_.target()), keep);
        });
  }

  // How long a scrape waits for the first round (HttpServer::set_first_round).
  std::chrono::milliseconds first_round_wait() const {
    auto wait = HttpServer::kFirstRoundWait;
    const std::string timeout(request_["X-Prometheus-Scrape-Timeout-Seconds"]);
    char* end = nullptr;
    const double seconds = std::strtod(timeout.c_str(), &end);
    if (!timeout.empty() && end != nullptr && *end == '\0' && seconds > 0 && seconds < 1e6)
      wait =
          std::min(wait, std::chrono::milliseconds(static_cast<long long>(seconds * 1000 - 500)));
    return std::max(wait, std::chrono::milliseconds(0));
  }

  void respond(bool keep) {
    const std::string_view target = request_.target();
    const bool scrape =
        target.substr(0, target.find('?')) == "/metrics" &&
        (request_.method() == http::verb::get || request_.method() == http::verb::head);
    if (scrape && shared_.first_round && !shared_.first_round()) {
      if (!first_round_deadline_) {
        first_round_deadline_ = std::chrono::steady_clock::now() + first_round_wait();
        // Waiting on nothing it holds: a new connection may take its slot.
        enter(Phase::kFirstRound);
      }
      if (std::chrono::steady_clock::now() < *first_round_deadline_ && !shared_.stopping) {
        timer_.emplace(beast::get_lowest_layer(stream_).get_executor(),
                       std::chrono::milliseconds(10));
        timer_->async_wait([self = this->shared_from_this(), keep](beast::error_code) {
          if (!self->dropped_) self->respond(keep);
        });
        return;
      }
      first_round_deadline_.reset();
      HttpResponse res = plain_response(http::status::service_unavailable, request_.version(),
                                        "not ready: first collection round in progress\n");
      res.set(http::field::retry_after, "1");
      send(std::move(res), std::string(target), keep);
      return;
    }
    first_round_deadline_.reset();
    HttpResponse res;
    try {
      res = shared_.handler(request_);
    } catch (const std::exception& e) {
      spdlog::error("http handler failed for {}: {}", std::string(request_.target()), e.what());
      res = plain_response(http::status::internal_server_error, request_.version(),
                           "internal error\n");
    }
    res.version(request_.version());
    send(std::move(res), std::string(request_.target()), keep);
  }

  void send(HttpResponse res, std::string target, bool keep_alive) {
    if (shared_.stopping) keep_alive = false;
    res.keep_alive(keep_alive);
    // Every body is text the server chose its type for (some of it echoes
    // what a client sent): a browser must not guess another.
    res.set("X-Content-Type-Options", "nosniff");
    for (const auto& [name, value] : security_->config().headers) res.set(name, value);
    if (shared_.observer) shared_.observer(target, res.result_int());
    response_ = std::make_shared<HttpResponse>(std::move(res));
    writing_ = true;
    enter(Phase::kWriting);
    beast::get_lowest_layer(stream_).expires_after(shared_.limits.write_timeout);
    http::async_write(
        stream_, *response_,
        [self = this->shared_from_this(), keep_alive](beast::error_code ec, std::size_t) {
          self->writing_ = false;
          self->response_.reset();
          // A client that does not read its response within write_timeout
          // loses the connection (and its slot).
          if (ec == beast::error::timeout && self->shared_.drop_observer)
            self->shared_.drop_observer("write_timeout");
          if (ec || !keep_alive || self->shared_.stopping) {
            self->close();
            return;
          }
          self->wait_next();
        });
  }

  void close() {
    beast::error_code ec;
    beast::get_lowest_layer(stream_).socket().shutdown(tcp::socket::shutdown_send, ec);
    beast::get_lowest_layer(stream_).close();
  }

  Stream stream_;
  HttpServer::Shared& shared_;
  std::shared_ptr<const WebSecurity> security_;
  std::shared_ptr<std::size_t> active_;
  std::shared_ptr<std::set<HttpServer::SessionBase*>> sessions_;
  std::shared_ptr<std::map<asio::ip::address, std::size_t>> per_client_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  HttpRequest request_;
  std::shared_ptr<HttpResponse> response_;
  bool writing_ = false;
  bool checking_ = false;
  bool dropped_ = false;  // evicted: nothing more is sent
  // A scrape waiting for the first round: until when, and its timer.
  std::optional<std::chrono::steady_clock::time_point> first_round_deadline_;
  std::optional<asio::steady_timer> timer_;
};

}  // namespace

HttpServer::HttpServer(asio::io_context& io, Handler handler, Observer observer)
    : io_(io),
      handler_(std::move(handler)),
      observer_(std::move(observer)),
      active_(std::make_shared<std::size_t>(0)),
      sessions_(std::make_shared<std::set<SessionBase*>>()),
      per_client_(std::make_shared<std::map<asio::ip::address, std::size_t>>()),
      security_(WebSecurity::build("").security),
      auth_(std::make_unique<Authenticator>()),
      shared_(std::make_unique<Shared>(Shared{handler_, observer_, tls_observer_, limits_, active_,
                                              sessions_, per_client_, drop_observer_, stopped_,
                                              auth_.get(), rate_, first_round_})) {}

void HttpServer::set_security(std::shared_ptr<const WebSecurity> security) {
  security_ = std::move(security);
  rate_.configure(security_->config().rate_interval, security_->config().rate_burst);
  std::lock_guard lock(web_mu_);
  watched_ = security_;
  if (!web_thread_.joinable() && !web_stop_ && !security_->path().empty())
    web_thread_ = std::thread([this] { follow_web_config(); });
}

// On the follower's thread: the stat()s of the web configuration's files,
// and its rebuild when one changed, never run on the io thread (a file on a
// hung mount, a large CA bundle). What it builds is handed to the io thread,
// which takes it only if no reload replaced the configuration meanwhile.
void HttpServer::follow_web_config() {
  helper::Fs fs("web-config");
  std::unique_lock lock(web_mu_);
  while (!web_cv_.wait_for(lock, std::chrono::seconds(1), [this] { return web_stop_; })) {
    std::shared_ptr<const WebSecurity> basis = watched_;
    if (!basis || basis->path().empty()) continue;
    lock.unlock();
    std::shared_ptr<const WebSecurity> next;
    bool unanswered = false;
    const bool changed = basis->changed_on_disk(&fs, &unanswered);
    if (unanswered) {
      web_failures_.failed("web configuration " + basis->path(),
                           "its files do not answer a stat() within 1 s (a hung mount?); not "
                           "followed until they do");
    } else if (changed) {
      WebSecurity::Built b = WebSecurity::build(basis->path());
      if (!b.security) {
        std::string all;
        for (const std::string& e : b.errors) all += (all.empty() ? "" : "; ") + e;
        web_failures_.failed("web configuration " + basis->path(),
                             "changed on disk and refused, the running one kept: " + all);
      } else {
        web_failures_.succeeded("web configuration " + basis->path());
        next = std::move(b.security);
      }
    }
    lock.lock();
    if (!next || web_stop_ || watched_ != basis) continue;
    // Not compared again until the io thread has taken it.
    watched_ = next;
    asio::post(io_, [this, basis, next] {
      if (stopped_ || security_ != basis) return;
      spdlog::info("web configuration {} changed on disk and taken: {}", next->path(),
                   next->summary());
      set_security(next);
    });
  }
}

HttpServer::~HttpServer() {
  stop();
}

std::string HttpServer::listen(const std::vector<std::string>& addresses) {
  std::vector<Listener> next;
  std::vector<std::shared_ptr<tcp::acceptor>> fresh;
  auto undo = [&] {
    boost::system::error_code ignored;
    for (auto& acc : fresh) acc->close(ignored);
  };
  for (const std::string& text : addresses) {
    // An address that is already served keeps its socket: binding it again
    // would fail while the old one listens (a reload that adds an address).
    // (Port 0 asks for a new ephemeral port each time.)
    auto kept = std::find_if(acceptors_.begin(), acceptors_.end(),
                             [&](const Listener& l) { return serves(l, text); });
    if (kept != acceptors_.end()) {
      next.push_back(*kept);
      continue;
    }
    std::string err;
    auto acc = bind_address(text, &err);
    if (!acc) {
      undo();
      return err;
    }
    fresh.push_back(acc);
    next.push_back(Listener{text, std::move(acc)});
  }
  for (auto& l : acceptors_) {
    bool still = std::any_of(next.begin(), next.end(),
                             [&](const Listener& n) { return n.acceptor == l.acceptor; });
    boost::system::error_code ec;
    if (!still) l.acceptor->close(ec);
  }
  acceptors_ = std::move(next);
  stopped_ = false;
  for (auto& acc : fresh) accept(acc);
  return {};
}

bool HttpServer::serves(const Listener& l, const std::string& text) {
  auto parsed = parse_listen_address(text);
  if (!parsed || parsed->port == 0 || !l.acceptor->is_open()) return false;
  boost::system::error_code ec;
  tcp::endpoint ep = l.acceptor->local_endpoint(ec);
  if (ec || ep.port() != parsed->port) return false;
  if (parsed->host.empty()) return ep.address().is_unspecified();
  auto ip = asio::ip::make_address(parsed->host, ec);
  return !ec && ip == ep.address();
}

std::shared_ptr<tcp::acceptor> HttpServer::bind_address(const std::string& text, std::string* err) {
  auto addr = parse_listen_address(text);
  if (!addr) {
    *err = "\"" + text + "\" is not a listen address";
    return nullptr;
  }
  auto acc = std::make_shared<tcp::acceptor>(io_);
  boost::system::error_code ec;
  tcp::endpoint ep;
  bool dual_stack = false;
  if (addr->host.empty()) {
    // Every interface: IPv6 dual-stack where the host has IPv6, else IPv4.
    ep = tcp::endpoint(tcp::v6(), addr->port);
    acc->open(ep.protocol(), ec);
    if (ec) {
      ec.clear();
      ep = tcp::endpoint(tcp::v4(), addr->port);
      acc->open(ep.protocol(), ec);
    } else {
      dual_stack = true;
    }
  } else {
    auto ip = asio::ip::make_address(addr->host, ec);
    if (ec) {
      *err = "\"" + text + "\": " + ec.message();
      return nullptr;
    }
    ep = tcp::endpoint(ip, addr->port);
    acc->open(ep.protocol(), ec);
  }
  if (!ec && dual_stack) acc->set_option(asio::ip::v6_only(false), ec);
  if (!ec) acc->set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acc->bind(ep, ec);
  if (ec && dual_stack) {
    // IPv6 present but disabled (net.ipv6.conf.all.disable_ipv6): IPv4 only.
    ec.clear();
    acc = std::make_shared<tcp::acceptor>(io_);
    ep = tcp::endpoint(tcp::v4(), addr->port);
    acc->open(ep.protocol(), ec);
    if (!ec) acc->set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acc->bind(ep, ec);
  }
  if (!ec) acc->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    *err = "cannot listen on \"" + text + "\": " + ec.message();
    return nullptr;
  }
  return acc;
}

std::string HttpServer::adopt(const std::vector<int>& fds) {
  std::vector<Listener> adopted;
  for (int fd : fds) {
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0)
      return "socket-activated fd " + std::to_string(fd) + " is not a socket";
    int listening = 0;
    socklen_t llen = sizeof(listening);
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &llen) != 0 || listening == 0)
      return "socket-activated fd " + std::to_string(fd) +
             " is not a listening socket (Accept=yes is not supported)";
    if (ss.ss_family != AF_INET && ss.ss_family != AF_INET6)
      return "socket-activated fd " + std::to_string(fd) + " is not a TCP socket";
    int type = 0;
    socklen_t tlen = sizeof(type);
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tlen) != 0 || type != SOCK_STREAM)
      return "socket-activated fd " + std::to_string(fd) + " is not a stream socket";
    auto proto = ss.ss_family == AF_INET6 ? tcp::v6() : tcp::v4();
    auto acc = std::make_shared<tcp::acceptor>(io_);
    boost::system::error_code ec;
    acc->assign(proto, fd, ec);
    if (ec) return "cannot use socket-activated fd " + std::to_string(fd) + ": " + ec.message();
    adopted.push_back(Listener{"fd " + std::to_string(fd), std::move(acc)});
  }
  acceptors_ = std::move(adopted);
  stopped_ = false;
  for (auto& l : acceptors_) accept(l.acceptor);
  return {};
}

std::vector<tcp::endpoint> HttpServer::local_endpoints() const {
  std::vector<tcp::endpoint> out;
  for (auto& l : acceptors_) {
    boost::system::error_code ec;
    auto ep = l.acceptor->local_endpoint(ec);
    if (!ec) out.push_back(ep);
  }
  return out;
}

void HttpServer::accept(const std::shared_ptr<tcp::acceptor>& acc) {
  acc->async_accept([this, acc](boost::system::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acc->is_open() || stopped_) return;
    if (ec) {
      // EMFILE and friends: keep accepting after a short pause rather than spin.
      accept_failures_.failed("http accept", ec.message());
      auto timer = std::make_shared<asio::steady_timer>(io_, std::chrono::milliseconds(100));
      timer->async_wait([this, acc, timer](boost::system::error_code) {
        if (!stopped_ && acc->is_open()) accept(acc);
      });
      return;
    }
    accept_failures_.succeeded("http accept");
    boost::system::error_code pe;
    const asio::ip::address from = socket.remote_endpoint(pe).address();
    auto mine = per_client_->find(from);
    if (mine != per_client_->end() && mine->second >= limits_.max_connections_per_client) {
      refuse(std::move(socket), "client_limit");
    } else if (*active_ >= limits_.max_connections && !evict_one()) {
      refuse(std::move(socket), "server_limit");
    } else {
      beast::error_code nd;
      socket.set_option(tcp::no_delay(true), nd);
      if (security_->tls()) {
        using TlsStream = beast::ssl_stream<beast::tcp_stream>;
        auto s = std::make_shared<Session<TlsStream>>(
            TlsStream(beast::tcp_stream(std::move(socket)), security_->tls_context()), *shared_,
            security_, from);
        s->start();
      } else {
        auto s = std::make_shared<Session<beast::tcp_stream>>(beast::tcp_stream(std::move(socket)),
                                                              *shared_, security_, from);
        s->start();
      }
    }
    accept(acc);
  });
}

bool HttpServer::evict_one() {
  // In this order: the connection waiting longest on its client (a TLS
  // handshake, a request trickling in, an idle keep-alive); else the one
  // whose response has waited longest, over a second, for its client to
  // read it; else one whose credentials wait in the checking queue, of the
  // address with the most failed checks (the longest waiting of those);
  // else one whose scrape waits for the first round (the longest waiting
  // of those); else one that has waited on its client for less than kYoung
  // (it may be a scraper whose request is on its way: under a flood of new
  // connections that take slots from queued checks, it would otherwise be
  // the first taken). One being served, one whose check is running, and a
  // write that is progressing are never taken.
  using Phase = SessionBase::Phase;
  constexpr auto kYoung = std::chrono::milliseconds(250);
  const auto now = std::chrono::steady_clock::now();
  SessionBase* victim = nullptr;
  std::tuple<int, double, std::chrono::steady_clock::time_point> victim_rank;
  for (SessionBase* s : *sessions_) {
    int kind;
    double failures = 0;
    if (s->phase == Phase::kHandshake || s->phase == Phase::kIdle || s->phase == Phase::kReading) {
      kind = now - s->since >= kYoung ? 0 : 4;
    } else if (s->phase == Phase::kWriting && now - s->since >= std::chrono::seconds(1)) {
      kind = 1;
    } else if (s->phase == Phase::kAuthenticating && s->pending && s->pending->queued()) {
      kind = 2;
      failures = -auth_->failures(s->peer);
    } else if (s->phase == Phase::kFirstRound) {
      kind = 3;
    } else {
      continue;
    }
    auto rank = std::make_tuple(kind, failures, s->since);
    if (victim == nullptr || rank < victim_rank) {
      victim = s;
      victim_rank = rank;
    }
  }
  if (victim == nullptr) return false;
  // Counted as a slot now: the session itself goes when its handlers run.
  victim->phase = Phase::kServing;
  victim->evict();
  if (drop_observer_) drop_observer_("evicted");
  return true;
}

void HttpServer::refuse(tcp::socket socket, std::string_view reason) {
  if (drop_observer_) drop_observer_(reason);
  // Never queue: answer at once without reading the request and close. The
  // reply is small enough for the socket buffer, so a non-blocking write
  // cannot stall the io thread.
  static constexpr std::string_view kBusy =
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
      "Content-Length: 22\r\nRetry-After: 1\r\nX-Content-Type-Options: nosniff\r\n"
      "Connection: close\r\n\r\ntoo many connections\r\n";
  boost::system::error_code ec;
  socket.non_blocking(true, ec);
  socket.write_some(asio::buffer(kBusy.data(), kBusy.size()), ec);
  socket.shutdown(tcp::socket::shutdown_both, ec);
  socket.close(ec);
  if (observer_) observer_("", 503);
}

void HttpServer::stop() {
  stopped_ = true;
  {
    std::lock_guard lock(web_mu_);
    web_stop_ = true;
  }
  web_cv_.notify_all();
  if (web_thread_.joinable()) web_thread_.join();
  for (auto& l : acceptors_) {
    boost::system::error_code ec;
    l.acceptor->close(ec);
  }
  acceptors_.clear();
  // Copy: closing a session can destroy it, which edits the set.
  std::vector<SessionBase*> live(sessions_->begin(), sessions_->end());
  for (SessionBase* s : live) s->close_if_idle();
}

}  // namespace nodewatch
