// Tests of the interconnect collector's InfiniBand/RoCE part over
// tests/fixtures/interconnect (see its README): values are the fixture's
// raw numbers (PMA data counters times 4, rates Gb/s * 1e9 / 8), worked
// out from the files, not from the code. Also: the sysfs fallback when
// RDMA netlink is unavailable and the netlink values when a (fake) source
// has them; the PMA interval with a fake clock; the 32-bit wrap and a
// device reset through the collector; hot-plug; one bad file, port or
// device never hiding the others; the verbs event stream through a fake
// (events arriving, device gone, library absent) and the real loader.

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>  // before support/collector_test.hpp, which uses std::nan without it
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "config.hpp"
#include "interconnect/interconnect_collector.hpp"
#include "support/collector_test.hpp"

namespace nodewatch::interconnect {
namespace {

namespace fs = std::filesystem;
using nodewatch::testing::CollectOnce;
using nodewatch::testing::ExpectWellFormedTable;
using nodewatch::testing::Value;

const fs::path kFixture = nodewatch::testing::fixtures_dir() / "interconnect" / "sys";
const fs::path kClass = kFixture / "class" / "infiniband";

constexpr const char* kInfo = "nodewatch_interconnect_port_info";
constexpr const char* kState = "nodewatch_interconnect_port_state";
constexpr const char* kPhys = "nodewatch_interconnect_port_physical_state";
constexpr const char* kRate = "nodewatch_interconnect_port_rate_bytes_per_second";
constexpr const char* kWidth = "nodewatch_interconnect_port_width";
constexpr const char* kChanges = "nodewatch_interconnect_port_state_changes_total";
constexpr const char* kTxBytes = "nodewatch_interconnect_port_transmitted_bytes_total";
constexpr const char* kRxBytes = "nodewatch_interconnect_port_received_bytes_total";
constexpr const char* kTxPackets = "nodewatch_interconnect_port_transmitted_packets_total";
constexpr const char* kRxPackets = "nodewatch_interconnect_port_received_packets_total";
constexpr const char* kSymbol = "nodewatch_interconnect_port_symbol_errors_total";
constexpr const char* kDowned = "nodewatch_interconnect_port_link_downed_total";
constexpr const char* kRecovery = "nodewatch_interconnect_port_link_error_recovery_total";
constexpr const char* kRcvErrors = "nodewatch_interconnect_port_receive_errors_total";
constexpr const char* kDiscards = "nodewatch_interconnect_port_transmit_discards_total";
constexpr const char* kWait = "nodewatch_interconnect_port_transmit_wait_total";
constexpr const char* kPmaOther = "nodewatch_interconnect_port_pma_total";
constexpr const char* kEcn = "nodewatch_interconnect_roce_ecn_marked_packets_total";
constexpr const char* kCnpSent = "nodewatch_interconnect_roce_cnp_sent_total";
constexpr const char* kCnpHandled = "nodewatch_interconnect_roce_cnp_handled_total";
constexpr const char* kCnpIgnored = "nodewatch_interconnect_roce_cnp_ignored_total";
constexpr const char* kOob = "nodewatch_interconnect_roce_out_of_buffer_total";
constexpr const char* kOos = "nodewatch_interconnect_roce_out_of_sequence_total";
constexpr const char* kSeqErr = "nodewatch_interconnect_roce_packet_sequence_errors_total";
constexpr const char* kAckTimeouts = "nodewatch_interconnect_roce_local_ack_timeouts_total";
constexpr const char* kRetrans = "nodewatch_interconnect_roce_retransmits_total";
constexpr const char* kHw = "nodewatch_interconnect_hw_counters_total";

// A netlink source that is never there (as on this machine).
class NoNetlink final : public HwCounterSource {
 public:
  bool begin_cycle() override { return false; }
  std::optional<std::vector<HwCounterEntry>> port_counters(std::string_view, std::uint32_t,
                                                           int* error) override {
    *error = 0;
    return std::nullopt;
  }
};

// A netlink source with scripted replies per "device/port".
class FakeNetlink final : public HwCounterSource {
 public:
  std::map<std::string, std::vector<HwCounterEntry>> replies;
  bool available = true;
  int requests = 0;
  bool begin_cycle() override { return available; }
  std::optional<std::vector<HwCounterEntry>> port_counters(std::string_view device,
                                                           std::uint32_t port,
                                                           int* error) override {
    ++requests;
    auto it = replies.find(std::string(device) + "/" + std::to_string(port));
    if (it == replies.end()) {
      *error = EOPNOTSUPP;
      return std::nullopt;
    }
    return it->second;
  }
};

// A verbs source with scripted event counts.
struct FakeVerbsState {
  std::map<std::string, std::map<unsigned, std::uint64_t>> changes;  // devices with a stream
  std::set<std::string> unopenable;
  std::vector<std::vector<std::string>> syncs;
};
class FakeVerbs final : public VerbsSource {
 public:
  explicit FakeVerbs(FakeVerbsState* s) : s_(s) {}
  std::vector<VerbsFailure> sync(const std::vector<std::string>& devices) override {
    s_->syncs.push_back(devices);
    std::vector<VerbsFailure> failed;
    for (const auto& d : devices) {
      if (s_->unopenable.contains(d) && !reported_.contains(d)) {
        reported_.insert(d);
        failed.push_back({d, "cannot open"});
      }
    }
    open_ = std::set<std::string>(devices.begin(), devices.end());
    return failed;
  }
  std::optional<std::uint64_t> state_changes(std::string_view device, unsigned port) override {
    if (!open_.contains(std::string(device))) return std::nullopt;
    auto d = s_->changes.find(std::string(device));
    if (d == s_->changes.end()) return std::nullopt;
    auto p = d->second.find(port);
    if (p == d->second.end()) return std::nullopt;
    return p->second;
  }

 private:
  FakeVerbsState* s_;
  std::set<std::string> open_;
  std::set<std::string> reported_;
};

std::unique_ptr<VerbsSource> NoVerbs() {
  return make_verbs_source("libibverbs.so.1", "/nonexistent/dev/infiniband");
}

struct FakeClock {
  std::chrono::steady_clock::time_point now{std::chrono::hours(1)};
  IbPorts::Clock fn() {
    return [this] { return now; };
  }
};

InterconnectCollector Make(const fs::path& sysfs, std::unique_ptr<HwCounterSource> hw = nullptr,
                           std::unique_ptr<VerbsSource> verbs = nullptr, IbOptions options = {},
                           IbPorts::Clock clock = std::chrono::steady_clock::now) {
  if (!hw) hw = std::make_unique<NoNetlink>();
  if (!verbs) verbs = NoVerbs();
  return InterconnectCollector(std::make_unique<IbPorts>(
      Roots{sysfs, "/nonexistent"}, options, std::move(hw), std::move(verbs), std::move(clock)));
}

std::uint64_t FileValue(const fs::path& p) {
  std::ifstream in(p);
  std::uint64_t v = 0;
  in >> v;
  EXPECT_TRUE(in) << p;
  return v;
}

void WriteFile(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::trunc);  // same inode: held descriptors see it
  out << text << "\n";
}

bool Has(const MetricSink& s, std::string_view name, const std::vector<std::string>& labels) {
  double v = 0;
  return s.get(name, labels, &v);
}

// A writable copy of the fixture.
class TempTree {
 public:
  TempTree() {
    char tmpl[] = "/tmp/nodewatch-ib-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    fs::copy(kFixture, dir_ / "sys", fs::copy_options::recursive);
  }
  ~TempTree() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  fs::path sys() const { return dir_ / "sys"; }
  fs::path cls() const { return sys() / "class" / "infiniband"; }

 private:
  fs::path dir_;
};

TEST(InterconnectCollector, TableIsWellFormed) {
  // The NVLink part's families are borrowed prefixes of the table, not a
  // looser prefix here.
  ExpectWellFormedTable(interconnect_metric_table(), "nodewatch_interconnect_");
  // The contract names of the issue, all declared.
  for (const char* n : {kInfo,
                        kState,
                        kPhys,
                        kRate,
                        kChanges,
                        kTxBytes,
                        kRxBytes,
                        kTxPackets,
                        kRxPackets,
                        kSymbol,
                        kDowned,
                        kRecovery,
                        kRcvErrors,
                        "nodewatch_interconnect_port_receive_remote_physical_errors_total",
                        kDiscards,
                        kWait,
                        "nodewatch_interconnect_port_local_link_integrity_errors_total",
                        "nodewatch_interconnect_port_excessive_buffer_overrun_errors_total",
                        "nodewatch_interconnect_port_vl15_dropped_total",
                        kEcn,
                        kCnpSent,
                        kCnpHandled,
                        kCnpIgnored,
                        kOob,
                        kOos,
                        kSeqErr,
                        kAckTimeouts,
                        kRetrans,
                        kHw}) {
    EXPECT_GE(interconnect_metric_table().find(n), 0) << n;
  }
}

TEST(InterconnectCollector, InfinibandHcaFromSysfs) {
  auto c = Make(kFixture);
  MetricSink s(c.metrics());
  CollectOnce(c, s);
  const std::vector<std::string> p{"mlx5_0", "1"};
  EXPECT_EQ(Value(s, kInfo,
                  {"mlx5_0", "1", "InfiniBand", "", "b83f:d203:00a5:6f30", "20.39.1002",
                   "MT_0000000223", "MT4123"}),
            1);
  EXPECT_EQ(Value(s, kState, p), 4);
  EXPECT_EQ(Value(s, kPhys, p), 5);
  EXPECT_EQ(Value(s, kRate, p), 200e9 / 8);
  EXPECT_EQ(Value(s, kWidth, p), 4);
  EXPECT_EQ(Value(s, kTxBytes, p), 40119227463.0 * 4);
  EXPECT_EQ(Value(s, kRxBytes, p), 38807119930.0 * 4);
  EXPECT_EQ(Value(s, kTxPackets, p), 187230011);
  EXPECT_EQ(Value(s, kRxPackets, p), 180440129);
  EXPECT_EQ(Value(s, kSymbol, p), 3);
  EXPECT_EQ(Value(s, kDowned, p), 1);
  EXPECT_EQ(Value(s, kRecovery, p), 2);
  EXPECT_EQ(Value(s, kRcvErrors, p), 5);
  EXPECT_EQ(Value(s, kDiscards, p), 11);
  EXPECT_EQ(Value(s, kWait, p), 918273);
  const fs::path port = kClass / "mlx5_0" / "ports" / "1";
  // The PMA files without a curated name, under their own names.
  for (const char* f : {"unicast_rcv_packets", "multicast_xmit_packets",
                        "port_rcv_switch_relay_errors", "port_xmit_constraint_errors"}) {
    EXPECT_EQ(Value(s, kPmaOther, {"mlx5_0", "1", f}),
              static_cast<double>(FileValue(port / "counters" / f)))
        << f;
  }
  // hw_counters of an IB port: curated and generic; lifespan is not a counter.
  EXPECT_EQ(Value(s, kOob, p), 42);
  EXPECT_EQ(Value(s, kAckTimeouts, p), 4294967290.0);
  EXPECT_EQ(Value(s, kHw, {"mlx5_0", "1", "duplicate_request"}),
            static_cast<double>(FileValue(port / "hw_counters" / "duplicate_request")));
  EXPECT_FALSE(Has(s, kHw, {"mlx5_0", "1", "lifespan"}));
  EXPECT_FALSE(Has(s, kHw, {"mlx5_0", "1", "out_of_buffer"}));  // curated, not also generic
  // No event stream without /dev/infiniband: no state_changes series.
  EXPECT_FALSE(Has(s, kChanges, p));
}

TEST(InterconnectCollector, RocePortWithNetdevAndCongestionCounters) {
  auto c = Make(kFixture);
  MetricSink s(c.metrics());
  CollectOnce(c, s);
  const std::vector<std::string> p{"mlx5_1", "1"};
  EXPECT_EQ(Value(s, kInfo,
                  {"mlx5_1", "1", "Ethernet", "ens1f0np0", "0c42:a103:0065:4a10", "22.39.1002",
                   "MT_0000000359", "MT4125"}),
            1);
  EXPECT_EQ(Value(s, kRate, p), 12.5e9);
  EXPECT_EQ(Value(s, kEcn, p), 120034);
  EXPECT_EQ(Value(s, kCnpSent, p), 118001);
  EXPECT_EQ(Value(s, kCnpHandled, p), 99120);
  EXPECT_EQ(Value(s, kCnpIgnored, p), 0);
  EXPECT_EQ(Value(s, kOob, p), 17);
  EXPECT_EQ(Value(s, kOos, p), 230);
  EXPECT_EQ(Value(s, kSeqErr, p), 12);
  EXPECT_EQ(Value(s, kAckTimeouts, p), 3);
  EXPECT_EQ(Value(s, kRetrans, p), 77);
  EXPECT_EQ(Value(s, kHw, {"mlx5_1", "1", "rx_icrc_encapsulated"}), 0);
  EXPECT_TRUE(Has(s, kHw, {"mlx5_1", "1", "roce_adp_retrans_to"}));
  EXPECT_EQ(Value(s, kTxBytes, p), 2500000000.0 * 4);
}

TEST(InterconnectCollector, OldKernelCountersExtAndNoPmaPort) {
  auto c = Make(kFixture);
  MetricSink s(c.metrics());
  CollectOnce(c, s);
  const std::vector<std::string> p1{"mlx4_0", "1"};
  // The 64-bit counters_ext/ values, not the saturated 32-bit counters/ ones.
  EXPECT_EQ(Value(s, kTxBytes, p1), 81604378624.0 * 4);
  EXPECT_EQ(Value(s, kRxBytes, p1), 79164837199.0 * 4);
  EXPECT_EQ(Value(s, kTxPackets, p1), 612001293);
  EXPECT_EQ(Value(s, kRxPackets, p1), 598877312);
  // Error counters saturate; exported as they are.
  EXPECT_EQ(Value(s, kSymbol, p1), 65535);
  EXPECT_EQ(Value(s, kDowned, p1), 255);
  EXPECT_EQ(Value(s, kPmaOther, {"mlx4_0", "1", "unicast_xmit_packets"}), 611000000);
  EXPECT_EQ(Value(s, kPmaOther, {"mlx4_0", "1", "multicast_rcv_packets"}), 1877312);
  EXPECT_EQ(Value(s, kRate, p1), 7e9);
  // Port 2: every PMA file reads "N/A (no PMA)": no counter, but the port is there.
  const std::vector<std::string> p2{"mlx4_0", "2"};
  EXPECT_EQ(Value(s, kState, p2), 4);
  EXPECT_EQ(Value(s, kRate, p2), 5e9);
  EXPECT_EQ(Value(s, kInfo,
                  {"mlx4_0", "2", "Ethernet", "enp5s0d1", "0002:c903:0010:a1b0", "2.42.5000",
                   "MT_1090120019", "MT4099"}),
            1);
  EXPECT_FALSE(Has(s, kTxBytes, p2));
  EXPECT_FALSE(Has(s, kSymbol, p2));
}

TEST(InterconnectCollector, BadFilePortAndDeviceAreSkippedAndCounted) {
  auto c = Make(kFixture);
  MetricSink s(c.metrics());
  CollectOnce(c, s);
  // mlx5_2: counters/port_xmit_wait cannot be read; its other counters can.
  const std::vector<std::string> p{"mlx5_2", "1"};
  EXPECT_FALSE(Has(s, kWait, p));
  EXPECT_EQ(Value(s, kDowned, p), 7);
  EXPECT_EQ(Value(s, kTxBytes, p), 4000);
  EXPECT_EQ(Value(s, kSymbol, p), 1);
  EXPECT_EQ(Value(s, kState, p), 1);
  EXPECT_EQ(Value(s, kPhys, p), 3);
  // Its hw_counters are device-level: port "0".
  EXPECT_EQ(Value(s, kOob, {"mlx5_2", "0"}), 5);
  EXPECT_EQ(Value(s, kCnpSent, {"mlx5_2", "0"}), 44);
  EXPECT_EQ(Value(s, kHw, {"mlx5_2", "0", "rx_write_requests"}), 321);
  // rxe0 has no board_id and no hca_type: labels empty, device exported.
  EXPECT_EQ(Value(s, kInfo, {"rxe0", "1", "Ethernet", "eth0", "5254:00ff:fe12:3456", "", "", ""}),
            1);
  EXPECT_EQ(Value(s, kHw, {"rxe0", "1", "sent_pkts"}), 5531);
  EXPECT_EQ(Value(s, kRate, {"rxe0", "1"}), 312.5e6);
  EXPECT_FALSE(Has(s, kTxBytes, {"rxe0", "1"}));  // no counters/ on rxe: not an error
  // Every skip counted, by reason: 17 "N/A (no PMA)" files on mlx4_0 port 2,
  // the unreadable port_xmit_wait, rxe0's board_id and hca_type.
  std::size_t no_pma = 0;
  for (const auto& e : fs::directory_iterator(kClass / "mlx4_0" / "ports" / "2" / "counters")) {
    (void)e;
    ++no_pma;
  }
  std::map<std::string, std::uint64_t, std::less<>> expected{
      {"missing_attribute", 2}, {"no_pma", no_pma}, {"read_error", 1}};
  EXPECT_EQ(s.errors(), expected);
  // Five devices, six ports.
  std::set<std::string> ports;
  for (const auto& d : fs::directory_iterator(kClass)) {
    for (const auto& port : fs::directory_iterator(d.path() / "ports"))
      ports.insert(d.path().filename().native() + "/" + port.path().filename().native());
  }
  EXPECT_EQ(ports.size(), 6u);
  for (const std::string& dp : ports) {
    std::string dev = dp.substr(0, dp.find('/'));
    std::string num = dp.substr(dp.find('/') + 1);
    EXPECT_TRUE(Has(s, kState, {dev, num})) << dp;
  }
}

TEST(InterconnectCollector, NetlinkValuesArePreferredAndSysfsIsTheFallback) {
  auto fake = std::make_unique<FakeNetlink>();
  FakeNetlink* nl = fake.get();
  nl->replies["mlx5_1/1"] = {{"np_cnp_sent", 999}, {"lifespan", 10}, {"new_counter", 5}};
  auto c = Make(kFixture, std::move(fake));
  MetricSink s(c.metrics());
  CollectOnce(c, s);
  EXPECT_EQ(Value(s, kCnpSent, {"mlx5_1", "1"}), 999);
  EXPECT_EQ(Value(s, kHw, {"mlx5_1", "1", "new_counter"}), 5);
  EXPECT_FALSE(Has(s, kEcn, {"mlx5_1", "1"}));  // only what netlink said
  EXPECT_FALSE(Has(s, kHw, {"mlx5_1", "1", "lifespan"}));
  // Ports netlink has nothing for keep their sysfs values.
  EXPECT_EQ(Value(s, kOob, {"mlx5_0", "1"}), 42);
  EXPECT_EQ(Value(s, kHw, {"rxe0", "1", "sent_pkts"}), 5531);
  EXPECT_EQ(nl->requests, 6);                                      // one per port
  EXPECT_TRUE(s.errors().find("read_error") != s.errors().end());  // still the bad PMA file

  // Netlink gone (ib_core unloaded, or the dump failed): all from sysfs.
  nl->available = false;
  MetricSink s2(c.metrics());
  CollectOnce(c, s2);
  EXPECT_EQ(Value(s2, kCnpSent, {"mlx5_1", "1"}), 118001);
  EXPECT_EQ(nl->requests, 6);
}

TEST(InterconnectCollector, RealNetlinkSourceFallsBackToTheSameValuesAsSysfs) {
  auto real = Make(kFixture, make_netlink_hw_counter_source());
  auto sysfs = Make(kFixture, make_disabled_hw_counter_source());
  MetricSink a(real.metrics());
  MetricSink b(sysfs.metrics());
  CollectOnce(real, a);
  CollectOnce(sysfs, b);
  if (::access("/sys/class/infiniband", F_OK) == 0) {
    GTEST_SKIP() << "this machine has RDMA devices: netlink may answer with real ones";
  }
  EXPECT_EQ(a.render(), b.render());
  EXPECT_EQ(Value(a, kEcn, {"mlx5_1", "1"}), 120034);
}

IbOptions pma_every(std::chrono::seconds interval) {
  IbOptions o;
  o.pma_interval = interval;
  return o;
}

TEST(InterconnectCollector, PmaCountersAreReadEveryPmaIntervalAndReemittedBetween) {
  TempTree t;
  FakeClock clock;
  auto c = Make(t.sys(), nullptr, nullptr, pma_every(std::chrono::seconds(30)), clock.fn());
  const std::vector<std::string> p{"mlx5_0", "1"};
  const fs::path port = t.cls() / "mlx5_0" / "ports" / "1";
  {
    MetricSink s(c.metrics());
    CollectOnce(c, s);
    EXPECT_EQ(Value(s, kTxBytes, p), 40119227463.0 * 4);
  }
  WriteFile(port / "counters" / "port_xmit_data", "40119227563");
  WriteFile(port / "hw_counters" / "out_of_buffer", "50");
  clock.now += std::chrono::seconds(15);
  {
    MetricSink s(c.metrics());
    CollectOnce(c, s);
    EXPECT_EQ(Value(s, kTxBytes, p), 40119227463.0 * 4);  // the last PMA read, again
    EXPECT_EQ(Value(s, kOob, p), 50);                     // hw_counters every collection
    // The no_pma and read_error skips are counted when the PMA is read only.
    EXPECT_EQ(s.errors().count("no_pma"), 0u);
  }
  clock.now += std::chrono::seconds(15);
  {
    MetricSink s(c.metrics());
    CollectOnce(c, s);
    EXPECT_EQ(Value(s, kTxBytes, p), 40119227563.0 * 4);
    EXPECT_EQ(s.errors().count("no_pma"), 1u);
  }
}

TEST(InterconnectCollector, ThirtyTwoBitWrapAndDeviceResetThroughTheCollector) {
  TempTree t;
  auto c = Make(t.sys());
  const fs::path hw0 = t.cls() / "mlx5_0" / "ports" / "1" / "hw_counters";
  const fs::path hw1 = t.cls() / "mlx5_1" / "ports" / "1" / "hw_counters";
  auto collect = [&] {
    auto s = std::make_unique<MetricSink>(c.metrics());
    CollectOnce(c, *s);
    return s;
  };
  auto s = collect();
  EXPECT_EQ(Value(*s, kAckTimeouts, {"mlx5_0", "1"}), 4294967290.0);
  WriteFile(hw0 / "local_ack_timeout_err", "5");  // wrapped: +11
  WriteFile(hw1 / "np_cnp_sent", "100");          // a 64-bit counter going down: a reset
  s = collect();
  EXPECT_EQ(Value(*s, kAckTimeouts, {"mlx5_0", "1"}), 4294967290.0 + 11);
  EXPECT_EQ(Value(*s, kCnpSent, {"mlx5_1", "1"}), 100);
  WriteFile(hw0 / "local_ack_timeout_err", "25");
  s = collect();
  EXPECT_EQ(Value(*s, kAckTimeouts, {"mlx5_0", "1"}), 4294967290.0 + 31);
  // The device is reset: its counters start again from 0. That reads as a
  // counter reset (the value drops to what the device says), not +2^32.
  WriteFile(hw0 / "local_ack_timeout_err", "2");
  s = collect();
  EXPECT_EQ(Value(*s, kAckTimeouts, {"mlx5_0", "1"}), 2);
}

TEST(InterconnectCollector, HotPlugAndHeldDescriptors) {
  TempTree t;
  auto c = Make(t.sys());
  {
    MetricSink s(c.metrics());
    CollectOnce(c, s);
  }
  EXPECT_EQ(c.ib().tracked_devices(), 5u);
  std::size_t held = c.ib().held_descriptors();
  // 6 ports x (state, phys_state, rate), plus the hw_counters files.
  EXPECT_GT(held, 18u);
  fs::remove_all(t.cls() / "mlx5_1");
  {
    MetricSink s(c.metrics());
    CollectOnce(c, s);
    EXPECT_FALSE(Has(s, kState, {"mlx5_1", "1"}));
    EXPECT_EQ(Value(s, kState, {"mlx5_0", "1"}), 4);
  }
  EXPECT_EQ(c.ib().tracked_devices(), 4u);
  EXPECT_LT(c.ib().held_descriptors(), held);
  // A device appears: picked up on the next collection.
  fs::copy(t.cls() / "mlx5_0", t.cls() / "mlx5_9", fs::copy_options::recursive);
  {
    MetricSink s(c.metrics());
    CollectOnce(c, s);
    EXPECT_EQ(Value(s, kTxBytes, {"mlx5_9", "1"}), 40119227463.0 * 4);
  }
  // The whole class goes: nothing, no error, nothing held.
  fs::remove_all(t.cls());
  {
    MetricSink s(c.metrics());
    CollectOnce(c, s);
    EXPECT_EQ(s.sample_count(), 0u);
    EXPECT_TRUE(s.errors().empty());
  }
  EXPECT_EQ(c.ib().tracked_devices(), 0u);
  EXPECT_EQ(c.ib().held_descriptors(), 0u);
}

TEST(InterconnectCollector, PortsWhosePmaIsDueAtOtherTimesKeepEachOthersDescriptors) {
  // A device that appears half-way through the PMA interval reads its PMA
  // counters in other collections than the rest. Each collection that
  // reads some ports' PMA must not close the others' descriptors (they
  // were, and were opened again on their next read: the count of held
  // descriptors dropped by a device's worth for the interval).
  TempTree t;
  FakeClock clock;
  auto c = Make(t.sys(), nullptr, nullptr, pma_every(std::chrono::seconds(30)), clock.fn());
  auto collect = [&] {
    MetricSink s(c.metrics());
    CollectOnce(c, s);
    return c.ib().held_descriptors();
  };
  const std::size_t before = collect();
  fs::copy(t.cls() / "mlx5_0", t.cls() / "mlx5_9", fs::copy_options::recursive);
  clock.now += std::chrono::seconds(15);
  const std::size_t with_new = collect();  // mlx5_9's PMA read, the others' not due
  EXPECT_GT(with_new, before);
  clock.now += std::chrono::seconds(15);
  EXPECT_EQ(collect(), with_new);  // the others' PMA read, mlx5_9's not due
  clock.now += std::chrono::seconds(15);
  EXPECT_EQ(collect(), with_new);
  // A device that goes still gives its descriptors back, PMA files included.
  fs::remove_all(t.cls() / "mlx5_9");
  EXPECT_EQ(collect(), before);
}

TEST(InterconnectCollector, PortAddedAndMalformedValues) {
  TempTree t;
  auto c = Make(t.sys());
  {
    MetricSink s(c.metrics());
    CollectOnce(c, s);
  }
  const fs::path port = t.cls() / "mlx5_0" / "ports" / "1";
  WriteFile(port / "state", "ACTIVE");                     // malformed
  WriteFile(port / "hw_counters" / "out_of_buffer", "x");  // malformed
  fs::copy(port, t.cls() / "mlx5_0" / "ports" / "2", fs::copy_options::recursive);
  MetricSink s(c.metrics());
  CollectOnce(c, s);
  EXPECT_FALSE(Has(s, kState, {"mlx5_0", "1"}));
  EXPECT_FALSE(Has(s, kOob, {"mlx5_0", "1"}));
  EXPECT_EQ(Value(s, kPhys, {"mlx5_0", "1"}), 5);
  EXPECT_EQ(Value(s, kState, {"mlx5_1", "1"}), 4);
  EXPECT_EQ(Value(s, kRate, {"mlx5_0", "2"}), 25e9);  // the new port
  // Two parse errors on each of port 1 and the new port 2.
  EXPECT_EQ(s.errors().at("parse_error"), 4u);
}

TEST(InterconnectCollector, NoInfinibandClassIsNotAnError) {
  auto c = Make(nodewatch::testing::fixtures_dir() / "pcie" / "sys");
  MetricSink s(c.metrics());
  CollectOnce(c, s);
  EXPECT_EQ(s.sample_count(), 0u);
  EXPECT_TRUE(s.errors().empty());
}

TEST(InterconnectCollector, DeviceFilters) {
  IbOptions o;
  o.devices = {"^(mlx5|rxe)", "^rxe"};
  auto c = Make(kFixture, nullptr, nullptr, o);
  MetricSink s(c.metrics());
  CollectOnce(c, s);
  EXPECT_TRUE(Has(s, kState, {"mlx5_0", "1"}));
  EXPECT_FALSE(Has(s, kState, {"rxe0", "1"}));
  EXPECT_FALSE(Has(s, kState, {"mlx4_0", "1"}));
  EXPECT_EQ(s.errors().count("missing_attribute"), 0u);
}

TEST(InterconnectCollector, VerbsEventsCountPortStateChanges) {
  FakeVerbsState v;
  v.changes["mlx5_0"][1] = 0;
  v.changes["mlx5_1"][1] = 2;
  v.unopenable = {"rxe0"};
  TempTree t;
  auto c = Make(t.sys(), nullptr, std::make_unique<FakeVerbs>(&v));
  {
    MetricSink s(c.metrics());
    CollectOnce(c, s);
    EXPECT_EQ(Value(s, kChanges, {"mlx5_0", "1"}), 0);
    EXPECT_EQ(Value(s, kChanges, {"mlx5_1", "1"}), 2);
    EXPECT_FALSE(Has(s, kChanges, {"rxe0", "1"}));
    EXPECT_EQ(s.errors().at("verbs_error"), 1u);
  }
  ASSERT_EQ(v.syncs.size(), 1u);
  EXPECT_EQ(v.syncs[0], (std::vector<std::string>{"mlx4_0", "mlx5_0", "mlx5_1", "mlx5_2", "rxe0"}));
  // A flap between two samples: PORT_ERR then PORT_ACTIVE.
  v.changes["mlx5_0"][1] += 2;
  fs::remove_all(t.cls() / "mlx5_1");  // and a device goes away
  {
    MetricSink s(c.metrics());
    CollectOnce(c, s);
    EXPECT_EQ(Value(s, kChanges, {"mlx5_0", "1"}), 2);
    EXPECT_FALSE(Has(s, kChanges, {"mlx5_1", "1"}));
    EXPECT_EQ(s.errors().count("verbs_error"), 0u);  // counted once, not every collection
  }
  EXPECT_EQ(v.syncs.back(), (std::vector<std::string>{"mlx4_0", "mlx5_0", "mlx5_2", "rxe0"}));
}

// ---------------------------------------------------------------------------
// Errnos injected through Roots::faults, held descriptors, and the counters
// that outlive a rebuilt collector

int OpenFds() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

InterconnectCollector MakeFaulty(const fs::path& sysfs, std::shared_ptr<sources::Faults> faults,
                                 std::size_t max_held = kMaxHeldFiles) {
  Roots roots{sysfs, "/nonexistent"};
  roots.faults = std::move(faults);
  return InterconnectCollector(
      std::make_unique<IbPorts>(roots, IbOptions{}, std::make_unique<NoNetlink>(), NoVerbs(),
                                std::chrono::steady_clock::now, nullptr, max_held));
}

using Failures = std::map<MetricSink::FailureKey, std::string>;

// Errnos that start between two collections, on values read through held
// descriptors: EIO and EACCES skip that value and count it with its port,
// ENODEV drops the whole device from the collection, quietly, ENOENT on a
// counter file is that counter gone; the rest is unchanged, and all of it
// comes back once the faults stop (PMA values re-emitted in between).
TEST(InterconnectCollector, ErrnosBetweenCollections) {
  TempTree t;
  auto faults = std::make_shared<sources::Faults>();
  auto c = MakeFaulty(t.sys(), faults);
  MetricSink first(c.metrics());
  CollectOnce(c, first);

  faults->inject("mlx5_0/ports/1/hw_counters/out_of_buffer", EIO);
  faults->inject("mlx5_1/ports/1/rate", EACCES);
  faults->inject("mlx4_0/ports/2/state", ENODEV);
  faults->inject("rxe0/ports/1/hw_counters/sent_pkts", ENOENT);
  MetricSink s(c.metrics());
  CollectOnce(c, s);
  // Counted: the two new failures. Still failing from the first collection
  // (facts and PMA are not read again in this one), not counted again:
  // rxe0's missing board_id and mlx5_2's unreadable PMA file.
  EXPECT_EQ(s.failures(),
            (Failures{{{"read_error", "mlx5_0/1"}, "EIO reading hw_counters/out_of_buffer"},
                      {{"read_error", "mlx5_1/1"}, "EACCES reading rate"},
                      {{"missing_attribute", "rxe0"}, "no board_id"},
                      {{"read_error", "mlx5_2/1"}, "EISDIR reading counters/port_xmit_wait"}}));
  EXPECT_EQ(s.errors(), (std::map<std::string, std::uint64_t, std::less<>>{{"read_error", 2}}));
  EXPECT_FALSE(Has(s, kOob, {"mlx5_0", "1"}));
  EXPECT_EQ(Value(s, kAckTimeouts, {"mlx5_0", "1"}), 4294967290.0);
  EXPECT_FALSE(Has(s, kRate, {"mlx5_1", "1"}));
  EXPECT_FALSE(Has(s, kWidth, {"mlx5_1", "1"}));
  EXPECT_EQ(Value(s, kState, {"mlx5_1", "1"}), 4);
  // mlx4_0 went away: neither port, and not its no_pma skips either (it
  // was read once more from scratch, and went away again).
  EXPECT_EQ(s.render().find("\"mlx4_0\""), std::string::npos);
  EXPECT_FALSE(Has(s, kHw, {"rxe0", "1", "sent_pkts"}));
  EXPECT_EQ(Value(s, kRate, {"rxe0", "1"}), 312.5e6);
  EXPECT_EQ(c.ib().tracked_devices(), 4u);

  faults->clear();
  MetricSink back(c.metrics());
  CollectOnce(c, back);
  EXPECT_EQ(back.render(), first.render());
  EXPECT_EQ(c.ib().tracked_devices(), 5u);
}

// During one collection: mlx5_1's state answers ENODEV once, after
// mlx5_0's rate was read (a driver reload under the collection): mlx5_1 is
// read again from scratch and exported whole. If it stays gone, it is
// dropped, with nothing counted.
TEST(InterconnectCollector, DeviceGoneDuringACollection) {
  TempTree t;
  auto faults = std::make_shared<sources::Faults>();
  auto c = MakeFaulty(t.sys(), faults);
  MetricSink first(c.metrics());
  CollectOnce(c, first);

  faults->on_read("mlx5_0/ports/1/rate",
                  [&] { faults->inject("mlx5_1/ports/1/state", ENODEV, 1); });
  MetricSink reloaded(c.metrics());
  CollectOnce(c, reloaded);
  EXPECT_EQ(faults->hits(), 1u);
  EXPECT_EQ(Value(reloaded, kCnpSent, {"mlx5_1", "1"}), 118001);
  EXPECT_EQ(Value(reloaded, kTxBytes, {"mlx5_1", "1"}), 2500000000.0 * 4);  // PMA read afresh
  EXPECT_EQ(reloaded.errors().count("read_error"), 0u);

  faults->on_read("mlx5_0/ports/1/rate", [&] { faults->inject("mlx5_1/ports/1/state", ENODEV); });
  MetricSink gone(c.metrics());
  CollectOnce(c, gone);
  EXPECT_EQ(gone.render().find("\"mlx5_1\""), std::string::npos);
  EXPECT_EQ(Value(gone, kState, {"mlx5_0", "1"}), 4);
  EXPECT_EQ(gone.errors().count("read_error"), 0u);
  for (const auto& [key, detail] : gone.failures())
    EXPECT_NE(key.second.rfind("mlx5_1", 0), 0u) << key.second;  // nothing about mlx5_1
}

// Facts and PMA counters are read now and then; a failure they show is
// counted when it is found and reported as still failing in between, so
// that the failure log does not read the collections in between as
// recoveries (one line at the start, none every refresh).
TEST(InterconnectCollector, SampledFailuresStayFailingBetweenTheirReads) {
  TempTree t;
  auto faults = std::make_shared<sources::Faults>();
  auto c = MakeFaulty(t.sys(), faults);
  const MetricSink::FailureKey board{"missing_attribute", "rxe0"};
  for (int i = 0; i < 3; ++i) {
    MetricSink s(c.metrics());
    CollectOnce(c, s);
    EXPECT_EQ(s.failures().count(board), 1u) << "collection " << i;
    EXPECT_EQ(s.errors().count("missing_attribute"), i == 0 ? 1u : 0u) << "collection " << i;
  }
}

// A counter that wrapped keeps its offset through a collection whose read
// of it failed (EIO): no spurious reset of 2^32 afterwards.
TEST(InterconnectCollector, AFailedReadKeepsTheWrapOffset) {
  TempTree t;
  auto faults = std::make_shared<sources::Faults>();
  auto c = MakeFaulty(t.sys(), faults);
  const fs::path hw = t.cls() / "mlx5_0" / "ports" / "1" / "hw_counters";
  auto ack = [&] {
    MetricSink s(c.metrics());
    CollectOnce(c, s);
    double v = -1;
    s.get(kAckTimeouts, {"mlx5_0", "1"}, &v);
    return v;
  };
  EXPECT_EQ(ack(), 4294967290.0);
  WriteFile(hw / "local_ack_timeout_err", "5");
  EXPECT_EQ(ack(), 4294967301.0);
  faults->inject("mlx5_0/ports/1/hw_counters/local_ack_timeout_err", EIO, 1);
  EXPECT_EQ(ack(), -1);  // skipped
  WriteFile(hw / "local_ack_timeout_err", "9");
  EXPECT_EQ(ack(), 4294967305.0);
}

// A rebuilt collector (a reload that changed one of its options) continues
// the 32-bit counters of the one it replaces: the wrap offsets live in the
// daemon's services, not in the collector. Without the services (a test
// building a collector alone), a collector starts afresh.
TEST(InterconnectCollector, ARebuiltCollectorContinuesItsCounters) {
  TempTree t;
  const CollectorSpec specs[] = {interconnect_collector_spec()};
  ConfigResult r =
      parse_config("[collectors.interconnect]\nnetlink = false\nverbs = false\nnvlink = false\n",
                   "n.toml", specs);
  ASSERT_TRUE(r.config);
  Services services;
  CollectorEnv env{Roots{t.sys(), "/nonexistent"}, r.config->collectors[0].options};
  env.services = &services;
  const fs::path hw = t.cls() / "mlx5_0" / "ports" / "1" / "hw_counters";
  auto ack = [](Collector& c) {
    MetricSink s(c.metrics());
    CollectOnce(c, s);
    return Value(s, kAckTimeouts, {"mlx5_0", "1"});
  };
  auto old_collector = interconnect_collector_spec().create(env);
  EXPECT_EQ(ack(*old_collector), 4294967290.0);
  WriteFile(hw / "local_ack_timeout_err", "5");  // wrapped: +11
  // As a reload does: the new collector is built before the old one goes.
  auto new_collector = interconnect_collector_spec().create(env);
  old_collector.reset();
  EXPECT_EQ(ack(*new_collector), 4294967290.0 + 11);
  EXPECT_EQ(services.made(), 1u);

  env.services = nullptr;
  auto alone = interconnect_collector_spec().create(env);
  EXPECT_EQ(ack(*alone), 5);
}

// Held descriptors follow the devices: one removed from the tree between
// two collections takes its descriptors with it, none are left when the
// class goes, and max_held = 0 (the benchmark's "before") holds none and
// exports the same.
TEST(InterconnectCollector, HeldDescriptorsDoNotLeak) {
  TempTree t;
  const int before = OpenFds();
  {
    auto c = MakeFaulty(t.sys(), nullptr);
    auto plain = MakeFaulty(t.sys(), nullptr, 0);
    MetricSink s(c.metrics());
    MetricSink p(plain.metrics());
    CollectOnce(c, s);
    CollectOnce(plain, p);
    EXPECT_EQ(s.render(), p.render());
    EXPECT_EQ(plain.ib().held_descriptors(), 0u);
    const std::size_t held = c.ib().held_descriptors();
    EXPECT_EQ(OpenFds(), before + static_cast<int>(held));

    std::size_t mlx5_1 = 3;  // state, phys_state, rate
    for (const auto& e : fs::directory_iterator(t.cls() / "mlx5_1/ports/1/hw_counters"))
      mlx5_1 += e.path().filename() == "lifespan" ? 0 : 1;
    // Its PMA files too, though its PMA is not due again yet.
    for (const char* sub : {"counters", "counters_ext"}) {
      const fs::path dir = t.cls() / "mlx5_1/ports/1" / sub;
      if (fs::is_directory(dir))
        mlx5_1 += static_cast<std::size_t>(std::distance(fs::directory_iterator(dir), {}));
    }
    fs::remove_all(t.cls() / "mlx5_1");
    MetricSink after(c.metrics());
    CollectOnce(c, after);
    EXPECT_EQ(c.ib().held_descriptors(), held - mlx5_1);
    EXPECT_EQ(OpenFds(), before + static_cast<int>(held - mlx5_1));

    fs::remove_all(t.cls());
    MetricSink none(c.metrics());
    CollectOnce(c, none);
    EXPECT_EQ(c.ib().held_descriptors(), 0u);
    EXPECT_EQ(OpenFds(), before);
  }
  EXPECT_EQ(OpenFds(), before);
}

TEST(VerbsSource, LibraryAbsentOrNoDevices) {
  TempTree t;  // any directory that exists stands in for /dev/infiniband
  auto absent = make_verbs_source("libnodewatch-no-such-ibverbs.so.1", t.sys().native());
  EXPECT_FALSE(verbs_source_loaded(*absent));
  EXPECT_TRUE(absent->sync({"mlx5_0"}).empty());
  EXPECT_FALSE(absent->state_changes("mlx5_0", 1));
  // Collecting with it: the ports, no state_changes series, no error.
  auto c = Make(kFixture, nullptr, std::move(absent));
  MetricSink s(c.metrics());
  CollectOnce(c, s);
  EXPECT_TRUE(Has(s, kState, {"mlx5_0", "1"}));
  EXPECT_FALSE(Has(s, kChanges, {"mlx5_0", "1"}));
  EXPECT_EQ(s.errors().count("verbs_error"), 0u);

  // No /dev/infiniband: the library is not even loaded.
  EXPECT_FALSE(verbs_source_loaded(*make_verbs_source("libibverbs.so.1", "/nonexistent")));

  // The real library (rdma-core's libibverbs1), on a machine without RDMA
  // devices: it loads, every symbol resolves, and no device can be opened.
  auto real = make_verbs_source("libibverbs.so.1", t.sys().native());
  if (!verbs_source_loaded(*real)) GTEST_SKIP() << "libibverbs.so.1 is not installed";
  if (::access("/dev/infiniband", F_OK) == 0) GTEST_SKIP() << "this machine has RDMA devices";
  EXPECT_EQ(real->sync({"mlx5_0", "rxe0"}).size(), 2u);
  EXPECT_TRUE(real->sync({"mlx5_0", "rxe0"}).empty());  // not retried
  EXPECT_FALSE(real->state_changes("mlx5_0", 1));
}

TEST(InterconnectOptions, ParsedAndValidated) {
  const CollectorSpec specs[] = {interconnect_collector_spec()};
  ConfigResult r = parse_config(
      "[collectors.interconnect]\npma_interval = \"1m\"\ndevices_exclude = \"^rxe\"\n"
      "verbs = false\nnetlink = false\n",
      "n.toml", specs);
  ASSERT_TRUE(r.errors.empty()) << r.errors[0].str();
  ConfigResult bad = parse_config(
      "[collectors.interconnect]\ndevices_include = \"(\"\npma_interval = \"2h\"\nfoo = 1\n",
      "n.toml", specs);
  ASSERT_EQ(bad.errors.size(), 3u);
  std::string all;
  for (const auto& e : bad.errors) all += e.str() + "\n";
  for (const char* key :
       {"interconnect.devices_include", "interconnect.pma_interval", "interconnect.foo"}) {
    EXPECT_NE(all.find(key), std::string::npos) << key << " in " << all;
  }
  // The spec builds a collector from defaults, and it runs on the fixture.
  CollectorEnv env{Roots{kFixture, "/nonexistent"}, nullptr};
  ConfigResult defaults = parse_config("", "n.toml", specs);
  ASSERT_TRUE(defaults.config);
  env.options = defaults.config->collectors[0].options;
  auto c = interconnect_collector_spec().create(env);
  MetricSink s(c->metrics());
  CollectOnce(*c, s);
  EXPECT_EQ(Value(s, kState, {"mlx5_0", "1"}), 4);
}

}  // namespace
}  // namespace nodewatch::interconnect
