#pragma once
// The metric families the kernel collector emits: each declared once, here. The collector's table
// is built from these and it emits through them; whatever else reads a family (the node verdict,
// the expect file, docs/metrics.md) refers to the constant.

#include "nodewatch/metric.hpp"

namespace nodewatch::kernel::families {

inline constexpr Family kEventsTotal{
    "nodewatch_kernel_events_total",
    MetricType::kCounter,
    "",
    "Hardware and system events found in the kernel log, by event and the device the record names "
    "(\"\" for none, \"other\" past collectors.kernel.max_devices); counted once across restarts "
    "of nodewatch within a boot.",
    {"event", "device"}};

inline constexpr Family kXidEventsTotal{
    "nodewatch_kernel_xid_events_total",
    MetricType::kCounter,
    "",
    "NVIDIA XID errors in the kernel log (NVRM: Xid), by GPU PCI address and XID code (\"other\" "
    "past 256 codes of one GPU); also where NVML is hung or absent.",
    {"pci_bus_id", "xid"}};

inline constexpr Family kSxidEventsTotal{
    "nodewatch_kernel_sxid_events_total",
    MetricType::kCounter,
    "",
    "NVIDIA NVSwitch SXID errors in the kernel log (nvidia-nvswitch: SXid), by NVSwitch PCI "
    "address and SXID code (\"other\" past 256 codes of one NVSwitch).",
    {"pci_bus_id", "sxid"}};

inline constexpr Family kLogLostRecordsTotal{
    "nodewatch_kernel_log_lost_records_total",
    MetricType::kCounter,
    "",
    "Kernel log records overwritten in the ring buffer before nodewatch read them (while it was "
    "down, or in a log storm): events in them are not counted.",
    {}};

inline constexpr Family kLogLastRecordTimestampSeconds{
    "nodewatch_kernel_log_last_record_timestamp_seconds",
    MetricType::kGauge,
    "seconds",
    "When the last kernel log record read was logged (Unix time).",
    {}};

inline constexpr Family kLogUp{"nodewatch_kernel_log_up",
                               MetricType::kGauge,
                               "",
                               "1 if the last read of the kernel log succeeded, 0 if it cannot be "
                               "read (the counts so far are still exported).",
                               {}};

inline constexpr Family kMemoryCorrectedErrorsTotal{
    "nodewatch_memory_corrected_errors_total",
    MetricType::kCounter,
    "",
    "Corrected host memory errors (EDAC), by memory controller and module slot; dimm=\"\" holds "
    "those the driver could not place.",
    {"controller", "dimm"}};

inline constexpr Family kMemoryUncorrectedErrorsTotal{
    "nodewatch_memory_uncorrected_errors_total",
    MetricType::kCounter,
    "",
    "Uncorrected host memory errors (EDAC), by memory controller and module slot; dimm=\"\" holds "
    "those the driver could not place.",
    {"controller", "dimm"}};

inline constexpr Family kMemoryControllerInfo{
    "nodewatch_memory_controller_info",
    MetricType::kGauge,
    "",
    "A host memory controller EDAC knows, with the driver's name for it.",
    {"controller", "name"}};

inline constexpr Family kMemoryModuleInfo{
    "nodewatch_memory_module_info",
    MetricType::kGauge,
    "",
    "A populated memory module (EDAC dimmN or rankN) with its label (the board's silk screen name "
    "where set, e.g. by rasdaemon).",
    {"controller", "dimm", "label"}};

}  // namespace nodewatch::kernel::families
