#pragma once
// The imex collector: the state of NVIDIA's IMEX daemon (the import/export
// service that lets GPUs of several nodes of one NVLink domain map each
// other's memory) and of its domain, where IMEX is configured, and nothing
// at all where it is not.
//
// Configured means one of:
//  - the nodes file that config.cfg names (IMEX_NODE_CONFIG_FILE, default
//    /etc/nvidia-imex/nodes_config.cfg) lists at least one member, and
//    nvidia-imex.service is not masked (NVIDIA's DRA driver asks that it be
//    masked where IMEX runs in ComputeDomain pods instead);
//  - the command socket of a host-managed ComputeDomain exists
//    (IMEX_CMD_UNIX_DOMAIN_PATH, else /etc/nvidia-imex/imex_ctrl.sock).
// A node with the IMEX package installed and neither (a DGX H100, an NVL72
// whose IMEX runs only in ComputeDomain pods) exports nothing and never
// runs anything: DCGM's check fired there (NVIDIA/DCGM#308,
// NVIDIA/NVSentinel#1471).
//
// Its state comes from IMEX's own command service, through NVIDIA's
// nvidia-imex-ctl (the service's protocol is not published): `-q` for the
// daemon, `-N -j` for the domain, each run with the collection's deadline
// and killed at it (nodewatch/command.hpp). Where config.cfg does not turn
// the command service on (IMEX_CMD_ENABLED=1), nothing is asked: the state
// is command_off, not a failure.
//
// Failure contract (nodewatch/collector.hpp): a file that cannot be read,
// a ctl that fails or answers what nodewatch does not understand is
// counted ("config_unreadable", "nodes_unreadable", "imex_unreachable",
// "imex_query_failed", "imex_domain_unparsable") and the collection goes
// on; the collector itself never fails.

#include <memory>
#include <string>
#include <vector>

#include "imex/imex_parse.hpp"
#include "nodewatch/collector.hpp"

namespace nodewatch {

// The catalog entry: name "imex", on by default, every 30s.
const CollectorSpec& imex_collector_spec();

namespace imex {

// Where nvidia-imex-ctl is looked for when `ctl` is not set: where NVIDIA's
// packages put it, and the paths DCGM 4.6 searches.
inline constexpr std::string_view kCtlSearchPath[] = {"/usr/bin", "/usr/sbin", "/usr/local/bin",
                                                      "/opt/nvidia/imex/bin",
                                                      "/usr/local/nvidia/imex/bin"};

struct ImexOptions {
  std::string config_file = std::string(kDefaultConfigFile);
  std::string ctl;     // absolute; "" searches kCtlSearchPath
  std::string socket;  // absolute; "" takes config.cfg's, else kDefaultSocket
  std::string systemd_dir = "/etc/systemd/system";  // where units are enabled and masked
  // Not an option: where packages put units (tests move it).
  std::vector<std::string> systemd_lib = {"/usr/lib/systemd/system", "/lib/systemd/system"};
  bool operator==(const ImexOptions&) const = default;
};

ImexOptions read_imex_options(OptionReader& r);
const MetricTable& imex_metric_table();

class ImexCollector final : public Collector {
 public:
  explicit ImexCollector(ImexOptions options, std::shared_ptr<sources::Faults> faults = nullptr);

  const MetricTable& metrics() const override { return imex_metric_table(); }
  void collect(const CollectContext& ctx, MetricSink& out) override;

 private:
  // What the files say (nothing is run to learn it).
  struct Setup {
    Config config;
    bool configured = false;
    std::string mode;     // "nodes_file" or "socket"
    std::string service;  // "enabled", "disabled", "masked", "absent"
    std::string socket;   // the command socket, when it is one
    std::size_t members = 0;
  };
  Setup look(MetricSink& out) const;
  std::string unit_state() const;
  std::string find_ctl() const;
  void query(const CollectContext& ctx, const Setup& s, MetricSink& out);

  ImexOptions options_;
  sources::FsRoot root_;
  std::string version_;  // this node's driver version as the domain last reported it
};

}  // namespace imex
}  // namespace nodewatch
