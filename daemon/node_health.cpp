#include "node_health.hpp"

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
                       const std::vector<CollectorState>& collectors, SeriesCache* series) {
  NodeReport r;
  double unix_now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  r.verdict = engine.evaluate(samples, collectors, std::chrono::steady_clock::now(), unix_now);
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

NodeHealth::NodeHealth(Expectations expect, Source source, std::chrono::milliseconds refresh)
    : source_(std::move(source)), refresh_(refresh), engine_(std::move(expect)) {
  thread_ = std::thread([this] { run(); });
}

NodeHealth::~NodeHealth() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void NodeHealth::set_expectations(const Expectations& expect) {
  std::lock_guard lock(mu_);
  pending_expect_ = expect;
}

void NodeHealth::changed() {
  std::lock_guard lock(mu_);
  changed_ = true;
  if (waiting_) cv_.notify_one();
}

void NodeHealth::update(std::shared_ptr<const SnapshotSet> set,
                        std::vector<CollectorState> collectors) {
  std::lock_guard lock(mu_);
  pending_set_ = std::move(set);
  pending_collectors_ = std::move(collectors);
  pending_input_ = ++next_input_;
  changed_ = true;
  if (waiting_) cv_.notify_one();
}

void NodeHealth::evaluate_now(const SnapshotSet& set,
                              const std::vector<CollectorState>& collectors) {
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

void NodeHealth::run() {
  std::optional<std::chrono::steady_clock::time_point> last;
  std::shared_ptr<const SnapshotSet> set;
  std::vector<CollectorState> collectors;
  std::uint64_t input = 0;
  for (;;) {
    bool take = false;
    {
      std::unique_lock lock(mu_);
      // At most one evaluation per kMinGap: the thread rests that long
      // after an evaluation, and changed() does not wake it meanwhile, so
      // the results of the gap cost one wake-up, and the latest counts.
      if (last) cv_.wait_until(lock, *last + kMinGap, [this] { return stop_; });
      if (stop_) return;
      if (!changed_) {
        // A new result, or kRefresh without one: the verdict is evaluated
        // again (windows expire, and the timestamp says the verdict is
        // alive even when every collector runs hourly).
        waiting_ = true;
        cv_.wait_for(lock, refresh_, [this] { return stop_ || changed_; });
        waiting_ = false;
        if (stop_) return;
      }
      const bool fresh = changed_;
      changed_ = false;
      if (fresh && pending_set_ != nullptr) {
        set = std::move(pending_set_);
        pending_set_.reset();
        collectors = std::move(pending_collectors_);
        input = pending_input_;
      } else if (source_) {
        // The latest input, after a change or for a refresh.
        take = true;
        input = ++next_input_;
      }
      // Else a refresh of what was last evaluated.
    }
    if (take) {
      NodeInput in = source_();
      set = std::move(in.set);
      collectors = std::move(in.collectors);
    }
    if (set == nullptr) continue;
    evaluate(*set, collectors, input);
    last = std::chrono::steady_clock::now();
  }
}

void NodeHealth::evaluate(const SnapshotSet& set, const std::vector<CollectorState>& collectors,
                          std::uint64_t input) {
  std::lock_guard eval(eval_mu_);
  {
    std::lock_guard lock(mu_);
    if (pending_expect_) {
      if (!(*pending_expect_ == engine_.expectations())) engine_ = VerdictEngine(*pending_expect_);
      pending_expect_.reset();
    }
  }
  Samples samples = parsed_.samples_of(set);
  auto report =
      std::make_shared<const NodeReport>(make_report(engine_, samples, collectors, &series_));
  std::lock_guard lock(mu_);
  ++evaluations_;
  // A refresh evaluates its input again: as new counts as newer.
  if (input < current_input_) return;
  current_input_ = input;
  current_ = std::move(report);
}

}  // namespace nodewatch
