#include "interconnect/interconnect_collector.hpp"

#include "accelerator/nvml/nvml_service.hpp"
#include "nodewatch/options.hpp"
#include "nodewatch/sources/wrap_counter.hpp"

namespace nodewatch {
namespace interconnect {

InterconnectOptions read_interconnect_options(OptionReader& r) {
  InterconnectOptions o;
  o.ib = read_ib_options(r);
  o.netlink = r.get_bool("netlink", o.netlink,
                         "read port hw_counters with one RDMA netlink request per port where "
                         "the kernel has it (else sysfs)");
  o.verbs = r.get_bool("verbs", o.verbs,
                       "with /dev/infiniband, dlopen libibverbs and count port up/down events "
                       "(holds a uverbs descriptor per device)");
  o.nvlink = r.get_bool("nvlink", o.nvlink, "export NVLink links through NVML ([nvml])");
  o.nvlink_link_errors =
      r.get_bool("nvlink_link_errors", o.nvlink_link_errors,
                 "also export the NVLink error counters and link quality per link "
                 "(`nodewatch_nvlink_link_errors_total`, 90-144 series per accelerator, nearly all "
                 "0; on NVLink5 the `nodewatch_nvlink_link_*` BER, FEC, PLR and transmit-wait "
                 "series, up to 30 more per link); the per-accelerator sums and worst rates are "
                 "always exported");
  r.refuse_moved("nvml_library", "library in [nvml]");
  return o;
}

const MetricTable& interconnect_metric_table() {
  static const MetricTable kTable = [] {
    std::vector<MetricDesc> descs;
    // One list per part, concatenated.
    for (auto part : {&IbPorts::metric_descs, &nvlink_metric_descs}) {
      for (MetricDesc& d : part()) descs.push_back(std::move(d));
    }
    // NVLink's families keep the names of what they measure (see
    // nvlink_metrics.hpp): declared as borrowed, so the lint checks them.
    return MetricTable(std::move(descs), nvlink_metric_prefixes());
  }();
  return kTable;
}

InterconnectCollector::InterconnectCollector(std::unique_ptr<IbPorts> ib,
                                             std::unique_ptr<NvlinkMetrics> nvlink)
    : ib_(std::move(ib)), nvlink_(std::move(nvlink)) {}

const MetricTable& InterconnectCollector::metrics() const {
  return interconnect_metric_table();
}

void InterconnectCollector::collect(const CollectContext& ctx, MetricSink& out) {
  ib_->collect(ctx, out);
  // NVLink never throws: an unusable NVML is counted, the ports stay.
  if (nvlink_ && !ctx.should_stop()) nvlink_->collect(ctx, out);
}

}  // namespace interconnect

const CollectorSpec& interconnect_collector_spec() {
  static const CollectorSpec kSpec = [] {
    CollectorSpec spec;
    spec.name = "interconnect";
    spec.description =
        "InfiniBand and RoCE port state, rate, PMA and hw_counters, from sysfs, RDMA netlink and "
        "libibverbs; NVLink links through NVML";
    spec.enabled_by_default = true;
    spec.default_interval = std::chrono::seconds(15);
    spec.default_timeout = std::chrono::seconds(10);
    spec.read_options =
        typed_options<interconnect::InterconnectOptions>(interconnect::read_interconnect_options);
    spec.metrics = interconnect::interconnect_metric_table;
    spec.create = [](const CollectorEnv& env) -> std::unique_ptr<Collector> {
      const auto& o = env.options_as<interconnect::InterconnectOptions>();
      auto hw = o.netlink ? interconnect::make_netlink_hw_counter_source()
                          : interconnect::make_disabled_hw_counter_source();
      // /dev is not moved by --sysfs: a test root has no verbs devices, and
      // the real one is only used when the node has RDMA hardware.
      auto verbs =
          interconnect::make_verbs_source("libibverbs.so.1", o.verbs ? "/dev/infiniband" : "");
      // The 32-bit counters' wrap offsets outlive a rebuilt collector.
      auto counters = env.service<sources::WrapCounters>(
          "interconnect", [] { return std::make_shared<sources::WrapCounters>(); });
      return std::make_unique<interconnect::InterconnectCollector>(
          std::make_unique<interconnect::IbPorts>(env.roots, o.ib, std::move(hw), std::move(verbs),
                                                  std::chrono::steady_clock::now,
                                                  std::move(counters)),
          // The process's NVML service, shared with the accelerator collector.
          o.nvlink
              ? std::make_unique<interconnect::NvlinkMetrics>(
                    accelerator::nvml_service(env), o.nvlink_link_errors,
                    // The error sums' last values outlive a rebuilt collector.
                    env.service<interconnect::NvlinkTotals>(
                        "nvlink", [] { return std::make_shared<interconnect::NvlinkTotals>(); }))
              : nullptr);
    };
    return spec;
  }();
  return kSpec;
}

}  // namespace nodewatch
