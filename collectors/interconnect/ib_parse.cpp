#include "interconnect/ib_parse.hpp"

#include <array>
#include <charconv>
#include <cmath>

#include "nodewatch/metric.hpp"
#include "nodewatch/text.hpp"

namespace nodewatch::interconnect {
namespace {

using text::is_space;

bool parse_u64(std::string_view s, std::uint64_t* out) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

// A non-negative decimal such as "100", "2.5" or "53.125".
bool parse_decimal(std::string_view s, double* out) {
  if (s.empty()) return false;
  std::size_t dot = s.find('.');
  std::string_view whole = s.substr(0, dot);
  std::uint64_t w = 0;
  if (!parse_u64(whole, &w)) return false;
  double v = static_cast<double>(w);
  if (dot != std::string_view::npos) {
    std::string_view frac = s.substr(dot + 1);
    if (frac.empty() || frac.size() > 9) return false;
    std::uint64_t f = 0;
    if (!parse_u64(frac, &f)) return false;
    v += static_cast<double>(f) / std::pow(10.0, static_cast<double>(frac.size()));
  }
  *out = v;
  return true;
}

struct PmaEntry {
  std::string_view name;
  PmaMetric metric;
  std::uint64_t multiplier;
};

// counters/ (core/sysfs.c pma_table / pma_table_ext / pma_table_noietf).
constexpr std::array<PmaEntry, 14> kPmaCurated = {{
    {"port_xmit_data", PmaMetric::kTransmittedBytes, 4},
    {"port_rcv_data", PmaMetric::kReceivedBytes, 4},
    {"port_xmit_packets", PmaMetric::kTransmittedPackets, 1},
    {"port_rcv_packets", PmaMetric::kReceivedPackets, 1},
    {"symbol_error", PmaMetric::kSymbolErrors, 1},
    {"link_downed", PmaMetric::kLinkDowned, 1},
    {"link_error_recovery", PmaMetric::kLinkErrorRecovery, 1},
    {"port_rcv_errors", PmaMetric::kReceiveErrors, 1},
    {"port_rcv_remote_physical_errors", PmaMetric::kReceiveRemotePhysicalErrors, 1},
    {"port_xmit_discards", PmaMetric::kTransmitDiscards, 1},
    {"port_xmit_wait", PmaMetric::kTransmitWait, 1},
    {"local_link_integrity_errors", PmaMetric::kLocalLinkIntegrityErrors, 1},
    {"excessive_buffer_overrun_errors", PmaMetric::kExcessiveBufferOverrunErrors, 1},
    {"VL15_dropped", PmaMetric::kVl15Dropped, 1},
}};

// counters_ext/ (kernels before 4.5 kept the 64-bit PortCountersExtended
// values apart): the four _64 files replace their counters/ twins.
constexpr std::array<PmaEntry, 4> kPmaExt = {{
    {"port_xmit_data_64", PmaMetric::kTransmittedBytes, 4},
    {"port_rcv_data_64", PmaMetric::kReceivedBytes, 4},
    {"port_xmit_packets_64", PmaMetric::kTransmittedPackets, 1},
    {"port_rcv_packets_64", PmaMetric::kReceivedPackets, 1},
}};

struct HwEntry {
  std::string_view name;
  HwMetric metric;
};

constexpr std::array<HwEntry, 10> kHwCurated = {{
    {"np_ecn_marked_roce_packets", HwMetric::kEcnMarked},
    {"np_cnp_sent", HwMetric::kCnpSent},
    {"rp_cnp_handled", HwMetric::kCnpHandled},
    {"rp_cnp_ignored", HwMetric::kCnpIgnored},
    {"out_of_buffer", HwMetric::kOutOfBuffer},
    {"out_of_sequence", HwMetric::kOutOfSequence},
    {"packet_seq_err", HwMetric::kPacketSequenceErrors},
    {"local_ack_timeout_err", HwMetric::kLocalAckTimeouts},
    {"roce_adp_retrans", HwMetric::kRetransmits},
    {"lifespan", HwMetric::kSkip},
}};

// mlx5 Q-counters (basic, out_of_seq, retrans, extended, roce accel groups).
constexpr std::array<std::string_view, 26> kQCounters = {
    "rx_write_requests",
    "rx_read_requests",
    "rx_atomic_requests",
    "rx_dct_connect",
    "out_of_buffer",
    "out_of_sequence",
    "duplicate_request",
    "rnr_nak_retry_err",
    "packet_seq_err",
    "implied_nak_seq_err",
    "local_ack_timeout_err",
    "resp_local_length_error",
    "resp_cqe_error",
    "req_cqe_error",
    "req_remote_invalid_request",
    "req_remote_access_errors",
    "resp_remote_access_errors",
    "resp_cqe_flush_error",
    "req_cqe_flush_error",
    "req_transport_retries_exceeded",
    "req_rnr_retries_exceeded",
    "roce_adp_retrans",
    "roce_adp_retrans_to",
    "roce_slow_restart",
    "roce_slow_restart_cnps",
    "roce_slow_restart_trans",
};

}  // namespace

std::string_view trim(std::string_view raw) {
  return text::trim(raw);
}

std::string attribute_label(std::string_view raw) {
  return text::label_value(raw);
}

std::optional<unsigned> parse_numbered_state(std::string_view raw) {
  std::string_view s = trim(raw);
  std::size_t colon = s.find(':');
  if (colon == std::string_view::npos) return std::nullopt;
  std::uint64_t v = 0;
  if (!parse_u64(s.substr(0, colon), &v) || v > 255) return std::nullopt;
  return static_cast<unsigned>(v);
}

std::optional<PortRate> parse_rate(std::string_view raw) {
  std::string_view s = trim(raw);
  std::size_t space = s.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  double gbps = 0;
  if (!parse_decimal(s.substr(0, space), &gbps)) return std::nullopt;
  // from_chars takes "-40", "inf" and "nan"; no link signals at those (nor
  // at 0: the kernel fails the read of a port without a rate).
  if (!std::isfinite(gbps) || gbps <= 0) return std::nullopt;
  std::string_view rest = s.substr(space + 1);
  constexpr std::string_view kUnit = "Gb/sec";
  if (rest.substr(0, kUnit.size()) != kUnit) return std::nullopt;
  rest.remove_prefix(kUnit.size());
  PortRate out;
  out.bytes_per_second = gbps * 1e9 / 8;
  // " (4X EDR)": the lanes, when the kernel printed them.
  std::size_t open = rest.find('(');
  std::size_t x = rest.find('X', open == std::string_view::npos ? 0 : open);
  if (open != std::string_view::npos && x != std::string_view::npos && x > open + 1) {
    std::uint64_t lanes = 0;
    if (parse_u64(rest.substr(open + 1, x - open - 1), &lanes) && lanes > 0 && lanes <= 64) {
      out.width = static_cast<unsigned>(lanes);
    }
  }
  return out;
}

Counter parse_counter(std::string_view raw) {
  std::string_view s = trim(raw);
  Counter c;
  if (s == "N/A (no PMA)") {
    c.reading = CounterReading::kNoPma;
    return c;
  }
  if (parse_u64(s, &c.value)) c.reading = CounterReading::kValue;
  return c;
}

PmaFile classify_pma_file(std::string_view name, bool ext) {
  PmaFile f;
  if (ext) {
    for (const PmaEntry& e : kPmaExt) {
      if (e.name == name) {
        f.metric = e.metric;
        f.multiplier = e.multiplier;
        f.overrides = true;
        return f;
      }
    }
    // "port_unicast_rcv_packets" -> "unicast_rcv_packets", as counters/
    // names it on kernels 4.5+.
    constexpr std::string_view kPort = "port_";
    std::string_view label = name;
    if ((label.find("unicast") != std::string_view::npos ||
         label.find("multicast") != std::string_view::npos) &&
        label.substr(0, kPort.size()) == kPort) {
      label.remove_prefix(kPort.size());
    }
    f.label = std::string(label);
    return f;
  }
  for (const PmaEntry& e : kPmaCurated) {
    if (e.name == name) {
      f.metric = e.metric;
      f.multiplier = e.multiplier;
      return f;
    }
  }
  f.label = std::string(name);
  return f;
}

HwMetric classify_hw_counter(std::string_view name) {
  for (const HwEntry& e : kHwCurated) {
    if (e.name == name) return e.metric;
  }
  return HwMetric::kGeneric;
}

bool hw_counter_is_32bit(std::string_view name) {
  for (std::string_view q : kQCounters) {
    if (q == name) return true;
  }
  return false;
}

}  // namespace nodewatch::interconnect
