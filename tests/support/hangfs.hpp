#pragma once
// A real FUSE mount that stops answering on demand (tests/fakes/hangfs): the
// test's stand-in for a hard NFS or Lustre mount whose server went away.
//
//   HangFs fs(backing, mountpoint);  // mounts; files are those of `backing`
//   ASSERT_TRUE(fs.mounted());
//   fs.hang();                       // requests are read by the server, held
//   ... a thread or child touches the mount and stays in the kernel ...
//   ASSERT_TRUE(fs.wait_held(1, 2s));
//   fs.answer();                     // the held requests are served, in order
//
// The destructor kills the server, which aborts the connection: every caller
// still waiting gets an error (ECONNABORTED; later calls ENOTCONN) and
// returns, even one sent SIGKILL (it then dies), and the mount is
// detached. It never blocks for long, whatever state the test left things in.
// Should the test process die instead, the server is sent SIGTERM (its
// parent-death signal) and unmounts itself; that signal follows the thread
// that made the HangFs, so make it in a thread that outlives it (the test
// body's).
//
// A caller held in the mount waits in state D (request_wait_answer); no
// signal, SIGKILL included, frees it before answer() or the destructor.
// Nothing here touches the mount, so every method may be called while it is
// hung. Not thread-safe: one thread drives it. Skip a test with GTEST_SKIP() <<
// HangFs::unavailable() when that is not empty.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "nodewatch/unique_fd.hpp"
#include "support/paths.hpp"

namespace nodewatch::testing {

class HangFs {
 public:
  // The file-system type in /proc/self/mountinfo ("fuse." and the subtype).
  static constexpr const char* kFsType = "fuse.nodewatch-hangfs";

  // Empty when a FUSE mount can be made here; else why not, for GTEST_SKIP.
  static std::string unavailable() {
    std::string binary = NODEWATCH_HANGFS;
    if (::access(binary.c_str(), X_OK) != 0) {
      return "hung-mount test skipped: " + binary + " is not built: " + std::strerror(errno);
    }
    struct stat st {};
    if (::stat("/dev/fuse", &st) != 0) {
      return "hung-mount test skipped: no /dev/fuse (" + std::string(std::strerror(errno)) +
             "): load the fuse module or pass the device into the container";
    }
    UniqueFd fd(::open("/dev/fuse", O_RDWR | O_CLOEXEC));
    if (fd.get() < 0) {
      return "hung-mount test skipped: cannot open /dev/fuse (" +
             std::string(std::strerror(errno)) + "): run the tests as root";
    }
    if (::geteuid() != 0 || !has_cap_sys_admin()) {
      return "hung-mount test skipped: nodewatch-hangfs mounts with mount(2), which needs root "
             "with CAP_SYS_ADMIN";
    }
    return {};
  }

  // Whether /proc/self/mountinfo lists a hangfs mount at `mountpoint`. It
  // never touches the mount itself (a hung one would hold the caller).
  static bool mount_listed(const std::filesystem::path& mountpoint) {
    std::string want = resolve(mountpoint).string();
    std::ifstream in("/proc/self/mountinfo");
    std::string line;
    // "36 35 0:42 / /tmp/x/mnt rw,relatime shared:1 - fuse.nodewatch-hangfs nodewatch-hangfs rw"
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string id, parent, dev, root, point, word;
      fields >> id >> parent >> dev >> root >> point;
      while (fields >> word && word != "-") {
      }
      std::string type;
      fields >> type;
      if (type == kFsType && unescape(point) == want) return true;
    }
    return false;
  }

  // Mounts `backing_dir` (a directory) at `mountpoint` (an empty directory)
  // and waits up to 5 s for the server to say it is ready.
  // `hold`: the operations held while hung ("fsync", "write", ...: the
  // server's --hold); empty: every request.
  HangFs(const std::filesystem::path& backing_dir, const std::filesystem::path& mountpoint,
         const std::vector<std::string>& hold = {}) {
    mountpoint_ = resolve(mountpoint);
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "nodewatch-hangfs-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) {
      ADD_FAILURE() << "mkdtemp: " << std::strerror(errno);
      return;
    }
    status_dir_ = tmpl;
    status_file_ = status_dir_ / "status";
    inotify_.reset(::inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
    if (inotify_.get() >= 0) {
      ::inotify_add_watch(inotify_.get(), status_dir_.c_str(), IN_MOVED_TO | IN_CLOSE_WRITE);
    }
    int out[2];
    if (::pipe2(out, O_CLOEXEC) != 0) {
      ADD_FAILURE() << "pipe2: " << std::strerror(errno);
      return;
    }
    UniqueFd out_read(out[0]), out_write(out[1]);

    // Everything the child needs, made before fork(): between fork() and
    // exec() only async-signal-safe calls.
    std::vector<std::string> args = {NODEWATCH_HANGFS, "--status", status_file_.string()};
    for (const std::string& op : hold) {
      args.push_back("--hold");
      args.push_back(op);
    }
    args.push_back(backing_dir.string());
    args.push_back(mountpoint_.string());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ < 0) {
      ADD_FAILURE() << "fork: " << std::strerror(errno);
      return;
    }
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (::getppid() != parent) ::_exit(1);
      ::dup2(out_write.get(), STDOUT_FILENO);
      ::close_range(3, ~0U, 0);  // nothing of the test's: no descriptor kept open by the server
      // The server reads its control signals from a signalfd: one the test
      // ignores (SIG_IGN survives exec) would never reach it.
      for (int sig : {SIGUSR1, SIGUSR2, SIGTERM, SIGINT, SIGCHLD, SIGPIPE}) ::signal(sig, SIG_DFL);
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    out_write.reset();
    mounted_ = wait_ready(out_read.get(), std::chrono::seconds(5));
    if (!mounted_) ADD_FAILURE() << "nodewatch-hangfs did not mount " << mountpoint_;
  }

  ~HangFs() {
    if (pid_ > 0) {
      // Closing /dev/fuse (the server's exit) aborts the connection: the
      // kernel ends every request still waiting with ECONNABORTED.
      ::kill(pid_, SIGKILL);
      wait_exit(std::chrono::seconds(5));
    }
    // The kernel does not unmount when the server dies; a lazy unmount does
    // not touch the (dead) file system. Only a hangfs mount is unmounted,
    // never whatever else is at that path.
    for (int i = 0; i < 10 && mount_listed(mountpoint_); ++i) {
      if (::umount2(mountpoint_.c_str(), MNT_DETACH) != 0 && errno != EINVAL) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    if (!status_dir_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(status_dir_, ec);
    }
  }

  HangFs(const HangFs&) = delete;
  HangFs& operator=(const HangFs&) = delete;

  // The server said "ready" (the kernel's INIT answered, callers set to wait
  // in state D), still runs, and its mount is listed.
  bool mounted() { return mounted_ && alive() && mount_listed(mountpoint_); }
  const std::filesystem::path& mountpoint() const { return mountpoint_; }
  pid_t server_pid() const { return pid_; }

  // From now on every request is read and held unanswered.
  void hang() {
    if (!alive()) return void(ADD_FAILURE() << "hang(): nodewatch-hangfs is not running");
    ::kill(pid_, SIGUSR1);
    if (!wait_status([](const Status& s) { return s.hung; }, std::chrono::seconds(5))) {
      ADD_FAILURE() << "nodewatch-hangfs did not hang: " << status_text();
    }
  }

  // Serves the held requests, in the order they came, then serves as usual.
  void answer() {
    if (!alive()) return void(ADD_FAILURE() << "answer(): nodewatch-hangfs is not running");
    ::kill(pid_, SIGUSR2);
    if (!wait_status([](const Status& s) { return !s.hung && s.held == 0; },
                     std::chrono::seconds(5))) {
      ADD_FAILURE() << "nodewatch-hangfs did not answer: " << status_text();
    }
  }

  // Waits until at least `n` requests are held; false after `limit`.
  bool wait_held(std::size_t n, std::chrono::milliseconds limit) {
    return wait_status([n](const Status& s) { return s.held >= n; }, limit);
  }

  // How many requests are held now.
  std::size_t held() { return read_status().held; }

 private:
  struct Status {
    bool hung = false;
    std::size_t held = 0;
  };

  static bool has_cap_sys_admin() {
    constexpr int kCapSysAdmin = 21;  // linux/capability.h
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("CapEff:", 0) == 0) {
        unsigned long long caps = std::strtoull(line.c_str() + 7, nullptr, 16);
        return (caps >> kCapSysAdmin) & 1;
      }
    }
    return false;
  }

  // The path as mountinfo shows it: symbolic links of the parent resolved,
  // the last component (perhaps a hung mount) not looked at.
  static std::filesystem::path resolve(const std::filesystem::path& p) {
    std::error_code ec;
    std::filesystem::path abs = std::filesystem::absolute(p, ec).lexically_normal();
    if (ec) return p;
    if (!abs.has_filename()) abs = abs.parent_path();  // "/tmp/mnt/"
    std::filesystem::path parent = std::filesystem::canonical(abs.parent_path(), ec);
    return ec ? abs : parent / abs.filename();
  }

  static bool is_octal(char c) { return c >= '0' && c <= '7'; }

  // mountinfo writes space, tab, newline and backslash as \ooo.
  static std::string unescape(const std::string& s) {
    std::string out;
    for (std::size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '\\' && i + 3 < s.size() && is_octal(s[i + 1]) && is_octal(s[i + 2]) &&
          is_octal(s[i + 3])) {
        out += static_cast<char>(std::stoi(s.substr(i + 1, 3), nullptr, 8));
        i += 3;
      } else {
        out += s[i];
      }
    }
    return out;
  }

  std::string status_text() const {
    std::ifstream in(status_file_);
    std::string line;
    std::getline(in, line);
    return line.empty() ? "(no status)" : line;
  }

  // "state=hung held=3"
  Status read_status() const {
    Status s;
    std::istringstream in(status_text());
    std::string field;
    while (in >> field) {
      auto eq = field.find('=');
      if (eq == std::string::npos) continue;
      std::string key = field.substr(0, eq), value = field.substr(eq + 1);
      if (key == "state") s.hung = value == "hung";
      if (key == "held") s.held = std::strtoull(value.c_str(), nullptr, 10);
    }
    return s;
  }

  // Reaps the server if it has exited; false once it has.
  bool alive() {
    if (pid_ <= 0) return false;
    int st = 0;
    pid_t r = ::waitpid(pid_, &st, WNOHANG);
    if (r == pid_ || (r < 0 && errno == ECHILD)) {  // ECHILD: reaped elsewhere
      pid_ = -1;
      return false;
    }
    return true;
  }

  void wait_exit(std::chrono::milliseconds limit) {
    auto until = std::chrono::steady_clock::now() + limit;
    while (alive()) {
      if (std::chrono::steady_clock::now() >= until) {
        ADD_FAILURE() << "nodewatch-hangfs (pid " << pid_ << ") did not exit on SIGKILL";
        pid_ = -1;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

  // Reads the server's stdout until "ready"; false on EOF, or after `limit`.
  bool wait_ready(int fd, std::chrono::milliseconds limit) {
    auto until = std::chrono::steady_clock::now() + limit;
    std::string out;
    for (;;) {
      if (out.find("ready\n") != std::string::npos) return true;
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          until - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{fd, POLLIN, 0};
      int rc = ::poll(&p, 1, static_cast<int>(left.count()));
      if (rc < 0 && errno == EINTR) continue;
      if (rc <= 0) return false;
      char buf[256];
      ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;  // the server exited (its reason is on stderr)
      out.append(buf, static_cast<std::size_t>(n));
    }
  }

  // Waits for the status file to satisfy `pred`: woken by inotify on each
  // rewrite, rechecked at least every 50 ms (and stopped when the server
  // has exited).
  template <class Pred>
  bool wait_status(Pred pred, std::chrono::milliseconds limit) {
    auto until = std::chrono::steady_clock::now() + limit;
    for (;;) {
      if (pred(read_status())) return true;
      if (!alive()) return false;
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          until - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      int wait_ms = static_cast<int>(std::min<long long>(left.count(), 50));
      if (inotify_.get() >= 0) {
        pollfd p{inotify_.get(), POLLIN, 0};
        ::poll(&p, 1, wait_ms);
        char events[4096];
        while (::read(inotify_.get(), events, sizeof events) > 0) {
        }
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
      }
    }
  }

  std::filesystem::path mountpoint_;
  std::filesystem::path status_dir_;
  std::filesystem::path status_file_;
  UniqueFd inotify_;
  pid_t pid_ = -1;
  bool mounted_ = false;
};

}  // namespace nodewatch::testing
