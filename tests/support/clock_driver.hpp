#pragma once
// Moves a ManualClock for a test of the worker pool (and of what runs on
// it, the scheduler), one waiter's time after another, and after each
// step waits until everything due by then has run: advance(d) returns
// with the pool in the state the real clock would have left it in `d`
// later, on a machine with no load.
//
// The test's thread is the io_context's thread: settle() runs its
// handlers. A job that blocks must block on the clock (sleep_until), or
// settle() waits for it to return.

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "asio.hpp"
#include "support/manual_clock.hpp"
#include "worker_pool.hpp"

namespace nodewatch::testing {

class ClockDriver {
 public:
  ClockDriver(ManualClock& clock, WorkerPool& pool, asio::io_context* io = nullptr)
      : clock_(clock), pool_(pool), io_(io) {}

  // Returns once the pool has settled (WorkerPool::settled(), every job
  // running asleep on the clock) and the io_context has no handler ready.
  // Fails the test when that takes 10 s of real time.
  void settle() {
    const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (;;) {
      // In this order: once settled, the pool's threads post nothing more
      // until the clock moves or a handler gives them work.
      const bool quiet = pool_.settled(clock_.sleepers());
      std::size_t ran = 0;
      if (io_ != nullptr) {
        io_->restart();
        ran = io_->poll();
        handlers_ += ran;
      }
      if (quiet && ran == 0) return;
      if (std::chrono::steady_clock::now() > limit) {
        ADD_FAILURE() << "the worker pool did not settle within 10 s";
        return;
      }
      if (!quiet) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  // Moves the clock `d` on, stopping at each time an alarm or a sleeper
  // waits for, and settles at each.
  void advance(Clock::duration d) {
    const Clock::time_point until = clock_.now() + d;
    settle();
    while (clock_.now() < until) {
      clock_.set(std::min(clock_.next(), until));
      settle();
    }
  }

  // Handlers that settle() ran on the io_context.
  std::size_t handlers() const { return handlers_; }

 private:
  ManualClock& clock_;
  WorkerPool& pool_;
  asio::io_context* io_;
  std::size_t handlers_ = 0;
};

}  // namespace nodewatch::testing
