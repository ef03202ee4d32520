#include "nodewatch/fs_helper.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <new>
#include <set>
#include <vector>

#include "fs_helper_wire.hpp"
#include "nodewatch/unique_fd.hpp"

namespace nodewatch::helper {
namespace {

using wire::Op;
using wire::Reader;
using wire::Writer;

constexpr std::size_t kAlignment = 4096;  // O_DIRECT: a multiple of every logical block size
// How long a poll() waits before the caller's cancel flag is looked at again.
constexpr std::chrono::milliseconds kCancelSlice{25};
// How long the daemon waits for the launcher to answer a spawn request: it
// never touches a configured path, so only a machine out of memory or
// processes makes it slow.
constexpr std::chrono::seconds kSpawnLimit{5};
// What a replacement launcher is started with (launcher_entry()).
constexpr const char* kLauncherFlag = "--nodewatch-helper-launcher";
// The least time between two starts of a replacement launcher.
constexpr std::chrono::seconds kRelaunchBackoff{10};

// Debian bookworm's glibc (2.36) declares these in <sys/pidfd.h> without C
// linkage for C++: called through syscall(2) instead (Linux 5.3 and later).
int pidfd_open(pid_t pid) {
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
}
int pidfd_kill(int pidfd) {
  return static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, nullptr, 0));
}

std::uint64_t elapsed_ns(Clock::time_point since) {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - since).count());
}

// ---------------------------------------------------------------------------
// Helper side: blocking frame I/O on the helper's one socket.

bool read_exact(int fd, char* p, std::size_t n) {
  while (n > 0) {
    ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

bool write_exact(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

struct FreeDeleter {
  void operator()(char* p) const { std::free(p); }
};

// A buffer aligned for O_DIRECT, of at least `n` bytes.
std::unique_ptr<char, FreeDeleter> aligned(std::size_t n) {
  std::size_t cap = (std::max<std::size_t>(n, 1) + kAlignment - 1) / kAlignment * kAlignment;
  return std::unique_ptr<char, FreeDeleter>(
      static_cast<char*>(std::aligned_alloc(kAlignment, cap)));
}

int retry_open(const std::string& path, int flags, mode_t mode) {
  int fd = -1;
  do {
    fd = ::open(path.c_str(), flags | O_CLOEXEC, mode);
  } while (fd < 0 && errno == EINTR);
  return fd < 0 ? -errno : fd;
}

// The flags a request may pass to open(): access mode, creation and the
// ones that change how the file is read; nothing that could leave the
// helper holding a terminal or following a link.
constexpr int kOpenFlags = O_ACCMODE | O_CREAT | O_EXCL | O_TRUNC | O_APPEND | O_NONBLOCK |
                           O_DIRECT | O_NOFOLLOW | O_DIRECTORY | O_SYNC | O_DSYNC | O_NOATIME;

// The helper's side of each operation: it reads its arguments from `r`,
// exits with status 3 when the request is malformed, and writes its answer
// to `w`. Every answer starts with the errno (0 on success) and the
// nanoseconds the system call took.

Writer& answer(Writer& w, int err, Clock::time_point t0) {
  return w.i32(err).u64(elapsed_ns(t0));
}

// The descriptors the helper opened for the daemon: a request names one by
// number, and a number the helper did not hand out answers EBADF.
class Handles {
 public:
  // `h` when the helper handed it out, else -1.
  int find(std::int32_t h) const { return set_.count(h) != 0 ? h : -1; }
  void add(int fd) { set_.insert(fd); }
  void remove(int fd) { set_.erase(fd); }

 private:
  std::set<int> set_;
};

// A stat answer's fields (StatInfo), all zero when there is none.
Writer& put_stat(Writer& w, const struct ::stat& st) {
  return w.u32(st.st_mode)
      .u64(static_cast<std::uint64_t>(st.st_size))
      .i64(st.st_mtim.tv_sec)
      .i64(st.st_mtim.tv_nsec)
      .u64(st.st_dev)
      .u64(st.st_ino)
      .u32(st.st_uid)
      .u64(static_cast<std::uint64_t>(st.st_nlink));
}

void serve_stat(Reader& r, Writer& w) {
  std::string path(r.bytes());
  bool follow = r.u8() != 0;
  if (!r.done()) ::_exit(3);
  struct ::stat st {};
  auto t0 = Clock::now();
  int rc = follow ? ::stat(path.c_str(), &st) : ::lstat(path.c_str(), &st);
  put_stat(answer(w, rc == 0 ? 0 : errno, t0), st);
}

void serve_open(Reader& r, Writer& w, Handles& handles) {
  std::string path(r.bytes());
  std::int32_t flags = r.i32();
  std::uint32_t mode = r.u32();
  if (!r.done() || (flags & ~kOpenFlags) != 0) ::_exit(3);
  auto t0 = Clock::now();
  int fd_or_err = retry_open(path, flags, static_cast<mode_t>(mode & 07777));
  struct ::stat st {};
  if (fd_or_err >= 0) {
    handles.add(fd_or_err);
    if (::fstat(fd_or_err, &st) != 0) st = {};
  }
  put_stat(answer(w, fd_or_err < 0 ? -fd_or_err : 0, t0).i32(fd_or_err < 0 ? -1 : fd_or_err), st);
}

// Opens `path` only if it is still the regular file (device, inode) named,
// never opening or following anything else: the name is looked up with
// O_PATH (which opens nothing: a FIFO cannot block it, a device sees
// nothing), the file it names is checked, and that very file is then
// opened through /proc/self/fd. Something else at the name answers ESTALE,
// and what it is is in the answer either way. Where /proc is not mounted,
// the name is opened with O_NONBLOCK and checked afterwards.
int open_same(const std::string& path, int flags, std::uint64_t dev, std::uint64_t ino,
              struct ::stat* st) {
  auto same = [&] { return S_ISREG(st->st_mode) && st->st_dev == dev && st->st_ino == ino; };
  int pinned = retry_open(path, O_PATH | O_NOFOLLOW, 0);
  if (pinned < 0) return pinned;
  UniqueFd hold(pinned);
  if (::fstat(pinned, st) != 0) return -errno;
  if (!same()) return -ESTALE;
  int fd = retry_open("/proc/self/fd/" + std::to_string(pinned), flags & ~O_NOFOLLOW, 0);
  if (fd != -ENOENT || ::access("/proc/self/fd", F_OK) == 0) return fd;
  fd = retry_open(path, flags | O_NOFOLLOW | O_NONBLOCK, 0);
  if (fd < 0) return fd;
  int err = ::fstat(fd, st) != 0 ? errno : (same() ? 0 : ESTALE);
  if (err == 0 && (flags & O_NONBLOCK) == 0 &&
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0)
    err = errno;
  if (err == 0) return fd;
  ::close(fd);
  return -err;
}

void serve_open_same(Reader& r, Writer& w, Handles& handles) {
  std::string path(r.bytes());
  std::int32_t flags = r.i32();
  std::uint64_t dev = r.u64();
  std::uint64_t ino = r.u64();
  if (!r.done() || (flags & ~kOpenFlags) != 0 || (flags & (O_CREAT | O_EXCL)) != 0) ::_exit(3);
  auto t0 = Clock::now();
  struct ::stat st {};
  int fd_or_err = open_same(path, flags, dev, ino, &st);
  if (fd_or_err >= 0) handles.add(fd_or_err);
  put_stat(answer(w, fd_or_err < 0 ? -fd_or_err : 0, t0).i32(fd_or_err < 0 ? -1 : fd_or_err), st);
}

// Removes `path` if it is the regular file (device, inode) named; ESTALE
// otherwise. What is at the name is in the answer. The lstat() and the
// unlink() are separate calls (fs_helper.hpp, Fs::unlink_same).
void serve_unlink_same(Reader& r, Writer& w) {
  std::string path(r.bytes());
  std::uint64_t dev = r.u64();
  std::uint64_t ino = r.u64();
  if (!r.done()) ::_exit(3);
  auto t0 = Clock::now();
  struct ::stat st {};
  int err = ::lstat(path.c_str(), &st) == 0 ? 0 : errno;
  if (err == 0 && !(S_ISREG(st.st_mode) && st.st_dev == dev && st.st_ino == ino)) err = ESTALE;
  if (err == 0 && ::unlink(path.c_str()) != 0) err = errno;
  put_stat(answer(w, err, t0), st);
}

void serve_close(Reader& r, Writer& w, Handles& handles) {
  int h = handles.find(r.i32());
  if (!r.done()) ::_exit(3);
  auto t0 = Clock::now();
  int err = EBADF;
  if (h >= 0) {
    handles.remove(h);
    err = ::close(h) == 0 ? 0 : errno;
  }
  answer(w, err, t0);
}

// Writes `data` at `offset` from an O_DIRECT-aligned copy, all of it
// unless a write fails.
void serve_pwrite(Reader& r, Writer& w, const Handles& handles) {
  int h = handles.find(r.i32());
  std::int64_t offset = r.i64();
  std::string_view data = r.bytes();
  if (!r.done()) ::_exit(3);
  auto buf = aligned(data.size());
  auto t0 = Clock::now();
  int err = h < 0 ? EBADF : (buf ? 0 : ENOMEM);
  if (err == 0) {
    std::memcpy(buf.get(), data.data(), data.size());
    std::size_t done = 0;
    while (done < data.size()) {
      ssize_t n = ::pwrite(h, buf.get() + done, data.size() - done,
                           static_cast<off_t>(offset) + static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        err = errno;
        break;
      }
      if (n == 0) {
        err = EIO;
        break;
      }
      done += static_cast<std::size_t>(n);
    }
  }
  answer(w, err, t0);
}

// Reads up to the length asked into an O_DIRECT-aligned buffer; fewer
// bytes at the end of the file.
void serve_pread(Reader& r, Writer& w, const Handles& handles) {
  int h = handles.find(r.i32());
  std::int64_t offset = r.i64();
  std::uint64_t want = r.u64();
  if (!r.done() || want > kMaxFrameBytes - 64) ::_exit(3);
  auto buf = aligned(want);
  auto t0 = Clock::now();
  int err = h < 0 ? EBADF : (buf ? 0 : ENOMEM);
  std::size_t got = 0;
  while (err == 0 && got < want) {
    ssize_t n = ::pread(h, buf.get() + got, want - got,
                        static_cast<off_t>(offset) + static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      err = errno;
      break;
    }
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  answer(w, err, t0).bytes(std::string_view(buf ? buf.get() : "", got));
}

void serve_fsync(Reader& r, Writer& w, const Handles& handles) {
  int h = handles.find(r.i32());
  if (!r.done()) ::_exit(3);
  auto t0 = Clock::now();
  answer(w, h < 0 ? EBADF : (::fsync(h) == 0 ? 0 : errno), t0);
}

void serve_ftruncate(Reader& r, Writer& w, const Handles& handles) {
  int h = handles.find(r.i32());
  std::int64_t size = r.i64();
  if (!r.done()) ::_exit(3);
  auto t0 = Clock::now();
  answer(w, h < 0 ? EBADF : (::ftruncate(h, static_cast<off_t>(size)) == 0 ? 0 : errno), t0);
}

void serve_fadvise_dontneed(Reader& r, Writer& w, const Handles& handles) {
  int h = handles.find(r.i32());
  if (!r.done()) ::_exit(3);
  auto t0 = Clock::now();
  answer(w, h < 0 ? EBADF : ::posix_fadvise(h, 0, 0, POSIX_FADV_DONTNEED), t0);
}

// The names in a directory; none, with EOVERFLOW, when together they are
// over kMaxListingBytes.
void serve_list(Reader& r, Writer& w) {
  std::string dir(r.bytes());
  if (!r.done()) ::_exit(3);
  auto t0 = Clock::now();
  sources::Listing l = sources::FsRoot(dir).list("");
  std::size_t bytes = 0;
  for (const std::string& n : l.names) bytes += n.size();
  int err = l.ok() ? (bytes > kMaxListingBytes ? EOVERFLOW : 0) : l.err;
  answer(w, err, t0);
  if (err != 0) {
    w.u32(0);
  } else {
    w.u32(static_cast<std::uint32_t>(l.names.size()));
    for (const std::string& n : l.names) w.bytes(n);
  }
}

// A regular file's text and what fstat said of it (the mtime as the bits
// of a double).
void serve_read_regular(Reader& r, Writer& w) {
  std::string path(r.bytes());
  std::uint64_t max = r.u64();
  bool follow = r.u8() != 0;
  if (!r.done() || max > kMaxFrameBytes - 4096) ::_exit(3);
  auto t0 = Clock::now();
  sources::FsRoot::FileRead f;
  if (follow) {
    f = sources::FsRoot(path).read_regular("", static_cast<std::size_t>(max));
  } else {
    int fd = retry_open(path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW, 0);
    if (fd >= 0) {
      f = sources::FsRoot::read_regular_fd(fd, static_cast<std::size_t>(max));
    } else {
      f.err = -fd;
      f.status = sources::classify_errno(-fd);
    }
  }
  answer(w, f.ok() ? 0 : f.err, t0);
  double mtime = f.info ? f.info->mtime_seconds : 0;
  std::uint64_t mtime_bits = 0;
  std::memcpy(&mtime_bits, &mtime, sizeof mtime_bits);
  w.u8(f.info ? 1 : 0)
      .u8(f.info && f.info->regular ? 1 : 0)
      .u64(f.info ? f.info->size : 0)
      .u64(mtime_bits)
      .bytes(f.ok() ? std::string_view(f.text) : std::string_view());
}

// Answers one request; an unknown operation exits with 3.
void dispatch(Op op, Reader& r, Writer& w, Handles& handles) {
  switch (op) {
    case Op::kStat: serve_stat(r, w); return;
    case Op::kOpen: serve_open(r, w, handles); return;
    case Op::kClose: serve_close(r, w, handles); return;
    case Op::kPwrite: serve_pwrite(r, w, handles); return;
    case Op::kPread: serve_pread(r, w, handles); return;
    case Op::kFsync: serve_fsync(r, w, handles); return;
    case Op::kFtruncate: serve_ftruncate(r, w, handles); return;
    case Op::kFadviseDontneed: serve_fadvise_dontneed(r, w, handles); return;
    case Op::kList: serve_list(r, w); return;
    case Op::kReadRegular: serve_read_regular(r, w); return;
    case Op::kOpenSame: serve_open_same(r, w, handles); return;
    case Op::kUnlinkSame: serve_unlink_same(r, w); return;
  }
  ::_exit(3);
}

// Serves requests until the daemon closes its end (or sends nonsense).
[[noreturn]] void serve(int fd) {
  Handles handles;
  std::string req;
  for (;;) {
    std::uint32_t len = 0;
    if (!read_exact(fd, reinterpret_cast<char*>(&len), 4) || len == 0 || len > kMaxFrameBytes)
      ::_exit(0);
    req.resize(len);
    if (!read_exact(fd, req.data(), len)) ::_exit(0);
    Reader r(req);
    Writer w;
    dispatch(static_cast<Op>(r.u8()), r, w, handles);
    std::string out = std::move(w).frame();
    if (!write_exact(fd, out.data(), out.size())) ::_exit(0);
  }
}

// Signals the launcher and its helpers ignore: a terminal's SIGINT or
// SIGHUP to the process group, or a service manager's SIGTERM to the whole
// group, must not take them away from a daemon that is still running (the
// daemon reloads on SIGHUP). They end when the daemon's end of their
// socket closes (or, for a helper, with the launcher).
void ignore_group_signals() {
  for (int sig : {SIGINT, SIGHUP, SIGTERM, SIGPIPE, SIGQUIT, SIGUSR1, SIGUSR2})
    ::signal(sig, SIG_IGN);
}

void close_from(int first) {
  if (::close_range(static_cast<unsigned>(first), ~0U, 0) == 0) return;
  long max = ::sysconf(_SC_OPEN_MAX);
  for (int fd = first; fd < (max > 0 ? max : 1024); ++fd) ::close(fd);
}

[[noreturn]] void helper_main(int sock, pid_t launcher) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != launcher) ::_exit(0);  // the launcher is already gone
  ::prctl(PR_SET_NAME, "nwd-fs-helper");
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::signal(SIGCHLD, SIG_DFL);
  if (sock != 3) {
    ::dup2(sock, 3);  // replaces the launcher's channel, which fd 3 is
    ::close(sock);
  } else {
    ::fcntl(3, F_SETFD, 0);
  }
  close_from(4);
  serve(3);
}

// Launcher side: answers one spawn request on `ctl`.
void spawn_one(int ctl) {
  std::int32_t reply[2] = {0, 0};  // errno, pid
  int sv[2] = {-1, -1};
  int pidfd = -1;
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    reply[0] = errno;
  } else {
    pid_t me = ::getpid();
    pid_t pid = ::fork();
    if (pid == 0) helper_main(sv[1], me);
    ::close(sv[1]);
    if (pid < 0) {
      reply[0] = errno;
    } else {
      pidfd = pidfd_open(pid);
      if (pidfd < 0) {
        reply[0] = errno;
        ::kill(pid, SIGKILL);  // not reaped yet: the pid is still this child's
      } else {
        reply[1] = pid;
      }
    }
  }
  msghdr msg{};
  iovec iov{reply, sizeof reply};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(2 * sizeof(int))] = {};
  if (reply[0] == 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(2 * sizeof(int));
    int fds[2] = {sv[0], pidfd};
    std::memcpy(CMSG_DATA(c), fds, sizeof fds);
  }
  ssize_t rc;
  do {
    rc = ::sendmsg(ctl, &msg, MSG_NOSIGNAL);
  } while (rc < 0 && errno == EINTR);
  if (sv[0] >= 0) ::close(sv[0]);
  if (pidfd >= 0) ::close(pidfd);
}

[[noreturn]] void launcher_main(int ctl) {
  ::prctl(PR_SET_NAME, "nwd-launcher");
  ignore_group_signals();
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  ::sigprocmask(SIG_BLOCK, &chld, nullptr);
  int sfd = ::signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
  for (;;) {
    pollfd p[2] = {{ctl, POLLIN, 0}, {sfd, POLLIN, 0}};
    // Without a signalfd, children are reaped once a second.
    int n = ::poll(p, sfd >= 0 ? 2 : 1, sfd >= 0 ? -1 : 1000);
    if (n < 0 && errno != EINTR) ::_exit(1);
    if (sfd >= 0 && (p[1].revents & POLLIN) != 0) {
      signalfd_siginfo info;
      while (::read(sfd, &info, sizeof info) == sizeof info) {
      }
    }
    // Every helper that has ended, whichever signal was coalesced.
    while (::waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    if ((p[0].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
      char req[8];
      ssize_t got = ::recv(ctl, req, sizeof req, 0);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) ::_exit(0);  // the daemon is gone
      if (req[0] == 'S') spawn_one(ctl);
    }
  }
}

// ---------------------------------------------------------------------------
// Daemon side: the launcher's channel and the abandoned helpers.

struct Abandoned {
  std::string key;
  UniqueFd pidfd;
};

struct State {
  std::mutex mu;  // the fields below
  int launcher = -1;
  pid_t launcher_pid = 0;
  std::vector<Abandoned> abandoned;
  std::set<std::string, std::less<>> in_flight;  // keys with a call in flight
  std::size_t running = 0;
  std::vector<pid_t> dead_launchers;  // not reaped yet
  // One conversation with the launcher at a time: `talking` under
  // talk_mu, waited for on talk_cv (a condition variable rather than a
  // timed mutex, whose pthread_mutex_clocklock GCC 12's ThreadSanitizer
  // does not know).
  std::mutex talk_mu;
  std::condition_variable talk_cv;
  bool talking = false;
  // When the launcher was last started again (by the caller talking).
  std::optional<Clock::time_point> relaunched;
};

// Never destroyed: helpers may be abandoned while the process exits.
State& state() {
  static State* s = new State;
  return *s;
}

bool exited(int pidfd) {
  pollfd p{pidfd, POLLIN, 0};
  return ::poll(&p, 1, 0) != 0;  // readable once the process has ended; an error too
}

// Forgets the abandoned helpers that have ended. Under the state's lock.
void prune(State& s) {
  std::erase_if(s.abandoned, [](const Abandoned& a) { return exited(a.pidfd.get()); });
}

int count_threads() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::atoi(line.c_str() + 8);
  }
  return 0;
}

// Waits for `events` on `fd` until the deadline or the cancel flag; the
// failure, or kNone when ready.
Failure wait_for(int fd, short events, const Deadline& d) {
  for (;;) {
    if (d.cancel != nullptr && d.cancel->load(std::memory_order_relaxed))
      return Failure::kCancelled;
    auto now = Clock::now();
    if (now >= d.at) return Failure::kTimeout;
    auto left = std::chrono::ceil<std::chrono::milliseconds>(d.at - now);
    pollfd p{fd, events, 0};
    int n = ::poll(&p, 1, static_cast<int>(std::min(left, kCancelSlice).count()));
    if (n < 0 && errno != EINTR) return Failure::kBroken;
    if (n > 0) return Failure::kNone;  // ready, or hung up: the read or write says which
  }
}

}  // namespace

std::string start_launcher() {
  State& s = state();
  {
    std::lock_guard lock(s.mu);
    if (s.launcher >= 0) return "";
  }
  // Descriptors 0-2 open (on /dev/null when the process was started
  // without them), so that no socket below takes their place.
  for (;;) {
    int fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    if (fd < 0) break;
    if (fd > 2) {
      ::close(fd);
      break;
    }
    ::fcntl(fd, F_SETFD, 0);
  }
  if (int threads = count_threads(); threads > 1)
    return "the process already has " + std::to_string(threads) +
           " threads: a launcher forked now could inherit a lock another thread holds";
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
    return std::string("socketpair: ") + std::strerror(errno);
  pid_t pid = ::fork();
  if (pid < 0) {
    int err = errno;
    ::close(sv[0]);
    ::close(sv[1]);
    return std::string("fork: ") + std::strerror(err);
  }
  if (pid == 0) {
    int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    for (int fd = 0; fd < 3 && null >= 0; ++fd) ::dup2(null, fd);
    ::dup2(sv[1], 3);  // the launcher's channel is fd 3 from here on
    close_from(4);
    launcher_main(3);
  }
  ::close(sv[1]);
  std::lock_guard lock(s.mu);
  s.launcher = sv[0];
  s.launcher_pid = pid;
  return "";
}

void launcher_entry(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], kLauncherFlag) == 0) launcher_main(3);
}

pid_t launcher_pid() {
  State& s = state();
  std::lock_guard lock(s.mu);
  return s.launcher >= 0 ? s.launcher_pid : 0;
}

bool launcher_running() {
  State& s = state();
  std::lock_guard lock(s.mu);
  return s.launcher >= 0;
}

std::string_view failure_name(Failure f) {
  switch (f) {
    case Failure::kNone: return "";
    case Failure::kTimeout: return "timeout";
    case Failure::kCancelled: return "cancelled";
    case Failure::kBlocked: return "blocked";
    case Failure::kBusy: return "busy";
    case Failure::kLimit: return "limit";
    case Failure::kUnavailable: return "unavailable";
    case Failure::kBroken: return "broken";
  }
  return "";
}

std::size_t abandoned(std::string_view key_prefix) {
  State& s = state();
  std::lock_guard lock(s.mu);
  prune(s);
  return static_cast<std::size_t>(std::count_if(
      s.abandoned.begin(), s.abandoned.end(),
      [&](const Abandoned& a) { return a.key.compare(0, key_prefix.size(), key_prefix) == 0; }));
}

bool blocked(std::string_view key) {
  State& s = state();
  std::lock_guard lock(s.mu);
  prune(s);
  return std::any_of(s.abandoned.begin(), s.abandoned.end(),
                     [&](const Abandoned& a) { return a.key == key; });
}

bool busy(std::string_view key) {
  State& s = state();
  std::lock_guard lock(s.mu);
  return s.in_flight.count(key) != 0;
}

std::size_t running() {
  State& s = state();
  std::lock_guard lock(s.mu);
  return s.running;
}

// One running helper.
struct Fs::Process {
  pid_t pid = 0;
  UniqueFd sock;   // non-blocking
  UniqueFd pidfd;  // the exact process, for signals and its exit
};

namespace {

// Starts a replacement launcher after the first one died (killed by hand or
// by the OOM killer; every helper died with it). This process has threads
// by now, so it cannot fork one: it execs its own binary again with
// kLauncherFlag (launcher_entry() in main() answers it), its channel as
// descriptor 3, /dev/null as 0-2, nothing else, an empty environment and
// default signals. By the caller talking to the launcher; false when it
// could not.
bool relaunch(State& s) {
  auto now = Clock::now();
  if (s.relaunched && now - *s.relaunched < kRelaunchBackoff) return false;
  s.relaunched = now;
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) return false;
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  ::posix_spawn_file_actions_init(&fa);
  ::posix_spawnattr_init(&attr);
  ::posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDWR, 0);
  ::posix_spawn_file_actions_adddup2(&fa, 0, 1);
  ::posix_spawn_file_actions_adddup2(&fa, 0, 2);
  ::posix_spawn_file_actions_adddup2(&fa, sv[1], 3);
  ::posix_spawn_file_actions_addclosefrom_np(&fa, 4);
  sigset_t none;
  sigset_t all;
  sigemptyset(&none);
  sigfillset(&all);
  ::posix_spawnattr_setsigmask(&attr, &none);
  ::posix_spawnattr_setsigdefault(&attr, &all);
  ::posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  char arg0[] = "nodewatchd";
  std::string flag = kLauncherFlag;
  char* argv[] = {arg0, flag.data(), nullptr};
  char* envp[] = {nullptr};
  pid_t pid = 0;
  int rc = ::posix_spawn(&pid, "/proc/self/exe", &fa, &attr, argv, envp);
  ::posix_spawn_file_actions_destroy(&fa);
  ::posix_spawnattr_destroy(&attr);
  ::close(sv[1]);
  if (rc != 0) {
    ::close(sv[0]);
    return false;
  }
  std::lock_guard lock(s.mu);
  s.launcher = sv[0];
  s.launcher_pid = pid;
  return true;
}

// Asks the launcher on `ctl` for a helper. kNone with the helper's pid and
// descriptors; kUnavailable otherwise, with `launcher_gone` when the
// launcher is dead or does not answer within kSpawnLimit. Every descriptor
// received is either handed out or closed (a socket closed here makes its
// helper read the end of its stream and exit).
Failure ask_launcher(int ctl, pid_t* pid, UniqueFd* sock, UniqueFd* pidfd, bool* launcher_gone) {
  *launcher_gone = true;
  char req = 'S';
  ssize_t sent;
  do {
    sent = ::send(ctl, &req, 1, MSG_NOSIGNAL);
  } while (sent < 0 && errno == EINTR);
  if (sent != 1) return Failure::kUnavailable;
  if (wait_for(ctl, POLLIN, Deadline{Clock::now() + kSpawnLimit}) != Failure::kNone)
    return Failure::kUnavailable;
  std::int32_t reply[2] = {0, 0};
  msghdr msg{};
  iovec iov{reply, sizeof reply};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(4 * sizeof(int))] = {};
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t got;
  do {
    got = ::recvmsg(ctl, &msg, MSG_CMSG_CLOEXEC);
  } while (got < 0 && errno == EINTR);
  std::vector<UniqueFd> fds;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    std::size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t i = 0; i < n; ++i) {
      int fd = -1;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      fds.emplace_back(fd);
    }
  }
  if (got != sizeof reply) return Failure::kUnavailable;  // dead (0) or out of step
  *launcher_gone = false;
  // Short of descriptors here, the kernel delivers fewer than sent
  // (MSG_CTRUNC): what did arrive is closed with `fds`.
  if (reply[0] != 0 || reply[1] <= 0 || fds.size() != 2 || (msg.msg_flags & MSG_CTRUNC) != 0)
    return Failure::kUnavailable;  // the launcher could not fork, or this process is out of fds
  ::fcntl(fds[0].get(), F_SETFL, ::fcntl(fds[0].get(), F_GETFL) | O_NONBLOCK);
  *pid = reply[1];
  *sock = std::move(fds[0]);
  *pidfd = std::move(fds[1]);
  return Failure::kNone;
}

// Reaps launchers that died, without waiting. Under the state's lock.
void reap_launchers(State& s) {
  std::erase_if(s.dead_launchers, [](pid_t pid) { return ::waitpid(pid, nullptr, WNOHANG) != 0; });
}

// Starts a helper for `key`; starts a replacement launcher first when the
// launcher has died. Waits for another caller's conversation with the
// launcher until `d` at most (a slow launcher is a machine in trouble: its
// conversation is bounded by kSpawnLimit, not by the caller's deadline).
Failure spawn(const std::string& key, const Deadline& d, pid_t* pid, UniqueFd* sock,
              UniqueFd* pidfd) {
  State& s = state();
  {
    std::lock_guard lock(s.mu);
    prune(s);
    reap_launchers(s);
    if (std::any_of(s.abandoned.begin(), s.abandoned.end(),
                    [&](const Abandoned& a) { return a.key == key; }))
      return Failure::kBlocked;
    if (s.running + s.abandoned.size() >= kMaxHelpers) return Failure::kLimit;
    if (s.launcher < 0 && s.launcher_pid == 0) return Failure::kUnavailable;  // never started
    ++s.running;  // reserved; given back below unless a helper was started
  }
  struct Reservation {
    State& s;
    bool kept = false;
    ~Reservation() {
      if (kept) return;
      std::lock_guard lock(s.mu);
      --s.running;
    }
  } reservation{s};
  {
    std::unique_lock lock(s.talk_mu);
    if (!s.talk_cv.wait_until(lock, d.at, [&] { return !s.talking; }))
      return Failure::kUnavailable;  // another caller's conversation outlasted our deadline
    s.talking = true;
  }
  struct Talking {
    State& s;
    ~Talking() {
      {
        std::lock_guard lock(s.talk_mu);
        s.talking = false;
      }
      s.talk_cv.notify_one();
    }
  } talking{s};
  for (int attempt = 0; attempt < 2; ++attempt) {
    int ctl = -1;
    {
      std::lock_guard lock(s.mu);
      ctl = s.launcher;
    }
    if (ctl < 0) {
      if (!relaunch(s)) break;
      std::lock_guard lock(s.mu);
      ctl = s.launcher;
    }
    bool gone = false;
    if (ask_launcher(ctl, pid, sock, pidfd, &gone) == Failure::kNone) {
      reservation.kept = true;
      return Failure::kNone;
    }
    if (!gone) break;
    // It died (killed, or out of memory), and its helpers with it, or it
    // does not answer: end it (our child, not reaped yet, so the pid is
    // still its), reap it later without waiting, and start a replacement
    // (at most once every kRelaunchBackoff).
    std::lock_guard lock(s.mu);
    ::close(s.launcher);
    s.launcher = -1;
    ::kill(s.launcher_pid, SIGKILL);
    s.dead_launchers.push_back(s.launcher_pid);
    reap_launchers(s);
  }
  return Failure::kUnavailable;
}

Failure write_frame(int fd, std::string_view frame, const Deadline& d) {
  while (!frame.empty()) {
    ssize_t w = ::send(fd, frame.data(), frame.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      frame.remove_prefix(static_cast<std::size_t>(w));
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (Failure f = wait_for(fd, POLLOUT, d); f != Failure::kNone) return f;
      continue;
    }
    return Failure::kBroken;
  }
  return Failure::kNone;
}

Failure read_exact_until(int fd, char* p, std::size_t n, const Deadline& d) {
  while (n > 0) {
    ssize_t r = ::recv(fd, p, n, MSG_DONTWAIT);
    if (r > 0) {
      p += r;
      n -= static_cast<std::size_t>(r);
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (Failure f = wait_for(fd, POLLIN, d); f != Failure::kNone) return f;
      continue;
    }
    return Failure::kBroken;  // the end of the stream: the helper died
  }
  return Failure::kNone;
}

}  // namespace

Fs::Fs(std::string key, std::shared_ptr<sources::Faults> faults)
    : key_(std::move(key)), faults_(std::move(faults)) {}

Fs::~Fs() {
  if (!proc_) return;
  // Idle (every call ends answered or abandons): it reads the end of its
  // socket and exits.
  proc_.reset();
  State& s = state();
  std::lock_guard lock(s.mu);
  --s.running;
}

void Fs::abandon() {
  if (!proc_) return;
  ++generation_;  // its handles die with it
  pidfd_kill(proc_->pidfd.get());
  State& s = state();
  std::lock_guard lock(s.mu);
  --s.running;
  s.abandoned.push_back(Abandoned{key_, std::move(proc_->pidfd)});
  proc_.reset();
}

bool Fs::blocked() const {
  return helper::blocked(key_);
}

pid_t Fs::pid() const {
  return proc_ ? proc_->pid : 0;
}

std::optional<int> Fs::fault(const std::string& path) const {
  if (!faults_) return std::nullopt;
  return faults_->take(path);
}

Answer Fs::call(std::string_view request, const Deadline& d, std::string* reply) {
  Answer a;
  State& s = state();
  {
    std::lock_guard lock(s.mu);
    prune(s);
    if (std::any_of(s.abandoned.begin(), s.abandoned.end(),
                    [&](const Abandoned& e) { return e.key == key_; }))
      return Answer{Failure::kBlocked, 0, {}};
    if (!s.in_flight.insert(key_).second) return Answer{Failure::kBusy, 0, {}};
  }
  struct Landed {
    State& s;
    const std::string& key;
    ~Landed() {
      std::lock_guard lock(s.mu);
      s.in_flight.erase(key);
    }
  } landed{s, key_};
  // Past the deadline already (the rest of an operation whose earlier call
  // used it up), or stopping: nothing is started.
  if (d.cancel != nullptr && d.cancel->load(std::memory_order_relaxed))
    return Answer{Failure::kCancelled, 0, {}};
  if (Clock::now() >= d.at) return Answer{Failure::kTimeout, 0, {}};
  if (!proc_) {
    auto p = std::make_unique<Process>();
    a.failure = spawn(key_, d, &p->pid, &p->sock, &p->pidfd);
    if (!a.answered()) return a;
    proc_ = std::move(p);
    ++generation_;
  }
  int fd = proc_->sock.get();
  a.failure = write_frame(fd, request, d);
  std::uint32_t len = 0;
  if (a.answered()) a.failure = read_exact_until(fd, reinterpret_cast<char*>(&len), 4, d);
  if (a.answered() && (len < 12 || len > kMaxFrameBytes)) a.failure = Failure::kBroken;
  if (a.answered()) {
    try {
      reply->resize(len);
    } catch (const std::bad_alloc&) {
      a.failure = Failure::kBroken;  // its answer is left unread: it is out of step
    }
  }
  if (a.answered()) a.failure = read_exact_until(fd, reply->data(), len, d);
  if (!a.answered()) {
    abandon();  // in the kernel, dead, or out of step: it is never asked again
    return a;
  }
  // Every answer starts with the errno and the time taken.
  Reader r(*reply);
  a.err = r.i32();
  a.took = std::chrono::nanoseconds(r.u64());
  reply->erase(0, 12);
  return a;
}

namespace {

// Turns an answer whose fields did not parse into a broken one.
Answer broken_unless(bool ok, Answer a) {
  if (!ok) {
    a.failure = Failure::kBroken;
    a.err = 0;
  }
  return a;
}

}  // namespace

namespace {

// Reads a stat answer's fields (put_stat); false when they do not parse.
bool read_stat(Reader& r, StatInfo* out) {
  StatInfo info;
  info.mode = static_cast<mode_t>(r.u32());
  info.size = r.u64();
  std::int64_t sec = r.i64();
  std::int64_t nsec = r.i64();
  info.mtime_seconds = static_cast<double>(sec) + static_cast<double>(nsec) / 1e9;
  info.dev = r.u64();
  info.ino = r.u64();
  info.uid = static_cast<uid_t>(r.u32());
  info.nlink = r.u64();
  if (!r.ok()) return false;
  if (out != nullptr) *out = info;
  return true;
}

}  // namespace

Answer Fs::stat(const std::string& path, const Deadline& d, StatInfo* out, bool follow_links) {
  if (auto err = fault(path)) return Answer{Failure::kNone, *err, {}};
  std::string reply;
  Answer a = call(Writer()
                      .u8(static_cast<std::uint8_t>(Op::kStat))
                      .bytes(path)
                      .u8(follow_links ? 1 : 0)
                      .frame(),
                  d, &reply);
  if (!a.answered()) return a;
  Reader r(reply);
  StatInfo info;
  if (!read_stat(r, &info) || !r.done()) {
    abandon();
    return broken_unless(false, a);
  }
  if (out != nullptr) *out = info;
  return a;
}

// The answer of an open: the handle and the fstat() of what was opened (or
// found).
Answer Fs::opened(const Answer& a, const std::string& reply, int* handle, StatInfo* st) {
  if (!a.answered()) return a;
  Reader r(reply);
  std::int32_t h = r.i32();
  StatInfo info;
  if (!read_stat(r, &info) || !r.done() || (a.err == 0 && h < 0)) {
    abandon();
    return broken_unless(false, a);
  }
  *handle = a.err == 0 ? h : -1;
  if (st != nullptr) *st = info;
  return a;
}

Answer Fs::open(const std::string& path, int flags, mode_t mode, const Deadline& d, int* handle,
                StatInfo* opened_file) {
  *handle = -1;
  if (auto err = fault(path)) return Answer{Failure::kNone, *err, {}};
  std::string reply;
  Answer a = call(Writer()
                      .u8(static_cast<std::uint8_t>(Op::kOpen))
                      .bytes(path)
                      .i32(flags & ~O_CLOEXEC)
                      .u32(mode)
                      .frame(),
                  d, &reply);
  return opened(a, reply, handle, opened_file);
}

Answer Fs::open_same(const std::string& path, int flags, const StatInfo& file, const Deadline& d,
                     int* handle, StatInfo* found) {
  *handle = -1;
  *found = StatInfo{};
  if (auto err = fault(path)) return Answer{Failure::kNone, *err, {}};
  std::string reply;
  Answer a = call(Writer()
                      .u8(static_cast<std::uint8_t>(Op::kOpenSame))
                      .bytes(path)
                      .i32(flags & ~O_CLOEXEC)
                      .u64(file.dev)
                      .u64(file.ino)
                      .frame(),
                  d, &reply);
  return opened(a, reply, handle, found);
}

Answer Fs::unlink_same(const std::string& path, const StatInfo& file, const Deadline& d,
                       StatInfo* found) {
  if (auto err = fault(path)) return Answer{Failure::kNone, *err, {}};
  std::string reply;
  Answer a = call(Writer()
                      .u8(static_cast<std::uint8_t>(Op::kUnlinkSame))
                      .bytes(path)
                      .u64(file.dev)
                      .u64(file.ino)
                      .frame(),
                  d, &reply);
  if (!a.answered()) return a;
  Reader r(reply);
  if (!read_stat(r, found) || !r.done()) {
    abandon();
    return broken_unless(false, a);
  }
  return a;
}

namespace {

// The answer of a request that returns nothing but the errno.
template <class Call>
Answer plain(Fs& fs, Call&& call) {
  std::string reply;
  Answer a = call(reply);
  if (a.answered() && !reply.empty()) {
    fs.abandon();
    return broken_unless(false, a);
  }
  return a;
}

}  // namespace

Answer Fs::close(int handle, const Deadline& d) {
  return plain(*this, [&](std::string& reply) {
    return call(Writer().u8(static_cast<std::uint8_t>(Op::kClose)).i32(handle).frame(), d, &reply);
  });
}

Answer Fs::pwrite(int handle, std::string_view data, off_t offset, const Deadline& d) {
  return plain(*this, [&](std::string& reply) {
    return call(Writer()
                    .u8(static_cast<std::uint8_t>(Op::kPwrite))
                    .i32(handle)
                    .i64(offset)
                    .bytes(data)
                    .frame(),
                d, &reply);
  });
}

Answer Fs::pread(int handle, std::size_t len, off_t offset, const Deadline& d, std::string* out) {
  std::string reply;
  Answer a = call(
      Writer().u8(static_cast<std::uint8_t>(Op::kPread)).i32(handle).i64(offset).u64(len).frame(),
      d, &reply);
  if (!a.answered()) return a;
  Reader r(reply);
  std::string_view data = r.bytes();
  if (!r.done() || data.size() > len) {
    abandon();
    return broken_unless(false, a);
  }
  out->assign(data);
  return a;
}

Answer Fs::fsync(int handle, const Deadline& d) {
  return plain(*this, [&](std::string& reply) {
    return call(Writer().u8(static_cast<std::uint8_t>(Op::kFsync)).i32(handle).frame(), d, &reply);
  });
}

Answer Fs::ftruncate(int handle, off_t len, const Deadline& d) {
  return plain(*this, [&](std::string& reply) {
    return call(Writer().u8(static_cast<std::uint8_t>(Op::kFtruncate)).i32(handle).i64(len).frame(),
                d, &reply);
  });
}

Answer Fs::fadvise_dontneed(int handle, const Deadline& d) {
  return plain(*this, [&](std::string& reply) {
    return call(Writer().u8(static_cast<std::uint8_t>(Op::kFadviseDontneed)).i32(handle).frame(), d,
                &reply);
  });
}

sources::Listing Fs::list(const std::string& dir, const Deadline& d, Answer* answer) {
  sources::Listing l;
  auto errno_answer = [&l](int err) {
    l.err = err;
    l.status = err == 0 ? sources::Status::kOk : sources::classify_errno(err);
  };
  if (auto err = fault(dir)) {
    *answer = Answer{Failure::kNone, *err, {}};
    errno_answer(*err);
    return l;
  }
  std::string reply;
  *answer = call(Writer().u8(static_cast<std::uint8_t>(Op::kList)).bytes(dir).frame(), d, &reply);
  if (!answer->answered()) {
    errno_answer(EIO);
    return l;
  }
  Reader r(reply);
  std::uint32_t n = r.u32();
  for (std::uint32_t i = 0; i < n && r.ok(); ++i) l.names.emplace_back(r.bytes());
  if (!r.done()) {
    abandon();
    *answer = broken_unless(false, *answer);
    l.names.clear();
    errno_answer(EIO);
    return l;
  }
  errno_answer(answer->err);
  return l;
}

sources::FsRoot::FileRead Fs::read_regular(const std::string& path, std::size_t max_bytes,
                                           const Deadline& d, Answer* answer, bool follow_links) {
  sources::FsRoot::FileRead f;
  auto errno_answer = [&f](int err) {
    f.err = err;
    f.status = err == 0 ? sources::Status::kOk : sources::classify_errno(err);
  };
  if (auto err = fault(path)) {
    *answer = Answer{Failure::kNone, *err, {}};
    errno_answer(*err);
    return f;
  }
  std::string reply;
  *answer = call(Writer()
                     .u8(static_cast<std::uint8_t>(Op::kReadRegular))
                     .bytes(path)
                     .u64(max_bytes)
                     .u8(follow_links ? 1 : 0)
                     .frame(),
                 d, &reply);
  if (!answer->answered()) {
    errno_answer(EIO);
    return f;
  }
  Reader r(reply);
  bool has_info = r.u8() != 0;
  bool regular = r.u8() != 0;
  std::uint64_t size = r.u64();
  std::uint64_t mtime_bits = r.u64();
  std::string_view text = r.bytes();
  if (!r.done() || text.size() > max_bytes) {
    abandon();
    *answer = broken_unless(false, *answer);
    errno_answer(EIO);
    return f;
  }
  if (has_info) {
    double mtime = 0;
    std::memcpy(&mtime, &mtime_bits, sizeof mtime);
    f.info = sources::FsRoot::FileInfo{regular, size, mtime};
  }
  errno_answer(answer->err);
  if (f.ok()) f.text.assign(text);
  return f;
}

namespace {

// Why an operator's file got no answer, as a sentence; "" when it did.
std::string unanswered(Failure f, std::chrono::milliseconds timeout, std::string_view what) {
  switch (f) {
    case Failure::kNone: return "";
    case Failure::kTimeout:
    case Failure::kCancelled:
      return "no answer from the file system within " +
             std::to_string(static_cast<long long>(timeout.count())) + " ms (a hung mount?); not " +
             std::string(what);
    case Failure::kBlocked:
      return "an earlier read of it is still held by the kernel (a hung mount?); not " +
             std::string(what);
    case Failure::kBusy: return "being read already (another reload); not " + std::string(what);
    default: return "its read failed (" + std::string(failure_name(f)) + ")";
  }
}

std::string absolute_path(const std::string& path) {
  std::error_code ec;
  std::filesystem::path abs = std::filesystem::absolute(path, ec);
  return ec ? path : abs.string();
}

}  // namespace

OperatorPath stat_operator_path(const std::string& path, bool follow_links,
                                std::chrono::milliseconds timeout) {
  OperatorPath out;
  const std::string abs = absolute_path(path);
  Answer a;
  a.failure = Failure::kUnavailable;
  if (launcher_running()) {
    Fs fs("file:" + abs);
    a = fs.stat(abs, Deadline{Clock::now() + timeout}, &out.info, follow_links);
  }
  if (a.failure == Failure::kUnavailable) {
    struct ::stat st {};
    const int rc = follow_links ? ::stat(abs.c_str(), &st) : ::lstat(abs.c_str(), &st);
    a = Answer{};
    a.err = rc == 0 ? 0 : errno;
    if (rc == 0) {
      out.info.mode = st.st_mode;
      out.info.size = static_cast<std::uint64_t>(st.st_size);
      out.info.dev = st.st_dev;
      out.info.ino = st.st_ino;
      out.info.uid = st.st_uid;
      out.info.nlink = st.st_nlink;
    }
  }
  out.error = unanswered(a.failure, timeout, "checked");
  out.answered = out.error.empty();
  out.err = a.err;
  return out;
}

OperatorFile read_operator_file(const std::string& path, std::size_t max_bytes,
                                std::chrono::milliseconds timeout) {
  OperatorFile out;
  const std::filesystem::path abs = absolute_path(path);
  sources::FsRoot::FileRead f;
  Answer a;
  // EFBIG from a file whose fstat() size was within the bound: it grew
  // while being read (an editor or a deployment writing it). Read again,
  // a few times, before saying so.
  const auto grew = [&] { return f.err == EFBIG && f.info && f.info->size <= max_bytes; };
  constexpr int kTries = 3;
  int tries = 0;
  do {
    a = Answer{};
    if (launcher_running()) {
      Fs fs("file:" + abs.string());
      f = fs.read_regular(abs.string(), max_bytes, Deadline{Clock::now() + timeout}, &a);
    }
    if (!launcher_running() || a.failure == Failure::kUnavailable) {
      f = sources::FsRoot(abs).read_regular("", max_bytes);
      a = Answer{};
    }
  } while (a.failure == Failure::kNone && !f.ok() && grew() && ++tries < kTries);
  out.error = unanswered(a.failure, timeout, "read");
  if (!out.error.empty()) return out;
  if (f.ok()) {
    out.ok = true;
    out.text = std::move(f.text);
    return out;
  }
  out.absent = f.status == sources::Status::kAbsent;
  if (out.absent)
    out.error = "no such file";
  else if (f.err == EINVAL && f.info && !f.info->regular)
    out.error = "not a regular file";
  else if (grew())
    out.error =
        "changed while being read, " + std::to_string(kTries) + " times (being written?); not read";
  else if (f.err == EFBIG)
    out.error = "larger than " + std::to_string(max_bytes) + " bytes";
  else
    out.error = std::strerror(f.err);
  return out;
}

}  // namespace nodewatch::helper
