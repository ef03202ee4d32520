#pragma once
// The accelerator collector: what each GPU/accelerator is doing and whether
// it is healthy, from one backend per vendor (NVML for NVIDIA, amdgpu sysfs
// for AMD). It owns the metric table; backends only read devices.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "accelerator/backend.hpp"
#include "accelerator/pod_resources.hpp"
#include "nodewatch/collector.hpp"
#include "nodewatch/options.hpp"

namespace nodewatch {

// The catalog entry: name "accelerator". A driver call can hang (a GPU
// falling off the bus): the scheduler's pool hands its other collections
// to another worker when one stalls (daemon/scheduler.hpp), and NVML calls
// run on the NVML service's own device threads.
const CollectorSpec& accelerator_collector_spec();

namespace accelerator {

// collectors.accelerator (the NVML library is [nvml] library).
struct AcceleratorOptions {
  // Jobs kept per accelerator in nodewatch_accelerator_job_info, largest
  // memory first; 0 turns job attribution off (no process is looked up).
  std::size_t max_jobs_per_device = 8;
  // The kubelet's pod-resources socket; "" never asks. Absent: not asked,
  // not an error.
  std::string pod_resources_socket = "/var/lib/kubelet/pod-resources/kubelet.sock";
  Millis pod_resources_timeout{1000};
  // NVLink-C2C bytes per link, beside the per-accelerator sum.
  bool c2c_link_bytes = false;
  bool operator==(const AcceleratorOptions&) const = default;
};
AcceleratorOptions read_accelerator_options(OptionReader& r);

const MetricTable& accelerator_metric_table();

// Where job attribution reads from: /proc/PID/cgroup under `proc`, the
// cgroup tree under `sys`/fs/cgroup for processes /proc does not show
// (job_cgroups.hpp), and the pod-resources watcher (null: none).
struct JobSources {
  sources::FsRoot proc{"/proc"};
  sources::FsRoot sys{"/sys"};
  std::size_t max_jobs_per_device = 8;
  std::shared_ptr<PodResourcesWatcher> pod_resources;
};

class AcceleratorCollector final : public Collector {
 public:
  // `c2c_link_bytes`: export the devices' per-link NVLink-C2C bytes.
  explicit AcceleratorCollector(std::vector<std::unique_ptr<Backend>> backends,
                                JobSources jobs = {}, bool c2c_link_bytes = false);

  const MetricTable& metrics() const override { return accelerator_metric_table(); }
  void collect(const CollectContext& ctx, MetricSink& out) override;

 private:
  void attribute_jobs(std::vector<DeviceSample>& devices, const CollectContext& ctx,
                      MetricSink& out);
  // The kubelet's claim devices that are GPUs of `devices`: by index.
  struct ClaimedDevice {
    std::size_t device;
    const PodDevice* assignment;
  };
  std::vector<ClaimedDevice> match_claims(const std::vector<PodDevice>& assigned,
                                          const std::vector<DeviceSample>& devices,
                                          MetricSink& out);

  std::vector<std::unique_ptr<Backend>> backends_;
  JobSources jobs_;
  // The watcher's failure count at this collector's last collection.
  std::optional<std::uint64_t> pod_resources_failures_;
  bool c2c_link_bytes_ = false;
};

// Adds one device's series to `out` (exposed for tests).
void emit_device(const DeviceSample& d, MetricSink& out);

}  // namespace accelerator
}  // namespace nodewatch
