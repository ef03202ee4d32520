#pragma once
// One device table for every collector that keeps state per device, port,
// interface or mount between collections: entries are found by name, made
// on first sight, forgotten when a collection does not see them (a device
// that went away stops being exported, and one that comes back under the
// name starts afresh), and their static facts (model, serial, firmware)
// are due for a re-read every `refresh_every` collections.
//
//   table.begin_cycle();
//   for (name : listing) {
//     auto [dev, refresh] = table.see(name);
//     if (refresh) dev.info = read_info(name);
//     ...
//   }
//   table.end_cycle();
//
// Not thread-safe (one collect at a time uses it).

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>

namespace nodewatch::sources {

template <class T>
class DeviceTable {
 public:
  explicit DeviceTable(std::uint64_t refresh_every = 20) : refresh_every_(refresh_every) {}

  void begin_cycle() { ++cycle_; }

  struct Seen {
    T& entry;
    // New, or its facts were last read refresh_every collections ago.
    bool refresh;
  };
  Seen see(std::string_view name) {
    auto it = entries_.find(name);
    if (it == entries_.end()) it = entries_.emplace(std::string(name), Slot{}).first;
    Slot& s = it->second;
    s.seen = cycle_;
    bool refresh = !s.facts_read || cycle_ - s.facts_cycle >= refresh_every_;
    if (refresh) {
      s.facts_read = true;
      s.facts_cycle = cycle_;
    }
    return Seen{s.entry, refresh};
  }

  // Asks for a re-read of `name`'s facts on its next see() (a read failed).
  void invalidate(std::string_view name) {
    if (auto it = entries_.find(name); it != entries_.end()) it->second.facts_read = false;
  }
  // Forgets `name` now (it went away mid-read).
  void forget(std::string_view name) {
    if (auto it = entries_.find(name); it != entries_.end()) entries_.erase(it);
  }

  // Forgets entries not seen since begin_cycle(); returns how many.
  std::size_t end_cycle() {
    std::size_t n = 0;
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (it->second.seen != cycle_) {
        it = entries_.erase(it);
        ++n;
      } else {
        ++it;
      }
    }
    return n;
  }

  T* find(std::string_view name) {
    auto it = entries_.find(name);
    return it == entries_.end() ? nullptr : &it->second.entry;
  }
  std::size_t size() const { return entries_.size(); }

  // In name order.
  template <class Fn>
  void for_each(Fn fn) {
    for (auto& [name, slot] : entries_) fn(name, slot.entry);
  }

 private:
  struct Slot {
    T entry{};
    std::uint64_t seen = 0;
    std::uint64_t facts_cycle = 0;
    bool facts_read = false;
  };
  std::uint64_t refresh_every_;
  std::uint64_t cycle_ = 0;
  std::map<std::string, Slot, std::less<>> entries_;
};

}  // namespace nodewatch::sources
