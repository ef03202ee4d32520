#include "nic/nic_protocols.hpp"

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "nic/nic_parse.hpp"

namespace nodewatch::nic {
namespace {

// Node-level TCP/IP counters: metric, then the "Proto.Field" keys of
// /proc/net/snmp or netstat whose sum it is.
struct ProtocolMetric {
  std::string_view name;
  std::string_view help;
  std::array<std::string_view, 2> keys;
};

constexpr std::array<ProtocolMetric, 10> kProtocolMetrics = {{
    {"nodewatch_nic_tcp_retransmitted_segments_total",
     "TCP segments retransmitted (Tcp RetransSegs in /proc/net/snmp).",
     {"Tcp.RetransSegs", ""}},
    {"nodewatch_nic_tcp_timeouts_total",
     "TCP retransmission timeouts (TcpExt TCPTimeouts in /proc/net/netstat).",
     {"TcpExt.TCPTimeouts", ""}},
    {"nodewatch_nic_tcp_syn_retransmits_total",
     "TCP SYN and SYN-ACK retransmissions (TcpExt TCPSynRetrans).",
     {"TcpExt.TCPSynRetrans", ""}},
    {"nodewatch_nic_tcp_listen_overflows_total",
     "Connections dropped because a listen queue was full (TcpExt ListenOverflows).",
     {"TcpExt.ListenOverflows", ""}},
    {"nodewatch_nic_tcp_listen_drops_total",
     "Connection requests dropped by a listening socket for any reason (TcpExt ListenDrops).",
     {"TcpExt.ListenDrops", ""}},
    {"nodewatch_nic_tcp_receive_queue_drops_total",
     "TCP segments dropped because the socket receive buffer was full (TcpExt TCPRcvQDrop).",
     {"TcpExt.TCPRcvQDrop", ""}},
    {"nodewatch_nic_tcp_input_errors_total",
     "TCP segments received in error, e.g. bad checksum (Tcp InErrs).",
     {"Tcp.InErrs", ""}},
    {"nodewatch_nic_udp_receive_buffer_errors_total",
     "UDP datagrams dropped because the socket receive buffer was full (Udp RcvbufErrors).",
     {"Udp.RcvbufErrors", ""}},
    {"nodewatch_nic_udp_input_errors_total",
     "UDP datagrams received in error, including receive buffer errors (Udp InErrors).",
     {"Udp.InErrors", ""}},
    {"nodewatch_nic_ip_input_errors_total",
     "IPv4 datagrams discarded for header or address errors (Ip InHdrErrors + InAddrErrors).",
     {"Ip.InHdrErrors", "Ip.InAddrErrors"}},
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
  for (const ProtocolMetric& m : kProtocolMetrics) {
    d.push_back(MetricDesc{std::string(m.name), MetricType::kCounter, "", std::string(m.help), {}});
  }
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
    if (found) out.add(m.name, {}, static_cast<double>(sum));
  }
}

}  // namespace nodewatch::nic
