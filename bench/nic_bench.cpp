// nic collector cost: one collection over 200 veth interfaces in a network
// namespace that the benchmark creates (and deletes on exit), against a
// baseline in the same process: a bare RTM_GETLINK dump of the same
// namespace over a raw netlink socket, read to the end with no parsing.
// The ratio collect ÷ baseline is what parsing, the qdisc dump, the ethtool
// calls per interface and the exposition add to the one dump.
//
// Needs root and iproute2. Run:
//   cmake -S . -B build-bench -G Ninja -DCMAKE_BUILD_TYPE=Release -DNODEWATCH_BUILD_BENCH=ON
//   ninja -C build-bench nic_bench && build-bench/bench/nic_bench

#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "nic/nic_collector.hpp"

namespace nodewatch {
namespace {

constexpr int kPairs = 100;  // 200 veth interfaces

std::string g_netns;

CollectContext Context() {
  return {std::chrono::steady_clock::now() + std::chrono::seconds(10), nullptr};
}

// The collector as the daemon runs it, selecting the bench's interfaces.
void BM_Nic_Collect_200Veth(benchmark::State& state) {
  nic::NicOptions o;
  o.interfaces.include = "^nwb";
  o.interfaces.exclude = "";
  nic::NicCollector c(Roots{}, o);
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
BENCHMARK(BM_Nic_Collect_200Veth)->Unit(benchmark::kMicrosecond)->UseRealTime();

// The same, links only (no qdisc dump, no ethtool): the dump and its parsing.
void BM_Nic_Collect_200Veth_LinksOnly(benchmark::State& state) {
  nic::NicOptions o;
  o.interfaces.include = "^nwb";
  o.interfaces.exclude = "";
  o.qdiscs = false;
  o.driver_statistics = false;
  o.protocol_statistics = false;
  nic::NicCollector c(Roots{}, o);
  for (auto _ : state) {
    MetricSink sink(c.metrics());
    c.collect(Context(), sink);
    std::string text = sink.render();
    benchmark::DoNotOptimize(text.data());
  }
}
BENCHMARK(BM_Nic_Collect_200Veth_LinksOnly)->Unit(benchmark::kMicrosecond)->UseRealTime();

// The baseline: one RTM_GETLINK dump, the bytes read and thrown away.
void BM_Baseline_BareLinkDump(benchmark::State& state) {
  int fd = ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  if (fd < 0) {
    state.SkipWithError("no netlink socket");
    return;
  }
  std::vector<char> buf(1 << 16);
  std::uint32_t seq = 1;
  std::size_t bytes = 0;
  for (auto _ : state) {
    struct {
      nlmsghdr h;
      ifinfomsg i;
    } req{};
    req.h.nlmsg_len = sizeof(req);
    req.h.nlmsg_type = RTM_GETLINK;
    req.h.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
    req.h.nlmsg_seq = ++seq;
    if (::send(fd, &req, sizeof(req), 0) < 0) {
      state.SkipWithError("send");
      break;
    }
    bool done = false;
    bytes = 0;
    while (!done) {
      ssize_t n = ::recv(fd, buf.data(), buf.size(), 0);
      if (n <= 0) break;
      bytes += static_cast<std::size_t>(n);
      for (auto* h = reinterpret_cast<nlmsghdr*>(buf.data()); NLMSG_OK(h, n);
           h = NLMSG_NEXT(h, n)) {
        if (h->nlmsg_type == NLMSG_DONE || h->nlmsg_type == NLMSG_ERROR) done = true;
      }
    }
  }
  state.counters["dump_bytes"] = static_cast<double>(bytes);
  ::close(fd);
}
BENCHMARK(BM_Baseline_BareLinkDump)->Unit(benchmark::kMicrosecond)->UseRealTime();

bool sh(const std::string& cmd) {
  return std::system((cmd + " >/dev/null 2>&1").c_str()) == 0;
}

}  // namespace
}  // namespace nodewatch

int main(int argc, char** argv) {
  using nodewatch::g_netns;
  using nodewatch::sh;
  g_netns = "nwbench-" + std::to_string(::getpid());
  if (::geteuid() != 0 || !sh("ip netns add " + g_netns)) {
    std::fprintf(stderr, "nic_bench: needs root and iproute2 (ip netns add failed)\n");
    return 1;
  }
  // 100 veth pairs, both ends in the namespace: 200 interfaces, each with a
  // default (noqueue) qdisc, all up.
  std::string batch = "/tmp/" + g_netns + ".batch";
  {
    std::ofstream b(batch);
    for (int i = 0; i < nodewatch::kPairs; ++i) {
      b << "link add nwb" << i << "a type veth peer name nwb" << i << "b\n";
      b << "link set nwb" << i << "a up\nlink set nwb" << i << "b up\n";
    }
  }
  bool ok = sh("ip -n " + g_netns + " -batch " + batch);
  std::remove(batch.c_str());
  int fd = ::open(("/var/run/netns/" + g_netns).c_str(), O_RDONLY | O_CLOEXEC);
  // The whole benchmark runs in the namespace: sockets opened from here on
  // belong to it.
  ok = ok && fd >= 0 && ::setns(fd, CLONE_NEWNET) == 0;
  if (fd >= 0) ::close(fd);
  int rc = 1;
  if (ok) {
    benchmark::Initialize(&argc, argv);
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    rc = 0;
  } else {
    std::fprintf(stderr, "nic_bench: could not set up the namespace\n");
  }
  sh("ip netns del " + g_netns);
  return rc;
}
