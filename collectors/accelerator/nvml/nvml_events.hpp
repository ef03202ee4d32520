#pragma once
// XID error events: one thread that waits on one NVML event set holding
// every GPU (nvmlEventSetWait_v2), and the counts it keeps per GPU (uuid)
// and code. A counter, never a "last XID" gauge: two XID 79s count 2.
//
// The counts are an object of their own, held by the NVML service, so that
// they outlive the thread: a session dropped after a driver reload starts a
// new thread over the same counts, and a rebuilt accelerator collector
// finds them as they were (nodewatch_accelerator_xid_errors_total counts
// since nodewatch started).
//
// A wait that fails (not SUCCESS, not TIMEOUT: after XID 79 a driver
// answers GPU_IS_LOST at once, forever, for a set holding the lost GPU) is
// counted, and logged once per change; after a few in a row the set is
// freed and built again with the GPUs that still register.

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "accelerator/nvml/nvml_library.hpp"
#include "accelerator/nvml/nvml_thread.hpp"

namespace nodewatch::accelerator {

// Thread-safe.
class NvmlXidCounts {
 public:
  using Counts = std::map<unsigned, std::uint64_t>;  // XID code -> events

  void add(const std::string& uuid, unsigned code);
  Counts of(const std::string& uuid) const;
  void add_wait_failure();
  // Waits that failed (neither an event nor a timeout) since the last call.
  std::uint64_t take_wait_failures();

 private:
  mutable std::mutex mu_;
  std::map<std::string, Counts, std::less<>> counts_;
  std::uint64_t wait_failures_ = 0;
};

class NvmlXidWatcher {
 public:
  // Starts the thread over `session`'s GPUs, counting into `counts`.
  // Requires session->api().has_events().
  NvmlXidWatcher(std::shared_ptr<const NvmlSession> session, std::shared_ptr<NvmlXidCounts> counts);
  NvmlXidWatcher(const NvmlXidWatcher&) = delete;
  NvmlXidWatcher& operator=(const NvmlXidWatcher&) = delete;
  // Stops the thread (a grace period, then detached; nvml_thread.hpp).
  ~NvmlXidWatcher();

  NvmlThreadState& thread_state() { return *state_; }
  std::thread& thread() { return thread_; }

 private:
  std::shared_ptr<NvmlThreadState> state_;
  std::thread thread_;
};

}  // namespace nodewatch::accelerator
