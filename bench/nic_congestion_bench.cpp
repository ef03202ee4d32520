// The nic collector's driver statistics on 8 ConnectX-7 ports: the
// counters that tell congestion apart (the default allow-list) against the
// allow-list before them, in the same run, over a kernel source that serves
// tests/fixtures/nic/ethtool/mlx5_cx7-6.17.stats for each port (its values
// moving between collections, as a busy port's do). What the ratio shows is
// the cost of the selection, the wrap accumulation, the priority filter and
// the series the larger set adds, not the ioctls (the real ones are
// nic_bench's).
//
// Run:
//   cmake -S . -B build-bench -G Ninja -DCMAKE_BUILD_TYPE=Release -DNODEWATCH_BUILD_BENCH=ON
//   ninja -C build-bench nic_congestion_bench && build-bench/bench/nic_congestion_bench

#include <benchmark/benchmark.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "nic/nic_collector.hpp"
#include "nic/nic_kernel.hpp"
#include "ratio_reporter.hpp"

namespace nodewatch {
namespace {

using nic::Dump;
using nic::Status;

constexpr int kPorts = 8;

struct Listing {
  std::vector<std::string> names;
  std::vector<std::uint64_t> values;
};

Listing load_listing() {
  std::ifstream in(std::string(NODEWATCH_FIXTURES_DIR) + "/nic/ethtool/mlx5_cx7-6.17.stats");
  Listing l;
  std::string line;
  while (std::getline(in, line)) {
    std::size_t colon = line.rfind(": ");
    if (colon == std::string::npos) continue;
    std::size_t start = line.find_first_not_of(' ');
    l.names.push_back(line.substr(start, colon - start));
    l.values.push_back(std::stoull(line.substr(colon + 2)));
  }
  return l;
}

// Eight ConnectX-7 ports, each with the fixture's statistics; every
// GSTATS moves each value on by its index (busy counters).
class Cx7Source final : public nic::KernelSource {
 public:
  Cx7Source() : listing_(load_listing()) {
    for (int i = 0; i < kPorts; ++i) {
      nic::LinkRecord l;
      l.ifindex = 10 + i;
      l.name = "ens" + std::to_string(i) + "f0np0";
      l.mac = "0c:42:a1:00:00:0" + std::to_string(i);
      l.operstate = 6;
      l.carrier = 1;
      l.mtu = 4200;
      links_.push_back(l);
    }
  }
  Dump<nic::LinkRecord> dump_links() override { return {links_, 0}; }
  Dump<nic::QdiscRecord> dump_qdiscs() override { return {}; }
  Status driver_info(const std::string&, nic::DriverInfo* out) override {
    *out = {"mlx5_core", "28.39.1002 (MT_0000000834)", "0000:17:00.0"};
    return Status::kOk;
  }
  Status link_speed(const std::string&, std::optional<std::uint32_t>* mbps) override {
    *mbps = 400000;
    return Status::kOk;
  }
  Status stats_count(const std::string&, std::uint32_t* count) override {
    *count = static_cast<std::uint32_t>(listing_.names.size());
    return Status::kOk;
  }
  Status stats_names(const std::string&, std::uint32_t, std::vector<std::string>* names) override {
    *names = listing_.names;
    return Status::kOk;
  }
  Status stats_values(const std::string&, std::uint32_t,
                      std::vector<std::uint64_t>* values) override {
    for (std::size_t i = 0; i < listing_.values.size(); ++i) listing_.values[i] += i;
    *values = listing_.values;
    return Status::kOk;
  }
  Status pause_stats(Dump<nic::PauseStats>*) override { return Status::kUnsupported; }
  Status fec_stats(Dump<nic::FecStats>*) override { return Status::kUnsupported; }

 private:
  Listing listing_;
  std::vector<nic::LinkRecord> links_;
};

// The allow-list before the congestion counters (as of the previous
// release), spelled out here: the baseline.
const std::vector<std::string> kPreviousDefaults = {
    R"((rx|tx)_prio[0-7]_pause(_duration)?)",
    R"((rx|tx)_pause_ctrl_phy)",
    R"(tx_pause_storm_(warning|error)_events)",
    R"((rx|tx)_discards_phy)",
    R"(rx_prio[0-7]_discards)",
    R"(rx_out_of_buffer)",
    R"(rx_(crc_errors|symbol_err|pcs_symbol_err)_phy)",
    R"((rx|tx)_priority_[0-7]_xoff\.nic)",
    R"(link_xoff_(rx|tx)\.nic)",
    R"(rx_dropped\.nic)",
    R"(tx_dropped_link_down\.nic)",
    R"(rx_crc_errors\.nic)",
};

void collect_loop(benchmark::State& state, nic::NicOptions o) {
  o.qdiscs = false;
  o.protocol_statistics = false;
  nic::NicCollector c(Roots{}, o, std::make_unique<Cx7Source>());
  std::size_t series = 0;
  // As the scheduler collects: the series cache kept from one collection
  // to the next.
  SeriesCache cache;
  for (auto _ : state) {
    MetricSink sink(c.metrics(), cache);
    c.collect({std::chrono::steady_clock::now() + std::chrono::seconds(10), nullptr}, sink);
    std::string text = sink.render();
    benchmark::DoNotOptimize(text.data());
    series = sink.sample_count();
  }
  state.counters["series"] = static_cast<double>(series);
}

void BM_Nic_8Cx7_PreviousDefaults(benchmark::State& state) {
  nic::NicOptions o;
  o.driver_counters = kPreviousDefaults;
  collect_loop(state, o);
}
BENCHMARK(BM_Nic_8Cx7_PreviousDefaults)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_Nic_8Cx7_Defaults(benchmark::State& state) {
  collect_loop(state, nic::NicOptions{});
}
BENCHMARK(BM_Nic_8Cx7_Defaults)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
}  // namespace nodewatch

int main(int argc, char** argv) {
  return nodewatch::bench::run_with_ratios(argc, argv, [](const auto& r) {
    r.print_ratios("BM_Nic_8Cx7_PreviousDefaults",
                   {{"8 ConnectX-7 ports, the congestion counters", "BM_Nic_8Cx7_Defaults"}});
  });
}
