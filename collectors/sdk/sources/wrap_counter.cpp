#include "nodewatch/sources/wrap_counter.hpp"

namespace nodewatch::sources {
namespace {
constexpr std::uint64_t kTwoPow32 = 1ULL << 32;
constexpr std::uint64_t kTwoPow31 = 1ULL << 31;
}  // namespace

bool is_32bit_wrap(std::uint64_t previous, std::uint64_t raw) {
  // previous > 2^31 keeps the subtraction from underflowing; the modular
  // difference 2^32 - previous + raw < 2^31 is raw < previous - 2^31.
  return previous < kTwoPow32 && previous > kTwoPow31 && raw < previous - kTwoPow31;
}

std::uint64_t WrapCounter::update(std::uint64_t raw, bool wraps32) {
  if (primed_ && raw < last_raw_) {
    if (wraps32 && is_32bit_wrap(last_raw_, raw))
      offset_ += kTwoPow32;
    else
      offset_ = 0;
  }
  primed_ = true;
  last_raw_ = raw;
  return offset_ + raw;
}

std::uint64_t WrapCounters::update(std::string_view key, std::uint64_t raw, bool wraps32) {
  std::lock_guard lock(mu_);
  auto it = counters_.find(std::string(key));
  if (it == counters_.end()) it = counters_.emplace(std::string(key), Entry{}).first;
  it->second.cycle = cycle_;
  return it->second.counter.update(raw, wraps32);
}

void WrapCounters::keep(std::string_view key) {
  std::lock_guard lock(mu_);
  if (auto it = counters_.find(std::string(key)); it != counters_.end()) it->second.cycle = cycle_;
}

void WrapCounters::begin_cycle() {
  std::lock_guard lock(mu_);
  ++cycle_;
}

std::size_t WrapCounters::end_cycle() {
  std::lock_guard lock(mu_);
  std::size_t n = 0;
  for (auto it = counters_.begin(); it != counters_.end();) {
    if (it->second.cycle != cycle_) {
      it = counters_.erase(it);
      ++n;
    } else {
      ++it;
    }
  }
  return n;
}

std::size_t WrapCounters::size() const {
  std::lock_guard lock(mu_);
  return counters_.size();
}

}  // namespace nodewatch::sources
