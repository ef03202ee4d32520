#include "mesh/mesh_wire.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <cstring>

namespace nodewatch::mesh {
namespace {

constexpr std::array<std::uint8_t, 4> kMagic = {'N', 'W', 'M', 'P'};
constexpr std::uint8_t kVersion = 1;

void put64(std::uint8_t* at, std::uint64_t v) {
  for (int i = 7; i >= 0; --i, v >>= 8) at[i] = static_cast<std::uint8_t>(v & 0xff);
}
void put16(std::uint8_t* at, std::uint16_t v) {
  at[0] = static_cast<std::uint8_t>(v >> 8);
  at[1] = static_cast<std::uint8_t>(v & 0xff);
}
std::uint64_t get64(const std::uint8_t* at) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | at[i];
  return v;
}
std::uint16_t get16(const std::uint8_t* at) {
  return static_cast<std::uint16_t>((at[0] << 8) | at[1]);
}

// HMAC-SHA256 of the signed part, truncated.
std::array<std::uint8_t, kMacBytes> mac_of(const std::uint8_t* data, std::string_view key) {
  std::array<std::uint8_t, EVP_MAX_MD_SIZE> full{};
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), data, kSignedBytes, full.data(),
       &len);
  std::array<std::uint8_t, kMacBytes> out{};
  std::copy_n(full.begin(), kMacBytes, out.begin());
  return out;
}

}  // namespace

std::string_view drop_name(Drop d) {
  switch (d) {
    case Drop::kNone: return "";
    case Drop::kMalformed: return "malformed";
    case Drop::kBadSignature: return "bad_signature";
    case Drop::kStale: return "stale";
    case Drop::kReplayed: return "replayed";
    case Drop::kSpoofed: return "spoofed";
    case Drop::kUnmatched: return "unmatched";
    case Drop::kRateLimited: return "rate_limited";
  }
  return "";
}

std::optional<std::vector<std::string>> parse_keys(std::string_view text, std::string* why) {
  auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\r'; };
  std::vector<std::string> keys;
  std::size_t line_no = 0;
  while (!text.empty()) {
    std::size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    ++line_no;
    while (!line.empty() && blank(line.front())) line.remove_prefix(1);
    while (!line.empty() && blank(line.back())) line.remove_suffix(1);
    if (line.empty()) continue;
    if (line.size() < kMinKeyBytes) {
      *why = "the key on line " + std::to_string(line_no) + " is " + std::to_string(line.size()) +
             " bytes; at least " + std::to_string(kMinKeyBytes) +
             " are needed (e.g. openssl rand -hex 32)";
      return std::nullopt;
    }
    if (line.size() > kMaxKeyBytes) {
      *why = "the key on line " + std::to_string(line_no) + " is longer than " +
             std::to_string(kMaxKeyBytes) + " bytes";
      return std::nullopt;
    }
    if (keys.size() == kMaxKeys) {
      *why = "more than " + std::to_string(kMaxKeys) + " keys";
      return std::nullopt;
    }
    keys.emplace_back(line);
  }
  if (keys.empty()) {
    *why = "no key in the file (one per line, at least " + std::to_string(kMinKeyBytes) +
           " bytes; e.g. openssl rand -hex 32)";
    return std::nullopt;
  }
  return keys;
}

std::array<std::uint8_t, kPacketBytes> encode(const Packet& p, std::string_view key) {
  std::array<std::uint8_t, kPacketBytes> b{};
  std::copy(kMagic.begin(), kMagic.end(), b.begin());
  b[4] = kVersion;
  b[5] = static_cast<std::uint8_t>(p.type);
  b[6] = 0;
  b[7] = p.kernel_rx_timestamp ? 1 : 0;
  put64(&b[8], p.sender_id);
  put64(&b[16], p.seq);
  put64(&b[24], p.origin_ns);
  put64(&b[32], p.responder_rx_ns);
  put64(&b[40], p.responder_tx_ns);
  std::copy(p.source.begin(), p.source.end(), b.begin() + 48);
  std::copy(p.destination.begin(), p.destination.end(), b.begin() + 64);
  put16(&b[80], p.source_port);
  put16(&b[82], p.destination_port);
  std::array<std::uint8_t, kMacBytes> mac = mac_of(b.data(), key);
  std::copy(mac.begin(), mac.end(), b.begin() + kSignedBytes);
  return b;
}

std::optional<Packet> decode(std::span<const std::uint8_t> b, std::string_view key, Drop* drop) {
  *drop = Drop::kMalformed;
  if (b.size() != kPacketBytes) return std::nullopt;
  if (!std::equal(kMagic.begin(), kMagic.end(), b.begin()) || b[4] != kVersion) return std::nullopt;
  if (b[5] != static_cast<std::uint8_t>(PacketType::kProbe) &&
      b[5] != static_cast<std::uint8_t>(PacketType::kReply))
    return std::nullopt;
  // The signature is checked before any field is believed, in constant time.
  std::array<std::uint8_t, kMacBytes> mac = mac_of(b.data(), key);
  if (CRYPTO_memcmp(mac.data(), b.data() + kSignedBytes, kMacBytes) != 0) {
    *drop = Drop::kBadSignature;
    return std::nullopt;
  }
  Packet p;
  p.type = static_cast<PacketType>(b[5]);
  p.kernel_rx_timestamp = (b[7] & 1) != 0;
  p.sender_id = get64(&b[8]);
  p.seq = get64(&b[16]);
  p.origin_ns = get64(&b[24]);
  p.responder_rx_ns = get64(&b[32]);
  p.responder_tx_ns = get64(&b[40]);
  std::copy_n(b.begin() + 48, 16, p.source.begin());
  std::copy_n(b.begin() + 64, 16, p.destination.begin());
  p.source_port = get16(&b[80]);
  p.destination_port = get16(&b[82]);
  *drop = Drop::kNone;
  return p;
}

std::optional<Packet> decode(std::span<const std::uint8_t> b, std::span<const std::string> keys,
                             Drop* drop, std::size_t* key_index) {
  *drop = Drop::kBadSignature;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    std::optional<Packet> p = decode(b, keys[i], drop);
    if (p && key_index != nullptr) *key_index = i;
    if (p || *drop == Drop::kMalformed) return p;
  }
  return std::nullopt;
}

bool ReplayGuard::accept(std::uint64_t sender, std::uint64_t seq) {
  ++clock_;
  auto it = senders_.find(sender);
  if (it == senders_.end()) {
    while (senders_.size() >= max_senders_ && !order_.empty()) {
      auto [touched, victim] = order_.front();
      order_.pop_front();
      auto v = senders_.find(victim);
      if (v != senders_.end() && v->second.touched == touched) senders_.erase(v);
    }
    it = senders_.emplace(sender, Window{seq, 1, clock_}).first;
    order_.emplace_back(clock_, sender);
    return true;
  }
  Window& w = it->second;
  if (seq > w.highest) {
    std::uint64_t shift = seq - w.highest;
    w.bits = shift >= 64 ? 1 : (w.bits << shift) | 1;
    w.highest = seq;
  } else {
    std::uint64_t back = w.highest - seq;
    if (back >= 64) return false;  // too old to tell: refused
    std::uint64_t bit = std::uint64_t{1} << back;
    if ((w.bits & bit) != 0) return false;
    w.bits |= bit;
  }
  w.touched = clock_;
  order_.emplace_back(clock_, sender);
  // The order keeps one entry per touch; drop the outdated ones now and then.
  if (order_.size() > 4 * max_senders_ + 64) {
    std::deque<std::pair<std::uint64_t, std::uint64_t>> kept;
    for (const auto& e : order_) {
      auto s = senders_.find(e.second);
      if (s != senders_.end() && s->second.touched == e.first) kept.push_back(e);
    }
    order_.swap(kept);
  }
  return true;
}

bool TokenBucket::take(double now_s) {
  if (last_ >= 0) tokens_ = std::min(rate_, tokens_ + (now_s - last_) * rate_);
  last_ = now_s;
  if (tokens_ < 1) return false;
  tokens_ -= 1;
  return true;
}

}  // namespace nodewatch::mesh
