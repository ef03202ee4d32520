#include "snapshot_store.hpp"

#include <algorithm>

namespace nodewatch {

SnapshotStore::SnapshotStore() : current_(std::make_shared<SnapshotSet>()) {}

void SnapshotStore::publish(const std::string& collector,
                            std::shared_ptr<const RenderedText> text) {
  std::lock_guard lock(mu_);
  auto next = std::make_shared<SnapshotSet>(*current_);
  next->by_collector[collector] = std::move(text);
  next->generation = current_->generation + 1;
  current_ = std::move(next);
}

void SnapshotStore::withdraw(const std::string& collector) {
  std::lock_guard lock(mu_);
  if (current_->by_collector.count(collector) == 0) return;
  auto next = std::make_shared<SnapshotSet>(*current_);
  next->by_collector.erase(collector);
  next->generation = current_->generation + 1;
  current_ = std::move(next);
}

void GzipDemand::scraped(Clock::time_point t) {
  last_ = count_ == 0 ? 0 : (last_ + 1) % kHistory;
  times_[last_] = t;
  count_ = std::min(count_ + 1, kHistory);
}

bool GzipDemand::expected(Clock::time_point now, Clock::duration horizon) const {
  using std::chrono::seconds;
  if (count_ == 0) return false;
  const Clock::time_point last = times_[last_];
  if (now - last > std::chrono::minutes(10)) return false;
  Clock::duration shortest = Clock::duration::max(), longest{0};
  for (std::size_t i = 1; i < count_; ++i) {
    const Clock::duration gap = times_[(last_ + kHistory - i + 1) % kHistory] -
                                times_[(last_ + kHistory - i) % kHistory];
    if (gap < seconds(1)) continue;
    shortest = std::min(shortest, gap);
    longest = std::max(longest, gap);
  }
  if (longest == Clock::duration{0}) return true;  // no period seen yet
  if (now > last + 2 * longest + horizon) return false;  // the scraper went away
  return last + shortest <= now + horizon;
}

void SnapshotStore::gzip_scraped(const std::vector<std::string_view>& collectors,
                                 GzipDemand::Clock::time_point now) const {
  std::lock_guard lock(demand_mu_);
  for (std::string_view c : collectors) {
    auto it = demand_.find(c);
    if (it == demand_.end()) it = demand_.emplace(std::string(c), GzipDemand{}).first;
    it->second.scraped(now);
  }
}

bool SnapshotStore::gzip_expected(std::string_view collector, GzipDemand::Clock::time_point now,
                                  GzipDemand::Clock::duration horizon) const {
  std::lock_guard lock(demand_mu_);
  auto it = demand_.find(collector);
  return it != demand_.end() && it->second.expected(now, horizon);
}

std::shared_ptr<const SnapshotSet> SnapshotStore::current() const {
  std::lock_guard lock(mu_);
  return current_;
}

}  // namespace nodewatch
