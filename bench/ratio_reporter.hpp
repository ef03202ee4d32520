#pragma once
// A Google Benchmark console reporter that keeps each benchmark's real time
// (the median with --benchmark_repetitions), so that a bench's main() can
// print each measurement as a ratio against its baseline in the same run.

#include <benchmark/benchmark.h>

#include <cstdio>
#include <initializer_list>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace nodewatch::bench {

class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      if (r.run_type == Run::RT_Iteration ||
          (r.run_type == Run::RT_Aggregate && r.aggregate_name == "median")) {
        real_us_[r.run_name.str()] = r.GetAdjustedRealTime();
        cpu_us_[r.run_name.str()] = r.GetAdjustedCPUTime();
      }
    }
    ConsoleReporter::ReportRuns(runs);
  }

  // Prints "label: X us; baseline Y us; ratio Z x" for each (label,
  // benchmark) measured against `baseline` (benchmark names as registered,
  // "/real_time" added here).
  void print_ratios(const std::string& baseline,
                    std::initializer_list<std::pair<const char*, const char*>> measured) const {
    auto base = real_us_.find(baseline + "/real_time");
    if (base == real_us_.end() || base->second <= 0) return;
    for (const auto& [label, name] : measured) {
      auto m = real_us_.find(std::string(name) + "/real_time");
      if (m == real_us_.end()) continue;
      std::printf("%s: %.1f us; baseline (%s) %.1f us; ratio %.2fx\n", label, m->second,
                  baseline.c_str(), base->second, m->second / base->second);
    }
  }

  // The same for CPU time (a benchmark with MeasureProcessCPUTime: every
  // thread's), benchmark names exactly as the run names them.
  void print_cpu_ratios(const std::string& baseline,
                        std::initializer_list<std::pair<const char*, const char*>> measured) const {
    auto base = cpu_us_.find(baseline);
    if (base == cpu_us_.end() || base->second <= 0) return;
    for (const auto& [label, name] : measured) {
      auto m = cpu_us_.find(name);
      if (m == cpu_us_.end()) continue;
      std::printf("%s: %.1f us CPU; baseline (%s) %.1f us CPU; ratio %.2fx\n", label, m->second,
                  baseline.c_str(), base->second, m->second / base->second);
    }
  }

  // A benchmark's CPU time (0 when it did not run).
  double cpu_us(const std::string& name) const {
    auto it = cpu_us_.find(name);
    return it == cpu_us_.end() ? 0 : it->second;
  }

 private:
  std::map<std::string, double> real_us_;
  std::map<std::string, double> cpu_us_;
};

// main() for a bench whose ratios `print` reports.
template <class Print>
int run_with_ratios(int argc, char** argv, Print print) {
  benchmark::Initialize(&argc, argv);
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  std::printf("\n");
  print(reporter);
  benchmark::Shutdown();
  return 0;
}

}  // namespace nodewatch::bench
