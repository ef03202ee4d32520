#pragma once
// The storage collector: a thin collector over three parts, each with its
// own declarations and its own collect() (the way the interconnect
// collector is split), whose metric table is their concatenation:
//  - block devices (storage/block_devices.hpp): I/O counters from
//    <procfs>/diskstats and per-device facts from <sysfs>/block/<device>;
//  - NFS client operations (storage/nfs_mounts.hpp): per-mount,
//    per-operation RPC counters from <procfs>/<mountstats>;
//  - active probes (storage/probe_set.hpp, storage/probe.hpp): configured
//    directories timed with real stat, write, fsync and read calls on
//    threads of their own; collect() only copies their state and never
//    waits on a file system.
// Each part's header states its failure contract. diskstats that cannot be
// read fails the collection (CollectError("read_error")); nothing else does.
//
// State that outlives one collector (a reload that changed the options
// builds a new one before the old one goes) lives in the daemon's services
// under the key "storage" (StorageServices): the diskstats wrap offsets,
// and the probes with their lineage and histograms. A rebuilt collector
// therefore continues every counter and histogram, and an unchanged probe
// keeps its thread.

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "nodewatch/collector.hpp"
#include "nodewatch/sources/name_filter.hpp"
#include "nodewatch/sources/wrap_counter.hpp"
#include "storage/block_devices.hpp"
#include "storage/nfs_mounts.hpp"
#include "storage/path_check.hpp"
#include "storage/probe.hpp"
#include "storage/probe_set.hpp"

namespace nodewatch {

// The catalog entry: name "storage", on by default.
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

// Descriptors the collector holds open at most, per part (diskstats,
// mountstats, each selected device's queue/nr_requests).
inline constexpr std::size_t kMaxHeldDescriptors = 4096;

// [collectors.storage] keys.
//  - devices_include, devices_exclude: RE2 regular expressions searched
//    anywhere in the kernel's device name (anchor them with ^ and $); a
//    device is exported when it matches devices_include (empty: every
//    device) and does not match devices_exclude (empty: none excluded)
//    (sources/name_filter.hpp);
//  - mountstats: the mountstats file, relative to the procfs root:
//    "self/mountstats" (the daemon's mount namespace) or, in a container
//    that shares the host's PID namespace, "1/mountstats";
//  - nfs_operations: the per-op lines exported (names as the kernel prints
//    them); bounds the series count;
//  - [[collectors.storage.probe]]: path (absolute directory), operations
//    (of stat, write, fsync, read), interval, timeout (not above interval),
//    size ("4KiB", at most 1 MiB).
// Bounds of the lists (a longer one is a configuration error): each probe
// has a helper process of its own (32 per daemon, fs_helper.hpp); NFS has
// about 70 operations.
inline constexpr std::size_t kMaxProbes = 16;
inline constexpr std::size_t kMaxNfsOperations = 128;

struct StorageOptions {
  sources::NameFilterSpec devices{"", std::string(kDefaultDevicesExclude)};
  std::string mountstats{"self/mountstats"};
  std::vector<std::string> nfs_operations{kDefaultNfsOperations};
  std::vector<ProbeConfig> probes;
  bool operator==(const StorageOptions&) const = default;
};

// Reads the keys above through `r`; an invalid value is reported with
// r.error() at the key's line and column (naming the probe for probe keys).
// With `check`, a probe path that does not exist or is not a directory is an
// error too (path_check.hpp: a path on a hung mount is accepted).
StorageOptions read_storage_options(OptionReader& r, DirectoryCheck* check = nullptr);

// "4KiB", "1MiB", "512B", "4096" -> bytes; nullopt when not a size.
std::optional<std::size_t> parse_size(std::string_view text);

// What a storage collector hands on to the one that replaces it.
struct StorageServices {
  std::shared_ptr<sources::WrapCounters> counters;  // null: a private one
  std::shared_ptr<ProbeRegistry> probes;            // null: a private one
  // The daemon's (private ones in a test without Services).
  static StorageServices of(const CollectorEnv& env);
};

// Every metric the collector can emit.
const MetricTable& storage_metric_table();

class StorageCollector final : public Collector {
 public:
  // Compiles the name filter (std::invalid_argument when it does not: the
  // configuration check rejects those first) and takes its probes from the
  // registry, starting those that are not running. `hostname` names the
  // probe files; empty: gethostname(). `max_held` bounds the descriptors
  // each part holds; 0: none (every file opened, read and closed each
  // collection: the benchmark's "before").
  StorageCollector(Roots roots, StorageOptions options, std::string hostname = {},
                   StorageServices services = {}, std::size_t max_held = kMaxHeldDescriptors);
  // Gives the probes back: those no other collector holds are stopped, with
  // one short grace period in all; probes still blocked in the kernel are
  // left to end on their own.
  ~StorageCollector() override = default;

  const MetricTable& metrics() const override;
  void collect(const CollectContext& ctx, MetricSink& out) override;

  // For tests.
  std::size_t tracked_devices() const { return block_.tracked_devices(); }
  std::size_t held_descriptors() const {
    return block_.held_descriptors() + nfs_.held_descriptors();
  }
  // The probes, in configuration order.
  const std::vector<std::shared_ptr<Probe>>& probes() const { return probes_.probes(); }

 private:
  BlockDevices block_;
  NfsMounts nfs_;
  ProbeSet probes_;
};

}  // namespace storage
}  // namespace nodewatch
