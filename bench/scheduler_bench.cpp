// The scheduler's fixed cost per collection: what a collection that finds
// nothing costs the process in CPU time (every thread's, not wall time),
// against what any periodic work costs on this host.
//
// Each case runs cycles 10 ms apart, so that the threads go idle between
// them as they do at a real interval:
//   TimerWake              one thread sleeping until its next due time: the
//                          floor of anything that wakes periodically (one
//                          wake from idle; on a virtual machine it is most
//                          of the cost);
//   AsioTimerWake          the same through an io_context's steady_timer
//                          (epoll and timerfd), as the daemon's timers are;
//   TimerAndWorkerHandOff  an io_context timer that hands a job to a worker
//                          thread and takes the answer back on the io
//                          thread: the shape of a collection (three wakes);
//   SchedulerEmptyCollect  the daemon's Scheduler running collectors that
//                          emit nothing: the worker's timed wake-up, the
//                          deadline timer moved (once for those due
//                          together), render,
//                          snapshot swap, status update; one collector,
//                          and four and eight due together (one wake-up
//                          for all).
//
// The ratios say how far a collection's fixed cost is from the one-wake
// floor; CPU time is the process's (MeasureProcessCPUTime), divided by the
// cycles (the collections, for the scheduler's cases).
//
// Run: cmake -B build-bench -DNODEWATCH_BUILD_BENCH=ON ... && ninja -C build-bench scheduler_bench
//      build-bench/bench/scheduler_bench

#include <benchmark/benchmark.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "asio.hpp"
#include "nodewatch/collector.hpp"
#include "ratio_reporter.hpp"
#include "scheduler.hpp"
#include "snapshot_store.hpp"
#include "worker_pool.hpp"

namespace nodewatch {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kPeriod = std::chrono::milliseconds(10);

void TimerWake(benchmark::State& state) {
  auto next = Clock::now();
  for (auto _ : state) {
    next += kPeriod;
    std::this_thread::sleep_until(next);
  }
}
BENCHMARK(TimerWake)->MeasureProcessCPUTime()->Iterations(200)->Repetitions(3)->Unit(
    benchmark::kMicrosecond);

void AsioTimerWake(benchmark::State& state) {
  asio::io_context io;
  asio::steady_timer t(io);
  auto next = Clock::now();
  for (auto _ : state) {
    next += kPeriod;
    t.expires_at(next);
    t.wait();
  }
}
BENCHMARK(AsioTimerWake)
    ->MeasureProcessCPUTime()
    ->Iterations(200)
    ->Repetitions(3)
    ->Unit(benchmark::kMicrosecond);

void TimerAndWorkerHandOff(benchmark::State& state) {
  asio::io_context io;
  // Between the timer's handler and the worker's answer the io_context has
  // nothing else to wait for: the guard keeps run_one() waiting.
  auto guard = asio::make_work_guard(io);
  asio::steady_timer t(io);
  WorkerPool pool(1, "nw-bench");
  auto next = Clock::now();
  for (auto _ : state) {
    next += kPeriod;
    bool answered = false;
    t.expires_at(next);
    t.async_wait([&](const boost::system::error_code&) {
      pool.post([&] { asio::post(io, [&] { answered = true; }); });
    });
    while (!answered) io.run_one();
  }
  pool.shutdown(std::chrono::seconds(1));
}
BENCHMARK(TimerAndWorkerHandOff)
    ->MeasureProcessCPUTime()
    ->Iterations(200)
    ->Repetitions(3)
    ->Unit(benchmark::kMicrosecond);

class EmptyCollector final : public Collector {
 public:
  const MetricTable& metrics() const override { return table_; }
  void collect(const CollectContext&, MetricSink&) override {}

 private:
  MetricTable table_{{}};
};

// CPU per collection of `collectors` collectors that emit nothing, all at
// kPeriod (so on one grid: due together, one wake-up for all). The
// benchmark's thread sleeps
// kBatch periods per iteration, so its own wake-up adds 1/kBatch of one to
// each collection; the io_context is not run, as in the daemon between
// scrapes (it would only watch the deadlines).
constexpr int kBatch = 20;
std::map<std::string, double> g_us_per_collection;

double process_cpu_us() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

void SchedulerEmptyCollect(benchmark::State& state) {
  const int collectors = static_cast<int>(state.range(0));
  asio::io_context io;
  SnapshotStore store;
  Scheduler sched(io, store);
  // Collections run, from the statuses (on_result is not called for a
  // collection that found what the last one found).
  auto runs = [&] {
    std::uint64_t n = 0;
    for (const CollectorStatus& s : sched.statuses()) n += s.runs;
    return n;
  };
  std::vector<CollectorJob> jobs;
  for (int i = 0; i < collectors; ++i) {
    CollectorJob job;
    job.name = "empty" + std::to_string(i);
    job.collector = std::make_unique<EmptyCollector>();
    job.interval = kPeriod;
    job.timeout = kPeriod;
    jobs.push_back(std::move(job));
  }
  sched.start(std::move(jobs));
  // The first collections (at start, off the grid) are not measured.
  std::this_thread::sleep_for(5 * kPeriod);
  const std::uint64_t r0 = runs();
  const std::uint64_t s0 = sched.deadline_timer_sets();
  const double c0 = process_cpu_us();
  for (auto _ : state) std::this_thread::sleep_for(kBatch * kPeriod);
  const double cpu = process_cpu_us() - c0;
  const auto n = static_cast<double>(runs() - r0);
  const auto sets = static_cast<double>(sched.deadline_timer_sets() - s0);
  sched.stop();
  sched.shutdown_workers(std::chrono::seconds(1));
  if (n > 0) {
    state.counters["collections"] = n;
    state.counters["us_per_collection"] = cpu / n;
    state.counters["timer_sets_per_collection"] = sets / n;
    g_us_per_collection[std::to_string(collectors) +
                        (collectors == 1 ? " collector" : " collectors due together")] = cpu / n;
  }
}
BENCHMARK(SchedulerEmptyCollect)
    ->ArgName("collectors")
    ->Arg(1)
    ->Arg(4)
    ->Arg(8)
    ->MeasureProcessCPUTime()
    ->Iterations(10)
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace nodewatch

int main(int argc, char** argv) {
  return nodewatch::bench::run_with_ratios(
      argc, argv, [](const nodewatch::bench::RatioReporter& r) {
        const char* base = "TimerWake/iterations:200/repeats:3/process_time";
        r.print_cpu_ratios(base, {{"one wake through an io_context timer",
                                   "AsioTimerWake/iterations:200/repeats:3/process_time"},
                                  {"timer, hand-off to a worker and back",
                                   "TimerAndWorkerHandOff/iterations:200/repeats:3/process_time"}});
        const double wake = r.cpu_us(base);
        for (const auto& [name, us] : nodewatch::g_us_per_collection) {
          std::printf("%s: %.1f us CPU per collection; one wake %.1f us CPU; ratio %.2fx\n",
                      name.c_str(), us, wake, wake > 0 ? us / wake : 0.0);
        }
      });
}
