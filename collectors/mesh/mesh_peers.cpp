#include "mesh/mesh_peers.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <ctime>
#include <set>
#include <utility>

namespace nodewatch::mesh {
namespace {

constexpr std::size_t kMaxProblemsKept = 5;

bool parse_port(std::string_view text, std::uint16_t* port) {
  unsigned v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty() || v > 65535)
    return false;
  *port = static_cast<std::uint16_t>(v);
  return true;
}

// Splits "host:port" / "[v6]:port"; false when there is no port.
bool split_host_port(std::string_view text, std::string* host, std::uint16_t* port) {
  std::string_view h;
  std::string_view p;
  if (!text.empty() && text.front() == '[') {
    std::size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':')
      return false;
    h = text.substr(1, close - 1);
    p = text.substr(close + 2);
  } else {
    std::size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return false;
    h = text.substr(0, colon);
    p = text.substr(colon + 1);
    if (h.find(':') != std::string_view::npos) return false;  // IPv6 needs brackets
  }
  if (!parse_port(p, port)) return false;
  *host = std::string(h);
  return true;
}

void note(PeerList* list, std::string problem) {
  ++list->skipped;
  if (list->problems.size() < kMaxProblemsKept) list->problems.push_back(std::move(problem));
}

}  // namespace

std::uint16_t Endpoint::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&addr)->sin_port);
  if (family() == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_port);
  return 0;
}

Address16 Endpoint::address16() const {
  Address16 out{};
  if (family() == AF_INET) {
    out[10] = 0xff;
    out[11] = 0xff;
    std::memcpy(&out[12], &reinterpret_cast<const sockaddr_in*>(&addr)->sin_addr, 4);
  } else if (family() == AF_INET6) {
    std::memcpy(out.data(), &reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_addr, 16);
  }
  return out;
}

std::string Endpoint::str() const {
  char buf[INET6_ADDRSTRLEN] = {};
  if (family() == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&addr)->sin_addr, buf, sizeof buf);
    return std::string(buf) + ":" + std::to_string(port());
  }
  if (family() == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_addr, buf,
                sizeof buf);
    return "[" + std::string(buf) + "]:" + std::to_string(port());
  }
  return "";
}

bool Endpoint::operator==(const Endpoint& o) const {
  return valid() && o.valid() && address16() == o.address16() && port() == o.port();
}

std::optional<Endpoint> parse_address(std::string_view text) {
  std::string host(text);
  Endpoint e;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&e.addr);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&e.addr);
  if (::inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    e.len = sizeof(sockaddr_in);
    return e;
  }
  e.addr = {};
  if (::inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    e.len = sizeof(sockaddr_in6);
    return e;
  }
  return std::nullopt;
}

std::optional<Endpoint> parse_endpoint(std::string_view text, std::string* why) {
  std::string host;
  std::uint16_t port = 0;
  if (!split_host_port(text, &host, &port)) {
    *why = "\"" + std::string(text) + "\" is not address:port (IPv6 in brackets)";
    return std::nullopt;
  }
  if (host.empty()) host = "::";
  std::optional<Endpoint> e = parse_address(host);
  if (!e) {
    *why = "\"" + host + "\" is not a numeric IPv4 or IPv6 address";
    return std::nullopt;
  }
  if (e->family() == AF_INET)
    reinterpret_cast<sockaddr_in*>(&e->addr)->sin_port = htons(port);
  else
    reinterpret_cast<sockaddr_in6*>(&e->addr)->sin6_port = htons(port);
  return e;
}

Endpoint endpoint_of(const sockaddr* sa, socklen_t len) {
  Endpoint e;
  if (sa == nullptr || len == 0 || len > sizeof(e.addr)) return e;
  std::memcpy(&e.addr, sa, len);
  e.len = len;
  // An IPv4 peer seen through an IPv6 socket: as IPv4, so that it compares
  // equal to the address the file gives.
  if (e.family() == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(sa);
    if (IN6_IS_ADDR_V4MAPPED(&v6->sin6_addr)) {
      Endpoint v4;
      auto* in = reinterpret_cast<sockaddr_in*>(&v4.addr);
      in->sin_family = AF_INET;
      in->sin_port = v6->sin6_port;
      std::memcpy(&in->sin_addr, &v6->sin6_addr.s6_addr[12], 4);
      v4.len = sizeof(sockaddr_in);
      return v4;
    }
  }
  return e;
}

std::optional<PeerList> parse_peers(std::string_view text, bool resolve, std::string* why) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    *why = "not JSON or YAML: " + std::string(e.what());
    return std::nullopt;
  }
  PeerList out;
  if (root.IsNull()) return out;  // an empty file: no peers
  if (!root.IsSequence()) {
    *why = "not a list of target groups ([{\"targets\": [...], \"labels\": {...}}])";
    return std::nullopt;
  }
  std::set<std::pair<std::string, std::string>> seen;
  std::size_t group_index = 0;
  for (const YAML::Node& group : root) {
    ++group_index;
    const std::string where = "group " + std::to_string(group_index);
    if (!group.IsMap()) {
      *why = where + " is not a map with \"targets\"";
      return std::nullopt;
    }
    std::string rail(kDefaultRail);
    try {
      const YAML::Node labels = group["labels"];
      if (labels && !labels.IsNull()) {
        if (!labels.IsMap()) {
          *why = where + ": \"labels\" is not a map";
          return std::nullopt;
        }
        if (const YAML::Node r = labels["rail"]; r) {
          if (!r.IsScalar() || r.Scalar().empty()) {
            *why = where + ": the \"rail\" label is not a non-empty string";
            return std::nullopt;
          }
          rail = r.Scalar();
        }
      }
      const YAML::Node targets = group["targets"];
      if (!targets || !targets.IsSequence()) {
        *why = where + ": \"targets\" is not a list";
        return std::nullopt;
      }
      for (const YAML::Node& t : targets) {
        if (!t.IsScalar()) {
          note(&out, where + ": a target that is not a string");
          continue;
        }
        const std::string& target = t.Scalar();
        if (out.peers.size() >= kMaxListedPeers) {
          *why = "more than " + std::to_string(kMaxListedPeers) + " targets";
          return std::nullopt;
        }
        if (!seen.emplace(rail, target).second) continue;
        std::string host;
        std::uint16_t port = 0;
        if (!split_host_port(target, &host, &port) || port == 0) {
          note(&out, "bad target \"" + target + "\": not host:port");
          continue;
        }
        std::string error;
        std::optional<Endpoint> e = parse_endpoint(target, &error);
        if (!e && resolve) {
          addrinfo hints{};
          hints.ai_socktype = SOCK_DGRAM;
          hints.ai_flags = AI_ADDRCONFIG;
          addrinfo* res = nullptr;
          int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
          if (rc == 0 && res != nullptr) {
            e = endpoint_of(res->ai_addr, res->ai_addrlen);
          } else {
            error = "cannot resolve \"" + host + "\": " + ::gai_strerror(rc);
          }
          if (res != nullptr) ::freeaddrinfo(res);
        }
        if (!e) {
          note(&out, "bad target \"" + target + "\": " + error);
          continue;
        }
        out.peers.push_back(ListedPeer{target, rail, *e});
      }
    } catch (const YAML::Exception& e) {
      *why = where + ": " + e.what();
      return std::nullopt;
    }
  }
  return out;
}

std::uint64_t realtime_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ULL +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

Packet make_probe(std::uint64_t sender_id, std::uint64_t seq, const Endpoint& from,
                  const Endpoint& to) {
  Packet p;
  p.type = PacketType::kProbe;
  p.sender_id = sender_id;
  p.seq = seq;
  p.origin_ns = realtime_ns();
  p.source = from.address16();
  p.source_port = from.port();
  p.destination = to.address16();
  p.destination_port = to.port();
  return p;
}

std::uint64_t ring_hash(std::string_view s) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

std::vector<std::size_t> choose_peers(const std::vector<ListedPeer>& peers, std::uint64_t self,
                                      std::size_t max_peers, std::size_t neighbours,
                                      std::mt19937_64& rng) {
  std::vector<std::size_t> all(peers.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  if (peers.size() <= max_peers) return all;
  // The ring: by hash, ties by target so that every node agrees.
  std::vector<std::pair<std::uint64_t, std::size_t>> ring;
  ring.reserve(peers.size());
  for (std::size_t i = 0; i < peers.size(); ++i) ring.emplace_back(ring_hash(peers[i].target), i);
  std::sort(ring.begin(), ring.end(), [&](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first : peers[a.second].target < peers[b.second].target;
  });
  auto start = std::upper_bound(ring.begin(), ring.end(), self,
                                [](std::uint64_t v, const auto& e) { return v < e.first; });
  std::size_t at = static_cast<std::size_t>(start - ring.begin());
  neighbours = std::min(neighbours, max_peers);
  std::vector<std::size_t> chosen;
  std::vector<bool> taken(peers.size(), false);
  for (std::size_t k = 0; k < neighbours; ++k) {
    std::size_t idx = ring[(at + k) % ring.size()].second;
    chosen.push_back(idx);
    taken[idx] = true;
  }
  // The sample: a partial Fisher-Yates over the rest.
  std::vector<std::size_t> rest;
  for (std::size_t i = 0; i < peers.size(); ++i)
    if (!taken[i]) rest.push_back(i);
  std::size_t want = std::min(max_peers - chosen.size(), rest.size());
  for (std::size_t k = 0; k < want; ++k) {
    std::uniform_int_distribution<std::size_t> pick(k, rest.size() - 1);
    std::swap(rest[k], rest[pick(rng)]);
    chosen.push_back(rest[k]);
  }
  std::sort(chosen.begin(), chosen.end());
  return chosen;
}

}  // namespace nodewatch::mesh
