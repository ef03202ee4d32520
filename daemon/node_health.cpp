#include "node_health.hpp"

#include <algorithm>
#include <chrono>
#include <optional>

#include "scheduler.hpp"

namespace nodewatch {

Samples SnapshotSamples::samples_of(const SnapshotSet& set) {
  std::erase_if(cache_, [&](const auto& kv) { return !set.by_collector.count(kv.first); });
  Samples all(&VerdictEngine::families());
  for (const auto& [name, text] : set.by_collector) {
    auto it = cache_.find(name);
    if (it == cache_.end() || it->second.text != text) {
      Parsed p{text, Samples(&VerdictEngine::families())};
      if (text) p.samples.add(text->text);
      it = cache_.insert_or_assign(name, std::move(p)).first;
    }
    all.merge(it->second.samples);
  }
  return all;
}

NodeReport make_report(VerdictEngine& engine, const Samples& samples,
                       const std::vector<CollectorState>& collectors, Clock::time_point now,
                       SeriesCache* series) {
  NodeReport r;
  double unix_now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  r.verdict = engine.evaluate(samples, collectors, now, unix_now);
  SeriesCache once;  // for a caller that keeps none
  MetricSink sink(VerdictEngine::metric_table(), series != nullptr ? *series : once);
  engine.render(r.verdict, sink);
  r.metrics = make_rendered(sink.render());
  return r;
}

std::vector<CollectorState> collector_states(const std::vector<CollectorStatus>& statuses) {
  std::vector<CollectorState> out;
  out.reserve(statuses.size());
  for (const CollectorStatus& s : statuses)
    out.push_back(CollectorState{s.name, s.ran, s.up, s.last_error});
  return out;
}

NodeHealth::NodeHealth(Expectations expect, Source source, std::chrono::milliseconds refresh,
                       WorkerPool* pool, NodeVersions versions)
    : source_(std::move(source)),
      refresh_(refresh),
      versions_(std::move(versions)),
      engine_(std::move(expect), versions_) {
  if (pool == nullptr) own_pool_ = std::make_unique<WorkerPool>(1, "nw-verdict");
  pool_ = pool != nullptr ? pool : own_pool_.get();
}

NodeHealth::~NodeHealth() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    if (posted_) pool_->cancel(*posted_);
  }
  {
    // Waits for an evaluation in progress; a job that starts after this
    // finds `alive` false and returns.
    std::lock_guard eval(life_->eval);
    life_->alive = false;
  }
  if (own_pool_) own_pool_->shutdown(std::chrono::milliseconds(0));
}

void NodeHealth::set_expectations(const Expectations& expect) {
  std::lock_guard lock(mu_);
  pending_expect_ = expect;
}

void NodeHealth::schedule(Clock::time_point due) {
  if (stop_) return;
  if (posted_) {
    if (posted_->due <= due) return;
    // A later one (a refresh): replaced. When it has started already, it
    // reads changed_ once it holds mu_ and posts what follows itself.
    if (!pool_->cancel(*posted_)) return;
  }
  posted_ = pool_->post_at(due, [this, life = life_] {
    std::lock_guard eval(life->eval);
    if (life->alive) run_job();
  });
}

void NodeHealth::changed() {
  std::lock_guard lock(mu_);
  changed_ = true;
  const Clock::time_point now = pool_->clock().now();
  schedule(last_start_ ? std::max(now, *last_start_ + kMinGap) : now);
}

void NodeHealth::update(std::shared_ptr<const SnapshotSet> set,
                        std::vector<CollectorState> collectors) {
  std::lock_guard lock(mu_);
  pending_set_ = std::move(set);
  pending_collectors_ = std::move(collectors);
  pending_input_ = ++next_input_;
  changed_ = true;
  const Clock::time_point now = pool_->clock().now();
  schedule(last_start_ ? std::max(now, *last_start_ + kMinGap) : now);
}

void NodeHealth::evaluate_now(const SnapshotSet& set,
                              const std::vector<CollectorState>& collectors) {
  std::lock_guard eval(life_->eval);
  std::uint64_t input = 0;
  {
    std::lock_guard lock(mu_);
    input = ++next_input_;
  }
  evaluate(set, collectors, input);
}

std::shared_ptr<const NodeReport> NodeHealth::current() const {
  std::lock_guard lock(mu_);
  return current_;
}

std::uint64_t NodeHealth::evaluations() const {
  std::lock_guard lock(mu_);
  return evaluations_;
}

void NodeHealth::run_job() {
  bool take = false;
  {
    std::lock_guard lock(mu_);
    posted_.reset();
    if (stop_) return;
    last_start_ = pool_->clock().now();
    const bool fresh = changed_;
    changed_ = false;
    if (fresh && pending_set_ != nullptr) {
      last_set_ = std::move(pending_set_);
      pending_set_.reset();
      last_collectors_ = std::move(pending_collectors_);
      last_input_ = pending_input_;
    } else if (source_) {
      // The latest input, after a change or for a refresh.
      take = true;
      last_input_ = ++next_input_;
    }
    // Else a refresh of what was last evaluated: windows expire, and the
    // timestamp says the verdict is alive even when every collector runs
    // hourly.
  }
  if (take) {
    NodeInput in = source_();
    last_set_ = std::move(in.set);
    last_collectors_ = std::move(in.collectors);
  }
  if (last_set_ != nullptr) evaluate(*last_set_, last_collectors_, last_input_);
  std::lock_guard lock(mu_);
  // A result that came during the evaluation is evaluated kMinGap after
  // its start; else the same input again after `refresh_`.
  const Clock::time_point now = pool_->clock().now();
  if (changed_)
    schedule(std::max(now, *last_start_ + kMinGap));
  else if (last_set_ != nullptr)
    schedule(now + refresh_);
}

void NodeHealth::evaluate(const SnapshotSet& set, const std::vector<CollectorState>& collectors,
                          std::uint64_t input) {
  {
    std::lock_guard lock(mu_);
    if (pending_expect_) {
      if (!(*pending_expect_ == engine_.expectations()))
        engine_ = VerdictEngine(*pending_expect_, versions_);
      pending_expect_.reset();
    }
  }
  Samples samples = parsed_.samples_of(set);
  auto report = std::make_shared<const NodeReport>(
      make_report(engine_, samples, collectors, pool_->clock().now(), &series_));
  std::lock_guard lock(mu_);
  ++evaluations_;
  // A refresh evaluates its input again: as new counts as newer.
  if (input < current_input_) return;
  current_input_ = input;
  current_ = std::move(report);
}

}  // namespace nodewatch
