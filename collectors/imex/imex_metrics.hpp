#pragma once
// The metric families the imex collector emits: each declared once, here. The collector's table is
// built from these and it emits through them; whatever else reads a family (the node verdict,
// docs/metrics.md) refers to the constant.

#include "nodewatch/metric.hpp"

namespace nodewatch::imex::families {

inline constexpr Family kInfo{
    "nodewatch_imex_info",
    MetricType::kGauge,
    "",
    "IMEX on this node, value 1; exported only where it is configured (a nodes file with members, "
    "or the command socket of a host-managed ComputeDomain): how it was found (nodes_file, "
    "socket), its configuration file, whether nvidia-imex.service is enabled, disabled, masked or "
    "absent, and the driver version the domain reports for this node.",
    {"mode", "config_file", "service", "version"}};

inline constexpr Family kUp{
    "nodewatch_imex_up",
    MetricType::kGauge,
    "",
    "1 if the IMEX daemon answered its command service with a state, else 0 (why: "
    "nodewatch_imex_daemon_state).",
    {}};

inline constexpr Family kDaemonState{
    "nodewatch_imex_daemon_state",
    MetricType::kGauge,
    "",
    "1 for the state the node's IMEX daemon is in, 0 for the others: as it reports it "
    "(initializing, starting_auth_server, waiting_for_peers, waiting_for_recovery, init_gpu, "
    "ready, shutting_down, unavailable), or why it could not say (unreachable: its command "
    "service refused or did not answer in time; command_off: IMEX_CMD_ENABLED is not set, so "
    "nothing is asked; ctl_missing: no nvidia-imex-ctl; no_permission; query_failed: an answer "
    "nodewatch does not understand, or a ctl that crashed).",
    {"state"}};

inline constexpr Family kDomainState{
    "nodewatch_imex_domain_state",
    MetricType::kGauge,
    "",
    "1 for the state the IMEX domain reports (up, degraded, down), or unknown where it was not "
    "read; 0 for the others.",
    {"state"}};

inline constexpr Family kNodesConfigured{
    "nodewatch_imex_nodes_configured",
    MetricType::kGauge,
    "",
    "Members the IMEX nodes file lists (IMEX_NODE_CONFIG_FILE), this node included.",
    {}};

inline constexpr Family kDomainNodes{
    "nodewatch_imex_domain_nodes",
    MetricType::kGauge,
    "",
    "Members of the IMEX domain, as the domain reports them, this node included.",
    {}};

inline constexpr Family kDomainNodesReady{
    "nodewatch_imex_domain_nodes_ready",
    MetricType::kGauge,
    "",
    "Members of the IMEX domain whose daemon the domain reports ready, this node included.",
    {}};

inline constexpr Family kPeerConnected{
    "nodewatch_imex_peer_connected",
    MetricType::kGauge,
    "",
    "1 if this node's IMEX daemon is connected to the peer, 0 if not (never connected, lost, "
    "version or node-map mismatch): one series per other member, named by its address as the "
    "domain lists it.",
    {"peer"}};

}  // namespace nodewatch::imex::families
