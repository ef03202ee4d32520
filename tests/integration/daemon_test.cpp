// The real nodewatchd binary under the conditions systemd and operators put
// it in: sd_notify protocol, watchdog, reload, shutdown with a stuck
// collector, socket activation, --check-config.

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "app.hpp"
#include "support/daemon_process.hpp"
#include "support/http_client.hpp"
#include "support/paths.hpp"

namespace nodewatch {
namespace {

using namespace std::chrono_literals;
using testing::BinaryPath;
using testing::DaemonProcess;
using testing::ReadFile;
using testing::Request;
using testing::SampleValue;
using testing::TempDir;
using testing::TestSections;

std::string FixtureArgsSys() {
  return (std::filesystem::path(NODEWATCH_FIXTURES_DIR) / "storage" / "sys").string();
}
std::string FixtureArgsProc() {
  return (std::filesystem::path(NODEWATCH_FIXTURES_DIR) / "storage" / "proc").string();
}

// A datagram socket standing in for systemd's notify socket.
class NotifySocket {
 public:
  explicit NotifySocket(const std::filesystem::path& path) : path_(path) {
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  }
  ~NotifySocket() { ::close(fd_); }
  std::string env() const { return "NOTIFY_SOCKET=" + path_.string(); }

  // The next datagram, or nullopt after `limit`.
  std::optional<std::string> next(std::chrono::milliseconds limit = 5s) {
    timeval tv{};
    tv.tv_sec = limit.count() / 1000;
    tv.tv_usec = (limit.count() % 1000) * 1000;
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char buf[4096];
    ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
    if (n < 0) return std::nullopt;
    return std::string(buf, static_cast<std::size_t>(n));
  }
  // Skips datagrams until one contains `what`; returns it.
  std::optional<std::string> until(std::string_view what, std::chrono::milliseconds limit = 5s,
                                   std::vector<std::string>* skipped = nullptr) {
    auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          end - std::chrono::steady_clock::now());
      auto m = next(std::max(left, 1ms));
      if (!m) return std::nullopt;
      if (m->find(what) != std::string::npos) return m;
      if (skipped) skipped->push_back(*m);
    }
    return std::nullopt;
  }

 private:
  std::filesystem::path path_;
  int fd_;
};

std::vector<std::string> BaseArgs(const std::filesystem::path& config) {
  return {"--config", config.string(),  "--listen", "127.0.0.1:0",
          "--sysfs",  FixtureArgsSys(), "--procfs", FixtureArgsProc()};
}

TEST(DaemonTest, NotifyProtocolReadyWatchdogReloadStopping) {
  TempDir dir;
  auto config = dir.write("nodewatch.toml", "");
  NotifySocket sock(dir.path() / "notify");
  DaemonProcess::Options o;
  o.args = BaseArgs(config);
  o.env = {sock.env(), "WATCHDOG_USEC=400000"};
  o.unset_env = {"WATCHDOG_PID"};
  DaemonProcess d(o, dir.path() / "log");

  auto ready = sock.until("READY=1");
  ASSERT_TRUE(ready) << d.log();
  EXPECT_NE(ready->find("STATUS=collectors up"), std::string::npos) << *ready;
  // Readiness is announced only once listening and after the first round.
  auto port = d.port();
  ASSERT_TRUE(port);
  EXPECT_EQ(Request(*port, "GET", "/-/ready")->status, 200);

  // WATCHDOG=1 at half of WATCHDOG_USEC: about 5 pings in one second.
  int pings = 0;
  auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < 1000ms) {
    auto m = sock.next(300ms);
    if (m && *m == "WATCHDOG=1") ++pings;
  }
  EXPECT_GE(pings, 3);
  EXPECT_LE(pings, 7);

  d.signal(SIGHUP);
  auto reloading = sock.until("RELOADING=1");
  ASSERT_TRUE(reloading);
  EXPECT_NE(reloading->find("MONOTONIC_USEC="), std::string::npos);
  EXPECT_TRUE(sock.until("READY=1"));

  d.signal(SIGTERM);
  EXPECT_TRUE(sock.until("STOPPING=1"));
  EXPECT_EQ(d.wait(5s), 0);
}

TEST(DaemonTest, ReloadIsAllOrNothing) {
  TempDir dir;
  auto config = dir.write("nodewatch.toml", "[collectors.storage]\ninterval = \"20s\"\n");
  DaemonProcess::Options o;
  o.args = BaseArgs(config);
  DaemonProcess d(o, dir.path() / "log");
  auto port = d.port();
  ASSERT_TRUE(port) << d.log();
  auto interval = [&] {
    auto r = Request(*port, "GET", "/metrics");
    return SampleValue(r->body, "nodewatch_collector_interval_seconds{collector=\"storage\"}");
  };
  auto reload_ok = [&] {
    auto r = Request(*port, "GET", "/metrics");
    return SampleValue(r->body, "nodewatch_config_last_reload_successful");
  };
  EXPECT_EQ(interval(), 20);
  EXPECT_EQ(reload_ok(), 1);

  // A broken file (one good change, one bad key) changes nothing.
  dir.write("nodewatch.toml",
            "[collectors.storage]\ninterval = \"30s\"\nbogus = 1\n" + TestSections(dir.path()));
  d.signal(SIGHUP);
  ASSERT_TRUE(
      d.wait_log("reload rejected: .*nodewatch.toml:3:1: collectors.storage.bogus: unknown key"))
      << d.log();
  EXPECT_EQ(reload_ok(), 0);
  EXPECT_EQ(interval(), 20);

  // A good file applies.
  dir.write("nodewatch.toml",
            "[collectors.storage]\ninterval = \"30s\"\n" + TestSections(dir.path()));
  d.signal(SIGHUP);
  ASSERT_TRUE(d.wait_log("configuration reloaded"));
  EXPECT_EQ(reload_ok(), 1);
  EXPECT_EQ(interval(), 30);

  // Disabling a collector withdraws its series.
  std::string all_off;
  for (const CollectorSpec& spec : builtin_collectors())
    all_off += "[collectors." + std::string(spec.name) + "]\nenabled = false\n";
  dir.write("nodewatch.toml", all_off);
  d.signal(SIGHUP);
  ASSERT_TRUE(d.wait_log("configuration reloaded; 0 collector"));
  auto body = Request(*port, "GET", "/metrics")->body;
  EXPECT_EQ(body.find("nodewatch_storage_"), std::string::npos);
  EXPECT_EQ(body.find("collector=\"storage\""), std::string::npos);
  d.signal(SIGTERM);
  EXPECT_EQ(d.wait(5s), 0);
}

// A thread that never returns from a driver call: the fake NVML's device
// call sleeps for an hour, as a call stuck in the driver's ioctl does. The
// GPU is set aside and reported stuck, the collection goes on, scrapes
// answer, and SIGTERM still ends the daemon within 5 s. (This used a FIFO
// in place of /proc/diskstats; the sources layer now refuses such a file
// at once, and calls that can hang in the kernel are made by helpers.)
TEST(DaemonTest, ExitsWithinFiveSecondsWithAThreadStuckInADriverCall) {
  TempDir dir;
  auto config =
      dir.write("nodewatch.toml", "[nvml]\nlibrary = \"" + std::string(FAKE_NVML_LIBRARY) +
                                      "\"\n[collectors.accelerator]\ninterval = \"1s\"\ntimeout = "
                                      "\"500ms\"\npod_resources_socket = \"\"\n");
  auto scenario =
      dir.write("stuck.scenario", "devices 2\nblock * nvmlDeviceGetPowerUsage 3600000\n");
  DaemonProcess::Options o;
  o.args = {"--config", config.string(),  "--listen", "127.0.0.1:0",
            "--sysfs",  FixtureArgsSys(), "--procfs", FixtureArgsProc()};
  o.env = {"FAKE_NVML_SCENARIO=" + scenario.string()};
  DaemonProcess d(o, dir.path() / "log");
  auto port = d.port();
  ASSERT_TRUE(port) << d.log();
  ASSERT_TRUE(d.wait_log("is stuck in a driver call")) << d.log();
  ASSERT_TRUE(d.wait_log("first collection round complete")) << d.log();
  auto r = Request(*port, "GET", "/metrics");
  ASSERT_TRUE(r);
  EXPECT_EQ(SampleValue(r->body, "nodewatch_collector_up{collector=\"accelerator\"}"), 1);
  EXPECT_GE(SampleValue(r->body,
                        "nodewatch_collector_errors_total{collector=\"accelerator\","
                        "reason=\"device_stuck\"}"),
            1);
  EXPECT_EQ(Request(*port, "GET", "/-/ready")->status, 200);
  auto t0 = std::chrono::steady_clock::now();
  d.signal(SIGTERM);
  auto rc = d.wait(5s);
  ASSERT_TRUE(rc) << "still running 5 s after SIGTERM\n" << d.log();
  EXPECT_EQ(*rc, 0);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
}

// A TCP socket bound to a free loopback port (-1 when it cannot be), and the port.
int LoopbackSocket(std::uint16_t* port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (fd >= 0) ::close(fd);
    return -1;
  }
  *port = ntohs(addr.sin_port);
  return fd;
}

TEST(DaemonTest, SocketActivation) {
  TempDir dir;
  auto config = dir.write("nodewatch.toml", "");
  std::uint16_t port = 0;
  int lfd = LoopbackSocket(&port);
  ASSERT_GE(lfd, 0);
  ASSERT_EQ(::listen(lfd, 16), 0);
  DaemonProcess::Options o;
  // The configured address would fail to bind if it were used.
  o.args = {"--config", config.string(),  "--listen", "203.0.113.1:1",
            "--sysfs",  FixtureArgsSys(), "--procfs", FixtureArgsProc()};
  o.pass_fds = {lfd};
  o.listen_fds = true;
  DaemonProcess d(o, dir.path() / "log");
  ::close(lfd);
  ASSERT_TRUE(d.wait_log("socket activation")) << d.log();
  auto r = Request(port, "GET", "/-/healthy");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  d.signal(SIGTERM);
  EXPECT_EQ(d.wait(5s), 0);
}

// The same through systemd's own socket activation, systemd-socket-activate
// (the systemd package): it listens, and on the first connection runs the
// daemon with LISTEN_FDS and LISTEN_PID as systemd sets them.
TEST(DaemonTest, SocketActivationBySystemdSocketActivate) {
  const std::filesystem::path activate = "/usr/bin/systemd-socket-activate";
  if (!std::filesystem::exists(activate))
    GTEST_SKIP() << activate << " is missing (Debian's systemd package)";
  TempDir dir;
  auto config = dir.write("nodewatch.toml", "");
  // A free port: bound, read, closed.
  std::uint16_t port = 0;
  const int probe = LoopbackSocket(&port);
  ASSERT_GE(probe, 0);
  ::close(probe);
  DaemonProcess::Options o;
  o.program = activate;
  o.args = {"-l",
            "127.0.0.1:" + std::to_string(port),
            BinaryPath(),
            "--config",
            config.string(),
            "--listen",
            "203.0.113.1:1",
            "--sysfs",
            FixtureArgsSys(),
            "--procfs",
            FixtureArgsProc()};
  DaemonProcess d(o, dir.path() / "log");
  std::optional<testing::TestConnection::Response> r;
  for (int i = 0; i < 100 && !r; ++i) {
    r = Request(port, "GET", "/-/healthy");
    if (!r) std::this_thread::sleep_for(50ms);
  }
  ASSERT_TRUE(r) << d.log();
  EXPECT_EQ(r->status, 200);
  EXPECT_TRUE(d.wait_log("socket activation")) << d.log();
  d.signal(SIGTERM);
  EXPECT_EQ(d.wait(5s), 0) << d.log();
}

TEST(DaemonTest, SocketActivationRefusesASocketThatIsNotListening) {
  TempDir dir;
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);  // bound, never listen()ed
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  DaemonProcess::Options o;
  o.args = {"--config", dir.write("c.toml", "").string(),
            "--sysfs",  FixtureArgsSys(),
            "--procfs", FixtureArgsProc()};
  o.pass_fds = {fd};
  o.listen_fds = true;
  DaemonProcess d(o, dir.path() / "log");
  ::close(fd);
  EXPECT_EQ(d.wait(5s), 1);
  EXPECT_NE(d.log().find("is not a listening socket"), std::string::npos) << d.log();
}

// A GPU driver that misbehaves hurts neither the other GPUs, nor the other
// collectors, nor the scrape. Runs the real binary over the fake NVML.
struct GpuFault {
  const char* name;
  const char* library;   // which fake build
  const char* scenario;  // tests/fixtures/nvml/...
};

class DaemonGpuFaultTest : public ::testing::TestWithParam<GpuFault> {};

TEST_P(DaemonGpuFaultTest, OtherDevicesCollectorsAndScrapeKeepWorking) {
  const GpuFault& f = GetParam();
  TempDir dir;
  auto config = dir.write(
      "nodewatch.toml", std::string("[nvml]\nlibrary = \"") + f.library + "\"\n" +
                            "[collectors.accelerator]\ninterval = \"2s\"\n" + "timeout = \"1s\"\n");
  DaemonProcess::Options o;
  o.args = BaseArgs(config);
  o.env = {"FAKE_NVML_SCENARIO=" +
           (std::filesystem::path(NODEWATCH_FIXTURES_DIR) / "nvml" / f.scenario).string()};
  DaemonProcess d(o, dir.path() / "log");
  auto port = d.port();
  ASSERT_TRUE(port) << d.log();
  for (int i = 0; i < 300 && Request(*port, "GET", "/-/ready")->status != 200; ++i)
    std::this_thread::sleep_for(10ms);
  auto t0 = std::chrono::steady_clock::now();
  auto r = Request(*port, "GET", "/metrics");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);  // the scrape never waits for a driver
  const std::string& body = r->body;
  EXPECT_EQ(SampleValue(body, "nodewatch_collector_up{collector=\"storage\"}"), 1) << d.log();
  EXPECT_EQ(SampleValue(body, "nodewatch_collector_up{collector=\"pcie\"}"), 1);
  auto gpu_up = [&](int i) {
    return SampleValue(body, "nodewatch_accelerator_up{accelerator=\"" + std::to_string(i) +
                                 "\",uuid=\"GPU-00000000-0000-4000-8000-00000000000" +
                                 std::to_string(i) + "\"}");
  };
  if (std::string(f.name) == "broken_library") {
    EXPECT_EQ(SampleValue(body, "nodewatch_collector_up{collector=\"accelerator\"}"), 0);
    EXPECT_NE(d.log().find("nvmlDeviceGetCount"), std::string::npos) << d.log();
    EXPECT_EQ(body.find("nodewatch_accelerator_up"), std::string::npos);
  } else {
    int bad = std::string(f.name) == "gpu_lost" ? 3 : 6;
    EXPECT_EQ(SampleValue(body, "nodewatch_collector_up{collector=\"accelerator\"}"), 1) << d.log();
    for (int i = 0; i < 8; ++i)
      EXPECT_EQ(gpu_up(i), i == bad ? 0 : 1) << "GPU " << i << "\n" << body;
  }
  d.signal(SIGTERM);
  EXPECT_EQ(d.wait(5s), 0);
}

INSTANTIATE_TEST_SUITE_P(
    Faults, DaemonGpuFaultTest,
    ::testing::Values(GpuFault{"gpu_lost", FAKE_NVML_LIBRARY, "gpu_lost.scenario"},
                      GpuFault{"blocking_call", FAKE_NVML_LIBRARY, "blocking.scenario"},
                      GpuFault{"broken_library", FAKE_NVML_BROKEN_LIBRARY, "eight_gpus.scenario"}),
    [](const ::testing::TestParamInfo<GpuFault>& i) { return std::string(i.param.name); });

// --- One NVML for the whole daemon ([nvml] library, the NVML service). ---

std::string NvmlScenario(const char* name) {
  return (std::filesystem::path(NODEWATCH_FIXTURES_DIR) / "nvml" / name).string();
}

std::string Gpu(int i) {
  return "accelerator=\"" + std::to_string(i) + "\",uuid=\"GPU-00000000-0000-4000-8000-0000000000" +
         (i < 10 ? "0" : "") + std::to_string(i) + "\"";
}

std::size_t CountLines(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = 0; (at = text.find(what, at)) != std::string::npos; at += what.size()) ++n;
  return n;
}

// The daemon's threads, by name (/proc/<pid>/task/*/comm).
std::vector<std::string> ThreadNames(pid_t pid) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& task :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    std::string name = testing::ReadFile(task.path() / "comm");
    while (!name.empty() && name.back() == '\n') name.pop_back();
    names.push_back(name);
  }
  return names;
}

// Scrapes until `done` holds (at most 15 s); returns the last body.
std::string ScrapeUntil(std::uint16_t port, const std::function<bool(const std::string&)>& done) {
  std::string body;
  const auto until = std::chrono::steady_clock::now() + 15s;
  while (std::chrono::steady_clock::now() < until) {
    auto r = Request(port, "GET", "/metrics");
    if (r) body = r->body;
    if (done(body)) break;
    std::this_thread::sleep_for(50ms);
  }
  return body;
}

std::string NvmlConfig(const std::string& library, const char* accelerator_interval = "2s",
                       const char* accelerator_timeout = "1s") {
  return "[nvml]\nlibrary = \"" + library + "\"\n[collectors.accelerator]\ninterval = \"" +
         accelerator_interval + "\"\ntimeout = \"" + accelerator_timeout +
         "\"\n[collectors.interconnect]\ninterval = \"2s\"\ntimeout = \"1s\"\n";
}

// [nvml] library set once: GPU metrics from the accelerator collector and
// NVLink metrics from the interconnect collector, from one nvmlInit, one
// thread per GPU and one XID thread, and one "loaded" line in the log.
TEST(DaemonNvmlTest, OneLibraryGivesGpuAndNvlinkMetricsFromOneInitAndOneThreadPerGpu) {
  constexpr int kGpus = 8;
  TempDir dir;
  auto config = dir.write("nodewatch.toml", NvmlConfig(FAKE_NVML_LIBRARY));
  const auto init_log = dir.path() / "inits";
  DaemonProcess::Options o;
  o.args = BaseArgs(config);
  o.env = {"FAKE_NVML_SCENARIO=" + NvmlScenario("eight_gpus.scenario"),
           "FAKE_NVML_INIT_LOG=" + init_log.string()};
  DaemonProcess d(o, dir.path() / "log");
  auto port = d.port();
  ASSERT_TRUE(port) << d.log();
  const std::string last = "{" + Gpu(kGpus - 1) + "}";
  const std::string body = ScrapeUntil(*port, [&](const std::string& b) {
    return SampleValue(b, "nodewatch_accelerator_up" + last) &&
           SampleValue(b, "nodewatch_accelerator_nvlink_links_active" + last);
  });
  for (int i = 0; i < kGpus; ++i) {
    const std::string gpu = "{" + Gpu(i) + "}";
    EXPECT_EQ(SampleValue(body, "nodewatch_accelerator_up" + gpu), 1) << body;
    EXPECT_EQ(SampleValue(body, "nodewatch_accelerator_nvlink_links_active" + gpu), 18) << body;
    EXPECT_EQ(SampleValue(body, "nodewatch_nvlink_up{" + Gpu(i) + ",link=\"17\"}"), 1);
  }
  EXPECT_EQ(SampleValue(body, "nodewatch_collector_up{collector=\"accelerator\"}"), 1);
  EXPECT_EQ(SampleValue(body, "nodewatch_collector_up{collector=\"interconnect\"}"), 1);

  EXPECT_EQ(CountLines(testing::ReadFile(init_log), "nvmlInit "), 1u);
  const std::string log = d.log();
  EXPECT_EQ(CountLines(log, "loaded, driver 580.65.06"), 1u) << log;

  // Threads: by name, one per GPU and the XID thread; and counted against
  // the same daemon without NVML, so that no unnamed thread hides.
  const std::vector<std::string> names = ThreadNames(d.pid());
  std::size_t nvml = 0;
  for (const std::string& n : names) nvml += n.rfind("nw-nvml-", 0) == 0 ? 1 : 0;
  EXPECT_EQ(nvml, kGpus + 1u);
  TempDir dir2;
  DaemonProcess::Options o2;
  o2.args = BaseArgs(dir2.write("nodewatch.toml", NvmlConfig("/nonexistent/libnvidia-ml.so.1")));
  DaemonProcess without(o2, dir2.path() / "log");
  auto port2 = without.port();
  ASSERT_TRUE(port2) << without.log();
  ScrapeUntil(*port2, [](const std::string& b) {
    return SampleValue(b, "nodewatch_collector_up{collector=\"accelerator\"}") &&
           SampleValue(b, "nodewatch_collector_up{collector=\"interconnect\"}");
  });
  const std::size_t base = ThreadNames(without.pid()).size();
  EXPECT_LE(names.size(), base + kGpus + 2)
      << names.size() << " threads, " << base << " without NVML";
  std::printf("daemon threads: %zu with 8 fake GPUs (%zu nw-nvml-*), %zu without NVML\n",
              names.size(), nvml, base);
  d.signal(SIGTERM);
  without.signal(SIGTERM);
  EXPECT_EQ(d.wait(5s), 0);
  EXPECT_EQ(without.wait(5s), 0);
}

// XIDs 79, 48, 48, delivered once for the daemon's life: counted the same
// after three reloads that keep the collector, and after a reload that
// rebuilds it (its interval changed): the counts are the NVML service's.
TEST(DaemonNvmlTest, XidCountsSurviveReloadsAndARebuiltAcceleratorCollector) {
  TempDir dir;
  auto scenario =
      dir.write("xid.scenario", "devices 8\nevents_once\nxid 2 79\nxid 2 48\nxid 2 48\n");
  auto config = dir.write("nodewatch.toml", NvmlConfig(FAKE_NVML_LIBRARY, "1s", "500ms"));
  const auto init_log = dir.path() / "inits";
  DaemonProcess::Options o;
  o.args = BaseArgs(config);
  o.env = {"FAKE_NVML_SCENARIO=" + scenario.string(), "FAKE_NVML_INIT_LOG=" + init_log.string()};
  DaemonProcess d(o, dir.path() / "log");
  auto port = d.port();
  ASSERT_TRUE(port) << d.log();
  const std::string xid48 = "nodewatch_accelerator_xid_errors_total{" + Gpu(2) + ",xid=\"48\"}";
  const std::string xid79 = "nodewatch_accelerator_xid_errors_total{" + Gpu(2) + ",xid=\"79\"}";
  std::string body = ScrapeUntil(*port, [&](const std::string& b) {
    return SampleValue(b, xid48) == 2 && SampleValue(b, xid79) == 1;
  });
  ASSERT_EQ(SampleValue(body, xid48), 2) << body << d.log();
  ASSERT_EQ(SampleValue(body, xid79), 1);

  auto reload = [&](std::size_t n) {
    d.signal(SIGHUP);
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (CountLines(d.log(), "configuration reloaded") < n &&
           std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(10ms);
    return CountLines(d.log(), "configuration reloaded") >= n;
  };
  auto last_success = [&](const std::string& b) {
    return SampleValue(b,
                       "nodewatch_collector_last_success_timestamp_seconds{collector="
                       "\"accelerator\"}")
        .value_or(0);
  };
  for (std::size_t n = 1; n <= 3; ++n) {
    ASSERT_TRUE(reload(n)) << d.log();
    // A collection after the reload, not the snapshot from before it.
    const double before = last_success(Request(*port, "GET", "/metrics")->body);
    body = ScrapeUntil(*port, [&](const std::string& b) { return last_success(b) > before; });
    EXPECT_GT(last_success(body), before);
    EXPECT_EQ(SampleValue(body, xid48), 2) << "after reload " << n << "\n" << body;
    EXPECT_EQ(SampleValue(body, xid79), 1);
  }

  // A changed interval rebuilds the accelerator collector.
  dir.write("nodewatch.toml", NvmlConfig(FAKE_NVML_LIBRARY, "2s", "1s"));
  const double reloaded_at =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  ASSERT_TRUE(reload(4)) << d.log();
  body = ScrapeUntil(*port, [&](const std::string& b) {
    return SampleValue(b, "nodewatch_collector_interval_seconds{collector=\"accelerator\"}") == 2 &&
           last_success(b) > reloaded_at;
  });
  EXPECT_EQ(SampleValue(body, "nodewatch_collector_interval_seconds{collector=\"accelerator\"}"),
            2);
  EXPECT_GT(last_success(body), reloaded_at) << "the rebuilt collector never collected";
  EXPECT_EQ(SampleValue(body, xid48), 2) << body;
  EXPECT_EQ(SampleValue(body, xid79), 1);
  EXPECT_EQ(CountLines(testing::ReadFile(init_log), "nvmlInit "), 1u);
  d.signal(SIGTERM);
  EXPECT_EQ(d.wait(5s), 0);
}

// The unit grants no capability (packaging/nodewatch.service): systemd
// opens /dev/kmsg as root and hands it over as standard input. As an
// unprivileged user with no capability, the real kernel log is read
// through that descriptor; with neither it nor CAP_SYSLOG, where
// kernel.dmesg_restrict=1 (Debian's default), it is not, and the daemon
// says why and serves on; CAP_SYSLOG alone (a container, another init)
// opens it. The log is only read.
TEST(DaemonTest, ReadsTheRealKernelLogThroughTheDescriptorItsUnitOpens) {
  if (::geteuid() != 0)
    GTEST_SKIP() << "NOT CHECKED: opening /dev/kmsg, then running as another user, needs root";
  if (::access("/usr/bin/setpriv", X_OK) != 0)
    GTEST_SKIP() << "NOT CHECKED: /usr/bin/setpriv (util-linux) is missing";
  if (::access("/dev/kmsg", R_OK) != 0) GTEST_SKIP() << "NOT CHECKED: no /dev/kmsg here";
  TempDir dir;
  ::chmod(dir.path().c_str(), 0755);
  std::filesystem::create_directories(dir.path() / "state");
  ASSERT_EQ(::chown((dir.path() / "state").c_str(), 65534, 65534), 0) << std::strerror(errno);
  std::string config;
  for (const CollectorSpec& spec : builtin_collectors())
    if (spec.name != "kernel")
      config += "[collectors." + std::string(spec.name) + "]\nenabled = false\n";
  config += "[collectors.kernel]\nstate_file = \"" +
            (dir.path() / "state" / "kernel.state").string() + "\"\n";
  auto file = dir.write("nodewatch.toml", config);
  ::chmod(file.c_str(), 0644);
  const bool restricted = ReadFile("/proc/sys/kernel/dmesg_restrict").rfind("1", 0) == 0;
  enum class Way { kDescriptor, kCapSyslog, kNeither };
  for (Way way : {Way::kDescriptor, Way::kCapSyslog, Way::kNeither}) {
    SCOPED_TRACE(way == Way::kDescriptor  ? "standard input opened by root, no capability"
                 : way == Way::kCapSyslog ? "CAP_SYSLOG alone"
                                          : "neither");
    std::filesystem::remove(dir.path() / "state" / "kernel.state");
    DaemonProcess::Options o;
    o.args = {"--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
              "--bounding-set=-all"};
    if (way == Way::kCapSyslog) {
      o.args = {"--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all,+syslog",
                "--ambient-caps=+syslog"};
    }
    if (way == Way::kDescriptor) o.stdin_file = "/dev/kmsg";
    o.args.insert(o.args.end(), {BinaryPath().string(), "--config", file.string(), "--once"});
    o.program = "/usr/bin/setpriv";
    o.stdout_file = dir.path() / "out";
    DaemonProcess d(o, dir.path() / "log");
    ASSERT_EQ(d.wait(30s), 0) << d.log();
    const std::string out = ReadFile(dir.path() / "out");
    const bool readable = way != Way::kNeither || !restricted;
    EXPECT_EQ(SampleValue(out, "nodewatch_kernel_log_up"), readable ? 1 : 0) << d.log();
    if (readable) {
      // The whole ring buffer was read: its first record is this boot's.
      EXPECT_TRUE(SampleValue(out, "nodewatch_kernel_log_last_record_timestamp_seconds"));
      EXPECT_TRUE(std::filesystem::exists(dir.path() / "state" / "kernel.state"));
    } else {
      EXPECT_NE(d.log().find("log_unreadable: /dev/kmsg: Operation not permitted (where "
                             "kernel.dmesg_restrict=1, reading it needs CAP_SYSLOG or the log "
                             "opened as standard input"),
                std::string::npos)
          << d.log();
    }
  }
}

// Standard input that is the kernel log is taken off fd 0 (nothing started
// from the daemon inherits it; /dev/null takes its place) and read there
// by the daemon, as it runs under its unit.
TEST(DaemonTest, TakesTheKernelLogOffStandardInputAndReadsItWhole) {
  const int probe = ::open("/dev/kmsg", O_RDONLY | O_CLOEXEC);
  if (probe < 0)
    GTEST_SKIP() << "NOT CHECKED: /dev/kmsg cannot be opened here: " << std::strerror(errno);
  ::close(probe);
  TempDir dir;
  std::string config;
  for (const CollectorSpec& spec : builtin_collectors())
    if (spec.name != "kernel")
      config += "[collectors." + std::string(spec.name) + "]\nenabled = false\n";
  config +=
      "[collectors.kernel]\nstate_file = \"" + (dir.path() / "kernel.state").string() + "\"\n";
  DaemonProcess::Options o;
  o.args = BaseArgs(dir.write("nodewatch.toml", config));
  o.stdin_file = "/dev/kmsg";
  DaemonProcess d(o, dir.path() / "log");
  auto port = d.port();
  ASSERT_TRUE(port) << d.log();
  std::error_code ec;
  EXPECT_EQ(std::filesystem::read_symlink("/proc/" + std::to_string(d.pid()) + "/fd/0", ec),
            "/dev/null")
      << ec.message();
  const std::string body = ScrapeUntil(*port, [](const std::string& b) {
    return SampleValue(b, "nodewatch_kernel_log_last_record_timestamp_seconds").has_value();
  });
  EXPECT_EQ(SampleValue(body, "nodewatch_kernel_log_up"), 1) << d.log();
  EXPECT_TRUE(SampleValue(body, "nodewatch_kernel_log_last_record_timestamp_seconds")) << body;
  d.signal(SIGTERM);
  EXPECT_EQ(d.wait(5s), 0) << d.log();
}

TEST(DaemonTest, CheckConfig) {
  TempDir dir;
  auto good = dir.write("good.toml", "[server]\nmax_connections = 4\n");
  auto bad = dir.write("bad.toml", "[server]\nmax_connections = 0\n[collectors.nosuch]\n");
  {
    DaemonProcess::Options o;
    o.args = {"--check-config", "--config", good.string()};
    o.stdout_file = dir.path() / "out";
    DaemonProcess d(o, dir.path() / "log");
    EXPECT_EQ(d.wait(5s), 0);
    EXPECT_EQ(testing::ReadFile(dir.path() / "out"), "configuration OK (" + good.string() + ")\n");
  }
  {
    DaemonProcess::Options o;
    o.args = {"--check-config", "--config", bad.string()};
    o.add_test_sections = false;  // the lines stay where the messages say
    DaemonProcess d(o, dir.path() / "log");
    EXPECT_EQ(d.wait(5s), 1);
    std::string log = d.log();
    EXPECT_NE(log.find(bad.string() + ":2:19: server.max_connections: value 0 is out of range"),
              std::string::npos)
        << log;
    EXPECT_NE(log.find(bad.string() + ":3:13: collectors.nosuch: unknown collector"),
              std::string::npos)
        << log;
    EXPECT_NE(log.find("2 error(s)"), std::string::npos);
  }
  {
    DaemonProcess::Options o;
    o.args = {"--check-config", "--config", (dir.path() / "missing.toml").string()};
    DaemonProcess d(o, dir.path() / "log");
    EXPECT_EQ(d.wait(5s), 1);
    EXPECT_NE(d.log().find("no such file"), std::string::npos);
  }
}

TEST(DaemonTest, CheckConfigRefusesAStatePathThatIsNotARegularFile) {
  // A FIFO where the state file is named (a device such as /dev/null the
  // same): refused by the check, and the FIFO left as it was.
  TempDir dir;
  const auto fifo = dir.path() / "state";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  auto config =
      dir.write("c.toml", "[collectors.kernel]\nstate_file = \"" + fifo.string() +
                              "\"\nkmsg_path = \"" + (dir.path() / "kmsg").string() + "\"\n");
  DaemonProcess::Options o;
  o.args = {"--check-config", "--config", config.string()};
  DaemonProcess d(o, dir.path() / "log");
  EXPECT_EQ(d.wait(5s), 1);
  EXPECT_NE(d.log().find("collectors.kernel.state_file: " + fifo.string() +
                         " is a FIFO, not a regular file"),
            std::string::npos)
      << d.log();
  EXPECT_TRUE(std::filesystem::is_fifo(std::filesystem::symlink_status(fifo)));
}

TEST(DaemonTest, BadCommandLineAndBadListenFailClearly) {
  TempDir dir;
  {
    DaemonProcess::Options o;
    o.args = {"--no-such-flag"};
    DaemonProcess d(o, dir.path() / "log");
    EXPECT_NE(d.wait(5s), 0);
  }
  {
    DaemonProcess::Options o;
    o.args = {"--config", dir.write("c.toml", "").string(), "--listen", "203.0.113.1:1"};
    DaemonProcess d(o, dir.path() / "log2");
    EXPECT_EQ(d.wait(5s), 1);
    EXPECT_NE(d.log().find("cannot listen on \"203.0.113.1:1\""), std::string::npos) << d.log();
  }
}

TEST(DaemonTest, TooFewFileDescriptorsExitOneWithAMessage) {
  // RLIMIT_NOFILE 8 (set by prlimit, util-linux, before it runs the
  // binary): the daemon and --once cannot get a descriptor they need at
  // start; they say so and exit 1, never abort.
  if (::access("/usr/bin/prlimit", X_OK) != 0)
    GTEST_SKIP() << "NOT CHECKED: /usr/bin/prlimit (util-linux) is missing";
  TempDir dir;
  auto config = dir.write("c.toml", "");
  for (bool once : {true, false}) {
    SCOPED_TRACE(once ? "--once" : "the daemon");
    DaemonProcess::Options o;
    o.program = "/usr/bin/prlimit";
    o.args = {"--nofile=8", BinaryPath().string(), "--config", config.string()};
    if (once) {
      o.args.push_back("--once");
    } else {
      o.args.insert(o.args.end(), {"--listen", "127.0.0.1:0"});
    }
    DaemonProcess d(o, dir.path() / "log");
    EXPECT_EQ(d.wait(30s), 1) << d.log();
    EXPECT_NE(d.log().find("nodewatchd: cannot run: "), std::string::npos) << d.log();
    EXPECT_NE(d.log().find("at most 8 open files (RLIMIT_NOFILE)"), std::string::npos) << d.log();
  }
}

}  // namespace
}  // namespace nodewatch
