#pragma once
// Parsing for the InfiniBand/RoCE part of the interconnect collector: pure
// functions over the text of one attribute under <sysfs>/class/infiniband
// (formats of the kernel's drivers/infiniband/core/sysfs.c and
// Documentation/ABI/stable/sysfs-class-infiniband), and the tables that say
// what each counter file becomes (the 32-bit wrap rule itself is
// sources::WrapCounter's).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace nodewatch::interconnect {

// Trims blanks, newlines and NULs from both ends of an attribute.
std::string_view trim(std::string_view raw);

// Makes a trimmed attribute usable as a label value: control characters
// become spaces; when the bytes are not valid UTF-8, every non-ASCII byte
// becomes '?'.
std::string attribute_label(std::string_view raw);

// ports/<n>/state "4: ACTIVE\n" -> 4 (1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE,
// 5 ACTIVE_DEFER) and ports/<n>/phys_state "5: LinkUp\n" -> 5 (1 Sleep,
// 2 Polling, 3 Disabled, 4 PortConfigurationTraining, 5 LinkUp,
// 6 LinkErrorRecovery, 7 Phy Test). The kernel writes "%d: %s"; the name
// is not checked (a kernel may add names), the number must be 0..255.
std::optional<unsigned> parse_numbered_state(std::string_view raw);

struct PortRate {
  double bytes_per_second = 0;
  std::optional<unsigned> width;  // lanes, from "(4X EDR)"; nullopt when absent
};

// ports/<n>/rate, "%d%s Gb/sec (%dX%s)\n" in the kernel's rate_show():
//   "100 Gb/sec (4X EDR)"   -> 12.5e9 bytes/s, 4 lanes
//   "56 Gb/sec (4X FDR)"    -> 7e9 bytes/s
//   "2.5 Gb/sec (1X SDR)"   -> 312.5e6 bytes/s
//   "400 Gb/sec (4X NDR)"   -> 50e9 bytes/s
// Gb/sec is 1e9 bits per second (the signalling rate the kernel computes,
// already net of 64b/66b for FDR and up), so bytes/s = Gb/s * 1e9 / 8.
// nullopt when the number or the unit is missing, or the number is not a
// positive finite rate.
std::optional<PortRate> parse_rate(std::string_view raw);

// One counter file (counters/*, counters_ext/*, hw_counters/*): a decimal
// u64, "12345\n". Ports whose PMA cannot be queried read "N/A (no PMA)\n"
// (core/sysfs.c show_pma_counter()).
enum class CounterReading { kValue, kNoPma, kMalformed };
struct Counter {
  CounterReading reading = CounterReading::kMalformed;
  std::uint64_t value = 0;
};
Counter parse_counter(std::string_view raw);

// Where a PMA counter file goes.
enum class PmaMetric {
  kTransmittedBytes,
  kReceivedBytes,
  kTransmittedPackets,
  kReceivedPackets,
  kSymbolErrors,
  kLinkDowned,
  kLinkErrorRecovery,
  kReceiveErrors,
  kReceiveRemotePhysicalErrors,
  kTransmitDiscards,
  kTransmitWait,
  kLocalLinkIntegrityErrors,
  kExcessiveBufferOverrunErrors,
  kVl15Dropped,
  kCount,
  kGeneric = kCount,  // nodewatch_interconnect_port_pma_total{counter=...}
};

struct PmaFile {
  PmaMetric metric = PmaMetric::kGeneric;
  std::uint64_t multiplier = 1;  // 4 for the *_data counters (32-bit words)
  // The `counter` label for kGeneric: the counters/ name, so that the
  // counters_ext/ copies ("port_unicast_rcv_packets") and the counters/
  // ones of newer kernels ("unicast_rcv_packets") share one label.
  std::string label;
  // True for counters_ext/*_64 files: they replace their counters/ twin,
  // which on hardware without the extended PMA is 32 bits and saturates.
  bool overrides = false;
};

// Classifies one file name of counters/ (ext = false) or counters_ext/
// (ext = true). Every file is exported: the curated ones under their own
// metric, the others (unicast/multicast packets, constraint and switch
// relay errors, any future counter) under kGeneric.
PmaFile classify_pma_file(std::string_view name, bool ext);

// Curated RoCE congestion and transport counters from hw_counters/.
enum class HwMetric {
  kEcnMarked,
  kCnpSent,
  kCnpHandled,
  kCnpIgnored,
  kOutOfBuffer,
  kOutOfSequence,
  kPacketSequenceErrors,
  kLocalAckTimeouts,
  kRetransmits,
  kCount,
  kGeneric = kCount,  // nodewatch_interconnect_hw_counters_total{counter=...}
  kSkip,              // not a counter: `lifespan` (the driver's cache time, ms)
};
HwMetric classify_hw_counter(std::string_view name);

// True for hw_counters that the driver reads from a 32-bit hardware field
// and that therefore wrap at 2^32: mlx5's Q-counters (QUERY_Q_COUNTER,
// drivers/infiniband/hw/mlx5/counters.c: be32_to_cpu into a u64). The
// congestion counters (rp_cnp_*, np_*) are 64 bits there, so are other
// drivers' counters as far as known; all those are treated as 64-bit
// (sources::WrapCounters::update's wraps32).
bool hw_counter_is_32bit(std::string_view name);

}  // namespace nodewatch::interconnect
