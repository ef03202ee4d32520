#include "interconnect/interconnect_collector.hpp"

#include <regex>

#include "accelerator/nvml/nvml_service.hpp"
#include "nodewatch/options.hpp"

namespace nodewatch {
namespace interconnect {
namespace {

// libstdc++ compiles and matches regular expressions recursively: bound them.
constexpr std::size_t kMaxRegexLength = 1024;

std::string read_regex(OptionReader& r, std::string_view key) {
  std::string value = r.get_string(key, "");
  if (value.size() > kMaxRegexLength) {
    r.error(key,
            "regular expression is longer than " + std::to_string(kMaxRegexLength) + " characters");
    return {};
  }
  try {
    if (!value.empty()) std::regex(value, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    r.error(key, "invalid regular expression \"" + value + "\": " + e.what());
    return {};
  }
  return value;
}

}  // namespace

InterconnectOptions read_interconnect_options(OptionReader& r) {
  InterconnectOptions o;
  o.ib.pma_interval =
      r.get_duration("pma_interval", o.ib.pma_interval, Millis(0), std::chrono::hours(1));
  o.ib.devices_include = read_regex(r, "devices_include");
  o.ib.devices_exclude = read_regex(r, "devices_exclude");
  o.netlink = r.get_bool("netlink", o.netlink);
  o.verbs = r.get_bool("verbs", o.verbs);
  o.nvlink = r.get_bool("nvlink", o.nvlink);
  r.refuse_moved("nvml_library", "library in [nvml]");
  return o;
}

const MetricTable& interconnect_metric_table() {
  static const MetricTable kTable = [] {
    std::vector<MetricDesc> descs;
    // One list per part, concatenated.
    for (auto part : {&IbPorts::metric_descs, &accelerator::nvlink_metric_descs}) {
      for (MetricDesc& d : part()) descs.push_back(std::move(d));
    }
    // NVLink's families keep the names of what they measure (see
    // nvlink_metrics.hpp): declared as borrowed, so the lint checks them.
    return MetricTable(std::move(descs), accelerator::nvlink_metric_prefixes());
  }();
  return kTable;
}

InterconnectCollector::InterconnectCollector(std::unique_ptr<IbPorts> ib,
                                             std::unique_ptr<accelerator::NvlinkMetrics> nvlink)
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
    spec.own_thread = true;
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
      return std::make_unique<interconnect::InterconnectCollector>(
          std::make_unique<interconnect::IbPorts>(env.roots, o.ib, std::move(hw), std::move(verbs)),
          // The process's NVML service, shared with the accelerator collector.
          o.nvlink ? std::make_unique<accelerator::NvlinkMetrics>(accelerator::nvml_service(env))
                   : nullptr);
    };
    return spec;
  }();
  return kSpec;
}

}  // namespace nodewatch
