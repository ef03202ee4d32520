#pragma once
// The ethtool part of the nic collector, for the interfaces the link part
// exported: allow-listed driver statistics (ETHTOOL_GSTATS, `ethtool -S`)
// mapped to curated metrics with labels (PFC pause frames and duration per
// priority, pause storms, discards, out-of-buffer) or exported by their own
// name; and the standard pause and FEC statistics of the ethtool netlink
// family where the driver has them.
//
// The allow-list (`driver_counters`) is a list of RE2 patterns, each
// matched against a whole statistic name (each is anchored, ^(?:...)$).
//
// Failure contract (nodewatch/collector.hpp):
//  - an ethtool call the driver does not implement (most virtual devices
//    have no statistics): left out, not an error; an interface that went
//    away: left out, not an error; any other failure:
//    sink.error("ethtool_error", <interface>, "ETHTOOL_GSTATS");
//  - statistics whose set changed between the names and the values:
//    skipped for this collection, sink.error("driver_stats_changed",
//    <interface>); the names are read again next time;
//  - more allow-listed statistics than max_driver_counters:
//    sink.error("driver_counter_limit") counts those left out;
//  - a statistic name the driver gives more than once: the first is
//    exported, sink.error("driver_counter_duplicate") counts the others;
//  - a netlink reply that cannot be parsed: sink.error("parse_error").
//
// State: per interface, the driver's statistic names and the selection
// built from them (names are read every collection, no firmware access,
// and the selection rebuilt when they change: a driver may reorder or
// rename its statistics without changing their number, and values must
// never land under another counter's labels).

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "nic/nic_kernel.hpp"
#include "nic/nic_links.hpp"
#include "nic/nic_parse.hpp"
#include "nodewatch/collector.hpp"
#include "nodewatch/sources/device_table.hpp"
#include "nodewatch/sources/name_filter.hpp"
#include "nodewatch/sources/wrap_counter.hpp"

namespace nodewatch::nic {

// Each pattern anchored so that RE2's search matches the whole name:
// "rx_prio[0-7]_pause" -> "^(?:rx_prio[0-7]_pause)$".
std::string anchored(std::string_view pattern);

class EthtoolStats {
 public:
  // `driver_counters` validated (sources::pattern_error); throws
  // std::invalid_argument for one that does not compile.
  // `counters` keeps the 32-bit statistics' wrap offsets (a service, so
  // that a rebuilt collector goes on from them); null: its own.
  EthtoolStats(const std::vector<std::string>& driver_counters, std::int64_t max_driver_counters,
               std::shared_ptr<sources::WrapCounters> counters = nullptr);

  // The declarations of every metric this part emits.
  static std::vector<MetricDesc> metric_descs();

  // `complete`: the link part saw the whole dump (interfaces not in `links`
  // are gone, and their state is forgotten).
  void collect(const CollectContext& ctx, const std::vector<SelectedLink>& links, bool complete,
               KernelSource& source, MetricSink& out);

  // Interfaces with state held.
  std::size_t tracked() const { return interfaces_.size(); }

 private:
  struct SelectedCounter {
    std::uint32_t index = 0;
    std::string name;
    DriverCounterMapping mapping;
    std::string wrap_key;  // its key in counters_, for a 32-bit statistic
  };
  struct DriverStats {
    int ifindex = 0;
    bool unsupported = false;
    bool valid = false;
    std::uint32_t count = 0;
    std::vector<std::string> names;  // the driver's statistic names when `selected` was built
    std::vector<SelectedCounter> selected;
    std::uint64_t over_limit = 0;
    std::uint64_t duplicates = 0;  // allow-listed names given again
    // Per priority (bit p): the driver's traffic counters of it (indices
    // of rx/tx_prio<p>_bytes), PFC on it (it lists rx/tx_prio<p>_pause),
    // and whether it ever carried traffic, had PFC or counted a discard or
    // mark: only those priorities' buffer counters are exported (mlx5
    // lists all eight), and once exported they stay.
    std::array<std::vector<std::uint32_t>, 8> prio_traffic;
    std::uint8_t pfc = 0;
    std::uint8_t active = 0;
  };

  bool allowed(std::string_view name) const;
  // The standard pause and FEC statistics of every interface (two dumps).
  // False when a dump failed or was malformed.
  bool read_netlink(KernelSource& source, MetricSink& out);
  // Whether this collection asks for them: see collect().
  bool netlink_due(const std::vector<SelectedLink>& links) const;
  void collect_interface(const SelectedLink& link, DriverStats& stats, bool refresh_due,
                         bool has_std_pause, KernelSource& source, MetricSink& out);
  // Rebuilds the selection of statistics from the driver's `names`.
  void select(std::vector<std::string> names, DriverStats& stats);

  std::vector<sources::NameFilter> allow_;
  // Emits the selected statistics of one interface from `values`.
  void emit(std::string_view ifname, DriverStats& stats, const std::vector<std::uint64_t>& values,
            bool has_std_pause, MetricSink& out);
  // The priorities whose buffer counters are exported now (see DriverStats).
  static void update_active(DriverStats& stats, const std::vector<std::uint64_t>& values);

  std::int64_t max_driver_counters_;
  std::shared_ptr<sources::WrapCounters> counters_;
  sources::DeviceTable<DriverStats> interfaces_{kRefreshCycles};
  // ifindex -> standard pause / FEC statistics of this collection.
  std::map<int, PauseStats> pause_;
  std::map<int, FecStats> fec_;
  // The last dumps found no interface with pause or FEC statistics: the
  // interfaces (ifindex) they were asked for and the collection that asked.
  bool netlink_none_ = false;
  std::vector<int> netlink_links_;
  std::uint64_t netlink_cycle_ = 0;
  std::uint64_t cycle_ = 0;
};

}  // namespace nodewatch::nic
