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

}  // namespace
}  // namespace nodewatch::accelerator
