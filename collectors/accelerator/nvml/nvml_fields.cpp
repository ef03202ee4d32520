#include "accelerator/nvml/nvml_fields.hpp"

#include <array>
#include <charconv>
#include <limits>
#include <string>

namespace nodewatch::accelerator {
namespace {

constexpr unsigned kForever = std::numeric_limits<unsigned>::max();

// One meaning of one id: `def.id` means `field` for drivers of branch
// [from, until).
struct Meaning {
  NvmlVersionedField field;
  NvmlFieldDef def;
  unsigned from;
  unsigned until;
};

using F = NvmlVersionedField;
using K = NvmlFieldKind;

// See the top of nvml_fields.hpp for where each range comes from.
constexpr std::array<Meaning, 6> kVersioned = {{
    {F::kClocksEventSwThermalNs,
     {251, "clocks_event_reason_sw_therm_slowdown", K::kInteger64},
     575,
     590},
    {F::kClocksEventHwThermalNs,
     {252, "clocks_event_reason_hw_therm_slowdown", K::kInteger64},
     575,
     590},
    {F::kClocksEventHwPowerBrakeNs,
     {253, "clocks_event_reason_hw_power_brake_slowdown", K::kInteger64},
     575,
     590},
    {F::kClocksEventSwThermalNs,
     {269, "clocks_event_reason_sw_therm_slowdown", K::kInteger64},
     590,
     kForever},
    {F::kClocksEventHwThermalNs,
     {270, "clocks_event_reason_hw_therm_slowdown", K::kInteger64},
     590,
     kForever},
    {F::kClocksEventHwPowerBrakeNs,
     {271, "clocks_event_reason_hw_power_brake_slowdown", K::kInteger64},
     590,
     kForever},
}};

// Ids that meant the same in every header that defines them: asked of every
// driver, even one whose branch is unknown.
constexpr std::array<NvmlFieldDef, 52> kStable = {{
    {nvml::kFieldClocksEventSwPowerCapNs, "clocks_event_reason_sw_power_cap", K::kInteger64},
    {nvml::kFieldClocksEventSyncBoostNs, "clocks_event_reason_sync_boost", K::kInteger64},
    {nvml::kFieldMemoryTemp, "memory_temp", K::kNumber},
    {nvml::kFieldNvlinkLinkCount, "nvlink_link_count", K::kInteger},
    {nvml::kFieldNvlinkThroughputDataTx, "nvlink_throughput_data_tx", K::kInteger},
    {nvml::kFieldNvlinkThroughputDataRx, "nvlink_throughput_data_rx", K::kInteger},
    {nvml::kFieldNvlinkSpeedMBps, "nvlink_get_speed", K::kInteger},
    {nvml::kFieldC2cLinkCount, "c2c_link_count", K::kInteger},
    {nvml::kFieldC2cLinkStatus, "c2c_link_get_status", K::kInteger},
    {nvml::kFieldC2cLinkMaxBw, "c2c_link_get_max_bw", K::kInteger},
    {nvml::kFieldPcieCountTxBytes, "pcie_count_tx_bytes", K::kInteger64},
    {nvml::kFieldPcieCountRxBytes, "pcie_count_rx_bytes", K::kInteger64},
    {nvml::kFieldNvlinkCountXmitBytes, "nvlink_count_xmit_bytes", K::kInteger64},
    {nvml::kFieldNvlinkCountRcvBytes, "nvlink_count_rcv_bytes", K::kInteger64},
    {nvml::kFieldNvlinkCountMalformedPacketErrors, "nvlink_count_malformed_packet_errors",
     K::kInteger},
    {nvml::kFieldNvlinkCountBufferOverrunErrors, "nvlink_count_buffer_overrun_errors", K::kInteger},
    {nvml::kFieldNvlinkCountRcvErrors, "nvlink_count_rcv_errors", K::kInteger},
    {nvml::kFieldNvlinkCountRcvRemoteErrors, "nvlink_count_rcv_remote_errors", K::kInteger},
    {nvml::kFieldNvlinkCountRcvGeneralErrors, "nvlink_count_rcv_general_errors", K::kInteger},
    {nvml::kFieldNvlinkCountLocalLinkIntegrityErrors, "nvlink_count_local_link_integrity_errors",
     K::kInteger},
    {nvml::kFieldNvlinkCountXmitDiscards, "nvlink_count_xmit_discards", K::kInteger},
    {nvml::kFieldNvlinkCountLinkRecoveryFailedEvents, "nvlink_count_link_recovery_failed_events",
     K::kInteger},
    {nvml::kFieldNvlinkCountLinkRecoveryEvents, "nvlink_count_link_recovery_events", K::kInteger},
    {nvml::kFieldNvlinkCountEffectiveErrors, "nvlink_count_effective_errors", K::kInteger},
    {nvml::kFieldNvlinkCountSymbolErrors, "nvlink_count_symbol_errors", K::kInteger},
    {nvml::kFieldGpuRecoveryAction, "get_gpu_recovery_action", K::kInteger},
    {nvml::kFieldC2cLinkErrorIntr, "c2c_link_error_intr", K::kInteger},
    {nvml::kFieldC2cLinkErrorReplay, "c2c_link_error_replay", K::kInteger},
    {nvml::kFieldC2cLinkErrorReplayB2b, "c2c_link_error_replay_b2b", K::kInteger},
    {nvml::kFieldC2cLinkPowerState, "c2c_link_power_state", K::kInteger},
    {nvml::kFieldNvlinkCountEffectiveBer, "nvlink_count_effective_ber", K::kInteger},
    {nvml::kFieldNvlinkCountSymbolBer, "nvlink_count_symbol_ber", K::kInteger},
    {nvml::kFieldNvlinkCountFecHistory0 + 0, "nvlink_count_fec_history_0", K::kInteger},
    {nvml::kFieldNvlinkCountFecHistory0 + 1, "nvlink_count_fec_history_1", K::kInteger},
    {nvml::kFieldNvlinkCountFecHistory0 + 2, "nvlink_count_fec_history_2", K::kInteger},
    {nvml::kFieldNvlinkCountFecHistory0 + 3, "nvlink_count_fec_history_3", K::kInteger},
    {nvml::kFieldNvlinkCountFecHistory0 + 4, "nvlink_count_fec_history_4", K::kInteger},
    {nvml::kFieldNvlinkCountFecHistory0 + 5, "nvlink_count_fec_history_5", K::kInteger},
    {nvml::kFieldNvlinkCountFecHistory0 + 6, "nvlink_count_fec_history_6", K::kInteger},
    {nvml::kFieldNvlinkCountFecHistory0 + 7, "nvlink_count_fec_history_7", K::kInteger},
    {nvml::kFieldNvlinkCountFecHistory0 + 8, "nvlink_count_fec_history_8", K::kInteger},
    {nvml::kFieldNvlinkCountFecHistory0 + 9, "nvlink_count_fec_history_9", K::kInteger},
    {nvml::kFieldNvlinkCountFecHistory0 + 10, "nvlink_count_fec_history_10", K::kInteger},
    {nvml::kFieldNvlinkCountFecHistory0 + 11, "nvlink_count_fec_history_11", K::kInteger},
    {nvml::kFieldNvlinkCountFecHistory0 + 12, "nvlink_count_fec_history_12", K::kInteger},
    {nvml::kFieldNvlinkCountFecHistory0 + 13, "nvlink_count_fec_history_13", K::kInteger},
    {nvml::kFieldNvlinkCountFecHistory0 + 14, "nvlink_count_fec_history_14", K::kInteger},
    {nvml::kFieldNvlinkCountFecHistory0 + 15, "nvlink_count_fec_history_15", K::kInteger},
    {nvml::kFieldNvlinkCountRawBerV2, "nvlink_count_raw_ber_v2", K::kInteger},
    {nvml::kFieldNvlinkPlrXmitBlocks, "nvlink_plr_xmit_blocks", K::kInteger},
    {nvml::kFieldNvlinkPlrXmitRetryBlocks, "nvlink_plr_xmit_retry_blocks", K::kInteger},
    {nvml::kFieldNvlinkGetDataRate, "nvlink_get_data_rate", K::kInteger},
}};

bool in_range(const Meaning& m, std::optional<unsigned> branch) {
  return branch && *branch >= m.from && *branch < m.until;
}

// The leading decimal number of `s` and what follows it.
std::optional<unsigned> leading_number(std::string_view s, std::string_view* rest) {
  unsigned v = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p == s.data()) return std::nullopt;
  *rest = s.substr(static_cast<std::size_t>(p - s.data()));
  return v;
}

// A plausible branch: every NVIDIA driver since R100 has had a 3-digit
// major version; 4 digits leave room for the future.
bool plausible_branch(unsigned b) {
  return b >= 100 && b < 10000;
}

}  // namespace

std::optional<unsigned> nvml_field_id(NvmlVersionedField field, std::optional<unsigned> branch) {
  for (const Meaning& m : kVersioned)
    if (m.field == field && in_range(m, branch)) return m.def.id;
  return std::nullopt;
}

const NvmlFieldDef* nvml_field_def(unsigned id, std::optional<unsigned> branch) {
  for (const Meaning& m : kVersioned)
    if (m.def.id == id) return in_range(m, branch) ? &m.def : nullptr;
  for (const NvmlFieldDef& d : kStable)
    if (d.id == id) return &d;
  return nullptr;
}

bool nvml_field_type_ok(NvmlFieldKind kind, unsigned value_type) {
  switch (value_type) {
    case nvml::kValueTypeDouble: return kind == NvmlFieldKind::kNumber;
    case nvml::kValueTypeUnsignedLong:
    case nvml::kValueTypeUnsignedLongLong:
    case nvml::kValueTypeSignedLongLong: return true;
    case nvml::kValueTypeUnsignedInt:
    case nvml::kValueTypeSignedInt:
    case nvml::kValueTypeUnsignedShort: return kind != NvmlFieldKind::kInteger64;
    default: return false;
  }
}

std::string nvml_value_type_name(unsigned value_type) {
  switch (value_type) {
    case nvml::kValueTypeDouble: return "double";
    case nvml::kValueTypeUnsignedInt: return "unsigned int";
    case nvml::kValueTypeUnsignedLong: return "unsigned long";
    case nvml::kValueTypeUnsignedLongLong: return "unsigned long long";
    case nvml::kValueTypeSignedLongLong: return "signed long long";
    case nvml::kValueTypeSignedInt: return "signed int";
    case nvml::kValueTypeUnsignedShort: return "unsigned short";
    default: return "value type " + std::to_string(value_type);
  }
}

std::optional<unsigned> nvml_driver_branch(std::string_view nvml_version,
                                           std::string_view driver_version) {
  // "13.590.44.01": CUDA major, branch, then the driver's minor parts.
  std::string_view rest;
  if (auto major = leading_number(nvml_version, &rest);
      major && rest.size() > 1 && rest[0] == '.') {
    std::string_view after;
    if (auto b = leading_number(rest.substr(1), &after);
        b && plausible_branch(*b) && (after.empty() || after[0] == '.'))
      return b;
  }
  if (auto b = leading_number(driver_version, &rest);
      b && plausible_branch(*b) && (rest.empty() || rest[0] == '.'))
    return b;
  return std::nullopt;
}

}  // namespace nodewatch::accelerator
