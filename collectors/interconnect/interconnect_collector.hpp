#pragma once
// The interconnect collector: the fabric between nodes (InfiniBand and RoCE
// ports, ib_ports.hpp) and between accelerators (NVLink, through the NVLink
// questions of the process's NVML service: interconnect/nvlink_metrics.hpp). Each
// source is a part with its own declarations (a function returning
// std::vector<MetricDesc>) and its own collect(); the collector's table is
// their concatenation, so that a part is added without touching the others.

#include <chrono>
#include <memory>
#include <string>

#include "interconnect/ib_ports.hpp"
#include "interconnect/nvlink_metrics.hpp"
#include "nodewatch/collector.hpp"

namespace nodewatch {

// The catalog entry: name "interconnect". A PMA read is a firmware MAD,
// which a wedged HCA can hold for seconds: the scheduler's pool hands its
// other collections to another worker when one stalls
// (daemon/scheduler.hpp).
const CollectorSpec& interconnect_collector_spec();

namespace interconnect {

// [collectors.interconnect] keys.
struct InterconnectOptions {
  IbOptions ib;
  bool netlink = true;  // RDMA netlink for hw_counters where the kernel has it
  bool verbs = true;    // libibverbs async events where /dev/infiniband exists
  bool nvlink = true;   // NVLink links through NVML ([nvml] library)
  // Also the NVLink error counters per link (nodewatch_nvlink_link_errors_total);
  // the per-accelerator sums are always exported.
  bool nvlink_link_errors = false;
  bool operator==(const InterconnectOptions&) const = default;
};

// Reads the keys above through `r`; an invalid pattern is reported at its
// key (sources::read_name_filter).
InterconnectOptions read_interconnect_options(OptionReader& r);

// Every metric the collector can emit.
const MetricTable& interconnect_metric_table();

class InterconnectCollector final : public Collector {
 public:
  // `nvlink` may be null (NVLink off).
  explicit InterconnectCollector(std::unique_ptr<IbPorts> ib,
                                 std::unique_ptr<NvlinkMetrics> nvlink = nullptr);

  const MetricTable& metrics() const override;
  void collect(const CollectContext& ctx, MetricSink& out) override;

  IbPorts& ib() { return *ib_; }

 private:
  std::unique_ptr<IbPorts> ib_;
  std::unique_ptr<NvlinkMetrics> nvlink_;
};

}  // namespace interconnect
}  // namespace nodewatch
