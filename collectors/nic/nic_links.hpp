#pragma once
// The link part of the nic collector: one RTM_GETLINK dump per collection
// (64-bit link statistics, state, carrier, MTU), the driver's facts
// (ETHTOOL_GDRVINFO: driver, firmware, bus) for nodewatch_nic_info, and the
// negotiated speed (ETHTOOL_GLINKSETTINGS). It owns the interface
// selection; the other parts work on the interfaces it exported.
//
// Failure contract (nodewatch/collector.hpp):
//  - the dump cannot be done: CollectError("netlink_error") (the kernel
//    source throws it): the collection fails;
//  - a message that cannot be parsed, or a name that is not UTF-8: that
//    interface is skipped, sink.error("parse_error");
//  - a name seen twice in one dump: the second is skipped,
//    sink.error("duplicate_interface", <interface>);
//  - an ethtool call the driver does not implement (veth has no speed
//    setting): left out, not an error; an interface that disappears between
//    the dump and an ethtool call: not exported in this collection, not an
//    error; any other ethtool failure:
//    sink.error("ethtool_error", <interface>, "ETHTOOL_GLINKSETTINGS").
//
// State: per interface name, its index and driver facts (a DeviceTable,
// re-read every kRefreshCycles collections, and after a failure). An
// interface that leaves the dump is forgotten; one that comes back, or an
// index reused under another name, starts afresh.

#include <cstdint>
#include <string>
#include <vector>

#include "nic/nic_kernel.hpp"
#include "nodewatch/collector.hpp"
#include "nodewatch/sources/device_table.hpp"
#include "nodewatch/sources/name_filter.hpp"

namespace nodewatch::nic {

// Driver facts and statistic names are read again after this many
// collections (5 minutes at the default 15s): a firmware update, or PFC
// enabled on another priority with the same number of statistics.
inline constexpr std::uint64_t kRefreshCycles = 20;

// An interface the link part exported in this collection, in dump order.
struct SelectedLink {
  int ifindex = 0;
  std::string name;
};

class Links {
 public:
  // Throws std::invalid_argument for a filter that does not compile (the
  // configuration check rejects those first).
  // `legacy_counters`: also the half-duplex and compression fields
  // (is_legacy_link_stat()).
  explicit Links(const sources::NameFilterSpec& filter, bool legacy_counters = false);

  // The declarations of every metric this part emits.
  static std::vector<MetricDesc> metric_descs();

  void collect(const CollectContext& ctx, KernelSource& source, MetricSink& out);

  // This collection's exported interfaces, and whether the pass over the
  // dump ended (false: interrupted by the deadline or a stop).
  const std::vector<SelectedLink>& selected() const { return selected_; }
  bool complete() const { return complete_; }
  // Interfaces with state held (selected or not).
  std::size_t tracked() const { return interfaces_.size(); }

 private:
  struct Interface {
    bool known = false;
    int ifindex = 0;
    bool selected = false;
    std::uint64_t cycle = 0;  // the collection that last saw it in the dump
    DriverInfo info;
    // ETHTOOL_GLINKSETTINGS answered EOPNOTSUPP (ifb, vxlan, a tunnel; some
    // drivers while the link is down): not asked again until the
    // interface's facts are (kRefreshCycles), or its operational state or
    // carrier differs from what it was then.
    bool speed_unsupported = false;
    std::optional<std::uint8_t> speed_operstate;
    std::optional<std::uint8_t> speed_carrier;
  };
  // False when the interface went away under an ethtool call.
  bool emit(const LinkRecord& link, Interface& state, bool refresh, KernelSource& source,
            MetricSink& out);

  sources::NameFilter filter_;
  bool legacy_counters_ = false;
  sources::DeviceTable<Interface> interfaces_{kRefreshCycles};
  std::vector<SelectedLink> selected_;
  bool complete_ = true;
  std::uint64_t cycle_ = 0;
};

}  // namespace nodewatch::nic
