// Hostile HTTP clients against the real nodewatchd serving the end-to-end
// node (a ~200 KB exposition): clients that never read their response,
// slowloris connections that trickle a header, one address that opens more
// connections than its share, and a pipelined flood. During each, a
// well-behaved scraper from another address (127.0.0.1) must get every one
// of its scrapes answered with 200 (before the write timeout, the slot
// eviction and the per-address limit of http_server.hpp, 64 clients that
// never read held every slot for 30 s and the scrapes got 503).
//
// The misbehaving clients connect from other loopback addresses
// (127.0.0.2 and up, all of 127/8 is the loopback interface), as distinct
// hosts would. Every wait is bounded; traffic stays on loopback.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "support/daemon_process.hpp"
#include "support/e2e_node.hpp"
#include "support/eventually.hpp"
#include "support/http_client.hpp"

namespace nodewatch::testing {
namespace {

using namespace std::chrono_literals;

// A connection from 127.0.`hi`.`lo` with a small receive buffer (so that a
// response it does not read fills it and the server's write stalls), or -1.
int ConnectFrom(std::uint16_t port, int hi, int lo) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int small = 4096;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  sockaddr_in from{};
  from.sin_family = AF_INET;
  from.sin_addr.s_addr =
      htonl((127u << 24) | (static_cast<unsigned>(hi) << 8) | static_cast<unsigned>(lo));
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(port);
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{2, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from) != 0 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

void SendAll(int fd, const std::string& s) {
  std::size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return;
    off += static_cast<std::size_t>(n);
  }
}

struct Clients {
  std::vector<int> fds;
  ~Clients() {
    for (int fd : fds) ::close(fd);
  }
};

class HttpAbuse : public ::testing::Test {
 protected:
  void SetUp() override {
    DaemonProcess::Options o;
    o.args = E2ENodeArgs(dir_, {.kmsg = {},
                                .extra_config = "[server]\nwrite_timeout = \"2s\"\n"
                                                "max_connections = 64\n"
                                                "max_connections_per_client = 8\n"});
    o.env = E2ENodeEnv();
    o.args.insert(o.args.end(), {"--listen", "127.0.0.1:0"});
    daemon_.emplace(o, dir_.path() / "log");
    auto port = daemon_->port();
    ASSERT_TRUE(port) << daemon_->log();
    port_ = *port;
    ASSERT_TRUE(daemon_->wait_log("first collection round complete")) << daemon_->log();
    auto r = Request(port_, "GET", "/metrics");
    ASSERT_TRUE(r);
    ASSERT_GT(r->body.size(), 100000u) << "the exposition should be large enough to stall";
  }

  // `n` scrapes from 127.0.0.1, one after another: how many got 200.
  int Scrapes(int n) {
    int ok = 0;
    for (int i = 0; i < n; ++i) {
      auto r = Request(port_, "GET", "/metrics");
      if (r && r->status == 200 && r->body.find("nodewatch_collector_up") != std::string::npos)
        ++ok;
    }
    return ok;
  }

  double Dropped(const std::string& reason) {
    auto r = Request(port_, "GET", "/metrics");
    if (!r) return -1;
    return SampleValue(r->body,
                       "nodewatch_http_connections_dropped_total{reason=\"" + reason + "\"}")
        .value_or(-1);
  }

  TempDir dir_;
  std::optional<DaemonProcess> daemon_;
  std::uint16_t port_ = 0;
};

// 80 clients on 80 addresses that ask for /metrics and never read it: they
// fill every slot (the last 16 are refused: no slot had stalled yet); each new scrape takes the
// slot of one whose response has stalled, and those left are dropped at write_timeout.
TEST_F(HttpAbuse, ClientsThatNeverReadDoNotLockOutTheScraper) {
  Clients c;
  for (int i = 0; i < 80; ++i) {
    int fd = ConnectFrom(port_, 0, 2 + i);
    ASSERT_GE(fd, 0) << i;
    // Twenty requests (4 MB of answers): more than the socket buffers take,
    // so the server's write stalls.
    std::string twenty;
    for (int k = 0; k < 20; ++k) twenty += "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
    SendAll(fd, twenty);
    c.fds.push_back(fd);
  }
  std::this_thread::sleep_for(1500ms);  // their writes have stalled for over a second
  EXPECT_EQ(Scrapes(30), 30);
  EXPECT_GT(Dropped("evicted"), 0) << daemon_->log();
  // Those still held go at the write timeout (2 s here).
  EXPECT_TRUE(Eventually([&] { return Dropped("write_timeout") > 0; }, 10s));
}

// 150 slowloris connections on 150 addresses, each a request header that
// never ends, one byte at a time.
TEST_F(HttpAbuse, SlowlorisDoesNotLockOutTheScraper) {
  Clients c;
  for (int i = 0; i < 150; ++i) {
    int fd = ConnectFrom(port_, 1, 1 + i);
    ASSERT_GE(fd, 0) << i;
    SendAll(fd, "GET /metrics HTTP/1.1\r\nHost: x\r\n");
    c.fds.push_back(fd);
  }
  int ok = 0;
  for (int round = 0; round < 10; ++round) {
    for (int fd : c.fds) SendAll(fd, "X");
    ok += Scrapes(7);
  }
  EXPECT_EQ(ok, 70);
  EXPECT_GT(Dropped("evicted"), 0);
}

// One address opens 40 connections and holds them: it gets 8 (its share),
// the rest a 503 at once, and the scraper is not affected.
TEST_F(HttpAbuse, OneAddressGetsItsShareOfTheSlots) {
  Clients c;
  int refused = 0;
  for (int i = 0; i < 40; ++i) {
    int fd = ConnectFrom(port_, 0, 200);
    ASSERT_GE(fd, 0) << i;
    c.fds.push_back(fd);
  }
  // The refused ones were answered 503 and closed: their read ends.
  for (int fd : c.fds) {
    timeval tv{0, 300000};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char buf[256];
    ssize_t n = ::recv(fd, buf, sizeof buf - 1, 0);
    if (n > 0) {
      buf[n] = '\0';
      if (std::string(buf).find(" 503 ") != std::string::npos) ++refused;
    }
  }
  EXPECT_EQ(refused, 32);
  EXPECT_EQ(Dropped("client_limit"), 32);
  EXPECT_EQ(Scrapes(20), 20);
}

// A pipelined flood: one connection sends 2,000 requests without reading
// any answer. The server answers them in order into a full socket, stalls,
// and drops the connection at the write timeout; scrapes meanwhile are
// served.
TEST_F(HttpAbuse, APipelinedFloodDoesNotStallTheServer) {
  int fd = ConnectFrom(port_, 0, 250);
  ASSERT_GE(fd, 0);
  Clients c;
  c.fds.push_back(fd);
  std::string flood;
  for (int i = 0; i < 2000; ++i) flood += "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
  std::thread sender([&] { SendAll(fd, flood); });
  EXPECT_EQ(Scrapes(30), 30);
  EXPECT_TRUE(Eventually([&] { return Dropped("write_timeout") > 0; }, 10s)) << daemon_->log();
  sender.join();
  EXPECT_EQ(Scrapes(5), 5);
}

}  // namespace
}  // namespace nodewatch::testing
