// Tests of nodewatch-hangfs, the FUSE file system that stands in for a hard
// NFS mount whose server went away (tests/fakes/hangfs), through its helper
// tests/support/hangfs.hpp: a real mount that passes files through, a caller
// held in the kernel (state D, not even SIGKILL frees it) until the server
// answers, and a helper that always frees such callers and leaves no mount.
// Every wait is bounded; without FUSE (no /dev/fuse, not root) each test is
// skipped with the reason.

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "nodewatch/unique_fd.hpp"
#include "support/daemon_process.hpp"
#include "support/hangfs.hpp"

namespace nodewatch::testing {
namespace {

using namespace std::chrono_literals;

#define SKIP_WITHOUT_FUSE()                                      \
  do {                                                           \
    if (std::string why = HangFs::unavailable(); !why.empty()) { \
      GTEST_SKIP() << why;                                       \
    }                                                            \
  } while (0)

// A backing directory and an empty mount point in a scratch directory.
struct Dirs {
  TempDir tmp;
  std::filesystem::path backing = tmp.path() / "backing";
  std::filesystem::path mnt = tmp.path() / "mnt";
  Dirs() {
    std::filesystem::create_directory(backing);
    std::filesystem::create_directory(mnt);
  }
};

// A child process, killed and reaped (bounded) when the test leaves, however
// it leaves. Declared before the HangFs, so that it is destroyed after it:
// a child held in the mount is freed by the HangFs first.
class Child {
 public:
  template <class Fn>
  explicit Child(Fn fn) {
    pid_ = ::fork();
    if (pid_ == 0) ::_exit(fn());
  }
  ~Child() {
    if (pid_ <= 0 || status_) return;
    ::kill(pid_, SIGKILL);
    wait(5s);
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }

  // The wait status once reaped; nullopt while it runs after `limit`.
  std::optional<int> wait(std::chrono::milliseconds limit) {
    auto until = std::chrono::steady_clock::now() + limit;
    while (!status_) {
      int st = 0;
      if (::waitpid(pid_, &st, WNOHANG) == pid_) {
        status_ = st;
        break;
      }
      if (std::chrono::steady_clock::now() >= until) break;
      std::this_thread::sleep_for(5ms);
    }
    return status_;
  }

  // The state letter of /proc/PID/stat ("1234 (comm) D ..."), '?' if gone.
  char state() const {
    std::string stat = ReadFile("/proc/" + std::to_string(pid_) + "/stat");
    auto paren = stat.rfind(')');
    return paren == std::string::npos || paren + 2 >= stat.size() ? '?' : stat[paren + 2];
  }

  // Where it sleeps in the kernel ("request_wait_answer"), if the kernel says.
  std::string wchan() const { return ReadFile("/proc/" + std::to_string(pid_) + "/wchan"); }

  // Waits until its state is `want`; false after `limit`.
  bool wait_state(char want, std::chrono::milliseconds limit) const {
    auto until = std::chrono::steady_clock::now() + limit;
    while (state() != want) {
      if (std::chrono::steady_clock::now() >= until) return false;
      std::this_thread::sleep_for(5ms);
    }
    return true;
  }

 private:
  pid_t pid_ = -1;
  std::optional<int> status_;
};

// A child that stats `path` and exits with 0 or the errno.
int stat_exit_code(const std::filesystem::path& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? 0 : errno;
}

std::string read_all(const std::filesystem::path& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return "<open: " + std::string(std::strerror(errno)) + ">";
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0) return "<read: " + std::string(std::strerror(errno)) + ">";
    if (n == 0) return out;
    out.append(buf, static_cast<std::size_t>(n));
  }
}

std::set<std::string> list(const std::filesystem::path& dir) {
  std::set<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return names;
  while (dirent* e = ::readdir(d)) names.insert(e->d_name);
  ::closedir(d);
  return names;
}

TEST(HangFsTest, PassesFilesThroughToTheBackingDirectory) {
  SKIP_WITHOUT_FUSE();
  Dirs dirs;
  HangFs fs(dirs.backing, dirs.mnt);
  ASSERT_TRUE(fs.mounted());
  EXPECT_TRUE(HangFs::mount_listed(dirs.mnt));

  // create, write, fsync, close: the bytes are in the backing directory.
  {
    UniqueFd fd(::open((dirs.mnt / "a").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640));
    ASSERT_GE(fd.get(), 0) << std::strerror(errno);
    ASSERT_EQ(::write(fd.get(), "hello", 5), 5) << std::strerror(errno);
    EXPECT_EQ(::fsync(fd.get()), 0) << std::strerror(errno);
    EXPECT_EQ(::fdatasync(fd.get()), 0) << std::strerror(errno);
    EXPECT_EQ(fd.close(), 0);
  }
  EXPECT_EQ(ReadFile(dirs.backing / "a"), "hello");
  EXPECT_EQ(read_all(dirs.mnt / "a"), "hello");

  struct stat st {};
  ASSERT_EQ(::stat((dirs.mnt / "a").c_str(), &st), 0) << std::strerror(errno);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_size, 5);
  EXPECT_EQ(st.st_mode & 07777, 0640u);

  // Nothing is cached: a change made in the backing directory is seen at once.
  std::ofstream(dirs.backing / "a", std::ios::trunc) << "changed!";
  EXPECT_EQ(read_all(dirs.mnt / "a"), "changed!");
  ASSERT_EQ(::stat((dirs.mnt / "a").c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 8);

  // readdir shows files made either way.
  std::ofstream(dirs.backing / "direct.prom") << "x 1\n";
  EXPECT_EQ(list(dirs.mnt), (std::set<std::string>{".", "..", "a", "direct.prom"}));
  EXPECT_EQ(read_all(dirs.mnt / "direct.prom"), "x 1\n");

  // ftruncate, chmod, utimens.
  {
    UniqueFd fd(::open((dirs.mnt / "a").c_str(), O_RDWR | O_CLOEXEC));
    ASSERT_GE(fd.get(), 0) << std::strerror(errno);
    EXPECT_EQ(::ftruncate(fd.get(), 2), 0) << std::strerror(errno);
    EXPECT_EQ(std::filesystem::file_size(dirs.backing / "a"), 2u);
    EXPECT_EQ(::ftruncate(fd.get(), 8192), 0) << std::strerror(errno);
    EXPECT_EQ(std::filesystem::file_size(dirs.backing / "a"), 8192u);
    char buf[2];
    EXPECT_EQ(::pread(fd.get(), buf, 2, 0), 2);
    EXPECT_EQ(std::string(buf, 2), "ch");
  }
  EXPECT_EQ(::chmod((dirs.mnt / "a").c_str(), 0600), 0) << std::strerror(errno);
  ASSERT_EQ(::stat((dirs.backing / "a").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  timespec times[2] = {{1000000000, 0}, {1000000001, 0}};
  EXPECT_EQ(::utimensat(AT_FDCWD, (dirs.mnt / "a").c_str(), times, 0), 0) << std::strerror(errno);
  ASSERT_EQ(::stat((dirs.backing / "a").c_str(), &st), 0);
  EXPECT_EQ(st.st_mtim.tv_sec, 1000000001);

  // rename, then unlink.
  ASSERT_EQ(::rename((dirs.mnt / "a").c_str(), (dirs.mnt / "b").c_str()), 0)
      << std::strerror(errno);
  EXPECT_FALSE(std::filesystem::exists(dirs.backing / "a"));
  EXPECT_TRUE(std::filesystem::exists(dirs.backing / "b"));
  EXPECT_EQ(stat_exit_code(dirs.mnt / "a"), ENOENT);
  EXPECT_EQ(stat_exit_code(dirs.mnt / "b"), 0);
  ASSERT_EQ(::unlink((dirs.mnt / "b").c_str()), 0) << std::strerror(errno);
  EXPECT_FALSE(std::filesystem::exists(dirs.backing / "b"));
  EXPECT_EQ(stat_exit_code(dirs.mnt / "b"), ENOENT);

  // No subdirectories: a file is not one, a missing name is missing.
  EXPECT_EQ(stat_exit_code(dirs.mnt / "direct.prom" / "x"), ENOTDIR);
  EXPECT_EQ(stat_exit_code(dirs.mnt / "missing" / "x"), ENOENT);

  struct statvfs sv {};
  EXPECT_EQ(::statvfs(dirs.mnt.c_str(), &sv), 0) << std::strerror(errno);
  EXPECT_GT(sv.f_bsize, 0u);
}

// The storage probe reads with O_DIRECT where the file system allows it: it
// works here, or is refused cleanly with EINVAL.
TEST(HangFsTest, DirectIoWorksOrFailsWithEinval) {
  SKIP_WITHOUT_FUSE();
  Dirs dirs;
  HangFs fs(dirs.backing, dirs.mnt);
  ASSERT_TRUE(fs.mounted());
  constexpr std::size_t kBlock = 4096;
  int raw = ::open((dirs.mnt / "d").c_str(), O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0644);
  if (raw < 0) {
    EXPECT_EQ(errno, EINVAL) << std::strerror(errno);
    return;
  }
  UniqueFd fd(raw);
  struct FreeDeleter {
    void operator()(void* p) const { std::free(p); }
  };
  void* out_raw = nullptr;
  void* in_raw = nullptr;
  ASSERT_EQ(::posix_memalign(&out_raw, kBlock, kBlock), 0);
  std::unique_ptr<void, FreeDeleter> out(out_raw);
  ASSERT_EQ(::posix_memalign(&in_raw, kBlock, kBlock), 0);
  std::unique_ptr<void, FreeDeleter> in(in_raw);
  std::memset(out.get(), 'z', kBlock);
  ssize_t w = ::pwrite(fd.get(), out.get(), kBlock, 0);
  if (w < 0) {
    EXPECT_EQ(errno, EINVAL) << std::strerror(errno);
    return;
  }
  EXPECT_EQ(w, static_cast<ssize_t>(kBlock));
  EXPECT_EQ(::pread(fd.get(), in.get(), kBlock, 0), static_cast<ssize_t>(kBlock));
  EXPECT_EQ(std::memcmp(in.get(), out.get(), kBlock), 0);
  EXPECT_EQ(ReadFile(dirs.backing / "d"), std::string(kBlock, 'z'));
}

TEST(HangFsTest, HeldRequestKeepsTheCallerInTheKernelEvenThroughSigkill) {
  SKIP_WITHOUT_FUSE();
  Dirs dirs;
  std::ofstream(dirs.backing / "probe") << "p";
  std::optional<Child> child;  // destroyed after fs (declared before)
  HangFs fs(dirs.backing, dirs.mnt);
  ASSERT_TRUE(fs.mounted());
  EXPECT_EQ(stat_exit_code(dirs.mnt / "probe"), 0);  // served while not hung

  fs.hang();
  EXPECT_EQ(fs.held(), 0u);
  child.emplace([&] {
    // A signal the caller handles does not end the wait either.
    struct sigaction sa {};
    sa.sa_handler = [](int) {};
    ::sigaction(SIGUSR1, &sa, nullptr);
    return stat_exit_code(dirs.mnt / "probe");
  });
  ASSERT_TRUE(fs.wait_held(1, 5s)) << "the server never read the child's request";
  // The request is with the server: the caller waits in request_wait_answer,
  // killably (state D) as the server refuses interrupts.
  EXPECT_TRUE(child->wait_state('D', 2s)) << "state " << child->state();
  RecordProperty("wchan", child->wchan());
  {
    // The helper does not touch the hung mount (in a child: were it to, the
    // child would be the one held).
    Child looker([&] { return HangFs::mount_listed(dirs.mnt) ? 0 : 1; });
    std::optional<int> st = looker.wait(2s);
    ASSERT_TRUE(st) << "mount_listed() touched the hung mount";
    EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << *st;
    EXPECT_TRUE(fs.mounted());
  }
  ASSERT_EQ(::kill(child->pid(), SIGUSR1), 0);
  EXPECT_FALSE(child->wait(200ms)) << "stat() returned while its request was held";
  EXPECT_EQ(child->state(), 'D');

  ASSERT_EQ(::kill(child->pid(), SIGKILL), 0);
  EXPECT_FALSE(child->wait(500ms)) << "SIGKILL freed a caller whose request the server holds";
  EXPECT_EQ(child->state(), 'D');
  // No INTERRUPT reached the server (it said it takes none).
  EXPECT_EQ(fs.held(), 1u);

  fs.answer();
  std::optional<int> st = child->wait(2s);
  ASSERT_TRUE(st) << "answered, yet the killed child is not reaped; state " << child->state();
  EXPECT_TRUE(WIFSIGNALED(*st) && WTERMSIG(*st) == SIGKILL) << *st;

  // Served as before.
  EXPECT_EQ(fs.held(), 0u);
  EXPECT_EQ(stat_exit_code(dirs.mnt / "probe"), 0);
  EXPECT_EQ(read_all(dirs.mnt / "probe"), "p");
}

TEST(HangFsTest, AnsweredRequestsCompleteNormally) {
  SKIP_WITHOUT_FUSE();
  Dirs dirs;
  std::ofstream(dirs.backing / "textfile.prom") << "metric 1\n";
  std::optional<Child> reader;
  HangFs fs(dirs.backing, dirs.mnt);
  ASSERT_TRUE(fs.mounted());

  fs.hang();
  reader.emplace([&] { return read_all(dirs.mnt / "textfile.prom") == "metric 1\n" ? 0 : 1; });
  ASSERT_TRUE(fs.wait_held(1, 5s));
  EXPECT_FALSE(reader->wait(200ms));
  fs.answer();
  std::optional<int> st = reader->wait(5s);
  ASSERT_TRUE(st);
  EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << *st;
}

TEST(HangFsTest, DestructorFreesHeldCallersAndUnmounts) {
  SKIP_WITHOUT_FUSE();
  Dirs dirs;
  std::ofstream(dirs.backing / "probe") << "p";
  std::optional<Child> waiting, killed;
  auto fs = std::make_unique<HangFs>(dirs.backing, dirs.mnt);
  ASSERT_TRUE(fs->mounted());

  fs->hang();
  waiting.emplace([&] { return stat_exit_code(dirs.mnt / "probe"); });
  ASSERT_TRUE(fs->wait_held(1, 5s));
  killed.emplace([&] { return read_all(dirs.mnt / "probe") == "p" ? 0 : 1; });
  ASSERT_TRUE(fs->wait_held(2, 5s));
  ASSERT_EQ(::kill(killed->pid(), SIGKILL), 0);
  EXPECT_TRUE(killed->wait_state('D', 2s)) << killed->state();

  auto start = std::chrono::steady_clock::now();
  fs.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  EXPECT_FALSE(HangFs::mount_listed(dirs.mnt));

  std::optional<int> st = killed->wait(2s);
  ASSERT_TRUE(st) << "the killed child stays in state " << killed->state();
  EXPECT_TRUE(WIFSIGNALED(*st) && WTERMSIG(*st) == SIGKILL) << *st;
  st = waiting->wait(2s);
  ASSERT_TRUE(st) << "the waiting child stays in state " << waiting->state();
  ASSERT_TRUE(WIFEXITED(*st)) << *st;
  // The aborted connection fails the request (ECONNABORTED); a request
  // made after it would get ENOTCONN.
  int err = WEXITSTATUS(*st);
  EXPECT_EQ(err, ECONNABORTED) << std::strerror(err);
  EXPECT_EQ(stat_exit_code(dirs.mnt / "probe"), ENOENT);  // the bare mount point again
}

// What happens when the test process dies: the server gets SIGTERM (its
// parent-death signal), frees the callers and unmounts.
TEST(HangFsTest, SigtermWhileHungFreesCallersAndUnmounts) {
  SKIP_WITHOUT_FUSE();
  Dirs dirs;
  std::ofstream(dirs.backing / "probe") << "p";
  std::optional<Child> waiting;
  HangFs fs(dirs.backing, dirs.mnt);
  ASSERT_TRUE(fs.mounted());
  fs.hang();
  waiting.emplace([&] { return stat_exit_code(dirs.mnt / "probe"); });
  ASSERT_TRUE(fs.wait_held(1, 5s));

  ASSERT_EQ(::kill(fs.server_pid(), SIGTERM), 0);
  std::optional<int> st = waiting->wait(2s);
  ASSERT_TRUE(st) << "state " << waiting->state();
  EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) != 0) << *st;
  auto until = std::chrono::steady_clock::now() + 2s;
  while (HangFs::mount_listed(dirs.mnt) && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_FALSE(HangFs::mount_listed(dirs.mnt));
  EXPECT_FALSE(fs.mounted());
}

}  // namespace
}  // namespace nodewatch::testing
