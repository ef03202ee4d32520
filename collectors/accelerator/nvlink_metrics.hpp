#pragma once
// NVLink metrics: per accelerator and link, from the NVLink questions of the
// process's NVML service (nvml/nvml_service.hpp). The interconnect
// collector owns one and emits these series with its own; the accelerator
// collector asks the same service its device questions and no NVLink one,
// so no link is asked twice and no GPU gets a second session or thread.
//
// Series (labels accelerator, uuid, link):
//   nodewatch_nvlink_up, nodewatch_nvlink_speed_bytes_per_second,
//   nodewatch_nvlink_transmitted_bytes_total, nodewatch_nvlink_received_bytes_total,
//   nodewatch_nvlink_errors_total{type}
// and per accelerator: nodewatch_accelerator_nvlink_links,
//   nodewatch_accelerator_nvlink_links_active.
// These names are not the interconnect collector's own prefix: they name
// what they measure (an NVLink link, an accelerator's NVLink links)
// wherever it is collected, and the interconnect collector's table
// declares them as borrowed prefixes (nvlink_metric_prefixes(),
// MetricTable's `borrowed_prefixes`), which the metric lint checks.

#include <memory>
#include <string>
#include <vector>

#include "accelerator/backend.hpp"
#include "nodewatch/collector.hpp"
#include "nodewatch/metric.hpp"

namespace nodewatch::accelerator {

class NvmlService;

std::vector<MetricDesc> nvlink_metric_descs();
// The prefixes of the families above, for a table that carries them:
// "nodewatch_nvlink_" and "nodewatch_accelerator_nvlink_".
std::vector<std::string> nvlink_metric_prefixes();
// The families above, in a table of their own (tests, benchmarks).
const MetricTable& nvlink_metric_table();

// Adds the NVLink series of `devices` (samples with their links filled in)
// to `sink`, and reports their partial failures.
void emit_nvlinks(const std::vector<DeviceSample>& devices, MetricSink& sink);

class NvlinkMetrics {
 public:
  explicit NvlinkMetrics(std::shared_ptr<NvmlService> nvml);

  // Adds every NVLink series to `sink`. A library that cannot be used is
  // counted under its reason (the service logs it, and the accelerator
  // collector reports it as a failure); it never throws, so the collector's
  // other sources carry on.
  void collect(const CollectContext& ctx, MetricSink& sink);

 private:
  std::shared_ptr<NvmlService> nvml_;
};

}  // namespace nodewatch::accelerator
