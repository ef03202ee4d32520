// End to end: the real nodewatchd over the committed fixture tree, its whole
// output compared with a committed golden file, checked by promtool, and
// scraped 1,000 times for descriptor and memory leaks.
//
// Regenerate the golden file after an intended change of output with
//   NODEWATCH_UPDATE_GOLDEN=1 ctest --test-dir build -R E2ETest
// and review the diff like code.

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "exposition.hpp"
#include "support/daemon_process.hpp"
#include "support/e2e_node.hpp"
#include "support/http_client.hpp"
#include "support/paths.hpp"

namespace nodewatch {
namespace {

using namespace std::chrono_literals;
using testing::DaemonProcess;
using testing::ReadFile;
using testing::Request;
using testing::TempDir;
using testing::TestConnection;

const std::filesystem::path kGolden =
    std::filesystem::path(NODEWATCH_TESTS_SOURCE_DIR) / "e2e" / "golden.prom";

std::vector<std::string> FixtureArgs(const TempDir& dir) {
  return testing::E2ENodeArgs(dir);
}

std::vector<std::string> FixtureEnv() {
  return testing::E2ENodeEnv();
}

// Replaces what legitimately changes from run to run: timings, timestamps,
// the process's own figures, the source revision; drops the HTTP request
// counters (they count the test's own requests).
std::string Normalize(const std::string& text) {
  static const std::set<std::string> kVolatile = {
      "nodewatch_collector_duration_seconds", "nodewatch_collector_last_success_timestamp_seconds",
      "nodewatch_config_last_reload_success_timestamp_seconds",
      "nodewatch_textfile_file_mtime_seconds", "nodewatch_node_verdict_timestamp_seconds",
      // The fixture's records carry monotonic stamps; the boot time is the host's.
      "nodewatch_kernel_log_last_record_timestamp_seconds"};
  static const std::regex kRevision(R"(revision="[^"]*")");
  std::istringstream in(text);
  std::string line, out;
  while (std::getline(in, line)) {
    if (line.find("nodewatch_http_requests_total") != std::string::npos) continue;
    if (!line.empty() && line[0] != '#') {
      std::string name = line.substr(0, line.find_first_of("{ "));
      if (kVolatile.count(name) || name.rfind("process_", 0) == 0)
        line = line.substr(0, line.rfind(' ')) + " V";
    }
    out += std::regex_replace(line, kRevision, "revision=\"REV\"") + "\n";
  }
  return out;
}

void CompareWithGolden(const std::string& actual) {
  if (std::getenv("NODEWATCH_UPDATE_GOLDEN") != nullptr) {
    std::ofstream(kGolden) << actual;
    GTEST_SKIP() << "golden file rewritten: " << kGolden;
  }
  std::string expected = ReadFile(kGolden);
  ASSERT_FALSE(expected.empty()) << "missing " << kGolden;
  EXPECT_EQ(actual, expected)
      << "output differs from " << kGolden
      << "; if the change is intended, regenerate it (see the top of e2e_test.cpp)";
}

std::string RunOnce(const TempDir& dir) {
  DaemonProcess::Options o;
  o.args = FixtureArgs(dir);
  o.env = FixtureEnv();
  o.args.push_back("--once");
  o.stdout_file = dir.path() / "out.prom";
  DaemonProcess d(o, dir.path() / "log");
  auto rc = d.wait(20s);
  EXPECT_EQ(rc, 0) << d.log();
  return ReadFile(dir.path() / "out.prom");
}

TEST(E2ETest, OnceMatchesGolden) {
  TempDir dir;
  std::string out = RunOnce(dir);
  for (const char* family :
       {"nodewatch_storage_", "nodewatch_pcie_", "nodewatch_accelerator_", "nodewatch_textfile_",
        "burnin_check_success", "nodewatch_interconnect_port_state", "nodewatch_nvlink_up",
        "nodewatch_storage_nfs_operations_total"})
    ASSERT_NE(out.find(family), std::string::npos) << family << " missing:\n" << out;
  CompareWithGolden(Normalize(out));
}

// The group of docs/cost.md's series table that a sample line belongs to.
std::string SeriesGroup(const std::string& name) {
  static const std::set<std::string> kDaemon = {"build", "config", "http", "helper"};
  if (name.rfind("process_", 0) == 0) return "process, build, config, http, helper";
  if (name.rfind("nodewatch_", 0) != 0) return "textfile inputs (burn-in, inventory)";
  std::string word = name.substr(10, name.find('_', 10) - 10);
  return kDaemon.count(word) ? "process, build, config, http, helper" : word;
}

// The rows of the table between docs/cost.md's series-budget markers.
std::map<std::string, long> ReadmeSeriesTable() {
  std::string readme = ReadFile(std::filesystem::path(NODEWATCH_TESTS_SOURCE_DIR).parent_path() /
                                "docs" / "cost.md");
  auto begin = readme.find("<!-- series-budget:begin -->");
  auto end = readme.find("<!-- series-budget:end -->");
  std::map<std::string, long> rows;
  if (begin == std::string::npos || end == std::string::npos) return rows;
  static const std::regex kRow(R"(^\| (?:\*\*)?([^|*]+?)(?:\*\*)? \| (?:\*\*)?(\d+)(?:\*\*)? \|$)");
  std::istringstream in(readme.substr(begin, end - begin));
  std::string line;
  std::smatch m;
  while (std::getline(in, line))
    if (std::regex_match(line, m, kRow)) rows[m[1]] = std::stol(m[2]);
  return rows;
}

// The series budget: the end-to-end node with the default configuration
// serves at most 2,500 series, and docs/cost.md's table says how many per
// subsystem (docs/cost.md, "Series per node").
TEST(E2ETest, SeriesBudget) {
  TempDir dir;
  std::string out = RunOnce(dir);
  ASSERT_FALSE(out.empty());
  std::map<std::string, long> measured;
  long total = 0;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    ++measured[SeriesGroup(line.substr(0, line.find_first_of("{ ")))];
    ++total;
  }
  measured["total"] = total;
  std::string table;
  for (const auto& [group, n] : measured)
    table += "| " + group + " | " + std::to_string(n) + " |\n";
  EXPECT_LE(total, 2500) << "over the series budget:\n" << table;
  EXPECT_EQ(ReadmeSeriesTable(), measured)
      << "docs/cost.md's series table (\"Series per node\") is out of date; measured:\n"
      << table;
}

TEST(E2ETest, ServedMetricsMatchGoldenPlainAndGzip) {
  TempDir dir;
  DaemonProcess::Options o;
  o.args = FixtureArgs(dir);
  o.env = FixtureEnv();
  o.args.insert(o.args.end(), {"--listen", "127.0.0.1:0"});
  DaemonProcess d(o, dir.path() / "log");
  auto port = d.port();
  ASSERT_TRUE(port) << d.log();
  for (int i = 0; i < 500 && Request(*port, "GET", "/-/ready")->status != 200; ++i)
    std::this_thread::sleep_for(10ms);
  auto plain = Request(*port, "GET", "/metrics");
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->status, 200);
  CompareWithGolden(Normalize(plain->body));
  auto gz = Request(*port, "GET", "/metrics", "Accept-Encoding: gzip\r\n");
  ASSERT_TRUE(gz);
  EXPECT_EQ(gz->headers["content-encoding"], "gzip");
  EXPECT_EQ(Normalize(gunzip(gz->body)), Normalize(plain->body));
  d.signal(SIGTERM);
  EXPECT_EQ(d.wait(5s), 0);
}

TEST(E2ETest, PromtoolCheckMetricsPassesWithoutWarnings) {
  TempDir dir;
  std::string out = RunOnce(dir);
  ASSERT_FALSE(out.empty());
  int has_promtool = std::system("command -v promtool >/dev/null 2>&1");
  ASSERT_EQ(has_promtool, 0) << "promtool is not installed: run packaging/install-deps.sh --test";
  std::string cmd = "promtool check metrics < " + (dir.path() / "out.prom").string() + " > " +
                    (dir.path() / "promtool.txt").string() + " 2>&1";
  int rc = std::system(cmd.c_str());
  std::string report = ReadFile(dir.path() / "promtool.txt");
  EXPECT_EQ(rc, 0) << report;
  EXPECT_EQ(report, "") << "promtool warnings:\n" << report;
}

// process_open_fds and VmRSS of a pid, read from /proc.
std::size_t OpenFds(pid_t pid) {
  std::size_t n = 0;
  for ([[maybe_unused]] auto& e :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd"))
    ++n;
  return n;
}
long RssKiB(pid_t pid) {
  std::string status = ReadFile("/proc/" + std::to_string(pid) + "/status");
  auto pos = status.find("VmRSS:");
  return pos == std::string::npos ? -1 : std::strtol(status.c_str() + pos + 6, nullptr, 10);
}

TEST(E2ETest, ThousandScrapesLeakNoDescriptorsAndNoMemory) {
  TempDir dir;
  DaemonProcess::Options o;
  o.args = FixtureArgs(dir);
  o.env = FixtureEnv();
  o.args.insert(o.args.end(), {"--listen", "127.0.0.1:0"});
  DaemonProcess d(o, dir.path() / "log");
  auto port = d.port();
  ASSERT_TRUE(port) << d.log();
  // One mixed round: a fresh connection per request, keep-alive, gzip, a
  // 404, a client that hangs up mid-request.
  auto round = [&](int i) {
    switch (i % 5) {
      case 0: ASSERT_EQ(Request(*port, "GET", "/metrics")->status, 200); break;
      case 1:
        ASSERT_EQ(Request(*port, "GET", "/metrics", "Accept-Encoding: gzip\r\n")->status, 200);
        break;
      case 2: {
        TestConnection c(*port);
        for (int k = 0; k < 3; ++k) {
          c.send("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
          ASSERT_EQ(c.read_response()->status, 200);
        }
        break;
      }
      case 3: ASSERT_EQ(Request(*port, "GET", "/missing")->status, 404); break;
      case 4: {
        TestConnection c(*port);
        c.send("GET /metr");
        break;
      }
    }
  };
  for (int i = 0; i < 100; ++i) round(i);
  std::this_thread::sleep_for(200ms);
  std::size_t fds_before = OpenFds(d.pid());
  long rss_before = RssKiB(d.pid());
  for (int i = 0; i < 1000; ++i) round(i);
  // Let the server notice the last hung-up clients.
  std::size_t fds_after = OpenFds(d.pid());
  for (int i = 0; i < 100 && fds_after > fds_before; ++i) {
    std::this_thread::sleep_for(20ms);
    fds_after = OpenFds(d.pid());
  }
  long rss_after = RssKiB(d.pid());
  EXPECT_EQ(fds_after, fds_before);
  // Allocator noise is a few hundred KiB at most; a leak of even 1 KiB per
  // scrape would show as 1,000 KiB.
  EXPECT_LT(rss_after - rss_before, 512)
      << "RSS grew from " << rss_before << " KiB to " << rss_after << " KiB";
  d.signal(SIGTERM);
  EXPECT_EQ(d.wait(5s), 0);
}

// Sample lines by collector ("nodewatch_storage_..." -> "storage"), and the
// sum of each collector's nodewatch_collector_errors_total.
struct OutputCounts {
  std::map<std::string, int> samples;
  std::map<std::string, double> errors;
  std::map<std::string, std::string> up;
};
OutputCounts CountOutput(const std::string& text) {
  static const std::regex kErr(
      R"re(^nodewatch_collector_errors_total\{collector="(\w+)".* (\S+)$)re");
  static const std::regex kUp(R"re(^nodewatch_collector_up\{collector="(\w+)"\} (\S+)$)re");
  OutputCounts c;
  std::istringstream in(text);
  std::string line;
  std::smatch m;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    if (std::regex_match(line, m, kErr)) c.errors[m[1]] += std::stod(m[2]);
    if (std::regex_match(line, m, kUp)) c.up[m[1]] = m[2];
    // NFS mounts apart: all of theirs come from one file (mountstats).
    if (line.rfind("nodewatch_storage_nfs_", 0) == 0)
      ++c.samples["storage_nfs"];
    else if (line.rfind("nodewatch_", 0) == 0)
      ++c.samples[line.substr(10, line.find('_', 10) - 10)];
  }
  return c;
}

// A FIFO (no writer) in place of one attribute of each collector: before
// the sources layer opened attributes with O_NONBLOCK and refused
// non-regular files, the open() of the first one blocked its collection
// for good, and --once never returned. Now each costs its value (or its
// device's), counted, and every collection completes.
TEST(E2ETest, AFifoInPlaceOfAnAttributeCostsItsValueNotTheCollection) {
  TempDir plain_dir;
  const OutputCounts plain = CountOutput(RunOnce(plain_dir));

  TempDir dir;
  std::vector<std::string> args = FixtureArgs(dir);
  const std::filesystem::path node = dir.path() / "node";
  // One attribute that a collector reads, per fixture tree of the node.
  const std::vector<std::pair<std::string, std::string>> fifos = {
      {"storage", "sys/block/nvme0n1/queue/rotational"},
      {"pcie", "sys/devices/pci0000:00/0000:00:1c.0/max_link_width"},
      {"accelerator", "sys/devices/pci0000:c0/0000:c0:01.1/0000:c1:00.0/hwmon/hwmon5/temp1_input"},
      {"interconnect", "sys/class/infiniband/mlx5_1/ports/1/counters/port_xmit_data"},
      {"kernel", "sys/devices/system/edac/mc/mc1/dimm1/dimm_ue_count"},
      {"kernel", "proc/sys/kernel/random/boot_id"},
      {"accelerator", "proc/3301/cgroup"},
      {"storage", "proc/self/mountstats"},  // every NFS series is this file's
  };
  for (const auto& [collector, rel] : fifos) {
    ASSERT_TRUE(std::filesystem::is_regular_file(node / rel)) << rel;
    std::filesystem::remove(node / rel);
    ASSERT_EQ(::mkfifo((node / rel).c_str(), 0644), 0) << rel;
  }
  DaemonProcess::Options o;
  o.args = args;
  o.env = FixtureEnv();
  o.args.push_back("--once");
  o.stdout_file = dir.path() / "out.prom";
  DaemonProcess d(o, dir.path() / "log");
  auto rc = d.wait(30s);
  ASSERT_EQ(rc, 0) << "--once did not finish over FIFOs\n" << d.log();
  const OutputCounts got = CountOutput(ReadFile(dir.path() / "out.prom"));
  for (const auto& [collector, value] : plain.up) {
    EXPECT_EQ(got.up.count(collector) ? got.up.at(collector) : "", "1") << collector;
  }
  EXPECT_EQ(got.samples.count("storage_nfs"), 0u);
  for (const auto& [collector, rel] : fifos) {
    // The collection went on: most of its series are there.
    ASSERT_TRUE(plain.samples.count(collector)) << collector;
    EXPECT_GT(got.samples.count(collector) ? got.samples.at(collector) : 0,
              plain.samples.at(collector) * 3 / 4)
        << collector << " lost more than one value's worth for " << rel;
  }
  // Each loss is counted where the collector counts read errors (the kernel
  // collector's boot id is a message: "no boot id to be read").
  for (const char* collector : {"storage", "pcie", "accelerator", "interconnect"})
    EXPECT_GT(got.errors.at(collector), plain.errors.at(collector)) << collector;
}

}  // namespace
}  // namespace nodewatch
