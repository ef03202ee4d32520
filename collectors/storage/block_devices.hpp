#pragma once
// The block-device part of the storage collector: I/O counters from
// <procfs>/diskstats and per-device facts from <sysfs>/block/<device>.
//
// Files read, all through the sources layer (nodewatch/sources/fs.hpp):
//   diskstats                         every collection, held descriptor
//   block/<dev>/queue/nr_requests     every collection, held descriptor
//                                     (a tunable: udev rules and operators
//                                     change it)
//   block/<dev>/device/model          facts, read when the device appears and
//   block/<dev>/{device/serial,       every kFactsRefreshCycles collections
//     serial,device/wwid,wwid}        after (sources::DeviceTable): a udev
//   block/<dev>/queue/rotational      rule may rewrite rotational just after
//   block/<dev>/queue/logical_block_size  the device appears)
//
// Failure contract (nodewatch/collector.hpp):
//  - diskstats cannot be read (absent, gone or an error):
//    CollectError("read_error"); the collection fails;
//  - one malformed line: skipped, sink.error("parse_error");
//  - a line naming a device twice: the second is skipped,
//    sink.error("duplicate_device", <device>);
//  - a sysfs attribute that is absent: its label is "" and its gauge is not
//    emitted; not an error (dm, md, loop and virtio devices have no model,
//    many devices have no serial, partitions have no sysfs block directory);
//  - one that answers an error (EIO, EACCES): the same, and
//    sink.error("read_error", <device>, "EIO reading queue/rotational"); the
//    facts are read again on the next collection;
//  - one whose device went away under the read (ENODEV, ENXIO): the device
//    is not exported in this collection and its state is forgotten (a device
//    that comes back under the name starts afresh).
//
// State kept between collections: the devices' facts (a DeviceTable) and
// their 32-bit wrap offsets, in a sources::WrapCounters that the collector's
// service holds so that a rebuilt collector continues its counters. A
// device that leaves diskstats is forgotten, and a name that comes back
// with another major:minor is another device whose counters start afresh.
// The part never stat()s a mount point: a hung NFS mount cannot block it.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "nodewatch/collector.hpp"
#include "nodewatch/sources/device_table.hpp"
#include "nodewatch/sources/fs.hpp"
#include "nodewatch/sources/name_filter.hpp"
#include "nodewatch/sources/wrap_counter.hpp"
#include "storage/diskstats.hpp"

namespace nodewatch::storage {

// Facts are read again after this many collections (5 minutes at the
// default 15s); re-reading them every collection costs file opens per
// device (node_exporter issue #3282: thousands of devices, scrapes 10x
// slower).
inline constexpr std::uint64_t kFactsRefreshCycles = 20;

// A /proc/diskstats or mountstats larger than this is not a real one.
inline constexpr std::size_t kMaxProcFileBytes = std::size_t{64} << 20;

class BlockDevices {
 public:
  // `counters` may be shared with the collector this one replaces (null: a
  // private one). `max_held` bounds the descriptors held (0: none, every
  // file opened, read and closed each time, as before the sources layer).
  // Throws std::invalid_argument for a filter that does not compile (the
  // configuration check rejects those first).
  BlockDevices(const Roots& roots, const sources::NameFilterSpec& filter,
               std::shared_ptr<sources::WrapCounters> counters, std::size_t max_held);

  // The declarations of every metric this part emits.
  static std::vector<MetricDesc> metric_descs();

  void collect(const CollectContext& ctx, MetricSink& out);

  // For tests: devices with state held (selected or not), and descriptors
  // held open.
  std::size_t tracked_devices() const { return devices_.size(); }
  std::size_t held_descriptors() const { return diskstats_.size() + attributes_.size(); }

 private:
  // Facts that do not change while the device exists.
  struct Facts {
    std::string model;
    std::string serial;
    std::string rotational;
    std::optional<std::uint64_t> logical_block_size;
  };
  struct Device {
    bool known = false;
    std::uint32_t major = 0;
    std::uint32_t minor = 0;
    bool selected = false;
    std::uint64_t cycle = 0;  // the collection that last saw it in diskstats
    std::string dir;          // "block/<name>", "" when the name is no directory entry
    std::string counter_key;  // "<name> <major>:<minor> ": the wrap counters' prefix
    Facts facts;
  };
  // How reading a device's sysfs attributes went.
  enum class Sysfs { kOk, kGone };

  Sysfs read_facts(std::string_view name, Device& dev, MetricSink& out);
  // One attribute of the device into *value (untouched unless ok); an
  // error is counted under the device.
  sources::Status read_attribute(std::string_view name, const Device& dev, std::string_view rel,
                                 std::string* value, MetricSink& out);

  sources::FsRoot sys_;
  sources::HeldFiles diskstats_;   // <procfs>/diskstats
  sources::HeldFiles attributes_;  // <sysfs>/block/<dev>/queue/nr_requests
  sources::NameFilter filter_;
  std::shared_ptr<sources::WrapCounters> counters_;
  sources::DeviceTable<Device> devices_{kFactsRefreshCycles};
  std::uint64_t cycle_ = 0;
  std::string key_;  // scratch: a wrap counter's key
};

}  // namespace nodewatch::storage
