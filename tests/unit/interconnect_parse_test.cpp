// Tests of the interconnect collector's pure parts: the sysfs attribute
// parsers with the kernel's own output formats, the counter tables, the
// 32-bit wrap rule as mlx5's counters need it, and the RDMA netlink reply
// parser over byte strings built here by hand with the kernel ABI's numbers (uapi
// rdma/rdma_netlink.h: RDMA_NL_NLDEV = 5, RDMA_NLDEV_CMD_GET = 1,
// RDMA_NLDEV_CMD_STAT_GET = 17; attributes DEV_INDEX 1, DEV_NAME 2,
// PORT_INDEX 3, STAT_HWCOUNTERS 80, _ENTRY 81, _ENTRY_NAME 82,
// _ENTRY_VALUE 83, _INDEX 94, _DYNAMIC 95, PAD 0), written as literals so
// that a wrong constant in the code cannot agree with itself.

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "interconnect/ib_parse.hpp"
#include "interconnect/rdma_netlink.hpp"
#include "nodewatch/sources/wrap_counter.hpp"

namespace nodewatch::interconnect {
namespace {

TEST(IbParse, NumberedStates) {
  EXPECT_EQ(parse_numbered_state("4: ACTIVE\n"), 4u);
  EXPECT_EQ(parse_numbered_state("1: DOWN\n"), 1u);
  EXPECT_EQ(parse_numbered_state("5: LinkUp\n"), 5u);
  EXPECT_EQ(parse_numbered_state("3: Disabled\n"), 3u);
  EXPECT_EQ(parse_numbered_state("4: PortConfigurationTraining\n"), 4u);
  EXPECT_FALSE(parse_numbered_state("ACTIVE\n"));
  EXPECT_FALSE(parse_numbered_state(": ACTIVE\n"));
  EXPECT_FALSE(parse_numbered_state("x: ACTIVE\n"));
  EXPECT_FALSE(parse_numbered_state("300: ACTIVE\n"));
  EXPECT_FALSE(parse_numbered_state(""));
}

TEST(IbParse, RatesInBytesPerSecond) {
  // Gb/sec * 1e9 / 8.
  auto r = parse_rate("100 Gb/sec (4X EDR)\n");
  ASSERT_TRUE(r);
  EXPECT_DOUBLE_EQ(r->bytes_per_second, 12.5e9);
  EXPECT_EQ(r->width, 4u);
  r = parse_rate("56 Gb/sec (4X FDR)\n");
  ASSERT_TRUE(r);
  EXPECT_DOUBLE_EQ(r->bytes_per_second, 7e9);
  r = parse_rate("2.5 Gb/sec (1X SDR)\n");
  ASSERT_TRUE(r);
  EXPECT_DOUBLE_EQ(r->bytes_per_second, 312.5e6);
  EXPECT_EQ(r->width, 1u);
  r = parse_rate("400 Gb/sec (4X NDR)\n");
  ASSERT_TRUE(r);
  EXPECT_DOUBLE_EQ(r->bytes_per_second, 50e9);
  r = parse_rate("200 Gb/sec (2X NDR)\n");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->width, 2u);
  r = parse_rate("25 Gb/sec\n");  // no width printed
  ASSERT_TRUE(r);
  EXPECT_DOUBLE_EQ(r->bytes_per_second, 3.125e9);
  EXPECT_FALSE(r->width);
  EXPECT_FALSE(parse_rate("100 Mb/sec (4X EDR)\n"));
  EXPECT_FALSE(parse_rate("fast\n"));
  EXPECT_FALSE(parse_rate(""));
  EXPECT_FALSE(parse_rate("-1 Gb/sec (4X EDR)"));
  // No link signals at these (the first found by fuzzing: "0 Gb/sec" was
  // taken as a rate of 0 bytes/s).
  EXPECT_FALSE(parse_rate("0 Gb/sec (4X EDR)\n"));
  EXPECT_FALSE(parse_rate("0.0 Gb/sec\n"));
  EXPECT_FALSE(parse_rate("inf Gb/sec (4X EDR)\n"));
  EXPECT_FALSE(parse_rate("nan Gb/sec (4X EDR)\n"));
}

TEST(IbParse, Counters) {
  Counter c = parse_counter("18446744073709551615\n");
  EXPECT_EQ(c.reading, CounterReading::kValue);
  EXPECT_EQ(c.value, UINT64_MAX);
  EXPECT_EQ(parse_counter("N/A (no PMA)\n").reading, CounterReading::kNoPma);
  EXPECT_EQ(parse_counter("").reading, CounterReading::kMalformed);
  EXPECT_EQ(parse_counter("-1\n").reading, CounterReading::kMalformed);
  EXPECT_EQ(parse_counter("12a\n").reading, CounterReading::kMalformed);
  EXPECT_EQ(parse_counter("18446744073709551616\n").reading, CounterReading::kMalformed);
}

TEST(IbParse, PmaFiles) {
  PmaFile f = classify_pma_file("port_xmit_data", false);
  EXPECT_EQ(f.metric, PmaMetric::kTransmittedBytes);
  EXPECT_EQ(f.multiplier, 4u);
  EXPECT_FALSE(f.overrides);
  f = classify_pma_file("port_rcv_data_64", true);
  EXPECT_EQ(f.metric, PmaMetric::kReceivedBytes);
  EXPECT_EQ(f.multiplier, 4u);
  EXPECT_TRUE(f.overrides);
  f = classify_pma_file("port_rcv_packets", false);
  EXPECT_EQ(f.metric, PmaMetric::kReceivedPackets);
  EXPECT_EQ(f.multiplier, 1u);
  EXPECT_EQ(classify_pma_file("VL15_dropped", false).metric, PmaMetric::kVl15Dropped);
  EXPECT_EQ(classify_pma_file("symbol_error", false).metric, PmaMetric::kSymbolErrors);
  f = classify_pma_file("port_rcv_switch_relay_errors", false);
  EXPECT_EQ(f.metric, PmaMetric::kGeneric);
  EXPECT_EQ(f.label, "port_rcv_switch_relay_errors");
  // counters_ext/ names its unicast/multicast files with a port_ prefix.
  f = classify_pma_file("port_unicast_rcv_packets", true);
  EXPECT_EQ(f.metric, PmaMetric::kGeneric);
  EXPECT_EQ(f.label, "unicast_rcv_packets");
  EXPECT_EQ(classify_pma_file("unicast_rcv_packets", false).label, "unicast_rcv_packets");
  // Only the _64 files of counters_ext/ are curated there.
  EXPECT_EQ(classify_pma_file("port_xmit_data", true).metric, PmaMetric::kGeneric);
}

TEST(IbParse, HwCounters) {
  EXPECT_EQ(classify_hw_counter("np_ecn_marked_roce_packets"), HwMetric::kEcnMarked);
  EXPECT_EQ(classify_hw_counter("rp_cnp_ignored"), HwMetric::kCnpIgnored);
  EXPECT_EQ(classify_hw_counter("roce_adp_retrans"), HwMetric::kRetransmits);
  EXPECT_EQ(classify_hw_counter("roce_adp_retrans_to"), HwMetric::kGeneric);
  EXPECT_EQ(classify_hw_counter("lifespan"), HwMetric::kSkip);
  EXPECT_EQ(classify_hw_counter("sent_pkts"), HwMetric::kGeneric);
  // mlx5 Q-counters are 32 bits, congestion counters 64.
  EXPECT_TRUE(hw_counter_is_32bit("out_of_buffer"));
  EXPECT_TRUE(hw_counter_is_32bit("local_ack_timeout_err"));
  EXPECT_FALSE(hw_counter_is_32bit("np_cnp_sent"));
  EXPECT_FALSE(hw_counter_is_32bit("rp_cnp_handled"));
  EXPECT_FALSE(hw_counter_is_32bit("rdma_tx_bytes"));
}

// The hw_counters wrap rule is sources::WrapCounter's, fed with
// hw_counter_is_32bit(): these are the cases it must get right for mlx5.
TEST(IbWrap, ThirtyTwoBitQCounterWrapReadsAsTheDifference) {
  const bool q = hw_counter_is_32bit("local_ack_timeout_err");
  sources::WrapCounter a;
  EXPECT_EQ(a.update(4294967290u, q), 4294967290u);
  // 6 to reach 2^32, then 5: +11.
  EXPECT_EQ(a.update(5, q), 4294967290ull + 11);
  EXPECT_EQ(a.update(100, q), 4294967296ull + 100);
  // A second wrap.
  EXPECT_EQ(a.update(4294967000u, q), 4294967296ull + 4294967000ull);
  EXPECT_EQ(a.update(4, q), 2 * 4294967296ull + 4);
}

TEST(IbWrap, ResetReadsAsAResetNotAJump) {
  sources::WrapCounter a;
  a.update(1000, true);
  // Down by 990: not a plausible wrap (that would be +2^32-990).
  EXPECT_EQ(a.update(10, true), 10u);
  EXPECT_EQ(a.update(20, true), 20u);
  // After a wrap the device resets: the value restarts from the raw one.
  a.update(4294967200u, true);
  EXPECT_EQ(a.update(50, true), 4294967296ull + 50);
  EXPECT_EQ(a.update(3, true), 3u);
}

TEST(IbWrap, SixtyFourBitCountersNeverWrapAt32Bits) {
  const bool cnp = hw_counter_is_32bit("np_cnp_sent");
  ASSERT_FALSE(cnp);
  sources::WrapCounter a;
  a.update(4294967290u, cnp);
  EXPECT_EQ(a.update(5, cnp), 5u);  // a reset
  sources::WrapCounter b;
  b.update(10'000'000'000u, true);  // above 2^32: cannot be a 32-bit counter
  EXPECT_EQ(b.update(5, true), 5u);
}

TEST(IbParse, Labels) {
  EXPECT_EQ(attribute_label("MT_0000000223\n"), "MT_0000000223");
  EXPECT_EQ(attribute_label("a\tb\n"), "a b");
  EXPECT_EQ(attribute_label(std::string("x\xff", 2)), "x?");
}

// --- RDMA netlink -------------------------------------------------------

// Little-endian byte writer for hand-built messages.
class Bytes {
 public:
  Bytes& u16(std::uint16_t v) {
    b_.push_back(static_cast<std::uint8_t>(v));
    b_.push_back(static_cast<std::uint8_t>(v >> 8));
    return *this;
  }
  Bytes& u32(std::uint32_t v) {
    u16(static_cast<std::uint16_t>(v));
    return u16(static_cast<std::uint16_t>(v >> 16));
  }
  Bytes& u64(std::uint64_t v) {
    u32(static_cast<std::uint32_t>(v));
    return u32(static_cast<std::uint32_t>(v >> 32));
  }
  Bytes& raw(const std::vector<std::uint8_t>& v) {
    b_.insert(b_.end(), v.begin(), v.end());
    return *this;
  }
  Bytes& pad() {
    while (b_.size() % 4) b_.push_back(0);
    return *this;
  }
  const std::vector<std::uint8_t>& get() const { return b_; }

 private:
  std::vector<std::uint8_t> b_;
};

std::vector<std::uint8_t> attr(std::uint16_t type, const std::vector<std::uint8_t>& payload) {
  Bytes b;
  b.u16(static_cast<std::uint16_t>(4 + payload.size())).u16(type).raw(payload).pad();
  return b.get();
}
std::vector<std::uint8_t> attr_u32(std::uint16_t type, std::uint32_t v) {
  return attr(type, Bytes().u32(v).get());
}
std::vector<std::uint8_t> attr_u64(std::uint16_t type, std::uint64_t v) {
  return attr(type, Bytes().u64(v).get());
}
std::vector<std::uint8_t> attr_str(std::uint16_t type, const std::string& s) {
  std::vector<std::uint8_t> p(s.begin(), s.end());
  p.push_back(0);
  return attr(type, p);
}
constexpr std::uint16_t kNested = 0x8000;  // NLA_F_NESTED, as nla_nest_start() sets it

std::vector<std::uint8_t> message(std::uint16_t type, std::uint16_t flags, std::uint32_t seq,
                                  const std::vector<std::vector<std::uint8_t>>& attrs) {
  Bytes body;
  for (const auto& a : attrs) body.raw(a);
  Bytes m;
  m.u32(static_cast<std::uint32_t>(16 + body.get().size())).u16(type).u16(flags).u32(seq).u32(4242);
  m.raw(body.get());
  return m.get();
}

std::vector<std::uint8_t> entry(const std::string& name, std::uint64_t value, bool extras) {
  std::vector<std::uint8_t> inner;
  auto add = [&](const std::vector<std::uint8_t>& a) {
    inner.insert(inner.end(), a.begin(), a.end());
  };
  add(attr_str(82, name));
  add(attr(0, {}));  // RDMA_NLDEV_ATTR_PAD before the u64, as nla_put_u64_64bit writes it
  add(attr_u64(83, value));
  if (extras) {
    add(attr_u32(94, 7));                 // _HWCOUNTER_INDEX (6.0+)
    add(attr(95, Bytes().u32(1).get()));  // _HWCOUNTER_DYNAMIC
    add(attr_u32(1234, 1));               // an attribute no kernel has yet
  }
  return attr(81 | kNested, inner);
}

constexpr std::uint16_t kStatGet = 5137;  // (5 << 10) + 17
constexpr std::uint16_t kGet = 5121;      // (5 << 10) + 1

std::vector<std::uint8_t> stat_reply(std::uint32_t seq) {
  std::vector<std::uint8_t> table;
  for (const auto& e :
       {entry("rx_write_requests", 12, false), entry("np_cnp_sent", 1ull << 40, true),
        entry("out_of_buffer", 4294967295u, true)}) {
    table.insert(table.end(), e.begin(), e.end());
  }
  return message(kStatGet, 0, seq,
                 {attr_u32(1, 3), attr_str(2, "mlx5_1"), attr_u32(3, 1), attr_u32(999, 5),
                  attr(80 | kNested, table)});
}

TEST(RdmaNetlink, ParsesAStatGetReplyAndSkipsUnknownAttributes) {
  std::vector<std::uint8_t> bytes = stat_reply(77);
  std::vector<RdmaMessage> out;
  int err = 0;
  ASSERT_EQ(parse_rdma_messages(bytes, 77, &out, &err), NlParse::kDone);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].dev_index, 3u);
  EXPECT_EQ(out[0].dev_name, "mlx5_1");
  EXPECT_EQ(out[0].port_index, 1u);
  ASSERT_TRUE(out[0].has_hwcounters);
  ASSERT_EQ(out[0].hwcounters.size(), 3u);
  EXPECT_EQ(out[0].hwcounters[0].name, "rx_write_requests");
  EXPECT_EQ(out[0].hwcounters[0].value, 12u);
  EXPECT_EQ(out[0].hwcounters[1].name, "np_cnp_sent");
  EXPECT_EQ(out[0].hwcounters[1].value, 1ull << 40);
  EXPECT_EQ(out[0].hwcounters[2].value, 4294967295u);
}

TEST(RdmaNetlink, EveryTruncationIsMalformedNeverACrash) {
  std::vector<std::uint8_t> bytes = stat_reply(1);
  for (std::size_t cut = 1; cut < bytes.size(); ++cut) {
    std::vector<std::uint8_t> part(bytes.begin(), bytes.begin() + static_cast<long>(cut));
    std::vector<RdmaMessage> out;
    int err = 0;
    EXPECT_EQ(parse_rdma_messages(part, 1, &out, &err), NlParse::kMalformed) << "cut " << cut;
    EXPECT_TRUE(out.empty());
  }
}

TEST(RdmaNetlink, NestedAttributeLongerThanItsParentIsMalformed) {
  std::vector<std::uint8_t> bytes = stat_reply(1);
  // The STAT_HWCOUNTERS table is the last attribute; make its first
  // entry's length (type 81 | NLA_F_NESTED) run past the end of the table.
  std::size_t entry_at = 0;
  for (std::size_t i = 16; i + 4 <= bytes.size(); i += 4) {
    if (bytes[i + 2] == 81 && bytes[i + 3] == 0x80) {
      entry_at = i;
      break;
    }
  }
  ASSERT_NE(entry_at, 0u);
  bytes[entry_at] = 0xff;
  bytes[entry_at + 1] = 0x0f;
  std::vector<RdmaMessage> out;
  int err = 0;
  EXPECT_EQ(parse_rdma_messages(bytes, 1, &out, &err), NlParse::kMalformed);
}

TEST(RdmaNetlink, KernelErrorAndAck) {
  // NLMSG_ERROR (2): int error, then the offending request's header.
  std::vector<std::uint8_t> payload = Bytes().u32(static_cast<std::uint32_t>(-EOPNOTSUPP)).get();
  std::vector<std::uint8_t> req = build_stat_get_request(9, 3, 1);
  payload.insert(payload.end(), req.begin(), req.begin() + 16);
  Bytes m;
  m.u32(static_cast<std::uint32_t>(16 + payload.size())).u16(2).u16(0).u32(9).u32(0).raw(payload);
  std::vector<RdmaMessage> out;
  int err = 0;
  EXPECT_EQ(parse_rdma_messages(m.get(), 9, &out, &err), NlParse::kError);
  EXPECT_EQ(err, EOPNOTSUPP);
  // error 0 is an acknowledgement.
  Bytes ack;
  ack.u32(36).u16(2).u16(0).u32(9).u32(0).u32(0).raw(
      std::vector<std::uint8_t>(req.begin(), req.begin() + 16));
  EXPECT_EQ(parse_rdma_messages(ack.get(), 9, &out, &err), NlParse::kDone);
}

// An NLMSG_ERROR whose code is no errno the kernel sends (found by
// fuzzing: INT_MIN was negated, undefined behaviour) is malformed.
TEST(RdmaNetlink, AnErrorCodeThatIsNoErrnoIsMalformed) {
  for (std::int64_t code :
       {std::int64_t{INT32_MIN}, std::int64_t{-4096}, std::int64_t{1}, std::int64_t{INT32_MAX}}) {
    Bytes m;
    m.u32(36).u16(2).u16(0).u32(9).u32(0).u32(static_cast<std::uint32_t>(code));
    m.raw(std::vector<std::uint8_t>(16, 0));
    std::vector<RdmaMessage> out;
    int err = 0;
    EXPECT_EQ(parse_rdma_messages(m.get(), 9, &out, &err), NlParse::kMalformed) << code;
    EXPECT_EQ(err, 0) << code;
  }
}

TEST(RdmaNetlink, SkipsRepliesToOtherRequests) {
  std::vector<std::uint8_t> bytes = stat_reply(5);
  std::vector<RdmaMessage> out;
  int err = 0;
  // A late reply to request 5 while waiting for 6: nothing taken, keep reading.
  EXPECT_EQ(parse_rdma_messages(bytes, 6, &out, &err), NlParse::kMore);
  EXPECT_TRUE(out.empty());
}

TEST(RdmaNetlink, DumpAcrossTwoDatagrams) {
  constexpr std::uint16_t kMulti = 2;  // NLM_F_MULTI
  std::vector<std::uint8_t> first =
      message(kGet, kMulti, 4, {attr_u32(1, 0), attr_str(2, "mlx5_0")});
  std::vector<std::uint8_t> second =
      message(kGet, kMulti, 4, {attr_u32(1, 1), attr_str(2, "mlx5_1")});
  first.insert(first.end(), second.begin(), second.end());
  std::vector<RdmaMessage> out;
  int err = 0;
  ASSERT_EQ(parse_rdma_messages(first, 4, &out, &err), NlParse::kMore);
  Bytes done;
  done.u32(20).u16(3).u16(kMulti).u32(4).u32(0).u32(0);  // NLMSG_DONE
  ASSERT_EQ(parse_rdma_messages(done.get(), 4, &out, &err), NlParse::kDone);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].dev_name, "mlx5_0");
  EXPECT_EQ(out[1].dev_index, 1u);
  EXPECT_FALSE(out[1].has_hwcounters);
}

TEST(RdmaNetlink, RequestBytes) {
  std::vector<std::uint8_t> r = build_stat_get_request(0x01020304, 3, 1);
  // What `rdma statistic show link mlx5_1/1` sends (iproute2 rdma/stat.c),
  // less the flags: a 16-byte header and two u32 attributes.
  std::vector<std::uint8_t> expected = {
      32, 0, 0, 0, 0x11, 0x14, 1, 0, 4, 3, 2, 1, 0, 0, 0, 0,  // len, 5137, REQUEST, seq, pid
      8,  0, 1, 0, 3,    0,    0, 0,                          // DEV_INDEX 3
      8,  0, 3, 0, 1,    0,    0, 0,                          // PORT_INDEX 1
  };
  EXPECT_EQ(r, expected);
}

TEST(RdmaNetlink, RealSourceIsUnavailableWithoutTheFamily) {
  int fd = ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, 20 /* NETLINK_RDMA */);
  if (fd >= 0) {
    ::close(fd);
    GTEST_SKIP() << "this kernel has NETLINK_RDMA (ib_core loaded): the fallback cannot be seen";
  }
  auto source = make_netlink_hw_counter_source();
  EXPECT_FALSE(source->begin_cycle());
  int err = -1;
  EXPECT_FALSE(source->port_counters("mlx5_0", 1, &err));
  EXPECT_FALSE(make_disabled_hw_counter_source()->begin_cycle());
}

}  // namespace
}  // namespace nodewatch::interconnect
