#pragma once
// The InfiniBand/RoCE part of the interconnect collector: every port of
// every device under <sysfs>/class/infiniband.
//
// Sources, per port (<sysfs>/class/infiniband/<dev>/ports/<n>/), all through
// the sysfs FsRoot (tests inject errnos through Roots::faults):
//  - state, phys_state, rate: read every collection through held
//    descriptors (HeldFiles: pread at offset 0 makes kernfs call the show
//    function again);
//  - link_layer, gid_attrs/ndevs/0 (the RoCE netdev), and the device's
//    fw_ver, board_id, hca_type, node_guid: plain reads when the device
//    appears and every kInfoRefreshCycles collections after (a DeviceTable
//    by device name);
//  - hw_counters/: one RDMA netlink STAT_GET per port where the kernel has
//    it (rdma_netlink.hpp), else the sysfs files through held descriptors;
//    device-level <dev>/hw_counters/ always from sysfs (netlink has no port
//    0), exported with port="0". mlx5's 32-bit Q-counters are accumulated
//    across wraps in a sources::WrapCounters that the collector holds as a
//    service, so that a rebuilt collector continues them;
//  - counters/ and counters_ext/ (PMA): one firmware MAD per file read, so
//    plain reads only every pma_interval; between reads the last values are
//    emitted again, so that the series never disappear, and the port's PMA
//    descriptors stay held (ports fall due in different collections);
//  - libibverbs async events (ib_verbs.hpp): port-state transitions.
//
// Failure contract (nodewatch/collector.hpp); every partial failure is
// counted with the device ("mlx5_0") or port ("mlx5_0/1") as its subject and
// what failed as its detail ("EIO reading counters/port_xmit_wait"):
//  - no <sysfs>/class/infiniband: no RDMA device; nothing, no error;
//  - it exists but cannot be listed: CollectError("read_error");
//  - a device or port that goes away between the listing and the reads
//    (ENOENT on state, phys_state or rate, ENODEV or ENXIO on any file):
//    dropped quietly with what it had produced in this collection; its held
//    descriptors are closed, and the device is read once more from scratch
//    in the same collection in case it is back (a driver reload);
//  - a counter reading "N/A (no PMA)": skipped, sink.error("no_pma");
//  - a file whose read() fails (EINVAL from a PMA query on a port in switch
//    mode, EIO, EACCES): skipped, sink.error("read_error"); a device fact
//    that fails so is read again on the next collection;
//  - text no kernel writes: skipped, sink.error("parse_error");
//  - a device without fw_ver, board_id, hca_type or node_guid (soft-RoCE
//    has no board_id): the label is "", sink.error("missing_attribute")
//    each time the facts are read (not every collection);
//  - a verbs device that cannot be opened: sink.error("verbs_error") once.
// None of these hides another file, port or device.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "interconnect/ib_parse.hpp"
#include "interconnect/ib_verbs.hpp"
#include "interconnect/rdma_netlink.hpp"
#include "nodewatch/collector.hpp"
#include "nodewatch/sources/device_table.hpp"
#include "nodewatch/sources/fs.hpp"
#include "nodewatch/sources/name_filter.hpp"
#include "nodewatch/sources/wrap_counter.hpp"

namespace nodewatch::interconnect {

struct IbOptions {
  std::chrono::milliseconds pma_interval{30000};
  // devices_include / devices_exclude: RE2, searched in the device name;
  // "" includes every device, excludes none.
  sources::NameFilterSpec devices;
  bool operator==(const IbOptions&) const = default;
};

// Reads pma_interval, devices_include and devices_exclude of
// [collectors.interconnect]; an invalid pattern is reported at its key.
IbOptions read_ib_options(OptionReader& r);

// Facts read now and then. Exposed for tests.
inline constexpr std::uint64_t kInfoRefreshCycles = 20;
// Held descriptors at most: 8 HCAs with 4 ports of 40 files each take
// 1,300; past it, reads fall back to open/read/close.
inline constexpr std::size_t kMaxHeldFiles = 4096;

class IbPorts {
 public:
  using Clock = std::function<std::chrono::steady_clock::time_point()>;

  // `counters` accumulates the 32-bit hw_counters across wraps (null: one
  // of its own; the collector passes the service that outlives it).
  // `max_held` bounds the held descriptors (half for the PMA counters,
  // half for the other attributes); 0 reads every value with
  // open/read/close (the benchmark's "before"). Throws
  // std::invalid_argument on an invalid pattern (the configuration check
  // rejects those first).
  IbPorts(Roots roots, IbOptions options, std::unique_ptr<HwCounterSource> hw_source,
          std::unique_ptr<VerbsSource> verbs, Clock clock = std::chrono::steady_clock::now,
          std::shared_ptr<sources::WrapCounters> counters = nullptr,
          std::size_t max_held = kMaxHeldFiles);
  ~IbPorts();
  IbPorts(const IbPorts&) = delete;
  IbPorts& operator=(const IbPorts&) = delete;

  // The declarations of every metric this part emits.
  static std::vector<MetricDesc> metric_descs();

  void collect(const CollectContext& ctx, MetricSink& out);

  // For tests: devices with state held, and descriptors held open.
  std::size_t tracked_devices() const;
  std::size_t held_descriptors() const;

 private:
  struct Device;
  struct Port;
  class Staging;

  // Reads and emits one device; false when it went away mid-read.
  bool collect_device(const std::string& name, Device& dev, bool refresh, bool netlink_ok,
                      Staging& out);
  bool collect_port(const std::string& name, Port& port, bool netlink_ok, bool pma_due,
                    Staging& out);
  // Reads, accumulates and emits the hw_counters files under `dir`; false
  // when the device went away.
  bool read_hw_dir(const std::string& dir, const std::string& device, const std::string& port,
                   const std::string& subject, Staging& out);

  // The listing of `dir` (a port's counters/, counters_ext/, hw_counters/:
  // the driver makes them with the port), kept until the device's facts are
  // read again or it goes away. ports/ itself is listed every collection.
  const sources::Listing& list_cached(const std::string& dir);
  void forget_listings(const std::string& device_dir);

  sources::FsRoot sys_;
  sources::HeldFiles held_;
  // PMA files, held between the collections that read them (every
  // pma_interval): each read is still a MAD to the port's firmware.
  // A port's PMA files are read only when its PMA is due; in between they
  // are kept (HeldFiles::keep_under), so that ports whose reads fall in
  // different collections do not close each other's descriptors.
  sources::HeldFiles pma_held_;
  std::unordered_map<std::string, sources::Listing> listings_;
  IbOptions options_;
  sources::NameFilter filter_;
  std::unique_ptr<HwCounterSource> hw_source_;
  std::unique_ptr<VerbsSource> verbs_;
  Clock clock_;
  std::shared_ptr<sources::WrapCounters> counters_;
  sources::DeviceTable<std::unique_ptr<Device>> devices_;
};

}  // namespace nodewatch::interconnect
