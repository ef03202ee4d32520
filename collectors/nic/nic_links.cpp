#include "nic/nic_links.hpp"

#include <array>
#include <optional>
#include <string_view>
#include <utility>

namespace nodewatch::nic {
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

double as_double(std::uint64_t v) {
  return static_cast<double>(v);
}

}  // namespace

Links::Links(const sources::NameFilterSpec& filter, bool legacy_counters)
    : filter_(filter), legacy_counters_(legacy_counters) {}

std::vector<MetricDesc> Links::metric_descs() {
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
  add(kCarrier, MetricType::kGauge, "", "1 when the interface has carrier (IFLA_CARRIER).", iface);
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
  return d;
}

void Links::collect(const CollectContext& ctx, KernelSource& source, MetricSink& out) {
  selected_.clear();
  complete_ = true;
  Dump<LinkRecord> links = source.dump_links();
  if (links.malformed > 0) out.error("parse_error", links.malformed);
  ++cycle_;
  interfaces_.begin_cycle();
  for (const LinkRecord& link : links.records) {
    if (ctx.should_stop()) {
      complete_ = false;
      break;
    }
    if (!is_valid_utf8(link.name)) {
      out.error("parse_error", "ifindex " + std::to_string(link.ifindex), "name is not UTF-8");
      continue;
    }
    auto seen = interfaces_.see(link.name);
    Interface& state = seen.entry;
    if (state.known && state.cycle == cycle_) {
      out.error("duplicate_interface", link.name);
      continue;
    }
    bool refresh = seen.refresh;
    if (!state.known || state.ifindex != link.ifindex) {
      // New, or the name now belongs to another device: start afresh.
      state = Interface{};
      state.known = true;
      state.ifindex = link.ifindex;
      state.selected = filter_.matches(link.name);
      refresh = true;
    }
    state.cycle = cycle_;
    if (!state.selected) continue;
    if (!emit(link, state, refresh, source, out)) continue;
    selected_.push_back(SelectedLink{link.ifindex, link.name});
  }
  if (complete_) interfaces_.end_cycle();
}

bool Links::emit(const LinkRecord& link, Interface& state, bool refresh, KernelSource& source,
                 MetricSink& out) {
  const std::string_view ifname = link.name;
  if (refresh) {
    DriverInfo info;
    Status s = source.driver_info(link.name, &info);
    if (s == Status::kGone) {
      interfaces_.invalidate(ifname);
      return false;
    }
    if (s == Status::kError) {
      out.error("ethtool_error", ifname, "ETHTOOL_GDRVINFO");
      interfaces_.invalidate(ifname);  // asked again next time
    }
    // Label values must be UTF-8; a driver string that is not is dropped.
    for (std::string* v : {&info.driver, &info.firmware, &info.bus_info}) {
      if (!is_valid_utf8(*v)) v->clear();
    }
    state.info = std::move(info);
  }
  std::optional<std::uint32_t> mbps;
  // A speed that went away is left out; the dump said the link is there.
  // A driver without link settings says so at every call: it is asked
  // again with the facts, not at every collection.
  if (refresh || link.operstate != state.speed_operstate || link.carrier != state.speed_carrier)
    state.speed_unsupported = false;
  Status s = Status::kUnsupported;
  if (!state.speed_unsupported) {
    s = source.link_speed(link.name, &mbps);
    state.speed_unsupported = s == Status::kUnsupported;
    state.speed_operstate = link.operstate;
    state.speed_carrier = link.carrier;
  }
  if (s == Status::kError) out.error("ethtool_error", ifname, "ETHTOOL_GLINKSETTINGS");
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
  if (s == Status::kOk && mbps) out.add(kSpeed, {ifname}, *mbps * 1e6 / 8.0);
  if (link.mtu) out.add(kMtu, {ifname}, *link.mtu);
  for (std::size_t i = 0; i < link.stat_count; ++i) {
    if (!legacy_counters_ && is_legacy_link_stat(i)) continue;
    out.add(kLinkStatMetrics[i].name, {ifname}, as_double(link.stats[i]));
  }
  return true;
}

}  // namespace nodewatch::nic
