#pragma once
// The collector contract (see DESIGN.md, "The collector contract").
//
// A collector is constructed with everything it reads from (file-system
// roots, its options) and never touches a global path. The scheduler calls
// collect() on a worker thread, never on the io thread and never at scrape
// time; at most one collect() of a collector is in flight at once, so a
// collector may keep state between calls (counter accumulators, held file
// descriptors) without locking.
//
// Failure contract:
//  - one bad device, file or counter: skip it and call sink.error(reason);
//    the collection still succeeds;
//  - the whole source is unusable (library fails to load, root unreadable):
//    throw CollectError; the collector is reported down for this round;
//  - "no such hardware on this node" is not an error: emit nothing.

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

#include "nodewatch/metric.hpp"

namespace toml {
inline namespace v3 {
class table;
}
}  // namespace toml

namespace nodewatch {

class OptionReader;

// Where file-system reads are rooted. Tests and containers move these.
struct Roots {
  std::filesystem::path sysfs = "/sys";
  std::filesystem::path procfs = "/proc";
};

class CollectError : public std::runtime_error {
 public:
  // `reason` is a short snake_case word used as the errors_total label.
  CollectError(std::string reason, const std::string& message)
      : std::runtime_error(message), reason_(std::move(reason)) {}
  const std::string& reason() const { return reason_; }

 private:
  std::string reason_;
};

struct CollectContext {
  std::chrono::steady_clock::time_point deadline;
  // Set once the deadline has passed or the daemon is stopping: a collector
  // that loops over many devices should check it between devices and return.
  const std::atomic<bool>* cancelled = nullptr;

  bool should_stop() const {
    return (cancelled != nullptr && cancelled->load(std::memory_order_relaxed)) ||
           std::chrono::steady_clock::now() >= deadline;
  }
};

class Collector {
 public:
  virtual ~Collector() = default;
  Collector() = default;
  Collector(const Collector&) = delete;
  Collector& operator=(const Collector&) = delete;

  virtual const MetricTable& metrics() const = 0;
  virtual void collect(const CollectContext& ctx, MetricSink& out) = 0;
};

struct CollectorEnv {
  Roots roots;
  // The collector's own table from the configuration ([collectors.<name>]),
  // already validated by the spec's options() function; never null.
  const toml::table* options = nullptr;
};

struct CollectorSpec {
  std::string_view name;
  std::string_view description;
  bool enabled_by_default = true;
  // True for collectors that can block in the kernel (hung mounts, wedged
  // drivers): they get a thread of their own so they cannot starve the rest.
  bool own_thread = false;
  std::chrono::milliseconds default_interval{15000};
  std::chrono::milliseconds default_timeout{10000};
  // Reads (and so validates) the collector-specific keys; the common keys
  // enabled/interval/timeout are handled by the configuration. May be empty
  // when the collector has no options.
  std::function<void(OptionReader&)> options;
  std::function<std::unique_ptr<Collector>(const CollectorEnv&)> create;
};

}  // namespace nodewatch
