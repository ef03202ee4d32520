#pragma once
// Scraping a running daemon in the tests: scrapes timed over a span (the
// hung-storage tests' "scrapes stay fast"), and one collector's last
// success (its cadence).

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "support/daemon_process.hpp"
#include "support/http_client.hpp"

namespace nodewatch::testing {

struct ScrapeTimes {
  std::vector<double> ms;  // sorted
  double median() const { return ms.empty() ? 0 : ms[ms.size() / 2]; }
  double worst() const { return ms.empty() ? 0 : ms.back(); }
};

// Scrapes /metrics every `every` for `span` and calls `check` with each
// body; a scrape that fails or does not answer 200 fails the test.
inline ScrapeTimes ScrapeFor(std::uint16_t port, std::chrono::milliseconds span,
                             std::chrono::milliseconds every,
                             const std::function<void(const std::string& body)>& check = {}) {
  ScrapeTimes out;
  auto until = std::chrono::steady_clock::now() + span;
  while (std::chrono::steady_clock::now() < until) {
    auto t0 = std::chrono::steady_clock::now();
    auto r = Request(port, "GET", "/metrics");
    out.ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    if (!r || r->status != 200) {
      ADD_FAILURE() << "a scrape failed (" << (r ? std::to_string(r->status) : "no answer") << ")";
      break;
    }
    if (check) check(r->body);
    std::this_thread::sleep_for(every);
  }
  std::sort(out.ms.begin(), out.ms.end());
  return out;
}

// nodewatch_collector_last_success_timestamp_seconds of `collector`.
inline std::optional<double> LastSuccess(std::uint16_t port, const std::string& collector) {
  auto r = Request(port, "GET", "/metrics");
  if (!r || r->status != 200) return std::nullopt;
  return SampleValue(r->body, "nodewatch_collector_last_success_timestamp_seconds{collector=\"" +
                                  collector + "\"}");
}

}  // namespace nodewatch::testing
