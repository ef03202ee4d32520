#pragma once
// The time the scheduler and its worker pool run on, and how they wait for
// it; a collection's deadline is of it too (CollectContext).
//
// In the daemon it is CLOCK_MONOTONIC (monotonic_clock()): a thread that
// waits for a time hands that time to the kernel itself (a futex's
// timeout, a timerfd), so the clock costs no wake-up and no system call of
// its own; now() is one virtual call more than steady_clock::now(). A
// clock that the kernel does not keep (a test's, moved by hand) gives each
// waiter an Alarm instead, which calls it back when its time comes.
//
// Thread-safe: every method may be called from any thread.

#include <chrono>
#include <functional>
#include <memory>

namespace nodewatch {

class Clock {
 public:
  using duration = std::chrono::steady_clock::duration;
  using time_point = std::chrono::steady_clock::time_point;

  class Alarm {
   public:
    virtual ~Alarm() = default;
    // Rings once when the clock reaches `at`: the callback given to
    // alarm() runs on the thread that moved the clock, or on this one, at
    // once, when the clock is there already. A later set() replaces the
    // time; time_point::max() never rings.
    virtual void set(time_point at) = 0;
  };

  virtual ~Clock() = default;
  virtual time_point now() const = 0;
  // An alarm that calls `ring`, which must be quick and take no lock that
  // a caller of set() may hold. Null when the clock is CLOCK_MONOTONIC:
  // the caller then waits with the kernel.
  virtual std::unique_ptr<Alarm> alarm(std::function<void()> ring) = 0;
};

// std::chrono::steady_clock, which is CLOCK_MONOTONIC; alarm() is null.
Clock& monotonic_clock();

}  // namespace nodewatch
