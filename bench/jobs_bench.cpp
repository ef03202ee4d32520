// Job attribution's cost, and that a scrape does not pay it.
//
// An 8-GPU fake NVML node (tests/fakes/fake_nvml) with P compute processes
// per GPU, each in a Slurm job of its own (a /proc tree written here: one
// /proc/PID/cgroup per process), for P = 0, 1, 8, 64, 512:
//   - BM_Collect/P: one collection as the scheduler runs it (NVML, the
//     cgroup reads, the join, render and deflate). This is where the jobs
//     are found, on the collector's interval;
//   - BM_Scrape/P: what a scrape of /metrics does with that collection:
//     assemble the cached rendering (plain, and gzip from the cached
//     deflate), as the router does. No process is looked up and no cgroup
//     read: its cost follows the size of the exposition only, and that is
//     bounded by max_jobs_per_device (8) however many processes run.
// The ratios printed at the end are each P's time over P = 0's.
//
// Run: ninja -C build-bench jobs_bench && build-bench/bench/jobs_bench

#include <benchmark/benchmark.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "accelerator/accelerator_collector.hpp"
#include "accelerator/nvml/nvml_service.hpp"
#include "exposition.hpp"
#include "ratio_reporter.hpp"

namespace nodewatch {
namespace {

namespace fs = std::filesystem;
constexpr unsigned kGpus = 8;

// The node with `per_gpu` processes per GPU, made once per P.
struct JobNode {
  fs::path dir;
  std::unique_ptr<Collector> collector;
  std::shared_ptr<const RenderedText> rendered;
  std::size_t series = 0;

  explicit JobNode(unsigned per_gpu) {
    char tmpl[] = "/tmp/nodewatch-jobs-bench-XXXXXX";
    dir = ::mkdtemp(tmpl);
    std::ofstream scenario(dir / "scenario");
    scenario << "devices " << kGpus << "\n";
    unsigned pid = 10000;
    for (unsigned g = 0; g < kGpus; ++g) {
      scenario << "processes " << g;
      for (unsigned k = 0; k < per_gpu; ++k, ++pid) {
        scenario << " " << pid << ":" << (k + 1) * 64;
        fs::create_directories(dir / "proc" / std::to_string(pid));
        std::ofstream(dir / "proc" / std::to_string(pid) / "cgroup")
            << "0::/system.slice/slurmstepd.scope/job_" << (500000 + pid)
            << "/step_0/user/task_0\n";
      }
      scenario << "\n";
    }
    scenario.close();
    setenv("FAKE_NVML_SCENARIO", (dir / "scenario").c_str(), 1);
    std::vector<std::unique_ptr<accelerator::Backend>> b;
    b.push_back(accelerator::make_nvml_backend(
        std::make_shared<accelerator::NvmlService>(FAKE_NVML_LIBRARY)));
    accelerator::JobSources jobs;
    jobs.proc = sources::FsRoot(dir / "proc");
    jobs.sys = sources::FsRoot(dir / "sys");  // none: every process is in /proc
    collector = std::make_unique<accelerator::AcceleratorCollector>(std::move(b), std::move(jobs));
    collect();  // loads the library, starts the device threads
  }
  ~JobNode() {
    collector.reset();
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  void collect() {
    MetricSink sink(collector->metrics());
    collector->collect({std::chrono::steady_clock::now() + std::chrono::seconds(10), nullptr},
                       sink);
    rendered = make_rendered(sink.render());
    series = sink.sample_count();
  }
};

// One node at a time (each has its NVML session over the one fake
// library): a benchmark with another P replaces it. The last one is left
// to the process's exit, not to static destruction after main, when the
// fake library's own state may be gone.
JobNode& node(unsigned per_gpu) {
  static JobNode* current = nullptr;
  static unsigned current_p = ~0u;
  if (current == nullptr || current_p != per_gpu) {
    delete current;
    current = new JobNode(per_gpu);
    current_p = per_gpu;
  }
  return *current;
}

void BM_Collect(benchmark::State& state) {
  JobNode& n = node(static_cast<unsigned>(state.range(0)));
  for (auto _ : state) {
    n.collect();
    benchmark::DoNotOptimize(n.rendered->deflated().data());
  }
  state.counters["series"] = static_cast<double>(n.series);
  state.counters["processes"] = static_cast<double>(state.range(0) * kGpus);
}
// P = 0, 1, 8, 64, 512 processes per GPU, in microseconds of real time.
void PerGpu(benchmark::internal::Benchmark* b) {
  for (int p : {0, 1, 8, 64, 512}) b->Arg(p);
  b->Unit(benchmark::kMicrosecond)->UseRealTime();
}
BENCHMARK(BM_Collect)->Apply(PerGpu);

void BM_Scrape(benchmark::State& state) {
  JobNode& n = node(static_cast<unsigned>(state.range(0)));
  const std::vector<const RenderedText*> segments = {n.rendered.get()};
  std::size_t bytes = 0;
  for (auto _ : state) {
    // The router's two answers: the plain text assembled, and gzip from
    // the cached deflate.
    std::string plain;
    plain.reserve(n.rendered->text.size());
    plain += n.rendered->text;
    std::string gz = assemble_gzip(segments, "");
    benchmark::DoNotOptimize(plain.data());
    benchmark::DoNotOptimize(gz.data());
    bytes = plain.size();
  }
  state.counters["body_bytes"] = static_cast<double>(bytes);
  state.counters["series"] = static_cast<double>(n.series);
}
BENCHMARK(BM_Scrape)->Apply(PerGpu);

}  // namespace
}  // namespace nodewatch

int main(int argc, char** argv) {
  return nodewatch::bench::run_with_ratios(argc, argv, [](const auto& r) {
    r.print_ratios("BM_Scrape/0", {{"scrape, 1 process per GPU", "BM_Scrape/1"},
                                   {"scrape, 8 per GPU", "BM_Scrape/8"},
                                   {"scrape, 64 per GPU", "BM_Scrape/64"},
                                   {"scrape, 512 per GPU", "BM_Scrape/512"}});
    r.print_ratios("BM_Collect/0", {{"collection, 1 process per GPU", "BM_Collect/1"},
                                    {"collection, 8 per GPU", "BM_Collect/8"},
                                    {"collection, 64 per GPU", "BM_Collect/64"},
                                    {"collection, 512 per GPU", "BM_Collect/512"}});
  });
}
