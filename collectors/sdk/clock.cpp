#include "nodewatch/clock.hpp"

namespace nodewatch {

namespace {
class MonotonicClock final : public Clock {
 public:
  time_point now() const override { return std::chrono::steady_clock::now(); }
  std::unique_ptr<Alarm> alarm(std::function<void()>) override { return nullptr; }
};
}  // namespace

Clock& monotonic_clock() {
  static MonotonicClock clock;
  return clock;
}

}  // namespace nodewatch
