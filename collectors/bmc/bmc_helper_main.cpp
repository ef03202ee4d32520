// nwd-bmc: the BMC's client, in a process of its own (bmc_collector.hpp),
// so that nodewatchd links no libfreeipmi (GPL-3.0-or-later, and libgcrypt
// with it) and a BMC that blocks in the kernel's IPMI driver or on the
// network holds this process, never the daemon.
//
//   nwd-bmc --device /dev/ipmi0 --sdr-cache FILE [--interpret-config FILE] --parent PID
//   nwd-bmc --host ADDRESS:PORT --protocol lan|lanplus --username NAME
//           --password-file FILE --privilege user|operator|admin --sdr-cache FILE ...
//
// Reads requests on standard input and writes one answer per request on
// standard output, as frames (bmc_wire.hpp, nodewatch/helper_process.hpp).
// Keeps its IPMI session (or device) open between requests, and the SDR
// cache, which it fetches again when the repository's addition or erase
// time moves. Started by nodewatchd, never by hand.

#include <freeipmi/freeipmi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>

#include "bmc/bmc_wire.hpp"
#include "nodewatch/helper_process.hpp"

namespace {

using nodewatch::bmc::Reading;
using nodewatch::bmc::Request;
using nodewatch::bmc::SelEvent;
using nodewatch::bmc::Sensor;
using Clock = std::chrono::steady_clock;

constexpr uint16_t kSelFirst = 0x0000;
constexpr uint16_t kSelLast = 0xffff;

struct Config {
  std::string device;  // in-band
  std::string host;    // else over the network
  std::string protocol = "lanplus";
  std::string username;
  std::string password;
  uint8_t privilege = IPMI_PRIVILEGE_LEVEL_USER;
  std::string sdr_cache;
  std::string interpret_config;
};

// One fiid object, destroyed with its scope.
class Obj {
 public:
  explicit Obj(fiid_template_t t) : o_(fiid_obj_create(t)) {}
  ~Obj() { fiid_obj_destroy(o_); }
  Obj(const Obj&) = delete;
  Obj& operator=(const Obj&) = delete;
  fiid_obj_t get() const { return o_; }
  uint64_t field(const char* name) const {
    uint64_t v = 0;
    if (fiid_obj_get(o_, name, &v) < 0) return 0;
    return v;
  }

 private:
  fiid_obj_t o_;
};

std::string state_name(unsigned s) {
  switch (s) {
    case IPMI_INTERPRET_STATE_NOMINAL: return "nominal";
    case IPMI_INTERPRET_STATE_WARNING: return "warning";
    case IPMI_INTERPRET_STATE_CRITICAL: return "critical";
    default: return "unknown";
  }
}

// Why the BMC could not be reached, as the daemon's reason word.
std::string reason_of(int errnum) {
  switch (errnum) {
    case IPMI_ERR_USERNAME_INVALID:
    case IPMI_ERR_PASSWORD_INVALID:
    case IPMI_ERR_K_G_INVALID:
    case IPMI_ERR_PRIVILEGE_LEVEL_INSUFFICIENT:
    case IPMI_ERR_PRIVILEGE_LEVEL_CANNOT_BE_OBTAINED:
    case IPMI_ERR_AUTHENTICATION_TYPE_UNAVAILABLE:
    case IPMI_ERR_CIPHER_SUITE_ID_UNAVAILABLE:
    case IPMI_ERR_IPMI_2_0_UNAVAILABLE: return "bmc_refused";
    case IPMI_ERR_PERMISSION: return "bmc_permission";
    case IPMI_ERR_DEVICE_NOT_FOUND:
    case IPMI_ERR_DEVICE_NOT_SUPPORTED: return "bmc_no_device";
    case IPMI_ERR_CONNECTION_TIMEOUT:
    case IPMI_ERR_SESSION_TIMEOUT:
    case IPMI_ERR_MESSAGE_TIMEOUT:
    case IPMI_ERR_DRIVER_TIMEOUT:
    case IPMI_ERR_PASSWORD_VERIFICATION_TIMEOUT: return "bmc_timeout";
    case IPMI_ERR_BMC_BUSY:
    case IPMI_ERR_DRIVER_BUSY: return "bmc_busy";
    default: return "bmc_error";
  }
}

class Bmc {
 public:
  explicit Bmc(Config c) : c_(std::move(c)) {}
  ~Bmc() { close(); }
  Bmc(const Bmc&) = delete;
  Bmc& operator=(const Bmc&) = delete;

  Reading read(const Request& req) {
    Reading r;
    deadline_ = Clock::now() + req.timeout;
    r.cursor = req.cursor;
    if (ctx_ == nullptr && !open(req, &r)) return r;
    if (!device_id(&r) || !sdr(&r) || !sensors(&r) || !sel(req, &r)) {
      close();
      return r;
    }
    power(&r);
    return r;
  }

 private:
  bool fail(Reading* r, const std::string& what) {
    const int e = ctx_ != nullptr ? ipmi_ctx_errnum(ctx_) : IPMI_ERR_INTERNAL_ERROR;
    r->error_reason = reason_of(e);
    r->error = what + ": " + (ctx_ != nullptr ? ipmi_ctx_errormsg(ctx_) : "no context");
    return false;
  }
  bool late(Reading* r) {
    if (Clock::now() < deadline_) return false;
    r->error_reason = "bmc_timeout";
    r->error = "the BMC did not answer every sensor within the collection's timeout";
    return true;
  }

  bool open(const Request& req, Reading* r) {
    ctx_ = ipmi_ctx_create();
    if (ctx_ == nullptr) return fail(r, "ipmi_ctx_create");
    // The session times out within the collection's timeout: a BMC that
    // stops answering fails this read, not the next one.
    const auto session_ms =
        static_cast<unsigned>(std::max<long long>(1000, req.timeout.count() * 3 / 4));
    const unsigned retransmit_ms = std::max(250u, session_ms / 4);
    int rc = 0;
    if (c_.host.empty()) {
      rc = ipmi_ctx_open_inband(ctx_, IPMI_DEVICE_OPENIPMI, 0, 0, 0, c_.device.c_str(), 0,
                                IPMI_FLAGS_DEFAULT);
    } else if (c_.protocol == "lan") {
      rc =
          ipmi_ctx_open_outofband(ctx_, c_.host.c_str(), c_.username.c_str(), c_.password.c_str(),
                                  IPMI_AUTHENTICATION_TYPE_MD5, c_.privilege, session_ms,
                                  retransmit_ms, IPMI_WORKAROUND_FLAGS_DEFAULT, IPMI_FLAGS_DEFAULT);
    } else {
      // Cipher suite 3 (HMAC-SHA1, HMAC-SHA1-96, AES-CBC-128), FreeIPMI's
      // default. Some BMCs (and OpenIPMI's simulator) refuse a session
      // asked at the user's maximum privilege: ask at the level wanted.
      rc = ipmi_ctx_open_outofband_2_0(
          ctx_, c_.host.c_str(), c_.username.c_str(), c_.password.c_str(), nullptr, 0, c_.privilege,
          3, session_ms, retransmit_ms, IPMI_WORKAROUND_FLAGS_OUTOFBAND_2_0_OPEN_SESSION_PRIVILEGE,
          IPMI_FLAGS_DEFAULT);
    }
    if (rc < 0) {
      fail(r, c_.host.empty() ? "opening " + c_.device : "opening a session with " + c_.host);
      ipmi_ctx_destroy(ctx_);
      ctx_ = nullptr;
      return false;
    }
    return true;
  }

  void close() {
    if (sel_ != nullptr) ipmi_sel_ctx_destroy(sel_);
    if (read_ != nullptr) ipmi_sensor_read_ctx_destroy(read_);
    if (sdr_ != nullptr) {
      ipmi_sdr_cache_close(sdr_);
      ipmi_sdr_ctx_destroy(sdr_);
    }
    if (interpret_ != nullptr) ipmi_interpret_ctx_destroy(interpret_);
    if (ctx_ != nullptr) {
      ipmi_ctx_close(ctx_);
      ipmi_ctx_destroy(ctx_);
    }
    sel_ = nullptr;
    no_dcmi_ = false;  // asked again of the next session
    read_ = nullptr;
    sdr_ = nullptr;
    interpret_ = nullptr;
    ctx_ = nullptr;
  }

  bool device_id(Reading* r) {
    Obj rs(tmpl_cmd_get_device_id_rs);
    if (ipmi_cmd_get_device_id(ctx_, rs.get()) < 0) return fail(r, "Get Device ID");
    char buf[64];
    // The minor revision is two BCD digits (IPMI 2.0, 20.1).
    std::snprintf(buf, sizeof buf, "%u.%02x",
                  static_cast<unsigned>(rs.field("firmware_revision1.major_revision")),
                  static_cast<unsigned>(rs.field("firmware_revision2.minor_revision")));
    r->firmware = buf;
    std::snprintf(buf, sizeof buf, "%u.%u", static_cast<unsigned>(rs.field("ipmi_version_major")),
                  static_cast<unsigned>(rs.field("ipmi_version_minor")));
    r->ipmi_version = buf;
    manufacturer_ = static_cast<uint32_t>(rs.field("manufacturer_id.id"));
    product_ = static_cast<uint16_t>(rs.field("product_id"));
    char name[256] = {};
    if (ipmi_iana_enterprise_numbers_string(manufacturer_, name, sizeof name - 1) > 0)
      r->manufacturer = name;
    else
      r->manufacturer = std::to_string(manufacturer_);
    r->product = std::to_string(product_);
    r->have_device = true;
    return true;
  }

  // The repository's addition and erase times, which move when it changes.
  bool repository_times(std::pair<uint64_t, uint64_t>* out, Reading* r) {
    Obj rs(tmpl_cmd_get_sdr_repository_info_rs);
    if (ipmi_cmd_get_sdr_repository_info(ctx_, rs.get()) < 0)
      return fail(r, "Get SDR Repository Info");
    *out = {rs.field("most_recent_addition_timestamp"), rs.field("most_recent_erase_timestamp")};
    return true;
  }

  bool sdr(Reading* r) {
    std::pair<uint64_t, uint64_t> times;
    if (!repository_times(&times, r)) return false;
    if (sdr_ != nullptr && times == sdr_times_) return true;
    if (sdr_ != nullptr) {
      ipmi_sdr_cache_close(sdr_);
      ipmi_sdr_ctx_destroy(sdr_);
      sdr_ = nullptr;
    }
    sdr_ = ipmi_sdr_ctx_create();
    if (sdr_ == nullptr) return fail(r, "ipmi_sdr_ctx_create");
    if (ipmi_sdr_cache_open(sdr_, ctx_, c_.sdr_cache.c_str()) < 0) {
      // Absent, out of date (FreeIPMI compares the same two times) or
      // not a cache: fetched anew.
      ipmi_sdr_cache_delete(sdr_, c_.sdr_cache.c_str());
      if (ipmi_sdr_cache_create(sdr_, ctx_, c_.sdr_cache.c_str(),
                                IPMI_SDR_CACHE_CREATE_FLAGS_OVERWRITE, nullptr, nullptr) < 0 ||
          ipmi_sdr_cache_open(sdr_, ctx_, c_.sdr_cache.c_str()) < 0) {
        r->error_reason = "bmc_sdr";
        r->error = std::string("fetching the SDR into ") + c_.sdr_cache + ": " +
                   ipmi_sdr_ctx_errormsg(sdr_);
        return false;
      }
      uint16_t count = 0;
      ipmi_sdr_cache_record_count(sdr_, &count);
      r->sdr_fetched = count;
    }
    sdr_times_ = times;
    return true;
  }

  bool interpreter(Reading* r) {
    if (interpret_ != nullptr) return true;
    interpret_ = ipmi_interpret_ctx_create();
    const char* conf = c_.interpret_config.empty() ? nullptr : c_.interpret_config.c_str();
    if (interpret_ == nullptr || ipmi_interpret_load_sensor_config(interpret_, conf) < 0 ||
        ipmi_interpret_load_sel_config(interpret_, conf) < 0) {
      r->error_reason = "bmc_interpret_config";
      r->error = std::string("loading FreeIPMI's interpretation ") +
                 (conf != nullptr ? conf : "(its default)") + ": " +
                 (interpret_ != nullptr ? ipmi_interpret_ctx_errormsg(interpret_) : "no context");
      return false;
    }
    // OEM sensors (leak detectors, and the like) as the configuration
    // names them for this BMC's manufacturer and product.
    ipmi_interpret_ctx_set_flags(interpret_, IPMI_INTERPRET_FLAGS_INTERPRET_OEM_DATA);
    ipmi_interpret_ctx_set_manufacturer_id(interpret_, manufacturer_);
    ipmi_interpret_ctx_set_product_id(interpret_, product_);
    return true;
  }

  std::string type_name(uint8_t type, uint8_t reading_type) const {
    const char* s = ipmi_get_sensor_type_string(type);
    if (type >= 0xc0) {
      const char* oem =
          ipmi_get_oem_sensor_type_string(type, reading_type, manufacturer_, product_);
      if (oem != nullptr) s = oem;
    }
    return s != nullptr ? s : "OEM";
  }

  bool sensors(Reading* r) {
    if (!interpreter(r)) return false;
    if (read_ == nullptr && (read_ = ipmi_sensor_read_ctx_create(ctx_)) == nullptr)
      return fail(r, "ipmi_sensor_read_ctx_create");
    uint16_t count = 0;
    if (ipmi_sdr_cache_record_count(sdr_, &count) < 0 || count == 0) return true;
    if (ipmi_sdr_cache_first(sdr_) < 0) return true;
    for (uint16_t i = 0; i < count; ++i) {
      if (i > 0 && ipmi_sdr_cache_next(sdr_) != 1) break;
      if (late(r)) return false;
      uint8_t rec[IPMI_SDR_MAX_RECORD_LENGTH];
      const int len = ipmi_sdr_cache_record_read(sdr_, rec, sizeof rec);
      uint16_t id = 0;
      uint8_t kind = 0;
      if (len <= 0 || ipmi_sdr_parse_record_id_and_type(sdr_, rec, len, &id, &kind) < 0) continue;
      if (kind != IPMI_SDR_FORMAT_FULL_SENSOR_RECORD &&
          kind != IPMI_SDR_FORMAT_COMPACT_SENSOR_RECORD)
        continue;
      if (r->sensors.size() == nodewatch::bmc::kMaxSensors) break;
      if (!sensor(rec, len, kind, r)) return false;
    }
    return true;
  }

  bool sensor(const uint8_t* rec, int len, uint8_t kind, Reading* r) {
    Sensor s;
    char name[IPMI_SDR_MAX_SENSOR_NAME_LENGTH + 1] = {};
    uint8_t number = 0, type = 0, reading_type = 0;
    ipmi_sdr_parse_sensor_number(sdr_, rec, len, &number);
    ipmi_sdr_parse_sensor_name(sdr_, rec, len, number, 0, name, sizeof name - 1);
    ipmi_sdr_parse_sensor_type(sdr_, rec, len, &type);
    ipmi_sdr_parse_event_reading_type_code(sdr_, rec, len, &reading_type);
    s.name = name;
    s.type = type_name(type, reading_type);
    if (kind == IPMI_SDR_FORMAT_FULL_SENSOR_RECORD) {
      uint8_t percentage = 0, modifier = 0, rate = 0, base = 0, modifier_unit = 0;
      if (ipmi_sdr_parse_sensor_units(sdr_, rec, len, &percentage, &modifier, &rate, &base,
                                      &modifier_unit) == 0) {
        char units[64] = {};
        if (ipmi_sensor_units_string(percentage, modifier, rate, base, modifier_unit, units,
                                     sizeof units - 1, 1) > 0)
          s.unit_text = units;
        // A unit with a modifier or a rate is not its base unit.
        s.unit = (percentage == 0 && modifier == 0 && rate == 0) ? base : 0;
      }
    }
    uint8_t raw = 0;
    double* value = nullptr;
    uint16_t bitmask = 0;
    const int rc =
        ipmi_sensor_read(read_, rec, static_cast<unsigned>(len), 0, &raw, &value, &bitmask);
    if (rc < 0) {
      const int e = ipmi_ctx_errnum(ctx_);
      // The session is gone: every other sensor would wait for it too.
      if (reason_of(e) == "bmc_timeout") {
        std::free(value);
        return fail(r, "reading " + s.name);
      }
    }
    if (rc == 1) {
      if (value != nullptr) s.value = *value;
      unsigned state = IPMI_INTERPRET_STATE_UNKNOWN;
      if (ipmi_interpret_sensor(interpret_, reading_type, type, bitmask, &state) == 0)
        s.state = state_name(state);
    }
    std::free(value);
    r->sensors.push_back(std::move(s));
    return true;
  }

  // DCMI's system power, where the BMC measures it; a BMC without DCMI is
  // not asked again until the session is opened anew.
  void power(Reading* r) {
    if (no_dcmi_) return;
    Obj rs(tmpl_cmd_dcmi_get_power_reading_rs);
    if (ipmi_cmd_dcmi_get_power_reading(ctx_, IPMI_DCMI_POWER_READING_MODE_SYSTEM_POWER_STATISTICS,
                                        0, rs.get()) < 0) {
      const int e = ipmi_ctx_errnum(ctx_);
      if (e == IPMI_ERR_COMMAND_INVALID_OR_UNSUPPORTED || e == IPMI_ERR_BAD_COMPLETION_CODE)
        no_dcmi_ = true;
      return;
    }
    if (rs.field("power_reading_state.power_measurement") == 1)
      r->node_power_watts = static_cast<double>(rs.field("current_power"));
  }

  // One SEL entry: its next record id, or nullopt (absent, or an error,
  // which `*failed` says).
  std::optional<uint16_t> entry(uint16_t id, SelEvent* e, bool* failed, Reading* r) {
    Obj rs(tmpl_cmd_get_sel_entry_rs);
    if (ipmi_cmd_get_sel_entry(ctx_, 0, id, 0, IPMI_SEL_READ_ENTIRE_RECORD_BYTES_TO_READ,
                               rs.get()) < 0) {
      const int e = ipmi_ctx_errnum(ctx_);
      if (e != IPMI_ERR_BAD_COMPLETION_CODE && e != IPMI_ERR_NOT_FOUND)
        *failed = !fail(r, "Get SEL Entry");
      return std::nullopt;
    }
    uint8_t rec[IPMI_SEL_RECORD_MAX_RECORD_LENGTH] = {};
    const int len = fiid_obj_get_data(rs.get(), "record_data", rec, sizeof rec);
    if (len <= 0) return std::nullopt;
    uint16_t record_id = 0;
    uint32_t timestamp = 0;
    uint8_t record_type = 0, sensor_type = 0;
    ipmi_sel_parse_read_record_id(sel_, rec, len, &record_id);
    ipmi_sel_parse_read_timestamp(sel_, rec, len, &timestamp);
    ipmi_sel_parse_read_record_type(sel_, rec, len, &record_type);
    e->record_id = record_id;
    e->timestamp = timestamp;
    e->type = "oem";
    if (ipmi_sel_parse_read_sensor_type(sel_, rec, len, &sensor_type) == 0)
      e->type = type_name(sensor_type, 0);
    unsigned state = IPMI_INTERPRET_STATE_UNKNOWN;
    if (ipmi_interpret_sel(interpret_, rec, static_cast<unsigned>(len), &state) == 0)
      e->state = state_name(state);
    return static_cast<uint16_t>(rs.field("next_record_id"));
  }

  bool sel(const Request& req, Reading* r) {
    Obj info(tmpl_cmd_get_sel_info_rs);
    if (ipmi_cmd_get_sel_info(ctx_, info.get()) < 0) {
      // A BMC without a SEL answers "invalid command": not a failure.
      return ipmi_ctx_errnum(ctx_) == IPMI_ERR_COMMAND_INVALID_OR_UNSUPPORTED ||
             fail(r, "Get SEL Info");
    }
    r->have_sel = true;
    r->sel_entries = static_cast<uint32_t>(info.field("entries"));
    r->sel_free_bytes = static_cast<uint32_t>(info.field("free_space"));
    if (req.sel_max == 0 || r->sel_entries == 0) return true;
    if (sel_ == nullptr && (sel_ = ipmi_sel_ctx_create(nullptr, nullptr)) == nullptr)
      return fail(r, "ipmi_sel_ctx_create");
    bool failed = false;
    uint16_t next = kSelFirst;
    if (req.cursor.record_id >= 0) {
      // After the entry counted last, if it is still there; else the SEL
      // was cleared (or has wrapped) since, and every entry is new.
      SelEvent last;
      auto after = entry(static_cast<uint16_t>(req.cursor.record_id), &last, &failed, r);
      if (failed) return false;
      if (after && last.timestamp == req.cursor.timestamp) next = *after;
    }
    // What is left when the collection's time is up is read next time.
    while (next != kSelLast && r->events.size() < req.sel_max && Clock::now() < deadline_) {
      SelEvent e;
      auto after = entry(next, &e, &failed, r);
      if (failed) return false;
      if (!after) break;
      r->cursor = {static_cast<int32_t>(e.record_id), e.timestamp};
      r->events.push_back(std::move(e));
      if (*after == next) break;
      next = *after;
    }
    return true;
  }

  const Config c_;
  Clock::time_point deadline_;
  ipmi_ctx_t ctx_ = nullptr;
  ipmi_sdr_ctx_t sdr_ = nullptr;
  std::pair<uint64_t, uint64_t> sdr_times_;
  ipmi_sensor_read_ctx_t read_ = nullptr;
  ipmi_interpret_ctx_t interpret_ = nullptr;
  ipmi_sel_ctx_t sel_ = nullptr;
  uint32_t manufacturer_ = 0;
  uint16_t product_ = 0;
  bool no_dcmi_ = false;
};

std::optional<std::string> read_password(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::string line;
  std::getline(in, line);
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return line;
}

}  // namespace

int main(int argc, char** argv) {
  using nodewatch::helper_arg;
  Config c;
  c.device = helper_arg(argc, argv, "device");
  c.host = helper_arg(argc, argv, "host");
  c.sdr_cache = helper_arg(argc, argv, "sdr-cache");
  c.interpret_config = helper_arg(argc, argv, "interpret-config");
  if (c.host.empty() == c.device.empty() || c.sdr_cache.empty()) {
    std::fprintf(stderr,
                 "usage: nwd-bmc (--device PATH | --host ADDRESS:PORT --protocol lan|lanplus "
                 "--username NAME --password-file FILE --privilege LEVEL) --sdr-cache FILE "
                 "[--interpret-config FILE] --parent PID\n");
    return 2;
  }
  std::string password_error;
  if (!c.host.empty()) {
    c.protocol = helper_arg(argc, argv, "protocol");
    c.username = helper_arg(argc, argv, "username");
    const std::string level = helper_arg(argc, argv, "privilege");
    c.privilege = level == "admin"      ? IPMI_PRIVILEGE_LEVEL_ADMIN
                  : level == "operator" ? IPMI_PRIVILEGE_LEVEL_OPERATOR
                                        : IPMI_PRIVILEGE_LEVEL_USER;
    const std::string file = helper_arg(argc, argv, "password-file");
    if (!file.empty()) {
      if (auto p = read_password(file))
        c.password = *p;
      else
        password_error = "cannot read the password file " + file + ": " + std::strerror(errno);
    }
  }
  Bmc bmc(c);
  return nodewatch::serve_frames(argc, argv, 256, [&](std::string_view payload) {
    std::optional<std::string> out;
    std::optional<Request> req = nodewatch::bmc::decode_request(payload);
    if (!req) return out;
    Reading r;
    if (!password_error.empty()) {
      r.error_reason = "bmc_password_unreadable";
      r.error = password_error;
    } else {
      r = bmc.read(*req);
    }
    out = nodewatch::bmc::encode_reading(r);
    return out;
  });
}
