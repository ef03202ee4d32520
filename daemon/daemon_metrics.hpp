#pragma once
// The metric families the daemon itself emits, each declared once, here, as the
// collectors declare theirs (collectors/<name>/<name>_metrics.hpp): the tables
// are built from these, the emitters and readers refer to them.

#include "nodewatch/metric.hpp"

namespace nodewatch::families {

// The daemon's own: its build, each collector's state, its configuration and its HTTP server.

inline constexpr Family kBuildInfo{
    "nodewatch_build_info",
    MetricType::kGauge,
    "",
    "Version and source revision nodewatchd was built from; always 1.",
    {"version", "revision"}};

inline constexpr Family kCollectorUp{
    "nodewatch_collector_up",
    MetricType::kGauge,
    "",
    "1 if the collector's last collection succeeded within its timeout, else 0.",
    {"collector"}};

inline constexpr Family kCollectorDurationSeconds{
    "nodewatch_collector_duration_seconds",
    MetricType::kGauge,
    "seconds",
    "How long the collector's last collection took (up to its timeout).",
    {"collector"}};

inline constexpr Family kCollectorLastSuccessTimestampSeconds{
    "nodewatch_collector_last_success_timestamp_seconds",
    MetricType::kGauge,
    "seconds",
    "Unix time of the collector's last successful collection; 0 before the first.",
    {"collector"}};

inline constexpr Family kCollectorIntervalSeconds{
    "nodewatch_collector_interval_seconds",
    MetricType::kGauge,
    "seconds",
    "Configured interval between collections; served values are at most this old.",
    {"collector"}};

inline constexpr Family kCollectorErrorsTotal{"nodewatch_collector_errors_total",
                                              MetricType::kCounter,
                                              "",
                                              "Collection errors by reason: whole-collection "
                                              "failures and skipped devices, files or counters.",
                                              {"collector", "reason"}};

inline constexpr Family kConfigLastReloadSuccessful{
    "nodewatch_config_last_reload_successful",
    MetricType::kGauge,
    "",
    "1 if the last configuration load or reload succeeded, 0 if it was rejected.",
    {}};

inline constexpr Family kConfigLastReloadSuccessTimestampSeconds{
    "nodewatch_config_last_reload_success_timestamp_seconds",
    MetricType::kGauge,
    "seconds",
    "Unix time of the last successful configuration load or reload.",
    {}};

inline constexpr Family kHttpRequestsTotal{"nodewatch_http_requests_total",
                                           MetricType::kCounter,
                                           "",
                                           "HTTP responses sent, by request path and status code.",
                                           {"path", "code"}};

inline constexpr Family kHttpTlsHandshakeErrorsTotal{
    "nodewatch_http_tls_handshake_errors_total",
    MetricType::kCounter,
    "",
    "TLS handshakes that did not complete: reason \"timeout\" (not done within "
    "server.read_timeout) or \"failed\" (refused: protocol, certificate, client certificate).",
    {"reason"}};

inline constexpr Family kHttpConnectionsDroppedTotal{
    "nodewatch_http_connections_dropped_total",
    MetricType::kCounter,
    "",
    "Connections the server closed: \"server_limit\" and \"client_limit\" (refused with 503: every "
    "slot busy serving, or server.max_connections_per_client from one address), \"evicted\" (a "
    "client waiting or not reading, closed for a new connection's slot), \"write_timeout\" (a "
    "response not read within server.write_timeout).",
    {"reason"}};

inline constexpr Family kHelperProcesses{
    "nodewatch_helper_processes",
    MetricType::kGauge,
    "",
    "Helper processes that make the file-system calls on configured paths: running, and abandoned "
    "after their timeout but still held by the kernel (state D on a hung mount).",
    {"state"}};

inline constexpr Family kTextfileAbandonedHelpers{
    "nodewatch_textfile_abandoned_helpers",
    MetricType::kGauge,
    "",
    "Textfile helper processes abandoned after the collection's timeout that are still alive (the "
    "textfile collector is down meanwhile, so the daemon reports them).",
    {}};

// The standard process metrics, as every Prometheus client library names them.

inline constexpr Family kProcessCpuSecondsTotal{"process_cpu_seconds_total",
                                                MetricType::kCounter,
                                                "seconds",
                                                "Total user and system CPU time spent in seconds.",
                                                {}};

inline constexpr Family kProcessResidentMemoryBytes{"process_resident_memory_bytes",
                                                    MetricType::kGauge,
                                                    "bytes",
                                                    "Resident memory size in bytes.",
                                                    {}};

inline constexpr Family kProcessVirtualMemoryBytes{"process_virtual_memory_bytes",
                                                   MetricType::kGauge,
                                                   "bytes",
                                                   "Virtual memory size in bytes.",
                                                   {}};

inline constexpr Family kProcessOpenFds{
    "process_open_fds", MetricType::kGauge, "", "Number of open file descriptors.", {}};

inline constexpr Family kProcessMaxFds{
    "process_max_fds", MetricType::kGauge, "", "Maximum number of open file descriptors.", {}};

inline constexpr Family kProcessStartTimeSeconds{
    "process_start_time_seconds",
    MetricType::kGauge,
    "seconds",
    "Start time of the process since unix epoch in seconds.",
    {}};

// The node verdict (verdict.hpp).

inline constexpr Family kNodeHealthy{
    "nodewatch_node_healthy",
    MetricType::kGauge,
    "",
    "1 if the subsystem is healthy; 0 if it has a problem or could not be checked.",
    {"subsystem"}};

inline constexpr Family kNodeProblemInfo{
    "nodewatch_node_problem_info",
    MetricType::kGauge,
    "",
    "A current problem of the node and the action it asks for; always 1.",
    {"subsystem", "component", "problem", "action"}};

inline constexpr Family kNodeProblems{
    "nodewatch_node_problems",
    MetricType::kGauge,
    "",
    "Current problems of the subsystem, including those beyond the problem_info bound.",
    {"subsystem"}};

inline constexpr Family kNodeVerdictTimestampSeconds{
    "nodewatch_node_verdict_timestamp_seconds",
    MetricType::kGauge,
    "seconds",
    "Unix time the node verdict was last computed.",
    {}};

inline constexpr Family kNodeExpected{
    "nodewatch_node_expected",
    MetricType::kGauge,
    "",
    "What the node is expected to have ([expect]), next to what is measured.",
    {"subsystem", "component", "what"}};

inline constexpr Family kVersionInfo{
    "nodewatch_version_info",
    MetricType::kGauge,
    "",
    "A version the node runs, value 1: the kernel release, the BIOS, the BMC's firmware, each "
    "accelerator driver and VBIOS, each NIC's and HCA's firmware (component; device where there is "
    "one), "
    "as [expect.versions] pins them.",
    {"component", "device", "version"}};

}  // namespace nodewatch::families
