// The NVML service shared by the accelerator collector and the interconnect
// collector's NVLink part, over the fake libnvidia-ml.so.1: one nvmlInit and
// one thread per GPU for both, built as the daemon builds them (the specs,
// one Services registry); its state (XID counts, which source answered first
// for an NVLink counter) survives a rebuilt collector; both kinds of
// question run at once on the same threads without asking each other's
// questions; a GPU stuck for one is stuck for the other at once, and logged
// once.

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>  // before support/collector_test.hpp
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "accelerator/accelerator_collector.hpp"
#include "accelerator/nvml/nvml_service.hpp"
#include "config.hpp"
#include "interconnect/interconnect_collector.hpp"
#include "nodewatch/services.hpp"
#include "support/collector_test.hpp"
#include "support/fake_nvml.hpp"
#include "support/paths.hpp"

namespace nodewatch::accelerator {
namespace {

using nodewatch::testing::CollectOnce;
using nodewatch::testing::FakeNvmlHooks;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr unsigned kGpus = 8;

std::string scenario(const char* name) {
  return (nodewatch::testing::fixtures_dir() / "nvml" / name).string();
}

std::string uuid(unsigned i) {
  char b[64];
  std::snprintf(b, sizeof b, "GPU-00000000-0000-4000-8000-0000000000%02u", i);
  return b;
}

// A scenario written for one test.
std::string WriteScenario(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

// Keeps the fake loaded for the whole test, so that its hooks can be read
// before the service loads it and its counts outlive a session.
class HoldLibrary {
 public:
  explicit HoldLibrary(const char* library) : handle_(dlopen(library, RTLD_NOW | RTLD_LOCAL)) {
    EXPECT_NE(handle_, nullptr) << dlerror();
  }
  ~HoldLibrary() {
    if (handle_ != nullptr) dlclose(handle_);
  }
  HoldLibrary(const HoldLibrary&) = delete;
  HoldLibrary& operator=(const HoldLibrary&) = delete;

 private:
  void* handle_;
};

// Captures the default logger for one test (thread-safe to read while the
// service's threads may log).
class LogCapture {
 public:
  LogCapture() : sink_(std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(1000)) {
    previous_ = spdlog::default_logger();
    auto logger = std::make_shared<spdlog::logger>("capture", sink_);
    logger->set_pattern("%l %v");
    spdlog::set_default_logger(logger);
    spdlog::set_level(spdlog::level::info);
  }
  ~LogCapture() { spdlog::set_default_logger(previous_); }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  // Lines containing `what`.
  std::size_t Count(const std::string& what) const {
    std::size_t n = 0;
    for (const std::string& line : sink_->last_formatted())
      if (line.find(what) != std::string::npos) ++n;
    return n;
  }

 private:
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink_;
  std::shared_ptr<spdlog::logger> previous_;
};

// The accelerator and interconnect collectors as the daemon builds them:
// from their specs, with [nvml] library set once, sharing one Services.
class Daemonish {
 public:
  Daemonish() {
    catalog_ = {accelerator_collector_spec(), interconnect_collector_spec()};
    // The per-link NVLink error series too, which some tests read.
    ConfigResult cfg =
        parse_config(std::string("[nvml]\nlibrary = \"") + FAKE_NVML_LIBRARY +
                         "\"\n[collectors.interconnect]\nnvlink_link_errors = true\n",
                     "t.toml", catalog_);
    EXPECT_TRUE(cfg.config) << cfg.errors.front().str();
    config_ = std::move(*cfg.config);
  }

  std::unique_ptr<Collector> Build(std::size_t which) { return catalog_[which].create(Env(which)); }
  std::unique_ptr<Collector> Accelerator() { return Build(0); }
  std::unique_ptr<Collector> Interconnect() { return Build(1); }

  // The live service, as a collector would find it (makes none if alive).
  std::shared_ptr<NvmlService> Service() { return nvml_service(Env(0)); }
  Services& services() { return services_; }

 private:
  CollectorEnv Env(std::size_t which) {
    Roots roots{nodewatch::testing::fixtures_dir() / "interconnect" / "sys", "/nonexistent"};
    return CollectorEnv{roots, config_.collectors[which].options, config_.shared, &services_};
  }

  std::vector<CollectorSpec> catalog_;
  Config config_;
  Services services_;
};

double Xid(const MetricSink& s, unsigned gpu, const char* code) {
  double v = 0;
  return s.get("nodewatch_accelerator_xid_errors_total", {std::to_string(gpu), uuid(gpu), code}, &v)
             ? v
             : 0.0;
}

bool Has(const MetricSink& s, std::string_view name, const std::vector<std::string>& labels) {
  double v = 0;
  return s.get(name, labels, &v);
}

// (a) Both collectors enabled, one library: one nvmlInit, one thread per GPU
// and one XID thread, one "loaded" line in the log.
TEST(NvmlServiceTest, BothCollectorsShareOneInitAndOneThreadPerGpu) {
  setenv("FAKE_NVML_SCENARIO", scenario("eight_gpus.scenario").c_str(), 1);
  HoldLibrary hold(FAKE_NVML_LIBRARY);
  FakeNvmlHooks hooks(FAKE_NVML_LIBRARY);
  const unsigned long long inits_before = hooks.Inits();
  LogCapture log;
  Daemonish d;
  std::unique_ptr<Collector> accelerator = d.Accelerator();
  std::unique_ptr<Collector> interconnect = d.Interconnect();
  // As the daemon runs them: each on a thread of its own, at the same time.
  MetricSink gpus(accelerator->metrics());
  MetricSink links(interconnect->metrics());
  std::thread t([&] { CollectOnce(*accelerator, gpus); });
  CollectOnce(*interconnect, links);
  t.join();

  EXPECT_EQ(hooks.Inits() - inits_before, 1u);
  EXPECT_EQ(d.services().made_of<NvmlService>(), 1u);
  for (unsigned i = 0; i < kGpus; ++i) {
    const std::vector<std::string> dev = {std::to_string(i), uuid(i)};
    EXPECT_EQ(testing::Value(gpus, "nodewatch_accelerator_up", dev), 1);
    EXPECT_EQ(testing::Value(links, "nodewatch_accelerator_nvlink_links_active", dev), 18);
  }
  // Each collector asked its own questions only, once.
  EXPECT_EQ(hooks.Calls("nvmlDeviceGetPowerUsage"), kGpus);
  EXPECT_EQ(hooks.Calls("nvmlDeviceGetNvLinkState"), kGpus * 18);
  std::shared_ptr<NvmlService> nvml = d.Service();
  EXPECT_EQ(d.services().made_of<NvmlService>(), 1u);
  EXPECT_EQ(nvml->threads(), kGpus + 1);
  EXPECT_EQ(log.Count("loaded, driver 580.65.06"), 1u);
}

// A collector rebuilt by a reload (its options changed) is built while its
// predecessor still holds the service: it finds the XID counts as they were.
// The fake delivers each event once for the whole run (events_once), so a
// second session could not count them again.
TEST(NvmlServiceTest, XidCountsSurviveARebuiltAcceleratorCollector) {
  setenv("FAKE_NVML_SCENARIO",
         WriteScenario("nvml_service_xid.scenario",
                       "devices 8\nevents_once\nxid 2 79\nxid 2 48\nxid 2 48\n")
             .c_str(),
         1);
  HoldLibrary hold(FAKE_NVML_LIBRARY);
  FakeNvmlHooks hooks(FAKE_NVML_LIBRARY);
  const unsigned long long inits_before = hooks.Inits();
  Daemonish d;
  std::unique_ptr<Collector> first = d.Accelerator();
  const auto until = Clock::now() + 10s;
  for (;;) {
    MetricSink s(first->metrics());
    CollectOnce(*first, s);
    if ((Xid(s, 2, "48") == 2 && Xid(s, 2, "79") == 1) || Clock::now() >= until) break;
    std::this_thread::sleep_for(20ms);
  }
  std::unique_ptr<Collector> rebuilt = d.Accelerator();
  first.reset();
  for (int cycle = 0; cycle < 3; ++cycle) {
    MetricSink s(rebuilt->metrics());
    CollectOnce(*rebuilt, s);
    EXPECT_EQ(Xid(s, 2, "48"), 2) << s.render();
    EXPECT_EQ(Xid(s, 2, "79"), 1);
  }
  EXPECT_EQ(d.services().made_of<NvmlService>(), 1u);
  EXPECT_EQ(hooks.Inits() - inits_before, 1u);
}

// The NVLink rules of the per-device memory (a link's byte counters keep the
// source that answered first; the per-counter call's "recovery", once it
// answered, is never replaced by the NVLink5 field) hold across a rebuilt
// interconnect collector: the memory is the service's.
TEST(NvmlServiceTest, NvlinkCounterSourcesSurviveARebuiltInterconnectCollector) {
  setenv("FAKE_NVML_SCENARIO", scenario("nvlink_hopper.scenario").c_str(), 1);
  HoldLibrary hold(FAKE_NVML_LIBRARY);
  Daemonish d;
  std::unique_ptr<Collector> first = d.Interconnect();
  const std::vector<std::string> link = {"0", uuid(0), "3"};
  auto with = [&](const char* type) {
    std::vector<std::string> l = link;
    l.push_back(type);
    return l;
  };
  const double kib_tx = (1000.0 * 1 + 3) * 1024;  // fields 138, in KiB
  {
    MetricSink s(first->metrics());
    CollectOnce(*first, s);
    EXPECT_EQ(testing::Value(s, "nodewatch_nvlink_transmitted_bytes_total", link), kib_tx);
    EXPECT_EQ(testing::Value(s, "nodewatch_nvlink_link_errors_total", with("recovery")), 2.0 * 3);
  }
  // The driver now answers like NVLink5: per-counter call NOT_SUPPORTED,
  // the NVLink5 byte and error fields answer.
  FakeNvmlHooks hooks(FAKE_NVML_LIBRARY);
  hooks.Script("nvlink5 * 18");
  std::unique_ptr<Collector> rebuilt = d.Interconnect();
  first.reset();
  MetricSink s(rebuilt->metrics());
  CollectOnce(*rebuilt, s);
  // Still the KiB counter (the NVLink5 byte counter would read 1e9 + 3).
  EXPECT_EQ(testing::Value(s, "nodewatch_nvlink_transmitted_bytes_total", link), kib_tx);
  // No "recovery" from the NVLink5 field (it would read 15 x 4); the other
  // NVLink5 errors are there.
  EXPECT_FALSE(Has(s, "nodewatch_nvlink_link_errors_total", with("recovery")));
  EXPECT_EQ(testing::Value(s, "nodewatch_nvlink_link_errors_total", with("symbol")), 21.0 * 4);
  // The accelerator's sums: recovery as the per-counter call last read it
  // (kept across the rebuild, never a drop), symbol over the 18 links.
  EXPECT_EQ(testing::Value(s, "nodewatch_nvlink_errors_total", {"0", uuid(0), "recovery"}),
            2.0 * 153);
  EXPECT_EQ(testing::Value(s, "nodewatch_nvlink_errors_total", {"0", uuid(0), "symbol"}),
            21.0 * 171);
  EXPECT_EQ(d.services().made_of<NvmlService>(), 1u);
}

// Device and NVLink questions at once, from two threads, on the same GPU
// threads: every answer complete, and neither asks the other's questions.
TEST(NvmlServiceTest, DeviceAndNvlinkQuestionsRunAtOnceWithoutOverlap) {
  setenv("FAKE_NVML_SCENARIO", scenario("eight_gpus.scenario").c_str(), 1);
  HoldLibrary hold(FAKE_NVML_LIBRARY);
  NvmlService nvml(FAKE_NVML_LIBRARY);
  constexpr int kRounds = 5;
  auto ctx = [] { return CollectContext{Clock::now() + 10s, nullptr}; };
  std::vector<std::vector<DeviceSample>> devices(kRounds), links(kRounds);
  std::thread t([&] {
    for (int r = 0; r < kRounds; ++r) devices[r] = nvml.sample_devices(ctx());
  });
  for (int r = 0; r < kRounds; ++r) links[r] = nvml.sample_nvlinks(ctx());
  t.join();
  for (int r = 0; r < kRounds; ++r) {
    ASSERT_EQ(devices[r].size(), kGpus);
    ASSERT_EQ(links[r].size(), kGpus);
    for (unsigned i = 0; i < kGpus; ++i) {
      const DeviceSample& dev = devices[r][i];
      const DeviceSample& nvl = links[r][i];
      EXPECT_TRUE(dev.up && nvl.up);
      EXPECT_EQ(dev.uuid, uuid(i));
      EXPECT_EQ(nvl.uuid, uuid(i));
      EXPECT_TRUE(dev.power_watts.has_value());
      EXPECT_TRUE(dev.nvlinks.empty());
      EXPECT_FALSE(dev.nvlink_count.has_value());
      EXPECT_EQ(nvl.nvlinks.size(), 18u);
      EXPECT_FALSE(nvl.power_watts.has_value());
      EXPECT_TRUE(dev.errors.empty() && nvl.errors.empty());
    }
  }
  FakeNvmlHooks hooks(FAKE_NVML_LIBRARY);
  EXPECT_EQ(hooks.Calls("nvmlDeviceGetPowerUsage"), kGpus * kRounds);
  EXPECT_EQ(hooks.Calls("nvmlDeviceGetNvLinkState"), kGpus * 18 * kRounds);
  // Both ask the identity; the XID thread asks it once when it builds its set.
  EXPECT_GE(hooks.Calls("nvmlDeviceGetUUID"), 2 * kGpus * kRounds);
  EXPECT_LE(hooks.Calls("nvmlDeviceGetUUID"), 2 * kGpus * kRounds + kGpus);
  EXPECT_EQ(nvml.threads(), kGpus + 1);
}

// A GPU found stuck by the device questions is reported stuck to the NVLink
// questions at once (no second wait for it), logged once for both, and
// "answers again" once when its call returns.
TEST(NvmlServiceTest, AGpuStuckForOneIsStuckForTheOtherAtOnceAndLoggedOnce) {
  setenv("FAKE_NVML_SCENARIO", scenario("blocking.scenario").c_str(), 1);
  HoldLibrary hold(FAKE_NVML_LIBRARY);
  LogCapture log;
  auto nvml = std::make_shared<NvmlService>(FAKE_NVML_LIBRARY);
  const std::vector<DeviceSample> devices =
      nvml->sample_devices(CollectContext{Clock::now() + 1s, nullptr});
  ASSERT_EQ(devices.size(), kGpus);
  EXPECT_FALSE(devices[6].up);
  ASSERT_EQ(devices[6].errors.size(), 1u);
  EXPECT_EQ(devices[6].errors[0].reason, "device_stuck");
  EXPECT_EQ(devices[6].uuid, uuid(6));  // read before the call that hangs

  const auto start = Clock::now();
  std::vector<DeviceSample> links = nvml->sample_nvlinks(CollectContext{start + 1s, nullptr});
  EXPECT_LT(Clock::now() - start, 300ms);  // not 800 ms of waiting for GPU 6
  ASSERT_EQ(links.size(), kGpus);
  for (unsigned i = 0; i < kGpus; ++i) EXPECT_EQ(links[i].up, i != 6) << "GPU " << i;
  EXPECT_EQ(links[6].errors.at(0).reason, "device_stuck");
  EXPECT_EQ(log.Count("GPU 6 (" + uuid(6) + ") is stuck"), 1u);

  FakeNvmlHooks hooks(FAKE_NVML_LIBRARY);
  ASSERT_TRUE(hooks.WaitUnblocked());
  const auto until = Clock::now() + 10s;
  while (Clock::now() < until) {
    links = nvml->sample_nvlinks(CollectContext{Clock::now() + 1s, nullptr});
    if (links.size() == kGpus && links[6].up) break;
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(links.at(6).up);
  EXPECT_TRUE(nvml->sample_devices(CollectContext{Clock::now() + 1s, nullptr}).at(6).up);
  EXPECT_EQ(log.Count("GPU 6 (" + uuid(6) + ") answers again"), 1u);
  EXPECT_EQ(log.Count("is stuck"), 1u);
}

// A partial failure reaches the sink with its GPU as the subject and the
// call as the detail (the scheduler logs it); a GPU down is counted only
// (the service logged it).
TEST(NvmlServiceTest, PartialFailuresNameTheirGpuAndCall) {
  setenv("FAKE_NVML_SCENARIO", scenario("errors.scenario").c_str(), 1);
  HoldLibrary hold(FAKE_NVML_LIBRARY);
  Daemonish d;
  std::unique_ptr<Collector> accelerator = d.Accelerator();
  MetricSink s(accelerator->metrics());
  CollectOnce(*accelerator, s);
  const auto it = s.failures().find({"nvml_error", uuid(1)});
  ASSERT_NE(it, s.failures().end());
  EXPECT_EQ(it->second, "nvmlDeviceGetPowerUsage: Unknown Error (999)");
  EXPECT_EQ(s.failures().size(), 1u);

  FakeNvmlHooks hooks(FAKE_NVML_LIBRARY);
  hooks.Script("lost 4");
  MetricSink lost(accelerator->metrics());
  CollectOnce(*accelerator, lost);
  EXPECT_EQ(lost.errors().at("gpu_lost"), 1u);
  for (const auto& [key, detail] : lost.failures()) EXPECT_NE(key.first, "gpu_lost");
}

}  // namespace
}  // namespace nodewatch::accelerator
