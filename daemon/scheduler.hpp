#pragma once
// Runs collectors at their intervals (see DESIGN.md, "Shape of the process").
//
// start(), stop() and shutdown_workers() are called on the io_context's
// thread; statuses() and the accessors from any thread.
//
// Collections run on one pool of workers (WorkerPool). The thread that
// waits for the pool's due times wakes at a due time (post_at), collects,
// renders through the entry's SeriesCache (each series' name and labels
// rendered once), deflates when a gzip scrape is expected before the next
// collection (GzipDemand), publishes and schedules the next due time: one
// wake-up a collection, and none of the io thread, which only serves. Due
// times lie on one grid (multiples of the interval from the scheduler's
// start), so collectors whose intervals divide one another are due at the
// same moment and share a wake-up: every collector at 15 s costs the node
// one wake-up every 15 s, not one per collector.
//
// A collection that blocks (a wedged driver, a kernel lock held long)
// must not starve the rest: one still running after kStallBudget hands the
// waiting for due times to another thread (an idle one, or a new one: the
// pool grows up to two threads more than the collectors), and goes on
// where it is; the others keep their intervals, late by at most the budget.
//
// At most one collect() per collector is in flight: due times that pass
// while it runs are skipped and counted (skipped_overlap, counted while
// they pass). A collect that passes its deadline is reported failed at the
// deadline and its snapshot withdrawn (no stale values); when it returns,
// late, its result is dropped. Each collection has a check, set when it
// is queued for its due time plus its stall budget, and the scheduler one
// timerfd, armed for the earliest check and watched by the io_context: on
// time, a collection costs the io thread nothing, and collectors due
// together one timerfd_settime between them (the timer moves only when
// the earliest check does).
//
// Time is the scheduler's Clock, which its pool shares: CLOCK_MONOTONIC in
// the daemon; in tests, one they move (then an alarm of that clock stands
// for the timerfd). The deadline a collector is given, and the times
// handed to the snapshot store (gzip_expected()), are on that clock.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "asio.hpp"
#include "nodewatch/clock.hpp"
#include "nodewatch/collector.hpp"
#include "nodewatch/failure_log.hpp"
#include "nodewatch/unique_fd.hpp"
#include "snapshot_store.hpp"
#include "worker_pool.hpp"

namespace nodewatch {

struct CollectorJob {
  std::string name;
  // Null with `keep`: the running instance of `name` goes on.
  std::unique_ptr<Collector> collector;
  // The configuration of this collector did not change: start() keeps the
  // running entry as it is (instance, timers, snapshot, counters), so a
  // reload is invisible to it and to Prometheus.
  bool keep = false;
  std::chrono::milliseconds interval{15000};
  std::chrono::milliseconds timeout{10000};
};

struct CollectorStatus {
  std::string name;
  bool up = false;
  bool ran = false;  // completed (or timed out) at least once
  bool in_flight = false;
  double last_duration_seconds = 0;
  double last_success_unix_seconds = 0;  // 0 until the first success
  std::uint64_t runs = 0;
  std::map<std::string, std::uint64_t, std::less<>> errors;  // reason -> count
  std::string last_error;                                    // empty once a collect succeeds
  std::chrono::milliseconds interval{0};
};

class Scheduler {
 public:
  // A collection running longer than this holds up the collections due
  // after it; past it, another thread takes them (see above). Collections
  // take microseconds to a few milliseconds (bench/); NVML on a busy GPU
  // tens.
  static constexpr std::chrono::milliseconds kStallBudget{100};
  // A collection that starts within this of its due time started on time:
  // its stall budget and its deadline count from the due time.
  static constexpr std::chrono::milliseconds kOnTime{2};

  // `workers`: the pool's threads at start (it grows when collections stall).
  // `clock` must outlive the scheduler and the collects it abandons.
  Scheduler(asio::io_context& io, SnapshotStore& store, std::size_t workers = 2,
            Clock& clock = monotonic_clock());
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Replaces the running set of collectors with `jobs` (first start or a
  // reload). Collectors no longer configured are withdrawn. A job with
  // `keep` keeps its running entry untouched; every other job is started at
  // once.
  void start(std::vector<CollectorJob> jobs);
  // Entries that start() built (not kept) since the scheduler was made.
  std::uint64_t entries_built() const { return entries_built_; }
  // Stops every timer; in-flight collects are abandoned (results dropped).
  void stop();
  // Waits up to `grace` for running collects to return, then gives up on
  // them. True when none is left running.
  bool shutdown_workers(std::chrono::milliseconds grace);

  // Called once, when every collector of the current set has completed its
  // first run (success, failure or timeout).
  // Runs on the io thread.
  void on_first_round(std::function<void()> cb);
  // Called whenever a collector's up state changes.
  // Runs on the io thread.
  void on_state_change(std::function<void()> cb);
  // Called after each collection's result (or its timeout) reached the
  // store and the statuses, and after start(): the node verdict follows.
  // Not after a collection that found what the last one found (the same
  // snapshot text, up before and after): the snapshot served stays, and
  // nothing the verdict reads changed.
  // Called on the thread that had the result, a worker or the io thread:
  // it must be thread-safe and quick.
  void on_result(std::function<void()> cb);
  bool first_round_done() const;

  std::vector<CollectorStatus> statuses() const;
  // The collections' pool: the node verdict's evaluations run on it too,
  // in the wake-up of the results they follow.
  WorkerPool& pool() { return *pool_; }
  // collect() calls executing on worker threads now (tests).
  std::size_t running_collects() const;
  // Times the deadline timer was set (tests, bench/scheduler_bench).
  std::uint64_t deadline_timer_sets() const;

 private:
  struct Entry;
  struct Result;
  // Shared with the workers' jobs, which may outlive the scheduler (a
  // collect stuck in the kernel): `mu` guards every entry's state and the
  // scheduler's; once `alive` is false a job touches nothing else.
  struct Life {
    std::mutex mu;
    bool alive = true;
  };
  // What a change under the lock asks for once the lock is released.
  struct Notices {
    bool state = false;
    bool result = false;
    bool first_round = false;
    bool kick = false;  // on_timer() kicks the pool, once
  };

  // A worker's job: the collection of `e` due at `due`.
  void run_tick(const std::shared_ptr<Life>& life, const std::shared_ptr<Entry>& e,
                Clock::time_point due);
  static Result run_collect(Entry& e, const Clock& clock, Clock::time_point deadline);
  // Under the lock, on the worker, when the collect returned.
  void finish(const std::shared_ptr<Entry>& e, std::uint64_t run_id, Result r, Notices& n);
  void schedule_tick(const std::shared_ptr<Entry>& e, Clock::time_point due);
  static Clock::duration check_after(const Entry& e);
  // Under the lock: the io thread looks at `e` at `at` (never: nullopt).
  // The deadline timer is set only when the earliest check moves.
  void set_check(Entry& e, std::optional<Clock::time_point> at);
  void arm_earliest();
  void arm(Clock::time_point at);
  // The io thread's watch of the deadline timer.
  void watch_deadlines();
  // The alarm that stands for the deadline timer rang.
  void on_alarm();
  void on_timer(Notices& n);
  std::optional<Clock::time_point> check(Entry& e, Clock::time_point now, Notices& n);
  void on_deadline(Entry& e, Notices& n);
  void mark_ran(Entry& e, Notices& n);
  void stop_entry(Entry& e);
  void log_partial_failures(Entry& e, const Result& r);
  // Runs the callbacks `n` asks for; called without the lock.
  void notify(const std::shared_ptr<Life>& life, const Notices& n);
  // The first due time on the grid after `t`, and the count of due times
  // in (`due`, `t`]: the ones a collect due at `due` still running at `t`
  // made skip.
  Clock::time_point next_due_after(Clock::time_point t, std::chrono::milliseconds interval) const;
  std::uint64_t skipped_by(Clock::time_point due, Clock::time_point t,
                           std::chrono::milliseconds interval) const;

  asio::io_context& io_;
  SnapshotStore& store_;
  Clock& clock_;
  const Clock::time_point origin_;  // the grid of due times
  std::shared_ptr<Life> life_;
  std::unique_ptr<WorkerPool> pool_;
  // Under life_->mu from here on.
  std::vector<std::shared_ptr<Entry>> entries_;
  std::map<std::string, std::shared_ptr<bool>, std::less<>> busy_;
  FailureLog failures_;
  std::function<void()> first_round_cb_;
  std::function<void()> state_cb_;
  std::function<void()> result_cb_;
  bool first_round_done_ = false;
  std::uint64_t entries_built_ = 0;
  // One timer for every entry's checks, armed for the earliest (`armed_`,
  // max when disarmed): the clock's alarm, or on CLOCK_MONOTONIC (no
  // alarm) a timerfd; -1 when that could not be made (then a collect that
  // overruns is found out when it returns).
  std::unique_ptr<Clock::Alarm> alarm_;
  UniqueFd timer_;
  Clock::time_point armed_ = Clock::time_point::max();
  std::uint64_t timer_sets_ = 0;
  // The io thread's watch of `timer_` (a duplicate descriptor), made by
  // start(), ended by stop(); `watches_` names the current one.
  std::unique_ptr<asio::posix::stream_descriptor> watch_;
  std::uint64_t watches_ = 0;
};

}  // namespace nodewatch
