#pragma once
// The nic collector: a thin collector over four parts, each with its own
// declarations and its own collect() (the way the interconnect collector
// is split), whose metric table is their concatenation:
//  - links (nic/nic_links.hpp): per-interface 64-bit link statistics,
//    state, carrier, MTU and speed from one RTM_GETLINK dump, driver facts;
//    it selects the interfaces the other parts work on;
//  - qdiscs (nic/nic_qdiscs.hpp): queueing-discipline counters from one
//    RTM_GETQDISC dump;
//  - ethtool (nic/nic_ethtool.hpp): allow-listed driver statistics
//    (ETHTOOL_GSTATS) mapped to curated metrics with labels, and the
//    standard ethtool netlink pause and FEC statistics;
//  - protocols (nic/nic_protocols.hpp): node-level TCP/IP health from
//    <procfs>/net/snmp and <procfs>/net/netstat.
// Each part's header states its failure contract. A link dump that cannot
// be done fails the collection (CollectError("netlink_error")); nothing
// else does.
//
// State that outlives one collector (a reload that changed the options
// builds a new one before the old one goes): the qdiscs' 32-bit wrap
// offsets, in a sources::WrapCounters held as the daemon's service "nic".

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "nic/nic_ethtool.hpp"
#include "nic/nic_kernel.hpp"
#include "nic/nic_links.hpp"
#include "nic/nic_parse.hpp"
#include "nic/nic_protocols.hpp"
#include "nic/nic_qdiscs.hpp"
#include "nodewatch/collector.hpp"
#include "nodewatch/sources/name_filter.hpp"
#include "nodewatch/sources/wrap_counter.hpp"

namespace nodewatch {

// The catalog entry: name "nic", on by default.
const CollectorSpec& nic_collector_spec();

namespace nic {

// Loopback and the host ends of container networking.
inline constexpr std::string_view kDefaultInterfacesExclude =
    R"(^(lo|veth.*|cali.*|docker.*|br-[0-9a-f]{12}|virbr.*|cni.*|flannel.*|lxc.*|cilium_.*|kube-ipvs0|tunl0)$)";

// Per-priority PFC pause frames and duration, pause storms, port and
// per-priority discards, out-of-buffer and physical errors: mlx5 and ice names.
std::vector<std::string> default_driver_counters();

// [collectors.nic] keys.
// At most this many driver_counters patterns (a longer list is a
// configuration error); a NIC has a few hundred statistics.
inline constexpr std::size_t kMaxDriverCounterPatterns = 256;

struct NicOptions {
  // interfaces_include, interfaces_exclude: RE2 regular expressions searched
  // anywhere in the interface name (anchor with ^ and $): an interface is
  // exported when it matches interfaces_include (empty: all) and not
  // interfaces_exclude (empty: none) (sources/name_filter.hpp).
  sources::NameFilterSpec interfaces{"", std::string(kDefaultInterfacesExclude)};
  // RE2 regular expressions, each matched against a whole driver statistic
  // name; a statistic is exported when one matches.
  std::vector<std::string> driver_counters = default_driver_counters();
  // At most this many driver statistics per interface (the rest is counted
  // as sink.error("driver_counter_limit")).
  std::int64_t max_driver_counters = 128;
  // Also the link counters of half-duplex Ethernet and header compression
  // (collisions, aborted, heartbeat, window, compressed: 6 series per
  // interface that stay 0 on full-duplex NICs).
  bool legacy_counters = false;
  bool qdiscs = true;               // the RTM_GETQDISC dump
  bool driver_statistics = true;    // ethtool ioctl and netlink statistics
  bool protocol_statistics = true;  // <procfs>/net/snmp and netstat
  bool operator==(const NicOptions&) const = default;
};

// Reads the keys above through `r`; an invalid regular expression is
// reported with r.error() at the key (the shared message of
// sources::pattern_error).
NicOptions read_nic_options(OptionReader& r);

// Every metric the collector can emit.
const MetricTable& nic_metric_table();

// The procfs descriptors a collector holds at most, by default.
inline constexpr std::size_t kDefaultMaxHeld = 4096;

class NicCollector final : public Collector {
 public:
  // `source` may be null: the real kernel source is then opened on the
  // first collect (in the namespace of the collecting thread).
  // `qdisc_counters` and `ethtool_counters` (wrap offsets) may be shared
  // with the collector this one replaces
  // (null: private ones). `max_held` bounds the procfs descriptors held
  // (0: none). Throws std::invalid_argument for a pattern that does not
  // compile (rejected earlier by the configuration check).
  NicCollector(Roots roots, NicOptions options, std::unique_ptr<KernelSource> source = nullptr,
               std::shared_ptr<sources::WrapCounters> qdisc_counters = nullptr,
               std::size_t max_held = kDefaultMaxHeld,
               std::shared_ptr<sources::WrapCounters> ethtool_counters = nullptr);

  const MetricTable& metrics() const override;
  void collect(const CollectContext& ctx, MetricSink& out) override;

  // For tests: interfaces and qdiscs the collector holds state for, and
  // descriptors held open.
  std::size_t tracked_interfaces() const { return links_.tracked(); }
  std::size_t tracked_qdiscs() const { return qdiscs_.tracked(); }
  std::size_t held_descriptors() const { return protocols_.held_descriptors(); }

 private:
  NicOptions options_;
  std::unique_ptr<KernelSource> source_;
  Links links_;
  Qdiscs qdiscs_;
  EthtoolStats ethtool_;
  Protocols protocols_;
};

// The collector as the catalog makes it, with the qdiscs' wrap offsets from
// env's services (key "nic"); `source` as for the constructor (tests pass a
// fake one).
std::unique_ptr<NicCollector> make_nic_collector(const CollectorEnv& env,
                                                 std::unique_ptr<KernelSource> source = nullptr);

}  // namespace nic
}  // namespace nodewatch
