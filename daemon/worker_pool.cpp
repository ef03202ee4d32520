#include "worker_pool.hpp"

#include <linux/futex.h>
#include <pthread.h>
#include <spdlog/spdlog.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <ctime>

namespace nodewatch {

WorkerPool::WorkerPool(std::size_t threads, std::string name, std::size_t max_threads, Clock& clock)
    : clock_(clock),
      state_(std::make_shared<State>(clock)),
      name_(std::move(name)),
      max_threads_(std::max(threads, max_threads)) {
  // The alarm may ring after the pool is gone (a thread detached by
  // shutdown() holds the state): it reaches the state only while it lives.
  state_->alarm = clock.alarm([weak = std::weak_ptr<State>(state_)] {
    if (auto s = weak.lock()) wake_timer(*s, /*all=*/true);
  });
  std::lock_guard lock(state_->mu);
  for (std::size_t i = 0; i < threads; ++i) start_thread();
}

void WorkerPool::start_thread() {
  ++state_->running;
  threads_.emplace_back(&WorkerPool::run, state_, static_cast<int>(threads_.size()));
  std::string tname = name_.substr(0, 15);
  pthread_setname_np(threads_.back().native_handle(), tname.c_str());
}

void WorkerPool::set_max_threads(std::size_t n) {
  std::lock_guard lock(state_->mu);
  max_threads_ = n;
}

WorkerPool::~WorkerPool() {
  if (!shut_down_) shutdown(std::chrono::milliseconds(0));
}

void WorkerPool::post(std::function<void()> job) {
  std::lock_guard lock(state_->mu);
  State& s = *state_;
  if (s.stopping) return;
  s.queue.push_back(std::move(job));
  // An idle thread takes it; else the timer thread, if it is waiting (it
  // runs jobs to run now before timed ones); else a busy thread will.
  if (s.idle > 0)
    s.cv.notify_one();
  else if (s.timer_waiting)
    wake_timer(s);
}

WorkerPool::Timed WorkerPool::post_at(Clock::time_point due, std::function<void()> job) {
  std::lock_guard lock(state_->mu);
  State& s = *state_;
  Timed t{due, ++s.next_id};
  if (s.stopping) return t;
  s.timed.emplace(t, std::move(job));
  if (s.timer_waiting) {
    if (due < s.timer_target) wake_timer(s);
  } else if (s.timer_owner == kNoThread && s.idle > 0) {
    s.cv.notify_one();
  }
  // Else the timer thread is running a job and comes back to the timed
  // jobs when it is done: nothing to wake.
  return t;
}

bool WorkerPool::cancel(const Timed& t) {
  std::function<void()> dropped;  // destroyed outside the lock
  std::lock_guard lock(state_->mu);
  auto it = state_->timed.find(t);
  if (it == state_->timed.end()) return false;
  // The timer thread may still wake at the time of the dropped job; it
  // finds nothing due and sleeps again.
  dropped = std::move(it->second);
  state_->timed.erase(it);
  return true;
}

void WorkerPool::kick() {
  std::lock_guard lock(state_->mu);
  State& s = *state_;
  if (s.stopping || s.timer_owner == kNoThread || s.timer_waiting || s.timed.empty()) return;
  if (s.idle > 0) {
    s.timer_owner = kNoThread;
    s.cv.notify_one();
  } else if (threads_.size() < max_threads_) {
    s.timer_owner = kNoThread;
    start_thread();  // it takes the timed jobs
  }
  // Else every thread is busy and the pool is at its maximum: the first one
  // free goes on with the timed jobs.
}

std::size_t WorkerPool::busy() const {
  std::lock_guard lock(state_->mu);
  return state_->busy;
}

bool WorkerPool::settled(std::size_t blocked) const {
  const State& s = *state_;
  std::lock_guard lock(s.mu);
  if (!s.queue.empty() || s.busy != blocked) return false;
  // Every thread is at rest: idle, waiting for a due time, or in a job (a
  // thread just started is none of them yet, and kick() does not see it).
  if (s.running != s.idle + s.busy + (s.timer_waiting ? 1 : 0)) return false;
  if (s.timed.empty()) return true;
  // The owner either runs a job (blocked, from the count above) or waits
  // for a time to come, no later than the first due time.
  if (s.timer_owner == kNoThread) return false;
  if (!s.timer_waiting) return true;
  return s.timer_target <= s.timed.begin()->first.due && s.timer_target > s.clock.now();
}

void WorkerPool::execute(State& s, std::unique_lock<std::mutex>& lock, std::function<void()> job) {
  ++s.busy;
  lock.unlock();
  try {
    job();
  } catch (const std::exception& e) {
    spdlog::error("worker job threw: {}", e.what());
  } catch (...) {
    spdlog::error("worker job threw an unknown exception");
  }
  job = nullptr;  // release captures outside the lock
  lock.lock();
  --s.busy;
}

void WorkerPool::wake_timer(State& s, bool all) {
  s.timer_word.fetch_add(1, std::memory_order_release);
  ::syscall(SYS_futex, &s.timer_word, FUTEX_WAKE_PRIVATE, all ? INT_MAX : 1, nullptr, nullptr, 0);
}

void WorkerPool::wait_timer(State& s, std::unique_lock<std::mutex>& lock, Clock::time_point due) {
  // Read under the lock: a wake_timer() after the unlock changes it, and
  // the wait below then returns at once (EAGAIN).
  const std::uint32_t seen = s.timer_word.load(std::memory_order_acquire);
  if (s.alarm) {
    // Set after `seen` is read: a ring changes the word and ends the wait.
    s.alarm->set(due);
    lock.unlock();
    ::syscall(SYS_futex, &s.timer_word, FUTEX_WAIT_PRIVATE, seen, nullptr, nullptr, 0);
    lock.lock();
    return;
  }
  lock.unlock();
  // steady_clock is CLOCK_MONOTONIC, FUTEX_WAIT_BITSET's clock (without
  // FUTEX_CLOCK_REALTIME), and its timeout is absolute.
  const std::int64_t ns = std::max<std::int64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(due.time_since_epoch()).count(), 0);
  timespec at{};
  at.tv_sec = static_cast<time_t>(ns / 1'000'000'000);
  at.tv_nsec = static_cast<long>(ns % 1'000'000'000);
  // EINTR, ETIMEDOUT, EAGAIN: the caller looks again at what is due.
  ::syscall(SYS_futex, &s.timer_word, FUTEX_WAIT_BITSET_PRIVATE, seen, &at, nullptr,
            FUTEX_BITSET_MATCH_ANY);
  lock.lock();
}

void WorkerPool::run(std::shared_ptr<State> state, int me) {
  State& s = *state;
  std::unique_lock lock(s.mu);
  while (!s.stopping) {
    if (!s.queue.empty()) {
      auto job = std::move(s.queue.front());
      s.queue.pop_front();
      execute(s, lock, std::move(job));
      continue;
    }
    if (!s.timed.empty() && (s.timer_owner == kNoThread || s.timer_owner == me)) {
      s.timer_owner = me;
      auto first = s.timed.begin();
      const Clock::time_point due = first->first.due;
      if (due <= s.clock.now()) {
        auto job = std::move(first->second);
        s.timed.erase(first);
        execute(s, lock, std::move(job));
        continue;
      }
      s.timer_waiting = true;
      s.timer_target = due;
      wait_timer(s, lock, due);
      s.timer_waiting = false;
      continue;
    }
    if (s.timer_owner == me) s.timer_owner = kNoThread;
    ++s.idle;
    s.cv.wait(lock);
    --s.idle;
  }
  if (s.timer_owner == me) s.timer_owner = kNoThread;
  --s.running;
  s.idle_cv.notify_all();
}

bool WorkerPool::shutdown(std::chrono::milliseconds grace) {
  shut_down_ = true;
  // The dropped jobs are destroyed outside the lock: their captures may
  // hold what posts to this pool when it goes.
  std::deque<std::function<void()>> queue;
  std::map<Timed, std::function<void()>> timed;
  {
    std::lock_guard lock(state_->mu);
    state_->stopping = true;
    queue.swap(state_->queue);
    timed.swap(state_->timed);
  }
  state_->cv.notify_all();
  {
    std::lock_guard lock(state_->mu);
    wake_timer(*state_, /*all=*/true);
  }
  bool all_done;
  std::vector<std::thread> threads;
  {
    std::unique_lock lock(state_->mu);
    all_done = state_->idle_cv.wait_for(lock, grace, [&] { return state_->running == 0; });
    threads.swap(threads_);
  }
  for (auto& t : threads) {
    if (!t.joinable()) continue;
    if (all_done)
      t.join();
    else
      t.detach();
  }
  return all_done;
}

}  // namespace nodewatch
