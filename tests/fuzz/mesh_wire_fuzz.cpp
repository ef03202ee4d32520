// The mesh probe's wire format (collectors/mesh), the one input nodewatch
// takes from the network: a datagram from any peer, and the key file.
// Three checks per input:
//  - the bytes as a received datagram under a fixed key: refused, or a
//    packet that encodes back to exactly those bytes (nothing unsigned
//    slips through);
//  - the bytes as the fields of a packet: it encodes, decodes to itself,
//    and any single altered byte of the encoding is refused or decodes to
//    the same packet (a flip inside ignored padding);
//  - the bytes as a key file, and the replay window over the input's
//    (sender, seq) pairs: a pair accepted once is refused the second time.

#include <cstring>

#include "fuzz_support.hpp"
#include "mesh/mesh_wire.hpp"

using namespace nodewatch::mesh;
using nodewatch::fuzz::require;

namespace {

const std::string kKey = "fuzzing-key-0123456789abcdef";

template <typename T>
T take(const std::uint8_t*& p, std::size_t& left) {
  T v{};
  std::size_t n = std::min(sizeof v, left);
  std::memcpy(&v, p, n);
  p += n;
  left -= n;
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::uint8_t> copy(data, data + size);
  Drop drop = Drop::kNone;
  if (auto p = decode(copy, kKey, &drop)) {
    auto again = encode(*p, kKey);
    require(
        copy.size() == again.size() && std::memcmp(copy.data(), again.data(), again.size()) == 0,
        "mesh: a packet accepted that is not its own encoding");
  } else {
    require(drop == Drop::kMalformed || drop == Drop::kBadSignature,
            "mesh: refused without a reason");
  }

  const std::uint8_t* q = data;
  std::size_t left = size;
  Packet p;
  p.type = (take<std::uint8_t>(q, left) & 1) ? PacketType::kReply : PacketType::kProbe;
  p.kernel_rx_timestamp = take<std::uint8_t>(q, left) & 1;
  p.sender_id = take<std::uint64_t>(q, left);
  p.seq = take<std::uint64_t>(q, left);
  p.origin_ns = take<std::uint64_t>(q, left);
  p.responder_rx_ns = take<std::uint64_t>(q, left);
  p.responder_tx_ns = take<std::uint64_t>(q, left);
  p.source = take<Address16>(q, left);
  p.destination = take<Address16>(q, left);
  p.source_port = take<std::uint16_t>(q, left);
  p.destination_port = take<std::uint16_t>(q, left);
  auto wire = encode(p, kKey);
  Drop d2 = Drop::kNone;
  auto back = decode(wire, kKey, &d2);
  require(back.has_value() && *back == p, "mesh: a packet does not survive its encoding");
  std::size_t at = take<std::uint16_t>(q, left) % wire.size();
  std::uint8_t flip = take<std::uint8_t>(q, left) | 1;
  wire[at] ^= flip;
  auto altered = decode(wire, kKey, &d2);
  require(!altered || *altered == p, "mesh: an altered packet decoded to another packet");
  std::array<std::string, 2> keys = {std::string("another-key-0123456789abcdef"), kKey};
  wire[at] ^= flip;
  std::size_t index = 9;
  require(decode(wire, keys, &d2, &index).has_value() && index == 1,
          "mesh: a packet not accepted under the second of two keys");

  std::string why;
  if (auto ks = parse_keys(nodewatch::fuzz::as_text(data, size), &why)) {
    require(!ks->empty() && ks->size() <= kMaxKeys, "mesh: a key file with no key or too many");
    for (const std::string& k : *ks)
      require(k.size() >= kMinKeyBytes && k.size() <= kMaxKeyBytes, "mesh: a key of a bad length");
  } else {
    require(!why.empty(), "mesh: a key file refused without a reason");
  }

  ReplayGuard guard(8);
  const std::uint8_t* r = data;
  std::size_t rl = size;
  while (rl >= 2) {
    std::uint64_t sender = take<std::uint8_t>(r, rl) % 16;
    std::uint64_t seq = take<std::uint8_t>(r, rl);
    if (guard.accept(sender, seq)) {
      require(!guard.accept(sender, seq), "mesh: a replayed (sender, seq) accepted");
    }
    require(guard.senders() <= 8, "mesh: the replay window holds more senders than its bound");
  }
  return 0;
}
