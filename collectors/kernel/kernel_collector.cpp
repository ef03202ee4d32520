#include "kernel/kernel_collector.hpp"

#include <string>
#include <utility>

#include "kernel/edac.hpp"
#include "nodewatch/options.hpp"

namespace nodewatch {
namespace kernel {
namespace {

bool absolute(const std::string& p) {
  return !p.empty() && p[0] == '/';
}

}  // namespace

KernelOptions read_kernel_options(OptionReader& r) {
  KernelOptions o;
  o.kmsg_path = r.get_string("kmsg_path", o.kmsg_path);
  if (!absolute(o.kmsg_path)) r.error("kmsg_path", "must be an absolute path");
  o.state_file = r.get_string("state_file", o.state_file);
  if (!o.state_file.empty() && (!absolute(o.state_file) || o.state_file.back() == '/'))
    r.error("state_file", "must be an absolute file path, or \"\" to keep no state");
  o.max_devices = r.get_int("max_devices", o.max_devices, 1, 4096);
  o.edac = r.get_bool("edac", o.edac);
  return o;
}

const MetricTable& kernel_metric_table() {
  static const MetricTable t(
      {
          {"nodewatch_kernel_events_total",
           MetricType::kCounter,
           "",
           "Hardware and system events found in the kernel log, by event and the device the "
           "record names (\"\" for none, \"other\" past collectors.kernel.max_devices); counted "
           "once across restarts of nodewatch within a boot.",
           {"event", "device"}},
          {"nodewatch_kernel_xid_events_total",
           MetricType::kCounter,
           "",
           "NVIDIA XID errors in the kernel log (NVRM: Xid), by GPU PCI address and XID code; "
           "also where NVML is hung or absent.",
           {"pci_bus_id", "xid"}},
          {"nodewatch_kernel_sxid_events_total",
           MetricType::kCounter,
           "",
           "NVIDIA NVSwitch SXID errors in the kernel log (nvidia-nvswitch: SXid), by NVSwitch "
           "PCI address and SXID code.",
           {"pci_bus_id", "sxid"}},
          {"nodewatch_kernel_log_lost_records_total",
           MetricType::kCounter,
           "",
           "Kernel log records overwritten in the ring buffer before nodewatch read them (while "
           "it was down, or in a log storm): events in them are not counted.",
           {}},
          {"nodewatch_kernel_log_last_record_timestamp_seconds",
           MetricType::kGauge,
           "seconds",
           "When the last kernel log record read was logged (Unix time).",
           {}},
          {"nodewatch_kernel_log_up",
           MetricType::kGauge,
           "",
           "1 if the last read of the kernel log succeeded, 0 if it cannot be read (the counts "
           "so far are still exported).",
           {}},
          {"nodewatch_memory_corrected_errors_total",
           MetricType::kCounter,
           "",
           "Corrected host memory errors (EDAC), by memory controller and module slot; "
           "dimm=\"\" holds those the driver could not place.",
           {"controller", "dimm"}},
          {"nodewatch_memory_uncorrected_errors_total",
           MetricType::kCounter,
           "",
           "Uncorrected host memory errors (EDAC), by memory controller and module slot; "
           "dimm=\"\" holds those the driver could not place.",
           {"controller", "dimm"}},
          {"nodewatch_memory_controller_info",
           MetricType::kGauge,
           "",
           "A host memory controller EDAC knows, with the driver's name for it.",
           {"controller", "name"}},
          {"nodewatch_memory_module_info",
           MetricType::kGauge,
           "",
           "A populated memory module (EDAC dimmN or rankN) with its label (the board's silk "
           "screen name where set, e.g. by rasdaemon).",
           {"controller", "dimm", "label"}},
      },
      {"nodewatch_memory_"});
  return t;
}

std::shared_ptr<KernelLogService> kernel_log_service(const CollectorEnv& env,
                                                     const KernelOptions& options) {
  KernelLogOptions lo;
  lo.kmsg_path = options.kmsg_path;
  lo.state_file = options.state_file;
  lo.boot_id_path = (env.roots.procfs / "sys/kernel/random/boot_id").string();
  lo.max_devices = static_cast<std::size_t>(options.max_devices);
  // One reader per log: a reload that changes the state file or the device
  // bound gives them to the running service (its counts go on), never to a
  // second reader of the same log.
  const std::string key = lo.kmsg_path + '\n' + lo.boot_id_path;
  auto service =
      env.service<KernelLogService>(key, [&] { return std::make_shared<KernelLogService>(lo); });
  service->apply(lo.state_file, lo.max_devices);
  return service;
}

KernelCollector::KernelCollector(std::shared_ptr<KernelLogService> log, Roots roots, bool edac)
    : log_(std::move(log)), roots_(std::move(roots)), edac_(edac) {}

const MetricTable& KernelCollector::metrics() const {
  return kernel_metric_table();
}

void KernelCollector::collect(const CollectContext& ctx, MetricSink& out) {
  collect_log(ctx, out);
  if (edac_) collect_edac(out);
}

void KernelCollector::collect_log(const CollectContext& ctx, MetricSink& out) {
  if (!waited_) {
    // At most half the deadline: EDAC is read after.
    const auto now = std::chrono::steady_clock::now();
    const auto until = ctx.deadline > now ? now + (ctx.deadline - now) / 2 : now;
    waited_ = log_->wait_first_pass(until);
    if (!waited_)
      throw CollectError("log_not_read",
                         log_->options().kmsg_path + ": not read through yet within the deadline");
  }
  const KernelLogService::Snapshot s = log_->snapshot();
  const KernelLogService::News news = log_->take_news();
  const KernelLogOptions options = log_->options();
  const std::string& state_file = options.state_file;

  if (!news.state_refused.empty()) out.error("state_refused", state_file, news.state_refused);
  if (!s.state_error.empty()) out.error("state_write_error", state_file, s.state_error);
  if (news.malformed > 0) out.error("malformed_record", news.malformed);
  if (!s.read_error.empty()) out.error("log_unreadable", options.kmsg_path, s.read_error);

  for (const auto& [key, n] : s.state.counts.events)
    out.add("nodewatch_kernel_events_total", {key.first, key.second}, static_cast<double>(n));
  for (const auto& [key, n] : s.state.counts.xids)
    out.add("nodewatch_kernel_xid_events_total", {key.first, key.second}, static_cast<double>(n));
  for (const auto& [key, n] : s.state.counts.sxids)
    out.add("nodewatch_kernel_sxid_events_total", {key.first, key.second}, static_cast<double>(n));
  out.add("nodewatch_kernel_log_lost_records_total", {}, static_cast<double>(s.state.counts.lost));
  if (s.last_record_unix)
    out.add("nodewatch_kernel_log_last_record_timestamp_seconds", {}, *s.last_record_unix);
  out.add("nodewatch_kernel_log_up", {}, s.read_error.empty() ? 1 : 0);
}

void KernelCollector::collect_edac(MetricSink& out) {
  const EdacRead r = read_edac(roots_.sys());
  for (const auto& [subject, why] : r.errors) out.error("edac_read_error", subject, why);
  for (const EdacController& c : r.controllers) {
    out.add("nodewatch_memory_controller_info", {c.name, c.mc_name}, 1);
    for (const EdacModule& m : c.modules) {
      out.add("nodewatch_memory_module_info", {c.name, m.slot, m.label}, 1);
      if (m.corrected)
        out.add("nodewatch_memory_corrected_errors_total", {c.name, m.slot},
                static_cast<double>(*m.corrected));
      if (m.uncorrected)
        out.add("nodewatch_memory_uncorrected_errors_total", {c.name, m.slot},
                static_cast<double>(*m.uncorrected));
    }
    if (c.corrected_noinfo)
      out.add("nodewatch_memory_corrected_errors_total", {c.name, ""},
              static_cast<double>(*c.corrected_noinfo));
    if (c.uncorrected_noinfo)
      out.add("nodewatch_memory_uncorrected_errors_total", {c.name, ""},
              static_cast<double>(*c.uncorrected_noinfo));
  }
}

}  // namespace kernel

const CollectorSpec& kernel_collector_spec() {
  static const CollectorSpec spec = [] {
    CollectorSpec s;
    s.name = "kernel";
    s.description =
        "the kernel log's hardware and system events (XID, AER, machine checks, hung tasks, "
        "OOM kills, I/O errors), counted once across restarts; host memory errors (EDAC)";
    s.enabled_by_default = true;
    s.default_interval = std::chrono::seconds(15);
    s.default_timeout = std::chrono::seconds(5);
    s.read_options = typed_options<kernel::KernelOptions>(kernel::read_kernel_options);
    s.metrics = kernel::kernel_metric_table;
    s.create = [](const CollectorEnv& env) -> std::unique_ptr<Collector> {
      const auto& o = env.options_as<kernel::KernelOptions>();
      return std::make_unique<kernel::KernelCollector>(kernel::kernel_log_service(env, o),
                                                       env.roots, o.edac);
    };
    return s;
  }();
  return spec;
}

}  // namespace nodewatch
