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
//   SchedulerEmptyCollect  the daemon's Scheduler running a collector that
//                          emits nothing: timer, deadline timer, hand-off,
//                          render, snapshot swap, status update.
//
// The ratios say how far a collection's fixed cost is from the one-wake
// floor; CPU time is the process's (MeasureProcessCPUTime), divided by the
// cycles.
//
// Run: cmake -B build-bench -DNODEWATCH_BUILD_BENCH=ON ... && ninja -C build-bench scheduler_bench
//      build-bench/bench/scheduler_bench

#include <benchmark/benchmark.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
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

void SchedulerEmptyCollect(benchmark::State& state) {
  asio::io_context io;
  SnapshotStore store;
  Scheduler sched(io, store);
  std::uint64_t results = 0;
  sched.on_result([&] { ++results; });
  CollectorJob job;
  job.name = "empty";
  job.collector = std::make_unique<EmptyCollector>();
  job.interval = kPeriod;
  job.timeout = kPeriod;
  std::vector<CollectorJob> jobs;
  jobs.push_back(std::move(job));
  sched.start(std::move(jobs));
  // The first collection (at start) is not measured.
  while (results < 2) io.run_one();
  for (auto _ : state) {
    const std::uint64_t want = results + 1;
    while (results < want) io.run_one();
  }
  sched.stop();
  sched.shutdown_workers(std::chrono::seconds(1));
}
BENCHMARK(SchedulerEmptyCollect)
    ->MeasureProcessCPUTime()
    ->Iterations(200)
    ->Repetitions(3)
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace nodewatch

int main(int argc, char** argv) {
  return nodewatch::bench::run_with_ratios(
      argc, argv, [](const nodewatch::bench::RatioReporter& r) {
        r.print_cpu_ratios("TimerWake/iterations:200/repeats:3/process_time",
                           {{"one wake through an io_context timer",
                             "AsioTimerWake/iterations:200/repeats:3/process_time"},
                            {"timer, hand-off to a worker and back",
                             "TimerAndWorkerHandOff/iterations:200/repeats:3/process_time"},
                            {"the scheduler's collection that finds nothing",
                             "SchedulerEmptyCollect/iterations:200/repeats:3/process_time"}});
      });
}
