// Storage collector cost: the held-descriptor reads, the NFS part and the
// probes.
//
//  - Held descriptors: collect() over the storage fixture (diskstats,
//    mountstats, five selected devices' sysfs facts and nr_requests) with
//    the collector's max_held at 0 (every file opened, read and closed each
//    collection: before the sources layer) and at its default (diskstats,
//    mountstats and nr_requests read with one pread on a held descriptor),
//    in the same process; then the same over this machine's own /proc and
//    /sys, where the kernel generates each file on every read. The ratio is
//    held / opened (below 1: the held reads are cheaper).
//  - NFS: a mountstats file with 20 NFS mounts (the fixture's NFSv3 and
//    NFSv4.1 blocks, alternately, at 20 mount points). The collect() reads,
//    parses, selects the default operations and emits them (and renders the
//    text); the baseline reads the same file and does nothing else. The
//    ratio is what parsing and emitting add to the read the kernel makes us
//    do anyway.
//  - Probes: collect() over the fixture's diskstats with 4 probes configured
//    (their threads running every second on temporary directories) against
//    the same collect() without probes: what copying the probes' state
//    under their mutexes and emitting their histograms adds.
//
// Run: cmake -S . -B build-bench -G Ninja -DCMAKE_BUILD_TYPE=Release -DNODEWATCH_BUILD_BENCH=ON
//      ninja -C build-bench storage_bench && build-bench/bench/storage_bench

#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "ratio_reporter.hpp"
#include "storage/mountstats.hpp"
#include "storage/storage_collector.hpp"

namespace nodewatch {
namespace {

namespace fs = std::filesystem;
const fs::path kFixtures = fs::path(NODEWATCH_FIXTURES_DIR) / "storage";

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

CollectContext Context() {
  return {std::chrono::steady_clock::now() + std::chrono::seconds(10), nullptr};
}

// A scratch procfs with an empty diskstats and 20 NFS mounts.
struct NfsTree {
  fs::path root;
  NfsTree() {
    std::string tmpl = (fs::temp_directory_path() / "storage-bench-XXXXXX").string();
    root = ::mkdtemp(tmpl.data());
    fs::create_directories(root / "self");
    std::ofstream(root / "diskstats") << "";
    const std::string blocks[] = {read_text(kFixtures / "mountstats" / "nfs3-tcp.txt"),
                                  read_text(kFixtures / "mountstats" / "nfs41-tcp.txt")};
    const std::string mountpoints[] = {"/mnt/datasets", "/mnt/checkpoints"};
    std::string text;
    for (int i = 0; i < 20; ++i) {
      std::string b = blocks[i % 2];
      std::string mp = mountpoints[i % 2];
      b.replace(b.find(mp), mp.size(), mp + std::to_string(i));
      text += b;
    }
    std::ofstream(root / "self" / "mountstats") << text;
  }
  ~NfsTree() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
};

NfsTree& Tree() {
  static NfsTree tree;
  return tree;
}

void BM_Nfs20Mounts_ReadFileOnly(benchmark::State& state) {
  std::string path = (Tree().root / "self" / "mountstats").string();
  std::string buf(1 << 20, '\0');
  std::size_t bytes = 0;
  for (auto _ : state) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    bytes = 0;
    for (ssize_t n; (n = ::read(fd, buf.data() + bytes, buf.size() - bytes)) > 0;) {
      bytes += static_cast<std::size_t>(n);
    }
    ::close(fd);
    benchmark::DoNotOptimize(buf.data());
  }
  state.counters["bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_Nfs20Mounts_ReadFileOnly)->Unit(benchmark::kMicrosecond);

void BM_Nfs20Mounts_ParseOnly(benchmark::State& state) {
  std::string text = read_text(Tree().root / "self" / "mountstats");
  for (auto _ : state) {
    storage::MountstatsResult r = storage::parse_mountstats(text);
    benchmark::DoNotOptimize(r.mounts.data());
  }
}
BENCHMARK(BM_Nfs20Mounts_ParseOnly)->Unit(benchmark::kMicrosecond);

void BM_Nfs20Mounts_CollectParseEmitRender(benchmark::State& state) {
  storage::StorageCollector c(Roots{kFixtures / "sys", Tree().root}, storage::StorageOptions{});
  std::size_t series = 0;
  for (auto _ : state) {
    MetricSink sink(c.metrics());
    c.collect(Context(), sink);
    std::string text = sink.render();
    benchmark::DoNotOptimize(text.data());
    series = sink.sample_count();
  }
  state.counters["series"] = static_cast<double>(series);
}
BENCHMARK(BM_Nfs20Mounts_CollectParseEmitRender)->Unit(benchmark::kMicrosecond);

// One collect() per iteration (no rendering: the reads are what differ).
void CollectOnly(benchmark::State& state, const Roots& roots, std::size_t max_held) {
  storage::StorageCollector c(roots, storage::StorageOptions{}, "bench", {}, max_held);
  std::size_t series = 0;
  for (auto _ : state) {
    MetricSink sink(c.metrics());
    c.collect(Context(), sink);
    series = sink.sample_count();
  }
  state.counters["series"] = static_cast<double>(series);
  state.counters["held"] = static_cast<double>(c.held_descriptors());
}

const Roots kFixtureRoots{kFixtures / "sys", kFixtures / "proc"};

void BM_Storage_Fixture_Opened(benchmark::State& state) {
  CollectOnly(state, kFixtureRoots, 0);
}
BENCHMARK(BM_Storage_Fixture_Opened)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_Storage_Fixture_Held(benchmark::State& state) {
  CollectOnly(state, kFixtureRoots, storage::kMaxHeldDescriptors);
}
BENCHMARK(BM_Storage_Fixture_Held)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_Storage_ThisMachine_Opened(benchmark::State& state) {
  CollectOnly(state, Roots{}, 0);
}
BENCHMARK(BM_Storage_ThisMachine_Opened)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_Storage_ThisMachine_Held(benchmark::State& state) {
  CollectOnly(state, Roots{}, storage::kMaxHeldDescriptors);
}
BENCHMARK(BM_Storage_ThisMachine_Held)->Unit(benchmark::kMicrosecond)->UseRealTime();

void CollectWithProbes(benchmark::State& state, int probes) {
  std::vector<fs::path> dirs;
  storage::StorageOptions o;
  o.mountstats = "absent/mountstats";  // the block-device part and the probes only
  for (int i = 0; i < probes; ++i) {
    std::string tmpl = (fs::temp_directory_path() / "storage-bench-probe-XXXXXX").string();
    dirs.emplace_back(::mkdtemp(tmpl.data()));
    storage::ProbeConfig pc;
    pc.path = dirs.back().string();
    pc.operations = {storage::ProbeOp::kStat, storage::ProbeOp::kWrite, storage::ProbeOp::kFsync,
                     storage::ProbeOp::kRead};
    pc.interval = std::chrono::seconds(1);
    pc.timeout = std::chrono::seconds(1);
    o.probes.push_back(pc);
  }
  {
    storage::StorageCollector c(Roots{kFixtures / "sys", kFixtures / "proc"}, o, "bench");
    std::size_t series = 0;
    for (auto _ : state) {
      MetricSink sink(c.metrics());
      c.collect(Context(), sink);
      std::string text = sink.render();
      benchmark::DoNotOptimize(text.data());
      series = sink.sample_count();
    }
    state.counters["series"] = static_cast<double>(series);
  }
  for (const fs::path& d : dirs) {
    std::error_code ec;
    fs::remove_all(d, ec);
  }
}

void BM_Storage_Collect_NoProbes(benchmark::State& state) {
  CollectWithProbes(state, 0);
}
BENCHMARK(BM_Storage_Collect_NoProbes)->Unit(benchmark::kMicrosecond);

void BM_Storage_Collect_4Probes(benchmark::State& state) {
  CollectWithProbes(state, 4);
}
BENCHMARK(BM_Storage_Collect_4Probes)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace nodewatch

int main(int argc, char** argv) {
  return nodewatch::bench::run_with_ratios(argc, argv, [](const auto& r) {
    // What holding the descriptors saves (ratio below 1) or costs.
    r.print_ratios("BM_Storage_Fixture_Opened",
                   {{"storage fixture, held descriptors", "BM_Storage_Fixture_Held"}});
    r.print_ratios(
        "BM_Storage_ThisMachine_Opened",
        {{"this machine's /proc and /sys, held descriptors", "BM_Storage_ThisMachine_Held"}});
  });
}
