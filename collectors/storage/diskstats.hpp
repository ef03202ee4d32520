#pragma once
// Parsing for the storage collector's block-device part: pure functions over
// text already read, so that they can be tested with captured content.
//
// /proc/diskstats has one line per block device: major, minor, name, then 11,
// 15 or 17 statistics depending on the kernel (Documentation/admin-guide/
// iostats.rst, Documentation/ABI/testing/procfs-diskstats):
//
// clang-format off
//   14 fields, before 4.18:
//      8       0 sda 446216 784926 9550688 4382310 424847 312726 5922052 19310380 0 3376340 23705160
//   18 fields, 4.18+ adds discards (completed, merged, sectors, ms):
//      8       0 sda 446216 784926 9550688 4382310 424847 312726 5922052 19310380 0 3376340 23705160 0 0 0 0
//   20 fields, 5.5+ adds flushes (completed, ms):
//    259       0 nvme0n1 255999 814 12369153 47919 996852 81 36123024 425995 0 301795 580470 0 0 0 0 60602 106555
// clang-format on

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace nodewatch::storage {

// Index of each statistic in DiskStatsLine::stats, in the kernel's order
// (field N of iostats.rst is index N-1).
enum DiskStat : std::size_t {
  kReadsCompleted = 0,
  kReadsMerged,
  kSectorsRead,
  kReadTimeMs,  // unsigned int in the kernel: wraps at 2^32
  kWritesCompleted,
  kWritesMerged,
  kSectorsWritten,
  kWriteTimeMs,
  kIoInProgress,  // the only statistic that is not cumulative
  kIoTimeMs,
  kIoWeightedTimeMs,
  kDiscardsCompleted,  // 4.18+
  kDiscardsMerged,
  kSectorsDiscarded,
  kDiscardTimeMs,
  kFlushesCompleted,  // 5.5+
  kFlushTimeMs,
  kDiskStatCount,
};

// The statistics on a line of each known layout.
inline constexpr std::size_t kBaseStatCount = 11;     // 14-field line
inline constexpr std::size_t kDiscardStatCount = 15;  // 18-field line
inline constexpr std::size_t kFlushStatCount = 17;    // 20-field line

// /proc/diskstats counts sectors of 512 bytes whatever the device's block size.
inline constexpr std::uint64_t kSectorBytes = 512;

struct DiskStatsLine {
  std::uint32_t major = 0;
  std::uint32_t minor = 0;
  std::string_view name;  // points into the parsed text
  // How many statistics the line carried: kBaseStatCount, kDiscardStatCount
  // or kFlushStatCount. Entries of `stats` past it are 0 and not exported.
  std::size_t stat_count = 0;
  std::array<std::uint64_t, kDiskStatCount> stats{};

  bool has(DiskStat s) const { return static_cast<std::size_t>(s) < stat_count; }
};

// Parses one line (without its newline). Returns nullopt when the line is
// malformed: fewer than 14 fields, 15-17 or 19 fields, a field that is not a
// decimal number. Lines with more than 20 fields (a future kernel appending
// statistics) are accepted and the extra fields ignored. The 7-field
// partition lines of kernels before 2.6.25 are treated as malformed.
std::optional<DiskStatsLine> parse_diskstats_line(std::string_view line);

// True when the line holds only blank characters (skipped, not an error).
bool is_blank(std::string_view line);

// Splits `text` at the next '\n': returns the first line and advances `text`
// past it. The last line need not end in a newline.
std::string_view next_line(std::string_view& text);

// The kernel prints the millisecond statistics as unsigned int, and the
// others as unsigned long, which is also 32 bits on a 32-bit kernel; so a
// raw value can wrap at 2^32. The collector accumulates them with the
// shared rule (sources::WrapCounter, nodewatch/sources/wrap_counter.hpp).
// Example, the read time of sda over three collects (field 4):
//
//     8       0 sda 9 0 72 4294967000 0 0 0 0 0 0 0     -> 4294967000 ms
//     8       0 sda 9 0 72 200 0 0 0 0 0 0 0            -> 2^32 + 200 ms (wrapped)
//     8       0 sda 9 0 72 5000 0 0 0 0 0 0 0           -> 2^32 + 5000 ms
//
// Any other decrease (the device was re-created, a 64-bit counter went
// down) is a counter reset: the value restarts from the raw value, which
// Prometheus reads as a reset rather than as a negative rate.

// A sysfs attribute holding one unsigned decimal number ("1023\n"), or
// nullopt. (Label attributes, such as "Samsung SSD 980 PRO 2TB     \n" from
// block/nvme0n1/device/model, go through text::label_value.)
std::optional<std::uint64_t> parse_attribute_uint(std::string_view raw);

// The name of a device's directory under <sysfs>/block: the kernel shows
// "cciss/c0d0" in /proc/diskstats and "cciss!c0d0" in sysfs. Returns "" for
// a name that cannot be a directory entry ("", ".", "..").
std::string sysfs_block_name(std::string_view diskstats_name);

}  // namespace nodewatch::storage
