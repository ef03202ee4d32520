#pragma once
// The NVML service: one per process and library, owned by the daemon's
// Services (nodewatch/services.hpp) and shared by every collector that
// reads NVIDIA GPUs: the accelerator collector asks the device questions,
// the interconnect collector's NVLink part asks the NVLink questions
// (nvml_queries.hpp), of the same session and the same threads. So a node
// with N GPUs has one dlopen, one nvmlInit, N device threads and one XID
// event thread, however many collectors read it, and the service logs its
// own changes of state (library loaded or missing, a GPU stuck, lost or
// answering again) once for the process.
//
// It lives as long as some collector holds it: a reload that rebuilds a
// collector builds the new one first, which finds this service, with its
// XID counts and its per-device memory (which source answered first for
// an NVLink byte counter, the last good C2C error values) as they were.
//
// Shape:
//  - nvml_library: dlopen and the function table, nvmlInit, the device
//    count (read once per session);
//  - nvml_device_pool: one persistent query thread per GPU;
//  - nvml_queries: what one GPU is asked;
//  - nvml_events: the XID event thread and its counts.
//
// Lifecycle. The library is loaded and initialised lazily by the first
// sample. No library or no driver: no devices, retried at most once per
// retry interval. A library without a required symbol, or whose nvmlInit
// fails for another reason: CollectError on every sample (retried likewise).
// A session is dropped (the XID thread stopped, nvmlShutdown run by the last
// owner) and opened again after the retry interval when every GPU fails to
// give a handle in one cycle (a driver reload: LIB_RM_VERSION_MISMATCH,
// UNINITIALIZED); opening it again fails, and is retried, while
// nvmlDeviceGetCount fails. nvmlInit and nvmlDeviceGetCount run on the
// thread of the caller that finds the session missing; a caller that comes
// while another opens it waits for that, within its own budget.
//
// Each sample waits for the GPUs up to 80% of the time left before the
// collection deadline; a GPU still inside a call is reported up=0
// "device_stuck", and is not asked anything again until that call returns.
// Identity (uuid, name, serial, PCI id) is kept per GPU; a read that fails
// one cycle leaves the last good value, so series keep their labels.
//
// The XID event thread starts with the first device sample (a node whose
// accelerator collector is disabled has none); the counts are kept for the
// service's whole life, across dropped sessions.
//
// Destruction asks every thread to stop and gives them one grace period
// together; a thread still inside a driver call is detached, which is safe
// because it owns what it touches (nvml_thread.hpp).
//
// Thread-safe: the two kinds of sample may run at once, from two collectors'
// threads.

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "accelerator/backend.hpp"
#include "accelerator/nvml/nvml_device_pool.hpp"
#include "accelerator/nvml/nvml_events.hpp"
#include "accelerator/nvml/nvml_library.hpp"
#include "nodewatch/collector.hpp"

namespace nodewatch::accelerator {

// Tuning; the defaults are for production, tests shorten them.
struct NvmlServiceOptions {
  // How often an absent or unusable library or driver, or a session
  // dropped after a failure (a driver reload), is tried again. dlopen and
  // nvmlInit are not free, and a CPU node would otherwise pay for them
  // every cycle.
  std::chrono::steady_clock::duration retry_interval = std::chrono::minutes(1);
};

class NvmlService {
 public:
  // `library`: a name searched the usual way, or a path. Loads nothing yet.
  explicit NvmlService(std::string library, NvmlServiceOptions options = {});
  NvmlService(const NvmlService&) = delete;
  NvmlService& operator=(const NvmlService&) = delete;
  ~NvmlService();

  const std::string& library() const { return library_; }

  // The accelerator collector's questions: one sample per GPU, with its XID
  // counts, and no NVLink. The failure contract is Backend::sample's
  // (backend.hpp).
  std::vector<DeviceSample> sample_devices(const CollectContext& ctx);
  // The NVLink questions: one sample per GPU with its identity, its link
  // count and its links, nothing else. The same failure contract.
  std::vector<DeviceSample> sample_nvlinks(const CollectContext& ctx);

  // Threads running for NVML now: one per GPU seen, and the XID thread.
  std::size_t threads() const;

  // What the last load of the library found: the driver's state as
  // driver_state.hpp names it ("" before the first), "lost" after the
  // driver stopped answering a session, and the library's version.
  struct LoadOutcome {
    std::string state;
    std::string library_version;
  };
  LoadOutcome load_outcome() const;

 private:
  using Clock = std::chrono::steady_clock;

  std::vector<DeviceSample> sample(const CollectContext& ctx, NvmlQuestions questions);
  std::shared_ptr<const NvmlSession> ensure_session(Clock::time_point until);
  void start_xid_events(const std::shared_ptr<const NvmlSession>& session);
  void drop_session(const std::shared_ptr<const NvmlSession>& session, const std::string& why);
  enum class Severity { kInfo, kWarning, kError };
  void log_load_state(Severity severity, const std::string& message);
  void note_device_state(const DeviceSample& d);

  const std::string library_;
  const NvmlServiceOptions options_;

  mutable std::mutex mu_;  // guards everything below but the pool and the counts
  std::condition_variable opened_;
  std::shared_ptr<const NvmlSession> session_;
  bool opening_ = false;  // a caller is inside NvmlSession::open()
  bool attempted_ = false;
  Clock::time_point next_attempt_{};
  std::optional<CollectError> load_error_;
  LoadOutcome outcome_;
  std::string last_load_message_;
  bool events_checked_ = false;  // for session_: XID thread started, or its absence logged
  std::unique_ptr<NvmlXidWatcher> xid_;
  std::vector<std::string> device_state_;  // by GPU index: "" up, else why it is down

  const std::shared_ptr<NvmlXidCounts> xid_counts_ = std::make_shared<NvmlXidCounts>();
  NvmlDevicePool pool_;
};

// The process's NVML service for `env`'s [nvml] library: the one every
// collector built with the same library shares (a private one when `env`
// has no Services, as in a test that builds one collector alone).
std::shared_ptr<NvmlService> nvml_service(const CollectorEnv& env);

}  // namespace nodewatch::accelerator
