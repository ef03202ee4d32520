#include "scheduler.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <optional>

#include "config.hpp"
#include "nodewatch/unique_fd.hpp"

namespace nodewatch {

struct Scheduler::Entry {
  explicit Entry(CollectorJob j)
      : job(std::move(j)),
        overlap_key(job.name + " (overlap)"),
        metrics_key(job.name + " (metrics)"),
        more_key(job.name + " (more failing subjects)") {}

  CollectorJob job;
  // The failure log's keys of this collector's own troubles, made once.
  const std::string overlap_key;
  const std::string metrics_key;
  const std::string more_key;
  // Shared by every entry of the same collector name across reloads: true
  // while any collect() of that collector is running, so that a reload
  // never starts a second one beside a collect still in flight.
  std::shared_ptr<bool> busy;
  // The next collection, queued on the pool (none while one runs).
  std::optional<WorkerPool::Timed> tick;
  Clock::time_point due{};  // of the collection running or last run
  bool stopped = false;
  bool timed_out = false;
  std::uint64_t run_id = 0;
  Clock::time_point started{};
  // What the stall budget and the deadline of the collect in flight count
  // from: its due time when it started on time (within kOnTime), else its
  // start (run_tick()).
  Clock::time_point since{};
  Clock::time_point deadline{};
  bool stalled = false;  // past kStallBudget: the pool was kicked
  std::atomic<bool> cancel{false};
  CollectorStatus status;
  // (reason, subject) pairs failing in the last completed collection, as
  // logged through the failure log.
  std::set<MetricSink::FailureKey> failing;
  // Each series' rendered head, from one collection to the next; used only
  // by the collect in flight (there is at most one).
  SeriesCache series;
  // When the io thread looks at this collection (the queued one at its due
  // time plus its stall budget, the one in flight at its stall budget, then
  // its deadline); max when never. The scheduler's one deadline timer is
  // armed for the earliest of all entries (set_check()).
  Clock::time_point check_at = Clock::time_point::max();
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
  // `rendered` is the snapshot served already: the collection found what
  // the last one found.
  bool unchanged = false;
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

namespace {
// Arms `fd` to expire at `at` (on CLOCK_MONOTONIC), or disarms it. A
// timerfd is reset by every settime, expired or not: a disarmed timer is
// no longer readable.
void set_timer(int fd, std::optional<Clock::time_point> at) {
  if (fd < 0) return;
  itimerspec spec{};
  if (at) {
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(at->time_since_epoch()).count();
    if (ns <= 0) ns = 1;  // zero would disarm
    spec.it_value.tv_sec = static_cast<time_t>(ns / 1'000'000'000);
    spec.it_value.tv_nsec = static_cast<long>(ns % 1'000'000'000);
  }
  ::timerfd_settime(fd, at ? TFD_TIMER_ABSTIME : 0, &spec, nullptr);
}
}  // namespace

Scheduler::Scheduler(asio::io_context& io, SnapshotStore& store, std::size_t workers, Clock& clock)
    : io_(io),
      store_(store),
      clock_(clock),
      origin_(clock.now()),
      life_(std::make_shared<Life>()),
      pool_(std::make_unique<WorkerPool>(workers, "nw-collect", 0, clock)),
      alarm_(clock.alarm([this] { on_alarm(); })),
      timer_(alarm_ ? -1 : ::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)) {
  if (!alarm_ && timer_.get() < 0)
    spdlog::error(
        "scheduler: no deadline timer ({}); a collect that overruns is found out only when it "
        "returns",
        std::strerror(errno));
}

Scheduler::~Scheduler() {
  stop();
  shutdown_workers(std::chrono::milliseconds(0));
}

void Scheduler::on_first_round(std::function<void()> cb) {
  std::lock_guard lock(life_->mu);
  first_round_cb_ = std::move(cb);
}

void Scheduler::on_state_change(std::function<void()> cb) {
  std::lock_guard lock(life_->mu);
  state_cb_ = std::move(cb);
}

void Scheduler::on_result(std::function<void()> cb) {
  std::lock_guard lock(life_->mu);
  result_cb_ = std::move(cb);
}

bool Scheduler::first_round_done() const {
  std::lock_guard lock(life_->mu);
  return first_round_done_;
}

void Scheduler::start(std::vector<CollectorJob> jobs) {
  Notices notices;
  {
    std::lock_guard lock(life_->mu);
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
    // last holder it was), and scrapes must not wait for it. A collector
    // still in a collect() is released by that job when it returns.
    for (auto& e : entries_) {
      if (kept.count(e->job.name) != 0) continue;
      if (e->status.in_flight || !e->job.collector) continue;
      auto doomed = std::make_shared<std::unique_ptr<Collector>>(std::move(e->job.collector));
      pool_->post([doomed] { doomed->reset(); });
    }
    std::vector<std::shared_ptr<Entry>> fresh;
    for (auto& j : jobs) {
      if (j.keep) {
        if (auto it = previous.find(j.name); it != previous.end()) next.push_back(it->second);
        continue;
      }
      auto e = std::make_shared<Entry>(std::move(j));
      ++entries_built_;
      e->status.name = e->job.name;
      e->status.interval = e->job.interval;
      // The scheduler's own failure reasons exist from the start at 0, so
      // that increase() sees their first occurrence.
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
      next.push_back(e);
      fresh.push_back(e);
    }
    entries_ = std::move(next);
    if (!alarm_ && timer_.get() < 0 && !entries_.empty()) {
      spdlog::error(
          "scheduler: no deadline timer; a collect that overruns is found out only when it "
          "returns");
    } else if (!watch_ && timer_.get() >= 0) {
      const int watched = ::fcntl(timer_.get(), F_DUPFD_CLOEXEC, 0);
      if (watched < 0) {
        spdlog::error(
            "scheduler: the deadline timer cannot be watched ({}); a collect that overruns "
            "is found out only when it returns",
            std::strerror(errno));
      } else {
        watch_ = std::make_unique<asio::posix::stream_descriptor>(io_, watched);
        ++watches_;
        watch_deadlines();
      }
    }
    // Room for every collector stuck at once, and two threads beside them.
    pool_->set_max_threads(busy_.size() + 2);
    store_.retain([&](const std::string& name) {
      for (auto& e : entries_)
        if (e->job.name == name) return true;
      return false;
    });
    first_round_done_ =
        std::all_of(entries_.begin(), entries_.end(), [](const auto& e) { return e->status.ran; });
    notices.first_round = first_round_done_;
    notices.result = true;

    // Every fresh collector runs at once, then on the grid. Timed jobs too:
    // a first collection that blocks hands the others to another thread
    // like any other (kStallBudget).
    const auto now = clock_.now();
    for (auto& e : fresh) schedule_tick(e, now);
  }
  notify(life_, notices);
}

void Scheduler::stop() {
  std::lock_guard lock(life_->mu);
  for (auto& e : entries_) stop_entry(*e);
  watch_.reset();  // its pending wait completes, aborted
  ++watches_;
}

// Under the lock, on the io thread.
void Scheduler::stop_entry(Entry& e) {
  e.stopped = true;
  e.cancel = true;
  if (e.tick) {
    pool_->cancel(*e.tick);
    e.tick.reset();
  }
  set_check(e, std::nullopt);
}

bool Scheduler::shutdown_workers(std::chrono::milliseconds grace) {
  std::vector<std::string> running;
  {
    std::lock_guard lock(life_->mu);
    life_->alive = false;
    for (const auto& e : entries_)
      if (e->status.in_flight) running.push_back(e->job.name);
  }
  const bool all = pool_->shutdown(grace);
  if (!all)
    for (const auto& name : running)
      spdlog::warn("collector {} is still running (stuck in the kernel?); not waiting for it",
                   name);
  return all;
}

Clock::time_point Scheduler::next_due_after(Clock::time_point t,
                                            std::chrono::milliseconds interval) const {
  const Clock::duration step = interval;
  if (step <= Clock::duration::zero()) return t;
  const auto since = std::max(Clock::duration::zero(), t - origin_);
  return origin_ + (since / step + 1) * step;
}

std::uint64_t Scheduler::skipped_by(Clock::time_point due, Clock::time_point t,
                                    std::chrono::milliseconds interval) const {
  const Clock::duration step = interval;
  if (step <= Clock::duration::zero()) return 0;
  const auto first = next_due_after(due, interval);
  if (t < first) return 0;
  return static_cast<std::uint64_t>((t - first) / step) + 1;
}

// Under the lock. The entry's check is set here, for the collection
// queued: at its due time plus its stall budget (or its timeout, when that
// is shorter). A collection that starts on time keeps it; the one after it
// sets it again for the next. The deadline timer moves only when the
// earliest check of all entries moves: collectors due together, finishing
// on time, cost one timerfd_settime between them, made by the last.
void Scheduler::schedule_tick(const std::shared_ptr<Entry>& e, Clock::time_point due) {
  std::shared_ptr<Entry> entry = e;
  e->tick = pool_->post_at(due, [this, entry, life = life_, due] { run_tick(life, entry, due); });
  set_check(*e, due + check_after(*e));
}

// Under the lock.
void Scheduler::set_check(Entry& e, std::optional<Clock::time_point> at) {
  const Clock::time_point was = e.check_at;
  e.check_at = at.value_or(Clock::time_point::max());
  if (e.check_at < armed_) {
    arm(e.check_at);
  } else if (was == armed_ && e.check_at > was) {
    arm_earliest();  // it may have been the earliest
  }
}

// Under the lock: the timer armed for the earliest check of all entries
// (stopped ones have none), disarmed when there is none.
void Scheduler::arm_earliest() {
  Clock::time_point earliest = Clock::time_point::max();
  for (const auto& e : entries_) earliest = std::min(earliest, e->check_at);
  if (earliest != armed_) arm(earliest);
}

// Under the lock: the timer armed for `at`, disarmed for max.
void Scheduler::arm(Clock::time_point at) {
  armed_ = at;
  if (alarm_) {
    ++timer_sets_;
    alarm_->set(at);
    return;
  }
  if (timer_.get() < 0) return;
  ++timer_sets_;
  set_timer(timer_.get(),
            at == Clock::time_point::max() ? std::nullopt : std::optional<Clock::time_point>(at));
}

// How long after its start (or its due time, before it starts) a
// collection is looked at by the io thread: its stall budget, or its
// timeout when that is shorter.
Clock::duration Scheduler::check_after(const Entry& e) {
  return std::min<Clock::duration>(e.job.timeout, kStallBudget);
}

// Runs on a worker: one collection, rendered, deflated when a gzip scrape
// is expected before the next, published; then the next one is queued.
// `this` is touched only under the lock while `life` says it is there: a
// collect stuck in the kernel may return after the scheduler is gone.
void Scheduler::run_tick(const std::shared_ptr<Life>& life, const std::shared_ptr<Entry>& e,
                         Clock::time_point due) {
  std::unique_lock lock(life->mu);
  if (!life->alive || e->stopped) return;
  e->tick.reset();
  if (*e->busy) {
    // A collect from before a reload is still running (stuck in the kernel,
    // say): wait for it rather than run two at once.
    e->status.errors["skipped_overlap"]++;
    schedule_tick(e, next_due_after(clock_.now(), e->job.interval));
    return;
  }
  *e->busy = true;
  e->status.in_flight = true;
  e->timed_out = false;
  e->cancel = false;
  const std::uint64_t run_id = ++e->run_id;
  e->due = due;
  e->started = clock_.now();
  // Started on time (a worker's wake-up after the due time): the budget
  // and the deadline count from the due time, and the timer armed for it
  // when it was queued stands. Late: they count from the start, and the
  // timer is armed again.
  e->since = e->started - due <= kOnTime ? due : e->started;
  const Clock::time_point deadline = e->deadline = e->since + e->job.timeout;
  e->stalled = false;
  if (e->since != due) set_check(*e, e->since + check_after(*e));
  // Read under the lock: once it is released, the scheduler may go.
  const Clock::time_point t0 = clock_.now();
  const Clock& clock = clock_;  // which outlives the scheduler
  lock.unlock();

  Result r = run_collect(*e, clock, deadline);
  lock.lock();
  if (!life->alive) return;
  if (r.rendered && !e->timed_out && !e->stopped) {
    // The text of the snapshot served: that one stays, with its deflate if
    // it was made (a collector whose values did not move is not deflated
    // again), and the store and the verdict have nothing new.
    const auto set = store_.current();
    const auto it = set->by_collector.find(e->job.name);
    if (it != set->by_collector.end() && it->second && it->second->text == r.rendered->text) {
      r.rendered = it->second;
      r.unchanged = true;
    }
    // The snapshot lives until the next collection replaces it: one
    // interval and the next collection's time, which half an interval more
    // covers.
    const auto horizon = e->job.interval + e->job.interval / 2 + std::chrono::milliseconds(250);
    if (store_.gzip_expected(e->job.name, clock_.now(), horizon)) {
      lock.unlock();  // a scrape's statuses() does not wait for a deflate
      r.rendered->ensure_deflated();
      lock.lock();
      if (!life->alive) return;
    }
  }
  r.seconds = std::chrono::duration<double>(clock_.now() - t0).count();
  Notices notices;
  finish(e, run_id, std::move(r), notices);
  lock.unlock();
  notify(life, notices);
}

Scheduler::Result Scheduler::run_collect(Entry& e, const Clock& clock, Clock::time_point deadline) {
  Result r;
  // Stopped (a reload, the daemon's exit) before the collect began.
  if (e.cancel.load()) {
    r.cancelled = true;
    return r;
  }
  try {
    MetricSink sink(e.job.collector->metrics(), e.series);
    CollectContext ctx{deadline, &e.cancel, &clock};
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

// On the io thread.
void Scheduler::watch_deadlines() {
  watch_->async_wait(asio::posix::stream_descriptor::wait_read,
                     [this, watch = watches_, life = life_](const boost::system::error_code& ec) {
                       if (ec) return;  // stopped: the watch is gone, and maybe the scheduler
                       Notices notices;
                       {
                         std::lock_guard lock(life->mu);
                         // Not this watch's: stop() ended it after it completed.
                         if (!life->alive || watches_ != watch) return;
                         // Nothing to read when a worker set it again meanwhile.
                         std::uint64_t expirations = 0;
                         [[maybe_unused]] auto n =
                             ::read(timer_.get(), &expirations, sizeof expirations);
                         on_timer(notices);
                         watch_deadlines();
                       }
                       notify(life, notices);
                     });
}

// On the thread that moved the clock, when the alarm that stands for the
// deadline timer rang: the io thread looks at the checks, as it does when
// the timer expires.
void Scheduler::on_alarm() {
  asio::post(io_, [this, life = life_] {
    Notices notices;
    {
      std::lock_guard lock(life->mu);
      if (!life->alive) return;  // the scheduler may be gone
      on_timer(notices);
    }
    notify(life, notices);
  });
}

// Under the lock, on the io thread, when the deadline timer expired: every
// entry whose check has come is looked at, then the timer is armed for the
// earliest check left. Checks that find the pool's timer thread held up
// kick the pool once between them: they find the same thread held, and a
// second kick would find the thread that the first started, which may have
// taken a collection that has not overrun.
void Scheduler::on_timer(Notices& n) {
  const auto now = clock_.now();
  for (const auto& e : entries_) {
    if (e->check_at > now) continue;
    e->check_at = Clock::time_point::max();
    if (auto next = check(*e, now, n)) e->check_at = *next;
  }
  if (n.kick) pool_->kick();
  // Expired, the timer is disarmed; unless a worker set it again since.
  if (armed_ <= now) armed_ = Clock::time_point::max();
  arm_earliest();
}

// Under the lock, on the io thread, at the entry's check: the collect in
// flight is past its stall budget, or its deadline; or the one queued has
// not started by its due time and budget. Returns when to look again.
std::optional<Clock::time_point> Scheduler::check(Entry& e, Clock::time_point now, Notices& n) {
  if (e.stopped) return std::nullopt;
  if (!e.status.in_flight) {
    // The thread that waits for due times is held up (a collect that
    // blocks in the kernel, whose own check may not have come yet, or a
    // job of the pool's that is not a collection). Another thread takes
    // over; looked at again a budget later.
    if (!e.tick) return std::nullopt;
    if (now >= e.tick->due + check_after(e)) {
      n.kick = true;
      return now + check_after(e);
    }
    return e.tick->due + check_after(e);
  }
  if (e.timed_out) return std::nullopt;
  if (now >= e.deadline) {
    on_deadline(e, n);
    return std::nullopt;
  }
  if (!e.stalled && now >= e.since + kStallBudget) {
    // Collections due meanwhile go to another thread; this one waits on.
    e.stalled = true;
    n.kick = true;
    return e.deadline;
  }
  return e.stalled ? e.deadline : std::min(e.deadline, e.since + kStallBudget);
}

// Under the lock, on the io thread, at the deadline of the collect in flight.
void Scheduler::on_deadline(Entry& e, Notices& n) {
  e.timed_out = true;
  e.cancel = true;
  bool was_up = e.status.up;
  e.status.up = false;
  e.status.errors["timeout"]++;
  e.status.last_duration_seconds = std::chrono::duration<double>(clock_.now() - e.started).count();
  e.status.last_error = "collect did not finish within " + format_duration(e.job.timeout);
  store_.withdraw(e.job.name);
  failures_.failed(e.job.name, e.status.last_error);
  // The thread that waits for the pool's due times may be this one: another
  // takes over, so that the collectors beside it keep their intervals.
  n.kick = true;
  mark_ran(e, n);
  n.state = n.state || was_up;
  n.result = true;
}

// Under the lock, on the worker whose collect returned.
void Scheduler::finish(const std::shared_ptr<Entry>& entry, std::uint64_t run_id, Result r,
                       Notices& n) {
  Entry& e = *entry;
  if (run_id != e.run_id) return;
  *e.busy = false;
  e.status.in_flight = false;
  // The check stays set until schedule_tick() below sets it for the next
  // collection; should it come before, check() finds nothing in flight.
  if (e.stopped) return;
  const auto now = clock_.now();
  // Due times that passed while it ran were skipped; the next is the first
  // one after now.
  const std::uint64_t skipped = skipped_by(e.due, now, e.job.interval);
  e.status.errors["skipped_overlap"] += skipped;
  if (skipped > 0)
    failures_.failed(e.overlap_key, "previous collect still running; skipping this interval");
  else
    failures_.succeeded(e.overlap_key);
  schedule_tick(entry, next_due_after(now, e.job.interval));
  if (r.cancelled) return;
  e.status.runs++;
  if (e.timed_out) {
    spdlog::info("{}: late collect returned after {:.3f}s; its result was dropped", e.job.name,
                 r.seconds);
    return;
  }
  bool was_up = e.status.up;
  e.status.last_duration_seconds = r.seconds;
  for (const auto& [reason, count] : r.partial_errors) e.status.errors[reason] += count;
  if (r.ok) log_partial_failures(e, r);
  if (!r.violations.empty()) {
    // A collector emitted something its table does not declare: a bug. The
    // offending samples were dropped; say so once per change.
    e.status.errors["invalid_metric"] += r.violations.size();
    failures_.failed(e.metrics_key, r.violations.front());
  } else {
    failures_.succeeded(e.metrics_key);
  }
  // Up before and after, with the same snapshot: what the verdict reads
  // did not change.
  const bool same = r.ok && r.unchanged && was_up;
  if (r.ok) {
    e.status.up = true;
    e.status.last_error.clear();
    e.status.last_success_unix_seconds = unix_now();
    if (!r.unchanged) store_.publish(e.job.name, std::move(r.rendered));
    failures_.succeeded(e.job.name);
  } else {
    e.status.up = false;
    e.status.errors[r.reason]++;
    e.status.last_error = r.message;
    store_.withdraw(e.job.name);
    failures_.failed(e.job.name, r.message);
  }
  mark_ran(e, n);
  n.state = n.state || was_up != e.status.up;
  n.result = n.result || !same;
}

void Scheduler::notify(const std::shared_ptr<Life>& life, const Notices& n) {
  std::function<void()> first, state, result;
  {
    std::lock_guard lock(life->mu);
    if (!life->alive) return;
    if (n.first_round) first = first_round_cb_;
    if (n.state) state = state_cb_;
    if (n.result) result = result_cb_;
    // The io thread's callbacks are posted while the scheduler (and the
    // io_context it was given) is known to be there.
    if (first) asio::post(io_, std::move(first));
    if (state) asio::post(io_, std::move(state));
  }
  if (result) result();
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
  const std::string& more = e.more_key;
  if (unlogged > 0)
    failures_.failed(more, "more than " + std::to_string(kMaxSubjectsLogged) +
                               " subjects failing; the rest are counted, not named");
  else
    failures_.succeeded(more);
}

// Under the lock.
void Scheduler::mark_ran(Entry& e, Notices& n) {
  if (e.status.ran) return;
  e.status.ran = true;
  if (first_round_done_) return;
  for (auto& other : entries_)
    if (!other->status.ran) return;
  first_round_done_ = true;
  n.first_round = true;
}

std::uint64_t Scheduler::deadline_timer_sets() const {
  std::lock_guard lock(life_->mu);
  return timer_sets_;
}

std::size_t Scheduler::running_collects() const {
  return pool_->busy();
}

std::vector<CollectorStatus> Scheduler::statuses() const {
  std::lock_guard lock(life_->mu);
  const auto now = clock_.now();
  std::vector<CollectorStatus> out;
  out.reserve(entries_.size());
  for (auto& e : entries_) {
    out.push_back(e->status);
    // Due times passing while a collect runs are counted as they pass.
    if (e->status.in_flight)
      out.back().errors["skipped_overlap"] += skipped_by(e->due, now, e->job.interval);
  }
  return out;
}

}  // namespace nodewatch
