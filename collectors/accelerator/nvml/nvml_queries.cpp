#include "accelerator/nvml/nvml_queries.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "accelerator/nvml/nvml_fields.hpp"
#include "pcie/pcie_parse.hpp"

namespace nodewatch::accelerator {
namespace {

// Upper bound on NVLink-C2C links asked for (Grace Hopper has 10 lanes in
// one link; this only guards against a nonsense count).
constexpr unsigned kMaxC2cLinks = 16;
// Upper bound on NVLink links asked for: NVML_NVLINK_MAX_LINKS was 18 up to
// NVML 13.2 and is 36 since; this leaves room and guards against nonsense.
constexpr unsigned kMaxNvlinks = 64;

// Thrown inside a query when the device answers GPU_IS_LOST or
// RESET_REQUIRED: what was read of it this cycle is dropped.
struct DeviceGone {
  const char* reason;
};

// Sorts the answers of one device's calls into its sample (see the top of
// nvml_queries.hpp).
class Answers {
 public:
  Answers(const NvmlSession& s, DeviceSample& d) : s_(s), d_(d) {}

  const NvmlApi& api() const { return s_.api(); }
  DeviceSample& sample() { return d_; }

  // True on success; false (the value stays empty) otherwise. `call` names
  // the call in the detail of an error.
  bool ok(nvml::Return rc, const char* call) {
    switch (rc) {
      case nvml::kSuccess: return true;
      case nvml::kErrorNotSupported: return false;
      case nvml::kErrorGpuIsLost: throw DeviceGone{"gpu_lost"};
      case nvml::kErrorResetRequired: throw DeviceGone{"reset_required"};
      default: error(std::string(call) + ": " + s_.error(rc)); return false;
    }
  }

  // The same for one field of nvmlDeviceGetFieldValues, with one
  // difference: INVALID_ARGUMENT there means "a field id this driver does
  // not know" (an older driver asked for a newer field), which is "not
  // supported", not an error to count every cycle.
  bool field_ok(const nvml::FieldValue& f) {
    switch (f.nvml_return) {
      case nvml::kSuccess: return type_ok(f);
      case nvml::kErrorInvalidArgument:
      case nvml::kErrorNotSupported: return false;
      default: {
        const std::string call = "nvmlDeviceGetFieldValues field " + std::to_string(f.field_id) +
                                 " scope " + std::to_string(f.scope_id);
        return ok(f.nvml_return, call.c_str());
      }
    }
  }

  // A field's value, when it answered.
  std::optional<double> field(const nvml::FieldValue& f) {
    if (!field_ok(f)) return std::nullopt;
    return field_value_as_double(f);
  }

  void error(std::string detail) { d_.errors.emplace_back("nvml_error", std::move(detail)); }

  // An answered field holds what its meaning under this driver says
  // (nvml_fields.hpp); else it is counted as "nvml_field_type" and dropped.
  // An id with no meaning under this driver was never asked.
  bool type_ok(const nvml::FieldValue& f) {
    const NvmlFieldDef* def = nvml_field_def(f.field_id, s_.driver_branch());
    if (def != nullptr && nvml_field_type_ok(def->kind, f.value_type) &&
        field_value_as_double(f).has_value())
      return true;
    std::string detail = "field " + std::to_string(f.field_id);
    if (def != nullptr) detail += " (" + std::string(def->name) + ")";
    detail += " answered " + nvml_value_type_name(f.value_type);
    if (def != nullptr)
      detail += def->kind == NvmlFieldKind::kInteger64 ? ", expected a 64-bit integer"
                : def->kind == NvmlFieldKind::kInteger ? ", expected an integer"
                                                       : ", expected a number";
    else
      detail += ", a field not read from driver branch " +
                (s_.driver_branch() ? std::to_string(*s_.driver_branch()) : std::string("?"));
    d_.errors.emplace_back("nvml_field_type", std::move(detail));
    return false;
  }

  const NvmlSession& session() const { return s_; }

 private:
  const NvmlSession& s_;
  DeviceSample& d_;
};

std::string read_string(Answers& a, nvml::DeviceGetStringFn fn, const char* call, nvml::Device dev,
                        unsigned size) {
  if (fn == nullptr) return {};
  std::array<char, 128> buf{};
  if (!a.ok(fn(dev, buf.data(), size), call)) return {};
  return nvml_c_string(buf.data(), size);
}

std::string read_pci_bus_id(Answers& a, nvml::Device dev) {
  const NvmlApi& api = a.api();
  if (api.device_get_pci_info == nullptr) return {};
  nvml::PciInfo pci{};
  if (!a.ok(api.device_get_pci_info(dev, &pci), "nvmlDeviceGetPciInfo")) return {};
  std::string id = api.pci_info_v1 ? nvml_c_string(pci.bus_id_legacy, sizeof pci.bus_id_legacy)
                                   : nvml_c_string(pci.bus_id, sizeof pci.bus_id);
  std::string normalized = normalize_pci_bus_id(id);
  if (!normalized.empty()) return normalized;
  // The numeric fields are in every version of the struct; the function
  // number is not, and NVML only reports function 0.
  std::array<char, 32> buf{};
  std::snprintf(buf.data(), buf.size(), "%04x:%02x:%02x.0", pci.domain, pci.bus, pci.device);
  return buf.data();
}

// Field values in one batched call (one driver round trip instead of one
// per value). The C2C per-link fields need the link count first, so they
// come in a second call, only on devices that have C2C links.
void read_fields(Answers& a, nvml::Device dev, NvmlDeviceMemory& memory) {
  const NvmlApi& api = a.api();
  DeviceSample& d = a.sample();
  if (api.device_get_field_values == nullptr) return;
  // Throttle time: 74 and 76 on every driver; the other three at the ids
  // this driver's branch gives them, and not at all when it gives none.
  const std::optional<unsigned> branch = a.session().driver_branch();
  struct Throttle {
    std::optional<unsigned> field;
    const char* reason;
  };
  const std::array<Throttle, 5> throttle_fields = {{
      {nvml::kFieldClocksEventSwPowerCapNs, "sw_power_cap"},
      {nvml::kFieldClocksEventSyncBoostNs, "sync_boost"},
      {nvml_field_id(NvmlVersionedField::kClocksEventSwThermalNs, branch), "sw_thermal"},
      {nvml_field_id(NvmlVersionedField::kClocksEventHwThermalNs, branch), "hw_thermal"},
      {nvml_field_id(NvmlVersionedField::kClocksEventHwPowerBrakeNs, branch), "hw_power_brake"},
  }};
  std::vector<nvml::FieldValue> f;
  auto ask = [&f](unsigned field, unsigned scope = 0) {
    nvml::FieldValue v{};
    v.field_id = field;
    v.scope_id = scope;
    f.push_back(v);
    return f.size() - 1;
  };
  const std::size_t mem_temp = ask(nvml::kFieldMemoryTemp);
  const std::size_t tx = ask(nvml::kFieldPcieCountTxBytes);
  const std::size_t rx = ask(nvml::kFieldPcieCountRxBytes);
  const std::size_t c2c_count = ask(nvml::kFieldC2cLinkCount);
  const std::size_t recovery = ask(nvml::kFieldGpuRecoveryAction);
  std::array<std::optional<std::size_t>, throttle_fields.size()> throttle_at;
  for (std::size_t i = 0; i < throttle_fields.size(); ++i)
    if (throttle_fields[i].field) throttle_at[i] = ask(*throttle_fields[i].field);

  if (!a.ok(api.device_get_field_values(dev, static_cast<int>(f.size()), f.data()),
            "nvmlDeviceGetFieldValues"))
    return;
  if (auto v = a.field(f[mem_temp])) d.temperature_celsius["memory"] = *v;
  // "Value can be wrapped" (NVML): exported as is, a wrap reads as a
  // counter reset.
  if (auto v = a.field(f[tx])) d.host_links["pcie"].tx_bytes = *v;
  if (auto v = a.field(f[rx])) d.host_links["pcie"].rx_bytes = *v;
  for (std::size_t i = 0; i < throttle_fields.size(); ++i) {
    if (!throttle_at[i]) continue;
    if (auto v = a.field(f[*throttle_at[i]]))
      d.clock_throttle_seconds[throttle_fields[i].reason] = *v / 1e9;
  }
  if (auto v = a.field(f[recovery]); v && *v >= 0) d.recovery_action = static_cast<unsigned>(*v);

  const std::optional<double> links_d = a.field(f[c2c_count]);
  if (!links_d) return;
  const unsigned links =
      *links_d > 0 ? static_cast<unsigned>(std::min<double>(*links_d, kMaxC2cLinks)) : 0;
  if (links == 0) return;
  f.clear();
  // Per link: status, speed, CRC errors, replays, back-to-back replays,
  // power state (the last two from NVML 12.9).
  constexpr std::array<unsigned, 6> kPerLink = {
      nvml::kFieldC2cLinkStatus,         nvml::kFieldC2cLinkMaxBw,
      nvml::kFieldC2cLinkErrorIntr,      nvml::kFieldC2cLinkErrorReplay,
      nvml::kFieldC2cLinkErrorReplayB2b, nvml::kFieldC2cLinkPowerState};
  for (unsigned l = 0; l < links; ++l)
    for (unsigned field : kPerLink) ask(field, l);
  if (!a.ok(api.device_get_field_values(dev, static_cast<int>(f.size()), f.data()),
            "nvmlDeviceGetFieldValues"))
    return;
  // A counter that fails this cycle counts with its last good value (one
  // that never answered counts nothing), so that it never drops.
  auto counter = [&](unsigned l, const nvml::FieldValue& v) -> std::optional<double> {
    const std::pair<unsigned, unsigned> key{l, v.field_id};
    if (auto n = a.field(v)) memory.c2c_errors[key] = *n;
    if (auto it = memory.c2c_errors.find(key); it != memory.c2c_errors.end()) return it->second;
    return std::nullopt;
  };
  // Capacity: the speeds of the active links summed (as NCCL's topology
  // sums them), when every active link gave one.
  std::optional<double> capacity_mb = 0.0;
  for (unsigned l = 0; l < links; ++l) {
    const nvml::FieldValue* v = &f[kPerLink.size() * l];
    const std::optional<double> active = a.field(v[0]);
    if (active) d.c2c_link_active[l] = *active != 0;
    if (active && *active != 0 && capacity_mb) {
      const std::optional<double> mb = a.field(v[1]);
      capacity_mb = mb && *mb > 0 ? std::optional(*capacity_mb + *mb) : std::nullopt;
    }
    // Errors: CRC errors plus replays, whichever of the two the driver has.
    std::optional<double> errors;
    for (int k = 2; k <= 3; ++k)
      if (auto n = counter(l, v[k])) errors = errors.value_or(0) + *n;
    if (errors) d.c2c_link_errors[l] = *errors;
    if (auto n = counter(l, v[4])) d.c2c_link_b2b_replays[l] = *n;
    if (auto state = a.field(v[5])) d.c2c_link_low_power[l] = *state != 0;
  }
  if (capacity_mb && *capacity_mb > 0)
    d.host_links["c2c"].capacity_bytes_per_second = *capacity_mb * 1e6;
}

// The device's NVLink link count from field 91; nullopt when the driver
// does not have the field.
std::optional<unsigned> read_nvlink_count(Answers& a, nvml::Device dev) {
  const NvmlApi& api = a.api();
  if (api.device_get_field_values == nullptr) return std::nullopt;
  nvml::FieldValue v{};
  v.field_id = nvml::kFieldNvlinkLinkCount;
  if (!a.ok(api.device_get_field_values(dev, 1, &v), "nvmlDeviceGetFieldValues"))
    return std::nullopt;
  if (auto n = a.field(v))
    return *n > 0 ? static_cast<unsigned>(std::min<double>(*n, kMaxNvlinks)) : 0;
  return std::nullopt;
}

// The device's links and whether each is active, into d.nvlinks, with
// d.nvlink_count. Without a `count`, links are asked for on link 0, 1, ...
// until the driver says there is no such link.
void read_nvlink_states(Answers& a, nvml::Device dev, std::optional<unsigned> count) {
  const NvmlApi& api = a.api();
  DeviceSample& d = a.sample();
  std::vector<NvlinkSample>& links = d.nvlinks;
  for (unsigned l = 0; l < count.value_or(kMaxNvlinks); ++l) {
    unsigned active = 0;
    const nvml::Return rc = api.device_get_nvlink_state(dev, l, &active);
    // Past the last link (or no NVLink at all). With a known count, a link
    // that is not supported (a board that wires only some) is skipped.
    if (rc == nvml::kErrorInvalidArgument || rc == nvml::kErrorNotSupported) {
      if (count) continue;
      break;
    }
    if (!a.ok(rc, "nvmlDeviceGetNvLinkState")) continue;
    NvlinkSample link;
    link.link = l;
    link.active = active == nvml::kFeatureEnabled;
    links.push_back(std::move(link));
  }
  if (count)
    d.nvlink_count = *count;
  else if (!links.empty())
    d.nvlink_count = static_cast<unsigned>(links.size());
}

// Error counters up to Hopper, one call each. A driver that answers
// NOT_SUPPORTED for every counter of the first link (Blackwell) is not
// asked about the other links.
void read_nvlink_error_counters(Answers& a, nvml::Device dev, NvmlDeviceMemory& memory) {
  const NvmlApi& api = a.api();
  if (api.device_get_nvlink_error_counter == nullptr) return;
  struct Counter {
    unsigned id;
    const char* type;
  };
  static constexpr std::array<Counter, 5> kCounters = {{
      {nvml::kNvlinkErrorDlCrcFlit, "crc_flit"},
      {nvml::kNvlinkErrorDlCrcData, "crc_data"},
      {nvml::kNvlinkErrorDlReplay, "replay"},
      {nvml::kNvlinkErrorDlRecovery, "recovery"},
      {nvml::kNvlinkErrorDlEccData, "ecc"},
  }};
  for (NvlinkSample& link : a.sample().nvlinks) {
    bool any = false;
    for (const Counter& c : kCounters) {
      unsigned long long v = 0;
      const nvml::Return rc = api.device_get_nvlink_error_counter(dev, link.link, c.id, &v);
      if (rc != nvml::kErrorNotSupported) any = true;
      if (a.ok(rc, "nvmlDeviceGetNvLinkErrorCounter")) {
        link.errors[c.type] = static_cast<double>(v);
        memory.nvlink_legacy_errors = true;
      }
    }
    if (!any) break;
  }
}

// The per-link fields asked in one batched call, in the order of the
// answers that sort_nvlink_fields() reads.
struct NvlinkField {
  unsigned id;
  const char* error_type;  // null: not an error counter
};
constexpr std::array<NvlinkField, 16> kNvlinkFields = {{
    {nvml::kFieldNvlinkSpeedMBps, nullptr},
    {nvml::kFieldNvlinkThroughputDataTx, nullptr},
    {nvml::kFieldNvlinkThroughputDataRx, nullptr},
    {nvml::kFieldNvlinkCountXmitBytes, nullptr},
    {nvml::kFieldNvlinkCountRcvBytes, nullptr},
    {nvml::kFieldNvlinkCountSymbolErrors, "symbol"},
    {nvml::kFieldNvlinkCountEffectiveErrors, "effective"},
    {nvml::kFieldNvlinkCountLinkRecoveryEvents, "recovery"},
    {nvml::kFieldNvlinkCountLinkRecoveryFailedEvents, "recovery_failed"},
    {nvml::kFieldNvlinkCountMalformedPacketErrors, "malformed_packet"},
    {nvml::kFieldNvlinkCountBufferOverrunErrors, "buffer_overrun"},
    {nvml::kFieldNvlinkCountRcvErrors, "receive"},
    {nvml::kFieldNvlinkCountRcvRemoteErrors, "receive_remote"},
    {nvml::kFieldNvlinkCountRcvGeneralErrors, "receive_general"},
    {nvml::kFieldNvlinkCountLocalLinkIntegrityErrors, "local_link_integrity"},
    {nvml::kFieldNvlinkCountXmitDiscards, "transmit_discard"},
}};

// One link's answers to kNvlinkFields (`v`, in that order) into `link`.
void sort_nvlink_fields(Answers& a, const nvml::FieldValue* v, NvlinkSample& link,
                        NvmlDeviceMemory& memory) {
  using Source = NvmlDeviceMemory::BytesSource;
  // NVML's "MBps": megabytes (10^6) per second [inferred; check on hardware].
  if (auto mbps = a.field(v[0])) link.speed_bytes_per_second = *mbps * 1e6;
  // NVLink5's byte counters where the driver has them, else the data
  // throughput counters, in KiB; the first that answered stays the source.
  Source& source = memory.nvlink_bytes_source[link.link];
  if (source != Source::kKibThroughput) {
    auto tx = a.field(v[3]);
    auto rx = a.field(v[4]);
    if (tx || rx) source = Source::kNvlink5Bytes;
    if (tx) link.tx_bytes = *tx;
    if (rx) link.rx_bytes = *rx;
  }
  if (source != Source::kNvlink5Bytes) {
    auto tx_kib = a.field(v[1]);
    auto rx_kib = a.field(v[2]);
    if (tx_kib || rx_kib) source = Source::kKibThroughput;
    if (tx_kib) link.tx_bytes = *tx_kib * 1024;
    if (rx_kib) link.rx_bytes = *rx_kib * 1024;
  }
  for (std::size_t k = 5; k < kNvlinkFields.size(); ++k) {
    // The per-counter call's "recovery" (DL recovery), once it has
    // answered, is never replaced by the NVLink5 field (all recovery
    // events): two counters under one series would read as resets.
    if (memory.nvlink_legacy_errors && std::string_view(kNvlinkFields[k].error_type) == "recovery")
      continue;
    if (auto e = a.field(v[k])) link.errors.emplace(kNvlinkFields[k].error_type, *e);
  }
}

// NVLink5 link quality, asked with kNvlinkFields of each link, each only
// until the driver shows it does not have it (nvlink_fields_absent).
struct NvlinkQualityField {
  unsigned id;
  enum class Kind { kBer, kFec, kPlr, kDataRate } kind;
  const char* name;  // kBer: the kind of rate; kPlr: the counter
  unsigned bin;      // kFec
};
constexpr std::array<NvlinkQualityField, 22> kNvlinkQualityFields = [] {
  using K = NvlinkQualityField::Kind;
  std::array<NvlinkQualityField, 22> out{{
      {nvml::kFieldNvlinkCountEffectiveBer, K::kBer, "effective", 0},
      {nvml::kFieldNvlinkCountSymbolBer, K::kBer, "symbol", 0},
      {nvml::kFieldNvlinkCountRawBerV2, K::kBer, "raw", 0},
      {nvml::kFieldNvlinkPlrXmitBlocks, K::kPlr, "xmit_blocks", 0},
      {nvml::kFieldNvlinkPlrXmitRetryBlocks, K::kPlr, "xmit_retry_blocks", 0},
      {nvml::kFieldNvlinkGetDataRate, K::kDataRate, nullptr, 0},
  }};
  for (unsigned b = 0; b < nvml::kNvlinkFecHistoryBins; ++b)
    out[6 + b] = {nvml::kFieldNvlinkCountFecHistory0 + b, K::kFec, nullptr, b};
  return out;
}();

// One link's answer to a quality field into `link`.
void sort_nvlink_quality(Answers& a, const NvlinkQualityField& q, const nvml::FieldValue& f,
                         NvlinkSample& link) {
  using K = NvlinkQualityField::Kind;
  auto v = a.field(f);
  if (!v) return;
  switch (q.kind) {
    case K::kBer:
      link.bit_error_rate[q.name] = nvml_nvlink_ber(f.value_type == nvml::kValueTypeUnsignedLongLong
                                                        ? f.value.ull_val
                                                        : static_cast<unsigned long long>(*v));
      break;
    case K::kFec: link.fec_history[q.bin] = *v; break;
    case K::kPlr: link.plr[q.name] = *v; break;
    case K::kDataRate:
      // A link down or not trained has no rate (0) nor speed: nothing to
      // say, not an error.
      if (!link.active || *v <= 0 || !link.speed_bytes_per_second ||
          *link.speed_bytes_per_second <= 0)
        break;
      if (auto bytes = nvml_nvlink_data_rate_bytes(*v, link.speed_bytes_per_second))
        link.data_rate_bytes_per_second = *bytes;
      else
        a.error("field " + std::to_string(f.field_id) + " (nvlink_get_data_rate) link " +
                std::to_string(link.link) + ": " + std::to_string(*v) +
                " is in no unit that puts it below the link's speed");
      break;
  }
}

// Everything else of every link in one batched call.
void read_nvlink_fields(Answers& a, nvml::Device dev, NvmlDeviceMemory& memory) {
  const NvmlApi& api = a.api();
  if (api.device_get_field_values == nullptr) return;
  std::vector<NvlinkSample>& links = a.sample().nvlinks;
  std::vector<const NvlinkQualityField*> quality;
  for (const NvlinkQualityField& q : kNvlinkQualityFields)
    if (!memory.nvlink_fields_absent.contains(q.id)) quality.push_back(&q);
  const std::size_t per_link = kNvlinkFields.size() + quality.size();
  std::vector<nvml::FieldValue> f(links.size() * per_link);
  for (std::size_t i = 0; i < links.size(); ++i) {
    nvml::FieldValue* row = &f[i * per_link];
    for (std::size_t k = 0; k < per_link; ++k) {
      row[k].field_id =
          k < kNvlinkFields.size() ? kNvlinkFields[k].id : quality[k - kNvlinkFields.size()]->id;
      row[k].scope_id = links[i].link;
    }
  }
  if (!a.ok(api.device_get_field_values(dev, static_cast<int>(f.size()), f.data()),
            "nvmlDeviceGetFieldValues"))
    return;
  const bool any_active =
      std::any_of(links.begin(), links.end(), [](const NvlinkSample& l) { return l.active; });
  for (std::size_t i = 0; i < links.size(); ++i) {
    const nvml::FieldValue* row = &f[i * per_link];
    sort_nvlink_fields(a, row, links[i], memory);
    for (std::size_t q = 0; q < quality.size(); ++q)
      sort_nvlink_quality(a, *quality[q], row[kNvlinkFields.size() + q], links[i]);
  }
  // A field no link has: the driver does not know it, or the device does
  // not have it; never asked again.
  for (std::size_t q = 0; q < quality.size() && !links.empty(); ++q) {
    bool unknown = true, unsupported = true;
    for (std::size_t i = 0; i < links.size(); ++i) {
      const nvml::Return rc = f[i * per_link + kNvlinkFields.size() + q].nvml_return;
      unknown = unknown && rc == nvml::kErrorInvalidArgument;
      unsupported = unsupported && rc == nvml::kErrorNotSupported;
    }
    if (unknown || (unsupported && any_active)) memory.nvlink_fields_absent.insert(quality[q]->id);
  }
}

// The PRM counters of every link in one call (NVML 13.1 on), where the
// driver has the call and the device answers it.
struct PrmCounterDef {
  unsigned id;
  enum class Kind { kError, kPlr, kTransmitWait } kind;
  const char* name;
};
constexpr std::array<PrmCounterDef, 9> kPrmCounters = {{
    {nvml::kPrmLinkDownEvents, PrmCounterDef::Kind::kError, "link_down"},
    {nvml::kPrmPortXmitWait, PrmCounterDef::Kind::kTransmitWait, nullptr},
    {nvml::kPrmPlrRcvCodes, PrmCounterDef::Kind::kPlr, "rcv_codes"},
    {nvml::kPrmPlrRcvCodeErr, PrmCounterDef::Kind::kPlr, "rcv_code_errors"},
    {nvml::kPrmPlrRcvUncorrectableCode, PrmCounterDef::Kind::kPlr, "rcv_uncorrectable_codes"},
    {nvml::kPrmPlrXmitCodes, PrmCounterDef::Kind::kPlr, "xmit_codes"},
    {nvml::kPrmPlrXmitRetryCodes, PrmCounterDef::Kind::kPlr, "xmit_retry_codes"},
    {nvml::kPrmPlrXmitRetryEvents, PrmCounterDef::Kind::kPlr, "xmit_retry_events"},
    {nvml::kPrmPlrSyncEvents, PrmCounterDef::Kind::kPlr, "sync_events"},
}};

void read_nvlink_prm(Answers& a, nvml::Device dev, NvmlDeviceMemory& memory) {
  const NvmlApi& api = a.api();
  if (api.device_read_prm_counters == nullptr || memory.prm_absent) return;
  std::vector<NvlinkSample>& links = a.sample().nvlinks;
  std::vector<nvml::PrmCounter> c;
  for (const NvlinkSample& l : links) {
    if (!l.active) continue;  // a port that is down has no counters to read
    for (const PrmCounterDef& def : kPrmCounters) {
      nvml::PrmCounter one{};
      one.counter_id = def.id;
      one.local_port = nvml_prm_local_port(l.link);
      c.push_back(one);
    }
  }
  if (c.empty()) return;
  nvml::PrmCounterList list{static_cast<unsigned>(c.size()), c.data()};
  const nvml::Return rc = api.device_read_prm_counters(dev, &list);
  if (rc == nvml::kErrorNotSupported || rc == nvml::kErrorFunctionNotFound) {
    memory.prm_absent = true;
    return;
  }
  if (rc == nvml::kErrorNoPermission) {
    // The driver keeps the PRM registers to a privileged caller: said once
    // (counted in this collection), not asked again.
    memory.prm_absent = true;
    a.error("nvmlDeviceReadPRMCounters_v1: " + a.session().error(rc) +
            " (the PRM counters need privileges nodewatchd does not have; not asked again)");
    return;
  }
  if (!a.ok(rc, "nvmlDeviceReadPRMCounters_v1")) return;
  std::size_t k = 0;
  for (NvlinkSample& l : links) {
    if (!l.active) continue;
    for (const PrmCounterDef& def : kPrmCounters) {
      const nvml::PrmCounter& one = c[k++];
      if (one.status == nvml::kErrorNotSupported) continue;
      if (!a.ok(one.status, "nvmlDeviceReadPRMCounters_v1 counter")) continue;
      nvml::FieldValue as_field{};
      as_field.value_type = one.output_type;
      as_field.value = one.output_value;
      auto v = field_value_as_double(as_field);
      if (!v || one.output_type == nvml::kValueTypeDouble) {
        a.error("nvmlDeviceReadPRMCounters_v1 counter " + std::to_string(def.id) + " answered " +
                nvml_value_type_name(one.output_type) + ", expected an integer");
        continue;
      }
      switch (def.kind) {
        case PrmCounterDef::Kind::kError: l.errors[def.name] = *v; break;
        case PrmCounterDef::Kind::kPlr: l.plr[def.name] = *v; break;
        case PrmCounterDef::Kind::kTransmitWait: l.transmit_wait_ticks = *v; break;
      }
    }
  }
}

// Peer-to-peer over NVLink with every other device, asked when the active
// link count changed since the last answer, and otherwise every
// kP2pRecheck (a peer's links or the fabric may change it too): asking it
// each collection would cost n-1 calls per device, and a call on a peer
// that hangs. Kept in between.
constexpr auto kP2pRecheck = std::chrono::minutes(5);

void read_nvlink_p2p(Answers& a, nvml::Device dev, unsigned index, NvmlDeviceMemory& memory) {
  const NvmlApi& api = a.api();
  if (api.device_get_p2p_status == nullptr) return;
  const std::vector<NvlinkSample>& links = a.sample().nvlinks;
  const auto active = static_cast<std::size_t>(
      std::count_if(links.begin(), links.end(), [](const NvlinkSample& l) { return l.active; }));
  const auto now = std::chrono::steady_clock::now();
  if (memory.p2p_asked_active != active || now - memory.p2p_asked_at >= kP2pRecheck) {
    bool whole = true;
    std::map<unsigned, bool> answers;
    for (unsigned peer = 0; peer < a.session().device_count(); ++peer) {
      if (peer == index) continue;
      nvml::Device other = nullptr;
      unsigned status = 0;
      nvml::Return rc = api.device_get_handle_by_index(peer, &other);
      if (rc == nvml::kSuccess)
        rc = api.device_get_p2p_status(dev, other, nvml::kP2pCapsIndexNvlink, &status);
      if (rc == nvml::kErrorNotSupported) continue;  // the driver cannot say for this pair
      if (rc != nvml::kSuccess) {
        // A peer lost or failing: its last answer stays, asked again next time.
        if (rc != nvml::kErrorGpuIsLost && rc != nvml::kErrorResetRequired)
          a.error("nvmlDeviceGetP2PStatus " + std::to_string(index) + "-" + std::to_string(peer) +
                  ": " + a.session().error(rc));
        if (auto it = memory.p2p_nvlink.find(peer); it != memory.p2p_nvlink.end())
          answers.insert(*it);
        whole = false;
        continue;
      }
      answers[peer] = status == nvml::kP2pStatusOk;
    }
    memory.p2p_nvlink = std::move(answers);  // peers past the count are gone
    if (whole) {
      memory.p2p_asked_active = active;
      memory.p2p_asked_at = now;
    }
  }
  a.sample().nvlink_p2p = memory.p2p_nvlink;
}

// The NVLink links of one device. The number of links is discovered, never
// assumed: field 91 where the driver has it, else nvmlDeviceGetNvLinkState
// on link 0, 1, ... until the driver says there is no such link.
void read_nvlinks(Answers& a, nvml::Device dev, unsigned index, NvmlDeviceMemory& memory) {
  if (a.api().device_get_nvlink_state == nullptr) return;
  read_nvlink_states(a, dev, read_nvlink_count(a, dev));
  if (a.sample().nvlinks.empty()) return;
  read_nvlink_error_counters(a, dev, memory);
  read_nvlink_fields(a, dev, memory);
  read_nvlink_prm(a, dev, memory);
  read_nvlink_p2p(a, dev, index, memory);
}

// The accelerator collector's questions, after the identity.
// NVLink fabric registration and health, through the versioned call: v3
// (NVML 13.0 on) first, v2 for a driver that answers it with
// ARGUMENT_VERSION_MISMATCH (remembered for the device).
void read_fabric(Answers& a, nvml::Device dev, NvmlDeviceMemory& memory) {
  const NvmlApi& api = a.api();
  if (api.device_get_gpu_fabric_info_v == nullptr) return;
  nvml::GpuFabricInfoV3 info{};
  info.version = memory.fabric_v2 ? nvml::kGpuFabricInfoV2Version : nvml::kGpuFabricInfoV3Version;
  nvml::Return rc = api.device_get_gpu_fabric_info_v(dev, &info);
  if (rc == nvml::kErrorArgumentVersionMismatch && !memory.fabric_v2) {
    memory.fabric_v2 = true;
    info = {};
    info.version = nvml::kGpuFabricInfoV2Version;
    rc = api.device_get_gpu_fabric_info_v(dev, &info);
  }
  if (rc == nvml::kErrorNotSupported || rc == nvml::kErrorFunctionNotFound) return;
  if (!a.ok(rc, "nvmlDeviceGetGpuFabricInfoV")) return;
  a.sample().fabric = fabric_sample(info, !memory.fabric_v2);
}

// The compute processes of one device handle (a GPU or a MIG device), at
// most kMaxProcesses; nullopt when the driver cannot say.
constexpr unsigned kMaxProcesses = 4096;

// Drivers 535.43 to 535.86 shipped a `_v3` that fills a 32-byte struct
// (usedGpuCcProtectedMemory after the instance ids); 535.98 dropped the
// symbol and 535.104 brought it back with the 24-byte one. On those, `_v2`
// is asked. Whatever the driver, each slot has room for 32 bytes, so that
// a struct larger than expected can never write past the array.
bool v3_is_wide(const std::string& driver_version) {
  unsigned major = 0, minor = 0;
  return std::sscanf(driver_version.c_str(), "%u.%u", &major, &minor) == 2 && major == 535 &&
         minor >= 43 && minor < 104;
}
constexpr std::size_t kSlotBytes = 32;

std::optional<std::vector<DeviceProcess>> read_process_list(Answers& a, nvml::Device dev,
                                                            std::optional<unsigned> instance) {
  const NvmlApi& api = a.api();
  nvml::DeviceGetProcessesFn fn = api.device_get_compute_running_processes;
  const char* call = api.processes_v1 ? "nvmlDeviceGetComputeRunningProcesses"
                                      : "nvmlDeviceGetComputeRunningProcesses_v3";
  if (!api.processes_v1 && api.device_get_compute_running_processes_v2 != nullptr &&
      v3_is_wide(a.session().driver_version())) {
    fn = api.device_get_compute_running_processes_v2;
    call = "nvmlDeviceGetComputeRunningProcesses_v2";
  }
  // The array, as raw 8-byte-aligned storage holding either struct.
  const std::size_t entry =
      api.processes_v1 ? sizeof(nvml::ProcessInfoV1) : sizeof(nvml::ProcessInfo);
  unsigned capacity = 64;
  std::vector<unsigned long long> storage;
  unsigned count = 0;
  nvml::Return rc = nvml::kSuccess;
  // A process may start between the two calls: asked again, at most twice.
  for (int attempt = 0; attempt < 3; ++attempt) {
    storage.assign(capacity * kSlotBytes / 8, 0);
    count = capacity;
    rc = fn(dev, &count, storage.data());
    if (rc != nvml::kErrorInsufficientSize || count <= capacity || capacity >= kMaxProcesses) break;
    capacity = std::min(kMaxProcesses, count + 16);
  }
  if (rc == nvml::kErrorInsufficientSize) {
    a.error(std::string(call) + ": more than " + std::to_string(kMaxProcesses) + " processes");
    return std::nullopt;
  }
  if (!a.ok(rc, call)) return std::nullopt;
  count = std::min(count, capacity);
  std::vector<DeviceProcess> out;
  out.reserve(count);
  const auto* bytes = reinterpret_cast<const unsigned char*>(storage.data());
  for (unsigned k = 0; k < count; ++k) {
    DeviceProcess p;
    unsigned long long memory = nvml::kValueNotAvailable;
    unsigned gi = nvml::kInstanceIdNone;
    if (api.processes_v1) {
      nvml::ProcessInfoV1 info{};
      std::memcpy(&info, bytes + k * entry, sizeof info);
      p.pid = info.pid;
      memory = info.used_gpu_memory;
    } else {
      nvml::ProcessInfo info{};
      std::memcpy(&info, bytes + k * entry, sizeof info);
      p.pid = info.pid;
      memory = info.used_gpu_memory;
      gi = info.gpu_instance_id;
    }
    if (p.pid == 0) continue;
    if (memory != nvml::kValueNotAvailable) p.memory_used_bytes = static_cast<double>(memory);
    if (instance)
      p.gpu_instance = instance;
    else if (gi != nvml::kInstanceIdNone)
      p.gpu_instance = gi;
    out.push_back(p);
  }
  return out;
}

// The device's compute processes: of the GPU, or, in MIG mode, of each MIG
// device (the GPU's own list needs a privilege the daemon does not have
// then), with each MIG device's UUID.
void read_processes(Answers& a, nvml::Device dev) {
  const NvmlApi& api = a.api();
  DeviceSample& d = a.sample();
  if (api.device_get_compute_running_processes == nullptr) return;
  unsigned current = 0, pending = 0;
  const bool mig = api.device_get_mig_mode != nullptr &&
                   api.device_get_max_mig_device_count != nullptr &&
                   api.device_get_mig_device_handle_by_index != nullptr &&
                   api.device_get_gpu_instance_id != nullptr &&
                   api.device_get_mig_mode(dev, &current, &pending) == nvml::kSuccess &&
                   current == nvml::kDeviceMigEnable;
  if (!mig) {
    d.processes = read_process_list(a, dev, std::nullopt);
    return;
  }
  unsigned max = 0;
  if (!a.ok(api.device_get_max_mig_device_count(dev, &max), "nvmlDeviceGetMaxMigDeviceCount"))
    return;
  std::vector<DeviceProcess> all;
  bool any = false;
  for (unsigned i = 0; i < std::min(max, 16u); ++i) {
    nvml::Device m = nullptr;
    const nvml::Return h = api.device_get_mig_device_handle_by_index(dev, i, &m);
    if (h == nvml::kErrorNotFound) continue;  // an empty slot
    if (!a.ok(h, "nvmlDeviceGetMigDeviceHandleByIndex")) continue;
    unsigned gi = 0;
    if (!a.ok(api.device_get_gpu_instance_id(m, &gi), "nvmlDeviceGetGpuInstanceId")) continue;
    const std::string uuid =
        read_string(a, api.device_get_uuid, "nvmlDeviceGetUUID", m, nvml::kUuidBufferSize);
    if (!uuid.empty()) d.mig_instances[uuid] = gi;
    if (auto ps = read_process_list(a, m, gi)) {
      any = true;
      all.insert(all.end(), ps->begin(), ps->end());
    }
  }
  if (any) d.processes = std::move(all);
}

// Whether a newer call that exists answered so that the older one is to
// be asked instead: NOT_SUPPORTED or ARGUMENT_VERSION_MISMATCH.
bool falls_back(nvml::Return rc) {
  return rc == nvml::kErrorNotSupported || rc == nvml::kErrorArgumentVersionMismatch;
}

void read_utilization(Answers& a, nvml::Device dev) {
  const NvmlApi& api = a.api();
  DeviceSample& d = a.sample();
  if (api.device_get_utilization_rates == nullptr) return;
  nvml::Utilization u{};
  if (a.ok(api.device_get_utilization_rates(dev, &u), "nvmlDeviceGetUtilizationRates")) {
    d.utilization_ratio = u.gpu / 100.0;
    d.memory_utilization_ratio = u.memory / 100.0;
  }
}

// v2 reports the driver's reserved memory apart from `used` (what
// nvidia-smi shows as used); v1's `used` includes it.
void read_memory_usage(Answers& a, nvml::Device dev) {
  const NvmlApi& api = a.api();
  DeviceSample& d = a.sample();
  bool memory_asked = false;
  if (api.device_get_memory_info_v2 != nullptr) {
    nvml::MemoryV2 m{};
    m.version = nvml::kMemoryV2Version;
    const nvml::Return rc = api.device_get_memory_info_v2(dev, &m);
    memory_asked = !falls_back(rc);
    if (memory_asked && a.ok(rc, "nvmlDeviceGetMemoryInfo_v2")) {
      d.memory_used_bytes = static_cast<double>(m.used);
      d.memory_total_bytes = static_cast<double>(m.total);
    }
  }
  if (!memory_asked && api.device_get_memory_info != nullptr) {
    nvml::Memory m{};
    if (a.ok(api.device_get_memory_info(dev, &m), "nvmlDeviceGetMemoryInfo")) {
      d.memory_used_bytes = static_cast<double>(m.used);
      d.memory_total_bytes = static_cast<double>(m.total);
    }
  }
}

// The GPU's temperature and its slowdown threshold.
void read_temperatures(Answers& a, nvml::Device dev) {
  const NvmlApi& api = a.api();
  DeviceSample& d = a.sample();
  bool temperature_asked = false;
  if (api.device_get_temperature_v != nullptr) {
    nvml::TemperatureV1 t{};
    t.version = nvml::kTemperatureV1Version;
    t.sensor_type = nvml::kTemperatureGpu;
    const nvml::Return rc = api.device_get_temperature_v(dev, &t);
    temperature_asked = !falls_back(rc);
    if (temperature_asked && a.ok(rc, "nvmlDeviceGetTemperatureV"))
      d.temperature_celsius["gpu"] = t.temperature;
  }
  if (!temperature_asked && api.device_get_temperature != nullptr) {
    unsigned t = 0;
    if (a.ok(api.device_get_temperature(dev, nvml::kTemperatureGpu, &t),
             "nvmlDeviceGetTemperature"))
      d.temperature_celsius["gpu"] = t;
  }
  if (api.device_get_temperature_threshold != nullptr) {
    unsigned t = 0;
    if (a.ok(api.device_get_temperature_threshold(dev, nvml::kTemperatureThresholdSlowdown, &t),
             "nvmlDeviceGetTemperatureThreshold"))
      d.temperature_slowdown_celsius = t;
  }
  // The driver's own margin, to the nearest of the thresholds it knows
  // (memory's too, which the GPU's slowdown does not cover).
  if (api.device_get_margin_temperature != nullptr) {
    nvml::MarginTemperatureV1 m{};
    m.version = nvml::kMarginTemperatureV1Version;
    if (a.ok(api.device_get_margin_temperature(dev, &m), "nvmlDeviceGetMarginTemperature"))
      d.thermal_margin_celsius = m.margin;
  }
}

// Power draw, the enforced limit and the energy counter.
void read_power(Answers& a, nvml::Device dev) {
  const NvmlApi& api = a.api();
  DeviceSample& d = a.sample();
  if (api.device_get_power_usage != nullptr) {
    unsigned mw = 0;
    if (a.ok(api.device_get_power_usage(dev, &mw), "nvmlDeviceGetPowerUsage"))
      d.power_watts = mw / 1000.0;
  }
  if (api.device_get_enforced_power_limit != nullptr) {
    unsigned mw = 0;
    if (a.ok(api.device_get_enforced_power_limit(dev, &mw), "nvmlDeviceGetEnforcedPowerLimit"))
      d.power_limit_watts = mw / 1000.0;
  }
  if (api.device_get_total_energy_consumption != nullptr) {
    unsigned long long mj = 0;
    if (a.ok(api.device_get_total_energy_consumption(dev, &mj),
             "nvmlDeviceGetTotalEnergyConsumption"))
      d.energy_joules = static_cast<double>(mj) / 1000.0;
  }
}

// The clock speeds, and which clock-event (throttle) reasons are active.
void read_clocks(Answers& a, nvml::Device dev) {
  const NvmlApi& api = a.api();
  DeviceSample& d = a.sample();
  if (api.device_get_clock_info != nullptr) {
    static constexpr std::array<std::pair<unsigned, const char*>, 3> kClocks = {
        {{nvml::kClockSm, "sm"}, {nvml::kClockGraphics, "graphics"}, {nvml::kClockMem, "memory"}}};
    for (const auto& [type, label] : kClocks) {
      unsigned mhz = 0;
      if (a.ok(api.device_get_clock_info(dev, type, &mhz), "nvmlDeviceGetClockInfo"))
        d.clock_hertz[label] = mhz * 1e6;
    }
  }
  if (api.device_get_clocks_event_reasons != nullptr) {
    unsigned long long mask = 0;
    if (a.ok(api.device_get_clocks_event_reasons(dev, &mask),
             "nvmlDeviceGetCurrentClocksEventReasons"))
      for (const NvmlThrottleReason& r : nvml_throttle_reasons())
        d.clock_throttle_active[std::string(r.label)] = (mask & r.bit) != 0;
  }
}

// ECC error counts and row remapping.
void read_memory_errors(Answers& a, nvml::Device dev) {
  const NvmlApi& api = a.api();
  DeviceSample& d = a.sample();
  if (api.device_get_total_ecc_errors != nullptr) {
    unsigned long long n = 0;
    if (a.ok(api.device_get_total_ecc_errors(dev, nvml::kMemoryErrorCorrected,
                                             nvml::kEccCounterVolatile, &n),
             "nvmlDeviceGetTotalEccErrors"))
      d.ecc_corrected = static_cast<double>(n);
    if (a.ok(api.device_get_total_ecc_errors(dev, nvml::kMemoryErrorUncorrected,
                                             nvml::kEccCounterVolatile, &n),
             "nvmlDeviceGetTotalEccErrors"))
      d.ecc_uncorrected = static_cast<double>(n);
  }
  if (api.device_get_remapped_rows != nullptr) {
    unsigned corr = 0, unc = 0, pending = 0, failed = 0;
    if (a.ok(api.device_get_remapped_rows(dev, &corr, &unc, &pending, &failed),
             "nvmlDeviceGetRemappedRows")) {
      d.remapped_rows_correctable = corr;
      d.remapped_rows_uncorrectable = unc;
      d.row_remap_pending = pending != 0;
      d.row_remap_failed = failed != 0;
    }
  }
  if (api.device_get_repair_status != nullptr) {
    nvml::RepairStatusV1 r{};
    r.version = nvml::kRepairStatusV1Version;
    if (a.ok(api.device_get_repair_status(dev, &r), "nvmlDeviceGetRepairStatus")) {
      d.repair_pending["channel"] = r.channel_repair_pending != 0;
      d.repair_pending["tpc"] = r.tpc_repair_pending != 0;
    }
  }
  if (api.device_get_unrepairable_memory_flag != nullptr) {
    nvml::UnrepairableMemoryStatusV1 u{};
    if (a.ok(api.device_get_unrepairable_memory_flag(dev, &u),
             "nvmlDeviceGetUnrepairableMemoryFlag_v1"))
      d.memory_unrepairable = u.unrepairable_memory != 0;
  }
}

// The PCIe link's capacity per direction: lanes times the transfer rate
// of the generation it trained at, less its encoding. An idle GPU may
// train down to save power: the capacity is that of the link now.
void read_pcie_link(Answers& a, nvml::Device dev) {
  const NvmlApi& api = a.api();
  if (api.device_get_curr_pcie_link_generation == nullptr ||
      api.device_get_curr_pcie_link_width == nullptr)
    return;
  unsigned gen = 0, width = 0;
  if (!a.ok(api.device_get_curr_pcie_link_generation(dev, &gen),
            "nvmlDeviceGetCurrPcieLinkGeneration") ||
      !a.ok(api.device_get_curr_pcie_link_width(dev, &width), "nvmlDeviceGetCurrPcieLinkWidth"))
    return;
  const std::optional<double> rate = pcie::generation_transfers_per_second(gen);
  if (!rate || width == 0 || width > pcie::kMaxLinkWidth) return;  // not trained, or unknown
  a.sample().host_links["pcie"].capacity_bytes_per_second =
      width * pcie::lane_bytes_per_second(*rate);
}

void read_pcie_replays(Answers& a, nvml::Device dev) {
  const NvmlApi& api = a.api();
  if (api.device_get_pcie_replay_counter == nullptr) return;
  unsigned n = 0;
  if (a.ok(api.device_get_pcie_replay_counter(dev, &n), "nvmlDeviceGetPcieReplayCounter"))
    a.sample().pcie_replays = n;
}

// nvmlDeviceGetPcieThroughput samples for 20 ms inside the call: only
// when the driver has no cumulative byte counter for that direction (so
// after read_fields()).
void read_pcie_throughput(Answers& a, nvml::Device dev) {
  const NvmlApi& api = a.api();
  DeviceSample& d = a.sample();
  if (api.device_get_pcie_throughput == nullptr) return;
  unsigned kb = 0;
  const auto it = d.host_links.find("pcie");
  const bool tx = it == d.host_links.end() || !it->second.tx_bytes;
  const bool rx = it == d.host_links.end() || !it->second.rx_bytes;
  if (tx && a.ok(api.device_get_pcie_throughput(dev, nvml::kPcieUtilTxBytes, &kb),
                 "nvmlDeviceGetPcieThroughput"))
    d.host_links["pcie"].tx_bytes_per_second = kb * 1024.0;
  if (rx && a.ok(api.device_get_pcie_throughput(dev, nvml::kPcieUtilRxBytes, &kb),
                 "nvmlDeviceGetPcieThroughput"))
    d.host_links["pcie"].rx_bytes_per_second = kb * 1024.0;
}

// The readings of one device, in the order the calls are made (the order
// of its errors).
void read_readings(Answers& a, nvml::Device dev, NvmlDeviceMemory& memory) {
  read_utilization(a, dev);
  read_memory_usage(a, dev);
  read_temperatures(a, dev);
  read_power(a, dev);
  read_clocks(a, dev);
  read_memory_errors(a, dev);
  read_pcie_replays(a, dev);
  read_pcie_link(a, dev);
  read_fields(a, dev, memory);
  read_fabric(a, dev, memory);
  read_processes(a, dev);
  memory.gpm.read(a.session().shared_from_this(), dev, a.sample(),
                  [&a](nvml::Return rc, const char* call) { return a.ok(rc, call); });
  read_pcie_throughput(a, dev);
}

void read_device(const NvmlSession& s, unsigned index, NvmlQuestions questions, NvmlDeviceResult& r,
                 NvmlDeviceMemory& memory,
                 const std::function<void(const DeviceSample&)>& publish_identity) {
  const NvmlApi& api = s.api();
  Answers a(s, r.sample);
  DeviceSample& d = r.sample;
  nvml::Device dev = nullptr;
  r.handle_rc = api.device_get_handle_by_index(index, &dev);
  // Lost or needing a reset: DeviceGone (up 0). Any other error (say
  // NO_PERMISSION for one GPU in a container): no values, but the device is
  // not known to be down, so up stays 1 and the error is counted.
  if (r.handle_rc != nvml::kSuccess) {
    // Even NOT_SUPPORTED is an error here: a device without a handle is not
    // "one value absent".
    if (r.handle_rc == nvml::kErrorNotSupported)
      a.error("nvmlDeviceGetHandleByIndex: " + s.error(r.handle_rc));
    else
      a.ok(r.handle_rc, "nvmlDeviceGetHandleByIndex");  // throws DeviceGone when lost
    return;
  }
  d.uuid = read_string(a, api.device_get_uuid, "nvmlDeviceGetUUID", dev, nvml::kUuidBufferSize);
  d.model = read_string(a, api.device_get_name, "nvmlDeviceGetName", dev, nvml::kNameBufferSize);
  d.serial =
      read_string(a, api.device_get_serial, "nvmlDeviceGetSerial", dev, nvml::kSerialBufferSize);
  d.vbios = read_string(a, api.device_get_vbios_version, "nvmlDeviceGetVbiosVersion", dev,
                        nvml::kVbiosBufferSize);
  d.pci_bus_id = read_pci_bus_id(a, dev);
  if (api.device_get_platform_info != nullptr) {
    nvml::PlatformInfoV2 p{};
    p.version = nvml::kPlatformInfoV2Version;
    if (a.ok(api.device_get_platform_info(dev, &p), "nvmlDeviceGetPlatformInfo")) {
      DeviceSample::Platform where;
      where.chassis_serial =
          nvml_c_string(reinterpret_cast<const char*>(p.chassis_serial), sizeof p.chassis_serial);
      where.slot = p.slot_number;
      where.tray = p.tray_index;
      where.host = p.host_id;
      where.module = p.module_id;
      d.platform = std::move(where);
    }
  }
  publish_identity(d);
  switch (questions) {
    case NvmlQuestions::kDevice: read_readings(a, dev, memory); break;
    case NvmlQuestions::kNvlink: read_nvlinks(a, dev, index, memory); break;
  }
}

}  // namespace

NvmlDeviceResult query_nvml_device(
    const NvmlSession& session, unsigned index, NvmlQuestions questions, NvmlDeviceMemory& memory,
    const std::function<void(const DeviceSample&)>& publish_identity) {
  NvmlDeviceResult r;
  r.sample.index = index;
  try {
    read_device(session, index, questions, r, memory, publish_identity);
  } catch (const DeviceGone& gone) {
    DeviceSample lost;
    lost.index = index;
    copy_identity(r.sample, lost);
    lost.up = false;
    // The NVML service logs a device going down, once for the process.
    lost.errors = {DeviceError(gone.reason, {}, /*logged=*/true)};
    r.sample = std::move(lost);
  }
  return r;
}

void copy_identity(const DeviceSample& from, DeviceSample& to) {
  to.uuid = from.uuid;
  to.model = from.model;
  to.pci_bus_id = from.pci_bus_id;
  to.serial = from.serial;
  to.vbios = from.vbios;
  to.platform = from.platform;
}

void merge_identity(const DeviceSample& from, DeviceSample& to) {
  auto keep = [](const std::string& f, std::string& t) {
    if (!f.empty()) t = f;
  };
  keep(from.uuid, to.uuid);
  keep(from.model, to.model);
  keep(from.pci_bus_id, to.pci_bus_id);
  keep(from.serial, to.serial);
  keep(from.vbios, to.vbios);
  if (from.platform) to.platform = from.platform;
}

std::string normalize_pci_bus_id(std::string_view bus_id) {
  // Splits "[domain:]bus:device.function" and checks each part is hex.
  auto hex = [](std::string_view s, unsigned long long max, unsigned long long* out) {
    if (s.empty() || s.size() > 16) return false;
    unsigned long long v = 0;
    for (char c : s) {
      int digit = (c >= '0' && c <= '9')   ? c - '0'
                  : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                  : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                           : -1;
      if (digit < 0) return false;
      v = v * 16 + static_cast<unsigned>(digit);
    }
    *out = v;
    return v <= max;
  };
  while (!bus_id.empty() && (bus_id.back() == ' ' || bus_id.back() == '\n'))
    bus_id.remove_suffix(1);
  const std::size_t dot = bus_id.rfind('.');
  const std::size_t last_colon = bus_id.rfind(':');
  if (dot == std::string_view::npos || last_colon == std::string_view::npos || dot < last_colon)
    return {};
  const std::size_t first_colon = bus_id.find(':');
  unsigned long long domain = 0, bus = 0, device = 0, function = 0;
  if (first_colon != last_colon && !hex(bus_id.substr(0, first_colon), 0xffffffff, &domain))
    return {};
  const std::size_t bus_start = first_colon == last_colon ? 0 : first_colon + 1;
  if (!hex(bus_id.substr(bus_start, last_colon - bus_start), 0xff, &bus) ||
      !hex(bus_id.substr(last_colon + 1, dot - last_colon - 1), 0x1f, &device) ||
      !hex(bus_id.substr(dot + 1), 0x7, &function))
    return {};
  std::array<char, 32> buf{};
  std::snprintf(buf.data(), buf.size(), "%04llx:%02llx:%02llx.%llx", domain, bus, device, function);
  return buf.data();
}

double nvml_nvlink_ber(unsigned long long raw) {
  const auto mantissa = (raw >> nvml::kNvlinkBerMantissaShift) & nvml::kNvlinkBerMantissaMask;
  const auto exponent = (raw >> nvml::kNvlinkBerExponentShift) & nvml::kNvlinkBerExponentMask;
  return static_cast<double>(mantissa) * std::pow(10.0, -static_cast<double>(exponent));
}

unsigned nvml_prm_local_port(unsigned link) {
  return link + 1;
}

std::optional<double> nvml_nvlink_data_rate_bytes(double value,
                                                  std::optional<double> speed_bytes_per_second) {
  if (!speed_bytes_per_second || *speed_bytes_per_second <= 0 || value <= 0) return std::nullopt;
  // MB/s, as the speed field; KiB/s, as the driver's own per-link rate.
  for (double scale : {1e6, 1024.0}) {
    const double ratio = value * scale / *speed_bytes_per_second;
    if (ratio >= 0.5 && ratio <= 1.0 + 1e-9) return value * scale;
  }
  return std::nullopt;
}

std::optional<double> field_value_as_double(const nvml::FieldValue& v) {
  switch (v.value_type) {
    case nvml::kValueTypeDouble: return v.value.d_val;
    case nvml::kValueTypeUnsignedInt: return v.value.ui_val;
    case nvml::kValueTypeUnsignedLong: return static_cast<double>(v.value.ul_val);
    case nvml::kValueTypeUnsignedLongLong: return static_cast<double>(v.value.ull_val);
    case nvml::kValueTypeSignedLongLong: return static_cast<double>(v.value.sll_val);
    case nvml::kValueTypeSignedInt: return v.value.si_val;
    case nvml::kValueTypeUnsignedShort: return v.value.us_val;
    default: return std::nullopt;
  }
}

std::span<const NvmlThrottleReason> nvml_throttle_reasons() {
  static constexpr std::array<NvmlThrottleReason, 9> kReasons = {{
      {nvml::kClocksEventGpuIdle, "gpu_idle"},
      {nvml::kClocksEventApplicationsClocksSetting, "applications_clocks_setting"},
      {nvml::kClocksEventSwPowerCap, "sw_power_cap"},
      {nvml::kClocksEventHwSlowdown, "hw_slowdown"},
      {nvml::kClocksEventSyncBoost, "sync_boost"},
      {nvml::kClocksEventSwThermalSlowdown, "sw_thermal"},
      {nvml::kClocksEventHwThermalSlowdown, "hw_thermal"},
      {nvml::kClocksEventHwPowerBrakeSlowdown, "hw_power_brake"},
      {nvml::kClocksEventDisplayClockSetting, "display_clock_setting"},
  }};
  return kReasons;
}

FabricSample fabric_sample(const nvml::GpuFabricInfoV3& info, bool has_summary) {
  FabricSample f;
  f.state = info.state;
  if (info.state != nvml::kFabricStateCompleted) return f;
  std::array<char, 16> clique{};
  std::snprintf(clique.data(), clique.size(), "%u", info.clique_id);
  f.clique_id = clique.data();
  std::string uuid;
  for (unsigned k = 0; k < nvml::kGpuFabricUuidLen; ++k) {
    static constexpr char kHex[] = "0123456789abcdef";
    if (k == 4 || k == 6 || k == 8 || k == 10) uuid += '-';
    uuid += kHex[info.cluster_uuid[k] >> 4];
    uuid += kHex[info.cluster_uuid[k] & 0xf];
  }
  f.cluster_uuid = std::move(uuid);
  auto field = [&](unsigned shift, unsigned mask) { return (info.health_mask >> shift) & mask; };
  bool healthy = info.status == nvml::kSuccess;
  struct Fault {
    unsigned shift;
    const char* name;
  };
  for (const Fault& fault :
       {Fault{nvml::kFabricHealthShiftDegradedBw, "degraded_bandwidth"},
        Fault{nvml::kFabricHealthShiftRouteRecovery, "route_recovery"},
        Fault{nvml::kFabricHealthShiftRouteUnhealthy, "route_unhealthy"},
        Fault{nvml::kFabricHealthShiftAccessTimeoutRecovery, "access_timeout_recovery"}}) {
    const unsigned v = field(fault.shift, 0x3);
    if (v == 0) continue;  // not supported by this driver
    f.faults[fault.name] = v == nvml::kFabricHealthTrue;
    if (v == nvml::kFabricHealthTrue) healthy = false;
  }
  const unsigned config = field(nvml::kFabricHealthShiftIncorrectConfiguration,
                                nvml::kFabricHealthIncorrectConfigurationMask);
  if (config != 0) {
    // Every configuration fault is reported on (0) once the field is; a
    // value past the known ones is a fault too, as "incorrect_configuration".
    for (std::size_t k = 0; k < kFabricConfigurationFaults.size(); ++k)
      f.faults[kFabricConfigurationFaults[k]] =
          config == nvml::kFabricHealthIncorrectConfigurationNone + 1 + k;
    if (config > nvml::kFabricHealthIncorrectConfigurationNone + kFabricConfigurationFaults.size())
      f.faults["incorrect_configuration"] = true;
  }
  if (config > nvml::kFabricHealthIncorrectConfigurationNone) healthy = false;
  if (has_summary && info.health_summary != nvml::kFabricHealthSummaryNotSupported) {
    static constexpr std::array<const char*, 3> kSummaries = {"healthy", "unhealthy",
                                                              "limited_capacity"};
    const unsigned s = info.health_summary;
    f.summary = s <= kSummaries.size() ? kSummaries[s - 1] : "unknown";  // a newer driver's
    if (s != nvml::kFabricHealthSummaryHealthy) healthy = false;
  }
  f.healthy = healthy;
  return f;
}

}  // namespace nodewatch::accelerator
