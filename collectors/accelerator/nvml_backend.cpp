// The NVIDIA backend: NVML loaded with dlopen at run time (no NVIDIA header
// or library at build time; the ABI we call is declared in nvml_api.hpp).
//
// Shape:
//  - sample() loads and initialises the library lazily. No library or no
//    driver: no devices (retried at most once a minute). A library without a
//    required symbol, or whose nvmlInit fails for another reason: CollectError
//    on every cycle (the load is retried at most once a minute).
//  - Each device is queried on a persistent thread of its own (created the
//    first time the device is seen), so that a call that hangs in the driver
//    (seen in the field after XID 45/79, and in nvmlInit on some drivers)
//    holds up only that device. sample() waits for all of them up to 80% of
//    the time left before the collection deadline; a device still inside a
//    call is reported up=0 "device_stuck", and is not queried again until
//    that call returns. nvmlInit and nvmlDeviceGetCount run on the
//    collection thread itself, once per session (the count is read right
//    after nvmlInit and kept: a wedged GPU holding the driver lock cannot
//    hang every cycle there); a hang there stalls this collector only (it
//    has a thread of its own, and the scheduler fails it at its deadline).
//  - A session is dropped (the XID thread stopped, nvmlShutdown run by the
//    last owner) and opened again after the retry interval when every device
//    fails to give a handle in one cycle (a driver reload:
//    LIB_RM_VERSION_MISMATCH, UNINITIALIZED); opening it again fails, and is
//    retried, while nvmlDeviceGetCount fails.
//  - A background thread counts XID events (nvmlEventSetWait_v2) per device
//    and code; sample() copies the counts into each device's sample. A wait
//    that fails (not SUCCESS, not TIMEOUT: after XID 79 a driver answers
//    GPU_IS_LOST at once, forever, for a set holding the lost GPU) is counted
//    as "xid_wait_error" on the next sample; after kMaxWaitFailures in a row
//    the set is freed and built again with the devices that still register.
//  - Identity (uuid, name, serial, PCI id) is kept per device; a read that
//    fails one cycle leaves the last good value, so series keep their labels.
//  - The loaded library (handle, function table, init) is one Session held by
//    shared_ptr by the backend, the device threads and the XID thread. The
//    last owner calls nvmlShutdown and then dlclose. That is what makes it
//    safe to detach a thread that is stuck in the driver when the backend is
//    destroyed: the thread owns everything it touches (its state and the
//    Session, hence the library's code and NVML's own state), touches nothing
//    of the backend, and cleans up after itself if its call ever returns.
//
// Symbols. Required (the backend cannot name or reach a device without
// them, and every NVML release since the first has them): nvmlInit_v2 or
// nvmlInit, nvmlShutdown, nvmlErrorString, nvmlDeviceGetCount_v2 or
// nvmlDeviceGetCount, nvmlDeviceGetHandleByIndex_v2 or
// nvmlDeviceGetHandleByIndex, nvmlDeviceGetUUID (the `uuid` label). Every
// other symbol is optional: when it is missing, the values it gives are
// simply absent. Versioned names are tried newest first.

#include "accelerator/nvml_backend.hpp"

#include <dlfcn.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "accelerator/backend.hpp"
#include "nodewatch/metric.hpp"

namespace nodewatch::accelerator {

namespace {

using Clock = std::chrono::steady_clock;

// A library or driver that is absent (or broken) is looked for again at most
// this often: dlopen and nvmlInit are not free, and a CPU node would
// otherwise pay for them every cycle.
// (The default of NvmlBackendOptions::retry_interval.)
// Share of the time left before the collection deadline that sample() waits
// for the device threads; the rest is for turning samples into metrics.
constexpr int kBudgetPercent = 80;
// nvmlEventSetWait_v2's timeout: also how quickly the XID thread notices a
// stop request.
constexpr unsigned kEventWaitMs = 500;
// Failed waits in a row after which the XID event set is built again, the
// pause after each, and the longest pause between rebuilds that keep failing
// (the pause doubles with each).
constexpr unsigned kMaxWaitFailures = 3;
constexpr auto kWaitFailurePause = std::chrono::milliseconds(200);
constexpr auto kMaxRebuildPause = std::chrono::seconds(60);
// How long the destructor waits for the threads before detaching them.
constexpr auto kStopGrace = std::chrono::seconds(1);
// Upper bound on NVLink-C2C links asked for (Grace Hopper has 10 lanes in
// one link; this only guards against a nonsense count).
constexpr unsigned kMaxC2cLinks = 16;
// Upper bound on NVLink links asked for: NVML_NVLINK_MAX_LINKS was 18 up to
// NVML 13.2 and is 36 since; this leaves room and guards against nonsense.
constexpr unsigned kMaxNvlinks = 64;

// ---------------------------------------------------------------------------
// The library.

struct DlClose {
  void operator()(void* handle) const { dlclose(handle); }
};
using DlHandle = std::unique_ptr<void, DlClose>;

// The resolved function table. Null: the library lacks that symbol.
struct Api {
  // Required.
  nvml::InitFn init = nullptr;
  nvml::ShutdownFn shutdown = nullptr;
  nvml::ErrorStringFn error_string = nullptr;
  nvml::DeviceGetCountFn device_get_count = nullptr;
  nvml::DeviceGetHandleByIndexFn device_get_handle_by_index = nullptr;
  nvml::DeviceGetStringFn device_get_uuid = nullptr;
  // Optional.
  nvml::SystemGetStringFn system_get_driver_version = nullptr;
  nvml::DeviceGetStringFn device_get_name = nullptr;
  nvml::DeviceGetStringFn device_get_serial = nullptr;
  nvml::DeviceGetPciInfoFn device_get_pci_info = nullptr;
  bool pci_info_v1 = false;  // only nvmlDeviceGetPciInfo: read bus_id_legacy, not bus_id
  nvml::DeviceGetUtilizationFn device_get_utilization_rates = nullptr;
  nvml::DeviceGetMemoryInfoV2Fn device_get_memory_info_v2 = nullptr;
  nvml::DeviceGetMemoryInfoFn device_get_memory_info = nullptr;
  nvml::DeviceGetTemperatureVFn device_get_temperature_v = nullptr;
  nvml::DeviceGetTemperatureFn device_get_temperature = nullptr;
  nvml::DeviceGetTemperatureThresholdFn device_get_temperature_threshold = nullptr;
  nvml::DeviceGetUintFn device_get_power_usage = nullptr;
  nvml::DeviceGetUintFn device_get_enforced_power_limit = nullptr;
  nvml::DeviceGetUllFn device_get_total_energy_consumption = nullptr;
  nvml::DeviceGetClockInfoFn device_get_clock_info = nullptr;
  nvml::DeviceGetUllFn device_get_clocks_event_reasons = nullptr;
  nvml::DeviceGetTotalEccErrorsFn device_get_total_ecc_errors = nullptr;
  nvml::DeviceGetRemappedRowsFn device_get_remapped_rows = nullptr;
  nvml::DeviceGetUintFn device_get_pcie_replay_counter = nullptr;
  nvml::DeviceGetPcieThroughputFn device_get_pcie_throughput = nullptr;
  nvml::DeviceGetFieldValuesFn device_get_field_values = nullptr;
  nvml::DeviceGetNvLinkStateFn device_get_nvlink_state = nullptr;
  nvml::DeviceGetNvLinkErrorCounterFn device_get_nvlink_error_counter = nullptr;
  nvml::EventSetCreateFn event_set_create = nullptr;
  nvml::DeviceRegisterEventsFn device_register_events = nullptr;
  nvml::EventSetWaitFn event_set_wait = nullptr;
  nvml::EventSetFreeFn event_set_free = nullptr;
};

// Sets `out` to the first of `names` the library exports; returns that
// name, or nullptr when it exports none of them.
template <typename Fn>
const char* resolve(void* lib, Fn& out, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (void* sym = dlsym(lib, name)) {
      // POSIX guarantees that a dlsym result converts to a function pointer.
      out = reinterpret_cast<Fn>(sym);
      return name;
    }
  }
  return nullptr;
}

// Resolves the whole table; returns the required symbols that are missing,
// e.g. {"nvmlDeviceGetCount_v2 (or nvmlDeviceGetCount)"}.
std::vector<std::string> resolve_all(void* lib, Api& a) {
  std::vector<std::string> missing;
  auto required = [&](auto& out, std::initializer_list<const char*> names) {
    if (resolve(lib, out, names) != nullptr) return;
    std::string m = *names.begin();
    if (names.size() > 1) m += " (or " + std::string(*(names.begin() + 1)) + ")";
    missing.push_back(std::move(m));
  };
  required(a.init, {"nvmlInit_v2", "nvmlInit"});
  required(a.shutdown, {"nvmlShutdown"});
  required(a.error_string, {"nvmlErrorString"});
  required(a.device_get_count, {"nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"});
  required(a.device_get_handle_by_index,
           {"nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"});
  required(a.device_get_uuid, {"nvmlDeviceGetUUID"});

  resolve(lib, a.system_get_driver_version, {"nvmlSystemGetDriverVersion"});
  resolve(lib, a.device_get_name, {"nvmlDeviceGetName"});
  resolve(lib, a.device_get_serial, {"nvmlDeviceGetSerial"});
  const char* pci =
      resolve(lib, a.device_get_pci_info,
              {"nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetPciInfo_v2", "nvmlDeviceGetPciInfo"});
  a.pci_info_v1 = pci != nullptr && std::strcmp(pci, "nvmlDeviceGetPciInfo") == 0;
  resolve(lib, a.device_get_utilization_rates, {"nvmlDeviceGetUtilizationRates"});
  // Both versions: the v1 call is the run-time fallback when the newer one
  // exists but answers NOT_SUPPORTED or ARGUMENT_VERSION_MISMATCH.
  resolve(lib, a.device_get_memory_info_v2, {"nvmlDeviceGetMemoryInfo_v2"});
  resolve(lib, a.device_get_memory_info, {"nvmlDeviceGetMemoryInfo"});
  resolve(lib, a.device_get_temperature_v, {"nvmlDeviceGetTemperatureV"});
  resolve(lib, a.device_get_temperature, {"nvmlDeviceGetTemperature"});
  resolve(lib, a.device_get_temperature_threshold, {"nvmlDeviceGetTemperatureThreshold"});
  resolve(lib, a.device_get_power_usage, {"nvmlDeviceGetPowerUsage"});
  resolve(lib, a.device_get_enforced_power_limit, {"nvmlDeviceGetEnforcedPowerLimit"});
  resolve(lib, a.device_get_total_energy_consumption, {"nvmlDeviceGetTotalEnergyConsumption"});
  resolve(lib, a.device_get_clock_info, {"nvmlDeviceGetClockInfo"});
  resolve(lib, a.device_get_clocks_event_reasons,
          {"nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"});
  resolve(lib, a.device_get_total_ecc_errors, {"nvmlDeviceGetTotalEccErrors"});
  resolve(lib, a.device_get_remapped_rows, {"nvmlDeviceGetRemappedRows"});
  resolve(lib, a.device_get_pcie_replay_counter, {"nvmlDeviceGetPcieReplayCounter"});
  resolve(lib, a.device_get_pcie_throughput, {"nvmlDeviceGetPcieThroughput"});
  resolve(lib, a.device_get_field_values, {"nvmlDeviceGetFieldValues"});
  resolve(lib, a.device_get_nvlink_state, {"nvmlDeviceGetNvLinkState"});
  resolve(lib, a.device_get_nvlink_error_counter, {"nvmlDeviceGetNvLinkErrorCounter"});
  resolve(lib, a.event_set_create, {"nvmlEventSetCreate"});
  resolve(lib, a.device_register_events, {"nvmlDeviceRegisterEvents"});
  resolve(lib, a.event_set_wait, {"nvmlEventSetWait_v2", "nvmlEventSetWait"});
  resolve(lib, a.event_set_free, {"nvmlEventSetFree"});
  return missing;
}

// One loaded and initialised NVML, shared by every thread that calls it
// (see the top of this file). Destruction order is the point: the
// destructor's body calls nvmlShutdown, then `lib` closes the library.
struct Session {
  DlHandle lib;
  Api api;
  std::string library;  // as configured, for messages
  std::string driver_version;
  unsigned device_count = 0;  // read once, right after nvmlInit
  bool initialized = false;
  bool nvlink_only = false;  // NvmlBackendOptions::nvlink_only

  Session() = default;
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  ~Session() {
    if (initialized) api.shutdown();
  }

  // "Driver Not Loaded (9)".
  std::string error(nvml::Return rc) const {
    const char* text = api.error_string != nullptr ? api.error_string(rc) : nullptr;
    return std::string(text != nullptr ? text : "NVML error") + " (" + std::to_string(rc) + ")";
  }
};

// A C string from a fixed NVML buffer that may lack its NUL, made safe as a
// label value: bytes that are not valid UTF-8 become '?'.
std::string c_string(const char* buf, std::size_t size) {
  std::string s(buf, strnlen(buf, size));
  if (!is_valid_utf8(s))
    for (char& c : s)
      if (static_cast<unsigned char>(c) >= 0x80) c = '?';
  return s;
}

// ---------------------------------------------------------------------------
// One device's query.

// Thrown inside a query when the device answers GPU_IS_LOST or
// RESET_REQUIRED: what was read of it this cycle is dropped.
struct DeviceGone {
  const char* reason;
};

// Sorts one return code: true on success; false (the value stays empty) on
// NOT_SUPPORTED, or on any other error, which also records "nvml_error".
bool ok(nvml::Return rc, DeviceSample& d) {
  switch (rc) {
    case nvml::kSuccess: return true;
    case nvml::kErrorNotSupported: return false;
    case nvml::kErrorGpuIsLost: throw DeviceGone{"gpu_lost"};
    case nvml::kErrorResetRequired: throw DeviceGone{"reset_required"};
    default: d.errors.emplace_back("nvml_error"); return false;
  }
}

// The same for one field of nvmlDeviceGetFieldValues, with one difference:
// INVALID_ARGUMENT there means "a field id this driver does not know" (an
// older driver asked for a newer field), which is "not supported", not an
// error to count every cycle.
bool field_ok(const nvml::FieldValue& f, DeviceSample& d) {
  if (f.nvml_return == nvml::kErrorInvalidArgument) return false;
  return ok(f.nvml_return, d) && field_value_as_double(f).has_value();
}

void copy_identity(const DeviceSample& from, DeviceSample& to) {
  to.uuid = from.uuid;
  to.model = from.model;
  to.pci_bus_id = from.pci_bus_id;
  to.serial = from.serial;
}

// Copies the identity fields that `from` has (non-empty) into `to`: a read
// that failed this cycle does not wipe the last good value.
void merge_identity(const DeviceSample& from, DeviceSample& to) {
  auto keep = [](const std::string& f, std::string& t) {
    if (!f.empty()) t = f;
  };
  keep(from.uuid, to.uuid);
  keep(from.model, to.model);
  keep(from.pci_bus_id, to.pci_bus_id);
  keep(from.serial, to.serial);
}

// What a device's query keeps from one cycle to the next (touched only by
// that device's thread).
struct DeviceMemory {
  // Last good value of each NVLink-C2C error field, by (link, field id):
  // the exported sum of CRC and replay errors uses it for a field that
  // failed this cycle, so the counter never goes backwards.
  std::map<std::pair<unsigned, unsigned>, double> c2c_errors;
  // NVLink: where each link's byte counters come from, once one answered
  // (kNvlink5Bytes or kKibThroughput), so that a field failing for a cycle
  // never switches a series to another counter; and whether the device's
  // per-counter error call ever answered (then its "recovery" is the one
  // exported, never the NVLink5 field's).
  std::map<unsigned, int> nvlink_bytes_source;
  bool nvlink_legacy_errors = false;
};

constexpr int kNvlink5Bytes = 1;
constexpr int kKibThroughput = 2;

// One device's query: the sample, and the answer of
// nvmlDeviceGetHandleByIndex (not SUCCESS: nothing else was asked).
struct DeviceResult {
  DeviceSample sample;
  nvml::Return handle_rc = nvml::kSuccess;
};

std::string read_string(nvml::DeviceGetStringFn fn, nvml::Device dev, unsigned size,
                        DeviceSample& d) {
  if (fn == nullptr) return {};
  std::array<char, 128> buf{};
  if (!ok(fn(dev, buf.data(), size), d)) return {};
  return c_string(buf.data(), size);
}

std::string read_pci_bus_id(const Api& a, nvml::Device dev, DeviceSample& d) {
  if (a.device_get_pci_info == nullptr) return {};
  nvml::PciInfo pci{};
  if (!ok(a.device_get_pci_info(dev, &pci), d)) return {};
  std::string id = a.pci_info_v1 ? c_string(pci.bus_id_legacy, sizeof pci.bus_id_legacy)
                                 : c_string(pci.bus_id, sizeof pci.bus_id);
  std::string normalized = normalize_pci_bus_id(id);
  if (!normalized.empty()) return normalized;
  // The numeric fields are in every version of the struct; the function
  // number is not, and NVML only reports function 0.
  std::array<char, 32> buf{};
  std::snprintf(buf.data(), buf.size(), "%04x:%02x:%02x.0", pci.domain, pci.bus, pci.device);
  return buf.data();
}

// Field values in one batched call (one driver round trip instead of one
// per value). The C2C per-link fields need the link count first, so they
// come in a second call, only on devices that have C2C links.
void read_fields(const Api& a, nvml::Device dev, DeviceSample& d, DeviceMemory& memory) {
  if (a.device_get_field_values == nullptr) return;
  struct Throttle {
    unsigned field;
    const char* reason;
  };
  static constexpr std::array<Throttle, 5> kThrottleFields = {{
      {nvml::kFieldClocksEventSwPowerCapNs, "sw_power_cap"},
      {nvml::kFieldClocksEventSyncBoostNs, "sync_boost"},
      {nvml::kFieldClocksEventSwThermalNs, "sw_thermal"},
      {nvml::kFieldClocksEventHwThermalNs, "hw_thermal"},
      {nvml::kFieldClocksEventHwPowerBrakeNs, "hw_power_brake"},
  }};
  std::vector<nvml::FieldValue> f;
  auto ask = [&f](unsigned field, unsigned scope = 0) {
    nvml::FieldValue v{};
    v.field_id = field;
    v.scope_id = scope;
    f.push_back(v);
    return f.size() - 1;
  };
  const std::size_t mem_temp = ask(nvml::kFieldMemoryTemp);
  const std::size_t tx = ask(nvml::kFieldPcieCountTxBytes);
  const std::size_t rx = ask(nvml::kFieldPcieCountRxBytes);
  const std::size_t c2c_count = ask(nvml::kFieldC2cLinkCount);
  const std::size_t throttle_first = f.size();
  for (const Throttle& t : kThrottleFields) ask(t.field);

  if (!ok(a.device_get_field_values(dev, static_cast<int>(f.size()), f.data()), d)) return;
  if (field_ok(f[mem_temp], d))
    d.temperature_celsius["memory"] = *field_value_as_double(f[mem_temp]);
  // "Value can be wrapped" (NVML): exported as is, a wrap reads as a
  // counter reset.
  if (field_ok(f[tx], d)) d.host_link_tx_bytes = *field_value_as_double(f[tx]);
  if (field_ok(f[rx], d)) d.host_link_rx_bytes = *field_value_as_double(f[rx]);
  for (std::size_t i = 0; i < kThrottleFields.size(); ++i) {
    const nvml::FieldValue& v = f[throttle_first + i];
    if (field_ok(v, d))
      d.clock_throttle_seconds[kThrottleFields[i].reason] = *field_value_as_double(v) / 1e9;
  }

  if (!field_ok(f[c2c_count], d)) return;
  const double links_d = *field_value_as_double(f[c2c_count]);
  const unsigned links =
      links_d > 0 ? static_cast<unsigned>(std::min<double>(links_d, kMaxC2cLinks)) : 0;
  if (links == 0) return;
  f.clear();
  for (unsigned l = 0; l < links; ++l) {
    ask(nvml::kFieldC2cLinkStatus, l);
    ask(nvml::kFieldC2cLinkErrorIntr, l);
    ask(nvml::kFieldC2cLinkErrorReplay, l);
  }
  if (!ok(a.device_get_field_values(dev, static_cast<int>(f.size()), f.data()), d)) return;
  for (unsigned l = 0; l < links; ++l) {
    const nvml::FieldValue* v = &f[3 * l];
    if (field_ok(v[0], d)) d.c2c_link_active[l] = *field_value_as_double(v[0]) != 0;
    // Errors: CRC errors plus replays, whichever of the two the driver has.
    // A field that fails this cycle counts with its last good value (one
    // that never answered counts nothing), so the sum never drops.
    std::optional<double> errors;
    for (int k = 1; k <= 2; ++k) {
      const std::pair<unsigned, unsigned> key{l, v[k].field_id};
      if (field_ok(v[k], d)) memory.c2c_errors[key] = *field_value_as_double(v[k]);
      if (auto it = memory.c2c_errors.find(key); it != memory.c2c_errors.end())
        errors = errors.value_or(0) + it->second;
    }
    if (errors) d.c2c_link_errors[l] = *errors;
  }
}

// The NVLink links of one device. The number of links is discovered, never
// assumed: field 91 where the driver has it, else nvmlDeviceGetNvLinkState
// on link 0, 1, ... until the driver says there is no such link.
void read_nvlinks(const Api& a, nvml::Device dev, DeviceSample& d, DeviceMemory& memory) {
  if (a.device_get_nvlink_state == nullptr) return;
  std::optional<unsigned> count;
  if (a.device_get_field_values != nullptr) {
    nvml::FieldValue v{};
    v.field_id = nvml::kFieldNvlinkLinkCount;
    if (ok(a.device_get_field_values(dev, 1, &v), d) && field_ok(v, d)) {
      const double n = *field_value_as_double(v);
      count = n > 0 ? static_cast<unsigned>(std::min<double>(n, kMaxNvlinks)) : 0;
    }
  }
  std::vector<NvlinkSample>& links = d.nvlinks;
  for (unsigned l = 0; l < count.value_or(kMaxNvlinks); ++l) {
    unsigned active = 0;
    const nvml::Return rc = a.device_get_nvlink_state(dev, l, &active);
    // Past the last link (or no NVLink at all). With a known count, a link
    // that is not supported (a board that wires only some) is skipped.
    if (rc == nvml::kErrorInvalidArgument || rc == nvml::kErrorNotSupported) {
      if (count) continue;
      break;
    }
    if (!ok(rc, d)) continue;
    NvlinkSample link;
    link.link = l;
    link.active = active == nvml::kFeatureEnabled;
    links.push_back(std::move(link));
  }
  if (count)
    d.nvlink_count = *count;
  else if (!links.empty())
    d.nvlink_count = static_cast<unsigned>(links.size());
  if (links.empty()) return;

  // Error counters up to Hopper, one call each. A driver that answers
  // NOT_SUPPORTED for every counter of the first link (Blackwell) is not
  // asked about the other links.
  if (a.device_get_nvlink_error_counter != nullptr) {
    struct Counter {
      unsigned id;
      const char* type;
    };
    static constexpr std::array<Counter, 5> kCounters = {{
        {nvml::kNvlinkErrorDlCrcFlit, "crc_flit"},
        {nvml::kNvlinkErrorDlCrcData, "crc_data"},
        {nvml::kNvlinkErrorDlReplay, "replay"},
        {nvml::kNvlinkErrorDlRecovery, "recovery"},
        {nvml::kNvlinkErrorDlEccData, "ecc"},
    }};
    for (NvlinkSample& link : links) {
      bool any = false;
      for (const Counter& c : kCounters) {
        unsigned long long v = 0;
        const nvml::Return rc = a.device_get_nvlink_error_counter(dev, link.link, c.id, &v);
        if (rc != nvml::kErrorNotSupported) any = true;
        if (ok(rc, d)) {
          link.errors[c.type] = static_cast<double>(v);
          memory.nvlink_legacy_errors = true;
        }
      }
      if (!any) break;
    }
  }

  // Everything else in one batched call for all links.
  if (a.device_get_field_values == nullptr) return;
  struct Field {
    unsigned id;
    const char* error_type;  // null: not an error counter
  };
  static constexpr std::array<Field, 16> kFields = {{
      {nvml::kFieldNvlinkSpeedMBps, nullptr},
      {nvml::kFieldNvlinkThroughputDataTx, nullptr},
      {nvml::kFieldNvlinkThroughputDataRx, nullptr},
      {nvml::kFieldNvlinkCountXmitBytes, nullptr},
      {nvml::kFieldNvlinkCountRcvBytes, nullptr},
      {nvml::kFieldNvlinkCountSymbolErrors, "symbol"},
      {nvml::kFieldNvlinkCountEffectiveErrors, "effective"},
      {nvml::kFieldNvlinkCountLinkRecoveryEvents, "recovery"},
      {nvml::kFieldNvlinkCountLinkRecoveryFailedEvents, "recovery_failed"},
      {nvml::kFieldNvlinkCountMalformedPacketErrors, "malformed_packet"},
      {nvml::kFieldNvlinkCountBufferOverrunErrors, "buffer_overrun"},
      {nvml::kFieldNvlinkCountRcvErrors, "receive"},
      {nvml::kFieldNvlinkCountRcvRemoteErrors, "receive_remote"},
      {nvml::kFieldNvlinkCountRcvGeneralErrors, "receive_general"},
      {nvml::kFieldNvlinkCountLocalLinkIntegrityErrors, "local_link_integrity"},
      {nvml::kFieldNvlinkCountXmitDiscards, "transmit_discard"},
  }};
  std::vector<nvml::FieldValue> f(links.size() * kFields.size());
  for (std::size_t i = 0; i < links.size(); ++i) {
    for (std::size_t k = 0; k < kFields.size(); ++k) {
      f[i * kFields.size() + k].field_id = kFields[k].id;
      f[i * kFields.size() + k].scope_id = links[i].link;
    }
  }
  if (!ok(a.device_get_field_values(dev, static_cast<int>(f.size()), f.data()), d)) return;
  for (std::size_t i = 0; i < links.size(); ++i) {
    NvlinkSample& link = links[i];
    const nvml::FieldValue* v = &f[i * kFields.size()];
    auto value = [&](std::size_t k) -> std::optional<double> {
      if (!field_ok(v[k], d)) return std::nullopt;
      return field_value_as_double(v[k]);
    };
    // NVML's "MBps": megabytes (10^6) per second [inferred; check on hardware].
    if (auto mbps = value(0)) link.speed_bytes_per_second = *mbps * 1e6;
    // NVLink5's byte counters where the driver has them, else the data
    // throughput counters, in KiB; the first that answered stays the source.
    int& source = memory.nvlink_bytes_source[link.link];
    if (source != kKibThroughput) {
      auto tx = value(3);
      auto rx = value(4);
      if (tx || rx) source = kNvlink5Bytes;
      if (tx) link.tx_bytes = *tx;
      if (rx) link.rx_bytes = *rx;
    }
    if (source != kNvlink5Bytes) {
      auto tx_kib = value(1);
      auto rx_kib = value(2);
      if (tx_kib || rx_kib) source = kKibThroughput;
      if (tx_kib) link.tx_bytes = *tx_kib * 1024;
      if (rx_kib) link.rx_bytes = *rx_kib * 1024;
    }
    for (std::size_t k = 5; k < kFields.size(); ++k) {
      // The per-counter call's "recovery" (DL recovery), once it has
      // answered, is never replaced by the NVLink5 field (all recovery
      // events): two counters under one series would read as resets.
      if (memory.nvlink_legacy_errors && std::string_view(kFields[k].error_type) == "recovery")
        continue;
      if (auto e = value(k)) link.errors.emplace(kFields[k].error_type, *e);
    }
  }
}

// Reads everything about device `index` into `d`. `publish_identity` is
// called as soon as the identity is known, so that a device that then hangs
// is still reported under its uuid.
void read_device(const Session& s, unsigned index, DeviceResult& r, DeviceMemory& memory,
                 const std::function<void(const DeviceSample&)>& publish_identity) {
  const Api& a = s.api;
  DeviceSample& d = r.sample;
  nvml::Device dev = nullptr;
  r.handle_rc = a.device_get_handle_by_index(index, &dev);
  // Lost or needing a reset: DeviceGone (up 0). Any other error (say
  // NO_PERMISSION for one GPU in a container): no values, but the device is
  // not known to be down, so up stays 1 and the error is counted.
  if (r.handle_rc == nvml::kErrorGpuIsLost || r.handle_rc == nvml::kErrorResetRequired)
    ok(r.handle_rc, d);
  if (r.handle_rc != nvml::kSuccess) {
    d.errors.emplace_back("nvml_error");
    return;
  }
  d.uuid = read_string(a.device_get_uuid, dev, nvml::kUuidBufferSize, d);
  d.model = read_string(a.device_get_name, dev, nvml::kNameBufferSize, d);
  d.serial = read_string(a.device_get_serial, dev, nvml::kSerialBufferSize, d);
  d.pci_bus_id = read_pci_bus_id(a, dev, d);
  publish_identity(d);
  if (s.nvlink_only) {
    read_nvlinks(a, dev, d, memory);
    return;
  }

  if (a.device_get_utilization_rates != nullptr) {
    nvml::Utilization u{};
    if (ok(a.device_get_utilization_rates(dev, &u), d)) {
      d.utilization_ratio = u.gpu / 100.0;
      d.memory_utilization_ratio = u.memory / 100.0;
    }
  }
  // v2 reports the driver's reserved memory apart from `used` (what
  // nvidia-smi shows as used); v1's `used` includes it.
  // A newer call that exists but answers NOT_SUPPORTED or
  // ARGUMENT_VERSION_MISMATCH falls back to the v1 call.
  auto fall_back = [](nvml::Return rc) {
    return rc == nvml::kErrorNotSupported || rc == nvml::kErrorArgumentVersionMismatch;
  };
  bool memory_asked = false;
  if (a.device_get_memory_info_v2 != nullptr) {
    nvml::MemoryV2 m{};
    m.version = nvml::kMemoryV2Version;
    const nvml::Return rc = a.device_get_memory_info_v2(dev, &m);
    memory_asked = !fall_back(rc);
    if (memory_asked && ok(rc, d)) {
      d.memory_used_bytes = static_cast<double>(m.used);
      d.memory_total_bytes = static_cast<double>(m.total);
    }
  }
  if (!memory_asked && a.device_get_memory_info != nullptr) {
    nvml::Memory m{};
    if (ok(a.device_get_memory_info(dev, &m), d)) {
      d.memory_used_bytes = static_cast<double>(m.used);
      d.memory_total_bytes = static_cast<double>(m.total);
    }
  }
  bool temperature_asked = false;
  if (a.device_get_temperature_v != nullptr) {
    nvml::TemperatureV1 t{};
    t.version = nvml::kTemperatureV1Version;
    t.sensor_type = nvml::kTemperatureGpu;
    const nvml::Return rc = a.device_get_temperature_v(dev, &t);
    temperature_asked = !fall_back(rc);
    if (temperature_asked && ok(rc, d)) d.temperature_celsius["gpu"] = t.temperature;
  }
  if (!temperature_asked && a.device_get_temperature != nullptr) {
    unsigned t = 0;
    if (ok(a.device_get_temperature(dev, nvml::kTemperatureGpu, &t), d))
      d.temperature_celsius["gpu"] = t;
  }
  if (a.device_get_temperature_threshold != nullptr) {
    unsigned t = 0;
    if (ok(a.device_get_temperature_threshold(dev, nvml::kTemperatureThresholdSlowdown, &t), d))
      d.temperature_slowdown_celsius = t;
  }
  if (a.device_get_power_usage != nullptr) {
    unsigned mw = 0;
    if (ok(a.device_get_power_usage(dev, &mw), d)) d.power_watts = mw / 1000.0;
  }
  if (a.device_get_enforced_power_limit != nullptr) {
    unsigned mw = 0;
    if (ok(a.device_get_enforced_power_limit(dev, &mw), d)) d.power_limit_watts = mw / 1000.0;
  }
  if (a.device_get_total_energy_consumption != nullptr) {
    unsigned long long mj = 0;
    if (ok(a.device_get_total_energy_consumption(dev, &mj), d))
      d.energy_joules = static_cast<double>(mj) / 1000.0;
  }
  if (a.device_get_clock_info != nullptr) {
    static constexpr std::array<std::pair<unsigned, const char*>, 3> kClocks = {
        {{nvml::kClockSm, "sm"}, {nvml::kClockGraphics, "graphics"}, {nvml::kClockMem, "memory"}}};
    for (const auto& [type, label] : kClocks) {
      unsigned mhz = 0;
      if (ok(a.device_get_clock_info(dev, type, &mhz), d)) d.clock_hertz[label] = mhz * 1e6;
    }
  }
  if (a.device_get_clocks_event_reasons != nullptr) {
    unsigned long long mask = 0;
    if (ok(a.device_get_clocks_event_reasons(dev, &mask), d))
      for (const NvmlThrottleReason& r : nvml_throttle_reasons())
        d.clock_throttle_active[std::string(r.label)] = (mask & r.bit) != 0;
  }
  if (a.device_get_total_ecc_errors != nullptr) {
    unsigned long long n = 0;
    if (ok(a.device_get_total_ecc_errors(dev, nvml::kMemoryErrorCorrected,
                                         nvml::kEccCounterVolatile, &n),
           d))
      d.ecc_corrected = static_cast<double>(n);
    if (ok(a.device_get_total_ecc_errors(dev, nvml::kMemoryErrorUncorrected,
                                         nvml::kEccCounterVolatile, &n),
           d))
      d.ecc_uncorrected = static_cast<double>(n);
  }
  if (a.device_get_remapped_rows != nullptr) {
    unsigned corr = 0, unc = 0, pending = 0, failed = 0;
    if (ok(a.device_get_remapped_rows(dev, &corr, &unc, &pending, &failed), d)) {
      d.remapped_rows_correctable = corr;
      d.remapped_rows_uncorrectable = unc;
      d.row_remap_pending = pending != 0;
      d.row_remap_failed = failed != 0;
    }
  }
  if (a.device_get_pcie_replay_counter != nullptr) {
    unsigned n = 0;
    if (ok(a.device_get_pcie_replay_counter(dev, &n), d)) d.pcie_replays = n;
  }
  read_fields(a, dev, d, memory);
  // nvmlDeviceGetPcieThroughput samples for 20 ms inside the call: only
  // when the driver has no cumulative byte counter for that direction.
  if (a.device_get_pcie_throughput != nullptr) {
    unsigned kb = 0;
    if (!d.host_link_tx_bytes &&
        ok(a.device_get_pcie_throughput(dev, nvml::kPcieUtilTxBytes, &kb), d))
      d.host_link_tx_bytes_per_second = kb * 1024.0;
    if (!d.host_link_rx_bytes &&
        ok(a.device_get_pcie_throughput(dev, nvml::kPcieUtilRxBytes, &kb), d))
      d.host_link_rx_bytes_per_second = kb * 1024.0;
  }
}

DeviceResult query_device(const Session& s, unsigned index, DeviceMemory& memory,
                          const std::function<void(const DeviceSample&)>& publish_identity) {
  DeviceResult r;
  r.sample.index = index;
  try {
    read_device(s, index, r, memory, publish_identity);
  } catch (const DeviceGone& gone) {
    DeviceSample lost;
    lost.index = index;
    copy_identity(r.sample, lost);
    lost.up = false;
    lost.errors = {gone.reason};
    r.sample = std::move(lost);
  }
  return r;
}

// ---------------------------------------------------------------------------
// Threads.

// A thread that owns its state through a shared_ptr and sets `exited` as
// its last act; the owner asks it to stop, waits a grace period for that
// flag, then joins it (it is about to return) or detaches it (it is stuck in
// the driver; see the top of the file for why that is safe).
struct ThreadState {
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  bool exited = false;
};

void request_stop(ThreadState& st) {
  std::lock_guard lock(st.mu);
  st.stop = true;
  st.cv.notify_all();
}

void release_thread(ThreadState& st, std::thread& t, Clock::time_point deadline) {
  if (!t.joinable()) return;
  bool exited = false;
  {
    std::unique_lock lock(st.mu);
    exited = st.cv.wait_until(lock, deadline, [&] { return st.exited; });
  }
  if (exited)
    t.join();
  else
    t.detach();
}

// One device's persistent query thread.
class DeviceWorker {
 public:
  explicit DeviceWorker(unsigned index) : state_(std::make_shared<State>()) {
    state_->index = index;
    state_->identity.index = index;
    thread_ = std::thread(&DeviceWorker::run, state_);
  }
  DeviceWorker(const DeviceWorker&) = delete;
  DeviceWorker& operator=(const DeviceWorker&) = delete;
  ~DeviceWorker() {
    request_stop(*state_);
    release_thread(*state_, thread_, Clock::now() + kStopGrace);
  }

  // Queues one query. False, and nothing queued, while the previous one has
  // not returned: the device is stuck.
  bool post(std::shared_ptr<const Session> session) {
    std::lock_guard lock(state_->mu);
    if (state_->busy) return false;
    state_->job = std::move(session);
    state_->busy = true;
    state_->result.reset();
    state_->cv.notify_all();
    return true;
  }

  // The posted query's result, or nullopt if it has not returned by `until`
  // (or the collection was cancelled first).
  std::optional<DeviceResult> wait(Clock::time_point until, const std::atomic<bool>* cancelled) {
    std::unique_lock lock(state_->mu);
    while (state_->busy) {
      if (cancelled != nullptr && cancelled->load(std::memory_order_relaxed)) break;
      const auto now = Clock::now();
      if (now >= until) break;
      // Wakes at least every 50 ms to notice cancellation.
      state_->cv.wait_until(lock, std::min(until, now + std::chrono::milliseconds(50)));
    }
    if (state_->busy) return std::nullopt;
    return std::exchange(state_->result, std::nullopt);
  }

  // The identity read most recently (uuid empty if never read).
  DeviceSample identity() const {
    std::lock_guard lock(state_->mu);
    return state_->identity;
  }

  ThreadState& thread_state() { return *state_; }
  std::thread& thread() { return thread_; }

 private:
  struct State : ThreadState {
    unsigned index = 0;
    std::shared_ptr<const Session> job;  // set: a query is queued
    bool busy = false;                   // a query is queued or running
    std::optional<DeviceResult> result;
    DeviceSample identity;  // the last good value of each identity field
    DeviceMemory memory;    // only the worker thread touches it
  };

  static void run(std::shared_ptr<State> st) {
    std::unique_lock lock(st->mu);
    for (;;) {
      st->cv.wait(lock, [&] { return st->stop || st->job != nullptr; });
      if (st->stop) break;
      std::shared_ptr<const Session> session = std::move(st->job);
      st->job.reset();
      lock.unlock();
      auto publish = [&st](const DeviceSample& d) {
        std::lock_guard g(st->mu);
        merge_identity(d, st->identity);
      };
      DeviceResult s;
      try {
        s = query_device(*session, st->index, st->memory, publish);
      } catch (const std::exception&) {
        // Out of memory, in practice: count it and keep the thread alive.
        s = DeviceResult{};
        s.sample.index = st->index;
        s.sample.errors = {"exception"};
      }
      // Released outside the lock: when the backend is gone this may be the
      // last owner, and then it runs nvmlShutdown and dlclose.
      session.reset();
      lock.lock();
      st->result = std::move(s);
      st->busy = false;
      st->cv.notify_all();
    }
    st->exited = true;
    st->cv.notify_all();
  }

  std::shared_ptr<State> state_;
  std::thread thread_;
};

// Counts XID events per device (uuid) and code, from nvmlEventSetWait_v2.
// A counter, never a "last XID" gauge: two XID 79s count 2.
class XidWatcher {
 public:
  using Counts = std::map<unsigned, std::uint64_t>;

  explicit XidWatcher(std::shared_ptr<const Session> session) : state_(std::make_shared<State>()) {
    thread_ = std::thread(&XidWatcher::run, state_, std::move(session));
  }
  XidWatcher(const XidWatcher&) = delete;
  XidWatcher& operator=(const XidWatcher&) = delete;
  ~XidWatcher() {
    request_stop(*state_);
    release_thread(*state_, thread_, Clock::now() + kStopGrace);
  }

  static bool supported(const Api& a) {
    return a.event_set_create != nullptr && a.device_register_events != nullptr &&
           a.event_set_wait != nullptr && a.event_set_free != nullptr;
  }

  Counts counts(const std::string& uuid) const {
    std::lock_guard lock(state_->mu);
    auto it = state_->counts.find(uuid);
    return it == state_->counts.end() ? Counts{} : it->second;
  }

  // Waits that failed (neither an event nor a timeout) since the last call.
  std::uint64_t take_wait_failures() {
    std::lock_guard lock(state_->mu);
    return std::exchange(state_->wait_failures, 0);
  }

  ThreadState& thread_state() { return *state_; }
  std::thread& thread() { return thread_; }

 private:
  struct State : ThreadState {
    std::map<std::string, Counts, std::less<>> counts;
    std::uint64_t wait_failures = 0;
  };

  enum class Outcome {
    kStopped,         // asked to stop
    kNothingToWatch,  // no device could register for XID events
    kFailed,          // the set could not be created, or its waits keep failing
  };

  // Sleeps `d` unless asked to stop first; true when asked to stop.
  static bool pause(State& st, Clock::duration d) {
    std::unique_lock lock(st.mu);
    return st.cv.wait_for(lock, d, [&] { return st.stop; });
  }

  static void run(std::shared_ptr<State> st, std::shared_ptr<const Session> session) {
    const Api& a = session->api;
    // Sets built in a row whose waits all failed: the pause before the next
    // one doubles with each, so a driver that fails every wait is not asked
    // to rebuild in a tight loop.
    unsigned fruitless = 0;
    for (;;) {
      nvml::EventSet set = nullptr;
      Outcome outcome = Outcome::kFailed;
      const nvml::Return rc = a.event_set_create(&set);
      if (rc == nvml::kSuccess) {
        outcome = watch(*st, *session, set, fruitless);
        a.event_set_free(set);
      } else if (fruitless == 0) {
        spdlog::warn("nvml: cannot create an XID event set: {}", session->error(rc));
      }
      if (outcome != Outcome::kFailed) break;
      const auto delay = std::min<Clock::duration>(
          kWaitFailurePause * (1u << std::min(fruitless, 10u)), kMaxRebuildPause);
      ++fruitless;
      if (pause(*st, delay)) break;
    }
    session.reset();
    std::lock_guard lock(st->mu);
    st->exited = true;
    st->cv.notify_all();
  }

  // Registers every device that still answers in `set` and counts its
  // events until asked to stop or until the waits keep failing.
  static Outcome watch(State& st, const Session& s, nvml::EventSet set, unsigned& fruitless) {
    const Api& a = s.api;
    // Devices whose driver cannot deliver XID events (NOT_SUPPORTED), or
    // that no longer answer (lost), are skipped; the others still count.
    std::map<nvml::Device, std::string> uuids;
    for (unsigned i = 0; i < s.device_count; ++i) {
      nvml::Device dev = nullptr;
      std::array<char, nvml::kUuidBufferSize> uuid{};
      if (a.device_get_handle_by_index(i, &dev) != nvml::kSuccess ||
          a.device_get_uuid(dev, uuid.data(), uuid.size()) != nvml::kSuccess ||
          a.device_register_events(dev, nvml::kEventTypeXidCriticalError, set) != nvml::kSuccess)
        continue;
      uuids[dev] = c_string(uuid.data(), uuid.size());
    }
    if (uuids.empty()) return Outcome::kNothingToWatch;
    if (fruitless > 0)
      spdlog::info("nvml: XID event set built again with {} of {} GPUs", uuids.size(),
                   s.device_count);
    unsigned failures = 0;  // in a row
    nvml::Return last_error = nvml::kSuccess;
    for (;;) {
      {
        std::lock_guard lock(st.mu);
        if (st.stop) return Outcome::kStopped;
      }
      nvml::EventData e{};
      const nvml::Return rc = a.event_set_wait(set, &e, kEventWaitMs);
      if (rc == nvml::kSuccess || rc == nvml::kErrorTimeout) {
        failures = 0;
        fruitless = 0;
        if (rc == nvml::kErrorTimeout) continue;
        auto it = uuids.find(e.device);
        if ((e.event_type & nvml::kEventTypeXidCriticalError) != 0 && it != uuids.end()) {
          std::lock_guard lock(st.mu);
          ++st.counts[it->second][static_cast<unsigned>(e.event_data)];
        }
        continue;
      }
      // Any other answer (GPU_IS_LOST makes the wait fail at once, on every
      // call, for a set that holds a lost GPU): counted, logged once per
      // change, and after a few in a row the set is built again without
      // the devices that no longer register.
      {
        std::lock_guard lock(st.mu);
        ++st.wait_failures;
      }
      if (rc != last_error && fruitless == 0)
        spdlog::warn(
            "nvml: waiting for XID events failed: {}; the event set is built again "
            "after {} failures in a row",
            s.error(rc), kMaxWaitFailures);
      last_error = rc;
      if (++failures >= kMaxWaitFailures) return Outcome::kFailed;
      if (pause(st, kWaitFailurePause)) return Outcome::kStopped;
    }
  }

  std::shared_ptr<State> state_;
  std::thread thread_;
};

// ---------------------------------------------------------------------------
// The backend.

class NvmlBackend final : public Backend {
 public:
  NvmlBackend(std::string library, const NvmlBackendOptions& options)
      : library_(std::move(library)),
        retry_interval_(options.retry_interval),
        nvlink_only_(options.nvlink_only) {}
  NvmlBackend(const NvmlBackend&) = delete;
  NvmlBackend& operator=(const NvmlBackend&) = delete;

  ~NvmlBackend() override {
    // Ask every thread first and give them one grace period together, so
    // that eight stuck devices cost one second, not eight.
    std::vector<std::pair<ThreadState*, std::thread*>> threads;
    if (xid_) threads.emplace_back(&xid_->thread_state(), &xid_->thread());
    for (auto& w : workers_) threads.emplace_back(&w->thread_state(), &w->thread());
    for (auto& [st, t] : threads) request_stop(*st);
    const auto deadline = Clock::now() + kStopGrace;
    for (auto& [st, t] : threads) release_thread(*st, *t, deadline);
  }

  std::string_view name() const override { return "nvml"; }

  std::vector<DeviceSample> sample(const CollectContext& ctx) override {
    std::shared_ptr<const Session> session = ensure_session();
    if (!session) return {};
    const unsigned count = session->device_count;

    const auto now = Clock::now();
    const auto left = ctx.deadline > now ? ctx.deadline - now : Clock::duration::zero();
    const auto until = now + left * kBudgetPercent / 100;

    while (workers_.size() < count)
      workers_.push_back(std::make_unique<DeviceWorker>(static_cast<unsigned>(workers_.size())));
    std::vector<bool> posted(count);
    for (unsigned i = 0; i < count; ++i) posted[i] = workers_[i]->post(session);

    std::vector<DeviceSample> out;
    out.reserve(count);
    // Every device refused a handle (for a reason other than lost or reset
    // required): the session itself is broken, as after a driver reload.
    bool no_handle_anywhere = count > 0;
    nvml::Return handle_rc = nvml::kSuccess;
    for (unsigned i = 0; i < count; ++i) {
      std::optional<DeviceResult> r;
      if (posted[i]) r = workers_[i]->wait(until, ctx.cancelled);
      if (!r) {
        r = DeviceResult{};
        r->sample.index = i;
        r->sample.up = false;
        r->sample.errors = {"device_stuck"};
      }
      if (r->handle_rc == nvml::kSuccess || !r->sample.up)
        no_handle_anywhere = false;
      else
        handle_rc = r->handle_rc;
      DeviceSample& s = r->sample;
      // A device lost (or stuck) before its identity was read this cycle,
      // or one whose identity read failed, keeps the identity it had: its
      // series stay the same series.
      DeviceSample fresh;
      copy_identity(s, fresh);
      copy_identity(workers_[i]->identity(), s);
      merge_identity(fresh, s);
      s.vendor = "nvidia";
      s.driver_version = session->driver_version;
      if (xid_) s.xid_errors = xid_->counts(s.uuid);
      note_device_state(s);
      out.push_back(std::move(s));
    }
    if (xid_ && xid_->take_wait_failures() > 0 && !out.empty())
      out.front().errors.emplace_back("xid_wait_error");
    if (no_handle_anywhere)
      drop_session("no GPU gives a handle (" + session->error(handle_rc) +
                   "); NVML is initialised again");
    return out;
  }

 private:
  // The loaded session, loading it if due. Null: no library or no driver
  // (not an error). Throws CollectError when the library is unusable.
  std::shared_ptr<const Session> ensure_session() {
    if (session_) return session_;
    const auto now = Clock::now();
    if (attempted_ && now < next_attempt_) {
      if (load_error_) throw *load_error_;
      return nullptr;
    }
    attempted_ = true;
    next_attempt_ = now + retry_interval_;
    load_error_.reset();
    try {
      session_ = open_session();
    } catch (const CollectError& e) {
      load_error_ = e;
      log_load_state(spdlog::level::err, e.what());
      throw;
    }
    if (session_) {
      log_load_state(spdlog::level::info,
                     "nvml: " + library_ + " loaded, driver " + session_->driver_version);
      // The NVLink role leaves XIDs to the accelerator collector.
      if (!nvlink_only_) {
        if (XidWatcher::supported(session_->api))
          xid_ = std::make_unique<XidWatcher>(session_);
        else
          spdlog::info("nvml: {} has no event API; XID errors are not counted", library_);
      }
    }
    return session_;
  }

  std::shared_ptr<Session> open_session() {
    dlerror();  // clears any stale message
    DlHandle lib(dlopen(library_.c_str(), RTLD_NOW | RTLD_LOCAL));
    if (!lib) {
      const char* err = dlerror();
      std::error_code ec;
      // A file that exists but does not load (wrong architecture, missing
      // dependency) is worth a warning; no library at all is a CPU node.
      const bool exists =
          library_.find('/') != std::string::npos && std::filesystem::exists(library_, ec);
      log_load_state(exists ? spdlog::level::warn : spdlog::level::info,
                     "nvml: cannot load " + library_ + " (" + (err != nullptr ? err : "?") +
                         "); no NVIDIA devices, retrying once a minute");
      return nullptr;
    }
    auto s = std::make_shared<Session>();
    s->lib = std::move(lib);
    s->library = library_;
    s->nvlink_only = nvlink_only_;
    const std::vector<std::string> missing = resolve_all(s->lib.get(), s->api);
    if (!missing.empty()) {
      std::string names;
      for (const std::string& m : missing) names += (names.empty() ? "" : ", ") + m;
      throw CollectError("library_error", library_ + ": missing symbol " + names);
    }
    const nvml::Return rc = s->api.init();
    if (rc == nvml::kErrorDriverNotLoaded) {
      log_load_state(spdlog::level::info,
                     "nvml: " + library_ + " loaded but the NVIDIA driver is not (" + s->error(rc) +
                         "); no NVIDIA devices, retrying once a minute");
      return nullptr;
    }
    if (rc != nvml::kSuccess)
      throw CollectError("library_error", library_ + ": nvmlInit failed: " + s->error(rc));
    s->initialized = true;
    if (s->api.system_get_driver_version != nullptr) {
      std::array<char, nvml::kDriverVersionBufferSize> buf{};
      if (s->api.system_get_driver_version(buf.data(), buf.size()) == nvml::kSuccess)
        s->driver_version = c_string(buf.data(), buf.size());
    }
    // Once per session: the count does not change while the driver stays
    // loaded, and the call can hang while a wedged GPU holds the driver
    // lock. A failure (a driver being reloaded) drops the session (`s`
    // shuts NVML down) and is retried like a failed load.
    const nvml::Return count_rc = s->api.device_get_count(&s->device_count);
    if (count_rc != nvml::kSuccess)
      throw CollectError("nvml_error",
                         library_ + ": nvmlDeviceGetCount failed: " + s->error(count_rc));
    return s;
  }

  // Drops the session after a failure that only a new nvmlInit can cure:
  // the XID thread is stopped, the device threads release their reference
  // when their query returns (the last owner runs nvmlShutdown), and the
  // library is opened again after the retry interval. Until then sample()
  // fails with `why`.
  void drop_session(const std::string& why) {
    xid_.reset();
    session_.reset();
    attempted_ = true;
    next_attempt_ = Clock::now() + retry_interval_;
    load_error_ = CollectError("nvml_error", library_ + ": " + why);
    log_load_state(spdlog::level::warn, std::string("nvml: ") + load_error_->what());
  }

  // Logs the library's state when it changes, not once a minute.
  void log_load_state(spdlog::level::level_enum level, const std::string& message) {
    if (message == last_load_message_) return;
    last_load_message_ = message;
    spdlog::log(level, "{}", message);
  }

  // Logs a device going lost, stuck or needing a reset, and coming back,
  // once per change (the metric shows it every cycle).
  void note_device_state(const DeviceSample& d) {
    std::string state = d.up ? "" : (d.errors.empty() ? "nvml_error" : d.errors.front());
    if (device_state_.size() <= d.index) device_state_.resize(d.index + 1);
    std::string& last = device_state_[d.index];
    if (state == last) return;
    if (state.empty())
      spdlog::info("nvml: GPU {} ({}) answers again", d.index, d.uuid);
    else if (state == "device_stuck")
      spdlog::warn("nvml: GPU {} ({}) is stuck in a driver call; not queried until it returns",
                   d.index, d.uuid);
    else
      spdlog::warn("nvml: GPU {} ({}) is down: {}", d.index, d.uuid, state);
    last = std::move(state);
  }

  std::string library_;
  Clock::duration retry_interval_;
  bool nvlink_only_;
  std::shared_ptr<const Session> session_;
  bool attempted_ = false;
  Clock::time_point next_attempt_{};
  std::optional<CollectError> load_error_;
  std::string last_load_message_;
  std::vector<std::unique_ptr<DeviceWorker>> workers_;  // by device index
  std::unique_ptr<XidWatcher> xid_;
  std::vector<std::string> device_state_;  // by device index: "" up, else the reason
};

}  // namespace

std::string normalize_pci_bus_id(std::string_view bus_id) {
  // Splits "[domain:]bus:device.function" and checks each part is hex.
  auto hex = [](std::string_view s, unsigned long long max, unsigned long long* out) {
    if (s.empty() || s.size() > 16) return false;
    unsigned long long v = 0;
    for (char c : s) {
      int digit = (c >= '0' && c <= '9')   ? c - '0'
                  : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                  : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                           : -1;
      if (digit < 0) return false;
      v = v * 16 + static_cast<unsigned>(digit);
    }
    *out = v;
    return v <= max;
  };
  while (!bus_id.empty() && (bus_id.back() == ' ' || bus_id.back() == '\n'))
    bus_id.remove_suffix(1);
  const std::size_t dot = bus_id.rfind('.');
  const std::size_t last_colon = bus_id.rfind(':');
  if (dot == std::string_view::npos || last_colon == std::string_view::npos || dot < last_colon)
    return {};
  const std::size_t first_colon = bus_id.find(':');
  unsigned long long domain = 0, bus = 0, device = 0, function = 0;
  if (first_colon != last_colon && !hex(bus_id.substr(0, first_colon), 0xffffffff, &domain))
    return {};
  const std::size_t bus_start = first_colon == last_colon ? 0 : first_colon + 1;
  if (!hex(bus_id.substr(bus_start, last_colon - bus_start), 0xff, &bus) ||
      !hex(bus_id.substr(last_colon + 1, dot - last_colon - 1), 0x1f, &device) ||
      !hex(bus_id.substr(dot + 1), 0x7, &function))
    return {};
  std::array<char, 32> buf{};
  std::snprintf(buf.data(), buf.size(), "%04llx:%02llx:%02llx.%llx", domain, bus, device, function);
  return buf.data();
}

std::optional<double> field_value_as_double(const nvml::FieldValue& v) {
  switch (v.value_type) {
    case nvml::kValueTypeDouble: return v.value.d_val;
    case nvml::kValueTypeUnsignedInt: return v.value.ui_val;
    case nvml::kValueTypeUnsignedLong: return static_cast<double>(v.value.ul_val);
    case nvml::kValueTypeUnsignedLongLong: return static_cast<double>(v.value.ull_val);
    case nvml::kValueTypeSignedLongLong: return static_cast<double>(v.value.sll_val);
    case nvml::kValueTypeSignedInt: return v.value.si_val;
    case nvml::kValueTypeUnsignedShort: return v.value.us_val;
    default: return std::nullopt;
  }
}

std::span<const NvmlThrottleReason> nvml_throttle_reasons() {
  static constexpr std::array<NvmlThrottleReason, 9> kReasons = {{
      {nvml::kClocksEventGpuIdle, "gpu_idle"},
      {nvml::kClocksEventApplicationsClocksSetting, "applications_clocks_setting"},
      {nvml::kClocksEventSwPowerCap, "sw_power_cap"},
      {nvml::kClocksEventHwSlowdown, "hw_slowdown"},
      {nvml::kClocksEventSyncBoost, "sync_boost"},
      {nvml::kClocksEventSwThermalSlowdown, "sw_thermal"},
      {nvml::kClocksEventHwThermalSlowdown, "hw_thermal"},
      {nvml::kClocksEventHwPowerBrakeSlowdown, "hw_power_brake"},
      {nvml::kClocksEventDisplayClockSetting, "display_clock_setting"},
  }};
  return kReasons;
}

std::unique_ptr<Backend> make_nvml_backend(const std::string& library,
                                           const NvmlBackendOptions& options) {
  return std::make_unique<NvmlBackend>(library, options);
}

std::unique_ptr<Backend> make_nvml_backend(const std::string& library) {
  return make_nvml_backend(library, NvmlBackendOptions{});
}

}  // namespace nodewatch::accelerator
