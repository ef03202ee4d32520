// Tests of the helper processes that make the file-system calls on paths
// that may hang (nodewatch/fs_helper.hpp): the calls against a real directory,
// what a helper process holds, abandonment at the deadline and on cancel,
// the bound on helpers, a helper that dies, and the frame reader. A mount
// that hangs in the kernel (state D) is the FUSE tests' (hung_mount_test).

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../collectors/sdk/fs_helper_wire.hpp"
#include "nodewatch/fs_helper.hpp"
#include "support/daemon_process.hpp"
#include "support/eventually.hpp"

namespace nodewatch::helper {
namespace {

using namespace std::chrono_literals;
using nodewatch::testing::Eventually;
using nodewatch::testing::TempDir;

Deadline in(std::chrono::milliseconds d) {
  return Deadline{Clock::now() + d};
}

std::string comm_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/comm");
  std::string s;
  std::getline(in, s);
  return s;
}

bool alive(pid_t pid) {
  // A zombie is gone for our purposes; the launcher reaps it.
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return false;
  auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z';
}

TEST(Helper, TheLauncherRunsInTheTestProcess) {
  // support/test_main.cpp starts it before any thread, as nodewatchd does.
  ASSERT_TRUE(launcher_running());
  // A second start is a no-op, even now that threads may exist.
  EXPECT_EQ(start_launcher(), "");
}

TEST(Helper, CallsOnARealDirectory) {
  TempDir dir;
  const std::string file = (dir.path() / "probe").string();
  Fs fs("test:calls");
  int h = -1;
  Answer a = fs.open(file, O_WRONLY | O_CREAT, 0644, in(5s), &h);
  ASSERT_TRUE(a.ok()) << failure_name(a.failure) << " " << a.err;
  ASSERT_GE(h, 0);
  const std::string data(8192, 'x');
  ASSERT_TRUE(fs.pwrite(h, data, 0, in(5s)).ok());
  ASSERT_TRUE(fs.ftruncate(h, 4096, in(5s)).ok());
  ASSERT_TRUE(fs.fsync(h, in(5s)).ok());
  Answer closed = fs.close(h, in(5s));
  ASSERT_TRUE(closed.ok());
  EXPECT_GT(closed.took.count(), 0);
  EXPECT_EQ(std::filesystem::file_size(file), 4096u);

  StatInfo st;
  ASSERT_TRUE(fs.stat(file, in(5s), &st).ok());
  EXPECT_TRUE(S_ISREG(st.mode));
  EXPECT_EQ(st.size, 4096u);
  EXPECT_GT(st.mtime_seconds, 1e9);

  ASSERT_TRUE(fs.open(file, O_RDONLY, 0, in(5s), &h).ok());
  ASSERT_TRUE(fs.fadvise_dontneed(h, in(5s)).ok());
  std::string got;
  ASSERT_TRUE(fs.pread(h, 10000, 0, in(5s), &got).ok());
  EXPECT_EQ(got, std::string(4096, 'x'));  // fewer at the end of the file
  ASSERT_TRUE(fs.pread(h, 100, 4000, in(5s), &got).ok());
  EXPECT_EQ(got.size(), 96u);
  ASSERT_TRUE(fs.close(h, in(5s)).ok());
  // A handle the helper does not hold.
  EXPECT_EQ(fs.close(h, in(5s)).err, EBADF);
  EXPECT_EQ(fs.fsync(12345, in(5s)).err, EBADF);

  // The errnos of the calls themselves come back as they are.
  EXPECT_EQ(fs.stat(file + "-missing", in(5s)).err, ENOENT);
  EXPECT_EQ(fs.open(file + "/below", O_RDONLY, 0, in(5s), &h).err, ENOTDIR);
  EXPECT_EQ(h, -1);
  // One helper served them all.
  EXPECT_EQ(fs.generation(), 1u);
}

TEST(Helper, ListingAndRegularReadsAreTheSourcesLayers) {
  TempDir dir;
  dir.write("b.prom", "b 1\n");
  dir.write("a.prom", "a 1\n");
  ASSERT_EQ(::mkfifo((dir.path() / "fifo.prom").c_str(), 0644), 0);
  Fs fs("test:list");
  Answer a;
  sources::Listing l = fs.list(dir.path().string(), in(5s), &a);
  ASSERT_TRUE(a.answered());
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l.names, (std::vector<std::string>{"a.prom", "b.prom", "fifo.prom"}));
  sources::Listing missing = fs.list((dir.path() / "none").string(), in(5s), &a);
  EXPECT_EQ(missing.status, sources::Status::kAbsent);
  EXPECT_EQ(missing.err, ENOENT);

  sources::FsRoot::FileRead f = fs.read_regular((dir.path() / "a.prom").string(), 100, in(5s), &a);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f.text, "a 1\n");
  ASSERT_TRUE(f.info);
  EXPECT_TRUE(f.info->regular);
  EXPECT_EQ(f.info->size, 4u);
  // What FsRoot::read_regular answers, through the helper: too large, and a
  // FIFO (opened without blocking, refused as not regular).
  f = fs.read_regular((dir.path() / "b.prom").string(), 2, in(5s), &a);
  EXPECT_EQ(f.err, EFBIG);
  ASSERT_TRUE(f.info);
  EXPECT_EQ(f.info->size, 4u);
  f = fs.read_regular((dir.path() / "fifo.prom").string(), 100, in(5s), &a);
  EXPECT_EQ(f.err, EINVAL);
  ASSERT_TRUE(f.info);
  EXPECT_FALSE(f.info->regular);
}

TEST(Helper, AHelperIsAProcessOfItsOwnHoldingOnlyItsSocket) {
  TempDir dir;
  Fs fs("test:descriptors");
  ASSERT_TRUE(fs.stat(dir.path().string(), in(5s)).ok());
  pid_t pid = fs.pid();
  ASSERT_GT(pid, 0);
  EXPECT_NE(pid, ::getpid());
  EXPECT_EQ(comm_of(pid), "nwd-fs-helper");
  // Its parent is the launcher, not this process.
  std::ifstream st("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(st, line);
  pid_t ppid = std::stoi(line.substr(line.rfind(')') + 4));
  EXPECT_NE(ppid, ::getpid());
  EXPECT_EQ(comm_of(ppid), "nwd-launcher");
  // Descriptors: /dev/null as 0-2 and its socket as 3, nothing else (this
  // process's sockets, logs and devices were never passed on).
  std::vector<std::string> fds;
  for (const auto& e : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd"))
    fds.push_back(e.path().filename().string() + " " + std::filesystem::read_symlink(e).string());
  std::sort(fds.begin(), fds.end());
  ASSERT_EQ(fds.size(), 4u) << ::testing::PrintToString(fds);
  EXPECT_EQ(fds[0], "0 /dev/null");
  EXPECT_EQ(fds[1], "1 /dev/null");
  EXPECT_EQ(fds[2], "2 /dev/null");
  EXPECT_EQ(fds[3].rfind("3 socket:", 0), 0u) << fds[3];
}

TEST(Helper, ClosingTheFsEndsItsHelper) {
  pid_t pid = 0;
  std::size_t before = running();
  {
    Fs fs("test:close");
    ASSERT_TRUE(fs.stat("/", in(5s)).ok());
    pid = fs.pid();
    EXPECT_EQ(running(), before + 1);
  }
  EXPECT_EQ(running(), before);
  EXPECT_TRUE(Eventually([&] { return !alive(pid); }));
}

TEST(Helper, NoAnswerByTheDeadlineAbandonsTheHelper) {
  // A FIFO without a writer: open() for reading waits. (A FIFO's wait is
  // interruptible, so SIGKILL ends the helper at once; a hung mount's
  // is not, which hung_mount_test shows.)
  TempDir dir;
  const std::string fifo = (dir.path() / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  Fs fs("test:deadline");
  ASSERT_TRUE(fs.stat(fifo, in(5s)).ok());
  pid_t first = fs.pid();
  int h = -1;
  auto t0 = Clock::now();
  Answer a = fs.open(fifo, O_RDONLY, 0, in(200ms), &h);
  auto waited = Clock::now() - t0;
  EXPECT_EQ(a.failure, Failure::kTimeout);
  EXPECT_GE(waited, 200ms);
  EXPECT_LT(waited, 2s);
  EXPECT_EQ(fs.pid(), 0);  // forgotten
  EXPECT_TRUE(Eventually([&] { return !alive(first); })) << "SIGKILL ends a FIFO wait";
  EXPECT_TRUE(Eventually([&] { return !fs.blocked() && abandoned("test:deadline") == 0; }));
  // The next call starts another helper.
  ASSERT_TRUE(fs.stat(fifo, in(5s)).ok());
  EXPECT_NE(fs.pid(), first);
  EXPECT_EQ(fs.generation(), 3u);  // started, abandoned, started
}

TEST(Helper, ACancelledCallReturnsPromptly) {
  TempDir dir;
  const std::string fifo = (dir.path() / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  Fs fs("test:cancel");
  std::atomic<bool> cancel{false};
  std::thread stopper([&] {
    std::this_thread::sleep_for(100ms);
    cancel = true;
  });
  int h = -1;
  auto t0 = Clock::now();
  Answer a = fs.open(fifo, O_RDONLY, 0, Deadline{Clock::now() + 30s, &cancel}, &h);
  stopper.join();
  EXPECT_EQ(a.failure, Failure::kCancelled);
  EXPECT_LT(Clock::now() - t0, 1s);
}

TEST(Helper, ADeadHelperIsReplaced) {
  Fs fs("test:dead");
  ASSERT_TRUE(fs.stat("/", in(5s)).ok());
  pid_t first = fs.pid();
  ASSERT_EQ(::kill(first, SIGKILL), 0);
  ASSERT_TRUE(Eventually([&] { return !alive(first); }));
  Answer a = fs.stat("/", in(5s));
  EXPECT_EQ(a.failure, Failure::kBroken);
  // Its key is blocked until every thread of it is gone (a sanitizer's
  // runtime may still be tearing one down), then a new helper answers.
  EXPECT_TRUE(Eventually([&] { return fs.stat("/", in(5s)).ok(); }));
  EXPECT_NE(fs.pid(), first);
}

TEST(Helper, TheNumberOfHelpersIsBounded) {
  ASSERT_TRUE(Eventually([] { return abandoned() == 0; }));
  std::vector<std::unique_ptr<Fs>> all;
  std::size_t started = running() + abandoned();
  for (std::size_t i = started; i < kMaxHelpers; ++i) {
    all.push_back(std::make_unique<Fs>("test:bound:" + std::to_string(i)));
    ASSERT_TRUE(all.back()->stat("/", in(5s)).ok()) << i;
  }
  Fs one_more("test:bound:over");
  EXPECT_EQ(one_more.stat("/", in(5s)).failure, Failure::kLimit);
  all.pop_back();
  EXPECT_TRUE(one_more.stat("/", in(5s)).ok());
}

TEST(Helper, OutOfDescriptorsNothingLeaks) {
  // One descriptor free: the helper's socket arrives, its pidfd cannot
  // (MSG_CTRUNC). What arrived is closed, the call fails as unavailable,
  // and the count of running helpers is given back.
  auto open_fds = [] {
    std::size_t n = 0;
    for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
      (void)e;
      ++n;
    }
    return n;
  };
  const std::size_t fds = open_fds();
  const std::size_t before = running();
  int lowest = ::dup(0);
  ASSERT_GE(lowest, 0);
  ::close(lowest);
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &old), 0);
  rlimit tight = old;
  tight.rlim_cur = static_cast<rlim_t>(lowest) + 1;  // only `lowest` is free below it
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &tight), 0);
  Answer a;
  {
    Fs fs("test:ctrunc");
    a = fs.stat("/", in(5s));
  }
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &old), 0);
  EXPECT_EQ(a.failure, Failure::kUnavailable) << failure_name(a.failure);
  EXPECT_EQ(open_fds(), fds);
  EXPECT_EQ(running(), before);
  Fs again("test:ctrunc");
  EXPECT_TRUE(again.stat("/", in(5s)).ok());
}

TEST(Helper, InjectedFaultsAnswerWithoutTheHelper) {
  auto faults = std::make_shared<sources::Faults>();
  faults->inject("dir/x.prom", EACCES, 1);
  Fs fs("test:faults", faults);
  Answer a;
  sources::FsRoot::FileRead f = fs.read_regular("/some/dir/x.prom", 100, in(5s), &a);
  EXPECT_TRUE(a.answered());
  EXPECT_EQ(f.err, EACCES);
  EXPECT_EQ(fs.pid(), 0);  // no helper was needed
  f = fs.read_regular("/some/dir/x.prom", 100, in(5s), &a);
  EXPECT_EQ(f.err, ENOENT);  // the fault was used up; the helper answered
  EXPECT_GT(fs.pid(), 0);
}

// Last of the suite (it replaces this process's launcher): a launcher that
// dies takes its helpers with it, and the next call starts a replacement
// (this binary exec'd again, answered by launcher_entry() in its main()).
TEST(HelperZ, ALauncherThatDiesIsReplaced) {
  Fs fs("test:relaunch");
  ASSERT_TRUE(fs.stat("/", in(5s)).ok());
  pid_t helper = fs.pid();
  pid_t first = launcher_pid();
  ASSERT_GT(first, 0);
  ASSERT_EQ(::kill(first, SIGKILL), 0);
  // Its helper dies with it (PR_SET_PDEATHSIG).
  EXPECT_TRUE(Eventually([&] { return !alive(helper); }));
  EXPECT_EQ(fs.stat("/", in(5s)).failure, Failure::kBroken);
  // The discarded helper blocks its key until its pidfd says it exited,
  // which can come a moment after /proc shows it a zombie (seen under
  // TSan on a loaded machine).
  EXPECT_TRUE(Eventually([] { return !blocked("test:relaunch"); }));
  Answer again = fs.stat("/", in(5s));
  ASSERT_TRUE(again.ok()) << failure_name(again.failure);
  pid_t second = launcher_pid();
  EXPECT_NE(second, first);
  EXPECT_EQ(comm_of(second), "nwd-launcher");
  EXPECT_NE(fs.pid(), helper);
  // The replacement holds its channel and /dev/null only, once it is done
  // with the spawn it answered (it closes the helper's descriptors after
  // its reply: a loaded machine can look in between).
  auto fds = [&] {
    std::size_t n = 0;
    std::error_code ec;
    for (const auto& e :
         std::filesystem::directory_iterator("/proc/" + std::to_string(second) + "/fd", ec)) {
      (void)e;
      ++n;
    }
    return n;
  };
  EXPECT_TRUE(Eventually([&] { return fds() <= 5u; }))  // 0-2, the channel, and its signalfd
      << fds() << " descriptors";
  // Other keys get helpers from it too.
  Fs other("test:relaunch-other");
  EXPECT_TRUE(other.stat("/", in(5s)).ok());
}

TEST(HelperWire, ReaderNeverReadsPastItsFrame) {
  std::string frame = wire::Writer().u8(7).bytes("abc").i64(-5).frame();
  ASSERT_EQ(frame.size(), 4u + 1 + 4 + 3 + 8);
  wire::Reader r(std::string_view(frame).substr(4));
  EXPECT_EQ(r.u8(), 7);
  EXPECT_EQ(r.bytes(), "abc");
  EXPECT_EQ(r.i64(), -5);
  EXPECT_TRUE(r.done());
  // Truncated anywhere: not ok, and nothing past the end is read.
  for (std::size_t cut = 0; cut < frame.size() - 4; ++cut) {
    wire::Reader t(std::string_view(frame).substr(4, cut));
    t.u8();
    t.bytes();
    t.i64();
    EXPECT_FALSE(t.ok()) << cut;
  }
  // A length larger than what follows.
  std::string lying = wire::Writer().u32(1000).frame();
  wire::Reader l(std::string_view(lying).substr(4));
  EXPECT_EQ(l.bytes(), "");
  EXPECT_FALSE(l.ok());
}

}  // namespace
}  // namespace nodewatch::helper
