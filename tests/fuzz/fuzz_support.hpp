#pragma once
// What every harness shares: a check that aborts with a message (libFuzzer
// then saves the input as a crash), and small readers of the input.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace nodewatch::fuzz {

// Aborts the run when `ok` is false: a property the parser promises (its
// header's failure contract) does not hold for this input.
inline void require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "fuzz property violated: %s\n", what);
  std::abort();
}

inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

inline std::span<const std::uint8_t> as_bytes(const std::uint8_t* data, std::size_t size) {
  return {data, size};
}

// True when every byte of `s` is in [a-z0-9_] (label values the collectors
// build from kernel names promise this).
inline bool is_snake(std::string_view s) {
  for (char c : s) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
    if (!ok) return false;
  }
  return true;
}

// True when `s` is valid UTF-8 (what a label value must be on the wire).
// Loose on purpose (overlong forms pass): the code under test may be
// stricter, never looser.
inline bool is_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = 0;
    if (c < 0x80) {
      n = 0;
    } else if ((c & 0xe0) == 0xc0) {
      n = 1;
    } else if ((c & 0xf0) == 0xe0) {
      n = 2;
    } else if ((c & 0xf8) == 0xf0) {
      n = 3;
    } else {
      return false;
    }
    if (s.size() - i - 1 < n) return false;
    for (std::size_t k = 1; k <= n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) return false;
    }
    i += n + 1;
  }
  return true;
}

// Splits the input at the first occurrence of `sep` (both halves may be
// empty): lets one input drive two calls (two collections, a key and a
// packet).
inline std::pair<std::string_view, std::string_view> split_once(std::string_view s,
                                                                std::string_view sep) {
  std::size_t at = s.find(sep);
  if (at == std::string_view::npos) return {s, {}};
  return {s.substr(0, at), s.substr(at + sep.size())};
}

}  // namespace nodewatch::fuzz
