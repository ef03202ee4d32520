#include "accelerator/nvml/nvml_gpm.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <set>
#include <string>
#include <utility>
#include <vector>

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
// The most asked at once: the activity, the device's C2C pair and every
// link's.
static_assert(kWanted.size() + 2 + 2 * nvml::kGpmC2cLinks <= nvml::kGpmMetricMaxOldest);

constexpr double kMiB = 1024.0 * 1024.0;

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
  read_samples(session, dev, d, ok);
  // The C2C sums once they have a first answer, whatever this cycle got.
  if (c2c_) {
    HostLinkSample& h = d.host_links["c2c"];
    h.tx_bytes = c2c_->tx;
    h.rx_bytes = c2c_->rx;
  }
  for (const auto& [l, bytes] : c2c_per_link_) d.c2c_link_bytes[l] = bytes;
}

void NvmlGpmState::read_samples(const std::shared_ptr<const NvmlSession>& session, nvml::Device dev,
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

  // NVLink-C2C throughput: on a device with C2C links, from a driver whose
  // GPM has the metrics (R575 on; an older one would refuse the whole
  // request for an id past its NVML_GPM_METRIC_MAX).
  const std::optional<unsigned> branch = session->driver_branch();
  const unsigned c2c_links =
      branch && *branch >= nvml::kGpmC2cFirstBranch && !d.c2c_link_active.empty()
          ? std::min<unsigned>(static_cast<unsigned>(d.c2c_link_active.rbegin()->first) + 1,
                               nvml::kGpmC2cLinks)
          : 0;
  std::vector<unsigned> ids = activity_ids();
  if (c2c_links > 0) {
    ids.push_back(nvml::kGpmC2cTotalTx);
    ids.push_back(nvml::kGpmC2cTotalRx);
    for (unsigned l = 0; l < c2c_links; ++l) {
      const unsigned first = nvml::kGpmC2cLink0TotalTx + nvml::kGpmC2cLinkStride * l;
      ids.push_back(first);      // LINKl_TOTAL_TX
      ids.push_back(first + 1);  // LINKl_TOTAL_RX
    }
  }
  step(
      device_, [&](nvml::GpmSample s) { return api.gpm_sample_get(dev, s); }, "nvmlGpmSampleGet",
      ids,
      [&](const std::vector<std::optional<double>>& v, double seconds) {
        d.gpm = activity(v);
        if (c2c_links == 0) return;
        // MiB/s over the interval, added up from the first rate that
        // answered; a rate that did not answer adds nothing, and the sum
        // stays.
        auto add = [&](const std::optional<double>& mib_per_s, double& sum) {
          if (mib_per_s && *mib_per_s >= 0) sum += *mib_per_s * kMiB * seconds;
        };
        const std::size_t at = kWanted.size();
        if (v[at] || v[at + 1]) {
          C2cLinkBytes& sum = c2c_ ? *c2c_ : c2c_.emplace();
          add(v[at], sum.tx);
          add(v[at + 1], sum.rx);
        }
        for (unsigned l = 0; l < c2c_links; ++l) {
          const std::optional<double>& tx = v[at + 2 + 2 * l];
          const std::optional<double>& rx = v[at + 3 + 2 * l];
          if (!tx && !rx) continue;
          C2cLinkBytes& sum = c2c_per_link_[l];
          add(tx, sum.tx);
          add(rx, sum.rx);
        }
      },
      ok);

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
    step(
        instances_[gi], [&](nvml::GpmSample s) { return api.gpm_mig_sample_get(dev, gi, s); },
        "nvmlGpmMigSampleGet", activity_ids(),
        [&](const std::vector<std::optional<double>>& v, double) {
          d.gpm_instances[gi] = activity(v);
        },
        ok);
  }
}

const std::vector<unsigned>& NvmlGpmState::activity_ids() {
  static const std::vector<unsigned> ids = [] {
    std::vector<unsigned> v;
    for (const Wanted& w : kWanted) v.push_back(w.id);
    return v;
  }();
  return ids;
}

GpmActivity NvmlGpmState::activity(const std::vector<std::optional<double>>& values) {
  GpmActivity a;
  for (std::size_t k = 0; k < kWanted.size(); ++k)
    if (values[k]) a.*(kWanted[k].field) = gpm_ratio(*values[k]);
  return a;
}

void NvmlGpmState::step(Pair& pair, const Take& take, const char* call,
                        const std::vector<unsigned>& ids, const Use& use, const Check& ok) {
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
    m.num_metrics = static_cast<unsigned>(ids.size());
    m.sample1 = pair.prev;
    m.sample2 = pair.cur;
    for (std::size_t k = 0; k < ids.size(); ++k) m.metrics[k].metric_id = ids[k];
    if (ok(api.gpm_metrics_get(&m), "nvmlGpmMetricsGet")) {
      std::vector<std::optional<double>> values(ids.size());
      for (std::size_t k = 0; k < ids.size(); ++k) {
        const nvml::GpmMetric& r = m.metrics[k];
        if (r.metric_id != ids[k] || not_supported(r.nvml_return)) continue;
        const std::string what = "nvmlGpmMetricsGet metric " + std::to_string(ids[k]);
        if (ok(r.nvml_return, what.c_str()) && std::isfinite(r.value)) values[k] = r.value;
      }
      use(values, std::chrono::duration<double>(now - pair.prev_at).count());
    }
  }
  std::swap(pair.prev, pair.cur);
  pair.prev_at = now;
  pair.have_prev = true;
}

}  // namespace nodewatch::accelerator
