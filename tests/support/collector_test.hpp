#pragma once
// Helpers every collector test uses: run a collector once over a fixture
// tree and fail the test on any emitted sample its table does not declare,
// on a wrong label set, or on a table that breaks the naming rules.

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "nodewatch/collector.hpp"
#include "nodewatch/metric.hpp"
#include "support/paths.hpp"

namespace nodewatch::testing {

// The committed fixture trees (tests/fixtures), passed in by CMake.
inline std::filesystem::path fixtures_dir() {
  return NODEWATCH_FIXTURES_DIR;
}

// Asserts that `table` follows DESIGN.md's naming rules.
inline void ExpectWellFormedTable(const MetricTable& table, std::string_view prefix) {
  for (const std::string& problem : table.lint(prefix)) ADD_FAILURE() << problem;
}

// Asserts that nothing the collector emitted was refused by the sink.
inline void ExpectConformant(const MetricSink& sink) {
  for (const std::string& v : sink.violations())
    ADD_FAILURE() << "metric contract violation: " << v;
}

// Runs one collect() with a generous deadline and checks conformance.
inline void CollectOnce(Collector& c, MetricSink& sink,
                        std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  CollectContext ctx{std::chrono::steady_clock::now() + timeout, nullptr};
  c.collect(ctx, sink);
  ExpectConformant(sink);
}

// Value of one series, or NaN when absent (a test then fails on the compare).
inline double Value(const MetricSink& sink, std::string_view name,
                    const std::vector<std::string>& labels) {
  double v = 0;
  if (!sink.get(name, labels, &v)) {
    ADD_FAILURE() << "no series " << name;
    return std::nan("");
  }
  return v;
}

// Whether one series is there (no failure when it is not).
inline bool HasSeries(const MetricSink& sink, std::string_view name,
                      const std::vector<std::string>& labels) {
  double v = 0;
  return sink.get(name, labels, &v);
}

// How many partial failures the collection counted under `reason`.
inline std::uint64_t ErrorCount(const MetricSink& sink, std::string_view reason) {
  auto it = sink.errors().find(reason);
  return it == sink.errors().end() ? 0 : it->second;
}

}  // namespace nodewatch::testing
