#pragma once
// Whether each vendor's accelerator driver answers: the facts behind
// nodewatch_accelerator_driver_{up,info,devices}. A driver that failed to
// load (a DKMS build that failed after a kernel upgrade; a library and a
// kernel module of different versions after an upgrade without a reboot)
// leaves its GPUs on the PCI bus and no device in the vendor's library:
// without these a node with its GPUs unusable looks like a CPU node.

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "nodewatch/sources/fs.hpp"

namespace nodewatch::accelerator {

// The states a vendor's driver can be in: nodewatch_accelerator_driver_state
// has one series for each, 1 for the one it is in (so that no series comes
// and goes as the state changes).
// NVIDIA: ok; nvmlInit's answers not_loaded (9), version_mismatch (18),
// no_permission (4), init_failed (any other); library_missing (no library,
// with GPUs on the bus), library_broken (a file that does not load, or
// lacks a symbol nodewatch needs), lost (the driver stopped answering a
// session).
inline constexpr std::string_view kNvidiaStates[] = {
    "ok",          "not_loaded",      "version_mismatch", "no_permission",
    "init_failed", "library_missing", "library_broken",   "lost"};
// AMD: ok, or not_bound (an AMD GPU that amdgpu does not hold).
inline constexpr std::string_view kAmdStates[] = {"ok", "not_bound"};

// What a backend says of its vendor's driver after a collection.
struct DriverState {
  std::string vendor;  // the `vendor` label: "nvidia", "amd"
  // False: nothing to say (the library is not installed and no device of
  // the vendor was ever on the bus: a node without that vendor). Once
  // true it stays so for the backend's life: the series do not vanish.
  bool known = false;
  bool up = false;
  std::string_view state;  // one of `states`
  std::span<const std::string_view> states;
  std::string library_version;  // the user-space library's, "" where not read
  std::string module_version;   // the kernel module's, "" where not loaded or not said
  int devices = 0;              // accelerator PCI functions of the vendor for the host
};

// One accelerator-class PCI function (class 0x0300 VGA, 0x0302 3D, 0x0380
// other display, or base class 0x12, processing accelerator: AMD's
// MI300) of a vendor, and the driver bound to it ("" none).
struct PciFunction {
  std::string address;
  std::string driver;
};

// The accelerator functions of one vendor ("0x10de", "0x1002") under
// <sysfs>/bus/pci/devices, read again only when the listing changes (a
// device added or removed, a rescan) or a driver is bound or unbound:
// each function's driver link is read each time, its class and vendor
// once. Functions handed to a virtual machine (bound to vfio-pci or
// pci-stub) are not the host's and are left out.
class PciFunctions {
 public:
  explicit PciFunctions(std::string vendor_id) : vendor_id_(std::move(vendor_id)) {}
  const std::vector<PciFunction>& read(const sources::FsRoot& sys);

 private:
  std::string vendor_id_;
  std::vector<std::string> listing_;   // empty after a function that could not be read
  std::vector<std::string> matching_;  // addresses of the vendor's accelerator functions
  bool read_ = false;
  std::vector<PciFunction> functions_;
};

// <sysfs>/module/<name>/version, trimmed; "" when the module is not
// loaded or says no version (an in-tree amdgpu); nullopt when it could not
// be read (the caller keeps what it last read, so that the info series
// does not change its labels on a failed read).
std::optional<std::string> module_version(const sources::FsRoot& sys, std::string_view name);

// nvmlInit's answer as a `state`: 9 not_loaded, 18 version_mismatch, 4
// no_permission, anything else init_failed.
std::string_view nvml_init_state(int rc);

// "12.535.261.03" (nvmlSystemGetNVMLVersion: CUDA's major version, then
// the driver's) -> "535.261.03"; "" for anything else.
std::string driver_version_of_nvml(std::string_view nvml_version);

}  // namespace nodewatch::accelerator
