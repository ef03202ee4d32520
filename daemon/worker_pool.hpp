#pragma once
// A small pool of worker threads for collect() calls, with jobs that run
// now (post) or at a time (post_at).
//
// A timed job costs one wake-up: one thread of the pool (the timer thread)
// sleeps until the earliest due time and runs what comes due itself, in
// due order, then sleeps again; the pool's other threads sleep until a job
// is posted to run now, or until kick() says the timer thread is held up
// by a job that overran: then an idle thread takes over the waiting, or a
// new one is started (up to the pool's maximum) when none is idle. On a
// 2-core VM one wake-up of a thread costs 40-50 us of CPU
// (bench/read_floor --wakes), more than a collection that finds nothing,
// so a collection must not cost two, and collections due together cost
// one.
//
// Unlike asio::thread_pool, it can be abandoned: a collector stuck in the
// kernel (a hung NFS mount) must not keep the daemon from exiting, so
// shutdown() waits a bounded time and then detaches what is still running.
// The threads hold only shared state, so detaching is safe.
//
// Due times are on the pool's Clock. On CLOCK_MONOTONIC the timer thread
// hands its due time to the futex it waits on; on a clock that the tests
// move, it waits without a timeout and the clock's alarm ends the wait.
//
// Thread-safe: every method may be called from any thread.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "nodewatch/clock.hpp"

namespace nodewatch {

class WorkerPool {
 public:
  // Names a job of post_at() for cancel().
  struct Timed {
    Clock::time_point due{};
    std::uint64_t id = 0;
    auto operator<=>(const Timed&) const = default;
  };

  // `threads` started now; kick() starts more, up to `max_threads`.
  // `clock` must outlive the pool.
  WorkerPool(std::size_t threads, std::string name, std::size_t max_threads = 0,
             Clock& clock = monotonic_clock());
  ~WorkerPool();  // shutdown(0s) if not done yet
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Runs `job` as soon as a thread is free (an idle one is woken).
  void post(std::function<void()> job);
  // Runs `job` at `due`, or as soon after it as the timer thread is free.
  Timed post_at(Clock::time_point due, std::function<void()> job);
  // Drops a job of post_at() that has not started; false when there is none.
  bool cancel(const Timed& t);
  // The timer thread is running a job that overran: another thread takes
  // over waiting for the timed jobs, an idle one or, when none is, a new
  // one if the pool has fewer than its maximum.
  void kick();
  // Raises (or lowers, for the threads not yet started) the maximum.
  void set_max_threads(std::size_t n);
  // Stops taking jobs, drops queued ones, waits up to `grace` for running
  // ones. Returns true when every thread has ended; else they are detached.
  bool shutdown(std::chrono::milliseconds grace);
  std::size_t busy() const;
  Clock& clock() const { return clock_; }
  // Nothing runs and nothing is due: every thread idle, waiting for a due
  // time or in a job; no job queued; the timed jobs either
  // waited for by the timer thread (its time still to come) or held up by
  // it running a job; and every job running is one of `blocked` jobs that
  // wait for the clock. A test that moves the clock waits for this before
  // it moves it again.
  bool settled(std::size_t blocked) const;

 private:
  static constexpr int kNoThread = -1;
  struct State {
    explicit State(Clock& c) : clock(c) {}
    Clock& clock;
    // Null on CLOCK_MONOTONIC; else it ends the timer thread's wait.
    std::unique_ptr<Clock::Alarm> alarm;
    mutable std::mutex mu;
    std::condition_variable cv;  // idle threads
    // The timer thread waits on this word (a futex: FUTEX_WAIT_BITSET until
    // the due time), and is woken by its change (wake_timer()). Not a
    // condition variable: glibc takes the mutex back after a condition
    // variable's wait as if contended, so that the unlock after every timed
    // wake-up would cost a FUTEX_WAKE system call that wakes no one.
    std::atomic<std::uint32_t> timer_word{0};
    std::condition_variable idle_cv;  // shutdown()
    std::deque<std::function<void()>> queue;
    std::map<Timed, std::function<void()>> timed;
    std::uint64_t next_id = 0;
    bool stopping = false;
    std::size_t running = 0;  // threads still alive
    std::size_t busy = 0;     // jobs executing
    std::size_t idle = 0;     // threads waiting on cv
    // The thread that waits for the timed jobs (and runs them); kNoThread
    // when none does. It keeps the role while it runs a job it took.
    int timer_owner = kNoThread;
    bool timer_waiting = false;  // the owner waits on timer_word
    Clock::time_point timer_target{};
  };
  static void run(std::shared_ptr<State> state, int me);
  // Under state_->mu.
  void start_thread();
  static void execute(State& s, std::unique_lock<std::mutex>& lock, std::function<void()> job);
  // The timer thread's wait ends (every waiter's, with `all`). Needs no
  // lock: the word changes before the wake, and a wait that has not begun
  // yet sees the change.
  static void wake_timer(State& s, bool all = false);
  // Releases `lock` and waits until `due` or wake_timer(); takes it back.
  static void wait_timer(State& s, std::unique_lock<std::mutex>& lock, Clock::time_point due);

  Clock& clock_;
  std::shared_ptr<State> state_;
  std::string name_;
  std::vector<std::thread> threads_;  // under state_->mu
  std::size_t max_threads_;           // under state_->mu
  bool shut_down_ = false;
};

}  // namespace nodewatch
