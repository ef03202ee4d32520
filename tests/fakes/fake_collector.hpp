#pragma once
// A scripted collector for scheduler, HTTP and daemon tests.

#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "nodewatch/collector.hpp"
#include "support/manual_clock.hpp"

namespace nodewatch::testing {

class FakeCollector : public Collector {
 public:
  explicit FakeCollector(std::string name = "fake") : name_(std::move(name)), table_(MakeTable()) {}

  const MetricTable& metrics() const override { return table_; }

  // Concurrency seen across several instances (a collector re-created by a
  // reload): they share one of these.
  struct Shared {
    std::atomic<int> active{0};
    std::atomic<int> max_active{0};
    std::atomic<int> calls{0};
  };

  void collect(const CollectContext& ctx, MetricSink& out) override {
    // What the collection was told as it began.
    stopped_at_start_ = ctx.should_stop();
    left_at_start_ = std::chrono::duration_cast<std::chrono::milliseconds>(ctx.left());
    Track(++active_, max_active_);
    if (shared_ != nullptr) {
      Track(++shared_->active, shared_->max_active);
      ++shared_->calls;
    }
    int call = ++calls_;
    auto sleep = sleep_.load();
    // On a test's clock: blocked for that clock's time, whatever the
    // cancellation, like a read in the kernel. Else sleeps in slices and
    // ignores cancellation when `ignore_cancel`.
    if (clock_ != nullptr) clock_->sleep_for(sleep);
    auto until = std::chrono::steady_clock::now() + (clock_ != nullptr ? sleep.zero() : sleep);
    while (std::chrono::steady_clock::now() < until) {
      if (!ignore_cancel_ && ctx.should_stop()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    --active_;
    if (shared_ != nullptr) --shared_->active;
    {
      std::lock_guard lock(mu_);
      threads_.push_back(std::this_thread::get_id());
    }
    if (fail_) throw CollectError("read_error", "scripted failure");
    out.add("nodewatch_fake_calls_total", {name_}, call);
    if (emit_undeclared_) out.add("nodewatch_fake_not_declared", {}, 1);
    if (partial_error_) out.error("parse_error");
    {
      std::lock_guard lock(mu_);
      for (const auto& subject : failing_subjects_)
        out.error("read_error", subject, "EIO reading " + subject + "/stat");
    }
  }

  // Subjects reported as failing (read_error) by each collect from now on.
  void set_failing(std::vector<std::string> subjects) {
    std::lock_guard lock(mu_);
    failing_subjects_ = std::move(subjects);
  }

  // The thread of each collect(), in order.
  std::vector<std::thread::id> threads() const {
    std::lock_guard lock(mu_);
    return threads_;
  }

  std::atomic<bool> stopped_at_start_{false};
  std::atomic<std::chrono::milliseconds> left_at_start_{std::chrono::milliseconds(-1)};
  std::atomic<std::chrono::milliseconds> sleep_{std::chrono::milliseconds(0)};
  std::atomic<bool> ignore_cancel_{false};
  std::atomic<bool> fail_{false};
  std::atomic<bool> emit_undeclared_{false};
  std::atomic<bool> partial_error_{false};
  std::atomic<int> calls_{0};
  std::atomic<int> active_{0};
  std::atomic<int> max_active_{0};
  Shared* shared_ = nullptr;
  // The clock that `sleep_` is on; the real one when null.
  ManualClock* clock_ = nullptr;

 private:
  static void Track(int now, std::atomic<int>& max) {
    int prev = max.load();
    while (now > prev && !max.compare_exchange_weak(prev, now)) {
    }
  }
  static MetricTable MakeTable() {
    return MetricTable({{"nodewatch_fake_calls_total",
                         MetricType::kCounter,
                         "",
                         "How many times collect() ran.",
                         {"collector"}}});
  }
  std::string name_;
  MetricTable table_;
  mutable std::mutex mu_;
  std::vector<std::string> failing_subjects_;
  std::vector<std::thread::id> threads_;
};

}  // namespace nodewatch::testing
