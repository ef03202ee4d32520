#include "nodewatch/command.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <mutex>

#include "nodewatch/unique_fd.hpp"

namespace nodewatch::command {
namespace {

using Clock = std::chrono::steady_clock;

std::mutex g_mutex;
std::vector<pid_t> g_unreaped;  // killed, not yet let go by the kernel
std::atomic<bool> g_use_pidfd{true};

void reap_old() {
  std::lock_guard lock(g_mutex);
  std::erase_if(g_unreaped, [](pid_t pid) { return ::waitpid(pid, nullptr, WNOHANG) != 0; });
}

int ms_until(Clock::time_point t) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(t - Clock::now());
  return static_cast<int>(std::clamp<long long>(left.count() + 1, 0, 60'000));
}

// Whether `pid` has exited; then it is reaped and its status taken. Before
// the reaping, while the group's id is still its own, whatever it started
// and left in its group is killed: nothing it ran outlives it.
bool try_wait(pid_t pid, Result& r) {
  siginfo_t info{};
  if (::waitid(P_PID, pid, &info, WEXITED | WNOHANG | WNOWAIT) != 0) return errno == ECHILD;
  if (info.si_pid != pid) return false;
  ::kill(-pid, SIGKILL);
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return true;
  if (WIFEXITED(status)) r.exit_status = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  return true;
}

}  // namespace

int spawn(const std::vector<std::string>& argv, Stdio stdio, bool own_group, pid_t* pid) {
  if (argv.empty() || argv[0].empty() || argv[0][0] != '/') return EINVAL;
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  ::posix_spawn_file_actions_init(&fa);
  ::posix_spawnattr_init(&attr);
  if (stdio.in < 0)
    ::posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  else
    ::posix_spawn_file_actions_adddup2(&fa, stdio.in, 0);
  if (stdio.out >= 0) ::posix_spawn_file_actions_adddup2(&fa, stdio.out, 1);
  if (stdio.err >= 0) ::posix_spawn_file_actions_adddup2(&fa, stdio.err, 2);
  ::posix_spawn_file_actions_addclosefrom_np(&fa, 3);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  ::posix_spawnattr_setsigmask(&attr, &none);
  ::posix_spawnattr_setsigdefault(&attr, &all);
  short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_USEVFORK;
  if (own_group) {
    ::posix_spawnattr_setpgroup(&attr, 0);
    flags |= POSIX_SPAWN_SETPGROUP;
  }
  ::posix_spawnattr_setflags(&attr, flags);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  char path_env[] = "PATH=/usr/sbin:/usr/bin:/sbin:/bin";
  char locale_env[] = "LC_ALL=C";
  char* env[] = {path_env, locale_env, nullptr};
  int rc = ::posix_spawn(pid, args[0], &fa, &attr, args.data(), env);
  ::posix_spawn_file_actions_destroy(&fa);
  ::posix_spawnattr_destroy(&attr);
  return rc;
}

Result run(const std::vector<std::string>& argv, Clock::time_point deadline,
           std::size_t max_output) {
  reap_old();
  Result r;
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) {
    r.err = errno;
    return r;
  }
  UniqueFd read_end(p[0]), write_end(p[1]);
  ::fcntl(read_end.get(), F_SETFL, ::fcntl(read_end.get(), F_GETFL) | O_NONBLOCK);

  pid_t pid = 0;
  int rc = spawn(argv, {-1, write_end.get(), write_end.get()}, true, &pid);
  write_end.reset();
  if (rc != 0) {
    r.err = rc;
    return r;
  }
  r.started = true;
  // A pidfd makes the child's exit pollable; without one (a kernel before
  // 5.3, a seccomp filter that refuses it) the exit is looked for every 5 ms.
  UniqueFd pidfd(g_use_pidfd.load() ? static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)) : -1);
  const bool have_pidfd = pidfd.get() >= 0;

  bool eof = false, exited = false;
  // Reads what the pipe holds now (its read end does not block), until the
  // deadline at most.
  auto drain = [&] {
    char buf[16384];
    while (!eof && Clock::now() < deadline) {
      ssize_t got = ::read(read_end.get(), buf, sizeof buf);
      if (got < 0 && errno == EINTR) continue;
      if (got < 0 && errno == EAGAIN) return;
      if (got <= 0) {
        eof = true;
        return;
      }
      std::size_t room = max_output > r.output.size() ? max_output - r.output.size() : 0;
      if (static_cast<std::size_t>(got) > room) r.truncated = true;
      r.output.append(buf, std::min(room, static_cast<std::size_t>(got)));
    }
  };
  // An exit is taken with what the pipe holds then, though something the
  // program started may hold the pipe open.
  auto exited_now = [&] {
    if (!try_wait(pid, r)) return false;
    drain();
    return true;
  };
  while (true) {
    if ((eof || !have_pidfd) && exited_now()) {
      exited = true;
      break;
    }
    if (Clock::now() >= deadline) break;
    pollfd fds[2] = {{eof ? -1 : read_end.get(), POLLIN, 0}, {pidfd.get(), POLLIN, 0}};
    int wait_ms = ms_until(deadline);
    if (!have_pidfd) wait_ms = std::min(wait_ms, 5);
    int n = ::poll(fds, 2, wait_ms);
    if (n < 0 && errno != EINTR) break;
    if (n <= 0) continue;
    if (fds[0].revents != 0) drain();
    if ((fds[1].revents & POLLIN) != 0 && exited_now()) {
      exited = true;
      break;
    }
  }
  if (exited) return r;

  r.timed_out = true;
  ::kill(-pid, SIGKILL);
  // Reaped now if the kernel lets it go within 100 ms, else by a later call.
  Result ignored;
  bool reaped = false;
  for (auto until = Clock::now() + std::chrono::milliseconds(100);
       !(reaped = try_wait(pid, ignored)) && Clock::now() < until;) {
    if (have_pidfd) {
      pollfd f{pidfd.get(), POLLIN, 0};
      ::poll(&f, 1, ms_until(until));
    } else {
      ::usleep(5000);
    }
  }
  if (!reaped) {
    std::lock_guard lock(g_mutex);
    g_unreaped.push_back(pid);
  }
  return r;
}

void use_pidfd_for_tests(bool use) {
  g_use_pidfd = use;
}

std::size_t unreaped() {
  reap_old();
  std::lock_guard lock(g_mutex);
  return g_unreaped.size();
}

}  // namespace nodewatch::command
