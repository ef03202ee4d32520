// Interconnect collector cost: one collection of a node with 8 HCAs x 1
// port (a generated ConnectX-6 Dx RoCE tree in a temporary directory: 21 PMA
// files in counters/, 32 hw_counters), as the scheduler runs it: collect(),
// render, deflate. Two cases: a collection between PMA reads (state, rate
// and hw_counters through held descriptors, PMA values re-emitted), and one
// that also reads the 21 PMA files of every port (every pma_interval). The
// first again without held descriptors (max_held = 0: open/read/close, as
// before the sources layer), and both with collect() alone.
// hw_counters come from sysfs: this machine has no RDMA netlink family.
//
// Baseline, in the same process: the same series, recorded once, only
// emitted, rendered and deflated. collect / baseline is what reading the
// devices adds. (On real hardware a PMA read is a firmware MAD per file,
// far slower than these tmpfs reads: that is why it has its own interval.)
//
// Run: cmake -S . -B build-bench -G Ninja -DCMAKE_BUILD_TYPE=Release -DNODEWATCH_BUILD_BENCH=ON
//      ninja -C build-bench interconnect_bench && build-bench/bench/interconnect_bench

#include <benchmark/benchmark.h>
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "exposition.hpp"
#include "interconnect/interconnect_collector.hpp"
#include "ratio_reporter.hpp"

namespace nodewatch {
namespace {

namespace fs = std::filesystem;

constexpr int kHcas = 8;

const char* const kPma[] = {"excessive_buffer_overrun_errors",
                            "link_downed",
                            "link_error_recovery",
                            "local_link_integrity_errors",
                            "multicast_rcv_packets",
                            "multicast_xmit_packets",
                            "port_rcv_constraint_errors",
                            "port_rcv_data",
                            "port_rcv_errors",
                            "port_rcv_packets",
                            "port_rcv_remote_physical_errors",
                            "port_rcv_switch_relay_errors",
                            "port_xmit_constraint_errors",
                            "port_xmit_data",
                            "port_xmit_discards",
                            "port_xmit_packets",
                            "port_xmit_wait",
                            "symbol_error",
                            "unicast_rcv_packets",
                            "unicast_xmit_packets",
                            "VL15_dropped"};
const char* const kHw[] = {"duplicate_request",
                           "implied_nak_seq_err",
                           "lifespan",
                           "local_ack_timeout_err",
                           "np_cnp_sent",
                           "np_ecn_marked_roce_packets",
                           "out_of_buffer",
                           "out_of_sequence",
                           "packet_seq_err",
                           "req_cqe_error",
                           "req_cqe_flush_error",
                           "req_remote_access_errors",
                           "req_remote_invalid_request",
                           "req_rnr_retries_exceeded",
                           "req_transport_retries_exceeded",
                           "resp_cqe_error",
                           "resp_cqe_flush_error",
                           "resp_local_length_error",
                           "resp_remote_access_errors",
                           "rnr_nak_retry_err",
                           "roce_adp_retrans",
                           "roce_adp_retrans_to",
                           "roce_slow_restart",
                           "roce_slow_restart_cnps",
                           "roce_slow_restart_trans",
                           "rp_cnp_handled",
                           "rp_cnp_ignored",
                           "rx_atomic_requests",
                           "rx_dct_connect",
                           "rx_icrc_encapsulated",
                           "rx_read_requests",
                           "rx_write_requests"};

void Write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text << "\n";
}

// The generated tree, removed at exit.
class Tree {
 public:
  Tree() {
    char tmpl[] = "/tmp/nodewatch-ib-bench-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    for (int i = 0; i < kHcas; ++i) {
      fs::path d = dir_ / "sys/class/infiniband" / ("mlx5_" + std::to_string(i));
      Write(d / "fw_ver", "22.39.1002");
      Write(d / "board_id", "MT_0000000359");
      Write(d / "hca_type", "MT4125");
      Write(d / "node_guid", "0c42:a103:0065:4a1" + std::to_string(i));
      fs::path p = d / "ports/1";
      Write(p / "state", "4: ACTIVE");
      Write(p / "phys_state", "5: LinkUp");
      Write(p / "rate", "200 Gb/sec (4X HDR)");
      Write(p / "link_layer", "Ethernet");
      Write(p / "gid_attrs/ndevs/0", "ens" + std::to_string(i) + "f0np0");
      std::uint64_t v = 1000 + static_cast<std::uint64_t>(i);
      for (const char* c : kPma) Write(p / "counters" / c, std::to_string(v += 7919));
      for (const char* c : kHw) Write(p / "hw_counters" / c, std::to_string(v += 104729));
    }
  }
  ~Tree() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  fs::path sys() const { return dir_ / "sys"; }

 private:
  fs::path dir_;
};

const Tree& GetTree() {
  static Tree t;
  return t;
}

CollectContext Context() {
  return {std::chrono::steady_clock::now() + std::chrono::seconds(10), nullptr};
}

// `max_held` 0: every value opened, read and closed (before the
// held-descriptor reads).
std::unique_ptr<interconnect::InterconnectCollector> Make(
    std::chrono::milliseconds pma, std::size_t max_held = interconnect::kMaxHeldFiles) {
  interconnect::IbOptions o;
  o.pma_interval = pma;
  return std::make_unique<interconnect::InterconnectCollector>(
      std::make_unique<interconnect::IbPorts>(
          Roots{GetTree().sys(), "/nonexistent"}, o,
          interconnect::make_disabled_hw_counter_source(),
          interconnect::make_verbs_source("libibverbs.so.1", "/nonexistent"),
          std::chrono::steady_clock::now, nullptr, max_held));
}

std::size_t CollectRenderDeflate(Collector& c) {
  MetricSink sink(c.metrics());
  c.collect(Context(), sink);
  auto rendered = make_rendered(sink.render());
  benchmark::DoNotOptimize(rendered->deflated().data());
  return sink.sample_count();
}

void BM_Interconnect_8Hca_Collect(benchmark::State& state) {
  auto c = Make(std::chrono::hours(1));
  CollectRenderDeflate(*c);  // opens the held descriptors, reads the PMA once
  std::size_t series = 0;
  for (auto _ : state) series = CollectRenderDeflate(*c);
  state.counters["series"] = static_cast<double>(series);
}
BENCHMARK(BM_Interconnect_8Hca_Collect)->Unit(benchmark::kMicrosecond)->UseRealTime();

// Before the held-descriptor reads: the same collection with state, rate
// and hw_counters opened, read and closed.
void BM_Interconnect_8Hca_Collect_OpenReadClose(benchmark::State& state) {
  auto c = Make(std::chrono::hours(1), 0);
  CollectRenderDeflate(*c);
  std::size_t series = 0;
  for (auto _ : state) series = CollectRenderDeflate(*c);
  state.counters["series"] = static_cast<double>(series);
}
BENCHMARK(BM_Interconnect_8Hca_Collect_OpenReadClose)->Unit(benchmark::kMicrosecond)->UseRealTime();

// collect() alone, after and before: what the reads cost without rendering.
void CollectOnly(benchmark::State& state, std::size_t max_held) {
  auto c = Make(std::chrono::hours(1), max_held);
  CollectRenderDeflate(*c);
  std::size_t series = 0;
  for (auto _ : state) {
    MetricSink sink(c->metrics());
    c->collect(Context(), sink);
    series = sink.sample_count();
  }
  state.counters["series"] = static_cast<double>(series);
}

void BM_Interconnect_8Hca_CollectOnly(benchmark::State& state) {
  CollectOnly(state, interconnect::kMaxHeldFiles);
}
BENCHMARK(BM_Interconnect_8Hca_CollectOnly)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_Interconnect_8Hca_CollectOnly_OpenReadClose(benchmark::State& state) {
  CollectOnly(state, 0);
}
BENCHMARK(BM_Interconnect_8Hca_CollectOnly_OpenReadClose)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

void BM_Interconnect_8Hca_CollectWithPmaRead(benchmark::State& state) {
  auto c = Make(std::chrono::milliseconds(0));  // PMA due every collection
  CollectRenderDeflate(*c);
  std::size_t series = 0;
  for (auto _ : state) series = CollectRenderDeflate(*c);
  state.counters["series"] = static_cast<double>(series);
}
BENCHMARK(BM_Interconnect_8Hca_CollectWithPmaRead)->Unit(benchmark::kMicrosecond)->UseRealTime();

// One sample of the rendered text: name, label values, value.
struct Sample {
  std::string name;
  std::vector<std::string> labels;
  double value;
};

std::vector<Sample> Record() {
  auto c = Make(std::chrono::hours(1));
  MetricSink sink(c->metrics());
  c->collect(Context(), sink);
  std::vector<Sample> out;
  std::string text = sink.render();
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.empty() || line[0] == '#') continue;
    Sample s;
    std::size_t brace = line.find('{');
    std::size_t space = line.rfind(' ');
    s.name = line.substr(0, std::min(brace, space));
    s.value = std::stod(line.substr(space + 1));
    // Label values contain no quotes or escapes here.
    for (std::size_t q = line.find('"'); q != std::string::npos && q < space;) {
      std::size_t close = line.find('"', q + 1);
      s.labels.push_back(line.substr(q + 1, close - q - 1));
      q = line.find('"', close + 1);
    }
    out.push_back(std::move(s));
  }
  return out;
}

// The baseline: the same series without reading anything.
void BM_Interconnect_8Hca_EmitOnly(benchmark::State& state) {
  std::vector<Sample> samples = Record();
  const MetricTable& table = interconnect::interconnect_metric_table();
  std::size_t series = 0;
  for (auto _ : state) {
    MetricSink sink(table);
    for (const Sample& s : samples) sink.add(s.name, s.labels, s.value);
    auto rendered = make_rendered(sink.render());
    benchmark::DoNotOptimize(rendered->deflated().data());
    series = sink.sample_count();
  }
  state.counters["series"] = static_cast<double>(series);
}
BENCHMARK(BM_Interconnect_8Hca_EmitOnly)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
}  // namespace nodewatch

int main(int argc, char** argv) {
  return nodewatch::bench::run_with_ratios(argc, argv, [](const auto& r) {
    r.print_ratios("BM_Interconnect_8Hca_EmitOnly",
                   {{"8 HCAs, between PMA reads", "BM_Interconnect_8Hca_Collect"},
                    {"8 HCAs, with the PMA read", "BM_Interconnect_8Hca_CollectWithPmaRead"}});
    // Held descriptors (after) against open/read/close (before).
    r.print_ratios("BM_Interconnect_8Hca_Collect_OpenReadClose",
                   {{"8 HCAs, held descriptors, one collection", "BM_Interconnect_8Hca_Collect"}});
    r.print_ratios(
        "BM_Interconnect_8Hca_CollectOnly_OpenReadClose",
        {{"8 HCAs, held descriptors, collect() only", "BM_Interconnect_8Hca_CollectOnly"}});
  });
}
