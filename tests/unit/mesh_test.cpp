// Tests of the mesh collector: the wire format and its signature, the
// replay guard, the peers file (file_sd, JSON and YAML), the choice of
// peers in a large fleet, the options, and the engine over loopback: real
// probes and replies with kernel timestamps, loss, and the packets an
// attacker would send (unsigned, replayed, spoofed, stale), each dropped,
// counted and never answered.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>  // before support/collector_test.hpp, which uses std::nan
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "config.hpp"
#include "mesh/mesh_collector.hpp"
#include "mesh/mesh_peers.hpp"
#include "mesh/mesh_service.hpp"
#include "mesh/mesh_wire.hpp"
#include "nodewatch/unique_fd.hpp"
#include "support/collector_test.hpp"
#include "support/eventually.hpp"

namespace nodewatch::mesh {
namespace {

using namespace std::chrono_literals;
using nodewatch::testing::CollectOnce;
using nodewatch::testing::ExpectWellFormedTable;
using nodewatch::testing::Value;

const std::string kKey = "0123456789abcdef0123456789abcdef";

Endpoint ep(const std::string& text) {
  std::string why;
  auto e = parse_endpoint(text, &why);
  EXPECT_TRUE(e) << why;
  return e.value_or(Endpoint{});
}

Packet sample_probe() {
  Packet p;
  p.type = PacketType::kProbe;
  p.sender_id = 0x1122334455667788ULL;
  p.seq = 42;
  p.origin_ns = 1700000000123456789ULL;
  p.source = ep("198.18.0.1:40000").address16();
  p.destination = ep("198.18.0.2:9843").address16();
  p.source_port = 40000;
  p.destination_port = 9843;
  return p;
}

// ---------------------------------------------------------------------------
// The wire

TEST(MeshWire, RoundTripAndLayout) {
  Packet p = sample_probe();
  auto bytes = encode(p, kKey);
  EXPECT_EQ(bytes.size(), kPacketBytes);
  EXPECT_EQ(std::string(bytes.begin(), bytes.begin() + 4), "NWMP");
  EXPECT_EQ(bytes[4], 1);     // version
  EXPECT_EQ(bytes[5], 1);     // probe
  EXPECT_EQ(bytes[23], 42);   // seq, big-endian, last byte
  EXPECT_EQ(bytes[8], 0x11);  // sender id, first byte
  // IPv4 as ::ffff:198.18.0.1
  EXPECT_EQ(bytes[58], 0xff);
  EXPECT_EQ(bytes[59], 0xff);
  EXPECT_EQ(bytes[60], 198);
  EXPECT_EQ(bytes[63], 1);
  Drop d = Drop::kNone;
  auto back = decode(bytes, kKey, &d);
  ASSERT_TRUE(back);
  EXPECT_EQ(d, Drop::kNone);
  EXPECT_EQ(*back, p);
}

TEST(MeshWire, EveryAlteredByteBreaksTheSignature) {
  auto bytes = encode(sample_probe(), kKey);
  for (std::size_t i = 0; i < kPacketBytes; ++i) {
    auto altered = bytes;
    altered[i] ^= 0x01;
    Drop d = Drop::kNone;
    EXPECT_FALSE(decode(altered, kKey, &d)) << "byte " << i;
    // The header bytes make it malformed before the signature is checked.
    EXPECT_EQ(d, i < 6 ? Drop::kMalformed : Drop::kBadSignature) << "byte " << i;
  }
}

TEST(MeshWire, OtherKeyUnsignedAndWrongSizes) {
  auto bytes = encode(sample_probe(), kKey);
  Drop d = Drop::kNone;
  EXPECT_FALSE(decode(bytes, "another key, just as long as it", &d));
  EXPECT_EQ(d, Drop::kBadSignature);
  // Unsigned: the same fields, zeros where the signature goes.
  auto unsigned_packet = bytes;
  std::fill(unsigned_packet.begin() + kSignedBytes, unsigned_packet.end(), 0);
  EXPECT_FALSE(decode(unsigned_packet, kKey, &d));
  EXPECT_EQ(d, Drop::kBadSignature);
  // Short, long, empty.
  EXPECT_FALSE(decode(std::span<const std::uint8_t>(bytes.data(), kSignedBytes), kKey, &d));
  EXPECT_EQ(d, Drop::kMalformed);
  std::vector<std::uint8_t> longer(bytes.begin(), bytes.end());
  longer.push_back(0);
  EXPECT_FALSE(decode(longer, kKey, &d));
  EXPECT_EQ(d, Drop::kMalformed);
  EXPECT_FALSE(decode(std::span<const std::uint8_t>(), kKey, &d));
  EXPECT_EQ(d, Drop::kMalformed);
}

TEST(MeshWire, Keys) {
  std::string why;
  EXPECT_EQ(parse_keys(kKey + "\n", &why), std::vector<std::string>{kKey});
  EXPECT_EQ(parse_keys("  " + kKey + " \r\n\n" + kKey + "-next\n", &why),
            (std::vector<std::string>{kKey, kKey + "-next"}));
  EXPECT_FALSE(parse_keys("short\n", &why));
  EXPECT_NE(why.find("at least 16"), std::string::npos) << why;
  EXPECT_FALSE(parse_keys(kKey + "\nshort\n", &why));
  EXPECT_NE(why.find("line 2"), std::string::npos) << why;
  EXPECT_FALSE(parse_keys(std::string(kMaxKeyBytes + 1, 'k'), &why));
  EXPECT_FALSE(parse_keys("   \n\n", &why));  // blanks only
  EXPECT_FALSE(parse_keys("", &why));
  std::string five;
  for (int i = 0; i < 5; ++i) five += kKey + std::to_string(i) + "\n";
  EXPECT_FALSE(parse_keys(five, &why));
}

// Rotation: a packet signed with any of the keys is accepted.
TEST(MeshWire, AnyOfTheKeysIsAccepted) {
  const std::vector<std::string> keys = {kKey, "the next key, long enough"};
  Drop d = Drop::kNone;
  EXPECT_TRUE(decode(encode(sample_probe(), keys[0]), keys, &d));
  EXPECT_TRUE(decode(encode(sample_probe(), keys[1]), keys, &d));
  EXPECT_FALSE(decode(encode(sample_probe(), "a third key, not in the list"), keys, &d));
  EXPECT_EQ(d, Drop::kBadSignature);
  auto bytes = encode(sample_probe(), keys[0]);
  EXPECT_FALSE(decode(std::span<const std::uint8_t>(bytes.data(), 20), keys, &d));
  EXPECT_EQ(d, Drop::kMalformed);
}

TEST(MeshWire, ReplayGuard) {
  ReplayGuard g(3);
  EXPECT_TRUE(g.accept(1, 10));
  EXPECT_FALSE(g.accept(1, 10));  // the same packet again
  EXPECT_TRUE(g.accept(1, 12));
  EXPECT_TRUE(g.accept(1, 11));  // late, but not seen
  EXPECT_FALSE(g.accept(1, 11));
  EXPECT_TRUE(g.accept(1, 100));
  EXPECT_FALSE(g.accept(1, 12));  // more than 64 below the highest: refused
  EXPECT_TRUE(g.accept(1, 37));   // within 64 and unseen
  EXPECT_TRUE(g.accept(2, 10));   // another sender has its own window
  EXPECT_TRUE(g.accept(3, 10));
  EXPECT_EQ(g.senders(), 3u);
  // A fourth sender: the least recently seen one (1) is forgotten.
  EXPECT_TRUE(g.accept(4, 10));
  EXPECT_EQ(g.senders(), 3u);
  EXPECT_FALSE(g.accept(4, 10));
  EXPECT_FALSE(g.accept(3, 10));  // 3 is still remembered
  // Forgotten, sender 1's old seq is new again: the responder's time window
  // is what still refuses it then (MeshService.HostilePackets...).
  EXPECT_TRUE(g.accept(1, 10));
}

TEST(MeshWire, TokenBucket) {
  TokenBucket b(2);
  EXPECT_TRUE(b.take(0));
  EXPECT_TRUE(b.take(0));
  EXPECT_FALSE(b.take(0));
  EXPECT_FALSE(b.take(0.2));  // 0.4 of a token
  EXPECT_TRUE(b.take(0.6));   // 1.2 tokens by now
  EXPECT_FALSE(b.take(0.6));
  EXPECT_TRUE(b.take(100));  // at most `rate` saved
  EXPECT_TRUE(b.take(100));
  EXPECT_FALSE(b.take(100));
}

// ---------------------------------------------------------------------------
// Addresses and the peers file

TEST(MeshPeers, Endpoints) {
  std::string why;
  EXPECT_EQ(ep("198.18.0.2:9843").str(), "198.18.0.2:9843");
  EXPECT_EQ(ep("[2001:db8::1]:9843").str(), "[2001:db8::1]:9843");
  EXPECT_EQ(ep(":9843").str(), "[::]:9843");
  EXPECT_EQ(ep("198.18.0.2:9843").port(), 9843);
  for (const char* bad : {"198.18.0.2", "2001:db8::1:9843", "host:9843", "1.2.3.4:70000",
                          "1.2.3.4:", "[::1]9843", "1.2.3.4:12a"})
    EXPECT_FALSE(parse_endpoint(bad, &why)) << bad;
  // An IPv4 peer seen through an IPv6 socket compares equal to the IPv4 one.
  sockaddr_in6 mapped{};
  mapped.sin6_family = AF_INET6;
  mapped.sin6_port = htons(9843);
  ::inet_pton(AF_INET6, "::ffff:198.18.0.2", &mapped.sin6_addr);
  Endpoint seen = endpoint_of(reinterpret_cast<sockaddr*>(&mapped), sizeof mapped);
  EXPECT_EQ(seen.family(), AF_INET);
  EXPECT_TRUE(seen == ep("198.18.0.2:9843"));
}

TEST(MeshPeers, FileSdJsonWithRails) {
  std::string why;
  auto list = parse_peers(R"([
    {"targets": ["198.18.1.2:9843", "198.18.1.3:9843"], "labels": {"rail": "0", "rack": "r1"}},
    {"targets": ["198.18.2.2:9843"], "labels": {"rail": "1"}},
    {"targets": ["[2001:db8::2]:9843", "198.18.1.2:9843"]},
    {"targets": ["198.18.1.2:9843"], "labels": {"rail": "0"}}
  ])",
                          false, &why);
  ASSERT_TRUE(list) << why;
  ASSERT_EQ(list->peers.size(), 5u);  // the repeated rail-0 target once
  EXPECT_EQ(list->peers[0].target, "198.18.1.2:9843");
  EXPECT_EQ(list->peers[0].rail, "0");
  EXPECT_EQ(list->peers[2].rail, "1");
  EXPECT_EQ(list->peers[3].rail, "default");
  EXPECT_EQ(list->peers[3].endpoint.str(), "[2001:db8::2]:9843");
  EXPECT_EQ(list->peers[4].rail, "default");  // the same target on another rail is another peer
  EXPECT_TRUE(list->problems.empty());
}

TEST(MeshPeers, FileSdYamlAndEmpty) {
  std::string why;
  auto list =
      parse_peers("- targets: ['198.18.1.2:9843']\n  labels:\n    rail: '0'\n", false, &why);
  ASSERT_TRUE(list) << why;
  ASSERT_EQ(list->peers.size(), 1u);
  EXPECT_EQ(list->peers[0].rail, "0");
  auto empty = parse_peers("", false, &why);
  ASSERT_TRUE(empty);
  EXPECT_TRUE(empty->peers.empty());
  auto none = parse_peers("[]", false, &why);
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->peers.empty());
}

TEST(MeshPeers, BadTargetsAreSkippedBadFilesRefused) {
  std::string why;
  auto list = parse_peers(R"([{"targets": ["198.18.1.2:9843", "nohostport", "198.18.1.3:0",
                                            ["nested"], "no-such-host.invalid:9843"]}])",
                          false, &why);
  ASSERT_TRUE(list) << why;
  EXPECT_EQ(list->peers.size(), 1u);
  EXPECT_EQ(list->skipped, 4u);
  ASSERT_FALSE(list->problems.empty());
  EXPECT_NE(list->problems[0].find("nohostport"), std::string::npos) << list->problems[0];

  for (const char* bad :
       {"{\"targets\": []}", "[1, 2]", "[{\"labels\": {}}]", "[{\"targets\": \"198.18.1.2:9843\"}]",
        "[{\"targets\": [], \"labels\": [1]}]", "[{\"targets\": [], \"labels\": {\"rail\": \"\"}}]",
        "[{", "\"x\""}) {
    why.clear();
    EXPECT_FALSE(parse_peers(bad, false, &why)) << bad;
    EXPECT_FALSE(why.empty()) << bad;
  }
}

TEST(MeshPeers, NamesAreResolvedWhenAsked) {
  std::string why;
  auto list = parse_peers(R"([{"targets": ["localhost:9843"]}])", true, &why);
  ASSERT_TRUE(list) << why;
  ASSERT_EQ(list->peers.size(), 1u) << (list->problems.empty() ? "" : list->problems[0]);
  EXPECT_EQ(list->peers[0].target, "localhost:9843");  // the label keeps the name
  EXPECT_EQ(list->peers[0].endpoint.port(), 9843);
}

std::vector<ListedPeer> fleet(std::size_t n) {
  std::vector<ListedPeer> peers;
  for (std::size_t i = 0; i < n; ++i) {
    std::string t =
        "198.18." + std::to_string(i / 250) + "." + std::to_string(i % 250 + 1) + ":9843";
    peers.push_back({t, "default", ep(t)});
  }
  return peers;
}

TEST(MeshPeers, AllPeersWhileFewEnough) {
  std::mt19937_64 rng(1);
  auto peers = fleet(10);
  EXPECT_EQ(choose_peers(peers, 7, 10, 2, rng).size(), 10u);
}

TEST(MeshPeers, LargeFleetNeighboursPlusSample) {
  auto peers = fleet(2000);
  std::mt19937_64 rng(1);
  // The node at ring position of peer 17: its neighbours are the next 8 in
  // the ring, the same whatever the sample.
  const std::uint64_t self = ring_hash(peers[17].target);
  auto a = choose_peers(peers, self, 64, 8, rng);
  auto b = choose_peers(peers, self, 64, 8, rng);
  EXPECT_EQ(a.size(), 64u);
  EXPECT_EQ(b.size(), 64u);
  EXPECT_EQ(std::set<std::size_t>(a.begin(), a.end()).size(), 64u);  // distinct
  std::vector<std::size_t> common;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(common));
  EXPECT_GE(common.size(), 8u);   // the neighbours
  EXPECT_LT(common.size(), 30u);  // the samples differ (about 56*56/1992 in common)
  // The neighbours are those that follow self in hash order.
  std::vector<std::pair<std::uint64_t, std::size_t>> ring;
  for (std::size_t i = 0; i < peers.size(); ++i) ring.emplace_back(ring_hash(peers[i].target), i);
  std::sort(ring.begin(), ring.end());
  auto at = std::upper_bound(ring.begin(), ring.end(), std::make_pair(self, SIZE_MAX));
  for (int k = 0; k < 8; ++k) {
    std::size_t idx =
        (at + k == ring.end() ? ring.begin() + (k - (ring.end() - at)) : at + k)->second;
    EXPECT_TRUE(std::binary_search(a.begin(), a.end(), idx)) << k;
    EXPECT_TRUE(std::binary_search(b.begin(), b.end(), idx)) << k;
  }
  // Every node is someone's neighbour: over a fleet (300 nodes, each
  // leaving itself out), the neighbour sets cover all nodes.
  auto small = fleet(300);
  std::set<std::string> covered;
  for (std::size_t i = 0; i < small.size(); ++i) {
    std::vector<ListedPeer> others = small;
    others.erase(others.begin() + static_cast<long>(i));
    for (std::size_t c : choose_peers(others, ring_hash(small[i].target), 8, 8, rng))
      covered.insert(others[c].target);
  }
  EXPECT_EQ(covered.size(), small.size());
}

// ---------------------------------------------------------------------------
// Options

ConfigResult parse(const std::string& toml) {
  std::vector<CollectorSpec> catalog = {mesh_collector_spec()};
  return parse_config(toml, "n.toml", catalog);
}

TEST(MeshOptions, DefaultsAndSpec) {
  const CollectorSpec& spec = mesh_collector_spec();
  EXPECT_EQ(spec.name, "mesh");
  EXPECT_FALSE(spec.enabled_by_default);
  ConfigResult r = parse("");
  ASSERT_TRUE(r.config);
  EXPECT_FALSE(r.config->collectors.at(0).enabled);
  ExpectWellFormedTable(mesh_metric_table(), "nodewatch_mesh_");
}

TEST(MeshOptions, ReadsEveryKey) {
  ConfigResult r = parse(R"([collectors.mesh]
enabled = true
listen = "198.18.0.1:9843"
peers_file = "/etc/nodewatch/peers.json"
key_file = "/etc/nodewatch/mesh.key"
probe_interval = "500ms"
probe_timeout = "200ms"
max_peers = 32
neighbours = 4
resample_interval = "5m"
replay_window = "10s"
max_answers_per_second = 500
[[collectors.mesh.rails]]
name = "0"
source = "198.18.1.1"
[[collectors.mesh.rails]]
name = "1"
interface = "eth2"
)");
  ASSERT_TRUE(r.config) << r.errors.at(0).str();
  const auto& o =
      dynamic_cast<const TypedOptions<MeshOptions>&>(*r.config->collectors.at(0).options).value();
  EXPECT_EQ(o.settings.listen, "198.18.0.1:9843");
  EXPECT_EQ(o.peers_file, "/etc/nodewatch/peers.json");
  EXPECT_EQ(o.settings.probe_interval, 500ms);
  EXPECT_EQ(o.settings.probe_timeout, 200ms);
  EXPECT_EQ(o.settings.max_peers, 32u);
  EXPECT_EQ(o.settings.neighbours, 4u);
  EXPECT_EQ(o.settings.resample_interval, 5min);
  EXPECT_EQ(o.settings.replay_window, 10s);
  EXPECT_EQ(o.settings.max_answers_per_second, 500);
  ASSERT_EQ(o.settings.rails.size(), 2u);
  EXPECT_EQ(o.settings.rails[0].source, "198.18.1.1");
  EXPECT_EQ(o.settings.rails[1].interface, "eth2");
}

TEST(MeshOptions, Mistakes) {
  struct Case {
    const char* toml;
    const char* key;
  };
  const Case cases[] = {
      {"listen = \"198.18.0.1:9843\"\n", "collectors.mesh.key_file"},  // no key
      {"peers_file = \"/p.json\"\n", "collectors.mesh.key_file"},
      {"listen = \"9843\"\nkey_file = \"/k\"\n", "collectors.mesh.listen"},
      {"listen = \"host:9843\"\nkey_file = \"/k\"\n", "collectors.mesh.listen"},
      {"key_file = \"k\"\n", "collectors.mesh.key_file"},
      {"peers_file = \"p.json\"\nkey_file = \"/k\"\n", "collectors.mesh.peers_file"},
      {"max_peers = 0\n", "collectors.mesh.max_peers"},
      {"max_peers = 4\nneighbours = 5\n", "collectors.mesh.neighbours"},
      {"probe_interval = \"10ms\"\n", "collectors.mesh.probe_interval"},
      {"[[collectors.mesh.rails]]\nname = \"default\"\nsource = \"198.18.1.1\"\n",
       "collectors.mesh.rails[0].name"},
      {"[[collectors.mesh.rails]]\nname = \"a b\"\nsource = \"198.18.1.1\"\n",
       "collectors.mesh.rails[0].name"},
      {"[[collectors.mesh.rails]]\nname = \"0\"\nsource = \"eth0\"\n",
       "collectors.mesh.rails[0].source"},
      {"[[collectors.mesh.rails]]\nname = \"0\"\n", "collectors.mesh.rails[0].name"},
      {"[[collectors.mesh.rails]]\nname = \"0\"\ninterface = \"e\"\n[[collectors.mesh.rails]]\n"
       "name = \"0\"\ninterface = \"f\"\n",
       "collectors.mesh.rails[1].name"},
      {"[[collectors.mesh.rails]]\nname = \"0\"\ninterface = \"a-very-long-interface-name\"\n",
       "collectors.mesh.rails[0].interface"},
  };
  for (const Case& c : cases) {
    ConfigResult r = parse(std::string("[collectors.mesh]\n") + c.toml);
    EXPECT_FALSE(r.config) << c.toml;
    ASSERT_FALSE(r.errors.empty()) << c.toml;
    EXPECT_EQ(r.errors[0].key, c.key) << c.toml << " -> " << r.errors[0].str();
  }
}

// ---------------------------------------------------------------------------
// The engine over loopback

MeshSettings fast(std::string listen = "") {
  MeshSettings s;
  s.listen = std::move(listen);
  s.probe_interval = 50ms;
  s.probe_timeout = 200ms;
  return s;
}

std::vector<ListedPeer> peers_at(std::uint16_t port, std::string host = "127.0.0.1") {
  std::string t = host + ":" + std::to_string(port);
  return {ListedPeer{t, "default", ep(t)}};
}

// A UDP socket bound to an ephemeral port of 127.0.0.1; its port in *port.
UniqueFd BoundLoopbackSocket(std::uint16_t* port) {
  UniqueFd fd(::socket(AF_INET, SOCK_DGRAM, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  socklen_t len = sizeof a;
  ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  return fd;
}

// A copy: snapshots are often temporaries.
std::optional<PeerStats> stats_of(const MeshSnapshot& s, const std::string& peer) {
  for (const PeerStats& p : s.peers)
    if (p.peer == peer) return p;
  return std::nullopt;
}

std::uint64_t dropped(const MeshSnapshot& s, Drop d) {
  auto it = s.dropped.find(d);
  return it == s.dropped.end() ? 0 : it->second;
}

TEST(MeshService, ProbesAreAnsweredWithKernelTimestamps) {
  MeshService responder;
  responder.apply(fast("127.0.0.1:0"));
  responder.set_key(kKey);
  ASSERT_TRUE(nodewatch::testing::Eventually([&] { return responder.listen_port() != 0; }, 5s));
  MeshService prober;
  prober.apply(fast());
  prober.set_key(kKey);
  const std::string target = "127.0.0.1:" + std::to_string(responder.listen_port());
  prober.set_peers(peers_at(responder.listen_port()));
  ASSERT_TRUE(nodewatch::testing::Eventually(
      [&] {
        MeshSnapshot s = prober.snapshot();
        std::optional<PeerStats> p = stats_of(s, target);
        return p && p->rtt.count() >= 10;
      },
      10s));
  MeshSnapshot s = prober.snapshot();
  std::optional<PeerStats> p = stats_of(s, target);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->rail, "default");
  EXPECT_GE(p->sent, p->rtt.count());
  EXPECT_LE(p->sent, p->rtt.count() + 1);  // at most one in flight
  EXPECT_EQ(p->lost, 0u);
  // Loopback RTTs: well under 50 ms each, and above 0.
  EXPECT_GT(p->rtt.sum(), 0);
  EXPECT_LT(p->rtt.sum() / static_cast<double>(p->rtt.count()), 0.05);
  EXPECT_EQ(s.probed.at("default"), 1u);
  EXPECT_EQ(s.listed.at("default"), 1u);
  // Software timestamps work on loopback: no sample fell back to user time.
  EXPECT_EQ(s.user_timestamps.count("default") ? s.user_timestamps.at("default") : 0u, 0u);
  MeshSnapshot r = responder.snapshot();
  EXPECT_GE(r.answered, p->rtt.count());
  EXPECT_TRUE(r.answering);
  for (Drop d : kDrops) EXPECT_EQ(dropped(r, d), 0u) << drop_name(d);
}

// The same over IPv6 (::1), and an IPv4 prober answered by a responder on
// "[::]:port", which takes both families.
TEST(MeshService, Ipv6AndADualStackResponder) {
  {
    UniqueFd v6(::socket(AF_INET6, SOCK_DGRAM, 0));
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_loopback;
    if (v6.get() < 0 || ::bind(v6.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
      GTEST_SKIP() << "IPv6 loopback (::1) is not available on this machine";
  }
  MeshService responder;
  responder.apply(fast("[::]:0"));
  responder.set_key(kKey);
  ASSERT_TRUE(nodewatch::testing::Eventually([&] { return responder.listen_port() != 0; }, 5s));
  const std::string port = std::to_string(responder.listen_port());
  MeshService prober;
  prober.apply(fast());
  prober.set_key(kKey);
  std::vector<ListedPeer> peers = {{"[::1]:" + port, "default", ep("[::1]:" + port)},
                                   {"127.0.0.1:" + port, "default", ep("127.0.0.1:" + port)}};
  prober.set_peers(peers);
  ASSERT_TRUE(nodewatch::testing::Eventually(
      [&] {
        MeshSnapshot s = prober.snapshot();
        auto v6 = stats_of(s, "[::1]:" + port);
        auto v4 = stats_of(s, "127.0.0.1:" + port);
        return v6 && v4 && v6->rtt.count() >= 3 && v4->rtt.count() >= 3;
      },
      10s));
  MeshSnapshot s = prober.snapshot();
  EXPECT_EQ(stats_of(s, "[::1]:" + port)->lost, 0u);
  EXPECT_EQ(stats_of(s, "127.0.0.1:" + port)->lost, 0u);
  for (Drop d : kDrops) EXPECT_EQ(dropped(responder.snapshot(), d), 0u) << drop_name(d);
}

// A key rotated node by node. A responder signs its reply with the key
// that verified the probe, so a node that knows the old key only is still
// answered by one that signs with the new key and knows the old one; the
// other way its probes are refused (counted) until it knows the new key too.
TEST(MeshService, KeyRotationWithoutRefusedProbes) {
  const std::string next = "the next key, rotated in now";
  MeshService old_only;
  old_only.apply(fast("127.0.0.1:0"));
  old_only.set_key(kKey);
  MeshService rotated;
  rotated.apply(fast("127.0.0.1:0"));
  rotated.set_keys({next, kKey});
  ASSERT_TRUE(nodewatch::testing::Eventually(
      [&] { return old_only.listen_port() != 0 && rotated.listen_port() != 0; }, 5s));
  old_only.set_peers(peers_at(rotated.listen_port()));
  rotated.set_peers(peers_at(old_only.listen_port()));
  const std::string to_rotated = "127.0.0.1:" + std::to_string(rotated.listen_port());
  const std::string to_old = "127.0.0.1:" + std::to_string(old_only.listen_port());
  // The old-only node is answered (with the old key); the rotated node's
  // probes, signed with the new key, are refused there (counted), until...
  ASSERT_TRUE(nodewatch::testing::Eventually(
      [&] {
        auto a = stats_of(old_only.snapshot(), to_rotated);
        return a && a->rtt.count() >= 3 && dropped(old_only.snapshot(), Drop::kBadSignature) >= 3;
      },
      10s));
  // ...it learns the new key as a second one: then both directions answer.
  old_only.set_keys({kKey, next});
  EXPECT_EQ(stats_of(rotated.snapshot(), to_old)->rtt.count(), 0u);
  ASSERT_TRUE(nodewatch::testing::Eventually(
      [&] {
        auto b = stats_of(rotated.snapshot(), to_old);
        return b && b->rtt.count() >= 3;
      },
      10s));
  EXPECT_EQ(dropped(rotated.snapshot(), Drop::kBadSignature), 0u);
}

TEST(MeshService, UnansweredProbesAreLost) {
  // A port where nothing answers.
  std::uint16_t port = 0;
  UniqueFd hole = BoundLoopbackSocket(&port);
  MeshService prober;
  prober.apply(fast());
  prober.set_key(kKey);
  prober.set_peers(peers_at(port));
  const std::string target = "127.0.0.1:" + std::to_string(port);
  ASSERT_TRUE(nodewatch::testing::Eventually(
      [&] {
        std::optional<PeerStats> p = stats_of(prober.snapshot(), target);
        return p && p->lost >= 3;
      },
      10s));
  MeshSnapshot s = prober.snapshot();
  std::optional<PeerStats> p = stats_of(s, target);
  EXPECT_EQ(p->rtt.count(), 0u);
  // Sent = lost + those still in flight (at most timeout / interval + 1).
  EXPECT_GE(p->sent, p->lost);
  EXPECT_LE(p->sent, p->lost + 5);
}

TEST(MeshService, WithoutAKeyNothingIsSentOrAnswered) {
  MeshService responder;
  responder.apply(fast("127.0.0.1:0"));
  ASSERT_TRUE(nodewatch::testing::Eventually([&] { return responder.listen_port() != 0; }, 5s));
  MeshService prober;
  prober.apply(fast());
  prober.set_peers(peers_at(responder.listen_port()));
  std::this_thread::sleep_for(300ms);
  std::optional<PeerStats> p =
      stats_of(prober.snapshot(), "127.0.0.1:" + std::to_string(responder.listen_port()));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->sent, 0u);
  EXPECT_FALSE(prober.snapshot().keyed);
}

TEST(MeshService, SelfIsLeftOut) {
  MeshService node;
  node.apply(fast("127.0.0.1:0"));
  node.set_key(kKey);
  ASSERT_TRUE(nodewatch::testing::Eventually([&] { return node.listen_port() != 0; }, 5s));
  auto peers = peers_at(node.listen_port());
  auto other = peers_at(1);  // another port: not self
  peers.push_back(other[0]);
  node.set_peers(peers);
  ASSERT_TRUE(
      nodewatch::testing::Eventually([&] { return node.snapshot().peers.size() == 1; }, 5s));
  EXPECT_EQ(node.snapshot().peers[0].peer, "127.0.0.1:1");
  EXPECT_EQ(node.snapshot().listed.at("default"), 1u);
}

// A client socket on 127.0.0.1 that sends crafted packets to the responder.
class Attacker {
 public:
  explicit Attacker(std::uint16_t to) : to_(ep("127.0.0.1:" + std::to_string(to))) {
    fd_ = BoundLoopbackSocket(&port_);  // after port_'s own initializer
  }
  // A probe as an honest prober on this socket would sign it.
  Packet probe(std::uint64_t seq) const {
    return make_probe(777, seq, ep("127.0.0.1:" + std::to_string(port_)), to_);
  }
  void send(std::span<const std::uint8_t> bytes) {
    ASSERT_EQ(::sendto(fd_.get(), bytes.data(), bytes.size(), 0,
                       reinterpret_cast<const sockaddr*>(&to_.addr), to_.len),
              static_cast<ssize_t>(bytes.size()));
  }
  // Replies received within `wait`.
  int replies(std::chrono::milliseconds wait) {
    int n = 0;
    pollfd p{fd_.get(), POLLIN, 0};
    while (::poll(&p, 1, static_cast<int>(wait.count())) > 0) {
      std::uint8_t buf[256];
      if (::recv(fd_.get(), buf, sizeof buf, MSG_DONTWAIT) > 0) ++n;
    }
    return n;
  }

 private:
  UniqueFd fd_;
  std::uint16_t port_ = 0;
  Endpoint to_;
};

TEST(MeshService, HostilePacketsAreDroppedCountedAndNeverAnswered) {
  MeshService responder;
  MeshSettings s = fast("127.0.0.1:0");
  s.replay_window = 5s;
  responder.apply(s);
  responder.set_key(kKey);
  ASSERT_TRUE(nodewatch::testing::Eventually([&] { return responder.listen_port() != 0; }, 5s));
  Attacker a(responder.listen_port());

  // A valid probe is answered once, with a reply as large as the probe.
  auto valid = encode(a.probe(1), kKey);
  a.send(valid);
  EXPECT_EQ(a.replies(300ms), 1);
  // The same packet again: replayed.
  a.send(valid);
  // Unsigned (zeros for the signature), and signed with another key.
  auto unsigned_probe = encode(a.probe(2), kKey);
  std::fill(unsigned_probe.begin() + kSignedBytes, unsigned_probe.end(), 0);
  a.send(unsigned_probe);
  a.send(encode(a.probe(3), "some other key of enough length"));
  // Spoofed: signed as sent from 127.0.0.2 (to aim the reply elsewhere), or
  // as sent to another port.
  Packet spoofed = a.probe(4);
  spoofed.source = ep("127.0.0.2:1").address16();
  a.send(encode(spoofed, kKey));
  Packet elsewhere = a.probe(5);
  elsewhere.destination_port = static_cast<std::uint16_t>(elsewhere.destination_port + 1);
  a.send(encode(elsewhere, kKey));
  // Stale: an old probe (a minute ago) with a fresh seq.
  Packet old = a.probe(6);
  old.origin_ns -= 60ULL * 1000000000ULL;
  a.send(encode(old, kKey));
  // Malformed: too short; a reply sent to the responder.
  a.send(std::span<const std::uint8_t>(valid.data(), 20));
  Packet reply = a.probe(7);
  reply.type = PacketType::kReply;
  a.send(encode(reply, kKey));
  EXPECT_EQ(a.replies(300ms), 0);

  ASSERT_TRUE(nodewatch::testing::Eventually(
      [&] { return dropped(responder.snapshot(), Drop::kMalformed) == 2; }, 5s));
  MeshSnapshot snap = responder.snapshot();
  EXPECT_EQ(snap.answered, 1u);
  EXPECT_EQ(dropped(snap, Drop::kReplayed), 1u);
  EXPECT_EQ(dropped(snap, Drop::kBadSignature), 2u);
  EXPECT_EQ(dropped(snap, Drop::kSpoofed), 2u);
  EXPECT_EQ(dropped(snap, Drop::kStale), 1u);
  EXPECT_EQ(dropped(snap, Drop::kMalformed), 2u);
  // A fresh valid probe is still answered after all that.
  a.send(encode(a.probe(8), kKey));
  EXPECT_EQ(a.replies(300ms), 1);
}

TEST(MeshService, AnswersAreRateLimited) {
  MeshService responder;
  MeshSettings s = fast("127.0.0.1:0");
  s.max_answers_per_second = 5;
  responder.apply(s);
  responder.set_key(kKey);
  ASSERT_TRUE(nodewatch::testing::Eventually([&] { return responder.listen_port() != 0; }, 5s));
  Attacker a(responder.listen_port());
  for (std::uint64_t i = 1; i <= 20; ++i) a.send(encode(a.probe(i), kKey));
  int got = a.replies(300ms);
  EXPECT_GE(got, 5);
  EXPECT_LE(got, 7);  // 5 saved, and what refilled meanwhile
  ASSERT_TRUE(nodewatch::testing::Eventually(
      [&] {
        MeshSnapshot snap = responder.snapshot();
        return snap.answered + dropped(snap, Drop::kRateLimited) == 20;
      },
      5s));
}

// The peers probed, by target.
std::set<std::string> probed(const MeshSnapshot& s) {
  std::set<std::string> out;
  for (const PeerStats& p : s.peers) out.insert(p.peer);
  return out;
}

TEST(MeshService, TheSampleStaysUntilItIsRedrawn) {
  // 40 peers (nobody answers: only the choice matters), 10 probed.
  std::vector<ListedPeer> peers;
  for (int i = 1; i <= 40; ++i) {
    std::string t = "127.0.0.1:" + std::to_string(20000 + i);
    peers.push_back({t, "default", ep(t)});
  }
  MeshSettings s = fast();
  s.max_peers = 10;
  s.neighbours = 2;
  s.resample_interval = 1h;
  s.route_refresh = 20ms;  // refreshed many times below: the sample stays
  MeshService prober;
  prober.apply(s);
  prober.set_key(kKey);
  prober.set_peers(peers);
  ASSERT_TRUE(
      nodewatch::testing::Eventually([&] { return prober.snapshot().peers.size() == 10; }, 5s));
  const std::set<std::string> first = probed(prober.snapshot());
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(probed(prober.snapshot()), first);
  EXPECT_EQ(prober.snapshot().listed.at("default"), 40u);
  EXPECT_EQ(prober.snapshot().probed.at("default"), 10u);

  // Redrawn often: the sample moves, the neighbours stay, counts are kept.
  s.resample_interval = 50ms;
  prober.apply(s);
  std::set<std::string> seen = first;
  ASSERT_TRUE(nodewatch::testing::Eventually(
      [&] {
        for (const auto& p : probed(prober.snapshot())) seen.insert(p);
        return seen.size() >= 20;
      },
      10s))
      << seen.size() << " peers seen";
  std::set<std::string> always = first;
  for (int i = 0; i < 10; ++i) {
    std::set<std::string> now = probed(prober.snapshot()), both;
    EXPECT_EQ(now.size(), 10u);
    std::set_intersection(always.begin(), always.end(), now.begin(), now.end(),
                          std::inserter(both, both.begin()));
    always = both;
    std::this_thread::sleep_for(60ms);
  }
  EXPECT_GE(always.size(), 2u);  // the two neighbours, in every draw
}

// Each rail probes from its own socket: one bound to a source address, one
// to a device (lo here); a rail whose source is not this node's cannot
// bind, says so, and loses every probe.
TEST(MeshService, EachRailFromItsOwnSocket) {
  MeshService responder;
  responder.apply(fast("127.0.0.1:0"));
  responder.set_key(kKey);
  ASSERT_TRUE(nodewatch::testing::Eventually([&] { return responder.listen_port() != 0; }, 5s));
  const std::string target = "127.0.0.1:" + std::to_string(responder.listen_port());
  MeshSettings s = fast();
  s.rails = {{"r1", "127.0.0.1", ""}, {"r2", "", "lo"}, {"r3", "198.18.255.254", ""}};
  MeshService prober;
  prober.apply(s);
  prober.set_key(kKey);
  std::vector<ListedPeer> peers;
  for (const char* rail : {"r1", "r2", "r3", "r4"}) peers.push_back({target, rail, ep(target)});
  prober.set_peers(peers);
  auto rail_stats = [&](const std::string& rail) {
    for (const PeerStats& p : prober.snapshot().peers)
      if (p.rail == rail) return std::optional<PeerStats>(p);
    return std::optional<PeerStats>();
  };
  ASSERT_TRUE(nodewatch::testing::Eventually(
      [&] {
        auto r1 = rail_stats("r1"), r2 = rail_stats("r2"), r3 = rail_stats("r3");
        return r1 && r2 && r3 && r1->rtt.count() >= 3 && r2->rtt.count() >= 3 && r3->lost >= 3;
      },
      10s));
  EXPECT_EQ(rail_stats("r3")->rtt.count(), 0u);
  EXPECT_FALSE(rail_stats("r4"));  // not a configured rail: not probed
  MeshSnapshot snap = prober.snapshot();
  std::set<std::string> reasons;
  for (const auto& p : snap.problems) reasons.insert(p.reason + " " + p.subject);
  EXPECT_TRUE(reasons.contains("socket_error rail r3")) << snap.problems.size();
  EXPECT_TRUE(reasons.contains("unknown_rail r4")) << snap.problems.size();
  EXPECT_EQ(snap.probed.at("r1"), 1u);
  EXPECT_EQ(snap.probed.at("r2"), 1u);
  EXPECT_EQ(snap.probed.at("default"), 0u);
}

TEST(MeshService, SettingsChangeKeepsTheCounts) {
  MeshService responder;
  responder.apply(fast("127.0.0.1:0"));
  responder.set_key(kKey);
  ASSERT_TRUE(nodewatch::testing::Eventually([&] { return responder.listen_port() != 0; }, 5s));
  MeshService prober;
  prober.apply(fast());
  prober.set_key(kKey);
  prober.set_peers(peers_at(responder.listen_port()));
  const std::string target = "127.0.0.1:" + std::to_string(responder.listen_port());
  ASSERT_TRUE(nodewatch::testing::Eventually(
      [&] {
        std::optional<PeerStats> p = stats_of(prober.snapshot(), target);
        return p && p->sent >= 5;
      },
      10s));
  std::uint64_t before = stats_of(prober.snapshot(), target)->sent;
  MeshSettings slower = fast();
  slower.probe_interval = 100ms;
  prober.apply(slower);
  std::this_thread::sleep_for(150ms);
  std::optional<PeerStats> after = stats_of(prober.snapshot(), target);
  ASSERT_TRUE(after);
  EXPECT_GE(after->sent, before);  // never reset
}

// ---------------------------------------------------------------------------
// The collector: files through helper processes, the metrics

class MeshFiles {
 public:
  MeshFiles() {
    static int counter = 0;
    dir_ = std::filesystem::temp_directory_path() /
           ("nodewatch-mesh-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::create_directories(dir_);
  }
  ~MeshFiles() { std::filesystem::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text, mode_t mode = 0600) {
    std::filesystem::path p = dir_ / name;
    std::ofstream(p) << text;
    ::chmod(p.c_str(), mode);
    return p.string();
  }

 private:
  std::filesystem::path dir_;
};

TEST(MeshCollector, ExportsProbesFromTheFilesAndFollowsThem) {
  MeshFiles files;
  auto responder = std::make_shared<MeshService>();
  responder->apply(fast("127.0.0.1:0"));
  responder->set_key(kKey);
  ASSERT_TRUE(nodewatch::testing::Eventually([&] { return responder->listen_port() != 0; }, 5s));
  const std::string target = "127.0.0.1:" + std::to_string(responder->listen_port());

  MeshOptions o;
  o.settings = fast();
  o.key_file = files.write("mesh.key", kKey + "\n");
  o.peers_file = files.write("peers.json", "[{\"targets\": [\"" + target + "\"]}]", 0644);
  MeshCollector c(std::make_shared<MeshService>(), o);
  {
    MetricSink sink(c.metrics());
    CollectOnce(c, sink);
    EXPECT_TRUE(sink.errors().empty());
  }
  ASSERT_TRUE(nodewatch::testing::Eventually(
      [&] {
        std::optional<PeerStats> p = stats_of(c.service().snapshot(), target);
        return p && p->rtt.count() >= 3;
      },
      10s));
  MetricSink sink(c.metrics());
  CollectOnce(c, sink);
  EXPECT_GE(Value(sink, "nodewatch_mesh_sent_total", {target, "default"}), 3);
  EXPECT_EQ(Value(sink, "nodewatch_mesh_lost_total", {target, "default"}), 0);
  EXPECT_EQ(Value(sink, "nodewatch_mesh_peers", {"default"}), 1);
  EXPECT_EQ(Value(sink, "nodewatch_mesh_listed_peers", {"default"}), 1);
  EXPECT_EQ(Value(sink, "nodewatch_mesh_dropped_packets_total", {"bad_signature"}), 0);
  ASSERT_NE(sink.get_histogram("nodewatch_mesh_rtt_seconds", {target, "default"}), nullptr);
  // No listen address: no responder series.
  EXPECT_EQ(sink.render().find("nodewatch_mesh_responder_up"), std::string::npos);

  // The peers file changes: the new peer is probed, the old one's series go.
  files.write("peers.json", "[{\"targets\": [\"127.0.0.1:1\", \"not a target\"]}]", 0644);
  MetricSink changed(c.metrics());
  CollectOnce(c, changed);
  EXPECT_EQ(changed.errors().at("bad_target"), 1u);
  ASSERT_TRUE(nodewatch::testing::Eventually(
      [&] { return stats_of(c.service().snapshot(), "127.0.0.1:1").has_value(); }, 5s));
  EXPECT_FALSE(stats_of(c.service().snapshot(), target));

  // A broken file keeps the last good list, and is counted while it lasts.
  files.write("peers.json", "[{\"targets\": ", 0644);
  for (int i = 0; i < 2; ++i) {
    MetricSink broken(c.metrics());
    CollectOnce(c, broken);
    EXPECT_EQ(broken.errors().at("peers_error"), 1u);
    EXPECT_TRUE(stats_of(c.service().snapshot(), "127.0.0.1:1"));
  }
}

TEST(MeshCollector, KeyFileMustBePrivateAndLongEnough) {
  MeshFiles files;
  MeshOptions o;
  o.settings = fast();
  o.key_file = files.write("mesh.key", kKey, 0644);
  MeshCollector c(std::make_shared<MeshService>(), o);
  MetricSink open_key(c.metrics());
  CollectOnce(c, open_key);
  EXPECT_EQ(open_key.errors().at("key_error"), 1u);
  EXPECT_FALSE(c.service().snapshot().keyed);

  files.write("mesh.key", kKey + "\nshort\n", 0600);
  MetricSink short_key(c.metrics());
  CollectOnce(c, short_key);
  EXPECT_EQ(short_key.errors().at("key_error"), 1u);
  EXPECT_FALSE(c.service().snapshot().keyed);

  files.write("mesh.key", kKey, 0600);
  MetricSink good(c.metrics());
  CollectOnce(c, good);
  EXPECT_TRUE(good.errors().empty());
  EXPECT_TRUE(c.service().snapshot().keyed);
}

TEST(MeshCollector, ListenAddressThatCannotBeBoundIsCounted) {
  // Taken by someone else.
  std::uint16_t port = 0;
  UniqueFd taken = BoundLoopbackSocket(&port);
  MeshFiles files;
  MeshOptions o;
  o.settings = fast("127.0.0.1:" + std::to_string(port));
  o.key_file = files.write("mesh.key", kKey);
  MeshCollector c(std::make_shared<MeshService>(), o);
  ASSERT_TRUE(
      nodewatch::testing::Eventually([&] { return !c.service().snapshot().problems.empty(); }, 5s));
  MetricSink sink(c.metrics());
  CollectOnce(c, sink);
  EXPECT_EQ(sink.errors().at("socket_error"), 1u);
  EXPECT_EQ(Value(sink, "nodewatch_mesh_responder_up", {}), 0);
}

}  // namespace
}  // namespace nodewatch::mesh
