#include "kernel/kernel_log.hpp"

#include <algorithm>
#include <charconv>
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

// The help of the XID and SXID families (kernel_metrics.hpp) states the bound.
static_assert(kMaxCodesPerDevice == 256,
              "say the new bound in kXidEventsTotal and kSxidEventsTotal");

std::string KernelLog::code_key(const std::map<KernelCounts::Key, std::uint64_t>& table,
                                const std::string& device, const std::string& code) {
  if (table.count({device, code}) != 0) return code;
  std::size_t distinct = 0;
  for (auto it = table.lower_bound({device, std::string()});
       it != table.end() && it->first.first == device; ++it) {
    if (it->first.second != "other") ++distinct;
  }
  return distinct >= kMaxCodesPerDevice ? "other" : code;
}

std::optional<KernelEvent> KernelLog::feed(const KmsgRecord& r) {
  if (state_.last_seq && r.seq <= *state_.last_seq) {
    ++skipped_;  // counted before this restart
    return std::nullopt;
  }
  auto& lost = state_.counts.lost;
  if (state_.last_seq && r.seq > *state_.last_seq + 1)
    lost = add_saturating(lost, r.seq - *state_.last_seq - 1);
  else if (!state_.last_seq)
    lost =
        add_saturating(lost, r.seq);  // a boot's first record is 0: those before were overwritten
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
  auto& n = state_.counts.events[{e->event, e->device}];
  n = add_saturating(n, e->count);
  if (!e->code.empty() && (e->event == "nvidia_xid" || e->event == "nvidia_sxid")) {
    auto& table = e->event == "nvidia_xid" ? state_.counts.xids : state_.counts.sxids;
    e->code = code_key(table, e->device, e->code);
    auto& c = table[{e->device, e->code}];
    c = add_saturating(c, e->count);
  }
  return e;
}

namespace {

// A code as the matcher writes one (std::to_string of a 64-bit number), or
// as counting folds one past kMaxCodesPerDevice ("other").
bool code_ok(const std::string& code) {
  if (code == "other") return true;
  std::uint64_t v = 0;
  auto [end, ec] = std::from_chars(code.data(), code.data() + code.size(), v);
  return !code.empty() && ec == std::errc() && end == code.data() + code.size() &&
         std::to_string(v) == code;
}

// Folds the devices of `table` past `max_devices` distinct ones of one
// group into "other". `group` names a key's group (the event; one group
// for a table of codes), `device` its device.
template <class GroupOf, class DeviceOf, class Rekey>
void fold_devices(std::map<KernelCounts::Key, std::uint64_t>& table, std::size_t max_devices,
                  GroupOf group, DeviceOf device, Rekey rekey) {
  std::map<std::string, std::vector<std::string>> devices;  // group -> its devices, in order
  for (const auto& [key, n] : table) {
    const std::string& d = device(key);
    auto& list = devices[group(key)];
    if (!d.empty() && d != "other") list.push_back(d);
  }
  for (auto& [g, list] : devices) {
    std::sort(list.begin(), list.end());
    list.erase(std::unique(list.begin(), list.end()), list.end());
  }
  std::map<KernelCounts::Key, std::uint64_t> out;
  for (const auto& [key, n] : table) {
    const auto& list = devices[group(key)];
    const std::string& d = device(key);
    const bool kept = d.empty() || d == "other" ||
                      std::lower_bound(list.begin(), list.end(), d) - list.begin() <
                          static_cast<std::ptrdiff_t>(max_devices);
    auto& slot = out[kept ? key : rekey(key)];
    slot = add_saturating(slot, n);
  }
  table = std::move(out);
}

}  // namespace

std::vector<std::string> sanitize_state(KernelState& state,
                                        const std::vector<std::string_view>& event_names,
                                        std::size_t max_devices) {
  std::vector<std::string> dropped;
  auto& events = state.counts.events;
  for (auto it = events.begin(); it != events.end();) {
    const bool known =
        std::find(event_names.begin(), event_names.end(), it->first.first) != event_names.end();
    if (known) {
      ++it;
      continue;
    }
    dropped.push_back("unknown event \"" + it->first.first + "\"");
    it = events.erase(it);
  }
  for (auto* table : {&state.counts.xids, &state.counts.sxids}) {
    const char* what = table == &state.counts.xids ? "XID" : "SXID";
    for (auto it = table->begin(); it != table->end();) {
      if (code_ok(it->first.second)) {
        ++it;
        continue;
      }
      dropped.push_back(std::string(what) + " \"" + it->first.second + "\" is not a number");
      it = table->erase(it);
    }
  }
  using Key = KernelCounts::Key;
  fold_devices(
      events, max_devices, [](const Key& k) { return k.first; },
      [](const Key& k) -> const std::string& { return k.second; },
      [](const Key& k) {
        return Key{k.first, "other"};
      });
  for (auto* table : {&state.counts.xids, &state.counts.sxids}) {
    fold_devices(
        *table, max_devices, [](const Key&) { return std::string(); },
        [](const Key& k) -> const std::string& { return k.first; },
        [](const Key& k) {
          return Key{"other", k.second};
        });
    // A device's codes: the group is the device, the codes past the bound fold.
    fold_devices(
        *table, kMaxCodesPerDevice, [](const Key& k) { return k.first; },
        [](const Key& k) -> const std::string& { return k.second; },
        [](const Key& k) {
          return Key{k.first, "other"};
        });
  }
  return dropped;
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
