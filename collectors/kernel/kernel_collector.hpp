#pragma once
// The kernel collector: the kernel log's hardware and system events as
// counters that survive restarts (kernel_service.hpp, kernel_events.hpp),
// and the host's memory errors from EDAC (edac.hpp).
//
// The log is read by the KernelLogService on a thread of its own; a
// collection only copies its counts, so it costs microseconds whatever the
// log does. The service is one of the daemon's services (services.hpp), one
// per log (kmsg path and boot id file): a reload keeps it, its thread and
// its counts, and a changed state_file or max_devices is given to it
// (apply()), so that a reload never steps a counter back or counts a record
// twice. A new collector waits (within its deadline) for its service's
// first pass over the log before exporting, so that its first counts are
// never the state file's alone.
//
// Series:
//  - nodewatch_kernel_events_total{event,device}: every event of the
//    vocabulary, device "" where the record names none and "other" past
//    max_devices distinct devices of one event;
//  - nodewatch_kernel_{xid,sxid}_events_total{pci_bus_id,xid|sxid};
//  - nodewatch_kernel_log_lost_records_total: records the ring buffer
//    overwrote before they were read (while nodewatch was down, or a storm);
//  - nodewatch_kernel_log_last_record_timestamp_seconds: the last record
//    read, as Unix time (the record's monotonic stamp plus the boot time);
//  - nodewatch_kernel_log_up: 1 when the last read of the log succeeded;
//  - nodewatch_memory_{corrected,uncorrected}_errors_total{controller,
//    dimm}: EDAC's per-module counts, and under dimm="" the errors the
//    driver could not place (summed over dimm: the controller's count);
//  - nodewatch_memory_module_info{controller,dimm,label} and
//    nodewatch_memory_controller_info{controller,name}.
//
// Errors (nodewatch_collector_errors_total{collector="kernel",reason}):
// log_unreadable (each collection while the log cannot be read; the saved
// counts are still exported), state_refused (once: a state file that was
// corrupt, of another version, not to be trusted where it lies, or ahead
// of the log, so counting started afresh), state_entry_dropped (once: saved
// counts of no known event, or of an XID that is no number),
// state_write_error (each collection while the state cannot be saved),
// malformed_record (records whose prefix did not parse, or whose number
// does not fit 64 bits: never counted as an event), edac_read_error
// (an EDAC attribute that could not be read or parsed: that value is left
// out).

#include <cstdint>
#include <memory>
#include <string>

#include "kernel/kernel_service.hpp"
#include "nodewatch/collector.hpp"
#include "nodewatch/kernel_log_fd.hpp"

namespace nodewatch {

// The catalog entry: name "kernel". A collection copies the kernel-log
// service's counts and reads a few sysfs files; the log itself is read by
// the service's thread (kernel_service.hpp).
const CollectorSpec& kernel_collector_spec();

namespace kernel {

struct KernelOptions {
  std::string kmsg_path = kKernelLogPath;
  std::string state_file = "/var/lib/nodewatch/kernel-log.state";  // "" keeps none
  std::int64_t max_devices = 64;
  bool edac = true;
  bool operator==(const KernelOptions&) const = default;
};

// Reads [collectors.kernel]; kmsg_path and state_file must be absolute
// (state_file may be "" to keep no state).
KernelOptions read_kernel_options(OptionReader& r);

const MetricTable& kernel_metric_table();

// The service for `options`, shared through `env` (the boot id is read
// under env.roots.procfs).
std::shared_ptr<KernelLogService> kernel_log_service(const CollectorEnv& env,
                                                     const KernelOptions& options);

class KernelCollector final : public Collector {
 public:
  KernelCollector(std::shared_ptr<KernelLogService> log, Roots roots, bool edac);

  const MetricTable& metrics() const override;
  void collect(const CollectContext& ctx, MetricSink& out) override;

 private:
  void collect_log(const CollectContext& ctx, MetricSink& out);
  void collect_edac(MetricSink& out);

  std::shared_ptr<KernelLogService> log_;
  Roots roots_;
  bool edac_;
  bool waited_ = false;  // the service's first pass was waited for
};

}  // namespace kernel
}  // namespace nodewatch
