#include "nic/nic_links.hpp"

#include <array>
#include <optional>
#include <string_view>
#include <utility>

#include "nic/nic_metrics.hpp"

namespace nodewatch::nic {
namespace {

// One row per rtnl_link_stats64 field, in the kernel's order (LinkStat).
struct LinkStatMetric {
  const Family& family;
};

constexpr std::array<LinkStatMetric, kLinkStatCount> kLinkStatMetrics = {{
    {families::kReceivedPacketsTotal},
    {families::kTransmittedPacketsTotal},
    {families::kReceivedBytesTotal},
    {families::kTransmittedBytesTotal},
    {families::kReceiveErrorsTotal},
    {families::kTransmitErrorsTotal},
    {families::kReceiveDroppedTotal},
    {families::kTransmitDroppedTotal},
    {families::kReceivedMulticastPacketsTotal},
    {families::kCollisionsTotal},
    {families::kReceiveLengthErrorsTotal},
    {families::kReceiveOverErrorsTotal},
    {families::kReceiveCrcErrorsTotal},
    {families::kReceiveFrameErrorsTotal},
    {families::kReceiveFifoErrorsTotal},
    {families::kReceiveMissedTotal},
    {families::kTransmitAbortedErrorsTotal},
    {families::kTransmitCarrierErrorsTotal},
    {families::kTransmitFifoErrorsTotal},
    {families::kTransmitHeartbeatErrorsTotal},
    {families::kTransmitWindowErrorsTotal},
    {families::kReceivedCompressedPacketsTotal},
    {families::kTransmittedCompressedPacketsTotal},
    {families::kReceiveNohandlerTotal},
    {families::kReceiveOtherhostDroppedTotal},
}};

double as_double(std::uint64_t v) {
  return static_cast<double>(v);
}

}  // namespace

Links::Links(const sources::NameFilterSpec& filter, bool legacy_counters)
    : filter_(filter), legacy_counters_(legacy_counters) {}

std::vector<MetricDesc> Links::metric_descs() {
  std::vector<MetricDesc> d;
  d.push_back(describe(families::kInfo));
  d.push_back(describe(families::kUp));
  d.push_back(describe(families::kCarrier));
  d.push_back(describe(families::kCarrierChangesTotal));
  d.push_back(describe(families::kCarrierUpChangesTotal));
  d.push_back(describe(families::kCarrierDownChangesTotal));
  d.push_back(describe(families::kSpeedBytesPerSecond));
  d.push_back(describe(families::kMtuBytes));
  for (const LinkStatMetric& m : kLinkStatMetrics) d.push_back(describe(m.family));
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
      families::kInfo,
      {ifname, state.info.driver, state.info.firmware, state.info.bus_info, link.mac, operstate},
      1.0);
  out.add(families::kUp, {ifname}, link.operstate && *link.operstate == kOperUp ? 1.0 : 0.0);
  if (link.carrier) out.add(families::kCarrier, {ifname}, *link.carrier ? 1.0 : 0.0);
  if (link.carrier_changes)
    out.add(families::kCarrierChangesTotal, {ifname}, *link.carrier_changes);
  if (link.carrier_up_count)
    out.add(families::kCarrierUpChangesTotal, {ifname}, *link.carrier_up_count);
  if (link.carrier_down_count)
    out.add(families::kCarrierDownChangesTotal, {ifname}, *link.carrier_down_count);
  if (s == Status::kOk && mbps)
    out.add(families::kSpeedBytesPerSecond, {ifname}, *mbps * 1e6 / 8.0);
  if (link.mtu) out.add(families::kMtuBytes, {ifname}, *link.mtu);
  for (std::size_t i = 0; i < link.stat_count; ++i) {
    if (!legacy_counters_ && is_legacy_link_stat(i)) continue;
    out.add(kLinkStatMetrics[i].family, {ifname}, as_double(link.stats[i]));
  }
  return true;
}

}  // namespace nodewatch::nic
