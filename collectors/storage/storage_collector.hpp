#pragma once
// The storage collector, block-device part: I/O counters from
// <procfs>/diskstats and per-device facts from <sysfs>/block/<device>.
//
// Failure contract (see nodewatch/collector.hpp):
//  - <procfs>/diskstats cannot be read: CollectError("read_error");
//  - one malformed line: skipped, sink.error("parse_error");
//  - a sysfs attribute that is missing or unreadable: its label is "" and its
//    gauge is not emitted; not an error (dm, md, loop and virtio devices have
//    no model, many devices have no serial).
//
// The collector keeps per-device state between collects (32-bit wrap
// accumulation, cached sysfs facts); devices that leave /proc/diskstats are
// forgotten, new ones are picked up on the next collect.

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <regex>
#include <string>
#include <string_view>

#include "nodewatch/collector.hpp"
#include "storage/diskstats.hpp"

namespace nodewatch {

// The catalog entry: name "storage", on by default, on a thread of its own.
const CollectorSpec& storage_collector_spec();

namespace storage {

// Loop, RAM, zram, floppy and optical devices, and partitions (their I/O is
// already counted on the whole disk).
inline constexpr std::string_view kDefaultDevicesExclude =
    R"(^(ram|loop|zram|fd|sr)\d+$|^(sd[a-z]+|vd[a-z]+|xvd[a-z]+|hd[a-z]+)\d+$|^nvme\d+n\d+p\d+$|^mmcblk\d+p\d+$)";

// [collectors.storage] keys. Both are ECMAScript regular expressions searched
// anywhere in the kernel's device name (anchor them with ^ and $); a device is
// exported when it matches devices_include (empty: every device) and does not
// match devices_exclude (empty: none excluded).
struct StorageOptions {
  std::string devices_include;
  std::string devices_exclude{kDefaultDevicesExclude};
};

// Reads the keys above through `r`; an invalid regular expression is reported
// with r.error() at the key's line and column, and its default is kept.
StorageOptions read_storage_options(OptionReader& r);

class StorageCollector final : public Collector {
 public:
  // Compiles the regular expressions once; throws std::regex_error when one
  // is invalid (the configuration check rejects those before this point).
  StorageCollector(Roots roots, StorageOptions options);

  const MetricTable& metrics() const override;
  void collect(const CollectContext& ctx, MetricSink& out) override;

  // How many devices the collector holds state for (selected or not), for tests.
  std::size_t tracked_devices() const { return devices_.size(); }

 private:
  // Facts that do not change while the device exists, re-read now and then.
  struct DeviceInfo {
    std::string model;
    std::string serial;
    std::string rotational;
    std::optional<std::uint64_t> logical_block_size;
  };
  struct DeviceState {
    std::uint32_t major = 0;
    std::uint32_t minor = 0;
    bool selected = false;
    std::uint64_t last_seen = 0;  // the collect that last saw the device
    std::uint64_t info_read = 0;  // the collect that last read `info`
    std::string sysfs_dir;        // <sysfs>/block/<name>, "" when the name is unusable
    DeviceInfo info;
    std::array<CounterAccumulator, kDiskStatCount> counters;
  };

  void read_diskstats();
  bool is_selected(std::string_view name) const;
  DeviceInfo read_info(const std::string& sysfs_dir);
  void emit(const DiskStatsLine& line, DeviceState& state, MetricSink& out);

  Roots roots_;
  std::string diskstats_path_;
  std::optional<std::regex> include_;
  std::optional<std::regex> exclude_;
  std::map<std::string, DeviceState, std::less<>> devices_;
  std::uint64_t cycle_ = 0;
  std::string buffer_;  // /proc/diskstats, reused between collects
};

}  // namespace storage
}  // namespace nodewatch
