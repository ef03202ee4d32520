// Tests of the nic collector without the kernel: the netlink parsers on
// messages captured from a real kernel (tests/fixtures/nic/netlink, with the
// same moment's `ip -s -s -j link` and `tc -s -j qdisc` output as the
// expected values), truncated and extended messages, the ethtool netlink
// replies, /proc/net/snmp and netstat from three kernel generations, the
// driver-statistic mapping, and the collector over a fake kernel source fed
// with ConnectX-7 and E810 statistic sets.

#include <gtest/gtest.h>

#include <linux/ethtool_netlink.h>
#include <linux/genetlink.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>

#include <cerrno>
#include <cmath>  // before support/collector_test.hpp, which uses std::nan
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "config.hpp"
#include "nic/nic_collector.hpp"
#include "nic/nic_kernel.hpp"
#include "nic/nic_parse.hpp"
#include "nodewatch/services.hpp"
#include "nodewatch/sources/fs.hpp"
#include "support/collector_test.hpp"

namespace nodewatch::nic {
namespace {

using nodewatch::testing::CollectOnce;
using nodewatch::testing::ExpectWellFormedTable;
using nodewatch::testing::Value;

std::filesystem::path nic_fixtures() {
  return nodewatch::testing::fixtures_dir() / "nic";
}

std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p);
  EXPECT_TRUE(in) << "cannot open " << p;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A .hex fixture: one message per paragraph, hex digits over several lines.
std::vector<std::vector<std::uint8_t>> read_hex_messages(const std::string& name) {
  std::vector<std::vector<std::uint8_t>> out;
  std::istringstream in(read_text(nic_fixtures() / "netlink" / name));
  std::string line;
  std::vector<std::uint8_t> cur;
  auto flush = [&] {
    if (!cur.empty()) out.push_back(std::move(cur));
    cur.clear();
  };
  while (std::getline(in, line)) {
    if (line.empty()) {
      flush();
      continue;
    }
    for (std::size_t i = 0; i + 1 < line.size(); i += 2) {
      cur.push_back(static_cast<std::uint8_t>(std::stoul(line.substr(i, 2), nullptr, 16)));
    }
  }
  flush();
  return out;
}

// The number after "key": following each anchor in turn in a JSON text
// (enough for iproute2's flat -j output).
double json_number(const std::string& json, std::initializer_list<std::string> path) {
  std::size_t pos = 0;
  for (const std::string& key : path) {
    pos = json.find("\"" + key + "\":", pos);
    if (pos == std::string::npos) {
      ADD_FAILURE() << "no " << key << " in json";
      return std::nan("");
    }
    pos += key.size() + 3;
  }
  return std::stod(json.substr(pos));
}

std::string json_string(const std::string& json, const std::string& key, std::size_t from = 0) {
  std::size_t pos = json.find("\"" + key + "\":\"", from);
  if (pos == std::string::npos) return "";
  pos += key.size() + 4;
  return json.substr(pos, json.find('"', pos) - pos);
}

void set_nlmsg_len(std::vector<std::uint8_t>& m, std::uint32_t len) {
  std::memcpy(m.data(), &len, 4);
}

// ---------------------------------------------------------------- links

TEST(NicLinkParse, CapturedVethMessageMatchesIpLink) {
  auto msgs = read_hex_messages("link_veth.hex");
  ASSERT_EQ(msgs.size(), 1u);
  std::string ip = read_text(nic_fixtures() / "netlink" / "link_veth.ip.json");
  auto rec = parse_link_message(msgs[0]);
  ASSERT_TRUE(rec);
  EXPECT_EQ(rec->name, json_string(ip, "ifname"));
  EXPECT_EQ(rec->ifindex, json_number(ip, {"ifindex"}));
  EXPECT_EQ(rec->mac, json_string(ip, "address"));
  ASSERT_TRUE(rec->mtu);
  EXPECT_EQ(*rec->mtu, json_number(ip, {"mtu"}));
  ASSERT_TRUE(rec->operstate);
  EXPECT_EQ(operstate_name(*rec->operstate), "up");
  EXPECT_EQ(json_string(ip, "operstate"), "UP");
  ASSERT_TRUE(rec->carrier_changes);
  EXPECT_EQ(*rec->carrier_changes, json_number(ip, {"carrier_changes"}));
  // This kernel (6.x) sends every field of rtnl_link_stats64.
  EXPECT_EQ(rec->stat_count, kLinkStatCount);
  EXPECT_EQ(rec->stats[kRxBytes], json_number(ip, {"rx", "bytes"}));
  EXPECT_EQ(rec->stats[kRxPackets], json_number(ip, {"rx", "packets"}));
  EXPECT_EQ(rec->stats[kRxDropped], json_number(ip, {"rx", "dropped"}));
  EXPECT_EQ(rec->stats[kRxMissedErrors], json_number(ip, {"rx", "missed_errors"}));
  EXPECT_EQ(rec->stats[kTxBytes], json_number(ip, {"tx", "bytes"}));
  EXPECT_EQ(rec->stats[kTxPackets], json_number(ip, {"tx", "packets"}));
  EXPECT_EQ(rec->stats[kTxDropped], json_number(ip, {"tx", "dropped"}));
  EXPECT_EQ(rec->stats[kTxCarrierErrors], json_number(ip, {"tx", "carrier_errors"}));
  EXPECT_GT(rec->stats[kTxBytes], 0u);
}

TEST(NicLinkParse, TruncatedMessagesAreRejectedWithoutReadingPastTheEnd) {
  auto msgs = read_hex_messages("link_veth.hex");
  ASSERT_EQ(msgs.size(), 1u);
  const std::vector<std::uint8_t>& full = msgs[0];
  // Received bytes shorter than the header claims: every prefix.
  for (std::size_t n = 0; n < full.size(); ++n) {
    std::vector<std::uint8_t> cut(full.begin(), full.begin() + static_cast<long>(n));
    EXPECT_FALSE(parse_link_message(cut)) << "prefix of " << n << " bytes";
  }
  // A header that agrees with the cut, which ends inside an attribute: the
  // attribute overruns the message. 16 + 16 + 4 + 4 is inside IFLA_IFNAME's
  // neighbour; cut at every offset that is not an attribute boundary.
  std::size_t rejected = 0;
  for (std::size_t n = 33; n < full.size(); ++n) {
    std::vector<std::uint8_t> cut(full.begin(), full.begin() + static_cast<long>(n));
    set_nlmsg_len(cut, static_cast<std::uint32_t>(n));
    if (!parse_link_message(cut)) ++rejected;
  }
  EXPECT_GT(rejected, full.size() / 2);
}

TEST(NicLinkParse, UnknownAttributesAreSkipped) {
  auto msgs = read_hex_messages("link_veth.hex");
  ASSERT_EQ(msgs.size(), 1u);
  std::vector<std::uint8_t> m = msgs[0];
  auto before = parse_link_message(m);
  ASSERT_TRUE(before);
  // Pad to 4, then an attribute of a type no kernel has yet (0x3ff, 6 bytes
  // of payload, so it needs its own padding too).
  while (m.size() % 4 != 0) m.push_back(0);
  const std::uint8_t attr[] = {10, 0, 0xff, 0x03, 1, 2, 3, 4, 5, 6, 0, 0};
  m.insert(m.end(), std::begin(attr), std::end(attr));
  set_nlmsg_len(m, static_cast<std::uint32_t>(m.size()));
  auto after = parse_link_message(m);
  ASSERT_TRUE(after);
  EXPECT_EQ(after->name, before->name);
  EXPECT_EQ(after->stats, before->stats);
  EXPECT_EQ(after->mtu, before->mtu);
}

TEST(NicLinkParse, OtherMessageTypesAreNotLinks) {
  auto msgs = read_hex_messages("qdisc_veth.hex");
  ASSERT_FALSE(msgs.empty());
  EXPECT_FALSE(parse_link_message(msgs[0]));
}

// --------------------------------------------------------------- qdiscs

TEST(NicQdiscParse, CapturedTbfAndIngressMatchTc) {
  auto msgs = read_hex_messages("qdisc_veth.hex");
  ASSERT_EQ(msgs.size(), 2u);
  std::string tc = read_text(nic_fixtures() / "netlink" / "qdisc_veth.tc.json");
  std::size_t ingress_at = tc.find("\"kind\":\"ingress\"");
  ASSERT_NE(ingress_at, std::string::npos);
  std::string tbf_json = tc.substr(0, ingress_at);
  std::string ingress_json = tc.substr(ingress_at);

  auto tbf = parse_qdisc_message(msgs[0]);
  ASSERT_TRUE(tbf);
  EXPECT_EQ(tbf->kind, "tbf");
  EXPECT_EQ(format_qdisc_handle(tbf->handle), json_string(tbf_json, "handle"));
  EXPECT_EQ(format_qdisc_parent(tbf->parent), "root");
  ASSERT_TRUE(tbf->has_basic);
  ASSERT_TRUE(tbf->has_queue);
  EXPECT_EQ(tbf->bytes, json_number(tbf_json, {"bytes"}));
  // TCA_STATS_PKT64 is sent only once packets no longer fit in 32 bits.
  EXPECT_FALSE(tbf->packets64);
  EXPECT_EQ(tbf->packets32, json_number(tbf_json, {"packets"}));
  EXPECT_EQ(tbf->drops, json_number(tbf_json, {"drops"}));
  EXPECT_GT(tbf->drops, 0u);  // the capture was made with a tiny rate and limit
  EXPECT_EQ(tbf->overlimits, json_number(tbf_json, {"overlimits"}));
  EXPECT_EQ(tbf->requeues, json_number(tbf_json, {"requeues"}));
  EXPECT_EQ(tbf->backlog, json_number(tbf_json, {"backlog"}));
  EXPECT_EQ(tbf->qlen, json_number(tbf_json, {"qlen"}));

  auto ingress = parse_qdisc_message(msgs[1]);
  ASSERT_TRUE(ingress);
  EXPECT_EQ(ingress->kind, "ingress");
  EXPECT_EQ(format_qdisc_handle(ingress->handle), json_string(ingress_json, "handle"));
  EXPECT_EQ(format_qdisc_parent(ingress->parent), json_string(ingress_json, "parent"));
}

TEST(NicQdiscParse, TruncatedStatsNestIsRejected) {
  auto msgs = read_hex_messages("qdisc_veth.hex");
  ASSERT_FALSE(msgs.empty());
  const std::vector<std::uint8_t>& full = msgs[0];
  for (std::size_t n = 0; n < full.size(); ++n) {
    std::vector<std::uint8_t> cut(full.begin(), full.begin() + static_cast<long>(n));
    EXPECT_FALSE(parse_qdisc_message(cut)) << n;
  }
}

TEST(NicQdiscParse, HandlesAsTcPrintsThem) {
  // iproute2's print_tc_classid: major only "1:", minor only ":1", both "1:a".
  EXPECT_EQ(format_qdisc_handle(0x00010000), "1:");
  EXPECT_EQ(format_qdisc_handle(0), "0:");
  EXPECT_EQ(format_qdisc_handle(0xffff0000), "ffff:");
  EXPECT_EQ(format_qdisc_parent(0xffffffff), "root");
  EXPECT_EQ(format_qdisc_parent(0xfffffff1), "ffff:fff1");
  EXPECT_EQ(format_qdisc_parent(0x0001000a), "1:a");
  EXPECT_EQ(format_qdisc_parent(0x00000001), ":1");
  EXPECT_EQ(format_qdisc_parent(0x00020000), "2:");
  EXPECT_EQ(format_qdisc_parent(0), "");
}

// ------------------------------------------------------- ethtool netlink

// Builds a generic-netlink message: nlmsghdr, genlmsghdr, attributes.
class GenlBuilder {
 public:
  GenlBuilder() { bytes_.resize(NLMSG_HDRLEN + GENL_HDRLEN); }
  void u32(std::uint16_t type, std::uint32_t v) { attr(type, &v, 4); }
  void u64(std::uint16_t type, std::uint64_t v) { attr(type, &v, 8); }
  void raw(std::uint16_t type, const std::vector<std::uint8_t>& v) {
    attr(type, v.data(), v.size());
  }
  std::size_t begin_nest(std::uint16_t type) {
    std::size_t at = bytes_.size();
    attr(static_cast<std::uint16_t>(type | NLA_F_NESTED), nullptr, 0);
    return at;
  }
  void end_nest(std::size_t at) {
    auto len = static_cast<std::uint16_t>(bytes_.size() - at);
    std::memcpy(&bytes_[at], &len, 2);
  }
  std::vector<std::uint8_t> finish() {
    auto len = static_cast<std::uint32_t>(bytes_.size());
    std::memcpy(bytes_.data(), &len, 4);
    std::uint16_t type = 0x1d;  // a dynamic family id
    std::memcpy(bytes_.data() + 4, &type, 2);
    return bytes_;
  }

 private:
  void attr(std::uint16_t type, const void* data, std::size_t n) {
    auto len = static_cast<std::uint16_t>(NLA_HDRLEN + n);
    std::size_t at = bytes_.size();
    bytes_.resize(at + NLA_ALIGN(len));
    std::memcpy(&bytes_[at], &len, 2);
    std::memcpy(&bytes_[at + 2], &type, 2);
    if (n > 0) std::memcpy(&bytes_[at + NLA_HDRLEN], data, n);
  }
  std::vector<std::uint8_t> bytes_;
};

std::vector<std::uint8_t> pause_reply(int ifindex, bool with_stats) {
  GenlBuilder b;
  std::size_t h = b.begin_nest(ETHTOOL_A_PAUSE_HEADER);
  b.u32(ETHTOOL_A_HEADER_DEV_INDEX, static_cast<std::uint32_t>(ifindex));
  b.raw(ETHTOOL_A_HEADER_DEV_NAME, {'e', 't', 'h', '0', 0});
  b.end_nest(h);
  b.raw(ETHTOOL_A_PAUSE_AUTONEG, {1});
  b.raw(ETHTOOL_A_PAUSE_RX, {1});
  b.raw(ETHTOOL_A_PAUSE_TX, {1});
  if (with_stats) {
    std::size_t s = b.begin_nest(ETHTOOL_A_PAUSE_STATS);
    b.raw(ETHTOOL_A_PAUSE_STAT_PAD, {});
    b.u64(ETHTOOL_A_PAUSE_STAT_TX_FRAMES, 123456789012ull);
    b.u64(ETHTOOL_A_PAUSE_STAT_RX_FRAMES, 42);
    b.u64(0x77, 9);  // an attribute of a later kernel
    b.end_nest(s);
  }
  return b.finish();
}

// Messages of a dump's datagram, as the kernel lays them out: a header,
// the payload, padding to 4 bytes.
void append_message(std::vector<std::uint8_t>& d, std::uint16_t type, std::uint16_t flags,
                    std::uint32_t seq, const std::vector<std::uint8_t>& payload) {
  nlmsghdr h{};
  h.nlmsg_len = static_cast<std::uint32_t>(NLMSG_HDRLEN + payload.size());
  h.nlmsg_type = type;
  h.nlmsg_flags = flags;
  h.nlmsg_seq = seq;
  const std::size_t at = d.size();
  d.resize(at + NLMSG_ALIGN(h.nlmsg_len), 0);
  std::memcpy(d.data() + at, &h, sizeof(h));
  if (!payload.empty()) std::memcpy(d.data() + at + NLMSG_HDRLEN, payload.data(), payload.size());
}
std::vector<std::uint8_t> int_payload(int v, std::size_t size = sizeof(int)) {
  std::vector<std::uint8_t> p(size, 0);
  std::memcpy(p.data(), &v, sizeof(v));
  return p;
}

TEST(NicDumpScan, MessagesOfTheRequestThenTheEnd) {
  std::vector<std::uint8_t> d;
  append_message(d, RTM_NEWLINK, NLM_F_MULTI, 7, {1, 2, 3});
  append_message(d, RTM_NEWLINK, NLM_F_MULTI, 6, {9});  // an abandoned request's
  append_message(d, NLMSG_NOOP, 0, 7, {});
  append_message(d, RTM_NEWLINK, NLM_F_MULTI, 7, {4, 5, 6, 7, 8});
  DumpScan scan;
  std::vector<std::size_t> sizes;
  scan_dump_datagram(d, 7, scan, [&](Bytes m) { sizes.push_back(m.size()); });
  EXPECT_EQ(sizes, (std::vector<std::size_t>{NLMSG_HDRLEN + 3, NLMSG_HDRLEN + 5}));
  EXPECT_FALSE(scan.done);
  // The end, alone in the next datagram, with 0 (4.x and later) or without
  // a payload (older kernels).
  for (bool payload : {true, false}) {
    std::vector<std::uint8_t> end;
    append_message(end, NLMSG_DONE, NLM_F_MULTI, 7,
                   payload ? int_payload(0) : std::vector<std::uint8_t>{});
    DumpScan s2;
    scan_dump_datagram(end, 7, s2, [](Bytes) { ADD_FAILURE(); });
    EXPECT_TRUE(s2.done);
    EXPECT_EQ(s2.error, 0);
  }
}

// A dump that fails part way ends with the negative errno in NLMSG_DONE:
// an error of the dump, told apart from a refused request (NLMSG_ERROR).
TEST(NicDumpScan, AnErrorInTheEndIsTheDumpsOwn) {
  std::vector<std::uint8_t> d;
  append_message(d, 0x15, NLM_F_MULTI, 3, {1, 2, 3, 4});
  append_message(d, NLMSG_DONE, NLM_F_MULTI, 3, int_payload(-EOPNOTSUPP));
  append_message(d, 0x15, NLM_F_MULTI, 3, {5});  // after the end: not read
  DumpScan scan;
  int messages = 0;
  scan_dump_datagram(d, 3, scan, [&](Bytes) { ++messages; });
  EXPECT_EQ(messages, 1);
  EXPECT_TRUE(scan.done);
  EXPECT_EQ(scan.error, EOPNOTSUPP);
  EXPECT_TRUE(scan.error_in_done);

  std::vector<std::uint8_t> refused;
  append_message(refused, NLMSG_ERROR, 0, 3, int_payload(-EINVAL, sizeof(nlmsgerr)));
  DumpScan s2;
  scan_dump_datagram(refused, 3, s2, [](Bytes) { ADD_FAILURE(); });
  EXPECT_TRUE(s2.done);
  EXPECT_EQ(s2.error, EINVAL);
  EXPECT_FALSE(s2.error_in_done);
  // An NLMSG_ERROR too short for its struct.
  std::vector<std::uint8_t> short_error;
  append_message(short_error, NLMSG_ERROR, 0, 3, int_payload(-EINVAL));
  DumpScan s3;
  scan_dump_datagram(short_error, 3, s3, [](Bytes) { ADD_FAILURE(); });
  EXPECT_TRUE(s3.truncated);
}

TEST(NicDumpScan, InterruptedOverrunAndMalformedLengths) {
  std::vector<std::uint8_t> d;
  append_message(d, RTM_NEWLINK, NLM_F_MULTI | NLM_F_DUMP_INTR, 9, {1});
  DumpScan scan;
  scan_dump_datagram(d, 9, scan, [](Bytes) {});
  EXPECT_TRUE(scan.interrupted);
  std::vector<std::uint8_t> o;
  append_message(o, NLMSG_OVERRUN, 0, 9, {});
  scan_dump_datagram(o, 9, scan, [](Bytes) { ADD_FAILURE(); });
  EXPECT_TRUE(scan.overrun);
  EXPECT_TRUE(scan.done);
  EXPECT_TRUE(scan.interrupted);  // stays set
  // A length past the datagram, or shorter than a header: nothing read
  // from beyond it.
  for (std::uint32_t len : {std::uint32_t{4}, std::uint32_t{4096}}) {
    std::vector<std::uint8_t> bad;
    append_message(bad, RTM_NEWLINK, NLM_F_MULTI, 9, {1, 2, 3, 4});
    std::memcpy(bad.data(), &len, sizeof(len));
    DumpScan s;
    scan_dump_datagram(bad, 9, s, [](Bytes) { ADD_FAILURE(); });
    EXPECT_TRUE(s.malformed);
  }
}

TEST(NicEthtoolNetlink, PauseStatistics) {
  auto p = parse_ethtool_pause_reply(pause_reply(7, true));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->ifindex, 7);
  EXPECT_EQ(p->tx_frames, 123456789012ull);
  EXPECT_EQ(p->rx_frames, 42u);
  auto none = parse_ethtool_pause_reply(pause_reply(7, false));
  ASSERT_TRUE(none);
  EXPECT_FALSE(none->tx_frames);
  EXPECT_FALSE(none->rx_frames);
}

TEST(NicEthtoolNetlink, TruncatedPauseReplyIsRejected) {
  std::vector<std::uint8_t> full = pause_reply(7, true);
  for (std::size_t n = NLMSG_HDRLEN + GENL_HDRLEN + 1; n < full.size(); ++n) {
    std::vector<std::uint8_t> cut(full.begin(), full.begin() + static_cast<long>(n));
    set_nlmsg_len(cut, static_cast<std::uint32_t>(n));
    auto p = parse_ethtool_pause_reply(cut);
    // Either rejected, or cut on an attribute boundary with the numbers that
    // fit: never a value read from beyond the cut.
    if (p && p->tx_frames) {
      EXPECT_EQ(*p->tx_frames, 123456789012ull);
    }
    if (p && p->rx_frames) {
      EXPECT_EQ(*p->rx_frames, 42u);
    }
  }
}

TEST(NicEthtoolNetlink, FecStatisticsTakeTheTotalBeforeTheLanes) {
  GenlBuilder b;
  std::size_t h = b.begin_nest(ETHTOOL_A_FEC_HEADER);
  b.u32(ETHTOOL_A_HEADER_DEV_INDEX, 3);
  b.end_nest(h);
  b.u32(ETHTOOL_A_FEC_ACTIVE, 30);
  std::size_t s = b.begin_nest(ETHTOOL_A_FEC_STATS);
  // total, then 4 lanes: fec_put_stats() in net/ethtool/fec.c
  std::vector<std::uint8_t> corrected(5 * 8);
  std::uint64_t c[5] = {1000, 250, 250, 250, 250};
  std::memcpy(corrected.data(), c, sizeof(c));
  b.raw(ETHTOOL_A_FEC_STAT_CORRECTED, corrected);
  b.u64(ETHTOOL_A_FEC_STAT_UNCORR, 2);
  b.end_nest(s);
  auto f = parse_ethtool_fec_reply(b.finish());
  ASSERT_TRUE(f);
  EXPECT_EQ(f->ifindex, 3);
  EXPECT_EQ(f->corrected_blocks, 1000u);
  EXPECT_EQ(f->uncorrectable_blocks, 2u);
}

// ------------------------------------------------------ /proc/net files

struct ProcExpect {
  std::string dir;
  std::uint64_t retrans, timeouts, overflows, drops, udp_rcvbuf, ip_hdr, ip_addr;
  bool has_rcvq_drop;
};

TEST(NicProcNet, ThreeKernelGenerations) {
  // Numbers read off the fixture files by eye; 6.18 is a real capture.
  const ProcExpect cases[] = {
      {"proc-4.19", 41919, 4190, 41, 42, 4191, 3, 4, false},
      {"proc-5.15", 51515, 5150, 15, 16, 5151, 11, 22, true},
      {"proc-6.18", 254, 3, 0, 0, 0, 0, 0, true},
  };
  for (const ProcExpect& c : cases) {
    SCOPED_TRACE(c.dir);
    std::size_t malformed = 0;
    auto snmp =
        parse_proc_net_pairs(read_text(nic_fixtures() / c.dir / "net" / "snmp"), &malformed);
    auto netstat =
        parse_proc_net_pairs(read_text(nic_fixtures() / c.dir / "net" / "netstat"), &malformed);
    EXPECT_EQ(malformed, 0u);
    EXPECT_EQ(snmp.at("Tcp.RetransSegs"), c.retrans);
    EXPECT_EQ(snmp.at("Udp.RcvbufErrors"), c.udp_rcvbuf);
    EXPECT_EQ(snmp.at("Ip.InHdrErrors"), c.ip_hdr);
    EXPECT_EQ(snmp.at("Ip.InAddrErrors"), c.ip_addr);
    EXPECT_FALSE(snmp.contains("Tcp.MaxConn"));  // -1: not a counter
    EXPECT_EQ(netstat.at("TcpExt.TCPTimeouts"), c.timeouts);
    EXPECT_EQ(netstat.at("TcpExt.ListenOverflows"), c.overflows);
    EXPECT_EQ(netstat.at("TcpExt.ListenDrops"), c.drops);
    EXPECT_EQ(netstat.contains("TcpExt.TCPRcvQDrop"), c.has_rcvq_drop);
  }
}

TEST(NicProcNet, MalformedPairIsSkippedAndTheRestKept) {
  std::size_t malformed = 0;
  auto v = parse_proc_net_pairs(
      "Ip: Forwarding InHdrErrors\nIp: 1 2 3\n"  // one value too many
      "Tcp: RetransSegs InErrs\nTcp: 10 20\n"
      "Udp: InErrors\n",  // no value line
      &malformed);
  EXPECT_EQ(malformed, 2u);
  EXPECT_FALSE(v.contains("Ip.InHdrErrors"));
  EXPECT_EQ(v.at("Tcp.RetransSegs"), 10u);
  EXPECT_EQ(v.at("Tcp.InErrs"), 20u);
}

// Only the keys asked for, the same values, and the whole text still
// checked: a malformed pair of fields nobody asked for is counted.
TEST(NicProcNet, OnlyTheKeysAskedForAreMade) {
  const std::string text = read_text(nic_fixtures() / "proc-5.15" / "net" / "netstat") +
                           "IpExt: InNoRoutes\n";  // unpaired
  std::size_t all_malformed = 0, some_malformed = 0;
  auto all = parse_proc_net_pairs(text, &all_malformed);
  const std::array<std::string_view, 3> only = {"TcpExt.TCPTimeouts", "TcpExt.ListenDrops",
                                                "Tcp.RetransSegs"};
  auto some = parse_proc_net_pairs(text, &some_malformed, only);
  EXPECT_GT(all.size(), 100u);
  EXPECT_EQ(some.size(), 2u);  // Tcp.RetransSegs is in snmp, not netstat
  EXPECT_EQ(some.at("TcpExt.TCPTimeouts"), all.at("TcpExt.TCPTimeouts"));
  EXPECT_EQ(some.at("TcpExt.ListenDrops"), all.at("TcpExt.ListenDrops"));
  EXPECT_EQ(all_malformed, 1u);
  EXPECT_EQ(some_malformed, 1u);
}

// ------------------------------------------------------ driver mapping

TEST(NicDriverMapping, ConnectXNames) {
  auto m = map_driver_counter("rx_prio3_pause");
  EXPECT_EQ(m.metric, DriverMetric::kPfcPauseFrames);
  EXPECT_EQ(m.direction, "rx");
  EXPECT_EQ(m.priority, "3");
  m = map_driver_counter("tx_prio7_pause_duration");
  EXPECT_EQ(m.metric, DriverMetric::kPfcPauseDuration);
  EXPECT_EQ(m.direction, "tx");
  EXPECT_EQ(m.priority, "7");
  m = map_driver_counter("tx_pause_storm_error_events");
  EXPECT_EQ(m.metric, DriverMetric::kPauseStorm);
  EXPECT_EQ(m.kind, "error");
  m = map_driver_counter("rx_discards_phy");
  EXPECT_EQ(m.metric, DriverMetric::kDiscards);
  EXPECT_EQ(m.priority, "");
  m = map_driver_counter("rx_prio0_discards");
  EXPECT_EQ(m.metric, DriverMetric::kDiscards);
  EXPECT_EQ(m.priority, "0");
  EXPECT_EQ(map_driver_counter("rx_out_of_buffer").metric, DriverMetric::kOutOfBuffer);
  // Not PFC: the transition counter, a priority 8, the global pause.
  EXPECT_EQ(map_driver_counter("rx_prio3_pause_transition").metric, DriverMetric::kGeneric);
  EXPECT_EQ(map_driver_counter("rx_prio8_pause").metric, DriverMetric::kGeneric);
  EXPECT_EQ(map_driver_counter("rx_global_pause").metric, DriverMetric::kGeneric);
  EXPECT_EQ(map_driver_counter("rx_crc_errors_phy").metric, DriverMetric::kGeneric);
  // The congestion counters, with the width the driver keeps them in.
  m = map_driver_counter("outbound_pci_stalled_wr");
  EXPECT_EQ(m.metric, DriverMetric::kPcieStalled);
  EXPECT_EQ(m.kind, "write");
  EXPECT_FALSE(m.wraps32);
  m = map_driver_counter("outbound_pci_stalled_rd_events");
  EXPECT_EQ(m.metric, DriverMetric::kPcieStalledSeconds);
  EXPECT_TRUE(m.wraps32);
  m = map_driver_counter("pci_bw_outbound_low");
  EXPECT_EQ(m.metric, DriverMetric::kPcieCongestion);
  EXPECT_EQ(m.direction, "outbound");
  EXPECT_EQ(m.kind, "low");
  EXPECT_TRUE(m.wraps32);
  m = map_driver_counter("rx_prio5_cong_discard");
  EXPECT_EQ(m.metric, DriverMetric::kPriorityDiscards);
  EXPECT_EQ(m.priority, "5");
  EXPECT_EQ(m.kind, "congestion");
  EXPECT_EQ(map_driver_counter("rx_prio5_marked").metric, DriverMetric::kEcnMarked);
  EXPECT_TRUE(map_driver_counter("link_down_events_phy").wraps32);
  EXPECT_TRUE(map_driver_counter("rx_out_of_buffer").wraps32);
  EXPECT_FALSE(map_driver_counter("rx_corrected_bits_phy").wraps32);
  EXPECT_EQ(map_driver_counter("module_bad_shorted").kind, "bad_shorted");
  // Not mapped: the stale-event count (6.18) and a ninth priority.
  EXPECT_EQ(map_driver_counter("pci_bw_stale_event").metric, DriverMetric::kGeneric);
  EXPECT_EQ(map_driver_counter("rx_prio8_marked").metric, DriverMetric::kGeneric);
}

TEST(NicDriverMapping, IceNames) {
  auto m = map_driver_counter("rx_priority_3_xoff.nic");
  EXPECT_EQ(m.metric, DriverMetric::kPfcPauseFrames);
  EXPECT_EQ(m.direction, "rx");
  EXPECT_EQ(m.priority, "3");
  EXPECT_EQ(map_driver_counter("rx_priority_3_xon.nic").metric, DriverMetric::kGeneric);
  m = map_driver_counter("link_xoff_tx.nic");
  EXPECT_EQ(m.metric, DriverMetric::kPauseFrames);
  EXPECT_EQ(m.direction, "tx");
  m = map_driver_counter("tx_dropped_link_down.nic");
  EXPECT_EQ(m.metric, DriverMetric::kDiscards);
  EXPECT_EQ(m.direction, "tx");
  // The VSI's rx_dropped (without .nic) is the netdev's, not the port's.
  EXPECT_EQ(map_driver_counter("rx_dropped").metric, DriverMetric::kGeneric);
}

// ----------------------------------------------- collector, fake kernel

struct FakeDevice {
  DriverInfo info;
  Status info_status = Status::kOk;
  std::optional<std::uint32_t> speed_mbps;
  Status speed_status = Status::kOk;
  Status stats_status = Status::kOk;
  std::vector<std::string> names;
  std::vector<std::uint64_t> values;
  // When set, GSTATS returns this many values (the set changed in between).
  std::optional<std::size_t> values_override;
  int names_calls = 0;
  int speed_calls = 0;
};

class FakeSource final : public KernelSource {
 public:
  std::vector<LinkRecord> links;
  std::size_t malformed_links = 0;
  std::vector<QdiscRecord> qdiscs;
  bool qdisc_fails = false;
  std::map<std::string, FakeDevice> devices;
  std::vector<PauseStats> pause;
  std::vector<FecStats> fec;
  int pause_calls = 0;
  int fec_calls = 0;

  Dump<LinkRecord> dump_links() override { return {links, malformed_links}; }
  Dump<QdiscRecord> dump_qdiscs() override {
    if (qdisc_fails) throw CollectError("netlink_error", "fake");
    return {qdiscs, 0};
  }
  Status driver_info(const std::string& ifname, DriverInfo* out) override {
    auto it = devices.find(ifname);
    if (it == devices.end()) return Status::kUnsupported;
    *out = it->second.info;
    return it->second.info_status;
  }
  Status link_speed(const std::string& ifname, std::optional<std::uint32_t>* mbps) override {
    auto it = devices.find(ifname);
    if (it == devices.end()) return Status::kUnsupported;
    ++it->second.speed_calls;
    *mbps = it->second.speed_mbps;
    return it->second.speed_status;
  }
  Status stats_count(const std::string& ifname, std::uint32_t* count) override {
    auto it = devices.find(ifname);
    if (it == devices.end()) return Status::kUnsupported;
    *count = static_cast<std::uint32_t>(it->second.names.size());
    return it->second.stats_status;
  }
  Status stats_names(const std::string& ifname, std::uint32_t,
                     std::vector<std::string>* names) override {
    FakeDevice& d = devices.at(ifname);
    ++d.names_calls;
    *names = d.names;
    return Status::kOk;
  }
  Status stats_values(const std::string& ifname, std::uint32_t,
                      std::vector<std::uint64_t>* values) override {
    FakeDevice& d = devices.at(ifname);
    *values = d.values;
    if (d.values_override) values->resize(*d.values_override);
    return Status::kOk;
  }
  Status pause_stats(Dump<PauseStats>* out) override {
    ++pause_calls;
    out->records = pause;
    return Status::kOk;
  }
  Status fec_stats(Dump<FecStats>* out) override {
    ++fec_calls;
    out->records = fec;
    return Status::kOk;
  }
};

// An `ethtool -S` listing: "     name: value" after a header line.
void load_ethtool_listing(const std::string& file, FakeDevice* d) {
  std::istringstream in(read_text(nic_fixtures() / "ethtool" / file));
  std::string line;
  while (std::getline(in, line)) {
    std::size_t colon = line.rfind(": ");
    if (colon == std::string::npos) continue;
    std::size_t start = line.find_first_not_of(' ');
    d->names.push_back(line.substr(start, colon - start));
    d->values.push_back(std::stoull(line.substr(colon + 2)));
  }
}

LinkRecord make_link(int ifindex, std::string name, std::uint64_t rx_bytes = 0) {
  LinkRecord l;
  l.ifindex = ifindex;
  l.name = std::move(name);
  l.mac = "0c:42:a1:00:00:01";
  l.operstate = kOperUp;
  l.carrier = 1;
  l.carrier_changes = 4;
  l.mtu = 9000;
  l.stat_count = kLinkStatCount;
  l.stats[kRxBytes] = rx_bytes;
  return l;
}

struct FakeNode {
  FakeSource* source = nullptr;
  std::unique_ptr<NicCollector> collector;
};

// `ethtool_counters`: the driver statistics' wrap offsets, as the service
// shares them between a collector and the one a reload builds.
FakeNode make_node(NicOptions options = {},
                   std::shared_ptr<sources::WrapCounters> ethtool_counters = nullptr) {
  auto src = std::make_unique<FakeSource>();
  FakeNode node;
  node.source = src.get();
  Roots roots{nic_fixtures() / "no-sys", nic_fixtures() / "proc-5.15"};
  node.collector =
      std::make_unique<NicCollector>(roots, std::move(options), std::move(src), nullptr,
                                     kDefaultMaxHeld, std::move(ethtool_counters));
  return node;
}

int open_fds() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

bool has(const MetricSink& sink, std::string_view name, const std::vector<std::string>& labels) {
  double v = 0;
  return sink.get(name, labels, &v);
}

std::uint64_t error_count(const MetricSink& sink, std::string_view reason) {
  auto it = sink.errors().find(reason);
  return it == sink.errors().end() ? 0 : it->second;
}

// A ConnectX-7 (mlx5) and an E810 (ice) port, each with its fixture's set.
FakeNode two_vendor_node(NicOptions options = {},
                         std::shared_ptr<sources::WrapCounters> ethtool_counters = nullptr) {
  FakeNode node = make_node(std::move(options), std::move(ethtool_counters));
  node.source->links = {make_link(4, "ens1f0np0", 1000), make_link(5, "ens2f0")};
  FakeDevice cx7;
  cx7.info = {"mlx5_core", "28.39.1002 (MT_0000000834)", "0000:17:00.0"};
  cx7.speed_mbps = 400000;
  load_ethtool_listing("mlx5_cx7.stats", &cx7);
  FakeDevice e810;
  e810.info = {"ice", "4.40 0x8001c967 1.3534.0", "0000:ca:00.0"};
  e810.speed_mbps = 100000;
  load_ethtool_listing("ice_e810.stats", &e810);
  node.source->devices["ens1f0np0"] = cx7;
  node.source->devices["ens2f0"] = e810;
  return node;
}

// Every rtnl_link_stats64 field is exported with its own value, but the six
// of half-duplex Ethernet and header compression only with legacy_counters.
TEST(NicCollector, LegacyLinkCountersOnlyWhenAskedFor) {
  for (bool legacy : {false, true}) {
    NicOptions o;
    o.legacy_counters = legacy;
    FakeNode node = make_node(o);
    LinkRecord l = make_link(4, "ens1f0np0");
    for (std::size_t i = 0; i < kLinkStatCount; ++i) l.stats[i] = 100 + i;
    node.source->links = {l};
    MetricSink sink(node.collector->metrics());
    CollectOnce(*node.collector, sink);
    std::size_t exported = 0;
    for (const char* legacy_name :
         {"nodewatch_nic_collisions_total", "nodewatch_nic_transmit_aborted_errors_total",
          "nodewatch_nic_transmit_heartbeat_errors_total",
          "nodewatch_nic_transmit_window_errors_total",
          "nodewatch_nic_received_compressed_packets_total",
          "nodewatch_nic_transmitted_compressed_packets_total"})
      exported += has(sink, legacy_name, {"ens1f0np0"}) ? 1 : 0;
    EXPECT_EQ(exported, legacy ? 6u : 0u);
    if (legacy) {
      EXPECT_EQ(Value(sink, "nodewatch_nic_collisions_total", {"ens1f0np0"}), 100 + kCollisions);
      EXPECT_EQ(Value(sink, "nodewatch_nic_transmitted_compressed_packets_total", {"ens1f0np0"}),
                100 + kTxCompressed);
    }
    // The others either way, each with its own field.
    EXPECT_EQ(Value(sink, "nodewatch_nic_receive_crc_errors_total", {"ens1f0np0"}),
              100 + kRxCrcErrors);
    EXPECT_EQ(Value(sink, "nodewatch_nic_transmit_carrier_errors_total", {"ens1f0np0"}),
              100 + kTxCarrierErrors);
    EXPECT_EQ(Value(sink, "nodewatch_nic_receive_otherhost_dropped_total", {"ens1f0np0"}),
              100 + kRxOtherhostDropped);
  }
}

TEST(NicCollector, TableIsWellFormedAndHasTheContractNames) {
  NicCollector c(Roots{}, NicOptions{}, std::make_unique<FakeSource>());
  ExpectWellFormedTable(c.metrics(), "nodewatch_nic_");
  for (std::string_view name : {"nodewatch_nic_info",
                                "nodewatch_nic_up",
                                "nodewatch_nic_carrier_changes_total",
                                "nodewatch_nic_speed_bytes_per_second",
                                "nodewatch_nic_mtu_bytes",
                                "nodewatch_nic_received_bytes_total",
                                "nodewatch_nic_transmitted_bytes_total",
                                "nodewatch_nic_received_packets_total",
                                "nodewatch_nic_transmitted_packets_total",
                                "nodewatch_nic_receive_dropped_total",
                                "nodewatch_nic_transmit_dropped_total",
                                "nodewatch_nic_receive_errors_total",
                                "nodewatch_nic_transmit_errors_total",
                                "nodewatch_nic_receive_missed_total",
                                "nodewatch_nic_receive_fifo_errors_total",
                                "nodewatch_nic_receive_crc_errors_total",
                                "nodewatch_nic_transmit_carrier_errors_total",
                                "nodewatch_nic_qdisc_drops_total",
                                "nodewatch_nic_qdisc_overlimits_total",
                                "nodewatch_nic_qdisc_requeues_total",
                                "nodewatch_nic_qdisc_backlog_bytes",
                                "nodewatch_nic_qdisc_queue_length_packets",
                                "nodewatch_nic_qdisc_bytes_total",
                                "nodewatch_nic_qdisc_packets_total",
                                "nodewatch_nic_pfc_pause_frames_total",
                                "nodewatch_nic_pfc_pause_seconds_total",
                                "nodewatch_nic_pause_frames_total",
                                "nodewatch_nic_pause_storm_events_total",
                                "nodewatch_nic_discards_total",
                                "nodewatch_nic_out_of_buffer_total",
                                "nodewatch_nic_fec_corrected_blocks_total",
                                "nodewatch_nic_fec_uncorrectable_blocks_total",
                                "nodewatch_nic_driver_counters_total",
                                "nodewatch_nic_tcp_retransmitted_segments_total",
                                "nodewatch_nic_tcp_timeouts_total",
                                "nodewatch_nic_tcp_listen_overflows_total",
                                "nodewatch_nic_tcp_listen_drops_total",
                                "nodewatch_nic_udp_receive_buffer_errors_total",
                                "nodewatch_nic_ip_input_errors_total"}) {
    EXPECT_GE(c.metrics().find(name), 0) << name;
  }
}

TEST(NicCollector, ConnectX7PfcDiscardsAndPauseStorms) {
  FakeNode node = two_vendor_node();
  MetricSink sink(node.collector->metrics());
  CollectOnce(*node.collector, sink);
  const std::string cx = "ens1f0np0";
  // Values from tests/fixtures/nic/ethtool/mlx5_cx7.stats.
  EXPECT_EQ(Value(sink, "nodewatch_nic_pfc_pause_frames_total", {cx, "rx", "3"}), 182736);
  EXPECT_EQ(Value(sink, "nodewatch_nic_pfc_pause_frames_total", {cx, "tx", "3"}), 9127);
  // rx_prio3_pause_duration 2750000 us
  EXPECT_DOUBLE_EQ(Value(sink, "nodewatch_nic_pfc_pause_seconds_total", {cx, "rx", "3"}), 2.75);
  EXPECT_DOUBLE_EQ(Value(sink, "nodewatch_nic_pfc_pause_seconds_total", {cx, "tx", "3"}), 0.43125);
  EXPECT_FALSE(has(sink, "nodewatch_nic_pfc_pause_frames_total", {cx, "rx", "0"}));
  EXPECT_EQ(Value(sink, "nodewatch_nic_pause_storm_events_total", {cx, "warning"}), 4);
  EXPECT_EQ(Value(sink, "nodewatch_nic_pause_storm_events_total", {cx, "error"}), 1);
  EXPECT_EQ(Value(sink, "nodewatch_nic_discards_total", {cx, "rx", ""}), 48213);
  EXPECT_EQ(Value(sink, "nodewatch_nic_discards_total", {cx, "tx", ""}), 907);
  EXPECT_EQ(Value(sink, "nodewatch_nic_discards_total", {cx, "rx", "3"}), 48200);
  EXPECT_EQ(Value(sink, "nodewatch_nic_discards_total", {cx, "rx", "0"}), 0);
  EXPECT_EQ(Value(sink, "nodewatch_nic_out_of_buffer_total", {cx}), 5521);
  EXPECT_EQ(Value(sink, "nodewatch_nic_pause_frames_total", {cx, "rx"}), 0);
  EXPECT_EQ(Value(sink, "nodewatch_nic_driver_counters_total", {cx, "rx_crc_errors_phy"}), 3);
  EXPECT_EQ(Value(sink, "nodewatch_nic_driver_counters_total", {cx, "rx_symbol_err_phy"}), 17);
  // Not in the default allow-list: per-ring, per-priority traffic, transitions.
  EXPECT_FALSE(has(sink, "nodewatch_nic_driver_counters_total", {cx, "rx0_packets"}));
  EXPECT_FALSE(has(sink, "nodewatch_nic_driver_counters_total", {cx, "rx_prio3_bytes"}));
  EXPECT_FALSE(has(sink, "nodewatch_nic_driver_counters_total", {cx, "rx_prio3_pause_transition"}));
  EXPECT_EQ(Value(sink, "nodewatch_nic_speed_bytes_per_second", {cx}), 400000 * 1e6 / 8);
  EXPECT_EQ(Value(sink, "nodewatch_nic_info",
                  {cx, "mlx5_core", "28.39.1002 (MT_0000000834)", "0000:17:00.0",
                   "0c:42:a1:00:00:01", "up"}),
            1);
  EXPECT_TRUE(sink.errors().empty());
}

// The counters that tell congestion apart (issue: the host side, the port
// buffer, the wire), on the same port as mlx5 6.12 and 6.17 list them.
TEST(NicCollector, ConnectX7HostSideBufferAndWireCounters) {
  FakeNode node = two_vendor_node();
  MetricSink sink(node.collector->metrics());
  CollectOnce(*node.collector, sink);
  const std::string cx = "ens1f0np0";
  // Values from tests/fixtures/nic/ethtool/mlx5_cx7.stats (6.12).
  EXPECT_DOUBLE_EQ(Value(sink, "nodewatch_nic_pcie_stalled_ratio", {cx, "read"}), 0.12);
  EXPECT_DOUBLE_EQ(Value(sink, "nodewatch_nic_pcie_stalled_ratio", {cx, "write"}), 0.41);
  EXPECT_EQ(Value(sink, "nodewatch_nic_pcie_stalled_seconds_total", {cx, "write"}), 37);
  EXPECT_EQ(Value(sink, "nodewatch_nic_pcie_stalled_seconds_total", {cx, "read"}), 0);
  EXPECT_EQ(Value(sink, "nodewatch_nic_pcie_buffer_overflow_packets_total", {cx}), 0);
  EXPECT_EQ(Value(sink, "nodewatch_nic_pcie_recoveries_total", {cx, "tx"}), 2);
  EXPECT_EQ(Value(sink, "nodewatch_nic_receive_buffer_almost_full_total", {cx}), 1291);
  EXPECT_EQ(Value(sink, "nodewatch_nic_fec_corrected_bit_errors_total", {cx}), 4412);
  EXPECT_EQ(Value(sink, "nodewatch_nic_post_fec_symbol_errors_total", {cx}), 0);
  EXPECT_EQ(Value(sink, "nodewatch_nic_link_down_events_total", {cx}), 2);
  for (const char* event : {"unplug", "bus_stuck", "high_temp", "bad_shorted"})
    EXPECT_EQ(Value(sink, "nodewatch_nic_module_events_total", {cx, event}), 0) << event;
  // Priority 3 carries the RoCE traffic with PFC, priority 0 some traffic,
  // priority 6 none but it counted a discard: those three only, of eight.
  EXPECT_EQ(Value(sink, "nodewatch_nic_priority_discards_total", {cx, "3", "no_buffer"}), 120);
  EXPECT_EQ(Value(sink, "nodewatch_nic_priority_discards_total", {cx, "3", "congestion"}), 0);
  EXPECT_EQ(Value(sink, "nodewatch_nic_ecn_marked_packets_total", {cx, "3"}), 88213);
  EXPECT_EQ(Value(sink, "nodewatch_nic_ecn_marked_packets_total", {cx, "0"}), 0);
  EXPECT_EQ(Value(sink, "nodewatch_nic_priority_discards_total", {cx, "6", "no_buffer"}), 3);
  for (const char* idle : {"1", "2", "4", "5", "7"}) {
    EXPECT_FALSE(has(sink, "nodewatch_nic_ecn_marked_packets_total", {cx, idle})) << idle;
    EXPECT_FALSE(has(sink, "nodewatch_nic_priority_discards_total", {cx, idle, "no_buffer"}));
  }
  // 6.12 has no PCIe congestion events; and nothing lands among the generic.
  EXPECT_FALSE(has(sink, "nodewatch_nic_pcie_congestion_events_total", {cx, "inbound", "high"}));
  EXPECT_FALSE(has(sink, "nodewatch_nic_pcie_congested", {cx, "inbound"}));
  EXPECT_FALSE(has(sink, "nodewatch_nic_driver_counters_total", {cx, "rx_pcs_symbol_err_phy"}));
  EXPECT_TRUE(sink.errors().empty());

  // 6.17: the PCIe congestion events, inbound congested now (high > low).
  FakeNode newer = two_vendor_node();
  FakeDevice cx17 = newer.source->devices[cx];
  cx17.names.clear();
  cx17.values.clear();
  load_ethtool_listing("mlx5_cx7-6.17.stats", &cx17);
  newer.source->devices[cx] = cx17;
  MetricSink s17(newer.collector->metrics());
  CollectOnce(*newer.collector, s17);
  EXPECT_EQ(Value(s17, "nodewatch_nic_pcie_congestion_events_total", {cx, "inbound", "high"}), 14);
  EXPECT_EQ(Value(s17, "nodewatch_nic_pcie_congestion_events_total", {cx, "inbound", "low"}), 13);
  EXPECT_EQ(Value(s17, "nodewatch_nic_pcie_congestion_events_total", {cx, "outbound", "high"}), 0);
  EXPECT_EQ(Value(s17, "nodewatch_nic_pcie_congested", {cx, "inbound"}), 1);
  EXPECT_EQ(Value(s17, "nodewatch_nic_pcie_congested", {cx, "outbound"}), 0);
  EXPECT_TRUE(s17.errors().empty());
}

// The statistics mlx5 keeps in 32 bits wrap at 2^32 inside a u64: the wrap
// is accumulated (and outlives a rebuilt collector); a 64-bit one that goes
// down is a reset.
TEST(NicCollector, ThirtyTwoBitDriverStatisticsAccumulateTheirWraps) {
  auto counters = std::make_shared<sources::WrapCounters>();
  auto node_with = [&](std::uint64_t link_down, std::uint64_t corrected) {
    FakeNode node = two_vendor_node({}, counters);
    FakeDevice& cx = node.source->devices["ens1f0np0"];
    for (std::size_t i = 0; i < cx.names.size(); ++i) {
      if (cx.names[i] == "link_down_events_phy") cx.values[i] = link_down;
      if (cx.names[i] == "rx_corrected_bits_phy") cx.values[i] = corrected;
    }
    return node;
  };
  auto collect = [](FakeNode& node) {
    MetricSink sink(node.collector->metrics());
    CollectOnce(*node.collector, sink);
    return std::pair{Value(sink, "nodewatch_nic_link_down_events_total", {"ens1f0np0"}),
                     Value(sink, "nodewatch_nic_fec_corrected_bit_errors_total", {"ens1f0np0"})};
  };
  FakeNode before = node_with(4294967290u, 5000);
  EXPECT_EQ(collect(before), std::pair(4294967290.0, 5000.0));
  // A rebuilt collector (a reload) sharing the offsets: +11 across the wrap.
  FakeNode after = node_with(5, 100);
  EXPECT_EQ(collect(after), std::pair(4294967301.0, 100.0));
  // A collection whose ethtool reads fail keeps the offset for the next.
  FakeDevice& cx = after.source->devices["ens1f0np0"];
  cx.stats_status = Status::kError;
  {
    MetricSink sink(after.collector->metrics());
    CollectOnce(*after.collector, sink);
    EXPECT_FALSE(has(sink, "nodewatch_nic_link_down_events_total", {"ens1f0np0"}));
  }
  cx.stats_status = Status::kOk;
  for (std::size_t i = 0; i < cx.names.size(); ++i)
    if (cx.names[i] == "link_down_events_phy") cx.values[i] = 6;
  EXPECT_EQ(collect(after).first, 4294967302.0);
}

TEST(NicCollector, E810PfcAndPortDrops) {
  FakeNode node = two_vendor_node();
  MetricSink sink(node.collector->metrics());
  CollectOnce(*node.collector, sink);
  const std::string e = "ens2f0";
  // Values from tests/fixtures/nic/ethtool/ice_e810.stats.
  EXPECT_EQ(Value(sink, "nodewatch_nic_pfc_pause_frames_total", {e, "rx", "3"}), 77123);
  EXPECT_EQ(Value(sink, "nodewatch_nic_pfc_pause_frames_total", {e, "tx", "3"}), 5121);
  EXPECT_EQ(Value(sink, "nodewatch_nic_pfc_pause_frames_total", {e, "rx", "0"}), 0);
  EXPECT_FALSE(has(sink, "nodewatch_nic_pfc_pause_seconds_total", {e, "rx", "3"}));
  EXPECT_EQ(Value(sink, "nodewatch_nic_pause_frames_total", {e, "tx"}), 0);
  EXPECT_EQ(Value(sink, "nodewatch_nic_discards_total", {e, "rx", ""}), 3310);
  EXPECT_EQ(Value(sink, "nodewatch_nic_discards_total", {e, "tx", ""}), 14);
  EXPECT_EQ(Value(sink, "nodewatch_nic_driver_counters_total", {e, "rx_crc_errors.nic"}), 2);
  EXPECT_FALSE(has(sink, "nodewatch_nic_driver_counters_total", {e, "rx_priority_3_xon.nic"}));
  EXPECT_FALSE(has(sink, "nodewatch_nic_driver_counters_total", {e, "rx_dropped"}));
}

TEST(NicCollector, StandardPauseAndFecStatisticsFromNetlink) {
  FakeNode node = two_vendor_node();
  node.source->pause = {PauseStats{4, 777, 888}};
  node.source->fec = {FecStats{4, 1000, 2}};
  MetricSink sink(node.collector->metrics());
  CollectOnce(*node.collector, sink);
  const std::string cx = "ens1f0np0";
  EXPECT_EQ(Value(sink, "nodewatch_nic_pause_frames_total", {cx, "tx"}), 777);
  EXPECT_EQ(Value(sink, "nodewatch_nic_pause_frames_total", {cx, "rx"}), 888);
  // The driver's own copy of the same count keeps its name.
  EXPECT_EQ(Value(sink, "nodewatch_nic_driver_counters_total", {cx, "rx_pause_ctrl_phy"}), 0);
  EXPECT_EQ(Value(sink, "nodewatch_nic_fec_corrected_blocks_total", {cx}), 1000);
  EXPECT_EQ(Value(sink, "nodewatch_nic_fec_uncorrectable_blocks_total", {cx}), 2);
  EXPECT_FALSE(has(sink, "nodewatch_nic_fec_corrected_blocks_total", {"ens2f0"}));
}

TEST(NicCollector, AllowListIsConfigurable) {
  NicOptions o;
  o.driver_counters = {"rx0_packets", R"(rx_prio\d_pause_transition)"};
  FakeNode node = two_vendor_node(o);
  MetricSink sink(node.collector->metrics());
  CollectOnce(*node.collector, sink);
  const std::string cx = "ens1f0np0";
  EXPECT_EQ(Value(sink, "nodewatch_nic_driver_counters_total", {cx, "rx0_packets"}), 459136822);
  EXPECT_EQ(Value(sink, "nodewatch_nic_driver_counters_total", {cx, "rx_prio3_pause_transition"}),
            91368);
  EXPECT_FALSE(has(sink, "nodewatch_nic_pfc_pause_frames_total", {cx, "rx", "3"}));
  // A name must match a whole expression: rx0_packets does not select rx10_packets.
  EXPECT_FALSE(has(sink, "nodewatch_nic_driver_counters_total", {cx, "rx1_packets"}));
}

TEST(NicCollector, DriverCounterLimitIsCounted) {
  NicOptions o;
  o.driver_counters = {".*"};
  o.max_driver_counters = 10;
  FakeNode node = two_vendor_node(o);
  MetricSink sink(node.collector->metrics());
  CollectOnce(*node.collector, sink);
  std::size_t cx_series = 0;
  for (const std::string& name : node.source->devices["ens1f0np0"].names) {
    if (has(sink, "nodewatch_nic_driver_counters_total", {"ens1f0np0", name})) ++cx_series;
  }
  EXPECT_LE(cx_series, 10u);
  std::size_t total =
      node.source->devices["ens1f0np0"].names.size() + node.source->devices["ens2f0"].names.size();
  EXPECT_EQ(error_count(sink, "driver_counter_limit"), total - 20);
}

// A driver that gives a statistic name twice (vmxnet3 repeats its per-queue
// names under each queue's heading; found by fuzzing, which fed the same
// name twice): the first value is exported, the repeats are counted, and
// no duplicate series reaches the sink.
TEST(NicCollector, ARepeatedDriverStatisticNameIsExportedOnce) {
  NicOptions o;
  o.driver_counters = {".*"};
  FakeNode node = make_node(o);
  node.source->links = {make_link(4, "ens192")};
  FakeDevice d;
  d.info = {"vmxnet3", "", "0000:0b:00.0"};
  d.names = {"Tx Queue#",   "TSO pkts tx",   "ucast pkts tx",     "Tx Queue#",
             "TSO pkts tx", "ucast pkts tx", "rx_crc_errors.nic", "rx_crc_errors.nic"};
  d.values = {0, 11, 12, 1, 21, 22, 5, 6};
  node.source->devices["ens192"] = d;
  MetricSink sink(node.collector->metrics());
  CollectOnce(*node.collector, sink);  // fails on a duplicate series
  EXPECT_EQ(Value(sink, "nodewatch_nic_driver_counters_total", {"ens192", "TSO pkts tx"}), 11);
  EXPECT_EQ(Value(sink, "nodewatch_nic_driver_counters_total", {"ens192", "ucast pkts tx"}), 12);
  EXPECT_EQ(error_count(sink, "driver_counter_duplicate"), 4u);
}

TEST(NicCollector, StringSetFollowsTheDriverEveryCycle) {
  FakeNode node = two_vendor_node();
  FakeDevice& cx = node.source->devices["ens1f0np0"];
  {
    MetricSink sink(node.collector->metrics());
    CollectOnce(*node.collector, sink);
  }
  EXPECT_EQ(cx.names_calls, 1);
  // PFC enabled on priority 5 too: two more names.
  cx.names.push_back("rx_prio5_pause");
  cx.values.push_back(31);
  cx.names.push_back("tx_prio5_pause");
  cx.values.push_back(32);
  {
    MetricSink sink(node.collector->metrics());
    CollectOnce(*node.collector, sink);
    EXPECT_EQ(cx.names_calls, 2);
    EXPECT_EQ(Value(sink, "nodewatch_nic_pfc_pause_frames_total", {"ens1f0np0", "rx", "5"}), 31);
    EXPECT_EQ(Value(sink, "nodewatch_nic_pfc_pause_frames_total", {"ens1f0np0", "tx", "5"}), 32);
  }
  // PFC moved from priority 5 to 6: the same number of statistics, other
  // names. The values follow their names, never the old labels.
  for (std::string& n : cx.names) {
    if (n == "rx_prio5_pause") n = "rx_prio6_pause";
    if (n == "tx_prio5_pause") n = "tx_prio6_pause";
  }
  MetricSink sink(node.collector->metrics());
  CollectOnce(*node.collector, sink);
  EXPECT_EQ(cx.names_calls, 3);
  EXPECT_EQ(Value(sink, "nodewatch_nic_pfc_pause_frames_total", {"ens1f0np0", "rx", "6"}), 31);
  EXPECT_FALSE(has(sink, "nodewatch_nic_pfc_pause_frames_total", {"ens1f0np0", "rx", "5"}));
}

TEST(NicCollector, ValuesOfAnotherSetAreNotExported) {
  FakeNode node = two_vendor_node();
  node.source->devices["ens1f0np0"].values_override = 40;
  MetricSink sink(node.collector->metrics());
  CollectOnce(*node.collector, sink);
  EXPECT_EQ(error_count(sink, "driver_stats_changed"), 1u);
  EXPECT_FALSE(has(sink, "nodewatch_nic_pfc_pause_frames_total", {"ens1f0np0", "rx", "3"}));
  // The other port and the link statistics are unaffected.
  EXPECT_EQ(Value(sink, "nodewatch_nic_received_bytes_total", {"ens1f0np0"}), 1000);
  EXPECT_EQ(Value(sink, "nodewatch_nic_pfc_pause_frames_total", {"ens2f0", "rx", "3"}), 77123);
}

TEST(NicCollector, EthtoolFailuresAreCountedAndUnsupportedIsSilent) {
  FakeNode node = two_vendor_node();
  node.source->devices["ens1f0np0"].stats_status = Status::kError;
  node.source->devices["ens2f0"].stats_status = Status::kUnsupported;
  node.source->devices["ens2f0"].speed_status = Status::kUnsupported;
  node.source->links.push_back(make_link(9, "bond0"));  // no ethtool at all in the fake
  MetricSink sink(node.collector->metrics());
  CollectOnce(*node.collector, sink);
  EXPECT_EQ(error_count(sink, "ethtool_error"), 1u);
  EXPECT_EQ(sink.errors().size(), 1u);
  EXPECT_FALSE(has(sink, "nodewatch_nic_speed_bytes_per_second", {"ens2f0"}));
  EXPECT_EQ(Value(sink, "nodewatch_nic_info", {"bond0", "", "", "", "0c:42:a1:00:00:01", "up"}), 1);
  EXPECT_EQ(Value(sink, "nodewatch_nic_mtu_bytes", {"bond0"}), 9000);
}

// ETHTOOL_GLINKSETTINGS on a driver without it (ifb, vxlan) fails at every
// call: asked again with the interface's facts, while a speed that a
// driver has is read at every collection (it changes with the link).
TEST(NicCollector, LinkSettingsADriverLacksAreAskedForWithItsFacts) {
  FakeNode node = two_vendor_node();
  FakeDevice& cx = node.source->devices["ens1f0np0"];
  FakeDevice& e810 = node.source->devices["ens2f0"];
  e810.speed_status = Status::kUnsupported;
  for (int i = 0; i < 3; ++i) {
    MetricSink sink(node.collector->metrics());
    CollectOnce(*node.collector, sink);
    EXPECT_FALSE(has(sink, "nodewatch_nic_speed_bytes_per_second", {"ens2f0"}));
    EXPECT_EQ(sink.errors().size(), 0u);
  }
  EXPECT_EQ(cx.speed_calls, 3);
  EXPECT_EQ(e810.speed_calls, 1);
  // The driver gained link settings (reloaded under the same ifindex):
  // the speed shows with the next reading of the facts.
  e810.speed_status = Status::kOk;
  for (std::uint64_t i = 3; i < kRefreshCycles; ++i) {
    MetricSink sink(node.collector->metrics());
    CollectOnce(*node.collector, sink);
  }
  EXPECT_EQ(e810.speed_calls, 1);
  MetricSink sink(node.collector->metrics());
  CollectOnce(*node.collector, sink);
  EXPECT_EQ(e810.speed_calls, 2);
  EXPECT_EQ(Value(sink, "nodewatch_nic_speed_bytes_per_second", {"ens2f0"}), 100000 * 1e6 / 8);
  EXPECT_EQ(cx.speed_calls, static_cast<int>(kRefreshCycles) + 1);
}

// A driver that has no link settings while its link is down (no PHY
// answer): asked again as soon as the link comes up, not with the facts.
TEST(NicCollector, LinkSettingsAreAskedForAgainWhenTheLinkChanges) {
  FakeNode node = two_vendor_node();
  FakeDevice& e810 = node.source->devices["ens2f0"];
  LinkRecord& link = node.source->links[1];
  link.operstate = 2;  // down
  link.carrier = 0;
  e810.speed_status = Status::kUnsupported;
  for (int i = 0; i < 3; ++i) {
    MetricSink sink(node.collector->metrics());
    CollectOnce(*node.collector, sink);
  }
  EXPECT_EQ(e810.speed_calls, 1);
  link.carrier = 1;  // the cable, then the link
  e810.speed_status = Status::kOk;
  {
    MetricSink sink(node.collector->metrics());
    CollectOnce(*node.collector, sink);
    EXPECT_EQ(e810.speed_calls, 2);
    EXPECT_EQ(Value(sink, "nodewatch_nic_speed_bytes_per_second", {"ens2f0"}), 100000 * 1e6 / 8);
  }
  link.operstate = kOperUp;
  MetricSink sink(node.collector->metrics());
  CollectOnce(*node.collector, sink);
  EXPECT_EQ(e810.speed_calls, 3);  // a driver that has them is asked every time
}

// Without an interface that has standard pause or FEC statistics, the two
// ethtool netlink dumps are asked again when the interfaces change and
// with the facts; with one, at every collection.
TEST(NicCollector, PauseAndFecDumpsThatFoundNothingWaitForAChange) {
  FakeNode node = make_node();
  FakeSource& src = *node.source;
  src.links = {make_link(2, "eth0")};
  auto collect = [&] {
    MetricSink sink(node.collector->metrics());
    CollectOnce(*node.collector, sink);
    return sink.errors().size();
  };
  for (int i = 0; i < 3; ++i) EXPECT_EQ(collect(), 0u);
  EXPECT_EQ(src.pause_calls, 1);
  EXPECT_EQ(src.fec_calls, 1);
  // A ConnectX-7 port appears: asked at once, and its numbers exported.
  src.links.push_back(make_link(4, "ens1f0np0"));
  PauseStats p;
  p.ifindex = 4;
  p.rx_frames = 12;
  p.tx_frames = 34;
  src.pause = {p};
  {
    MetricSink sink(node.collector->metrics());
    CollectOnce(*node.collector, sink);
    EXPECT_EQ(src.pause_calls, 2);
    EXPECT_EQ(Value(sink, "nodewatch_nic_pause_frames_total", {"ens1f0np0", "rx"}), 12);
  }
  // With statistics found, every collection asks.
  for (int i = 0; i < 2; ++i) EXPECT_EQ(collect(), 0u);
  EXPECT_EQ(src.pause_calls, 4);
  EXPECT_EQ(src.fec_calls, 4);
  // The port goes (its driver unloaded): asked once more, then not until
  // the facts are due again.
  src.links = {make_link(2, "eth0")};
  src.pause.clear();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(collect(), 0u);
  EXPECT_EQ(src.pause_calls, 5);
  for (std::uint64_t i = 3; i < kRefreshCycles; ++i) collect();
  EXPECT_EQ(src.pause_calls, 5);
  collect();
  EXPECT_EQ(src.pause_calls, 6);
  EXPECT_EQ(src.fec_calls, 6);
  // The same interface under a new ifindex (a driver reloaded): asked.
  src.links = {make_link(3, "eth0")};
  collect();
  EXPECT_EQ(src.pause_calls, 7);
}

TEST(NicCollector, LinkStatisticsStateAndOlderKernels) {
  FakeNode node = make_node();
  LinkRecord l = make_link(2, "eth0");
  for (std::size_t i = 0; i < kLinkStatCount; ++i) l.stats[i] = 100 + i;
  l.stat_count = 24;  // a 5.x kernel: no rx_otherhost_dropped
  l.operstate = 2;    // down
  l.carrier = 0;
  node.source->links = {l};
  MetricSink sink(node.collector->metrics());
  CollectOnce(*node.collector, sink);
  EXPECT_EQ(Value(sink, "nodewatch_nic_received_packets_total", {"eth0"}), 100);
  EXPECT_EQ(Value(sink, "nodewatch_nic_transmitted_bytes_total", {"eth0"}), 103);
  EXPECT_EQ(Value(sink, "nodewatch_nic_receive_missed_total", {"eth0"}), 115);
  EXPECT_EQ(Value(sink, "nodewatch_nic_transmit_carrier_errors_total", {"eth0"}), 117);
  EXPECT_EQ(Value(sink, "nodewatch_nic_receive_nohandler_total", {"eth0"}), 123);
  EXPECT_FALSE(has(sink, "nodewatch_nic_receive_otherhost_dropped_total", {"eth0"}));
  EXPECT_EQ(Value(sink, "nodewatch_nic_up", {"eth0"}), 0);
  EXPECT_EQ(Value(sink, "nodewatch_nic_carrier", {"eth0"}), 0);
  EXPECT_EQ(Value(sink, "nodewatch_nic_carrier_changes_total", {"eth0"}), 4);
}

TEST(NicCollector, DefaultSelectionExcludesLoopbackAndContainerInterfaces) {
  FakeNode node = make_node();
  int i = 1;
  for (std::string name : {"lo", "veth3f2a1b", "cali8d1e2f3a4b5", "docker0", "eth0", "ib0",
                           "ens1f0np0", "br-0123456789ab", "bond0"}) {
    node.source->links.push_back(make_link(i++, name));
  }
  MetricSink sink(node.collector->metrics());
  CollectOnce(*node.collector, sink);
  for (std::string name : {"lo", "veth3f2a1b", "cali8d1e2f3a4b5", "docker0", "br-0123456789ab"}) {
    EXPECT_FALSE(has(sink, "nodewatch_nic_up", {name})) << name;
  }
  for (std::string name : {"eth0", "ib0", "ens1f0np0", "bond0"}) {
    EXPECT_TRUE(has(sink, "nodewatch_nic_up", {name})) << name;
  }
}

TEST(NicCollector, HotPlugAndIndexReuse) {
  FakeNode node = make_node();
  node.source->links = {make_link(2, "eth0", 10), make_link(3, "eth1", 20)};
  node.source->qdiscs = {QdiscRecord{3, 0, 0xffffffff, "mq", true, 1, 1, 1, true}};
  {
    MetricSink sink(node.collector->metrics());
    CollectOnce(*node.collector, sink);
    EXPECT_EQ(node.collector->tracked_interfaces(), 2u);
    EXPECT_EQ(node.collector->tracked_qdiscs(), 1u);
  }
  // eth1 unplugged; a new device takes index 2 under another name.
  node.source->links = {make_link(2, "eth5", 7)};
  MetricSink sink(node.collector->metrics());
  CollectOnce(*node.collector, sink);
  EXPECT_FALSE(has(sink, "nodewatch_nic_up", {"eth1"}));
  EXPECT_FALSE(has(sink, "nodewatch_nic_up", {"eth0"}));
  EXPECT_EQ(Value(sink, "nodewatch_nic_received_bytes_total", {"eth5"}), 7);
  EXPECT_EQ(node.collector->tracked_interfaces(), 1u);
  EXPECT_EQ(node.collector->tracked_qdiscs(), 0u);
}

TEST(NicCollector, QdiscCountersAccumulate32BitWraps) {
  FakeNode node = make_node();
  node.source->links = {make_link(2, "eth0")};
  QdiscRecord q;
  q.ifindex = 2;
  q.handle = 0x00010000;
  q.parent = 0xffffffff;
  q.kind = "tbf";
  q.has_basic = true;
  q.bytes = 5000000000ull;
  q.packets32 = 4294967000u;  // no TCA_STATS_PKT64: an older kernel
  q.has_queue = true;
  q.drops = 4294967290u;
  q.overlimits = 10;
  q.backlog = 3000;
  q.qlen = 2;
  node.source->qdiscs = {q};
  const std::vector<std::string> labels = {"eth0", "tbf", "1:", "root"};
  {
    MetricSink sink(node.collector->metrics());
    CollectOnce(*node.collector, sink);
    EXPECT_EQ(Value(sink, "nodewatch_nic_qdisc_drops_total", labels), 4294967290.0);
    EXPECT_EQ(Value(sink, "nodewatch_nic_qdisc_backlog_bytes", labels), 3000);
    EXPECT_EQ(Value(sink, "nodewatch_nic_qdisc_queue_length_packets", labels), 2);
    EXPECT_EQ(Value(sink, "nodewatch_nic_qdisc_bytes_total", labels), 5000000000.0);
  }
  node.source->qdiscs[0].drops = 5;        // wrapped: +11
  node.source->qdiscs[0].packets32 = 100;  // wrapped: +396
  node.source->qdiscs[0].overlimits = 11;
  MetricSink sink(node.collector->metrics());
  CollectOnce(*node.collector, sink);
  EXPECT_EQ(Value(sink, "nodewatch_nic_qdisc_drops_total", labels), 4294967290.0 + 11);
  EXPECT_EQ(Value(sink, "nodewatch_nic_qdisc_packets_total", labels), 4294967000.0 + 396);
  EXPECT_EQ(Value(sink, "nodewatch_nic_qdisc_overlimits_total", labels), 11);
}

TEST(NicCollector, QdiscDumpFailureKeepsTheLinks) {
  FakeNode node = make_node();
  node.source->links = {make_link(2, "eth0", 10)};
  node.source->qdisc_fails = true;
  MetricSink sink(node.collector->metrics());
  CollectOnce(*node.collector, sink);
  EXPECT_EQ(error_count(sink, "netlink_error"), 1u);
  EXPECT_EQ(Value(sink, "nodewatch_nic_received_bytes_total", {"eth0"}), 10);
}

TEST(NicCollector, MalformedMessagesAndBadNamesAreCounted) {
  FakeNode node = make_node();
  node.source->links = {make_link(2, "eth0"), make_link(3, "bad\xff")};
  node.source->malformed_links = 2;
  MetricSink sink(node.collector->metrics());
  CollectOnce(*node.collector, sink);
  EXPECT_EQ(error_count(sink, "parse_error"), 3u);
  EXPECT_TRUE(has(sink, "nodewatch_nic_up", {"eth0"}));
}

TEST(NicCollector, ProtocolCountersFromProcfs) {
  FakeNode node = make_node();  // procfs root: proc-5.15
  MetricSink sink(node.collector->metrics());
  CollectOnce(*node.collector, sink);
  EXPECT_EQ(Value(sink, "nodewatch_nic_tcp_retransmitted_segments_total", {}), 51515);
  EXPECT_EQ(Value(sink, "nodewatch_nic_tcp_timeouts_total", {}), 5150);
  EXPECT_EQ(Value(sink, "nodewatch_nic_tcp_listen_overflows_total", {}), 15);
  EXPECT_EQ(Value(sink, "nodewatch_nic_tcp_listen_drops_total", {}), 16);
  EXPECT_EQ(Value(sink, "nodewatch_nic_tcp_receive_queue_drops_total", {}), 5);
  EXPECT_EQ(Value(sink, "nodewatch_nic_udp_receive_buffer_errors_total", {}), 5151);
  EXPECT_EQ(Value(sink, "nodewatch_nic_udp_input_errors_total", {}), 5152);
  EXPECT_EQ(Value(sink, "nodewatch_nic_tcp_input_errors_total", {}), 515);
  EXPECT_EQ(Value(sink, "nodewatch_nic_ip_input_errors_total", {}), 11 + 22);
}

TEST(NicCollector, OlderKernelLacksAField) {
  auto src = std::make_unique<FakeSource>();
  NicCollector c(Roots{"/nonexistent", nic_fixtures() / "proc-4.19"}, NicOptions{}, std::move(src));
  MetricSink sink(c.metrics());
  CollectOnce(c, sink);
  EXPECT_EQ(Value(sink, "nodewatch_nic_tcp_retransmitted_segments_total", {}), 41919);
  EXPECT_FALSE(has(sink, "nodewatch_nic_tcp_receive_queue_drops_total", {}));
  EXPECT_TRUE(sink.errors().empty());
}

TEST(NicCollector, NoProcNetIsNotAnError) {
  NicCollector c(Roots{"/nonexistent", "/nonexistent"}, NicOptions{},
                 std::make_unique<FakeSource>());
  MetricSink sink(c.metrics());
  CollectOnce(c, sink);
  EXPECT_EQ(sink.sample_count(), 0u);
  EXPECT_TRUE(sink.errors().empty());
}

// An errno injected on /proc/net/snmp in the middle of a collection: an
// error is counted under the file and its series left out; absent or gone
// is no error; netstat's series stay; the next collection reads it again.
TEST(NicCollector, ProcNetFailuresAreCountedUnderTheFile) {
  for (int err : {EACCES, EIO, ENODEV, ENOENT}) {
    SCOPED_TRACE(sources::errno_name(err));
    auto faults = std::make_shared<sources::Faults>();
    NicCollector c(Roots{nic_fixtures() / "no-sys", nic_fixtures() / "proc-5.15", faults},
                   NicOptions{}, std::make_unique<FakeSource>());
    MetricSink first(c.metrics());
    CollectOnce(c, first);
    EXPECT_EQ(c.held_descriptors(), 2u);  // snmp and netstat
    const int fds = open_fds();

    faults->inject("net/snmp", err, 1);
    MetricSink failed(c.metrics());
    CollectOnce(c, failed);
    EXPECT_FALSE(has(failed, "nodewatch_nic_tcp_retransmitted_segments_total", {}));
    EXPECT_FALSE(has(failed, "nodewatch_nic_udp_input_errors_total", {}));
    EXPECT_EQ(Value(failed, "nodewatch_nic_tcp_timeouts_total", {}), 5150);  // netstat
    bool counted = err == EACCES || err == EIO;
    EXPECT_EQ(error_count(failed, "read_error"), counted ? 1u : 0u);
    if (counted) {
      const std::map<MetricSink::FailureKey, std::string> expected = {
          {{"read_error", "net/snmp"}, sources::errno_name(err)}};
      EXPECT_EQ(failed.failures(), expected);
    }

    MetricSink again(c.metrics());
    CollectOnce(c, again);
    EXPECT_EQ(Value(again, "nodewatch_nic_tcp_retransmitted_segments_total", {}), 51515);
    EXPECT_TRUE(again.errors().empty());
    EXPECT_EQ(c.held_descriptors(), 2u);
    EXPECT_EQ(open_fds(), fds);
  }
}

TEST(NicCollector, HeldProcNetDescriptorsDoNotLeak) {
  const int fds = open_fds();
  {
    NicCollector c(Roots{nic_fixtures() / "no-sys", nic_fixtures() / "proc-5.15"}, NicOptions{},
                   std::make_unique<FakeSource>());
    for (int i = 0; i < 5; ++i) {
      MetricSink sink(c.metrics());
      CollectOnce(c, sink);
      EXPECT_EQ(open_fds(), fds + 2) << "collection " << i;
    }
    NicCollector none(Roots{nic_fixtures() / "no-sys", nic_fixtures() / "proc-5.15"}, NicOptions{},
                      std::make_unique<FakeSource>(), nullptr, 0);
    MetricSink sink(none.metrics());
    CollectOnce(none, sink);
    EXPECT_EQ(Value(sink, "nodewatch_nic_tcp_timeouts_total", {}), 5150);
    EXPECT_EQ(none.held_descriptors(), 0u);
    EXPECT_EQ(open_fds(), fds + 2);
  }
  EXPECT_EQ(open_fds(), fds);
}

// A reload that changed the options builds the new collector from the same
// Services while the old one exists: a qdisc's 32-bit drops that wrap just
// after go on from the old collector's offset.
TEST(NicCollector, QdiscWrapOffsetsOutliveARebuiltCollector) {
  Services services;
  auto fake_with = [](std::uint32_t drops) {
    auto src = std::make_unique<FakeSource>();
    src->links = {make_link(2, "eth0")};
    QdiscRecord q;
    q.ifindex = 2;
    q.handle = 0x00010000;
    q.parent = 0xffffffff;
    q.kind = "tbf";
    q.has_queue = true;
    q.drops = drops;
    src->qdiscs = {q};
    return src;
  };
  const std::vector<std::string> labels = {"eth0", "tbf", "1:", "root"};
  auto options = [](NicOptions o) {
    return std::shared_ptr<const CollectorOptions>(
        std::make_shared<const TypedOptions<NicOptions>>(std::move(o)));
  };
  Roots roots{"/nonexistent", "/nonexistent"};
  std::unique_ptr<NicCollector> first = make_nic_collector(
      CollectorEnv{roots, options(NicOptions{}), {}, &services}, fake_with(4294967290u));
  MetricSink s1(first->metrics());
  CollectOnce(*first, s1);
  EXPECT_EQ(Value(s1, "nodewatch_nic_qdisc_drops_total", labels), 4294967290.0);

  NicOptions changed;
  changed.protocol_statistics = false;
  std::unique_ptr<NicCollector> second =
      make_nic_collector(CollectorEnv{roots, options(changed), {}, &services}, fake_with(5));
  first.reset();
  MetricSink s2(second->metrics());
  CollectOnce(*second, s2);
  EXPECT_EQ(Value(s2, "nodewatch_nic_qdisc_drops_total", labels), 4294967290.0 + 11);
}

TEST(NicCollector, DriverCounterPatternsMatchWholeNames) {
  NicOptions o;
  // Each is anchored as a whole ("^(?:rx0_packets|tx0_packets)$"), so the
  // alternation cannot leak out of the anchors and "packets" matches no name.
  o.driver_counters = {"rx0_packets|tx0_packets", "packets", "rx_prio3_pause"};
  FakeNode node = two_vendor_node(o);
  MetricSink sink(node.collector->metrics());
  CollectOnce(*node.collector, sink);
  const std::string cx = "ens1f0np0";
  EXPECT_EQ(Value(sink, "nodewatch_nic_driver_counters_total", {cx, "rx0_packets"}), 459136822);
  EXPECT_TRUE(has(sink, "nodewatch_nic_driver_counters_total", {cx, "tx0_packets"}));
  EXPECT_FALSE(has(sink, "nodewatch_nic_driver_counters_total", {cx, "rx_packets_phy"}));
  EXPECT_EQ(Value(sink, "nodewatch_nic_pfc_pause_frames_total", {cx, "rx", "3"}), 182736);
  EXPECT_FALSE(has(sink, "nodewatch_nic_pfc_pause_seconds_total", {cx, "rx", "3"}));
  EXPECT_EQ(anchored("a|b"), "^(?:a|b)$");
}

// ---------------------------------------------------------- configuration

std::vector<CollectorSpec> nic_catalog() {
  return {nic_collector_spec()};
}

// 10,000 driver_counters patterns (each an RE2 compiled at load, each
// matched against every statistic of every NIC each cycle) are refused.
TEST(NicConfig, TooManyDriverCounterPatternsAreRefused) {
  auto catalog = nic_catalog();
  auto list = [](std::size_t n) {
    std::string t = "[collectors.nic]\ndriver_counters = [";
    for (std::size_t i = 0; i < n; ++i)
      t += std::string(i ? ", " : "") + "\"c" + std::to_string(i) + "\"";
    return t + "]\n";
  };
  ConfigResult over = parse_config(list(kMaxDriverCounterPatterns + 1), "n.toml", catalog);
  ASSERT_EQ(over.errors.size(), 1u);
  EXPECT_EQ(over.errors[0].key, "collectors.nic.driver_counters");
  EXPECT_NE(over.errors[0].message.find("257 elements; at most 256"), std::string::npos)
      << over.errors[0].str();
  EXPECT_TRUE(parse_config(list(kMaxDriverCounterPatterns), "n.toml", catalog).config);
}

TEST(NicConfig, InvalidRegexIsAConfigErrorAtLoad) {
  auto catalog = nic_catalog();
  ConfigResult r =
      parse_config("[collectors.nic]\ninterfaces_exclude = \"(\"\n", "nodewatch.toml", catalog);
  EXPECT_FALSE(r.config);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].key, "collectors.nic.interfaces_exclude");
  EXPECT_EQ(r.errors[0].line, 2);
  EXPECT_NE(r.errors[0].message.find("is not a valid regular expression (RE2 syntax)"),
            std::string::npos)
      << r.errors[0].message;

  r = parse_config("[collectors.nic]\ninterfaces_include = \"[a-\"\n", "n.toml", catalog);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].key, "collectors.nic.interfaces_include");

  r = parse_config("[collectors.nic]\ndriver_counters = [\"rx_.*\", \"*bad\"]\n", "n.toml",
                   catalog);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].key, "collectors.nic.driver_counters");
  EXPECT_NE(r.errors[0].message.find("\"*bad\" is not a valid regular expression (RE2 syntax)"),
            std::string::npos)
      << r.errors[0].message;

  // RE2 refuses what std::regex took and cannot bound (a lookahead), and a
  // pattern over the shared length limit.
  r = parse_config("[collectors.nic]\ndriver_counters = [\"(?=rx)\"]\n", "n.toml", catalog);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].key, "collectors.nic.driver_counters");
  r = parse_config("[collectors.nic]\ndriver_counters = [\"" + std::string(5000, 'a') + "\"]\n",
                   "n.toml", catalog);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_NE(r.errors[0].message.find("longer than"), std::string::npos) << r.errors[0].message;
}

TEST(NicConfig, UnknownKeyAndWrongTypeAreErrors) {
  auto catalog = nic_catalog();
  ConfigResult r = parse_config(
      "[collectors.nic]\nqdiscs = \"yes\"\ninterface_exclude = \"x\"\nmax_driver_counters = -1\n",
      "n.toml", catalog);
  EXPECT_FALSE(r.config);
  EXPECT_EQ(r.errors.size(), 3u);
}

TEST(NicConfig, OptionsReachTheCollector) {
  auto catalog = nic_catalog();
  ConfigResult r = parse_config(
      "[collectors.nic]\ninterfaces_include = \"^veth\"\ninterfaces_exclude = \"\"\n"
      "driver_counters = [\"peer_ifindex\"]\nqdiscs = false\nprotocol_statistics = false\n",
      "n.toml", catalog);
  ASSERT_TRUE(r.config) << (r.errors.empty() ? "" : r.errors[0].str());
  CollectorEnv env{Roots{}, r.config->collectors[0].options};
  const NicOptions& o = env.options_as<NicOptions>();
  EXPECT_EQ(o.interfaces.include, "^veth");
  EXPECT_EQ(o.interfaces.exclude, "");
  EXPECT_EQ(o.driver_counters, std::vector<std::string>{"peer_ifindex"});
  EXPECT_FALSE(o.qdiscs);
  EXPECT_FALSE(o.protocol_statistics);
  EXPECT_TRUE(o.driver_statistics);
}

}  // namespace
}  // namespace nodewatch::nic
