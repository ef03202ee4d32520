// Tests of the pcie collector: the sysfs attribute parsers with real kernel
// output (both speed formats, old and new AER names), the degraded-width
// rule, and the collector over tests/fixtures/pcie (values worked out by
// hand from the fixture's files; see its README), including functions that
// vanish between the listing and the reads, malformed files, and no PCI.

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cmath>  // before support/collector_test.hpp, which uses std::nan without it
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "config.hpp"
#include "pcie/pcie_collector.hpp"
#include "pcie/pcie_parse.hpp"
#include "support/collector_test.hpp"

namespace nodewatch::pcie {
namespace {

namespace fs = std::filesystem;

using nodewatch::testing::CollectOnce;
using nodewatch::testing::ExpectConformant;
using nodewatch::testing::ExpectWellFormedTable;
using nodewatch::testing::Value;

constexpr const char* kSpeed = "nodewatch_pcie_link_speed_transfers_per_second";
constexpr const char* kMaxSpeed = "nodewatch_pcie_link_max_speed_transfers_per_second";
constexpr const char* kWidth = "nodewatch_pcie_link_width";
constexpr const char* kMaxWidth = "nodewatch_pcie_link_max_width";
constexpr const char* kDegraded = "nodewatch_pcie_link_width_degraded";
constexpr const char* kAer = "nodewatch_pcie_aer_errors_total";
constexpr const char* kAerDetail = "nodewatch_pcie_aer_detail_errors_total";
constexpr const char* kInfo = "nodewatch_pcie_device_info";

// The fixture's functions (tests/fixtures/pcie/README.md).
constexpr const char* kGpu0 = "0000:03:00.0";     // H100, x8 of x16 behind a x16 switch port
constexpr const char* kGpu1 = "0000:04:00.0";     // H100, x16, idle at 2.5 GT/s
constexpr const char* kCx7 = "0000:05:00.0";      // ConnectX-7 Ethernet, Gen5 x16
constexpr const char* kCx7Ib = "0000:05:00.1";    // its InfiniBand function (0x020700)
constexpr const char* kCx7Vf = "0000:05:00.2";    // an SR-IOV VF of kCx7: not exported
constexpr const char* kLostGpu = "0000:06:00.0";  // fallen off the bus
constexpr const char* kVga = "0000:08:00.0";      // BMC VGA on conventional PCI
constexpr const char* kCx5 = "0000:81:00.0";      // ConnectX-5, x8 of x16, port only x8
constexpr const char* kGaudi = "0000:c1:00.0";    // runtime-suspended, no driver
constexpr const char* kGone = "0000:82:00.0";     // dangling bus/pci/devices link
constexpr const char* kRootPort = "0000:00:01.0";
constexpr const char* kSwitchUp = "0000:01:00.0";
constexpr const char* kGpu0Port = "0000:02:00.0";
constexpr const char* kGpu1Port = "0000:02:01.0";
constexpr const char* kNicPort = "0000:02:02.0";
constexpr const char* kLostGpuPort = "0000:00:05.0";
constexpr const char* kVgaRootPort = "0000:00:1c.0";
constexpr const char* kVgaBridge = "0000:07:00.0";
constexpr const char* kCx5Port = "0000:80:01.0";
constexpr const char* kGaudiPort = "0000:c0:01.0";

// Real directories, relative to the sysfs root.
constexpr const char* kGpu1Dir =
    "devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0";
constexpr const char* kGpu1PortDir = "devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0";
constexpr const char* kCx7IbDir =
    "devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:02.0/0000:05:00.1";

// Every test but the defaults' own reads the error bits too.
constexpr PcieOptions kDetail{.aer_detail = true};

fs::path fixture_sysfs() {
  return nodewatch::testing::fixtures_dir() / "pcie" / "sys";
}

Roots fixture_roots() {
  return Roots{fixture_sysfs(), "/nonexistent-procfs"};
}

CollectContext generous_context() {
  return CollectContext{std::chrono::steady_clock::now() + std::chrono::seconds(10), nullptr};
}

bool has(const MetricSink& sink, std::string_view name, const std::vector<std::string>& labels) {
  double v = 0;
  return sink.get(name, labels, &v);
}

std::uint64_t error_count(const MetricSink& sink, std::string_view reason) {
  auto it = sink.errors().find(reason);
  return it == sink.errors().end() ? 0 : it->second;
}

// The `device` label of every series of `family` in the rendered output, in order.
std::vector<std::string> devices_of(const MetricSink& sink, const std::string& family) {
  std::vector<std::string> out;
  std::string text = sink.render();
  std::string prefix = family + "{device=\"";
  for (std::size_t pos = text.find(prefix); pos != std::string::npos;
       pos = text.find(prefix, pos + 1)) {
    if (pos != 0 && text[pos - 1] != '\n') continue;
    std::size_t begin = pos + prefix.size();
    out.push_back(text.substr(begin, text.find('"', begin) - begin));
  }
  return out;
}

std::size_t series_count(const MetricSink& sink, const std::string& family) {
  return devices_of(sink, family).size();
}

// The `error` labels of one device and severity.
std::set<std::string> aer_errors_of(const MetricSink& sink, const std::string& device,
                                    const std::string& severity) {
  std::set<std::string> out;
  std::string text = sink.render();
  std::string prefix =
      std::string(kAerDetail) + "{device=\"" + device + "\",severity=\"" + severity + "\",error=\"";
  for (std::size_t pos = text.find(prefix); pos != std::string::npos;
       pos = text.find(prefix, pos + 1)) {
    std::size_t begin = pos + prefix.size();
    out.insert(text.substr(begin, text.find('"', begin) - begin));
  }
  return out;
}

// A copy of the fixture in the temporary directory, symlinks kept as
// symlinks, that a test may change.
class TempSysfs {
 public:
  TempSysfs() {
    static int counter = 0;
    dir_ = fs::temp_directory_path() /
           ("nodewatch-pcie-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    fs::copy(fixture_sysfs(), dir_ / "sys",
             fs::copy_options::recursive | fs::copy_options::copy_symlinks);
  }
  ~TempSysfs() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  TempSysfs(const TempSysfs&) = delete;
  TempSysfs& operator=(const TempSysfs&) = delete;

  fs::path sys() const { return dir_ / "sys"; }
  fs::path dir() const { return dir_; }
  Roots roots() const { return Roots{sys(), dir_ / "proc"}; }
  void write(const std::string& relative, const std::string& content) {
    std::ofstream out(sys() / relative, std::ios::trunc);
    out << content;
  }

 private:
  fs::path dir_;
};

// ---------------------------------------------------------------------------
// Parsing: link speed and width

TEST(PcieParse, LinkSpeedCurrentKernels) {
  // pci_speed_string() in drivers/pci/probe.c, kernels 5.7+.
  struct Case {
    const char* raw;
    double expected;
  } cases[] = {
      {"2.5 GT/s PCIe\n", 2.5e9}, {"5.0 GT/s PCIe\n", 5e9},   {"8.0 GT/s PCIe\n", 8e9},
      {"16.0 GT/s PCIe\n", 16e9}, {"32.0 GT/s PCIe\n", 32e9}, {"64.0 GT/s PCIe\n", 64e9},
      {"16.0 GT/s PCIe", 16e9},  // no newline
  };
  for (const Case& c : cases) {
    LinkSpeed s = parse_link_speed(c.raw);
    EXPECT_EQ(s.reading, Reading::kValue) << c.raw;
    EXPECT_DOUBLE_EQ(s.transfers_per_second, c.expected) << c.raw;
  }
}

TEST(PcieParse, LinkSpeedKernelsUpTo56) {
  // Old pci-sysfs.c: "%s\n" of "2.5 GT/s", "5 GT/s", "8 GT/s", "16 GT/s", "32 GT/s".
  EXPECT_DOUBLE_EQ(parse_link_speed("2.5 GT/s\n").transfers_per_second, 2.5e9);
  EXPECT_DOUBLE_EQ(parse_link_speed("5 GT/s\n").transfers_per_second, 5e9);
  EXPECT_DOUBLE_EQ(parse_link_speed("8 GT/s\n").transfers_per_second, 8e9);
  EXPECT_DOUBLE_EQ(parse_link_speed("16 GT/s\n").transfers_per_second, 16e9);
  EXPECT_DOUBLE_EQ(parse_link_speed("32 GT/s\n").transfers_per_second, 32e9);
  EXPECT_EQ(parse_link_speed("8 GT/s\n").reading, Reading::kValue);
}

TEST(PcieParse, LinkSpeedUnknownIsNotAnError) {
  EXPECT_EQ(parse_link_speed("Unknown\n").reading, Reading::kUnknown);        // 5.7+
  EXPECT_EQ(parse_link_speed("Unknown speed\n").reading, Reading::kUnknown);  // up to 5.6
}

TEST(PcieParse, LinkSpeedMalformed) {
  for (const char* raw :
       {"", "\n", "fast", "16.0", "GT/s", "16.0 GB/s", "16.0 GT/s PCI", "16.0 GT/s PCIe x16",
        "-8 GT/s", "0 GT/s", "0.0 GT/s PCIe", "inf GT/s", "nan GT/s", "1e1 GT/s", "16.0.0 GT/s",
        ".5 GT/s", "8. GT/s", "33 MHz PCI", "unknown"}) {
    EXPECT_EQ(parse_link_speed(raw).reading, Reading::kMalformed) << "accepted: " << raw;
  }
}

// Per lane and direction, less the line encoding: PCIe 1.0's 250 MB/s,
// 3.0's 985 MB/s, 6.0's 8 GB/s.
TEST(PcieParse, GenerationsAndLaneBandwidth) {
  EXPECT_EQ(generation_transfers_per_second(1), 2.5e9);
  EXPECT_EQ(generation_transfers_per_second(4), 16e9);
  EXPECT_EQ(generation_transfers_per_second(6), 64e9);
  EXPECT_FALSE(generation_transfers_per_second(0).has_value());
  EXPECT_FALSE(generation_transfers_per_second(7).has_value());
  EXPECT_DOUBLE_EQ(lane_bytes_per_second(2.5e9), 250e6);
  EXPECT_DOUBLE_EQ(lane_bytes_per_second(5e9), 500e6);
  EXPECT_NEAR(lane_bytes_per_second(8e9), 984.6e6, 0.1e6);
  EXPECT_NEAR(lane_bytes_per_second(32e9), 3938.5e6, 0.1e6);
  EXPECT_DOUBLE_EQ(lane_bytes_per_second(64e9), 8e9);
}

TEST(PcieParse, LinkWidth) {
  for (unsigned lanes : {1u, 2u, 4u, 8u, 12u, 16u, 32u}) {
    LinkWidth w = parse_link_width(std::to_string(lanes) + "\n");
    EXPECT_EQ(w.reading, Reading::kValue) << lanes;
    EXPECT_EQ(w.lanes, lanes);
  }
  EXPECT_EQ(parse_link_width("0\n").reading, Reading::kUnknown);   // link down
  EXPECT_EQ(parse_link_width("63\n").reading, Reading::kUnknown);  // all-ones config read
  EXPECT_EQ(parse_link_width("48").reading, Reading::kUnknown);
  for (const char* raw : {"", "x16", "16x", "-1", "+8", "8.0", "64", "4294967297", "sixteen"}) {
    EXPECT_EQ(parse_link_width(raw).reading, Reading::kMalformed) << "accepted: " << raw;
  }
}

// ---------------------------------------------------------------------------
// Parsing: identity

TEST(PcieParse, ClassCode) {
  EXPECT_EQ(parse_pci_class("0x030200\n"), std::optional<std::uint32_t>(0x030200));
  EXPECT_EQ(parse_pci_class("0x0c0330\n"), std::optional<std::uint32_t>(0x0c0330));
  EXPECT_EQ(parse_pci_class("0x120000"), std::optional<std::uint32_t>(0x120000));
  for (const char* raw : {"", "0x", "030200", "0xzz0000", "0x1000000", "0x03 0200", "display"}) {
    EXPECT_FALSE(parse_pci_class(raw)) << "accepted: " << raw;
  }
}

TEST(PcieParse, VendorDeviceAndNumaNode) {
  EXPECT_EQ(parse_pci_id("0x10de\n"), std::optional<std::string>("0x10de"));
  EXPECT_EQ(parse_pci_id("0x15b3"), std::optional<std::string>("0x15b3"));
  EXPECT_FALSE(parse_pci_id("10de"));
  EXPECT_FALSE(parse_pci_id("0x10de0"));
  EXPECT_FALSE(parse_pci_id("0xnvda"));
  EXPECT_EQ(parse_numa_node("-1\n"), std::optional<std::string>("-1"));
  EXPECT_EQ(parse_numa_node("0\n"), std::optional<std::string>("0"));
  EXPECT_EQ(parse_numa_node("3"), std::optional<std::string>("3"));
  EXPECT_FALSE(parse_numa_node(""));
  EXPECT_FALSE(parse_numa_node("-2"));
  EXPECT_FALSE(parse_numa_node("node0"));
  EXPECT_FALSE(parse_numa_node("-"));
}

TEST(PcieParse, Classify) {
  EXPECT_EQ(classify(0x030200), DeviceKind::kAccelerator);  // 3D controller (data-centre GPU)
  EXPECT_EQ(classify(0x030000), DeviceKind::kAccelerator);  // VGA
  EXPECT_EQ(classify(0x038000), DeviceKind::kAccelerator);  // display, other
  EXPECT_EQ(classify(0x120000), DeviceKind::kAccelerator);  // processing accelerator
  EXPECT_EQ(classify(0x020000), DeviceKind::kNetwork);      // Ethernet
  EXPECT_EQ(classify(0x020700), DeviceKind::kNetwork);      // InfiniBand network controller
  EXPECT_EQ(classify(0x0c0600), DeviceKind::kNetwork);      // serial-bus InfiniBand
  EXPECT_FALSE(classify(0x0c0330));                         // USB xHCI
  EXPECT_FALSE(classify(0x060400));                         // PCI bridge
  EXPECT_FALSE(classify(0x060000));                         // host bridge
  EXPECT_FALSE(classify(0x010802));                         // NVMe
  EXPECT_FALSE(classify(0x0c0500));                         // SMBus
  EXPECT_EQ(kind_name(DeviceKind::kAccelerator), "accelerator");
  EXPECT_EQ(kind_name(DeviceKind::kNetwork), "network");
  EXPECT_EQ(kind_name(DeviceKind::kBridge), "bridge");
}

TEST(PcieParse, Bdf) {
  EXPECT_TRUE(is_bdf("0000:17:00.0"));
  EXPECT_TRUE(is_bdf("0000:c1:1f.7"));
  EXPECT_TRUE(is_bdf("10000:00:01.0"));  // a VMD domain
  EXPECT_TRUE(is_bdf("0001:AB:00.1"));
  for (const char* name :
       {"pci0000:00", "0000:17:00", "0000:17:00.8", "0000:17:20.0", "0000:1g:00.0", "000:17:00.0",
        "0000:17:00.0 ", "", "0000:17.00.0", "0000:17:00:0", ".", ".."}) {
    EXPECT_FALSE(is_bdf(name)) << "accepted: " << name;
  }
}

// ---------------------------------------------------------------------------
// Parsing: AER

// aer_dev_correctable as drivers/pci/pcie/aer.c writes it in current kernels.
constexpr std::string_view kAerCorrectableNew =
    "RxErr 212\nBadTLP 37\nBadDLLP 15\nRollover 0\nTimeout 9\nNonFatalErr 0\nCorrIntErr 0\n"
    "HeaderOF 0\nTOTAL_ERR_COR 241\n";

// aer_dev_fatal in current kernels, with an unnamed bit (27) that counted.
constexpr std::string_view kAerFatalNew =
    "Undefined 0\nDLP 0\nSDES 1\nTLP 0\nFCP 0\nCmpltTO 0\nCmpltAbrt 0\nUnxCmplt 0\nRxOF 0\n"
    "MalfTLP 0\nECRC 0\nUnsupReq 0\nACSViol 0\nUncorrIntErr 0\nBlockedTLP 0\nAtomicOpBlocked 0\n"
    "TLPBlockedErr 0\nPoisonTLPBlocked 0\ndev_fatal_errs_bit[27] 3\nTOTAL_ERR_FATAL 2\n";

// The sample outputs of Documentation/ABI/testing/sysfs-bus-pci-devices-aer_stats
// (the long names of older kernels).
constexpr std::string_view kAerCorrectableAbiSample =
    "Receiver Error 2\n"
    "Bad TLP 0\n"
    "Bad DLLP 0\n"
    "RELAY_NUM Rollover 0\n"
    "Replay Timer Timeout 0\n"
    "Advisory Non-Fatal 0\n"
    "Corrected Internal Error 0\n"
    "Header Log Overflow 0\n"
    "TOTAL_ERR_COR 2\n";
constexpr std::string_view kAerFatalAbiSample =
    "Undefined 0\n"
    "Data Link Protocol 0\n"
    "Surprise Down Error 0\n"
    "Poisoned TLP 0\n"
    "Flow Control Protocol 0\n"
    "Completion Timeout 0\n"
    "Completer Abort 0\n"
    "Unexpected Completion 0\n"
    "Receiver Overflow 0\n"
    "Malformed TLP 0\n"
    "ECRC 0\n"
    "Unsupported Request 0\n"
    "ACS Violation 0\n"
    "Uncorrectable Internal Error 0\n"
    "MC Blocked TLP 0\n"
    "AtomicOp Egress Blocked 0\n"
    "TLP Prefix Blocked Error 0\n"
    "TOTAL_ERR_FATAL 0\n";

std::map<std::string, std::uint64_t> as_map(const std::vector<AerCount>& counts) {
  std::map<std::string, std::uint64_t> out;
  for (const AerCount& c : counts) out[c.error] = c.count;
  return out;
}

TEST(PcieParse, AerCurrentNames) {
  auto counts = parse_aer_stats(kAerCorrectableNew);
  ASSERT_TRUE(counts);
  std::map<std::string, std::uint64_t> expected = {
      {"rx_err", 212}, {"bad_tlp", 37},      {"bad_dllp", 15},    {"rollover", 0},
      {"timeout", 9},  {"non_fatal_err", 0}, {"corr_int_err", 0}, {"header_of", 0}};
  EXPECT_EQ(as_map(*counts), expected);        // TOTAL_ERR_COR (241, not the sum 273) is skipped
  EXPECT_EQ(counts->front().error, "rx_err");  // the kernel's order is kept

  auto fatal = parse_aer_stats(kAerFatalNew);
  ASSERT_TRUE(fatal);
  std::map<std::string, std::uint64_t> m = as_map(*fatal);
  EXPECT_EQ(m.size(), 19u);  // 18 named bits and bit 27
  EXPECT_EQ(m["sdes"], 1u);
  EXPECT_EQ(m["bit_27"], 3u);
  for (const char* label :
       {"undefined", "dlp", "tlp", "fcp", "cmplt_to", "cmplt_abrt", "unx_cmplt", "rx_of",
        "malf_tlp", "ecrc", "unsup_req", "acs_viol", "uncorr_int_err", "blocked_tlp",
        "atomic_op_blocked", "tlp_blocked_err", "poison_tlp_blocked"}) {
    EXPECT_EQ(m.count(label), 1u) << label;
  }
}

// The collector keeps each AER file's parse while its text stays the same:
// the same answer as a fresh parse, a changed text parsed again, and the
// parse of a file not read in a collection forgotten after it.
TEST(PcieParse, AerParsesFollowTheText) {
  AerParses cache;
  const std::string path = "devices/pci0000:00/0000:00:01.0/aer_dev_correctable";
  cache.begin_cycle();
  const std::string text(kAerCorrectableNew);
  const AerParses::Parse* first = &cache.of(path, text);
  ASSERT_TRUE(first->counts);
  std::optional<std::uint64_t> total;
  EXPECT_EQ(as_map(*first->counts), as_map(*parse_aer_stats(kAerCorrectableNew, &total)));
  EXPECT_EQ(first->total, total);
  cache.end_cycle();

  cache.begin_cycle();
  const AerParses::Parse* again = &cache.of(path, text);
  EXPECT_EQ(again, first);  // kept, not parsed anew
  std::string more = text;
  more.replace(more.find("212"), 3, "213");
  const AerParses::Parse& changed = cache.of(path, more);
  EXPECT_EQ(as_map(*changed.counts).at("rx_err"), 213u);
  EXPECT_FALSE(cache.of(path, "RxErr\n").counts);  // malformed, as parse_aer_stats() says
  EXPECT_FALSE(cache.of(path, "RxErr\n").total);
  cache.end_cycle();

  cache.begin_cycle();  // not read in this one: forgotten
  cache.end_cycle();
  cache.begin_cycle();
  EXPECT_EQ(as_map(*cache.of(path, text).counts).at("rx_err"), 212u);
  cache.end_cycle();
}

TEST(PcieParse, AerOldNamesMapToTheCurrentLabels) {
  auto cor = parse_aer_stats(kAerCorrectableAbiSample);
  ASSERT_TRUE(cor);
  std::map<std::string, std::uint64_t> expected = {
      {"rx_err", 2},  {"bad_tlp", 0},       {"bad_dllp", 0},     {"rollover", 0},
      {"timeout", 0}, {"non_fatal_err", 0}, {"corr_int_err", 0}, {"header_of", 0}};
  EXPECT_EQ(as_map(*cor), expected);

  // Same labels as the current names, bit by bit (bit 26, PoisonTLPBlocked,
  // is newer than the long names).
  auto old_fatal = parse_aer_stats(kAerFatalAbiSample);
  auto new_fatal = parse_aer_stats(kAerFatalNew);
  ASSERT_TRUE(old_fatal);
  ASSERT_TRUE(new_fatal);
  std::set<std::string> old_labels, new_labels;
  for (const AerCount& c : *old_fatal) old_labels.insert(c.error);
  for (const AerCount& c : *new_fatal) new_labels.insert(c.error);
  new_labels.erase("poison_tlp_blocked");
  new_labels.erase("bit_27");
  EXPECT_EQ(old_labels, new_labels);
  EXPECT_EQ(old_labels.size(), 17u);
}

TEST(PcieParse, AerLabels) {
  EXPECT_EQ(aer_error_label("RxErr"), "rx_err");
  EXPECT_EQ(aer_error_label("Receiver Error"), "rx_err");
  EXPECT_EQ(aer_error_label("Receiver Error        "), "rx_err");  // padded
  EXPECT_EQ(aer_error_label("Receiver  Error"), "rx_err");
  EXPECT_EQ(aer_error_label("BadTLP"), "bad_tlp");
  EXPECT_EQ(aer_error_label("Bad TLP"), "bad_tlp");
  EXPECT_EQ(aer_error_label("RELAY_NUM Rollover"), "rollover");
  EXPECT_EQ(aer_error_label("Undefined"), "undefined");
  EXPECT_EQ(aer_error_label("Surprise Down Error"), "sdes");
  EXPECT_EQ(aer_error_label("SDES"), "sdes");
  EXPECT_EQ(aer_error_label("Completion Timeout"), "cmplt_to");
  EXPECT_EQ(aer_error_label("CmpltTO"), "cmplt_to");
  EXPECT_EQ(aer_error_label("MC Blocked TLP"), "blocked_tlp");
  EXPECT_EQ(aer_error_label("TLPBlockedErr"), "tlp_blocked_err");
  EXPECT_EQ(aer_error_label("dev_cor_errs_bit[5]"), "bit_5");
  EXPECT_EQ(aer_error_label("dev_nonfatal_errs_bit[31]"), "bit_31");
  EXPECT_EQ(aer_error_label("Some New Error"), "some_new_error");  // not in the table
  EXPECT_EQ(aer_error_label("[]"), "");
  EXPECT_EQ(snake_case("ACSViol"), "acs_viol");
  EXPECT_EQ(snake_case("RxOF"), "rx_of");
  EXPECT_EQ(snake_case("PoisonTLPBlocked"), "poison_tlp_blocked");
  EXPECT_EQ(snake_case("Non-Fatal  Err"), "non_fatal_err");
  EXPECT_EQ(snake_case("caf\xc3\xa9"), "caf");  // anything but ASCII letters and digits splits
}

TEST(PcieParse, AerToleratesLayout) {
  auto counts = parse_aer_stats("RxErr\t3\r\n\n  BadTLP   4  \nTOTAL_ERR_COR 7");
  ASSERT_TRUE(counts);
  EXPECT_EQ(as_map(*counts), (std::map<std::string, std::uint64_t>{{"rx_err", 3}, {"bad_tlp", 4}}));
  auto empty = parse_aer_stats("");
  ASSERT_TRUE(empty);
  EXPECT_TRUE(empty->empty());
  auto max = parse_aer_stats("RxErr 18446744073709551615\n");
  ASSERT_TRUE(max);
  EXPECT_EQ(max->front().count, 18446744073709551615u);
}

TEST(PcieParse, AerTotalLine) {
  std::optional<std::uint64_t> total;
  auto counts = parse_aer_stats(kAerCorrectableNew, &total);
  ASSERT_TRUE(counts);
  ASSERT_TRUE(total);
  EXPECT_EQ(*total, 241u);
  EXPECT_EQ(aer_severity_total(*counts, total), 241u);
  EXPECT_EQ(aer_severity_total(*counts, std::nullopt), 273u);  // 212 + 37 + 15 + 9

  std::optional<std::uint64_t> none = 5;
  ASSERT_TRUE(parse_aer_stats("RxErr 1\n", &none));
  EXPECT_FALSE(none);  // reset when the file has no total line
  // Two total lines: which one would be the total?
  EXPECT_FALSE(parse_aer_stats("RxErr 1\nTOTAL_ERR_COR 1\nTOTAL_ERR_COR 2\n", &total));
  // The sum saturates rather than wrapping.
  std::vector<AerCount> huge = {{"rx_err", 18446744073709551615u}, {"bad_tlp", 2}};
  EXPECT_EQ(aer_severity_total(huge, std::nullopt), 18446744073709551615u);
}

TEST(PcieParse, AerMalformed) {
  for (const char* text :
       {"RxErr\n", "5\n", "RxErr x\n", "RxErr -1\n", "RxErr +1\n", "RxErr 1.5\n",
        "RxErr 18446744073709551616\n", "RxErr 1\nReceiver Error 2\n" /* one bit twice */,
        "RxErr 1\nBadTLP\n", "[] 4\n"}) {
    EXPECT_FALSE(parse_aer_stats(text)) << "accepted: " << text;
  }
}

// ---------------------------------------------------------------------------
// The degraded rule

TEST(PcieParse, DegradedWidth) {
  EXPECT_EQ(link_width_degraded(8, 16, 16), std::optional<bool>(true));    // GPU at x8 of x16
  EXPECT_EQ(link_width_degraded(16, 16, 16), std::optional<bool>(false));  // full width
  EXPECT_EQ(link_width_degraded(8, 16, 8), std::optional<bool>(false));    // port only x8
  EXPECT_EQ(link_width_degraded(4, 16, 8), std::optional<bool>(true));     // below the port too
  EXPECT_EQ(link_width_degraded(4, 4, 16), std::optional<bool>(false));    // x4 card in x16 slot
  EXPECT_EQ(link_width_degraded(2, 4, 16), std::optional<bool>(true));
  EXPECT_FALSE(link_width_degraded(std::nullopt, 16, 16));
  EXPECT_FALSE(link_width_degraded(8, std::nullopt, 16));
  EXPECT_FALSE(link_width_degraded(8, 16, std::nullopt));
}

// ---------------------------------------------------------------------------
// The collector over the fixture

TEST(PcieCollector, TableIsWellFormed) {
  PcieCollector c(fixture_roots(), kDetail);
  ExpectWellFormedTable(c.metrics(), "nodewatch_pcie_");
  EXPECT_EQ(c.metrics().descs().size(), 8u);
  const MetricDesc& aer = c.metrics().descs()[static_cast<std::size_t>(c.metrics().find(kAer))];
  EXPECT_EQ(aer.type, MetricType::kCounter);
  EXPECT_EQ(aer.labels, (std::vector<std::string>{"device", "severity"}));
  const MetricDesc& detail =
      c.metrics().descs()[static_cast<std::size_t>(c.metrics().find(kAerDetail))];
  EXPECT_EQ(detail.type, MetricType::kCounter);
  EXPECT_EQ(detail.labels, (std::vector<std::string>{"device", "severity", "error"}));
  const MetricDesc& info = c.metrics().descs()[static_cast<std::size_t>(c.metrics().find(kInfo))];
  EXPECT_EQ(info.labels, (std::vector<std::string>{"device", "vendor_id", "device_id", "class",
                                                   "driver", "numa_node", "kind", "upstream"}));
}

TEST(PcieCollector, Spec) {
  const CollectorSpec& spec = pcie_collector_spec();
  EXPECT_EQ(spec.name, "pcie");
  EXPECT_TRUE(spec.enabled_by_default);
  EXPECT_EQ(spec.default_interval, std::chrono::seconds(30));
  EXPECT_EQ(spec.default_timeout, std::chrono::seconds(10));
  ASSERT_TRUE(spec.read_options);
  // The default leaves the error bits out.
  EXPECT_TRUE(default_options(spec)->equals(TypedOptions<PcieOptions>(PcieOptions{})));
  EXPECT_FALSE(default_options(spec)->equals(TypedOptions<PcieOptions>(kDetail)));
  EXPECT_TRUE(spec.create);
  EXPECT_FALSE(spec.description.empty());
}

TEST(PcieCollector, ExportsSelectedFunctionsAndTheirPorts) {
  PcieCollector c(fixture_roots(), kDetail);
  MetricSink sink(c.metrics());
  CollectOnce(c, sink);
  // 8 accelerators and NICs, and the 10 bridges on their paths to the root
  // ports, in address order. Not: the host bridge 00:00.0, the USB
  // controller 00:14.0, the NVMe drive 09:00.0 and its root port 00:1d.0,
  // the VF 05:00.2, the vanished 82:00.0 and its root port 80:03.0.
  std::vector<std::string> expected = {kRootPort, kLostGpuPort, kVgaRootPort, kSwitchUp, kGpu0Port,
                                       kGpu1Port, kNicPort,     kGpu0,        kGpu1,     kCx7,
                                       kCx7Ib,    kLostGpu,     kVgaBridge,   kVga,      kCx5Port,
                                       kCx5,      kGaudiPort,   kGaudi};
  EXPECT_EQ(devices_of(sink, kInfo), expected);
  EXPECT_TRUE(sink.errors().empty());
  std::string text = sink.render();
  for (const char* absent : {"0000:00:00.0", "0000:00:14.0", "0000:09:00.0", "0000:00:1d.0", kCx7Vf,
                             kGone, "0000:80:03.0"}) {
    EXPECT_EQ(text.find(absent), std::string::npos) << absent;
  }
}

TEST(PcieCollector, InfoLabels) {
  PcieCollector c(fixture_roots(), kDetail);
  MetricSink sink(c.metrics());
  CollectOnce(c, sink);
  // device, vendor_id, device_id, class, driver, numa_node, kind, upstream
  std::vector<std::vector<std::string>> rows = {
      {kGpu0, "0x10de", "0x2330", "0x030200", "nvidia", "0", "accelerator", kGpu0Port},
      {kGpu1, "0x10de", "0x2330", "0x030200", "nvidia", "0", "accelerator", kGpu1Port},
      {kCx7, "0x15b3", "0x1021", "0x020000", "mlx5_core", "0", "network", kNicPort},
      {kCx7Ib, "0x15b3", "0x1021", "0x020700", "mlx5_core", "0", "network", kNicPort},
      {kLostGpu, "0x10de", "0x2330", "0x030200", "nvidia", "0", "accelerator", kLostGpuPort},
      {kVga, "0x1a03", "0x2000", "0x030000", "ast", "0", "accelerator", kVgaBridge},
      {kCx5, "0x15b3", "0x1017", "0x020000", "mlx5_core", "1", "network", kCx5Port},
      {kGaudi, "0x1da3", "0x1020", "0x120000", "", "-1", "accelerator", kGaudiPort},
      {kRootPort, "0x8086", "0x352a", "0x060400", "pcieport", "0", "bridge", ""},
      {kSwitchUp, "0x1000", "0xc030", "0x060400", "pcieport", "0", "bridge", kRootPort},
      {kGpu0Port, "0x1000", "0xc030", "0x060400", "pcieport", "0", "bridge", kSwitchUp},
      {kGpu1Port, "0x1000", "0xc030", "0x060400", "pcieport", "0", "bridge", kSwitchUp},
      {kNicPort, "0x1000", "0xc030", "0x060400", "pcieport", "0", "bridge", kSwitchUp},
      {kLostGpuPort, "0x8086", "0x352a", "0x060400", "pcieport", "0", "bridge", ""},
      {kVgaRootPort, "0x8086", "0xa190", "0x060400", "pcieport", "0", "bridge", ""},
      {kVgaBridge, "0x1a03", "0x1150", "0x060400", "", "0", "bridge", kVgaRootPort},
      {kCx5Port, "0x8086", "0x352a", "0x060400", "pcieport", "1", "bridge", ""},
      {kGaudiPort, "0x8086", "0x352a", "0x060400", "pcieport", "-1", "bridge", ""},
  };
  for (const auto& labels : rows) EXPECT_EQ(Value(sink, kInfo, labels), 1) << labels[0];
}

TEST(PcieCollector, LinkValues) {
  PcieCollector c(fixture_roots(), kDetail);
  MetricSink sink(c.metrics());
  CollectOnce(c, sink);
  struct Row {
    const char* device;
    double speed, max_speed, width, max_width;  // NaN: no series
  };
  const double none = std::nan("");
  std::vector<Row> rows = {
      {kGpu0, 32e9, 32e9, 8, 16},
      {kGpu1, 2.5e9, 32e9, 16, 16},
      {kCx7, 32e9, 32e9, 16, 16},
      {kCx7Ib, 32e9, 32e9, 16, 16},
      {kLostGpu, none, 32e9, none, none},  // "Unknown", 63, 63
      {kCx5, 8e9, 8e9, 8, 16},             // "8 GT/s"
      {kRootPort, 32e9, 32e9, 16, 16},
      {kSwitchUp, 32e9, 32e9, 16, 16},
      {kGpu0Port, 32e9, 32e9, 8, 16},
      {kGpu1Port, 2.5e9, 32e9, 16, 16},
      {kNicPort, 32e9, 32e9, 16, 16},
      {kLostGpuPort, none, 32e9, none, 16},  // "Unknown", 0
      {kVgaRootPort, 5e9, 8e9, 1, 1},
      {kVgaBridge, 5e9, 5e9, 1, 1},
      {kCx5Port, 8e9, 8e9, 8, 8},
      {kGaudiPort, 16e9, 32e9, 16, 16},  // "16.0 GT/s PCIe"
  };
  for (const Row& r : rows) {
    auto check = [&](const char* name, double expected) {
      if (std::isnan(expected)) {
        EXPECT_FALSE(has(sink, name, {r.device})) << name << " " << r.device;
      } else {
        EXPECT_DOUBLE_EQ(Value(sink, name, {r.device}), expected) << name << " " << r.device;
      }
    };
    check(kSpeed, r.speed);
    check(kMaxSpeed, r.max_speed);
    check(kWidth, r.width);
    check(kMaxWidth, r.max_width);
  }
  // The VGA is conventional PCI (no link attributes); the Gaudi is
  // runtime-suspended, so its link attributes (present) are not read.
  for (const char* device : {kVga, kGaudi}) {
    for (const char* name : {kSpeed, kMaxSpeed, kWidth, kMaxWidth, kDegraded}) {
      EXPECT_FALSE(has(sink, name, {device})) << name << " " << device;
    }
  }
  EXPECT_EQ(series_count(sink, kSpeed), 14u);
  EXPECT_EQ(series_count(sink, kMaxSpeed), 16u);
  EXPECT_EQ(series_count(sink, kWidth), 14u);
  EXPECT_EQ(series_count(sink, kMaxWidth), 15u);
}

TEST(PcieCollector, DegradedWidth) {
  PcieCollector c(fixture_roots(), kDetail);
  MetricSink sink(c.metrics());
  CollectOnce(c, sink);
  EXPECT_EQ(Value(sink, kDegraded, {kGpu0}), 1);  // x8 < min(x16, port x16)
  EXPECT_EQ(Value(sink, kDegraded, {kGpu1}), 0);  // x16, at 2.5 GT/s: speed is not counted
  EXPECT_EQ(Value(sink, kDegraded, {kCx7}), 0);   // Gen5 x16
  EXPECT_EQ(Value(sink, kDegraded, {kCx7Ib}), 0);
  EXPECT_EQ(Value(sink, kDegraded, {kCx5}), 0);    // x8 = min(x16, port x8)
  EXPECT_FALSE(has(sink, kDegraded, {kLostGpu}));  // widths unknown
  // Accelerators and NICs, and the switch upstream ports (01:00.0, 07:00.0,
  // both at full width), whose link status is their uplink's; never a
  // downstream port (02:00.0 reads x8 of x16 too: that is GPU0's link,
  // already flagged on GPU0).
  EXPECT_EQ(Value(sink, kDegraded, {"0000:01:00.0"}), 0);
  EXPECT_EQ(Value(sink, kDegraded, {"0000:07:00.0"}), 0);
  EXPECT_EQ(
      devices_of(sink, kDegraded),
      (std::vector<std::string>{"0000:01:00.0", kGpu0, kGpu1, kCx7, kCx7Ib, "0000:07:00.0", kCx5}));
}

TEST(PcieCollector, ASwitchUplinkTrainedNarrowIsFlaggedOnTheSwitch) {
  // The riser between the root port and the switch trained at x8: every
  // link below the switch still reads x16.
  TempSysfs tree;
  tree.write("devices/pci0000:00/0000:00:01.0/0000:01:00.0/current_link_width", "8\n");
  PcieCollector c(tree.roots(), kDetail);
  MetricSink sink(c.metrics());
  CollectOnce(c, sink);
  EXPECT_EQ(Value(sink, kDegraded, {"0000:01:00.0"}), 1);
  EXPECT_EQ(Value(sink, kDegraded, {kGpu1}), 0);
}

TEST(PcieCollector, AerCounters) {
  PcieCollector c(fixture_roots(), kDetail);
  MetricSink sink(c.metrics());
  CollectOnce(c, sink);
  // GPU0, current names: TOTAL_ERR_COR (241) is not exported.
  EXPECT_EQ(Value(sink, kAerDetail, {kGpu0, "correctable", "rx_err"}), 212);
  EXPECT_EQ(Value(sink, kAerDetail, {kGpu0, "correctable", "bad_tlp"}), 37);
  EXPECT_EQ(Value(sink, kAerDetail, {kGpu0, "correctable", "bad_dllp"}), 15);
  EXPECT_EQ(Value(sink, kAerDetail, {kGpu0, "correctable", "timeout"}), 9);
  EXPECT_EQ(Value(sink, kAerDetail, {kGpu0, "correctable", "rollover"}), 0);
  EXPECT_EQ(Value(sink, kAerDetail, {kGpu0, "nonfatal", "cmplt_to"}), 2);
  EXPECT_EQ(Value(sink, kAerDetail, {kGpu0, "nonfatal", "unsup_req"}), 0);
  EXPECT_EQ(Value(sink, kAerDetail, {kGpu0, "fatal", "sdes"}), 0);
  EXPECT_EQ(aer_errors_of(sink, kGpu0, "correctable").size(), 8u);
  EXPECT_EQ(aer_errors_of(sink, kGpu0, "nonfatal").size(), 18u);
  EXPECT_EQ(aer_errors_of(sink, kGpu0, "fatal").size(), 18u);
  // The link partner counts errors too; the lost GPU's root port saw the
  // Surprise Down (fatal).
  EXPECT_EQ(Value(sink, kAerDetail, {kGpu0Port, "correctable", "rx_err"}), 96);
  EXPECT_EQ(Value(sink, kAerDetail, {kGpu0Port, "correctable", "bad_dllp"}), 4);
  EXPECT_EQ(Value(sink, kAerDetail, {kLostGpuPort, "fatal", "sdes"}), 1);
  // ConnectX-5, long names of older kernels, same labels.
  EXPECT_EQ(Value(sink, kAerDetail, {kCx5, "correctable", "rx_err"}), 5);
  EXPECT_EQ(Value(sink, kAerDetail, {kCx5, "correctable", "bad_tlp"}), 1);
  EXPECT_EQ(Value(sink, kAerDetail, {kCx5, "correctable", "timeout"}), 2);
  EXPECT_EQ(Value(sink, kAerDetail, {kCx5, "correctable", "rollover"}), 0);
  EXPECT_EQ(Value(sink, kAerDetail, {kCx5, "nonfatal", "sdes"}), 0);
  EXPECT_EQ(aer_errors_of(sink, kCx5, "correctable"), aer_errors_of(sink, kGpu0, "correctable"));
  std::set<std::string> fatal_new = aer_errors_of(sink, kGpu0, "fatal");
  fatal_new.erase("poison_tlp_blocked");
  EXPECT_EQ(aer_errors_of(sink, kCx5, "fatal"), fatal_new);
  // No AER capability: no series (the VGA and its bridge); the suspended
  // Gaudi's counters are read (they do not touch the device).
  EXPECT_TRUE(aer_errors_of(sink, kVga, "correctable").empty());
  EXPECT_TRUE(aer_errors_of(sink, kVgaBridge, "correctable").empty());
  EXPECT_EQ(aer_errors_of(sink, kGaudi, "correctable").size(), 8u);
  // 14 functions with current names (8 + 18 + 18 lines), 2 with the long
  // names (8 + 17 + 17).
  EXPECT_EQ(series_count(sink, kAerDetail), 14u * 44u + 2u * 42u);
  EXPECT_EQ(sink.render().find("total_err"), std::string::npos);
}

// The default: one series per function and severity, the kernel's
// TOTAL_ERR_* count (error reports), never the bits.
TEST(PcieCollector, AerTotalsByDefault) {
  PcieCollector c(fixture_roots());
  MetricSink sink(c.metrics());
  CollectOnce(c, sink);
  // GPU0: TOTAL_ERR_COR is 241 while its bits sum to 273 (one report can
  // set several bits).
  EXPECT_EQ(Value(sink, kAer, {kGpu0, "correctable"}), 241);
  EXPECT_EQ(Value(sink, kAer, {kLostGpuPort, "fatal"}), 1);
  EXPECT_EQ(sink.render().find(kAerDetail), std::string::npos);
  // Three series per function with AER (16 of them), none for the VGA and
  // its bridge, which have no AER capability.
  EXPECT_EQ(series_count(sink, kAer), 16u * 3u);
  EXPECT_FALSE(has(sink, kAer, {kVga, "correctable"}));

  // With the bits, the totals are the same series with the same values.
  PcieCollector detailed(fixture_roots(), kDetail);
  MetricSink with_bits(detailed.metrics());
  CollectOnce(detailed, with_bits);
  EXPECT_EQ(series_count(with_bits, kAer), 16u * 3u);
  EXPECT_EQ(Value(with_bits, kAer, {kGpu0, "correctable"}), 241);
  EXPECT_EQ(Value(with_bits, kAerDetail, {kGpu0, "correctable", "rx_err"}), 212);
}

// A file without a TOTAL_ERR_* line (not written by any kernel since the
// files appeared, but possible from a patched one): the sum of its bits.
TEST(PcieCollector, AerTotalWithoutATotalLineIsTheSum) {
  TempSysfs tree;
  tree.write(std::string(kGpu1Dir) + "/aer_dev_correctable", "RxErr 3\nBadTLP 4\n");
  PcieCollector c(tree.roots());
  MetricSink sink(c.metrics());
  CollectOnce(c, sink);
  EXPECT_EQ(Value(sink, kAer, {kGpu1, "correctable"}), 7);
  EXPECT_TRUE(sink.errors().empty());
}

TEST(PcieCollector, SameResultTwice) {
  PcieCollector c(fixture_roots(), kDetail);
  MetricSink s1(c.metrics());
  MetricSink s2(c.metrics());
  CollectOnce(c, s1);
  CollectOnce(c, s2);
  EXPECT_EQ(s1.render(), s2.render());
}

// ---------------------------------------------------------------------------
// Devices that vanish

TEST(PcieCollector, DanglingLinkIsSkippedQuietly) {
  // 0000:82:00.0 is listed in bus/pci/devices but its directory is gone.
  ASSERT_TRUE(fs::is_symlink(fixture_sysfs() / "bus/pci/devices" / kGone));
  ASSERT_FALSE(fs::exists(fixture_sysfs() / "bus/pci/devices" / kGone));
  PcieCollector c(fixture_roots(), kDetail);
  std::vector<std::string> listed = c.list_functions();
  EXPECT_NE(std::find(listed.begin(), listed.end(), kGone), listed.end());
  MetricSink sink(c.metrics());
  CollectOnce(c, sink);
  EXPECT_FALSE(has(sink, kMaxSpeed, {kGone}));
  EXPECT_TRUE(sink.errors().empty());
}

TEST(PcieCollector, DeviceRemovedAfterListing) {
  TempSysfs tree;
  PcieCollector c(tree.roots(), kDetail);
  std::vector<std::string> listed = c.list_functions();
  ASSERT_NE(std::find(listed.begin(), listed.end(), kGpu1), listed.end());

  // GPU1 is hot-removed after the listing: the kernel removes its directory.
  fs::remove_all(tree.sys() / kGpu1Dir);
  MetricSink sink(c.metrics());
  c.collect_functions(listed, generous_context(), sink);
  ExpectConformant(sink);
  EXPECT_TRUE(sink.errors().empty());
  EXPECT_FALSE(has(sink, kMaxSpeed, {kGpu1}));
  EXPECT_FALSE(has(sink, kDegraded, {kGpu1}));
  EXPECT_EQ(sink.render().find(kGpu1), std::string::npos);
  // Its port is exported only as the upstream of a selected device: not now.
  EXPECT_FALSE(has(sink, kMaxSpeed, {kGpu1Port}));
  // The rest is untouched.
  EXPECT_EQ(Value(sink, kDegraded, {kGpu0}), 1);
  EXPECT_EQ(series_count(sink, kInfo), 16u);
}

TEST(PcieCollector, AttributesGoneAfterTheClassWasRead) {
  // The kernel tore the function down half-way through: only `class` is
  // left (a real removal makes the remaining reads fail with ENOENT or ENODEV).
  TempSysfs tree;
  for (const auto& entry : fs::directory_iterator(tree.sys() / kCx7IbDir)) {
    if (entry.path().filename() != "class") fs::remove_all(entry.path());
  }
  PcieCollector c(tree.roots(), kDetail);
  MetricSink sink(c.metrics());
  CollectOnce(c, sink);
  EXPECT_TRUE(sink.errors().empty());
  EXPECT_EQ(sink.render().find(kCx7Ib), std::string::npos);
  EXPECT_EQ(Value(sink, kDegraded, {kCx7}), 0);  // the other function of the card stays
  EXPECT_EQ(series_count(sink, kInfo), 17u);
}

TEST(PcieCollector, ReadFunctionTellsAbsentFromGone) {
  TempSysfs tree;
  // Fresh descriptors each time: a held one would go on reading a fixture
  // file removed under it (sysfs answers ENODEV instead; see below).
  auto read = [&](const std::string& dir, FunctionRecord* record) {
    sources::HeldFiles files(sources::FsRoot(tree.sys()));
    return read_function(files, dir, record);
  };
  FunctionRecord full;
  ASSERT_EQ(read(kGpu1Dir, &full), ReadResult::kOk);
  EXPECT_EQ(full.identity.vendor_id, "0x10de");
  EXPECT_EQ(full.class_id, "0x030200");
  EXPECT_EQ(full.identity.driver, "nvidia");
  EXPECT_EQ(full.width, std::optional<unsigned>(16));
  EXPECT_FALSE(full.runtime_suspended);

  // An attribute the function does not have is not a vanished function.
  fs::remove(tree.sys() / kGpu1Dir / "current_link_width");
  FunctionRecord partial;
  ASSERT_EQ(read(kGpu1Dir, &partial), ReadResult::kOk);
  EXPECT_FALSE(partial.width);
  EXPECT_EQ(partial.max_width, std::optional<unsigned>(16));
  EXPECT_TRUE(partial.problems.empty());

  // Every PCI function has `vendor`: without it the function is gone.
  fs::remove(tree.sys() / kGpu1Dir / "vendor");
  FunctionRecord gone;
  EXPECT_EQ(read(kGpu1Dir, &gone), ReadResult::kGone);

  FunctionRecord missing;
  EXPECT_EQ(read("devices/pci0000:00/0000:00:01.0/0000:ff:00.0", &missing), ReadResult::kGone);
}

// ---------------------------------------------------------------------------
// Malformed files, no PCI, failures

TEST(PcieCollector, MalformedAttributesAreSkippedAndCounted) {
  TempSysfs tree;
  tree.write(std::string(kGpu1Dir) + "/current_link_width", "x16\n");
  tree.write(std::string(kGpu1Dir) + "/aer_dev_nonfatal", "CmpltTO lots\nTOTAL_ERR_NONFATAL 0\n");
  PcieCollector c(tree.roots(), kDetail);
  MetricSink sink(c.metrics());
  CollectOnce(c, sink);
  EXPECT_EQ(error_count(sink, "parse_error"), 2u);
  EXPECT_FALSE(has(sink, kWidth, {kGpu1}));
  EXPECT_FALSE(has(sink, kDegraded, {kGpu1}));  // needs the current width
  EXPECT_EQ(Value(sink, kMaxWidth, {kGpu1}), 16);
  EXPECT_DOUBLE_EQ(Value(sink, kSpeed, {kGpu1}), 2.5e9);
  EXPECT_TRUE(aer_errors_of(sink, kGpu1, "nonfatal").empty());
  EXPECT_EQ(aer_errors_of(sink, kGpu1, "correctable").size(), 8u);
  EXPECT_EQ(Value(sink, kInfo,
                  {kGpu1, "0x10de", "0x2330", "0x030200", "nvidia", "0", "accelerator", kGpu1Port}),
            1);
}

TEST(PcieCollector, MalformedIdentitySkipsTheFunction) {
  TempSysfs tree;
  // A selected function whose class cannot be parsed is not selected.
  tree.write(std::string(kCx7IbDir) + "/class", "network\n");
  // A port whose class cannot be parsed is not exported; the GPU below it
  // is, but without the degraded flag (the port's max width is not known).
  tree.write(std::string(kGpu1PortDir) + "/class", "0x06040\n0\n");
  // A vendor id that no kernel writes.
  tree.write("devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0/vendor",
             "NVIDIA\n");
  PcieCollector c(tree.roots(), kDetail);
  MetricSink sink(c.metrics());
  CollectOnce(c, sink);
  EXPECT_EQ(error_count(sink, "parse_error"), 3u);
  std::string text = sink.render();
  EXPECT_EQ(text.find(kCx7Ib), std::string::npos);
  EXPECT_FALSE(has(sink, kMaxWidth, {kGpu1Port}));
  EXPECT_EQ(Value(sink, kMaxWidth, {kGpu1}), 16);
  EXPECT_FALSE(has(sink, kDegraded, {kGpu1}));
  EXPECT_EQ(Value(sink, kInfo,
                  {kGpu1, "0x10de", "0x2330", "0x030200", "nvidia", "0", "accelerator", kGpu1Port}),
            1);
  EXPECT_EQ(text.find(std::string("device=\"") + kGpu0 + "\""), std::string::npos);
}

TEST(PcieCollector, NoPciIsNotAnError) {
  TempSysfs tree;
  fs::remove_all(tree.sys() / "bus");
  PcieCollector c(tree.roots(), kDetail);
  EXPECT_TRUE(c.list_functions().empty());
  MetricSink sink(c.metrics());
  CollectOnce(c, sink);
  EXPECT_EQ(sink.sample_count(), 0u);
  EXPECT_TRUE(sink.errors().empty());

  PcieCollector nothing(Roots{tree.dir() / "no-such-sysfs", tree.dir() / "proc"});
  MetricSink empty(nothing.metrics());
  CollectOnce(nothing, empty);
  EXPECT_EQ(empty.sample_count(), 0u);
}

TEST(PcieCollector, UnlistableDevicesDirectoryIsACollectError) {
  TempSysfs tree;
  fs::remove_all(tree.sys() / "bus/pci/devices");
  tree.write("bus/pci/devices", "not a directory\n");
  PcieCollector c(tree.roots(), kDetail);
  MetricSink sink(c.metrics());
  try {
    CollectOnce(c, sink);
    ADD_FAILURE() << "no CollectError";
  } catch (const CollectError& e) {
    EXPECT_EQ(e.reason(), "read_error");
    EXPECT_NE(std::string(e.what()).find("bus/pci/devices"), std::string::npos) << e.what();
  }
}

TEST(PcieCollector, LinkOutOfTheRootIsNotFollowed) {
  // Real sysfs links are relative. An absolute one would read outside the
  // configured root: it is refused and counted.
  TempSysfs tree;
  fs::path outside = tree.dir() / "outside";
  fs::create_directories(outside);
  fs::copy(tree.sys() / kGpu1Dir, outside / kGpu1,
           fs::copy_options::recursive | fs::copy_options::copy_symlinks);
  fs::create_symlink(outside / kGpu1, tree.sys() / "bus/pci/devices/0000:aa:00.0");
  PcieCollector c(tree.roots(), kDetail);
  MetricSink sink(c.metrics());
  CollectOnce(c, sink);
  EXPECT_EQ(error_count(sink, "read_error"), 1u);
  EXPECT_EQ(sink.render().find("0000:aa:00.0"), std::string::npos);
  EXPECT_EQ(series_count(sink, kInfo), 18u);
}

// ---------------------------------------------------------------------------
// Errnos injected through Roots::faults, and the held descriptors

int open_fds() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

// The detail counted for (reason, subject), or "<none>".
std::string failure(const MetricSink& sink, const std::string& reason, const std::string& subject) {
  auto it = sink.failures().find({reason, subject});
  return it == sink.failures().end() ? "<none>" : it->second;
}

// Errnos that start between two collections, on values read through held
// descriptors: an unreadable value is skipped and counted with its
// function, a function answering ENODEV is dropped quietly, a value
// answering ENOENT is one the function lacks; every other function and
// value is unchanged, and all of it comes back once the faults stop.
TEST(PcieCollector, ErrnosBetweenCollections) {
  TempSysfs tree;
  Roots roots = tree.roots();
  roots.faults = std::make_shared<sources::Faults>();
  PcieCollector c(roots, kDetail);
  MetricSink first(c.metrics());
  CollectOnce(c, first);
  ASSERT_TRUE(first.errors().empty());
  const std::size_t held = c.held_descriptors();
  // 8 per function (runtime status, 4 link, 3 AER), less what the VGA (7)
  // and its bridge (3) lack and the suspended Gaudi's link (4).
  EXPECT_EQ(held, 18u * 8u - 7u - 3u - 4u);

  roots.faults->inject("0000:03:00.0/current_link_speed", EIO);
  roots.faults->inject("0000:81:00.0/aer_dev_correctable", EACCES);
  roots.faults->inject("0000:04:00.0/power/runtime_status", ENODEV);
  roots.faults->inject("0000:05:00.0/current_link_width", ENOENT);
  MetricSink s(c.metrics());
  CollectOnce(c, s);
  EXPECT_EQ(failure(s, "read_error", kGpu0), "EIO reading current_link_speed");
  EXPECT_EQ(failure(s, "read_error", kCx5), "EACCES reading aer_dev_correctable");
  EXPECT_EQ(s.failures().size(), 2u);
  EXPECT_EQ(s.errors(), (std::map<std::string, std::uint64_t, std::less<>>{{"read_error", 2}}));
  // GPU0 without its speed, with everything else.
  EXPECT_FALSE(has(s, kSpeed, {kGpu0}));
  EXPECT_EQ(Value(s, kDegraded, {kGpu0}), 1);
  EXPECT_EQ(Value(s, kAerDetail, {kGpu0, "correctable", "rx_err"}), 212);
  // The ConnectX-5 without its correctable AER counters only.
  EXPECT_TRUE(aer_errors_of(s, kCx5, "correctable").empty());
  EXPECT_EQ(aer_errors_of(s, kCx5, "nonfatal").size(), 17u);
  EXPECT_DOUBLE_EQ(Value(s, kSpeed, {kCx5}), 8e9);
  // GPU1 went away (ENODEV): nothing of it, no error; its port stays, as
  // it was read for GPU1 in this collection.
  EXPECT_EQ(s.render().find(std::string("device=\"") + kGpu1 + "\""), std::string::npos);
  EXPECT_TRUE(has(
      s, kInfo, {kGpu1Port, "0x1000", "0xc030", "0x060400", "pcieport", "0", "bridge", kSwitchUp}));
  // The ConnectX-7 lacks a width now (ENOENT), and is otherwise there.
  EXPECT_FALSE(has(s, kWidth, {kCx7}));
  EXPECT_FALSE(has(s, kDegraded, {kCx7}));
  EXPECT_DOUBLE_EQ(Value(s, kSpeed, {kCx7}), 32e9);
  EXPECT_EQ(series_count(s, kInfo), 17u);

  roots.faults->clear();
  MetricSink back(c.metrics());
  CollectOnce(c, back);
  EXPECT_TRUE(back.errors().empty());
  EXPECT_EQ(back.render(), first.render());
  EXPECT_EQ(c.held_descriptors(), held);
}

// A function without a PCIe capability (the conventional-PCI VGA) has no
// link attributes: looked up once when its facts are read, not at every
// collection; a link attribute that appears is seen at the next reading of
// the facts. (One that goes missing after it was there is looked up at every
// collection: ErrnosBetweenCollections.)
TEST(PcieCollector, AttributesAFunctionLacksAreLookedUpWithItsFacts) {
  TempSysfs tree;
  const std::string vga = "devices/pci0000:00/0000:00:1c.0/0000:07:00.0/0000:08:00.0/";
  PcieCollector c(tree.roots(), kDetail);
  MetricSink first(c.metrics());
  CollectOnce(c, first);
  ASSERT_TRUE(first.errors().empty());
  EXPECT_FALSE(has(first, kWidth, {kVga}));
  tree.write(vga + "current_link_width", "1\n");
  tree.write(vga + "max_link_width", "1\n");
  MetricSink second(c.metrics());
  CollectOnce(c, second);
  EXPECT_FALSE(has(second, kWidth, {kVga}));  // lacked since the facts were read
  int collections = 2;
  for (; collections <= static_cast<int>(kFactsRefreshCycles) + 2; ++collections) {
    MetricSink s(c.metrics());
    CollectOnce(c, s);
    if (has(s, kWidth, {kVga})) {
      EXPECT_EQ(Value(s, kWidth, {kVga}), 1);
      break;
    }
  }
  EXPECT_LE(collections, static_cast<int>(kFactsRefreshCycles) + 2);
}

// A fact that cannot be read is counted on every collection while it
// lasts (it is read again, not kept from the last refresh), and the
// function comes back when it can be read.
TEST(PcieCollector, UnreadableFactIsCountedEveryCollection) {
  Roots roots = fixture_roots();
  roots.faults = std::make_shared<sources::Faults>();
  roots.faults->inject("0000:81:00.0/class", EACCES);
  roots.faults->inject("0000:04:00.0/vendor", EIO);
  PcieCollector c(roots, kDetail);
  for (int i = 0; i < 3; ++i) {
    MetricSink s(c.metrics());
    CollectOnce(c, s);
    EXPECT_EQ(failure(s, "read_error", kCx5), "EACCES reading class");
    EXPECT_EQ(failure(s, "read_error", kGpu1), "EIO reading vendor");
    EXPECT_EQ(error_count(s, "read_error"), 2u);
    EXPECT_EQ(s.render().find(std::string("device=\"") + kCx5 + "\""), std::string::npos);
    EXPECT_FALSE(has(s, kSpeed, {kGpu1}));
    EXPECT_FALSE(has(s, kMaxWidth, {kCx5Port}));  // watched only for the ConnectX-5
    EXPECT_TRUE(has(s, kMaxWidth, {kGpu1Port}));  // read for GPU1, whose class was read
  }
  roots.faults->clear();
  MetricSink s(c.metrics());
  CollectOnce(c, s);
  EXPECT_TRUE(s.errors().empty());
  EXPECT_EQ(series_count(s, kInfo), 18u);
}

// A function that goes away in the middle of a collection (its files
// answer ENODEV from the moment GPU0's last AER file has been read) is
// dropped from that collection, quietly; the next one reads it again.
TEST(PcieCollector, FunctionGoneDuringACollection) {
  Roots roots = fixture_roots();
  roots.faults = std::make_shared<sources::Faults>();
  PcieCollector c(roots, kDetail);
  MetricSink first(c.metrics());
  CollectOnce(c, first);
  roots.faults->on_read("0000:03:00.0/aer_dev_fatal", [&] {
    roots.faults->inject("0000:05:00.1/power/runtime_status", ENODEV, 1);
  });
  MetricSink s(c.metrics());
  CollectOnce(c, s);
  EXPECT_TRUE(s.errors().empty());
  EXPECT_EQ(s.render().find(std::string("device=\"") + kCx7Ib + "\""), std::string::npos);
  EXPECT_EQ(Value(s, kDegraded, {kCx7}), 0);  // the other function of the card stays
  EXPECT_EQ(series_count(s, kInfo), 17u);
  EXPECT_EQ(roots.faults->hits(), 1u);
  MetricSink again(c.metrics());
  CollectOnce(c, again);
  EXPECT_EQ(again.render(), first.render());
}

// Held descriptors follow the functions: a GPU removed from the tree
// between two collections takes its descriptors and its port's with it,
// and a node without PCI any more holds none.
TEST(PcieCollector, HeldDescriptorsDoNotLeak) {
  TempSysfs tree;
  const int before = open_fds();
  {
    PcieCollector c(tree.roots(), kDetail);
    MetricSink s(c.metrics());
    CollectOnce(c, s);
    const std::size_t held = c.held_descriptors();
    EXPECT_EQ(open_fds(), before + static_cast<int>(held));
    EXPECT_EQ(c.tracked_functions(), 24u);  // every listed function but the dangling link

    // GPU1 is hot-removed: the kernel removes its link and its directory.
    fs::remove(tree.sys() / "bus/pci/devices" / kGpu1);
    fs::remove_all(tree.sys() / kGpu1Dir);
    MetricSink after(c.metrics());
    CollectOnce(c, after);
    EXPECT_TRUE(after.errors().empty());
    EXPECT_FALSE(
        has(after, kInfo,
            {kGpu1, "0x10de", "0x2330", "0x030200", "nvidia", "0", "accelerator", kGpu1Port}));
    EXPECT_EQ(c.held_descriptors(), held - 16u);  // GPU1's 8 and its port's 8
    EXPECT_EQ(open_fds(), before + static_cast<int>(held) - 16);
    EXPECT_EQ(c.tracked_functions(), 23u);

    fs::remove_all(tree.sys() / "bus");
    MetricSink none(c.metrics());
    CollectOnce(c, none);
    EXPECT_EQ(none.sample_count(), 0u);
    EXPECT_EQ(c.held_descriptors(), 0u);
    EXPECT_EQ(c.tracked_functions(), 0u);
    EXPECT_EQ(open_fds(), before);
  }
  EXPECT_EQ(open_fds(), before);
}

// max_held = 0 holds nothing (every value opened, read and closed: the
// benchmark's "before"), and exports exactly the same.
TEST(PcieCollector, WithoutHeldDescriptorsTheSameOutput) {
  const int before = open_fds();
  PcieCollector held(fixture_roots(), kDetail);
  PcieCollector plain(fixture_roots(), kDetail, 0);
  MetricSink a(held.metrics());
  MetricSink b(plain.metrics());
  CollectOnce(held, a);
  CollectOnce(plain, b);
  EXPECT_EQ(a.render(), b.render());
  EXPECT_EQ(plain.held_descriptors(), 0u);
  EXPECT_EQ(open_fds(), before + static_cast<int>(held.held_descriptors()));
}

TEST(PcieCollector, StopsWhenCancelled) {
  PcieCollector c(fixture_roots(), kDetail);
  std::atomic<bool> cancelled{true};
  CollectContext ctx{std::chrono::steady_clock::now() + std::chrono::seconds(10), &cancelled};
  MetricSink sink(c.metrics());
  c.collect(ctx, sink);
  ExpectConformant(sink);
  EXPECT_EQ(sink.sample_count(), 0u);
}

// ---------------------------------------------------------------------------
// Configuration

TEST(PcieConfig, DefaultsAndUnknownKeys) {
  std::vector<CollectorSpec> catalog = {pcie_collector_spec()};
  ConfigResult r = parse_config("", "built-in defaults", catalog);
  ASSERT_TRUE(r.config);
  const CollectorConfig& cc = r.config->collectors.at(0);
  EXPECT_EQ(cc.name(), "pcie");
  EXPECT_TRUE(cc.enabled);
  EXPECT_EQ(cc.interval, std::chrono::seconds(30));
  EXPECT_EQ(cc.timeout, std::chrono::seconds(10));

  ConfigResult bad = parse_config("[collectors.pcie]\nclasses = [\"0x03\"]\n", "n.toml", catalog);
  EXPECT_FALSE(bad.config);
  ASSERT_EQ(bad.errors.size(), 1u);
  EXPECT_EQ(bad.errors[0].key, "collectors.pcie.classes");

  ConfigResult off = parse_config("[collectors.pcie]\nenabled = false\n", "n.toml", catalog);
  ASSERT_TRUE(off.config);
  EXPECT_FALSE(off.config->collectors.at(0).enabled);
}

TEST(PcieConfig, CreateThroughTheSpec) {
  std::vector<CollectorSpec> catalog = {pcie_collector_spec()};
  ConfigResult r = parse_config("[collectors.pcie]\ninterval = \"1m\"\n", "n.toml", catalog);
  ASSERT_TRUE(r.config) << (r.errors.empty() ? "" : r.errors[0].str());
  const CollectorConfig& cc = r.config->collectors.at(0);
  std::unique_ptr<Collector> c = cc.spec->create(CollectorEnv{fixture_roots(), cc.options});
  ASSERT_TRUE(c);
  MetricSink sink(c->metrics());
  CollectOnce(*c, sink);
  EXPECT_EQ(Value(sink, kDegraded, {kGpu0}), 1);
  EXPECT_EQ(series_count(sink, kInfo), 18u);
  EXPECT_EQ(series_count(sink, kAerDetail), 0u);

  ConfigResult detail = parse_config("[collectors.pcie]\naer_detail = true\n", "n.toml", catalog);
  ASSERT_TRUE(detail.config) << (detail.errors.empty() ? "" : detail.errors[0].str());
  const CollectorConfig& dc = detail.config->collectors.at(0);
  std::unique_ptr<Collector> d = dc.spec->create(CollectorEnv{fixture_roots(), dc.options});
  MetricSink sink2(d->metrics());
  CollectOnce(*d, sink2);
  EXPECT_EQ(Value(sink2, kAerDetail, {kGpu0, "correctable", "rx_err"}), 212);

  ConfigResult wrong = parse_config("[collectors.pcie]\naer_detail = 1\n", "n.toml", catalog);
  EXPECT_FALSE(wrong.config);
  ASSERT_EQ(wrong.errors.size(), 1u);
  EXPECT_EQ(wrong.errors[0].key, "collectors.pcie.aer_detail");
}

}  // namespace
}  // namespace nodewatch::pcie
