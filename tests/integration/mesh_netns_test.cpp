// The mesh collector between real network namespaces: four nodes on a
// bridge (198.18.10.1-4/24, the range reserved for network tests), each a
// real nodewatchd in its namespace with the mesh collector on, all sharing
// one peers file and one key. One path is made slow and lossy: on node 3,
// an htb class of 1 Mbit/s with a 10-packet queue for what it sends to node
// 1, kept full by the test's own bounded filler traffic (this kernel has no
// netem). Then:
//   - each node's own metrics show that pair slow (tens of ms) and lossy,
//     from both ends, and every other pair fast and lossless;
//   - a real Prometheus scraping the four (through a veth from the test's
//     namespace into the bridge) with the shipped rules (for: 0s, and a
//     20 ms floor, so that a loaded CI machine's jitter cannot fire them)
//     fires the latency-inconsistency and loss alerts for exactly that pair;
//   - unsigned, replayed and spoofed probes sent to a node are dropped,
//     counted by reason, and never answered, while a valid one is.
//
// Needs root, iproute2 (ip, tc) and Debian's prometheus; skips with the
// reason without root or iproute2. MeshDaemon.* run on loopback, anywhere.

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "mesh/mesh_peers.hpp"
#include "mesh/mesh_wire.hpp"
#include "nodewatch/unique_fd.hpp"
#include "support/daemon_process.hpp"
#include "support/http_client.hpp"
#include "support/paths.hpp"
#include "support/shell.hpp"

namespace nodewatch::mesh {
namespace {

using namespace std::chrono_literals;
using testing::DaemonProcess;
using testing::TempDir;

const std::string kKey = "a shared key for the mesh test, 48 bytes long!!";

using nodewatch::testing::CmdResult;
using nodewatch::testing::MustRun;
using nodewatch::testing::NetnsTestsCannotRun;
using nodewatch::testing::RunCommand;

std::string addr(int node) {
  return "198.18.10." + std::to_string(node);
}
constexpr const char* kHostAddr = "198.18.10.254";

// Four node namespaces and a switch namespace with a bridge; a veth from
// the test's namespace into the bridge.
class MeshLab {
 public:
  MeshLab() {
    base_ = "nwm" + std::to_string(::getpid() % 100000);
    sw_ = base_ + "-sw";
    host_if_ = base_ + "h";
    ok_ = RunCommand("ip netns add " + sw_).status == 0;
    if (!ok_) return;
    MustRun("ip -n " + sw_ + " link add br0 type bridge");
    MustRun("ip -n " + sw_ + " link set br0 up");
    for (int i = 1; i <= 4; ++i) {
      const std::string ns = node_ns(i);
      MustRun("ip netns add " + ns);
      nodes_.push_back(ns);
      MustRun("ip netns exec " + ns + " sysctl -qw net.ipv6.conf.all.disable_ipv6=1");
      MustRun("ip netns exec " + ns + " sysctl -qw net.ipv6.conf.default.disable_ipv6=1");
      MustRun("ip link add mesh0 netns " + ns + " type veth peer name p" + std::to_string(i) +
              " netns " + sw_);
      MustRun("ip -n " + sw_ + " link set p" + std::to_string(i) + " master br0 up");
      MustRun("ip -n " + ns + " addr add " + addr(i) + "/24 dev mesh0");
      MustRun("ip -n " + ns + " link set mesh0 up");
      MustRun("ip -n " + ns + " link set lo up");
    }
    MustRun("ip link add " + host_if_ + " type veth peer name ph netns " + sw_);
    RunCommand("sysctl -qw net.ipv6.conf." + host_if_ + ".disable_ipv6=1");
    MustRun("ip -n " + sw_ + " link set ph master br0 up");
    MustRun("ip addr add " + std::string(kHostAddr) + "/24 dev " + host_if_);
    MustRun("ip link set " + host_if_ + " up");
  }
  ~MeshLab() {
    for (const std::string& ns : nodes_) RunCommand("ip netns del " + ns);
    if (ok_) RunCommand("ip netns del " + sw_);  // takes the host veth's peer, and so the pair
    RunCommand("ip link del " + host_if_);
  }
  MeshLab(const MeshLab&) = delete;
  MeshLab& operator=(const MeshLab&) = delete;

  bool ok() const { return ok_; }
  std::string node_ns(int i) const { return base_ + "-n" + std::to_string(i); }

  // The switch forwards what node 3 sends to node 1 through 1 Mbit/s and
  // a 10-packet queue: on the bridge's port towards node 1, where a
  // congested switch port would be. (On node 3's own interface the delay
  // would sit before the kernel's transmit timestamp, which the driver
  // takes after the qdisc, and a pingmesh rightly leaves that out.)
  void slow_path_3_to_1() const {
    const std::string tc = "tc -n " + sw_ + " ";
    MustRun(tc + "qdisc add dev p1 root handle 1: htb default 20");
    MustRun(tc + "class add dev p1 parent 1: classid 1:10 htb rate 1mbit ceil 1mbit");
    MustRun(tc + "class add dev p1 parent 1: classid 1:20 htb rate 1gbit");
    MustRun(tc + "qdisc add dev p1 parent 1:10 handle 10: pfifo limit 10");
    MustRun(tc + "filter add dev p1 parent 1: protocol ip prio 1 u32 match ip src " + addr(3) +
            "/32 flowid 1:10");
  }

  // A UDP socket created inside namespace `ns` (sockets stay in the
  // namespace they were made in, whichever thread uses them).
  static UniqueFd socket_in(const std::string& ns) {
    UniqueFd out;
    std::thread t([&] {
      UniqueFd fd(::open(("/var/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC));
      if (fd.get() < 0 || ::setns(fd.get(), CLONE_NEWNET) != 0) return;
      out.reset(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    });
    t.join();
    return out;
  }

 private:
  std::string base_;
  std::string sw_;
  std::string host_if_;
  std::vector<std::string> nodes_;
  bool ok_ = false;
};

// 1000-byte datagrams from node 3 to node 1's discard port, about 160 a
// second (1.3 Mbit/s, a third more than the slow class: its queue stays
// full, and a share of what else enters it is dropped), until stopped or
// 60 s have passed: at most 10,000 datagrams.
class Filler {
 public:
  explicit Filler(const MeshLab& lab) : fd_(MeshLab::socket_in(lab.node_ns(3))) {
    EXPECT_GE(fd_.get(), 0);
    thread_ = std::thread([this] {
      sockaddr_in to{};
      to.sin_family = AF_INET;
      to.sin_port = htons(9);
      ::inet_pton(AF_INET, addr(1).c_str(), &to.sin_addr);
      std::string payload(1000, 'f');
      const auto end = std::chrono::steady_clock::now() + 60s;
      while (!stop_.load() && std::chrono::steady_clock::now() < end) {
        (void)::sendto(fd_.get(), payload.data(), payload.size(), MSG_DONTWAIT,
                       reinterpret_cast<sockaddr*>(&to), sizeof to);
        std::this_thread::sleep_for(6ms);
      }
    });
  }
  ~Filler() {
    stop_.store(true);
    thread_.join();
  }

 private:
  UniqueFd fd_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

std::string curl(const std::string& url) {
  return RunCommand("curl -s --max-time 5 '" + url + "'").output;
}

// The value of the sample `name{labels...}` in exposition text, or -1.
double sample(const std::string& text, const std::string& name_and_labels) {
  std::size_t pos = text.find("\n" + name_and_labels + " ");
  if (pos == std::string::npos) return -1;
  return std::stod(text.substr(pos + name_and_labels.size() + 2));
}

std::string peer_labels(int node) {
  return "peer=\"" + addr(node) + ":9843\",rail=\"default\"";
}

// A probe as a prober at `from` would sign it, to node `to`'s responder.
Packet probe(const Endpoint& from, int to, std::uint64_t seq) {
  std::string why;
  return make_probe(4242, seq, from, *parse_endpoint(addr(to) + ":9843", &why));
}

TEST(MeshNetns, FourNodesFindTheSlowLossyPairAndRefuseForgedProbes) {
  if (std::string why = NetnsTestsCannotRun(); !why.empty())
    GTEST_SKIP() << "real-kernel mesh tests skipped: " << why;
  ASSERT_EQ(RunCommand("command -v prometheus").status, 0)
      << "prometheus is not installed: run packaging/install-deps.sh --test";
  MeshLab lab;
  ASSERT_TRUE(lab.ok());
  TempDir dir;
  const std::string key = dir.write("mesh.key", kKey).string();
  ::chmod(key.c_str(), 0600);
  std::string targets;
  for (int i = 1; i <= 4; ++i)
    targets += std::string(i > 1 ? ", " : "") + "\"" + addr(i) + ":9843\"";
  const std::string peers =
      dir.write("peers.json", "[{\"targets\": [" + targets + "]}]\n").string();
  const std::string ip =
      RunCommand("command -v ip").output.substr(0, RunCommand("command -v ip").output.find('\n'));

  std::vector<std::unique_ptr<DaemonProcess>> daemons;
  for (int i = 1; i <= 4; ++i) {
    std::string cfg = "[collectors.mesh]\nenabled = true\ninterval = \"1s\"\nlisten = \"" +
                      addr(i) + ":9843\"\npeers_file = \"" + peers + "\"\nkey_file = \"" + key +
                      "\"\nprobe_interval = \"100ms\"\nprobe_timeout = \"1s\"\ntimeout = \"1s\"\n";
    for (const char* off :
         {"accelerator", "pcie", "nic", "interconnect", "storage", "textfile", "kernel"})
      cfg += std::string("[collectors.") + off + "]\nenabled = false\n";
    DaemonProcess::Options o;
    o.program = ip;
    o.args = {"netns",        "exec",
              lab.node_ns(i), testing::BinaryPath().string(),
              "--config",     dir.write("n" + std::to_string(i) + ".toml", cfg).string(),
              "--listen",     addr(i) + ":9842"};
    daemons.push_back(
        std::make_unique<DaemonProcess>(o, dir.path() / ("n" + std::to_string(i) + ".log")));
  }
  for (int i = 1; i <= 4; ++i) {
    bool ready = false;
    for (int t = 0; t < 100 && !ready && !daemons[i - 1]->wait(0ms); ++t) {
      ready = RunCommand("curl -sf --max-time 1 -o /dev/null http://" + addr(i) + ":9842/-/ready")
                  .status == 0;
      if (!ready) std::this_thread::sleep_for(100ms);
    }
    ASSERT_TRUE(ready) << "node " << i << " not ready:\n" << daemons[i - 1]->log();
  }

  lab.slow_path_3_to_1();
  Filler filler(lab);

  // A real Prometheus over the four, with the shipped rules made to fire at
  // once (for: 0s) and a floor above any jitter of a loaded machine.
  std::uint16_t prom_port = testing::FreeLoopbackPort();
  const std::string rules = (dir.path() / "rules.yml").string();
  const std::string src = std::string(NODEWATCH_TESTS_SOURCE_DIR) + "/..";
  MustRun("python3 " + src +
          "/alerts/render.py --set NodewatchMeshLatencyInconsistent.for=0s "
          "--set NodewatchMeshPacketLoss.for=0s "
          "--set NodewatchMeshLatencyInconsistent.min_seconds=0.02 --out " +
          rules);
  std::string scrape;
  for (int i = 1; i <= 4; ++i) scrape += std::string(i > 1 ? ", " : "") + "'" + addr(i) + ":9842'";
  dir.write("prometheus.yml",
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
            "  evaluation_interval: 1s\nrule_files:\n  - " +
                rules + "\n  - " + src +
                "/alerts/nodewatch-recording.yml\n"
                "scrape_configs:\n  - job_name: nodewatch\n    static_configs:\n"
                "      - targets: [" +
                scrape + "]\n");
  DaemonProcess::Options po;
  po.program = RunCommand("command -v prometheus")
                   .output.substr(0, RunCommand("command -v prometheus").output.find('\n'));
  po.args = {"--config.file=" + (dir.path() / "prometheus.yml").string(),
             "--storage.tsdb.path=" + (dir.path() / "data").string(),
             "--web.listen-address=127.0.0.1:" + std::to_string(prom_port)};
  DaemonProcess prom(po, dir.path() / "prom.log");

  // 1. Each node's own metrics over 8 s of probes (80 a pair), from 2 s
  // after the start: probes sent before a peer had its key or its socket
  // are lost, rightly, and are not what this test is about.
  std::this_thread::sleep_for(2s);
  // The CPU the daemons spend meanwhile (utime + stime), for the record: at
  // 10 probes a second to each of 3 peers, and answering as many.
  auto cpu_ticks = [&](int i) {
    std::string stat =
        testing::ReadFile("/proc/" + std::to_string(daemons[i - 1]->pid()) + "/stat");
    std::istringstream in(stat.substr(stat.rfind(')') + 2));
    std::string field;
    long ticks = 0;
    for (int f = 3; f <= 15 && in >> field; ++f)
      if (f == 14 || f == 15) ticks += std::stol(field);
    return ticks;
  };
  std::map<int, std::string> before;
  std::map<int, long> cpu_before;
  for (int i = 1; i <= 4; ++i) {
    before[i] = curl("http://" + addr(i) + ":9842/metrics");
    cpu_before[i] = cpu_ticks(i);
  }
  std::this_thread::sleep_for(8s);
  std::map<int, std::string> metrics;
  for (int i = 1; i <= 4; ++i) {
    metrics[i] = curl("http://" + addr(i) + ":9842/metrics");
    std::printf("node %d: %.2f%% of a core over 8 s\n", i,
                100.0 * static_cast<double>(cpu_ticks(i) - cpu_before[i]) /
                    static_cast<double>(::sysconf(_SC_CLK_TCK)) / 8.0);
  }
  for (int i = 1; i <= 4; ++i) {
    const std::string& m = metrics[i];
    const std::string& b = before[i];
    EXPECT_EQ(sample(m, "nodewatch_mesh_peers{rail=\"default\"}"), 3) << i << "\n" << m;
    EXPECT_EQ(sample(m, "nodewatch_mesh_responder_up"), 1) << i;
    for (int p = 1; p <= 4; ++p) {
      if (p == i) continue;
      const bool slow = (i == 1 && p == 3) || (i == 3 && p == 1);
      auto delta = [&](const std::string& series) { return sample(m, series) - sample(b, series); };
      const double sent = delta("nodewatch_mesh_sent_total{" + peer_labels(p) + "}");
      const double lost = delta("nodewatch_mesh_lost_total{" + peer_labels(p) + "}");
      const std::string h = "nodewatch_mesh_rtt_seconds";
      const double answered = delta(h + "_count{" + peer_labels(p) + "}");
      const double rtt = answered > 0 ? delta(h + "_sum{" + peer_labels(p) + "}") / answered : -1;
      std::printf("node %d -> %d: sent %.0f, lost %.0f, mean RTT %.3f ms\n", i, p, sent, lost,
                  rtt * 1e3);
      EXPECT_GE(sent, 40) << i << "->" << p;
      if (slow) {
        EXPECT_GT(rtt, 0.02) << i << "->" << p << " should be slow";
        EXPECT_GT(lost, 0) << i << "->" << p << " should lose probes";
      } else {
        EXPECT_GE(rtt, 0) << i << "->" << p;
        EXPECT_LT(rtt, 0.005) << i << "->" << p << " should be fast";
        EXPECT_EQ(lost, 0) << i << "->" << p << " should lose nothing";
      }
    }
    for (const char* reason : {"bad_signature", "replayed", "spoofed", "stale", "malformed"})
      EXPECT_EQ(
          sample(m, std::string("nodewatch_mesh_dropped_packets_total{reason=\"") + reason + "\"}"),
          0)
          << i << " " << reason;
  }

  // 2. The alerts name exactly the slow pair, from both ends.
  auto firing = [&](const std::string& alert) {
    auto r = testing::Request(prom_port, "GET",
                              "/api/v1/query?query=ALERTS%7Balertname%3D%22" + alert +
                                  "%22%2Calertstate%3D%22firing%22%7D");
    std::set<std::string> pairs;
    if (!r) return pairs;
    static const std::regex kPair(
        R"re("instance":"198\.18\.10\.(\d):9842"[^}]*"peer":"198\.18\.10\.(\d):9843")re");
    // Labels come sorted: instance before peer.
    for (std::sregex_iterator it(r->body.begin(), r->body.end(), kPair), end; it != end; ++it)
      pairs.insert((*it)[1].str() + "->" + (*it)[2].str());
    return pairs;
  };
  const std::set<std::string> want = {"1->3", "3->1"};
  std::set<std::string> latency, loss;
  for (int t = 0; t < 300 && (latency != want || loss != want); ++t) {
    latency = firing("NodewatchMeshLatencyInconsistent");
    loss = firing("NodewatchMeshPacketLoss");
    if (latency != want || loss != want) std::this_thread::sleep_for(100ms);
  }
  auto show = [](const std::set<std::string>& s) {
    std::string out;
    for (const auto& p : s) out += p + " ";
    return out;
  };
  EXPECT_EQ(latency, want) << show(latency) << "\n" << testing::ReadFile(dir.path() / "prom.log");
  EXPECT_EQ(loss, want) << show(loss);

  // 3. Forged probes to node 2, from the test's namespace.
  UniqueFd s(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  sockaddr_in me{};
  me.sin_family = AF_INET;
  ::inet_pton(AF_INET, kHostAddr, &me.sin_addr);
  ASSERT_EQ(::bind(s.get(), reinterpret_cast<sockaddr*>(&me), sizeof me), 0);
  socklen_t len = sizeof me;
  ::getsockname(s.get(), reinterpret_cast<sockaddr*>(&me), &len);
  const Endpoint from = endpoint_of(reinterpret_cast<sockaddr*>(&me), len);
  std::string why;
  const Endpoint node2 = *parse_endpoint(addr(2) + ":9843", &why);
  auto send = [&](std::span<const std::uint8_t> b) {
    ::sendto(s.get(), b.data(), b.size(), 0, reinterpret_cast<const sockaddr*>(&node2.addr),
             node2.len);
  };
  auto replies = [&](std::chrono::milliseconds wait) {
    int n = 0;
    pollfd p{s.get(), POLLIN, 0};
    while (::poll(&p, 1, static_cast<int>(wait.count())) > 0) {
      std::uint8_t buf[256];
      if (::recv(s.get(), buf, sizeof buf, MSG_DONTWAIT) > 0) ++n;
    }
    return n;
  };
  auto valid = encode(probe(from, 2, 1), kKey);
  send(valid);
  EXPECT_EQ(replies(500ms), 1) << "a valid probe from the test is answered";
  send(valid);  // replayed
  auto unsigned_probe = encode(probe(from, 2, 2), kKey);
  std::fill(unsigned_probe.begin() + kSignedBytes, unsigned_probe.end(), 0);
  send(unsigned_probe);
  Packet spoofed = probe(from, 2, 3);  // says it comes from node 1
  spoofed.source = parse_endpoint(addr(1) + ":40000", &why)->address16();
  spoofed.source_port = 40000;
  send(encode(spoofed, kKey));
  EXPECT_EQ(replies(500ms), 0) << "no forged probe is answered";
  std::string after;
  for (int t = 0; t < 50; ++t) {
    after = curl("http://" + addr(2) + ":9842/metrics");
    if (sample(after, "nodewatch_mesh_dropped_packets_total{reason=\"spoofed\"}") >= 1) break;
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(sample(after, "nodewatch_mesh_dropped_packets_total{reason=\"replayed\"}"), 1);
  EXPECT_EQ(sample(after, "nodewatch_mesh_dropped_packets_total{reason=\"bad_signature\"}"), 1);
  EXPECT_EQ(sample(after, "nodewatch_mesh_dropped_packets_total{reason=\"spoofed\"}"), 1);

  prom.signal(SIGTERM);
  prom.wait(10s);
  for (auto& d : daemons) {
    d->signal(SIGTERM);
    EXPECT_EQ(d->wait(10s), 0) << d->log();
  }
}

// On loopback, no root needed: the daemon answers itself through
// 127.0.0.2 (a loopback address that is not one of its interfaces', so not
// left out as itself). A SIGHUP that changes the mesh settings keeps the
// counts, the listen socket and the collector up; one with the same
// settings changes nothing.
TEST(MeshDaemon, ReloadKeepsTheCountsAndTheSocket) {
  TempDir dir;
  const std::string key = dir.write("mesh.key", kKey).string();
  ::chmod(key.c_str(), 0600);
  const std::uint16_t port = testing::FreeLoopbackPort();
  const std::string target = "127.0.0.2:" + std::to_string(port);
  const std::string peers =
      dir.write("peers.json", "[{\"targets\": [\"" + target + "\"]}]").string();
  auto config = [&](const std::string& interval) {
    std::string cfg =
        "[collectors.mesh]\nenabled = true\ninterval = \"1s\"\ntimeout = \"1s\"\n"
        "listen = \"127.0.0.2:" +
        std::to_string(port) + "\"\npeers_file = \"" + peers + "\"\nkey_file = \"" + key +
        "\"\nprobe_interval = \"" + interval + "\"\n";
    for (const char* off :
         {"accelerator", "pcie", "nic", "interconnect", "storage", "textfile", "kernel"})
      cfg += std::string("[collectors.") + off + "]\nenabled = false\n";
    return dir.write("nw.toml", cfg).string();
  };
  DaemonProcess::Options o;
  o.args = {"--config", config("100ms"), "--listen", "127.0.0.1:0"};
  DaemonProcess d(o, dir.path() / "nw.log");
  auto http = d.port();
  ASSERT_TRUE(http) << d.log();
  const std::string sent = "nodewatch_mesh_sent_total{peer=\"" + target + "\",rail=\"default\"}";
  const std::string answered = "nodewatch_mesh_answered_total";
  auto value = [&](const std::string& series) {
    auto r = testing::Request(*http, "GET", "/metrics");
    return r ? testing::SampleValue(r->body, series) : std::nullopt;
  };
  auto wait_for = [&](const std::string& series, double at_least) {
    for (int i = 0; i < 500; ++i) {
      if (auto v = value(series); v && *v >= at_least) return *v;
      std::this_thread::sleep_for(20ms);
    }
    return value(series).value_or(-1);
  };
  ASSERT_GE(wait_for(answered, 10), 10) << d.log();
  const double before = wait_for(sent, 10);
  EXPECT_EQ(value("nodewatch_mesh_lost_total{peer=\"" + target + "\",rail=\"default\"}"), 0);

  config("200ms");  // changed: applied in place
  d.signal(SIGHUP);
  for (int i = 0; i < 500 && d.log().find("configuration reloaded") == std::string::npos; ++i)
    std::this_thread::sleep_for(10ms);
  ASSERT_NE(d.log().find("configuration reloaded"), std::string::npos) << d.log();
  auto after = value(sent);
  ASSERT_TRUE(after);
  EXPECT_GE(*after, before) << "a reload reset the counter";
  // The rebuilt collector (its options changed) reads up from its first
  // collection on, within its 1 s interval.
  EXPECT_EQ(wait_for("nodewatch_collector_up{collector=\"mesh\"}", 1), 1);
  EXPECT_EQ(value("nodewatch_mesh_responder_up"), 1);
  // Still probing and still answered after the reload, on the same socket.
  EXPECT_GE(wait_for(sent, *after + 5), *after + 5);
  EXPECT_GE(wait_for(answered, before + 5), before + 5);
  EXPECT_EQ(value("nodewatch_mesh_lost_total{peer=\"" + target + "\",rail=\"default\"}"), 0);
  d.signal(SIGTERM);
  EXPECT_EQ(d.wait(10s), 0) << d.log();
}

}  // namespace
}  // namespace nodewatch::mesh
