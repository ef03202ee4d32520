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
// gpu_metrics: a binary table (struct gpu_metrics_vX_Y of kgd_pp_interface.h)
// in the CPU's byte order, naturally aligned, starting with
//   struct metrics_table_header { u16 structure_size; u8 format_revision;
//                                 u8 content_revision; };
// The same (format, content) pair has had two layouts (v1_6, see the .cpp),
// so a layout is only trusted when structure_size is exactly the size of a
// layout known here, and the data read holds all of it.

enum class GpuMetricsStatus {
  kOk,
  kTruncated,      // shorter than its header, or than its structure_size
  kUnknownLayout,  // a (format, content, structure_size) not known here
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
};

GpuMetrics parse_gpu_metrics(std::string_view bytes);

// energy_accumulator's unit: 15.259 uJ = 2^-16 J (kgd_pp_interface.h, v1_4+;
// the same counter in v1_1..v1_3, see the fixture README).
inline constexpr double kEnergyJoulesPerTick = 1.0 / 65536.0;

// ---------------------------------------------------------------------------
// Of the errnos the sources layer counts as errors (nodewatch/sources/fs.hpp:
// not ENOENT, not a departed device), those with which amdgpu says "no
// sample this round" (runtime-suspended, in reset, not supported by the
// firmware, unreadable by design): the value is left empty, not counted.
bool is_unavailable_errno(int err);

}  // namespace nodewatch::accelerator::amdgpu
