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

#include "nodewatch/clock.hpp"
#include "nodewatch/metric.hpp"
#include "nodewatch/options.hpp"
#include "nodewatch/services.hpp"
#include "nodewatch/sources/fs.hpp"

namespace nodewatch {

// Where file-system reads are rooted. Tests and containers move these;
// tests also inject errnos on any path through `faults`.
struct Roots {
  std::filesystem::path sysfs = "/sys";
  std::filesystem::path procfs = "/proc";
  std::shared_ptr<sources::Faults> faults = nullptr;

  sources::FsRoot sys() const { return sources::FsRoot(sysfs, faults); }
  sources::FsRoot proc() const { return sources::FsRoot(procfs, faults); }
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
  // Of `clock`, the scheduler's (a test's may be moved by hand).
  Clock::time_point deadline;
  // Set once the deadline has passed or the daemon is stopping: a collector
  // that loops over many devices should check it between devices and return.
  const std::atomic<bool>* cancelled = nullptr;
  // Null: monotonic_clock().
  const Clock* clock = nullptr;

  Clock::time_point now() const { return (clock != nullptr ? *clock : monotonic_clock()).now(); }
  // The time left to the deadline, never negative. A collector that waits
  // on a thread or the kernel (which keep CLOCK_MONOTONIC) waits until
  // steady_clock::now() plus (a part of) this.
  Clock::duration left() const {
    const Clock::time_point n = now();
    return deadline > n ? deadline - n : Clock::duration::zero();
  }
  bool should_stop() const {
    return (cancelled != nullptr && cancelled->load(std::memory_order_relaxed)) ||
           now() >= deadline;
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

// Settings that several collectors share: the configuration's top-level
// tables other than server and log ([nvml]).
struct SharedSettings {
  std::string nvml_library = "libnvidia-ml.so.1";
  bool operator==(const SharedSettings&) const = default;
};

struct CollectorEnv {
  Roots roots;
  // The collector's options as its spec's read_options() returned them;
  // null for a collector without options.
  std::shared_ptr<const CollectorOptions> options;
  SharedSettings shared = {};
  // The daemon's long-lived services (services.hpp); null in tests that
  // build a collector alone, which then gets services of its own.
  Services* services = nullptr;

  // The typed options. Throws std::invalid_argument when they are missing or
  // of another type (a bug in the spec).
  template <class T>
  const T& options_as() const {
    const auto* typed = dynamic_cast<const TypedOptions<T>*>(options.get());
    if (typed == nullptr) throw std::invalid_argument("collector options missing or mistyped");
    return typed->value();
  }

  // The service of type T under `key`, shared with every other collector
  // that asks for the same one; made with `make()` when none is alive. With
  // no Services (a test), a private one.
  template <class T, class Make>
  std::shared_ptr<T> service(std::string_view key, Make make) const {
    if (services == nullptr) return make();
    return services->get<T>(key, make);
  }
};

struct CollectorSpec {
  std::string_view name;
  std::string_view description;
  bool enabled_by_default = true;
  std::chrono::milliseconds default_interval{15000};
  std::chrono::milliseconds default_timeout{10000};
  // Reads and validates the collector-specific keys into a typed value
  // (typed_options<T>(read)); the common keys enabled/interval/timeout are
  // handled by the configuration. Empty when the collector has no options.
  OptionsReadFn read_options;
  // The collector's metric table, without building a collector
  // (--list-metrics starts no thread and touches no device).
  std::function<const MetricTable&()> metrics;
  std::function<std::unique_ptr<Collector>(const CollectorEnv&)> create;
};

// The options a spec reads from an empty table: its defaults. Throws
// std::invalid_argument if the defaults do not validate (a bug).
std::shared_ptr<const CollectorOptions> default_options(const CollectorSpec& spec);

}  // namespace nodewatch
