#pragma once
// The metric families the mesh collector emits: each declared once, here. The collector's table is
// built from these and it emits through them; whatever else reads a family (the node verdict, the
// expect file, docs/metrics.md) refers to the constant.

#include "nodewatch/metric.hpp"

namespace nodewatch::mesh::families {

inline constexpr Family kRttSeconds{
    "nodewatch_mesh_rtt_seconds",
    MetricType::kHistogram,
    "seconds",
    "Round-trip time of the mesh probes answered by the peer on the rail, the responder's own "
    "turnaround taken out (kernel timestamps where available).",
    {"peer", "rail"}};

inline constexpr Family kSentTotal{"nodewatch_mesh_sent_total",
                                   MetricType::kCounter,
                                   "",
                                   "Mesh probes sent to the peer on the rail.",
                                   {"peer", "rail"}};

inline constexpr Family kLostTotal{"nodewatch_mesh_lost_total",
                                   MetricType::kCounter,
                                   "",
                                   "Mesh probes to the peer on the rail that had no valid answer "
                                   "within collectors.mesh.probe_timeout.",
                                   {"peer", "rail"}};

inline constexpr Family kPeers{"nodewatch_mesh_peers",
                               MetricType::kGauge,
                               "",
                               "Peers this node probes now on the rail (all listed ones up to "
                               "collectors.mesh.max_peers, else the neighbours and a sample).",
                               {"rail"}};

inline constexpr Family kListedPeers{"nodewatch_mesh_listed_peers",
                                     MetricType::kGauge,
                                     "",
                                     "Peers the peers file lists on the rail, this node left out.",
                                     {"rail"}};

inline constexpr Family kAnsweredTotal{"nodewatch_mesh_answered_total",
                                       MetricType::kCounter,
                                       "",
                                       "Mesh probes this node's responder answered.",
                                       {}};

inline constexpr Family kDroppedPacketsTotal{
    "nodewatch_mesh_dropped_packets_total",
    MetricType::kCounter,
    "",
    "Mesh packets dropped unanswered or unused, by reason: malformed, bad_signature (unsigned or "
    "another key), stale (outside the replay window), replayed, spoofed (addresses not those "
    "signed), unmatched (no probe in flight: late or duplicated), rate_limited.",
    {"reason"}};

inline constexpr Family kUserTimestampsTotal{
    "nodewatch_mesh_user_timestamps_total",
    MetricType::kCounter,
    "",
    "RTT samples on the rail for which the kernel gave no transmit or receive timestamp, so that "
    "the time read in user space stood in.",
    {"rail"}};

inline constexpr Family kResponderUp{
    "nodewatch_mesh_responder_up",
    MetricType::kGauge,
    "",
    "1 while the responder's socket (collectors.mesh.listen) is open, 0 when it cannot be; absent "
    "when no listen address is set.",
    {}};

}  // namespace nodewatch::mesh::families
