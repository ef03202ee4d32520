#pragma once
// The current rendered snapshot of every collector.
//
// Thread-safe. Writers (the scheduler) publish or withdraw one collector's
// snapshot; readers (scrapes) take the whole set, an immutable value that
// stays valid however long the reader holds it. Copy-on-write: a publish
// builds a new set and swaps the pointer under a short lock.

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "exposition.hpp"

namespace nodewatch {

// When gzip scrapes of one collector's snapshots come, so that a worker
// deflates a new snapshot only when a gzip scrape is expected before the
// next one replaces it (exposition.hpp). Scrapers are periodic: the next
// gzip scrape is expected one gap after the last, the gap being the
// shortest of the last few of at least a second (two scrapes closer than
// that take the same snapshot). Until a second scrape gives a gap, and
// while a scrape is overdue by less than twice the longest gap, one is
// expected; after that (or 10 minutes without one) none is, and a gzip
// scrape that comes deflates what it takes itself. Not thread-safe.
class GzipDemand {
 public:
  using Clock = std::chrono::steady_clock;
  void scraped(Clock::time_point t);
  // True when a gzip scrape is expected at or before now + horizon.
  bool expected(Clock::time_point now, Clock::duration horizon) const;

 private:
  static constexpr std::size_t kHistory = 8;
  std::array<Clock::time_point, kHistory> times_{};  // a ring, the newest at last_
  std::size_t count_ = 0;
  std::size_t last_ = 0;
};

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

  // A gzip scrape took these collectors' snapshots.
  void gzip_scraped(const std::vector<std::string_view>& collectors,
                    GzipDemand::Clock::time_point now) const;
  // Whether a gzip scrape of `collector` is expected within `horizon` of
  // `now`: the worker that rendered its snapshot then deflates it at once.
  bool gzip_expected(std::string_view collector, GzipDemand::Clock::time_point now,
                     GzipDemand::Clock::duration horizon) const;

 private:
  mutable std::mutex demand_mu_;
  mutable std::map<std::string, GzipDemand, std::less<>> demand_;
  mutable std::mutex mu_;
  std::shared_ptr<const SnapshotSet> current_;
};

}  // namespace nodewatch
