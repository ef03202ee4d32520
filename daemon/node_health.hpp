#pragma once
// The node verdict inside the daemon: evaluated as a job of a worker pool
// after the collectors' snapshots change (coalesced: the results of one
// second cost one evaluation), never on the io thread and never at scrape
// time. In the daemon the pool is the scheduler's: the evaluation after a
// round of results runs in the wake-up that collected them, after the
// collections due with it, and costs no wake-up of its own. A scrape and
// /-/node-health read the latest result, an immutable value swapped under
// a short lock.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "exposition.hpp"
#include "nodewatch/clock.hpp"
#include "snapshot_store.hpp"
#include "verdict.hpp"
#include "worker_pool.hpp"

namespace nodewatch {

struct CollectorStatus;

struct NodeReport {
  std::shared_ptr<const RenderedText> metrics;  // the nodewatch_node_* families
  Verdict verdict;
  // The verdict's text forms, made when asked for (/-/node-health, --check),
  // not at every evaluation.
  std::string json() const { return verdict.json(); }
  std::string table() const { return verdict.table(); }
  std::string line() const { return verdict.line(); }
};

// Parses snapshots into the samples the verdict reads, reusing the parse of
// every snapshot that did not change since the last call.
class SnapshotSamples {
 public:
  Samples samples_of(const SnapshotSet& set);

 private:
  struct Parsed {
    std::shared_ptr<const RenderedText> text;  // held: its address is the cache key
    Samples samples;
  };
  std::map<std::string, Parsed, std::less<>> cache_;
};

// One evaluation at `now` and its rendering: what the worker publishes.
// `series`, when given, keeps the node families' rendered heads from one
// evaluation to the next.
NodeReport make_report(VerdictEngine& engine, const Samples& samples,
                       const std::vector<CollectorState>& collectors, Clock::time_point now,
                       SeriesCache* series = nullptr);

// What an evaluation reads: the snapshots and the collectors' states.
struct NodeInput {
  std::shared_ptr<const SnapshotSet> set;
  std::vector<CollectorState> collectors;
};

class NodeHealth {
 public:
  using Source = std::function<NodeInput()>;
  // The shortest time between the starts of two evaluations: with every
  // collector at a 1 s interval the verdict costs one evaluation a second
  // (~0.3 ms on the e2e node, bench/verdict_bench.cpp), not one per
  // result. A little under the second, so that a round's results, which
  // come a second after the last round's give or take their jitter, are
  // evaluated in the wake-up that collected them, not in one of their own.
  static constexpr std::chrono::milliseconds kMinGap{900};
  // The longest: without a result for this long, the last snapshots are
  // evaluated again (a window ends; the timestamp stays fresh).
  static constexpr std::chrono::milliseconds kRefresh{30000};

  // `source` gives the latest input when an evaluation starts (changed()
  // says when there is a new one); without one, update() hands it over.
  // `pool` runs the evaluations and must outlive this object (or be shut
  // down first); without one, a pool of one thread of its own does, on
  // monotonic_clock(). The pool's clock is the evaluations' time: their
  // gaps, the refresh and the verdict's XID windows.
  // `versions`: what the daemon read of the node's versions (versions.hpp).
  explicit NodeHealth(Expectations expect, Source source = nullptr,
                      std::chrono::milliseconds refresh = kRefresh, WorkerPool* pool = nullptr,
                      NodeVersions versions = {});
  ~NodeHealth();
  NodeHealth(const NodeHealth&) = delete;
  NodeHealth& operator=(const NodeHealth&) = delete;

  // New expectations (a reload): the next evaluation uses them. Unchanged
  // ones keep the engine and what it remembers.
  void set_expectations(const Expectations& expect);
  // What the daemon read of the node's versions when it started.
  const NodeVersions& versions() const { return versions_; }
  // The source has a new input (called after each result, from any
  // thread): the next evaluation reads it. Cheap: it posts an evaluation
  // only when none is pending, at the earliest kMinGap after the last one.
  void changed();
  // Asks for an evaluation of `set`, in place of the source's input.
  void update(std::shared_ptr<const SnapshotSet> set, std::vector<CollectorState> collectors);
  // Evaluates `set` now, on the calling thread, and publishes the result
  // (--once: the output must carry the verdict of its one round; the
  // daemon: /-/ready waits for the first round's verdict).
  void evaluate_now(const SnapshotSet& set, const std::vector<CollectorState>& collectors);
  // The latest report; null before the first evaluation.
  std::shared_ptr<const NodeReport> current() const;
  // Evaluations done (tests).
  std::uint64_t evaluations() const;

 private:
  // Shared with the posted jobs, which may run while this object goes:
  // `eval` is held by every evaluation; once `alive` is false (under
  // `eval`) a job touches nothing else.
  struct Life {
    std::mutex eval;
    bool alive = true;
  };
  // The pool's job.
  void run_job();
  // Under mu_: an evaluation due at `due` (or earlier, if one is posted).
  void schedule(Clock::time_point due);
  // Under life_->eval.
  void evaluate(const SnapshotSet& set, const std::vector<CollectorState>& collectors,
                std::uint64_t input);

  const Source source_;
  const std::chrono::milliseconds refresh_;
  std::shared_ptr<Life> life_ = std::make_shared<Life>();
  std::unique_ptr<WorkerPool> own_pool_;
  WorkerPool* pool_;
  mutable std::mutex mu_;
  bool stop_ = false;
  bool changed_ = false;  // under mu_: an input newer than the last evaluation
  // Under mu_: the evaluation posted and not started, if any.
  std::optional<WorkerPool::Timed> posted_;
  std::optional<Clock::time_point> last_start_;  // under mu_
  // Each input gets the next number; a result is published only when it
  // is as new as the one served (an evaluation in place must not be
  // replaced by the worker's of an older input).
  std::uint64_t next_input_ = 0;                    // under mu_
  std::uint64_t pending_input_ = 0;                 // under mu_
  std::uint64_t current_input_ = 0;                 // under mu_
  std::shared_ptr<const SnapshotSet> pending_set_;  // under mu_
  std::vector<CollectorState> pending_collectors_;  // under mu_
  std::optional<Expectations> pending_expect_;      // under mu_
  std::shared_ptr<const NodeReport> current_;       // under mu_
  std::uint64_t evaluations_ = 0;                   // under mu_
  // Under life_->eval: what the jobs evaluated last (a refresh evaluates
  // it again), the engine and the caches.
  std::shared_ptr<const SnapshotSet> last_set_;
  std::vector<CollectorState> last_collectors_;
  std::uint64_t last_input_ = 0;
  NodeVersions versions_;
  VerdictEngine engine_;
  SnapshotSamples parsed_;
  SeriesCache series_;
};

// CollectorState of every collector the scheduler runs.
std::vector<CollectorState> collector_states(const std::vector<CollectorStatus>& statuses);

}  // namespace nodewatch
