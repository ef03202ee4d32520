// One sysfs attribute's text, given to every parser of one: PCIe link and
// identity attributes and AER counts (collectors/pcie), InfiniBand port
// state, rate and counters (collectors/interconnect), and the amdgpu and
// hwmon attributes (collectors/accelerator). The properties are the
// headers' promises about what a parsed value can be.

#include <cmath>

#include "accelerator/amdgpu_parse.hpp"
#include "fuzz_support.hpp"
#include "interconnect/ib_parse.hpp"
#include "pcie/pcie_parse.hpp"

using namespace nodewatch;
using nodewatch::fuzz::require;

namespace {

void pcie_attributes(std::string_view raw) {
  pcie::LinkSpeed speed = pcie::parse_link_speed(raw);
  if (speed.reading == pcie::Reading::kValue)
    require(std::isfinite(speed.transfers_per_second) && speed.transfers_per_second > 0,
            "parse_link_speed: a speed that is not a positive number");
  pcie::LinkWidth width = pcie::parse_link_width(raw);
  if (width.reading == pcie::Reading::kValue)
    require(width.lanes >= 1 && width.lanes <= 32, "parse_link_width: lanes outside 1..32");
  if (auto cls = pcie::parse_pci_class(raw)) {
    require(*cls <= 0xffffff, "parse_pci_class: more than 24 bits");
    if (auto kind = pcie::classify(*cls)) (void)pcie::kind_name(*kind);
  }
  if (auto id = pcie::parse_pci_id(raw)) require(fuzz::is_utf8(*id), "parse_pci_id: not text");
  if (auto numa = pcie::parse_numa_node(raw))
    require(fuzz::is_utf8(*numa), "parse_numa_node: not text");
  (void)pcie::is_bdf(raw);

  std::optional<std::uint64_t> total;
  if (auto counts = pcie::parse_aer_stats(raw, &total)) {
    for (const pcie::AerCount& c : *counts) {
      require(!c.error.empty() && fuzz::is_snake(c.error), "parse_aer_stats: a bad error label");
    }
    std::uint64_t t = pcie::aer_severity_total(*counts, total);
    if (total) require(t == *total, "aer_severity_total: not the file's TOTAL_ERR line");
  }
  std::string label = pcie::aer_error_label(raw);
  require(fuzz::is_snake(label), "aer_error_label: not snake_case");
  require(fuzz::is_snake(pcie::snake_case(raw)), "snake_case: not snake_case");
}

void infiniband_attributes(std::string_view raw) {
  if (auto state = interconnect::parse_numbered_state(raw))
    require(*state <= 255, "parse_numbered_state: above 255");
  if (auto rate = interconnect::parse_rate(raw)) {
    require(std::isfinite(rate->bytes_per_second) && rate->bytes_per_second > 0,
            "parse_rate: a rate that is not a positive number");
  }
  (void)interconnect::parse_counter(raw);
  std::string label = interconnect::attribute_label(raw);
  require(fuzz::is_utf8(label), "attribute_label: not UTF-8");
  for (bool ext : {false, true}) {
    interconnect::PmaFile f = interconnect::classify_pma_file(raw, ext);
    require(f.multiplier == 1 || f.multiplier == 4, "classify_pma_file: an odd multiplier");
  }
  (void)interconnect::classify_hw_counter(raw);
  (void)interconnect::hw_counter_is_32bit(raw);
}

void amdgpu_attributes(std::string_view raw) {
  (void)accelerator::amdgpu::parse_u64(raw);
  (void)accelerator::amdgpu::parse_i64(raw);
  (void)accelerator::amdgpu::parse_pci_id(raw);
  (void)accelerator::amdgpu::parse_card_number(raw);
  if (auto busy = accelerator::amdgpu::parse_busy_ratio(raw))
    require(*busy >= 0 && *busy <= 1, "parse_busy_ratio: outside 0..1");
  for (unsigned channel : {1u, 2u, 3u, 9u}) {
    if (auto sensor = accelerator::amdgpu::temperature_sensor(raw, channel))
      require(!sensor->empty() && sensor->size() <= 32 && fuzz::is_snake(*sensor),
              "temperature_sensor: not a short lower-case word");
  }
  if (auto ras = accelerator::amdgpu::parse_ras_err_count(raw)) {
    if (ras->inaccessible)
      require(!ras->uncorrected && !ras->corrected,
              "parse_ras_err_count: counts while inaccessible");
  }
  require(fuzz::is_utf8(accelerator::amdgpu::label_value(raw)), "label_value: not UTF-8");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view raw = fuzz::as_text(data, size);
  pcie_attributes(raw);
  infiniband_attributes(raw);
  amdgpu_attributes(raw);
  return 0;
}
