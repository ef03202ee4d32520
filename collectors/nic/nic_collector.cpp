#include "nic/nic_collector.hpp"

#include <utility>

#include "nodewatch/options.hpp"

namespace nodewatch {
namespace nic {

std::vector<std::string> default_driver_counters() {
  return {
      // mlx5 (ConnectX): PFC pause frames and duration per priority, link pause
      R"((rx|tx)_prio[0-7]_pause(_duration)?)",
      R"((rx|tx)_pause_ctrl_phy)",
      R"(tx_pause_storm_(warning|error)_events)",
      // mlx5: discards on the physical port and per priority, out of buffer
      R"((rx|tx)_discards_phy)",
      R"(rx_prio[0-7]_discards)",
      R"(rx_out_of_buffer)",
      // mlx5: physical errors, FEC, link and module events
      R"(rx_(crc_errors|symbol_err|pcs_symbol_err|corrected_bits)_phy)",
      R"(link_down_events_phy)",
      R"(module_(unplug|bus_stuck|high_temp|bad_shorted))",
      // mlx5: the host side (PCIe stalls, overflow, recoveries, congestion
      // events) and the port's receive buffer, per priority where it says
      R"(outbound_pci_(stalled_(rd|wr)(_events)?|buffer_overflow))",
      R"((rx|tx)_pci_signal_integrity)",
      R"(pci_bw_(inbound|outbound)_(high|low))",
      R"(rx_buffer_passed_thres_phy)",
      R"(rx_prio[0-7]_(buf_discard|cong_discard|marked))",
      // ice (Intel E800): PFC and link pause requests, port drops, CRC errors
      R"((rx|tx)_priority_[0-7]_xoff\.nic)",
      R"(link_xoff_(rx|tx)\.nic)",
      R"(rx_dropped\.nic)",
      R"(tx_dropped_link_down\.nic)",
      R"(rx_crc_errors\.nic)",
  };
}

NicOptions read_nic_options(OptionReader& r) {
  NicOptions out;
  out.interfaces =
      sources::read_name_filter(r, "interface", "interfaces_include", "interfaces_exclude", "",
                                std::string(kDefaultInterfacesExclude));
  std::vector<std::string> counters = r.get_string_array(
      "driver_counters", out.driver_counters,
      "RE2 regular expressions, each matched against a whole driver statistic name (ethtool "
      "-S); only matching statistics are read",
      kMaxDriverCounterPatterns);
  bool counters_ok = true;
  for (const std::string& c : counters) {
    std::string problem = c.empty() ? std::string("an empty regular expression would match nothing")
                                    : sources::pattern_error(c);
    if (problem.empty()) problem = sources::pattern_error(anchored(c));
    if (!problem.empty()) {
      r.error("driver_counters", "\"" + c + "\" " + problem);
      counters_ok = false;
    }
  }
  if (counters_ok) out.driver_counters = std::move(counters);
  out.max_driver_counters =
      r.get_int("max_driver_counters", out.max_driver_counters, 0, 4096,
                "driver statistics read per interface at most; the rest is counted as "
                "driver_counter_limit");
  out.legacy_counters =
      r.get_bool("legacy_counters", out.legacy_counters,
                 "also export the half-duplex and header-compression link counters (collisions, "
                 "aborted, heartbeat, window, compressed: 6 series per interface)");
  out.qdiscs = r.get_bool("qdiscs", out.qdiscs, "export queueing-discipline counters");
  out.driver_statistics =
      r.get_bool("driver_statistics", out.driver_statistics,
                 "read ethtool driver statistics (ioctl) and standard pause/FEC statistics "
                 "(netlink)");
  out.protocol_statistics = r.get_bool("protocol_statistics", out.protocol_statistics,
                                       "read /proc/net/snmp and /proc/net/netstat");
  return out;
}

const MetricTable& nic_metric_table() {
  static const MetricTable kTable = [] {
    std::vector<MetricDesc> descs;
    // One list per part, concatenated (the exposition follows this order).
    for (auto part : {&Links::metric_descs, &Qdiscs::metric_descs, &EthtoolStats::metric_descs,
                      &Protocols::metric_descs}) {
      for (MetricDesc& d : part()) descs.push_back(std::move(d));
    }
    return MetricTable(std::move(descs));
  }();
  return kTable;
}

NicCollector::NicCollector(Roots roots, NicOptions options, std::unique_ptr<KernelSource> source,
                           std::shared_ptr<sources::WrapCounters> qdisc_counters,
                           std::size_t max_held,
                           std::shared_ptr<sources::WrapCounters> ethtool_counters)
    : options_(std::move(options)),
      source_(std::move(source)),
      links_(options_.interfaces, options_.legacy_counters),
      qdiscs_(std::move(qdisc_counters)),
      ethtool_(options_.driver_counters, options_.max_driver_counters, std::move(ethtool_counters)),
      protocols_(roots, max_held) {}

const MetricTable& NicCollector::metrics() const {
  return nic_metric_table();
}

void NicCollector::collect(const CollectContext& ctx, MetricSink& out) {
  if (!source_) source_ = make_kernel_source();
  links_.collect(ctx, *source_, out);
  if (options_.driver_statistics) {
    ethtool_.collect(ctx, links_.selected(), links_.complete(), *source_, out);
  }
  if (options_.qdiscs && !ctx.should_stop()) qdiscs_.collect(links_.selected(), *source_, out);
  if (options_.protocol_statistics) protocols_.collect(out);
}

std::unique_ptr<NicCollector> make_nic_collector(const CollectorEnv& env,
                                                 std::unique_ptr<KernelSource> source) {
  // The qdiscs' and the driver statistics' wrap offsets outlive a rebuilt
  // collector (two sets: each part begins and ends its own cycles).
  auto make = [] { return std::make_shared<sources::WrapCounters>(); };
  auto counters = env.service<sources::WrapCounters>("nic", make);
  auto ethtool = env.service<sources::WrapCounters>("nic-ethtool", make);
  return std::make_unique<NicCollector>(env.roots, env.options_as<NicOptions>(), std::move(source),
                                        std::move(counters), kDefaultMaxHeld, std::move(ethtool));
}

}  // namespace nic

const CollectorSpec& nic_collector_spec() {
  static const CollectorSpec kSpec = [] {
    CollectorSpec spec;
    spec.name = "nic";
    spec.description =
        "Network interfaces: link statistics, qdiscs, driver counters (PFC, discards), TCP/IP";
    spec.enabled_by_default = true;
    // SIOCETHTOOL runs under RTNL, which a NIC's firmware command can hold for
    // tens of seconds: the collector must not take a shared worker with it.
    spec.default_interval = std::chrono::seconds(15);
    spec.default_timeout = std::chrono::seconds(10);
    spec.read_options = typed_options<nic::NicOptions>(nic::read_nic_options);
    spec.metrics = nic::nic_metric_table;
    spec.create = [](const CollectorEnv& env) -> std::unique_ptr<Collector> {
      return nic::make_nic_collector(env);
    };
    return spec;
  }();
  return kSpec;
}

}  // namespace nodewatch
