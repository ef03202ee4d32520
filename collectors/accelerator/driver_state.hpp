#pragma once
// Whether each vendor's accelerator driver answers: the facts behind
// nodewatch_accelerator_driver_{up,info,devices}. A driver that failed to
// load (a DKMS build that failed after a kernel upgrade; a library and a
// kernel module of different versions after an upgrade without a reboot)
// leaves its GPUs on the PCI bus and no device in the vendor's library:
// without these a node with its GPUs unusable looks like a CPU node.

#include <string>
#include <string_view>
#include <vector>

#include "nodewatch/sources/fs.hpp"

namespace nodewatch::accelerator {

// What a backend says of its vendor's driver after a collection.
struct DriverState {
  std::string vendor;  // the `vendor` label: "nvidia", "amd"
  // False: nothing to say (the library is not installed and no device of
  // the vendor is on the bus: a node without that vendor).
  bool known = false;
  bool up = false;
  // "ok", or why not: library_missing, library_broken, not_loaded,
  // version_mismatch, no_permission, init_failed (NVIDIA); not_bound (a
  // device no driver, or another one, holds).
  std::string state;
  std::string library_version;  // the user-space library's, "" where not read
  std::string module_version;   // the kernel module's, "" where not loaded or not said
  int devices = 0;              // accelerator PCI functions of the vendor for the host
};

// One accelerator-class PCI function (class 0x0300 VGA, 0x0302 3D, 0x0380
// other display) of a vendor, and the driver bound to it ("" none).
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
  std::vector<std::string> listing_;
  std::vector<std::string> matching_;  // addresses of the vendor's accelerator functions
  bool read_ = false;
  std::vector<PciFunction> functions_;
};

// <sysfs>/module/<name>/version, trimmed; "" when the module is not
// loaded or says no version (an in-tree amdgpu).
std::string module_version(const sources::FsRoot& sys, std::string_view name);

// nvmlInit's answer as a `state`: 9 not_loaded, 18 version_mismatch, 4
// no_permission, anything else init_failed.
std::string_view nvml_init_state(int rc);

// "12.535.261.03" (nvmlSystemGetNVMLVersion: CUDA's major version, then
// the driver's) -> "535.261.03"; "" for anything else.
std::string driver_version_of_nvml(std::string_view nvml_version);

}  // namespace nodewatch::accelerator
