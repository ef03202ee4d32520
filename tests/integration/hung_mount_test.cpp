// A mount that stops answering, for real: the tests' FUSE file system
// (fakes/hangfs) reads each request and never answers it, as a hard NFS,
// Lustre or GPFS mount whose server went away does. A caller then waits in
// the kernel's request_wait_answer in state D, and not even SIGKILL lets it
// out. With the storage probe and the textfile directory on that mount, the
// real nodewatchd binary must: keep scrapes fast and the other collectors
// on their cadence, report the probe stuck and the textfile collector down,
// start no second helper per path across reloads, recover by itself when
// the mount answers, and on SIGTERM during the hang exit within 5 s with
// status 0, its port free for a second instance that serves at once while
// the mount is still hung.
//
// Needs /dev/fuse and the right to mount (root, as in CI): skipped loudly
// otherwise.

#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <toml++/toml.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <cmath>  // before support/collector_test.hpp
#include "nodewatch/fs_helper.hpp"

#include "storage/path_check.hpp"
#include "storage/probe.hpp"
#include "storage/storage_collector.hpp"
#include "support/collector_test.hpp"
#include "support/daemon_process.hpp"
#include "support/eventually.hpp"
#include "support/hangfs.hpp"
#include "support/http_client.hpp"
#include "support/scrape.hpp"

namespace nodewatch {
namespace {

using namespace std::chrono_literals;
using nodewatch::testing::Eventually;
using testing::DaemonProcess;
using testing::HangFs;
using testing::LastSuccess;
using testing::Request;
using testing::SampleValue;
using testing::ScrapeFor;
using testing::ScrapeTimes;
using testing::TempDir;
using testing::TestSections;

std::optional<double> scrape_value(std::uint16_t port, const std::string& series) {
  auto r = Request(port, "GET", "/metrics");
  if (!r || r->status != 200) return std::nullopt;
  return SampleValue(r->body, series);
}

std::size_t count_log(const DaemonProcess& d, const std::string& text) {
  std::string log = d.log();
  std::size_t n = 0;
  for (std::size_t pos = log.find(text); pos != std::string::npos; pos = log.find(text, pos + 1))
    ++n;
  return n;
}

struct Proc {
  pid_t pid;
  pid_t ppid;
  char state;
};

// Every process named `comm` (not zombies).
std::vector<Proc> processes_named(const std::string& comm) {
  std::vector<Proc> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(e.path() / "stat");
    std::string line;
    if (!std::getline(in, line)) continue;
    auto open = line.find('(');
    auto close = line.rfind(')');
    if (open == std::string::npos || close == std::string::npos || close + 4 >= line.size())
      continue;
    if (line.substr(open + 1, close - open - 1) != comm) continue;
    char state = line[close + 2];
    if (state == 'Z') continue;
    pid_t ppid = std::atoi(line.c_str() + close + 4);
    out.push_back(Proc{std::stoi(name), ppid, state});
  }
  return out;
}

// The parent of `pid`, or 0.
pid_t parent_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return 0;
  auto close = line.rfind(')');
  if (close == std::string::npos || close + 4 >= line.size()) return 0;
  return std::atoi(line.c_str() + close + 4);
}

// True when `pid` is this test process's descendant: its daemons, their
// launchers and helpers, and orphans re-parented to it (the subreaper).
bool ours(pid_t pid) {
  for (int depth = 0; depth < 16 && pid > 1; ++depth) {
    pid = parent_of(pid);
    if (pid == ::getpid()) return true;
  }
  return false;
}

// This test's helpers in state D: held by the kernel in a call on the hung
// mount. (Only its own: with tests running side by side, another test's
// helper may be in state D for a moment, in an fsync to a real disk.)
std::size_t helpers_in_d() {
  auto all = processes_named("nwd-fs-helper");
  return static_cast<std::size_t>(std::count_if(
      all.begin(), all.end(), [](const Proc& p) { return p.state == 'D' && ours(p.pid); }));
}

class HungMount : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string why = HangFs::unavailable(); !why.empty())
      GTEST_SKIP() << "NO REAL HUNG MOUNT HERE: " << why
                   << " (the FUSE hang tests need /dev/fuse and root, as in CI)";
    // Helpers orphaned by a daemon that exited are re-parented to this
    // process, which reaps them: the test sees them leave.
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
    backing_ = dir_.path() / "backing";
    mnt_ = dir_.path() / "mnt";
    std::filesystem::create_directories(backing_);
    std::filesystem::create_directories(mnt_);
    fs_.emplace(backing_, mnt_);
    ASSERT_TRUE(fs_->mounted());
  }

  void TearDown() override {
    fs_.reset();  // kills the server: every held request fails, every caller is released
    // The helpers it released end (they were sent SIGKILL); reap those that
    // were re-parented here.
    bool gone = Eventually(
        [] {
          while (::waitpid(-1, nullptr, WNOHANG) > 0) {
          }
          return helpers_in_d() == 0;
        },
        10s);
    EXPECT_TRUE(gone) << "helpers still held after the mount went away";
    ::prctl(PR_SET_CHILD_SUBREAPER, 0);
  }

  std::string config(const std::string& probe_timeout) const {
    return "[collectors.storage]\ninterval = \"1s\"\ntimeout = \"500ms\"\n"
           "[[collectors.storage.probe]]\npath = \"" +
           mnt_.string() +
           "\"\noperations = [\"stat\", \"read\"]\ninterval = \"1s\"\ntimeout = \"" +
           probe_timeout +
           "\"\n"
           "[collectors.textfile]\ninterval = \"1s\"\ntimeout = \"500ms\"\ndirectory = \"" +
           mnt_.string() +
           "\"\n"
           "[collectors.pcie]\ninterval = \"1s\"\ntimeout = \"500ms\"\n";
  }

  DaemonProcess::Options options(const std::filesystem::path& cfg, const std::string& listen) {
    const std::filesystem::path fixtures = testing::fixtures_dir() / "storage";
    DaemonProcess::Options o;
    o.args = {"--config", cfg.string(),
              "--listen", listen,
              "--sysfs",  (fixtures / "sys").string(),
              "--procfs", (fixtures / "proc").string()};
    return o;
  }

  TempDir dir_;
  std::filesystem::path backing_;
  std::filesystem::path mnt_;
  std::optional<HangFs> fs_;
};

TEST_F(HungMount, TheDaemonStaysWholeAndSigtermEndsItWhileAHelperIsHeld) {
  { std::ofstream(backing_ / "burnin.prom") << "burnin_check_success 1\n"; }
  auto cfg = dir_.write("nodewatch.toml", config("300ms"));
  auto d = std::make_unique<DaemonProcess>(options(cfg, "127.0.0.1:0"), dir_.path() / "log1");
  auto port = d->port();
  ASSERT_TRUE(port) << d->log();
  const std::string p = "{path=\"" + mnt_.string() + "\"";
  const std::string read_success = "nodewatch_storage_probe_success" + p + ",operation=\"read\"}";
  const std::string stuck = "nodewatch_storage_probe_stuck" + p + "}";
  const std::string textfile_up = "nodewatch_collector_up{collector=\"textfile\"}";
  const std::string storage_up = "nodewatch_collector_up{collector=\"storage\"}";
  const std::string probe_abandoned = "nodewatch_storage_probe_abandoned_helpers";
  const std::string textfile_abandoned = "nodewatch_textfile_abandoned_helpers";
  ASSERT_TRUE(Eventually([&] { return scrape_value(*port, read_success) == 1.0; }, 10s))
      << d->log();
  ASSERT_TRUE(Eventually([&] { return scrape_value(*port, "burnin_check_success") == 1.0; }, 5s))
      << d->log();
  EXPECT_EQ(scrape_value(*port, stuck), 0.0);
  // None held: a helper in a FUSE call the server is answering is in state
  // D for that moment, so none for a while is what counts.
  EXPECT_TRUE(Eventually([] { return helpers_in_d() == 0; }, 2s)) << helpers_in_d();

  // The server stops answering.
  fs_->hang();
  ASSERT_TRUE(Eventually([&] { return scrape_value(*port, stuck) == 1.0; }, 5s)) << d->log();
  ASSERT_TRUE(Eventually([&] { return scrape_value(*port, textfile_up) == 0.0; }, 5s)) << d->log();
  ASSERT_TRUE(Eventually([&] { return scrape_value(*port, textfile_abandoned) == 1.0; }, 5s));
  EXPECT_EQ(scrape_value(*port, probe_abandoned), 1.0);
  // The textfile collector's series are withdrawn, not served stale.
  EXPECT_EQ(scrape_value(*port, "burnin_check_success"), std::nullopt);
  // Both abandoned helpers are in state D, held by the kernel.
  EXPECT_TRUE(Eventually([] { return helpers_in_d() == 2; }, 5s)) << helpers_in_d();

  // All through the hang: scrapes are fast and the other collectors keep
  // their cadence.
  auto storage_before = LastSuccess(*port, "storage");
  auto pcie_before = LastSuccess(*port, "pcie");
  ASSERT_TRUE(storage_before && pcie_before);
  ScrapeTimes times = ScrapeFor(*port, 3s, 50ms, [&](const std::string& body) {
    EXPECT_EQ(SampleValue(body, stuck), 1.0);
    EXPECT_EQ(SampleValue(body, storage_up), 1.0);
  });
  std::printf("scrape latency during the hang: %zu scrapes, median %.2f ms, max %.2f ms\n",
              times.ms.size(), times.median(), times.worst());
  EXPECT_LT(times.worst(), 100.0);
  EXPECT_GE(LastSuccess(*port, "storage").value_or(0) - *storage_before, 2.0);  // 1 s cadence
  EXPECT_GE(LastSuccess(*port, "pcie").value_or(0) - *pcie_before, 2.0);

  // Reloads during the hang, one of them changing the probe: the path
  // check's helper hangs once and is not started again, and no second
  // probe or textfile helper is started on the path.
  // The first reload's check of the probe path waits its full second on
  // the hung mount, off the io thread: scrapes meanwhile stay fast.
  // A SIGHUP that arrives meanwhile, with another change, is applied
  // after it.
  dir_.write("nodewatch.toml", config("400ms"));
  d->signal(SIGHUP);
  const auto reload_sent = std::chrono::steady_clock::now();
  bool second_sent = false;
  ScrapeTimes during_reload = ScrapeFor(*port, 1500ms, 20ms, [&](const std::string&) {
    if (!second_sent && std::chrono::steady_clock::now() - reload_sent > 300ms) {
      dir_.write("nodewatch.toml", config("350ms"));
      d->signal(SIGHUP);
      second_sent = true;
    }
  });
  ASSERT_TRUE(second_sent);
  std::printf("scrape latency during the reload's path check: max %.2f ms\n",
              during_reload.worst());
  EXPECT_LT(during_reload.worst(), 100.0);
  ASSERT_TRUE(Eventually([&] { return count_log(*d, "configuration reloaded") == 2; }, 10s))
      << d->log();
  std::this_thread::sleep_for(1500ms);  // probe and textfile cycles after the reloads
  const std::size_t after_first = helpers_in_d();
  EXPECT_EQ(after_first, 3u) << "probe, textfile and the reloads' path check";
  const std::size_t held_after_first = fs_->held();
  dir_.write("nodewatch.toml", config("300ms"));
  d->signal(SIGHUP);
  ASSERT_TRUE(Eventually([&] { return count_log(*d, "configuration reloaded") == 3; }, 10s))
      << d->log();
  std::this_thread::sleep_for(3s);  // several probe and textfile cycles
  EXPECT_EQ(helpers_in_d(), after_first) << "a reload started another helper on the hung path";
  EXPECT_EQ(fs_->held(), held_after_first) << "a call reached the hung mount again";
  EXPECT_EQ(scrape_value(*port, stuck), 1.0);
  EXPECT_EQ(scrape_value(*port, "nodewatch_helper_processes{state=\"abandoned\"}"), 3.0);

  // The server answers again: everything recovers by itself.
  fs_->answer();
  ASSERT_TRUE(Eventually([&] { return scrape_value(*port, stuck) == 0.0; }, 10s)) << d->log();
  ASSERT_TRUE(Eventually([&] { return scrape_value(*port, read_success) == 1.0; }, 10s))
      << d->log();
  ASSERT_TRUE(Eventually([&] { return scrape_value(*port, textfile_up) == 1.0; }, 10s)) << d->log();
  EXPECT_EQ(scrape_value(*port, "burnin_check_success"), 1.0);
  EXPECT_TRUE(Eventually([&] { return scrape_value(*port, textfile_abandoned) == 0.0; }, 5s));
  EXPECT_EQ(scrape_value(*port, probe_abandoned), 0.0);
  EXPECT_TRUE(Eventually([] { return helpers_in_d() == 0; }, 5s));

  // Hung again, then SIGTERM: the process is gone within 5 s with status 0.
  fs_->hang();
  ASSERT_TRUE(Eventually([&] { return scrape_value(*port, stuck) == 1.0; }, 5s)) << d->log();
  ASSERT_TRUE(Eventually([] { return helpers_in_d() >= 1; }, 5s));
  auto t0 = std::chrono::steady_clock::now();
  d->signal(SIGTERM);
  auto rc = d->wait(5s);
  auto exit_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(rc) << "still running 5 s after SIGTERM while a helper is held\n" << d->log();
  EXPECT_EQ(*rc, 0) << d->log();
  std::printf("SIGTERM during the hang: reaped after %.0f ms, status %d\n", exit_ms, *rc);
  EXPECT_GE(helpers_in_d(), 1u) << "the held helpers outlive the daemon, as they must";

  // A second instance on the same port serves while the mount is still hung.
  const std::string same_port = "127.0.0.1:" + std::to_string(*port);
  t0 = std::chrono::steady_clock::now();
  DaemonProcess second(options(cfg, same_port), dir_.path() / "log2");
  bool healthy = Eventually(
      [&] {
        auto r = Request(*port, "GET", "/-/healthy");
        return r && r->status == 200;
      },
      5s);
  auto serve_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(healthy) << "no second instance on port " << *port << "\n" << second.log();
  std::printf("second instance on port %u: /-/healthy after %.0f ms, the mount still hung\n", *port,
              serve_ms);
  EXPECT_TRUE(Eventually([&] { return scrape_value(*port, stuck) == 1.0; }, 10s)) << second.log();
  second.signal(SIGTERM);
  auto rc2 = second.wait(5s);
  ASSERT_TRUE(rc2) << second.log();
  EXPECT_EQ(*rc2, 0);
}

// The configuration itself on the hung mount. The daemon reads it by a
// helper with a 5 s limit (helper::read_operator_file): a SIGHUP while the
// mount is hung is rejected after 5 s, saying why, and scrapes and
// /-/healthy answer all along (before, the read was a blocking open() and a
// thread stuck in it held the reload, and at exit the process); a second
// SIGHUP is rejected at once while that helper is held; --check-config
// ends with an error instead of never returning; once the mount answers,
// a reload succeeds.
TEST_F(HungMount, AConfigurationOnTheHungMountFailsItsReadInsteadOfHoldingTheDaemon) {
  {
    // The kernel collector's state file off the mount: it is written by the
    // daemon itself, from a local state directory.
    std::ofstream(backing_ / "nodewatch.toml")
        << "[collectors.pcie]\ninterval = \"1s\"\ntimeout = \"500ms\"\n"
        << TestSections(dir_.path());
  }
  const std::filesystem::path cfg = mnt_ / "nodewatch.toml";
  DaemonProcess d(options(cfg, "127.0.0.1:0"), dir_.path() / "log");
  auto port = d.port();
  ASSERT_TRUE(port) << d.log();
  ASSERT_TRUE(d.wait_log("first collection round complete")) << d.log();
  const std::string reload_ok = "nodewatch_config_last_reload_successful";
  EXPECT_EQ(scrape_value(*port, reload_ok), 1.0);

  fs_->hang();
  d.signal(SIGHUP);
  ScrapeTimes times = ScrapeFor(*port, 3s, 50ms, [](const std::string&) {});
  EXPECT_LT(times.worst(), 1000.0) << "scrapes waited on the configuration's read";
  EXPECT_EQ(Request(*port, "GET", "/-/healthy")->status, 200);
  ASSERT_TRUE(d.wait_log("reload rejected: .*no answer from the file system within 5000 ms", 10s))
      << d.log();
  EXPECT_EQ(scrape_value(*port, reload_ok), 0.0);
  const std::size_t held = fs_->held();
  EXPECT_GE(held, 1u);

  auto t0 = std::chrono::steady_clock::now();
  d.signal(SIGHUP);
  ASSERT_TRUE(d.wait_log("reload rejected: .*still held by the kernel", 3s)) << d.log();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  EXPECT_EQ(fs_->held(), held);  // nothing more was asked of the mount

  DaemonProcess::Options check;
  check.args = {"--check-config", "--config", cfg.string()};
  check.add_test_sections = false;
  DaemonProcess checker(check, dir_.path() / "check.log");
  auto rc = checker.wait(15s);
  ASSERT_TRUE(rc) << "--check-config did not return with its configuration on a hung mount";
  EXPECT_EQ(*rc, 1) << checker.log();
  EXPECT_NE(checker.log().find("no answer from the file system"), std::string::npos)
      << checker.log();

  fs_->answer();
  ASSERT_TRUE(Eventually(
      [&] {
        d.signal(SIGHUP);
        return d.wait_log("configuration reloaded", 1s).has_value();
      },
      10s))
      << d.log();
  EXPECT_EQ(scrape_value(*port, reload_ok), 1.0);
  d.signal(SIGTERM);
  EXPECT_EQ(d.wait(5s), 0);
}

// The kernel collector's state file named on the hung mount: the
// configuration's check looks at what is there through a helper
// (helper::stat_operator_path), so --check-config ends with an error after
// 5 s instead of never returning (before, an lstat() on the mount).
TEST_F(HungMount, AStateFileOnTheHungMountFailsTheCheckInsteadOfHoldingIt) {
  const std::filesystem::path state = mnt_ / "kernel-log.state";
  auto cfg = dir_.write("nodewatch.toml",
                        "[collectors.kernel]\nstate_file = \"" + state.string() + "\"\n");
  fs_->hang();
  DaemonProcess::Options check;
  check.args = {"--check-config", "--config", cfg.string()};
  check.add_test_sections = false;
  DaemonProcess checker(check, dir_.path() / "check.log");
  auto rc = checker.wait(15s);
  fs_->answer();
  ASSERT_TRUE(rc) << "--check-config did not return with the state file on a hung mount";
  EXPECT_EQ(*rc, 1) << checker.log();
  EXPECT_NE(checker.log().find("collectors.kernel.state_file: " + state.string() +
                               ": no answer from the file system within 5000 ms"),
            std::string::npos)
      << checker.log();
}

// The web configuration on the hung mount: the daemon follows its files
// on a thread of its own, through a helper, so new connections are still
// accepted and served (before, the io thread stat()ed the files on an
// accept and would have stayed in the kernel), the files are reported as
// not answering, and SIGTERM still ends the daemon within 5 s.
TEST_F(HungMount, AWebConfigurationOnTheHungMountHoldsNeitherConnectionsNorExit) {
  {
    std::ofstream(backing_ / "web.yml")
        << "http_server_config:\n  headers:\n    X-Frame-Options: deny\n";
  }
  auto cfg =
      dir_.write("nodewatch.toml", "[server]\nweb_config_file = \"" + (mnt_ / "web.yml").string() +
                                       "\"\n[collectors.pcie]\ninterval = \"1s\"\n"
                                       "timeout = \"500ms\"\n");
  DaemonProcess d(options(cfg, "127.0.0.1:0"), dir_.path() / "log");
  auto port = d.port();
  ASSERT_TRUE(port) << d.log();
  auto first = Request(*port, "GET", "/-/healthy");
  ASSERT_TRUE(first);
  EXPECT_EQ(first->status, 200);

  fs_->hang();
  ASSERT_TRUE(d.wait_log("its files do not answer a stat\\(\\) within 1 s", 10s)) << d.log();
  ScrapeTimes times = ScrapeFor(*port, 2s, 50ms, [](const std::string&) {});
  EXPECT_GE(times.ms.size(), 10u);
  EXPECT_LT(times.worst(), 1000.0);
  auto t0 = std::chrono::steady_clock::now();
  d.signal(SIGTERM);
  auto rc = d.wait(5s);
  ASSERT_TRUE(rc) << "still running 5 s after SIGTERM\n" << d.log();
  EXPECT_EQ(*rc, 0);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
}

TEST_F(HungMount, APathCheckOnTheHungMountIsAcceptedAndNotStartedAgain) {
  // The configuration's check of a probe path (path_check.hpp) in this
  // process: its helper is abandoned at the limit and not started again
  // while the kernel holds it.
  storage::DirectoryCheck check("test-check:");
  EXPECT_EQ(check.check(mnt_.string(), 1s), 0);
  fs_->hang();
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(check.check(mnt_.string(), 200ms), std::nullopt);  // accepted: no answer
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
  ASSERT_TRUE(fs_->wait_held(1, 2s));
  EXPECT_EQ(check.in_flight(), 1u);
  const std::size_t held = fs_->held();
  // A second check (a reload) answers at once, without a request.
  t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(check.check(mnt_.string(), 1s), std::nullopt);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 100ms);
  EXPECT_EQ(fs_->held(), held);
  EXPECT_EQ(check.in_flight(), 1u);
  // Another path is not held up.
  TempDir other;
  EXPECT_EQ(check.check(other.path().string(), 1s), 0);
  fs_->answer();
  ASSERT_TRUE(Eventually([&] { return check.in_flight() == 0; }, 5s));
  EXPECT_EQ(check.check(mnt_.string(), 1s), 0);  // released: asked anew
}

TEST_F(HungMount, ProbePathsOnTheHungMountShareOneCheckBudget) {
  // Six probe paths on the hung mount: the configuration waits for their
  // checks once (1 s, then 100 ms each), not once per path, so that a
  // restart during a hang serves within seconds however many there are.
  std::string toml;
  // (Paths below the mount: each is a lookup the hung server never answers.)
  for (char c = 'a'; c < 'g'; ++c) {
    toml += "[[probe]]\npath = \"" + (mnt_ / std::string(1, c)).string() + "\"\n";
  }
  TempDir local;
  toml += "[[probe]]\npath = \"" + local.write("file", "x").string() + "\"\n";
  const toml::table table = toml::parse(toml);  // NOLINT
  fs_->hang();
  storage::DirectoryCheck check("test-budget:");
  std::vector<ConfigError> errors;
  OptionReader r(table, "collectors.storage", "test.toml", &errors);
  const auto t0 = std::chrono::steady_clock::now();
  const storage::StorageOptions o = storage::read_storage_options(r, &check);
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_LT(took, 2500ms) << "six hung paths";
  std::printf("six probe paths on a hung mount checked in %.0f ms\n",
              std::chrono::duration<double, std::milli>(took).count());
  // The hung ones are accepted (their probes will say stuck); the local
  // path after them is still checked: a file, refused.
  EXPECT_EQ(o.probes.size(), 6u);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].message.find("not a directory"), std::string::npos) << errors[0].message;
  fs_->answer();
  ASSERT_TRUE(Eventually([&] { return check.in_flight() == 0; }, 5s));
}

TEST(HungMountFsync, AnFsyncThatHangsIsCountedAndTheProbeIsStuckUntilItAnswers) {
  // Only fsync hangs (the server holds FSYNC requests and serves the rest),
  // as on a mount whose write-back stalls while its metadata answers: the
  // probe's fsync times out after its open and write answered. The timeout
  // is counted against fsync, the path is stuck, and nothing else is
  // started on it while the kernel holds the helper.
  if (std::string why = HangFs::unavailable(); !why.empty())
    GTEST_SKIP() << "NO REAL HUNG MOUNT HERE: " << why
                 << " (the FUSE hang tests need /dev/fuse and root, as in CI)";
  TempDir dir;
  std::filesystem::create_directories(dir.path() / "backing");
  std::filesystem::create_directories(dir.path() / "mnt");
  HangFs fs(dir.path() / "backing", dir.path() / "mnt", {"fsync"});
  ASSERT_TRUE(fs.mounted());
  storage::ProbeConfig pc;
  pc.path = (dir.path() / "mnt").string();
  pc.operations = {storage::ProbeOp::kWrite, storage::ProbeOp::kFsync};
  pc.interval = 200ms;
  pc.timeout = 150ms;
  storage::Probe p(pc, "probe-fsync");
  auto op = [&](storage::ProbeOp o) { return p.snapshot().ops[static_cast<std::size_t>(o)]; };
  auto timeouts = [&] {
    const auto& e = op(storage::ProbeOp::kFsync).errors;
    auto it = e.find("ETIMEDOUT");
    return it == e.end() ? std::uint64_t{0} : it->second;
  };
  ASSERT_TRUE(Eventually([&] { return op(storage::ProbeOp::kFsync).success; }, 5s));
  fs.hang();
  ASSERT_TRUE(Eventually([&] { return timeouts() == 1; }, 5s));
  EXPECT_TRUE(p.snapshot().stuck);
  EXPECT_TRUE(op(storage::ProbeOp::kWrite).success) << "the write answered";
  EXPECT_EQ(helper::abandoned(p.helper_key()), 1u);
  const std::uint64_t writes = op(storage::ProbeOp::kWrite).histogram->count();
  std::this_thread::sleep_for(600ms);  // three intervals: nothing started on the path
  EXPECT_EQ(timeouts(), 1u);
  EXPECT_EQ(op(storage::ProbeOp::kWrite).histogram->count(), writes);
  EXPECT_TRUE(p.snapshot().stuck);
  fs.answer();
  ASSERT_TRUE(Eventually([&] { return !p.snapshot().stuck; }, 5s));
  ASSERT_TRUE(Eventually([&] { return op(storage::ProbeOp::kFsync).success; }, 5s));
  EXPECT_EQ(helper::abandoned(p.helper_key()), 0u);
}

}  // namespace
}  // namespace nodewatch
