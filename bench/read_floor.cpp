// The floor of a collection's reads: the files one collection reads every
// cycle, each through a descriptor opened once and read with pread at
// offset 0 until the end of the file, nothing parsed, nothing emitted.
// bench/collection_cost.sh gives it the file list of each fixture and
// divides a collection's measured CPU time by this floor.
//
// Usage: read_floor [--rounds N] FILE...   (or the files one per line on stdin)
// Prints: "<files> files, <bytes> bytes per round, <ns> ns CPU per round"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

namespace {

double cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
}

}  // namespace

int main(int argc, char** argv) {
  long rounds = 2000;
  std::vector<std::string> paths;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--rounds" && i + 1 < argc)
      rounds = std::strtol(argv[++i], nullptr, 10);
    else
      paths.push_back(a);
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
