#pragma once
// The accelerator collector: what each GPU/accelerator is doing and whether
// it is healthy, from one backend per vendor (NVML for NVIDIA, amdgpu sysfs
// for AMD). It owns the metric table; backends only read devices.

#include <memory>
#include <string>
#include <vector>

#include "accelerator/backend.hpp"
#include "nodewatch/collector.hpp"

namespace nodewatch {

// The catalog entry: name "accelerator", on by default, on a thread of its
// own (a driver call can hang).
const CollectorSpec& accelerator_collector_spec();

namespace accelerator {

// No options of its own yet: the NVML library is [nvml] library.
struct AcceleratorOptions {
  bool operator==(const AcceleratorOptions&) const = default;
};
AcceleratorOptions read_accelerator_options(OptionReader& r);

const MetricTable& accelerator_metric_table();

class AcceleratorCollector final : public Collector {
 public:
  explicit AcceleratorCollector(std::vector<std::unique_ptr<Backend>> backends);

  const MetricTable& metrics() const override { return accelerator_metric_table(); }
  void collect(const CollectContext& ctx, MetricSink& out) override;

 private:
  std::vector<std::unique_ptr<Backend>> backends_;
};

// Adds one device's series to `out` (exposed for tests).
void emit_device(const DeviceSample& d, MetricSink& out);

}  // namespace accelerator
}  // namespace nodewatch
