#pragma once
// The HTTP(S) client of `nodewatchd --check` and `--learn-expected`: one GET
// to the daemon running on this host, bounded in time. TLS is spoken
// without verifying the certificate: the peer is this host's own daemon,
// reached on a loopback address, and nothing secret is sent.

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace nodewatch {

struct FetchResult {
  bool connected = false;  // a TCP connection was made (something listens)
  unsigned status = 0;     // 0: no HTTP response
  std::string body;
  std::string node_status;  // the Nodewatch-Node-Status header
  std::string error;        // why there is no response
};

// `body` as `--check` prints it: whatever listens on the port wrote it
// (the daemon, or, while it is down, anything else that bound the port),
// so every control character but the line feed and the tab is shown as
// \xNN, never handed to the terminal (an escape sequence, a carriage
// return that overwrites a line).
std::string printable_body(std::string_view body);

FetchResult fetch_local(const std::string& host, std::uint16_t port, bool tls,
                        const std::string& target, std::chrono::milliseconds timeout);

}  // namespace nodewatch
