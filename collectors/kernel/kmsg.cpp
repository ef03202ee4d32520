#include "kernel/kmsg.hpp"

#include <charconv>

namespace nodewatch::kernel {
namespace {

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The next comma-separated field of `prefix`, removed from it.
std::string_view next_field(std::string_view& prefix) {
  std::size_t comma = prefix.find(',');
  std::string_view field = prefix.substr(0, comma);
  prefix.remove_prefix(comma == std::string_view::npos ? prefix.size() : comma + 1);
  return field;
}

template <class T>
bool parse_number(std::string_view s, T* out) {
  if (s.empty()) return false;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size();
}

}  // namespace

std::string unescape_kmsg(std::string_view escaped) {
  std::string out;
  out.reserve(escaped.size());
  for (std::size_t i = 0; i < escaped.size(); ++i) {
    if (escaped[i] == '\\' && i + 3 < escaped.size() && escaped[i + 1] == 'x') {
      int hi = hex_digit(escaped[i + 2]);
      int lo = hex_digit(escaped[i + 3]);
      if (hi >= 0 && lo >= 0) {
        out.push_back(static_cast<char>(hi * 16 + lo));
        i += 3;
        continue;
      }
    }
    out.push_back(escaped[i]);
  }
  return out;
}

std::optional<KmsgRecord> parse_kmsg_record(std::string_view raw) {
  std::size_t semi = raw.find(';');
  if (semi == std::string_view::npos) return std::nullopt;
  std::string_view prefix = raw.substr(0, semi);
  std::string_view rest = raw.substr(semi + 1);
  KmsgRecord r;
  int prio = 0;
  if (!parse_number(next_field(prefix), &prio) || prio < 0) return std::nullopt;
  r.facility = prio >> 3;
  r.level = prio & 7;
  if (!parse_number(next_field(prefix), &r.seq)) return std::nullopt;
  if (!parse_number(next_field(prefix), &r.ts_usec)) return std::nullopt;
  std::string_view flags = next_field(prefix);
  if (flags.empty()) return std::nullopt;
  r.fragment = flags.find('c') != std::string_view::npos;
  // The message ends at its newline (a record read whole has one); the
  // continuation lines follow.
  std::size_t nl = rest.find('\n');
  r.message = unescape_kmsg(rest.substr(0, nl));
  std::string_view lines = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
  while (!lines.empty()) {
    std::size_t end = lines.find('\n');
    std::string_view line = lines.substr(0, end);
    lines.remove_prefix(end == std::string_view::npos ? lines.size() : end + 1);
    if (line.empty() || line.front() != ' ') continue;
    line.remove_prefix(1);
    std::size_t eq = line.find('=');
    if (eq == std::string_view::npos) continue;
    std::string_view key = line.substr(0, eq);
    std::string value = unescape_kmsg(line.substr(eq + 1));
    if (key == "SUBSYSTEM") {
      r.subsystem = std::move(value);
    } else if (key == "DEVICE") {
      r.device = std::move(value);
    }
  }
  return r;
}

}  // namespace nodewatch::kernel
