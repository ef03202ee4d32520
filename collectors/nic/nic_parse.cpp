#include "nic/nic_parse.hpp"

#include <linux/ethtool_netlink.h>
#include <linux/gen_stats.h>
#include <linux/genetlink.h>
#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/pkt_sched.h>
#include <linux/rtnetlink.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <functional>

namespace nodewatch::nic {
namespace {

// The fixed headers, by size, as the uapi defines them.
constexpr std::size_t kNlmsghdrSize = sizeof(nlmsghdr);    // 16
constexpr std::size_t kIfinfomsgSize = sizeof(ifinfomsg);  // 16
constexpr std::size_t kTcmsgSize = sizeof(tcmsg);          // 20
constexpr std::size_t kGenlmsghdrSize = GENL_HDRLEN;       // 4
constexpr std::size_t kNlaHeaderSize = NLA_HDRLEN;         // 4

template <class T>
T load(const std::uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

struct Attr {
  std::uint16_t type;  // without NLA_F_NESTED / NLA_F_NET_BYTEORDER
  Bytes payload;
};

// Calls fn(Attr) for every attribute in `area`. Returns false when one
// overruns the area (the message is truncated or corrupt).
template <class Fn>
bool for_each_attr(Bytes area, Fn&& fn) {
  while (area.size() >= kNlaHeaderSize) {
    auto len = load<std::uint16_t>(area.data());
    auto type = load<std::uint16_t>(area.data() + 2);
    if (len < kNlaHeaderSize || len > area.size()) return false;
    fn(Attr{static_cast<std::uint16_t>(type & NLA_TYPE_MASK),
            area.subspan(kNlaHeaderSize, len - kNlaHeaderSize)});
    std::size_t step = NLA_ALIGN(len);
    if (step >= area.size()) return true;
    area = area.subspan(step);
  }
  // Fewer than four bytes left: alignment padding at most.
  return true;
}

// The payload of a message after its nlmsghdr, bounded by nlmsg_len, or an
// empty optional when the header says more than was received.
std::optional<Bytes> message_body(Bytes msg, std::uint16_t want_type, std::size_t fixed) {
  if (msg.size() < kNlmsghdrSize) return std::nullopt;
  auto len = load<std::uint32_t>(msg.data());
  auto type = load<std::uint16_t>(msg.data() + 4);
  if (type != want_type || len < kNlmsghdrSize + fixed || len > msg.size()) return std::nullopt;
  return msg.subspan(kNlmsghdrSize, len - kNlmsghdrSize);
}

std::optional<std::uint32_t> u32_of(Bytes p) {
  if (p.size() < 4) return std::nullopt;
  return load<std::uint32_t>(p.data());
}
std::optional<std::uint64_t> u64_of(Bytes p) {
  if (p.size() < 8) return std::nullopt;
  return load<std::uint64_t>(p.data());
}
std::optional<std::uint8_t> u8_of(Bytes p) {
  if (p.empty()) return std::nullopt;
  return p[0];
}

// A NUL-terminated string attribute (the NUL may be missing).
std::string string_of(Bytes p) {
  std::size_t n = 0;
  while (n < p.size() && p[n] != 0) ++n;
  return std::string(reinterpret_cast<const char*>(p.data()), n);
}

// ETHTOOL_A_HEADER_DEV_INDEX from a nested request/reply header.
std::optional<int> ethtool_header_ifindex(Bytes nest) {
  std::optional<int> out;
  bool ok = for_each_attr(nest, [&](const Attr& a) {
    if (a.type == ETHTOOL_A_HEADER_DEV_INDEX) {
      if (auto v = u32_of(a.payload)) out = static_cast<int>(*v);
    }
  });
  if (!ok) return std::nullopt;
  return out;
}

std::optional<Bytes> genl_body(Bytes msg, std::uint16_t family) {
  if (msg.size() < kNlmsghdrSize) return std::nullopt;
  auto type = load<std::uint16_t>(msg.data() + 4);
  // The family id is dynamic; the caller passes 0 to accept any.
  if (family != 0 && type != family) return std::nullopt;
  auto body = message_body(msg, type, kGenlmsghdrSize);
  if (!body) return std::nullopt;
  return body->subspan(kGenlmsghdrSize);
}

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\r';
}

std::vector<std::string_view> split_fields(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && is_space(line[i])) ++i;
    std::size_t start = i;
    while (i < line.size() && !is_space(line[i])) ++i;
    if (i > start) out.push_back(line.substr(start, i - start));
  }
  return out;
}

// "%p" in a pattern matches one priority digit, 0 to 7.
bool match_pattern(std::string_view pattern, std::string_view name, std::string* priority) {
  std::size_t i = 0;
  std::size_t j = 0;
  while (i < pattern.size()) {
    if (pattern[i] == '%' && i + 1 < pattern.size() && pattern[i + 1] == 'p') {
      if (j >= name.size() || name[j] < '0' || name[j] > '7') return false;
      *priority = std::string(1, name[j]);
      i += 2;
      ++j;
      continue;
    }
    if (j >= name.size() || pattern[i] != name[j]) return false;
    ++i;
    ++j;
  }
  return j == name.size();
}

struct DriverPattern {
  std::string_view pattern;
  DriverMetric metric;
  std::string_view direction;
  std::string_view kind;
  bool wraps32 = false;
};

// ConnectX-4 to ConnectX-8 (mlx5_core): drivers/net/ethernet/mellanox/mlx5/
// core/en_stats.c (and en/pcie_cong_event.c), documented in Documentation/
// networking/device_drivers/ethernet/mellanox/mlx5/counters.rst (6.6 on);
// names checked in the sources of 6.1 to 7.1 (docs/collectors.md, "nic",
// gives the table). The PFC counters exist only for priorities with PFC
// enabled, pause durations are in microseconds; the per-priority buffer
// counters (buf_discard, cong_discard, marked, 5.4 on) exist for all eight;
// the PCIe congestion events from 6.17. Widths: the MPCNT fields other
// than the buffer overflow, link_down_events_phy, the Q-counter
// rx_out_of_buffer and the driver's congestion counts are 32 bits.
// Intel E800 (ice): drivers/net/ethernet/intel/ice/ice_ethtool.c; the PF
// (".nic") statistics appear on the PF's netdev only. XOFF frames are the
// pause requests (XON frames release a pause and are not counted as pauses).
constexpr DriverPattern kDriverPatterns[] = {
    // mlx5
    {"rx_prio%p_pause", DriverMetric::kPfcPauseFrames, "rx", ""},
    {"tx_prio%p_pause", DriverMetric::kPfcPauseFrames, "tx", ""},
    {"rx_prio%p_pause_duration", DriverMetric::kPfcPauseDuration, "rx", ""},
    {"tx_prio%p_pause_duration", DriverMetric::kPfcPauseDuration, "tx", ""},
    {"rx_pause_ctrl_phy", DriverMetric::kPauseFrames, "rx", ""},
    {"tx_pause_ctrl_phy", DriverMetric::kPauseFrames, "tx", ""},
    {"tx_pause_storm_warning_events", DriverMetric::kPauseStorm, "", "warning"},
    {"tx_pause_storm_error_events", DriverMetric::kPauseStorm, "", "error"},
    {"rx_discards_phy", DriverMetric::kDiscards, "rx", ""},
    {"tx_discards_phy", DriverMetric::kDiscards, "tx", ""},
    {"rx_prio%p_discards", DriverMetric::kDiscards, "rx", ""},
    {"rx_out_of_buffer", DriverMetric::kOutOfBuffer, "", "", true},
    {"outbound_pci_stalled_rd", DriverMetric::kPcieStalled, "", "read"},
    {"outbound_pci_stalled_wr", DriverMetric::kPcieStalled, "", "write"},
    {"outbound_pci_stalled_rd_events", DriverMetric::kPcieStalledSeconds, "", "read", true},
    {"outbound_pci_stalled_wr_events", DriverMetric::kPcieStalledSeconds, "", "write", true},
    {"outbound_pci_buffer_overflow", DriverMetric::kPcieBufferOverflow, "", ""},
    {"rx_pci_signal_integrity", DriverMetric::kPcieRecoveries, "rx", "", true},
    {"tx_pci_signal_integrity", DriverMetric::kPcieRecoveries, "tx", "", true},
    {"pci_bw_inbound_high", DriverMetric::kPcieCongestion, "inbound", "high", true},
    {"pci_bw_inbound_low", DriverMetric::kPcieCongestion, "inbound", "low", true},
    {"pci_bw_outbound_high", DriverMetric::kPcieCongestion, "outbound", "high", true},
    {"pci_bw_outbound_low", DriverMetric::kPcieCongestion, "outbound", "low", true},
    {"rx_buffer_passed_thres_phy", DriverMetric::kBufferAlmostFull, "", ""},
    {"rx_prio%p_buf_discard", DriverMetric::kPriorityDiscards, "", "no_buffer"},
    {"rx_prio%p_cong_discard", DriverMetric::kPriorityDiscards, "", "congestion"},
    {"rx_prio%p_marked", DriverMetric::kEcnMarked, "", ""},
    {"rx_corrected_bits_phy", DriverMetric::kFecCorrectedBits, "", ""},
    {"rx_pcs_symbol_err_phy", DriverMetric::kPostFecSymbolErrors, "", ""},
    {"link_down_events_phy", DriverMetric::kLinkDownEvents, "", "", true},
    {"module_unplug", DriverMetric::kModuleEvents, "", "unplug"},
    {"module_bus_stuck", DriverMetric::kModuleEvents, "", "bus_stuck"},
    {"module_high_temp", DriverMetric::kModuleEvents, "", "high_temp"},
    {"module_bad_shorted", DriverMetric::kModuleEvents, "", "bad_shorted"},
    // ice
    {"rx_priority_%p_xoff.nic", DriverMetric::kPfcPauseFrames, "rx", ""},
    {"tx_priority_%p_xoff.nic", DriverMetric::kPfcPauseFrames, "tx", ""},
    {"link_xoff_rx.nic", DriverMetric::kPauseFrames, "rx", ""},
    {"link_xoff_tx.nic", DriverMetric::kPauseFrames, "tx", ""},
    {"rx_dropped.nic", DriverMetric::kDiscards, "rx", ""},
    {"tx_dropped_link_down.nic", DriverMetric::kDiscards, "tx", ""},
};

}  // namespace

std::string_view operstate_name(std::uint8_t operstate) {
  static constexpr std::string_view kNames[] = {"unknown", "notpresent", "down", "lowerlayerdown",
                                                "testing", "dormant",    "up"};
  if (operstate < std::size(kNames)) return kNames[operstate];
  return "unknown";
}

std::string format_mac(Bytes addr) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < addr.size(); ++i) {
    if (i > 0) out.push_back(':');
    out.push_back(kHex[addr[i] >> 4]);
    out.push_back(kHex[addr[i] & 0xf]);
  }
  return out;
}

void scan_dump_datagram(Bytes datagram, std::uint32_t seq, DumpScan& scan,
                        const std::function<void(Bytes)>& on_message) {
  std::size_t off = 0;
  while (!scan.done && datagram.size() - off >= sizeof(nlmsghdr)) {
    nlmsghdr h;
    std::memcpy(&h, datagram.data() + off, sizeof(h));
    if (h.nlmsg_len < sizeof(nlmsghdr) || h.nlmsg_len > datagram.size() - off) {
      scan.malformed = true;
      return;
    }
    const Bytes msg = datagram.subspan(off, h.nlmsg_len);
    off += std::min<std::size_t>(NLMSG_ALIGN(h.nlmsg_len), datagram.size() - off);
    if (h.nlmsg_seq != seq) continue;
    if ((h.nlmsg_flags & NLM_F_DUMP_INTR) != 0) scan.interrupted = true;
    const Bytes payload = msg.subspan(NLMSG_HDRLEN < msg.size() ? NLMSG_HDRLEN : msg.size());
    switch (h.nlmsg_type) {
      case NLMSG_DONE: {
        // The end, with the dump's error when the kernel put one there (an
        // int: 0, or the negative errno that ended the dump).
        scan.done = true;
        int e = 0;
        if (payload.size() >= sizeof(e)) std::memcpy(&e, payload.data(), sizeof(e));
        if (e < 0) {
          scan.error = -e;
          scan.error_in_done = true;
        }
        break;
      }
      case NLMSG_ERROR: {
        // The request refused (a dump's start failed), or an ACK (0).
        scan.done = true;
        int e = 0;
        if (payload.size() < sizeof(nlmsgerr)) {
          scan.truncated = true;
        } else {
          std::memcpy(&e, payload.data(), sizeof(e));  // nlmsgerr.error comes first
          if (e < 0) scan.error = -e;
        }
        break;
      }
      case NLMSG_OVERRUN:
        scan.overrun = true;
        scan.done = true;
        break;
      case NLMSG_NOOP: break;
      default: on_message(msg);
    }
  }
}

std::optional<LinkRecord> parse_link_message(Bytes msg) {
  auto body = message_body(msg, RTM_NEWLINK, kIfinfomsgSize);
  if (!body) return std::nullopt;
  LinkRecord rec;
  rec.ifindex = load<std::int32_t>(body->data() + offsetof(ifinfomsg, ifi_index));
  bool ok = for_each_attr(body->subspan(kIfinfomsgSize), [&](const Attr& a) {
    switch (a.type) {
      case IFLA_IFNAME: rec.name = string_of(a.payload); break;
      case IFLA_ADDRESS: rec.mac = format_mac(a.payload); break;
      case IFLA_OPERSTATE: rec.operstate = u8_of(a.payload); break;
      case IFLA_CARRIER: rec.carrier = u8_of(a.payload); break;
      case IFLA_CARRIER_CHANGES: rec.carrier_changes = u32_of(a.payload); break;
      case IFLA_CARRIER_UP_COUNT: rec.carrier_up_count = u32_of(a.payload); break;
      case IFLA_CARRIER_DOWN_COUNT: rec.carrier_down_count = u32_of(a.payload); break;
      case IFLA_MTU: rec.mtu = u32_of(a.payload); break;
      case IFLA_STATS64: {
        std::size_t n = std::min<std::size_t>(a.payload.size() / 8, kLinkStatCount);
        for (std::size_t i = 0; i < n; ++i) rec.stats[i] = load<std::uint64_t>(&a.payload[i * 8]);
        rec.stat_count = n;
        break;
      }
      default: break;
    }
  });
  if (!ok || rec.name.empty()) return std::nullopt;
  return rec;
}

std::optional<QdiscRecord> parse_qdisc_message(Bytes msg) {
  auto body = message_body(msg, RTM_NEWQDISC, kTcmsgSize);
  if (!body) return std::nullopt;
  QdiscRecord rec;
  rec.ifindex = load<std::int32_t>(body->data() + offsetof(tcmsg, tcm_ifindex));
  rec.handle = load<std::uint32_t>(body->data() + offsetof(tcmsg, tcm_handle));
  rec.parent = load<std::uint32_t>(body->data() + offsetof(tcmsg, tcm_parent));
  bool nested_ok = true;
  bool ok = for_each_attr(body->subspan(kTcmsgSize), [&](const Attr& a) {
    if (a.type == TCA_KIND) {
      rec.kind = string_of(a.payload);
    } else if (a.type == TCA_STATS2) {
      nested_ok = for_each_attr(a.payload, [&](const Attr& s) {
        if (s.type == TCA_STATS_BASIC && s.payload.size() >= 12) {
          rec.has_basic = true;
          rec.bytes = load<std::uint64_t>(s.payload.data());
          rec.packets32 = load<std::uint32_t>(s.payload.data() + 8);
        } else if (s.type == TCA_STATS_PKT64) {
          rec.packets64 = u64_of(s.payload);
        } else if (s.type == TCA_STATS_QUEUE && s.payload.size() >= sizeof(gnet_stats_queue)) {
          rec.has_queue = true;
          const std::uint8_t* p = s.payload.data();
          rec.qlen = load<std::uint32_t>(p + offsetof(gnet_stats_queue, qlen));
          rec.backlog = load<std::uint32_t>(p + offsetof(gnet_stats_queue, backlog));
          rec.drops = load<std::uint32_t>(p + offsetof(gnet_stats_queue, drops));
          rec.requeues = load<std::uint32_t>(p + offsetof(gnet_stats_queue, requeues));
          rec.overlimits = load<std::uint32_t>(p + offsetof(gnet_stats_queue, overlimits));
        }
      });
    }
  });
  if (!ok || !nested_ok || rec.kind.empty()) return std::nullopt;
  return rec;
}

std::string format_qdisc_handle(std::uint32_t handle) {
  char buf[16];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), handle >> 16, 16);
  (void)ec;
  return std::string(buf, end) + ":";
}

std::string format_qdisc_parent(std::uint32_t parent) {
  if (parent == TC_H_ROOT) return "root";
  if (parent == TC_H_UNSPEC) return "";
  char buf[32];
  char* p = buf;
  std::uint32_t major = TC_H_MAJ(parent) >> 16;
  std::uint32_t minor = TC_H_MIN(parent);
  if (major != 0) p = std::to_chars(p, buf + sizeof(buf), major, 16).ptr;
  *p++ = ':';
  if (minor != 0) p = std::to_chars(p, buf + sizeof(buf), minor, 16).ptr;
  return std::string(buf, p);
}

std::optional<PauseStats> parse_ethtool_pause_reply(Bytes msg) {
  auto body = genl_body(msg, 0);
  if (!body) return std::nullopt;
  PauseStats out;
  std::optional<int> ifindex;
  bool nested_ok = true;
  bool ok = for_each_attr(*body, [&](const Attr& a) {
    if (a.type == ETHTOOL_A_PAUSE_HEADER) {
      ifindex = ethtool_header_ifindex(a.payload);
    } else if (a.type == ETHTOOL_A_PAUSE_STATS) {
      nested_ok = for_each_attr(a.payload, [&](const Attr& s) {
        if (s.type == ETHTOOL_A_PAUSE_STAT_TX_FRAMES) out.tx_frames = u64_of(s.payload);
        if (s.type == ETHTOOL_A_PAUSE_STAT_RX_FRAMES) out.rx_frames = u64_of(s.payload);
      });
    }
  });
  if (!ok || !nested_ok || !ifindex) return std::nullopt;
  out.ifindex = *ifindex;
  return out;
}

std::optional<FecStats> parse_ethtool_fec_reply(Bytes msg) {
  auto body = genl_body(msg, 0);
  if (!body) return std::nullopt;
  FecStats out;
  std::optional<int> ifindex;
  bool nested_ok = true;
  bool ok = for_each_attr(*body, [&](const Attr& a) {
    if (a.type == ETHTOOL_A_FEC_HEADER) {
      ifindex = ethtool_header_ifindex(a.payload);
    } else if (a.type == ETHTOOL_A_FEC_STATS) {
      nested_ok = for_each_attr(a.payload, [&](const Attr& s) {
        if (s.type == ETHTOOL_A_FEC_STAT_CORRECTED) out.corrected_blocks = u64_of(s.payload);
        if (s.type == ETHTOOL_A_FEC_STAT_UNCORR) out.uncorrectable_blocks = u64_of(s.payload);
      });
    }
  });
  if (!ok || !nested_ok || !ifindex) return std::nullopt;
  out.ifindex = *ifindex;
  return out;
}

std::map<std::string, std::uint64_t, std::less<>> parse_proc_net_pairs(
    std::string_view text, std::size_t* malformed, std::span<const std::string_view> only) {
  // "Proto.Field" is one of `only` (or `only` is empty).
  auto wanted = [&](std::string_view proto, std::string_view field) {
    if (only.empty()) return true;
    for (std::string_view k : only) {
      if (k.size() == proto.size() + 1 + field.size() && k.starts_with(proto) &&
          k[proto.size()] == '.' && k.ends_with(field))
        return true;
    }
    return false;
  };
  std::map<std::string, std::uint64_t, std::less<>> out;
  std::vector<std::string_view> lines;
  while (!text.empty()) {
    std::size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    if (split_fields(line).empty()) continue;
    lines.push_back(line);
  }
  std::size_t i = 0;
  while (i < lines.size()) {
    std::vector<std::string_view> head = split_fields(lines[i]);
    if (i + 1 >= lines.size()) {
      ++*malformed;
      break;
    }
    std::vector<std::string_view> values = split_fields(lines[i + 1]);
    std::string_view prefix = head[0];
    if (prefix.empty() || prefix.back() != ':' || values[0] != prefix ||
        values.size() != head.size()) {
      // One bad pair must not shift the rest: a value line with the same
      // prefix goes with it, anything else is where the next pair starts.
      ++*malformed;
      i += values[0] == prefix ? 2 : 1;
      continue;
    }
    std::string_view proto = prefix.substr(0, prefix.size() - 1);
    for (std::size_t k = 1; k < head.size(); ++k) {
      if (!wanted(proto, head[k])) continue;
      std::uint64_t v = 0;
      auto [ptr, ec] = std::from_chars(values[k].data(), values[k].data() + values[k].size(), v);
      if (ec != std::errc() || ptr != values[k].data() + values[k].size()) continue;
      std::string key;
      key.reserve(proto.size() + 1 + head[k].size());
      key.append(proto).append(".").append(head[k]);
      out[std::move(key)] = v;
    }
    i += 2;
  }
  return out;
}

DriverCounterMapping map_driver_counter(std::string_view name) {
  DriverCounterMapping out;
  for (const DriverPattern& p : kDriverPatterns) {
    std::string priority;
    if (!match_pattern(p.pattern, name, &priority)) continue;
    out.metric = p.metric;
    out.direction = std::string(p.direction);
    out.priority = std::move(priority);
    out.kind = std::string(p.kind);
    out.wraps32 = p.wraps32;
    return out;
  }
  return out;
}

}  // namespace nodewatch::nic
