#pragma once
// The kernel log read on a thread of its own, for as long as the kernel
// collector's service lives (it outlives reloads): the whole ring buffer
// at start, then each record as it comes (a device is polled; a file of
// records, a fixture, is read again every `file_poll`). Counted once
// across restarts through the state file (kernel_log.hpp,
// kernel_state.hpp), which is saved when counts changed, at most every
// `save_interval`, and when the service stops.
//
// A state file that is refused (corrupt, torn, another version) is not
// trusted: counting starts afresh and why is kept (state_error) for the
// collector to report. One that cannot be written is kept as an error too;
// the counts go on in memory.

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "kernel/kernel_log.hpp"
#include "kernel/kernel_state.hpp"
#include "nodewatch/unique_fd.hpp"

namespace nodewatch::kernel {

struct KernelLogOptions {
  std::string kmsg_path = "/dev/kmsg";
  std::string state_file = "/var/lib/nodewatch/kernel-log.state";  // "" keeps no state
  std::string boot_id_path = "/proc/sys/kernel/random/boot_id";
  std::size_t max_devices = 64;
  std::chrono::milliseconds save_interval{10000};
  std::chrono::milliseconds file_poll{1000};
  bool operator==(const KernelLogOptions&) const = default;
};

class KernelLogService {
 public:
  explicit KernelLogService(KernelLogOptions options);
  // Stops the thread (within milliseconds) and saves the state.
  ~KernelLogService();
  KernelLogService(const KernelLogService&) = delete;
  KernelLogService& operator=(const KernelLogService&) = delete;

  struct Snapshot {
    KernelState state;
    bool continued = false;  // the counts continue a saved state of this boot
    std::optional<double> last_record_unix;
    std::uint64_t malformed = 0;  // records whose prefix did not parse
    std::uint64_t overruns = 0;   // reads that found records overwritten
    std::uint64_t passes = 0;     // reads of what was available (tests)
    std::string state_error;      // the state file refused or not written; "" when fine
    std::string read_error;       // the log could not be opened or read; "" when fine
  };
  Snapshot snapshot() const;

  const KernelLogOptions& options() const { return options_; }

 private:
  void run();
  void save();

  KernelLogOptions options_;
  mutable std::mutex mu_;
  Snapshot counters_;  // all but `state`, under mu_ (before log_: its constructor sets state_error)
  KernelLog log_;
  bool dirty_ = false;
  double boot_unix_ = 0;
  UniqueFd stop_fd_;  // an eventfd: written to stop the thread
  std::thread thread_;
};

// This boot's id (the boot_id file's first line), "" when it cannot be read.
std::string read_boot_id(const std::string& path);

}  // namespace nodewatch::kernel
