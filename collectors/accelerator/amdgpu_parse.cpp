#include "accelerator/amdgpu_parse.hpp"

#include <array>
#include <cerrno>
#include <charconv>
#include <cstddef>
#include <cstdio>
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

// One known fixed gpu_metrics layout: where energy_accumulator (a u64) sits.
struct Layout {
  std::uint8_t format;
  std::uint8_t content;
  std::uint16_t size;  // sizeof(struct gpu_metrics_v<format>_<content>) on a 64-bit kernel
  std::uint16_t energy_offset;
};

// Sizes and offsets of the structs of kgd_pp_interface.h under natural
// alignment (the header has no packing attribute), computed by hand and
// checked with ctypes in tests/fixtures/amdgpu/gen_gpu_metrics.py; v1_7 and
// v1_8 also against the structs below.
//
// (1,6) has had two layouts under the same revision pair:
//  - 384 bytes: the first gpu_metrics_v1_6 (torvalds/linux 00dedab07b52,
//    May 2024), vcn/jpeg activity and a throttle status, energy at 88; it was
//    reverted upstream (64af3d3d66c7) and is kept here because structure_size
//    tells it apart;
//  - 1664 bytes: the v1_6 "with activities per partition" (Sep 2024), energy
//    at 16, which SMU 13.0.6 filled until v1_7 replaced it in the same
//    development cycle.
// v1_0 and v2_0 are not naturally aligned and the v2/v3 layouts are APUs':
// none of them is read. v1_9 has no fixed layout (parse_v1_9).
constexpr std::array<Layout, 9> kLayouts = {{
    {1, 1, 96, 24},    // dGPUs: MI100, MI200 (older kernels), Navi
    {1, 2, 104, 24},   // + firmware_timestamp
    {1, 3, 120, 24},   // + voltages, indep_throttle_status; MI200 (aldebaran)
    {1, 4, 288, 24},   // MI300 (smu_v13_0_6), first layout
    {1, 5, 360, 88},   // + jpeg_activity[32], PCIe NAK counts
    {1, 6, 384, 88},   // see above: reverted upstream
    {1, 6, 1664, 16},  // see above: per-partition (XCP) stats
    {1, 7, 2208, 24},  // + mem_max_bandwidth, xgmi_link_status; GpuMetricsV1_7
    {1, 8, 3872, 24},  // xcp_stats grow (40 JPEG, host-limit counters); GpuMetricsV1_8
}};

// struct gpu_metrics_v1_7 and v1_8 of kgd_pp_interface.h, field for field
// (runs of fields of one type as arrays, which lays them out the same), so
// that the compiler checks the table above. amdgpu_xcp_metrics_v1_1/_v1_2 are
// their per-partition stats (NUM_XCP = 8 of them, MAX_XCC = 8).
struct MetricsTableHeader {
  std::uint16_t structure_size;
  std::uint8_t format_revision;
  std::uint8_t content_revision;
};

struct XcpMetricsV1_1 {
  std::uint32_t gfx_busy_inst[8];
  std::uint16_t jpeg_busy[32];  // NUM_JPEG_ENG
  std::uint16_t vcn_busy[4];
  std::uint64_t gfx_busy_acc[8];
  std::uint64_t gfx_below_host_limit_acc[8];
};

struct XcpMetricsV1_2 {
  std::uint32_t gfx_busy_inst[8];
  std::uint16_t jpeg_busy[40];  // NUM_JPEG_ENG_V1
  std::uint16_t vcn_busy[4];
  std::uint64_t gfx_busy_acc[8];
  std::uint64_t gfx_below_host_limit_ppt_acc[8];
  std::uint64_t gfx_below_host_limit_thm_acc[8];
  std::uint64_t gfx_low_utilization_acc[8];
  std::uint64_t gfx_below_host_limit_total_acc[8];
};

// Everything v1_7 and v1_8 share, in their order, with the per-partition
// stats of `Xcp` near the end.
template <typename Xcp>
struct GpuMetricsV1_7Shape {
  MetricsTableHeader header;
  std::uint16_t temperature[3];  // hotspot, mem, vrsoc
  std::uint16_t curr_socket_power;
  std::uint16_t average_activity[2];  // gfx, umc
  std::uint64_t mem_max_bandwidth;
  std::uint64_t energy_accumulator;
  std::uint64_t system_clock_counter;
  std::uint32_t accumulation_counter;
  std::uint32_t residency_acc[5];  // prochot, ppt, socket_thm, vr_thm, hbm_thm
  std::uint32_t gfxclk_lock_status;
  std::uint16_t link[4];          // pcie width, speed; xgmi width, speed
  std::uint32_t activity_acc[2];  // gfx, mem
  std::uint64_t pcie_acc[5];      // bandwidth acc, inst; l0_to_recov, replay, replay_rover counts
  std::uint32_t pcie_nak_acc[2];  // sent, received
  std::uint64_t xgmi_read_data_acc[8];
  std::uint64_t xgmi_write_data_acc[8];
  std::uint16_t xgmi_link_status[8];
  std::uint16_t padding;
  std::uint64_t firmware_timestamp;
  std::uint16_t current_gfxclk[8];
  std::uint16_t current_socclk[4];
  std::uint16_t current_vclk0[4];
  std::uint16_t current_dclk0[4];
  std::uint16_t current_uclk;
  std::uint16_t num_partition;
  Xcp xcp_stats[8];
  std::uint32_t pcie_lc_perf_other_end_recovery;
};
using GpuMetricsV1_7 = GpuMetricsV1_7Shape<XcpMetricsV1_1>;
using GpuMetricsV1_8 = GpuMetricsV1_7Shape<XcpMetricsV1_2>;

// The energy offset the table gives for v1_<content> of `size` bytes, or
// SIZE_MAX when it has no such layout.
constexpr std::size_t table_energy_offset(std::uint8_t content, std::uint16_t size) {
  for (const Layout& l : kLayouts) {
    if (l.format == 1 && l.content == content && l.size == size) return l.energy_offset;
  }
  return SIZE_MAX;
}

// The kernel is 64-bit, where u64 is 8-aligned; on a 32-bit build the structs
// would pack differently and prove nothing about the table.
static_assert(alignof(std::uint64_t) != 8 ||
              (sizeof(XcpMetricsV1_1) == 232 && sizeof(XcpMetricsV1_2) == 440));
static_assert(alignof(std::uint64_t) != 8 || (sizeof(GpuMetricsV1_7) == 2208 &&
                                              offsetof(GpuMetricsV1_7, energy_accumulator) ==
                                                  table_energy_offset(7, sizeof(GpuMetricsV1_7))));
static_assert(alignof(std::uint64_t) != 8 || (sizeof(GpuMetricsV1_8) == 3872 &&
                                              offsetof(GpuMetricsV1_8, energy_accumulator) ==
                                                  table_energy_offset(8, sizeof(GpuMetricsV1_8))));

constexpr std::size_t kHeaderSize = 4;
// v1_9: the header, `int attr_count`, then the attributes, each a u64 tag
// and its values.
constexpr std::size_t kV1_9AttributesOffset = 8;
constexpr std::size_t kTagSize = 8;
// Bytes per value of each enum amdgpu_metrics_attr_type.
constexpr std::array<std::size_t, kAttrTypeCount> kTypeWidth = {1, 1, 2, 2, 4, 4, 8, 8};

// The table is in the CPU's byte order: copy, never cast (alignment; v1_9
// is packed). The caller has checked that the bytes are there.
template <typename T>
T load(std::string_view bytes, std::size_t offset) {
  T v{};
  std::memcpy(&v, bytes.data() + offset, sizeof(v));
  return v;
}

std::optional<double> energy_from_ticks(std::uint64_t ticks) {
  constexpr std::uint64_t kAllOnes = std::numeric_limits<std::uint64_t>::max();
  constexpr std::uint64_t kUintMax = std::numeric_limits<std::uint32_t>::max();
  if (ticks == kAllOnes || ticks == kUintMax || ticks == 0) return std::nullopt;
  return static_cast<double>(ticks) * kEnergyJoulesPerTick;
}

// "v1_9, 1150 bytes"
std::string describe(const GpuMetrics& m) {
  return "v" + std::to_string(m.format_revision) + "_" + std::to_string(m.content_revision) + ", " +
         std::to_string(m.structure_size) + " bytes";
}

std::string hex(std::uint64_t v) {
  std::array<char, 24> buf{};
  std::snprintf(buf.data(), buf.size(), "0x%llx", static_cast<unsigned long long>(v));
  return buf.data();
}

// Walks a v1_9 table, `table` being exactly its structure_size bytes (see
// the failure contract in the header). Sets status, energy and problem.
void parse_v1_9(std::string_view table, GpuMetrics& out) {
  auto malformed = [&out](const std::string& what) {
    out.status = GpuMetricsStatus::kMalformed;
    out.problem = describe(out) + ": " + what;
  };
  if (table.size() < kV1_9AttributesOffset) return malformed("no room for the attribute count");
  const auto count = load<std::int32_t>(table, kHeaderSize);
  // Every attribute takes at least its tag: a count that cannot fit is not
  // walked at all.
  const std::size_t room = (table.size() - kV1_9AttributesOffset) / kTagSize;
  if (count < 0 || static_cast<std::uint64_t>(count) > room) {
    return malformed("attribute count " + std::to_string(count) + ", room for at most " +
                     std::to_string(room));
  }
  std::optional<double> energy;
  bool energy_seen = false;
  std::size_t pos = kV1_9AttributesOffset;
  for (std::int32_t i = 0; i < count; ++i) {
    // "attribute 3 of 47 (tag 0x900406)", built only for a failure.
    auto which = [&](std::optional<std::uint64_t> tag) {
      std::string w = "attribute " + std::to_string(i) + " of " + std::to_string(count);
      return tag ? w + " (tag " + hex(*tag) + ")" : w;
    };
    if (table.size() - pos < kTagSize) return malformed(which({}) + ": its tag runs past the end");
    const auto tag = load<std::uint64_t>(table, pos);
    pos += kTagSize;
    if ((tag >> 32) != 0) return malformed(which(tag) + " sets bits 32..63");
    const auto type = static_cast<unsigned>((tag >> 20) & 0xf);
    const auto id = static_cast<unsigned>((tag >> 10) & 0x3ff);
    const auto instances = static_cast<std::size_t>(tag & 0x3ff);
    if (type >= kAttrTypeCount) {
      return malformed(which(tag) + " has unknown type " + std::to_string(type));
    }
    const std::size_t size = instances * kTypeWidth[type];  // at most 1023 * 8
    if (table.size() - pos < size) return malformed(which(tag) + ": its values run past the end");
    if (id == kAttrIdEnergyAccumulator) {
      if (energy_seen) return malformed(which(tag) + ": a second energy_accumulator");
      if (type != kAttrTypeU64 || instances != 1) {
        return malformed(which(tag) + ": energy_accumulator is not one u64");
      }
      energy_seen = true;
      energy = energy_from_ticks(load<std::uint64_t>(table, pos));
    }
    pos += size;  // any other attribute, known here or not, is skipped
  }
  if (pos != table.size()) {
    return malformed("the attributes end at byte " + std::to_string(pos));
  }
  out.status = GpuMetricsStatus::kOk;
  out.energy_joules = energy;
}

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
    out.problem = std::to_string(bytes.size()) + " bytes, shorter than its header";
    return out;
  }
  out.structure_size = load<std::uint16_t>(bytes, 0);
  out.format_revision = static_cast<std::uint8_t>(bytes[2]);
  out.content_revision = static_cast<std::uint8_t>(bytes[3]);
  auto truncated = [&] {
    out.status = GpuMetricsStatus::kTruncated;
    out.problem = describe(out) + ", " + std::to_string(bytes.size()) + " read";
    return out;
  };
  if (out.format_revision == 1 && out.content_revision == 9) {
    if (bytes.size() < out.structure_size) return truncated();
    // Bytes past structure_size are ignored, as for the fixed layouts.
    parse_v1_9(bytes.substr(0, out.structure_size), out);
    return out;
  }
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
    out.problem = describe(out) + ": not a layout known here";
    return out;
  }
  if (bytes.size() < layout->size) return truncated();
  out.status = GpuMetricsStatus::kOk;
  out.energy_joules = energy_from_ticks(load<std::uint64_t>(bytes, layout->energy_offset));
  return out;
}

namespace {

// Only digits (from_chars takes no sign for an unsigned T), no leading zero
// (the kernel prints "%d", "%u"), at most a T.
template <typename T>
std::optional<T> parse_decimal_name(std::string_view digits) {
  if (digits.empty() || (digits.size() > 1 && digits[0] == '0')) return std::nullopt;
  T n{};
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  return n;
}

}  // namespace

std::optional<unsigned> parse_kfd_pid(std::string_view name) {
  return parse_decimal_name<unsigned>(name);
}

std::optional<std::uint32_t> parse_kfd_vram_gpu_id(std::string_view name) {
  constexpr std::string_view kPrefix = "vram_";
  if (name.size() <= kPrefix.size() || name.substr(0, kPrefix.size()) != kPrefix) {
    return std::nullopt;
  }
  return parse_decimal_name<std::uint32_t>(name.substr(kPrefix.size()));
}

std::optional<KfdNodeLocation> parse_kfd_node_properties(std::string_view text) {
  KfdNodeLocation out;
  while (!text.empty()) {
    std::size_t nl = text.find('\n');
    std::string_view line = trim(text.substr(0, nl));
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    std::size_t space = line.find(' ');
    if (space == std::string_view::npos) continue;
    std::string_view key = line.substr(0, space);
    std::optional<std::uint32_t>* field = key == "drm_render_minor" ? &out.drm_render_minor
                                          : key == "domain"         ? &out.domain
                                          : key == "location_id"    ? &out.location_id
                                                                    : nullptr;
    if (field == nullptr) continue;
    std::optional<std::uint32_t> v = parse_number<std::uint32_t>(line.substr(space + 1));
    if (!v) return std::nullopt;
    *field = v;
  }
  return out;
}

std::string kfd_pci_bus_id(std::uint32_t domain, std::uint32_t location_id) {
  std::array<char, 24> buf{};
  std::snprintf(buf.data(), buf.size(), "%04x:%02x:%02x.%x", domain, (location_id >> 8) & 0xff,
                (location_id >> 3) & 0x1f, location_id & 0x7);
  return buf.data();
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
