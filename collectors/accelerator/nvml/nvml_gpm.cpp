#include "accelerator/nvml/nvml_gpm.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <set>
#include <string>
#include <utility>

namespace nodewatch::accelerator {
namespace {

// Fewer than NVML asks for between two samples.
constexpr auto kMinInterval = std::chrono::milliseconds(100);
// Upper bound on MIG devices asked for (7 on every MIG-capable GPU so far).
constexpr unsigned kMaxMigDevices = 16;

struct Wanted {
  unsigned id;
  std::optional<double> GpmActivity::*field;
};
constexpr std::array<Wanted, 5> kWanted = {{
    {nvml::kGpmGraphicsUtil, &GpmActivity::graphics_active},
    {nvml::kGpmSmUtil, &GpmActivity::sm_active},
    {nvml::kGpmSmOccupancy, &GpmActivity::sm_occupancy},
    {nvml::kGpmAnyTensorUtil, &GpmActivity::tensor_active},
    {nvml::kGpmDramBwUtil, &GpmActivity::dram_bandwidth},
}};
static_assert(kWanted.size() <= nvml::kGpmMetricMaxOldest);

bool not_supported(nvml::Return rc) {
  return rc == nvml::kErrorNotSupported || rc == nvml::kErrorFunctionNotFound;
}

}  // namespace

std::optional<double> gpm_ratio(double percent) {
  if (!std::isfinite(percent)) return std::nullopt;
  return std::clamp(percent / 100.0, 0.0, 1.0);
}

NvmlGpmState::NvmlGpmState() = default;

NvmlGpmState::~NvmlGpmState() {
  release();
}

void NvmlGpmState::free_pair(Pair& pair) {
  if (session_) {
    for (nvml::GpmSample* s : {&pair.prev, &pair.cur})
      if (*s != nullptr) session_->api().gpm_sample_free(*s);
  }
  pair = Pair{};
}

void NvmlGpmState::release() {
  free_pair(device_);
  for (auto& [id, pair] : instances_) free_pair(pair);
  instances_.clear();
  session_.reset();
  supported_.reset();
}

void NvmlGpmState::read(const std::shared_ptr<const NvmlSession>& session, nvml::Device dev,
                        DeviceSample& d, const Check& ok) {
  if (session_ != session) {
    release();
    session_ = session;
  }
  const NvmlApi& api = session->api();
  if (!api.has_gpm()) return;
  if (!supported_) {
    nvml::GpmSupport support{};
    support.version = nvml::kGpmSupportVersion;
    const nvml::Return rc = api.gpm_query_device_support(dev, &support);
    if (not_supported(rc))
      supported_ = false;
    else if (ok(rc, "nvmlGpmQueryDeviceSupport"))
      supported_ = support.is_supported_device != 0;
    else
      return;  // asked again next cycle
  }
  if (!*supported_) return;

  step(
      device_, [&](nvml::GpmSample s) { return api.gpm_sample_get(dev, s); }, "nvmlGpmSampleGet",
      d.gpm, ok);

  // MIG: one pair per GPU instance.
  std::set<unsigned> gpu_instances;
  if (api.device_get_mig_mode != nullptr && api.gpm_mig_sample_get != nullptr &&
      api.device_get_max_mig_device_count != nullptr &&
      api.device_get_mig_device_handle_by_index != nullptr &&
      api.device_get_gpu_instance_id != nullptr) {
    unsigned current = 0, pending = 0;
    const nvml::Return rc = api.device_get_mig_mode(dev, &current, &pending);
    if (!not_supported(rc) && ok(rc, "nvmlDeviceGetMigMode") && current == nvml::kDeviceMigEnable) {
      unsigned max = 0;
      if (ok(api.device_get_max_mig_device_count(dev, &max), "nvmlDeviceGetMaxMigDeviceCount")) {
        for (unsigned i = 0; i < std::min(max, kMaxMigDevices); ++i) {
          nvml::Device mig = nullptr;
          const nvml::Return h = api.device_get_mig_device_handle_by_index(dev, i, &mig);
          // NOT_FOUND: no MIG device in that slot.
          if (h == nvml::kErrorNotFound || h == nvml::kErrorInvalidArgument) continue;
          if (!ok(h, "nvmlDeviceGetMigDeviceHandleByIndex")) continue;
          unsigned gi = 0;
          if (ok(api.device_get_gpu_instance_id(mig, &gi), "nvmlDeviceGetGpuInstanceId"))
            gpu_instances.insert(gi);
        }
      }
    }
  }
  // Instances that are gone (MIG reconfigured, or disabled) free their samples.
  for (auto it = instances_.begin(); it != instances_.end();) {
    if (gpu_instances.count(it->first) != 0) {
      ++it;
      continue;
    }
    free_pair(it->second);
    it = instances_.erase(it);
  }
  for (unsigned gi : gpu_instances) {
    std::optional<GpmActivity> activity;
    step(
        instances_[gi], [&](nvml::GpmSample s) { return api.gpm_mig_sample_get(dev, gi, s); },
        "nvmlGpmMigSampleGet", activity, ok);
    if (activity) d.gpm_instances[gi] = *activity;
  }
}

void NvmlGpmState::step(Pair& pair, const Take& take, const char* call,
                        std::optional<GpmActivity>& out, const Check& ok) {
  const NvmlApi& api = session_->api();
  for (nvml::GpmSample* s : {&pair.prev, &pair.cur})
    if (*s == nullptr && !ok(api.gpm_sample_alloc(s), "nvmlGpmSampleAlloc")) {
      *s = nullptr;
      return;
    }
  const nvml::Return rc = take(pair.cur);
  if (not_supported(rc) || !ok(rc, call)) {
    pair.have_prev = false;
    return;
  }
  const auto now = Clock::now();
  if (pair.have_prev && now - pair.prev_at < kMinInterval) return;  // keep the older sample
  if (pair.have_prev) {
    if (!request_) request_ = std::make_unique<nvml::GpmMetricsGet>();
    nvml::GpmMetricsGet& m = *request_;
    std::memset(&m, 0, sizeof m);
    m.version = nvml::kGpmMetricsGetVersion;
    m.num_metrics = static_cast<unsigned>(kWanted.size());
    m.sample1 = pair.prev;
    m.sample2 = pair.cur;
    for (std::size_t k = 0; k < kWanted.size(); ++k) m.metrics[k].metric_id = kWanted[k].id;
    if (ok(api.gpm_metrics_get(&m), "nvmlGpmMetricsGet")) {
      GpmActivity a;
      for (std::size_t k = 0; k < kWanted.size(); ++k) {
        const nvml::GpmMetric& r = m.metrics[k];
        if (r.metric_id != kWanted[k].id || not_supported(r.nvml_return)) continue;
        const std::string what = "nvmlGpmMetricsGet metric " + std::to_string(kWanted[k].id);
        if (ok(r.nvml_return, what.c_str())) a.*(kWanted[k].field) = gpm_ratio(r.value);
      }
      out = a;
    }
  }
  std::swap(pair.prev, pair.cur);
  pair.prev_at = now;
  pair.have_prev = true;
}

}  // namespace nodewatch::accelerator
