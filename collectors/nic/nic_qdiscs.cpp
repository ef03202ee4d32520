#include "nic/nic_qdiscs.hpp"

#include <algorithm>
#include <array>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "nic/nic_metrics.hpp"

namespace nodewatch::nic {
namespace {

double as_double(std::uint64_t v) {
  return static_cast<double>(v);
}

}  // namespace

Qdiscs::Qdiscs(std::shared_ptr<sources::WrapCounters> counters)
    : counters_(counters ? std::move(counters) : std::make_shared<sources::WrapCounters>()) {}

std::vector<MetricDesc> Qdiscs::metric_descs() {
  std::vector<MetricDesc> d;
  d.push_back(describe(families::kQdiscBytesTotal));
  d.push_back(describe(families::kQdiscPacketsTotal));
  d.push_back(describe(families::kQdiscDropsTotal));
  d.push_back(describe(families::kQdiscOverlimitsTotal));
  d.push_back(describe(families::kQdiscRequeuesTotal));
  d.push_back(describe(families::kQdiscBacklogBytes));
  d.push_back(describe(families::kQdiscQueueLengthPackets));
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
      add(families::kQdiscBytesTotal, as_double(q.bytes));
      add(families::kQdiscPacketsTotal,
          q.packets64 ? as_double(*q.packets64) : wrapped('p', q.packets32));
    }
    if (q.has_queue) {
      add(families::kQdiscDropsTotal, wrapped('d', q.drops));
      add(families::kQdiscOverlimitsTotal, wrapped('o', q.overlimits));
      add(families::kQdiscRequeuesTotal, wrapped('r', q.requeues));
      add(families::kQdiscBacklogBytes, q.backlog);
      add(families::kQdiscQueueLengthPackets, q.qlen);
    }
  }
  std::erase_if(qdiscs_, [this](const auto& e) { return e.second.cycle != cycle_; });
  counters_->end_cycle();
}

}  // namespace nodewatch::nic
