// The backend's NVML field ids (nvml_api.hpp, nvml_fields.cpp) against
// NVIDIA's headers, as tests/fixtures/nvml/field_ids.txt records them: each
// id the backend reads, under each driver branch, is the id that branch's
// header gives the name the backend reads it as, and each branch-dependent
// id is asked exactly of the branches whose header defines it so.

#include <gtest/gtest.h>

#include <cctype>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "accelerator/nvml/nvml_fields.hpp"
#include "nvml_field_ids.hpp"

namespace nodewatch::accelerator {
namespace {

namespace h = nodewatch::testing::nvml_h;

// Each header read, with the driver branch it came with a release of
// (tests/fixtures/nvml/field_ids.txt): the backend's table for that branch
// is checked against it (R590's against 13.1, 13.2 and 13.3).
struct Branch {
  unsigned branch;
  std::string_view header;
};
std::vector<Branch> header_branches() {
  std::vector<Branch> out;
  for (std::string_view header : h::kHeaders) out.push_back({h::branch_of_header(header), header});
  return out;
}

// Higher than any id the backend reads (NVML_FI_MAX is 303 in 13.3).
constexpr unsigned kIdsAbove = 1000;

// "nvlink_count_xmit_bytes" -> "NVML_FI_DEV_NVLINK_COUNT_XMIT_BYTES".
std::string nvml_name(std::string_view name) {
  std::string s = "NVML_FI_DEV_";
  for (char c : name) s += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

TEST(NvmlFieldIdsTest, EveryHeaderReadCameWithABranch) {
  for (const Branch& b : header_branches()) EXPECT_NE(b.branch, 0u) << b.header;
  // A driver answers as its own branch's header.
  for (const h::Branch& b : h::kBranches) EXPECT_EQ(h::header_of_branch(b.branch), b.header);
  EXPECT_EQ(h::header_of_branch(600), h::kBranches.back().header);
}

TEST(NvmlFieldIdsTest, EachIdTheBackendReadsIsTheHeadersIdOfItsName) {
  for (const Branch& b : header_branches()) {
    SCOPED_TRACE("R" + std::to_string(b.branch) + ", NVML " + std::string(b.header));
    for (unsigned id = 0; id < kIdsAbove; ++id) {
      const NvmlFieldDef* def = nvml_field_def(id, b.branch);
      if (def == nullptr) continue;
      EXPECT_EQ(def->id, id);
      const std::string name = nvml_name(def->name);
      // A header older than the id does not define it (the driver answers
      // INVALID_ARGUMENT); one that does gives it this id.
      const unsigned in_header = h::id_in(name, b.header);
      if (in_header != 0) {
        EXPECT_EQ(in_header, id) << name;
      }
      bool anywhere = false;
      for (std::string_view header : h::kHeaders)
        anywhere = anywhere || h::id_in(name, header) == id;
      EXPECT_TRUE(anywhere) << name << " = " << id << " in no header read";
    }
  }
}

TEST(NvmlFieldIdsTest, TheClockEventTimesAreAskedByTheIdsOfTheBranchsHeader) {
  struct Versioned {
    NvmlVersionedField field;
    std::string_view name;
  };
  constexpr Versioned kVersioned[] = {
      {NvmlVersionedField::kClocksEventSwThermalNs,
       "NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN"},
      {NvmlVersionedField::kClocksEventHwThermalNs,
       "NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN"},
      {NvmlVersionedField::kClocksEventHwPowerBrakeNs,
       "NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN"},
  };
  for (const Branch& b : header_branches()) {
    for (const Versioned& v : kVersioned) {
      SCOPED_TRACE(std::string(v.name) + " under R" + std::to_string(b.branch) + ", NVML " +
                   std::string(b.header));
      const unsigned in_header = h::id_in(v.name, b.header);
      const std::optional<unsigned> asked = nvml_field_id(v.field, b.branch);
      if (in_header == 0) {
        EXPECT_FALSE(asked.has_value());
      } else {
        EXPECT_EQ(asked, in_header);
      }
    }
  }
}

// The NVLink-C2C throughput metrics the GPM reader asks: the device's at
// the backend's ids, each link's at its first id plus the stride, in every
// header that has them; and the first branch asked is the branch of the
// oldest header that has them (an older driver's GPM refuses the request).
TEST(NvmlFieldIdsTest, TheC2cGpmMetricsAreTheHeadersIds) {
  for (std::string_view header : h::kHeaders) {
    SCOPED_TRACE(std::string(header));
    const unsigned total_tx = h::gpm_id_in("NVML_GPM_METRIC_C2C_TOTAL_TX_PER_SEC", header);
    const bool has = h::branch_of_header(header) >= nvml::kGpmC2cFirstBranch;
    EXPECT_EQ(total_tx != 0, has);
    if (!has) continue;
    EXPECT_EQ(total_tx, nvml::kGpmC2cTotalTx);
    EXPECT_EQ(h::gpm_id_in("NVML_GPM_METRIC_C2C_TOTAL_RX_PER_SEC", header), nvml::kGpmC2cTotalRx);
    for (unsigned l = 0; l < nvml::kGpmC2cLinks; ++l) {
      const unsigned first = nvml::kGpmC2cLink0TotalTx + nvml::kGpmC2cLinkStride * l;
      const std::string link = "NVML_GPM_METRIC_C2C_LINK" + std::to_string(l);
      EXPECT_EQ(h::gpm_id_in(link + "_TOTAL_TX_PER_SEC", header), first) << l;
      EXPECT_EQ(h::gpm_id_in(link + "_TOTAL_RX_PER_SEC", header), first + 1) << l;
    }
  }
}

}  // namespace
}  // namespace nodewatch::accelerator
