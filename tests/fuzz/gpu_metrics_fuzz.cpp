// amdgpu's device/gpu_metrics table (collectors/accelerator): the bytes of
// one read. The parser must never read outside them (ASan), and what it
// accepts must be a usable value.

#include <cmath>
#include <vector>

#include "accelerator/amdgpu_parse.hpp"
#include "fuzz_support.hpp"

using namespace nodewatch::accelerator::amdgpu;
using nodewatch::fuzz::require;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // A copy of exactly `size` bytes, so that ASan sees any read past them.
  std::vector<char> copy(data, data + size);
  GpuMetrics m = parse_gpu_metrics(std::string_view(copy.data(), copy.size()));
  if (m.status == GpuMetricsStatus::kOk) {
    require(m.structure_size <= size, "gpu_metrics: accepted a table larger than the read");
    if (m.energy_joules)
      require(std::isfinite(*m.energy_joules) && *m.energy_joules > 0,
              "gpu_metrics: an energy that is not a positive number");
  } else {
    require(!m.energy_joules, "gpu_metrics: a value from a table that was refused");
    require(!m.problem.empty() || m.status == GpuMetricsStatus::kTruncated ||
                m.status == GpuMetricsStatus::kUnknownLayout,
            "gpu_metrics: a malformed table without a reason");
  }
  return 0;
}
