#include "scheduler.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>

#include "config.hpp"

namespace nodewatch {

using Clock = std::chrono::steady_clock;

struct Scheduler::Entry {
  Entry(asio::io_context& io, CollectorJob j) : job(std::move(j)), tick(io), deadline(io) {}

  CollectorJob job;
  // Shared by every entry of the same collector name across reloads: true
  // while any collect() of that collector is running, so that a reload
  // never starts a second one beside a collect still in flight.
  std::shared_ptr<bool> busy;
  asio::steady_timer tick;
  asio::steady_timer deadline;
  Clock::time_point next_due{};
  bool stopped = false;
  bool timed_out = false;
  std::uint64_t run_id = 0;
  Clock::time_point started{};
  std::atomic<bool> cancel{false};
  CollectorStatus status;
  // (reason, subject) pairs failing in the last completed collection, as
  // logged through the failure log.
  std::set<MetricSink::FailureKey> failing;
  // Each series' rendered head, from one collection to the next.
  SeriesCache series;
};

struct Scheduler::Result {
  bool ok = false;
  bool cancelled = false;  // the entry was stopped before the job started
  std::string reason;
  std::string message;
  double seconds = 0;
  std::map<std::string, std::uint64_t, std::less<>> partial_errors;
  std::vector<std::string> violations;
  std::map<MetricSink::FailureKey, std::string> failures;
  std::shared_ptr<const RenderedText> rendered;
};

namespace {
// A collector with many failing subjects logs the first ones by name and
// the rest as one count (a node losing 200 disks at once is one story).
constexpr std::size_t kMaxSubjectsLogged = 32;

std::string subject_key(const std::string& collector, const MetricSink::FailureKey& k) {
  return collector + ": " + k.first + ": " + k.second;
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}
}  // namespace

Scheduler::Scheduler(asio::io_context& io, SnapshotStore& store, std::size_t shared_workers)
    : io_(io),
      store_(store),
      link_(std::make_shared<Link>()),
      shared_pool_(std::make_unique<WorkerPool>(shared_workers, "nw-collect")) {
  link_->io = &io_;
}

Scheduler::~Scheduler() {
  stop();
  shutdown_workers(std::chrono::milliseconds(0));
}

void Scheduler::start(std::vector<CollectorJob> jobs) {
  std::map<std::string, std::shared_ptr<Entry>, std::less<>> previous;
  for (auto& e : entries_) previous.emplace(e->job.name, e);
  std::vector<std::shared_ptr<Entry>> next;
  std::set<std::string, std::less<>> kept;
  for (auto& j : jobs) {
    if (!j.keep) continue;
    auto it = previous.find(j.name);
    if (it == previous.end()) {
      // Only the daemon's reload asks to keep, and only what it started.
      spdlog::error("scheduler: no running collector {} to keep; it is not started", j.name);
      continue;
    }
    kept.insert(j.name);
  }
  for (auto& e : entries_)
    if (kept.count(e->job.name) == 0) stop_entry(*e);
  // The replaced collectors are destroyed on a worker, not here on the io
  // thread: a destructor may wait for threads of its own (a service whose
  // last holder it was), and scrapes must not wait for it. A collector still in a
  // collect() is released by that job when it returns.
  for (auto& e : entries_) {
    if (kept.count(e->job.name) != 0) continue;
    if (e->status.in_flight || !e->job.collector) continue;
    auto doomed = std::make_shared<std::unique_ptr<Collector>>(std::move(e->job.collector));
    shared_pool_->post([doomed] { doomed->reset(); });
  }
  {
    std::lock_guard lock(link_->mu);
    link_->io = &io_;
  }
  std::vector<std::shared_ptr<Entry>> fresh;
  for (auto& j : jobs) {
    if (j.keep) {
      if (auto it = previous.find(j.name); it != previous.end()) next.push_back(it->second);
      continue;
    }
    auto e = std::make_shared<Entry>(io_, std::move(j));
    ++entries_built_;
    e->status.name = e->job.name;
    e->status.interval = e->job.interval;
    // The scheduler's own failure reasons exist from the start at 0, so that
    // increase() sees their first occurrence.
    e->status.errors["timeout"] = 0;
    e->status.errors["skipped_overlap"] = 0;
    // Counters survive a reload so that errors_total never goes backwards.
    if (auto it = previous.find(e->job.name); it != previous.end()) {
      e->status.errors = it->second->status.errors;
      e->status.last_success_unix_seconds = it->second->status.last_success_unix_seconds;
      e->status.runs = it->second->status.runs;
    }
    auto& busy = busy_[e->job.name];
    if (!busy) busy = std::make_shared<bool>(false);
    e->busy = busy;
    if (e->job.own_thread && own_pools_.count(e->job.name) == 0) {
      own_pools_.emplace(e->job.name, std::make_unique<WorkerPool>(1, "nw-" + e->job.name));
    }
    next.push_back(e);
    fresh.push_back(e);
  }
  entries_ = std::move(next);
  store_.retain([&](const std::string& name) {
    for (auto& e : entries_)
      if (e->job.name == name) return true;
    return false;
  });
  first_round_done_ =
      std::all_of(entries_.begin(), entries_.end(), [](const auto& e) { return e->status.ran; });
  if (first_round_done_ && first_round_cb_) asio::post(io_, first_round_cb_);
  if (result_cb_) result_cb_();
  auto now = Clock::now();
  for (auto& e : fresh) {
    e->next_due = now;
    launch(e);
    schedule(e);
  }
}

void Scheduler::stop() {
  for (auto& e : entries_) stop_entry(*e);
}

void Scheduler::stop_entry(Entry& e) {
  e.stopped = true;
  e.cancel = true;
  e.tick.cancel();
  e.deadline.cancel();
}

bool Scheduler::shutdown_workers(std::chrono::milliseconds grace) {
  {
    std::lock_guard lock(link_->mu);
    link_->io = nullptr;
  }
  auto until = Clock::now() + grace;
  bool all = true;
  auto remaining = [&] {
    auto left = until - Clock::now();
    return std::max(std::chrono::milliseconds(0),
                    std::chrono::duration_cast<std::chrono::milliseconds>(left));
  };
  if (shared_pool_) all = shared_pool_->shutdown(remaining()) && all;
  for (auto& [name, pool] : own_pools_) {
    bool done = pool->shutdown(remaining());
    if (!done)
      spdlog::warn("collector {} is still running (stuck in the kernel?); not waiting for it",
                   name);
    all = done && all;
  }
  return all;
}

WorkerPool& Scheduler::pool_for(const Entry& e) {
  if (e.job.own_thread) return *own_pools_.at(e.job.name);
  return *shared_pool_;
}

void Scheduler::schedule(const std::shared_ptr<Entry>& e) {
  // Fixed rate: the next tick is one interval after the last due time; ticks
  // missed while the process was stalled are skipped, not replayed.
  auto now = Clock::now();
  e->next_due += e->job.interval;
  if (e->next_due <= now) e->next_due = now + e->job.interval;
  e->tick.expires_at(e->next_due);
  e->tick.async_wait([this, e](const boost::system::error_code& ec) {
    if (ec || e->stopped) return;
    if (e->status.in_flight) {
      // The previous collect has not returned: never run two at once.
      e->status.errors["skipped_overlap"]++;
      failures_.failed(e->job.name + " (overlap)",
                       "previous collect still running; skipping this interval");
    } else {
      failures_.succeeded(e->job.name + " (overlap)");
      launch(e);
    }
    schedule(e);
  });
}

// Runs on a worker: one collect(), rendered and deflated.
Scheduler::Result Scheduler::run_collect(Entry& e, Clock::time_point deadline) {
  Result r;
  try {
    MetricSink sink(e.job.collector->metrics(), e.series);
    CollectContext ctx{deadline, &e.cancel};
    e.job.collector->collect(ctx, sink);
    r.ok = true;
    r.partial_errors = sink.errors();
    r.violations = sink.violations();
    r.failures = sink.failures();
    r.rendered = make_rendered(sink.render());
  } catch (const CollectError& ex) {
    r.reason = ex.reason();
    r.message = ex.what();
  } catch (const std::exception& ex) {
    r.reason = "exception";
    r.message = ex.what();
  } catch (...) {
    r.reason = "exception";
    r.message = "unknown exception";
  }
  return r;
}

void Scheduler::deflate_if_expected(const Entry& e, const Result& r,
                                    const std::shared_ptr<Link>& link) {
  if (!r.rendered) return;
  // The snapshot lives until the next collection replaces it: one interval
  // and the next collection's time, which half an interval more covers.
  const auto horizon = e.job.interval + e.job.interval / 2 + std::chrono::milliseconds(250);
  bool expected = false;
  {
    std::lock_guard lock(link->mu);
    if (link->io == nullptr) return;  // the scheduler (and its store) may be gone
    expected = store_.gzip_expected(e.job.name, Clock::now(), horizon);
  }
  if (expected) r.rendered->ensure_deflated();
}

void Scheduler::launch(const std::shared_ptr<Entry>& e) {
  if (*e->busy) {
    // A collect from before a reload is still running (stuck in the kernel,
    // say): wait for it rather than run two at once.
    e->status.errors["skipped_overlap"]++;
    return;
  }
  *e->busy = true;
  e->status.in_flight = true;
  e->timed_out = false;
  e->cancel = false;
  std::uint64_t run_id = ++e->run_id;
  e->started = Clock::now();
  auto deadline = e->started + e->job.timeout;
  e->deadline.expires_at(deadline);
  e->deadline.async_wait([this, e, run_id](const boost::system::error_code& ec) {
    if (!ec) on_deadline(e, run_id);
  });
  std::shared_ptr<Link> link = link_;
  pool_for(*e).post([this, e, run_id, deadline, link] {
    auto t0 = Clock::now();
    // A job queued behind a collect that overran, for an entry stopped or
    // past its deadline since, does not call collect() at all.
    Result r;
    if (e->cancel.load())
      r.cancelled = true;
    else
      r = run_collect(*e, deadline);
    deflate_if_expected(*e, r, link);
    r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    std::lock_guard lock(link->mu);
    if (link->io == nullptr) return;  // the scheduler is gone
    asio::post(*link->io, [this, e, run_id, r = std::move(r)]() mutable {
      complete(e, run_id, std::move(r));
    });
  });
}

void Scheduler::on_deadline(const std::shared_ptr<Entry>& e, std::uint64_t run_id) {
  if (e->stopped || run_id != e->run_id || !e->status.in_flight) return;
  e->timed_out = true;
  e->cancel = true;
  bool was_up = e->status.up;
  e->status.up = false;
  e->status.errors["timeout"]++;
  e->status.last_duration_seconds =
      std::chrono::duration<double>(Clock::now() - e->started).count();
  e->status.last_error = "collect did not finish within " + format_duration(e->job.timeout);
  store_.withdraw(e->job.name);
  failures_.failed(e->job.name, e->status.last_error);
  mark_ran(*e);
  if (was_up && state_cb_) state_cb_();
  if (result_cb_) result_cb_();
}

void Scheduler::complete(const std::shared_ptr<Entry>& e, std::uint64_t run_id, Result r) {
  if (run_id != e->run_id) return;
  *e->busy = false;
  e->status.in_flight = false;
  e->deadline.cancel();
  if (e->stopped || r.cancelled) return;
  e->status.runs++;
  if (e->timed_out) {
    spdlog::info("{}: late collect returned after {:.3f}s; its result was dropped", e->job.name,
                 r.seconds);
    return;
  }
  bool was_up = e->status.up;
  e->status.last_duration_seconds = r.seconds;
  for (const auto& [reason, n] : r.partial_errors) e->status.errors[reason] += n;
  if (r.ok) log_partial_failures(*e, r);
  if (!r.violations.empty()) {
    // A collector emitted something its table does not declare: a bug. The
    // offending samples were dropped; say so once per change.
    e->status.errors["invalid_metric"] += r.violations.size();
    failures_.failed(e->job.name + " (metrics)", r.violations.front());
  } else {
    failures_.succeeded(e->job.name + " (metrics)");
  }
  if (r.ok) {
    e->status.up = true;
    e->status.last_error.clear();
    e->status.last_success_unix_seconds = unix_now();
    store_.publish(e->job.name, std::move(r.rendered));
    failures_.succeeded(e->job.name);
  } else {
    e->status.up = false;
    e->status.errors[r.reason]++;
    e->status.last_error = r.message;
    store_.withdraw(e->job.name);
    failures_.failed(e->job.name, r.message);
  }
  mark_ran(*e);
  if (was_up != e->status.up && state_cb_) state_cb_();
  if (result_cb_) result_cb_();
}

// One line when a (reason, subject) starts failing, one when it stops, with
// the count of collections in between (FailureLog); never one per cycle.
void Scheduler::log_partial_failures(Entry& e, const Result& r) {
  std::set<MetricSink::FailureKey> now;
  std::size_t unlogged = 0;
  for (const auto& [key, detail] : r.failures) {
    if (now.size() >= kMaxSubjectsLogged && e.failing.count(key) == 0) {
      ++unlogged;
      continue;
    }
    now.insert(key);
    failures_.failed(subject_key(e.job.name, key), detail.empty() ? "failing" : detail);
  }
  for (const auto& key : e.failing)
    if (now.count(key) == 0) failures_.succeeded(subject_key(e.job.name, key));
  e.failing = std::move(now);
  std::string more = e.job.name + " (more failing subjects)";
  if (unlogged > 0)
    failures_.failed(more, "more than " + std::to_string(kMaxSubjectsLogged) +
                               " subjects failing; the rest are counted, not named");
  else
    failures_.succeeded(more);
}

void Scheduler::mark_ran(Entry& e) {
  if (e.status.ran) return;
  e.status.ran = true;
  if (first_round_done_) return;
  for (auto& other : entries_)
    if (!other->status.ran) return;
  first_round_done_ = true;
  if (first_round_cb_) first_round_cb_();
}

std::size_t Scheduler::running_collects() const {
  std::size_t n = shared_pool_ ? shared_pool_->busy() : 0;
  for (const auto& [name, pool] : own_pools_) n += pool->busy();
  return n;
}

std::vector<CollectorStatus> Scheduler::statuses() const {
  std::vector<CollectorStatus> out;
  out.reserve(entries_.size());
  for (auto& e : entries_) out.push_back(e->status);
  return out;
}

}  // namespace nodewatch
