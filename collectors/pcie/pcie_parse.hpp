#pragma once
// Parsing for the pcie collector: pure functions over the text of one sysfs
// attribute of a PCI function (<sysfs>/bus/pci/devices/<BDF>/...), so that
// they can be tested with captured content. Formats are those of the Linux
// kernel's drivers/pci/pci-sysfs.c, drivers/pci/probe.c (pci_speed_string)
// and drivers/pci/pcie/aer.c; Documentation/ABI/testing/sysfs-bus-pci and
// sysfs-bus-pci-devices-aer_stats describe them.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace nodewatch::pcie {

// What an attribute said: a value, "the kernel does not know" (not an error,
// the metric is just left out), or text that no kernel writes (skipped and
// counted as a parse error).
enum class Reading { kValue, kUnknown, kMalformed };

struct LinkSpeed {
  Reading reading = Reading::kMalformed;
  double transfers_per_second = 0;  // set when reading == kValue
};

// max_link_speed / current_link_speed. Three generations of kernel output:
//   "32.0 GT/s PCIe\n"  pci_speed_string(), kernels 5.7+: 2.5, 5.0, 8.0, 16.0, 32.0, 64.0
//   "8 GT/s\n"          kernels up to 5.6: "2.5", "5", "8", "16", "32 GT/s"
//   "Unknown\n"         5.7+ for a reserved link-speed code (a link that is down)
//   "Unknown speed\n"   the same, up to 5.6
// "16.0 GT/s PCIe" becomes 16e9 transfers per second (the raw signalling
// rate; 8b/10b or 128b/130b encoding is not taken off).
LinkSpeed parse_link_speed(std::string_view raw);

// The widest link PCIe defines, in lanes.
inline constexpr unsigned kMaxLinkWidth = 32;

// The transfer rate per lane of PCIe generation `generation` (1: 2.5 GT/s,
// 2: 5, 3: 8, 4: 16, 5: 32, 6: 64), transfers per second; nullopt for
// any other number.
std::optional<double> generation_transfers_per_second(unsigned generation);

// What one lane carries per direction at `transfers_per_second`, in bytes
// per second, less the line encoding: 8b/10b below 8 GT/s, 128b/130b from
// 8 to 32 GT/s, none at 64 GT/s (PCIe 6.0's PAM4 FLIT mode, whose FLIT
// overhead is not taken off). 16 GT/s: 1.969e9.
double lane_bytes_per_second(double transfers_per_second);

struct LinkWidth {
  Reading reading = Reading::kMalformed;
  unsigned lanes = 0;  // set when reading == kValue: 1 to 32
};

// max_link_width / current_link_width: decimal lanes, "16\n". "0" is a link
// that is down or not trained: unknown. PCIe defines widths up to x32; the
// 6-bit width field reads 63 when config space reads come back all ones (a
// device that stopped answering, "fallen off the bus"), so 33 to 63 are
// unknown too. Anything else is malformed.
LinkWidth parse_link_width(std::string_view raw);

// `class`: "0x030200\n", the 24-bit class code (base class, subclass,
// programming interface). nullopt when malformed.
std::optional<std::uint32_t> parse_pci_class(std::string_view raw);

// `vendor` / `device`: "0x10de\n". Returns the trimmed text ("0x10de") when
// it is a 16-bit hex number written as the kernel writes it, else nullopt.
std::optional<std::string> parse_pci_id(std::string_view raw);

// `numa_node`: "0\n", "-1\n" (no affinity known). Returns the trimmed text.
std::optional<std::string> parse_numa_node(std::string_view raw);

enum class DeviceKind { kAccelerator, kNetwork, kBridge };

// The devices the collector selects by class code; nullopt for the others:
//   0x03xxxx display controller (GPUs, including 0x0302 3D controllers)  -> accelerator
//   0x12xxxx processing accelerator (Gaudi and other NPUs)               -> accelerator
//   0x02xxxx network controller (0x0200 Ethernet, 0x0207 InfiniBand)     -> network
//   0x0c06xx serial-bus InfiniBand controller (older HCAs)               -> network
// kBridge is never returned: bridges are exported as the upstream ports of
// selected devices, not for their class.
std::optional<DeviceKind> classify(std::uint32_t pci_class);

// "accelerator", "network", "bridge": the `kind` label.
std::string_view kind_name(DeviceKind kind);

// True for a PCI address as the kernel names devices: "0000:17:00.0"
// (domain of 4 or more hex digits, as VMD's 10000:xx domains have; bus;
// device 00-1f; function 0-7). "pci0000:00" (a host bridge) is not one.
bool is_bdf(std::string_view name);

// One counter line of an aer_dev_* file.
struct AerCount {
  std::string error;  // the `error` label, see aer_error_label()
  std::uint64_t count = 0;
};

// aer_dev_correctable / aer_dev_nonfatal / aer_dev_fatal: one line per error
// bit, "<name> <count>", then a TOTAL_ERR_* line. Current kernels:
//   RxErr 2
//   BadTLP 0
//   ...
//   TOTAL_ERR_COR 2
// Kernels before the short names (and the ABI document's sample) wrote long
// names with spaces: "Receiver Error 2", "RELAY_NUM Rollover 0". A bit that
// has no name is written only when its count is nonzero:
// "dev_cor_errs_bit[5] 1". The count is the last whitespace-separated token.
// TOTAL_ERR_* lines are not error bits: they count the error messages the
// port or device reported (aer.c's pci_dev_aer_stats_incr() adds one per
// message, and one message can set several bits), so they are not the sum
// of the lines. The line's count goes to `*total` when `total` is given (it
// stays nullopt when the file has no TOTAL_ERR_* line).
// Returns nullopt when any line is malformed (no name, a count that is not a
// decimal u64, two lines with the same label, two TOTAL_ERR_* lines).
std::optional<std::vector<AerCount>> parse_aer_stats(std::string_view text,
                                                     std::optional<std::uint64_t>* total = nullptr);

// The per-severity total the pcie collector exports: the file's
// TOTAL_ERR_* count when it has one (every kernel since aer_dev_* appeared,
// 4.19), else the sum of the bits (saturating).
std::uint64_t aer_severity_total(const std::vector<AerCount>& counts,
                                 std::optional<std::uint64_t> total);

// The `error` label for a kernel AER name: old long names are first mapped
// to the current kernel's short names, so that a fleet of mixed kernels has
// one label per error bit; the short name is then written in snake_case:
//   "RxErr", "Receiver Error"        -> "rx_err"
//   "BadTLP", "Bad TLP"              -> "bad_tlp"
//   "SDES", "Surprise Down Error"    -> "sdes"
//   "CmpltTO", "Completion Timeout"  -> "cmplt_to"
//   "dev_cor_errs_bit[5]"            -> "bit_5"
// A name the table does not know is snake_cased as it is ("Foo Bar" ->
// "foo_bar"). Returns "" when nothing usable is left.
std::string aer_error_label(std::string_view kernel_name);

// "RxErr" -> "rx_err", "TLPBlockedErr" -> "tlp_blocked_err", "Bad TLP" ->
// "bad_tlp": lower case, words split at case changes and at anything that is
// not a letter or digit, joined with '_'.
std::string snake_case(std::string_view name);

// The degraded-link rule: a link is degraded when it trained narrower than
// both of its ends can do, current < min(device max, upstream port max).
// Width never drops legitimately (speed does, at idle), so this is a fault.
// nullopt when any of the three is unknown.
std::optional<bool> link_width_degraded(std::optional<unsigned> current,
                                        std::optional<unsigned> device_max,
                                        std::optional<unsigned> upstream_max);

// Trims blanks, newlines and NULs from both ends of an attribute.
std::string_view trim(std::string_view raw);

}  // namespace nodewatch::pcie
