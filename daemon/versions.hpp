#pragma once
// The versions a node runs, each as nodewatch_version_info{component,
// device, version}: what the deployment guide pins (the same environment on
// every node) and [expect.versions] compares.
//
//   kernel               ""         the kernel release (procfs sys/kernel/osrelease)
//   bios                 ""         DMI's bios_version (sysfs class/dmi/id)
//   bmc_firmware         ""         nodewatch_bmc_info's firmware
//   accelerator_driver   vendor     nodewatch_accelerator_driver_info: the kernel
//                                   module's version, else the library's
//   accelerator_vbios    PCI address  nodewatch_accelerator_info's vbios
//   nic_firmware         interface  nodewatch_nic_info's firmware
//   hca_firmware         device     nodewatch_interconnect_port_info's firmware
//   rdma_core            ""         nodewatch_interconnect_verbs_library_info
//
// The kernel's and the BIOS's are read once, when the daemon starts (they
// change only with a reboot); the others come from the collectors' own info
// series at each evaluation, so a version is one fact, read once.

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "nodewatch/collector.hpp"
#include "samples.hpp"

namespace nodewatch {

inline constexpr std::string_view kVersionComponents[] = {
    "kernel",       "bios",         "bmc_firmware", "accelerator_driver", "accelerator_vbios",
    "nic_firmware", "hca_firmware", "rdma_core"};

// What the daemon reads itself (empty where there is none: no DMI on most
// Arm servers' device trees, a fixture without it).
struct NodeVersions {
  std::string kernel;
  std::string bios;
  bool operator==(const NodeVersions&) const = default;
};
NodeVersions read_node_versions(const Roots& roots);

struct VersionFact {
  std::string component;
  std::string device;
  std::string version;
  auto key() const { return std::tie(component, device, version); }
  bool operator<(const VersionFact& o) const { return key() < o.key(); }
  bool operator==(const VersionFact& o) const { return key() == o.key(); }
};

// The collector whose series give `component`'s versions ("" for the
// daemon's own reads: kernel, bios).
std::string_view collector_of_component(std::string_view component);

// Every version the samples and `node` give, sorted, one per component and
// device. Samples of nodewatch_version_info itself (a running daemon's
// /metrics, for --learn-expected) are taken as they are.
// `unread`, when given, gets each (component, device) whose series is there
// with an empty version (a read that failed, the device still present).
std::vector<VersionFact> version_facts(
    const Samples& s, const NodeVersions& node,
    std::set<std::pair<std::string, std::string>>* unread = nullptr);
// The families version_facts() reads, and nodewatch_bmc_up (whether the
// BMC's firmware can be read now).
const FamilySet& version_families();

}  // namespace nodewatch
