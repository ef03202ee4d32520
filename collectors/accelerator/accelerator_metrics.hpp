#pragma once
// The metric families the accelerator collector emits (the NVLink links' are the interconnect
// collector's: interconnect_metrics.hpp): each declared once, here. The collector's table is
// built from these and it emits through them; whatever else reads a family (the node verdict,
// the expect file, docs/metrics.md) refers to the constant.

#include "nodewatch/metric.hpp"

namespace nodewatch::accelerator::families {

inline constexpr Family kInfo{
    "nodewatch_accelerator_info",
    MetricType::kGauge,
    "",
    "Static facts about an accelerator, always 1: its VBIOS too (NVML's version, amdgpu's "
    "vbios_version: the part number).",
    {"accelerator", "uuid", "vendor", "model", "pci_bus_id", "driver_version", "serial", "vbios"}};

inline constexpr Family kPlatformInfo{
    "nodewatch_accelerator_platform_info",
    MetricType::kGauge,
    "",
    "Where the accelerator sits in its rack, as its driver says (NVIDIA Blackwell and later, NVML "
    "12.8 and later), value 1: the chassis's serial number, the slot in the chassis (switches "
    "included), the compute tray, the host within the slot, the GPU within the host.",
    {"accelerator", "uuid", "chassis_serial", "slot", "tray", "host", "module"}};

inline constexpr Family kUp{
    "nodewatch_accelerator_up",
    MetricType::kGauge,
    "",
    "1 if the accelerator answers its driver, 0 if it is lost, needs a reset or is stuck.",
    {"accelerator", "uuid"}};

inline constexpr Family kDriverUp{
    "nodewatch_accelerator_driver_up",
    MetricType::kGauge,
    "",
    "1 if the vendor's driver answers, 0 if it does not (why: nodewatch_accelerator_driver_state). "
    "Exported where the vendor's library is installed or a GPU of the vendor is on the PCI bus.",
    {"vendor"}};

inline constexpr Family kDriverState{
    "nodewatch_accelerator_driver_state",
    MetricType::kGauge,
    "",
    "1 for the state the vendor's driver is in, 0 for the others: ok, or why it does not answer "
    "(NVIDIA: not_loaded, version_mismatch, no_permission, init_failed, library_missing, "
    "library_broken, lost; AMD: not_bound).",
    {"vendor", "state"}};

inline constexpr Family kDriverInfo{
    "nodewatch_accelerator_driver_info",
    MetricType::kGauge,
    "",
    "The vendor's driver, value 1: the versions of its library and kernel module, where they can "
    "be read (empty: not installed, not loaded, or not said).",
    {"vendor", "library_version", "kernel_module_version"}};

inline constexpr Family kDriverDevices{
    "nodewatch_accelerator_driver_devices",
    MetricType::kGauge,
    "",
    "GPUs of the vendor on the PCI bus (class VGA, 3D or other display; those handed to a "
    "virtual machine through vfio-pci left out), whether or not its driver answers.",
    {"vendor"}};

inline constexpr Family kUtilizationRatio{
    "nodewatch_accelerator_utilization_ratio",
    MetricType::kGauge,
    "",
    "Fraction of the last sample period during which a kernel was running (0..1).",
    {"accelerator", "uuid"}};

inline constexpr Family kMemoryUtilizationRatio{
    "nodewatch_accelerator_memory_utilization_ratio",
    MetricType::kGauge,
    "",
    "Fraction of the last sample period during which device memory was read or written (0..1).",
    {"accelerator", "uuid"}};

inline constexpr Family kMemoryUsedBytes{"nodewatch_accelerator_memory_used_bytes",
                                         MetricType::kGauge,
                                         "bytes",
                                         "Device memory in use.",
                                         {"accelerator", "uuid"}};

inline constexpr Family kMemoryTotalBytes{"nodewatch_accelerator_memory_total_bytes",
                                          MetricType::kGauge,
                                          "bytes",
                                          "Device memory in total.",
                                          {"accelerator", "uuid"}};

inline constexpr Family kTemperatureCelsius{
    "nodewatch_accelerator_temperature_celsius",
    MetricType::kGauge,
    "celsius",
    "Temperature by sensor (gpu, memory, edge, junction, ...).",
    {"accelerator", "uuid", "sensor"}};

inline constexpr Family kTemperatureSlowdownCelsius{
    "nodewatch_accelerator_temperature_slowdown_celsius",
    MetricType::kGauge,
    "celsius",
    "Temperature at which the device starts to slow its clocks down.",
    {"accelerator", "uuid"}};

inline constexpr Family kThermalMarginCelsius{
    "nodewatch_accelerator_thermal_margin_celsius",
    MetricType::kGauge,
    "celsius",
    "How far the device is from the nearest thermal slowdown threshold, as its driver reckons it "
    "(NVIDIA nvmlDeviceGetMarginTemperature, drivers with NVML 12.8 and later; memory's "
    "threshold included); absent where the driver does not say.",
    {"accelerator", "uuid"}};

inline constexpr Family kPowerWatts{"nodewatch_accelerator_power_watts",
                                    MetricType::kGauge,
                                    "watts",
                                    "Power draw.",
                                    {"accelerator", "uuid"}};

inline constexpr Family kPowerLimitWatts{"nodewatch_accelerator_power_limit_watts",
                                         MetricType::kGauge,
                                         "watts",
                                         "Enforced power limit.",
                                         {"accelerator", "uuid"}};

inline constexpr Family kEnergyJoulesTotal{"nodewatch_accelerator_energy_joules_total",
                                           MetricType::kCounter,
                                           "joules",
                                           "Energy consumed since the driver was loaded.",
                                           {"accelerator", "uuid"}};

inline constexpr Family kClockHertz{"nodewatch_accelerator_clock_hertz",
                                    MetricType::kGauge,
                                    "hertz",
                                    "Current clock by domain (sm, graphics, memory).",
                                    {"accelerator", "uuid", "clock"}};

inline constexpr Family kClockThrottleActive{
    "nodewatch_accelerator_clock_throttle_active",
    MetricType::kGauge,
    "",
    "1 while the clocks are held down for this reason, else 0.",
    {"accelerator", "uuid", "reason"}};

inline constexpr Family kClockThrottleSecondsTotal{
    "nodewatch_accelerator_clock_throttle_seconds_total",
    MetricType::kCounter,
    "seconds",
    "Time the clocks were held down for this reason.",
    {"accelerator", "uuid", "reason"}};

inline constexpr Family kEccErrorsTotal{"nodewatch_accelerator_ecc_errors_total",
                                        MetricType::kCounter,
                                        "",
                                        "Device memory ECC errors since the driver was loaded "
                                        "(volatile), by type (corrected, uncorrected).",
                                        {"accelerator", "uuid", "type"}};

inline constexpr Family kRemappedRows{
    "nodewatch_accelerator_remapped_rows",
    MetricType::kGauge,
    "",
    "Memory rows remapped, by the kind of error that caused it (correctable, uncorrectable).",
    {"accelerator", "uuid", "cause"}};

inline constexpr Family kRepairPending{
    "nodewatch_accelerator_repair_pending",
    MetricType::kGauge,
    "",
    "1 if a repair of the unit (channel: a memory channel; tpc: a texture processing cluster) "
    "waits for a GPU reset, else 0 (NVML 13.0 on, Ampere on).",
    {"accelerator", "uuid", "unit"}};

inline constexpr Family kMemoryUnrepairable{
    "nodewatch_accelerator_memory_unrepairable",
    MetricType::kGauge,
    "",
    "1 if the GPU reports memory it can no longer repair (the device needs service), else 0 "
    "(NVML 13.1 on, Hopper on).",
    {"accelerator", "uuid"}};

inline constexpr Family kRowRemapPending{"nodewatch_accelerator_row_remap_pending",
                                         MetricType::kGauge,
                                         "",
                                         "1 if a row remap waits for the next reset of the device.",
                                         {"accelerator", "uuid"}};

inline constexpr Family kRowRemapFailed{"nodewatch_accelerator_row_remap_failed",
                                        MetricType::kGauge,
                                        "",
                                        "1 if a row remap has failed: the device needs service.",
                                        {"accelerator", "uuid"}};

inline constexpr Family kXidErrorsTotal{
    "nodewatch_accelerator_xid_errors_total",
    MetricType::kCounter,
    "",
    "XID error events by code, counted since nodewatch started.",
    {"accelerator", "uuid", "xid"}};

inline constexpr Family kHostLinkBytesTotal{
    "nodewatch_accelerator_host_link_bytes_total",
    MetricType::kCounter,
    "bytes",
    "Bytes over the link to the host CPU by link (pcie, c2c) and direction (tx: from the "
    "device, rx: to it). pcie: the driver's byte counters; c2c: GPM's NVLink-C2C rates "
    "(headers and data) integrated over each collection interval, counted since nodewatch "
    "started.",
    {"accelerator", "uuid", "link", "direction"}};

inline constexpr Family kHostLinkThroughputBytesPerSecond{
    "nodewatch_accelerator_host_link_throughput_bytes_per_second",
    MetricType::kGauge,
    "bytes_per_second",
    "Host-link throughput sampled by the driver, where it has no byte counter.",
    {"accelerator", "uuid", "link", "direction"}};

inline constexpr Family kHostLinkCapacityBytesPerSecond{
    "nodewatch_accelerator_host_link_capacity_bytes_per_second",
    MetricType::kGauge,
    "bytes_per_second",
    "What the link to the host CPU carries per direction at most, now. pcie: lanes times "
    "transfer rate of the trained link, less its encoding; c2c: the speeds of the active "
    "NVLink-C2C links summed.",
    {"accelerator", "uuid", "link"}};

inline constexpr Family kPcieReplaysTotal{
    "nodewatch_accelerator_pcie_replays_total",
    MetricType::kCounter,
    "",
    "PCIe replays (link-level retransmissions) since the driver was loaded.",
    {"accelerator", "uuid"}};

inline constexpr Family kC2cLinkActive{"nodewatch_accelerator_c2c_link_active",
                                       MetricType::kGauge,
                                       "",
                                       "1 if the NVLink-C2C link to the CPU is active.",
                                       {"accelerator", "uuid", "link"}};

inline constexpr Family kC2cLinkErrorsTotal{"nodewatch_accelerator_c2c_link_errors_total",
                                            MetricType::kCounter,
                                            "",
                                            "NVLink-C2C link errors (CRC and replays).",
                                            {"accelerator", "uuid", "link"}};

inline constexpr Family kC2cLinkB2bReplaysTotal{
    "nodewatch_accelerator_c2c_link_b2b_replays_total",
    MetricType::kCounter,
    "",
    "NVLink-C2C back-to-back replays: a replay that itself had to be replayed.",
    {"accelerator", "uuid", "link"}};

inline constexpr Family kC2cLinkLowPower{"nodewatch_accelerator_c2c_link_low_power",
                                         MetricType::kGauge,
                                         "",
                                         "1 if the NVLink-C2C link is in its low-power state.",
                                         {"accelerator", "uuid", "link"}};

inline constexpr Family kC2cLinkBytesTotal{
    "nodewatch_accelerator_c2c_link_bytes_total",
    MetricType::kCounter,
    "bytes",
    "Bytes (headers and data) over one NVLink-C2C link by direction, from GPM's rates "
    "integrated over each collection interval; only with collectors.accelerator.c2c_link_bytes.",
    {"accelerator", "uuid", "link", "direction"}};

inline constexpr Family kGraphicsActiveRatio{
    "nodewatch_accelerator_graphics_active_ratio",
    MetricType::kGauge,
    "",
    "Fraction of the last interval the graphics or compute engine was busy (0..1).",
    {"accelerator", "uuid"}};

inline constexpr Family kSmActiveRatio{"nodewatch_accelerator_sm_active_ratio",
                                       MetricType::kGauge,
                                       "",
                                       "Fraction of the last interval the SMs had at least one "
                                       "warp resident, averaged over all SMs (0..1).",
                                       {"accelerator", "uuid"}};

inline constexpr Family kSmOccupancyRatio{
    "nodewatch_accelerator_sm_occupancy_ratio",
    MetricType::kGauge,
    "",
    "Resident warps over the SMs' maximum, averaged over the last interval (0..1).",
    {"accelerator", "uuid"}};

inline constexpr Family kTensorActiveRatio{
    "nodewatch_accelerator_tensor_active_ratio",
    MetricType::kGauge,
    "",
    "Fraction of the last interval any tensor core pipe was busy (0..1).",
    {"accelerator", "uuid"}};

inline constexpr Family kDramBandwidthRatio{
    "nodewatch_accelerator_dram_bandwidth_ratio",
    MetricType::kGauge,
    "",
    "Device memory bandwidth used over the peak, over the last interval (0..1).",
    {"accelerator", "uuid"}};

inline constexpr Family kGpuInstanceGraphicsActiveRatio{
    "nodewatch_accelerator_gpu_instance_graphics_active_ratio",
    MetricType::kGauge,
    "",
    "graphics_active_ratio of one MIG GPU instance.",
    {"accelerator", "uuid", "gpu_instance"}};

inline constexpr Family kGpuInstanceSmActiveRatio{
    "nodewatch_accelerator_gpu_instance_sm_active_ratio",
    MetricType::kGauge,
    "",
    "sm_active_ratio of one MIG GPU instance.",
    {"accelerator", "uuid", "gpu_instance"}};

inline constexpr Family kGpuInstanceSmOccupancyRatio{
    "nodewatch_accelerator_gpu_instance_sm_occupancy_ratio",
    MetricType::kGauge,
    "",
    "sm_occupancy_ratio of one MIG GPU instance.",
    {"accelerator", "uuid", "gpu_instance"}};

inline constexpr Family kGpuInstanceTensorActiveRatio{
    "nodewatch_accelerator_gpu_instance_tensor_active_ratio",
    MetricType::kGauge,
    "",
    "tensor_active_ratio of one MIG GPU instance.",
    {"accelerator", "uuid", "gpu_instance"}};

inline constexpr Family kGpuInstanceDramBandwidthRatio{
    "nodewatch_accelerator_gpu_instance_dram_bandwidth_ratio",
    MetricType::kGauge,
    "",
    "dram_bandwidth_ratio of one MIG GPU instance.",
    {"accelerator", "uuid", "gpu_instance"}};

inline constexpr Family kRecoveryAction{
    "nodewatch_accelerator_recovery_action",
    MetricType::kGauge,
    "",
    "The driver's verdict on what the device needs: 1 for the action it asks for (none, gpu_reset, "
    "node_reboot, drain_p2p, drain_and_reset, recover_imex_domain), 0 for the others.",
    {"accelerator", "uuid", "action"}};

inline constexpr Family kFabricState{
    "nodewatch_accelerator_fabric_state",
    MetricType::kGauge,
    "",
    "NVLink fabric registration: 1 for the current state (not_supported, not_started, in_progress, "
    "completed), 0 for the others.",
    {"accelerator", "uuid", "state"}};

inline constexpr Family kFabricHealthy{
    "nodewatch_accelerator_fabric_healthy",
    MetricType::kGauge,
    "",
    "1 if the device completed fabric registration and its fabric health shows no fault, else 0.",
    {"accelerator", "uuid"}};

inline constexpr Family kFabricHealthSummary{
    "nodewatch_accelerator_fabric_health_summary",
    MetricType::kGauge,
    "",
    "The driver's summary of the device's NVLink fabric health (NVML 13.0 on): 1 for the current "
    "one (healthy, unhealthy, limited_capacity; unknown, 1 alone, for a value newer than NVML "
    "13.3), "
    "0 for the others.",
    {"accelerator", "uuid", "summary"}};

inline constexpr Family kFabricFault{
    "nodewatch_accelerator_fabric_fault",
    MetricType::kGauge,
    "",
    "1 while the fabric health mask reports the fault, 0 while it reports its absence (only the "
    "faults the driver reports on): degraded_bandwidth (NVML 12.4 on), route_recovery, "
    "route_unhealthy, access_timeout_recovery (12.8 on), and the incorrect configurations "
    "incorrect_sysguid, incorrect_chassis_serial, no_partition, insufficient_nvlinks, "
    "incompatible_gpu_firmware (13.0 on), invalid_location (13.1), gpu_state_invalid (13.2).",
    {"accelerator", "uuid", "fault"}};

inline constexpr Family kFabricInfo{"nodewatch_accelerator_fabric_info",
                                    MetricType::kGauge,
                                    "",
                                    "The NVLink fabric the device registered with; always 1.",
                                    {"accelerator", "uuid", "clique_id", "cluster_uuid"}};

inline constexpr Family kProcesses{"nodewatch_accelerator_processes",
                                   MetricType::kGauge,
                                   "",
                                   "Compute processes running on the device now.",
                                   {"accelerator", "uuid"}};

inline constexpr Family kJobInfo{
    "nodewatch_accelerator_job_info",
    MetricType::kGauge,
    "",
    "A job on the device now; always 1. scheduler is slurm, kubernetes, none (a process in no job) "
    "or unknown (a process whose cgroup could not be read); job_id is the Slurm job id, the "
    "Kubernetes pod UID, or namespace/pod where no process gave the UID; claim is the "
    "ResourceClaim (Dynamic Resource Allocation) that gave the pod the device, empty for none.",
    {"accelerator", "uuid", "scheduler", "job_id", "step", "namespace", "pod", "container",
     "gpu_instance", "claim"}};

inline constexpr Family kClaimPods{
    "nodewatch_accelerator_claim_pods",
    MetricType::kGauge,
    "",
    "Pods on this node whose containers use the device through the ResourceClaim (Dynamic "
    "Resource Allocation, from the kubelet's pod-resources API); more than 1 is a shared claim. "
    "driver and device are the DRA driver's and the device's name in its pool (gpu-0, "
    "gpu-0-mig-19-0-1: a MIG device is counted on its GPU).",
    {"accelerator", "uuid", "namespace", "claim", "driver", "device"}};

inline constexpr Family kProcessMemoryUsedBytes{
    "nodewatch_accelerator_process_memory_used_bytes",
    MetricType::kGauge,
    "bytes",
    "Device memory used by the processes of one job, summed.",
    {"accelerator", "uuid", "job_id"}};

inline constexpr Family kPodResourcesUp{"nodewatch_accelerator_pod_resources_up",
                                        MetricType::kGauge,
                                        "",
                                        "1 if the kubelet's pod-resources API answered the last "
                                        "List, 0 if it failed; absent where its socket is absent.",
                                        {}};

inline constexpr Family kPodResourcesHelperRestartsTotal{
    "nodewatch_accelerator_pod_resources_helper_restarts_total",
    MetricType::kCounter,
    "",
    "Times the pod-resources helper process (nwd-pod-resources, which holds the kubelet's gRPC "
    "client) was killed or lost and had to be started again: it did not answer in time, exited, "
    "or answered what the daemon refuses. Exported with nodewatch_accelerator_pod_resources_up.",
    {}};

}  // namespace nodewatch::accelerator::families
