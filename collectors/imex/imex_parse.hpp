#pragma once
// IMEX's files and nvidia-imex-ctl's answers, as pure functions (the
// collector reads and runs; imex_collector.hpp). Each input is what NVIDIA
// documents or what its own code reads (docs/collectors.md, "imex", gives
// the sources and the versions):
//
//  - config.cfg (`nvidia-imex -c`): KEY=value lines, '#' comments;
//      IMEX_NODE_CONFIG_FILE=/etc/nvidia-imex/nodes_config.cfg
//      IMEX_CMD_ENABLED=1
//      IMEX_CMD_PORT=50005
//      IMEX_CMD_UNIX_DOMAIN_PATH=/etc/nvidia-imex/imex_ctrl.sock
//  - the nodes file: one member per line, an address or a host name
//      10.0.0.1
//  - `nvidia-imex-ctl -q`: the daemon's state, one word ("READY\n"); a ctl
//    that cannot reach the daemon exits non-zero with gRPC's words:
//      Query Status returned error code: 14 - failed to connect to all addresses; ...
//  - `nvidia-imex-ctl -N -j`: the domain, JSON
//      {"nodes":{"0":{"status":"READY","host":"10.0.0.1","hostName":"",
//                     "version":"580.30","changed":true,
//                     "connections":{"1":{"host":"10.0.0.2","status":"CONNECTED",
//                                         "changed":true}}}, ...},
//       "timestamp":"5/22/2025 19:46:40.891","status":"UP"}
//
// Nothing here trusts its input: sizes, nesting and member counts are
// bounded, and anything else is refused with a reason.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace nodewatch::imex {

inline constexpr std::string_view kDefaultConfigFile = "/etc/nvidia-imex/config.cfg";
inline constexpr std::string_view kDefaultNodesFile = "/etc/nvidia-imex/nodes_config.cfg";
// The command socket NVIDIA's DRA driver asks a host-managed IMEX daemon
// for (its Helm value imex.hostSocketPath's default).
inline constexpr std::string_view kDefaultSocket = "/etc/nvidia-imex/imex_ctrl.sock";
// Members of a domain, and bytes of a file or an answer, beyond which the
// input is refused.
inline constexpr std::size_t kMaxMembers = 1024;
inline constexpr std::size_t kMaxFileBytes = 64 * 1024;

struct Config {
  std::string nodes_file = std::string(kDefaultNodesFile);  // IMEX_NODE_CONFIG_FILE
  bool command_enabled = false;                             // IMEX_CMD_ENABLED=1
  std::string command_port;                                 // IMEX_CMD_PORT
  std::string command_socket;                               // IMEX_CMD_UNIX_DOMAIN_PATH
  std::string bind_ip;                                      // BIND_INTERFACE_IP
};
Config parse_config(std::string_view text);

// The members a nodes file lists: blank lines and '#' comments left out,
// surrounding blanks trimmed; at most kMaxMembers.
std::vector<std::string> parse_nodes(std::string_view text);

// The states the daemon reports (nvidia-imex-ctl -q), in NVIDIA's order
// (DCGM's DcgmImexDaemonStatus, 4.4), as the `state` label spells them.
inline constexpr std::string_view kDaemonStates[] = {
    "initializing", "starting_auth_server", "waiting_for_peers", "waiting_for_recovery", "init_gpu",
    "ready",        "shutting_down",        "unavailable"};
// The states nodewatch gives where the daemon said none.
inline constexpr std::string_view kQueryStates[] = {"unreachable", "command_off", "ctl_missing",
                                                    "no_permission", "query_failed"};

// What `nvidia-imex-ctl -q` said: one of kDaemonStates or kQueryStates,
// and for query_failed the first line of its output.
struct StateAnswer {
  std::string_view state;
  std::string detail;
};
// `exit_status` is -1 when the ctl did not answer in time (a ctl killed by
// a signal is the caller's to tell apart: query_failed).
StateAnswer parse_state(std::string_view output, int exit_status);

// The domain as `nvidia-imex-ctl -N -j` reports it.
struct Domain {
  std::string status;  // "up", "degraded", "down" (lower-cased; anything else refused)
  struct Connection {
    std::string host;
    std::string status;  // "CONNECTED", "INVALID", ...
  };
  struct Member {
    std::string index;
    std::string host;
    std::string host_name;
    std::string status;   // the daemon's state, as kDaemonStates spells it, or "unknown"
    std::string version;  // the driver's version
    std::vector<Connection> connections;
  };
  std::vector<Member> members;  // in the order of their index
};
// nullopt, with `*why` set, for anything that is not such an answer.
std::optional<Domain> parse_domain(std::string_view json, std::string* why);

// The member that is this node: the one whose host is `bind_ip` when it
// is set, else the first whose host is one of `local_addresses` (textual
// addresses, compared as addresses: "::ffff:10.0.0.1" is "10.0.0.1").
// Null when none is.
const Domain::Member* local_member(const Domain& d, std::string_view bind_ip,
                                   const std::vector<std::string>& local_addresses);

}  // namespace nodewatch::imex
