#include "accelerator/driver_state.hpp"

#include <algorithm>

#include "nodewatch/text.hpp"
#include "pcie/pcie_parse.hpp"

namespace nodewatch::accelerator {
namespace {

constexpr std::string_view kDevices = "bus/pci/devices";

bool accelerator_class(std::uint32_t pci_class) {
  const std::uint32_t sub = pci_class >> 8;
  return sub == 0x0300 || sub == 0x0302 || sub == 0x0380 || (pci_class >> 16) == 0x12;
}

bool gone(const sources::Read& r) {
  return r.status == sources::Status::kAbsent || r.status == sources::Status::kGone;
}

// "../../../bus/pci/drivers/nvidia" -> "nvidia".
std::string last_component(std::string_view path) {
  const std::size_t slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

}  // namespace

const std::vector<PciFunction>& PciFunctions::read(const sources::FsRoot& sys) {
  sources::Listing list = sys.list(kDevices);
  if (!read_ || list.names != listing_) {
    matching_.clear();
    // A function whose files could not be read (not gone: a device being
    // added) is looked at again next time.
    bool complete = true;
    for (const std::string& bdf : list.names) {
      const std::string dir = std::string(kDevices) + "/" + bdf;
      const sources::Read vendor = sys.read(dir + "/vendor");
      if (!vendor.ok()) {
        complete = complete && gone(vendor);
        continue;
      }
      if (text::trim(vendor.value()) != vendor_id_) continue;
      const sources::Read cls = sys.read(dir + "/class");
      const std::optional<std::uint32_t> c =
          cls.ok() ? pcie::parse_pci_class(cls.value()) : std::nullopt;
      if (!cls.ok()) complete = complete && gone(cls);
      if (c && accelerator_class(*c)) matching_.push_back(bdf);
    }
    listing_ = complete ? std::move(list.names) : std::vector<std::string>{};
    read_ = complete;
  }
  functions_.clear();
  for (const std::string& bdf : matching_) {
    const sources::Read link = sys.readlink(std::string(kDevices) + "/" + bdf + "/driver");
    std::string driver = link.ok() ? last_component(text::trim(link.value())) : std::string();
    if (driver == "vfio-pci" || driver == "pci-stub") continue;
    functions_.push_back({bdf, std::move(driver)});
  }
  return functions_;
}

std::optional<std::string> module_version(const sources::FsRoot& sys, std::string_view name) {
  const sources::Read v = sys.read("module/" + std::string(name) + "/version");
  if (v.ok()) return std::string(text::trim(v.value()));
  if (gone(v)) return std::string();
  return std::nullopt;
}

std::string_view nvml_init_state(int rc) {
  switch (rc) {
    case 9: return "not_loaded";
    case 18: return "version_mismatch";
    case 4: return "no_permission";
    default: return "init_failed";
  }
}

std::string driver_version_of_nvml(std::string_view nvml_version) {
  const std::size_t dot = nvml_version.find('.');
  if (dot == std::string_view::npos || dot == 0) return {};
  const std::string_view rest = nvml_version.substr(dot + 1);
  if (rest.empty() || !std::all_of(rest.begin(), rest.end(),
                                   [](char c) { return (c >= '0' && c <= '9') || c == '.'; }))
    return {};
  return std::string(rest);
}

}  // namespace nodewatch::accelerator
