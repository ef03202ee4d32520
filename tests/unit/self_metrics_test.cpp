// The daemon's own process_* figures when /proc/self cannot be read.

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "self_metrics.hpp"
#include "support/daemon_process.hpp"

// Under ASan or TSan (GCC says so by a macro, Clang by __has_feature).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define NODEWATCH_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define NODEWATCH_TEST_SANITIZED 1
#endif
#endif

namespace nodewatch {
namespace {

// While it lives, every descriptor this process may open is taken: the
// soft RLIMIT_NOFILE is lowered to just above the highest open descriptor
// and the free numbers below it filled, so that the next open() fails with
// EMFILE, as in a daemon that ran out of descriptors.
class AllDescriptorsTaken {
 public:
  AllDescriptorsTaken() {
    getrlimit(RLIMIT_NOFILE, &saved_);
    int highest = 2;
    for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd"))
      highest = std::max(highest, std::stoi(e.path().filename().string()));
    rlimit low = saved_;
    low.rlim_cur = static_cast<rlim_t>(highest) + 1;
    setrlimit(RLIMIT_NOFILE, &low);
    for (int fd; (fd = fcntl(0, F_DUPFD_CLOEXEC, 0)) >= 0;) taken_.push_back(fd);
  }
  ~AllDescriptorsTaken() {
    for (int fd : taken_) close(fd);
    setrlimit(RLIMIT_NOFILE, &saved_);
  }
  AllDescriptorsTaken(const AllDescriptorsTaken&) = delete;
  AllDescriptorsTaken& operator=(const AllDescriptorsTaken&) = delete;

 private:
  rlimit saved_{};
  std::vector<int> taken_;
};

double Figure(const std::string& body, const std::string& name) {
  auto v = testing::SampleValue(body, name);
  EXPECT_TRUE(v.has_value()) << name << " missing from:\n" << body;
  return v.value_or(-1);
}

// A counter that went back to 0 is a reset to Prometheus: with no
// descriptor left the figures are served as last read.
TEST(SelfMetrics, ProcessFiguresWithNoDescriptorLeftAreTheLastRead) {
#ifdef NODEWATCH_TEST_SANITIZED
  GTEST_SKIP() << "a sanitizer's runtime opens files of its own (/proc/self/maps) and "
                  "reports false errors with every descriptor taken";
#endif
  // Some CPU time, so that a cpu_seconds of 0 is not the figure read: 60 ms
  // of the process's own (a wall-clock spin on a loaded machine can get
  // less than the 10 ms tick /proc counts in).
  for (timespec t{}; ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t) == 0 &&
                     t.tv_sec * 1000 + t.tv_nsec / 1000000 < 60;) {
  }
  SelfMetrics self;
  const std::string before = self.render({}, nullptr);
  const double cpu = Figure(before, "process_cpu_seconds_total");
  const double rss = Figure(before, "process_resident_memory_bytes");
  const double fds = Figure(before, "process_open_fds");
  ASSERT_GT(cpu, 0);
  ASSERT_GT(rss, 0);
  ASSERT_GT(fds, 0);

  std::string during;
  {
    AllDescriptorsTaken full;
    const ProcessStats read = read_process_stats();
    ASSERT_FALSE(read.stat_read) << "/proc/self/stat was read: the descriptors were not all taken";
    ASSERT_FALSE(read.fds_read);
    during = self.render({}, nullptr);
  }
  EXPECT_GE(Figure(during, "process_cpu_seconds_total"), cpu);
  EXPECT_EQ(Figure(during, "process_resident_memory_bytes"), rss);
  EXPECT_EQ(Figure(during, "process_open_fds"), fds);

  const std::string after = self.render({}, nullptr);
  EXPECT_GE(Figure(after, "process_cpu_seconds_total"), cpu);
  EXPECT_GT(Figure(after, "process_open_fds"), 0);
}

}  // namespace
}  // namespace nodewatch
