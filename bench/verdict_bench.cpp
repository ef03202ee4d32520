// The node verdict's cost per evaluation, on the e2e node's exposition
// (tests/e2e/golden.prom: every collector over the fixture trees and the
// 8-GPU fake NVML, ~1,800 series), split back into one snapshot per
// collector as the daemon holds them.
//
// The daemon evaluates after each collector's result, on a thread of its
// own; what it pays is: parse the snapshots that changed (only the
// families the rules read), evaluate, render the nodewatch_node_* families
// and deflate them. The baseline is what every round already pays for the
// same snapshots: deflating each once (make_rendered), as the workers do
// after each collection.
//
// Run: cmake -B build-bench -DNODEWATCH_BUILD_BENCH=ON ... && ninja -C build-bench verdict_bench
//      build-bench/bench/verdict_bench

#include <benchmark/benchmark.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "exposition.hpp"
#include "node_health.hpp"
#include "ratio_reporter.hpp"
#include "snapshot_store.hpp"
#include "verdict.hpp"

namespace nodewatch {
namespace {

// The golden file's families, one snapshot per collector (by name prefix).
std::map<std::string, std::string> Snapshots() {
  std::ifstream in(NODEWATCH_GOLDEN);
  std::map<std::string, std::string> out;
  std::string line, current = "other";
  auto owner = [](const std::string& name) -> std::string {
    for (const char* c : {"accelerator", "pcie", "interconnect", "storage", "textfile", "kernel",
                          "memory", "nvlink", "node"}) {
      if (name.rfind("nodewatch_" + std::string(c) + "_", 0) == 0) {
        std::string s(c);
        if (s == "nvlink") return "accelerator";
        if (s == "memory") return "kernel";
        return s;
      }
    }
    return "other";
  };
  while (std::getline(in, line)) {
    if (line.rfind("# HELP ", 0) == 0) current = owner(line.substr(7, line.find(' ', 7) - 7));
    if (current == "node" || current == "other") continue;  // the verdict's own; the daemon's
    out[current] += line + "\n";
  }
  return out;
}

Expectations E2EExpectations() {
  Samples s(&learn_families());
  for (const auto& [name, text] : Snapshots()) s.add(text);
  return learn_expectations(s).expect;
}

std::vector<CollectorState> AllUp() {
  std::vector<CollectorState> c;
  for (const char* n : {"accelerator", "pcie", "interconnect", "storage", "textfile", "kernel"})
    c.push_back(CollectorState{n, true, true, ""});
  return c;
}

SnapshotSet MakeSet(const std::map<std::string, std::string>& texts) {
  SnapshotSet set;
  for (const auto& [name, text] : texts) set.by_collector[name] = make_rendered(text);
  return set;
}

// Every snapshot new: the first evaluation, or all collectors publishing
// at once.
void BM_Verdict_AllSnapshotsChanged(benchmark::State& state) {
  auto texts = Snapshots();
  VerdictEngine engine(E2EExpectations());
  std::vector<SnapshotSet> sets;
  for (int i = 0; i < 2; ++i) sets.push_back(MakeSet(texts));
  SnapshotSamples parsed;
  std::size_t k = 0;
  for (auto _ : state) {
    Samples s = parsed.samples_of(sets[k++ % 2]);  // alternate: every pointer changed
    NodeReport r = make_report(engine, s, AllUp(), monotonic_clock().now());
    benchmark::DoNotOptimize(r.metrics->deflated().data());
  }
}
BENCHMARK(BM_Verdict_AllSnapshotsChanged)->Unit(benchmark::kMicrosecond)->UseRealTime();

// One collector published (the common case: collectors have intervals of
// their own): the storage snapshot, the largest, is new; the rest reused.
// The snapshots, of which storage's is a new one at each next() (two
// renderings of it in turn): what the daemon holds after storage published.
class StorageChanging {
 public:
  StorageChanging() : texts_(Snapshots()), set_(MakeSet(texts_)) {
    a_ = set_.by_collector["storage"];
    b_ = make_rendered(texts_["storage"]);
  }
  const SnapshotSet& next() {
    set_.by_collector["storage"] = (k_++ % 2) ? a_ : b_;
    return set_;
  }

 private:
  std::map<std::string, std::string> texts_;
  SnapshotSet set_;
  std::shared_ptr<const RenderedText> a_, b_;
  std::size_t k_ = 0;
};

void BM_Verdict_OneSnapshotChanged(benchmark::State& state) {
  StorageChanging snapshots;
  VerdictEngine engine(E2EExpectations());
  SnapshotSamples parsed;
  for (auto _ : state) {
    Samples s = parsed.samples_of(snapshots.next());
    NodeReport r = make_report(engine, s, AllUp(), monotonic_clock().now());
    benchmark::DoNotOptimize(r.metrics->deflated().data());
  }
}
BENCHMARK(BM_Verdict_OneSnapshotChanged)->Unit(benchmark::kMicrosecond)->UseRealTime();

// Its parts: the parse of the changed snapshot and the merge; the rules
// alone; the rendering and deflate of the node families alone.
void BM_Verdict_Part_ParseOneAndMerge(benchmark::State& state) {
  StorageChanging snapshots;
  SnapshotSamples parsed;
  for (auto _ : state) {
    Samples s = parsed.samples_of(snapshots.next());
    benchmark::DoNotOptimize(s.size());
  }
}
BENCHMARK(BM_Verdict_Part_ParseOneAndMerge)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_Verdict_Part_Rules(benchmark::State& state) {
  auto texts = Snapshots();
  VerdictEngine engine(E2EExpectations());
  SnapshotSamples parsed;
  Samples s = parsed.samples_of(MakeSet(texts));
  auto collectors = AllUp();
  for (auto _ : state) {
    Verdict v = engine.evaluate(s, collectors, std::chrono::steady_clock::now(), 1.7e9);
    benchmark::DoNotOptimize(v.problems.data());
  }
}
BENCHMARK(BM_Verdict_Part_Rules)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_Verdict_Part_RenderAndDeflate(benchmark::State& state) {
  auto texts = Snapshots();
  VerdictEngine engine(E2EExpectations());
  SnapshotSamples parsed;
  Verdict v = engine.evaluate(parsed.samples_of(MakeSet(texts)), AllUp(),
                              std::chrono::steady_clock::now(), 1.7e9);
  for (auto _ : state) {
    MetricSink sink(VerdictEngine::metric_table());
    engine.render(v, sink);
    auto r = make_rendered(sink.render());
    benchmark::DoNotOptimize(r->deflated().data());
  }
}
BENCHMARK(BM_Verdict_Part_RenderAndDeflate)->Unit(benchmark::kMicrosecond)->UseRealTime();

// Baseline: what the workers pay per round for the same snapshots (each
// rendered text deflated once).
void BM_Baseline_DeflateTheSnapshots(benchmark::State& state) {
  auto texts = Snapshots();
  for (auto _ : state) {
    for (const auto& [name, text] : texts) {
      auto r = make_rendered(text);
      benchmark::DoNotOptimize(r->deflated().data());
    }
  }
}
BENCHMARK(BM_Baseline_DeflateTheSnapshots)->Unit(benchmark::kMicrosecond)->UseRealTime();

// Baseline for one collector: its snapshot deflated once.
void BM_Baseline_DeflateStorage(benchmark::State& state) {
  auto texts = Snapshots();
  for (auto _ : state) {
    auto r = make_rendered(texts["storage"]);
    benchmark::DoNotOptimize(r->deflated().data());
  }
}
BENCHMARK(BM_Baseline_DeflateStorage)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
}  // namespace nodewatch

int main(int argc, char** argv) {
  return nodewatch::bench::run_with_ratios(argc, argv, [](const auto& r) {
    r.print_ratios("BM_Baseline_DeflateTheSnapshots",
                   {{"verdict, every snapshot new", "BM_Verdict_AllSnapshotsChanged"}});
    r.print_ratios("BM_Baseline_DeflateStorage",
                   {{"verdict after one collector's result", "BM_Verdict_OneSnapshotChanged"}});
  });
}
