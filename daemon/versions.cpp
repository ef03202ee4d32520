#include "versions.hpp"

#include <algorithm>
#include <set>

#include "accelerator/accelerator_metrics.hpp"
#include "bmc/bmc_metrics.hpp"
#include "daemon_metrics.hpp"
#include "interconnect/interconnect_metrics.hpp"
#include "nic/nic_metrics.hpp"

namespace nodewatch {

NodeVersions read_node_versions(const Roots& roots) {
  NodeVersions v;
  if (sources::Read r = roots.proc().read("sys/kernel/osrelease", 256); r.ok())
    v.kernel = std::string(r.value());
  if (sources::Read r = roots.sys().read("class/dmi/id/bios_version", 256); r.ok())
    v.bios = std::string(r.value());
  return v;
}

std::string_view collector_of_component(std::string_view component) {
  if (component == "bmc_firmware") return "bmc";
  if (component == "accelerator_driver" || component == "accelerator_vbios") return "accelerator";
  if (component == "nic_firmware") return "nic";
  if (component == "hca_firmware" || component == "rdma_core") return "interconnect";
  return "";
}

const FamilySet& version_families() {
  static const FamilySet kFamilies = family_set({
      families::kVersionInfo, bmc::families::kInfo, accelerator::families::kDriverInfo,
      accelerator::families::kInfo, nic::families::kInfo, interconnect::families::kPortInfo,
      interconnect::families::kVerbsLibraryInfo,
      bmc::families::kUp,  // the BMC's firmware is kept while it is silent (verdict.cpp)
  });
  return kFamilies;
}

std::vector<VersionFact> version_facts(const Samples& s, const NodeVersions& node,
                                       std::set<std::pair<std::string, std::string>>* unread) {
  std::set<VersionFact> out;
  auto add = [&](std::string_view component, std::string_view device, std::string_view version) {
    if (!version.empty())
      out.insert({std::string(component), std::string(device), std::string(version)});
    else if (unread != nullptr)
      unread->emplace(std::string(component), std::string(device));
  };
  for (const Sample& x : s.of(families::kVersionInfo))
    add(x.label("component"), x.label("device"), x.label("version"));
  add("kernel", "", node.kernel);
  add("bios", "", node.bios);
  for (const Sample& x : s.of(bmc::families::kInfo)) add("bmc_firmware", "", x.label("firmware"));
  for (const Sample& x : s.of(accelerator::families::kDriverInfo)) {
    std::string_view module = x.label("kernel_module_version");
    add("accelerator_driver", x.label("vendor"),
        module.empty() ? x.label("library_version") : module);
  }
  for (const Sample& x : s.of(accelerator::families::kInfo)) {
    std::string_view bus = x.label("pci_bus_id");
    add("accelerator_vbios", bus.empty() ? x.label("uuid") : bus, x.label("vbios"));
  }
  for (const Sample& x : s.of(nic::families::kInfo))
    add("nic_firmware", x.label("interface"), x.label("firmware"));
  for (const Sample& x : s.of(interconnect::families::kVerbsLibraryInfo))
    add("rdma_core", "", x.label("version"));
  for (const Sample& x : s.of(interconnect::families::kPortInfo))
    add("hca_firmware", x.label("device"), x.label("firmware"));
  return {out.begin(), out.end()};
}

}  // namespace nodewatch
