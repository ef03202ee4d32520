// The accelerator collector's catalog entry: options and the backends it
// is built from.

#include "accelerator/accelerator_collector.hpp"
#include "accelerator/nvml/nvml_service.hpp"
#include "nodewatch/options.hpp"

namespace nodewatch {

const CollectorSpec& accelerator_collector_spec() {
  static const CollectorSpec spec = [] {
    CollectorSpec s;
    s.name = "accelerator";
    s.description =
        "GPUs and other accelerators: utilization, memory, thermals, power, clocks, ECC, XID";
    s.enabled_by_default = true;
    s.default_interval = std::chrono::seconds(15);
    s.default_timeout = std::chrono::seconds(10);
    s.read_options =
        typed_options<accelerator::AcceleratorOptions>(accelerator::read_accelerator_options);
    s.metrics = accelerator::accelerator_metric_table;
    s.create = [](const CollectorEnv& env) -> std::unique_ptr<Collector> {
      std::vector<std::unique_ptr<accelerator::Backend>> backends;
      // The process's NVML service, shared with the interconnect collector's
      // NVLink part: one session and one thread per GPU for both.
      backends.push_back(accelerator::make_nvml_backend(accelerator::nvml_service(env), env.roots));
      backends.push_back(accelerator::make_amdgpu_backend(env.roots));
      const auto& o = env.options_as<accelerator::AcceleratorOptions>();
      accelerator::JobSources jobs;
      jobs.proc = env.roots.proc();
      jobs.sys = env.roots.sys();
      jobs.max_jobs_per_device = o.max_jobs_per_device;
      if (o.max_jobs_per_device > 0 && !o.pod_resources_socket.empty()) {
        // One watcher per socket and timeout for the process: a reload
        // that keeps them keeps its thread and its last answer.
        const std::string key = "pod-resources:" + o.pod_resources_socket + ":" +
                                std::to_string(o.pod_resources_timeout.count());
        jobs.pod_resources = env.service<accelerator::PodResourcesWatcher>(key, [&] {
          accelerator::PodResourcesWatcher::Options w;
          w.socket = o.pod_resources_socket;
          w.timeout = o.pod_resources_timeout;
          return std::make_shared<accelerator::PodResourcesWatcher>(std::move(w));
        });
      }
      return std::make_unique<accelerator::AcceleratorCollector>(std::move(backends),
                                                                 std::move(jobs), o.c2c_link_bytes);
    };
    return s;
  }();
  return spec;
}

}  // namespace nodewatch
