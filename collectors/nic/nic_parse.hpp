#pragma once
// Parsing for the nic collector: pure functions over the bytes the kernel
// sends (one netlink message, header included) and over the text of
// <procfs>/net/snmp and <procfs>/net/netstat, so that they can be tested
// with captured content. Layouts are those of the kernel's uapi headers
// (linux/rtnetlink.h, if_link.h, pkt_sched.h, gen_stats.h,
// ethtool_netlink.h) and of net/ipv4/proc.c.
//
// Failure contract: a message that is truncated or whose attributes overrun
// it yields nullopt (the caller counts a parse error and skips that one
// interface or qdisc); attributes the parser does not know are skipped, so a
// newer kernel's additions never break it.

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace nodewatch::nic {

using Bytes = std::span<const std::uint8_t>;

// The fields of struct rtnl_link_stats64 (IFLA_STATS64), in the kernel's
// order. Older kernels send fewer: 23 before 4.6 (no rx_nohandler), 24
// before 5.19 (no rx_otherhost_dropped); the parser keeps what was sent.
enum LinkStat : std::size_t {
  kRxPackets,
  kTxPackets,
  kRxBytes,
  kTxBytes,
  kRxErrors,
  kTxErrors,
  kRxDropped,
  kTxDropped,
  kMulticast,
  kCollisions,
  kRxLengthErrors,
  kRxOverErrors,
  kRxCrcErrors,
  kRxFrameErrors,
  kRxFifoErrors,
  kRxMissedErrors,
  kTxAbortedErrors,
  kTxCarrierErrors,
  kTxFifoErrors,
  kTxHeartbeatErrors,
  kTxWindowErrors,
  kRxCompressed,
  kTxCompressed,
  kRxNohandler,
  kRxOtherhostDropped,
  kLinkStatCount
};

// The fields of half-duplex Ethernet and of CSLIP/PPP header compression:
// collisions, late collisions (window), aborts after too many collisions,
// SQE heartbeat, compressed packets. A full-duplex NIC of this century
// leaves them 0; they are exported only with collectors.nic.legacy_counters.
inline constexpr bool is_legacy_link_stat(std::size_t i) {
  return i == kCollisions || i == kTxAbortedErrors || i == kTxHeartbeatErrors ||
         i == kTxWindowErrors || i == kRxCompressed || i == kTxCompressed;
}

// RFC 2863 operational states as IFLA_OPERSTATE numbers them (IF_OPER_*).
// Returns the name sysfs uses ("up", "down", "lowerlayerdown", ...), or
// "unknown" for a number the kernel does not define.
std::string_view operstate_name(std::uint8_t operstate);
inline constexpr std::uint8_t kOperUp = 6;

// One RTM_NEWLINK message of a link dump.
struct LinkRecord {
  int ifindex = 0;
  std::string name;  // IFLA_IFNAME
  std::string mac;   // IFLA_ADDRESS as "aa:bb:cc:dd:ee:ff", "" when absent
  std::optional<std::uint8_t> operstate;
  std::optional<std::uint8_t> carrier;  // IFLA_CARRIER, 0 or 1
  std::optional<std::uint32_t> carrier_changes;
  std::optional<std::uint32_t> carrier_up_count;    // kernel 4.16+
  std::optional<std::uint32_t> carrier_down_count;  // kernel 4.16+
  std::optional<std::uint32_t> mtu;
  std::array<std::uint64_t, kLinkStatCount> stats{};
  std::size_t stat_count = 0;  // how many leading fields of `stats` the kernel sent
};

// Parses one RTM_NEWLINK message (nlmsghdr + ifinfomsg + attributes).
// nullopt when it is not an RTM_NEWLINK, is truncated, has no name, or an
// attribute overruns the message.
std::optional<LinkRecord> parse_link_message(Bytes msg);

// One datagram of a netlink dump's replies, read: every message of the
// request's sequence number `seq` that is neither a control message nor
// the end goes to `on_message`, header included; messages of another
// sequence number (replies to an earlier, abandoned request) are skipped.
struct DumpScan {
  bool done = false;           // NLMSG_DONE or NLMSG_ERROR came: the dump is over
  int error = 0;               // the kernel's errno (positive), 0 for none
  bool error_in_done = false;  // `error` came in NLMSG_DONE: the dump failed part way
  bool truncated = false;      // an NLMSG_ERROR too short to hold its error
  bool overrun = false;        // NLMSG_OVERRUN: messages were lost
  bool interrupted = false;    // NLM_F_DUMP_INTR: the dump is inconsistent
  bool malformed = false;      // a message length outside the datagram
};
// Adds what `datagram` says to `scan` (interrupted stays set once set).
void scan_dump_datagram(Bytes datagram, std::uint32_t seq, DumpScan& scan,
                        const std::function<void(Bytes)>& on_message);

// One RTM_NEWQDISC message of a qdisc dump (TCA_STATS2 nest).
struct QdiscRecord {
  int ifindex = 0;
  std::uint32_t handle = 0;
  std::uint32_t parent = 0;
  std::string kind;        // TCA_KIND, "tbf", "fq_codel", "noqueue", ...
  bool has_basic = false;  // TCA_STATS_BASIC present
  std::uint64_t bytes = 0;
  std::uint32_t packets32 = 0;  // gnet_stats_basic.packets, wraps at 2^32
  // TCA_STATS_PKT64 (kernel 5.5+), sent only once the count no longer fits
  // in 32 bits (___gnet_stats_copy_basic in net/core/gen_stats.c).
  std::optional<std::uint64_t> packets64;
  bool has_queue = false;  // TCA_STATS_QUEUE present; the counters below are 32-bit
  std::uint32_t qlen = 0;
  std::uint32_t backlog = 0;
  std::uint32_t drops = 0;
  std::uint32_t requeues = 0;
  std::uint32_t overlimits = 0;
};

std::optional<QdiscRecord> parse_qdisc_message(Bytes msg);

// A tc handle or parent as `tc qdisc show` prints it: the handle as "1:",
// "ffff:", "0:" (major only); a parent as "root" (TC_H_ROOT), "ffff:fff1"
// (ingress), "1:1", ":1" (minor only), "" when unset.
std::string format_qdisc_handle(std::uint32_t handle);
std::string format_qdisc_parent(std::uint32_t parent);

// Replies of the generic-netlink family "ethtool" (nlmsghdr + genlmsghdr +
// attributes). The device is named by the nested ETHTOOL_A_*_HEADER.
struct PauseStats {
  int ifindex = 0;
  std::optional<std::uint64_t> tx_frames;  // ETHTOOL_A_PAUSE_STAT_TX_FRAMES
  std::optional<std::uint64_t> rx_frames;
};
std::optional<PauseStats> parse_ethtool_pause_reply(Bytes msg);

struct FecStats {
  int ifindex = 0;
  // The first u64 of each array attribute: the total; per-lane values follow.
  std::optional<std::uint64_t> corrected_blocks;
  std::optional<std::uint64_t> uncorrectable_blocks;
};
std::optional<FecStats> parse_ethtool_fec_reply(Bytes msg);

// <procfs>/net/snmp and <procfs>/net/netstat: pairs of lines, a header
// naming the fields and a line of values with the same prefix:
//   Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens ... RetransSegs InErrs ...
//   Tcp: 1 200 120000 -1 12345 ... 678 0 ...
// Returns "Tcp.RetransSegs" -> 678 for every unsigned field (MaxConn, -1,
// is left out). A pair whose prefixes or field counts differ, or an unpaired
// line, is skipped and counted in *malformed. With `only` not empty, only
// those keys are returned (the whole text is still checked): a collection
// wants a dozen of the ~300 fields, and makes no key of the others.
std::map<std::string, std::uint64_t, std::less<>> parse_proc_net_pairs(
    std::string_view text, std::size_t* malformed, std::span<const std::string_view> only = {});

// Driver statistic names (ETHTOOL_GSTRINGS, ETH_SS_STATS) mapped to the
// collector's curated metrics. Pure and table-driven: see kDriverPatterns in
// nic_parse.cpp for the ConnectX (mlx5) and Intel E800 (ice) names.
enum class DriverMetric {
  kGeneric,              // nodewatch_nic_driver_counters_total{counter}
  kPfcPauseFrames,       // {direction, priority}
  kPfcPauseDuration,     // {direction, priority}, value in microseconds
  kPauseFrames,          // {direction}, link-level pause
  kPauseStorm,           // {level}
  kDiscards,             // {direction, priority}; priority "" for port-level
  kOutOfBuffer,          //
  kPcieStalled,          // {operation}: a gauge, percent of the last second
  kPcieStalledSeconds,   // {operation}
  kPcieBufferOverflow,   //
  kPcieRecoveries,       // {direction}
  kPcieCongestion,       // {direction: inbound, outbound; level: high, low}
  kBufferAlmostFull,     //
  kPriorityDiscards,     // {priority, reason: no_buffer, congestion}
  kEcnMarked,            // {priority}
  kFecCorrectedBits,     //
  kPostFecSymbolErrors,  //
  kLinkDownEvents,       //
  kModuleEvents,         // {event}
};

struct DriverCounterMapping {
  DriverMetric metric = DriverMetric::kGeneric;
  std::string direction;  // "rx" or "tx"; "inbound" or "outbound" for PCIe congestion
  std::string priority;   // "0".."7", or ""
  // The family's own label: the pause storm's or PCIe congestion's level,
  // the stall's operation (read, write), the discard's reason, the module
  // event.
  std::string kind;
  // The driver keeps it in 32 bits (an ethtool u64 that wraps at 2^32:
  // mlx5's Q-counter, MPCNT and PPCNT fields of 0x20 bits, its software
  // PCIe congestion counts): wraps are accumulated.
  bool wraps32 = false;
};

DriverCounterMapping map_driver_counter(std::string_view name);

// Formats a hardware address as lowercase colon-separated hex.
std::string format_mac(Bytes addr);

}  // namespace nodewatch::nic
