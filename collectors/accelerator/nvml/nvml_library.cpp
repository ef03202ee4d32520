#include "accelerator/nvml/nvml_library.hpp"

#include <dlfcn.h>

#include <array>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <string>
#include <system_error>
#include <vector>

#include "accelerator/driver_state.hpp"
#include "accelerator/nvml/nvml_fields.hpp"
#include "nodewatch/collector.hpp"
#include "nodewatch/metric.hpp"

namespace nodewatch::accelerator {
namespace {

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
std::vector<std::string> resolve_all(void* lib, NvmlApi& a) {
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
  resolve(lib, a.device_get_vbios_version, {"nvmlDeviceGetVbiosVersion"});
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
  resolve(lib, a.device_get_margin_temperature, {"nvmlDeviceGetMarginTemperature"});
  resolve(lib, a.device_get_repair_status, {"nvmlDeviceGetRepairStatus"});
  resolve(lib, a.device_get_unrepairable_memory_flag, {"nvmlDeviceGetUnrepairableMemoryFlag_v1"});
  resolve(lib, a.device_get_platform_info, {"nvmlDeviceGetPlatformInfo"});
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
  resolve(lib, a.device_get_curr_pcie_link_generation, {"nvmlDeviceGetCurrPcieLinkGeneration"});
  resolve(lib, a.device_get_curr_pcie_link_width, {"nvmlDeviceGetCurrPcieLinkWidth"});
  resolve(lib, a.device_get_pcie_throughput, {"nvmlDeviceGetPcieThroughput"});
  resolve(lib, a.device_get_field_values, {"nvmlDeviceGetFieldValues"});
  resolve(lib, a.device_get_nvlink_state, {"nvmlDeviceGetNvLinkState"});
  resolve(lib, a.device_get_nvlink_error_counter, {"nvmlDeviceGetNvLinkErrorCounter"});
  resolve(lib, a.event_set_create, {"nvmlEventSetCreate"});
  resolve(lib, a.device_register_events, {"nvmlDeviceRegisterEvents"});
  resolve(lib, a.event_set_wait, {"nvmlEventSetWait_v2", "nvmlEventSetWait"});
  resolve(lib, a.event_set_free, {"nvmlEventSetFree"});
  resolve(lib, a.system_get_nvml_version, {"nvmlSystemGetNVMLVersion"});
  resolve(lib, a.gpm_query_device_support, {"nvmlGpmQueryDeviceSupport"});
  resolve(lib, a.gpm_sample_alloc, {"nvmlGpmSampleAlloc"});
  resolve(lib, a.gpm_sample_free, {"nvmlGpmSampleFree"});
  resolve(lib, a.gpm_sample_get, {"nvmlGpmSampleGet"});
  resolve(lib, a.gpm_mig_sample_get, {"nvmlGpmMigSampleGet"});
  resolve(lib, a.gpm_metrics_get, {"nvmlGpmMetricsGet"});
  resolve(lib, a.device_get_mig_mode, {"nvmlDeviceGetMigMode"});
  resolve(lib, a.device_get_max_mig_device_count, {"nvmlDeviceGetMaxMigDeviceCount"});
  resolve(lib, a.device_get_mig_device_handle_by_index, {"nvmlDeviceGetMigDeviceHandleByIndex"});
  resolve(lib, a.device_get_gpu_instance_id, {"nvmlDeviceGetGpuInstanceId"});
  resolve(lib, a.device_get_gpu_fabric_info_v, {"nvmlDeviceGetGpuFabricInfoV"});
  resolve(lib, a.device_read_prm_counters, {"nvmlDeviceReadPRMCounters_v1"});
  resolve(lib, a.device_get_p2p_status, {"nvmlDeviceGetP2PStatus"});
  const char* processes =
      resolve(lib, a.device_get_compute_running_processes,
              {"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2",
               "nvmlDeviceGetComputeRunningProcesses"});
  a.processes_v1 =
      processes != nullptr && std::strcmp(processes, "nvmlDeviceGetComputeRunningProcesses") == 0;
  resolve(lib, a.device_get_compute_running_processes_v2,
          {"nvmlDeviceGetComputeRunningProcesses_v2"});
  return missing;
}

}  // namespace

void NvmlSession::DlClose::operator()(void* handle) const {
  dlclose(handle);
}

NvmlSession::~NvmlSession() {
  if (initialized_) api_.shutdown();
}

std::string NvmlSession::error(nvml::Return rc) const {
  const char* text = api_.error_string != nullptr ? api_.error_string(rc) : nullptr;
  return std::string(text != nullptr ? text : "NVML error") + " (" + std::to_string(rc) + ")";
}

NvmlSession::Opened NvmlSession::open(const std::string& library) {
  Opened out;
  dlerror();  // clears any stale message
  std::unique_ptr<void, DlClose> lib(dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL));
  if (!lib) {
    const char* err = dlerror();
    std::error_code ec;
    // A file that exists but does not load (wrong architecture, missing
    // dependency) is worth a warning; no library at all is a CPU node.
    out.warn = library.find('/') != std::string::npos && std::filesystem::exists(library, ec);
    out.state = out.warn ? "library_broken" : "library_missing";
    out.message = "nvml: cannot load " + library + " (" + (err != nullptr ? err : "?") +
                  "); no NVIDIA devices, retrying once a minute";
    return out;
  }
  auto s = std::make_shared<NvmlSession>(Key{});
  s->lib_ = std::move(lib);
  s->library_ = library;
  const std::vector<std::string> missing = resolve_all(s->lib_.get(), s->api_);
  if (!missing.empty()) {
    std::string names;
    for (const std::string& m : missing) names += (names.empty() ? "" : ", ") + m;
    throw CollectError("library_error", library + ": missing symbol " + names);
  }
  // The library's own version answers before nvmlInit (NVIDIA's 535, 550
  // and 555 do): what is installed, whether or not the driver answers.
  auto read_nvml_version = [&] {
    if (s->api_.system_get_nvml_version == nullptr) return;
    std::array<char, nvml::kNvmlVersionBufferSize> buf{};
    if (s->api_.system_get_nvml_version(buf.data(), buf.size()) == nvml::kSuccess)
      s->nvml_version_ = nvml_c_string(buf.data(), buf.size());
  };
  read_nvml_version();
  out.library_version = driver_version_of_nvml(s->nvml_version_);
  const nvml::Return rc = s->api_.init();
  if (rc != nvml::kSuccess) {
    // The driver does not answer: not loaded (9: no NVIDIA GPU, or a
    // module that failed to build or load), another version than the
    // library's (18: upgraded without a reboot), no permission on the
    // device nodes (4). The collector says which (driver_state); an NVIDIA
    // GPU on the bus makes it the node's problem.
    out.state = std::string(nvml_init_state(rc));
    out.warn = rc != nvml::kErrorDriverNotLoaded;
    out.message = "nvml: " + library + " loaded but the NVIDIA driver does not answer (" +
                  s->error(rc) + "); no NVIDIA devices, retrying once a minute";
    return out;
  }
  s->initialized_ = true;
  if (s->api_.system_get_driver_version != nullptr) {
    std::array<char, nvml::kDriverVersionBufferSize> buf{};
    if (s->api_.system_get_driver_version(buf.data(), buf.size()) == nvml::kSuccess)
      s->driver_version_ = nvml_c_string(buf.data(), buf.size());
  }
  if (s->nvml_version_.empty()) read_nvml_version();
  out.state = "ok";
  out.library_version = driver_version_of_nvml(s->nvml_version_);
  if (out.library_version.empty()) out.library_version = s->driver_version_;
  s->driver_branch_ = nvml_driver_branch(s->nvml_version_, s->driver_version_);
  // A failure here (a driver being reloaded) drops the session: `s` shuts
  // NVML down on the way out, and the open is retried like a failed load.
  const nvml::Return count_rc = s->api_.device_get_count(&s->device_count_);
  if (count_rc != nvml::kSuccess)
    throw CollectError("nvml_error",
                       library + ": nvmlDeviceGetCount failed: " + s->error(count_rc));
  out.session = std::move(s);
  return out;
}

std::string nvml_c_string(const char* buf, std::size_t size) {
  std::string s(buf, strnlen(buf, size));
  if (!is_valid_utf8(s))
    for (char& c : s)
      if (static_cast<unsigned char>(c) >= 0x80) c = '?';
  return s;
}

}  // namespace nodewatch::accelerator
