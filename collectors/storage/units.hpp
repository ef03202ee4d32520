#pragma once
// How a raw kernel statistic of the storage collector becomes a value in
// base units (DESIGN.md, "Metric conventions"): /proc/diskstats counts
// 512-byte sectors and milliseconds, mountstats milliseconds.

#include <cstdint>

#include "storage/diskstats.hpp"

namespace nodewatch::storage {

enum class Conversion { kNone, kSectorsToBytes, kMillisToSeconds };

inline double convert(std::uint64_t value, Conversion c) {
  auto v = static_cast<double>(value);
  switch (c) {
    case Conversion::kSectorsToBytes: return v * static_cast<double>(kSectorBytes);
    case Conversion::kMillisToSeconds: return v / 1000.0;
    case Conversion::kNone: break;
  }
  return v;
}

}  // namespace nodewatch::storage
