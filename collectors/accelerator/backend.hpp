#pragma once
// The accelerator collector's vendor backends.
//
// A Backend finds its vendor's devices and reads one DeviceSample per device
// per collection. The collector turns samples into metrics; a backend never
// touches a MetricSink. Every reading is optional: a value the device or
// driver does not support is left empty and its series is simply absent
// (NOT_SUPPORTED on one query drops that one metric for that device).
//
// Failure contract:
//  - no library, no driver, no device: sample() returns no devices (a CPU
//    node is not an error);
//  - a library that loads but is unusable (a required symbol missing, init
//    failing for a reason other than "no driver"): sample() throws
//    CollectError; the collector is reported down;
//  - one device lost or stuck: that device's sample has up = false and a
//    reason in `errors`; the other devices are unaffected.
// sample() is called from one thread at a time (the collector's worker).

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "accelerator/driver_state.hpp"
#include "accelerator/jobs.hpp"
#include "nodewatch/collector.hpp"

namespace nodewatch::accelerator {

// One partial failure while reading a device: `reason` is the errors_total
// label ("nvml_error"), `detail` what failed ("nvmlDeviceGetPowerUsage:
// Unknown Error (999)"). The collector reports it with the device as its
// subject, and the scheduler logs it when it starts and stops failing,
// unless `logged_by_backend`: a state the backend logs itself, once per
// change for the whole process (the NVML service logs a GPU going lost or
// stuck once, however many collectors read that GPU), is only counted.
struct DeviceError {
  // Implicit, so that a bare reason is an error: `errors = {"gpu_lost"}`.
  DeviceError(const char* r) : reason(r) {}
  DeviceError(std::string r, std::string d, bool logged = false)
      : reason(std::move(r)), detail(std::move(d)), logged_by_backend(logged) {}
  std::string reason;
  std::string detail;
  bool logged_by_backend = false;
};

// One NVLink link of a device (the NVML service's NVLink questions only).
struct NvlinkSample {
  unsigned link = 0;
  bool active = false;
  std::optional<double> speed_bytes_per_second;
  std::optional<double> tx_bytes;  // cumulative data bytes (payload)
  std::optional<double> rx_bytes;
  // Cumulative error counts by type: "crc_flit", "crc_data", "replay",
  // "recovery", "ecc" (every NVLink generation up to Hopper), and the
  // NVLink5 counters ("symbol", "effective", "recovery_failed",
  // "malformed_packet", "buffer_overrun", "receive", "receive_remote",
  // "receive_general", "local_link_integrity", "transmit_discard").
  std::map<std::string, double> errors;
  // NVLink5 link quality (Blackwell on), each only where the driver has it.
  // Bit error rates by kind: "effective" (after FEC), "symbol" (before
  // FEC), "raw" (NVML 13.2's total raw BER).
  std::map<std::string, double> bit_error_rate;
  // The FEC history (NVML 12.8 on): cumulative count of each bin, 0-15.
  std::map<unsigned, double> fec_history;
  // Physical-layer retransmission counters, cumulative, by counter:
  // "xmit_blocks", "xmit_retry_blocks" (NVML 13.2's fields) and the PRM
  // PLR group's "rcv_codes", "rcv_code_errors", "rcv_uncorrectable_codes",
  // "xmit_codes", "xmit_retry_codes", "xmit_retry_events", "sync_events"
  // (NVML 13.1's nvmlDeviceReadPRMCounters_v1).
  std::map<std::string, double> plr;
  // PORT_XMIT_WAIT (PRM, NVML 13.1 on): cumulative ticks in which the port
  // had data to send and sent none, the link's congestion signal.
  std::optional<double> transmit_wait_ticks;
  // The data rate left for transactions after the FEC overhead (NVML
  // 13.3), bytes per second.
  std::optional<double> data_rate_bytes_per_second;
};

// Activity over the last collection interval from NVML's GPM (Hopper and
// later), each 0..1; a metric the driver did not give is empty.
struct GpmActivity {
  std::optional<double> graphics_active;  // GRAPHICS_UTIL
  std::optional<double> sm_active;        // SM_UTIL
  std::optional<double> sm_occupancy;     // SM_OCCUPANCY
  std::optional<double> tensor_active;    // ANY_TENSOR_UTIL
  std::optional<double> dram_bandwidth;   // DRAM_BW_UTIL
};

// One link between a device and its host CPU.
struct HostLinkSample {
  std::optional<double> tx_bytes;             // cumulative, from the device
  std::optional<double> rx_bytes;             // to the device
  std::optional<double> tx_bytes_per_second;  // sampled, where no counter exists
  std::optional<double> rx_bytes_per_second;
  std::optional<double> capacity_bytes_per_second;  // per direction
};

// Cumulative bytes over one NVLink-C2C link.
struct C2cLinkBytes {
  double tx = 0;
  double rx = 0;
};

// NVLink fabric registration and health (NVSwitch and NVL systems).
struct FabricSample {
  unsigned state = 0;     // NVML_GPU_FABRIC_STATE_*: 0 not supported .. 3 completed
  bool healthy = false;   // completed, status success, no fault in the health mask
  std::string clique_id;  // when completed
  std::string cluster_uuid;
  // The driver's health summary (v3, NVML 13.0 on), when it gives one:
  // "healthy", "unhealthy", "limited_capacity"; "unknown" for a value past
  // those.
  std::string summary;
  // Each fault of the health mask the driver reports on (a field it says
  // is not supported is left out), true while present: degraded_bandwidth,
  // route_recovery, route_unhealthy, access_timeout_recovery, and the
  // incorrect configurations (kFabricConfigurationFaults).
  std::map<std::string, bool> faults;
};

// The incorrect-configuration values of the fabric health mask, from 2 on
// (NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_*, 13.0 to 13.2).
inline constexpr std::array<const char*, 7> kFabricConfigurationFaults = {
    "incorrect_sysguid",    "incorrect_chassis_serial",  "no_partition",
    "insufficient_nvlinks", "incompatible_gpu_firmware", "invalid_location",
    "gpu_state_invalid"};

struct DeviceSample {
  // Identity: `index` is the vendor's own device index (NVML index, the
  // ordinal among the vendor's DRM cards); uuid is stable across reboots.
  unsigned index = 0;
  std::string uuid;
  std::string vendor;  // "nvidia", "amd"
  std::string model;
  std::string pci_bus_id;  // "0000:17:00.0", lower case
  // AMD: the N of its DRM card (/dev/dri/cardN), which AMD's DRA driver
  // names it by (dra.hpp). NVIDIA's device minor is read by the collector,
  // and only where a claim names one.
  std::optional<unsigned> drm_card;
  std::string driver_version;
  std::string serial;
  std::string vbios;  // the VBIOS (NVML) or its part number (amdgpu)
  // Where it sits in its rack, where the driver says (NVIDIA Blackwell on,
  // NVML 12.8 on): the chassis's serial number, the slot in the chassis,
  // the compute tray, the host within the slot, the GPU within the host.
  struct Platform {
    std::string chassis_serial;
    unsigned slot = 0;
    unsigned tray = 0;
    unsigned host = 0;
    unsigned module = 0;
    bool operator==(const Platform&) const = default;
  };
  std::optional<Platform> platform;

  bool up = true;  // false: lost, reset required, or stuck in the driver

  std::optional<double> utilization_ratio;         // 0..1
  std::optional<double> memory_utilization_ratio;  // 0..1 (memory controller busy)
  std::optional<double> memory_used_bytes;
  std::optional<double> memory_total_bytes;
  std::map<std::string, double>
      temperature_celsius;  // sensor -> value ("gpu", "memory", "edge", "junction")
  std::optional<double> temperature_slowdown_celsius;
  std::optional<double> thermal_margin_celsius;  // the driver's, to the nearest slowdown
  std::optional<double> power_watts;
  std::optional<double> power_limit_watts;
  std::optional<double> energy_joules;                // cumulative since driver load
  std::map<std::string, double> clock_hertz;          // clock -> value ("sm", "graphics", "memory")
  std::map<std::string, bool> clock_throttle_active;  // reason -> active now
  std::map<std::string, double> clock_throttle_seconds;  // reason -> cumulative seconds
  std::optional<double> ecc_corrected;                   // volatile counts (since driver load)
  std::optional<double> ecc_uncorrected;
  std::optional<double> remapped_rows_correctable;
  std::optional<double> remapped_rows_uncorrectable;
  std::optional<bool> row_remap_pending;
  std::optional<bool> row_remap_failed;
  // Repairs that wait for a GPU reset, by unit ("channel", "tpc"; NVML 13.0
  // on), and memory the GPU can no longer repair (13.1 on).
  std::map<std::string, bool> repair_pending;
  std::optional<bool> memory_unrepairable;
  std::map<unsigned, std::uint64_t> xid_errors;  // XID code -> count since nodewatch started
  // The links to the host CPU by kind: "pcie", and "c2c" (NVLink-C2C to a
  // Grace or Vera CPU, whose traffic does not cross PCIe).
  std::map<std::string, HostLinkSample> host_links;
  std::optional<double> pcie_replays;
  // NVLink-C2C per link: active state, error counters (CRC and replays),
  // back-to-back replays, low power, and bytes (from GPM; the collector
  // exports them only when asked).
  std::map<unsigned, bool> c2c_link_active;
  std::map<unsigned, double> c2c_link_errors;
  std::map<unsigned, double> c2c_link_b2b_replays;
  std::map<unsigned, bool> c2c_link_low_power;
  std::map<unsigned, C2cLinkBytes> c2c_link_bytes;
  // NVLink (answers to the NVML service's NVLink questions only): the number
  // of links the driver reports (empty when the device has no NVLink), and
  // each link that answered.
  std::optional<unsigned> nvlink_count;
  std::vector<NvlinkSample> nvlinks;
  // Whether peer-to-peer over NVLink works with each other device of the
  // vendor, by its index (nvmlDeviceGetP2PStatus, NVLINK): a device with
  // NVLink links only.
  std::map<unsigned, bool> nvlink_p2p;
  // GPM activity of the whole device, and per MIG GPU instance (by id).
  std::optional<GpmActivity> gpm;
  std::map<unsigned, GpmActivity> gpm_instances;
  // The driver's verdict on what the GPU needs (nvmlDeviceGpuRecoveryAction_t:
  // 0 none, 1 GPU reset, 2 node reboot, 3 drain P2P, 4 drain and reset,
  // 5 recover the IMEX domain).
  std::optional<unsigned> recovery_action;
  std::optional<FabricSample> fabric;

  // The compute processes on the device now (empty optional: the driver
  // was not asked or could not say), and, on a GPU in MIG mode, each MIG
  // device's UUID with its GPU instance id (what pod-resources names).
  std::optional<std::vector<DeviceProcess>> processes;
  std::map<std::string, unsigned> mig_instances;
  // The jobs on it: filled by the accelerator collector from `processes`
  // and the kubelet's assignments, never by a backend; and the claims
  // (Dynamic Resource Allocation) that gave it.
  DeviceJobs jobs;
  std::vector<DeviceClaim> claims;

  // Partial failures while reading this device (counted, by reason, in
  // nodewatch_collector_errors_total of the collector that asked).
  std::vector<DeviceError> errors;
};

// Reports `d.errors` to `out`: counted under their reasons, with the device
// (its uuid, else "accelerator <index>") as the subject of the ones the
// backend did not log itself. Implemented in accelerator_collector.cpp.
void report_device_errors(const DeviceSample& d, MetricSink& out);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;  // "nvml", "amdgpu"
  // Reads every device once. See the failure contract above.
  virtual std::vector<DeviceSample> sample(const CollectContext& ctx) = 0;
  // Whether the vendor's driver answers, after sample() (driver_state.hpp).
  virtual DriverState driver_state() = 0;
};

class NvmlService;
// NVIDIA: the device questions of the process's NVML service (one dlopen,
// one nvmlInit and one thread per GPU, shared with the NVLink part of the
// interconnect collector; see nvml/nvml_service.hpp). Never fails to
// construct: a missing library is found out (and retried) in sample().
// `roots`: where NVIDIA GPUs are looked for on the PCI bus, and the
// module's version read, for driver_state(). Implemented in
// nvml/nvml_service.cpp.
std::unique_ptr<Backend> make_nvml_backend(std::shared_ptr<NvmlService> nvml, Roots roots = {});

// AMD, through amdgpu's sysfs files under `roots.sysfs`/class/drm.
// Implemented in amdgpu_backend.cpp.
std::unique_ptr<Backend> make_amdgpu_backend(const Roots& roots);

}  // namespace nodewatch::accelerator
