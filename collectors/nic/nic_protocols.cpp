#include "nic/nic_protocols.hpp"

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "nic/nic_metrics.hpp"
#include "nic/nic_parse.hpp"

namespace nodewatch::nic {
namespace {

// Node-level TCP/IP counters: metric, then the "Proto.Field" keys of
// /proc/net/snmp or netstat whose sum it is.
struct ProtocolMetric {
  const Family& family;
  std::array<std::string_view, 2> keys;
};

constexpr std::array<ProtocolMetric, 10> kProtocolMetrics = {{
    {families::kTcpRetransmittedSegmentsTotal, {"Tcp.RetransSegs", ""}},
    {families::kTcpTimeoutsTotal, {"TcpExt.TCPTimeouts", ""}},
    {families::kTcpSynRetransmitsTotal, {"TcpExt.TCPSynRetrans", ""}},
    {families::kTcpListenOverflowsTotal, {"TcpExt.ListenOverflows", ""}},
    {families::kTcpListenDropsTotal, {"TcpExt.ListenDrops", ""}},
    {families::kTcpReceiveQueueDropsTotal, {"TcpExt.TCPRcvQDrop", ""}},
    {families::kTcpInputErrorsTotal, {"Tcp.InErrs", ""}},
    {families::kUdpReceiveBufferErrorsTotal, {"Udp.RcvbufErrors", ""}},
    {families::kUdpInputErrorsTotal, {"Udp.InErrors", ""}},
    {families::kIpInputErrorsTotal, {"Ip.InHdrErrors", "Ip.InAddrErrors"}},
}};

// Every key of kProtocolMetrics, for the parser.
constexpr auto kWantedKeys = [] {
  std::array<std::string_view, 11> keys{};
  std::size_t n = 0;
  for (const ProtocolMetric& m : kProtocolMetrics)
    for (std::string_view k : m.keys)
      if (!k.empty()) keys[n++] = k;
  return keys;
}();

// /proc/net/netstat is about 4 KiB on a 6.x kernel.
constexpr std::size_t kMaxProcNetBytes = std::size_t{1} << 20;

}  // namespace

Protocols::Protocols(const Roots& roots, std::size_t max_held) : files_(roots.proc(), max_held) {}

std::vector<MetricDesc> Protocols::metric_descs() {
  std::vector<MetricDesc> d;
  for (const ProtocolMetric& m : kProtocolMetrics) d.push_back(describe(m.family));
  return d;
}

void Protocols::collect(MetricSink& out) {
  std::map<std::string, std::uint64_t, std::less<>> values;
  bool any = false;
  files_.begin_cycle();
  for (const std::string file : {"net/snmp", "net/netstat"}) {
    sources::Read r = files_.read(file, kMaxProcNetBytes);
    if (r.failed()) out.error("read_error", file, r.error_name());
    if (!r.ok()) continue;
    any = true;
    std::size_t malformed = 0;
    values.merge(parse_proc_net_pairs(r.text, &malformed, kWantedKeys));
    if (malformed > 0) out.error("parse_error", malformed);
  }
  files_.end_cycle();
  if (!any) return;
  for (const ProtocolMetric& m : kProtocolMetrics) {
    std::uint64_t sum = 0;
    bool found = true;
    for (std::string_view key : m.keys) {
      if (key.empty()) continue;
      auto it = values.find(key);
      if (it == values.end()) {
        found = false;
        break;
      }
      sum += it->second;
    }
    if (found) out.add(m.family, {}, static_cast<double>(sum));
  }
}

}  // namespace nodewatch::nic
