#pragma once
// A Clock that moves only when a test moves it (set()), for tests that
// assert exact counts where the real clock would need slack.
//
// What waits on it: alarms (the worker pool's timer thread, the
// scheduler's deadline timer) and threads in sleep_until() (a collector
// that a test makes block, as a driver call would, for a time of this
// clock). set() rings the alarms and wakes the sleepers whose time has
// come, and drops them from sleepers() and next() before it returns, so
// that a test can tell "asleep" from "woken, not yet running". Events at
// one instant run concurrently, as on the real clock: a test that counts
// exactly keeps them apart.
//
// It starts an hour after steady_clock's epoch. Thread-safe.

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "nodewatch/clock.hpp"

namespace nodewatch::testing {

class ManualClock final : public Clock {
 public:
  ManualClock() = default;
  // Wakes every sleeper; a sleep_until() after this returns at once.
  ~ManualClock() override {
    {
      std::lock_guard lock(core_->mu);
      core_->closed = true;
      core_->sleeping.clear();
    }
    core_->cv.notify_all();
  }
  ManualClock(const ManualClock&) = delete;
  ManualClock& operator=(const ManualClock&) = delete;

  time_point now() const override { return time_point(duration(core_->now.load())); }

  std::unique_ptr<Alarm> alarm(std::function<void()> ring) override {
    std::lock_guard lock(core_->mu);
    const std::uint64_t id = ++core_->next_id;
    core_->alarms.emplace(
        id, Slot{time_point::max(), std::make_shared<std::function<void()>>(std::move(ring))});
    return std::make_unique<ManualAlarm>(core_, id);
  }

  // Blocks the calling thread until the clock reaches `t`.
  void sleep_until(time_point t) {
    // The core, not the clock: the clock may go while this thread sleeps.
    const std::shared_ptr<Core> core = core_;
    const auto reached = [&] { return time_point(duration(core->now.load())) >= t; };
    std::unique_lock lock(core->mu);
    if (core->closed || reached()) return;
    core->sleeping.insert(t);
    core->cv.wait(lock, [&] { return core->closed || reached(); });
  }
  void sleep_for(duration d) { sleep_until(now() + d); }

  // Threads in sleep_until() that set() has not woken.
  std::size_t sleepers() const {
    std::lock_guard lock(core_->mu);
    return core_->sleeping.size();
  }

  // The earliest time an alarm or a sleeper waits for; max() when none.
  time_point next() const {
    std::lock_guard lock(core_->mu);
    time_point t = core_->sleeping.empty() ? time_point::max() : *core_->sleeping.begin();
    for (const auto& [id, slot] : core_->alarms) t = std::min(t, slot.at);
    return t;
  }

  // Moves the clock to `t` (never back), then rings the alarms and wakes
  // the sleepers due by then.
  void set(time_point t) {
    std::vector<std::shared_ptr<std::function<void()>>> rings;
    {
      std::lock_guard lock(core_->mu);
      if (t <= now()) return;
      core_->now.store(t.time_since_epoch().count());
      core_->sleeping.erase(core_->sleeping.begin(), core_->sleeping.upper_bound(t));
      for (auto& [id, slot] : core_->alarms) {
        if (slot.at > t) continue;
        slot.at = time_point::max();
        rings.push_back(slot.ring);
      }
    }
    core_->cv.notify_all();
    for (const auto& ring : rings) (*ring)();
  }

 private:
  struct Slot {
    time_point at;
    std::shared_ptr<std::function<void()>> ring;  // called outside `mu`
  };
  // Shared with the alarms, which may outlive the clock (a pool's thread
  // that shutdown() detached).
  struct Core {
    mutable std::mutex mu;
    std::condition_variable cv;
    std::atomic<duration::rep> now{
        std::chrono::duration_cast<duration>(std::chrono::hours(1)).count()};
    std::multiset<time_point> sleeping;
    std::map<std::uint64_t, Slot> alarms;
    std::uint64_t next_id = 0;
    bool closed = false;
  };

  class ManualAlarm final : public Alarm {
   public:
    ManualAlarm(std::shared_ptr<Core> core, std::uint64_t id) : core_(std::move(core)), id_(id) {}
    ~ManualAlarm() override {
      std::lock_guard lock(core_->mu);
      core_->alarms.erase(id_);
    }
    void set(time_point at) override {
      std::shared_ptr<std::function<void()>> ring;
      {
        std::lock_guard lock(core_->mu);
        Slot& slot = core_->alarms.at(id_);
        if (at > time_point(duration(core_->now.load()))) {
          slot.at = at;
          return;
        }
        slot.at = time_point::max();
        ring = slot.ring;
      }
      (*ring)();
    }

   private:
    std::shared_ptr<Core> core_;
    std::uint64_t id_;
  };

  std::shared_ptr<Core> core_ = std::make_shared<Core>();
};

}  // namespace nodewatch::testing
