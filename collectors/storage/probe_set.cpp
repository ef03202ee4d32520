#include "storage/probe_set.hpp"

#include <chrono>
#include <string_view>

#include "nodewatch/fs_helper.hpp"
#include "storage/storage_metrics.hpp"

namespace nodewatch::storage {
namespace {

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
  descs.push_back(describe(families::kProbeDurationSeconds, probe_buckets()));
  descs.push_back(describe(families::kProbeSuccess));
  descs.push_back(describe(families::kProbeErrorsTotal));
  descs.push_back(describe(families::kProbeStuck));
  descs.push_back(describe(families::kProbeLastSuccessTimestampSeconds));
  descs.push_back(describe(families::kProbeAbandonedHelpers));
  return descs;
}

void ProbeSet::collect(MetricSink& out) {
  // Of every probe the process ran, configured now or not: a path removed
  // from the configuration during a hang leaves its helper behind.
  // (Without probes and leftovers, no series.)
  std::size_t abandoned = helper::abandoned("probe:");
  if (!probes_.empty() || abandoned > 0)
    out.add(families::kProbeAbandonedHelpers, {}, static_cast<double>(abandoned));
  for (const auto& probe : probes_) {
    const std::string& path = probe->config().path;
    ProbeSnapshot snap = probe->snapshot();
    out.add(families::kProbeStuck, {path}, snap.stuck ? 1.0 : 0.0);
    for (const auto& [failure, n] : probe->take_helper_failures()) {
      for (std::uint64_t i = 0; i < n; ++i)
        out.error("helper_" + failure, path,
                  "a probe cycle was cut short: no helper process (" + failure + ")");
    }
    for (std::size_t i = 0; i < kProbeOpCount; ++i) {
      const ProbeOpState& s = snap.ops[i];
      std::string_view op = probe_op_name(static_cast<ProbeOp>(i));
      for (const auto& [err, count] : s.errors) {
        out.add(families::kProbeErrorsTotal, {path, op, err}, static_cast<double>(count));
      }
      if (!s.histogram) continue;  // "create": errors only
      out.add_histogram(families::kProbeDurationSeconds, {path, op}, *s.histogram);
      if (!s.observed) continue;
      out.add(families::kProbeSuccess, {path, op}, s.success ? 1.0 : 0.0);
      if (s.last_success_unix > 0)
        out.add(families::kProbeLastSuccessTimestampSeconds, {path, op}, s.last_success_unix);
    }
  }
}

}  // namespace nodewatch::storage
