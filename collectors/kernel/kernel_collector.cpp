#include "kernel/kernel_collector.hpp"

#include <sys/stat.h>

#include <string>
#include <utility>

#include "kernel/edac.hpp"
#include "kernel/kernel_metrics.hpp"
#include "nodewatch/fs_helper.hpp"
#include "nodewatch/options.hpp"
#include "nodewatch/state_file.hpp"

namespace nodewatch {
namespace kernel {
namespace {

bool absolute(const std::string& p) {
  return !p.empty() && p[0] == '/';
}

}  // namespace

KernelOptions read_kernel_options(OptionReader& r) {
  KernelOptions o;
  o.kmsg_path = r.get_string("kmsg_path", o.kmsg_path,
                             "the kernel log device, absolute (or a file of its records, read "
                             "as it grows, every second: fixtures)");
  if (!absolute(o.kmsg_path)) r.error("kmsg_path", "must be an absolute path");
  o.state_file = r.get_string(
      "state_file", o.state_file,
      "absolute file keeping the boot id, the last record counted and the counts across "
      "restarts (\"\": none kept); its directory is made if missing (its last component only); "
      "something there other than a regular file (a device, a FIFO, a link) is refused");
  if (!o.state_file.empty() && (!absolute(o.state_file) || o.state_file.back() == '/'))
    r.error("state_file", "must be an absolute file path, or \"\" to keep no state");
  else if (std::string why = o.state_file.empty() ? "" : state_path_problem(o.state_file);
           !why.empty())
    r.error("state_file", why);
  o.max_devices = r.get_int("max_devices", o.max_devices, 1, 4096,
                            "distinct devices per event; the rest count as device=\"other\"");
  o.edac = r.get_bool("edac", o.edac, "read host memory errors from EDAC sysfs");
  return o;
}

const MetricTable& kernel_metric_table() {
  static const MetricTable t(
      {
          describe(families::kEventsTotal),
          describe(families::kXidEventsTotal),
          describe(families::kSxidEventsTotal),
          describe(families::kLogLostRecordsTotal),
          describe(families::kLogLastRecordTimestampSeconds),
          describe(families::kLogUp),
          describe(families::kMemoryCorrectedErrorsTotal),
          describe(families::kMemoryUncorrectedErrorsTotal),
          describe(families::kMemoryControllerInfo),
          describe(families::kMemoryModuleInfo),
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
    const auto until = std::chrono::steady_clock::now() + ctx.left() / 2;
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
  if (!news.state_dropped.empty()) out.error("state_entry_dropped", state_file, news.state_dropped);
  if (!s.state_error.empty()) out.error("state_write_error", state_file, s.state_error);
  if (news.malformed > 0) out.error("malformed_record", news.malformed);
  if (!s.read_error.empty()) out.error("log_unreadable", options.kmsg_path, s.read_error);

  for (const auto& [key, n] : s.state.counts.events)
    out.add(families::kEventsTotal, {key.first, key.second}, static_cast<double>(n));
  for (const auto& [key, n] : s.state.counts.xids)
    out.add(families::kXidEventsTotal, {key.first, key.second}, static_cast<double>(n));
  for (const auto& [key, n] : s.state.counts.sxids)
    out.add(families::kSxidEventsTotal, {key.first, key.second}, static_cast<double>(n));
  out.add(families::kLogLostRecordsTotal, {}, static_cast<double>(s.state.counts.lost));
  if (s.last_record_unix)
    out.add(families::kLogLastRecordTimestampSeconds, {}, *s.last_record_unix);
  out.add(families::kLogUp, {}, s.read_error.empty() ? 1 : 0);
}

void KernelCollector::collect_edac(MetricSink& out) {
  const EdacRead r = read_edac(roots_.sys());
  for (const auto& [subject, why] : r.errors) out.error("edac_read_error", subject, why);
  for (const EdacController& c : r.controllers) {
    out.add(families::kMemoryControllerInfo, {c.name, c.mc_name}, 1);
    for (const EdacModule& m : c.modules) {
      out.add(families::kMemoryModuleInfo, {c.name, m.slot, m.label}, 1);
      if (m.corrected)
        out.add(families::kMemoryCorrectedErrorsTotal, {c.name, m.slot},
                static_cast<double>(*m.corrected));
      if (m.uncorrected)
        out.add(families::kMemoryUncorrectedErrorsTotal, {c.name, m.slot},
                static_cast<double>(*m.uncorrected));
    }
    if (c.corrected_noinfo)
      out.add(families::kMemoryCorrectedErrorsTotal, {c.name, ""},
              static_cast<double>(*c.corrected_noinfo));
    if (c.uncorrected_noinfo)
      out.add(families::kMemoryUncorrectedErrorsTotal, {c.name, ""},
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
