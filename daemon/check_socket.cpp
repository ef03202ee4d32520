#include "check_socket.hpp"

#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "router.hpp"

namespace nodewatch {
namespace {

namespace beast = boost::beast;
using local = asio::local::stream_protocol;

std::string errno_text(int e) {
  return std::strerror(e);
}

// The credentials of the process at the other end of `fd`: for a client,
// the listener's when it listened; for a server, the client's when it
// connected. Nothing when the kernel does not say.
std::optional<ucred> peer_of(int fd) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || len != sizeof cred)
    return std::nullopt;
  return cred;
}

// Why the entry at `p` (stat `st`) could be changed by someone other than
// root and `uid`, or "": it is owned by one of them, and a directory is
// writable by no one else unless it is sticky (its other writers cannot
// replace the entries they do not own, which are checked in turn).
std::string unsafe_entry(const std::string& p, const struct stat& st, uid_t uid) {
  if (st.st_uid != 0 && st.st_uid != uid)
    return p + " is owned by uid " + std::to_string(st.st_uid) + ", neither root nor uid " +
           std::to_string(uid);
  if (S_ISDIR(st.st_mode) && (st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0)
    return p + " may be written by others than its owner";
  return "";
}

// unsafe_entry() of `dir` and of every directory above it, and of every
// symbolic link on the way and every directory it leads through.
std::string unsafe_chain(const std::filesystem::path& dir, uid_t uid) {
  for (std::filesystem::path d = dir;; d = d.parent_path()) {
    struct stat st {};
    if (::lstat(d.c_str(), &st) != 0) return d.string() + ": " + errno_text(errno);
    if (std::string why = unsafe_entry(d.string(), st, uid); !why.empty()) return why;
    if (S_ISLNK(st.st_mode)) {
      char* real = ::realpath(d.c_str(), nullptr);
      if (real == nullptr) return d.string() + ": " + errno_text(errno);
      std::string target = real;
      std::free(real);
      if (std::string why = unsafe_chain(target, uid); !why.empty()) return why;
    }
    if (d == d.root_path() || !d.has_relative_path()) return "";
  }
}

HttpResponse plain(http::status status, std::string body) {
  HttpResponse res{status, 11};
  res.set(http::field::content_type, "text/plain; charset=utf-8");
  res.body() = std::move(body);
  return res;
}

// One connection to the check socket: one request, answered, closed, all
// within kDeadline.
struct Session : std::enable_shared_from_this<Session> {
  local::socket sock;
  asio::steady_timer deadline;
  beast::flat_buffer buf;
  http::request_parser<http::string_body> parser;
  HttpResponse res;
  CheckSocket::Handler handler;
  std::shared_ptr<std::size_t> count;
  std::optional<ucred> peer;

  Session(local::socket s, CheckSocket::Handler h, std::shared_ptr<std::size_t> c)
      : sock(std::move(s)),
        deadline(sock.get_executor()),
        buf(8 * 1024),
        handler(std::move(h)),
        count(std::move(c)) {
    ++*count;
    peer = peer_of(sock.native_handle());
    parser.header_limit(4 * 1024);
    parser.body_limit(0);
  }
  ~Session() { --*count; }

  void start() {
    auto self = shared_from_this();
    deadline.expires_after(CheckSocket::kDeadline);
    deadline.async_wait([self](const boost::system::error_code& ec) {
      boost::system::error_code ignored;
      if (!ec) self->sock.close(ignored);
    });
    http::async_read(sock, buf, parser, [self](beast::error_code ec, std::size_t) {
      if (ec) {
        self->end();
        return;
      }
      self->res = self->answer(self->parser.get());
      http::async_write(self->sock, self->res,
                        [self](beast::error_code, std::size_t) { self->end(); });
    });
  }

  void end() {
    boost::system::error_code ignored;
    sock.shutdown(local::socket::shutdown_both, ignored);
    sock.close(ignored);
    deadline.cancel();
  }

  HttpResponse answer(const HttpRequest& req) {
    HttpResponse out;
    const std::string_view target = req.target();
    const std::string_view path = target.substr(0, target.find('?'));
    const bool privileged = peer && (peer->uid == 0 || peer->uid == ::geteuid());
    if (req.method() != http::verb::get && req.method() != http::verb::head) {
      out = plain(http::status::method_not_allowed, "GET or HEAD only\n");
      out.set(http::field::allow, "GET, HEAD");
    } else if (path == "/-/node-health" || (path == "/metrics" && privileged)) {
      try {
        out = handler(req);
      } catch (const std::exception& e) {
        // As the HTTP server does: a failed answer, never the io thread.
        spdlog::error("check socket: answering {}: {}", std::string(target), e.what());
        out = plain(http::status::internal_server_error, "internal error\n");
      }
    } else if (path == "/metrics") {
      out = plain(http::status::forbidden,
                  "/metrics is served on this socket to root and the daemon's user only\n");
    } else {
      out = plain(http::status::not_found, "this socket serves /-/node-health and /metrics\n");
    }
    out.set("X-Content-Type-Options", "nosniff");
    out.keep_alive(false);
    out.prepare_payload();
    if (req.method() == http::verb::head) out.body().clear();
    return out;
  }
};

// Runs one GET on a connected socket, filling `out`.
struct Exchange : std::enable_shared_from_this<Exchange> {
  local::socket& stream;
  FetchResult& out;
  http::request<http::empty_body> req;
  beast::flat_buffer buf;
  http::response_parser<http::string_body> parser;

  Exchange(local::socket& s, FetchResult& o, const std::string& target)
      : stream(s), out(o), req(http::verb::get, target, 11) {
    req.set(http::field::host, "localhost");
    req.set(http::field::user_agent, "nodewatchd --check");
    req.set(http::field::connection, "close");
    parser.body_limit(16 * 1024 * 1024);
  }
  void start() {
    auto self = shared_from_this();
    http::async_write(stream, req, [self](beast::error_code ec, std::size_t) {
      if (ec) {
        self->out.error = "sending the request: " + ec.message();
        return;
      }
      http::async_read(self->stream, self->buf, self->parser,
                       [self](beast::error_code ec2, std::size_t) {
                         if (ec2) {
                           self->out.error = "reading the response: " + ec2.message();
                           return;
                         }
                         auto& res = self->parser.get();
                         self->out.status = res.result_int();
                         self->out.body = res.body();
                         self->out.node_status = std::string(res[kNodeStatusHeader]);
                       });
    });
  }
};

}  // namespace

CheckSocket::CheckSocket(asio::io_context& io, Handler handler)
    : io_(io),
      handler_(std::move(handler)),
      retry_(io),
      sessions_(std::make_shared<std::size_t>(0)) {}

CheckSocket::~CheckSocket() {
  close();
}

std::string CheckSocket::open(const std::string& path, std::string* warning) {
  if (warning) warning->clear();
  if (acceptor_ && path == path_) return "";
  close();
  if (path.empty()) return "";
  if (path.size() >= sizeof(sockaddr_un::sun_path))
    return path + " is longer than a socket path may be (" +
           std::to_string(sizeof(sockaddr_un::sun_path) - 1) + " bytes)";
  const std::string dir = std::filesystem::path(path).parent_path().string();
  if (::mkdir(dir.c_str(), 0755) == 0) {
    // Past the umask (the unit's is 0077): every user may reach the socket.
    ::chmod(dir.c_str(), 0755);
  } else if (errno != EEXIST) {
    return "creating " + dir + ": " + errno_text(errno);
  }
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) return path + " exists and is not a socket; it is left as it is";
    // A socket an earlier instance left (killed) refuses connections; one
    // that accepts them is served by something else, which keeps it.
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return "a socket to probe " + path + ": " + errno_text(errno);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.c_str(), path.size());
    const int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
    const int e = errno;
    ::close(fd);
    if (rc == 0 || e == EAGAIN) return "another process serves " + path;
    if (e != ECONNREFUSED && e != ENOENT) return "probing " + path + ": " + errno_text(e);
    if (::unlink(path.c_str()) != 0 && errno != ENOENT)
      return "removing the socket an earlier instance left at " + path + ": " + errno_text(errno);
  } else if (errno != ENOENT) {
    return path + ": " + errno_text(errno);
  }
  auto acc = std::make_shared<local::acceptor>(io_);
  boost::system::error_code ec;
  acc->open(local(), ec);
  if (!ec) acc->bind(local::endpoint(path), ec);
  if (ec) return "binding " + path + ": " + ec.message();
  acc->listen(16, ec);
  if (ec) {
    ::unlink(path.c_str());
    return "listening on " + path + ": " + ec.message();
  }
  // Every local user may connect (what each may ask: check_socket.hpp).
  ::chmod(path.c_str(), 0666);
  if (::lstat(path.c_str(), &st) == 0) {
    dev_ = st.st_dev;
    ino_ = st.st_ino;
  }
  acceptor_ = std::move(acc);
  path_ = path;
  if (warning) *warning = untrusted_socket(path, ::geteuid());
  accept();
  return "";
}

void CheckSocket::accept() {
  auto acc = acceptor_;
  acc->async_accept([this, acc](const boost::system::error_code& ec, local::socket sock) {
    if (ec == asio::error::operation_aborted || acc != acceptor_) return;
    if (ec) {
      // Out of descriptors, say: tried again a little later, the
      // listening socket kept.
      spdlog::debug("check socket {}: accepting: {}", path_, ec.message());
      retry_.expires_after(std::chrono::milliseconds(100));
      retry_.async_wait([this, acc](const boost::system::error_code& e) {
        if (!e && acc == acceptor_) accept();
      });
      return;
    }
    if (*sessions_ >= kMaxSessions) {
      boost::system::error_code ignored;
      sock.close(ignored);
    } else {
      std::make_shared<Session>(std::move(sock), handler_, sessions_)->start();
    }
    accept();
  });
}

void CheckSocket::close() {
  if (!acceptor_) return;
  boost::system::error_code ignored;
  acceptor_->close(ignored);
  retry_.cancel();
  acceptor_.reset();  // its pending accept holds it until it is told
  struct stat st {};
  if (::lstat(path_.c_str(), &st) == 0 && st.st_dev == dev_ && st.st_ino == ino_)
    ::unlink(path_.c_str());
  path_.clear();
}

std::string untrusted_socket(const std::string& path, uid_t uid) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return path + ": " + errno_text(errno);
  if (!S_ISSOCK(st.st_mode)) return path + " is not a socket";
  if (st.st_uid != uid)
    return path + " is owned by uid " + std::to_string(st.st_uid) + ", not by uid " +
           std::to_string(uid) + " that listens on it";
  return unsafe_chain(std::filesystem::path(path).parent_path(), uid);
}

FetchResult fetch_check_socket(const std::string& path, const std::string& target,
                               std::chrono::milliseconds timeout) {
  FetchResult out;
  asio::io_context io;
  local::socket sock(io);
  sock.async_connect(local::endpoint(path), [&](const boost::system::error_code& ec) {
    if (ec) {
      out.error = "connecting to " + path + ": " + ec.message();
      return;
    }
    out.connected = true;
    // Who listens, then whether only that user (or root) can have put the
    // socket there: nothing on the way can change after that but by them.
    std::optional<ucred> peer = peer_of(sock.native_handle());
    out.untrusted =
        peer ? untrusted_socket(path, peer->uid) : "the kernel did not say who listens on " + path;
    if (!out.untrusted.empty()) return;
    std::make_shared<Exchange>(sock, out, target)->start();
  });
  io.run_for(timeout);
  if (out.status == 0 && out.error.empty() && out.untrusted.empty())
    out.error = "no answer within the timeout";
  return out;
}

std::string printable_body(std::string_view body) {
  std::string out;
  out.reserve(body.size());
  for (char c : body) {
    const auto u = static_cast<unsigned char>(c);
    if ((u < 0x20 && c != '\n' && c != '\t') || u == 0x7f) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else {
      out.push_back(c);
    }
  }
  return out;
}

}  // namespace nodewatch
