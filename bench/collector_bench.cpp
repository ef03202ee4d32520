// Collector cost: what one collection costs the node, per collector, on
// the fixture trees and an 8-GPU fake NVML node (tests/fakes/fake_nvml).
//
// Each benchmark does what the scheduler does per collection: collect()
// into a MetricSink, render the text, deflate it once. The baseline is the
// same work without the hardware: the 8 GPUs' samples, recorded once, only
// emitted, rendered and deflated. The ratio collect ÷ baseline is what
// reading the devices (NVML calls, the per-device threads) adds.
//
// Run: cmake -B build-bench -DNODEWATCH_BUILD_BENCH=ON ... && ninja -C build-bench collector_bench
//      build-bench/bench/collector_bench

#include <benchmark/benchmark.h>
#include <stdlib.h>

#include <cstdio>
#include <map>
#include <string>

#include "accelerator/accelerator_collector.hpp"
#include "accelerator/nvml/nvml_service.hpp"
#include "exposition.hpp"
#include "interconnect/nvlink_metrics.hpp"
#include "pcie/pcie_collector.hpp"
#include "ratio_reporter.hpp"
#include "storage/storage_collector.hpp"

namespace nodewatch {
namespace {

const std::filesystem::path kFixtures = NODEWATCH_FIXTURES_DIR;

CollectContext Context() {
  return {std::chrono::steady_clock::now() + std::chrono::seconds(10), nullptr};
}

// One scheduler-equivalent collection; returns the series count.
std::size_t CollectRenderDeflate(Collector& c) {
  MetricSink sink(c.metrics());
  c.collect(Context(), sink);
  auto rendered = make_rendered(sink.render());
  benchmark::DoNotOptimize(rendered->deflated().data());
  return sink.sample_count();
}

std::unique_ptr<Collector> NvmlCollector() {
  setenv("FAKE_NVML_SCENARIO", (kFixtures / "nvml" / "eight_gpus.scenario").c_str(), 1);
  std::vector<std::unique_ptr<accelerator::Backend>> b;
  b.push_back(accelerator::make_nvml_backend(
      std::make_shared<accelerator::NvmlService>(FAKE_NVML_LIBRARY)));
  return std::make_unique<accelerator::AcceleratorCollector>(std::move(b));
}

void BM_Accelerator_Nvml8Gpu_Collect(benchmark::State& state) {
  auto c = NvmlCollector();
  CollectRenderDeflate(*c);  // loads the library, starts the device threads
  std::size_t series = 0;
  for (auto _ : state) series = CollectRenderDeflate(*c);
  state.counters["series"] = static_cast<double>(series);
}
BENCHMARK(BM_Accelerator_Nvml8Gpu_Collect)->Unit(benchmark::kMicrosecond)->UseRealTime();

// The baseline: the same 8 devices' samples, without touching NVML.
void BM_Accelerator_Nvml8Gpu_EmitOnly(benchmark::State& state) {
  setenv("FAKE_NVML_SCENARIO", (kFixtures / "nvml" / "eight_gpus.scenario").c_str(), 1);
  accelerator::NvmlService nvml(FAKE_NVML_LIBRARY);
  std::vector<accelerator::DeviceSample> samples = nvml.sample_devices(Context());
  const MetricTable& table = accelerator::accelerator_metric_table();
  std::size_t series = 0;
  for (auto _ : state) {
    MetricSink sink(table);
    for (const auto& d : samples) accelerator::emit_device(d, sink);
    auto rendered = make_rendered(sink.render());
    benchmark::DoNotOptimize(rendered->deflated().data());
    series = sink.sample_count();
  }
  state.counters["series"] = static_cast<double>(series);
}
BENCHMARK(BM_Accelerator_Nvml8Gpu_EmitOnly)->Unit(benchmark::kMicrosecond)->UseRealTime();

// NVLink: 8 GPUs x 18 links through the NVML service's NVLink questions, as
// the interconnect collector reads them, rendered and deflated.
template <class Fill>
std::size_t NvlinkRenderDeflate(Fill fill) {
  MetricSink sink(interconnect::nvlink_metric_table());
  fill(sink);
  auto rendered = make_rendered(sink.render());
  benchmark::DoNotOptimize(rendered->deflated().data());
  return sink.sample_count();
}

void BM_Nvlink_8Gpu18Links_Collect(benchmark::State& state) {
  setenv("FAKE_NVML_SCENARIO", (kFixtures / "nvml" / "eight_gpus.scenario").c_str(), 1);
  interconnect::NvlinkMetrics m(std::make_shared<accelerator::NvmlService>(FAKE_NVML_LIBRARY));
  auto collect = [&m](MetricSink& sink) { m.collect(Context(), sink); };
  NvlinkRenderDeflate(collect);
  std::size_t series = 0;
  for (auto _ : state) series = NvlinkRenderDeflate(collect);
  state.counters["series"] = static_cast<double>(series);
}
BENCHMARK(BM_Nvlink_8Gpu18Links_Collect)->Unit(benchmark::kMicrosecond)->UseRealTime();

// The baseline: the same samples replayed, without NVML.
void BM_Nvlink_8Gpu18Links_EmitOnly(benchmark::State& state) {
  setenv("FAKE_NVML_SCENARIO", (kFixtures / "nvml" / "eight_gpus.scenario").c_str(), 1);
  accelerator::NvmlService nvml(FAKE_NVML_LIBRARY);
  const std::vector<accelerator::DeviceSample> samples = nvml.sample_nvlinks(Context());
  interconnect::NvlinkTotals totals;
  auto emit = [&samples, &totals](MetricSink& sink) {
    interconnect::emit_nvlinks(samples, totals, false, sink);
  };
  std::size_t series = 0;
  for (auto _ : state) series = NvlinkRenderDeflate(emit);
  state.counters["series"] = static_cast<double>(series);
}
BENCHMARK(BM_Nvlink_8Gpu18Links_EmitOnly)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_Accelerator_Amdgpu2Boards_Collect(benchmark::State& state) {
  std::vector<std::unique_ptr<accelerator::Backend>> b;
  b.push_back(
      accelerator::make_amdgpu_backend(Roots{kFixtures / "amdgpu" / "sys", "/nonexistent"}));
  accelerator::AcceleratorCollector c(std::move(b));
  std::size_t series = 0;
  for (auto _ : state) series = CollectRenderDeflate(c);
  state.counters["series"] = static_cast<double>(series);
}
BENCHMARK(BM_Accelerator_Amdgpu2Boards_Collect)->Unit(benchmark::kMicrosecond)->UseRealTime();

// pcie after the held-descriptor reads (link and AER values through held
// descriptors, one pread each) and before them (max_held = 0: every value
// opened, read and closed), in the same process; whole collections, and
// collect() alone (what the reads cost without the rendering).
void PcieCollect(benchmark::State& state, std::size_t max_held, bool render) {
  pcie::PcieCollector c(Roots{kFixtures / "pcie" / "sys", "/nonexistent"}, {}, max_held);
  CollectRenderDeflate(c);  // reads the facts, opens the held descriptors
  std::size_t series = 0;
  for (auto _ : state) {
    if (render) {
      series = CollectRenderDeflate(c);
    } else {
      MetricSink sink(c.metrics());
      c.collect(Context(), sink);
      series = sink.sample_count();
    }
  }
  state.counters["series"] = static_cast<double>(series);
}

void BM_Pcie_Fixture_Collect(benchmark::State& state) {
  PcieCollect(state, pcie::kMaxHeldFiles, true);
}
BENCHMARK(BM_Pcie_Fixture_Collect)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_Pcie_Fixture_Collect_OpenReadClose(benchmark::State& state) {
  PcieCollect(state, 0, true);
}
BENCHMARK(BM_Pcie_Fixture_Collect_OpenReadClose)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_Pcie_Fixture_CollectOnly(benchmark::State& state) {
  PcieCollect(state, pcie::kMaxHeldFiles, false);
}
BENCHMARK(BM_Pcie_Fixture_CollectOnly)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_Pcie_Fixture_CollectOnly_OpenReadClose(benchmark::State& state) {
  PcieCollect(state, 0, false);
}
BENCHMARK(BM_Pcie_Fixture_CollectOnly_OpenReadClose)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_Storage_Fixture_Collect(benchmark::State& state) {
  storage::StorageCollector c(Roots{kFixtures / "storage" / "sys", kFixtures / "storage" / "proc"},
                              {});
  std::size_t series = 0;
  for (auto _ : state) series = CollectRenderDeflate(c);
  state.counters["series"] = static_cast<double>(series);
}
BENCHMARK(BM_Storage_Fixture_Collect)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
}  // namespace nodewatch

int main(int argc, char** argv) {
  return nodewatch::bench::run_with_ratios(argc, argv, [](const auto& r) {
    // What reading the devices adds to emitting, rendering and deflating.
    r.print_ratios("BM_Accelerator_Nvml8Gpu_EmitOnly",
                   {{"8-GPU fake NVML node, one collection", "BM_Accelerator_Nvml8Gpu_Collect"}});
    r.print_ratios("BM_Nvlink_8Gpu18Links_EmitOnly",
                   {{"8 GPUs x 18 NVLinks, one collection", "BM_Nvlink_8Gpu18Links_Collect"}});
    // Held descriptors (after) against open/read/close (before).
    r.print_ratios("BM_Pcie_Fixture_Collect_OpenReadClose",
                   {{"pcie fixture, held descriptors, one collection", "BM_Pcie_Fixture_Collect"}});
    r.print_ratios(
        "BM_Pcie_Fixture_CollectOnly_OpenReadClose",
        {{"pcie fixture, held descriptors, collect() only", "BM_Pcie_Fixture_CollectOnly"}});
  });
}
