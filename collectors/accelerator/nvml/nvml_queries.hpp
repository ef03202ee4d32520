#pragma once
// The questions the NVML service asks one device, in two sets: the
// accelerator collector's (identity, utilization, memory, thermals, power,
// clocks, ECC, remapping, PCIe, NVLink-C2C, GPM, recovery, fabric, the
// running compute processes) and the interconnect
// collector's (identity and NVLink links). Neither set asks the other's
// questions, so no value is read twice. Both run on that device's worker
// thread (nvml_device_pool.hpp); the pure helpers at the end are exposed
// for tests.
//
// Return codes: SUCCESS gives the value; NOT_SUPPORTED leaves it empty (its
// series is absent, not an error); GPU_IS_LOST and RESET_REQUIRED drop what
// was read of the device this cycle and report it down; any other code
// leaves the value empty and records "nvml_error" with the call and its
// answer as the detail.

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "accelerator/backend.hpp"
#include "accelerator/nvml/nvml_api.hpp"
#include "accelerator/nvml/nvml_gpm.hpp"
#include "accelerator/nvml/nvml_library.hpp"

namespace nodewatch::accelerator {

// Which set of questions.
enum class NvmlQuestions {
  kDevice,  // the accelerator collector's
  kNvlink,  // the interconnect collector's NVLink part
};

// What one device's queries keep from one cycle to the next. It lives as
// long as the NVML service (a rebuilt collector finds it as it was) and is
// touched only by that device's worker thread.
struct NvmlDeviceMemory {
  // Last good value of each NVLink-C2C error field, by (link, field id):
  // the exported sum of CRC and replay errors uses it for a field that
  // failed this cycle, so the counter never goes backwards.
  std::map<std::pair<unsigned, unsigned>, double> c2c_errors;
  // NVLink: where each link's byte counters come from, once one answered,
  // so that a field failing for a cycle never switches a series to another
  // counter (a switch reads as a counter reset and a false rate).
  enum class BytesSource { kUnknown, kNvlink5Bytes, kKibThroughput };
  std::map<unsigned, BytesSource> nvlink_bytes_source;
  // Whether the device's per-counter NVLink error call ever answered: then
  // its "recovery" is the one exported, never the NVLink5 field's.
  bool nvlink_legacy_errors = false;
  // NVLink5 quality fields (kNvlinkQualityFields) not asked again: the
  // driver does not know the id (INVALID_ARGUMENT on every link), or the
  // device does not have it (NOT_SUPPORTED on every link while one is
  // active: a Hopper asked a Blackwell field).
  std::set<unsigned> nvlink_fields_absent;
  // nvmlDeviceReadPRMCounters_v1 answered NOT_SUPPORTED (or the call
  // itself failed as not there): not asked again.
  bool prm_absent = false;
  // NVLink P2P with each peer, last asked with this many active links and
  // at this time (asked again when that changes, after a while, or after a
  // peer did not answer).
  std::optional<std::size_t> p2p_asked_active;
  std::chrono::steady_clock::time_point p2p_asked_at;
  std::map<unsigned, bool> p2p_nvlink;
  // The fabric call answered ARGUMENT_VERSION_MISMATCH to v3: a driver
  // before NVML 13.0, asked with v2 from then on.
  bool fabric_v2 = false;
  // GPM samples: the previous one of the device and of each GPU instance.
  NvmlGpmState gpm;
};

// One device's answers, and the answer of nvmlDeviceGetHandleByIndex (not
// SUCCESS: nothing else was asked).
struct NvmlDeviceResult {
  DeviceSample sample;
  nvml::Return handle_rc = nvml::kSuccess;
};

// Asks device `index` the `questions`. `publish_identity` is called as soon
// as the identity is known, so that a device that then hangs is still
// reported under its uuid. Never throws for an NVML answer.
NvmlDeviceResult query_nvml_device(
    const NvmlSession& session, unsigned index, NvmlQuestions questions, NvmlDeviceMemory& memory,
    const std::function<void(const DeviceSample&)>& publish_identity);

// Identity fields (uuid, model, PCI id, serial): copied whole, or merged so
// that a field `from` lacks (a read that failed this cycle) keeps `to`'s
// last good value.
void copy_identity(const DeviceSample& from, DeviceSample& to);
void merge_identity(const DeviceSample& from, DeviceSample& to);

// NVML's PCI bus id in the form sysfs and the pcie collector use: domain of
// at least 4 hex digits, lower case. "00000000:1A:00.0" -> "0000:1a:00.0",
// "0000:1A:00.0" -> "0000:1a:00.0", "1a:00.0" -> "0000:1a:00.0",
// "00010000:01:00.0" -> "10000:01:00.0" (a VMD domain). "" when `bus_id`
// is not a bus id.
std::string normalize_pci_bus_id(std::string_view bus_id);

// The value of one answered nvmlFieldValue_t, read through the union member
// its value_type names; nullopt for a type this code does not know.
std::optional<double> field_value_as_double(const nvml::FieldValue& v);

// An NVLink bit error rate as NVML encodes it (fields 220, 222, 293): the
// mantissa (bits 8-11) times 10 to the minus exponent (bits 0-7), as
// DCGM's decoding does.
double nvml_nvlink_ber(unsigned long long raw);

// The PRM local port of NVLink link `link` (nvmlPRMCounterInput_v1_t's
// localPort), for nvmlDeviceReadPRMCounters_v1: the link's index plus 1,
// as DCGM 4.6 asks it ("DCGM FE_LINK GPU ports map to PRM local_port + 1";
// port 0 answers nothing on a B200 there).
unsigned nvml_prm_local_port(unsigned link);

// Field 296 (NVML 13.3, "the effective NVLink data rate ... after
// accounting for FEC overhead") in bytes per second. The header gives no
// unit, so the answer is read in the unit that puts it between half the
// link's speed (field 164, MB/s) and that speed: MB/s as that field, or
// KiB/s as the driver's own per-link rate (nvlinkLinkDataRateKiBps in
// NVIDIA's open kernel modules). nullopt when neither does, or when the
// speed is unknown [inferred: check on hardware].
std::optional<double> nvml_nvlink_data_rate_bytes(double value,
                                                  std::optional<double> speed_bytes_per_second);

// Clock event (throttle) reasons: the bit in NVML's mask and the `reason`
// label it is exported under. Every label is emitted (0 or 1) whenever the
// mask could be read.
struct NvmlThrottleReason {
  unsigned long long bit;
  std::string_view label;
};
std::span<const NvmlThrottleReason> nvml_throttle_reasons();

// The fabric state of an answered nvmlDeviceGetGpuFabricInfoV (`has_summary`:
// the v3 struct, whose health_summary is filled). Healthy: registration
// completed with SUCCESS, no 2-bit health field TRUE (degraded bandwidth,
// route recovery in progress, route unhealthy, access-timeout recovery in
// progress), no incorrect configuration, and a summary, where the driver
// gives one, that says healthy.
FabricSample fabric_sample(const nvml::GpuFabricInfoV3& info, bool has_summary);

}  // namespace nodewatch::accelerator
