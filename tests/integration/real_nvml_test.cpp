// NVIDIA's own NVML libraries, as Debian's archive ships them (libnvidia-ml1
// 535 of bookworm, 550 of trixie, 555 of experimental; fetched into a cache
// by tests/archive/fetch.sh, which packaging/test.sh runs first), loaded by
// nodewatch on this machine, which has no NVIDIA driver: each answers
// nvmlInit with "Driver Not Loaded" (9) and says its own version before
// it. What nodewatch makes of that is checked against a sysfs with two
// NVIDIA GPUs on the PCI bus (the node after a driver that failed to load:
// unhealthy) and one without (a node with the driver's packages and no GPU:
// healthy). Where the archive could not be reached the tests skip and say
// why.

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>  // before support/collector_test.hpp, which uses std::nan without it
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "accelerator/accelerator_collector.hpp"
#include "accelerator/backend.hpp"
#include "accelerator/nvml/nvml_service.hpp"
#include "samples.hpp"
#include "support/collector_test.hpp"
#include "support/daemon_process.hpp"
#include "support/driver_summary.hpp"
#include "verdict.hpp"

namespace nodewatch {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

// The cache fetch.sh filled: NODEWATCH_ARCHIVE_CACHE, else
// ~/.cache/nodewatch-archive (packaging/test.sh's default).
fs::path Cache() {
  if (const char* c = std::getenv("NODEWATCH_ARCHIVE_CACHE"); c != nullptr && *c != '\0') return c;
  const char* home = std::getenv("HOME");
  return fs::path(home != nullptr ? home : "/root") / ".cache" / "nodewatch-archive";
}

struct Library {
  std::string suite;
  std::string version;  // "535.261.03"
  fs::path path;
};

std::string Slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  std::string t = s.str();
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
  return t;
}

// The three libraries, or none with `why`. On a machine with the NVIDIA
// module loaded they would answer otherwise: none there.
std::vector<Library> Libraries(std::string* why) {
  if (fs::exists("/sys/module/nvidia")) {
    *why = "an NVIDIA driver is loaded here: these tests model a machine without one";
    return {};
  }
  const fs::path nvml = Cache() / "nvml";
  std::vector<Library> out;
  for (const char* suite : {"bookworm", "trixie", "experimental"}) {
    const std::string version = Slurp(nvml / (std::string(suite) + ".version"));
    const fs::path lib = nvml / version / "libnvidia-ml.so.1";
    if (version.empty() || !fs::exists(lib)) {
      *why = "no libnvidia-ml1 of " + std::string(suite) + " in " + nvml.string() +
             " (tests/archive/fetch.sh: " +
             (fs::exists(Cache() / "status") ? Slurp(Cache() / "status") : std::string("not run")) +
             ")";
      return {};
    }
    out.push_back({suite, version, lib});
  }
  return out;
}

// A sysfs with `gpus` NVIDIA 3D controllers on the PCI bus, bound to no
// driver (the module is not loaded), and the BMC's display.
class Bus {
 public:
  explicit Bus(int gpus) {
    for (int i = 0; i < gpus; ++i) function("0000:" + std::to_string(17 + i) + ":00.0", "0x10de");
    function("0000:03:00.0", "0x1a03");
  }
  Roots roots() const { return Roots{dir_.path(), "/nonexistent/proc", nullptr}; }

 private:
  void function(const std::string& bdf, const std::string& vendor) {
    dir_.write("bus/pci/devices/" + bdf + "/vendor", vendor + "\n");
    dir_.write("bus/pci/devices/" + bdf + "/class", "0x030200\n");
  }
  TempDir dir_;
};

// NVIDIA's library, run as root without a driver, makes /dev/nvidiactl
// (char 195:255) on its way to "Driver Not Loaded": what it made is
// removed again, and what was there left alone.
class DeviceNodes {
 public:
  DeviceNodes() : had_(fs::exists("/dev/nvidiactl")) {}
  ~DeviceNodes() {
    std::error_code ec;
    if (!had_ && !fs::exists("/sys/module/nvidia")) fs::remove("/dev/nvidiactl", ec);
  }

 private:
  bool had_;
};

// One collection of the accelerator collector on `lib` over `bus`.
std::string Collect(const Library& lib, const Bus& bus, MetricSink* sink) {
  const DeviceNodes nodes;
  std::vector<std::unique_ptr<accelerator::Backend>> backends;
  backends.push_back(accelerator::make_nvml_backend(
      std::make_shared<accelerator::NvmlService>(lib.path.string()), bus.roots()));
  accelerator::AcceleratorCollector c(std::move(backends), accelerator::JobSources{}, false);
  testing::CollectOnce(c, *sink);
  return sink->render();
}

// The node verdict on what the collector rendered, every collector up.
Verdict Judge(const std::string& text) {
  VerdictEngine engine{Expectations{}};
  Samples s(&VerdictEngine::families());
  EXPECT_EQ(s.add(text), 0u);
  std::vector<CollectorState> up;
  for (const char* n : {"accelerator", "pcie", "interconnect", "nic", "storage", "kernel"})
    up.push_back(CollectorState{n, true, true, ""});
  return engine.evaluate(s, up, std::chrono::steady_clock::now(), 1.7e9);
}

TEST(RealNvml, EachLibrarySaysTheDriverIsNotLoadedAndTheNodeWithGpusIsUnhealthy) {
  std::string why;
  const std::vector<Library> libs = Libraries(&why);
  if (libs.empty()) GTEST_SKIP() << why;
  for (const Library& lib : libs) {
    SCOPED_TRACE(lib.suite + " " + lib.version);
    Bus bus(2);
    MetricSink sink(accelerator::accelerator_metric_table());
    const std::string text = Collect(lib, bus, &sink);
    // Every symbol nodewatch requires is there (else library_error).
    EXPECT_TRUE(sink.errors().empty());
    EXPECT_EQ(testing::DriverSummary(text, "nvidia"),
              "up=0 state=not_loaded library=" + lib.version + " module= devices=2 states=8");
    const Verdict v = Judge(text);
    EXPECT_EQ(v.health[0], Health::kUnhealthy);
    ASSERT_EQ(v.problems.size(), 1u);
    EXPECT_EQ(v.problems[0].component, "nvidia");
    EXPECT_EQ(v.problems[0].problem, "driver_not_loaded");
    EXPECT_EQ(v.problems[0].action, "drain");
  }
}

TEST(RealNvml, TheLibraryWithoutAnNvidiaGpuIsAHealthyNode) {
  std::string why;
  const std::vector<Library> libs = Libraries(&why);
  if (libs.empty()) GTEST_SKIP() << why;
  for (const Library& lib : libs) {
    SCOPED_TRACE(lib.suite + " " + lib.version);
    Bus bus(0);
    MetricSink sink(accelerator::accelerator_metric_table());
    const std::string text = Collect(lib, bus, &sink);
    EXPECT_TRUE(sink.errors().empty());
    EXPECT_EQ(testing::DriverSummary(text, "nvidia"),
              "up=0 state=not_loaded library=" + lib.version + " module= devices=0 states=8");
    const Verdict v = Judge(text);
    EXPECT_EQ(v.health[0], Health::kHealthy);
    EXPECT_TRUE(v.problems.empty());
  }
}

}  // namespace
}  // namespace nodewatch
