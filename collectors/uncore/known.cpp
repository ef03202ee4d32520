#include "uncore/known.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "nodewatch/text.hpp"

namespace nodewatch::uncore {
namespace {

// "model\t\t: 106" -> "106".
std::string_view field(std::string_view line, std::string_view name) {
  if (!line.starts_with(name)) return {};
  const std::size_t colon = line.find(':');
  if (colon == std::string_view::npos) return {};
  if (text::trim(line.substr(0, colon)) != name) return {};
  return text::trim(line.substr(colon + 1));
}

int number(std::string_view s) {
  int v = -1;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && end == s.data() + s.size() ? v : -1;
}

// family 6 models whose IIO bandwidth counters count 32 bytes.
constexpr int k32ByteModels[] = {106, 108, 134, 143, 207};
constexpr double kFourBytesInMib = 3.814697266e-6;

}  // namespace

Cpu read_cpu(const sources::FsRoot& proc) {
  Cpu cpu;
  // The first processor's block is all that is needed, and the whole file
  // grows with the CPUs (some 1.5 KB each): its first 64 KiB.
  std::string head(64 * 1024, '\0');
  const int fd = ::open(proc.full("cpuinfo").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return cpu;
  std::size_t got = 0;
  while (got < head.size()) {
    const ssize_t n = ::read(fd, head.data() + got, head.size() - got);
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  ::close(fd);
  head.resize(got);
  std::string_view text = head;
  // The first processor's block: up to its blank line.
  while (!text.empty()) {
    const std::size_t nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    if (line.empty()) break;
    if (std::string_view v = field(line, "vendor_id"); !v.empty()) cpu.vendor = std::string(v);
    if (std::string_view v = field(line, "cpu family"); !v.empty()) cpu.family = number(v);
    if (std::string_view v = field(line, "model"); !v.empty()) cpu.model = number(v);
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
  return cpu;
}

std::optional<Correction> scale_correction(std::string_view pmu, std::string_view alias,
                                           double sysfs_scale, const Cpu& cpu) {
  if (!pmu.starts_with("uncore_iio_free_running")) return std::nullopt;
  if (!alias.starts_with("bw_in_port") && !alias.starts_with("bw_out_port")) return std::nullopt;
  if (cpu.vendor != "GenuineIntel" || cpu.family != 6) return std::nullopt;
  if (std::find(std::begin(k32ByteModels), std::end(k32ByteModels), cpu.model) ==
      std::end(k32ByteModels))
    return std::nullopt;
  if (std::fabs(sysfs_scale - kFourBytesInMib) > 1e-15) return std::nullopt;
  return Correction{8,
                    "the kernel scales this model's IIO bandwidth counters as 4 bytes a count; "
                    "they count 32 (fixed in Linux 6.15): corrected"};
}

}  // namespace nodewatch::uncore
