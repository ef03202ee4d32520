#pragma once
// The mesh collector's engine: one thread that answers probes on the
// listen socket and probes the chosen peers from one socket per rail, with
// kernel timestamps where the kernel gives them. It outlives the collector
// (a Services entry): a reload that keeps the mesh configuration keeps its
// sockets, its probes in flight and every count; one that changes it is
// applied in place (apply()), the counts kept.
//
// Timestamps (SO_TIMESTAMPING, Documentation/networking/timestamping.rst):
// the prober asks for the software transmit timestamp of each probe (read
// back from the socket's error queue, matched by SOF_TIMESTAMPING_OPT_ID's
// per-socket counter) and the software receive timestamp of each reply;
// the responder stamps when the probe arrived (kernel receive timestamp)
// and when it sends the reply, and the prober subtracts that turnaround.
// RTT = reply received - probe sent - (responder sent - responder received),
// every time but the turnaround on the prober's own clock. Where a kernel
// timestamp is missing, the time read in user space just before sending or
// just after receiving stands in for it, counted per rail
// (nodewatch_mesh_user_timestamps_total).
//
// Thread-safety: every public member may be called from any thread.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "mesh/mesh_peers.hpp"
#include "mesh/mesh_wire.hpp"
#include "nodewatch/metric.hpp"

namespace nodewatch::mesh {

// The RTT histogram's upper bounds: 10 µs to 1 s, 1-2-5 steps (16).
const std::vector<double>& rtt_buckets();

struct RailSettings {
  std::string name;
  std::string source;     // numeric address to send from, "" for the routing's choice
  std::string interface;  // SO_BINDTODEVICE, "" for none
  bool operator==(const RailSettings&) const = default;
};

struct MeshSettings {
  std::string listen;  // "" answers nothing
  std::vector<RailSettings> rails;
  std::chrono::milliseconds probe_interval{1000};
  std::chrono::milliseconds probe_timeout{1000};
  std::size_t max_peers = 64;
  std::size_t neighbours = 8;
  std::chrono::milliseconds resample_interval{600000};
  std::chrono::milliseconds replay_window{30000};
  double max_answers_per_second = 1000;
  // How often the sources of the probes (the route's choice of address)
  // are looked up again and failed sockets retried; the sample stays. Not
  // a configuration key (tests shorten it).
  std::chrono::milliseconds route_refresh{60000};
  bool operator==(const MeshSettings&) const = default;
};

struct PeerStats {
  std::string peer;
  std::string rail;
  std::uint64_t sent = 0;
  std::uint64_t lost = 0;
  Histogram rtt{rtt_buckets()};
};

struct MeshSnapshot {
  std::vector<PeerStats> peers;               // the peers probed now, by rail then file order
  std::map<std::string, std::size_t> probed;  // per rail (every configured rail present)
  std::map<std::string, std::size_t> listed;
  std::map<std::string, std::uint64_t> user_timestamps;  // per rail
  std::map<Drop, std::uint64_t> dropped;
  std::uint64_t answered = 0;
  bool answering = false;  // the listen socket is open
  bool keyed = false;      // a key was given: without one nothing is sent or answered
  // Problems that stand now: (reason, subject, detail), e.g. a listen
  // address that cannot be bound.
  struct Problem {
    std::string reason;
    std::string subject;
    std::string detail;
  };
  std::vector<Problem> problems;
};

class MeshService {
 public:
  MeshService();
  ~MeshService();
  MeshService(const MeshService&) = delete;
  MeshService& operator=(const MeshService&) = delete;

  // Takes these settings from now on: sockets whose address or device
  // changed are reopened, the others kept; counts are kept.
  void apply(const MeshSettings& settings);
  // The shared keys (parse_keys()): the first signs, every one is
  // accepted. Without one nothing is sent or answered.
  void set_keys(std::vector<std::string> keys);
  void set_key(std::string key) { set_keys({std::move(key)}); }
  // The listed peers (self included or not: a peer whose address is this
  // node's and whose port is the listen port is left out).
  void set_peers(std::vector<ListedPeer> peers);

  MeshSnapshot snapshot() const;

  // The sender id of this prober (tests).
  std::uint64_t sender_id() const { return sender_id_; }
  // The port the responder is bound to, 0 when none (tests: ":0").
  std::uint16_t listen_port() const;

 private:
  struct Impl;
  void run();
  void wake();

  const std::uint64_t sender_id_;
  std::unique_ptr<Impl> impl_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace nodewatch::mesh
