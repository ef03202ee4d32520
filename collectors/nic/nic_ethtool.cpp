#include "nic/nic_ethtool.hpp"

#include <algorithm>
#include <set>
#include <string_view>
#include <tuple>
#include <utility>

#include "nic/nic_metrics.hpp"

namespace nodewatch::nic {
namespace {

double as_double(std::uint64_t v) {
  return static_cast<double>(v);
}

// Forgets what was read of an interface's statistics, keeping its index.
template <class Stats>
void reset(Stats& stats) {
  int ifindex = stats.ifindex;
  stats = Stats{};
  stats.ifindex = ifindex;
}

}  // namespace

std::string anchored(std::string_view pattern) {
  std::string out = "^(?:";
  out.append(pattern);
  out.append(")$");
  return out;
}

EthtoolStats::EthtoolStats(const std::vector<std::string>& driver_counters,
                           std::int64_t max_driver_counters,
                           std::shared_ptr<sources::WrapCounters> counters)
    : max_driver_counters_(max_driver_counters),
      counters_(counters ? std::move(counters) : std::make_shared<sources::WrapCounters>()) {
  for (const std::string& c : driver_counters) {
    allow_.emplace_back(sources::NameFilterSpec{anchored(c), ""});
  }
}

std::vector<MetricDesc> EthtoolStats::metric_descs() {
  std::vector<MetricDesc> d;
  d.push_back(describe(families::kPfcPauseFramesTotal));
  d.push_back(describe(families::kPfcPauseSecondsTotal));
  d.push_back(describe(families::kPauseFramesTotal));
  d.push_back(describe(families::kPauseStormEventsTotal));
  d.push_back(describe(families::kDiscardsTotal));
  d.push_back(describe(families::kOutOfBufferTotal));
  d.push_back(describe(families::kFecCorrectedBlocksTotal));
  d.push_back(describe(families::kFecUncorrectableBlocksTotal));
  d.push_back(describe(families::kDriverCountersTotal));
  d.push_back(describe(families::kPcieStalledRatio));
  d.push_back(describe(families::kPcieStalledSecondsTotal));
  d.push_back(describe(families::kPcieBufferOverflowPacketsTotal));
  d.push_back(describe(families::kPcieRecoveriesTotal));
  d.push_back(describe(families::kPcieCongestionEventsTotal));
  d.push_back(describe(families::kPcieCongested));
  d.push_back(describe(families::kReceiveBufferAlmostFullTotal));
  d.push_back(describe(families::kPriorityDiscardsTotal));
  d.push_back(describe(families::kEcnMarkedPacketsTotal));
  d.push_back(describe(families::kFecCorrectedBitErrorsTotal));
  d.push_back(describe(families::kPostFecSymbolErrorsTotal));
  d.push_back(describe(families::kLinkDownEventsTotal));
  d.push_back(describe(families::kModuleEventsTotal));
  return d;
}

bool EthtoolStats::allowed(std::string_view name) const {
  for (const sources::NameFilter& f : allow_) {
    if (f.matches(name)) return true;
  }
  return false;
}

bool EthtoolStats::read_netlink(KernelSource& source, MetricSink& out) {
  pause_.clear();
  fec_.clear();
  bool clean = true;
  // Counts a failed or malformed dump; `clean` false for one.
  auto counted = [&](Status s, std::size_t malformed, const char* request) {
    if (s == Status::kError) out.error("ethtool_error", "ethtool netlink", request);
    if (malformed > 0) out.error("parse_error", malformed);
    if (s == Status::kError || malformed > 0) clean = false;
  };
  Dump<PauseStats> pause;
  Status s = source.pause_stats(&pause);  // before pause.malformed is read
  counted(s, pause.malformed, "ETHTOOL_MSG_PAUSE_GET");
  for (const PauseStats& p : pause.records) {
    // A driver without pause statistics still answers, with no numbers.
    if (p.rx_frames || p.tx_frames) pause_[p.ifindex] = p;
  }
  Dump<FecStats> fec;
  s = source.fec_stats(&fec);
  counted(s, fec.malformed, "ETHTOOL_MSG_FEC_GET");
  for (const FecStats& f : fec.records) {
    if (f.corrected_blocks || f.uncorrectable_blocks) fec_[f.ifindex] = f;
  }
  return clean;
}

// Whether a driver has pause or FEC statistics is a property of the driver:
// when the last dumps found none (virtual interfaces, drivers without the
// ethtool netlink callbacks), they are asked again when the interfaces
// change (one added, or one whose ifindex changed: a driver reloaded) and
// with the facts (kRefreshCycles), not at every collection (two dumps, four
// system calls).
bool EthtoolStats::netlink_due(const std::vector<SelectedLink>& links) const {
  if (!netlink_none_ || cycle_ - netlink_cycle_ >= kRefreshCycles) return true;
  if (links.size() != netlink_links_.size()) return true;
  for (std::size_t i = 0; i < links.size(); ++i) {
    if (links[i].ifindex != netlink_links_[i]) return true;
  }
  return false;
}

void EthtoolStats::collect(const CollectContext& ctx, const std::vector<SelectedLink>& links,
                           bool complete, KernelSource& source, MetricSink& out) {
  ++cycle_;
  if (netlink_due(links)) {
    const bool clean = read_netlink(source, out);
    netlink_none_ = clean && pause_.empty() && fec_.empty();
    netlink_links_.clear();
    for (const SelectedLink& l : links) netlink_links_.push_back(l.ifindex);
    netlink_cycle_ = cycle_;
  }
  interfaces_.begin_cycle();
  counters_->begin_cycle();
  for (const SelectedLink& link : links) {
    if (ctx.should_stop()) {
      complete = false;
      break;
    }
    auto seen = interfaces_.see(link.name);
    DriverStats& stats = seen.entry;
    bool refresh = seen.refresh;
    if (stats.ifindex != link.ifindex) {
      stats = DriverStats{};
      stats.ifindex = link.ifindex;
      refresh = true;
    }
    const std::string_view ifname = link.name;
    bool has_std_pause = pause_.contains(link.ifindex);
    collect_interface(link, stats, refresh, has_std_pause, source, out);
    if (auto p = pause_.find(link.ifindex); p != pause_.end()) {
      if (p->second.rx_frames)
        out.add(families::kPauseFramesTotal, {ifname, "rx"}, as_double(*p->second.rx_frames));
      if (p->second.tx_frames)
        out.add(families::kPauseFramesTotal, {ifname, "tx"}, as_double(*p->second.tx_frames));
    }
    if (auto f = fec_.find(link.ifindex); f != fec_.end()) {
      if (f->second.corrected_blocks) {
        out.add(families::kFecCorrectedBlocksTotal, {ifname},
                as_double(*f->second.corrected_blocks));
      }
      if (f->second.uncorrectable_blocks) {
        out.add(families::kFecUncorrectableBlocksTotal, {ifname},
                as_double(*f->second.uncorrectable_blocks));
      }
    }
  }
  if (complete) {
    interfaces_.end_cycle();
    counters_->end_cycle();
  }
}

void EthtoolStats::select(std::vector<std::string> names, DriverStats& stats) {
  stats.valid = false;
  stats.selected.clear();
  stats.over_limit = 0;
  stats.duplicates = 0;
  stats.names = std::move(names);
  const std::vector<std::string>& all = stats.names;
  // Two driver names that would land on the same curated series: the second
  // stays a generic driver counter.
  std::set<std::tuple<DriverMetric, std::string, std::string, std::string>> curated;
  // A name the driver gives twice (vmxnet3 repeats its per-queue names
  // under each queue's heading): the first is exported, the others would
  // be the same series.
  std::set<std::string_view> seen;
  for (auto& t : stats.prio_traffic) t.clear();
  stats.pfc = 0;
  for (std::uint32_t i = 0; i < all.size(); ++i) {
    const std::string& name = all[i];
    for (std::uint8_t p = 0; p < 8; ++p) {
      const std::string prio = "prio" + std::to_string(p) + "_";
      if (name == "rx_" + prio + "bytes" || name == "tx_" + prio + "bytes")
        stats.prio_traffic[p].push_back(i);
      if (name == "rx_" + prio + "pause" || name == "tx_" + prio + "pause")
        stats.pfc = static_cast<std::uint8_t>(stats.pfc | (1u << p));
    }
    if (name.empty() || !is_valid_utf8(name) || !allowed(name)) continue;
    if (!seen.insert(name).second) {
      ++stats.duplicates;
      continue;
    }
    if (stats.selected.size() >= static_cast<std::size_t>(max_driver_counters_)) {
      ++stats.over_limit;
      continue;
    }
    DriverCounterMapping m = map_driver_counter(name);
    if (m.metric != DriverMetric::kGeneric &&
        !curated.insert({m.metric, m.direction, m.priority, m.kind}).second) {
      m = DriverCounterMapping{};
    }
    // The interface's index and the name: a driver reloaded under the same
    // name has another index, and its counters start afresh.
    std::string key = m.wraps32 ? std::to_string(stats.ifindex) + " " + name : std::string();
    stats.selected.push_back(SelectedCounter{i, name, std::move(m), std::move(key)});
  }
  stats.valid = true;
}

void EthtoolStats::collect_interface(const SelectedLink& link, DriverStats& stats, bool refresh_due,
                                     bool has_std_pause, KernelSource& source, MetricSink& out) {
  const std::string_view ifname = link.name;
  if (stats.unsupported && !refresh_due) return;
  // A read that fails keeps the 32-bit statistics' offsets through this
  // cycle: forgotten, the next value of one that wrapped would read as a
  // reset.
  auto keep_offsets = [&] {
    for (const SelectedCounter& c : stats.selected)
      if (c.mapping.wraps32) counters_->keep(c.wrap_key);
  };
  std::uint32_t count = 0;
  Status s = source.stats_count(link.name, &count);
  if (s != Status::kOk) {
    if (s == Status::kError) {
      out.error("ethtool_error", ifname, "ETHTOOL_GSSET_INFO");
      keep_offsets();
    }
    if (s == Status::kUnsupported) {
      reset(stats);
      stats.unsupported = true;
    }
    return;
  }
  stats.unsupported = false;
  if (count == 0) {
    reset(stats);
    return;
  }
  std::vector<std::string> names;
  s = source.stats_names(link.name, count, &names);
  if (s != Status::kOk || names.size() != count) {
    if (s == Status::kOk) {
      out.error("driver_stats_changed", ifname, "ETHTOOL_GSTRINGS");
    } else if (s == Status::kError) {
      out.error("ethtool_error", ifname, "ETHTOOL_GSTRINGS");
    }
    keep_offsets();
    stats.valid = false;
    return;
  }
  if (!stats.valid || count != stats.count || names != stats.names || refresh_due) {
    stats.count = count;
    select(std::move(names), stats);
    if (!stats.valid) return;
  }
  if (stats.over_limit > 0) out.error("driver_counter_limit", stats.over_limit);
  if (stats.duplicates > 0) out.error("driver_counter_duplicate", stats.duplicates);
  if (stats.selected.empty()) return;
  std::vector<std::uint64_t> values;
  s = source.stats_values(link.name, stats.count, &values);
  if (s == Status::kError) out.error("ethtool_error", ifname, "ETHTOOL_GSTATS");
  if (s != Status::kOk) {
    keep_offsets();
    return;
  }
  if (values.size() != stats.count) {
    // The set changed since the names were read: names again next time.
    out.error("driver_stats_changed", ifname, "ETHTOOL_GSTATS");
    stats.valid = false;
    keep_offsets();
    return;
  }
  update_active(stats, values);
  emit(ifname, stats, values, has_std_pause, out);
}

void EthtoolStats::emit(std::string_view ifname, DriverStats& stats,
                        const std::vector<std::uint64_t>& values, bool has_std_pause,
                        MetricSink& out) {
  // Per PCIe direction, its high and low crossings.
  std::map<std::string, std::pair<double, double>> crossings;
  for (const SelectedCounter& c : stats.selected) {
    const DriverCounterMapping& m = c.mapping;
    double v = m.wraps32 ? as_double(counters_->update(c.wrap_key, values[c.index]))
                         : as_double(values[c.index]);
    const bool active = !m.priority.empty() && (stats.active & (1u << (m.priority[0] - '0'))) != 0;
    switch (m.metric) {
      case DriverMetric::kPfcPauseFrames:
        out.add(families::kPfcPauseFramesTotal, {ifname, m.direction, m.priority}, v);
        break;
      case DriverMetric::kPfcPauseDuration:
        // mlx5 counts pause duration in microseconds (counters.rst).
        out.add(families::kPfcPauseSecondsTotal, {ifname, m.direction, m.priority}, v / 1e6);
        break;
      case DriverMetric::kPauseFrames:
        // The standard statistic, when the kernel has it, is the same count
        // (mlx5 serves both from one register): the driver's copy then goes
        // under its own name.
        if (has_std_pause) {
          out.add(families::kDriverCountersTotal, {ifname, c.name}, v);
        } else {
          out.add(families::kPauseFramesTotal, {ifname, m.direction}, v);
        }
        break;
      case DriverMetric::kPauseStorm:
        out.add(families::kPauseStormEventsTotal, {ifname, m.kind}, v);
        break;
      case DriverMetric::kDiscards:
        out.add(families::kDiscardsTotal, {ifname, m.direction, m.priority}, v);
        break;
      case DriverMetric::kOutOfBuffer: out.add(families::kOutOfBufferTotal, {ifname}, v); break;
      case DriverMetric::kPcieStalled:
        // A gauge: percent of the last second (counters.rst).
        out.add(families::kPcieStalledRatio, {ifname, m.kind}, std::min(v, 100.0) / 100);
        break;
      case DriverMetric::kPcieStalledSeconds:
        out.add(families::kPcieStalledSecondsTotal, {ifname, m.kind}, v);
        break;
      case DriverMetric::kPcieBufferOverflow:
        out.add(families::kPcieBufferOverflowPacketsTotal, {ifname}, v);
        break;
      case DriverMetric::kPcieRecoveries:
        out.add(families::kPcieRecoveriesTotal, {ifname, m.direction}, v);
        break;
      case DriverMetric::kPcieCongestion:
        out.add(families::kPcieCongestionEventsTotal, {ifname, m.direction, m.kind}, v);
        (m.kind == "high" ? crossings[m.direction].first : crossings[m.direction].second) = v;
        break;
      case DriverMetric::kBufferAlmostFull:
        out.add(families::kReceiveBufferAlmostFullTotal, {ifname}, v);
        break;
      case DriverMetric::kPriorityDiscards:
        if (active) out.add(families::kPriorityDiscardsTotal, {ifname, m.priority, m.kind}, v);
        break;
      case DriverMetric::kEcnMarked:
        if (active) out.add(families::kEcnMarkedPacketsTotal, {ifname, m.priority}, v);
        break;
      case DriverMetric::kFecCorrectedBits:
        out.add(families::kFecCorrectedBitErrorsTotal, {ifname}, v);
        break;
      case DriverMetric::kPostFecSymbolErrors:
        out.add(families::kPostFecSymbolErrorsTotal, {ifname}, v);
        break;
      case DriverMetric::kLinkDownEvents:
        out.add(families::kLinkDownEventsTotal, {ifname}, v);
        break;
      case DriverMetric::kModuleEvents:
        out.add(families::kModuleEventsTotal, {ifname, m.kind}, v);
        break;
      case DriverMetric::kGeneric:
        out.add(families::kDriverCountersTotal, {ifname, c.name}, v);
        break;
    }
  }
  for (const auto& [direction, hl] : crossings)
    out.add(families::kPcieCongested, {ifname, direction}, hl.first > hl.second ? 1 : 0);
}

void EthtoolStats::update_active(DriverStats& stats, const std::vector<std::uint64_t>& values) {
  stats.active |= stats.pfc;
  for (std::size_t p = 0; p < 8; ++p)
    for (std::uint32_t i : stats.prio_traffic[p])
      if (values[i] > 0) stats.active = static_cast<std::uint8_t>(stats.active | (1u << p));
  for (const SelectedCounter& c : stats.selected) {
    const DriverCounterMapping& m = c.mapping;
    if ((m.metric == DriverMetric::kPriorityDiscards || m.metric == DriverMetric::kEcnMarked) &&
        values[c.index] > 0)
      stats.active = static_cast<std::uint8_t>(stats.active | (1u << (m.priority[0] - '0')));
  }
}

}  // namespace nodewatch::nic
