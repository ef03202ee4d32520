// A collection that finds nothing, in process and warm: what each
// collector's own code costs on a node without its hardware or inputs,
// without the wake-up that the daemon adds (scheduler_bench measures that,
// collection_cost.sh both together).
//
// Each benchmark does what the scheduler does per collection on its
// worker: a MetricSink, collect(), render, the rendered snapshot made (no
// deflate: nobody scraped gzip). The collectors are built as the daemon
// builds them (their catalog entries, default options) on an empty sysfs
// and procfs, with an NVML library that does not exist:
//   accelerator   no NVML, no class/drm
//   interconnect  no class/infiniband (nor NVLink: no NVML)
//   textfile      an empty directory; a missing one, the default (the
//                 normal case of a node without inputs, not counted); a
//                 missing one configured (a read error counted each time)
//   uncore        not empty: the real msr PMU, 1 and 8 events; the
//                 host-link tables on a modelled Grace pair (below)
// The baselines: the same steps for a collector that does nothing (the
// sink and the render alone), and one failed openat (the floor of a look
// that finds nothing). Ratios against both are printed for collections
// back to back (/0: warm caches). /100: the same, each collection after
// 100 ms asleep and timed alone by its thread's CPU, as a collection
// after a wake-up finds the caches.
//
// Run: cmake -B build-bench -DNODEWATCH_BUILD_BENCH=ON ... && ninja -C build-bench empty_bench
//      build-bench/bench/empty_bench

#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <time.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include "accelerator/accelerator_collector.hpp"
#include "exposition.hpp"
#include "interconnect/interconnect_collector.hpp"
#include "ratio_reporter.hpp"
#include "textfile/textfile_collector.hpp"
#include "uncore/uncore_collector.hpp"

namespace nodewatch {
namespace {

namespace fs = std::filesystem;

// An empty sysfs and procfs, and an empty textfile directory, for the
// process's life.
struct Tree {
  fs::path root;
  Tree() {
    std::string t = (fs::temp_directory_path() / "nodewatch-empty-bench.XXXXXX").string();
    if (::mkdtemp(t.data()) == nullptr) std::abort();
    root = t;
    fs::create_directories(root / "sys");
    fs::create_directories(root / "proc");
    fs::create_directories(root / "textfile");
  }
  ~Tree() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
};

const Tree& tree() {
  static const Tree t;
  return t;
}

CollectorEnv Env(const CollectorSpec& spec) {
  CollectorEnv env;
  env.roots = Roots{tree().root / "sys", tree().root / "proc"};
  env.options = default_options(spec);
  env.shared.nvml_library = (tree().root / "none" / "libnvidia-ml.so.1").string();
  return env;
}

// One collection as the scheduler makes it, without the deflate: the
// collector's series cache kept from one collection to the next.
void Collect(Collector& c, SeriesCache& series) {
  MetricSink sink(c.metrics(), series);
  c.collect({std::chrono::steady_clock::now() + std::chrono::seconds(10), nullptr}, sink);
  auto rendered = make_rendered(sink.render());
  benchmark::DoNotOptimize(rendered->text.data());
}

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

// state.range(0): 0, collections back to back (warm caches); else the
// thread sleeps that many milliseconds before each one, which is timed
// alone (its thread's CPU): a collection after a sleep, as in the daemon,
// where the caches have gone cold.
void Run(benchmark::State& state, Collector& c) {
  SeriesCache series;
  Collect(c, series);  // the first collection: library lookups, first listings
  const auto sleep = std::chrono::milliseconds(state.range(0));
  for (auto _ : state) {
    if (sleep.count() == 0) {
      Collect(c, series);
      continue;
    }
    std::this_thread::sleep_for(sleep);
    const double t0 = thread_cpu_seconds();
    Collect(c, series);
    state.SetIterationTime(thread_cpu_seconds() - t0);
  }
}

// Registered twice: back to back, and after 100 ms asleep.
void Warm(benchmark::internal::Benchmark* b) {
  b->Arg(0)->Unit(benchmark::kMicrosecond)->UseRealTime();
}
void AfterSleep(benchmark::internal::Benchmark* b) {
  b->Arg(100)->Iterations(50)->UseManualTime()->Unit(benchmark::kMicrosecond);
}

class NothingCollector final : public Collector {
 public:
  const MetricTable& metrics() const override { return table_; }
  void collect(const CollectContext&, MetricSink&) override {}

 private:
  MetricTable table_{{}};
};

void BM_Nothing(benchmark::State& state) {
  NothingCollector c;
  Run(state, c);
}
BENCHMARK(BM_Nothing)->Apply(Warm);
BENCHMARK(BM_Nothing)->Apply(AfterSleep);

void BM_FailedOpenat(benchmark::State& state) {
  const std::string path = (tree().root / "sys" / "class" / "infiniband").string();
  for (auto _ : state) {
    const int fd = ::openat(AT_FDCWD, path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    benchmark::DoNotOptimize(fd);
    if (fd >= 0) ::close(fd);
  }
}
BENCHMARK(BM_FailedOpenat)->Unit(benchmark::kMicrosecond)->UseRealTime();

// A collector built from its catalog entry, as the daemon builds it.
void FromCatalog(benchmark::State& state, const CollectorSpec& spec) {
  auto c = spec.create(Env(spec));
  Run(state, *c);
}

void BM_Accelerator(benchmark::State& state) {
  FromCatalog(state, accelerator_collector_spec());
}
BENCHMARK(BM_Accelerator)->Apply(Warm);
BENCHMARK(BM_Accelerator)->Apply(AfterSleep);

void BM_Interconnect(benchmark::State& state) {
  FromCatalog(state, interconnect_collector_spec());
}
BENCHMARK(BM_Interconnect)->Apply(Warm);
BENCHMARK(BM_Interconnect)->Apply(AfterSleep);

void Textfile(benchmark::State& state, std::string directory) {
  textfile::TextfileOptions o;
  o.directory = std::move(directory);
  textfile::TextfileCollector c(o);
  Run(state, c);
}

void BM_Textfile_EmptyDirectory(benchmark::State& state) {
  Textfile(state, (tree().root / "textfile").string());
}
BENCHMARK(BM_Textfile_EmptyDirectory)->Apply(Warm);
BENCHMARK(BM_Textfile_EmptyDirectory)->Apply(AfterSleep);

void BM_Textfile_DefaultMissing(benchmark::State& state) {
  if (fs::exists(textfile::kDefaultDirectory)) {
    state.SkipWithError("the default textfile directory exists on this machine");
    return;
  }
  Textfile(state, std::string(textfile::kDefaultDirectory));
}
BENCHMARK(BM_Textfile_DefaultMissing)->Apply(Warm);
BENCHMARK(BM_Textfile_DefaultMissing)->Apply(AfterSleep);

void BM_Textfile_ConfiguredMissing(benchmark::State& state) {
  Textfile(state, (tree().root / "none").string());
}
BENCHMARK(BM_Textfile_ConfiguredMissing)->Apply(Warm);
BENCHMARK(BM_Textfile_ConfiguredMissing)->Apply(AfterSleep);

// The uncore collector on this machine's real msr PMU (x86; root): one
// event, and eight (the same counter under eight spellings), each opened
// on every online CPU and read each collection. Not an empty collection:
// the cost of a PMU read, against the one that finds nothing.
void Uncore(benchmark::State& state, std::vector<std::string> events) {
  if (!fs::exists("/sys/bus/event_source/devices/msr/events/tsc") || ::geteuid() != 0) {
    state.SkipWithError("needs the msr PMU and root");
    return;
  }
  uncore::UncoreOptions o;
  o.events = std::move(events);
  uncore::UncoreCollector c(Roots{}, o, uncore::make_counters());
  Run(state, c);
}
void BM_Uncore_Msr1Event(benchmark::State& state) {
  Uncore(state, {"msr/tsc/"});
}
BENCHMARK(BM_Uncore_Msr1Event)->Apply(Warm);
BENCHMARK(BM_Uncore_Msr1Event)->Apply(AfterSleep);
void BM_Uncore_Msr8Events(benchmark::State& state) {
  Uncore(state, {"msr/tsc/", "msr/event=0/", "msr/event=0x0/", "msr/event=0x00/", "msr/config=0/",
                 "msr/config=0x0/", "msr/config=0x00/", "msr/event=00/"});
}
BENCHMARK(BM_Uncore_Msr8Events)->Apply(Warm);
BENCHMARK(BM_Uncore_Msr8Events)->Apply(AfterSleep);

// The host-link tables on tests/fixtures/uncore/grace-6.14 (two Grace
// sockets: 44 events, the GPUs joined by NUMA node), through a perf_event
// seam that answers without a system call: what the collector's own work
// costs per collection (listing the PMUs and PCI functions, reading each
// PMU's type and cpumask, summing 44 counters into 24 series). The kernel
// reads it leaves out cost what BM_Uncore_Msr1Event's do, one a counter.
class AnsweringPerf final : public uncore::PerfApi {
 public:
  int open(std::uint32_t, const std::uint64_t (&)[3], int, int*) override { return next_++; }
  bool read(int, uncore::PerfReading* out, int*) override {
    now_ += 1000;
    *out = {now_, now_, now_};
    return true;
  }
  void close(int) override {}

 private:
  int next_ = 1000;
  std::uint64_t now_ = 0;
};

void BM_Uncore_GraceHostLinks(benchmark::State& state) {
  static AnsweringPerf perf;
  const fs::path root = fs::path(NODEWATCH_FIXTURES_DIR) / "uncore" / "grace-6.14";
  uncore::UncoreCollector c(Roots{root / "sys", root / "proc", nullptr}, uncore::UncoreOptions{},
                            uncore::make_counters(perf));
  Run(state, c);
}
BENCHMARK(BM_Uncore_GraceHostLinks)->Apply(Warm);
BENCHMARK(BM_Uncore_GraceHostLinks)->Apply(AfterSleep);

}  // namespace
}  // namespace nodewatch

int main(int argc, char** argv) {
  // The NVML library that is not there is said once per collector built.
  spdlog::set_level(spdlog::level::warn);
  return nodewatch::bench::run_with_ratios(argc, argv, [](const auto& r) {
    for (const char* baseline : {"BM_Nothing/0", "BM_FailedOpenat"})
      r.print_ratios(baseline,
                     {{"accelerator, no NVML, no class/drm", "BM_Accelerator/0"},
                      {"interconnect, no class/infiniband", "BM_Interconnect/0"},
                      {"textfile, an empty directory", "BM_Textfile_EmptyDirectory/0"},
                      {"textfile, the default directory missing", "BM_Textfile_DefaultMissing/0"},
                      {"textfile, a configured directory missing (counted)",
                       "BM_Textfile_ConfiguredMissing/0"},
                      {"uncore, msr/tsc/ on every CPU", "BM_Uncore_Msr1Event/0"},
                      {"uncore, 8 msr events on every CPU", "BM_Uncore_Msr8Events/0"},
                      {"uncore, host links of two Grace sockets (no kernel reads)",
                       "BM_Uncore_GraceHostLinks/0"}});
  });
}
