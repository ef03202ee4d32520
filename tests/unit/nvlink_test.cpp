// NVLink through the fake libnvidia-ml.so.1 (tests/fakes/fake_nvml): the
// NVML service's NVLink questions, and the series NvlinkMetrics makes of them.
// Hopper-like boards with 18 links (one down), Blackwell-like boards with 36
// NVLink5 links, errors growing between collections, an old driver without
// field values, a GPU lost mid-read, GPUs without NVLink. The values each
// fake link reports are in tests/fixtures/nvml/README.md.

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>  // before support/collector_test.hpp
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "accelerator/accelerator_collector.hpp"
#include "accelerator/nvml/nvml_queries.hpp"
#include "accelerator/nvml/nvml_service.hpp"
#include "config.hpp"
#include "interconnect/interconnect_collector.hpp"
#include "interconnect/nvlink_metrics.hpp"
#include "support/collector_test.hpp"
#include "support/daemon_process.hpp"
#include "support/paths.hpp"

namespace nodewatch::accelerator {
namespace {

using interconnect::nvlink_metric_prefixes;
using interconnect::nvlink_metric_table;
using interconnect::NvlinkMetrics;
using nodewatch::testing::ErrorCount;
using nodewatch::testing::ExpectConformant;
using nodewatch::testing::ExpectWellFormedTable;
using nodewatch::testing::TempDir;
using namespace std::chrono_literals;

std::string scenario(const char* name) {
  return (nodewatch::testing::fixtures_dir() / "nvml" / name).string();
}

std::string uuid(unsigned i) {
  char b[64];
  std::snprintf(b, sizeof b, "GPU-00000000-0000-4000-8000-0000000000%02u", i);
  return b;
}

const MetricTable& Table() {
  return nvlink_metric_table();
}

CollectContext Context() {
  CollectContext ctx;
  ctx.deadline = std::chrono::steady_clock::now() + 10s;
  return ctx;
}

// NvlinkMetrics over the fake at `library`, reading `scenario_file`.
class Node {
 public:
  // `link_errors`: the per-link error series too (most tests read them).
  Node(const char* library, const std::string& scenario_file, bool link_errors = true) {
    setenv("FAKE_NVML_SCENARIO", scenario_file.c_str(), 1);
    metrics_ = std::make_unique<NvlinkMetrics>(std::make_shared<NvmlService>(library), link_errors);
  }
  MetricSink Collect() {
    MetricSink sink(Table());
    metrics_->collect(Context(), sink);
    return sink;
  }

 private:
  std::unique_ptr<NvlinkMetrics> metrics_;
};

// The fake's hooks, from the copy the backend loaded.
class Hooks {
 public:
  explicit Hooks(const char* library) : handle_(dlopen(library, RTLD_NOW | RTLD_NOLOAD)) {
    if (handle_ == nullptr) return;
    script_ = reinterpret_cast<int (*)(const char*)>(dlsym(handle_, "fake_nvml_script"));
    calls_ = reinterpret_cast<unsigned long long (*)(const char*, int)>(
        dlsym(handle_, "fake_nvml_calls"));
  }
  ~Hooks() {
    if (handle_ != nullptr) dlclose(handle_);
  }
  Hooks(const Hooks&) = delete;
  Hooks& operator=(const Hooks&) = delete;
  bool Script(const char* line) { return script_ != nullptr && script_(line) == 0; }
  unsigned long long Calls(const char* function, int device = -1) {
    return calls_ != nullptr ? calls_(function, device) : ~0ull;
  }

 private:
  void* handle_;
  int (*script_)(const char*) = nullptr;
  unsigned long long (*calls_)(const char*, int) = nullptr;
};

double Get(const MetricSink& sink, std::string_view name, std::vector<std::string> labels) {
  double v = std::nan("");
  EXPECT_TRUE(sink.get(name, labels, &v)) << name << " " << labels[0] << "/" << labels.back();
  return v;
}
bool Has(const MetricSink& sink, std::string_view name, std::vector<std::string> labels) {
  double v = 0;
  return sink.get(name, labels, &v);
}

// The NVLink families are declared as the interconnect collector's
// borrowed prefixes: linted against its own prefix, with no looser rule.
TEST(NvlinkTest, TableIsWellFormed) {
  ExpectWellFormedTable(Table(), "nodewatch_interconnect_");
  EXPECT_EQ(Table().borrowed_prefixes(), nvlink_metric_prefixes());
}

TEST(NvlinkTest, HopperEighteenLinksOneDown) {
  Node node(FAKE_NVML_LIBRARY, scenario("nvlink_hopper.scenario"));
  MetricSink sink = node.Collect();
  ExpectConformant(sink);
  EXPECT_TRUE(sink.errors().empty());
  const char* kLegacy[] = {"replay", "recovery", "crc_flit", "crc_data", "ecc"};
  for (unsigned i = 0; i < 8; ++i) {
    const std::string a = std::to_string(i);
    EXPECT_EQ(Get(sink, "nodewatch_accelerator_nvlink_links", {a, uuid(i)}), 18);
    EXPECT_EQ(Get(sink, "nodewatch_accelerator_nvlink_links_active", {a, uuid(i)}),
              i == 3 ? 17 : 18);
    for (unsigned l = 0; l < 18; ++l) {
      const std::vector<std::string> key = {a, uuid(i), std::to_string(l)};
      EXPECT_EQ(Get(sink, "nodewatch_nvlink_up", key), i == 3 && l == 5 ? 0 : 1);
      EXPECT_EQ(Get(sink, "nodewatch_nvlink_speed_bytes_per_second", key), 25000e6);
      // Fields 138/139 are in KiB.
      EXPECT_EQ(Get(sink, "nodewatch_nvlink_transmitted_bytes_total", key),
                (1000.0 * (i + 1) + l) * 1024);
      EXPECT_EQ(Get(sink, "nodewatch_nvlink_received_bytes_total", key),
                (2000.0 * (i + 1) + l) * 1024);
      for (unsigned c = 0; c < 5; ++c) {
        std::vector<std::string> e = key;
        e.push_back(kLegacy[c]);
        EXPECT_EQ(Get(sink, "nodewatch_nvlink_link_errors_total", e), (c + 1.0) * (i + l));
      }
      std::vector<std::string> symbol = key;
      symbol.push_back("symbol");
      EXPECT_FALSE(Has(sink, "nodewatch_nvlink_link_errors_total", symbol));  // no NVLink5 fields
    }
  }
  EXPECT_FALSE(Has(sink, "nodewatch_nvlink_up", {"0", uuid(0), "18"}));
  // 8 GPUs x (2 + 18 links x (up, speed, tx, rx, 5 error types) + the 5
  // per-accelerator sums + P2P with the 7 others).
  EXPECT_EQ(sink.sample_count(), 8u * (2 + 18 * 9 + 5 + 7));
}

TEST(NvlinkTest, Nvlink5ThirtySixLinks) {
  Node node(FAKE_NVML_LIBRARY, scenario("nvlink5.scenario"));
  MetricSink sink = node.Collect();
  ExpectConformant(sink);
  EXPECT_TRUE(sink.errors().empty());
  struct Type {
    const char* type;
    unsigned field;
  };
  const Type kTypes[] = {{"symbol", 221},           {"effective", 219},
                         {"recovery", 215},         {"recovery_failed", 214},
                         {"malformed_packet", 206}, {"buffer_overrun", 207},
                         {"receive", 208},          {"receive_remote", 209},
                         {"receive_general", 210},  {"local_link_integrity", 211},
                         {"transmit_discard", 212}};
  for (unsigned i = 0; i < 4; ++i) {
    const std::string a = std::to_string(i);
    EXPECT_EQ(Get(sink, "nodewatch_accelerator_nvlink_links", {a, uuid(i)}), 36);
    EXPECT_EQ(Get(sink, "nodewatch_accelerator_nvlink_links_active", {a, uuid(i)}), 36);
    for (unsigned l = 0; l < 36; ++l) {
      const std::vector<std::string> key = {a, uuid(i), std::to_string(l)};
      EXPECT_EQ(Get(sink, "nodewatch_nvlink_speed_bytes_per_second", key), 50000e6);
      // The NVLink5 byte counters (fields 202/204), not the KiB ones.
      EXPECT_EQ(Get(sink, "nodewatch_nvlink_transmitted_bytes_total", key), 1e9 * (i + 1) + l);
      EXPECT_EQ(Get(sink, "nodewatch_nvlink_received_bytes_total", key), 2e9 * (i + 1) + l);
      for (const Type& t : kTypes) {
        std::vector<std::string> e = key;
        e.push_back(t.type);
        EXPECT_EQ(Get(sink, "nodewatch_nvlink_link_errors_total", e),
                  (t.field - 200.0) * (i + l + 1));
      }
      std::vector<std::string> crc = key;
      crc.push_back("crc_flit");
      EXPECT_FALSE(Has(sink, "nodewatch_nvlink_link_errors_total", crc));
    }
  }
  // Per link: up, speed, bytes both ways, 11 error types, and R580's link
  // quality (effective and symbol BER, 16 FEC bins); per accelerator: the
  // link counts, the 11 error sums, the worst two BERs, the 16 bin sums,
  // P2P with the 3 others.
  EXPECT_EQ(sink.sample_count(), 4u * (2 + 36 * (4 + 11 + 2 + 16) + 11 + 2 + 16 + 3));
  // Blackwell answers NOT_SUPPORTED for the per-counter call: asked on the
  // first link only (5 counters), not on the 35 others.
  Hooks hooks(FAKE_NVML_LIBRARY);
  EXPECT_EQ(hooks.Calls("nvmlDeviceGetNvLinkErrorCounter"), 4u * 5);
}

// NVLink5 quality under a driver of NVML 13.3 (the values are the fake's,
// tests/fixtures/nvml/README.md): the BERs decoded, the worst active link's
// per accelerator; FEC bins, PLR and transmit-wait summed over the links;
// the PRM counters asked by local port = link + 1; a Hopper asked each
// quality field and the PRM call once, never again.
TEST(NvlinkTest, Nvlink5QualityPerAcceleratorAndPerLink) {
  Node node(FAKE_NVML_LIBRARY, scenario("nvlink5_quality.scenario"));
  node.Collect();
  const MetricSink sink = node.Collect();
  EXPECT_EQ(ErrorCount(sink, "nvml_error"), 0u);
  const double kEps = 1e-6;  // relative
  auto near = [&](double got, double want) { EXPECT_NEAR(got, want, std::abs(want) * kEps); };
  for (unsigned i = 0; i < 2; ++i) {
    const std::string a = std::to_string(i);
    // GPU 0: links 0-2 active (3 down); GPU 1: all four.
    const unsigned active = i == 0 ? 3 : 4;
    near(Get(sink, "nodewatch_nvlink_bit_error_rate", {a, uuid(i), "effective"}),
         i == 0 ? 1e-15 : 3e-8);
    near(Get(sink, "nodewatch_nvlink_bit_error_rate", {a, uuid(i), "symbol"}), active * 1e-8);
    near(Get(sink, "nodewatch_nvlink_bit_error_rate", {a, uuid(i), "raw"}), active * 1e-6);
    for (unsigned b = 0; b < 16; ++b)
      EXPECT_EQ(Get(sink, "nodewatch_nvlink_fec_codewords_total", {a, uuid(i), std::to_string(b)}),
                4.0 * (16 - b) * 1000 * (i + 1) + 6);
    // The fields, of every link; the PRM counters, of the active links.
    EXPECT_EQ(Get(sink, "nodewatch_nvlink_plr_total", {a, uuid(i), "xmit_blocks"}),
              4e9 * (i + 1) + 6);
    EXPECT_EQ(Get(sink, "nodewatch_nvlink_plr_total", {a, uuid(i), "xmit_retry_blocks"}),
              4000.0 * (i + 1) + 6);
    const double link_sum = active == 3 ? 3 : 6;  // 0+1+2, 0+1+2+3
    EXPECT_EQ(Get(sink, "nodewatch_nvlink_plr_total", {a, uuid(i), "xmit_codes"}),
              active * 1e9 * (i + 1) + link_sum);
    EXPECT_EQ(Get(sink, "nodewatch_nvlink_plr_total", {a, uuid(i), "xmit_retry_codes"}),
              active * 100.0 * (i + 1) + link_sum);
    EXPECT_EQ(Get(sink, "nodewatch_nvlink_plr_total", {a, uuid(i), "rcv_code_errors"}),
              active * i + link_sum);
    EXPECT_EQ(Get(sink, "nodewatch_nvlink_transmit_wait_ticks_total", {a, uuid(i)}),
              active * 1e6 * (i + 1) + link_sum);
    EXPECT_EQ(Get(sink, "nodewatch_nvlink_errors_total", {a, uuid(i), "link_down"}), 0);
    for (unsigned l = 0; l < 4; ++l) {
      const std::string link = std::to_string(l);
      // A link down has no data rate (and it is no error).
      const bool up = i == 1 || l < 3;
      EXPECT_EQ(Has(sink, "nodewatch_nvlink_data_rate_bytes_per_second", {a, uuid(i), link}), up);
      if (up) {
        EXPECT_EQ(Get(sink, "nodewatch_nvlink_data_rate_bytes_per_second", {a, uuid(i), link}),
                  47000e6);
      }
      near(Get(sink, "nodewatch_nvlink_link_bit_error_rate", {a, uuid(i), link, "symbol"}),
           (l + 1) * 1e-8);
      EXPECT_EQ(Get(sink, "nodewatch_nvlink_link_fec_codewords_total", {a, uuid(i), link, "15"}),
                1000.0 * (i + 1) + l);
      // Port l+1 is link l: a port one off would give link l its
      // neighbour's count, and link 0 none.
      EXPECT_EQ(Has(sink, "nodewatch_nvlink_link_plr_total", {a, uuid(i), link, "xmit_codes"}), up);
      if (up) {
        EXPECT_EQ(Get(sink, "nodewatch_nvlink_link_plr_total", {a, uuid(i), link, "xmit_codes"}),
                  1e9 * (i + 1) + l);
        EXPECT_EQ(Get(sink, "nodewatch_nvlink_link_transmit_wait_ticks_total", {a, uuid(i), link}),
                  1e6 * (i + 1) + l);
      }
    }
  }
  // The Hopper: none of it, and asked once.
  EXPECT_FALSE(Has(sink, "nodewatch_nvlink_bit_error_rate", {"2", uuid(2), "effective"}));
  EXPECT_FALSE(Has(sink, "nodewatch_nvlink_fec_codewords_total", {"2", uuid(2), "0"}));
  EXPECT_FALSE(Has(sink, "nodewatch_nvlink_transmit_wait_ticks_total", {"2", uuid(2)}));
  Hooks hooks(FAKE_NVML_LIBRARY);
  EXPECT_EQ(hooks.Calls("field 220", 2), 4u) << "asked again after NOT_SUPPORTED on every link";
  EXPECT_EQ(hooks.Calls("field 250", 2), 4u);
  EXPECT_EQ(hooks.Calls("field 220", 0), 8u) << "the Blackwell is asked every collection";
  EXPECT_EQ(hooks.Calls("nvmlDeviceReadPRMCounters_v1", 2), 1u);
  EXPECT_EQ(hooks.Calls("nvmlDeviceReadPRMCounters_v1", 0), 2u);
}

// P2P over NVLink per peer, as the driver says it; asked again only when a
// device's active links change, and kept in between.
TEST(NvlinkTest, P2pOverNvlinkPerPeerAskedWhenTheLinksChange) {
  TempDir dir;
  const auto file = dir.write("s.scenario", "devices 4\nnvlink * 4\np2p_status 2 1 4\n");
  Node node(FAKE_NVML_LIBRARY, file.string());
  node.Collect();
  const MetricSink sink = node.Collect();
  for (unsigned i = 0; i < 4; ++i)
    for (unsigned p = 0; p < 4; ++p) {
      const std::vector<std::string> key = {std::to_string(i), uuid(i), std::to_string(p)};
      if (p == i) {
        EXPECT_FALSE(Has(sink, "nodewatch_accelerator_nvlink_p2p_ok", key));
        continue;
      }
      // Disabled by a registry key from GPU 2 to GPU 1, that order only.
      EXPECT_EQ(Get(sink, "nodewatch_accelerator_nvlink_p2p_ok", key), i == 2 && p == 1 ? 0 : 1)
          << i << "-" << p;
    }
  Hooks hooks(FAKE_NVML_LIBRARY);
  EXPECT_EQ(hooks.Calls("nvmlDeviceGetP2PStatus"), 4u * 3)
      << "asked again with the links as they were";
  // GPU 3's links all go down: it asks again (3 calls), and reads no NVLink P2P.
  for (const char* line :
       {"nvlink_down 3 0", "nvlink_down 3 1", "nvlink_down 3 2", "nvlink_down 3 3"})
    ASSERT_TRUE(hooks.Script(line));
  const MetricSink after = node.Collect();
  EXPECT_EQ(hooks.Calls("nvmlDeviceGetP2PStatus", 3), 3u + 3u);
  EXPECT_EQ(hooks.Calls("nvmlDeviceGetP2PStatus", 0), 3u) << "GPU 0's links did not change";
  EXPECT_EQ(Get(after, "nodewatch_accelerator_nvlink_p2p_ok", {"3", uuid(3), "0"}), 0);
  EXPECT_EQ(Get(after, "nodewatch_accelerator_nvlink_p2p_ok", {"0", uuid(0), "3"}), 1)
      << "kept from its last ask: GPU 0 is asked again only when its own links change";
}

// NVML's BER encoding (mantissa in bits 8-11, exponent in bits 0-7), as
// DCGM decodes it; and field 296's unit, read against the link's speed.
TEST(NvlinkTest, BerDecodingAndDataRateUnit) {
  EXPECT_DOUBLE_EQ(nvml_nvlink_ber(0x30C), 3e-12);
  EXPECT_DOUBLE_EQ(nvml_nvlink_ber(0x109), 1e-9);
  EXPECT_EQ(nvml_nvlink_ber(0), 0);
  EXPECT_LT(nvml_nvlink_ber(0xFFF), 1e-250);  // DCGM's "zero BER": 15e-255
  EXPECT_DOUBLE_EQ(nvml_nvlink_ber(0xFFFF030C), 3e-12) << "bits above 11 are not the rate's";
  const double speed = 53125e6;                                   // a GB200 link, 53.125 GB/s
  EXPECT_EQ(nvml_nvlink_data_rate_bytes(50000, speed), 50000e6);  // MB/s
  EXPECT_EQ(nvml_nvlink_data_rate_bytes(48828125, speed), 48828125.0 * 1024);  // KiB/s
  EXPECT_FALSE(nvml_nvlink_data_rate_bytes(400, speed));                       // Gb/s? no
  EXPECT_FALSE(nvml_nvlink_data_rate_bytes(60000, speed)) << "above the link's speed";
  EXPECT_FALSE(nvml_nvlink_data_rate_bytes(50000, std::nullopt));
  EXPECT_FALSE(nvml_nvlink_data_rate_bytes(0, speed));
}

// An R580 driver (NVML 13.0) knows the BERs and the FEC history, not the
// 13.2/13.3 fields (INVALID_ARGUMENT: asked once) nor the PRM call.
TEST(NvlinkTest, Nvlink5QualityAskedOnlyWhereTheDriverHasIt) {
  TempDir dir;
  const auto file = dir.write("s.scenario", "devices 1\nnvlink5 0 2\ndriver 580.65.06\n");
  Node node(FAKE_NVML_LIBRARY, file.string());
  node.Collect();
  const MetricSink sink = node.Collect();
  EXPECT_EQ(ErrorCount(sink, "nvml_error"), 0u);
  EXPECT_TRUE(Has(sink, "nodewatch_nvlink_bit_error_rate", {"0", uuid(0), "effective"}));
  EXPECT_TRUE(Has(sink, "nodewatch_nvlink_fec_codewords_total", {"0", uuid(0), "15"}));
  EXPECT_FALSE(Has(sink, "nodewatch_nvlink_bit_error_rate", {"0", uuid(0), "raw"}));
  EXPECT_FALSE(Has(sink, "nodewatch_nvlink_plr_total", {"0", uuid(0), "xmit_blocks"}));
  EXPECT_FALSE(Has(sink, "nodewatch_nvlink_plr_total", {"0", uuid(0), "xmit_codes"}));
  EXPECT_FALSE(Has(sink, "nodewatch_nvlink_data_rate_bytes_per_second", {"0", uuid(0), "0"}));
  Hooks hooks(FAKE_NVML_LIBRARY);
  for (const char* field : {"field 293", "field 294", "field 295", "field 296"})
    EXPECT_EQ(hooks.Calls(field, 0), 2u) << field << ": asked again after INVALID_ARGUMENT";
  EXPECT_EQ(hooks.Calls("field 220", 0), 4u);
  EXPECT_EQ(hooks.Calls("nvmlDeviceReadPRMCounters_v1", 0), 1u);
}

// A FEC bin that fails for a collection keeps its last count in the sum
// (never a drop that Prometheus would read as a reset).
TEST(NvlinkTest, AFailedFecBinKeepsItsSum) {
  Node node(FAKE_NVML_LIBRARY, scenario("nvlink5_quality.scenario"));
  const MetricSink first = node.Collect();
  const std::vector<std::string> bin3 = {"0", uuid(0), "3"};
  const double before = Get(first, "nodewatch_nvlink_fec_codewords_total", bin3);
  Hooks hooks(FAKE_NVML_LIBRARY);
  ASSERT_TRUE(hooks.Script("field_fail 0 238 999"));
  const MetricSink second = node.Collect();
  EXPECT_EQ(Get(second, "nodewatch_nvlink_fec_codewords_total", bin3), before);
  EXPECT_FALSE(Has(second, "nodewatch_nvlink_link_fec_codewords_total", {"0", uuid(0), "0", "3"}));
  EXPECT_GE(ErrorCount(second, "nvml_error"), 1u);
}

// A link's counter that goes back (retrained, cleared) counts on from what
// it had reached: the accelerator's sum never drops.
TEST(NvlinkTest, ALinkCounterThatGoesBackKeepsTheSumGrowing) {
  Node node(FAKE_NVML_LIBRARY, scenario("nvlink5_quality.scenario"));
  const MetricSink first = node.Collect();
  const std::vector<std::string> blocks = {"0", uuid(0), "xmit_blocks"};
  EXPECT_EQ(Get(first, "nodewatch_nvlink_plr_total", blocks), 4e9 + 6);
  Hooks hooks(FAKE_NVML_LIBRARY);
  ASSERT_TRUE(hooks.Script("field_value 0 294 ull 5"));  // every link of GPU 0 back to 5
  const MetricSink second = node.Collect();
  EXPECT_EQ(Get(second, "nodewatch_nvlink_plr_total", blocks), 4e9 + 6 + 4 * 5);
  EXPECT_EQ(Get(second, "nodewatch_nvlink_link_plr_total", {"0", uuid(0), "1", "xmit_blocks"}), 5)
      << "the link's own series is the driver's count";
}

// The PRM counters refused for want of privilege: said once, not asked again.
TEST(NvlinkTest, PrmCountersRefusedAreNotAskedAgain) {
  TempDir dir;
  const auto file = dir.write("s.scenario",
                              "devices 1\nnvlink5 0 2\ndriver 590.44.01\n"
                              "fail 0 nvmlDeviceReadPRMCounters_v1 4\n");
  Node node(FAKE_NVML_LIBRARY, file.string());
  const MetricSink first = node.Collect();
  EXPECT_EQ(ErrorCount(first, "nvml_error"), 1u);
  const MetricSink second = node.Collect();
  EXPECT_EQ(ErrorCount(second, "nvml_error"), 0u);
  EXPECT_FALSE(Has(second, "nodewatch_nvlink_transmit_wait_ticks_total", {"0", uuid(0)}));
  Hooks hooks(FAKE_NVML_LIBRARY);
  EXPECT_EQ(hooks.Calls("nvmlDeviceReadPRMCounters_v1", 0), 1u);
}

TEST(NvlinkTest, ErrorsGrowBetweenCollections) {
  Node node(FAKE_NVML_LIBRARY, scenario("nvlink_hopper.scenario"));
  MetricSink first = node.Collect();
  Hooks hooks(FAKE_NVML_LIBRARY);
  ASSERT_TRUE(hooks.Script("nvlink_errors 2 7 crc_flit 5"));
  ASSERT_TRUE(hooks.Script("nvlink_errors 2 7 replay 1"));
  MetricSink second = node.Collect();
  const std::vector<std::string> link = {"2", uuid(2), "7"};
  auto err = [&](const MetricSink& s, const char* type) {
    std::vector<std::string> k = link;
    k.push_back(type);
    return Get(s, "nodewatch_nvlink_link_errors_total", k);
  };
  EXPECT_EQ(err(second, "crc_flit") - err(first, "crc_flit"), 5);
  EXPECT_EQ(err(second, "replay") - err(first, "replay"), 1);
  EXPECT_EQ(err(second, "crc_data"), err(first, "crc_data"));
  // Another link of the same GPU did not move.
  EXPECT_EQ(Get(second, "nodewatch_nvlink_link_errors_total", {"2", uuid(2), "6", "crc_flit"}),
            Get(first, "nodewatch_nvlink_link_errors_total", {"2", uuid(2), "6", "crc_flit"}));
  // The accelerator's sum moved by the same.
  EXPECT_EQ(Get(second, "nodewatch_nvlink_errors_total", {"2", uuid(2), "crc_flit"}) -
                Get(first, "nodewatch_nvlink_errors_total", {"2", uuid(2), "crc_flit"}),
            5);
}

// The default: per accelerator and type, the sum over its links; no
// per-link error series.
TEST(NvlinkTest, ErrorsPerAcceleratorByDefault) {
  const char* kLegacy[] = {"replay", "recovery", "crc_flit", "crc_data", "ecc"};
  Node node(FAKE_NVML_LIBRARY, scenario("nvlink_hopper.scenario"), false);
  MetricSink sink = node.Collect();
  ExpectConformant(sink);
  for (unsigned i = 0; i < 8; ++i) {
    for (unsigned c = 0; c < 5; ++c) {
      // Link l counts (c + 1) * (i + l): over 18 links, (c + 1) * (18 i + 153).
      EXPECT_EQ(
          Get(sink, "nodewatch_nvlink_errors_total", {std::to_string(i), uuid(i), kLegacy[c]}),
          (c + 1.0) * (18.0 * i + 153))
          << i << " " << kLegacy[c];
    }
  }
  EXPECT_EQ(sink.render().find("nodewatch_nvlink_link_errors_total"), std::string::npos);
  // 8 GPUs x (2 + 18 links x (up, speed, tx, rx) + 5 sums + 7 P2P peers).
  EXPECT_EQ(sink.sample_count(), 8u * (2 + 18 * 4 + 5 + 7));
}

// Links whose counters cannot be read in a collection keep their last
// value in the sum: it never drops, which Prometheus would take for a
// reset (and count the whole total again).
TEST(NvlinkTest, ErrorSumsNeverDropWhenLinksFailToRead) {
  Node node(FAKE_NVML_LIBRARY, scenario("nvlink_hopper.scenario"), false);
  MetricSink first = node.Collect();
  Hooks hooks(FAKE_NVML_LIBRARY);
  // GPU 2: one error more on link 7; then every per-counter call after the
  // 135th since init fails: the first collection made 90 (18 links x 5),
  // so the next one reads links 0 to 8 and fails on links 9 to 17.
  ASSERT_TRUE(hooks.Script("nvlink_errors 2 7 crc_flit 1"));
  ASSERT_TRUE(hooks.Script("fail 2 nvmlDeviceGetNvLinkErrorCounter 999 after_calls 135"));
  MetricSink second = node.Collect();
  EXPECT_GT(second.errors().at("nvml_error"), 0u);
  const std::vector<std::string> crc = {"2", uuid(2), "crc_flit"};
  EXPECT_EQ(Get(second, "nodewatch_nvlink_errors_total", crc),
            Get(first, "nodewatch_nvlink_errors_total", crc) + 1);
  for (const char* type : {"crc_data", "replay", "recovery", "ecc"}) {
    EXPECT_EQ(Get(second, "nodewatch_nvlink_errors_total", {"2", uuid(2), type}),
              Get(first, "nodewatch_nvlink_errors_total", {"2", uuid(2), type}))
        << type;
  }
}

TEST(NvlinkTest, ByteCountersNeverSwitchSource) {
  // NVLink5 byte counters answered first; when they fail for a cycle the
  // series is absent, never filled from the KiB counters (a switch would
  // read as a counter reset and a false rate).
  Node node(FAKE_NVML_LIBRARY, scenario("nvlink5.scenario"));
  MetricSink first = node.Collect();
  EXPECT_EQ(Get(first, "nodewatch_nvlink_transmitted_bytes_total", {"0", uuid(0), "3"}), 1e9 + 3);
  Hooks hooks(FAKE_NVML_LIBRARY);
  ASSERT_TRUE(hooks.Script("field_fail 0 202 999"));
  MetricSink second = node.Collect();
  EXPECT_FALSE(Has(second, "nodewatch_nvlink_transmitted_bytes_total", {"0", uuid(0), "3"}));
  EXPECT_EQ(Get(second, "nodewatch_nvlink_received_bytes_total", {"0", uuid(0), "3"}), 2e9 + 3);
  EXPECT_EQ(Get(second, "nodewatch_nvlink_transmitted_bytes_total", {"1", uuid(1), "3"}), 2e9 + 3);
  EXPECT_GT(second.errors().at("nvml_error"), 0u);
}

TEST(NvlinkTest, OldDriverLinksDiscoveredByEnumeration) {
  // No nvmlDeviceGetFieldValues: no link count field, no speed or bytes.
  Node node(FAKE_NVML_OLD_LIBRARY, scenario("nvlink_hopper.scenario"));
  MetricSink sink = node.Collect();
  ExpectConformant(sink);
  EXPECT_TRUE(sink.errors().empty());
  EXPECT_EQ(Get(sink, "nodewatch_accelerator_nvlink_links", {"0", uuid(0)}), 18);
  EXPECT_EQ(Get(sink, "nodewatch_accelerator_nvlink_links_active", {"3", uuid(3)}), 17);
  EXPECT_EQ(Get(sink, "nodewatch_nvlink_up", {"3", uuid(3), "5"}), 0);
  EXPECT_EQ(Get(sink, "nodewatch_nvlink_link_errors_total", {"1", uuid(1), "17", "crc_data"}),
            4.0 * (1 + 17));
  EXPECT_FALSE(Has(sink, "nodewatch_nvlink_transmitted_bytes_total", {"0", uuid(0), "0"}));
  EXPECT_FALSE(Has(sink, "nodewatch_nvlink_speed_bytes_per_second", {"0", uuid(0), "0"}));
}

TEST(NvlinkTest, GpusWithoutNvlinkExportNothing) {
  const std::string path = ::testing::TempDir() + "nvlink_none.scenario";
  {
    FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("devices 2\n", f);
    std::fclose(f);
  }
  Node node(FAKE_NVML_LIBRARY, path);
  MetricSink sink = node.Collect();
  EXPECT_EQ(sink.sample_count(), 0u);
  EXPECT_TRUE(sink.errors().empty());
  Hooks hooks(FAKE_NVML_LIBRARY);
  // One state call per GPU (link 0: NOT_SUPPORTED), nothing more.
  EXPECT_EQ(hooks.Calls("nvmlDeviceGetNvLinkState"), 2u);
  EXPECT_EQ(hooks.Calls("nvmlDeviceGetNvLinkErrorCounter"), 0u);
}

TEST(NvlinkTest, LostGpuHidesOnlyItsOwnLinks) {
  const std::string path = ::testing::TempDir() + "nvlink_lost.scenario";
  {
    FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("devices 4\nnvlink * 18\nlost 2 from nvmlDeviceGetNvLinkState after_calls 4\n", f);
    std::fclose(f);
  }
  Node node(FAKE_NVML_LIBRARY, path);
  MetricSink sink = node.Collect();
  ExpectConformant(sink);
  EXPECT_EQ(sink.errors().at("gpu_lost"), 1u);
  EXPECT_FALSE(Has(sink, "nodewatch_accelerator_nvlink_links", {"2", uuid(2)}));
  EXPECT_FALSE(Has(sink, "nodewatch_nvlink_up", {"2", uuid(2), "0"}));
  for (unsigned i : {0u, 1u, 3u})
    EXPECT_EQ(Get(sink, "nodewatch_accelerator_nvlink_links_active", {std::to_string(i), uuid(i)}),
              18);
}

TEST(NvlinkTest, NoLibraryIsNotAnError) {
  NvlinkMetrics metrics(std::make_shared<NvmlService>("/nonexistent/libnvidia-ml.so.1"));
  MetricSink sink(Table());
  metrics.collect(Context(), sink);
  EXPECT_EQ(sink.sample_count(), 0u);
  EXPECT_TRUE(sink.errors().empty());
}

TEST(NvlinkTest, UnusableLibraryIsCountedNotThrown) {
  NvlinkMetrics metrics(std::make_shared<NvmlService>(FAKE_NVML_BROKEN_LIBRARY));
  MetricSink sink(Table());
  metrics.collect(Context(), sink);
  EXPECT_EQ(sink.sample_count(), 0u);
  EXPECT_EQ(sink.errors().at("library_error"), 1u);
}

TEST(NvlinkTest, RolesDoNotOverlap) {
  // The device questions include no NVLink one; the NVLink questions start
  // no XID event thread (the accelerator collector's first sample does).
  setenv("FAKE_NVML_SCENARIO", scenario("eight_gpus.scenario").c_str(), 1);
  {
    std::vector<std::unique_ptr<Backend>> backends;
    backends.push_back(make_nvml_backend(std::make_shared<NvmlService>(FAKE_NVML_LIBRARY)));
    AcceleratorCollector collector(std::move(backends));
    MetricSink sink(accelerator_metric_table());
    nodewatch::testing::CollectOnce(collector, sink, 10s);
    Hooks hooks(FAKE_NVML_LIBRARY);
    EXPECT_EQ(hooks.Calls("nvmlDeviceGetNvLinkState"), 0u);
    EXPECT_EQ(hooks.Calls("nvmlDeviceGetNvLinkErrorCounter"), 0u);
  }
  Node node(FAKE_NVML_LIBRARY, scenario("eight_gpus.scenario"));
  MetricSink sink = node.Collect();
  EXPECT_EQ(Get(sink, "nodewatch_accelerator_nvlink_links_active", {"7", uuid(7)}), 18);
  Hooks hooks(FAKE_NVML_LIBRARY);
  EXPECT_EQ(hooks.Calls("nvmlDeviceRegisterEvents"), 0u);
  EXPECT_EQ(hooks.Calls("nvmlDeviceGetTotalEccErrors"), 0u);
}

// The interconnect collector carries NVLink next to the fabric ports: both
// from one collection, configured as an operator would.
TEST(NvlinkTest, InterconnectCollectorCarriesNvlinkNextToThePorts) {
  setenv("FAKE_NVML_SCENARIO", scenario("nvlink_hopper.scenario").c_str(), 1);
  std::vector<CollectorSpec> catalog = {interconnect_collector_spec()};
  ConfigResult cfg = parse_config(std::string("[nvml]\nlibrary = \"") + FAKE_NVML_LIBRARY + "\"\n",
                                  "t.toml", catalog);
  ASSERT_TRUE(cfg.config) << cfg.errors.front().str();
  Roots roots{nodewatch::testing::fixtures_dir() / "interconnect" / "sys", "/nonexistent"};
  CollectorEnv env{roots, cfg.config->collectors[0].options, cfg.config->shared};
  std::unique_ptr<Collector> c = catalog[0].create(env);
  MetricSink sink(c->metrics());
  nodewatch::testing::CollectOnce(*c, sink);
  EXPECT_EQ(Get(sink, "nodewatch_accelerator_nvlink_links_active", {"3", uuid(3)}), 17);
  EXPECT_NE(sink.render().find("nodewatch_interconnect_port_state{"), std::string::npos);

  // nvlink = false: the ports only.
  ConfigResult off = parse_config("[collectors.interconnect]\nnvlink = false\n", "t.toml", catalog);
  ASSERT_TRUE(off.config);
  CollectorEnv env_off{roots, off.config->collectors[0].options};
  std::unique_ptr<Collector> ports_only = catalog[0].create(env_off);
  MetricSink s2(ports_only->metrics());
  nodewatch::testing::CollectOnce(*ports_only, s2);
  EXPECT_EQ(s2.render().find("nodewatch_nvlink_"), std::string::npos);
  EXPECT_NE(s2.render().find("nodewatch_interconnect_port_state{"), std::string::npos);
}

}  // namespace
}  // namespace nodewatch::accelerator
