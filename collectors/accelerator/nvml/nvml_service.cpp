#include "accelerator/nvml/nvml_service.hpp"

#include <spdlog/spdlog.h>

#include <utility>

#include "accelerator/driver_state.hpp"
#include "accelerator/nvml/nvml_fields.hpp"

namespace nodewatch::accelerator {
namespace {

// Share of the time left before the collection deadline that a sample waits
// for the GPUs; the rest is for turning samples into metrics.
constexpr int kBudgetPercent = 80;

// The accelerator collector's view of the service.
class NvmlBackend final : public Backend {
 public:
  NvmlBackend(std::shared_ptr<NvmlService> nvml, Roots roots)
      : nvml_(std::move(nvml)), roots_(std::move(roots)) {}
  std::string_view name() const override { return "nvml"; }
  std::vector<DeviceSample> sample(const CollectContext& ctx) override {
    return nvml_->sample_devices(ctx);
  }
  // Said where the library is installed or an NVIDIA GPU is on the bus,
  // once the library was looked for; then for the backend's life.
  DriverState driver_state() override {
    const sources::FsRoot sys = roots_.sys();
    DriverState d;
    d.vendor = "nvidia";
    d.states = kNvidiaStates;
    const NvmlService::LoadOutcome o = nvml_->load_outcome();
    d.devices = static_cast<int>(gpus_.read(sys).size());
    if (o.state.empty()) return d;  // not looked for yet (another caller is loading it)
    known_ = known_ || o.state != "library_missing" || d.devices > 0;
    d.known = known_;
    d.up = o.state == "ok";
    d.state = kNvidiaStates[0];
    for (std::string_view s : kNvidiaStates)
      if (s == o.state) d.state = s;
    if (!o.library_version.empty() || o.state == "library_missing") library_ = o.library_version;
    // The module only where there is a driver to speak of: a node without
    // NVIDIA pays no look at it.
    if (!known_) return d;
    if (std::optional<std::string> v = module_version(sys, "nvidia")) module_ = std::move(*v);
    d.library_version = library_;
    d.module_version = module_;
    return d;
  }

 private:
  std::shared_ptr<NvmlService> nvml_;
  Roots roots_;
  PciFunctions gpus_{"0x10de"};
  bool known_ = false;
  std::string library_;  // the last versions read
  std::string module_;
};

}  // namespace

NvmlService::NvmlService(std::string library, NvmlServiceOptions options)
    : library_(std::move(library)), options_(options) {}

NvmlService::~NvmlService() {
  // Every thread is asked first and given one grace period together, so
  // that eight stuck GPUs cost one second, not eight.
  std::unique_ptr<NvmlXidWatcher> xid = std::move(xid_);
  if (xid) request_stop(xid->thread_state());
  pool_.request_stop();
  const auto deadline = Clock::now() + kNvmlStopGrace;
  if (xid) release_thread(xid->thread_state(), xid->thread(), deadline);
  pool_.release(deadline);
}

NvmlService::LoadOutcome NvmlService::load_outcome() const {
  std::lock_guard lock(mu_);
  return outcome_;
}

std::vector<DeviceSample> NvmlService::sample_devices(const CollectContext& ctx) {
  return sample(ctx, NvmlQuestions::kDevice);
}

std::vector<DeviceSample> NvmlService::sample_nvlinks(const CollectContext& ctx) {
  return sample(ctx, NvmlQuestions::kNvlink);
}

std::size_t NvmlService::threads() const {
  std::lock_guard lock(mu_);
  return pool_.threads() + (xid_ ? 1 : 0);
}

std::vector<DeviceSample> NvmlService::sample(const CollectContext& ctx, NvmlQuestions questions) {
  const auto until = std::chrono::steady_clock::now() + ctx.left() * kBudgetPercent / 100;
  std::shared_ptr<const NvmlSession> session = ensure_session(until);
  if (!session) return {};
  const bool devices = questions == NvmlQuestions::kDevice;
  if (devices) start_xid_events(session);
  const unsigned count = session->device_count();

  std::vector<NvmlDevicePool::Answer> answers =
      pool_.ask(session, count, questions, until, ctx.cancelled);
  std::vector<DeviceSample> out;
  out.reserve(count);
  // Every GPU refused a handle (for a reason other than lost or reset
  // required): the session itself is broken, as after a driver reload.
  bool no_handle_anywhere = count > 0;
  nvml::Return handle_rc = nvml::kSuccess;
  for (unsigned i = 0; i < count; ++i) {
    NvmlDevicePool::Answer& a = answers[i];
    NvmlDeviceResult r;
    if (a.result) {
      r = std::move(*a.result);
    } else {
      r.sample.index = i;
      r.sample.up = false;
      r.sample.errors = {DeviceError("device_stuck", {}, /*logged=*/true)};
    }
    if (r.handle_rc == nvml::kSuccess || !r.sample.up)
      no_handle_anywhere = false;
    else
      handle_rc = r.handle_rc;
    DeviceSample& s = r.sample;
    // A GPU lost (or stuck) before its identity was read this cycle, or one
    // whose identity read failed, keeps the identity it had: its series stay
    // the same series.
    DeviceSample fresh;
    copy_identity(s, fresh);
    copy_identity(a.identity, s);
    merge_identity(fresh, s);
    s.vendor = "nvidia";
    s.driver_version = session->driver_version();
    if (devices) s.xid_errors = xid_counts_->of(s.uuid);
    note_device_state(s);
    out.push_back(std::move(s));
  }
  // The XID thread logs its failed waits itself: only counted here.
  if (devices && xid_counts_->take_wait_failures() > 0 && !out.empty())
    out.front().errors.emplace_back("xid_wait_error", "", /*logged=*/true);
  if (no_handle_anywhere)
    drop_session(session, "no GPU gives a handle (" + session->error(handle_rc) +
                              "); NVML is initialised again");
  return out;
}

std::shared_ptr<const NvmlSession> NvmlService::ensure_session(Clock::time_point until) {
  std::unique_lock lock(mu_);
  // Another caller is opening the library: its result is ours. nvmlInit can
  // hang on a wedged driver; this caller then gives up at its own budget.
  while (opening_) {
    if (!opened_.wait_until(lock, until, [&] { return !opening_; }))
      throw CollectError("nvml_error",
                         library_ + ": NVML is being initialised and has not answered yet");
  }
  if (session_) return session_;
  const auto now = Clock::now();
  if (attempted_ && now < next_attempt_) {
    if (load_error_) throw *load_error_;
    return nullptr;
  }
  attempted_ = true;
  next_attempt_ = now + options_.retry_interval;
  load_error_.reset();
  opening_ = true;
  lock.unlock();
  // dlopen, nvmlInit and nvmlDeviceGetCount outside the lock: the other
  // kind of sample must not wait behind a driver call it did not make.
  NvmlSession::Opened opened;
  std::optional<CollectError> error;
  try {
    opened = NvmlSession::open(library_);
  } catch (const CollectError& e) {
    error = e;
  }
  lock.lock();
  opening_ = false;
  opened_.notify_all();
  if (error) {
    // A library without a symbol nodewatch needs, or a driver that failed
    // between nvmlInit and the device count.
    outcome_.state = error->reason() == "library_error" ? "library_broken" : "init_failed";
    load_error_ = error;
    log_load_state(Severity::kError, error->what());
    throw *error;
  }
  outcome_ = {opened.state, opened.library_version};
  if (!opened.session) {
    log_load_state(opened.warn ? Severity::kWarning : Severity::kInfo, opened.message);
    return nullptr;
  }
  session_ = std::move(opened.session);
  events_checked_ = false;
  // Which numbering of the branch-dependent fields this driver gets
  // (nvml_fields.hpp): said once, so that a throttle-time series that is
  // absent on an unknown driver is explained in the log.
  std::string fields;
  if (const auto branch = session_->driver_branch()) {
    const auto id = nvml_field_id(NvmlVersionedField::kClocksEventSwThermalNs, branch);
    fields = "branch " + std::to_string(*branch) + ", clock-event time fields " +
             (id ? std::to_string(*id) + "-" + std::to_string(*id + 2) : "none");
  } else {
    fields = "driver branch unknown: the clock-event time fields are not read";
  }
  log_load_state(Severity::kInfo,
                 "nvml: " + library_ + " loaded, driver " + session_->driver_version() + ", NVML " +
                     (session_->nvml_version().empty() ? "?" : session_->nvml_version()) + " (" +
                     fields + ")");
  return session_;
}

void NvmlService::start_xid_events(const std::shared_ptr<const NvmlSession>& session) {
  std::lock_guard lock(mu_);
  if (events_checked_ || session_ != session) return;
  events_checked_ = true;
  if (session->api().has_events())
    xid_ = std::make_unique<NvmlXidWatcher>(session, xid_counts_);
  else
    spdlog::info("nvml: {} has no event API; XID errors are not counted", library_);
}

// Drops the session after a failure that only a new nvmlInit can cure: the
// XID thread is stopped, the GPU threads release their reference when their
// call returns (the last owner runs nvmlShutdown), and the library is opened
// again after the retry interval. Until then samples fail with `why`.
void NvmlService::drop_session(const std::shared_ptr<const NvmlSession>& session,
                               const std::string& why) {
  std::unique_ptr<NvmlXidWatcher> xid;
  {
    std::lock_guard lock(mu_);
    // The other kind of sample may have dropped it (and opened another) first.
    if (session_ != session) return;
    xid = std::move(xid_);
    session_.reset();
    outcome_.state = "lost";
    attempted_ = true;
    next_attempt_ = Clock::now() + options_.retry_interval;
    load_error_ = CollectError("nvml_error", library_ + ": " + why);
    log_load_state(Severity::kWarning, std::string("nvml: ") + load_error_->what());
  }
  // Outside the lock: stopping the thread waits for its current wait.
}

// Logs the library's state when it changes, not once per retry, and once
// for the process, not once per collector. Called with mu_ held.
void NvmlService::log_load_state(Severity severity, const std::string& message) {
  if (message == last_load_message_) return;
  last_load_message_ = message;
  switch (severity) {
    case Severity::kInfo: spdlog::info("{}", message); break;
    case Severity::kWarning: spdlog::warn("{}", message); break;
    case Severity::kError: spdlog::error("{}", message); break;
  }
}

// Logs a GPU going lost, stuck or needing a reset, and coming back, once per
// change (the metric shows it every cycle). Both kinds of sample report
// here, and they agree: a GPU's calls all queue on its one thread, and lost
// is for good.
void NvmlService::note_device_state(const DeviceSample& d) {
  std::string state = d.up ? "" : (d.errors.empty() ? "nvml_error" : d.errors.front().reason);
  std::lock_guard lock(mu_);
  if (device_state_.size() <= d.index) device_state_.resize(d.index + 1);
  std::string& last = device_state_[d.index];
  if (state == last) return;
  if (state.empty())
    spdlog::info("nvml: GPU {} ({}) answers again", d.index, d.uuid);
  else if (state == "device_stuck")
    spdlog::warn("nvml: GPU {} ({}) is stuck in a driver call; not queried until it returns",
                 d.index, d.uuid);
  else
    spdlog::warn("nvml: GPU {} ({}) is down: {}", d.index, d.uuid, state);
  last = std::move(state);
}

std::shared_ptr<NvmlService> nvml_service(const CollectorEnv& env) {
  const std::string& library = env.shared.nvml_library;
  return env.service<NvmlService>(library, [&] { return std::make_shared<NvmlService>(library); });
}

std::unique_ptr<Backend> make_nvml_backend(std::shared_ptr<NvmlService> nvml, Roots roots) {
  return std::make_unique<NvmlBackend>(std::move(nvml), std::move(roots));
}

}  // namespace nodewatch::accelerator
