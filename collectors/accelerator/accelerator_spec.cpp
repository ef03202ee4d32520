// The accelerator collector's catalog entry: options and the backends it
// is built from.

#include "accelerator/accelerator_collector.hpp"
#include "nodewatch/config.hpp"

namespace nodewatch {

const CollectorSpec& accelerator_collector_spec() {
  static const CollectorSpec spec = [] {
    CollectorSpec s;
    s.name = "accelerator";
    s.description =
        "GPUs and other accelerators: utilization, memory, thermals, power, clocks, ECC, XID";
    s.enabled_by_default = true;
    // A driver call can hang (a GPU falling off the bus): never on the shared pool.
    s.own_thread = true;
    s.default_interval = std::chrono::seconds(15);
    s.default_timeout = std::chrono::seconds(10);
    s.options = [](OptionReader& r) { accelerator::read_accelerator_options(r); };
    s.create = [](const CollectorEnv& env) -> std::unique_ptr<Collector> {
      accelerator::AcceleratorOptions o =
          reread_options(env, "accelerator", accelerator::read_accelerator_options);
      std::vector<std::unique_ptr<accelerator::Backend>> backends;
      backends.push_back(accelerator::make_nvml_backend(o.nvml_library));
      backends.push_back(accelerator::make_amdgpu_backend(env.roots));
      return std::make_unique<accelerator::AcceleratorCollector>(std::move(backends));
    };
    return s;
  }();
  return spec;
}

}  // namespace nodewatch
