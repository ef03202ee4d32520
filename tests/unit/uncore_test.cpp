// The uncore collector: sysfs's PMU descriptions parsed (pmu.hpp), counts
// summed, scaled and extrapolated through a scripted perf_event_open, and,
// for real, the kernel's `msr` PMU on this machine.

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include <toml++/toml.h>

#include "support/collector_test.hpp"
#include "support/daemon_process.hpp"
#include "uncore/uncore_collector.hpp"
#include "uncore/uncore_metrics.hpp"

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace nodewatch::uncore {
namespace {

using nodewatch::testing::CollectOnce;
using nodewatch::testing::HasSeries;
using nodewatch::testing::TempDir;
using nodewatch::testing::Value;

// perf_event_open as a script: each CPU's counter is what the test sets.
class FakePerf final : public PerfApi {
 public:
  int open(std::uint32_t type, const std::uint64_t (&config)[3], int cpu, int* err) override {
    if (refuse != 0) {
      *err = refuse;
      return -1;
    }
    const int fd = next++;
    // As the kernel's, a new counter starts at 0.
    fds[fd] = Opened{type, {config[0], config[1], config[2]}, cpu, {}};
    fds[fd].at_open = reading(fds[fd]);
    ++opens;
    return fd;
  }
  bool read(int fd, PerfReading* out, int* err) override {
    if (read_errno != 0) {
      *err = read_errno;
      return false;
    }
    const Opened& o = fds.at(fd);
    const PerfReading& now = reading(o);
    *out = {now.value - o.at_open.value, now.enabled_ns - o.at_open.enabled_ns,
            now.running_ns - o.at_open.running_ns};
    return true;
  }
  void close(int fd) override { fds.erase(fd); }

  // Adds `value` counted over `ns`, of which the PMU ran `running_ns`.
  void advance(int cpu, std::uint64_t value, std::uint64_t ns, std::uint64_t running_ns) {
    counters[cpu].value += value;
    counters[cpu].enabled_ns += ns;
    counters[cpu].running_ns += running_ns;
  }

  // The same for one event (PMU type and config words) on `cpu`: its
  // counter is then its own, not the CPU's.
  void advance_event(std::uint32_t type, std::uint64_t config0, std::uint64_t config1, int cpu,
                     std::uint64_t value) {
    PerfReading& r = events[{type, config0, config1, cpu}];
    r.value += value;
    r.enabled_ns += 1000;
    r.running_ns += 1000;
  }

  struct Opened {
    std::uint32_t type;
    std::uint64_t config[3];
    int cpu;
    PerfReading at_open;
  };
  const PerfReading& reading(const Opened& o) {
    auto it = events.find({o.type, o.config[0], o.config[1], o.cpu});
    return it != events.end() ? it->second : counters[o.cpu];
  }
  // The (type, config, config1) of every open descriptor.
  std::set<std::tuple<std::uint32_t, std::uint64_t, std::uint64_t>> opened() const {
    std::set<std::tuple<std::uint32_t, std::uint64_t, std::uint64_t>> out;
    for (const auto& [fd, o] : fds) out.insert({o.type, o.config[0], o.config[1]});
    return out;
  }
  std::map<int, Opened> fds;
  std::map<int, PerfReading> counters;
  std::map<std::tuple<std::uint32_t, std::uint64_t, std::uint64_t, int>, PerfReading> events;
  int next = 100;
  int opens = 0;
  int refuse = 0;
  int read_errno = 0;
};

// A sysfs tree with one PMU shaped as an Intel IIO free-running one
// (a byte-rate event with .scale and .unit) and an msr-like one. Totals
// of the IIO event carry the kernel's rounded scale (3.814697266e-6 MiB
// is 4.0000000006 bytes): they are compared to within 1e-3.
class UncoreTree {
 public:
  UncoreTree() {
    pmu("uncore_iio_free_running_0", "31", "0,2");
    dir.write(base("uncore_iio_free_running_0") + "format/event", "config:0-7\n");
    dir.write(base("uncore_iio_free_running_0") + "format/umask", "config:8-15\n");
    dir.write(base("uncore_iio_free_running_0") + "events/bw_in_port0", "event=0xff,umask=0x20");
    dir.write(base("uncore_iio_free_running_0") + "events/bw_in_port0.scale", "3.814697266e-6");
    dir.write(base("uncore_iio_free_running_0") + "events/bw_in_port0.unit", "MiB\n");
    dir.write(base("uncore_iio_free_running_0") + "events/ioclk", "event=0xff,umask=0x10\n");
    pmu("msr", "9", "");
    dir.write(base("msr") + "format/event", "config:0-63\n");
    dir.write(base("msr") + "events/tsc", "event=0x00\n");
    dir.write("devices/system/cpu/online", "0-3\n");
  }
  static std::string base(const std::string& pmu) {
    return "bus/event_source/devices/" + pmu + "/";
  }
  void pmu(const std::string& name, const std::string& type, const std::string& cpumask) {
    dir.write(base(name) + "type", type + "\n");
    if (!cpumask.empty()) dir.write(base(name) + "cpumask", cpumask + "\n");
  }
  Roots roots() const { return Roots{dir.path(), dir.path() / "proc", nullptr}; }

  TempDir dir;
};

std::optional<EventAttr> Resolve(const UncoreTree& t, const std::string& pmu,
                                 const std::string& terms, std::string* error) {
  return resolve_event(sources::FsRoot(t.dir.path()), pmu, terms, error);
}

TEST(UncorePmu, ParsesCpuLists) {
  EXPECT_EQ(parse_cpulist("0-3,8,10-11\n"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(parse_cpulist("0,72"), (std::vector<int>{0, 72}));
  for (const char* bad : {"", "\n", "3-1", "a", "1,,2", "-1", "0-70000"})
    EXPECT_FALSE(parse_cpulist(bad)) << bad;
}

TEST(UncorePmu, ParsesFormats) {
  std::optional<FormatTerm> f = parse_format("config:0-7\n");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->word, 0);
  EXPECT_EQ(f->bits, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  f = parse_format("config1:0-1");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->word, 1);
  EXPECT_EQ(f->bits, (std::vector<int>{0, 1}));
  f = parse_format("config:0-1,32-33");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->bits, (std::vector<int>{0, 1, 32, 33}));
  for (const char* bad :
       {"config3:0", "config:64", "config:7-0", "config:0-7,5", "event", "config:"})
    EXPECT_FALSE(parse_format(bad)) << bad;
}

TEST(UncorePmu, ParsesRequestsInPerfsSyntax) {
  std::string error;
  std::optional<EventRequest> r = parse_request("msr/tsc/", &error);
  ASSERT_TRUE(r) << error;
  EXPECT_EQ(r->pmu, "msr");
  EXPECT_EQ(r->terms, "tsc");
  EXPECT_FALSE(r->prefix);
  r = parse_request("nvidia_nvlink_c2c0_pmu_*/total_bytes_loc,port=0x1/", &error);
  ASSERT_TRUE(r) << error;
  EXPECT_EQ(r->pmu, "nvidia_nvlink_c2c0_pmu_");
  EXPECT_EQ(r->terms, "total_bytes_loc,port=0x1");
  EXPECT_TRUE(r->prefix);
  EXPECT_FALSE(parse_request("msr/tsc/u", &error));
  EXPECT_NE(error.find("modifiers"), std::string::npos) << error;
  for (const char* bad : {"msr", "msr/tsc", "//", "msr//", "../x/tsc/", "a b/tsc/", "msr/tsc/x/"})
    EXPECT_FALSE(parse_request(bad, &error)) << bad;
}

TEST(UncorePmu, ResolvesAliasesTermsAndRawWords) {
  UncoreTree t;
  std::string error;
  // The alias, its scale (4 bytes a count, given in MiB) and unit.
  std::optional<EventAttr> a = Resolve(t, "uncore_iio_free_running_0", "bw_in_port0", &error);
  ASSERT_TRUE(a) << error;
  EXPECT_EQ(a->config[0], 0x20ffU);
  EXPECT_NEAR(a->scale, 4.0, 1e-8);
  EXPECT_EQ(a->unit, "bytes");
  // Terms of the format, and raw words.
  a = Resolve(t, "uncore_iio_free_running_0", "event=0x3c,umask=1", &error);
  ASSERT_TRUE(a) << error;
  EXPECT_EQ(a->config[0], 0x13cU);
  EXPECT_EQ(a->unit, "");
  a = Resolve(t, "uncore_iio_free_running_0", "config=0x5,config1=0x1", &error);
  ASSERT_TRUE(a) << error;
  EXPECT_EQ(a->config[0], 5U);
  EXPECT_EQ(a->config[1], 1U);
  // A value's low bits fill the format's bits in order.
  t.dir.write(UncoreTree::base("msr") + "format/split", "config1:0-1,8-9\n");
  a = Resolve(t, "msr", "tsc,split=0xe", &error);
  ASSERT_TRUE(a) << error;
  EXPECT_EQ(a->config[1], 0x302U);
  // What is refused, and said.
  EXPECT_FALSE(Resolve(t, "msr", "split=0x10", &error));
  EXPECT_NE(error.find("wider"), std::string::npos) << error;
  EXPECT_FALSE(Resolve(t, "msr", "nope", &error));
  EXPECT_NE(error.find("nope"), std::string::npos) << error;
  t.dir.write(UncoreTree::base("msr") + "events/chan_rd", "event=0x2,split=?\n");
  EXPECT_FALSE(Resolve(t, "msr", "chan_rd", &error));
  EXPECT_NE(error.find("split"), std::string::npos) << error;
  EXPECT_FALSE(Resolve(t, "msr", "tsc,tsc", &error));
  EXPECT_FALSE(Resolve(t, "msr", "event=zz", &error));
  t.dir.write(UncoreTree::base("msr") + "events/bad.scale", "-1\n");
  t.dir.write(UncoreTree::base("msr") + "events/bad", "event=0x1\n");
  EXPECT_FALSE(Resolve(t, "msr", "bad", &error));
  EXPECT_NE(error.find("scale"), std::string::npos) << error;
}

// One collection, checked for conformance.
MetricSink Collect(UncoreCollector& c) {
  MetricSink sink(c.metrics());
  CollectOnce(c, sink);
  return sink;
}

// Only the named events: the known tables' left out.
UncoreOptions Events(std::vector<std::string> events) {
  UncoreOptions o;
  o.events = std::move(events);
  o.host_links = false;
  return o;
}

// The total of msr/tsc/.
double TscTotal(const MetricSink& s) {
  return Value(s, families::kEventsTotal, {"msr", "tsc", ""});
}

// msr/tsc/ counted on UncoreTree's four CPUs through the scripted perf.
class MsrTsc : public ::testing::Test {
 protected:
  // The first collection (the baseline), then `n` counted on CPU 0.
  void Counted(std::uint64_t n) {
    MetricSink baseline = Collect(c);
    perf.advance(0, n, 1000, 1000);
  }

  UncoreTree t;
  FakePerf perf;
  UncoreCollector c{t.roots(), Events({"msr/tsc/"}), make_counters(perf)};
};

TEST(UncoreCollector, SumsTheCpusOfTheCpumaskAndScales) {
  UncoreTree t;
  FakePerf perf;
  UncoreCollector c(t.roots(), Events({"uncore_iio_free_running_0/bw_in_port0/"}),
                    make_counters(perf));
  MetricSink first = Collect(c);
  ASSERT_EQ(perf.fds.size(), 2U);  // CPUs 0 and 2
  for (const auto& [fd, o] : perf.fds) {
    EXPECT_EQ(o.type, 31U);
    EXPECT_EQ(o.config[0], 0x20ffU);
    EXPECT_TRUE(o.cpu == 0 || o.cpu == 2) << o.cpu;
  }
  const std::vector<std::string> labels = {"uncore_iio_free_running_0", "bw_in_port0", "bytes"};
  EXPECT_NEAR(Value(first, families::kEventsTotal, labels), 0, 1e-3);
  perf.advance(0, 1000, 1'000'000'000, 1'000'000'000);
  perf.advance(2, 500, 1'000'000'000, 1'000'000'000);
  MetricSink second = Collect(c);
  EXPECT_NEAR(Value(second, families::kEventsTotal, labels), 1500 * 4, 1e-3);
  EXPECT_EQ(
      Value(second, families::kEventRunningRatio, {"uncore_iio_free_running_0", "bw_in_port0"}), 1);
  EXPECT_EQ(Value(second, families::kPmuUp, {"uncore_iio_free_running_0"}), 1);
  EXPECT_EQ(perf.opens, 2);  // kept open
}

TEST_F(MsrTsc, AMultiplexedCounterIsExtrapolatedAndSaidSo) {
  MetricSink first = Collect(c);
  ASSERT_EQ(perf.fds.size(), 4U);  // no cpumask: the online CPUs
  perf.advance(1, 100, 1'000'000'000, 250'000'000);
  MetricSink second = Collect(c);
  EXPECT_EQ(TscTotal(second), 400);
  EXPECT_DOUBLE_EQ(Value(second, families::kEventRunningRatio, {"msr", "tsc"}), 0.25);
  // Not scheduled at all in an interval: nothing to extrapolate from.
  perf.advance(1, 0, 1'000'000'000, 0);
  MetricSink third = Collect(c);
  EXPECT_EQ(TscTotal(third), 400);
}

TEST(UncoreCollector, WithoutPermissionThePmuIsDownAndSaysWhy) {
  UncoreTree t;
  FakePerf perf;
  perf.refuse = EACCES;
  UncoreCollector c(t.roots(), Events({"msr/tsc/", "missing_pmu/x/"}), make_counters(perf));
  MetricSink sink = Collect(c);
  EXPECT_EQ(Value(sink, families::kPmuUp, {"msr"}), 0);
  EXPECT_EQ(Value(sink, families::kPmuUp, {"missing_pmu"}), 0);
  EXPECT_FALSE(HasSeries(sink, families::kEventsTotal, {"msr", "tsc", ""}));
  EXPECT_EQ(sink.errors().at("no_permission"), 1U);
  EXPECT_EQ(sink.errors().at("pmu_missing"), 1U);
  EXPECT_EQ(sink.failures().at({"no_permission", "msr/tsc/"}), "EACCES opening it on CPU 0");
  EXPECT_EQ(c.open_counters(), 0U);
}

TEST(UncoreCollector, AMovedCpumaskReopensAndTheTotalGoesOn) {
  UncoreTree t;
  FakePerf perf;
  UncoreCollector c(t.roots(), Events({"uncore_iio_free_running_0/bw_in_port0/"}),
                    make_counters(perf));
  const std::vector<std::string> labels = {"uncore_iio_free_running_0", "bw_in_port0", "bytes"};
  MetricSink s1 = Collect(c);
  perf.advance(2, 100, 1000, 1000);
  MetricSink s2 = Collect(c);
  EXPECT_NEAR(Value(s2, families::kEventsTotal, labels), 400, 1e-3);
  // CPU 2 went offline: the kernel moved the PMU to CPU 3. What CPU 3
  // counts from its open on adds to the total.
  // What CPU 0 counted since the last read is taken before the move.
  perf.advance(0, 25, 1000, 1000);
  t.dir.write(UncoreTree::base("uncore_iio_free_running_0") + "cpumask", "0,3\n");
  perf.advance(3, 1'000'000, 1000, 1000);  // before the open: not this event's
  MetricSink s3 = Collect(c);
  EXPECT_EQ(perf.opens, 4);
  EXPECT_EQ(c.open_counters(), 2U);
  EXPECT_NEAR(Value(s3, families::kEventsTotal, labels), 400 + 100, 1e-3);
  perf.advance(3, 7777, 1000, 1000);
  MetricSink s3b = Collect(c);
  EXPECT_NEAR(Value(s3b, families::kEventsTotal, labels), 500 + 7777 * 4, 1e-3);
  perf.advance(3, 10, 1000, 1000);
  MetricSink s4 = Collect(c);
  EXPECT_NEAR(Value(s4, families::kEventsTotal, labels), 500 + 7777 * 4 + 40, 1e-3);
}

TEST_F(MsrTsc, APmuThatGoesAndComesBackKeepsItsTotal) {
  Counted(50);
  MetricSink s2 = Collect(c);
  std::filesystem::remove_all(t.dir.path() / UncoreTree::base("msr"));
  MetricSink s3 = Collect(c);
  EXPECT_EQ(Value(s3, families::kPmuUp, {"msr"}), 0);
  EXPECT_EQ(c.open_counters(), 0U);
  EXPECT_EQ(s3.errors().at("pmu_missing"), 1U);
  EXPECT_EQ(TscTotal(s3), 50);  // kept, not withdrawn
  t.pmu("msr", "9", "");
  t.dir.write(UncoreTree::base("msr") + "format/event", "config:0-63\n");
  t.dir.write(UncoreTree::base("msr") + "events/tsc", "event=0x00\n");
  MetricSink s4 = Collect(c);
  perf.advance(0, 5, 1000, 1000);
  MetricSink s5 = Collect(c);
  EXPECT_EQ(Value(s5, families::kPmuUp, {"msr"}), 1);
  EXPECT_EQ(TscTotal(s5), 55);
}

TEST_F(MsrTsc, AReadFailureKeepsTheTotalAndReopens) {
  Counted(50);
  MetricSink s2 = Collect(c);
  perf.read_errno = ENODEV;
  MetricSink s3 = Collect(c);
  EXPECT_EQ(Value(s3, families::kPmuUp, {"msr"}), 0);
  EXPECT_EQ(TscTotal(s3), 50);
  EXPECT_FALSE(HasSeries(s3, families::kEventRunningRatio, {"msr", "tsc"}));
  EXPECT_EQ(s3.failures().at({"read_failed", "msr/tsc/"}), "ENODEV");
  perf.read_errno = 0;
  MetricSink s4 = Collect(c);
  EXPECT_EQ(Value(s4, families::kPmuUp, {"msr"}), 1);
  EXPECT_EQ(perf.opens, 8);
}

TEST(UncoreCollector, ARebuiltCollectorKeepsTheCountersAndForgetsWhatIsNoLongerAsked) {
  UncoreTree t;
  FakePerf perf;
  std::shared_ptr<Counters> counters = make_counters(perf);
  {
    UncoreCollector before(t.roots(), Events({"msr/tsc/", "uncore_iio_free_running_0/ioclk/"}),
                           counters);
    MetricSink s = Collect(before);
    perf.advance(0, 10, 1000, 1000);
    MetricSink s2 = Collect(before);
    EXPECT_EQ(before.open_counters(), 6U);
  }
  UncoreCollector after(t.roots(), Events({"msr/tsc/"}), counters);
  perf.advance(0, 1, 1000, 1000);
  MetricSink s = Collect(after);
  EXPECT_EQ(Value(s, families::kEventsTotal, {"msr", "tsc", ""}), 11);
  EXPECT_EQ(perf.opens, 6);              // nothing opened again
  EXPECT_EQ(after.open_counters(), 4U);  // ioclk's two closed
  EXPECT_EQ(perf.fds.size(), 4U);
}

TEST(UncoreCollector, DescriptorsAreBoundedByMaxCounters) {
  UncoreTree t;
  FakePerf perf;
  UncoreOptions o = Events({"uncore_iio_free_running_0/bw_in_port0/", "msr/tsc/"});
  o.max_counters = 3;
  UncoreCollector c(t.roots(), o, make_counters(perf));
  MetricSink s = Collect(c);
  EXPECT_EQ(c.open_counters(), 2U);
  EXPECT_EQ(Value(s, families::kPmuUp, {"uncore_iio_free_running_0"}), 1);
  EXPECT_EQ(Value(s, families::kPmuUp, {"msr"}), 0);
  EXPECT_EQ(s.errors().at("too_many_counters"), 1U);
}

TEST(UncoreCollector, APrefixNamesEveryPmuSoPrefixed) {
  UncoreTree t;
  t.pmu("uncore_iio_free_running_1", "32", "1");
  t.dir.write(UncoreTree::base("uncore_iio_free_running_1") + "format/event", "config:0-7\n");
  t.dir.write(UncoreTree::base("uncore_iio_free_running_1") + "format/umask", "config:8-15\n");
  t.dir.write(UncoreTree::base("uncore_iio_free_running_1") + "events/ioclk",
              "event=0xff,umask=0x10\n");
  FakePerf perf;
  UncoreCollector c(t.roots(), Events({"uncore_iio_free_running_*/ioclk/", "nothing_*/x/"}),
                    make_counters(perf));
  MetricSink s = Collect(c);
  EXPECT_EQ(Value(s, families::kPmuUp, {"uncore_iio_free_running_0"}), 1);
  EXPECT_EQ(Value(s, families::kPmuUp, {"uncore_iio_free_running_1"}), 1);
  EXPECT_EQ(c.open_counters(), 3U);
  // A prefix that finds nothing is a node without that hardware.
  EXPECT_EQ(s.errors().count("pmu_missing"), 0U);
}

TEST_F(MsrTsc, ARoundCutShortKeepsItsCountersOpen) {
  Counted(10);
  // The daemon stopping, or the deadline passed, before the first event.
  std::atomic<bool> cancelled{true};
  MetricSink cut(c.metrics());
  c.collect({std::chrono::steady_clock::now() + std::chrono::seconds(10), &cancelled}, cut);
  EXPECT_EQ(c.open_counters(), 4U);
  perf.advance(0, 5, 1000, 1000);
  MetricSink s2 = Collect(c);
  EXPECT_EQ(TscTotal(s2), 15);
  EXPECT_EQ(perf.opens, 4);
}

TEST(UncoreCollector, TwoRequestsOfOneEventCountItOnce) {
  UncoreTree t;
  FakePerf perf;
  UncoreCollector c(t.roots(), Events({"msr/tsc/", "ms*/tsc/", "msr/ tsc/"}), make_counters(perf));
  MetricSink s1 = Collect(c);  // conformant: no series twice
  perf.advance(0, 10, 1000, 1000);
  MetricSink s2 = Collect(c);
  EXPECT_EQ(TscTotal(s2), 10);
  EXPECT_EQ(Value(s2, families::kEventRunningRatio, {"msr", "tsc"}), 1);
  EXPECT_EQ(perf.opens, 4);
}

TEST(UncoreCollector, WhatAReloadDroppedHoldsNoDescriptorAgainstTheBound) {
  UncoreTree t;
  FakePerf perf;
  std::shared_ptr<Counters> counters = make_counters(perf);
  UncoreOptions before = Events({"msr/tsc/"});
  before.max_counters = 5;
  {
    UncoreCollector c(t.roots(), before, counters);
    MetricSink s = Collect(c);
    EXPECT_EQ(c.open_counters(), 4U);
  }
  UncoreOptions after = Events({"uncore_iio_free_running_0/ioclk/"});
  after.max_counters = 5;
  UncoreCollector c(t.roots(), after, counters);
  MetricSink s = Collect(c);
  EXPECT_EQ(Value(s, families::kPmuUp, {"uncore_iio_free_running_0"}), 1);
  EXPECT_EQ(c.open_counters(), 2U);
  EXPECT_EQ(s.errors().count("too_many_counters"), 0U);
}

TEST(UncoreCollector, PmusFoundByAPrefixThatGoAreForgotten) {
  UncoreTree t;
  FakePerf perf;
  UncoreCollector c(t.roots(), Events({"uncore_iio_free_running_*/ioclk/"}), make_counters(perf));
  for (int i = 1; i <= 20; ++i) {
    const std::string name = "uncore_iio_free_running_" + std::to_string(i);
    t.pmu(name, std::to_string(100 + i), "1");
    t.dir.write(UncoreTree::base(name) + "format/event", "config:0-7\n");
    t.dir.write(UncoreTree::base(name) + "events/ioclk", "event=0xff\n");
    MetricSink s = Collect(c);
    EXPECT_EQ(Value(s, families::kPmuUp, {name}), 1);
    std::filesystem::remove_all(t.dir.path() / UncoreTree::base(name));
  }
  MetricSink s = Collect(c);
  EXPECT_EQ(c.open_counters(), 2U);  // free_running_0's, on CPUs 0 and 2
  EXPECT_EQ(c.known_events(), 1U);
}

TEST_F(MsrTsc, AnUnreadableDescriptionKeepsTheCountersCounting) {
  Counted(10);
  t.dir.write(UncoreTree::base("msr") + "type", "not a number\n");
  MetricSink s2 = Collect(c);
  EXPECT_EQ(Value(s2, families::kPmuUp, {"msr"}), 0);
  EXPECT_EQ(s2.errors().at("pmu_unreadable"), 1U);
  EXPECT_EQ(TscTotal(s2), 10);
  EXPECT_EQ(c.open_counters(), 4U);
}

TEST(UncoreOptions, RefusesMalformedAndRepeatedEvents) {
  const CollectorSpec& spec = uncore_collector_spec();
  EXPECT_FALSE(spec.enabled_by_default);
  toml::table table = toml::parse(R"(events = ["msr/tsc/", "msr/tsc/", "msr/tsc/k"])");
  std::vector<ConfigError> errors;
  OptionReader r(table, "collectors.uncore", "test.toml", &errors);
  spec.read_options(r);
  ASSERT_EQ(errors.size(), 2U);
  EXPECT_NE(errors[0].str().find("named twice"), std::string::npos) << errors[0].str();
  EXPECT_NE(errors[1].str().find("modifiers"), std::string::npos) << errors[1].str();
}

// The committed trees of tests/fixtures/uncore (its README says what
// machine and kernel each models).
Roots Fixture(const std::string& tree) {
  const std::filesystem::path root = nodewatch::testing::fixtures_dir() / "uncore" / tree;
  return Roots{root / "sys", root / "proc", nullptr};
}

TEST(UncoreKnown, ReadsTheCpuFromCpuinfo) {
  Cpu icx = read_cpu(Fixture("icx-6.8").proc());
  EXPECT_EQ(icx.vendor, "GenuineIntel");
  EXPECT_EQ(icx.family, 6);
  EXPECT_EQ(icx.model, 106);
  Cpu grace = read_cpu(Fixture("grace-6.14").proc());
  EXPECT_EQ(grace.vendor, "");
  EXPECT_EQ(grace.model, -1);
  EXPECT_EQ(grace.arm_implementer, 0x41);
  EXPECT_EQ(grace.arm_part, 0xd4f);
}

// Bytes a count of bw_in_port0 and bw_out_port0 (0: no such event), and
// whether the kernel's scale was corrected, per modelled machine and kernel.
TEST(UncoreKnown, IntelIioBandwidthCountsThirtyTwoBytesWhereTheKernelSaysFour) {
  struct Case {
    const char* tree;
    double bytes;
    bool corrected;
    bool has_out;
  };
  for (const Case& k : {Case{"skx-6.8", 4, false, true}, Case{"icx-6.8", 32, true, false},
                        Case{"icx-6.15", 32, false, false}, Case{"spr-6.8", 32, true, true},
                        Case{"spr-6.15", 32, false, false}}) {
    SCOPED_TRACE(k.tree);
    FakePerf perf;
    UncoreCollector c(Fixture(k.tree),
                      Events({"uncore_iio_free_running_*/bw_in_port0/",
                              "uncore_iio_free_running_*/bw_out_port0/"}),
                      make_counters(perf));
    MetricSink first = Collect(c);
    perf.advance(0, 1000, 1000, 1000);
    MetricSink sink = Collect(c);
    for (const char* pmu : {"uncore_iio_free_running_0", "uncore_iio_free_running_1"}) {
      EXPECT_NEAR(Value(sink, families::kEventsTotal, {pmu, "bw_in_port0", "bytes"}),
                  1000 * k.bytes, 1e-3);
      EXPECT_EQ(HasSeries(sink, families::kEventScaleCorrected, {pmu, "bw_in_port0"}), k.corrected);
      EXPECT_EQ(HasSeries(sink, families::kEventsTotal, {pmu, "bw_out_port0", "bytes"}), k.has_out);
      EXPECT_EQ(Value(sink, families::kPmuUp, {pmu}), k.has_out ? 1 : 0);
    }
    if (!k.has_out) {
      EXPECT_EQ(sink.errors().at("bad_event"), 2U);
    }
  }
}

TEST(UncoreKnown, GraceC2cEventsTakeThePortFilterAndOpenOnTheirSocketsCpu) {
  std::string error;
  const sources::FsRoot sys = Fixture("grace-6.14").sys();
  std::optional<EventAttr> a =
      resolve_event(sys, "nvidia_nvlink_c2c0_pmu_0", "total_bytes_loc,port=0x1", &error);
  ASSERT_TRUE(a) << error;
  EXPECT_EQ(a->config[0], 0x4U);
  EXPECT_EQ(a->config[1], 0x1U);
  a = resolve_event(sys, "nvidia_nvlink_c2c0_pmu_0", "cycles", &error);
  ASSERT_TRUE(a) << error;
  EXPECT_EQ(a->config[0], std::uint64_t{1} << 32);
  EXPECT_FALSE(resolve_event(sys, "nvidia_nvlink_c2c0_pmu_0", "rd_bytes_rem,port=0x4", &error));
  FakePerf perf;
  UncoreCollector c(Fixture("grace-6.14"), Events({"nvidia_nvlink_c2c0_pmu_*/rd_bytes_loc/"}),
                    make_counters(perf));
  MetricSink sink = Collect(c);
  std::set<std::pair<std::uint32_t, int>> opened;
  for (const auto& [fd, o] : perf.fds) opened.insert({o.type, o.cpu});
  EXPECT_EQ(opened, (std::set<std::pair<std::uint32_t, int>>{{40, 0}, {41, 72}}));
}

// The host-link tables (collectors.uncore.host_links, on by default).
UncoreOptions HostLinks() {
  return UncoreOptions{};
}

using Labels = std::vector<std::string>;
using Opened = std::tuple<std::uint32_t, std::uint64_t, std::uint64_t>;

// Every series of `family` in `sink`, by its label values (read from the
// rendered text: these values hold no quote or backslash).
std::set<Labels> SeriesOf(const MetricSink& sink, const Family& family) {
  std::set<Labels> out;
  std::istringstream text(sink.render());
  const std::string head = std::string(family.name) + "{";
  for (std::string line; std::getline(text, line);) {
    if (!line.starts_with(head)) continue;
    Labels labels;
    for (std::size_t at = line.find('"'); at != std::string::npos && at < line.rfind('}');) {
      const std::size_t end = line.find('"', at + 1);
      labels.push_back(line.substr(at + 1, end - at - 1));
      at = line.find('"', end + 1);
    }
    out.insert(labels);
  }
  return out;
}

// Grace from 6.14: each socket's C2C0 and C2C1 PMUs per port (port=0x1,
// 0x2), its SCF PMU's CPU traffic to GPU memory, its PCIe PMU over every
// root port; the GPU of each socket behind its C2C and SCF series.
TEST(UncoreHostLinks, GraceCountsEachC2cPortTheCpusGpuMemoryTrafficAndPcie) {
  FakePerf perf;
  UncoreCollector c(Fixture("grace-6.14"), HostLinks(), make_counters(perf));
  Collect(c);
  const std::set<Opened> opened = perf.opened();
  // C2C0 of socket 0 (type 40): the four byte events on each port.
  for (std::uint64_t port : {1U, 2U})
    for (std::uint64_t event : {0x0U, 0x1U, 0x2U, 0x3U})
      EXPECT_TRUE(opened.contains({40, event, port})) << event << " port " << port;
  EXPECT_FALSE(opened.contains({40, 0x4, 1}));     // total_bytes_loc: the sum of the two
  EXPECT_TRUE(opened.contains({44, 0x16d, 0}));    // gmem_rd_data
  EXPECT_TRUE(opened.contains({44, 0x1a0, 0}));    // gmem_wr_total_bytes
  EXPECT_TRUE(opened.contains({46, 0x0, 0x3ff}));  // PCIe, every root port
  // 2 sockets x (C2C0 and C2C1: 2 ports x 4 events; SCF 2; PCIe 4).
  EXPECT_EQ(opened.size(), 2U * (2 * 2 * 4 + 2 + 4));
  perf.advance_event(40, 0x0, 1, 0, 1000);    // rd_bytes_loc, port 0, socket 0
  perf.advance_event(40, 0x1, 1, 0, 24);      // rd_bytes_rem
  perf.advance_event(40, 0x2, 2, 0, 7);       // wr_bytes_loc, port 1
  perf.advance_event(45, 0x16d, 0, 72, 10);   // socket 1's CPUs read 10 beats of GPU memory
  perf.advance_event(47, 0x2, 0x3ff, 72, 5);  // a device on socket 1 writes host memory
  MetricSink sink = Collect(c);
  EXPECT_EQ(Value(sink, families::kHostLinkBytesTotal,
                  {"nvidia_nvlink_c2c0_pmu_0", "", "0", "c2c", "rx"}),
            1024);
  EXPECT_EQ(Value(sink, families::kHostLinkBytesTotal,
                  {"nvidia_nvlink_c2c0_pmu_0", "", "1", "c2c", "tx"}),
            7);
  EXPECT_EQ(Value(sink, families::kHostLinkBytesTotal,
                  {"nvidia_nvlink_c2c1_pmu_0", "", "0", "c2c", "rx"}),
            0);
  EXPECT_EQ(Value(sink, families::kHostLinkBytesTotal, {"nvidia_scf_pmu_1", "", "", "c2c", "tx"}),
            320);
  EXPECT_EQ(Value(sink, families::kHostLinkBytesTotal, {"nvidia_pcie_pmu_1", "", "", "pcie", "tx"}),
            5);
  // 2 sockets x (2 C2C PMUs x 2 ports x 2 directions + SCF 2 + PCIe 2).
  EXPECT_EQ(SeriesOf(sink, families::kHostLinkBytesTotal).size(), 2U * (8 + 2 + 2));
  EXPECT_EQ(SeriesOf(sink, families::kHostLinkDeviceInfo),
            (std::set<Labels>{{"nvidia_nvlink_c2c0_pmu_0", "", "", "0009:01:00.0"},
                              {"nvidia_nvlink_c2c0_pmu_1", "", "", "0019:01:00.0"},
                              {"nvidia_nvlink_c2c1_pmu_0", "", "", "0009:01:00.0"},
                              {"nvidia_nvlink_c2c1_pmu_1", "", "", "0019:01:00.0"},
                              {"nvidia_scf_pmu_0", "", "", "0009:01:00.0"},
                              {"nvidia_scf_pmu_1", "", "", "0019:01:00.0"}}));
  EXPECT_EQ(Value(sink, families::kPmuUp, {"nvidia_pcie_pmu_0"}), 1);
  // The tables' events are not the named events' family.
  EXPECT_TRUE(SeriesOf(sink, families::kEventsTotal).empty());
}

// Before 6.14 the C2C PMUs had no port filter: both ports together, the
// port label empty, config1 left 0 (the kernel then counts both).
TEST(UncoreHostLinks, GraceBeforeThePortFilterCountsBothPortsTogether) {
  FakePerf perf;
  UncoreCollector c(Fixture("grace-6.8"), HostLinks(), make_counters(perf));
  Collect(c);
  EXPECT_TRUE(perf.opened().contains({41, 0x2, 0}));
  perf.advance_event(41, 0x2, 0, 72, 64);
  MetricSink sink = Collect(c);
  EXPECT_EQ(
      Value(sink, families::kHostLinkBytesTotal, {"nvidia_nvlink_c2c0_pmu_1", "", "", "c2c", "tx"}),
      64);
  EXPECT_FALSE(HasSeries(sink, families::kHostLinkBytesTotal,
                         {"nvidia_nvlink_c2c0_pmu_1", "", "0", "c2c", "tx"}));
}

// Grace's PMU names with another CPU's cpuinfo (Vera's on a kernel before
// its own tables registers them so, with other event codes): nothing.
TEST(UncoreHostLinks, GracesTablesAreGracesOnly) {
  FakePerf perf;
  const Roots grace = Fixture("grace-6.14");
  UncoreCollector c(Roots{grace.sys().path(), Fixture("vera-7.1").proc().path(), nullptr},
                    HostLinks(), make_counters(perf));
  MetricSink sink = Collect(c);
  EXPECT_TRUE(perf.opened().empty());
  EXPECT_TRUE(SeriesOf(sink, families::kHostLinkBytesTotal).empty());
  EXPECT_TRUE(SeriesOf(sink, families::kPmuUp).empty());
}

// Vera: the CPU's traffic to GPU memory through UCF's source and
// destination filters; PCIe per root complex; its C2C PMU (latency only)
// is not a byte count.
TEST(UncoreHostLinks, VeraCountsTheCpusGpuMemoryTrafficAndEachRootComplex) {
  FakePerf perf;
  UncoreCollector c(Fixture("vera-7.1"), HostLinks(), make_counters(perf));
  Collect(c);
  const std::uint64_t cpu_to_gmem = (1U << 1) | (1U << 9);
  EXPECT_EQ(perf.opened(), (std::set<Opened>{{50, 0x123, cpu_to_gmem},
                                             {50, 0x124, cpu_to_gmem},
                                             {51, 0x0, 0},
                                             {51, 0x1, 0},
                                             {52, 0x0, 0},
                                             {52, 0x1, 0}}));
  perf.advance_event(50, 0x124, cpu_to_gmem, 0, 4096);
  perf.advance_event(52, 0x0, 0, 0, 100);
  MetricSink sink = Collect(c);
  EXPECT_EQ(Value(sink, families::kHostLinkBytesTotal, {"nvidia_ucf_pmu_0", "", "", "c2c", "rx"}),
            4096);
  EXPECT_EQ(
      Value(sink, families::kHostLinkBytesTotal, {"nvidia_pcie_pmu_0_rc_1", "", "", "pcie", "rx"}),
      100);
  EXPECT_EQ(SeriesOf(sink, families::kHostLinkBytesTotal).size(), 6U);
  EXPECT_TRUE(SeriesOf(sink, families::kHostLinkDeviceInfo).empty());
}

// Intel IIO: a series per die and port whose root port exists, with the
// functions below it, on Skylake and Ice Lake server (the stacks' root
// buses from uncore_iio_<k>/die<d>); in bytes as corrected; bw_out where
// it counts a fixed size. Sapphire Rapids has no mapping: each stack
// whole, and no bw_out (which counts no fixed size there).
TEST(UncoreHostLinks, IntelIioCountsEachPortWithTheDevicesBelowIt) {
  const std::uint64_t bw_in_port0 = 0xff | (0x20U << 8);
  struct Case {
    const char* tree;
    double bytes;  // a count of bw_in_port0
    std::set<Labels> series;
  };
  const Labels gpu_tx{"uncore_iio_free_running_0", "0", "0", "pcie", "tx"};
  const Labels gpu_rx{"uncore_iio_free_running_0", "0", "0", "pcie", "rx"};
  const Labels nic_tx{"uncore_iio_free_running_1", "0", "2", "pcie", "tx"};
  const Labels nic_rx{"uncore_iio_free_running_1", "0", "2", "pcie", "rx"};
  const Labels nvme_tx{"uncore_iio_free_running_1", "0", "3", "pcie", "tx"};
  const Labels nvme_rx{"uncore_iio_free_running_1", "0", "3", "pcie", "rx"};
  for (const Case& k : {Case{"skx-6.8", 4, {gpu_tx, gpu_rx, nic_tx, nic_rx, nvme_tx, nvme_rx}},
                        Case{"icx-6.8", 32, {gpu_tx, nic_tx, nvme_tx}},
                        Case{"icx-6.15", 32, {gpu_tx, nic_tx, nvme_tx}},
                        Case{"spr-6.8",
                             32,
                             {{"uncore_iio_free_running_0", "0", "", "pcie", "tx"},
                              {"uncore_iio_free_running_1", "0", "", "pcie", "tx"}}},
                        Case{"spr-6.15",
                             32,
                             {{"uncore_iio_free_running_0", "0", "", "pcie", "tx"},
                              {"uncore_iio_free_running_1", "0", "", "pcie", "tx"}}}}) {
    SCOPED_TRACE(k.tree);
    FakePerf perf;
    UncoreCollector c(Fixture(k.tree), HostLinks(), make_counters(perf));
    Collect(c);
    perf.advance_event(30, bw_in_port0, 0, 0, 1000);
    MetricSink sink = Collect(c);
    EXPECT_EQ(SeriesOf(sink, families::kHostLinkBytesTotal), k.series);
    const bool mapped = !std::string(k.tree).starts_with("spr");
    // The count lands in stack 0's port 0 or, unmapped, its whole.
    EXPECT_NEAR(Value(sink, families::kHostLinkBytesTotal, mapped ? gpu_tx : *k.series.begin()),
                1000 * k.bytes, 1e-2);
    std::set<Labels> devices;
    if (mapped)
      devices = {{"uncore_iio_free_running_0", "0", "0", "0000:18:00.0"},
                 {"uncore_iio_free_running_1", "0", "2", "0000:3b:00.0"},
                 {"uncore_iio_free_running_1", "0", "2", "0000:3b:00.1"},
                 {"uncore_iio_free_running_1", "0", "3", "0000:3c:00.0"}};
    EXPECT_EQ(SeriesOf(sink, families::kHostLinkDeviceInfo), devices);
  }
}

// A reload rebuilds the collector; the counters and totals stay in the
// service, so a host-link series goes on from where it was.
TEST(UncoreHostLinks, AReloadKeepsTheTotals) {
  FakePerf perf;
  std::shared_ptr<Counters> counters = make_counters(perf);
  const Labels series{"nvidia_nvlink_c2c0_pmu_0", "", "0", "c2c", "rx"};
  {
    UncoreCollector c(Fixture("grace-6.14"), HostLinks(), counters);
    Collect(c);
    perf.advance_event(40, 0x0, 1, 0, 100);
    EXPECT_EQ(Value(Collect(c), families::kHostLinkBytesTotal, series), 100);
  }
  const int opens = perf.opens;
  UncoreCollector c(Fixture("grace-6.14"), HostLinks(), counters);
  perf.advance_event(40, 0x0, 1, 0, 50);
  EXPECT_EQ(Value(Collect(c), families::kHostLinkBytesTotal, series), 150);
  EXPECT_EQ(perf.opens, opens);  // nothing reopened
  // Turned off: the tables' counters are closed.
  UncoreCollector off(Fixture("grace-6.14"), Events({}), counters);
  Collect(off);
  EXPECT_EQ(off.open_counters(), 0U);
}

// The tables are looked for again when the PMUs listed change: an event
// of a PMU still listed that the new look misses (its file unreadable for
// a moment) keeps its counters and its total; a PMU that goes takes its
// events with it.
TEST(UncoreHostLinks, AMomentarilyUnreadableEventKeepsItsSeries) {
  TempDir dir;
  std::filesystem::copy(
      nodewatch::testing::fixtures_dir() / "uncore" / "grace-6.14", dir.path(),
      std::filesystem::copy_options::recursive | std::filesystem::copy_options::copy_symlinks);
  const Roots roots{dir.path() / "sys", dir.path() / "proc", nullptr};
  const std::filesystem::path pmus = dir.path() / "sys" / kPmuDir;
  FakePerf perf;
  UncoreCollector c(roots, HostLinks(), make_counters(perf));
  const Labels series{"nvidia_nvlink_c2c0_pmu_0", "", "0", "c2c", "rx"};
  Collect(c);
  perf.advance_event(40, 0x0, 1, 0, 100);
  EXPECT_EQ(Value(Collect(c), families::kHostLinkBytesTotal, series), 100);
  // rd_bytes_loc unreadable, and a PMU appears: the tables are looked for.
  std::filesystem::rename(pmus / "nvidia_nvlink_c2c0_pmu_0/events/rd_bytes_loc",
                          dir.path() / "rd_bytes_loc");
  std::filesystem::create_directories(pmus / "software");
  perf.advance_event(40, 0x0, 1, 0, 50);
  EXPECT_EQ(Value(Collect(c), families::kHostLinkBytesTotal, series), 150);
  std::filesystem::rename(dir.path() / "rd_bytes_loc",
                          pmus / "nvidia_nvlink_c2c0_pmu_0/events/rd_bytes_loc");
  perf.advance_event(40, 0x0, 1, 0, 25);
  EXPECT_EQ(Value(Collect(c), families::kHostLinkBytesTotal, series), 175);
  // The socket's PMUs go: their series with them.
  for (const char* pmu : {"nvidia_nvlink_c2c0_pmu_0", "nvidia_nvlink_c2c1_pmu_0",
                          "nvidia_scf_pmu_0", "nvidia_pcie_pmu_0"})
    std::filesystem::remove_all(pmus / pmu);
  MetricSink sink = Collect(c);
  EXPECT_FALSE(HasSeries(sink, families::kHostLinkBytesTotal, series));
  EXPECT_TRUE(HasSeries(sink, families::kHostLinkBytesTotal,
                        {"nvidia_nvlink_c2c0_pmu_1", "", "0", "c2c", "rx"}));
}

// Without CAP_PERFMON the known PMUs are down, and no host-link series is
// made up.
TEST(UncoreHostLinks, WithoutPermissionTheKnownPmusAreDown) {
  FakePerf perf;
  perf.refuse = EACCES;
  UncoreCollector c(Fixture("vera-7.1"), HostLinks(), make_counters(perf));
  MetricSink sink = Collect(c);
  EXPECT_EQ(Value(sink, families::kPmuUp, {"nvidia_ucf_pmu_0"}), 0);
  EXPECT_TRUE(SeriesOf(sink, families::kHostLinkBytesTotal).empty());
  EXPECT_EQ(sink.errors().at("no_permission"), 6U);
}

// The real thing: the kernel's msr PMU, whose tsc event counts the time
// stamp counter on every CPU.
bool HaveMsrPmu() {
  return std::filesystem::exists("/sys/bus/event_source/devices/msr/events/tsc");
}

TEST(UncoreMsr, TheTscCountAgreesWithTheTscRate) {
#if !defined(__x86_64__)
  GTEST_SKIP() << "the msr PMU and the TSC are x86's";
#else
  if (!HaveMsrPmu()) GTEST_SKIP() << "this kernel has no msr PMU with a tsc event";
  if (::geteuid() != 0) GTEST_SKIP() << "counting for every process needs CAP_PERFMON (root)";
  UncoreCollector c(Roots{}, Events({"msr/tsc/"}), make_counters());
  std::string error;
  std::optional<Pmu> pmu = read_pmu(sources::FsRoot("/sys"), "msr", &error);
  ASSERT_TRUE(pmu) << error;
  MetricSink first(c.metrics());
  const std::uint64_t t0 = __rdtsc();
  CollectOnce(c, first);
  ASSERT_EQ(Value(first, families::kPmuUp, {"msr"}), 1) << first.failures().size();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  MetricSink second = Collect(c);
  const std::uint64_t t1 = __rdtsc();
  // Every CPU's TSC runs at one rate; the counters were read between t0
  // and t1, so the sum is at most the CPUs' share of that span.
  const double expected = static_cast<double>(t1 - t0) * static_cast<double>(pmu->cpus.size());
  const double counted = TscTotal(second);
  EXPECT_GT(counted, 0.95 * expected) << pmu->cpus.size() << " CPUs";
  EXPECT_LE(counted, expected);
#endif
}

TEST(UncoreMsr, WithoutPrivilegeThePmuIsDownWithTheReason) {
  if (!HaveMsrPmu()) GTEST_SKIP() << "this kernel has no msr PMU with a tsc event";
  if (::geteuid() != 0) GTEST_SKIP() << "dropping to another user needs root";
  int paranoid = 2;
  std::ifstream("/proc/sys/kernel/perf_event_paranoid") >> paranoid;
  if (paranoid <= 0)
    GTEST_SKIP() << "perf_event_paranoid is " << paranoid << ": every user may count";
  // A child that drops to nobody (and with it every capability) counts.
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (::setresgid(65534, 65534, 65534) != 0 || ::setresuid(65534, 65534, 65534) != 0) ::_exit(10);
    UncoreCollector c(Roots{}, Events({"msr/tsc/"}), make_counters());
    MetricSink sink(c.metrics());
    CollectContext ctx{std::chrono::steady_clock::now() + std::chrono::seconds(5), nullptr};
    c.collect(ctx, sink);
    double up = -1;
    if (!sink.get(families::kPmuUp, {"msr"}, &up) || up != 0) ::_exit(11);
    if (sink.errors().count("no_permission") != 1) ::_exit(12);
    const std::string& why = sink.failures().begin()->second;
    if (why.rfind("EACCES", 0) != 0 && why.rfind("EPERM", 0) != 0) ::_exit(13);
    ::_exit(c.open_counters() == 0 ? 0 : 14);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10: could not drop; 11: up not 0; 12: no no_permission; "
                                       "13: another errno; 14: descriptors held";
}

TEST(UncoreCollector, TableFollowsTheNamingRules) {
  nodewatch::testing::ExpectWellFormedTable(uncore_metric_table(), "nodewatch_uncore_");
}

}  // namespace
}  // namespace nodewatch::uncore
