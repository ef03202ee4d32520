// The nic collector against the real kernel: each test creates two network
// namespaces joined by a veth pair (addresses from 198.18.0.0/15, the range
// reserved for network tests), makes bounded traffic on that veth only, and
// compares what the collector reports with what `ip -s -s -j link` and
// `tc -s -j qdisc` report at the same moment. The namespaces are deleted by
// an RAII guard, also when a test fails.
//
// The collector's kernel source is created on a thread that entered the
// test namespace (setns): netlink and ioctl sockets belong to the namespace
// they were created in, so collect() then reads that namespace from the
// test's own thread.
//
// Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN for setns) and iproute2; skips
// with the reason otherwise.

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>  // before support/collector_test.hpp, which uses std::nan
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "nic/nic_collector.hpp"
#include "nic/nic_kernel.hpp"
#include "nodewatch/unique_fd.hpp"
#include "support/collector_test.hpp"
#include "support/shell.hpp"

namespace nodewatch::nic {
namespace {

using nodewatch::testing::CollectOnce;
using nodewatch::testing::Value;

using nodewatch::testing::CmdResult;
using nodewatch::testing::MustRun;
using nodewatch::testing::NetnsTestsCannotRun;
using nodewatch::testing::RunCommand;

// The number after "key": following each anchor in turn (iproute2's -j output).
double json_number(const std::string& json, std::initializer_list<std::string> path) {
  std::size_t pos = 0;
  for (const std::string& key : path) {
    pos = json.find("\"" + key + "\":", pos);
    if (pos == std::string::npos) {
      ADD_FAILURE() << "no " << key << " in " << json;
      return std::nan("");
    }
    pos += key.size() + 3;
  }
  return std::stod(json.substr(pos));
}

std::string json_string(const std::string& json, const std::string& key) {
  std::size_t pos = json.find("\"" + key + "\":\"");
  if (pos == std::string::npos) return "";
  pos += key.size() + 4;
  return json.substr(pos, json.find('"', pos) - pos);
}

// Datagrams of `size` bytes to b's discard port (198.18.0.2:9), from a
// socket made in the calling thread's namespace. ENOBUFS and EAGAIN are
// expected when a qdisc drops, and ignored.
class UdpToPeer {
 public:
  explicit UdpToPeer(std::size_t size)
      : s_(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)), payload_(size, 'x') {
    to_.sin_family = AF_INET;
    to_.sin_port = htons(9);
    ::inet_pton(AF_INET, "198.18.0.2", &to_.sin_addr);
  }
  bool ok() const { return s_.get() >= 0; }
  void send() const {
    (void)::sendto(s_.get(), payload_.data(), payload_.size(), 0,
                   reinterpret_cast<const sockaddr*>(&to_), sizeof(to_));
  }

 private:
  UniqueFd s_;
  std::string payload_;
  sockaddr_in to_{};
};

// Two namespaces, veth nwt0 (in a, 198.18.0.1/30) <-> nwt1 (in b, .2), IPv6
// off so that the kernel sends nothing of its own on them.
class VethPair {
 public:
  VethPair() {
    static int counter = 0;
    std::string base = "nwtest-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    a_ = base + "a";
    b_ = base + "b";
    ok_ = RunCommand("ip netns add " + a_).status == 0 &&
          RunCommand("ip netns add " + b_).status == 0;
    if (!ok_) return;
    for (const std::string& ns : {a_, b_}) {
      MustRun("ip netns exec " + ns + " sysctl -qw net.ipv6.conf.all.disable_ipv6=1");
      MustRun("ip netns exec " + ns + " sysctl -qw net.ipv6.conf.default.disable_ipv6=1");
    }
    MustRun("ip link add nwt0 netns " + a_ + " type veth peer name nwt1 netns " + b_);
    MustRun("ip -n " + a_ + " addr add 198.18.0.1/30 dev nwt0");
    MustRun("ip -n " + b_ + " addr add 198.18.0.2/30 dev nwt1");
    MustRun("ip -n " + a_ + " link set nwt0 up");
    MustRun("ip -n " + b_ + " link set nwt1 up");
    // The peer's address resolved once and for all: no ARP during a test.
    std::string mac = json_string(MustRun("ip -n " + b_ + " -j link show dev nwt1"), "address");
    MustRun("ip -n " + a_ + " neigh replace 198.18.0.2 lladdr " + mac + " dev nwt0 nud permanent");
  }
  ~VethPair() {
    // Deleting a namespace destroys the interfaces in it.
    if (!a_.empty()) RunCommand("ip netns del " + a_);
    if (!b_.empty()) RunCommand("ip netns del " + b_);
  }
  VethPair(const VethPair&) = delete;
  VethPair& operator=(const VethPair&) = delete;

  bool ok() const { return ok_; }
  const std::string& a() const { return a_; }
  const std::string& b() const { return b_; }

  // Runs fn on a thread inside namespace `ns` and waits for it.
  static void in_netns(const std::string& ns, const std::function<void()>& fn) {
    std::thread t([&] {
      UniqueFd fd(::open(("/var/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC));
      ASSERT_GE(fd.get(), 0) << "cannot open namespace " << ns;
      ASSERT_EQ(::setns(fd.get(), CLONE_NEWNET), 0) << "setns " << ns;
      fn();
    });
    t.join();
  }

  // A collector that reads namespace a, selecting the test's interfaces.
  // `receive_buffer`: make_kernel_source()'s.
  std::unique_ptr<NicCollector> collector(NicOptions options = {},
                                          std::size_t receive_buffer = 0) const {
    options.interfaces.include = "^nwt";
    options.interfaces.exclude = "";
    options.protocol_statistics = false;
    std::unique_ptr<KernelSource> source;
    in_netns(a_, [&] { source = make_kernel_source(receive_buffer); });
    return std::make_unique<NicCollector>(Roots{}, std::move(options), std::move(source));
  }

  // `count` UDP datagrams of `size` bytes from a to b's discard port, from a
  // socket of the test's own. b's (rate-limited) ICMP port-unreachable
  // replies only add to nwt0's rx, which the comparisons read at the same
  // moment as the collector.
  void send_udp(int count, int size) const {
    in_netns(a_, [&] {
      UdpToPeer udp(static_cast<std::size_t>(size));
      ASSERT_TRUE(udp.ok());
      for (int i = 0; i < count; ++i) udp.send();
    });
  }

  std::string ip_link(const std::string& ns, const std::string& dev) const {
    return MustRun("ip -n " + ns + " -s -s -j link show dev " + dev);
  }
  std::string tc_qdisc(const std::string& dev) const {
    return MustRun("tc -n " + a_ + " -s -j qdisc show dev " + dev);
  }

 private:
  std::string a_;
  std::string b_;
  bool ok_ = false;
};

#define SKIP_UNLESS_KERNEL_TESTS_CAN_RUN()                                      \
  do {                                                                          \
    std::string why = NetnsTestsCannotRun();                                    \
    if (!why.empty()) GTEST_SKIP() << "real-kernel nic tests skipped: " << why; \
  } while (0)

// Waits (bounded) until fn() is true.
bool eventually(const std::function<bool()>& fn) {
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < end) {
    if (fn()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return fn();
}

TEST(NicNetns, TbfDropsAndLinkCountersAgreeWithTcAndIp) {
  SKIP_UNLESS_KERNEL_TESTS_CAN_RUN();
  VethPair v;
  ASSERT_TRUE(v.ok());
  // 80 kbit/s, a 1600-byte bucket and a 3000-byte queue: a burst of 100
  // datagrams of 1000 bytes mostly overflows the queue, which then drains
  // in well under a second.
  MustRun("tc -n " + v.a() +
          " qdisc add dev nwt0 root handle 1: tbf rate 80kbit burst 1600 limit 3000");
  auto c = v.collector();
  v.send_udp(100, 1000);
  // Compare at a quiet moment: the queue has drained and tc says the same
  // before and after the collect.
  ASSERT_TRUE(eventually([&] { return json_number(v.tc_qdisc("nwt0"), {"qlen"}) == 0; }));
  for (int attempt = 0;; ++attempt) {
    std::string tc_before = v.tc_qdisc("nwt0");
    std::string ip_before = v.ip_link(v.a(), "nwt0");
    MetricSink sink(c->metrics());
    CollectOnce(*c, sink);
    std::string tc = v.tc_qdisc("nwt0");
    std::string ip = v.ip_link(v.a(), "nwt0");
    if ((tc != tc_before || ip != ip_before) && attempt < 3) continue;
    const std::vector<std::string> q = {"nwt0", "tbf", "1:", "root"};
    double drops = json_number(tc, {"drops"});
    EXPECT_GT(drops, 0) << tc;
    EXPECT_EQ(Value(sink, "nodewatch_nic_qdisc_drops_total", q), drops);
    EXPECT_EQ(Value(sink, "nodewatch_nic_qdisc_bytes_total", q), json_number(tc, {"bytes"}));
    EXPECT_EQ(Value(sink, "nodewatch_nic_qdisc_packets_total", q), json_number(tc, {"packets"}));
    EXPECT_EQ(Value(sink, "nodewatch_nic_qdisc_overlimits_total", q),
              json_number(tc, {"overlimits"}));
    EXPECT_EQ(Value(sink, "nodewatch_nic_qdisc_requeues_total", q), json_number(tc, {"requeues"}));
    EXPECT_EQ(Value(sink, "nodewatch_nic_qdisc_backlog_bytes", q), json_number(tc, {"backlog"}));
    EXPECT_EQ(Value(sink, "nodewatch_nic_qdisc_queue_length_packets", q),
              json_number(tc, {"qlen"}));
    const std::vector<std::string> i = {"nwt0"};
    EXPECT_EQ(Value(sink, "nodewatch_nic_transmitted_bytes_total", i),
              json_number(ip, {"tx", "bytes"}));
    EXPECT_EQ(Value(sink, "nodewatch_nic_transmitted_packets_total", i),
              json_number(ip, {"tx", "packets"}));
    EXPECT_EQ(Value(sink, "nodewatch_nic_transmit_dropped_total", i),
              json_number(ip, {"tx", "dropped"}));
    EXPECT_EQ(Value(sink, "nodewatch_nic_received_bytes_total", i),
              json_number(ip, {"rx", "bytes"}));
    EXPECT_EQ(Value(sink, "nodewatch_nic_received_packets_total", i),
              json_number(ip, {"rx", "packets"}));
    EXPECT_EQ(Value(sink, "nodewatch_nic_mtu_bytes", i), json_number(ip, {"mtu"}));
    // What got through the shaper left the veth: the link's tx agrees with tc.
    EXPECT_EQ(json_number(ip, {"tx", "packets"}), json_number(tc, {"packets"}));
    break;
  }
}

TEST(NicNetns, PeerDownGivesTransmitDropsAsTheKernelReports) {
  SKIP_UNLESS_KERNEL_TESTS_CAN_RUN();
  VethPair v;
  ASSERT_TRUE(v.ok());
  auto c = v.collector();
  double before = 0;
  {
    MetricSink sink(c->metrics());
    CollectOnce(*c, sink);
    before = Value(sink, "nodewatch_nic_transmit_dropped_total", {"nwt0"});
  }
  MustRun("ip -n " + v.b() + " link set nwt1 down");
  ASSERT_TRUE(eventually(
      [&] { return v.ip_link(v.a(), "nwt0").find("\"operstate\":\"UP\"") == std::string::npos; }));
  const int kSent = 20;
  v.send_udp(kSent, 200);
  MetricSink sink(c->metrics());
  CollectOnce(*c, sink);
  std::string ip = v.ip_link(v.a(), "nwt0");
  double dropped = Value(sink, "nodewatch_nic_transmit_dropped_total", {"nwt0"});
  EXPECT_EQ(dropped, json_number(ip, {"tx", "dropped"}));
  EXPECT_EQ(Value(sink, "nodewatch_nic_transmit_errors_total", {"nwt0"}),
            json_number(ip, {"tx", "errors"}));
  EXPECT_EQ(Value(sink, "nodewatch_nic_transmit_carrier_errors_total", {"nwt0"}),
            json_number(ip, {"tx", "carrier_errors"}));
  // Every datagram sent while the peer was down was dropped on nwt0.
  EXPECT_GE(dropped - before, kSent);
  EXPECT_EQ(Value(sink, "nodewatch_nic_up", {"nwt0"}), 0);
  EXPECT_EQ(Value(sink, "nodewatch_nic_carrier", {"nwt0"}), 0);
}

TEST(NicNetns, CarrierCyclesShowInChangesAndUp) {
  SKIP_UNLESS_KERNEL_TESTS_CAN_RUN();
  VethPair v;
  ASSERT_TRUE(v.ok());
  auto c = v.collector();
  double before = 0;
  double ups_before = 0;
  double downs_before = 0;
  {
    MetricSink sink(c->metrics());
    CollectOnce(*c, sink);
    before = Value(sink, "nodewatch_nic_carrier_changes_total", {"nwt0"});
    ups_before = Value(sink, "nodewatch_nic_carrier_up_changes_total", {"nwt0"});
    downs_before = Value(sink, "nodewatch_nic_carrier_down_changes_total", {"nwt0"});
    EXPECT_EQ(Value(sink, "nodewatch_nic_up", {"nwt0"}), 1);
  }
  const int kCycles = 3;
  for (int i = 0; i < kCycles; ++i) {
    MustRun("ip -n " + v.b() + " link set nwt1 down");
    MustRun("ip -n " + v.b() + " link set nwt1 up");
  }
  ASSERT_TRUE(eventually(
      [&] { return v.ip_link(v.a(), "nwt0").find("\"operstate\":\"UP\"") != std::string::npos; }));
  MetricSink sink(c->metrics());
  CollectOnce(*c, sink);
  std::string ip = v.ip_link(v.a(), "nwt0");
  double changes = Value(sink, "nodewatch_nic_carrier_changes_total", {"nwt0"});
  EXPECT_EQ(changes, json_number(ip, {"carrier_changes"}));
  EXPECT_EQ(changes - before, 2 * kCycles);
  EXPECT_EQ(Value(sink, "nodewatch_nic_carrier_up_changes_total", {"nwt0"}) - ups_before, kCycles);
  EXPECT_EQ(Value(sink, "nodewatch_nic_carrier_down_changes_total", {"nwt0"}) - downs_before,
            kCycles);
  EXPECT_EQ(Value(sink, "nodewatch_nic_up", {"nwt0"}), 1);
}

TEST(NicNetns, InterfacesAppearAndDisappearBetweenCollects) {
  SKIP_UNLESS_KERNEL_TESTS_CAN_RUN();
  VethPair v;
  ASSERT_TRUE(v.ok());
  auto c = v.collector();
  auto has_up = [](const MetricSink& s, const std::string& dev) {
    double x = 0;
    return s.get("nodewatch_nic_up", {dev}, &x);
  };
  {
    MetricSink sink(c->metrics());
    CollectOnce(*c, sink);
    EXPECT_TRUE(has_up(sink, "nwt0"));
    EXPECT_FALSE(has_up(sink, "nwt2"));
  }
  MustRun("ip -n " + v.a() + " link add nwt2 type veth peer name nwt3");
  {
    MetricSink sink(c->metrics());
    CollectOnce(*c, sink);
    EXPECT_TRUE(has_up(sink, "nwt2"));
    EXPECT_TRUE(has_up(sink, "nwt3"));
    EXPECT_EQ(c->tracked_interfaces(), 4u);  // lo is in the dump too, unselected
  }
  MustRun("ip -n " + v.a() + " link del nwt2");
  MetricSink sink(c->metrics());
  CollectOnce(*c, sink);
  EXPECT_FALSE(has_up(sink, "nwt2"));
  EXPECT_FALSE(has_up(sink, "nwt3"));
  EXPECT_TRUE(has_up(sink, "nwt0"));
  EXPECT_EQ(c->tracked_interfaces(), 2u);
}

// A dump datagram larger than the receive buffer (here every RTM_NEWLINK
// message is, at 512 bytes) is not read in part: the buffer grows to the
// size the kernel reports (MSG_TRUNC) and the dump is asked again, within
// the same collection.
TEST(NicNetns, ADumpLargerThanTheReceiveBufferIsAskedAgainWithRoom) {
  SKIP_UNLESS_KERNEL_TESTS_CAN_RUN();
  VethPair v;
  ASSERT_TRUE(v.ok());
  MustRun("ip -n " + v.a() + " link add nwt2 type veth peer name nwt3");
  MustRun("ip -n " + v.a() + " link set nwt2 mtu 1400");
  auto c = v.collector({}, 512);
  for (int i = 0; i < 2; ++i) {
    MetricSink sink(c->metrics());
    CollectOnce(*c, sink);
    EXPECT_TRUE(sink.errors().empty()) << "collection " << i;
    double x = 0;
    EXPECT_TRUE(sink.get("nodewatch_nic_up", {"nwt0"}, &x));
    EXPECT_EQ(x, 1);
    EXPECT_TRUE(sink.get("nodewatch_nic_mtu_bytes", {"nwt2"}, &x));
    EXPECT_EQ(x, 1400);
    EXPECT_TRUE(sink.get("nodewatch_nic_mtu_bytes", {"nwt3"}, &x));
  }
}

// A congested path on the real kernel: a paced flow through a tbf shaper
// that is tightened for a second, then opened again. The collector (the
// real netlink dumps and ethtool ioctls) sees the throughput dip under half
// of what it was, with the shaper's drops in the dip only, and back: what
// the throughput-stability rules (alerts/tests/throughput.yml) and the
// congestion evidence read.
TEST(NicNetns, AShapedDipShowsAsLessThroughputWithDrops) {
  SKIP_UNLESS_KERNEL_TESTS_CAN_RUN();
  VethPair v;
  ASSERT_TRUE(v.ok());
  const std::string tbf = "tc -n " + v.a() + " qdisc replace dev nwt0 root handle 1: tbf ";
  MustRun(tbf + "rate 40mbit burst 32k limit 128k");
  auto c = v.collector();
  // About 16 Mbit/s of 1000-byte datagrams: 2 every millisecond.
  std::atomic<bool> stop{false};
  std::thread sender([&] {
    VethPair::in_netns(v.a(), [&] {
      UdpToPeer udp(1000);
      ASSERT_TRUE(udp.ok());
      auto next = std::chrono::steady_clock::now();
      while (!stop.load()) {
        for (int i = 0; i < 2; ++i) udp.send();
        // A sender held up (a loaded machine) does not catch up in a burst
        // the shaper would drop.
        next = std::max(next + std::chrono::milliseconds(1),
                        std::chrono::steady_clock::now() - std::chrono::milliseconds(5));
        std::this_thread::sleep_until(next);
      }
    });
  });
  struct Point {
    std::chrono::steady_clock::time_point at;
    double tx_bytes = 0;
    double drops = 0;
  };
  auto sample = [&] {
    MetricSink sink(c->metrics());
    CollectOnce(*c, sink);
    EXPECT_TRUE(sink.errors().empty());
    return Point{std::chrono::steady_clock::now(),
                 Value(sink, "nodewatch_nic_transmitted_bytes_total", {"nwt0"}),
                 Value(sink, "nodewatch_nic_qdisc_drops_total", {"nwt0", "tbf", "1:", "root"})};
  };
  auto rate = [](const Point& a, const Point& b) {
    return (b.tx_bytes - a.tx_bytes) / std::chrono::duration<double>(b.at - a.at).count();
  };
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the flow settles
  Point p0 = sample();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  Point p1 = sample();
  MustRun(tbf + "rate 2mbit burst 4k limit 16k");  // the congested path
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  Point p2 = sample();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  Point p3 = sample();
  MustRun(tbf + "rate 40mbit burst 32k limit 128k");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  Point p4 = sample();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  Point p5 = sample();
  stop = true;
  sender.join();
  const double before = rate(p0, p1), dip = rate(p2, p3), after = rate(p4, p5);
  std::printf("tx through the shaper: %.2f MB/s, in the dip %.2f MB/s, after %.2f MB/s\n",
              before / 1e6, dip / 1e6, after / 1e6);
  EXPECT_GT(before, 1.2e6) << "the flow did not get through the open shaper";
  EXPECT_LT(dip, 0.5 * before);
  EXPECT_GT(after, 0.5 * before);
  EXPECT_EQ(p1.drops - p0.drops, 0) << "drops with the shaper open";
  EXPECT_GT(p3.drops - p2.drops, 0) << "no drops on the congested path";
  EXPECT_EQ(p5.drops - p4.drops, 0) << "drops after the shaper opened";
}

TEST(NicNetns, EthtoolReadsTheVethDriversStatistics) {
  SKIP_UNLESS_KERNEL_TESTS_CAN_RUN();
  VethPair v;
  ASSERT_TRUE(v.ok());
  NicOptions o;
  // veth's ETHTOOL_GSTATS: peer_ifindex, then per-queue XDP counters.
  o.driver_counters = {"peer_ifindex", R"(rx_queue_0_xdp_packets)"};
  auto c = v.collector(o);
  MetricSink sink(c->metrics());
  CollectOnce(*c, sink);
  std::string peer = MustRun("ip -n " + v.b() + " -j link show dev nwt1");
  EXPECT_EQ(Value(sink, "nodewatch_nic_driver_counters_total", {"nwt0", "peer_ifindex"}),
            json_number(peer, {"ifindex"}));
  EXPECT_EQ(Value(sink, "nodewatch_nic_driver_counters_total", {"nwt0", "rx_queue_0_xdp_packets"}),
            0);
  // ETHTOOL_GDRVINFO and the speed the kernel also shows in sysfs (read in
  // the namespace, where `ip netns exec` mounts its own sysfs).
  std::string mac = json_string(v.ip_link(v.a(), "nwt0"), "address");
  EXPECT_EQ(Value(sink, "nodewatch_nic_info", {"nwt0", "veth", "", "", mac, "up"}), 1);
  double mbps = std::stod(MustRun("ip netns exec " + v.a() + " cat /sys/class/net/nwt0/speed"));
  EXPECT_EQ(Value(sink, "nodewatch_nic_speed_bytes_per_second", {"nwt0"}), mbps * 1e6 / 8);
  EXPECT_TRUE(sink.errors().empty());
}

}  // namespace
}  // namespace nodewatch::nic
