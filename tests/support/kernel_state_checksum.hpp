#pragma once
// The kernel state file's last line, written here independently of
// collectors/kernel/kernel_state.cpp: "checksum " and the FNV-1a 64 of
// everything before it, as 16 lower-case hex digits. Tests and the
// kernel-log fuzz harness use it to make state files that pass the checksum
// and reach the line parser.

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace nodewatch::testing {

// `body` followed by its checksum line.
inline std::string with_kernel_state_checksum(std::string_view body) {
  std::uint64_t h = 14695981039346656037ull;
  for (unsigned char c : body) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return std::string(body) + "checksum " + hex + "\n";
}

}  // namespace nodewatch::testing
