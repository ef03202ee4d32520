#pragma once
// The pcie collector: link speed and width (current and maximum), a
// degraded-width flag and AER error counters (per severity; per error bit
// with aer_detail) for every accelerator and
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
// Sources (nodewatch/sources): the link of each listed function is worked
// out from its text within the root (FsRoot::resolve), and its identity
// (class, vendor, device, driver, numa_node, the physfn link) is read with
// plain reads when the function is first listed and every
// kFactsRefreshCycles collections after (a DeviceTable by address); what
// changes (power/runtime_status, the four link attributes, aer_dev_*) is
// read every collection through held descriptors (HeldFiles: one pread()
// each). A fact that could not be read or parsed is read again on the next
// collection, so that its failure is counted every collection while it lasts.
//
// Failure contract (see nodewatch/collector.hpp); every partial failure is
// counted with the function's address as its subject ("0000:17:00.0") and
// what failed as its detail ("EIO reading current_link_speed"):
//  - no <sysfs>/bus/pci/devices: no PCI on this node; nothing exported, no error;
//  - it exists but cannot be listed: CollectError("read_error");
//  - a function that disappears between the listing and the reading of its
//    attributes (hot-unplug, SR-IOV VFs being destroyed; ENOENT, ENODEV,
//    ENXIO): skipped, not an error, and its held descriptors closed;
//  - a malformed attribute: that metric (or, for class, vendor and device,
//    that function) is skipped and counted as sink.error("parse_error");
//  - an attribute that exists but cannot be read (EIO, EINVAL from a failed
//    config-space read, EACCES): skipped, sink.error("read_error");
//  - a link in bus/pci/devices that leads out of the sysfs root: that
//    function is not read, sink.error("read_error");
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
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "nodewatch/collector.hpp"
#include "nodewatch/sources/device_table.hpp"
#include "nodewatch/sources/fs.hpp"
#include "pcie/pcie_parse.hpp"

namespace nodewatch {

// The catalog entry: name "pcie".
const CollectorSpec& pcie_collector_spec();

namespace pcie {

// [collectors.pcie].
struct PcieOptions {
  // Also export every AER error bit (nodewatch_pcie_aer_detail_errors_total:
  // 8 correctable, 17-19 uncorrectable names per function and severity,
  // about 44 series per function that nearly always stay 0). Off by
  // default: the per-severity totals say that a function has errors; the
  // bits say which, for the node being debugged.
  bool aer_detail = false;
  bool operator==(const PcieOptions&) const = default;
};

// The aer_dev_* files, in the order of kAerSeverities.
inline constexpr std::array<std::string_view, 3> kAerFiles = {"aer_dev_correctable",
                                                              "aer_dev_nonfatal", "aer_dev_fatal"};
// The `severity` label of each file.
inline constexpr std::array<std::string_view, 3> kAerSeverities = {"correctable", "nonfatal",
                                                                   "fatal"};

// Identity facts are read again after this many collections (see above).
inline constexpr std::uint64_t kFactsRefreshCycles = 20;
// Held descriptors at most (8 per function: a node with 500 functions
// watched); past it, reads fall back to open/read/close.
inline constexpr std::size_t kMaxHeldFiles = 4096;

// A partial failure met while reading one function, counted only if the
// function did not vanish: a reason ("read_error", "parse_error") and what
// failed ("EIO reading current_link_speed").
struct Problem {
  std::string reason;
  std::string detail;
};

// Who one PCI function is: read now and then (see above).
struct FunctionIdentity {
  std::string vendor_id;  // "0x10de"
  std::string device_id;  // "0x2330"
  std::string driver;     // basename of the `driver` link, "" when no driver is bound
  std::string numa_node;  // "0", "-1"; "" when the kernel has no NUMA support
};

// What one PCI function's directory said.
struct FunctionRecord {
  std::string class_id;  // "0x030200"
  FunctionIdentity identity;
  bool runtime_suspended = false;  // link attributes were not read
  std::optional<double> speed;     // transfers per second
  std::optional<double> max_speed;
  std::optional<unsigned> width;  // lanes
  std::optional<unsigned> max_width;
  // By severity, as kAerFiles; nullopt when the file is absent (no AER
  // capability, kernel before 4.19) or was malformed.
  std::array<std::optional<std::vector<AerCount>>, 3> aer;
  // The file's TOTAL_ERR_* count, when it has one (see parse_aer_stats()).
  std::array<std::optional<std::uint64_t>, 3> aer_total;
  // Problems met while reading, to be counted only if the function did not vanish.
  std::vector<Problem> problems;
};

enum class ReadResult {
  kOk,
  kGone,   // the function went away while it was being read: skip it quietly
  kError,  // class, vendor or device unreadable or malformed: skip it, count the problems
};

// Reads the identity (vendor, device, driver, numa_node) of the function
// whose real directory is `dir` (below `root`), with plain reads.
ReadResult read_identity(const sources::FsRoot& root, const std::string& dir,
                         FunctionIdentity* identity, std::vector<Problem>* problems);

// The last parse of each AER file read (by path): a file whose text did not
// change since (the common case: errors are rare) is not parsed again, only
// compared. Entries of files not read in a collection are dropped after it.
class AerParses {
 public:
  struct Parse {
    std::optional<std::vector<AerCount>> counts;
    std::optional<std::uint64_t> total;
  };
  // The parse of `text`, read from `path`.
  const Parse& of(const std::string& path, const std::string& text);
  void begin_cycle() { ++cycle_; }
  void end_cycle();

 private:
  struct Entry {
    std::string text;
    Parse parse;
    std::uint64_t cycle = 0;
  };
  std::unordered_map<std::string, Entry> entries_;
  std::uint64_t cycle_ = 0;
};

// Which of a function's optional attributes (runtime status, the four link
// attributes, the three AER files: bits in that order) it has shown and
// which it has lacked since its facts were read. One it lacked from the
// start is a file the function does not have (a device without a PCIe
// capability has no link attributes, one without AER no AER files): it is
// not looked up again until the facts are read again, so that such a
// function does not cost a failed path lookup per attribute and
// collection. One that goes missing after it was there is looked up at
// every collection, as before.
struct AttributeMemory {
  std::uint16_t present = 0;
  std::uint16_t lacked = 0;
};

// Reads what changes of that function (runtime status, link, AER) through
// `files`, and tells a function that lacks an attribute from one that went
// away while it was read. `aer`, when given, keeps the AER files' parses;
// `memory`, when given, skips what the function lacks and learns it.
ReadResult read_link_state(sources::HeldFiles& files, const std::string& dir,
                           FunctionRecord* record, AerParses* aer = nullptr,
                           AttributeMemory* memory = nullptr);

// All of it, class included: read_identity() with `files`' root, then
// read_link_state().
ReadResult read_function(sources::HeldFiles& files, const std::string& dir, FunctionRecord* record);

class PcieCollector final : public Collector {
 public:
  // `max_held` bounds the held descriptors; 0 reads every value with
  // open/read/close (the benchmark's "before").
  explicit PcieCollector(Roots roots, PcieOptions options = {},
                         std::size_t max_held = kMaxHeldFiles);

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

  // For tests: functions whose facts are kept, and descriptors held.
  std::size_t tracked_functions() const { return facts_.size(); }
  std::size_t held_descriptors() const { return held_.size(); }

 private:
  // The facts of one function, kept between collections.
  struct Facts {
    bool listed = false;  // read through its bus/pci/devices link (else met as a port)
    bool class_read = false;
    std::string dir;  // the real directory, below the sysfs root
    std::string class_text;
    std::optional<std::uint32_t> pci_class;  // nullopt: malformed (counted)
    bool virtual_function = false;
    bool identity_read = false;
    FunctionIdentity identity;
    AttributeMemory attributes;
  };
  enum class FactsResult { kOk, kGone, kError };
  FactsResult read_class_facts(const std::string& bdf, Facts& facts, MetricSink& out);

  // The steps of collect_functions(), over one collection's functions
  // (defined in the .cpp). select_functions() and read_functions() return
  // false when the collection is to stop.
  struct Node;
  struct Cycle;
  Facts* facts_of(const std::string& bdf, bool listed, const std::string& dir, Cycle& cycle,
                  MetricSink& out);
  bool select_functions(const std::vector<std::string>& bdfs, const CollectContext& ctx,
                        Cycle& cycle, MetricSink& out);
  bool read_functions(const std::vector<std::string>& bdfs, const CollectContext& ctx, Cycle& cycle,
                      MetricSink& out);
  void read_node(const std::string& bdf, Node& node, Facts& facts, MetricSink& out);
  void emit_node(const std::string& bdf, const Node& node, const Cycle& cycle,
                 MetricSink& out) const;

  PcieOptions options_;
  sources::FsRoot sys_;
  sources::HeldFiles held_;
  sources::DeviceTable<Facts> facts_;
  AerParses aer_;
};

}  // namespace pcie
}  // namespace nodewatch
