#pragma once
// NVLink metrics: per accelerator and link, through an NVML backend in its
// NVLink role (NvmlBackendOptions::nvlink_only). The interconnect collector
// owns one and emits these series with its own; the accelerator collector
// does not read NVLink, so no link is asked twice.
//
// Series (labels accelerator, uuid, link):
//   nodewatch_nvlink_up, nodewatch_nvlink_speed_bytes_per_second,
//   nodewatch_nvlink_transmitted_bytes_total, nodewatch_nvlink_received_bytes_total,
//   nodewatch_nvlink_errors_total{type}
// and per accelerator: nodewatch_accelerator_nvlink_links,
//   nodewatch_accelerator_nvlink_links_active.

#include <memory>
#include <string>
#include <vector>

#include "accelerator/backend.hpp"
#include "nodewatch/collector.hpp"
#include "nodewatch/metric.hpp"

namespace nodewatch::accelerator {

std::vector<MetricDesc> nvlink_metric_descs();

class NvlinkMetrics {
 public:
  // `backend` samples devices with their NVLink links filled in.
  explicit NvlinkMetrics(std::unique_ptr<Backend> backend);
  // An NVML backend in the NVLink role over `library`.
  static std::unique_ptr<NvlinkMetrics> from_nvml(const std::string& library);

  // Adds every NVLink series to `sink`. A library that cannot be used is
  // counted under its reason (the accelerator collector reports it as a
  // failure); it never throws, so the collector's other sources carry on.
  void collect(const CollectContext& ctx, MetricSink& sink);

 private:
  std::unique_ptr<Backend> backend_;
};

}  // namespace nodewatch::accelerator
