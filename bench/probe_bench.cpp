// What a storage probe cycle costs with its system calls made by a helper
// process (nodewatch/fs_helper.hpp), against the same calls made in the
// daemon's own thread, in the same run.
//
// One cycle is what a probe with every operation does (storage/probe.hpp):
// stat(); open(O_WRONLY), pwrite() of 4 KiB, fsync(), close(); open(O_RDONLY
// | O_DIRECT) (O_RDONLY and posix_fadvise(DONTNEED) where the file system
// refuses O_DIRECT), pread() of 4 KiB, close(). Measured:
//   - in process: the calls made directly (how probes worked before
//     helpers; the baseline);
//   - helper: the same calls through helper::Fs, one helper kept across
//     cycles (a probe's steady state): the baseline plus a socket round trip
//     per call;
//   - new helper: the same with a helper started for every cycle (a probe
//     right after its helper was abandoned: the launcher's fork and the
//     pidfd on top).
// Real time is what a cycle takes; the CPU column is the calling thread's,
// and helper_cpu_us the kept helper's own (from /proc/<pid>/schedstat), so
// that CPU + helper_cpu_us is what a cycle costs the node.
// Each on two file systems: /dev/shm (tmpfs, where the calls themselves
// cost least, so the ratio is the worst case) and the current directory's
// (a real disk's fsync dominates there).
//
// Run: cmake -S . -B build-bench -G Ninja -DCMAKE_BUILD_TYPE=Release -DNODEWATCH_BUILD_BENCH=ON
//      ninja -C build-bench probe_bench && build-bench/bench/probe_bench

#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>

#include "nodewatch/fs_helper.hpp"
#include "ratio_reporter.hpp"

namespace nodewatch {
namespace {

namespace fs = std::filesystem;
constexpr std::size_t kSize = 4096;

struct Scratch {
  explicit Scratch(const fs::path& under) {
    std::string tmpl = (under / "nodewatch-probe-bench-XXXXXX").string();
    dir = ::mkdtemp(tmpl.data()) != nullptr ? tmpl : std::string();
    file = dir + "/.nodewatch-probe-bench";
  }
  ~Scratch() {
    if (!dir.empty()) fs::remove_all(dir);
  }
  std::string dir;
  std::string file;
};

// Nanoseconds `pid` has run on a CPU (/proc/<pid>/schedstat, first field).
std::uint64_t on_cpu_ns(pid_t pid) {
  std::FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/schedstat").c_str(), "re");
  if (f == nullptr) return 0;
  unsigned long long ns = 0;
  if (std::fscanf(f, "%llu", &ns) != 1) ns = 0;
  std::fclose(f);
  return ns;
}

struct FreeDeleter {
  void operator()(char* p) const { std::free(p); }
};

// The baseline: the cycle's calls in this thread.
void InProcess(benchmark::State& state, const fs::path& under) {
  Scratch s(under);
  if (s.dir.empty()) {
    state.SkipWithError("no scratch directory");
    return;
  }
  std::unique_ptr<char, FreeDeleter> buf(static_cast<char*>(std::aligned_alloc(4096, kSize)));
  std::memset(buf.get(), 'n', kSize);
  int fd = ::open(s.file.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0 || ::pwrite(fd, buf.get(), kSize, 0) != static_cast<ssize_t>(kSize)) {
    state.SkipWithError("cannot create the probe file");
    return;
  }
  ::close(fd);
  bool direct = true;
  for (auto _ : state) {
    struct stat st {};
    benchmark::DoNotOptimize(::stat(s.file.c_str(), &st));
    fd = ::open(s.file.c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
    benchmark::DoNotOptimize(::pwrite(fd, buf.get(), kSize, 0));
    benchmark::DoNotOptimize(::fsync(fd));
    ::close(fd);
    fd = direct ? ::open(s.file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_DIRECT) : -1;
    if (fd < 0) {
      direct = false;
      fd = ::open(s.file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
      ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    }
    benchmark::DoNotOptimize(::pread(fd, buf.get(), kSize, 0));
    ::close(fd);
  }
}

// The same calls through a helper; `fresh`: a new helper every cycle.
void ThroughHelper(benchmark::State& state, const fs::path& under, bool fresh) {
  Scratch s(under);
  if (s.dir.empty()) {
    state.SkipWithError("no scratch directory");
    return;
  }
  const std::string content(kSize, 'n');
  auto d = [] { return helper::Deadline{helper::Clock::now() + std::chrono::seconds(10)}; };
  auto fsys = std::make_unique<helper::Fs>("bench:" + s.file);
  int h = -1;
  if (!fsys->open(s.file, O_WRONLY | O_CREAT, 0644, d(), &h).ok() ||
      !fsys->pwrite(h, content, 0, d()).ok() || !fsys->close(h, d()).ok()) {
    state.SkipWithError("cannot create the probe file through a helper");
    return;
  }
  bool direct = true;
  std::string got;
  const pid_t kept = fsys->pid();
  const std::uint64_t helper_ns_before = fresh ? 0 : on_cpu_ns(kept);
  for (auto _ : state) {
    if (fresh) fsys = std::make_unique<helper::Fs>("bench:" + s.file);
    bool ok = fsys->stat(s.file, d()).ok();
    ok = ok && fsys->open(s.file, O_WRONLY | O_NOFOLLOW, 0, d(), &h).ok();
    ok = ok && fsys->pwrite(h, content, 0, d()).ok();
    ok = ok && fsys->fsync(h, d()).ok();
    ok = ok && fsys->close(h, d()).ok();
    if (ok && direct) {
      helper::Answer a = fsys->open(s.file, O_RDONLY | O_NOFOLLOW | O_DIRECT, 0, d(), &h);
      if (a.answered() && a.err == EINVAL) direct = false;
      ok = a.ok() || !direct;
    }
    if (ok && !direct) {
      ok = fsys->open(s.file, O_RDONLY | O_NOFOLLOW, 0, d(), &h).ok() &&
           fsys->fadvise_dontneed(h, d()).ok();
    }
    ok = ok && fsys->pread(h, kSize, 0, d(), &got).ok();
    ok = ok && fsys->close(h, d()).ok();
    if (!ok) {
      state.SkipWithError("a helper call failed");
      return;
    }
  }
  if (!fresh && fsys->pid() == kept && state.iterations() > 0) {
    // The helper's own CPU time per cycle, which the CPU column (this
    // thread's) does not include.
    state.counters["helper_cpu_us"] = static_cast<double>(on_cpu_ns(kept) - helper_ns_before) /
                                      1e3 / static_cast<double>(state.iterations());
  }
}

const fs::path kShm = "/dev/shm";
const fs::path kHere = ".";

void BM_ProbeCycle_Tmpfs_InProcess(benchmark::State& s) {
  InProcess(s, kShm);
}
void BM_ProbeCycle_Tmpfs_Helper(benchmark::State& s) {
  ThroughHelper(s, kShm, false);
}
void BM_ProbeCycle_Tmpfs_NewHelper(benchmark::State& s) {
  ThroughHelper(s, kShm, true);
}
void BM_ProbeCycle_Disk_InProcess(benchmark::State& s) {
  InProcess(s, kHere);
}
void BM_ProbeCycle_Disk_Helper(benchmark::State& s) {
  ThroughHelper(s, kHere, false);
}
void BM_ProbeCycle_Disk_NewHelper(benchmark::State& s) {
  ThroughHelper(s, kHere, true);
}
BENCHMARK(BM_ProbeCycle_Tmpfs_InProcess)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_ProbeCycle_Tmpfs_Helper)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_ProbeCycle_Tmpfs_NewHelper)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_ProbeCycle_Disk_InProcess)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_ProbeCycle_Disk_Helper)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_ProbeCycle_Disk_NewHelper)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
}  // namespace nodewatch

int main(int argc, char** argv) {
  // Before any thread, as nodewatchd's main() does.
  nodewatch::helper::launcher_entry(argc, argv);  // a replacement launcher stays there
  std::string err = nodewatch::helper::start_launcher();
  if (!err.empty()) {
    std::fprintf(stderr, "no helper launcher: %s\n", err.c_str());
    return 1;
  }
  return nodewatch::bench::run_with_ratios(argc, argv, [](const auto& r) {
    r.print_ratios("BM_ProbeCycle_Tmpfs_InProcess",
                   {{"tmpfs, one helper kept", "BM_ProbeCycle_Tmpfs_Helper"},
                    {"tmpfs, a new helper every cycle", "BM_ProbeCycle_Tmpfs_NewHelper"}});
    r.print_ratios("BM_ProbeCycle_Disk_InProcess",
                   {{"disk, one helper kept", "BM_ProbeCycle_Disk_Helper"},
                    {"disk, a new helper every cycle", "BM_ProbeCycle_Disk_NewHelper"}});
  });
}
