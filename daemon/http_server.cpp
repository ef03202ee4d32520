#include "http_server.hpp"

#include <algorithm>

#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <boost/beast/core.hpp>

#include "config.hpp"

namespace nodewatch {

namespace beast = boost::beast;
using tcp = asio::ip::tcp;

struct HttpServer::SessionBase {
  virtual ~SessionBase() = default;
  virtual void close_if_idle() = 0;
};

namespace {

HttpResponse plain_response(http::status status, unsigned version, std::string body) {
  HttpResponse res{status, version};
  res.set(http::field::content_type, "text/plain; charset=utf-8");
  res.body() = std::move(body);
  res.prepare_payload();
  return res;
}

// One connection. Stream is beast::tcp_stream (a TLS stream over it later).
template <class Stream>
class Session : public HttpServer::SessionBase,
                public std::enable_shared_from_this<Session<Stream>> {
 public:
  Session(Stream stream, const HttpServer::Handler& handler, const HttpServer::Observer& observer,
          const HttpLimits& limits, std::shared_ptr<std::size_t> active,
          std::shared_ptr<std::set<HttpServer::SessionBase*>> sessions, const bool& stopping)
      : stream_(std::move(stream)),
        handler_(handler),
        observer_(observer),
        limits_(limits),
        active_(std::move(active)),
        sessions_(std::move(sessions)),
        stopping_(stopping) {
    ++*active_;
    sessions_->insert(this);
  }
  ~Session() override {
    --*active_;
    sessions_->erase(this);
  }

  void start() { read(); }

  void close_if_idle() override {
    if (!writing_) {
      beast::error_code ec;
      beast::get_lowest_layer(stream_).socket().shutdown(tcp::socket::shutdown_both, ec);
      beast::get_lowest_layer(stream_).socket().close(ec);
    }
  }

 private:
  // Between keep-alive requests: wait up to idle_timeout for the first byte
  // of the next one, then give the whole request read_timeout. (A single
  // deadline of idle_timeout would let a trickling client hold a connection
  // for the idle time instead of the read time.)
  void wait_next() {
    if (buffer_.size() > 0) {  // a pipelined request is already here
      read();
      return;
    }
    beast::get_lowest_layer(stream_).expires_after(limits_.idle_timeout);
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
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(limits_.header_limit));
    parser_->body_limit(limits_.body_limit);
    // One deadline covers the whole request: header and body. A client that
    // trickles bytes cannot extend it.
    beast::get_lowest_layer(stream_).expires_after(limits_.read_timeout);
    http::async_read(stream_, buffer_, *parser_,
                     [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
                       self->on_read(ec);
                     });
  }

  void on_read(beast::error_code ec) {
    if (ec == http::error::header_limit) {
      send(plain_response(
               http::status::request_header_fields_too_large, 11,
               "request header larger than " + std::to_string(limits_.header_limit) + " bytes\n"),
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
      if (protocol_error && !stopping_) {
        send(plain_response(http::status::bad_request, 11, "malformed request\n"), "", false);
        return;
      }
      close();
      return;
    }
    HttpRequest req = parser_->release();
    bool keep = req.keep_alive() && !stopping_;
    HttpResponse res;
    try {
      res = handler_(req);
    } catch (const std::exception& e) {
      spdlog::error("http handler failed for {}: {}", std::string(req.target()), e.what());
      res = plain_response(http::status::internal_server_error, req.version(), "internal error\n");
    }
    res.version(req.version());
    send(std::move(res), std::string(req.target()), keep);
  }

  void send(HttpResponse res, std::string target, bool keep_alive) {
    res.keep_alive(keep_alive);
    if (observer_) observer_(target, res.result_int());
    response_ = std::make_shared<HttpResponse>(std::move(res));
    writing_ = true;
    beast::get_lowest_layer(stream_).expires_after(limits_.write_timeout);
    http::async_write(
        stream_, *response_,
        [self = this->shared_from_this(), keep_alive](beast::error_code ec, std::size_t) {
          self->writing_ = false;
          self->response_.reset();
          if (ec || !keep_alive || self->stopping_) {
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
  const HttpServer::Handler& handler_;
  const HttpServer::Observer& observer_;
  const HttpLimits& limits_;
  std::shared_ptr<std::size_t> active_;
  std::shared_ptr<std::set<HttpServer::SessionBase*>> sessions_;
  const bool& stopping_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::shared_ptr<HttpResponse> response_;
  bool writing_ = false;
};

}  // namespace

HttpServer::HttpServer(asio::io_context& io, Handler handler, Observer observer)
    : io_(io),
      handler_(std::move(handler)),
      observer_(std::move(observer)),
      active_(std::make_shared<std::size_t>(0)),
      sessions_(std::make_shared<std::set<SessionBase*>>()) {}

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
    if (*active_ >= limits_.max_connections) {
      refuse(std::move(socket));
    } else {
      beast::error_code nd;
      socket.set_option(tcp::no_delay(true), nd);
      auto s = std::make_shared<Session<beast::tcp_stream>>(beast::tcp_stream(std::move(socket)),
                                                            handler_, observer_, limits_, active_,
                                                            sessions_, stopped_);
      s->start();
    }
    accept(acc);
  });
}

void HttpServer::refuse(tcp::socket socket) {
  // Never queue: answer at once without reading the request and close. The
  // reply is small enough for the socket buffer, so a non-blocking write
  // cannot stall the io thread.
  static constexpr std::string_view kBusy =
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
      "Content-Length: 22\r\nRetry-After: 1\r\nConnection: close\r\n\r\ntoo many connections\r\n";
  boost::system::error_code ec;
  socket.non_blocking(true, ec);
  socket.write_some(asio::buffer(kBusy.data(), kBusy.size()), ec);
  socket.shutdown(tcp::socket::shutdown_both, ec);
  socket.close(ec);
  if (observer_) observer_("", 503);
}

void HttpServer::stop() {
  stopped_ = true;
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
