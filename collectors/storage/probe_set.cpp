#include "storage/probe_set.hpp"

#include <chrono>
#include <string_view>

#include "nodewatch/helper.hpp"

namespace nodewatch::storage {
namespace {

constexpr std::string_view kProbeDuration = "nodewatch_storage_probe_duration_seconds";
constexpr std::string_view kProbeSuccess = "nodewatch_storage_probe_success";
constexpr std::string_view kProbeErrors = "nodewatch_storage_probe_errors_total";
constexpr std::string_view kProbeStuck = "nodewatch_storage_probe_stuck";
constexpr std::string_view kProbeLastSuccess =
    "nodewatch_storage_probe_last_success_timestamp_seconds";
constexpr std::string_view kAbandonedHelpers = "nodewatch_storage_probe_abandoned_helpers";

// How long a collector's destruction waits for its probes' threads, in all.
constexpr std::chrono::milliseconds kStopGrace{500};

}  // namespace

ProbeSet::ProbeSet(std::shared_ptr<ProbeRegistry> registry, const std::vector<ProbeConfig>& configs,
                   const std::string& file_name)
    : registry_(registry ? std::move(registry) : std::make_shared<ProbeRegistry>()) {
  for (const ProbeConfig& c : configs) probes_.push_back(registry_->acquire(c, file_name));
}

ProbeSet::~ProbeSet() {
  registry_->release(probes_, std::chrono::steady_clock::now() + kStopGrace);
}

std::vector<MetricDesc> ProbeSet::metric_descs() {
  std::vector<MetricDesc> descs;
  descs.push_back(MetricDesc{std::string(kProbeDuration),
                             MetricType::kHistogram,
                             "seconds",
                             "Duration of the probe's file-system operations on the path.",
                             {"path", "operation"},
                             probe_buckets()});
  descs.push_back(MetricDesc{std::string(kProbeSuccess),
                             MetricType::kGauge,
                             "",
                             "1 when the last operation of this kind succeeded within the "
                             "probe's timeout, else 0.",
                             {"path", "operation"}});
  descs.push_back(MetricDesc{std::string(kProbeErrors),
                             MetricType::kCounter,
                             "",
                             "Failed probe operations by errno name (ETIMEDOUT: it returned "
                             "after the probe's timeout).",
                             {"path", "operation", "errno"}});
  descs.push_back(MetricDesc{std::string(kProbeStuck),
                             MetricType::kGauge,
                             "",
                             "1 while a probe operation has been blocked in the file system "
                             "longer than its timeout.",
                             {"path"}});
  descs.push_back(MetricDesc{std::string(kProbeLastSuccess),
                             MetricType::kGauge,
                             "seconds",
                             "Unix time of the last successful probe operation of this kind.",
                             {"path", "operation"}});
  descs.push_back(MetricDesc{std::string(kAbandonedHelpers),
                             MetricType::kGauge,
                             "",
                             "Probe helper processes abandoned after their timeout that are still "
                             "alive: held by the kernel in a call on a hung mount (state D).",
                             {}});
  return descs;
}

void ProbeSet::collect(MetricSink& out) {
  // Of every probe the process ran, configured now or not: a path removed
  // from the configuration during a hang leaves its helper behind.
  // (Without probes and leftovers, no series.)
  std::size_t abandoned = helper::abandoned("probe:");
  if (!probes_.empty() || abandoned > 0)
    out.add(kAbandonedHelpers, {}, static_cast<double>(abandoned));
  for (const auto& probe : probes_) {
    const std::string& path = probe->config().path;
    ProbeSnapshot snap = probe->snapshot();
    out.add(kProbeStuck, {path}, snap.stuck ? 1.0 : 0.0);
    for (const auto& [failure, n] : probe->take_helper_failures()) {
      for (std::uint64_t i = 0; i < n; ++i)
        out.error("helper_" + failure, path,
                  "a probe cycle was cut short: no helper process (" + failure + ")");
    }
    for (std::size_t i = 0; i < kProbeOpCount; ++i) {
      const ProbeOpState& s = snap.ops[i];
      std::string_view op = probe_op_name(static_cast<ProbeOp>(i));
      for (const auto& [err, count] : s.errors) {
        out.add(kProbeErrors, {path, op, err}, static_cast<double>(count));
      }
      if (!s.histogram) continue;  // "create": errors only
      out.add_histogram(kProbeDuration, {path, op}, *s.histogram);
      if (!s.observed) continue;
      out.add(kProbeSuccess, {path, op}, s.success ? 1.0 : 0.0);
      if (s.last_success_unix > 0) out.add(kProbeLastSuccess, {path, op}, s.last_success_unix);
    }
  }
}

}  // namespace nodewatch::storage
