// Wrong passwords under basic authentication against the real nodewatchd
// (plain HTTP on loopback, bcrypt cost 10: about 70 ms a check here).
//
// Each attacker is one address (127.0.1.N, all of 127/8 is the loopback
// interface) that keeps one keep-alive connection sending requests with a
// wrong password, and opens a new one whenever the server closes it. Every
// request it sends waits for the one bcrypt thread. Before the checking
// queue was ordered by each address's standing and a queued check could
// lose its slot, 64 such connections held every slot (a request waiting
// for bcrypt counted as being served) and every other connection got 503,
// Prometheus's with its remembered password included; and a first correct
// login waited behind every queued wrong one (about 1.3 s under 20).
// Every wait is bounded; traffic stays on loopback.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "support/daemon_process.hpp"
#include "support/http_client.hpp"
#include "support/tls.hpp"

namespace nodewatch::testing {
namespace {

using namespace std::chrono_literals;

constexpr int kUsers = 5;  // user0..user4: one first login each

std::string AuthHeader(const std::string& user, const std::string& password) {
  return "Authorization: Basic " + Base64(user + ":" + password) + "\r\n";
}

std::uint32_t Loopback(int hi, int lo) {
  return (127u << 24) | (static_cast<std::uint32_t>(hi) << 8) | static_cast<std::uint32_t>(lo);
}

class AuthFlood : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string users = "basic_auth_users:\n  prom: '" + BcryptHash("scrape") + "'\n";
    for (int i = 0; i < kUsers; ++i)
      users += "  user" + std::to_string(i) + ": '" + BcryptHash("pw" + std::to_string(i)) + "'\n";
    dir_.write("web.yml", users);
    std::string config =
        "[server]\nlisten = [\"127.0.0.1:0\"]\nweb_config_file = \"web.yml\"\n"
        "max_connections = 64\nmax_connections_per_client = 8\n";
    for (const char* c : {"accelerator", "pcie", "nic", "interconnect", "storage", "textfile"})
      config += "[collectors." + std::string(c) + "]\nenabled = false\n";
    DaemonProcess::Options o;
    o.args = {"--config", dir_.write("nw.toml", config).string()};
    daemon_.emplace(o, dir_.path() / "log");
    auto port = daemon_->port();
    ASSERT_TRUE(port) << daemon_->log();
    port_ = *port;
    // Prometheus logs in once before the flood: its password is remembered.
    auto r = Get(0, AuthHeader("prom", "scrape"));
    ASSERT_TRUE(r && r->status == 200) << daemon_->log();
  }

  void TearDown() override {
    stop_ = true;
    for (auto& t : attackers_) t.join();
  }

  // One GET /metrics from `from` (0: 127.0.0.1) with `auth` as a header.
  std::optional<TestConnection::Response> Get(std::uint32_t from, const std::string& auth) {
    TestConnection c(port_, 5s, from);
    if (!c.connected() ||
        !c.send("GET /metrics HTTP/1.1\r\nHost: x\r\n" + auth + "Connection: close\r\n\r\n"))
      return std::nullopt;
    return c.read_response();
  }

  // `n` attackers from 127.0.1.1 and up, each a keep-alive connection
  // sending wrong passwords one request after another.
  void Attack(int n) {
    for (int i = 0; i < n; ++i)
      attackers_.emplace_back([this, from = Loopback(1, 1 + i)] {
        const std::string req =
            "GET /metrics HTTP/1.1\r\nHost: x\r\n" + AuthHeader("prom", "guess") + "\r\n";
        while (!stop_) {
          TestConnection c(port_, 2s, from);
          while (!stop_ && c.connected() && c.send(req)) {
            auto r = c.read_response();
            if (!r) break;
            attempts_ += 1;
            if (r->status != 401) break;
          }
          std::this_thread::sleep_for(20ms);
        }
      });
    // Until the queue is full of them (each check takes ~70 ms).
    std::this_thread::sleep_for(1500ms);
  }

  // How long a request from `from` took for its answer, and its status.
  std::pair<std::chrono::duration<double>, int> Timed(std::uint32_t from, const std::string& auth) {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = Get(from, auth);
    return {std::chrono::steady_clock::now() - t0, r ? r->status : 0};
  }

  TempDir dir_;
  std::optional<DaemonProcess> daemon_;
  std::uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> attempts_{0};
  std::vector<std::thread> attackers_;
};

// 80 attacking addresses, more connections than there are slots: the
// scraper with its remembered password takes the slot of a queued check
// and is answered at once.
TEST_F(AuthFlood, TheRememberedScraperIsServedUnder80Attackers) {
  Attack(80);
  int ok = 0;
  std::string seen;
  for (int i = 0; i < 10; ++i) {
    auto [took, status] = Timed(0, AuthHeader("prom", "scrape"));
    if (status == 200 && took < 1s) ++ok;
    seen += std::to_string(status) + "/" + std::to_string(took.count()) + "s ";
    std::this_thread::sleep_for(200ms);
  }
  std::cout << "status/seconds of the 10 scrapes: " << seen << "\n";
  EXPECT_GE(ok, 9) << seen;
  EXPECT_GT(attempts_.load(), 20) << "the attackers got no answer: no flood";
  // Their queued checks were what lost the slots.
  auto r = Get(0, AuthHeader("prom", "scrape"));
  ASSERT_TRUE(r);
  EXPECT_GT(SampleValue(r->body, "nodewatch_http_connections_dropped_total{reason=\"evicted\"}")
                .value_or(0),
            0);
}

// 20 attacking addresses: a first correct login, from an address that has
// not failed, waits for the check that is running, not for the queue.
TEST_F(AuthFlood, AFirstLoginUnder20AttackersTakesUnderASecond) {
  Attack(20);
  std::vector<double> took;
  std::string seen;
  for (int i = 0; i < kUsers; ++i) {
    auto [t, status] =
        Timed(Loopback(2, 1 + i), AuthHeader("user" + std::to_string(i), "pw" + std::to_string(i)));
    EXPECT_EQ(status, 200);
    took.push_back(t.count());
    seen += std::to_string(t.count()) + "s ";
  }
  std::cout << "seconds of the " << kUsers << " first logins: " << seen << "\n";
  std::sort(took.begin(), took.end());
  EXPECT_LE(took[kUsers / 2], 1.0) << seen;
  // A check runs and the login's own: well under the 1.3 s of a queue.
  EXPECT_LE(took[kUsers / 2], 0.5) << seen;
  EXPECT_GT(attempts_.load(), 20) << "the attackers got no answer: no flood";
}

}  // namespace
}  // namespace nodewatch::testing
