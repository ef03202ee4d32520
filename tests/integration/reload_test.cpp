// Reloads as Prometheus sees them, on the real binary: a SIGHUP with an
// unchanged configuration changes nothing (no counter reset, no vanished
// series, the same collector instances); a change to one collector rebuilds
// that one alone. --list-metrics, which builds no collector at all. And the
// failure log of a real collector: one line when a device's file starts
// failing, one when it stops.

#include <gtest/gtest.h>

#include <sys/stat.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include "support/daemon_process.hpp"
#include "support/eventually.hpp"
#include "support/http_client.hpp"
#include "support/paths.hpp"

namespace nodewatch {
namespace {

using namespace std::chrono_literals;
using testing::DaemonProcess;
using testing::Eventually;
using testing::ReadFile;
using testing::Request;
using testing::SampleValue;
using testing::TempDir;
using testing::TestSections;
namespace fs = std::filesystem;

const fs::path kFixtures = NODEWATCH_FIXTURES_DIR;
constexpr const char* kOutOfBuffer =
    "nodewatch_interconnect_roce_out_of_buffer_total{device=\"mlx5_0\",port=\"1\"}";

// Lines of the daemon's log matching `re`.
std::size_t CountLog(const DaemonProcess& d, const std::string& re) {
  std::string text = d.log();
  std::regex rx(re);
  return static_cast<std::size_t>(
      std::distance(std::sregex_iterator(text.begin(), text.end(), rx), std::sregex_iterator()));
}

bool WaitLogCount(const DaemonProcess& d, const std::string& re, std::size_t n,
                  std::chrono::milliseconds limit = 10s) {
  auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    if (CountLog(d, re) >= n) return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

class ReloadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::copy(kFixtures / "interconnect" / "sys", dir_.path() / "sys",
             fs::copy_options::recursive | fs::copy_options::copy_symlinks);
    fs::copy(kFixtures / "storage" / "proc", dir_.path() / "proc",
             fs::copy_options::recursive | fs::copy_options::copy_symlinks);
    fs::create_directories(dir_.path() / "probed");
    fs::create_directories(dir_.path() / "textfile");
    // A 32-bit mlx5 Q-counter just below 2^32: the next reading wraps.
    SetOutOfBuffer(4294967290u);
  }

  void SetOutOfBuffer(std::uint64_t v) {
    std::ofstream(dir_.path() / "sys/class/infiniband/mlx5_0/ports/1/hw_counters/out_of_buffer",
                  std::ios::trunc)
        << v << "\n";
  }

  std::string Config(const std::string& textfile_interval, int kernel_max_devices = 64) const {
    return "[collectors.accelerator]\nenabled = false\n"
           "[collectors.imex]\nenabled = false\n"
           "[collectors.bmc]\nenabled = false\n"
           "[collectors.pcie]\nenabled = false\n"
           "[collectors.nic]\nenabled = false\n"
           "[collectors.interconnect]\ninterval = \"200ms\"\ntimeout = \"200ms\"\n"
           "pma_interval = \"0s\"\nverbs = false\nnvlink = false\n"
           "[collectors.textfile]\ninterval = \"" +
           textfile_interval + "\"\ndirectory = \"" + (dir_.path() / "textfile").string() +
           "\"\n"
           "[collectors.storage]\ninterval = \"200ms\"\ntimeout = \"200ms\"\n"
           "[[collectors.storage.probe]]\npath = \"" +
           (dir_.path() / "probed").string() +
           "\"\noperations = [\"stat\"]\ninterval = \"100ms\"\ntimeout = \"100ms\"\n" +
           TestSections(dir_.path()) + "interval = \"200ms\"\ntimeout = \"200ms\"\nmax_devices = " +
           std::to_string(kernel_max_devices) + "\n";
  }

  std::vector<std::string> Args(const fs::path& config) const {
    return {"--config", config.string(),
            "--listen", "127.0.0.1:0",
            "--sysfs",  (dir_.path() / "sys").string(),
            "--procfs", (dir_.path() / "proc").string()};
  }

  std::string ProbeCount() const {
    return "nodewatch_storage_probe_duration_seconds_count{path=\"" +
           (dir_.path() / "probed").string() + "\",operation=\"stat\"}";
  }

  TempDir dir_;
};

TEST_F(ReloadTest, AnUnchangedConfigurationIsInvisibleToPrometheus) {
  auto config = dir_.write("nodewatch.toml", Config("15s"));
  DaemonProcess::Options o;
  o.args = Args(config);
  DaemonProcess d(o, dir_.path() / "log");
  auto port = d.port();
  ASSERT_TRUE(port) << d.log();
  auto scrape = [&] { return Request(*port, "GET", "/metrics")->body; };
  auto value = [&](const std::string& series) { return SampleValue(scrape(), series); };
  auto wait_value = [&](const std::string& series, auto pred) {
    auto until = std::chrono::steady_clock::now() + 10s;
    while (std::chrono::steady_clock::now() < until) {
      if (auto v = value(series); v && pred(*v)) return true;
      std::this_thread::sleep_for(20ms);
    }
    return false;
  };

  ASSERT_TRUE(wait_value(kOutOfBuffer, [](double v) { return v == 4294967290.0; })) << d.log();
  SetOutOfBuffer(5);  // wrapped: +11
  ASSERT_TRUE(wait_value(kOutOfBuffer, [](double v) { return v == 4294967301.0; })) << d.log();
  ASSERT_TRUE(wait_value(ProbeCount(), [](double v) { return v >= 3; })) << d.log();
  // The modelled node's kernel log: one XID 79, two XID 13, eight records
  // matched in all (tests/fixtures/kernel/README.md).
  const std::string xid79 =
      "nodewatch_kernel_xid_events_total{pci_bus_id=\"0000:8a:00.0\",xid=\"79\"}";
  const std::string xid13 =
      "nodewatch_kernel_xid_events_total{pci_bus_id=\"0000:4a:00.0\",xid=\"13\"}";
  ASSERT_TRUE(wait_value(xid79, [](double v) { return v == 1; })) << d.log();

  for (int i = 1; i <= 3; ++i) {
    double probes = *value(ProbeCount());
    d.signal(SIGHUP);
    ASSERT_TRUE(WaitLogCount(d, "configuration reloaded", static_cast<std::size_t>(i))) << d.log();
    EXPECT_EQ(CountLog(d, "4 collector\\(s\\) enabled, 4 unchanged and kept"),
              static_cast<std::size_t>(i));
    std::string body = scrape();
    // The wrapped counter is still past 2^32 (a new accumulator would say
    // 5, a reset), and the probe histogram went on counting.
    EXPECT_EQ(SampleValue(body, kOutOfBuffer), 4294967301.0) << "reload " << i;
    EXPECT_GE(SampleValue(body, ProbeCount()).value_or(0), probes) << "reload " << i;
    EXPECT_EQ(SampleValue(body, "nodewatch_config_last_reload_successful"), 1);
    EXPECT_EQ(SampleValue(body, "nodewatch_collector_up{collector=\"storage\"}"), 1);
    EXPECT_EQ(SampleValue(body, xid79), 1) << "reload " << i;
    EXPECT_EQ(SampleValue(body, xid13), 2) << "reload " << i;
  }

  // A change to the textfile collector rebuilds it alone: storage and
  // interconnect keep their instances and their counts.
  double probes = *value(ProbeCount());
  dir_.write("nodewatch.toml", Config("30s"));
  d.signal(SIGHUP);
  ASSERT_TRUE(WaitLogCount(d, "configuration reloaded; 4 collector\\(s\\) enabled, 3 unchanged", 1))
      << d.log();
  std::string body = scrape();
  EXPECT_EQ(SampleValue(body, kOutOfBuffer), 4294967301.0);
  EXPECT_GE(SampleValue(body, ProbeCount()).value_or(0), probes);
  EXPECT_EQ(SampleValue(body, "nodewatch_collector_interval_seconds{collector=\"textfile\"}"), 30);

  // A change to the kernel collector's options rebuilds the collector over
  // the same reader of the log, which takes them: its counts neither step
  // back nor count a record twice.
  dir_.write("nodewatch.toml", Config("30s", /*kernel_max_devices=*/32));
  d.signal(SIGHUP);
  ASSERT_TRUE(WaitLogCount(d, "configuration reloaded; 4 collector\\(s\\) enabled, 3 unchanged", 2))
      << d.log();
  for (int i = 0; i < 5; ++i) {
    body = scrape();
    EXPECT_EQ(SampleValue(body, xid79), 1) << "scrape " << i;
    EXPECT_EQ(SampleValue(body, xid13), 2) << "scrape " << i;
    std::this_thread::sleep_for(100ms);
  }
  d.signal(SIGTERM);
  EXPECT_EQ(d.wait(5s), 0);
}

// --list-metrics reads the specs: it needs no configuration file, builds no
// collector and so writes no probe file into a probed directory.
TEST_F(ReloadTest, ListMetricsBuildsNoCollectorAndReadsNoConfiguration) {
  auto config = dir_.write("nodewatch.toml", Config("15s"));
  for (const fs::path& cfg : {config, dir_.path() / "missing.toml"}) {
    DaemonProcess::Options o;
    o.args = Args(cfg);
    o.args.push_back("--list-metrics");
    o.stdout_file = dir_.path() / "families";
    DaemonProcess d(o, dir_.path() / "list.log");
    ASSERT_EQ(d.wait(10s), 0) << d.log();
    std::string families = ReadFile(dir_.path() / "families");
    EXPECT_NE(families.find("nodewatch_storage_probe_duration_seconds histogram\n"),
              std::string::npos);
    EXPECT_NE(families.find("nodewatch_accelerator_up gauge\n"), std::string::npos);
    EXPECT_NE(families.find("nodewatch_interconnect_port_state gauge\n"), std::string::npos);
    EXPECT_EQ(d.log(), "");  // not even "configuration not found"
  }
  EXPECT_TRUE(fs::is_empty(dir_.path() / "probed"));
}

// A real collector's partial failure, end to end: one port's PMA counter
// file (read every collection here: pma_interval 0) answers what is not a
// number for several collections; the log says so once, naming the port
// and the file, and once when it reads again. The file is rewritten in
// place: the collector holds its descriptor, as it would a sysfs
// attribute's, so a new file under the old name would not be seen (a sysfs
// attribute is never replaced but with its device, whose held descriptors
// then answer ENODEV and are opened afresh).
TEST_F(ReloadTest, APartialFailureIsLoggedOnceWhenItStartsAndOnceWhenItEnds) {
  auto config = dir_.write("nodewatch.toml", Config("15s"));
  DaemonProcess::Options o;
  o.args = Args(config);
  DaemonProcess d(o, dir_.path() / "log");
  ASSERT_TRUE(d.port()) << d.log();
  ASSERT_TRUE(d.wait_log("first collection round complete")) << d.log();
  const fs::path file = dir_.path() / "sys/class/infiniband/mlx5_0/ports/1/counters/port_rcv_data";
  const std::string saved = ReadFile(file);
  std::ofstream(file) << "garbage\n";
  const std::string started =
      "interconnect: parse_error: mlx5_0/1: malformed counters/port_rcv_data";
  ASSERT_TRUE(d.wait_log(started)) << d.log();
  // Several collections (every 200 ms) while it fails: still one line.
  std::this_thread::sleep_for(1s);
  EXPECT_EQ(CountLog(d, "parse_error: mlx5_0/1"), 1u) << d.log();
  std::ofstream(file) << saved;
  ASSERT_TRUE(d.wait_log("interconnect: parse_error: mlx5_0/1: recovered after ([0-9]+) failures"))
      << d.log();
  auto failures = d.wait_log("mlx5_0/1: recovered after ([0-9]+) failures");
  ASSERT_TRUE(failures);
  EXPECT_GE(std::stoi(*failures), 3);
  std::this_thread::sleep_for(500ms);
  EXPECT_EQ(CountLog(d, "parse_error: mlx5_0/1"), 2u) << d.log();
  d.signal(SIGTERM);
  EXPECT_EQ(d.wait(5s), 0);
}

// A configuration path that is not a regular file at a SIGHUP: a FIFO
// nobody writes (opened, it would wait) and a directory (read, it would be
// an empty file: the defaults). Each reload is rejected at once, saying
// why; the running configuration keeps serving.
TEST_F(ReloadTest, AReloadRefusesAConfigurationThatIsNotARegularFile) {
  auto config = dir_.write("nodewatch.toml", Config("15s"));
  DaemonProcess::Options o;
  o.args = Args(config);
  DaemonProcess d(o, dir_.path() / "log");
  auto port = d.port();
  ASSERT_TRUE(port) << d.log();
  ASSERT_TRUE(d.wait_log("first collection round complete")) << d.log();
  const std::string saved = ReadFile(config);
  fs::remove(config);
  ASSERT_EQ(::mkfifo(config.c_str(), 0644), 0);
  d.signal(SIGHUP);
  ASSERT_TRUE(
      d.wait_log("reload rejected: .*nodewatch.toml: the configuration is not a regular file", 3s))
      << d.log();
  auto healthy = Request(*port, "GET", "/-/healthy");
  ASSERT_TRUE(healthy);
  EXPECT_EQ(healthy->status, 200);
  fs::remove(config);
  fs::create_directory(config);
  d.signal(SIGHUP);
  ASSERT_TRUE(
      Eventually([&] { return CountLog(d, "the configuration is not a regular file") == 2; }, 3s))
      << d.log();
  auto metrics = Request(*port, "GET", "/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("nodewatch_config_last_reload_successful 0\n"), std::string::npos);
  EXPECT_NE(metrics->body.find("nodewatch_collector_up{collector=\"interconnect\"} 1\n"),
            std::string::npos);
  fs::remove(config);
  std::ofstream(config) << saved;
  d.signal(SIGHUP);
  ASSERT_TRUE(d.wait_log("configuration reloaded", 3s)) << d.log();
  d.signal(SIGTERM);
  EXPECT_EQ(d.wait(5s), 0);
}

}  // namespace
}  // namespace nodewatch
