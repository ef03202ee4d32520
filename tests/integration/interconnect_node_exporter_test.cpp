// Cross-check with the reference exporter: Debian's prometheus-node-exporter
// (its infiniband collector) and nodewatchd --once read the same copy of
// tests/fixtures/interconnect, and every port counter, state and rate that
// both export must agree.
//
// node_exporter 1.5.0 (bookworm) fails its whole infiniband class on a
// device without board_id or a port without counters/ (rxe0), and on a
// counter file it cannot read (mlx5_2's port_xmit_wait): the copy leaves
// those two devices out. Its "N/A (no PMA)" handling is checked on mlx4_0
// port 2: neither exporter has a counter there.

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "support/daemon_process.hpp"
#include "support/http_client.hpp"
#include "support/paths.hpp"

namespace nodewatch::testing {
namespace {

namespace fs = std::filesystem;

constexpr const char* kNodeExporter = "/usr/bin/prometheus-node-exporter";

// Parses `name{labels} value` lines of a text exposition into
// "name{labels}" -> value.
std::map<std::string, double> ParseExposition(const std::string& body) {
  std::map<std::string, double> out;
  std::size_t pos = 0;
  while (pos < body.size()) {
    std::size_t end = body.find('\n', pos);
    if (end == std::string::npos) end = body.size();
    std::string line = body.substr(pos, end - pos);
    pos = end + 1;
    if (line.empty() || line[0] == '#') continue;
    std::size_t space = line.rfind(' ');
    if (space == std::string::npos) continue;
    out[line.substr(0, space)] = std::stod(line.substr(space + 1));
  }
  return out;
}

// The value of `name` with exactly device and port labels (node_exporter
// and nodewatch both put device before port, sorted).
std::optional<double> Get(const std::map<std::string, double>& s, const std::string& name,
                          const std::string& device, const std::string& port,
                          const std::string& extra = "") {
  std::string key = name + "{" + extra + "device=\"" + device + "\",port=\"" + port + "\"}";
  auto it = s.find(key);
  if (it == s.end()) return std::nullopt;
  return it->second;
}

// One GET over HTTP/1.0: node_exporter then sends the body unchunked and
// closes the connection. Returns the body, or nullopt.
std::optional<std::string> Get10(std::uint16_t port, const std::string& target) {
  TestConnection c(port);
  if (!c.connected() || !c.send("GET " + target + " HTTP/1.0\r\nHost: localhost\r\n\r\n"))
    return std::nullopt;
  std::string all = c.read_all();
  if (all.rfind("HTTP/1.", 0) != 0 || all.find(" 200 ") == std::string::npos) return std::nullopt;
  std::size_t body = all.find("\r\n\r\n");
  if (body == std::string::npos) return std::nullopt;
  return all.substr(body + 4);
}

class Child {
 public:
  explicit Child(std::vector<std::string> argv) {
    pid_ = ::fork();
    if (pid_ == 0) {
      int null = ::open("/dev/null", O_WRONLY);
      ::dup2(null, 1);
      ::dup2(null, 2);
      std::vector<char*> a;
      for (auto& s : argv) a.push_back(s.data());
      a.push_back(nullptr);
      ::execv(a[0], a.data());
      ::_exit(127);
    }
  }
  ~Child() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      int st;
      ::waitpid(pid_, &st, 0);
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

 private:
  pid_t pid_ = -1;
};

TEST(InterconnectCrossCheck, AgreesWithNodeExporterInfiniband) {
  if (::access(kNodeExporter, X_OK) != 0) {
    GTEST_SKIP() << "SKIPPED LOUDLY: " << kNodeExporter
                 << " is not installed (packaging/install-deps.sh --test installs it); the "
                    "node_exporter cross-check did not run";
  }
  TempDir dir;
  const fs::path sys = dir.path() / "sys";
  fs::copy(fs::path(NODEWATCH_FIXTURES_DIR) / "interconnect" / "sys", sys,
           fs::copy_options::recursive);
  for (const char* d : {"mlx5_2", "rxe0"}) fs::remove_all(sys / "class" / "infiniband" / d);

  // node_exporter, scraped once it answers.
  std::uint16_t port = nodewatch::testing::FreeLoopbackPort();
  Child ne({kNodeExporter, "--collector.disable-defaults", "--collector.infiniband",
            "--path.sysfs=" + sys.native(),
            "--web.listen-address=127.0.0.1:" + std::to_string(port)});
  std::optional<std::string> body;
  for (int i = 0; i < 100 && !body; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    body = Get10(port, "/metrics");
  }
  ASSERT_TRUE(body) << "node_exporter did not answer";
  auto theirs = ParseExposition(*body);
  ASSERT_EQ(theirs["node_scrape_collector_success{collector=\"infiniband\"}"], 1)
      << "node_exporter's infiniband collector failed on the fixture:\n"
      << *body;

  // nodewatchd --once on the same tree.
  const fs::path out = dir.path() / "once.prom";
  const fs::path config = dir.write("nodewatch.toml", "");
  DaemonProcess::Options o;
  o.args = {"--once",
            "--config",
            config.native(),
            "--sysfs",
            sys.native(),
            "--procfs",
            (dir.path() / "proc").native()};
  o.stdout_file = out;
  DaemonProcess nw(o, dir.path() / "nodewatchd.log");
  ASSERT_TRUE(nw.wait(std::chrono::seconds(30)).has_value());
  auto ours = ParseExposition(ReadFile(out));

  // (node_exporter name, nodewatch name) for the counters/ PMA counters.
  const std::vector<std::pair<std::string, std::string>> pma = {
      {"node_infiniband_port_data_transmitted_bytes_total",
       "nodewatch_interconnect_port_transmitted_bytes_total"},
      {"node_infiniband_port_data_received_bytes_total",
       "nodewatch_interconnect_port_received_bytes_total"},
      {"node_infiniband_port_packets_transmitted_total",
       "nodewatch_interconnect_port_transmitted_packets_total"},
      {"node_infiniband_port_packets_received_total",
       "nodewatch_interconnect_port_received_packets_total"},
      {"node_infiniband_port_errors_received_total",
       "nodewatch_interconnect_port_receive_errors_total"},
      {"node_infiniband_symbol_error_total", "nodewatch_interconnect_port_symbol_errors_total"},
      {"node_infiniband_link_downed_total", "nodewatch_interconnect_port_link_downed_total"},
      {"node_infiniband_link_error_recovery_total",
       "nodewatch_interconnect_port_link_error_recovery_total"},
      {"node_infiniband_port_discards_transmitted_total",
       "nodewatch_interconnect_port_transmit_discards_total"},
      {"node_infiniband_port_transmit_wait_total",
       "nodewatch_interconnect_port_transmit_wait_total"},
      {"node_infiniband_port_receive_remote_physical_errors_total",
       "nodewatch_interconnect_port_receive_remote_physical_errors_total"},
      {"node_infiniband_local_link_integrity_errors_total",
       "nodewatch_interconnect_port_local_link_integrity_errors_total"},
      {"node_infiniband_excessive_buffer_overrun_errors_total",
       "nodewatch_interconnect_port_excessive_buffer_overrun_errors_total"},
      {"node_infiniband_vl15_dropped_total", "nodewatch_interconnect_port_vl15_dropped_total"},
  };
  const std::vector<std::pair<std::string, std::string>> port_gauges = {
      {"node_infiniband_state_id", "nodewatch_interconnect_port_state"},
      {"node_infiniband_physical_state_id", "nodewatch_interconnect_port_physical_state"},
      {"node_infiniband_rate_bytes_per_second",
       "nodewatch_interconnect_port_rate_bytes_per_second"},
  };
  int compared = 0;
  auto same = [&](const std::string& theirs_name, const std::string& ours_name,
                  const std::string& dev, const std::string& p) {
    std::optional<double> a = Get(theirs, theirs_name, dev, p);
    std::optional<double> b = Get(ours, ours_name, dev, p);
    ASSERT_TRUE(a) << theirs_name << " " << dev << "/" << p << " missing from node_exporter";
    ASSERT_TRUE(b) << ours_name << " " << dev << "/" << p << " missing from nodewatch";
    EXPECT_EQ(*a, *b) << theirs_name << " vs " << ours_name << " on " << dev << "/" << p;
    ++compared;
  };
  for (const char* dev : {"mlx5_0", "mlx5_1"}) {
    for (const auto& [t, o2] : pma) same(t, o2, dev, "1");
  }
  for (auto [dev, p] : std::vector<std::pair<const char*, const char*>>{
           {"mlx5_0", "1"}, {"mlx5_1", "1"}, {"mlx4_0", "1"}, {"mlx4_0", "2"}}) {
    for (const auto& [t, o2] : port_gauges) same(t, o2, dev, p);
  }
  // mlx4_0 port 1, an old kernel: the 64-bit counters_ext/ values, which
  // node_exporter exports as legacy_*, are the ones nodewatch exports; the
  // error counters come from counters/ for both.
  same("node_infiniband_legacy_data_transmitted_bytes_total",
       "nodewatch_interconnect_port_transmitted_bytes_total", "mlx4_0", "1");
  same("node_infiniband_legacy_data_received_bytes_total",
       "nodewatch_interconnect_port_received_bytes_total", "mlx4_0", "1");
  same("node_infiniband_legacy_packets_transmitted_total",
       "nodewatch_interconnect_port_transmitted_packets_total", "mlx4_0", "1");
  same("node_infiniband_legacy_packets_received_total",
       "nodewatch_interconnect_port_received_packets_total", "mlx4_0", "1");
  for (std::size_t i = 4; i < pma.size(); ++i) same(pma[i].first, pma[i].second, "mlx4_0", "1");
  // Unicast/multicast packets: node_exporter's own names, nodewatch's
  // generic PMA counter with the counters/ file name.
  for (const char* dev : {"mlx5_0", "mlx5_1"}) {
    for (auto [t, c] : std::vector<std::pair<const char*, const char*>>{
             {"node_infiniband_unicast_packets_received_total", "unicast_rcv_packets"},
             {"node_infiniband_unicast_packets_transmitted_total", "unicast_xmit_packets"},
             {"node_infiniband_multicast_packets_received_total", "multicast_rcv_packets"},
             {"node_infiniband_multicast_packets_transmitted_total", "multicast_xmit_packets"}}) {
      std::optional<double> a = Get(theirs, t, dev, "1");
      auto b = ours.find(std::string("nodewatch_interconnect_port_pma_total{device=\"") + dev +
                         "\",port=\"1\",counter=\"" + c + "\"}");
      ASSERT_TRUE(a) << t;
      ASSERT_NE(b, ours.end()) << c;
      EXPECT_EQ(*a, b->second) << t << " on " << dev;
      ++compared;
    }
  }
  // "N/A (no PMA)": neither has a counter on mlx4_0 port 2.
  EXPECT_FALSE(Get(theirs, "node_infiniband_port_data_transmitted_bytes_total", "mlx4_0", "2"));
  EXPECT_FALSE(Get(ours, "nodewatch_interconnect_port_transmitted_bytes_total", "mlx4_0", "2"));
  EXPECT_GE(compared, 60);
}

}  // namespace
}  // namespace nodewatch::testing
