#pragma once
// The storage collector, in three parts:
//  - block devices: I/O counters from <procfs>/diskstats and per-device facts
//    from <sysfs>/block/<device>;
//  - NFS client operations: per-mount, per-operation RPC counters from
//    <procfs>/<mountstats> (self/mountstats by default, see StorageOptions);
//  - active probes: configured directories timed with real stat, write,
//    fsync and read calls on threads of their own (storage/probe.hpp);
//    collect() only copies their state and never waits on a file system.
//
// Failure contract (see nodewatch/collector.hpp):
//  - <procfs>/diskstats cannot be read: CollectError("read_error");
//  - one malformed line: skipped, sink.error("parse_error");
//  - a sysfs attribute that is missing or unreadable: its label is "" and its
//    gauge is not emitted; not an error (dm, md, loop and virtio devices have
//    no model, many devices have no serial);
//  - the mountstats file is absent: no NFS series, not an error; unreadable:
//    sink.error("mountstats_read_error"); a malformed mount block:
//    sink.error("mountstats_parse_error") and the other mounts are exported;
//    a short per-op line: sink.error("mountstats_short_op_line");
//  - the collector never stat()s a mount point: a hung NFS mount cannot
//    block it (reading mountstats only reads counters).
//
// The collector keeps per-device state between collects (32-bit wrap
// accumulation, cached sysfs facts); devices that leave /proc/diskstats are
// forgotten, new ones are picked up on the next collect.

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

#include "nodewatch/collector.hpp"
#include "storage/diskstats.hpp"
#include "storage/probe.hpp"

namespace nodewatch {

// The catalog entry: name "storage", on by default, on a thread of its own.
const CollectorSpec& storage_collector_spec();

namespace storage {

// Loop, RAM, zram, floppy and optical devices, and partitions (their I/O is
// already counted on the whole disk).
inline constexpr std::string_view kDefaultDevicesExclude =
    R"(^(ram|loop|zram|fd|sr)\d+$|^(sd[a-z]+|vd[a-z]+|xvd[a-z]+|hd[a-z]+)\d+$|^nvme\d+n\d+p\d+$|^mmcblk\d+p\d+$)";

// The NFS operations exported by default: the ones a training job's data
// loading and checkpointing go through.
inline const std::vector<std::string> kDefaultNfsOperations = {
    "READ", "WRITE", "GETATTR", "LOOKUP", "OPEN", "COMMIT", "ACCESS"};

// [collectors.storage] keys.
//  - devices_include, devices_exclude: ECMAScript regular expressions
//    searched anywhere in the kernel's device name (anchor them with ^ and
//    $); a device is exported when it matches devices_include (empty: every
//    device) and does not match devices_exclude (empty: none excluded).
//  - mountstats: the mountstats file, relative to the procfs root:
//    "self/mountstats" (the daemon's mount namespace) or, in a container
//    that shares the host's PID namespace, "1/mountstats".
//  - nfs_operations: the per-op lines exported (names as the kernel prints
//    them); bounds the series count.
//  - [[collectors.storage.probe]]: path (absolute directory), operations
//    (of stat, write, fsync, read), interval, timeout (not above interval),
//    size ("4KiB", at most 1 MiB).
struct StorageOptions {
  std::string devices_include;
  std::string devices_exclude{kDefaultDevicesExclude};
  std::string mountstats{"self/mountstats"};
  std::vector<std::string> nfs_operations{kDefaultNfsOperations};
  std::vector<ProbeConfig> probes;
  bool operator==(const StorageOptions&) const = default;
};

// Reads the keys above through `r`; an invalid value is reported with
// r.error() at the key's line and column (naming the probe for probe keys),
// and its default is kept. With `check_paths`, a probe path that does not
// exist or is not a directory is an error too (checked on a helper thread
// for at most a second: a path on a hung mount is accepted, and its probe
// will report stuck).
StorageOptions read_storage_options(OptionReader& r, bool check_paths = false);

// "4KiB", "1MiB", "512B", "4096" -> bytes; nullopt when not a size.
std::optional<std::size_t> parse_size(std::string_view text);

class StorageCollector final : public Collector {
 public:
  // Compiles the regular expressions once; throws std::regex_error when one
  // is invalid (the configuration check rejects those before this point).
  // Starts one thread per probe. `hostname` names the probe files; empty:
  // gethostname().
  StorageCollector(Roots roots, StorageOptions options, std::string hostname = {});
  // Stops the probe threads, waiting at most a short grace period in all;
  // probes still blocked in the kernel are left to end on their own.
  ~StorageCollector() override;

  const MetricTable& metrics() const override;
  void collect(const CollectContext& ctx, MetricSink& out) override;

  // How many devices the collector holds state for (selected or not), for tests.
  std::size_t tracked_devices() const { return devices_.size(); }
  // The probes, in configuration order, for tests.
  const std::vector<std::unique_ptr<Probe>>& probes() const { return probes_; }

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
  void collect_nfs(MetricSink& out);
  void collect_probes(MetricSink& out);
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
  std::string mountstats_path_;
  std::vector<std::string> nfs_operations_;  // sorted
  std::string mountstats_buffer_;
  std::vector<std::unique_ptr<Probe>> probes_;
};

}  // namespace storage
}  // namespace nodewatch
