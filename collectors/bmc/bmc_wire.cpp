#include "bmc/bmc_wire.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace nodewatch::bmc {
namespace {

std::vector<std::string_view> split(std::string_view line, char sep) {
  std::vector<std::string_view> out;
  for (;;) {
    std::size_t at = line.find(sep);
    out.push_back(line.substr(0, at));
    if (at == std::string_view::npos) return out;
    line.remove_prefix(at + 1);
  }
}

template <class T>
bool number(std::string_view s, T* out) {
  if (s.empty()) return false;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size();
}

bool real(std::string_view s, double* out) {
  if (!number(s, out)) return false;
  return std::isfinite(*out);
}

bool is_state(std::string_view s) {
  return std::find(std::begin(kStates), std::end(kStates), s) != std::end(kStates);
}

// A BMC's text as a label value: what is not printable ASCII (a Latin-1
// name, a 6-bit packed one FreeIPMI misreads) becomes '?', so that the
// exposition stays UTF-8.
std::string printable(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c < 0x20 || c > 0x7e) c = '?';
  return out;
}

std::string text_of(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

}  // namespace

std::string encode_request(const Request& r) {
  return "read " + std::to_string(r.timeout.count()) + " " + std::to_string(r.cursor.record_id) +
         " " + std::to_string(r.cursor.timestamp) + " " + std::to_string(r.sel_max);
}

std::optional<Request> decode_request(std::string_view payload) {
  std::vector<std::string_view> f = split(payload, ' ');
  Request r;
  long long ms = 0;
  if (f.size() != 5 || f[0] != "read" || !number(f[1], &ms) || ms <= 0 || ms > 3'600'000 ||
      !number(f[2], &r.cursor.record_id) || r.cursor.record_id < -1 ||
      r.cursor.record_id > 0xffff || !number(f[3], &r.cursor.timestamp) ||
      !number(f[4], &r.sel_max) || r.sel_max > kMaxEvents)
    return std::nullopt;
  r.timeout = std::chrono::milliseconds(ms);
  return r;
}

std::string field(std::string_view s) {
  std::string out(s.substr(0, kMaxFieldBytes));
  for (char& c : out)
    if (c == '\t' || c == '\n' || c == '\r') c = ' ';
  return out;
}

std::string encode_reading(const Reading& r) {
  if (!r.error_reason.empty()) return "error\t" + field(r.error_reason) + "\t" + field(r.error);
  std::string out = "ok\n";
  auto line = [&out](std::initializer_list<std::string> fields) {
    bool first = true;
    for (const std::string& f : fields) {
      out += first ? "" : "\t";
      out += f;
      first = false;
    }
    out += '\n';
  };
  if (r.have_device)
    line(
        {"bmc", field(r.firmware), field(r.manufacturer), field(r.product), field(r.ipmi_version)});
  for (std::size_t i = 0; i < r.sensors.size() && i < kMaxSensors; ++i) {
    const Sensor& s = r.sensors[i];
    line({"sensor", field(s.name), field(s.type), std::to_string(s.unit), field(s.unit_text),
          s.value ? text_of(*s.value) : "-", s.state});
  }
  if (r.node_power_watts) line({"power", text_of(*r.node_power_watts)});
  if (r.have_sel) line({"sel", std::to_string(r.sel_entries), std::to_string(r.sel_free_bytes)});
  for (std::size_t i = 0; i < r.events.size() && i < kMaxEvents; ++i) {
    const SelEvent& e = r.events[i];
    line({"event", std::to_string(e.record_id), std::to_string(e.timestamp), field(e.type),
          e.state});
  }
  line({"cursor", std::to_string(r.cursor.record_id), std::to_string(r.cursor.timestamp)});
  if (r.sdr_fetched) line({"sdr", std::to_string(*r.sdr_fetched)});
  return out;
}

std::optional<Reading> decode_reading(std::string_view payload, std::string* why) {
  Reading r;
  auto bad = [&](std::string what) -> std::optional<Reading> {
    *why = std::move(what);
    return std::nullopt;
  };
  if (payload.size() > kMaxFrameBytes) return bad("an answer over its bound");
  std::vector<std::string_view> lines = split(payload, '\n');
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  if (lines.empty()) return bad("nothing");
  std::vector<std::string_view> head = split(lines[0], '\t');
  if (head[0] == "error") {
    if (head.size() != 3 || head[1].empty() || lines.size() != 1) return bad("a malformed error");
    for (std::string_view f : {head[1], head[2]})
      if (f.size() > kMaxFieldBytes) return bad("a field over its bound");
    r.error_reason = printable(head[1]);
    r.error = printable(head[2]);
    return r;
  }
  if (lines[0] != "ok") return bad("no status line");
  bool have_cursor = false;
  for (std::size_t i = 1; i < lines.size(); ++i) {
    std::vector<std::string_view> f = split(lines[i], '\t');
    for (std::string_view x : f)
      if (x.size() > kMaxFieldBytes) return bad("a field over its bound");
    const std::string_view kind = f[0];
    if (kind == "bmc" && f.size() == 5 && !r.have_device) {
      r.have_device = true;
      r.firmware = printable(f[1]);
      r.manufacturer = printable(f[2]);
      r.product = printable(f[3]);
      r.ipmi_version = printable(f[4]);
    } else if (kind == "sensor" && f.size() == 7) {
      if (r.sensors.size() == kMaxSensors) return bad("more sensors than its bound");
      Sensor s;
      s.name = printable(f[1]);
      s.type = printable(f[2]);
      s.unit_text = printable(f[4]);
      s.state = f[6];
      double v = 0;
      if (s.name.empty() || !number(f[3], &s.unit) || s.unit < 0 || s.unit > 255 ||
          !is_state(s.state) || (f[5] != "-" && !real(f[5], &v)))
        return bad("a malformed sensor line");
      if (f[5] != "-") s.value = v;
      r.sensors.push_back(std::move(s));
    } else if (kind == "power" && f.size() == 2 && !r.node_power_watts) {
      double v = 0;
      if (!real(f[1], &v) || v < 0) return bad("a malformed power line");
      r.node_power_watts = v;
    } else if (kind == "sel" && f.size() == 3 && !r.have_sel) {
      if (!number(f[1], &r.sel_entries) || !number(f[2], &r.sel_free_bytes) ||
          r.sel_entries > 0xffff)
        return bad("a malformed sel line");
      r.have_sel = true;
    } else if (kind == "event" && f.size() == 5) {
      if (r.events.size() == kMaxEvents) return bad("more events than its bound");
      SelEvent e;
      if (!number(f[1], &e.record_id) || e.record_id > 0xffff || !number(f[2], &e.timestamp) ||
          f[3].empty() || !is_state(f[4]))
        return bad("a malformed event line");
      e.type = printable(f[3]);
      e.state = f[4];
      r.events.push_back(std::move(e));
    } else if (kind == "cursor" && f.size() == 3 && !have_cursor) {
      if (!number(f[1], &r.cursor.record_id) || r.cursor.record_id < -1 ||
          r.cursor.record_id > 0xffff || !number(f[2], &r.cursor.timestamp))
        return bad("a malformed cursor line");
      have_cursor = true;
    } else if (kind == "sdr" && f.size() == 2 && !r.sdr_fetched) {
      std::uint32_t n = 0;
      if (!number(f[1], &n)) return bad("a malformed sdr line");
      r.sdr_fetched = n;
    } else {
      return bad("an unknown or repeated line");
    }
  }
  if (!have_cursor) return bad("no cursor");
  return r;
}

}  // namespace nodewatch::bmc
