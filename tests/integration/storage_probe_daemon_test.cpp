// The storage collector against real storage: the real nodewatchd binary
// with a probe whose file a lease is held on (an open() that waits,
// killably), probes of directories where someone put a FIFO or a directory
// at the probe file's name, a probe on a file system
// remounted read-only, and agreement with Debian's prometheus-node-exporter
// on the same procfs tree.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>  // before support/collector_test.hpp
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "storage/storage_collector.hpp"
#include "support/collector_test.hpp"
#include "support/daemon_process.hpp"
#include "support/eventually.hpp"
#include "support/http_client.hpp"
#include "support/lease.hpp"
#include "support/scrape.hpp"

namespace nodewatch {
namespace {

using namespace std::chrono_literals;
using nodewatch::testing::Eventually;
using storage::ProbeConfig;
using storage::ProbeOp;
using storage::StorageCollector;
using storage::StorageOptions;
using testing::DaemonProcess;
using testing::LastSuccess;
using testing::Lease;
using testing::ReadFile;
using testing::Request;
using testing::SampleValue;
using testing::ScrapeFor;
using testing::ScrapeTimes;
using testing::TempDir;

std::filesystem::path storage_fixtures() {
  return testing::fixtures_dir() / "storage";
}

std::string hostname() {
  char buf[256] = {};
  ::gethostname(buf, sizeof(buf) - 1);
  return buf;
}

// The daemon with `config`, on an ephemeral loopback port, reading the
// storage fixture's sysfs and procfs.
DaemonProcess::Options on_storage_fixture(const std::filesystem::path& config) {
  DaemonProcess::Options o;
  o.args = {"--config", config.string(),
            "--listen", "127.0.0.1:0",
            "--sysfs",  (storage_fixtures() / "sys").string(),
            "--procfs", (storage_fixtures() / "proc").string()};
  return o;
}

std::optional<double> scrape_value(std::uint16_t port, const std::string& series) {
  auto r = Request(port, "GET", "/metrics");
  if (!r || r->status != 200) return std::nullopt;
  return SampleValue(r->body, series);
}

// ---------------------------------------------------------------------------
// Hung storage

TEST(StorageProbeDaemon, ABlockingProbeFileTimesOutWithoutHurtingAnythingElse) {
  // A lease held on the probe file: the read's open() waits, as on a
  // hung NFS mount, killably (a FUSE request the server has read is not:
  // hung_mount_test). The helper is abandoned at the probe's timeout and
  // its SIGKILL ends it: each cycle counts ETIMEDOUT on a new helper, and
  // the probe is stuck until an operation answers.
  TempDir dir;
  std::filesystem::path data = dir.path() / "data";
  std::filesystem::create_directories(data);
  auto config = dir.write(
      "nodewatch.toml",
      "[collectors.storage]\ninterval = \"1s\"\ntimeout = \"500ms\"\n"
      "[[collectors.storage.probe]]\npath = \"" +
          data.string() +
          "\"\noperations = [\"stat\", \"read\"]\ninterval = \"1s\"\ntimeout = \"300ms\"\n"
          "[collectors.pcie]\ninterval = \"1s\"\ntimeout = \"500ms\"\n");
  DaemonProcess d(on_storage_fixture(config), dir.path() / "log");
  auto port = d.port();
  ASSERT_TRUE(port) << d.log();
  const std::string p = "{path=\"" + data.string() + "\"";
  const std::string read_success = "nodewatch_storage_probe_success" + p + ",operation=\"read\"}";
  const std::string stuck = "nodewatch_storage_probe_stuck" + p + "}";
  const std::string timeouts =
      "nodewatch_storage_probe_errors_total" + p + ",operation=\"read\",errno=\"ETIMEDOUT\"}";
  ASSERT_TRUE(Eventually([&] { return scrape_value(*port, read_success) == 1.0; }, 10s)) << d.log();
  EXPECT_EQ(scrape_value(*port, stuck), 0.0);

  // A lease is taken on the probe file: each read's open() waits.
  std::filesystem::path file = data / (".nodewatch-probe-" + hostname());
  ASSERT_TRUE(std::filesystem::is_regular_file(file)) << file;
  auto lease = std::make_unique<Lease>(file);
  ASSERT_TRUE(lease->held()) << lease->error();
  // Timed out within one probe interval plus the timeout, exported within
  // one collector interval after that.
  ASSERT_TRUE(Eventually([&] { return scrape_value(*port, timeouts) >= 1.0; }, 5s)) << d.log();

  // All through the hang: scrapes are fast and the collectors keep their cadence.
  auto storage_before = LastSuccess(*port, "storage");
  auto pcie_before = LastSuccess(*port, "pcie");
  ASSERT_TRUE(storage_before && pcie_before);
  ScrapeTimes times = ScrapeFor(*port, 3s, 50ms, [&](const std::string& body) {
    EXPECT_EQ(SampleValue(body, stuck), 1.0);
    EXPECT_EQ(SampleValue(body, "nodewatch_collector_up{collector=\"storage\"}"), 1.0);
  });
  std::printf(
      "scrape latency while the probe times out: %zu scrapes, median %.2f ms, max %.2f ms\n",
      times.ms.size(), times.median(), times.worst());
  EXPECT_LT(times.worst(), 100.0);
  EXPECT_GE(LastSuccess(*port, "storage").value_or(0) - *storage_before, 2.0);  // 1 s cadence
  EXPECT_GE(LastSuccess(*port, "pcie").value_or(0) - *pcie_before, 2.0);

  EXPECT_GE(scrape_value(*port, timeouts).value_or(0), 2.0);  // one per cycle
  EXPECT_EQ(scrape_value(*port, read_success), 0.0);
  EXPECT_EQ(scrape_value(*port, "nodewatch_helper_processes{state=\"abandoned\"}").value_or(9), 0.0)
      << "a helper killed in an interruptible wait is gone at once";

  // The lease is given back: the probe reads again by itself.
  lease.reset();
  ASSERT_TRUE(Eventually([&] { return scrape_value(*port, read_success) == 1.0; }, 5s)) << d.log();
  EXPECT_TRUE(std::filesystem::is_regular_file(file));
  EXPECT_EQ(scrape_value(*port, stuck), 0.0);

  // Waiting again, then SIGTERM: the daemon exits within 5 s all the same.
  lease = std::make_unique<Lease>(file);
  ASSERT_TRUE(lease->held()) << lease->error();
  std::this_thread::sleep_for(1200ms);  // a cycle is waiting on its helper now or soon
  auto t0 = std::chrono::steady_clock::now();
  d.signal(SIGTERM);
  auto rc = d.wait(5s);
  ASSERT_TRUE(rc) << "still running 5 s after SIGTERM with a probe waiting\n" << d.log();
  EXPECT_EQ(*rc, 0) << d.log();
  std::printf(
      "exit after SIGTERM with a probe waiting: %.0f ms\n",
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
}

// Someone who may write a probed directory (a shared scratch space) puts a
// FIFO, or a directory, at the probe file's name before the daemon starts.
// The FIFO must not hold the probe (an open() of it waits for a writer) nor
// the directory leave it failing: each probe gives its verdict on a file of
// its own, leaves what it found as it was, and the log says what that is.
TEST(StorageProbeDaemon, AFifoOrADirectoryAtTheProbeFileNameFailsNothing) {
  TempDir dir;
  const std::filesystem::path with_fifo = dir.path() / "scratch";
  const std::filesystem::path with_dir = dir.path() / "training";
  const std::string name = ".nodewatch-probe-" + hostname();
  std::filesystem::create_directories(with_fifo);
  std::filesystem::create_directories(with_dir / name);
  ASSERT_EQ(::mkfifo((with_fifo / name).c_str(), 0666), 0);
  const uid_t nobody = ::geteuid() == 0 ? 65534 : ::geteuid();
  for (const auto& p : {with_fifo / name, with_dir / name})
    ASSERT_EQ(::lchown(p.c_str(), nobody, -1), 0);
  std::string probes;
  for (const auto& p : {with_fifo, with_dir}) {
    probes += "[[collectors.storage.probe]]\npath = \"" + p.string() +
              "\"\noperations = [\"stat\", \"write\", \"read\"]\ninterval = \"500ms\"\n"
              "timeout = \"300ms\"\n";
  }
  auto config =
      dir.write("nodewatch.toml",
                "[collectors.storage]\ninterval = \"500ms\"\ntimeout = \"400ms\"\n" + probes);
  DaemonProcess d(on_storage_fixture(config), dir.path() / "log");
  auto port = d.port();
  ASSERT_TRUE(port) << d.log();
  for (const auto& p : {with_fifo, with_dir}) {
    SCOPED_TRACE(p);
    const std::string path = "{path=\"" + p.string() + "\"";
    for (const char* op : {"stat", "write", "read"}) {
      const std::string success =
          "nodewatch_storage_probe_success" + path + ",operation=\"" + op + "\"}";
      EXPECT_TRUE(Eventually([&] { return scrape_value(*port, success) == 1.0; }, 10s)) << op;
    }
    EXPECT_EQ(scrape_value(*port, "nodewatch_storage_probe_stuck" + path + "}"), 0.0);
    auto r = Request(*port, "GET", "/metrics");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->body.find("nodewatch_storage_probe_errors_total" + path), std::string::npos)
        << r->body;
  }
  struct stat st {};
  ASSERT_EQ(::lstat((with_fifo / name).c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  EXPECT_EQ(st.st_uid, nobody);
  ASSERT_EQ(::lstat((with_dir / name).c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_TRUE(std::filesystem::is_empty(with_dir / name));
  const std::string owner = " owned by uid " + std::to_string(nobody) + " is at ";
  EXPECT_NE(d.log().find("a FIFO" + owner + (with_fifo / name).string()), std::string::npos)
      << d.log();
  EXPECT_NE(d.log().find("a directory" + owner + (with_dir / name).string()), std::string::npos)
      << d.log();
  d.signal(SIGTERM);
  EXPECT_EQ(d.wait(5s), 0) << d.log();
  // Each probe removed its own file on the way out; what was there stays.
  for (const auto& p : {with_fifo, with_dir}) {
    std::vector<std::string> left;
    for (const auto& e : std::filesystem::directory_iterator(p))
      left.push_back(e.path().filename().string());
    EXPECT_EQ(left, std::vector<std::string>{name}) << p;
  }
}

// The daemon's helper launcher killed (by hand, or by the OOM killer): its
// helpers die with it, the probe's next cycle counts the broken helper, the
// daemon starts a replacement launcher (its own binary exec'd again), and
// the probe goes on.
TEST(StorageProbeDaemon, AKilledHelperLauncherIsReplaced) {
  TempDir dir;
  std::filesystem::path data = dir.path() / "data";
  std::filesystem::create_directories(data);
  auto config = dir.write("nodewatch.toml",
                          "[collectors.storage]\ninterval = \"500ms\"\ntimeout = \"400ms\"\n"
                          "[[collectors.storage.probe]]\npath = \"" +
                              data.string() +
                              "\"\noperations = [\"stat\"]\ninterval = \"200ms\"\n"
                              "timeout = \"200ms\"\n");
  DaemonProcess d(on_storage_fixture(config), dir.path() / "log");
  auto port = d.port();
  ASSERT_TRUE(port) << d.log();
  const std::string count = "nodewatch_storage_probe_duration_seconds_count{path=\"" +
                            data.string() + "\",operation=\"stat\"}";
  ASSERT_TRUE(Eventually([&] { return scrape_value(*port, count).value_or(0) >= 2; }, 10s))
      << d.log();
  // The daemon's children: the launcher is the one named nwd-launcher.
  auto launcher = [&]() -> pid_t {
    for (const auto& e : std::filesystem::directory_iterator("/proc")) {
      std::string name = e.path().filename().string();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      std::string stat = ReadFile(e.path() / "stat");
      auto close = stat.rfind(')');
      if (close == std::string::npos || stat.find("(nwd-launcher)") == std::string::npos) continue;
      if (std::atoi(stat.c_str() + close + 4) == d.pid() && stat[close + 2] != 'Z')
        return std::stoi(name);
    }
    return 0;
  };
  pid_t first = launcher();
  ASSERT_GT(first, 0);
  ASSERT_EQ(::kill(first, SIGKILL), 0);
  double before = scrape_value(*port, count).value_or(0);
  ASSERT_TRUE(Eventually([&] { return scrape_value(*port, count).value_or(0) >= before + 3; }, 10s))
      << "the probe did not go on after its launcher was killed\n"
      << d.log();
  pid_t second = launcher();
  EXPECT_GT(second, 0);
  EXPECT_NE(second, first);
  std::string cmdline = ReadFile("/proc/" + std::to_string(second) + "/cmdline");
  EXPECT_NE(cmdline.find("--nodewatch-helper-launcher"), std::string::npos) << cmdline;
  EXPECT_GE(
      scrape_value(
          *port, "nodewatch_collector_errors_total{collector=\"storage\",reason=\"helper_broken\"}")
          .value_or(0),
      1.0);
  d.signal(SIGTERM);
  EXPECT_EQ(d.wait(5s), 0) << d.log();
}

// ---------------------------------------------------------------------------
// A directory that becomes unwritable

// A tmpfs mounted for the test (root is not stopped by file modes, so a
// read-only remount is what makes the directory unwritable).
class TmpfsMount {
 public:
  explicit TmpfsMount(const std::filesystem::path& where) : where_(where) {
    mounted_ = ::mount("tmpfs", where.c_str(), "tmpfs", 0, "size=1m") == 0;
    if (!mounted_) error_ = std::strerror(errno);
  }
  ~TmpfsMount() {
    if (mounted_) ::umount2(where_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  const std::string& error() const { return error_; }
  bool remount_read_only() {
    return ::mount("tmpfs", where_.c_str(), "tmpfs", MS_REMOUNT | MS_RDONLY, "size=1m") == 0;
  }

 private:
  std::filesystem::path where_;
  bool mounted_ = false;
  std::string error_;
};

TEST(StorageProbeErrors, ReadOnlyRemountCountsWriteErrorsByErrno) {
  TempDir dir;
  TmpfsMount mnt(dir.path());
  if (!mnt.mounted()) {
    GTEST_SKIP() << "SKIPPED: cannot mount a tmpfs here (" << mnt.error()
                 << "); needs root with CAP_SYS_ADMIN";
  }
  StorageOptions o;
  ProbeConfig pc;
  pc.path = dir.path().string();
  pc.operations = {ProbeOp::kStat, ProbeOp::kWrite, ProbeOp::kFsync, ProbeOp::kRead};
  pc.interval = 100ms;
  pc.timeout = 100ms;
  o.probes = {pc};
  StorageCollector c(Roots{storage_fixtures() / "sys", storage_fixtures() / "proc"}, o, "h");
  auto op_state = [&](ProbeOp op) {
    return c.probes()[0]->snapshot().ops[static_cast<std::size_t>(op)];
  };
  ASSERT_TRUE(Eventually([&] { return op_state(ProbeOp::kRead).success; }, 5s));
  ASSERT_TRUE(mnt.remount_read_only()) << std::strerror(errno);
  ASSERT_TRUE(Eventually(
      [&] {
        auto w = op_state(ProbeOp::kWrite);
        return w.observed && !w.success && w.errors.count("EROFS") > 0;
      },
      5s));
  // Reads and stats of the existing file still work.
  std::uint64_t reads = op_state(ProbeOp::kRead).histogram->count();
  ASSERT_TRUE(Eventually([&] { return op_state(ProbeOp::kRead).histogram->count() > reads; }, 5s));
  MetricSink sink(c.metrics());
  testing::CollectOnce(c, sink);
  const std::string path = pc.path;
  EXPECT_EQ(testing::Value(sink, "nodewatch_storage_probe_success", {path, "write"}), 0);
  EXPECT_EQ(testing::Value(sink, "nodewatch_storage_probe_success", {path, "read"}), 1);
  EXPECT_EQ(testing::Value(sink, "nodewatch_storage_probe_success", {path, "stat"}), 1);
  EXPECT_GE(testing::Value(sink, "nodewatch_storage_probe_errors_total", {path, "write", "EROFS"}),
            1);
  // fsync opens the file for writing on its own when the write failed: EROFS too.
  EXPECT_GE(testing::Value(sink, "nodewatch_storage_probe_errors_total", {path, "fsync", "EROFS"}),
            1);
}

// ---------------------------------------------------------------------------
// Agreement with node_exporter

constexpr const char* kNodeExporter = "/usr/bin/prometheus-node-exporter";

// "name{labels}" -> value, from an exposition.
std::map<std::string, double> samples(const std::string& body) {
  std::map<std::string, double> out;
  std::istringstream in(body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    auto sp = line.rfind(' ');
    out[line.substr(0, sp)] = std::strtod(line.c_str() + sp + 1, nullptr);
  }
  return out;
}

void expect_same(double ours, double theirs, const std::string& what) {
  EXPECT_NEAR(ours, theirs, std::abs(theirs) * 1e-12) << what;
}

TEST(NodeExporterAgreement, DiskstatsAndMountstats) {
  if (::access(kNodeExporter, X_OK) != 0) {
    GTEST_SKIP() << "SKIPPED: " << kNodeExporter
                 << " is missing (packaging/install-deps.sh --test installs it)";
  }
  // One procfs tree for both. node_exporter 1.5 fails its whole diskstats
  // collector on a malformed line, and its mountstats collector on an rdma
  // transport (node_exporter #2749), so those are left out of this tree.
  TempDir dir;
  std::filesystem::path proc = dir.path() / "proc";
  std::string diskstats;
  {
    std::istringstream in(ReadFile(storage_fixtures() / "proc" / "diskstats"));
    std::string line;
    while (std::getline(in, line)) {
      if (line.find(" sdb ") == std::string::npos && line.find(" sdc ") == std::string::npos) {
        diskstats += line + "\n";
      }
    }
  }
  dir.write("proc/diskstats", diskstats);
  std::string mountstats;
  for (const char* f : {"nfs3-tcp.txt", "nfs41-tcp.txt", "statvers-1.0.txt"}) {
    mountstats += ReadFile(storage_fixtures() / "mountstats" / f);
  }
  dir.write("proc/4242/mountstats", mountstats);
  // node_exporter pairs mountstats and mountinfo entries by position.
  std::string mountinfo;
  std::vector<std::pair<std::string, std::string>> nfs_mounts;  // export, mountpoint
  {
    std::regex header(R"(^device (\S+) mounted on (\S+) with fstype (\S+))");
    std::istringstream in(mountstats);
    std::string line;
    int id = 100;
    while (std::getline(in, line)) {
      std::smatch m;
      if (!std::regex_search(line, m, header)) continue;
      mountinfo += std::to_string(id) + " 1 0:" + std::to_string(id) + " / " + m[2].str() +
                   " rw - " + m[3].str() + " " + m[1].str() + " rw,addr=192.0.2.1\n";
      ++id;
      if (m[3] == "nfs" || m[3] == "nfs4") nfs_mounts.emplace_back(m[1], m[2]);
    }
  }
  ASSERT_EQ(nfs_mounts.size(), 3u);
  dir.write("proc/4242/mountinfo", mountinfo);
  std::filesystem::create_directory_symlink("4242", proc / "self");
  std::filesystem::path sys = storage_fixtures() / "sys";

  std::uint16_t port = nodewatch::testing::FreeLoopbackPort();
  pid_t pid = ::fork();
  if (pid == 0) {
    int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 1);
    ::dup2(null, 2);
    std::string procfs = "--path.procfs=" + proc.string();
    std::string sysfs = "--path.sysfs=" + sys.string();
    std::string listen = "--web.listen-address=127.0.0.1:" + std::to_string(port);
    ::execl(kNodeExporter, kNodeExporter, "--collector.disable-defaults", "--collector.diskstats",
            "--collector.diskstats.device-exclude=^$", "--collector.mountstats", procfs.c_str(),
            sysfs.c_str(), listen.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  struct Reap {
    pid_t pid;
    ~Reap() {
      ::kill(pid, SIGTERM);
      int st = 0;
      ::waitpid(pid, &st, 0);
    }
  } reap{pid};
  // HTTP/1.0, so that Go's server answers without chunked encoding.
  std::string body;
  ASSERT_TRUE(Eventually(
      [&] {
        testing::TestConnection conn(port);
        if (!conn.connected() || !conn.send("GET /metrics HTTP/1.0\r\n\r\n")) return false;
        std::string response = conn.read_all();
        auto end = response.find("\r\n\r\n");
        if (response.rfind("HTTP/1.0 200", 0) != 0 || end == std::string::npos) return false;
        body = response.substr(end + 4);
        return true;
      },
      10s))
      << "node_exporter did not answer on port " << port;
  std::map<std::string, double> theirs = samples(body);
  ASSERT_EQ(theirs["node_scrape_collector_success{collector=\"diskstats\"}"], 1.0) << body;
  ASSERT_EQ(theirs["node_scrape_collector_success{collector=\"mountstats\"}"], 1.0) << body;

  StorageOptions o;
  o.devices.exclude = "";
  StorageCollector c(Roots{sys, proc}, o);
  MetricSink sink(c.metrics());
  testing::CollectOnce(c, sink);

  struct Pair {
    const char* theirs;
    const char* ours;
    double scale;  // theirs * scale = ours
  };
  const Pair disk[] = {
      {"reads_completed_total", "reads_completed_total", 1},
      {"reads_merged_total", "reads_merged_total", 1},
      {"read_bytes_total", "read_bytes_total", 1},
      {"read_time_seconds_total", "read_time_seconds_total", 1},
      {"writes_completed_total", "writes_completed_total", 1},
      {"writes_merged_total", "writes_merged_total", 1},
      {"written_bytes_total", "written_bytes_total", 1},
      {"write_time_seconds_total", "write_time_seconds_total", 1},
      {"io_now", "io_in_progress", 1},
      {"io_time_seconds_total", "io_time_seconds_total", 1},
      {"io_time_weighted_seconds_total", "io_time_weighted_seconds_total", 1},
      {"discards_completed_total", "discards_completed_total", 1},
      {"discards_merged_total", "discards_merged_total", 1},
      {"discarded_sectors_total", "discarded_bytes_total", 512},
      {"discard_time_seconds_total", "discard_time_seconds_total", 1},
      {"flush_requests_total", "flushes_completed_total", 1},
      {"flush_requests_time_seconds_total", "flush_time_seconds_total", 1},
  };
  std::size_t compared = 0;
  std::regex device_re(R"re(^node_disk_reads_completed_total\{device="([^"]+)"\}$)re");
  std::vector<std::string> devices;
  for (const auto& [series, value] : theirs) {
    std::smatch m;
    if (std::regex_match(series, m, device_re)) devices.push_back(m[1]);
  }
  EXPECT_GE(devices.size(), 6u);
  for (const std::string& dev : devices) {
    for (const Pair& p : disk) {
      std::string key = std::string("node_disk_") + p.theirs + "{device=\"" + dev + "\"}";
      double ours = 0;
      bool have_ours = sink.get(std::string("nodewatch_storage_") + p.ours, {dev}, &ours);
      auto it = theirs.find(key);
      // Both export a statistic exactly when the kernel's line has it.
      EXPECT_EQ(have_ours, it != theirs.end()) << key;
      if (!have_ours || it == theirs.end()) continue;
      expect_same(ours, it->second * p.scale, key);
      ++compared;
    }
  }
  std::printf("diskstats: %zu values of %zu devices agree with node_exporter\n", compared,
              devices.size());
  EXPECT_GE(compared, 70u);

  const Pair ops[] = {
      {"operations_requests_total", "operations_total", 1},
      {"operations_transmissions_total", "transmissions_total", 1},
      {"operations_major_timeouts_total", "major_timeouts_total", 1},
      {"operations_sent_bytes_total", "sent_bytes_total", 1},
      {"operations_received_bytes_total", "received_bytes_total", 1},
      {"operations_queue_time_seconds_total", "queue_seconds_total", 1},
      {"operations_response_time_seconds_total", "rtt_seconds_total", 1},
      {"operations_request_time_seconds_total", "execute_seconds_total", 1},
  };
  const Pair transport[] = {
      {"transport_sends_total", "transport_sends_total", 1},
      {"transport_receives_total", "transport_receives_total", 1},
      {"transport_bad_transaction_ids_total", "transport_bad_xids_total", 1},
  };
  std::size_t nfs_compared = 0;
  for (const auto& [export_name, mountpoint] : nfs_mounts) {
    std::string base = "{export=\"" + export_name + "\",mountaddr=\"192.0.2.1\"";
    for (const std::string& op : storage::kDefaultNfsOperations) {
      for (const Pair& p : ops) {
        std::string key = std::string("node_mountstats_nfs_") + p.theirs + base + ",operation=\"" +
                          op + "\",protocol=\"tcp\"}";
        double ours = 0;
        bool have_ours = sink.get(std::string("nodewatch_storage_nfs_") + p.ours,
                                  {mountpoint, export_name, op}, &ours);
        auto it = theirs.find(key);
        EXPECT_EQ(have_ours, it != theirs.end()) << key;
        if (!have_ours || it == theirs.end()) continue;
        expect_same(ours, it->second * p.scale, key);
        ++nfs_compared;
      }
    }
    for (const Pair& p : transport) {
      std::string key =
          std::string("node_mountstats_nfs_") + p.theirs + base + ",protocol=\"tcp\"}";
      auto it = theirs.find(key);
      ASSERT_NE(it, theirs.end()) << key;
      expect_same(testing::Value(sink, std::string("nodewatch_storage_nfs_") + p.ours,
                                 {mountpoint, export_name}),
                  it->second, key);
      ++nfs_compared;
    }
  }
  std::printf("mountstats: %zu values of %zu NFS mounts agree with node_exporter\n", nfs_compared,
              nfs_mounts.size());
  EXPECT_GE(nfs_compared, 100u);
}

}  // namespace
}  // namespace nodewatch
