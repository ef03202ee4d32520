#include "accelerator/nvml/nvml_events.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <utility>

namespace nodewatch::accelerator {
namespace {

using Clock = std::chrono::steady_clock;

// nvmlEventSetWait_v2's timeout: also how quickly the thread notices a stop
// request.
constexpr unsigned kEventWaitMs = 500;
// Failed waits in a row after which the event set is built again, the pause
// after each, and the longest pause between rebuilds that keep failing (the
// pause doubles with each).
constexpr unsigned kMaxWaitFailures = 3;
constexpr auto kWaitFailurePause = std::chrono::milliseconds(200);
constexpr auto kMaxRebuildPause = std::chrono::seconds(60);

enum class Outcome {
  kStopped,         // asked to stop
  kNothingToWatch,  // no device could register for XID events
  kFailed,          // the set could not be created, or its waits keep failing
};

// Sleeps `d` unless asked to stop first; true when asked to stop.
bool pause(NvmlThreadState& st, Clock::duration d) {
  std::unique_lock lock(st.mu);
  return st.cv.wait_for(lock, d, [&] { return st.stop; });
}

bool stop_requested(NvmlThreadState& st) {
  std::lock_guard lock(st.mu);
  return st.stop;
}

// Registers every device that still answers in `set` and counts its events
// until asked to stop or until the waits keep failing.
Outcome watch(NvmlThreadState& st, const NvmlSession& s, NvmlXidCounts& counts, nvml::EventSet set,
              unsigned& fruitless) {
  const NvmlApi& a = s.api();
  // Devices whose driver cannot deliver XID events (NOT_SUPPORTED), or that
  // no longer answer (lost), are skipped; the others still count.
  std::map<nvml::Device, std::string> uuids;
  for (unsigned i = 0; i < s.device_count(); ++i) {
    nvml::Device dev = nullptr;
    std::array<char, nvml::kUuidBufferSize> uuid{};
    if (a.device_get_handle_by_index(i, &dev) != nvml::kSuccess ||
        a.device_get_uuid(dev, uuid.data(), uuid.size()) != nvml::kSuccess ||
        a.device_register_events(dev, nvml::kEventTypeXidCriticalError, set) != nvml::kSuccess)
      continue;
    uuids[dev] = nvml_c_string(uuid.data(), uuid.size());
  }
  if (uuids.empty()) return Outcome::kNothingToWatch;
  if (fruitless > 0)
    spdlog::info("nvml: XID event set built again with {} of {} GPUs", uuids.size(),
                 s.device_count());
  unsigned failures = 0;  // in a row
  nvml::Return last_error = nvml::kSuccess;
  for (;;) {
    if (stop_requested(st)) return Outcome::kStopped;
    nvml::EventData e{};
    const nvml::Return rc = a.event_set_wait(set, &e, kEventWaitMs);
    if (rc == nvml::kSuccess || rc == nvml::kErrorTimeout) {
      failures = 0;
      fruitless = 0;
      if (rc == nvml::kErrorTimeout) continue;
      auto it = uuids.find(e.device);
      if ((e.event_type & nvml::kEventTypeXidCriticalError) != 0 && it != uuids.end())
        counts.add(it->second, static_cast<unsigned>(e.event_data));
      continue;
    }
    // Any other answer (GPU_IS_LOST makes the wait fail at once, on every
    // call, for a set that holds a lost GPU): counted, logged once per
    // change, and after a few in a row the set is built again without the
    // devices that no longer register.
    counts.add_wait_failure();
    if (rc != last_error && fruitless == 0)
      spdlog::warn(
          "nvml: waiting for XID events failed: {}; the event set is built again "
          "after {} failures in a row",
          s.error(rc), kMaxWaitFailures);
    last_error = rc;
    if (++failures >= kMaxWaitFailures) return Outcome::kFailed;
    if (pause(st, kWaitFailurePause)) return Outcome::kStopped;
  }
}

void run(std::shared_ptr<NvmlThreadState> st, std::shared_ptr<const NvmlSession> session,
         std::shared_ptr<NvmlXidCounts> counts) {
  name_nvml_thread("xid");
  const NvmlApi& a = session->api();
  // Sets built in a row whose waits all failed: the pause before the next
  // one doubles with each, so a driver that fails every wait is not asked
  // to rebuild in a tight loop.
  unsigned fruitless = 0;
  for (;;) {
    nvml::EventSet set = nullptr;
    Outcome outcome = Outcome::kFailed;
    const nvml::Return rc = a.event_set_create(&set);
    if (rc == nvml::kSuccess) {
      outcome = watch(*st, *session, *counts, set, fruitless);
      a.event_set_free(set);
    } else if (fruitless == 0) {
      spdlog::warn("nvml: cannot create an XID event set: {}", session->error(rc));
    }
    if (outcome != Outcome::kFailed) break;
    const auto delay = std::min<Clock::duration>(
        kWaitFailurePause * (1u << std::min(fruitless, 10u)), kMaxRebuildPause);
    ++fruitless;
    if (pause(*st, delay)) break;
  }
  // Released before `exited` is set: the owner may be gone, and then this
  // runs nvmlShutdown and dlclose.
  session.reset();
  counts.reset();
  std::lock_guard lock(st->mu);
  st->exited = true;
  st->cv.notify_all();
}

}  // namespace

void NvmlXidCounts::add(const std::string& uuid, unsigned code) {
  std::lock_guard lock(mu_);
  ++counts_[uuid][code];
}

NvmlXidCounts::Counts NvmlXidCounts::of(const std::string& uuid) const {
  std::lock_guard lock(mu_);
  auto it = counts_.find(uuid);
  return it == counts_.end() ? Counts{} : it->second;
}

void NvmlXidCounts::add_wait_failure() {
  std::lock_guard lock(mu_);
  ++wait_failures_;
}

std::uint64_t NvmlXidCounts::take_wait_failures() {
  std::lock_guard lock(mu_);
  return std::exchange(wait_failures_, 0);
}

NvmlXidWatcher::NvmlXidWatcher(std::shared_ptr<const NvmlSession> session,
                               std::shared_ptr<NvmlXidCounts> counts)
    : state_(std::make_shared<NvmlThreadState>()) {
  thread_ = std::thread(&run, state_, std::move(session), std::move(counts));
}

NvmlXidWatcher::~NvmlXidWatcher() {
  request_stop(*state_);
  release_thread(*state_, thread_, Clock::now() + kNvmlStopGrace);
}

}  // namespace nodewatch::accelerator
