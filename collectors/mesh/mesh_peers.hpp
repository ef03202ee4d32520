#pragma once
// The mesh collector's peers: the file that lists them (Prometheus's
// file_sd format, JSON or YAML), their addresses, and which of them a node
// probes.
//
//   [
//     {"targets": ["198.18.1.2:9843", "198.18.1.3:9843"], "labels": {"rail": "0"}},
//     {"targets": ["198.18.2.2:9843", "198.18.2.3:9843"], "labels": {"rail": "1"}}
//   ]
//
// A group's `rail` label names the rail (collectors.mesh.rails) whose
// socket probes its targets; a group without one is on rail "default".
// Other labels are accepted and ignored. A target is "address:port" with a
// numeric IPv4 or IPv6 address ("[2001:db8::1]:9843"), or "name:port",
// resolved when the file is read. The `peer` label of a target's series is
// the target as the file writes it.
//
// Which peers a node probes, per rail (documented in docs/collectors.md, "mesh"):
// all of them while there are at most max_peers; beyond that, the
// `neighbours` peers that follow the node in a fixed ring order (every node
// orders the same list the same way, by a hash of the target, so each
// node's neighbours are different nodes and every node is someone's
// neighbour), plus a uniform random sample of the others, drawn again every
// resample interval, up to max_peers in all. Every pair is then measured
// now and then, and the series a node exports stay bounded by max_peers.

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "mesh/mesh_wire.hpp"

namespace nodewatch::mesh {

inline constexpr std::size_t kMaxListedPeers = 100000;
inline constexpr std::string_view kDefaultRail = "default";

// An IP address and port, as a socket takes it.
struct Endpoint {
  sockaddr_storage addr{};
  socklen_t len = 0;

  bool valid() const { return len != 0; }
  int family() const { return addr.ss_family; }
  std::uint16_t port() const;
  Address16 address16() const;  // IPv4 mapped into IPv6
  std::string str() const;      // "198.18.0.2:9843", "[2001:db8::1]:9843"
  bool operator==(const Endpoint& o) const;
};

// "198.18.0.2:9843", "[::1]:9843", "0.0.0.0:9843", "[::]:9843", ":9843"
// (every address, IPv6 and IPv4). Numeric only; nullopt with `why` set.
std::optional<Endpoint> parse_endpoint(std::string_view text, std::string* why);
// A numeric address without a port ("198.18.1.1", "2001:db8::1").
std::optional<Endpoint> parse_address(std::string_view text);
// The endpoint a socket received from or sent to.
Endpoint endpoint_of(const sockaddr* sa, socklen_t len);

struct ListedPeer {
  std::string target;  // as written: the `peer` label
  std::string rail;
  Endpoint endpoint;
};

struct PeerList {
  std::vector<ListedPeer> peers;  // in file order, duplicates (same rail and target) removed
  // Targets that could not be used ("bad target \"x\": ..."), at most a few
  // kept, and how many in all.
  std::vector<std::string> problems;
  std::size_t skipped = 0;
};

// Parses a file_sd file. nullopt with `why` set when the file as a whole
// is unusable (not JSON/YAML, not a list of groups, too many targets); a
// bad target alone is skipped and listed in problems. Names are resolved
// with getaddrinfo when `resolve` is set (else they are problems).
std::optional<PeerList> parse_peers(std::string_view text, bool resolve, std::string* why);

// CLOCK_REALTIME in nanoseconds: the clock of a probe's origin_ns, and of
// the kernel's software timestamps.
std::uint64_t realtime_ns();

// A probe from `from` to `to`, stamped now (origin_ns = realtime_ns()).
Packet make_probe(std::uint64_t sender_id, std::uint64_t seq, const Endpoint& from,
                  const Endpoint& to);

// The 64-bit FNV-1a hash the ring order is built on.
std::uint64_t ring_hash(std::string_view s);

// The indices (into `peers`) that a node whose ring position is `self`
// probes, as described above; `rng` draws the sample.
std::vector<std::size_t> choose_peers(const std::vector<ListedPeer>& peers, std::uint64_t self,
                                      std::size_t max_peers, std::size_t neighbours,
                                      std::mt19937_64& rng);

}  // namespace nodewatch::mesh
