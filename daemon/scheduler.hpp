#pragma once
// Runs collectors on timers (see DESIGN.md, "Shape of the process").
//
// Every method is called on the io_context's thread. Each collector has one
// timer on the io_context; a tick hands collect() to a worker (a shared pool,
// or a thread of its own for collectors that can block in the kernel). At
// most one collect() per collector is in flight: a tick that finds the last
// one still running is skipped and counted. A collect that passes its
// deadline is reported failed at the deadline and its snapshot withdrawn
// (no stale values); when it returns, late, its result is dropped.
// Rendering happens on the worker, through the entry's SeriesCache (each
// series' name and labels rendered once), and so does the deflate when a
// gzip scrape is expected before the next collection (GzipDemand); the io
// thread only swaps pointers.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "asio.hpp"
#include "nodewatch/collector.hpp"
#include "nodewatch/failure_log.hpp"
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
  bool own_thread = false;
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
  Scheduler(asio::io_context& io, SnapshotStore& store, std::size_t shared_workers = 2);
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
  void on_first_round(std::function<void()> cb) { first_round_cb_ = std::move(cb); }
  // Called whenever a collector's up state changes.
  void on_state_change(std::function<void()> cb) { state_cb_ = std::move(cb); }
  // Called after each collection's result (or its timeout) reached the
  // store and the statuses, and after start(): the node verdict follows.
  void on_result(std::function<void()> cb) { result_cb_ = std::move(cb); }
  bool first_round_done() const { return first_round_done_; }

  std::vector<CollectorStatus> statuses() const;
  // collect() calls executing on worker threads now (tests).
  std::size_t running_collects() const;

 private:
  struct Entry;
  struct Result;
  void schedule(const std::shared_ptr<Entry>& e);
  void launch(const std::shared_ptr<Entry>& e);
  static Result run_collect(Entry& e, std::chrono::steady_clock::time_point deadline);
  void complete(const std::shared_ptr<Entry>& e, std::uint64_t run_id, Result r);
  void on_deadline(const std::shared_ptr<Entry>& e, std::uint64_t run_id);
  void mark_ran(Entry& e);
  void stop_entry(Entry& e);
  void log_partial_failures(Entry& e, const Result& r);
  WorkerPool& pool_for(const Entry& e);

  // Shared with workers so a late completion can tell the scheduler is gone.
  struct Link {
    std::mutex mu;
    asio::io_context* io = nullptr;
  };
  // Deflates `r`'s snapshot now when a gzip scrape of `e` is expected before
  // its next collection (and the scheduler is still there).
  void deflate_if_expected(const Entry& e, const Result& r, const std::shared_ptr<Link>& link);

  asio::io_context& io_;
  SnapshotStore& store_;
  std::shared_ptr<Link> link_;
  std::unique_ptr<WorkerPool> shared_pool_;
  std::map<std::string, std::unique_ptr<WorkerPool>, std::less<>> own_pools_;
  std::vector<std::shared_ptr<Entry>> entries_;
  std::map<std::string, std::shared_ptr<bool>, std::less<>> busy_;
  FailureLog failures_;
  std::function<void()> first_round_cb_;
  std::function<void()> state_cb_;
  std::function<void()> result_cb_;
  bool first_round_done_ = false;
  std::uint64_t entries_built_ = 0;
};

}  // namespace nodewatch
