#include "scheduler.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "fakes/fake_collector.hpp"
#include "snapshot_store.hpp"
#include "support/clock_driver.hpp"
#include "support/eventually.hpp"
#include "support/log_capture.hpp"
#include "support/manual_clock.hpp"
#include "worker_pool.hpp"

namespace nodewatch {
namespace {

using namespace std::chrono_literals;
using testing::FakeCollector;

// The scheduler on a clock that the test moves (ClockDriver): every count
// below is exact. The test's thread is the io thread.
struct Harness {
  testing::ManualClock clock;
  asio::io_context io;
  SnapshotStore store;
  Scheduler sched{io, store, 2, clock};
  testing::ClockDriver driver{clock, sched.pool(), &io};

  // Collects blocked on the clock return before the scheduler goes.
  ~Harness() {
    sched.stop();
    driver.advance(1h);
  }
  // Moves the clock `d` on; returns with everything due by then done.
  void Advance(Clock::duration d) { driver.advance(d); }
  // Runs what is due now, the io thread's handlers included.
  void Settle() { driver.settle(); }
  CollectorStatus Status(const std::string& name) {
    for (auto& s : sched.statuses())
      if (s.name == name) return s;
    ADD_FAILURE() << "no status for " << name;
    return {};
  }
  // A collector whose sleep_ is on this clock.
  CollectorJob Job(std::string name, FakeCollector** out, std::chrono::milliseconds interval,
                   std::chrono::milliseconds timeout) {
    auto c = std::make_unique<FakeCollector>(name);
    c->clock_ = &clock;
    *out = c.get();
    CollectorJob j;
    j.name = std::move(name);
    j.collector = std::move(c);
    j.interval = interval;
    j.timeout = timeout;
    return j;
  }
};

TEST(SchedulerTest, PublishesRenderedSnapshotAndFirstRound) {
  Harness h;
  FakeCollector* a;
  bool first = false;
  h.sched.on_first_round([&] { first = true; });
  std::vector<CollectorJob> jobs;
  jobs.push_back(h.Job("a", &a, 1h, 1s));
  h.sched.start(std::move(jobs));
  h.Settle();
  ASSERT_TRUE(first);
  auto set = h.store.current();
  ASSERT_EQ(set->by_collector.count("a"), 1u);
  EXPECT_NE(set->by_collector.at("a")->text.find("nodewatch_fake_calls_total{collector=\"a\"} 1"),
            std::string::npos);
  // No gzip scrape has asked for this collector: its snapshot is not deflated.
  EXPECT_FALSE(set->by_collector.at("a")->is_deflated());
  auto st = h.Status("a");
  EXPECT_TRUE(st.up);
  EXPECT_GT(st.last_success_unix_seconds, 1.6e9);
  EXPECT_TRUE(h.sched.first_round_done());
}

// A collection's deadline is of the scheduler's clock, and so are what it
// is told of the time left and whether to stop. (Before, should_stop()
// compared it with steady_clock: on a test's clock every collection was
// told to stop as it began.)
TEST(SchedulerTest, ACollectionMeasuresItsDeadlineOnTheSchedulersClock) {
  Harness h;
  FakeCollector* a;
  std::vector<CollectorJob> jobs;
  jobs.push_back(h.Job("a", &a, 1h, 3s));
  h.Advance(10min);  // far from the machine's own steady_clock either way
  h.sched.start(std::move(jobs));
  h.Settle();
  EXPECT_EQ(a->calls_.load(), 1);
  EXPECT_FALSE(a->stopped_at_start_.load());
  EXPECT_EQ(a->left_at_start_.load(), 3s);
}

TEST(SchedulerTest, DeflatesOnTheWorkerOnlyTheSnapshotsAGzipScrapeIsExpectedToTake) {
  Harness h;
  FakeCollector *a, *b;
  // One gzip scrape of "a" a moment ago, none of "b".
  h.store.gzip_scraped({"a"}, h.clock.now());
  std::vector<CollectorJob> jobs;
  jobs.push_back(h.Job("a", &a, 1h, 1s));
  jobs.push_back(h.Job("b", &b, 1h, 1s));
  h.sched.start(std::move(jobs));
  h.Settle();
  ASSERT_TRUE(h.sched.first_round_done());
  auto set = h.store.current();
  const RenderedText& ra = *set->by_collector.at("a");
  const RenderedText& rb = *set->by_collector.at("b");
  EXPECT_TRUE(ra.is_deflated());
  EXPECT_FALSE(rb.is_deflated());
  // A gzip scrape deflates what it takes itself, once, and the result
  // inflates to the text.
  EXPECT_EQ(gunzip(assemble_gzip({&ra, &rb}, "")), ra.text + rb.text);
  EXPECT_TRUE(rb.is_deflated());
}

// The slow one holds the thread that waits for due times from the start:
// the fast one, due at the start too, is found held up at its check (a
// stall budget later) and run by another thread; from then on it keeps
// its interval.
TEST(SchedulerTest, OverrunningCollectorFailsAtItsDeadlineWhileAnotherKeepsItsInterval) {
  Harness h;
  FakeCollector *slow, *fast;
  std::vector<CollectorJob> jobs;
  jobs.push_back(h.Job("slow", &slow, 2s, 200ms));
  jobs.push_back(h.Job("fast", &fast, 100ms, 100ms));
  slow->sleep_ = 1500ms;  // stuck like a read in the kernel
  h.sched.start(std::move(jobs));
  h.Settle();
  EXPECT_EQ(slow->active_, 1);
  EXPECT_EQ(fast->calls_, 0);
  h.Advance(100ms);
  EXPECT_EQ(fast->calls_, 1);
  // The slow one is reported down at its deadline, not when it returns.
  h.Advance(99ms);
  EXPECT_EQ(h.Status("slow").errors["timeout"], 0u);
  h.Advance(1ms);
  EXPECT_EQ(h.Status("slow").errors["timeout"], 1u);
  EXPECT_EQ(slow->active_, 1);
  EXPECT_FALSE(h.Status("slow").up);
  EXPECT_EQ(h.store.current()->by_collector.count("slow"), 0u);
  EXPECT_EQ(fast->calls_, 2);
  // Meanwhile the fast one runs every 100 ms.
  h.Advance(1000ms);
  EXPECT_EQ(fast->calls_, 12);
  EXPECT_EQ(slow->active_, 1);
  EXPECT_TRUE(h.Status("fast").up);
  EXPECT_EQ(h.Status("fast").errors["timeout"], 0u);
  h.Advance(300ms);  // the slow one returns, late: its result is dropped
  EXPECT_EQ(slow->active_, 0);
  EXPECT_EQ(h.Status("slow").runs, 1u);
  EXPECT_EQ(h.store.current()->by_collector.count("slow"), 0u);
  h.sched.stop();
  EXPECT_TRUE(h.sched.shutdown_workers(3s));
}

TEST(SchedulerTest, NeverTwoCollectsOfOneCollectorAtOnce) {
  Harness h;
  FakeCollector* c;
  std::vector<CollectorJob> jobs;
  // Interval shorter than the collect: due times find it still in flight.
  jobs.push_back(h.Job("c", &c, 100ms, 100ms));
  c->sleep_ = 250ms;
  h.sched.start(std::move(jobs));
  // Collects at 0 and 300 ms, each timed out 100 ms in and returning
  // 250 ms in, skipping two due times; the third starts at 600 ms.
  h.Advance(600ms);
  EXPECT_EQ(c->calls_, 3);
  EXPECT_EQ(c->max_active_, 1);
  auto st = h.Status("c");
  EXPECT_EQ(st.errors["skipped_overlap"], 4u);
  EXPECT_EQ(st.errors["timeout"], 2u);
  EXPECT_TRUE(st.in_flight);
}

TEST(SchedulerTest, LateResultIsDroppedNotPublished) {
  Harness h;
  FakeCollector* c;
  std::vector<CollectorJob> jobs;
  jobs.push_back(h.Job("late", &c, 1h, 100ms));
  c->sleep_ = 300ms;
  h.sched.start(std::move(jobs));
  h.Advance(299ms);
  EXPECT_EQ(h.Status("late").runs, 0u);
  EXPECT_EQ(h.Status("late").errors["timeout"], 1u);
  h.Advance(1ms);
  EXPECT_EQ(h.Status("late").runs, 1u);
  EXPECT_FALSE(h.Status("late").up);
  EXPECT_EQ(h.store.current()->by_collector.count("late"), 0u);
}

TEST(SchedulerTest, FailureWithdrawsTheSnapshotAndCountsTheReason) {
  Harness h;
  FakeCollector* c;
  std::vector<CollectorJob> jobs;
  jobs.push_back(h.Job("f", &c, 100ms, 100ms));
  h.sched.start(std::move(jobs));
  h.Settle();
  ASSERT_EQ(h.store.current()->by_collector.count("f"), 1u);
  c->fail_ = true;
  h.Advance(100ms);
  EXPECT_EQ(h.store.current()->by_collector.count("f"), 0u);
  auto st = h.Status("f");
  EXPECT_FALSE(st.up);
  EXPECT_EQ(st.errors["read_error"], 1u);
  EXPECT_EQ(st.last_error, "scripted failure");
  c->fail_ = false;
  h.Advance(100ms);
  EXPECT_TRUE(h.Status("f").up);
  EXPECT_EQ(h.Status("f").last_error, "");
  EXPECT_EQ(h.Status("f").runs, 3u);
}

TEST(SchedulerTest, PartialErrorsAndContractViolationsAreCounted) {
  Harness h;
  FakeCollector* c;
  std::vector<CollectorJob> jobs;
  jobs.push_back(h.Job("p", &c, 1h, 1s));
  c->partial_error_ = true;
  c->emit_undeclared_ = true;
  h.sched.start(std::move(jobs));
  h.Settle();
  ASSERT_TRUE(h.sched.first_round_done());
  auto st = h.Status("p");
  EXPECT_TRUE(st.up);  // partial errors do not fail the collector
  EXPECT_EQ(st.errors["parse_error"], 1u);
  EXPECT_EQ(st.errors["invalid_metric"], 1u);
  EXPECT_EQ(h.store.current()->by_collector.at("p")->text.find("not_declared"), std::string::npos);
}

// A collect stuck in the kernel past the stall budget: the collections due
// meanwhile go to another thread, so the others keep their intervals.
TEST(SchedulerTest, AStuckCollectorDoesNotStarveTheOthers) {
  Harness h;
  FakeCollector *stuck, *a, *b, *c;
  std::vector<CollectorJob> jobs;
  jobs.push_back(h.Job("stuck", &stuck, 100ms, 100ms));
  jobs.push_back(h.Job("a", &a, 100ms, 100ms));
  jobs.push_back(h.Job("b", &b, 100ms, 100ms));
  jobs.push_back(h.Job("c", &c, 100ms, 100ms));
  stuck->sleep_ = 1200ms;
  h.sched.start(std::move(jobs));
  // Held up by the stuck one until their check at 100 ms, then every
  // 100 ms on another thread.
  h.Advance(99ms);
  EXPECT_EQ(a->calls_ + b->calls_ + c->calls_, 0);
  h.Advance(901ms);
  EXPECT_EQ(a->calls_, 10);
  EXPECT_EQ(b->calls_, 10);
  EXPECT_EQ(c->calls_, 10);
  EXPECT_EQ(stuck->calls_, 1);
  EXPECT_EQ(stuck->active_, 1);
  EXPECT_EQ(h.Status("a").errors["timeout"], 0u);
}

// Collections that block longer than the stall budget but within their
// deadline (no timeout to the rescue), more of them than the pool has
// threads, from the first collection on: the pool grows, and the one that
// does not block keeps its interval.
TEST(SchedulerTest, CollectionsBlockedWithinTheirDeadlineDoNotHoldUpTheOthers) {
  Harness h;
  FakeCollector *s1, *s2, *s3, *fast;
  std::vector<CollectorJob> jobs;
  jobs.push_back(h.Job("s1", &s1, 10s, 5s));
  jobs.push_back(h.Job("s2", &s2, 10s, 5s));
  jobs.push_back(h.Job("s3", &s3, 10s, 5s));
  jobs.push_back(h.Job("fast", &fast, 50ms, 50ms));
  for (FakeCollector* s : {s1, s2, s3}) s->sleep_ = 1500ms;
  h.sched.start(std::move(jobs));
  // Each held thread is found out at a check: s2 starts at 50 ms (the fast
  // one's check, its timeout), s3 at 100 ms (s1's stall budget, on a new
  // thread), and the fast one at 150 ms (s2's budget, on another).
  h.Advance(50ms);
  EXPECT_EQ(s1->active_ + s2->active_ + s3->active_, 2);
  h.Advance(50ms);
  EXPECT_EQ(s1->active_ + s2->active_ + s3->active_, 3);
  h.Advance(49ms);
  EXPECT_EQ(fast->calls_, 0);
  EXPECT_EQ(s1->active_ + s2->active_ + s3->active_, 3);
  h.Advance(1ms);
  EXPECT_EQ(fast->calls_, 1);
  // Then it keeps its interval while the three are held.
  h.Advance(500ms);
  EXPECT_EQ(s1->active_ + s2->active_ + s3->active_, 3);
  EXPECT_EQ(fast->calls_, 11);
  EXPECT_EQ(h.Status("s1").errors["timeout"], 0u);
  EXPECT_FALSE(h.sched.first_round_done());
  // They return at 1500, 1550 and 1600 ms, in time.
  h.Advance(950ms);
  EXPECT_TRUE(h.sched.first_round_done());
  EXPECT_TRUE(h.Status("s1").up);
  EXPECT_TRUE(h.Status("s3").up);
  EXPECT_EQ(h.Status("s3").errors["timeout"], 0u);
  h.sched.stop();
  EXPECT_TRUE(h.sched.shutdown_workers(3s));
}

// The grace is real time: the daemon's exit waits that long, no longer,
// for a thread stuck in the kernel.
TEST(SchedulerTest, ShutdownGivesUpOnAStuckCollector) {
  Harness h;
  FakeCollector* stuck;
  std::vector<CollectorJob> jobs;
  jobs.push_back(h.Job("stuck", &stuck, 1h, 50ms));
  stuck->sleep_ = 2000ms;
  h.sched.start(std::move(jobs));
  h.Settle();
  ASSERT_EQ(stuck->active_, 1);
  h.sched.stop();
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(h.sched.shutdown_workers(100ms));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 500ms);
  // The detached worker returns when the clock reaches its end.
  h.Advance(2s);
  EXPECT_EQ(stuck->active_, 0);
}

TEST(SchedulerTest, RestartKeepsErrorCountersAndDropsRemovedCollectors) {
  Harness h;
  FakeCollector *a, *b;
  std::vector<CollectorJob> jobs;
  jobs.push_back(h.Job("a", &a, 1h, 1s));
  jobs.push_back(h.Job("b", &b, 1h, 1s));
  a->fail_ = true;
  h.sched.start(std::move(jobs));
  h.Settle();
  ASSERT_TRUE(h.sched.first_round_done());
  EXPECT_EQ(h.Status("a").errors["read_error"], 1u);
  EXPECT_EQ(h.store.current()->by_collector.count("b"), 1u);
  FakeCollector* a2;
  std::vector<CollectorJob> jobs2;
  jobs2.push_back(h.Job("a", &a2, 1h, 1s));
  a2->fail_ = true;
  h.sched.start(std::move(jobs2));
  h.Settle();
  ASSERT_TRUE(h.sched.first_round_done());
  EXPECT_EQ(h.Status("a").errors["read_error"], 2u);
  EXPECT_EQ(h.sched.statuses().size(), 1u);
  EXPECT_EQ(h.store.current()->by_collector.count("b"), 0u);
}

TEST(SchedulerTest, ARestartNeverRunsACollectorBesideOneStillInFlight) {
  Harness h;
  FakeCollector::Shared shared;
  FakeCollector *old_c, *new_c;
  std::vector<CollectorJob> jobs;
  jobs.push_back(h.Job("c", &old_c, 100ms, 100ms));
  old_c->sleep_ = 650ms;
  old_c->shared_ = &shared;
  h.sched.start(std::move(jobs));
  h.Settle();
  ASSERT_EQ(shared.active, 1);
  // The reload replaces the collector; the old instance is freed once its
  // collect returns, so only `shared` is read from here on.
  std::vector<CollectorJob> jobs2;
  jobs2.push_back(h.Job("c", &new_c, 100ms, 100ms));
  new_c->shared_ = &shared;
  h.sched.start(std::move(jobs2));
  // Held up with the thread the old collect holds, the new one's first
  // collection is found at its check (100 ms) and skipped, as are those
  // due at 200..600 ms; the old collect returns at 650 ms.
  h.Advance(649ms);
  EXPECT_EQ(shared.calls, 1);
  EXPECT_EQ(h.Status("c").errors["skipped_overlap"], 6u);
  h.Advance(51ms);
  EXPECT_EQ(shared.calls, 2);
  EXPECT_EQ(shared.max_active, 1);
  EXPECT_EQ(h.Status("c").errors["skipped_overlap"], 6u);
}

// Notes the thread its destructor runs on: a collector's destructor may
// take a while (one that joins threads of its own), so it must run on a
// worker, not on the io thread that reloads.
class SlowToDestroy : public FakeCollector {
 public:
  SlowToDestroy(std::string name, std::atomic<bool>* destroyed, std::thread::id* on)
      : FakeCollector(std::move(name)), destroyed_(destroyed), on_(on) {}
  ~SlowToDestroy() override {
    *on_ = std::this_thread::get_id();
    *destroyed_ = true;
  }

 private:
  std::atomic<bool>* destroyed_;
  std::thread::id* on_;
};

TEST(SchedulerTest, ReplacedCollectorsAreDestroyedOffTheIoThread) {
  Harness h;
  CollectorJob j;
  j.name = "slow";
  std::atomic<bool> destroyed{false};
  std::thread::id on;
  j.collector = std::make_unique<SlowToDestroy>("slow", &destroyed, &on);
  j.interval = 1h;
  j.timeout = 1s;
  std::vector<CollectorJob> jobs;
  jobs.push_back(std::move(j));
  h.sched.start(std::move(jobs));
  h.Settle();
  ASSERT_TRUE(h.sched.first_round_done());
  h.sched.start({});  // a reload that drops it
  h.Settle();
  ASSERT_TRUE(destroyed.load());
  EXPECT_NE(on, std::this_thread::get_id());
}

TEST(SchedulerTest, NoCollectorsIsReadyAtOnce) {
  Harness h;
  bool first = false;
  h.sched.on_first_round([&] { first = true; });
  h.sched.start({});
  h.Settle();
  EXPECT_TRUE(first);
}

// Scrapes read snapshot sets on other threads while the scheduler swaps
// them; run under ThreadSanitizer in CI.
TEST(SchedulerTest, SnapshotSwapUnderConcurrentScrapesIsRaceFree) {
  Harness h;
  FakeCollector *a, *b;
  std::vector<CollectorJob> jobs;
  jobs.push_back(h.Job("a", &a, 100ms, 100ms));
  jobs.push_back(h.Job("b", &b, 100ms, 100ms));
  h.sched.start(std::move(jobs));
  std::atomic<bool> done{false};
  std::atomic<std::size_t> bytes{0};
  std::atomic<int> reads{0};
  std::vector<std::thread> readers;
  for (int i = 0; i < 4; ++i) {
    readers.emplace_back([&] {
      while (!done) {
        auto set = h.store.current();
        std::vector<const RenderedText*> segs;
        for (auto& [name, r] : set->by_collector) {
          bytes += r->text.size();
          segs.push_back(r.get());
        }
        std::string gz = assemble_gzip(segs, "tail 1\n");
        EXPECT_EQ(gunzip(gz).size(), [&] {
          std::size_t n = 7;
          for (auto* s : segs) n += s->text.size();
          return n;
        }());
        ++reads;
      }
    });
  }
  for (int i = 0; i < 10; ++i) {
    // The readers read between each swap and the next.
    const int before = reads;
    ASSERT_TRUE(testing::Eventually([&] { return reads > before + 4; }, 5s, 1ms));
    h.Advance(100ms);
  }
  done = true;
  for (auto& t : readers) t.join();
  EXPECT_EQ(a->calls_, 11);
  EXPECT_EQ(b->calls_, 11);
  EXPECT_GT(bytes.load(), 0u);
  h.sched.stop();
}

// A reload that keeps a collector (its configuration did not change) leaves
// it as it was: the same instance, no extra collect, its snapshot and
// counters in place; the changed one beside it is rebuilt and run at once.
TEST(SchedulerTest, AKeptCollectorIsUntouchedByARestart) {
  Harness h;
  FakeCollector *a, *b;
  std::vector<CollectorJob> jobs;
  jobs.push_back(h.Job("a", &a, 1h, 1s));
  jobs.push_back(h.Job("b", &b, 1h, 1s));
  a->partial_error_ = true;
  h.sched.start(std::move(jobs));
  h.Settle();
  ASSERT_TRUE(h.sched.first_round_done());
  auto snapshot = h.store.current()->by_collector.at("a");
  EXPECT_EQ(h.sched.entries_built(), 2u);

  FakeCollector* b2;
  std::vector<CollectorJob> jobs2;
  CollectorJob keep;
  keep.name = "a";
  keep.keep = true;
  jobs2.push_back(std::move(keep));
  jobs2.push_back(h.Job("b", &b2, 1h, 1s));
  bool first = false;
  h.sched.on_first_round([&] { first = true; });
  h.sched.start(std::move(jobs2));
  h.Advance(100ms);
  EXPECT_TRUE(first);
  EXPECT_EQ(b2->calls_, 1);
  EXPECT_EQ(a->calls_, 1);  // `a` is still the first instance, not run again
  EXPECT_EQ(h.store.current()->by_collector.at("a"), snapshot);
  EXPECT_EQ(h.Status("a").runs, 1u);
  EXPECT_EQ(h.Status("a").errors["parse_error"], 1u);
  EXPECT_TRUE(h.Status("a").up);
  EXPECT_EQ(h.sched.entries_built(), 3u);
  EXPECT_EQ(h.sched.statuses().size(), 2u);
  h.sched.stop();
  EXPECT_TRUE(h.sched.shutdown_workers(3s));
}

// Keep names a running collector; one that is not running is not invented.
TEST(SchedulerTest, KeepingACollectorThatIsNotRunningStartsNothing) {
  Harness h;
  std::vector<CollectorJob> jobs;
  CollectorJob keep;
  keep.name = "ghost";
  keep.keep = true;
  jobs.push_back(std::move(keep));
  h.sched.start(std::move(jobs));
  EXPECT_TRUE(h.sched.statuses().empty());
  EXPECT_TRUE(h.sched.first_round_done());
}

// A partial failure is one log line naming the subject when it starts and
// one when it ends, whatever the number of collections in between.
TEST(SchedulerTest, APartialFailureIsLoggedWhenItStartsAndEndsNamingTheSubject) {
  testing::LogCapture log;
  Harness h;
  FakeCollector* a;
  std::vector<CollectorJob> jobs;
  jobs.push_back(h.Job("storage", &a, 20ms, 20ms));
  h.sched.start(std::move(jobs));
  h.Advance(20ms);
  ASSERT_EQ(a->calls_, 2);
  a->set_failing({"sda"});
  h.Advance(100ms);
  ASSERT_EQ(a->calls_, 7);
  a->set_failing({});
  h.Advance(60ms);
  ASSERT_EQ(a->calls_, 10);
  h.sched.stop();
  ASSERT_TRUE(h.sched.shutdown_workers(3s));
  std::vector<std::string> about_sda;
  for (const auto& line : log.lines())
    if (line.find("sda") != std::string::npos) about_sda.push_back(line);
  ASSERT_EQ(about_sda.size(), 2u) << log.text();
  EXPECT_EQ(about_sda[0], "warning storage: read_error: sda: EIO reading sda/stat");
  EXPECT_EQ(about_sda[1].rfind("info storage: read_error: sda: recovered after ", 0), 0u)
      << about_sda[1];
  EXPECT_EQ(h.Status("storage").errors["read_error"], 5u);
}

// On time, a collection is the worker's business alone: its timer wakes
// it, and the io thread (which serves scrapes) runs no handler for it.
TEST(SchedulerTest, CollectionsOnTimeRunNoHandlerOnTheIoThread) {
  Harness h;
  FakeCollector* a;
  std::vector<CollectorJob> jobs;
  jobs.push_back(h.Job("a", &a, 20ms, 20ms));
  bool first = false;
  h.sched.on_first_round([&] { first = true; });
  h.sched.start(std::move(jobs));
  h.Settle();
  ASSERT_TRUE(first);
  const std::size_t handlers = h.driver.handlers();
  h.Advance(400ms);
  EXPECT_EQ(a->calls_, 21);
  EXPECT_EQ(h.driver.handlers(), handlers);
  EXPECT_EQ(h.Status("a").errors["timeout"], 0u);
  h.sched.stop();
  EXPECT_TRUE(h.sched.shutdown_workers(3s));
}

// A job of the pool that is not a collection (the node verdict's
// evaluation runs there) holds the thread that waits for due times: the
// collection due behind it is found not started by its own timer (armed
// for its due time when it was queued), and another thread takes over.
TEST(SchedulerTest, AJobBesideTheCollectionsThatHoldsThePoolIsFoundOutByTheirTimers) {
  Harness h;
  FakeCollector* a;
  std::vector<CollectorJob> jobs;
  jobs.push_back(h.Job("a", &a, 50ms, 50ms));
  h.sched.start(std::move(jobs));
  h.Advance(50ms);
  ASSERT_EQ(a->calls_, 2);
  auto held = std::make_shared<std::atomic<bool>>(false);
  h.sched.pool().post_at(h.clock.now(), [&clock = h.clock, held] {
    held->store(true);
    clock.sleep_for(3s);
    held->store(false);
  });
  h.Settle();
  ASSERT_TRUE(held->load());
  // The collection due at 100 ms is found at its check, 150 ms, and runs;
  // then every 50 ms on the other thread.
  h.Advance(99ms);
  EXPECT_EQ(a->calls_, 2);
  h.Advance(1ms);
  EXPECT_EQ(a->calls_, 3);
  h.Advance(500ms);
  EXPECT_EQ(a->calls_, 13);
  EXPECT_TRUE(held->load());
  EXPECT_EQ(h.Status("a").errors["timeout"], 0u);
  h.sched.stop();
  h.Advance(3s);
  EXPECT_FALSE(held->load());
  EXPECT_TRUE(h.sched.shutdown_workers(3s));
}

// Due times lie on one grid: two collectors of the shared pool whose
// intervals divide one another come due together and are run by the one
// thread that waits for the pool's due times, one wake-up for both.
TEST(SchedulerTest, CollectorsOfOnePoolDueTogetherShareTheTimerThread) {
  Harness h;
  FakeCollector *a, *b;
  std::vector<CollectorJob> jobs;
  jobs.push_back(h.Job("a", &a, 40ms, 40ms));
  jobs.push_back(h.Job("b", &b, 80ms, 80ms));
  h.sched.start(std::move(jobs));
  h.Advance(400ms);
  EXPECT_EQ(a->calls_, 11);
  EXPECT_EQ(b->calls_, 6);
  h.sched.stop();
  ASSERT_TRUE(h.sched.shutdown_workers(3s));
  std::set<std::thread::id> threads;
  for (auto id : a->threads()) threads.insert(id);
  for (auto id : b->threads()) threads.insert(id);
  EXPECT_EQ(threads.size(), 1u);
}

// Collectors due together and finishing on time set the one deadline timer
// once between them: each one's check moves on to its next collection as
// it finishes, and the timer moves only when the earliest check of all
// does, after the last of them. The io thread runs no handler meanwhile.
TEST(SchedulerTest, CollectorsDueTogetherSetTheDeadlineTimerOnceBetweenThem) {
  Harness h;
  FakeCollector *a, *b, *c, *d;
  std::vector<CollectorJob> jobs;
  jobs.push_back(h.Job("a", &a, 40ms, 40ms));
  jobs.push_back(h.Job("b", &b, 40ms, 40ms));
  jobs.push_back(h.Job("c", &c, 40ms, 40ms));
  jobs.push_back(h.Job("d", &d, 40ms, 40ms));
  h.sched.start(std::move(jobs));
  h.Settle();
  ASSERT_TRUE(h.sched.first_round_done());
  const std::uint64_t sets_before = h.sched.deadline_timer_sets();
  const std::size_t handlers = h.driver.handlers();
  h.Advance(400ms);
  EXPECT_EQ(a->calls_, 11);
  EXPECT_EQ(d->calls_, 11);
  EXPECT_EQ(h.sched.deadline_timer_sets() - sets_before, 10u);
  EXPECT_EQ(h.driver.handlers(), handlers);
  h.sched.stop();
  EXPECT_TRUE(h.sched.shutdown_workers(3s));
}

// A collect that overruns its interval: the due times that pass meanwhile
// are counted as skipped while they pass, not only once it returns.
TEST(SchedulerTest, SkippedIntervalsAreCountedWhileTheCollectRuns) {
  Harness h;
  FakeCollector* c;
  std::vector<CollectorJob> jobs;
  jobs.push_back(h.Job("c", &c, 100ms, 100ms));
  c->sleep_ = 800ms;
  h.sched.start(std::move(jobs));
  h.Advance(450ms);
  auto st = h.Status("c");
  EXPECT_TRUE(st.in_flight);
  EXPECT_EQ(st.errors["skipped_overlap"], 4u);  // 100..400 ms
  // It returns at 800 ms, having skipped 100..800 ms; the next is at 900.
  c->sleep_ = 0ms;
  h.Advance(350ms);
  EXPECT_EQ(c->calls_, 1);
  EXPECT_EQ(h.Status("c").errors["skipped_overlap"], 8u);
  h.Advance(100ms);
  EXPECT_EQ(c->calls_, 2);
  EXPECT_EQ(h.Status("c").errors["skipped_overlap"], 8u);
}

// Emits one series whose value the test sets; fails when told to.
class SteadyCollector : public FakeCollector {
 public:
  using FakeCollector::FakeCollector;
  void collect(const CollectContext&, MetricSink& out) override {
    ++collections;
    if (failing) throw CollectError("read_error", "scripted failure");
    out.add("nodewatch_fake_calls_total", {"steady"}, value.load());
  }
  std::atomic<int> value{1};
  std::atomic<bool> failing{false};
  std::atomic<int> collections{0};
};

TEST(SchedulerTest, ACollectionThatFindsWhatTheLastFoundKeepsTheSnapshotAndTellsNoOne) {
  Harness h;
  auto owned = std::make_unique<SteadyCollector>("steady");
  SteadyCollector* c = owned.get();
  std::atomic<int> results{0};
  h.sched.on_result([&] { ++results; });
  std::vector<CollectorJob> jobs;
  CollectorJob j;
  j.name = "steady";
  j.collector = std::move(owned);
  j.interval = 20ms;
  j.timeout = 1s;
  jobs.push_back(std::move(j));
  h.sched.start(std::move(jobs));
  h.Settle();
  ASSERT_EQ(c->collections, 1);
  ASSERT_EQ(results, 2);  // start() and the first result
  const auto first = h.store.current()->by_collector.at("steady");
  h.Advance(100ms);
  // Five more collections found the same: the same snapshot object (its
  // deflate, once made, is kept), and no result for the verdict.
  EXPECT_EQ(c->collections, 6);
  EXPECT_EQ(h.store.current()->by_collector.at("steady"), first);
  EXPECT_EQ(results, 2);
  EXPECT_EQ(h.Status("steady").runs, 6u);
  // A value that moves is published and told.
  c->value = 2;
  h.Advance(20ms);
  EXPECT_EQ(results, 3);
  auto second = h.store.current()->by_collector.at("steady");
  EXPECT_NE(second, first);
  EXPECT_NE(second->text.find("} 2\n"), std::string::npos);
  // A failure is told, and so is the recovery, even with the same text as
  // before the failure.
  c->failing = true;
  h.Advance(20ms);
  EXPECT_FALSE(h.Status("steady").up);
  EXPECT_EQ(h.store.current()->by_collector.count("steady"), 0u);
  EXPECT_EQ(results, 4);
  c->failing = false;
  h.Advance(20ms);
  EXPECT_TRUE(h.Status("steady").up);
  EXPECT_EQ(results, 5);
  ASSERT_EQ(h.store.current()->by_collector.count("steady"), 1u);
  EXPECT_EQ(h.store.current()->by_collector.at("steady")->text, second->text);
}

// Hundreds of failing subjects at once: the first ones by name, the rest as
// one line, and no line per cycle.
TEST(SchedulerTest, ManyFailingSubjectsAreNamedUpToALimitThenSummed) {
  testing::LogCapture log;
  Harness h;
  FakeCollector* a;
  std::vector<CollectorJob> jobs;
  jobs.push_back(h.Job("nic", &a, 20ms, 20ms));
  std::vector<std::string> subjects;
  for (int i = 0; i < 200; ++i) subjects.push_back("veth" + std::to_string(1000 + i));
  a->set_failing(subjects);
  h.sched.start(std::move(jobs));
  h.Advance(60ms);
  ASSERT_EQ(a->calls_, 4);
  h.sched.stop();
  ASSERT_TRUE(h.sched.shutdown_workers(3s));
  std::size_t named = 0, summed = 0;
  for (const auto& line : log.lines()) {
    if (line.find("read_error: veth") != std::string::npos) ++named;
    if (line.find("more failing subjects") != std::string::npos) ++summed;
  }
  EXPECT_EQ(named, 32u);
  EXPECT_EQ(summed, 1u);
}

// The daemon's path on the kernel's clock: due times are futex timeouts,
// the deadline timer a timerfd that the io thread watches. A collect stuck
// in the kernel (a real sleep that ignores cancellation) is reported at
// its deadline, while it is still stuck, by the io thread.
TEST(SchedulerTest, OnTheKernelsClockAStuckCollectIsReportedAtItsDeadline) {
  asio::io_context io;
  SnapshotStore store;
  Scheduler sched(io, store);
  auto owned = std::make_unique<FakeCollector>("stuck");
  FakeCollector* stuck = owned.get();
  stuck->sleep_ = 600ms;
  stuck->ignore_cancel_ = true;
  CollectorJob j;
  j.name = "stuck";
  j.collector = std::move(owned);
  j.interval = 1h;
  j.timeout = 200ms;
  std::vector<CollectorJob> jobs;
  jobs.push_back(std::move(j));
  const auto t0 = std::chrono::steady_clock::now();
  sched.start(std::move(jobs));
  const auto timeouts = [&] { return sched.statuses().at(0).errors["timeout"]; };
  const auto until = t0 + 5s;
  while (timeouts() == 0 && std::chrono::steady_clock::now() < until) io.run_for(5ms);
  ASSERT_EQ(timeouts(), 1u);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 200ms);
  EXPECT_EQ(stuck->active_, 1);  // still in its collect
  EXPECT_FALSE(sched.statuses().at(0).up);
  EXPECT_EQ(store.current()->by_collector.count("stuck"), 0u);
  sched.stop();
  EXPECT_TRUE(sched.shutdown_workers(3s));
}
}  // namespace
}  // namespace nodewatch

namespace nodewatch {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// A pool on a clock that the test moves.
struct PoolHarness {
  explicit PoolHarness(std::size_t threads) : pool(threads, "nw-test", 0, clock) {}
  testing::ManualClock clock;
  WorkerPool pool;
  testing::ClockDriver driver{clock, pool};
};

TEST(WorkerPoolTest, TimedJobsRunAtTheirDueTimesInOrderOnOneThread) {
  PoolHarness h(2);
  std::mutex mu;
  std::vector<std::pair<int, Clock::time_point>> ran;
  std::set<std::thread::id> threads;
  const auto t0 = h.clock.now() + 30ms;
  for (int i = 4; i >= 0; --i) {
    h.pool.post_at(t0 + i * 20ms, [&, i] {
      std::lock_guard lock(mu);
      ran.emplace_back(i, h.clock.now());
      threads.insert(std::this_thread::get_id());
    });
  }
  h.driver.advance(29ms);
  EXPECT_TRUE(ran.empty());
  h.driver.advance(1ms);
  EXPECT_EQ(ran.size(), 1u);
  h.driver.advance(80ms);
  std::lock_guard lock(mu);
  ASSERT_EQ(ran.size(), 5u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(ran[i].first, i);
    EXPECT_EQ(ran[i].second, t0 + i * 20ms);
  }
  EXPECT_EQ(threads.size(), 1u);  // the thread that waits runs them
}

// The timer thread's wait on the kernel's clock: the due time is the
// futex's timeout.
TEST(WorkerPoolTest, TimedJobsWaitForTheirDueTimesOnTheKernelsClock) {
  WorkerPool pool(2, "nw-test");
  std::mutex mu;
  std::vector<std::pair<int, Clock::time_point>> ran;
  const auto t0 = std::chrono::steady_clock::now() + 30ms;
  for (int i = 2; i >= 0; --i) {
    pool.post_at(t0 + i * 20ms, [&, i] {
      std::lock_guard lock(mu);
      ran.emplace_back(i, std::chrono::steady_clock::now());
    });
  }
  ASSERT_TRUE(testing::Eventually(
      [&] {
        std::lock_guard lock(mu);
        return ran.size() == 3;
      },
      5s));
  std::lock_guard lock(mu);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(ran[i].first, i);
    EXPECT_GE(ran[i].second, t0 + i * 20ms);
  }
}

TEST(WorkerPoolTest, AJobToRunNowIsTakenWhileTheTimerThreadWaits) {
  PoolHarness h(2);
  std::atomic<bool> late{false}, now{false};
  h.pool.post_at(h.clock.now() + 300ms, [&] { late = true; });
  h.driver.advance(20ms);  // the timer thread waits for it
  h.pool.post([&] { now = true; });
  h.driver.settle();  // no time passes
  EXPECT_TRUE(now.load());
  EXPECT_FALSE(late.load());
  h.driver.advance(279ms);
  EXPECT_FALSE(late.load());
  h.driver.advance(1ms);
  EXPECT_TRUE(late.load());
}

// The timer thread waits for the earliest due time; a job due earlier,
// posted meanwhile, ends that wait (wake_timer()), and shutdown() ends it
// too rather than waiting for the due time.
TEST(WorkerPoolTest, AnEarlierTimedJobAndShutdownEndTheTimerThreadsWait) {
  PoolHarness h(2);
  std::atomic<bool> far{false}, near{false};
  h.pool.post_at(h.clock.now() + 10s, [&] { far = true; });
  h.driver.advance(30ms);  // the timer thread waits for it
  const auto t0 = h.clock.now();
  h.pool.post_at(t0 + 30ms, [&] { near = true; });
  h.driver.advance(29ms);
  EXPECT_FALSE(near.load());
  h.driver.advance(1ms);
  EXPECT_TRUE(near.load());
  h.driver.advance(30ms);  // waiting for the far one again
  const auto t1 = std::chrono::steady_clock::now();
  EXPECT_TRUE(h.pool.shutdown(5s));
  EXPECT_LT(std::chrono::steady_clock::now() - t1, 1s);
  EXPECT_FALSE(far.load());
}

TEST(WorkerPoolTest, KickHandsTheWaitingToAnIdleThread) {
  PoolHarness h(2);
  std::atomic<bool> stuck_done{false}, other_ran{false}, other_before_stuck{false};
  const auto t0 = h.clock.now();
  // The timer thread takes the first job and is held there for 1 s.
  h.pool.post_at(t0, [&] {
    h.clock.sleep_for(1s);
    stuck_done = true;
  });
  h.pool.post_at(t0 + 50ms, [&] {
    other_before_stuck = !stuck_done.load();
    other_ran = true;
  });
  h.driver.advance(100ms);
  EXPECT_FALSE(other_ran.load());  // due, but its thread is held
  h.pool.kick();
  h.driver.settle();  // no time passes
  EXPECT_TRUE(other_ran.load());
  EXPECT_TRUE(other_before_stuck.load());
  EXPECT_FALSE(stuck_done.load());
  h.driver.advance(900ms);
  EXPECT_TRUE(stuck_done.load());
}

TEST(WorkerPoolTest, ACancelledJobDoesNotRun) {
  PoolHarness h(1);
  std::atomic<int> ran{0};
  auto t = h.pool.post_at(h.clock.now() + 50ms, [&] { ran += 1; });
  h.pool.post_at(h.clock.now() + 100ms, [&] { ran += 10; });
  EXPECT_TRUE(h.pool.cancel(t));
  EXPECT_FALSE(h.pool.cancel(t));
  h.driver.advance(99ms);
  EXPECT_EQ(ran.load(), 0);
  h.driver.advance(1s);
  EXPECT_EQ(ran.load(), 10);
}

TEST(GzipDemandTest, ExpectsTheNextScrapeOneGapAfterTheLast) {
  GzipDemand d;
  const auto t0 = GzipDemand::Clock::time_point{} + std::chrono::hours(1);
  EXPECT_FALSE(d.expected(t0, seconds(2))) << "no gzip scrape ever came";
  d.scraped(t0);
  EXPECT_TRUE(d.expected(t0 + seconds(1), seconds(2))) << "one scrape: no period known yet";
  d.scraped(t0 + seconds(15));
  d.scraped(t0 + seconds(30));
  const auto last = t0 + seconds(30);
  // A collector at 1 s with a 1.5 s horizon: only the snapshots published
  // in the last moments before the next scrape (last + 15 s) are deflated.
  int eager = 0;
  for (int s = 1; s <= 15; ++s)
    eager += d.expected(last + seconds(s) - milliseconds(100), milliseconds(1750));
  EXPECT_GE(eager, 1);
  EXPECT_LE(eager, 2);
  EXPECT_FALSE(d.expected(last + seconds(5), milliseconds(1750)));
  EXPECT_TRUE(d.expected(last + seconds(14), milliseconds(1750)));
  // A collector at 15 s: every snapshot is taken by a scrape.
  EXPECT_TRUE(d.expected(last + seconds(1), milliseconds(22750)));
  // A late scrape is still expected for a while, then no longer.
  EXPECT_TRUE(d.expected(last + seconds(20), milliseconds(1750)));
  EXPECT_FALSE(d.expected(last + seconds(50), milliseconds(1750)));
}

TEST(GzipDemandTest, ScrapesTooCloseTogetherForAPeriodMeanEverySnapshot) {
  GzipDemand d;
  const auto t0 = GzipDemand::Clock::time_point{} + std::chrono::hours(1);
  for (int i = 0; i < 10; ++i) d.scraped(t0 + milliseconds(300 * i));
  EXPECT_TRUE(d.expected(t0 + seconds(4), milliseconds(100)));
  EXPECT_FALSE(d.expected(t0 + std::chrono::minutes(11), milliseconds(100)));
}

TEST(GzipDemandTest, TwoScrapersAtOneIntervalUseTheShorterGap) {
  GzipDemand d;
  const auto t0 = GzipDemand::Clock::time_point{} + std::chrono::hours(1);
  // Two Prometheus replicas scraping every 15 s, 3 s apart.
  for (int i = 0; i < 4; ++i) {
    d.scraped(t0 + seconds(15 * i));
    d.scraped(t0 + seconds(15 * i + 3));
  }
  const auto b = t0 + seconds(48);
  // After replica B's scrape the next is A's at +12 s; it is expected from
  // the shorter gap (3 s) on, so the snapshot A takes is deflated already.
  EXPECT_TRUE(d.expected(b + seconds(11), milliseconds(1750)));
  EXPECT_TRUE(d.expected(b + seconds(2), milliseconds(1750)));
}

TEST(SnapshotStoreTest, KeepsGzipDemandPerCollector) {
  SnapshotStore store;
  const auto now = std::chrono::steady_clock::now();
  store.gzip_scraped({"storage"}, now);
  EXPECT_TRUE(store.gzip_expected("storage", now, seconds(1)));
  EXPECT_FALSE(store.gzip_expected("pcie", now, seconds(1)));
}

}  // namespace
}  // namespace nodewatch
