#pragma once
// Small text helpers the collectors' parsers share: whitespace, tokens,
// trimming, and turning a sysfs attribute into a safe label value.

#include <string>
#include <string_view>

#include "nodewatch/metric.hpp"

namespace nodewatch::text {

// ASCII whitespace, and NUL (sysfs pads some attributes with it).
inline bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f' || c == '\0';
}

// Returns the next whitespace-separated token of `rest` and advances past
// it; "" when none is left.
inline std::string_view next_token(std::string_view& rest) {
  std::size_t begin = 0;
  while (begin < rest.size() && is_space(rest[begin])) ++begin;
  std::size_t end = begin;
  while (end < rest.size() && !is_space(rest[end])) ++end;
  std::string_view token = rest.substr(begin, end - begin);
  rest.remove_prefix(end);
  return token;
}

inline std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// A sysfs attribute as a label value: trimmed, control characters as
// spaces, and, when the bytes are not valid UTF-8, every non-ASCII byte as
// '?' (a label value must be UTF-8).
inline std::string label_value(std::string_view raw) {
  std::string out(trim(raw));
  const bool utf8 = is_valid_utf8(out);
  for (char& c : out) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f)
      c = ' ';
    else if (!utf8 && u >= 0x80)
      c = '?';
  }
  return out;
}

// A name from the file system (any bytes but '/' and NUL) as a log may
// show it on one line: backslash, control characters and, in a name that is
// not valid UTF-8, every non-ASCII byte escaped (as \\, \n, \t and \xNN).
inline std::string escaped(std::string_view raw) {
  static constexpr char kHex[] = "0123456789abcdef";
  const bool utf8 = is_valid_utf8(raw);
  std::string out;
  out.reserve(raw.size());
  for (char c : raw) {
    auto u = static_cast<unsigned char>(c);
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f || (!utf8 && u >= 0x80)) {
      out += "\\x";
      out.push_back(kHex[u >> 4]);
      out.push_back(kHex[u & 0xf]);
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// `s` for the inside of a JSON string, or of a TOML basic string, which
// takes the same escapes: \" \\ \n \t \r, and \u00XX for the other
// control characters.
inline std::string json_escaped(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (u < 0x20 || u == 0x7f) {
          out += "\\u00";
          out.push_back(kHex[u >> 4]);
          out.push_back(kHex[u & 0xf]);
        } else {
          out.push_back(c);
        }
    }
  }
  return out;
}

}  // namespace nodewatch::text
