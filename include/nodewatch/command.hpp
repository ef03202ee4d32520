#pragma once
// Running a vendor's command-line tool where it is that component's only
// interface (IMEX's state, through nvidia-imex-ctl: its command service
// speaks a protocol NVIDIA does not publish).
//
// The program is started with posix_spawn (safe in a process with
// threads), in a process group of its own, with /dev/null as standard
// input, one pipe as standard output and error together, no descriptor of
// the daemon (everything from 3 up is closed in the child), a fixed
// environment (PATH and LC_ALL=C only) and default signal dispositions.
// The caller's thread reads the pipe until the program exits or the
// deadline passes; then the whole group gets SIGKILL. What the program
// started and left in its group when it exited is killed too: nothing it
// ran outlives the call. A child the kernel
// does not let go at once (state D) is not waited for: it is remembered
// and reaped by a later call. Nothing here blocks past the deadline plus
// a few milliseconds.
//
// Thread-safe: calls from several threads are independent (the list of
// children still to reap is locked).

#include <sys/types.h>
#include <chrono>

#include <cstddef>
#include <string>
#include <vector>

namespace nodewatch::command {

struct Result {
  bool started = false;  // false: posix_spawn failed (`err` says why)
  int err = 0;           // errno of the failed start
  bool timed_out = false;
  bool truncated = false;  // more than `max_output` bytes came: the rest was dropped
  // The exit status when it exited (WEXITSTATUS); -1 when killed by a
  // signal (`signal`) or by the deadline.
  int exit_status = -1;
  int signal = 0;
  std::string output;  // standard output and error together, as written
  bool ok() const { return started && !timed_out && exit_status == 0; }
};

// The standard streams of a program started: descriptors of the caller,
// dup2()ed; -1: /dev/null for `in`, the caller's own for `out` and `err`.
struct Stdio {
  int in = -1;
  int out = -1;
  int err = -1;
};
// Starts argv[0] (an absolute path: no search) with `stdio` as its standard
// streams and nothing else open (every descriptor from 3 up closed), PATH
// and LC_ALL=C as its environment, default signals and none blocked; in a
// process group of its own with `own_group`. Returns 0 and sets *pid, or
// the errno (EINVAL for a path that is not absolute). The caller reaps it.
int spawn(const std::vector<std::string>& argv, Stdio stdio, bool own_group, pid_t* pid);

// Runs argv[0] (an absolute path: no search) with argv and waits for it
// until `deadline` (steady clock).
Result run(const std::vector<std::string>& argv, std::chrono::steady_clock::time_point deadline,
           std::size_t max_output = std::size_t{1} << 20);

// Children killed at their deadline that the kernel has not let go yet
// (tests).
std::size_t unreaped();

// Tests: false makes run() behave as without pidfd_open (a kernel before
// 5.3, a seccomp filter that refuses it), polling for the exit instead.
void use_pidfd_for_tests(bool use);

}  // namespace nodewatch::command
