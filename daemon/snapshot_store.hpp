#pragma once
// The current rendered snapshot of every collector.
//
// Thread-safe. Writers (the scheduler) publish or withdraw one collector's
// snapshot; readers (scrapes) take the whole set, an immutable value that
// stays valid however long the reader holds it. Copy-on-write: a publish
// builds a new set and swaps the pointer under a short lock.

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "exposition.hpp"

namespace nodewatch {

struct SnapshotSet {
  std::uint64_t generation = 0;
  std::map<std::string, std::shared_ptr<const RenderedText>, std::less<>> by_collector;
};

class SnapshotStore {
 public:
  SnapshotStore();
  void publish(const std::string& collector, std::shared_ptr<const RenderedText> text);
  void withdraw(const std::string& collector);
  // Keeps only the named collectors (after a reload).
  template <class Pred>
  void retain(Pred keep) {
    std::lock_guard lock(mu_);
    auto next = std::make_shared<SnapshotSet>(*current_);
    std::erase_if(next->by_collector, [&](const auto& kv) { return !keep(kv.first); });
    next->generation = current_->generation + 1;
    current_ = std::move(next);
  }
  std::shared_ptr<const SnapshotSet> current() const;

 private:
  mutable std::mutex mu_;
  std::shared_ptr<const SnapshotSet> current_;
};

}  // namespace nodewatch
