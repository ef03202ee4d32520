#include "uncore/perf.hpp"

#include <linux/perf_event.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace nodewatch::uncore {
namespace {

class SystemPerf final : public PerfApi {
 public:
  int open(std::uint32_t type, const std::uint64_t (&config)[3], int cpu, int* err) override {
    perf_event_attr attr;
    std::memset(&attr, 0, sizeof attr);
    attr.size = sizeof attr;
    attr.type = type;
    attr.config = config[0];
    attr.config1 = config[1];
    attr.config2 = config[2];
    attr.read_format = PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING;
    // Counting from the open on, for every process on the CPU: no
    // sampling, no inheritance, nothing excluded (uncore PMUs refuse the
    // exclude_* bits).
    const long fd = ::syscall(SYS_perf_event_open, &attr, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC);
    if (fd < 0) {
      *err = errno;
      return -1;
    }
    return static_cast<int>(fd);
  }

  bool read(int fd, PerfReading* out, int* err) override {
    std::uint64_t words[3] = {0, 0, 0};
    const ssize_t n = ::read(fd, words, sizeof words);
    if (n != static_cast<ssize_t>(sizeof words)) {
      *err = n < 0 ? errno : EIO;
      return false;
    }
    out->value = words[0];
    out->enabled_ns = words[1];
    out->running_ns = words[2];
    return true;
  }

  void close(int fd) override { ::close(fd); }
};

}  // namespace

PerfApi& system_perf() {
  static SystemPerf perf;
  return perf;
}

}  // namespace nodewatch::uncore
