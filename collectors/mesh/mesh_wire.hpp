#pragma once
// The mesh collector's probe packet, its signature and the responder's
// defence against replays.
//
// A probe and its reply are the same 104 bytes (so the responder never sends
// more than it received: no amplification), big-endian:
//
//   0  "NWMP"                       magic
//   4  1                            version
//   5  type                         1 probe, 2 reply
//   6  flags                        bit 0: responder_rx_ns is a kernel timestamp
//   8  sender_id   u64              random per prober (per daemon start)
//  16  seq         u64              per prober, never reused
//  24  origin_ns   u64              the prober's CLOCK_REALTIME at sending
//  32  responder_rx_ns u64          reply: when the probe arrived
//  40  responder_tx_ns u64          reply: when the reply was sent
//  48  source      16 bytes         the sender's address (IPv4 as ::ffff:a.b.c.d)
//  64  destination 16 bytes         the address it was sent to
//  80  source port u16, destination port u16
//  84  reserved    4 bytes          0
//  88  HMAC-SHA256 of bytes 0..87 under the shared key, first 16 bytes
//
// The addresses and ports are signed so that a packet accepted by the
// responder is one sent from where it says to where it arrived: a captured
// probe re-sent with another source address (to aim the reply at a third
// party) is "spoofed" and dropped. A probe whose origin_ns is further than
// the replay window from the responder's clock is "stale"; one whose
// (sender_id, seq) was seen already is "replayed". Neither is answered.

#include <array>
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace nodewatch::mesh {

inline constexpr std::size_t kPacketBytes = 104;
inline constexpr std::size_t kSignedBytes = 88;
inline constexpr std::size_t kMacBytes = 16;
inline constexpr std::size_t kMinKeyBytes = 16;
inline constexpr std::size_t kMaxKeyBytes = 4096;

enum class PacketType : std::uint8_t { kProbe = 1, kReply = 2 };

// An address as the packet carries it: IPv6, IPv4 mapped into it.
using Address16 = std::array<std::uint8_t, 16>;

struct Packet {
  PacketType type = PacketType::kProbe;
  bool kernel_rx_timestamp = false;
  std::uint64_t sender_id = 0;
  std::uint64_t seq = 0;
  std::uint64_t origin_ns = 0;
  std::uint64_t responder_rx_ns = 0;
  std::uint64_t responder_tx_ns = 0;
  Address16 source{};
  Address16 destination{};
  std::uint16_t source_port = 0;
  std::uint16_t destination_port = 0;
  bool operator==(const Packet&) const = default;
};

// Why a received packet is dropped (the `reason` label).
enum class Drop {
  kNone,
  kMalformed,     // not the size, magic, version or type expected
  kBadSignature,  // unsigned, or signed with another key, or altered
  kStale,         // origin_ns outside the replay window
  kReplayed,      // (sender_id, seq) seen already
  kSpoofed,       // signed addresses are not those it came from and arrived at
  kUnmatched,     // a reply to no probe in flight (late, duplicated, not ours)
  kRateLimited,   // the responder's answer budget was spent
};
std::string_view drop_name(Drop d);
inline constexpr std::array<Drop, 7> kDrops = {
    Drop::kMalformed, Drop::kBadSignature, Drop::kStale,      Drop::kReplayed,
    Drop::kSpoofed,   Drop::kUnmatched,    Drop::kRateLimited};

// The shared keys: one per line of the key file (blanks around a line and
// empty lines ignored), at most kMaxKeys. The first signs what this node
// sends; every one is accepted in what it receives, so that a fleet
// rotates its key without a window of refused probes: add the new key as a
// second line everywhere, then make it the first, then remove the old one.
// nullopt with `why` set when there is none, more than kMaxKeys, or one is
// too short or too long.
inline constexpr std::size_t kMaxKeys = 4;
std::optional<std::vector<std::string>> parse_keys(std::string_view file_text, std::string* why);

// The packet, signed with `key`.
std::array<std::uint8_t, kPacketBytes> encode(const Packet& p, std::string_view key);

// The packet in `bytes` if it is well formed and its signature holds under
// `key`; else nullopt with `*drop` set (kMalformed or kBadSignature).
std::optional<Packet> decode(std::span<const std::uint8_t> bytes, std::string_view key, Drop* drop);
// The same, accepting a signature under any of `keys`; `*key_index` (when
// given) says which one (the responder signs its reply with it).
std::optional<Packet> decode(std::span<const std::uint8_t> bytes, std::span<const std::string> keys,
                             Drop* drop, std::size_t* key_index = nullptr);

// The responder's memory of what it answered: per sender, the highest seq
// seen and a bitmap of the 64 below it (as IPsec's anti-replay window), for
// at most `max_senders` senders (the least recently seen forgotten first:
// its old packets are then still refused by the time window, since a sender
// is only forgotten after max_senders others were seen). Not thread-safe.
class ReplayGuard {
 public:
  explicit ReplayGuard(std::size_t max_senders = 4096) : max_senders_(max_senders) {}
  // True (and remembered) when (sender, seq) is new; false for a replay or
  // a seq too far below the highest one seen.
  bool accept(std::uint64_t sender, std::uint64_t seq);
  std::size_t senders() const { return senders_.size(); }

 private:
  struct Window {
    std::uint64_t highest = 0;
    std::uint64_t bits = 0;  // bit i: highest - i was seen (bit 0: highest)
    std::uint64_t touched = 0;
  };
  std::size_t max_senders_;
  std::uint64_t clock_ = 0;
  std::unordered_map<std::uint64_t, Window> senders_;
  std::deque<std::pair<std::uint64_t, std::uint64_t>> order_;  // (touched, sender)
};

// A token bucket: `rate` tokens a second, at most `rate` saved.
class TokenBucket {
 public:
  explicit TokenBucket(double rate) : rate_(rate), tokens_(rate) {}
  // Takes a token at `now_s` (seconds, monotonic); false when none is left.
  bool take(double now_s);

 private:
  double rate_;
  double tokens_;
  double last_ = -1;
};

}  // namespace nodewatch::mesh
