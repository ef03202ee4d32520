#include "kernel/kernel_log.hpp"

#include <utility>

namespace nodewatch::kernel {

KernelLog::KernelLog(std::optional<KernelState> saved, std::string boot_id, Matcher match,
                     std::size_t max_devices)
    : match_(std::move(match)), max_devices_(max_devices) {
  if (saved && saved->boot_id == boot_id) {
    state_ = std::move(*saved);
    continued_ = true;
  } else {
    state_.boot_id = std::move(boot_id);
  }
}

std::string KernelLog::device_key(const std::string& event, const std::string& device) const {
  if (device.empty()) return device;
  const auto& events = state_.counts.events;
  if (events.count({event, device}) != 0) return device;
  std::size_t distinct = 0;
  for (auto it = events.lower_bound({event, std::string()});
       it != events.end() && it->first.first == event; ++it) {
    if (!it->first.second.empty() && it->first.second != "other") ++distinct;
  }
  return distinct >= max_devices_ ? "other" : device;
}

std::optional<KernelEvent> KernelLog::feed(const KmsgRecord& r) {
  if (state_.last_seq && r.seq <= *state_.last_seq) {
    ++skipped_;  // counted before this restart
    return std::nullopt;
  }
  if (state_.last_seq && r.seq > *state_.last_seq + 1)
    state_.counts.lost += r.seq - *state_.last_seq - 1;
  else if (!state_.last_seq)
    state_.counts.lost += r.seq;  // a boot's first record is 0: those before were overwritten
  state_.last_seq = r.seq;
  last_ts_ = r.ts_usec;
  if (r.facility != 0) return std::nullopt;  // user space: never an event
  std::optional<KernelEvent> e = match_(r);
  if (!e) return std::nullopt;
  if (e->malformed) {
    ++malformed_;
    return std::nullopt;
  }
  e->device = device_key(e->event, e->device);
  state_.counts.events[{e->event, e->device}] += e->count;
  if (!e->code.empty() && (e->event == "nvidia_xid" || e->event == "nvidia_sxid")) {
    auto& table = e->event == "nvidia_xid" ? state_.counts.xids : state_.counts.sxids;
    table[{e->device, e->code}] += e->count;
  }
  return e;
}

std::vector<std::string> split_records(std::string_view text) {
  std::vector<std::string> out;
  while (!text.empty()) {
    std::size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl == std::string_view::npos ? text.size() : nl + 1);
    text.remove_prefix(line.size());
    if (line.empty()) continue;
    if (line.front() == ' ' && !out.empty()) {
      out.back().append(line);
    } else if (line != "\n") {
      out.emplace_back(line);
    }
  }
  return out;
}

}  // namespace nodewatch::kernel
