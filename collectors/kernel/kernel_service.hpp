#pragma once
// The kernel log read on a thread of its own, for as long as the kernel
// collector's service lives (it outlives reloads, and takes a reload's new
// state file and device bound: apply()): the whole ring buffer at start,
// then each record as it comes (a device is polled; what was appended to a
// file of records, a fixture, is read every `file_poll`). A pass reads at most
// kRecordsPerPass records before it looks at the stop request and the save
// timer again, so that a log storm can neither hold the stop nor the save. Counted once
// across restarts through the state file (kernel_log.hpp,
// kernel_state.hpp), which is saved when counts changed, at most every
// `save_interval`, and when the service stops. A pass that found nothing
// but malformed records (a path that is no kernel log: /dev/zero) is not
// followed at once by the next, even with more to read: the next comes
// after `file_poll`; and they are logged, once and then at most once a
// minute.
//
// A state file that is refused (corrupt, torn, another version; owned by
// a user other than this process's or root, or in a directory others can write to without the
// sticky bit; of this boot but with a last_seq past the newest record of the log, found when the
// log has been read through once) is not trusted: counting starts afresh, from the log's first
// record, and why is kept (state_refused) for the collector to report; one refused for its owner or
// its directory is never written over (logged once), the counts are kept in memory. Of one that is
// trusted, the counts that counting could not have made are dropped (sanitize_state: reported as
// state_entry_dropped) and its devices bounded by max_devices. One that cannot be written is kept
// as state_error while it lasts; the counts go on in memory.

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
#include "kernel/kmsg_reader.hpp"
#include "nodewatch/kernel_log_fd.hpp"
#include "nodewatch/unique_fd.hpp"

namespace nodewatch::kernel {

struct KernelLogOptions {
  std::string kmsg_path = kKernelLogPath;
  std::string state_file = "/var/lib/nodewatch/kernel-log.state";  // "" keeps no state
  std::string boot_id_path = "/proc/sys/kernel/random/boot_id";
  std::size_t max_devices = 64;
  std::chrono::milliseconds save_interval{10000};
  std::chrono::milliseconds file_poll{1000};
  bool operator==(const KernelLogOptions&) const = default;
};

class KernelLogService {
 public:
  static constexpr std::size_t kRecordsPerPass = 4096;

  explicit KernelLogService(KernelLogOptions options);
  // Stops the thread (within milliseconds) and saves the state; a save
  // that fails then is logged (state_write_error), there being no
  // collection after it to count it.
  ~KernelLogService();
  KernelLogService(const KernelLogService&) = delete;
  KernelLogService& operator=(const KernelLogService&) = delete;

  struct Snapshot {
    KernelState state;
    bool continued = false;  // the counts continue a saved state of this boot
    std::optional<double> last_record_unix;
    std::uint64_t malformed = 0;  // records refused: a prefix that did not parse, a number
                                  // past 64 bits (kernel_events.hpp)
    std::uint64_t overruns = 0;   // reads that found records overwritten
    std::uint64_t passes = 0;     // reads of what was available (tests)
    std::string state_refused;    // why the state file was not trusted at start; "" if it was
    std::string state_error;      // why the state cannot be saved now; "" when fine
    std::string read_error;       // why the log could not be opened or read; "" when fine
  };
  Snapshot snapshot() const;
  // Waits until the thread has read the log through once since the service
  // started (true), or until `until` (false). A collector built over a new
  // service waits for this, so that its first counts are not the saved
  // state's alone while the records logged since are still being read.
  // What the collector counts as errors once, and has not yet (kept here,
  // not in the collector, so that a rebuilt collector does not count them
  // again): malformed records since the last call, and the state file's
  // refusal the first time.
  struct News {
    std::uint64_t malformed = 0;
    std::string state_refused;
    std::string state_dropped;  // saved counts not trusted (sanitize_state), as one line
  };
  News take_news();
  bool wait_first_pass(std::chrono::steady_clock::time_point until) const;

  // Takes a reload's state file and device bound without stopping: the
  // counts go on in memory and are written to the new file from the next
  // save on (a new file is not read: this process's counts are newer).
  void apply(const std::string& state_file, std::size_t max_devices);
  KernelLogOptions options() const;

 private:
  // What one read of the log found.
  struct Pass {
    std::uint64_t good = 0;       // records parsed and fed
    std::uint64_t malformed = 0;  // refused: too long, or malformed
    std::optional<std::uint64_t> newest;
  };
  static constexpr std::chrono::seconds kMalformedLogEvery{60};

  void run();
  void take_record(std::string_view raw, Pass* pass);
  // One warning when malformed records are first refused, then at most one
  // a minute while more are.
  void log_malformed(const Pass& pass);
  // Until records may be there (or `junk`: file_poll); true when stopped.
  bool wait_for_records(const KmsgReader& reader, bool junk, std::string* poll_error);
  void save();
  // The state file's content, checked (load_state, sanitize_state); sets
  // what is to be said about it. Called by the constructor.
  std::optional<KernelState> load_saved();
  // Drops the saved state whose last_seq is past `newest`, the newest
  // record of the log: counting starts afresh.
  void distrust_saved_seq(std::optional<std::uint64_t> newest);

  KernelLogOptions options_;
  std::string boot_id_;  // "" when it cannot be read: no state is loaded or saved
  mutable std::mutex mu_;
  mutable std::condition_variable passed_;  // notified after each pass
  Snapshot
      counters_;  // all but `state`, under mu_ (before log_: its constructor sets state_refused)
  std::uint64_t malformed_told_ = 0;
  std::string refusal_news_;  // not yet taken by take_news()
  std::string dropped_news_;
  std::string kept_file_;   // refused for its owner or its directory: never written over
  bool kept_told_ = false;  // that it is not written has been logged
  // The run thread's alone:
  std::uint64_t malformed_unlogged_ = 0;
  std::uint64_t good_unlogged_ = 0;
  std::optional<std::chrono::steady_clock::time_point> malformed_logged_;
  std::optional<std::uint64_t> saved_seq_;  // the loaded last_seq, until the log was read through
  KernelLog log_;
  bool dirty_ = false;
  double boot_unix_ = 0;
  std::atomic<bool> stop_{false};
  UniqueFd stop_fd_;  // an eventfd: written to stop the thread (-1: polled for stop_)
  std::thread thread_;
};

// This boot's id (the boot_id file's first line), "" when it cannot be read
// or is not a UUID's characters.
std::string read_boot_id(const std::string& path);

}  // namespace nodewatch::kernel
