#pragma once
// One persistent query thread per GPU, shared by every collector that asks
// the NVML service about that GPU (nvml_service.hpp).
//
// Why a thread per GPU: a call that hangs in the driver (seen in the field
// after XID 45/79, and in nvmlInit on some drivers) then holds up only that
// GPU. A caller posts its questions to every GPU and waits for the answers
// until a time of its choosing; a GPU that has not answered by then is
// "stuck": the caller reports it so, and no question of any caller is
// queued on it until that call returns (the caller that comes next learns
// it at once instead of waiting out its own budget).
//
// Each set of questions (nvml_queries.hpp) has its own slot on each thread:
// the accelerator collector's and the NVLink part's questions queue one
// behind the other on the same thread, never beside each other, so a GPU
// is never asked two things at once.
//
// Thread-safe: ask() may be called from several threads at once (one per
// set of questions).

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "accelerator/backend.hpp"
#include "accelerator/nvml/nvml_library.hpp"
#include "accelerator/nvml/nvml_queries.hpp"

namespace nodewatch::accelerator {

class NvmlDevicePool {
 public:
  using Clock = std::chrono::steady_clock;

  NvmlDevicePool();
  NvmlDevicePool(const NvmlDevicePool&) = delete;
  NvmlDevicePool& operator=(const NvmlDevicePool&) = delete;
  // Stops the threads (see release()).
  ~NvmlDevicePool();

  // One GPU's answer to one ask().
  struct Answer {
    // Empty: the GPU is stuck (inside a call since before this ask, or
    // still inside one at `until`).
    std::optional<NvmlDeviceResult> result;
    // The last good value of each identity field, from either set of
    // questions (uuid empty if never read).
    DeviceSample identity;
  };

  // Asks GPUs 0 .. count-1 `questions` of `session` (starting a thread for
  // each GPU not seen before) and waits for the answers until `until`, or
  // until `cancelled` is set. One answer per GPU, by index.
  std::vector<Answer> ask(const std::shared_ptr<const NvmlSession>& session, unsigned count,
                          NvmlQuestions questions, Clock::time_point until,
                          const std::atomic<bool>* cancelled);

  // Threads started so far (one per GPU ever seen).
  std::size_t threads() const;

  // Asks every thread to stop; then waits for them until `deadline`, and
  // detaches the ones still inside a driver call (nvml_thread.hpp).
  void request_stop();
  void release(Clock::time_point deadline);

 private:
  class Worker;
  mutable std::mutex mu_;  // guards workers_ (which only grows)
  std::vector<std::unique_ptr<Worker>> workers_;
};

}  // namespace nodewatch::accelerator
