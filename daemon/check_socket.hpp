#pragma once
// The check socket: how `nodewatchd --check` and `--learn-expected` ask the
// daemon running on this host, and know that it is the daemon.
//
// A TCP port proves nothing: while the daemon is down, any local user may
// bind it and answer "healthy". The daemon therefore also serves a unix
// socket (server.check_socket, in the service's runtime directory), and the
// client trusts it only when only the daemon's user, or root, can have put
// it there (untrusted_socket()) and the process listening on it is of that
// user (SO_PEERCRED). Where no daemon serves the socket, the client
// collects one round itself; it never falls back to the port.
//
// The socket serves GET and HEAD of /-/node-health to every local user (the
// socket is mode 0666; the verdict is what `--check --local` would tell
// them), and of /metrics to root and the daemon's own user only (the
// metrics hold what they may not read themselves, kernel log counts among
// them). One request per connection, which must arrive within
// CheckSocket::kDeadline; at most CheckSocket::kMaxSessions at once, past
// that a new connection is closed at once. No TLS and no credentials: the
// peer's user is known from the kernel.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "asio.hpp"
#include "http_server.hpp"

namespace nodewatch {

class CheckSocket {
 public:
  using Handler = std::function<HttpResponse(const HttpRequest&)>;
  static constexpr std::chrono::milliseconds kDeadline{2000};
  static constexpr std::size_t kMaxSessions = 4;

  CheckSocket(asio::io_context& io, Handler handler);
  ~CheckSocket();
  CheckSocket(const CheckSocket&) = delete;
  CheckSocket& operator=(const CheckSocket&) = delete;

  // Serves `path` ("" none) instead of what it served. Creates the
  // directory above it (0755) when missing; removes a socket left there
  // by an instance that is gone, never anything else, and never a socket
  // something still listens on. "" when served, else why not (the daemon
  // runs on without it). `warning` is set when it is served but a client
  // would not trust it (untrusted_socket()).
  std::string open(const std::string& path, std::string* warning = nullptr);
  // Stops accepting and removes the socket file, when it is still the one
  // this opened. Connections being answered finish.
  void close();
  const std::string& path() const { return path_; }
  std::size_t sessions() const { return *sessions_; }

 private:
  void accept();

  asio::io_context& io_;
  Handler handler_;
  asio::steady_timer retry_;
  std::string path_;
  std::shared_ptr<asio::local::stream_protocol::acceptor> acceptor_;
  dev_t dev_ = 0;
  ino_t ino_ = 0;
  std::shared_ptr<std::size_t> sessions_;
};

// Empty when `path` is a socket that only `uid` or root can have put there:
// the socket is owned by `uid`, and every directory and symbolic link on
// the way to it (those a link leads through too) is owned by root or `uid`,
// each directory writable by no one else (a sticky one may be: others
// cannot replace what they do not own there). Otherwise why not.
std::string untrusted_socket(const std::string& path, uid_t uid);

struct FetchResult {
  bool connected = false;  // something listens on the socket
  std::string untrusted;   // why its listener was not trusted (nothing was asked)
  unsigned status = 0;     // 0: no HTTP response
  std::string body;
  std::string node_status;  // the Nodewatch-Node-Status header
  std::string error;        // why there is no response
};

// One GET of `target` from the daemon serving the check socket at `path`,
// within `timeout`. Asks only a listener that untrusted_socket() and its
// credentials vouch for; `connected` false: nothing listens there.
FetchResult fetch_check_socket(const std::string& path, const std::string& target,
                               std::chrono::milliseconds timeout);

// `body` as `--check` prints it: every control character but the line feed
// and the tab is shown as \xNN, never handed to the terminal (an escape
// sequence, a carriage return that overwrites a line).
std::string printable_body(std::string_view body);

}  // namespace nodewatch
