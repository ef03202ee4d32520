#include "mesh/mesh_service.hpp"

#include <ifaddrs.h>
#include <linux/errqueue.h>
#include <linux/net_tstamp.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <set>
#include <unordered_map>
#include <utility>

#include "nodewatch/unique_fd.hpp"

namespace nodewatch::mesh {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

std::uint64_t ns_of(const timespec& ts) {
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ULL +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

std::string errno_text(int err) {
  return std::string(std::strerror(err));
}

std::uint64_t random_id() {
  std::random_device rd;
  return (static_cast<std::uint64_t>(rd()) << 32) ^ rd() ^
         static_cast<std::uint64_t>(Clock::now().time_since_epoch().count());
}

// Software timestamps on receive and on transmit (read back from the error
// queue with the per-socket counter as their id, no packet copy).
constexpr int kTimestampFlags = SOF_TIMESTAMPING_SOFTWARE | SOF_TIMESTAMPING_RX_SOFTWARE |
                                SOF_TIMESTAMPING_TX_SOFTWARE | SOF_TIMESTAMPING_OPT_ID |
                                SOF_TIMESTAMPING_OPT_TSONLY;

struct Received {
  std::array<std::uint8_t, kPacketBytes + 1> data{};
  std::size_t size = 0;
  Endpoint from;                // IPv4 as IPv4, also through an IPv6 socket
  sockaddr_storage from_raw{};  // as the socket gave it: where a reply goes
  socklen_t from_raw_len = 0;
  std::optional<std::uint64_t> kernel_ns;
  std::optional<Address16> local;  // where it arrived (IP_PKTINFO / IPV6_PKTINFO)
};

// One datagram (non-blocking); false when none is waiting.
bool receive(int fd, Received* r) {
  sockaddr_storage from{};
  iovec iov{r->data.data(), r->data.size()};
  alignas(cmsghdr) char control[512];
  msghdr msg{};
  msg.msg_name = &from;
  msg.msg_namelen = sizeof(from);
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n = ::recvmsg(fd, &msg, MSG_DONTWAIT);
  if (n < 0) return false;
  r->size = (msg.msg_flags & MSG_TRUNC) != 0 ? r->data.size() : static_cast<std::size_t>(n);
  r->from = endpoint_of(reinterpret_cast<sockaddr*>(&from), msg.msg_namelen);
  r->from_raw = from;
  r->from_raw_len = msg.msg_namelen;
  r->kernel_ns.reset();
  r->local.reset();
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPING) {
      scm_timestamping ts{};
      std::memcpy(&ts, CMSG_DATA(c), sizeof(ts));
      if (ts.ts[0].tv_sec != 0 || ts.ts[0].tv_nsec != 0) r->kernel_ns = ns_of(ts.ts[0]);
    } else if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_PKTINFO) {
      in_pktinfo pi{};
      std::memcpy(&pi, CMSG_DATA(c), sizeof(pi));
      Address16 a{};
      a[10] = a[11] = 0xff;
      std::memcpy(&a[12], &pi.ipi_addr, 4);
      r->local = a;
    } else if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_PKTINFO) {
      in6_pktinfo pi{};
      std::memcpy(&pi, CMSG_DATA(c), sizeof(pi));
      Address16 a{};
      std::memcpy(a.data(), &pi.ipi6_addr, 16);
      r->local = a;
    }
  }
  return true;
}

bool is_v4_mapped(const Address16& a) {
  static constexpr Address16 kPrefix = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return std::equal(a.begin(), a.begin() + 12, kPrefix.begin());
}

// The addresses of this node's interfaces (in the daemon's namespace).
std::set<Address16> local_addresses() {
  std::set<Address16> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    int f = i->ifa_addr->sa_family;
    if (f != AF_INET && f != AF_INET6) continue;
    Endpoint e =
        endpoint_of(i->ifa_addr, f == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6));
    out.insert(e.address16());
  }
  ::freeifaddrs(list);
  return out;
}

}  // namespace

const std::vector<double>& rtt_buckets() {
  static const std::vector<double> kBuckets = {1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3,
                                               5e-3, 1e-2, 2e-2, 5e-2, 0.1,  0.2,  0.5,  1.0};
  return kBuckets;
}

struct MeshService::Impl {
  struct Socket {
    UniqueFd fd;
    Endpoint bound;  // after bind: its port
    std::uint32_t next_tskey = 0;
    std::string error;
  };
  struct Rail {
    RailSettings settings;
    std::optional<Endpoint> source;
    Socket v4;
    Socket v6;
    Socket& for_family(int f) { return f == AF_INET ? v4 : v6; }
  };
  using PeerKey = std::pair<std::string, std::string>;  // (rail, target)
  struct PeerState {
    ListedPeer peer;
    Endpoint local;  // the address probes to it are sent from
    PeerStats stats;
    bool probing = false;
    Clock::time_point next_send{};
  };
  struct InFlight {
    PeerKey peer;
    Clock::time_point sent;
    std::uint64_t origin_ns = 0;
    std::optional<std::uint64_t> tx_kernel_ns;
    Address16 local{};
    std::uint16_t local_port = 0;
  };

  mutable std::mutex mu;
  UniqueFd wake;
  // Inputs, set by the public members, taken by the thread.
  MeshSettings settings;
  bool settings_changed = true;
  std::vector<std::string> keys;  // [0] signs
  std::vector<ListedPeer> listed;
  bool peers_changed = false;

  // The thread's, under mu while it works.
  MeshSettings active;
  bool have_active = false;
  Socket responder;
  std::string listen_text;
  std::map<std::string, Rail> rails;  // "default" always there
  std::map<PeerKey, PeerState> states;
  std::vector<PeerKey> probing;  // rail by rail, file order
  std::map<std::string, std::size_t> listed_per_rail;
  std::unordered_map<std::uint64_t, InFlight> in_flight;                    // by seq
  std::map<std::pair<const Socket*, std::uint32_t>, std::uint64_t> tskeys;  // -> seq
  std::map<std::string, std::string> bad_rails;  // rail -> why its peers are skipped
  std::uint64_t next_seq = 1;
  std::map<Drop, std::uint64_t> dropped;
  std::uint64_t answered = 0;
  std::map<std::string, std::uint64_t> user_timestamps;
  ReplayGuard guard;
  TokenBucket bucket{1000};
  std::mt19937_64 rng{random_id()};
  Clock::time_point next_resample{};
  Clock::time_point next_route_refresh{};
  std::uint64_t self_position = 0;
  std::set<Address16> own_addresses;

  void drop(Drop d) { ++dropped[d]; }

  // Opens a UDP socket of `family` bound to `at`, on `device` when given.
  static Socket open_socket(int family, const Endpoint& at, const std::string& device,
                            bool responder) {
    Socket s;
    int fd = ::socket(family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      s.error = "socket: " + errno_text(errno);
      return s;
    }
    s.fd.reset(fd);
    int one = 1;
    int zero = 0;
    if (family == AF_INET6) {
      // "[::]:port" answers IPv4 too.
      ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
      ::setsockopt(fd, IPPROTO_IPV6, IPV6_RECVPKTINFO, &one, sizeof one);
    }
    ::setsockopt(fd, IPPROTO_IP, IP_PKTINFO, &one, sizeof one);
    int ts =
        responder ? (SOF_TIMESTAMPING_SOFTWARE | SOF_TIMESTAMPING_RX_SOFTWARE) : kTimestampFlags;
    ::setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPING, &ts, sizeof ts);
    if (!device.empty() && ::setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, device.c_str(),
                                        static_cast<socklen_t>(device.size())) != 0) {
      s.error = "SO_BINDTODEVICE " + device + ": " + errno_text(errno);
      s.fd.reset();
      return s;
    }
    if (::bind(fd, reinterpret_cast<const sockaddr*>(&at.addr), at.len) != 0) {
      s.error = "bind " + at.str() + ": " + errno_text(errno);
      s.fd.reset();
      return s;
    }
    sockaddr_storage bound{};
    socklen_t len = sizeof bound;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
    s.bound = endpoint_of(reinterpret_cast<sockaddr*>(&bound), len);
    return s;
  }

  // Applies `active` settings: reopens what changed.
  void reconfigure(const MeshSettings& next) {
    const bool first = !have_active;
    if (first || next.listen != active.listen ||
        next.max_answers_per_second != active.max_answers_per_second) {
      bucket = TokenBucket(next.max_answers_per_second);
    }
    if (first || next.listen != active.listen) {
      responder = Socket{};
      listen_text = next.listen;
      if (!next.listen.empty()) {
        std::string why;
        std::optional<Endpoint> at = parse_endpoint(next.listen, &why);
        if (!at) {
          responder.error = why;
        } else {
          responder = open_socket(at->family(), *at, "", true);
        }
      }
    }
    if (first || next.rails != active.rails) {
      std::map<std::string, Rail> fresh;
      Rail def;
      def.settings.name = std::string(kDefaultRail);
      fresh.emplace(def.settings.name, std::move(def));
      for (const RailSettings& rs : next.rails) {
        Rail r;
        r.settings = rs;
        if (!rs.source.empty()) r.source = parse_address(rs.source);
        // A rail whose settings did not change keeps its sockets.
        auto old = rails.find(rs.name);
        if (old != rails.end() && old->second.settings == rs) {
          fresh.emplace(rs.name, std::move(old->second));
        } else {
          fresh.emplace(rs.name, std::move(r));
        }
      }
      if (auto old = rails.find(std::string(kDefaultRail)); old != rails.end())
        fresh[std::string(kDefaultRail)] = std::move(old->second);
      rails = std::move(fresh);
      // Probes in flight on sockets that are gone can no longer be answered.
      tskeys.clear();
    }
    const bool choose_again = first || next.max_peers != active.max_peers ||
                              next.neighbours != active.neighbours || next.rails != active.rails ||
                              next.listen != active.listen ||
                              next.probe_interval != active.probe_interval ||
                              next.resample_interval != active.resample_interval ||
                              next.route_refresh != active.route_refresh;
    active = next;
    have_active = true;
    if (choose_again) rebuild_peers(Clock::now());
  }

  // The socket of `rail` for `family`, opened on first use.
  Socket* socket_for(Rail& rail, int family) {
    Socket& s = rail.for_family(family);
    if (s.fd.get() >= 0 || !s.error.empty()) return s.fd.get() >= 0 ? &s : nullptr;
    Endpoint at;
    if (rail.source && rail.source->family() == family) {
      at = *rail.source;
    } else if (rail.source) {
      s.error = "the rail's source " + rail.settings.source + " is of another address family";
      return nullptr;
    } else {
      std::string why;
      at = *parse_endpoint(family == AF_INET ? "0.0.0.0:0" : "[::]:0", &why);
    }
    s = open_socket(family, at, rail.settings.interface, false);
    return s.fd.get() >= 0 ? &s : nullptr;
  }

  // The address probes from `sock` to `to` leave from: the bound one, or
  // the route's choice (a connected socket's name; nothing is sent).
  static Endpoint source_towards(const Socket& sock, const Endpoint& to,
                                 const std::string& device) {
    if (sock.bound.valid()) {
      Address16 a = sock.bound.address16();
      static constexpr Address16 kAny4 = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 0, 0};
      static constexpr Address16 kAny6 = {};
      if (a != kAny4 && a != kAny6) return sock.bound;
    }
    Endpoint out;
    UniqueFd probe(::socket(to.family(), SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (probe.get() < 0) return out;
    if (!device.empty())
      ::setsockopt(probe.get(), SOL_SOCKET, SO_BINDTODEVICE, device.c_str(),
                   static_cast<socklen_t>(device.size()));
    if (::connect(probe.get(), reinterpret_cast<const sockaddr*>(&to.addr), to.len) != 0)
      return out;
    sockaddr_storage name{};
    socklen_t len = sizeof name;
    if (::getsockname(probe.get(), reinterpret_cast<sockaddr*>(&name), &len) != 0) return out;
    out = endpoint_of(reinterpret_cast<sockaddr*>(&name), len);
    // The port is the prober's socket's.
    if (out.family() == AF_INET)
      reinterpret_cast<sockaddr_in*>(&out.addr)->sin_port = htons(sock.bound.port());
    else if (out.family() == AF_INET6)
      reinterpret_cast<sockaddr_in6*>(&out.addr)->sin6_port = htons(sock.bound.port());
    return out;
  }

  bool is_self(const ListedPeer& p) const {
    if (!responder.bound.valid()) return false;
    if (p.endpoint.port() != responder.bound.port()) return false;
    return own_addresses.contains(p.endpoint.address16());
  }

  // Opens the listen socket again after it failed (an address not up yet).
  void retry_listen() {
    if (responder.fd.get() >= 0 || listen_text.empty()) return;
    std::string why;
    std::optional<Endpoint> at = parse_endpoint(listen_text, &why);
    if (at) responder = open_socket(at->family(), *at, "", true);
  }

  // Builds the probe set from the listed peers. With `redraw`, the random
  // part of each rail's sample is drawn again; without it (a route refresh,
  // a socket retried) the peers probed stay those chosen last, where still
  // listed, and keep their place in the interval.
  void rebuild_peers(Clock::time_point now, bool redraw = true) {
    std::set<PeerKey> was_probing(probing.begin(), probing.end());
    own_addresses = local_addresses();
    // Sockets that failed to open are tried again (every minute at least).
    retry_listen();
    for (auto& [name, rail] : rails)
      for (Socket* sock : {&rail.v4, &rail.v6})
        if (sock->fd.get() < 0) sock->error.clear();
    std::map<std::string, std::vector<ListedPeer>> by_rail;
    bad_rails.clear();
    std::set<PeerKey> keep;
    self_position = 0;
    bool self_found = false;
    for (const ListedPeer& p : listed) {
      if (is_self(p)) {
        if (!self_found) self_position = ring_hash(p.target);
        self_found = true;
        continue;
      }
      if (!rails.contains(p.rail)) {
        bad_rails.emplace(p.rail, "rail \"" + p.rail + "\" is not in collectors.mesh.rails");
        continue;
      }
      by_rail[p.rail].push_back(p);
      keep.insert({p.rail, p.target});
    }
    if (!self_found) {
      char host[256] = {};
      ::gethostname(host, sizeof host - 1);
      self_position = ring_hash(host);
    }
    for (auto it = states.begin(); it != states.end();)
      it = keep.contains(it->first) ? std::next(it) : states.erase(it);
    for (auto it = in_flight.begin(); it != in_flight.end();)
      it = states.contains(it->second.peer) ? std::next(it) : in_flight.erase(it);
    for (auto& [k, s] : states) s.probing = false;
    probing.clear();
    listed_per_rail.clear();
    for (const auto& [name, rail] : rails) listed_per_rail[name] = 0;
    for (auto& [rail_name, peers] : by_rail) {
      listed_per_rail[rail_name] = peers.size();
      std::vector<std::size_t> chosen;
      if (!redraw) {
        for (std::size_t i = 0; i < peers.size(); ++i)
          if (was_probing.contains({peers[i].rail, peers[i].target})) chosen.push_back(i);
      }
      if (redraw || chosen.empty())
        chosen = choose_peers(peers, self_position, active.max_peers, active.neighbours, rng);
      Rail& rail = rails.at(rail_name);
      for (std::size_t idx : chosen) {
        const ListedPeer& p = peers[idx];
        PeerKey k{p.rail, p.target};
        PeerState& s = states[k];
        if (s.peer.target.empty()) {
          s.peer = p;
          s.stats.peer = p.target;
          s.stats.rail = p.rail;
        }
        s.peer.endpoint = p.endpoint;  // a name may resolve elsewhere now
        s.probing = true;
        if (Socket* sock = socket_for(rail, p.endpoint.family()))
          s.local = source_towards(*sock, p.endpoint, rail.settings.interface);
        probing.push_back(k);
      }
    }
    // Spread the probes over the interval rather than sending them at once;
    // a peer that was probed already keeps its place.
    const auto n = static_cast<long>(std::max<std::size_t>(probing.size(), 1));
    for (long i = 0; i < static_cast<long>(probing.size()); ++i) {
      const PeerKey& k = probing[static_cast<std::size_t>(i)];
      if (!was_probing.contains(k) || redraw)
        states.at(k).next_send = now + active.probe_interval * i / n;
    }
    if (redraw) next_resample = now + active.resample_interval;
    next_route_refresh = now + active.route_refresh;
  }

  void send_probe(PeerState& s, Clock::time_point now) {
    Rail& rail = rails.at(s.peer.rail);
    Socket* sock = socket_for(rail, s.peer.endpoint.family());
    if (sock == nullptr || !s.local.valid()) {
      // No socket for the rail (counted as socket_error) or no route to the
      // peer: the probe cannot leave, and is lost.
      ++s.stats.sent;
      ++s.stats.lost;
      return;
    }
    // s.local: the rail's (or the route's) address with the socket's port
    // (source_towards()).
    const Packet p = make_probe(sender_id, next_seq++, s.local, s.peer.endpoint);
    auto bytes = encode(p, keys.front());
    ssize_t n =
        ::sendto(sock->fd.get(), bytes.data(), bytes.size(), MSG_DONTWAIT,
                 reinterpret_cast<const sockaddr*>(&s.peer.endpoint.addr), s.peer.endpoint.len);
    // Sent or not (no route, a full queue), the probe counts: a probe that
    // cannot leave is lost as surely as one dropped on the wire.
    ++s.stats.sent;
    InFlight f;
    f.peer = {s.peer.rail, s.peer.target};
    f.sent = now;
    f.origin_ns = p.origin_ns;
    f.local = p.source;
    f.local_port = p.source_port;
    in_flight.emplace(p.seq, f);
    if (n >= 0) tskeys[{sock, sock->next_tskey++}] = p.seq;
  }

  void read_tx_timestamps(Socket& sock) {
    for (int i = 0; i < 256; ++i) {
      alignas(cmsghdr) char control[512];
      char data[1];
      iovec iov{data, sizeof data};
      msghdr msg{};
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      msg.msg_control = control;
      msg.msg_controllen = sizeof control;
      if (::recvmsg(sock.fd.get(), &msg, MSG_ERRQUEUE | MSG_DONTWAIT) < 0) return;
      std::optional<std::uint64_t> ts;
      std::optional<std::uint32_t> id;
      for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPING) {
          scm_timestamping t{};
          std::memcpy(&t, CMSG_DATA(c), sizeof t);
          if (t.ts[0].tv_sec != 0 || t.ts[0].tv_nsec != 0) ts = ns_of(t.ts[0]);
        } else if ((c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_RECVERR) ||
                   (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_RECVERR)) {
          sock_extended_err e{};
          std::memcpy(&e, CMSG_DATA(c), sizeof e);
          if (e.ee_origin == SO_EE_ORIGIN_TIMESTAMPING) id = e.ee_data;
        }
      }
      if (!ts || !id) continue;
      auto k = tskeys.find({&sock, *id});
      if (k == tskeys.end()) continue;
      auto f = in_flight.find(k->second);
      if (f != in_flight.end()) f->second.tx_kernel_ns = ts;
      tskeys.erase(k);
    }
  }

  void on_reply(const Received& r, Clock::time_point now) {
    Drop d = Drop::kNone;
    std::optional<Packet> p =
        decode(std::span<const std::uint8_t>(r.data.data(), r.size), keys, &d);
    if (!p) return drop(d);
    if (p->type != PacketType::kReply) return drop(Drop::kMalformed);
    if (p->sender_id != sender_id) return drop(Drop::kUnmatched);
    auto f = in_flight.find(p->seq);
    if (f == in_flight.end()) return drop(Drop::kUnmatched);
    auto st = states.find(f->second.peer);
    if (st == states.end()) return drop(Drop::kUnmatched);
    PeerState& s = st->second;
    // From the peer probed, signed as from it, to the address it was sent from.
    if (!(r.from == s.peer.endpoint) || p->source != s.peer.endpoint.address16() ||
        p->source_port != s.peer.endpoint.port() || p->destination != f->second.local ||
        p->destination_port != f->second.local_port || p->origin_ns != f->second.origin_ns)
      return drop(Drop::kSpoofed);
    if (now - f->second.sent > active.probe_timeout) return drop(Drop::kUnmatched);  // late
    const bool kernel_both = r.kernel_ns.has_value() && f->second.tx_kernel_ns.has_value();
    std::uint64_t rx = r.kernel_ns.value_or(realtime_ns());
    std::uint64_t tx = f->second.tx_kernel_ns.value_or(f->second.origin_ns);
    // In integers first: a CLOCK_REALTIME nanosecond count as a double keeps
    // only about 256 ns of resolution.
    double rtt = static_cast<double>(static_cast<std::int64_t>(rx - tx)) * 1e-9;
    if (p->responder_tx_ns >= p->responder_rx_ns) {
      double turnaround = static_cast<double>(p->responder_tx_ns - p->responder_rx_ns) * 1e-9;
      if (turnaround < rtt) rtt -= turnaround;
    }
    if (rtt < 0) rtt = 0;
    if (!kernel_both) ++user_timestamps[s.peer.rail];
    s.stats.rtt.observe(rtt);
    // The probe is answered: its transmit timestamp is no longer wanted.
    for (auto it = tskeys.begin(); it != tskeys.end(); ++it) {
      if (it->second == p->seq) {
        tskeys.erase(it);
        break;
      }
    }
    in_flight.erase(f);
  }

  void on_probe(const Received& r) {
    Drop d = Drop::kNone;
    std::size_t key_index = 0;  // the reply is signed with the key the probe was
    std::optional<Packet> p =
        decode(std::span<const std::uint8_t>(r.data.data(), r.size), keys, &d, &key_index);
    if (!p) return drop(d);
    if (p->type != PacketType::kProbe) return drop(Drop::kMalformed);
    const std::uint64_t now_ns = realtime_ns();
    const auto window = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(active.replay_window).count());
    const std::uint64_t skew =
        now_ns > p->origin_ns ? now_ns - p->origin_ns : p->origin_ns - now_ns;
    if (skew > window) return drop(Drop::kStale);
    const Address16 arrived_at = r.local.value_or(responder.bound.address16());
    if (p->source != r.from.address16() || p->source_port != r.from.port() ||
        p->destination != arrived_at || p->destination_port != responder.bound.port())
      return drop(Drop::kSpoofed);
    if (!guard.accept(p->sender_id, p->seq)) return drop(Drop::kReplayed);
    const double mono = std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
    if (!bucket.take(mono)) return drop(Drop::kRateLimited);

    Packet reply = *p;
    reply.type = PacketType::kReply;
    reply.kernel_rx_timestamp = r.kernel_ns.has_value();
    reply.responder_rx_ns = r.kernel_ns.value_or(now_ns);
    reply.source = p->destination;
    reply.source_port = p->destination_port;
    reply.destination = p->source;
    reply.destination_port = p->source_port;
    reply.responder_tx_ns = realtime_ns();
    auto bytes = encode(reply, keys[key_index]);
    iovec iov{bytes.data(), bytes.size()};
    msghdr msg{};
    msg.msg_name = const_cast<sockaddr_storage*>(&r.from_raw);
    msg.msg_namelen = r.from_raw_len;
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    // From the address the probe was sent to (a wildcard socket on a node
    // with one address per rail would otherwise pick the route's).
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(in6_pktinfo))] = {};
    if (r.local) {
      msg.msg_control = control;
      cmsghdr* c = reinterpret_cast<cmsghdr*>(control);
      if (responder.bound.family() == AF_INET) {
        in_pktinfo pi{};
        std::memcpy(&pi.ipi_spec_dst, &(*r.local)[12], 4);
        c->cmsg_level = IPPROTO_IP;
        c->cmsg_type = IP_PKTINFO;
        c->cmsg_len = CMSG_LEN(sizeof pi);
        std::memcpy(CMSG_DATA(c), &pi, sizeof pi);
        msg.msg_controllen = CMSG_SPACE(sizeof pi);
      } else if (!is_v4_mapped(*r.local)) {
        in6_pktinfo pi{};
        std::memcpy(&pi.ipi6_addr, r.local->data(), 16);
        c->cmsg_level = IPPROTO_IPV6;
        c->cmsg_type = IPV6_PKTINFO;
        c->cmsg_len = CMSG_LEN(sizeof pi);
        std::memcpy(CMSG_DATA(c), &pi, sizeof pi);
        msg.msg_controllen = CMSG_SPACE(sizeof pi);
      } else {
        msg.msg_control = nullptr;
      }
    }
    if (::sendmsg(responder.fd.get(), &msg, MSG_DONTWAIT) >= 0) ++answered;
  }

  void expire(Clock::time_point now) {
    for (auto it = in_flight.begin(); it != in_flight.end();) {
      if (now - it->second.sent <= active.probe_timeout) {
        ++it;
        continue;
      }
      if (auto st = states.find(it->second.peer); st != states.end()) ++st->second.stats.lost;
      const std::uint64_t seq = it->first;
      for (auto t = tskeys.begin(); t != tskeys.end(); ++t) {
        if (t->second == seq) {
          tskeys.erase(t);
          break;
        }
      }
      it = in_flight.erase(it);
    }
  }

  std::uint64_t sender_id = 0;
};

MeshService::MeshService() : sender_id_(random_id()), impl_(std::make_unique<Impl>()) {
  impl_->sender_id = sender_id_;
  impl_->wake.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  thread_ = std::thread([this] { run(); });
}

MeshService::~MeshService() {
  stop_.store(true);
  wake();
  if (thread_.joinable()) thread_.join();
}

void MeshService::wake() {
  std::uint64_t one = 1;
  if (impl_->wake.get() >= 0) (void)!::write(impl_->wake.get(), &one, sizeof one);
}

void MeshService::apply(const MeshSettings& settings) {
  {
    std::lock_guard lock(impl_->mu);
    if (impl_->have_active && impl_->active == settings && !impl_->settings_changed) return;
    impl_->settings = settings;
    impl_->settings_changed = true;
  }
  wake();
}

void MeshService::set_keys(std::vector<std::string> keys) {
  {
    std::lock_guard lock(impl_->mu);
    impl_->keys = std::move(keys);
  }
  wake();
}

void MeshService::set_peers(std::vector<ListedPeer> peers) {
  {
    std::lock_guard lock(impl_->mu);
    impl_->listed = std::move(peers);
    impl_->peers_changed = true;
  }
  wake();
}

std::uint16_t MeshService::listen_port() const {
  std::lock_guard lock(impl_->mu);
  return impl_->responder.fd.get() >= 0 ? impl_->responder.bound.port() : 0;
}

MeshSnapshot MeshService::snapshot() const {
  std::lock_guard lock(impl_->mu);
  const Impl& m = *impl_;
  MeshSnapshot s;
  for (const auto& k : m.probing) s.peers.push_back(m.states.at(k).stats);
  s.listed = m.listed_per_rail;
  for (const auto& [name, rail] : m.rails) s.probed[name] = 0;
  for (const auto& k : m.probing) ++s.probed[k.first];
  s.user_timestamps = m.user_timestamps;
  s.dropped = m.dropped;
  s.answered = m.answered;
  s.answering = m.responder.fd.get() >= 0;
  s.keyed = !m.keys.empty();
  if (!m.responder.error.empty())
    s.problems.push_back({"socket_error", m.listen_text, m.responder.error});
  for (const auto& [name, rail] : m.rails) {
    for (const Impl::Socket* sock : {&rail.v4, &rail.v6})
      if (!sock->error.empty()) s.problems.push_back({"socket_error", "rail " + name, sock->error});
  }
  for (const auto& [rail, why] : m.bad_rails) s.problems.push_back({"unknown_rail", rail, why});
  return s;
}

void MeshService::run() {
  Impl& m = *impl_;
  std::vector<pollfd> fds;
  std::vector<Impl::Socket*> socks;  // parallel to fds[1..]
  Received r;
  while (!stop_.load()) {
    const auto now = Clock::now();
    Clock::time_point next = now + 1s;
    {
      std::lock_guard lock(m.mu);
      if (m.settings_changed) {
        m.settings_changed = false;
        m.reconfigure(m.settings);
      }
      if (m.peers_changed) {
        m.peers_changed = false;
        m.rebuild_peers(now);
      }
      if (m.have_active) {
        if (now >= m.next_resample)
          m.rebuild_peers(now);
        else if (now >= m.next_route_refresh)
          m.rebuild_peers(now, false);
        m.expire(now);
        if (!m.keys.empty()) {
          for (const auto& k : m.probing) {
            Impl::PeerState& s = m.states.at(k);
            if (now >= s.next_send) {
              m.send_probe(s, now);
              s.next_send += m.active.probe_interval;
              if (s.next_send <= now) s.next_send = now + m.active.probe_interval;
            }
            next = std::min(next, s.next_send);
          }
        }
        for (const auto& [seq, f] : m.in_flight)
          next = std::min(next, f.sent + m.active.probe_timeout);
        next = std::min(next, m.next_resample);
      }
      fds.clear();
      socks.clear();
      fds.push_back({m.wake.get(), POLLIN, 0});
      if (m.responder.fd.get() >= 0) {
        fds.push_back({m.responder.fd.get(), POLLIN, 0});
        socks.push_back(&m.responder);
      }
      for (auto& [name, rail] : m.rails) {
        for (Impl::Socket* s : {&rail.v4, &rail.v6}) {
          if (s->fd.get() < 0) continue;
          fds.push_back({s->fd.get(), POLLIN, 0});  // POLLERR is always reported
          socks.push_back(s);
        }
      }
    }
    auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now());
    int timeout = static_cast<int>(std::clamp<long>(wait.count() + 1, 0, 1000));
    int n = ::poll(fds.data(), fds.size(), timeout);
    if (n <= 0) continue;
    if ((fds[0].revents & POLLIN) != 0) {
      std::uint64_t v = 0;
      (void)!::read(m.wake.get(), &v, sizeof v);
    }
    std::lock_guard lock(m.mu);
    const auto at = Clock::now();
    for (std::size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      Impl::Socket* s = socks[i - 1];
      if (s->fd.get() != fds[i].fd) continue;  // reopened meanwhile
      if ((fds[i].revents & POLLERR) != 0) m.read_tx_timestamps(*s);
      // A bounded batch per wake-up, so that a flood cannot starve the rest.
      for (int k = 0; k < 256 && (fds[i].revents & POLLIN) != 0 && receive(s->fd.get(), &r); ++k) {
        if (m.keys.empty()) continue;  // no key: nothing is believed, nothing answered
        if (s == &m.responder)
          m.on_probe(r);
        else
          m.on_reply(r, at);
      }
    }
  }
}

}  // namespace nodewatch::mesh
