#pragma once
// What a node is expected to have: [expect] in the configuration, or the
// file that expect.file names (one per node model, shipped by the fleet).
// The node verdict (verdict.hpp) compares what the collectors measure with
// it; nodewatch_node_expected exports it next to the measured values so that
// alerts compare the two without per-site overrides; `--learn-expected`
// prints what a known-good node has, in this format, for review.
//
//   [expect.accelerator]
//   count = 8                                   # accelerators enumerated
//   models = { "NVIDIA H100 80GB HBM3" = 8 }    # and how many of each model
//   nvlinks_active = 18                         # per NVIDIA accelerator
//   [[expect.pcie]]                             # per PCI function
//   device = "0000:1a:00.0"
//   width = 16
//   speed = "32GT/s"                            # optional
//   [[expect.fabric]]                           # InfiniBand/RoCE port: active
//   device = "mlx5_0"
//   port = 1
//   rate = "400Gb/s"                            # optional
//   [[expect.nic]]                              # interface: up
//   interface = "ens1f0np0"
//   speed = "100Gb/s"                           # optional
//   [expect.storage]
//   probes = ["/data"]                          # storage probe paths that must answer
//   nfs_mounts = ["/home"]                      # NFS mounts that must be there
//   [expect.versions]                           # the one version allowed, or a list
//   kernel = "6.1.0-28-amd64"
//   accelerator_driver = ["550.127.05", "550.144.03"]
//   nic_firmware = { "*" = "28.39.1002", ens1f1np1 = "28.40.1000" }  # per device where it differs
//   [expect.bmc]
//   present = true                              # the BMC must answer
//   [expect.thresholds.NodewatchAcceleratorThermalMarginLow]
//   celsius = 5                                 # alerts/thresholds.toml keys
//
// Thresholds default to alerts/thresholds.toml, built into the daemon: one
// source for the alerts and the verdict.

#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "nodewatch/options.hpp"
#include "samples.hpp"
#include "versions.hpp"

namespace toml {
inline namespace v3 {
class table;
}
}  // namespace toml

namespace nodewatch {

struct ExpectedPcie {
  std::string device;           // PCI address, "0000:1a:00.0"
  std::optional<int> width;     // lanes
  std::optional<double> speed;  // transfers per second
  bool operator==(const ExpectedPcie&) const = default;
};

struct ExpectedPort {
  std::string device;  // "mlx5_0"
  int port = 1;
  std::optional<double> rate;  // bytes per second
  std::string component() const { return device + "/" + std::to_string(port); }
  bool operator==(const ExpectedPort&) const = default;
};

struct ExpectedNic {
  std::string interface;
  std::optional<double> speed;  // bytes per second
  bool operator==(const ExpectedNic&) const = default;
};

// The versions allowed of one component: `any` for every device, or those
// of `devices` for a device named there.
struct VersionPin {
  std::vector<std::string> any;
  std::map<std::string, std::vector<std::string>> devices;
  // The versions allowed for `device`; empty: not pinned.
  const std::vector<std::string>& allowed(const std::string& device) const {
    auto it = devices.find(device);
    return it != devices.end() ? it->second : any;
  }
  bool operator==(const VersionPin&) const = default;
};

struct Expectations {
  std::optional<int> accelerator_count;
  std::map<std::string, int> accelerator_models;
  std::optional<int> nvlinks_active;
  std::vector<ExpectedPcie> pcie;
  std::vector<ExpectedPort> ports;
  std::vector<ExpectedNic> nics;
  std::vector<std::string> probes;
  std::vector<std::string> nfs_mounts;
  bool bmc = false;                            // the node has a BMC that must answer
  std::map<std::string, VersionPin> versions;  // by component (versions.hpp)
  // Overrides of alerts/thresholds.toml, "Alert.key" -> value (durations in
  // seconds).
  std::map<std::string, double, std::less<>> thresholds;
  std::string file;  // expect.file, or "" for an inline [expect]

  bool operator==(const Expectations&) const = default;
  // The override of threshold `name` ("NodewatchKernelXidHardware.window"),
  // else its built-in default. Throws std::out_of_range for a name that
  // alerts/thresholds.toml does not have (a bug).
  double threshold(std::string_view name) const;
};

// Most entries a list of [expect] may have: a node has tens of them.
inline constexpr std::size_t kMaxExpectEntries = 512;

// Reads the [expect] table of the configuration `config_file` through its
// reader `r`; with expect.file, that file's [expect] instead. Errors name
// the file, line and key.
Expectations read_expectations(OptionReader& r, const std::string& config_file,
                               std::vector<ConfigError>* errors);

// Parses the text of an expect file (a TOML file with one [expect] table).
Expectations parse_expect_file(std::string_view text, const std::string& file,
                               std::vector<ConfigError>* errors);

// What a known-good node has, read from its samples (one round, or a
// running daemon's /metrics), with notes for the operator on what was left
// out and why.
struct Learned {
  Expectations expect;
  std::vector<std::string> notes;
};
// `node`: the versions the daemon reads itself (versions.hpp), for a round
// collected here; a running daemon's /metrics has them as series.
Learned learn_expectations(const Samples& samples, const NodeVersions& node = {});
// The families learn_expectations() reads.
const FamilySet& learn_families();

// The TOML --learn-expected prints: `e` as an expect file, `notes` as
// comments, and `header` lines as comments at the top.
std::string expectations_toml(const Expectations& e, const std::vector<std::string>& notes,
                              const std::vector<std::string>& header);

// Every threshold of alerts/thresholds.toml (built in): "Alert.key" -> its
// default, durations in seconds.
struct ThresholdDefault {
  bool duration = false;
  double value = 0;
};
const std::map<std::string, ThresholdDefault, std::less<>>& threshold_defaults();

// The XIDs that the application causes, as label values ("13"): xid.application
// of the built-in alerts/thresholds.toml, the list the recording rules of the
// hardware class leave out.
const std::set<std::string, std::less<>>& application_xids();

// "32GT/s" -> 32e9 transfers/s; "400Gb/s" -> 50e9 bytes/s ("Mb/s", "Tb/s"
// too). nullopt when malformed.
std::optional<double> parse_transfer_rate(std::string_view text);
std::optional<double> parse_bit_rate(std::string_view text);
std::string format_transfer_rate(double transfers_per_second);
std::string format_bit_rate(double bytes_per_second);

}  // namespace nodewatch
