// The interconnect collector's verbs source through its real dlopen path,
// over a fake libibverbs.so.1 (tests/fakes/fake_ibverbs): port up/down
// events counted per port, other events ignored, a device gone fatal closed
// and opened again, a device that left closed, one that cannot be opened
// not retried, everything closed with the source.

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <chrono>
#include <memory>
#include <thread>

#include "interconnect/ib_verbs.hpp"
#include "support/daemon_process.hpp"
#include "support/eventually.hpp"
#include "support/paths.hpp"

namespace nodewatch::interconnect {
namespace {

using namespace std::chrono_literals;
using nodewatch::testing::Eventually;

class Fake {
 public:
  Fake() : handle_(dlopen(FAKE_IBVERBS_LIBRARY, RTLD_NOW | RTLD_LOCAL)) {
    set_devices_ = reinterpret_cast<void (*)(const char*)>(dlsym(handle_, "fake_ibv_set_devices"));
    event_ = reinterpret_cast<int (*)(const char*, int, int)>(dlsym(handle_, "fake_ibv_event"));
    count_ = reinterpret_cast<unsigned long (*)(const char*)>(dlsym(handle_, "fake_ibv_count"));
    fail_open_ = reinterpret_cast<void (*)(const char*)>(dlsym(handle_, "fake_ibv_fail_open"));
  }
  ~Fake() {
    if (handle_ != nullptr) dlclose(handle_);
  }
  Fake(const Fake&) = delete;
  Fake& operator=(const Fake&) = delete;
  bool ok() const { return set_devices_ && event_ && count_ && fail_open_; }
  void devices(const char* names) { set_devices_(names); }
  bool event(const char* device, ibv_event_type type, int port) {
    return event_(device, type, port) == 0;
  }
  unsigned long count(const char* what) { return count_(what); }
  void fail_open(const char* device) { fail_open_(device); }

 private:
  void* handle_;
  void (*set_devices_)(const char*) = nullptr;
  int (*event_)(const char*, int, int) = nullptr;
  unsigned long (*count_)(const char*) = nullptr;
  void (*fail_open_)(const char*) = nullptr;
};

TEST(VerbsSourceWithLibrary, CountsPortEventsAndFollowsDevices) {
  testing::TempDir dev;  // stands in for /dev/infiniband
  Fake fake;             // the same copy the source dlopens (one per process)
  ASSERT_TRUE(fake.ok());
  fake.devices("mlx5_0,mlx5_1");
  auto source = make_verbs_source(FAKE_IBVERBS_LIBRARY, dev.path().string());
  ASSERT_TRUE(verbs_source_loaded(*source));
  const unsigned long opened_before = fake.count("open");
  EXPECT_TRUE(source->sync({"mlx5_0", "mlx5_1"}).empty());
  EXPECT_EQ(fake.count("open") - opened_before, 2u);
  EXPECT_EQ(source->state_changes("mlx5_0", 1), 0u);

  // A flap of port 1: down then up. A LID change is not a state change.
  ASSERT_TRUE(fake.event("mlx5_0", IBV_EVENT_PORT_ERR, 1));
  ASSERT_TRUE(fake.event("mlx5_0", IBV_EVENT_LID_CHANGE, 1));
  ASSERT_TRUE(fake.event("mlx5_0", IBV_EVENT_PORT_ACTIVE, 1));
  EXPECT_TRUE(Eventually([&] { return source->state_changes("mlx5_0", 1) == 2u; }));
  EXPECT_TRUE(Eventually([&] { return fake.count("acked") >= 3; }));  // every event acked
  EXPECT_EQ(source->state_changes("mlx5_0", 2), 0u);
  EXPECT_EQ(source->state_changes("mlx5_1", 1), 0u);

  // mlx5_1 goes fatal (a firmware reset): no value until it is opened again
  // at the next sync, counting afresh.
  ASSERT_TRUE(fake.event("mlx5_1", IBV_EVENT_DEVICE_FATAL, 0));
  EXPECT_TRUE(Eventually([&] { return !source->state_changes("mlx5_1", 1).has_value(); }));
  const unsigned long opened = fake.count("open");
  EXPECT_TRUE(source->sync({"mlx5_0", "mlx5_1"}).empty());
  EXPECT_EQ(fake.count("open"), opened + 1);
  EXPECT_EQ(source->state_changes("mlx5_1", 1), 0u);
  EXPECT_EQ(source->state_changes("mlx5_0", 1), 2u);  // the healthy device kept its count

  // mlx5_1 leaves: closed. mlx5_2 cannot be opened: counted once, not retried.
  fake.fail_open("mlx5_2");
  fake.devices("mlx5_0,mlx5_2");
  const unsigned long closed = fake.count("close");
  EXPECT_EQ(source->sync({"mlx5_0", "mlx5_2"}),
            (std::vector<VerbsFailure>{
                {"mlx5_2", "no verbs device of that name, or no permission to open it"}}));
  EXPECT_EQ(fake.count("close"), closed + 1);
  EXPECT_FALSE(source->state_changes("mlx5_1", 1).has_value());
  EXPECT_FALSE(source->state_changes("mlx5_2", 1).has_value());
  const unsigned long attempts = fake.count("open");
  EXPECT_TRUE(source->sync({"mlx5_0", "mlx5_2"}).empty());
  EXPECT_EQ(fake.count("open"), attempts);

  // The source closes what it holds.
  source.reset();
  EXPECT_EQ(fake.count("close"), fake.count("open") - fake.count("open_failed"));
}

int Threads() {
  std::string status = testing::ReadFile("/proc/self/status");
  auto at = status.find("Threads:");
  return at == std::string::npos ? -1 : std::stoi(status.substr(at + 8));
}

TEST(VerbsSourceWithLibrary, OneEventThreadForEveryDevice) {
  // 40 devices (SR-IOV functions are RDMA devices too) cost one thread, not
  // forty: the unit runs with TasksMax.
  testing::TempDir dev;
  Fake fake;
  ASSERT_TRUE(fake.ok());
  std::string names;
  std::vector<std::string> list;
  for (int i = 0; i < 40; ++i) {
    list.push_back("mlx5_" + std::to_string(100 + i));
    names += list.back() + ",";
  }
  fake.devices(names.c_str());
  {
    // Warm-up: a sanitizer's runtime starts a thread of its own the first
    // time threads are made; it must not count against the source.
    auto warm = make_verbs_source(FAKE_IBVERBS_LIBRARY, dev.path().string());
    warm->sync({list.front()});
  }
  const int before = Threads();
  auto source = make_verbs_source(FAKE_IBVERBS_LIBRARY, dev.path().string());
  EXPECT_TRUE(source->sync(list).empty());
  EXPECT_EQ(Threads(), before + 1);
  ASSERT_TRUE(fake.event("mlx5_139", IBV_EVENT_PORT_ERR, 1));
  EXPECT_TRUE(Eventually([&] { return source->state_changes("mlx5_139", 1) == 1u; }));
  EXPECT_EQ(source->state_changes("mlx5_100", 1), 0u);
  source.reset();
  // Joined; its task may stay listed in /proc/self/task a moment longer.
  EXPECT_TRUE(Eventually([&] { return Threads() == before; }, 2s)) << Threads();
}

}  // namespace
}  // namespace nodewatch::interconnect

namespace nodewatch::interconnect {
namespace {

TEST(VerbsLibraryVersion, TheFileNameGivesRdmaCoresVersion) {
  EXPECT_EQ(rdma_core_version_of("libibverbs.so.1.14.44.0"), "44.0");
  EXPECT_EQ(rdma_core_version_of("libibverbs.so.1.1.17.1"), "17.1");
  EXPECT_EQ(rdma_core_version_of("libibverbs.so.1"), "");
  EXPECT_EQ(rdma_core_version_of("libibverbs.so.1.14."), "");
  EXPECT_EQ(rdma_core_version_of("libfake_ibverbs.so"), "");
  EXPECT_EQ(rdma_core_version_of("libibverbs.so.1.x.44.0"), "");
}

// The real libibverbs of this machine (Debian's libibverbs1, a build
// dependency): the version its file name gives is the package's upstream
// version, as dpkg knows it. (Run alone, as ctest runs each test: in a
// process where the fake, whose soname is the same, was loaded first,
// dlopen gives the fake.)
TEST(VerbsLibraryVersion, DebiansLibibverbsSaysItsPackagesVersion) {
  testing::TempDir dev;  // stands in for /dev/infiniband
  auto source = make_verbs_source("libibverbs.so.1", dev.path().string());
  if (!verbs_source_loaded(*source)) GTEST_SKIP() << "libibverbs.so.1 does not load here";
  FILE* p = ::popen("dpkg-query -W -f='${Version}' libibverbs1 2>/dev/null", "r");
  char buf[64] = {};
  const std::size_t n = p != nullptr ? std::fread(buf, 1, sizeof buf - 1, p) : 0;
  if (p != nullptr) ::pclose(p);
  std::string package(buf, n);
  if (package.empty()) GTEST_SKIP() << "dpkg does not know libibverbs1";
  // "44.0-2" -> "44.0"
  EXPECT_EQ(source->library_version(), package.substr(0, package.find('-')));
}

}  // namespace
}  // namespace nodewatch::interconnect
