// The floor of a collection's reads: the files one collection reads every
// cycle, each through a descriptor opened once and read with pread at
// offset 0 until the end of the file, nothing parsed, nothing emitted.
// bench/collection_cost.sh gives it the file list of each fixture and
// divides a collection's measured CPU time by this floor.
//
// Usage: read_floor [--rounds N] FILE...   (or the files one per line on stdin)
// Prints: "<files> files, <bytes> bytes per round, <ns> ns CPU per round"
//
// The floor of a collection that reads nothing: one wake-up from idle.
// Usage: read_floor --wakes N --period-ms P
// Prints: "<ns> ns CPU per wake; <ns> ns CPU per wake with a hand-off;
// <ns> ns CPU per look that finds nothing, first after a wake"
// (the first: one thread sleeping P ms, N times; the second: the same
// thread handing a job to a second thread at each wake and waiting for
// its answer, the shape of a collection on a worker; the third: the same
// thread's CPU in one openat of a directory that is not there, under
// /sys/class, the first thing it does after each wake, as an empty
// collection's look for its devices: what the least a collection can do
// costs once the caches have gone cold).

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

double cpu_ns(clockid_t clock = CLOCK_PROCESS_CPUTIME_ID) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
}

// CPU per wake of a thread sleeping `period`, `n` times; with `hand_off`,
// each wake also hands a job to a second thread and waits for its answer.
double wake_ns(long n, std::chrono::milliseconds period, bool hand_off) {
  std::mutex mu;
  std::condition_variable cv;
  int state = 0;  // 1: a job for the second thread; 2: its answer
  bool quit = false;
  std::thread second;
  if (hand_off)
    second = std::thread([&] {
      std::unique_lock lock(mu);
      for (;;) {
        cv.wait(lock, [&] { return state == 1 || quit; });
        if (quit) return;
        state = 2;
        cv.notify_all();
      }
    });
  auto next = std::chrono::steady_clock::now();
  const double t0 = cpu_ns();
  for (long i = 0; i < n; ++i) {
    next += period;
    std::this_thread::sleep_until(next);
    if (!hand_off) continue;
    std::unique_lock lock(mu);
    state = 1;
    cv.notify_all();
    cv.wait(lock, [&] { return state == 2; });
    state = 0;
  }
  const double per = (cpu_ns() - t0) / static_cast<double>(n);
  if (hand_off) {
    {
      std::lock_guard lock(mu);
      quit = true;
    }
    cv.notify_all();
    second.join();
  }
  return per;
}

// Thread CPU of one failed openat, the first call after each of `n` sleeps
// of `period`.
double cold_look_ns(long n, std::chrono::milliseconds period) {
  const char* path = "/sys/class/nodewatch-absent";
  auto next = std::chrono::steady_clock::now();
  double total = 0;
  for (long i = 0; i < n; ++i) {
    next += period;
    std::this_thread::sleep_until(next);
    const double t0 = cpu_ns(CLOCK_THREAD_CPUTIME_ID);
    const int fd = ::open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    total += cpu_ns(CLOCK_THREAD_CPUTIME_ID) - t0;
    if (fd >= 0) ::close(fd);
  }
  return total / static_cast<double>(n);
}

}  // namespace

int main(int argc, char** argv) {
  long rounds = 2000;
  long wakes = 0;
  long period_ms = 100;
  std::vector<std::string> paths;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--rounds" && i + 1 < argc)
      rounds = std::strtol(argv[++i], nullptr, 10);
    else if (a == "--wakes" && i + 1 < argc)
      wakes = std::strtol(argv[++i], nullptr, 10);
    else if (a == "--period-ms" && i + 1 < argc)
      period_ms = std::strtol(argv[++i], nullptr, 10);
    else
      paths.push_back(a);
  }
  if (wakes > 0) {
    if (period_ms <= 0) {
      std::fprintf(stderr, "read_floor: --period-ms must be positive\n");
      return 2;
    }
    const auto period = std::chrono::milliseconds(period_ms);
    const double alone = wake_ns(wakes, period, false);
    const double handed = wake_ns(wakes, period, true);
    const double look = cold_look_ns(wakes, period);
    std::printf(
        "%.0f ns CPU per wake; %.0f ns CPU per wake with a hand-off; %.0f ns CPU per look that "
        "finds nothing, first after a wake\n",
        alone, handed, look);
    return 0;
  }
  if (paths.empty())
    for (std::string line; std::getline(std::cin, line);)
      if (!line.empty()) paths.push_back(line);
  if (paths.empty() || rounds <= 0) {
    std::fprintf(stderr, "usage: read_floor [--rounds N] FILE... (or the files on stdin)\n");
    return 2;
  }
  std::vector<int> fds;
  for (const std::string& p : paths) {
    int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      std::perror(p.c_str());
      return 1;
    }
    fds.push_back(fd);
  }
  std::vector<char> buf(1 << 20);
  long bytes = 0;
  auto round = [&] {
    long n = 0;
    for (int fd : fds) {
      off_t off = 0;
      for (;;) {
        ssize_t r = ::pread(fd, buf.data(), buf.size(), off);
        if (r <= 0) break;
        off += r;
        n += r;
      }
    }
    return n;
  };
  for (int i = 0; i < 50; ++i) bytes = round();  // warm the caches
  const double t0 = cpu_ns();
  for (long i = 0; i < rounds; ++i) round();
  const double per_round = (cpu_ns() - t0) / static_cast<double>(rounds);
  std::printf("%zu files, %ld bytes per round, %.0f ns CPU per round\n", fds.size(), bytes,
              per_round);
  for (int fd : fds) ::close(fd);
  return 0;
}
