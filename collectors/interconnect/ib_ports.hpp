#pragma once
// The InfiniBand/RoCE part of the interconnect collector: every port of
// every device under <sysfs>/class/infiniband.
//
// Sources, per port (<sysfs>/class/infiniband/<dev>/ports/<n>/):
//  - state, phys_state, rate: read every collection through descriptors
//    held open (pread at offset 0 makes kernfs call the show function again);
//  - link_layer, gid_attrs/ndevs/0 (the RoCE netdev), and the device's
//    fw_ver, board_id, hca_type, node_guid: read when the device appears and
//    every kInfoRefreshCycles collections after;
//  - hw_counters/: one RDMA netlink STAT_GET per port where the kernel has
//    it (rdma_netlink.hpp), else the sysfs files through held descriptors;
//    device-level <dev>/hw_counters/ always from sysfs (netlink has no port
//    0), exported with port="0";
//  - counters/ and counters_ext/ (PMA): one firmware MAD per file read, so
//    read only every pma_interval; between reads the last values are
//    emitted again, so that the series never disappear;
//  - libibverbs async events (ib_verbs.hpp): port-state transitions.
//
// Failure contract (nodewatch/collector.hpp):
//  - no <sysfs>/class/infiniband: no RDMA device; nothing, no error;
//  - it exists but cannot be listed: CollectError("read_error");
//  - a device or port that goes away between the listing and the reads
//    (ENOENT, ENODEV on a held descriptor): dropped quietly; its held
//    descriptors are closed and the device is opened afresh if it is back;
//  - a counter reading "N/A (no PMA)": skipped, sink.error("no_pma");
//  - a file whose read() fails (EINVAL from a PMA query on a port in switch
//    mode, EIO): skipped, sink.error("read_error");
//  - text no kernel writes: skipped, sink.error("parse_error");
//  - a device without fw_ver, board_id, hca_type or node_guid (soft-RoCE
//    has no board_id): the label is "", sink.error("missing_attribute")
//    each time the facts are read (not every collection);
//  - a verbs device that cannot be opened: sink.error("verbs_error") once.
// None of these hides another file, port or device.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "interconnect/ib_parse.hpp"
#include "interconnect/ib_verbs.hpp"
#include "interconnect/rdma_netlink.hpp"
#include "nodewatch/collector.hpp"

namespace nodewatch::interconnect {

struct IbOptions {
  std::chrono::milliseconds pma_interval{30000};
  std::string devices_include;  // ECMAScript regex on the device name; "" = all
  std::string devices_exclude;  // "" = none
  bool operator==(const IbOptions&) const = default;
};

// Facts read now and then. Exposed for tests.
inline constexpr std::uint64_t kInfoRefreshCycles = 20;

class IbPorts {
 public:
  using Clock = std::function<std::chrono::steady_clock::time_point()>;

  // Throws std::regex_error on an invalid expression (the configuration
  // check rejects those first).
  IbPorts(Roots roots, IbOptions options, std::unique_ptr<HwCounterSource> hw_source,
          std::unique_ptr<VerbsSource> verbs, Clock clock = std::chrono::steady_clock::now);
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

  bool is_selected(const std::string& name) const;
  // Reads and emits one device; false when it went away mid-read.
  bool collect_device(const std::string& name, Device& dev, bool netlink_ok, Staging& out);
  bool collect_port(Device& dev, Port& port, bool netlink_ok, bool pma_due, Staging& out);

  Roots roots_;
  std::string class_dir_;
  IbOptions options_;
  std::optional<std::regex> include_;
  std::optional<std::regex> exclude_;
  std::unique_ptr<HwCounterSource> hw_source_;
  std::unique_ptr<VerbsSource> verbs_;
  Clock clock_;
  std::uint64_t cycle_ = 0;
  std::map<std::string, std::unique_ptr<Device>, std::less<>> devices_;
};

}  // namespace nodewatch::interconnect
