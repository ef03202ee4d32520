// The nic collector's inputs (collectors/nic): <procfs>/net/snmp and
// netstat text, the bytes of one route or ethtool netlink message, and the
// same bytes as one datagram of a dump (scan_dump_datagram).
// Every parser of those gets the input.

#include "fuzz_support.hpp"
#include "nic/nic_parse.hpp"

using namespace nodewatch;
using nodewatch::fuzz::require;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text = fuzz::as_text(data, size);
  nic::Bytes bytes = fuzz::as_bytes(data, size);

  std::size_t malformed = 0;
  auto pairs = nic::parse_proc_net_pairs(text, &malformed);
  for (const auto& [key, value] : pairs) {
    require(key.find('.') != std::string::npos, "proc net: a key without its prefix");
    require(key.size() < size, "proc net: a key longer than the file");
  }
  // Asking for some keys gives those of the whole parse, and the same count
  // of malformed pairs.
  static constexpr std::string_view kOnly[] = {"Tcp.RetransSegs", "TcpExt.TCPTimeouts", "Ip.X"};
  std::size_t only_malformed = 0;
  auto some = nic::parse_proc_net_pairs(text, &only_malformed, kOnly);
  require(only_malformed == malformed, "proc net: keys asked for change what is malformed");
  for (const auto& [key, value] : some) {
    auto it = pairs.find(key);
    require(it != pairs.end() && it->second == value, "proc net: a key asked for differs");
  }
  for (std::string_view k : kOnly)
    require(some.contains(k) == pairs.contains(k), "proc net: a key asked for is missing");

  if (auto link = nic::parse_link_message(bytes)) {
    require(!link->name.empty(), "RTM_NEWLINK: parsed without a name");
    require(link->stat_count <= nic::kLinkStatCount, "RTM_NEWLINK: more statistics than exist");
    for (std::size_t i = link->stat_count; i < link->stats.size(); ++i)
      require(link->stats[i] == 0, "RTM_NEWLINK: a statistic the kernel did not send is set");
    require(fuzz::is_utf8(nic::format_mac(bytes.subspan(0, std::min<std::size_t>(size, 32)))),
            "format_mac: not text");
  }
  if (auto q = nic::parse_qdisc_message(bytes)) {
    require(q->kind.size() < size, "RTM_NEWQDISC: a kind longer than the message");
    (void)nic::format_qdisc_handle(q->handle);
    (void)nic::format_qdisc_parent(q->parent);
  }
  (void)nic::parse_ethtool_pause_reply(bytes);
  (void)nic::parse_ethtool_fec_reply(bytes);

  // The input as one datagram of a dump: every message passed on lies
  // within it, whole, and at least a header long.
  for (std::uint32_t seq : {0u, 1u}) {
    nic::DumpScan scan;
    std::size_t passed = 0;
    nic::scan_dump_datagram(bytes, seq, scan, [&](nic::Bytes m) {
      require(m.data() >= bytes.data() && m.data() + m.size() <= bytes.data() + bytes.size(),
              "scan_dump_datagram: a message outside the datagram");
      require(m.size() >= 16, "scan_dump_datagram: a message shorter than its header");
      passed += m.size();
    });
    require(passed <= size, "scan_dump_datagram: more passed on than the datagram holds");
    require(!scan.error_in_done || scan.error > 0, "scan_dump_datagram: an end error of 0");
  }

  nic::DriverCounterMapping m = nic::map_driver_counter(text);
  if (m.metric != nic::DriverMetric::kGeneric && m.metric != nic::DriverMetric::kOutOfBuffer &&
      m.metric != nic::DriverMetric::kPauseStorm) {
    require(m.direction == "rx" || m.direction == "tx", "map_driver_counter: a bad direction");
  }
  require(m.priority.empty() ||
              (m.priority.size() == 1 && m.priority[0] >= '0' && m.priority[0] <= '7'),
          "map_driver_counter: a priority outside 0..7");
  return 0;
}
