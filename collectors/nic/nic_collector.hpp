#pragma once
// The nic collector: per-interface 64-bit link statistics, state, carrier,
// MTU and speed from one RTM_GETLINK dump per collect; queueing-discipline
// counters from one RTM_GETQDISC dump; allow-listed driver statistics
// (ETHTOOL_GSTATS) mapped to curated metrics with labels; the standard
// ethtool netlink pause and FEC statistics where the driver has them; and
// node-level TCP/IP health from <procfs>/net/snmp and <procfs>/net/netstat.
//
// Failure contract (see nodewatch/collector.hpp):
//  - the route netlink socket cannot be opened or a link dump fails:
//    CollectError("netlink_error");
//  - the qdisc dump fails: no qdisc series, sink.error("netlink_error");
//  - a message that cannot be parsed: that interface or qdisc is skipped,
//    sink.error("parse_error");
//  - an ethtool call the driver does not implement (veth has no speed
//    setting, most virtual devices no statistics): left out, not an error;
//    an interface that disappears between the dump and an ethtool call: left
//    out, not an error; any other ethtool failure: sink.error("ethtool_error");
//  - driver statistics whose set changed between the count and the values:
//    skipped for this collect, sink.error("driver_stats_changed");
//  - <procfs>/net/snmp or netstat absent: no TCP/IP series, not an error;
//    unreadable: sink.error("read_error"); a malformed pair of lines:
//    sink.error("parse_error").
//
// State kept between collects: cached driver facts and statistic names per
// interface (re-read when the count changes, and every 20 collects), and
// 64-bit accumulators for the qdiscs' 32-bit counters. An interface or qdisc
// that leaves the dump is forgotten; a new one is picked up at once.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <tuple>
#include <vector>

#include "nic/nic_kernel.hpp"
#include "nic/nic_parse.hpp"
#include "nodewatch/collector.hpp"
#include "storage/diskstats.hpp"

namespace nodewatch {

// The catalog entry: name "nic", on by default, on the shared pool.
const CollectorSpec& nic_collector_spec();

namespace nic {

// Loopback and the host ends of container networking.
inline constexpr std::string_view kDefaultInterfacesExclude =
    R"(^(lo|veth.*|cali.*|docker.*|br-[0-9a-f]{12}|virbr.*|cni.*|flannel.*|lxc.*|cilium_.*|kube-ipvs0|tunl0)$)";

// Per-priority PFC pause frames and duration, pause storms, port and
// per-priority discards, out-of-buffer and physical errors: mlx5 and ice names.
std::vector<std::string> default_driver_counters();

// [collectors.nic] keys.
struct NicOptions {
  // ECMAScript regular expressions searched anywhere in the interface name
  // (anchor with ^ and $): an interface is exported when it matches
  // interfaces_include (empty: all) and not interfaces_exclude (empty: none).
  std::string interfaces_include;
  std::string interfaces_exclude{kDefaultInterfacesExclude};
  // ECMAScript regular expressions, each matched against a whole driver
  // statistic name; a statistic is exported when one matches.
  std::vector<std::string> driver_counters = default_driver_counters();
  // At most this many driver statistics per interface (the rest is counted
  // as sink.error("driver_counter_limit")).
  std::int64_t max_driver_counters = 128;
  bool qdiscs = true;               // the RTM_GETQDISC dump
  bool driver_statistics = true;    // ethtool ioctl and netlink statistics
  bool protocol_statistics = true;  // <procfs>/net/snmp and netstat
  bool operator==(const NicOptions&) const = default;
};

// Reads the keys above through `r`; an invalid regular expression is
// reported with r.error() at the key, and its default is kept.
NicOptions read_nic_options(OptionReader& r);

class NicCollector final : public Collector {
 public:
  // `source` may be null: the real kernel source is then opened on the
  // first collect (in the namespace of the collecting thread). Throws
  // std::regex_error for an invalid expression (rejected earlier by the
  // configuration check).
  NicCollector(Roots roots, NicOptions options, std::unique_ptr<KernelSource> source = nullptr);

  const MetricTable& metrics() const override;
  void collect(const CollectContext& ctx, MetricSink& out) override;

  // For tests: interfaces and qdiscs the collector holds state for.
  std::size_t tracked_interfaces() const { return interfaces_.size(); }
  std::size_t tracked_qdiscs() const { return qdiscs_.size(); }

 private:
  struct SelectedCounter {
    std::uint32_t index = 0;
    std::string name;
    DriverCounterMapping mapping;
  };
  struct DriverStats {
    bool unsupported = false;
    bool valid = false;
    std::uint32_t count = 0;
    std::uint64_t read_cycle = 0;
    std::vector<std::string> names;  // the driver's statistic names when `selected` was built
    std::vector<SelectedCounter> selected;
    std::uint64_t over_limit = 0;
  };
  struct InterfaceState {
    std::string name;
    bool selected = false;
    std::uint64_t last_seen = 0;
    std::uint64_t info_cycle = 0;
    DriverInfo info;
    DriverStats stats;
  };
  using QdiscKey = std::tuple<int, std::uint32_t, std::uint32_t>;  // ifindex, handle, parent
  struct QdiscState {
    std::string kind;
    std::uint64_t last_seen = 0;
    storage::CounterAccumulator packets, drops, requeues, overlimits;
  };

  bool is_selected(std::string_view name) const;
  void emit_link(const LinkRecord& link, InterfaceState& state, MetricSink& out);
  void emit_driver_stats(const LinkRecord& link, InterfaceState& state, bool has_std_pause,
                         MetricSink& out);
  // Rebuilds the selection of statistics from the driver's `names`.
  void refresh_driver_names(std::vector<std::string> names, DriverStats& stats);
  void collect_ethtool_netlink(MetricSink& out);
  void collect_qdiscs(MetricSink& out);
  void collect_protocols(MetricSink& out);

  Roots roots_;
  NicOptions options_;
  std::unique_ptr<KernelSource> source_;
  std::optional<std::regex> include_;
  std::optional<std::regex> exclude_;
  std::vector<std::regex> driver_counters_;
  std::map<int, InterfaceState> interfaces_;
  std::map<QdiscKey, QdiscState> qdiscs_;
  std::uint64_t cycle_ = 0;
  // ifindex -> standard pause / FEC statistics of this collect.
  std::map<int, PauseStats> pause_;
  std::map<int, FecStats> fec_;
};

}  // namespace nic
}  // namespace nodewatch
