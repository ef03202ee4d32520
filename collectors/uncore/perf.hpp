#pragma once
// The seam between the uncore collector and perf_event_open(2): counting
// events opened per CPU, with no sampling, read with the time they were
// enabled and the time they ran on the PMU (PERF_FORMAT_TOTAL_TIME_ENABLED
// | _RUNNING), so that a counter the kernel multiplexes is seen as such.
// Tests put a scripted one in its place; the system's is the kernel.

#include <cstdint>

namespace nodewatch::uncore {

struct PerfReading {
  std::uint64_t value = 0;
  std::uint64_t enabled_ns = 0;
  std::uint64_t running_ns = 0;
};

class PerfApi {
 public:
  virtual ~PerfApi() = default;
  // A counting event of PMU `type` with `config` (config, config1,
  // config2) on `cpu`, for every process (pid -1): its descriptor, or -1
  // with `*err` (EACCES or EPERM: no CAP_PERFMON and
  // perf_event_paranoid > 0; ENOENT/EINVAL: the PMU refuses the event;
  // ENODEV: the CPU is offline).
  virtual int open(std::uint32_t type, const std::uint64_t (&config)[3], int cpu, int* err) = 0;
  // False with `*err` when the descriptor cannot be read (the PMU went).
  virtual bool read(int fd, PerfReading* out, int* err) = 0;
  virtual void close(int fd) = 0;
};

// The kernel's: syscall(SYS_perf_event_open), read(2), close(2).
PerfApi& system_perf();

}  // namespace nodewatch::uncore
