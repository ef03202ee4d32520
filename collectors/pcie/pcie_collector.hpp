#pragma once
// The pcie collector: link speed and width (current and maximum), a
// degraded-width flag and AER error counters for every accelerator and
// network PCI function under <sysfs>/bus/pci/devices, and for every bridge
// on the path from such a function up to its root port. A link has two ends:
// the device and the port above it; AER errors are often counted at the
// port (Documentation/ABI/testing/sysfs-bus-pci-devices-aer_stats), and a
// switch uplink that trained narrow slows every device below it, so the
// ports are exported too.
//
// Topology: <sysfs>/bus/pci/devices/<BDF> is a symlink into
// <sysfs>/devices/pci<domain>:<bus>/<root port>/.../<BDF>; the directory
// above a function's real directory is its upstream port when its name is a
// PCI address, and the root of the hierarchy (pci0000:00) otherwise. This is
// the walk that the kernel's pcie_bandwidth_available() does with
// pci_upstream_bridge().
//
// Failure contract (see nodewatch/collector.hpp):
//  - no <sysfs>/bus/pci/devices: no PCI on this node; nothing exported, no error;
//  - it exists but cannot be listed: CollectError("read_error");
//  - a function that disappears between the listing and the reading of its
//    attributes (hot-unplug, SR-IOV VFs being destroyed; ENOENT or ENODEV):
//    skipped, not an error;
//  - a malformed attribute: that metric (or, for class, vendor and device,
//    that function) is skipped and counted as sink.error("parse_error");
//  - an attribute that exists but cannot be read (EIO, EINVAL from a failed
//    config-space read): skipped, sink.error("read_error");
//  - "Unknown" speeds and 0 widths are not errors: that metric is left out.
//
// Cost: the link attributes read the function's config space, and kernels
// that wrap those reads in pci_config_pm_runtime_get() runtime-resume a
// suspended function (and the ports above it) to do so; older kernels read
// a function in D3cold as all ones. A function whose power/runtime_status is
// "suspended" is therefore not asked for its link state at all (its link is
// in a low-power state anyway; its identity and AER counters are kept in
// kernel memory and are still read), and the default interval is 30s: link
// state changes rarely.

#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "nodewatch/collector.hpp"
#include "pcie/pcie_parse.hpp"

namespace nodewatch {

// The catalog entry: name "pcie", on by default, on the shared pool, every 30s.
const CollectorSpec& pcie_collector_spec();

namespace pcie {

// The aer_dev_* files, in the order of kAerSeverities.
inline constexpr std::array<std::string_view, 3> kAerFiles = {"aer_dev_correctable",
                                                              "aer_dev_nonfatal", "aer_dev_fatal"};
// The `severity` label of each file.
inline constexpr std::array<std::string_view, 3> kAerSeverities = {"correctable", "nonfatal",
                                                                   "fatal"};

// What one PCI function's directory said.
struct FunctionRecord {
  std::string vendor_id;           // "0x10de"
  std::string device_id;           // "0x2330"
  std::string class_id;            // "0x030200"
  std::string driver;              // basename of the `driver` link, "" when no driver is bound
  std::string numa_node;           // "0", "-1"; "" when the kernel has no NUMA support
  bool runtime_suspended = false;  // link attributes were not read
  std::optional<double> speed;     // transfers per second
  std::optional<double> max_speed;
  std::optional<unsigned> width;  // lanes
  std::optional<unsigned> max_width;
  // By severity, as kAerFiles; nullopt when the file is absent (no AER
  // capability, kernel before 4.19) or was malformed.
  std::array<std::optional<std::vector<AerCount>>, 3> aer;
  // Problems met while reading, to be counted only if the function did not vanish.
  std::uint64_t parse_errors = 0;
  std::uint64_t read_errors = 0;
};

enum class ReadResult {
  kOk,
  kVanished,  // the function went away while it was being read: skip it quietly
  kFailed,    // class, vendor or device unreadable or malformed: skip it, count the errors
};

// Reads the attributes of the function whose real directory is `dir`
// (<sysfs>/devices/.../<BDF>). `class_text`, when not empty, is the content
// of its `class` file already read by the caller.
ReadResult read_function(const std::string& dir, const std::string& class_text,
                         FunctionRecord* record);

class PcieCollector final : public Collector {
 public:
  explicit PcieCollector(Roots roots);

  const MetricTable& metrics() const override;
  void collect(const CollectContext& ctx, MetricSink& out) override;

  // collect() is these two steps; they are public so that a test can remove
  // a device between them, as a hot-unplug would.
  //
  // The PCI addresses under <sysfs>/bus/pci/devices, sorted; empty when the
  // directory does not exist. Throws CollectError when it cannot be listed.
  std::vector<std::string> list_functions() const;
  // Selects, reads and emits the listed functions and their upstream ports.
  void collect_functions(const std::vector<std::string>& bdfs, const CollectContext& ctx,
                         MetricSink& out);

 private:
  Roots roots_;
  std::filesystem::path devices_dir_;
};

}  // namespace pcie
}  // namespace nodewatch
