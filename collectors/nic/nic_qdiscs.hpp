#pragma once
// The qdisc part of the nic collector: queueing-discipline counters from one
// RTM_GETQDISC dump per collection, for the interfaces the link part
// exported.
//
// The kernel keeps a qdisc's drops, overlimits and requeues in 32 bits
// (gnet_stats_queue), and its packets too where it sends no
// TCA_STATS_PKT64: they are accumulated across wraps with the shared rule
// (sources::WrapCounters), held in the collector's service so that a
// rebuilt collector continues them.
//
// Failure contract (nodewatch/collector.hpp):
//  - the dump fails: no qdisc series, sink.error("netlink_error");
//  - a message that cannot be parsed, or a kind that is not UTF-8: that
//    qdisc is skipped, sink.error("parse_error");
//  - a qdisc seen twice in one dump: the second is skipped,
//    sink.error("duplicate_qdisc", "eth0/fq_codel 1:").

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "nic/nic_kernel.hpp"
#include "nic/nic_links.hpp"
#include "nodewatch/collector.hpp"
#include "nodewatch/sources/wrap_counter.hpp"

namespace nodewatch::nic {

class Qdiscs {
 public:
  // `counters` may be shared with the collector this one replaces (null: a
  // private one).
  explicit Qdiscs(std::shared_ptr<sources::WrapCounters> counters);

  // The declarations of every metric this part emits.
  static std::vector<MetricDesc> metric_descs();

  void collect(const std::vector<SelectedLink>& links, KernelSource& source, MetricSink& out);

  // Qdiscs with state held.
  std::size_t tracked() const { return qdiscs_.size(); }

 private:
  using Key = std::tuple<int, std::uint32_t, std::uint32_t>;  // ifindex, handle, parent
  struct Qdisc {
    std::string kind;
    std::string counter_key;  // "<ifindex> <handle> <parent> <kind> ": the wrap counters' prefix
    std::uint64_t cycle = 0;
  };

  std::shared_ptr<sources::WrapCounters> counters_;
  std::map<Key, Qdisc> qdiscs_;
  std::uint64_t cycle_ = 0;
  std::string key_;  // scratch: a wrap counter's key
};

}  // namespace nodewatch::nic
