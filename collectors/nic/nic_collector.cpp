#include "nic/nic_collector.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <set>
#include <span>

#include "nodewatch/options.hpp"
#include "nodewatch/unique_fd.hpp"

namespace nodewatch {
namespace nic {
namespace {

// One row per rtnl_link_stats64 field, in the kernel's order (LinkStat).
struct LinkStatMetric {
  std::string_view name;
  std::string_view unit;
  std::string_view help;
};

constexpr std::array<LinkStatMetric, kLinkStatCount> kLinkStatMetrics = {{
    {"nodewatch_nic_received_packets_total", "",
     "Packets received (rtnl_link_stats64 rx_packets)."},
    {"nodewatch_nic_transmitted_packets_total", "", "Packets transmitted (tx_packets)."},
    {"nodewatch_nic_received_bytes_total", "bytes", "Bytes received (rx_bytes)."},
    {"nodewatch_nic_transmitted_bytes_total", "bytes", "Bytes transmitted (tx_bytes)."},
    {"nodewatch_nic_receive_errors_total", "", "Bad packets received (rx_errors)."},
    {"nodewatch_nic_transmit_errors_total", "",
     "Packets that could not be transmitted (tx_errors)."},
    {"nodewatch_nic_receive_dropped_total", "",
     "Received packets dropped by the kernel or driver, e.g. no buffer space (rx_dropped)."},
    {"nodewatch_nic_transmit_dropped_total", "",
     "Packets dropped on the way to the device, e.g. link down (tx_dropped)."},
    {"nodewatch_nic_received_multicast_packets_total", "",
     "Multicast packets received (multicast)."},
    {"nodewatch_nic_collisions_total", "", "Collisions on a half-duplex medium (collisions)."},
    {"nodewatch_nic_receive_length_errors_total", "",
     "Received frames with a wrong length (rx_length_errors)."},
    {"nodewatch_nic_receive_over_errors_total", "", "Receive ring overflows (rx_over_errors)."},
    {"nodewatch_nic_receive_crc_errors_total", "",
     "Received frames with a bad CRC/FCS (rx_crc_errors)."},
    {"nodewatch_nic_receive_frame_errors_total", "",
     "Received frames with alignment errors (rx_frame_errors)."},
    {"nodewatch_nic_receive_fifo_errors_total", "", "Receive FIFO overruns (rx_fifo_errors)."},
    {"nodewatch_nic_receive_missed_total", "",
     "Packets the device missed for lack of host buffers (rx_missed_errors)."},
    {"nodewatch_nic_transmit_aborted_errors_total", "",
     "Transmissions aborted by the device (tx_aborted_errors)."},
    {"nodewatch_nic_transmit_carrier_errors_total", "",
     "Transmit errors for loss of carrier (tx_carrier_errors)."},
    {"nodewatch_nic_transmit_fifo_errors_total", "", "Transmit FIFO underruns (tx_fifo_errors)."},
    {"nodewatch_nic_transmit_heartbeat_errors_total", "",
     "Transmit heartbeat (SQE test) errors (tx_heartbeat_errors)."},
    {"nodewatch_nic_transmit_window_errors_total", "",
     "Late collisions on transmit (tx_window_errors)."},
    {"nodewatch_nic_received_compressed_packets_total", "",
     "Compressed packets received (rx_compressed)."},
    {"nodewatch_nic_transmitted_compressed_packets_total", "",
     "Compressed packets transmitted (tx_compressed)."},
    {"nodewatch_nic_receive_nohandler_total", "",
     "Received packets dropped for lack of a protocol handler (rx_nohandler, kernel 4.6+)."},
    {"nodewatch_nic_receive_otherhost_dropped_total", "",
     "Received packets dropped as addressed to another host (rx_otherhost_dropped, kernel "
     "5.19+)."},
}};

constexpr std::string_view kInfo = "nodewatch_nic_info";
constexpr std::string_view kUp = "nodewatch_nic_up";
constexpr std::string_view kCarrier = "nodewatch_nic_carrier";
constexpr std::string_view kCarrierChanges = "nodewatch_nic_carrier_changes_total";
constexpr std::string_view kCarrierUp = "nodewatch_nic_carrier_up_changes_total";
constexpr std::string_view kCarrierDown = "nodewatch_nic_carrier_down_changes_total";
constexpr std::string_view kSpeed = "nodewatch_nic_speed_bytes_per_second";
constexpr std::string_view kMtu = "nodewatch_nic_mtu_bytes";
constexpr std::string_view kQdiscBytes = "nodewatch_nic_qdisc_bytes_total";
constexpr std::string_view kQdiscPackets = "nodewatch_nic_qdisc_packets_total";
constexpr std::string_view kQdiscDrops = "nodewatch_nic_qdisc_drops_total";
constexpr std::string_view kQdiscOverlimits = "nodewatch_nic_qdisc_overlimits_total";
constexpr std::string_view kQdiscRequeues = "nodewatch_nic_qdisc_requeues_total";
constexpr std::string_view kQdiscBacklog = "nodewatch_nic_qdisc_backlog_bytes";
constexpr std::string_view kQdiscQlen = "nodewatch_nic_qdisc_queue_length_packets";
constexpr std::string_view kPfcFrames = "nodewatch_nic_pfc_pause_frames_total";
constexpr std::string_view kPfcSeconds = "nodewatch_nic_pfc_pause_seconds_total";
constexpr std::string_view kPauseFrames = "nodewatch_nic_pause_frames_total";
constexpr std::string_view kPauseStorm = "nodewatch_nic_pause_storm_events_total";
constexpr std::string_view kDiscards = "nodewatch_nic_discards_total";
constexpr std::string_view kOutOfBuffer = "nodewatch_nic_out_of_buffer_total";
constexpr std::string_view kFecCorrected = "nodewatch_nic_fec_corrected_blocks_total";
constexpr std::string_view kFecUncorrectable = "nodewatch_nic_fec_uncorrectable_blocks_total";
constexpr std::string_view kDriverCounter = "nodewatch_nic_driver_counters_total";

// Node-level TCP/IP counters: metric, then the "Proto.Field" keys of
// /proc/net/snmp or netstat whose sum it is.
struct ProtocolMetric {
  std::string_view name;
  std::string_view help;
  std::array<std::string_view, 2> keys;
};

constexpr std::array<ProtocolMetric, 10> kProtocolMetrics = {{
    {"nodewatch_nic_tcp_retransmitted_segments_total",
     "TCP segments retransmitted (Tcp RetransSegs in /proc/net/snmp).",
     {"Tcp.RetransSegs", ""}},
    {"nodewatch_nic_tcp_timeouts_total",
     "TCP retransmission timeouts (TcpExt TCPTimeouts in /proc/net/netstat).",
     {"TcpExt.TCPTimeouts", ""}},
    {"nodewatch_nic_tcp_syn_retransmits_total",
     "TCP SYN and SYN-ACK retransmissions (TcpExt TCPSynRetrans).",
     {"TcpExt.TCPSynRetrans", ""}},
    {"nodewatch_nic_tcp_listen_overflows_total",
     "Connections dropped because a listen queue was full (TcpExt ListenOverflows).",
     {"TcpExt.ListenOverflows", ""}},
    {"nodewatch_nic_tcp_listen_drops_total",
     "Connection requests dropped by a listening socket for any reason (TcpExt ListenDrops).",
     {"TcpExt.ListenDrops", ""}},
    {"nodewatch_nic_tcp_receive_queue_drops_total",
     "TCP segments dropped because the socket receive buffer was full (TcpExt TCPRcvQDrop).",
     {"TcpExt.TCPRcvQDrop", ""}},
    {"nodewatch_nic_tcp_input_errors_total",
     "TCP segments received in error, e.g. bad checksum (Tcp InErrs).",
     {"Tcp.InErrs", ""}},
    {"nodewatch_nic_udp_receive_buffer_errors_total",
     "UDP datagrams dropped because the socket receive buffer was full (Udp RcvbufErrors).",
     {"Udp.RcvbufErrors", ""}},
    {"nodewatch_nic_udp_input_errors_total",
     "UDP datagrams received in error, including receive buffer errors (Udp InErrors).",
     {"Udp.InErrors", ""}},
    {"nodewatch_nic_ip_input_errors_total",
     "IPv4 datagrams discarded for header or address errors (Ip InHdrErrors + InAddrErrors).",
     {"Ip.InHdrErrors", "Ip.InAddrErrors"}},
}};

const MetricTable& nic_metric_table() {
  static const MetricTable kTable = [] {
    std::vector<MetricDesc> d;
    auto add = [&](std::string_view name, MetricType type, std::string_view unit,
                   std::string_view help, std::vector<std::string> labels) {
      d.push_back(MetricDesc{std::string(name), type, std::string(unit), std::string(help),
                             std::move(labels)});
    };
    const std::vector<std::string> iface = {"interface"};
    add(kInfo, MetricType::kGauge, "",
        "Facts about a network interface, value 1 (driver, firmware and bus from ethtool, empty "
        "when the driver does not say).",
        {"interface", "driver", "firmware", "bus_info", "mac", "operstate"});
    add(kUp, MetricType::kGauge, "", "1 when the interface's operational state is up (RFC 2863).",
        iface);
    add(kCarrier, MetricType::kGauge, "", "1 when the interface has carrier (IFLA_CARRIER).",
        iface);
    add(kCarrierChanges, MetricType::kCounter, "",
        "Carrier changes, up and down (IFLA_CARRIER_CHANGES).", iface);
    add(kCarrierUp, MetricType::kCounter, "", "Carrier up events (kernel 4.16+).", iface);
    add(kCarrierDown, MetricType::kCounter, "", "Carrier down events (kernel 4.16+).", iface);
    add(kSpeed, MetricType::kGauge, "bytes_per_second",
        "Negotiated link speed; absent when the kernel does not know it.", iface);
    add(kMtu, MetricType::kGauge, "bytes", "Maximum transmission unit.", iface);
    for (const LinkStatMetric& m : kLinkStatMetrics) {
      add(m.name, MetricType::kCounter, m.unit, m.help, iface);
    }
    const std::vector<std::string> q = {"interface", "qdisc", "handle", "parent"};
    add(kQdiscBytes, MetricType::kCounter, "bytes", "Bytes sent through a queueing discipline.", q);
    add(kQdiscPackets, MetricType::kCounter, "",
        "Packets sent through a queueing discipline (64-bit, or 32-bit with wraps accumulated).",
        q);
    add(kQdiscDrops, MetricType::kCounter, "",
        "Packets dropped by a queueing discipline (32-bit in the kernel, wraps accumulated).", q);
    add(kQdiscOverlimits, MetricType::kCounter, "",
        "Times a queueing discipline was over its limit, e.g. throttled by a shaper.", q);
    add(kQdiscRequeues, MetricType::kCounter, "",
        "Packets a queueing discipline had to requeue (the device was busy).", q);
    add(kQdiscBacklog, MetricType::kGauge, "bytes", "Bytes queued in a queueing discipline.", q);
    add(kQdiscQlen, MetricType::kGauge, "packets", "Packets queued in a queueing discipline.", q);
    add(kPfcFrames, MetricType::kCounter, "",
        "Priority flow control (802.1Qbb) pause frames per priority, from the driver "
        "(rx: the fabric pauses us; tx: we pause the fabric).",
        {"interface", "direction", "priority"});
    add(kPfcSeconds, MetricType::kCounter, "seconds",
        "Time paused by priority flow control per priority, from the driver.",
        {"interface", "direction", "priority"});
    add(kPauseFrames, MetricType::kCounter, "",
        "Link-level (802.3x) pause frames, from ethtool's standard statistics or the driver.",
        {"interface", "direction"});
    add(kPauseStorm, MetricType::kCounter, "",
        "Pause storm events detected by the device (error: pause transmission was disabled).",
        {"interface", "level"});
    add(kDiscards, MetricType::kCounter, "",
        "Packets the device discarded for lack of buffers or on transmit; priority is empty for "
        "the whole port.",
        {"interface", "direction", "priority"});
    add(kOutOfBuffer, MetricType::kCounter, "",
        "Packets dropped because a receive queue had no software buffer (mlx5 rx_out_of_buffer).",
        iface);
    add(kFecCorrected, MetricType::kCounter, "",
        "FEC blocks with errors corrected (ethtool standard FEC statistics).", iface);
    add(kFecUncorrectable, MetricType::kCounter, "",
        "FEC blocks with errors that could not be corrected.", iface);
    add(kDriverCounter, MetricType::kCounter, "",
        "Other allow-listed driver statistics (ethtool -S), by the driver's own name.",
        {"interface", "counter"});
    for (const ProtocolMetric& m : kProtocolMetrics) {
      add(m.name, MetricType::kCounter, "", m.help, {});
    }
    return MetricTable(std::move(d));
  }();
  return kTable;
}

// Driver facts and statistic names are read again after this many collects
// (5 minutes at the default 15s): a firmware update, or PFC enabled on
// another priority with the same number of statistics.
constexpr std::uint64_t kRefreshCycles = 20;

// Bounds the regular expressions from the configuration: libstdc++ compiles
// and matches recursively, so a huge pattern could exhaust the stack.
constexpr std::size_t kMaxRegexLength = 1024;
constexpr std::size_t kMaxProcFileBytes = 1 << 20;

std::optional<std::regex> compile(const std::string& pattern) {
  if (pattern.empty()) return std::nullopt;
  return std::regex(pattern, std::regex::ECMAScript);
}

bool valid_regex(OptionReader& r, std::string_view key, const std::string& value) {
  if (value.size() > kMaxRegexLength) {
    r.error(key,
            "regular expression is longer than " + std::to_string(kMaxRegexLength) + " characters");
    return false;
  }
  try {
    compile(value);
  } catch (const std::regex_error& e) {
    r.error(key, "invalid regular expression \"" + value + "\": " + e.what());
    return false;
  }
  return true;
}

enum class ReadResult { kOk, kAbsent, kError };

// Reads a small procfs file whole (they are generated at open/read time).
ReadResult read_proc_file(const std::string& path, std::string* out) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return errno == ENOENT ? ReadResult::kAbsent : ReadResult::kError;
  out->clear();
  char buf[8192];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ReadResult::kError;
    }
    if (n == 0) break;
    out->append(buf, static_cast<std::size_t>(n));
    if (out->size() > kMaxProcFileBytes) return ReadResult::kError;
  }
  return ReadResult::kOk;
}

double as_double(std::uint64_t v) {
  return static_cast<double>(v);
}

}  // namespace

std::vector<std::string> default_driver_counters() {
  return {
      // mlx5 (ConnectX): PFC pause frames and duration per priority, link pause
      R"((rx|tx)_prio[0-7]_pause(_duration)?)",
      R"((rx|tx)_pause_ctrl_phy)",
      R"(tx_pause_storm_(warning|error)_events)",
      // mlx5: discards on the physical port and per priority, out of buffer
      R"((rx|tx)_discards_phy)",
      R"(rx_prio[0-7]_discards)",
      R"(rx_out_of_buffer)",
      // mlx5: physical errors
      R"(rx_(crc_errors|symbol_err|pcs_symbol_err)_phy)",
      // ice (Intel E800): PFC and link pause requests, port drops, CRC errors
      R"((rx|tx)_priority_[0-7]_xoff\.nic)",
      R"(link_xoff_(rx|tx)\.nic)",
      R"(rx_dropped\.nic)",
      R"(tx_dropped_link_down\.nic)",
      R"(rx_crc_errors\.nic)",
  };
}

NicOptions read_nic_options(OptionReader& r) {
  NicOptions out;
  std::string include = r.get_string("interfaces_include", out.interfaces_include);
  if (valid_regex(r, "interfaces_include", include)) out.interfaces_include = include;
  std::string exclude = r.get_string("interfaces_exclude", out.interfaces_exclude);
  if (valid_regex(r, "interfaces_exclude", exclude)) out.interfaces_exclude = exclude;
  std::vector<std::string> counters = r.get_string_array("driver_counters", out.driver_counters);
  bool counters_ok = true;
  for (const std::string& c : counters) {
    if (c.empty()) {
      r.error("driver_counters", "an empty regular expression would match nothing");
      counters_ok = false;
    } else if (!valid_regex(r, "driver_counters", c)) {
      counters_ok = false;
    }
  }
  if (counters_ok) out.driver_counters = std::move(counters);
  out.max_driver_counters = r.get_int("max_driver_counters", out.max_driver_counters, 0, 4096);
  out.qdiscs = r.get_bool("qdiscs", out.qdiscs);
  out.driver_statistics = r.get_bool("driver_statistics", out.driver_statistics);
  out.protocol_statistics = r.get_bool("protocol_statistics", out.protocol_statistics);
  return out;
}

NicCollector::NicCollector(Roots roots, NicOptions options, std::unique_ptr<KernelSource> source)
    : roots_(std::move(roots)),
      options_(std::move(options)),
      source_(std::move(source)),
      include_(compile(options_.interfaces_include)),
      exclude_(compile(options_.interfaces_exclude)) {
  for (const std::string& c : options_.driver_counters) {
    driver_counters_.emplace_back(c, std::regex::ECMAScript);
  }
}

const MetricTable& NicCollector::metrics() const {
  return nic_metric_table();
}

bool NicCollector::is_selected(std::string_view name) const {
  if (include_ && !std::regex_search(name.begin(), name.end(), *include_)) return false;
  if (exclude_ && std::regex_search(name.begin(), name.end(), *exclude_)) return false;
  return true;
}

void NicCollector::collect(const CollectContext& ctx, MetricSink& out) {
  if (!source_) source_ = make_kernel_source();
  ++cycle_;
  Dump<LinkRecord> links = source_->dump_links();
  if (links.malformed > 0) out.error("parse_error", links.malformed);

  if (options_.driver_statistics) collect_ethtool_netlink(out);

  bool complete = true;
  for (const LinkRecord& link : links.records) {
    if (ctx.should_stop()) {
      complete = false;
      break;
    }
    if (!is_valid_utf8(link.name)) {
      out.error("parse_error");
      continue;
    }
    auto it = interfaces_.find(link.ifindex);
    if (it == interfaces_.end() || it->second.name != link.name) {
      // New, renamed, or an index reused by another device: start afresh.
      InterfaceState fresh;
      fresh.name = link.name;
      fresh.selected = is_selected(link.name);
      it = interfaces_.insert_or_assign(link.ifindex, std::move(fresh)).first;
    }
    InterfaceState& state = it->second;
    if (state.last_seen == cycle_) {
      out.error("duplicate_interface");
      continue;
    }
    state.last_seen = cycle_;
    if (!state.selected) continue;
    emit_link(link, state, out);
  }
  if (complete) {
    std::erase_if(interfaces_, [this](const auto& e) { return e.second.last_seen != cycle_; });
  }
  if (options_.qdiscs && !ctx.should_stop()) collect_qdiscs(out);
  if (options_.protocol_statistics) collect_protocols(out);
}

void NicCollector::emit_link(const LinkRecord& link, InterfaceState& state, MetricSink& out) {
  const std::string_view ifname = link.name;
  if (state.info_cycle == 0 || cycle_ - state.info_cycle >= kRefreshCycles) {
    DriverInfo info;
    Status s = source_->driver_info(link.name, &info);
    if (s == Status::kError) out.error("ethtool_error");
    if (s == Status::kGone) return;
    // Label values must be UTF-8; a driver string that is not is dropped.
    for (std::string* v : {&info.driver, &info.firmware, &info.bus_info}) {
      if (!is_valid_utf8(*v)) v->clear();
    }
    state.info = std::move(info);
    state.info_cycle = cycle_;
  }
  std::string_view operstate = link.operstate ? operstate_name(*link.operstate) : "unknown";
  out.add(
      kInfo,
      {ifname, state.info.driver, state.info.firmware, state.info.bus_info, link.mac, operstate},
      1.0);
  out.add(kUp, {ifname}, link.operstate && *link.operstate == kOperUp ? 1.0 : 0.0);
  if (link.carrier) out.add(kCarrier, {ifname}, *link.carrier ? 1.0 : 0.0);
  if (link.carrier_changes) out.add(kCarrierChanges, {ifname}, *link.carrier_changes);
  if (link.carrier_up_count) out.add(kCarrierUp, {ifname}, *link.carrier_up_count);
  if (link.carrier_down_count) out.add(kCarrierDown, {ifname}, *link.carrier_down_count);
  if (link.mtu) out.add(kMtu, {ifname}, *link.mtu);
  std::optional<std::uint32_t> mbps;
  Status s = source_->link_speed(link.name, &mbps);
  if (s == Status::kError) out.error("ethtool_error");
  if (s == Status::kOk && mbps) out.add(kSpeed, {ifname}, *mbps * 1e6 / 8.0);
  for (std::size_t i = 0; i < link.stat_count; ++i) {
    out.add(kLinkStatMetrics[i].name, {ifname}, as_double(link.stats[i]));
  }
  if (options_.driver_statistics) {
    emit_driver_stats(link, state, pause_.contains(link.ifindex), out);
    if (auto p = pause_.find(link.ifindex); p != pause_.end()) {
      if (p->second.rx_frames)
        out.add(kPauseFrames, {ifname, "rx"}, as_double(*p->second.rx_frames));
      if (p->second.tx_frames)
        out.add(kPauseFrames, {ifname, "tx"}, as_double(*p->second.tx_frames));
    }
    if (auto f = fec_.find(link.ifindex); f != fec_.end()) {
      if (f->second.corrected_blocks) {
        out.add(kFecCorrected, {ifname}, as_double(*f->second.corrected_blocks));
      }
      if (f->second.uncorrectable_blocks) {
        out.add(kFecUncorrectable, {ifname}, as_double(*f->second.uncorrectable_blocks));
      }
    }
  }
}

void NicCollector::refresh_driver_names(std::vector<std::string> names, DriverStats& stats) {
  stats.valid = false;
  stats.selected.clear();
  stats.over_limit = 0;
  stats.names = std::move(names);
  const std::vector<std::string>& all = stats.names;
  // Two driver names that would land on the same curated series: the second
  // stays a generic driver counter.
  std::set<std::tuple<DriverMetric, std::string, std::string, std::string>> curated;
  for (std::uint32_t i = 0; i < all.size(); ++i) {
    const std::string& name = all[i];
    if (name.empty() || !is_valid_utf8(name)) continue;
    bool allowed = false;
    for (const std::regex& re : driver_counters_) {
      if (std::regex_match(name, re)) {
        allowed = true;
        break;
      }
    }
    if (!allowed) continue;
    if (stats.selected.size() >= static_cast<std::size_t>(options_.max_driver_counters)) {
      ++stats.over_limit;
      continue;
    }
    DriverCounterMapping m = map_driver_counter(name);
    if (m.metric != DriverMetric::kGeneric &&
        !curated.insert({m.metric, m.direction, m.priority, m.level}).second) {
      m = DriverCounterMapping{};
    }
    stats.selected.push_back(SelectedCounter{i, name, std::move(m)});
  }
  stats.valid = true;
  stats.read_cycle = cycle_;
}

void NicCollector::emit_driver_stats(const LinkRecord& link, InterfaceState& state,
                                     bool has_std_pause, MetricSink& out) {
  DriverStats& stats = state.stats;
  bool refresh_due = stats.read_cycle == 0 || cycle_ - stats.read_cycle >= kRefreshCycles;
  if (stats.unsupported && !refresh_due) return;
  std::uint32_t count = 0;
  Status s = source_->stats_count(link.name, &count);
  if (s != Status::kOk) {
    if (s == Status::kError) out.error("ethtool_error");
    if (s == Status::kUnsupported) {
      stats = DriverStats{};
      stats.unsupported = true;
      stats.read_cycle = cycle_;
    }
    return;
  }
  stats.unsupported = false;
  if (count == 0) {
    stats = DriverStats{};
    stats.read_cycle = cycle_;
    return;
  }
  // The names are read every cycle (no firmware access): a driver may
  // reorder or rename its statistics without changing their number (mlx5
  // when PFC moves to another priority), and values must never land under
  // another counter's labels.
  std::vector<std::string> names;
  s = source_->stats_names(link.name, count, &names);
  if (s != Status::kOk || names.size() != count) {
    out.error(s == Status::kOk ? "driver_stats_changed" : "ethtool_error");
    stats.valid = false;
    return;
  }
  if (!stats.valid || count != stats.count || names != stats.names || refresh_due) {
    stats.count = count;
    refresh_driver_names(std::move(names), stats);
    if (!stats.valid) return;
  }
  if (stats.over_limit > 0) out.error("driver_counter_limit", stats.over_limit);
  if (stats.selected.empty()) return;
  std::vector<std::uint64_t> values;
  s = source_->stats_values(link.name, stats.count, &values);
  if (s == Status::kError) out.error("ethtool_error");
  if (s != Status::kOk) return;
  if (values.size() != stats.count) {
    // The set changed since the names were read: names again next time.
    out.error("driver_stats_changed");
    stats.valid = false;
    return;
  }
  const std::string_view ifname = link.name;
  for (const SelectedCounter& c : stats.selected) {
    double v = as_double(values[c.index]);
    const DriverCounterMapping& m = c.mapping;
    switch (m.metric) {
      case DriverMetric::kPfcPauseFrames:
        out.add(kPfcFrames, {ifname, m.direction, m.priority}, v);
        break;
      case DriverMetric::kPfcPauseDuration:
        // mlx5 counts pause duration in microseconds (counters.rst).
        out.add(kPfcSeconds, {ifname, m.direction, m.priority}, v / 1e6);
        break;
      case DriverMetric::kPauseFrames:
        // The standard statistic, when the kernel has it, is the same count
        // (mlx5 serves both from one register): the driver's copy then goes
        // under its own name.
        if (has_std_pause) {
          out.add(kDriverCounter, {ifname, c.name}, v);
        } else {
          out.add(kPauseFrames, {ifname, m.direction}, v);
        }
        break;
      case DriverMetric::kPauseStorm: out.add(kPauseStorm, {ifname, m.level}, v); break;
      case DriverMetric::kDiscards: out.add(kDiscards, {ifname, m.direction, m.priority}, v); break;
      case DriverMetric::kOutOfBuffer: out.add(kOutOfBuffer, {ifname}, v); break;
      case DriverMetric::kGeneric: out.add(kDriverCounter, {ifname, c.name}, v); break;
    }
  }
}

void NicCollector::collect_ethtool_netlink(MetricSink& out) {
  pause_.clear();
  fec_.clear();
  Dump<PauseStats> pause;
  Status s = source_->pause_stats(&pause);
  if (s == Status::kError) out.error("ethtool_error");
  if (pause.malformed > 0) out.error("parse_error", pause.malformed);
  for (const PauseStats& p : pause.records) {
    // A driver without pause statistics still answers, with no numbers.
    if (p.rx_frames || p.tx_frames) pause_[p.ifindex] = p;
  }
  Dump<FecStats> fec;
  s = source_->fec_stats(&fec);
  if (s == Status::kError) out.error("ethtool_error");
  if (fec.malformed > 0) out.error("parse_error", fec.malformed);
  for (const FecStats& f : fec.records) {
    if (f.corrected_blocks || f.uncorrectable_blocks) fec_[f.ifindex] = f;
  }
}

void NicCollector::collect_qdiscs(MetricSink& out) {
  Dump<QdiscRecord> dump;
  try {
    dump = source_->dump_qdiscs();
  } catch (const CollectError& e) {
    out.error(e.reason());
    return;
  }
  if (dump.malformed > 0) out.error("parse_error", dump.malformed);
  for (const QdiscRecord& q : dump.records) {
    auto iface = interfaces_.find(q.ifindex);
    if (iface == interfaces_.end() || !iface->second.selected ||
        iface->second.last_seen != cycle_) {
      continue;
    }
    if (!is_valid_utf8(q.kind)) {
      out.error("parse_error");
      continue;
    }
    QdiscKey key{q.ifindex, q.handle, q.parent};
    auto it = qdiscs_.find(key);
    if (it == qdiscs_.end() || it->second.kind != q.kind) {
      QdiscState fresh;
      fresh.kind = q.kind;
      it = qdiscs_.insert_or_assign(key, std::move(fresh)).first;
    }
    QdiscState& st = it->second;
    if (st.last_seen == cycle_) {
      out.error("duplicate_qdisc");
      continue;
    }
    st.last_seen = cycle_;
    std::string handle = format_qdisc_handle(q.handle);
    std::string parent = format_qdisc_parent(q.parent);
    const std::string& ifname = iface->second.name;
    std::array<std::string_view, 4> labels = {ifname, q.kind, handle, parent};
    auto add = [&](std::string_view name, double v) {
      out.add(name, {labels[0], labels[1], labels[2], labels[3]}, v);
    };
    if (q.has_basic) {
      add(kQdiscBytes, as_double(q.bytes));
      std::uint64_t packets = q.packets64 ? *q.packets64 : st.packets.update(q.packets32);
      add(kQdiscPackets, as_double(packets));
    }
    if (q.has_queue) {
      add(kQdiscDrops, as_double(st.drops.update(q.drops)));
      add(kQdiscOverlimits, as_double(st.overlimits.update(q.overlimits)));
      add(kQdiscRequeues, as_double(st.requeues.update(q.requeues)));
      add(kQdiscBacklog, q.backlog);
      add(kQdiscQlen, q.qlen);
    }
  }
  std::erase_if(qdiscs_, [this](const auto& e) { return e.second.last_seen != cycle_; });
}

void NicCollector::collect_protocols(MetricSink& out) {
  std::map<std::string, std::uint64_t, std::less<>> values;
  std::string text;
  bool any = false;
  for (std::string_view file : {"snmp", "netstat"}) {
    std::string path = (roots_.procfs / "net" / file).native();
    ReadResult r = read_proc_file(path, &text);
    if (r == ReadResult::kAbsent) continue;
    if (r == ReadResult::kError) {
      out.error("read_error");
      continue;
    }
    any = true;
    std::size_t malformed = 0;
    values.merge(parse_proc_net_pairs(text, &malformed));
    if (malformed > 0) out.error("parse_error", malformed);
  }
  if (!any) return;
  for (const ProtocolMetric& m : kProtocolMetrics) {
    std::uint64_t sum = 0;
    bool found = true;
    for (std::string_view key : m.keys) {
      if (key.empty()) continue;
      auto it = values.find(key);
      if (it == values.end()) {
        found = false;
        break;
      }
      sum += it->second;
    }
    // A field this kernel does not have (TCPRcvQDrop before 5.x): left out.
    if (found) out.add(m.name, {}, as_double(sum));
  }
}

}  // namespace nic

const CollectorSpec& nic_collector_spec() {
  static const CollectorSpec kSpec = [] {
    CollectorSpec spec;
    spec.name = "nic";
    spec.description =
        "Network interfaces: link statistics, qdiscs, driver counters (PFC, discards), TCP/IP";
    spec.enabled_by_default = true;
    // SIOCETHTOOL runs under RTNL, which a NIC's firmware command can hold for
    // tens of seconds: the collector must not take a shared worker with it.
    spec.own_thread = true;
    spec.default_interval = std::chrono::seconds(15);
    spec.default_timeout = std::chrono::seconds(10);
    spec.read_options = typed_options<nic::NicOptions>(nic::read_nic_options);
    spec.metrics = nic::nic_metric_table;
    spec.create = [](const CollectorEnv& env) -> std::unique_ptr<Collector> {
      return std::make_unique<nic::NicCollector>(env.roots, env.options_as<nic::NicOptions>());
    };
    return spec;
  }();
  return kSpec;
}

}  // namespace nodewatch
