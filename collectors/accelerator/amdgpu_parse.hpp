#pragma once
// Parsing for the amdgpu backend: pure functions over the text (or bytes) of
// amdgpu's sysfs files, already read, so that they can be tested without a
// GPU. Formats are those of the kernel's drivers/gpu/drm/amd/pm/amdgpu_pm.c,
// amdgpu_ras.c and include/kgd_pp_interface.h, and of the hwmon sysfs ABI
// (Documentation/hwmon/sysfs-interface.rst); see
// tests/fixtures/amdgpu/README.md for where each one was taken from.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace nodewatch::accelerator::amdgpu {

// PCI vendor id of AMD/ATI GPUs (device/vendor reads "0x1002").
inline constexpr std::uint32_t kAmdVendorId = 0x1002;

// Strips blanks, newlines and NULs around a sysfs value: "87\n" -> "87".
std::string_view trim(std::string_view raw);

// One unsigned decimal number, e.g. mem_info_vram_used "25769803776\n".
std::optional<std::uint64_t> parse_u64(std::string_view raw);

// One signed decimal number, e.g. temp2_crit_hyst "-273150\n" (hwmon values
// are signed).
std::optional<std::int64_t> parse_i64(std::string_view raw);

// A PCI id as the PCI core prints it, "0x1002\n"; nullopt for anything else.
std::optional<std::uint32_t> parse_pci_id(std::string_view raw);

// The card number of a DRM primary node's name: "card2" -> 2. Render nodes
// ("renderD128"), connectors ("card0-VGA-1", "card1-DP-1") and other entries
// ("version") give nullopt.
std::optional<unsigned> parse_card_number(std::string_view name);

// gpu_busy_percent / mem_busy_percent ("87\n") as a ratio 0..1; nullopt when
// not a number or above 100.
std::optional<double> parse_busy_ratio(std::string_view raw);

// The exported sensor name of hwmon temperature channel `channel`
// (temp<channel>_input), from its temp<channel>_label when the driver has one
// (`label` empty when not): amdgpu's "edge", "junction" and "mem" become
// "edge", "junction" and "memory". Without a label, amdgpu's fixed channels
// are used (1 edge, 2 junction, 3 memory; amdgpu_pm.c, DOC: hwmon), and other
// channels are called "temp<channel>". Another label is kept when it is a
// short lower-case word ([a-z0-9_], up to 32 characters), else nullopt.
std::optional<std::string> temperature_sensor(std::string_view label, unsigned channel);

// Counts of ras/<block>_err_count, e.g. umc_err_count:
//   ue: 0
//   ce: 2
//   de: 0          (deferred, newer kernels)
// or "Query currently inaccessible\n" while the RAS query is not ready (a
// reset in progress): then both counts are empty and `inaccessible` is set.
struct RasCounts {
  std::optional<std::uint64_t> uncorrected;  // "ue"
  std::optional<std::uint64_t> corrected;    // "ce"
  bool inaccessible = false;
};
// nullopt when the text is neither form (an unknown line, a bad number, no
// "ue"/"ce" line at all).
std::optional<RasCounts> parse_ras_err_count(std::string_view raw);

// Makes a sysfs string usable as a label value (product_name, serial_number
// come from the board's FRU EEPROM): trims, turns control characters into
// spaces, and when the bytes are not valid UTF-8 turns every non-ASCII byte
// into '?'.
std::string label_value(std::string_view raw);

// ---------------------------------------------------------------------------
// gpu_metrics: a binary table in the CPU's byte order, starting with
//   struct metrics_table_header { u16 structure_size; u8 format_revision;
//                                 u8 content_revision; };
// Two kinds (kgd_pp_interface.h; tests/fixtures/amdgpu/README.md has the
// table of versions, sizes and kernels):
//  - v1_1 .. v1_8: a fixed C struct gpu_metrics_v1_<n>, naturally aligned.
//    The same (format, content) pair has had two layouts (v1_6, see the
//    .cpp), so a layout is only trusted when structure_size is exactly the
//    size of a layout known here, and the data read holds all of it.
//  - v1_9: self-describing (smu_cmn.h DECLARE_SMU_METRICS_CLASS, packed):
//    the header, an int attribute count, then per attribute a u64 tag
//      unit << 24 | type << 20 | id << 10 | count
//    followed by `count` values of `type` (u8, s8, u16, s16, u32, s32, u64,
//    s64 = 0..7), unaligned. structure_size is the whole table.
//
// Failure contract of parse_gpu_metrics (never reads outside `bytes`):
//  - kTruncated: fewer bytes than a header, or than structure_size says;
//  - kUnknownLayout: a (format, content, structure_size) not known here;
//  - kMalformed: a v1_9 table whose attributes do not add up: a negative
//    count, or more attributes than its size can hold; a tag or values
//    running past structure_size; a tag of an unknown type (its size cannot
//    be known) or with bits 32..63 set (no kernel sets them); the attributes
//    ending before structure_size does; an energy_accumulator that is not
//    one u64, or given twice.
// An attribute whose id is not known here is skipped by its size, so a
// newer kernel's extra attributes cost nothing. Only kOk carries values.

enum class GpuMetricsStatus {
  kOk,
  kTruncated,
  kUnknownLayout,
  kMalformed,
};

struct GpuMetrics {
  GpuMetricsStatus status = GpuMetricsStatus::kUnknownLayout;
  std::uint16_t structure_size = 0;
  std::uint8_t format_revision = 0;
  std::uint8_t content_revision = 0;
  // energy_accumulator converted to joules (units of 2^-16 J, "15.259uJ"), or
  // empty when the layout has none or the driver left it unset: all ones
  // (smu_cmn_init_soft_gpu_metrics fills the table with 0xff), UINT_MAX
  // (firmware that no longer reports it) or 0 (the second die of an MI250X).
  std::optional<double> energy_joules;
  // When not kOk, what was wrong, for the failure log:
  // "v1_9, 1150 bytes: attribute 3 of 47 (tag 0x900406) runs past the end".
  std::string problem;
};

GpuMetrics parse_gpu_metrics(std::string_view bytes);

// v1_9's attribute ids (enum amdgpu_metrics_attr_id) and types (enum
// amdgpu_metrics_attr_type): only what is read here. Later kernels append
// ids after the last one (SMU 15.0.8's temperatures), never renumber.
inline constexpr unsigned kAttrIdEnergyAccumulator = 7;
inline constexpr unsigned kAttrTypeU64 = 6;
inline constexpr unsigned kAttrTypeCount = 8;  // u8, s8, u16, s16, u32, s32, u64, s64

// A v1_9 tag: AMDGPU_METRICS_ENC_ATTR(unit, type, id, count).
constexpr std::uint64_t gpu_metrics_tag(unsigned unit, unsigned type, unsigned id, unsigned count) {
  return (std::uint64_t{unit} << 24) | (std::uint64_t{type} << 20) | (std::uint64_t{id} << 10) |
         count;
}

// energy_accumulator's unit: 15.259 uJ = 2^-16 J (kgd_pp_interface.h, v1_4+;
// the same counter in v1_1..v1_3, see the fixture README).
inline constexpr double kEnergyJoulesPerTick = 1.0 / 65536.0;

// ---------------------------------------------------------------------------
// KFD, amdkfd's sysfs (drivers/gpu/drm/amd/amdkfd/kfd_process.c,
// kfd_topology.c): which process has memory on which GPU.
//
//   class/kfd/kfd/proc/<pid>/vram_<gpu_id>   "%llu\n", bytes (Linux 5.8+)
//   class/kfd/kfd/topology/nodes/<n>/gpu_id  "%u\n"; 0 for a CPU node
//   class/kfd/kfd/topology/nodes/<n>/properties, one "<key> <value>\n" a line:
//     drm_render_minor 130      the node's render node, renderD130
//     domain 0                  its PCI domain
//     location_id 1280          bus << 8 | devfn (0000:05:00.0); on a
//                               partitioned MI300 some kernels OR the
//                               partition into its low bits
// <pid> is the process's host PID (the thread group leader's), <gpu_id> a
// 16-bit hash of the GPU that only the topology maps back to a device.

// A process directory's name, "4242" -> 4242; nullopt for anything else
// (no sign, no leading zero, no blank, at most an unsigned).
std::optional<unsigned> parse_kfd_pid(std::string_view name);

// The gpu_id of a per-process VRAM file's name, "vram_42735" -> 42735;
// nullopt for any other name ("sdma_42735", "vram_", "vram_12ab").
std::optional<std::uint32_t> parse_kfd_vram_gpu_id(std::string_view name);

// What a topology node's properties say of where the GPU is. Lines of other
// keys, and lines without a blank, are skipped (a future kernel's); a key
// read here whose value is not an unsigned number makes the text nullopt.
struct KfdNodeLocation {
  std::optional<std::uint32_t> drm_render_minor;
  std::optional<std::uint32_t> domain;
  std::optional<std::uint32_t> location_id;
  bool operator==(const KfdNodeLocation&) const = default;
};
std::optional<KfdNodeLocation> parse_kfd_node_properties(std::string_view text);

// The PCI bus id that `domain` and `location_id` name, as sysfs spells it:
// (0, 49408) -> "0000:c1:00.0". Bits of location_id above 16 are ignored.
std::string kfd_pci_bus_id(std::uint32_t domain, std::uint32_t location_id);

// ---------------------------------------------------------------------------
// Of the errnos the sources layer counts as errors (nodewatch/sources/fs.hpp:
// not ENOENT, not a departed device), those with which amdgpu says "no
// sample this round" (runtime-suspended, in reset, not supported by the
// firmware, unreadable by design): the value is left empty, not counted.
bool is_unavailable_errno(int err);

}  // namespace nodewatch::accelerator::amdgpu
