#pragma once
// A helper process that holds a library the daemon must not link (gRPC for
// the kubelet's API, libfreeipmi for the BMC) and answers the daemon's
// requests, one frame per request, on a socket pair that is its standard
// input and output.
//
// A frame is a 32-bit length (little-endian) and that many bytes. The
// daemon's side, HelperProcess, starts the helper on the first ask(), with
// `--parent PID` after its own arguments; it waits for the answer until the
// ask's deadline; a helper that does not answer by then is killed (SIGKILL)
// and the ask fails as timed out; one that exits or sends a frame over the
// bound fails it too. Either way the next ask starts a new helper, at most
// one every `backoff` (1 s, doubling up to 60 s while starts keep failing,
// back to 1 s after an answer). The helper's side (serve_frames) dies with
// the daemon (PR_SET_PDEATHSIG) and when its standard input closes.
//
// Not thread-safe: one thread asks.

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "nodewatch/unique_fd.hpp"

namespace nodewatch {

// What outlives one HelperProcess: a client that is made again after a
// failure must not start its backoff over.
struct HelperBackoff {
  std::uint64_t starts = 0;    // helpers started
  std::uint64_t restarts = 0;  // helpers killed or lost, to be started again
  std::chrono::steady_clock::duration backoff = std::chrono::seconds(1);
  std::chrono::steady_clock::time_point next_start{};
};

// The helper `name`'s path: beside the running executable (the build
// tree), else /usr/libexec/nodewatch/NAME (the package).
std::string helper_path(std::string_view name);

// `payload` behind its length.
std::string helper_frame(std::string_view payload);

class HelperProcess {
 public:
  // `what` names the helper in messages ("the BMC helper"); `argv`: the
  // executable and its arguments; `max_frame`: the largest answer taken.
  HelperProcess(std::string what, std::vector<std::string> argv, std::size_t max_frame,
                std::shared_ptr<HelperBackoff> state = nullptr);
  ~HelperProcess();
  HelperProcess(const HelperProcess&) = delete;
  HelperProcess& operator=(const HelperProcess&) = delete;

  struct Answer {
    std::optional<std::string> payload;  // the answer's frame, without its length
    std::string why;                     // when there is none
    bool timed_out = false;              // the helper was killed at the deadline
  };
  // Sends `request` (a payload: it is framed here) and waits for one frame
  // until `deadline`.
  Answer ask(std::string_view request, std::chrono::steady_clock::time_point deadline);

  // The helper running now, or 0.
  pid_t pid() const { return pid_; }
  const HelperBackoff& backoff() const { return *state_; }
  // Kills the helper (its answer was no answer): the next ask starts
  // another after the backoff.
  void discard();

 private:
  bool start(std::string* why);
  bool send_all(std::string_view data, std::chrono::steady_clock::time_point deadline,
                std::string* why);
  bool read_frame(std::chrono::steady_clock::time_point deadline, std::string* payload,
                  std::string* why, bool* timed_out);
  void stop();
  void delay_next_start();

  const std::string what_;
  const std::vector<std::string> argv_;
  const std::size_t max_frame_;
  std::shared_ptr<HelperBackoff> state_;
  pid_t pid_ = 0;
  UniqueFd fd_;
  std::vector<pid_t> zombies_;
};

// The helper's side. Reads `--parent PID` from argv (0 when absent); dies
// with that parent; then answers each request frame on standard input
// (at most `max_request` bytes) with `answer(request)` on standard output,
// until the input closes or `answer` returns nullopt (a request it does not
// understand). Returns the process's exit status.
int serve_frames(int argc, char** argv, std::size_t max_request,
                 const std::function<std::optional<std::string>(std::string_view)>& answer);

// The value after `--name` in argv, or "" (the helpers' argument reader).
std::string helper_arg(int argc, char** argv, std::string_view name);

}  // namespace nodewatch
