#pragma once
// A deliberately simple blocking HTTP/1.1 client over POSIX sockets, so that
// tests can also misbehave (trickle bytes, hold connections, send garbage).

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace nodewatch::testing {

class TestConnection {
 public:
  // To 127.0.0.1:`port`, from the loopback address `from` (host order;
  // 0: the kernel's choice, 127.0.0.1), as a distinct host would.
  explicit TestConnection(std::uint16_t port,
                          std::chrono::milliseconds recv_timeout = std::chrono::seconds(5),
                          std::uint32_t from = 0) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sockaddr_in source{};
    source.sin_family = AF_INET;
    source.sin_addr.s_addr = htonl(from);
    connected_ =
        (from == 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&source), sizeof(source)) == 0) &&
        ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    timeval tv{};
    tv.tv_sec = recv_timeout.count() / 1000;
    tv.tv_usec = (recv_timeout.count() % 1000) * 1000;
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  ~TestConnection() {
    if (fd_ >= 0) ::close(fd_);
  }
  TestConnection(const TestConnection&) = delete;
  TestConnection& operator=(const TestConnection&) = delete;

  bool connected() const { return connected_; }
  bool send(std::string_view data) {
    while (!data.empty()) {
      ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      data.remove_prefix(static_cast<std::size_t>(n));
    }
    return true;
  }
  // Reads whatever arrives until the peer closes or the timeout passes.
  // Returns nullopt on timeout with nothing read.
  std::string read_all() {
    std::string out;
    char buf[65536];
    for (;;) {
      ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) break;
      out.append(buf, static_cast<std::size_t>(n));
    }
    return out;
  }
  // True when the peer has closed (recv returns 0 or a reset).
  bool peer_closed() {
    char c;
    ssize_t n = ::recv(fd_, &c, 1, 0);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
  }

  struct Response {
    int status = 0;
    std::map<std::string, std::string> headers;  // lower-case names
    std::string body;
  };
  // Reads exactly one response (Content-Length framed); nullopt on failure.
  std::optional<Response> read_response(bool head = false) {
    while (buffer_.find("\r\n\r\n") == std::string::npos) {
      if (!fill()) return std::nullopt;
    }
    auto end = buffer_.find("\r\n\r\n");
    std::string head_text = buffer_.substr(0, end);
    buffer_.erase(0, end + 4);
    Response r;
    std::size_t pos = head_text.find("\r\n");
    std::string status_line = head_text.substr(0, pos);
    if (status_line.size() < 12) return std::nullopt;
    r.status = std::stoi(status_line.substr(9, 3));
    while (pos != std::string::npos) {
      std::size_t next = head_text.find("\r\n", pos + 2);
      std::string line =
          head_text.substr(pos + 2, next == std::string::npos ? std::string::npos : next - pos - 2);
      auto colon = line.find(':');
      if (colon != std::string::npos) {
        std::string name = line.substr(0, colon);
        for (auto& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        std::string value = line.substr(colon + 1);
        while (!value.empty() && value.front() == ' ') value.erase(0, 1);
        r.headers[name] = value;
      }
      pos = next;
    }
    std::size_t length =
        r.headers.count("content-length") ? std::stoul(r.headers["content-length"]) : 0;
    if (head) length = 0;
    while (buffer_.size() < length) {
      if (!fill()) return std::nullopt;
    }
    r.body = buffer_.substr(0, length);
    buffer_.erase(0, length);
    return r;
  }

 private:
  bool fill() {
    char buf[65536];
    ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
    if (n <= 0) return false;
    buffer_.append(buf, static_cast<std::size_t>(n));
    return true;
  }
  int fd_ = -1;
  bool connected_ = false;
  std::string buffer_;
};

// `in` in base64 (RFC 4648, with padding), as a Basic Authorization value
// carries "user:password".
inline std::string Base64(std::string_view in) {
  static constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (std::size_t i = 0; i < in.size(); i += 3) {
    unsigned v = static_cast<unsigned char>(in[i]) << 16;
    if (i + 1 < in.size()) v |= static_cast<unsigned char>(in[i + 1]) << 8;
    if (i + 2 < in.size()) v |= static_cast<unsigned char>(in[i + 2]);
    out += kB64[(v >> 18) & 63];
    out += kB64[(v >> 12) & 63];
    out += i + 1 < in.size() ? kB64[(v >> 6) & 63] : '=';
    out += i + 2 < in.size() ? kB64[v & 63] : '=';
  }
  return out;
}

// One GET (or other method) on a fresh connection.
inline std::optional<TestConnection::Response> Request(std::uint16_t port, std::string_view method,
                                                       std::string_view target,
                                                       std::string_view extra_headers = "") {
  TestConnection c(port);
  if (!c.connected()) return std::nullopt;
  std::string req = std::string(method) + " " + std::string(target) +
                    " HTTP/1.1\r\nHost: localhost\r\n" + std::string(extra_headers) +
                    "Connection: close\r\n\r\n";
  if (!c.send(req)) return std::nullopt;
  return c.read_response(method == "HEAD");
}

// A TCP connection to 127.0.0.1:`port` from the loopback address `from`
// (host order; 0: the kernel's choice), for a test that speaks raw bytes:
// the descriptor, or -1 when the bind or the connect failed.
inline int ConnectLoopback(std::uint16_t port, std::uint32_t from = 0) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in source{};
  source.sin_family = AF_INET;
  source.sin_addr.s_addr = htonl(from);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if ((from != 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&source), sizeof source) != 0) ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// A loopback TCP port that was free a moment ago, for a child server (a
// Prometheus, a node_exporter) that must be told its port up front.
inline std::uint16_t FreeLoopbackPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

}  // namespace nodewatch::testing
