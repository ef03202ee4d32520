#include "accelerator/dra.hpp"

#include <charconv>
#include <cstddef>

namespace nodewatch::accelerator::dra {
namespace {

// A decimal number of at most 6 digits that is all of `s`.
std::optional<unsigned> number(std::string_view s) {
  if (s.empty() || s.size() > 6) return std::nullopt;
  unsigned v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

// A Kubernetes UID: 8-4-4-4-12 hex digits.
bool is_uid(std::string_view s) {
  if (s.size() != 36) return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? c != '-'
             : !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')))
      return false;
  }
  return true;
}

}  // namespace

std::optional<GpuRef> gpu_of(std::string_view driver, std::string_view device) {
  constexpr std::string_view kGpu = "gpu-";
  if (!device.starts_with(kGpu)) return std::nullopt;
  device.remove_prefix(kGpu.size());
  const std::size_t dash = device.find('-');
  const std::optional<unsigned> n = number(device.substr(0, dash));
  if (!n) return std::nullopt;
  const std::string_view rest =
      dash == std::string_view::npos ? std::string_view{} : device.substr(dash + 1);
  if (driver == kNvidiaDriver) {
    if (dash == std::string_view::npos) return GpuRef{"nvidia", *n, false};
    if (rest.starts_with("mig-") && rest.size() > 4) return GpuRef{"nvidia", *n, true};
    return std::nullopt;
  }
  if (driver == kAmdDriver) {
    // The render node's number is the card's own; only the card is matched.
    if (!number(rest)) return std::nullopt;
    return GpuRef{"amd", *n, false};
  }
  return std::nullopt;
}

std::optional<std::pair<std::string, std::string>> from_cdi_name(std::string_view cdi) {
  const std::size_t slash = cdi.find('/');
  const std::size_t eq = cdi.find('=');
  if (slash == std::string_view::npos || eq == std::string_view::npos || eq < slash)
    return std::nullopt;
  const std::string_view vendor = cdi.substr(0, slash);
  std::string_view name = cdi.substr(eq + 1);
  std::string driver;
  if (vendor == "k8s.gpu.nvidia.com")
    driver = kNvidiaDriver;
  else if (vendor == "k8s.gpu.amd.com")
    driver = kAmdDriver;
  else
    return std::nullopt;
  // A claim's own CDI device: "<claim UID>-<device>".
  if (name.size() > 37 && is_uid(name.substr(0, 36)) && name[36] == '-') name.remove_prefix(37);
  if (!gpu_of(driver, name)) return std::nullopt;
  return std::make_pair(driver, std::string(name));
}

std::optional<unsigned> nvidia_device_minor(std::string_view information) {
  constexpr std::string_view kKey = "Device Minor:";
  for (std::size_t pos = 0; pos < information.size();) {
    std::size_t eol = information.find('\n', pos);
    if (eol == std::string_view::npos) eol = information.size();
    std::string_view line = information.substr(pos, eol - pos);
    pos = eol + 1;
    if (!line.starts_with(kKey)) continue;
    line.remove_prefix(kKey.size());
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    while (!line.empty() && (line.back() == ' ' || line.back() == '\t' || line.back() == '\r'))
      line.remove_suffix(1);
    return number(line);
  }
  return std::nullopt;
}

}  // namespace nodewatch::accelerator::dra
