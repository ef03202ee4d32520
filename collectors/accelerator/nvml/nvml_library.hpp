#pragma once
// NVML loaded with dlopen at run time: the resolved function table and one
// initialised session of it (no NVIDIA header or library at build time; the
// ABI is declared in nvml_api.hpp). Part of the NVML service
// (nvml_service.hpp), which is the only caller.
//
// Symbols. Required (nothing can name or reach a device without them, and
// every NVML release since the first has them): nvmlInit_v2 or nvmlInit,
// nvmlShutdown, nvmlErrorString, nvmlDeviceGetCount_v2 or
// nvmlDeviceGetCount, nvmlDeviceGetHandleByIndex_v2 or
// nvmlDeviceGetHandleByIndex, nvmlDeviceGetUUID (the `uuid` label). Every
// other symbol is optional: when it is missing, the values it gives are
// simply absent. Versioned names are tried newest first.

#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "accelerator/nvml/nvml_api.hpp"

namespace nodewatch::accelerator {

// The resolved function table. Null: the library lacks that symbol.
struct NvmlApi {
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
  nvml::DeviceGetStringFn device_get_vbios_version = nullptr;
  nvml::DeviceGetPciInfoFn device_get_pci_info = nullptr;
  bool pci_info_v1 = false;  // only nvmlDeviceGetPciInfo: read bus_id_legacy, not bus_id
  nvml::DeviceGetUtilizationFn device_get_utilization_rates = nullptr;
  nvml::DeviceGetMemoryInfoV2Fn device_get_memory_info_v2 = nullptr;
  nvml::DeviceGetMemoryInfoFn device_get_memory_info = nullptr;
  nvml::DeviceGetTemperatureVFn device_get_temperature_v = nullptr;
  nvml::DeviceGetMarginTemperatureFn device_get_margin_temperature = nullptr;             // 12.8 on
  nvml::DeviceGetRepairStatusFn device_get_repair_status = nullptr;                       // 13.0 on
  nvml::DeviceGetUnrepairableMemoryFlagFn device_get_unrepairable_memory_flag = nullptr;  // 13.1 on
  nvml::DeviceGetPlatformInfoFn device_get_platform_info = nullptr;                       // 12.8 on
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
  nvml::DeviceGetUintFn device_get_curr_pcie_link_generation = nullptr;
  nvml::DeviceGetUintFn device_get_curr_pcie_link_width = nullptr;
  nvml::DeviceGetPcieThroughputFn device_get_pcie_throughput = nullptr;
  nvml::DeviceGetFieldValuesFn device_get_field_values = nullptr;
  nvml::DeviceGetNvLinkStateFn device_get_nvlink_state = nullptr;
  nvml::DeviceGetNvLinkErrorCounterFn device_get_nvlink_error_counter = nullptr;
  nvml::EventSetCreateFn event_set_create = nullptr;
  nvml::DeviceRegisterEventsFn device_register_events = nullptr;
  nvml::EventSetWaitFn event_set_wait = nullptr;
  nvml::EventSetFreeFn event_set_free = nullptr;
  nvml::SystemGetNvmlVersionFn system_get_nvml_version = nullptr;
  // GPM.
  nvml::GpmQueryDeviceSupportFn gpm_query_device_support = nullptr;
  nvml::GpmSampleAllocFn gpm_sample_alloc = nullptr;
  nvml::GpmSampleFreeFn gpm_sample_free = nullptr;
  nvml::GpmSampleGetFn gpm_sample_get = nullptr;
  nvml::GpmMigSampleGetFn gpm_mig_sample_get = nullptr;
  nvml::GpmMetricsGetFn gpm_metrics_get = nullptr;
  // MIG.
  nvml::DeviceGetMigModeFn device_get_mig_mode = nullptr;
  nvml::DeviceGetMaxMigDeviceCountFn device_get_max_mig_device_count = nullptr;
  nvml::DeviceGetMigDeviceHandleByIndexFn device_get_mig_device_handle_by_index = nullptr;
  nvml::DeviceGetGpuInstanceIdFn device_get_gpu_instance_id = nullptr;
  // NVLink fabric.
  nvml::DeviceGetGpuFabricInfoVFn device_get_gpu_fabric_info_v = nullptr;
  nvml::DeviceReadPrmCountersFn device_read_prm_counters = nullptr;  // 13.1 on
  nvml::DeviceGetP2pStatusFn device_get_p2p_status = nullptr;
  // Running compute processes; `processes_v1`: only the first version,
  // which fills ProcessInfoV1. `_v2` besides, for the drivers whose `_v3`
  // fills a larger struct (nvml_queries.cpp, read_process_list).
  nvml::DeviceGetProcessesFn device_get_compute_running_processes = nullptr;
  nvml::DeviceGetProcessesFn device_get_compute_running_processes_v2 = nullptr;
  bool processes_v1 = false;

  bool has_events() const {
    return event_set_create != nullptr && device_register_events != nullptr &&
           event_set_wait != nullptr && event_set_free != nullptr;
  }
  bool has_gpm() const {
    return gpm_query_device_support != nullptr && gpm_sample_alloc != nullptr &&
           gpm_sample_free != nullptr && gpm_sample_get != nullptr && gpm_metrics_get != nullptr;
  }
};

// One loaded and initialised NVML, shared by every thread that calls it
// through a shared_ptr. The last owner calls nvmlShutdown and then dlclose.
// That is what makes it safe to detach a thread that is stuck in the driver:
// the thread owns the session it calls (hence the library's code and NVML's
// own state), and cleans up after itself if its call ever returns.
class NvmlSession : public std::enable_shared_from_this<NvmlSession> {
  struct Key {};  // only open() makes sessions

 public:
  explicit NvmlSession(Key) {}
  NvmlSession(const NvmlSession&) = delete;
  NvmlSession& operator=(const NvmlSession&) = delete;
  ~NvmlSession();

  const NvmlApi& api() const { return api_; }
  const std::string& library() const { return library_; }  // as configured, for messages
  const std::string& driver_version() const { return driver_version_; }
  // nvmlSystemGetNVMLVersion ("13.590.44.01"); empty when the library
  // has no such call or it failed.
  const std::string& nvml_version() const { return nvml_version_; }
  // The driver branch (590), from the two versions (nvml_fields.hpp);
  // empty when neither says, and then the fields whose id depends on the
  // branch are not asked.
  std::optional<unsigned> driver_branch() const { return driver_branch_; }
  // Read once, right after nvmlInit: the count does not change while the
  // driver stays loaded, and the call can hang while a wedged GPU holds the
  // driver lock, so it is not asked every cycle.
  unsigned device_count() const { return device_count_; }

  // "Driver Not Loaded (9)".
  std::string error(nvml::Return rc) const;

  // What open() found.
  struct Opened {
    std::shared_ptr<const NvmlSession> session;  // null: no library or no driver
    std::string message;                         // why not, when null
    bool warn = false;  // a library that exists but does not load: worth a warning
    // The driver's state as driver_state.hpp names it ("ok", or
    // library_missing, library_broken, or nvmlInit's answer), and the
    // library's version ("535.261.03", "" where it does not say).
    std::string state;
    std::string library_version;
  };
  // dlopen, dlsym, nvmlSystemGetNVMLVersion, nvmlInit,
  // nvmlSystemGetDriverVersion, nvmlDeviceGetCount. No library, or an
  // nvmlInit that fails: an Opened without a session, with the state (a
  // CPU node is not an error; a driver that does not answer is said
  // through the state). Throws CollectError "library_error" for a library
  // that lacks a required symbol, and "nvml_error" when nvmlDeviceGetCount
  // fails (a driver being reloaded; the half-open session is shut down).
  static Opened open(const std::string& library);

 private:
  struct DlClose {
    void operator()(void* handle) const;
  };
  // Destruction order is the point: the destructor's body calls
  // nvmlShutdown, then `lib_` closes the library.
  std::unique_ptr<void, DlClose> lib_;
  NvmlApi api_;
  std::string library_;
  std::string driver_version_;
  std::string nvml_version_;
  std::optional<unsigned> driver_branch_;
  unsigned device_count_ = 0;
  bool initialized_ = false;
};

// A C string from a fixed NVML buffer that may lack its NUL, made safe as a
// label value: bytes that are not valid UTF-8 become '?'.
std::string nvml_c_string(const char* buf, std::size_t size);

}  // namespace nodewatch::accelerator
