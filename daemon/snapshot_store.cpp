#include "snapshot_store.hpp"

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

std::shared_ptr<const SnapshotSet> SnapshotStore::current() const {
  std::lock_guard lock(mu_);
  return current_;
}

}  // namespace nodewatch
