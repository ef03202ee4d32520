#include "nic/nic_qdiscs.hpp"

#include <algorithm>
#include <array>
#include <string_view>
#include <unordered_map>
#include <utility>

namespace nodewatch::nic {
namespace {

constexpr std::string_view kQdiscBytes = "nodewatch_nic_qdisc_bytes_total";
constexpr std::string_view kQdiscPackets = "nodewatch_nic_qdisc_packets_total";
constexpr std::string_view kQdiscDrops = "nodewatch_nic_qdisc_drops_total";
constexpr std::string_view kQdiscOverlimits = "nodewatch_nic_qdisc_overlimits_total";
constexpr std::string_view kQdiscRequeues = "nodewatch_nic_qdisc_requeues_total";
constexpr std::string_view kQdiscBacklog = "nodewatch_nic_qdisc_backlog_bytes";
constexpr std::string_view kQdiscQlen = "nodewatch_nic_qdisc_queue_length_packets";

double as_double(std::uint64_t v) {
  return static_cast<double>(v);
}

}  // namespace

Qdiscs::Qdiscs(std::shared_ptr<sources::WrapCounters> counters)
    : counters_(counters ? std::move(counters) : std::make_shared<sources::WrapCounters>()) {}

std::vector<MetricDesc> Qdiscs::metric_descs() {
  std::vector<MetricDesc> d;
  auto add = [&](std::string_view name, MetricType type, std::string_view unit,
                 std::string_view help) {
    d.push_back(MetricDesc{std::string(name),
                           type,
                           std::string(unit),
                           std::string(help),
                           {"interface", "qdisc", "handle", "parent"}});
  };
  add(kQdiscBytes, MetricType::kCounter, "bytes", "Bytes sent through a queueing discipline.");
  add(kQdiscPackets, MetricType::kCounter, "",
      "Packets sent through a queueing discipline (64-bit, or 32-bit with wraps accumulated).");
  add(kQdiscDrops, MetricType::kCounter, "",
      "Packets dropped by a queueing discipline (32-bit in the kernel, wraps accumulated).");
  add(kQdiscOverlimits, MetricType::kCounter, "",
      "Times a queueing discipline was over its limit, e.g. throttled by a shaper.");
  add(kQdiscRequeues, MetricType::kCounter, "",
      "Packets a queueing discipline had to requeue (the device was busy).");
  add(kQdiscBacklog, MetricType::kGauge, "bytes", "Bytes queued in a queueing discipline.");
  add(kQdiscQlen, MetricType::kGauge, "packets", "Packets queued in a queueing discipline.");
  return d;
}

void Qdiscs::collect(const std::vector<SelectedLink>& links, KernelSource& source,
                     MetricSink& out) {
  Dump<QdiscRecord> dump;
  try {
    dump = source.dump_qdiscs();
  } catch (const CollectError& e) {
    out.error(e.reason(), "qdiscs", e.what());
    return;
  }
  if (dump.malformed > 0) out.error("parse_error", dump.malformed);
  std::unordered_map<int, const std::string*> names;  // the exported interfaces, by index
  for (const SelectedLink& l : links) names.emplace(l.ifindex, &l.name);
  ++cycle_;
  counters_->begin_cycle();
  for (const QdiscRecord& q : dump.records) {
    auto iface = names.find(q.ifindex);
    if (iface == names.end()) continue;
    const std::string& ifname = *iface->second;
    if (!is_valid_utf8(q.kind)) {
      out.error("parse_error", ifname, "qdisc kind is not UTF-8");
      continue;
    }
    std::string handle = format_qdisc_handle(q.handle);
    std::string parent = format_qdisc_parent(q.parent);
    Qdisc& st = qdiscs_[Key{q.ifindex, q.handle, q.parent}];
    if (st.cycle == cycle_) {
      out.error("duplicate_qdisc", ifname + "/" + q.kind + " " + handle);
      continue;
    }
    if (st.counter_key.empty() || st.kind != q.kind) {
      // New, or another kind under the handle: its counters start afresh.
      st.kind = q.kind;
      st.counter_key = std::to_string(q.ifindex) + " " + handle + " " + parent + " " + q.kind + " ";
    }
    st.cycle = cycle_;
    auto wrapped = [&](char which, std::uint64_t raw) {
      key_.assign(st.counter_key).push_back(which);
      return as_double(counters_->update(key_, raw));
    };
    std::array<std::string_view, 4> labels = {ifname, q.kind, handle, parent};
    auto add = [&](std::string_view name, double v) {
      out.add(name, {labels[0], labels[1], labels[2], labels[3]}, v);
    };
    if (q.has_basic) {
      add(kQdiscBytes, as_double(q.bytes));
      add(kQdiscPackets, q.packets64 ? as_double(*q.packets64) : wrapped('p', q.packets32));
    }
    if (q.has_queue) {
      add(kQdiscDrops, wrapped('d', q.drops));
      add(kQdiscOverlimits, wrapped('o', q.overlimits));
      add(kQdiscRequeues, wrapped('r', q.requeues));
      add(kQdiscBacklog, q.backlog);
      add(kQdiscQlen, q.qlen);
    }
  }
  std::erase_if(qdiscs_, [this](const auto& e) { return e.second.cycle != cycle_; });
  counters_->end_cycle();
}

}  // namespace nodewatch::nic
