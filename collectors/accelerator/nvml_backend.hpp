#pragma once
// The NVML backend's pure helpers, exposed for tests. The backend itself is
// reached through make_nvml_backend() (backend.hpp).

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "accelerator/backend.hpp"
#include "accelerator/nvml_api.hpp"

namespace nodewatch::accelerator {

// Tuning of the NVML backend. make_nvml_backend(library) uses the defaults;
// tests shorten the intervals.
struct NvmlBackendOptions {
  // How often an absent or unusable library or driver, or an NVML session
  // dropped after a failure (a driver reload), is tried again.
  std::chrono::steady_clock::duration retry_interval = std::chrono::minutes(1);
  // The NVLink role (used by the interconnect collector): each device's
  // sample holds only its identity and its NVLink links; no XID thread.
  // The default role reads everything else and no NVLink.
  bool nvlink_only = false;
};
std::unique_ptr<Backend> make_nvml_backend(const std::string& library,
                                           const NvmlBackendOptions& options);

// NVML's PCI bus id in the form sysfs and the pcie collector use: domain of
// at least 4 hex digits, lower case. "00000000:1A:00.0" -> "0000:1a:00.0",
// "0000:1A:00.0" -> "0000:1a:00.0", "1a:00.0" -> "0000:1a:00.0",
// "00010000:01:00.0" -> "10000:01:00.0" (a VMD domain). "" when `bus_id`
// is not a bus id.
std::string normalize_pci_bus_id(std::string_view bus_id);

// The value of one answered nvmlFieldValue_t, read through the union member
// its value_type names; nullopt for a type this code does not know.
std::optional<double> field_value_as_double(const nvml::FieldValue& v);

// Clock event (throttle) reasons: the bit in NVML's mask and the `reason`
// label it is exported under. Every label is emitted (0 or 1) whenever the
// mask could be read.
struct NvmlThrottleReason {
  unsigned long long bit;
  std::string_view label;
};
std::span<const NvmlThrottleReason> nvml_throttle_reasons();

}  // namespace nodewatch::accelerator
