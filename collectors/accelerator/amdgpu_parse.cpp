#include "accelerator/amdgpu_parse.hpp"

#include <array>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <limits>
#include <system_error>

#include "nodewatch/metric.hpp"

namespace nodewatch::accelerator::amdgpu {
namespace {

bool is_blank(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\0';
}

template <typename T>
std::optional<T> parse_number(std::string_view raw, int base = 10) {
  std::string_view s = trim(raw);
  if (s.empty()) return std::nullopt;
  T value{};
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value, base);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return value;
}

// One known gpu_metrics layout: where energy_accumulator (a u64) sits.
struct Layout {
  std::uint8_t format;
  std::uint8_t content;
  std::uint16_t size;  // sizeof(struct gpu_metrics_v<format>_<content>) on a 64-bit kernel
  std::uint16_t energy_offset;
};

// Sizes and offsets of the structs of kgd_pp_interface.h under natural
// alignment (the header has no packing attribute), computed by hand and
// checked with a C compiler and with ctypes in
// tests/fixtures/amdgpu/gen_gpu_metrics.py.
//
// (1,6) has had two layouts under the same revision pair:
//  - 384 bytes: the first gpu_metrics_v1_6 (torvalds/linux 00dedab07b52,
//    May 2024), vcn/jpeg activity and a throttle status, energy at 88; it was
//    reverted upstream (64af3d3d66c7) and is kept here because structure_size
//    tells it apart;
//  - 1664 bytes: the v1_6 "with activities per partition" (Sep 2024) that
//    SMU 13.0.6 (MI300) fills on current kernels, energy at 16.
// v1_0 and v2_0 are not naturally aligned and the v2/v3 layouts are APUs':
// none of them is read.
constexpr std::array<Layout, 8> kLayouts = {{
    {1, 1, 96, 24},    // dGPUs: MI100, MI200 (older kernels), Navi
    {1, 2, 104, 24},   // + firmware_timestamp
    {1, 3, 120, 24},   // + voltages, indep_throttle_status; MI200 (aldebaran)
    {1, 4, 288, 24},   // MI300 (smu_v13_0_6), first layout
    {1, 5, 360, 88},   // + jpeg_activity[32], PCIe NAK counts
    {1, 6, 384, 88},   // see above: reverted upstream
    {1, 6, 1664, 16},  // see above: per-partition (XCP) stats
    {1, 7, 2208, 24},  // + mem_max_bandwidth, xgmi_link_status
}};

constexpr std::size_t kHeaderSize = 4;

}  // namespace

std::string_view trim(std::string_view raw) {
  while (!raw.empty() && is_blank(raw.front())) raw.remove_prefix(1);
  while (!raw.empty() && is_blank(raw.back())) raw.remove_suffix(1);
  return raw;
}

std::optional<std::uint64_t> parse_u64(std::string_view raw) {
  return parse_number<std::uint64_t>(raw);
}

std::optional<std::int64_t> parse_i64(std::string_view raw) {
  return parse_number<std::int64_t>(raw);
}

std::optional<std::uint32_t> parse_pci_id(std::string_view raw) {
  std::string_view s = trim(raw);
  if (s.size() < 3 || s.size() > 10 || s[0] != '0' || (s[1] != 'x' && s[1] != 'X')) {
    return std::nullopt;
  }
  return parse_number<std::uint32_t>(s.substr(2), 16);
}

std::optional<unsigned> parse_card_number(std::string_view name) {
  constexpr std::string_view kPrefix = "card";
  if (name.size() <= kPrefix.size() || name.substr(0, kPrefix.size()) != kPrefix) {
    return std::nullopt;
  }
  std::string_view digits = name.substr(kPrefix.size());
  // "card01" is not a name the DRM core gives; "card1-DP-1" is a connector.
  if (digits.size() > 1 && digits[0] == '0') return std::nullopt;
  unsigned n = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  return n;
}

std::optional<double> parse_busy_ratio(std::string_view raw) {
  std::optional<std::uint64_t> percent = parse_u64(raw);
  if (!percent || *percent > 100) return std::nullopt;
  return static_cast<double>(*percent) / 100.0;
}

std::optional<std::string> temperature_sensor(std::string_view label, unsigned channel) {
  label = trim(label);
  if (label.empty()) {
    switch (channel) {
      case 1: return "edge";
      case 2: return "junction";
      case 3: return "memory";
      default: return "temp" + std::to_string(channel);
    }
  }
  if (label == "mem") return "memory";
  if (label.size() > 32) return std::nullopt;
  for (char c : label) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
    if (!ok) return std::nullopt;
  }
  return std::string(label);
}

std::optional<RasCounts> parse_ras_err_count(std::string_view raw) {
  RasCounts out;
  std::string_view text = trim(raw);
  if (text == "Query currently inaccessible") {
    out.inaccessible = true;
    return out;
  }
  while (!text.empty()) {
    std::size_t nl = text.find('\n');
    std::string_view line = trim(text.substr(0, nl));
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    if (line.empty()) continue;
    std::size_t colon = line.find(':');
    if (colon == std::string_view::npos) return std::nullopt;
    std::string_view key = trim(line.substr(0, colon));
    std::optional<std::uint64_t> n = parse_u64(line.substr(colon + 1));
    if (!n) return std::nullopt;
    if (key == "ue") {
      out.uncorrected = n;
    } else if (key == "ce") {
      out.corrected = n;
    } else if (key != "de") {  // deferred errors: no series for them
      return std::nullopt;
    }
  }
  if (!out.uncorrected && !out.corrected) return std::nullopt;
  return out;
}

std::string label_value(std::string_view raw) {
  std::string out(trim(raw));
  for (char& c : out) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) c = ' ';
  }
  if (!nodewatch::is_valid_utf8(out)) {
    for (char& c : out) {
      if (static_cast<unsigned char>(c) >= 0x80) c = '?';
    }
  }
  return out;
}

GpuMetrics parse_gpu_metrics(std::string_view bytes) {
  GpuMetrics out;
  if (bytes.size() < kHeaderSize) {
    out.status = GpuMetricsStatus::kTruncated;
    return out;
  }
  // The table is in the CPU's byte order: copy, never cast (alignment).
  std::memcpy(&out.structure_size, bytes.data(), sizeof(out.structure_size));
  out.format_revision = static_cast<std::uint8_t>(bytes[2]);
  out.content_revision = static_cast<std::uint8_t>(bytes[3]);
  const Layout* layout = nullptr;
  for (const Layout& l : kLayouts) {
    if (l.format == out.format_revision && l.content == out.content_revision &&
        l.size == out.structure_size) {
      layout = &l;
      break;
    }
  }
  if (layout == nullptr) {
    out.status = GpuMetricsStatus::kUnknownLayout;
    return out;
  }
  if (bytes.size() < layout->size) {
    out.status = GpuMetricsStatus::kTruncated;
    return out;
  }
  out.status = GpuMetricsStatus::kOk;
  std::uint64_t ticks = 0;
  std::memcpy(&ticks, bytes.data() + layout->energy_offset, sizeof(ticks));
  constexpr std::uint64_t kAllOnes = std::numeric_limits<std::uint64_t>::max();
  constexpr std::uint64_t kUintMax = std::numeric_limits<std::uint32_t>::max();
  if (ticks != kAllOnes && ticks != kUintMax && ticks != 0) {
    out.energy_joules = static_cast<double>(ticks) * kEnergyJoulesPerTick;
  }
  return out;
}

bool is_unavailable_errno(int err) {
  // ENOTSUP and EOPNOTSUPP are one value on Linux, and so are EAGAIN and
  // EWOULDBLOCK: an if-chain, not a switch, so that it compiles either way.
  // amdgpu_pm.c answers -EPERM while the device is runtime-suspended, in
  // reset or suspending (amdgpu_pm_get_access_if_active), -ENODATA or
  // -EOPNOTSUPP for a sensor the firmware does not give, -EBUSY while the SMU
  // is busy. EACCES: an attribute the kernel made unreadable (the hwmon
  // is_visible callback drops S_IRUGO on ASICs that cannot query it), as seen
  // by an unprivileged daemon; it will not change by reading again.
  return err == EPERM || err == ENODATA || err == EOPNOTSUPP || err == ENOTSUP || err == EBUSY ||
         err == EACCES;
}

}  // namespace nodewatch::accelerator::amdgpu
