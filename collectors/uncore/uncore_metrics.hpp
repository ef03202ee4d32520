#pragma once
// The metric families the uncore collector emits: each declared once, here. The collector's table
// is built from these and it emits through them; whatever else reads a family (the node verdict,
// the expect file, docs/metrics.md) refers to the constant.

#include "nodewatch/metric.hpp"

namespace nodewatch::uncore::families {

inline constexpr Family kEventsTotal{
    "nodewatch_uncore_events_total",
    MetricType::kCounter,
    "",
    "Count of each event of collectors.uncore.events since the daemon started, summed over the "
    "CPUs its PMU counts on (cpumask; every online CPU for a PMU without one, as perf stat -a), "
    "times the event's .scale, in `unit` (bytes where sysfs says B, KiB, MiB or GiB; empty: a "
    "count). While the kernel multiplexes a counter, the part it did not count is estimated "
    "from the time it ran (nodewatch_uncore_event_running_ratio).",
    {"pmu", "event", "unit"}};

inline constexpr Family kEventRunningRatio{
    "nodewatch_uncore_event_running_ratio",
    MetricType::kGauge,
    "",
    "Part of the last interval the event was on its PMU: 1 counted throughout; less, the kernel "
    "multiplexed it with other events and nodewatch_uncore_events_total was extrapolated.",
    {"pmu", "event"}};

inline constexpr Family kEventScaleCorrected{
    "nodewatch_uncore_event_scale_corrected",
    MetricType::kGauge,
    "",
    "1 for an event whose .scale the kernel gets wrong and nodewatch corrects (Intel IIO "
    "free-running bandwidth on Ice Lake server, Snow Ridge, Sapphire and Emerald Rapids before "
    "Linux 6.15: 4 bytes a count for 32); absent for the others.",
    {"pmu", "event"}};

inline constexpr Family kPmuUp{
    "nodewatch_uncore_pmu_up",
    MetricType::kGauge,
    "",
    "1 if every event asked of the PMU is counting; 0 if the PMU is missing or an event could not "
    "be opened or read (the reason, such as no CAP_PERFMON, in "
    "nodewatch_collector_errors_total{collector=\"uncore\"} and the failure log).",
    {"pmu"}};

inline constexpr Family kHostLinkBytesTotal{
    "nodewatch_uncore_host_link_bytes_total",
    MetricType::kCounter,
    "bytes",
    "Bytes between the CPU and the devices it hosts, as the CPU's own PMUs count them "
    "(collectors.uncore.host_links), by link (c2c: NVLink-C2C, to the GPU; on a Grace CPU "
    "Superchip, to the other CPU; pcie), direction "
    "(tx: from the device, rx: to it), and where the PMU tells them apart, die (Intel: the "
    "IIO stack's die) and port (C2C port, IIO port; empty: the PMU whole). Since nodewatch "
    "started. The devices behind each: nodewatch_uncore_host_link_device_info.",
    {"pmu", "die", "port", "link", "direction"}};

inline constexpr Family kHostLinkDeviceInfo{
    "nodewatch_uncore_host_link_device_info",
    MetricType::kGauge,
    "",
    "A PCI function whose traffic nodewatch_uncore_host_link_bytes_total{pmu,die,port} counts, "
    "value 1: the functions below an Intel IIO port's root port; the NVIDIA GPUs of a Grace "
    "socket's C2C and SCF PMUs (die and port empty).",
    {"pmu", "die", "port", "device"}};

}  // namespace nodewatch::uncore::families
