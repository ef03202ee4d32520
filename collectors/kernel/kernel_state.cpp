#include "kernel/kernel_state.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <vector>

#include "nodewatch/state_file.hpp"
#include "nodewatch/unique_fd.hpp"

namespace nodewatch::kernel {
namespace {

constexpr std::string_view kMagic = "nodewatch-kernel-state 1";

std::uint64_t fnv1a(std::string_view s) {
  std::uint64_t h = 14695981039346656037ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string hex64(std::uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

bool name_ok(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == ':' || c == '.' || c == '_' || c == '+' || c == '-';
    if (!ok) return false;
  }
  return true;
}

bool number(std::string_view s, std::uint64_t* out) {
  if (s.empty()) return false;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size();
}

std::vector<std::string_view> words(std::string_view line) {
  std::vector<std::string_view> out;
  while (!line.empty()) {
    std::size_t sp = line.find(' ');
    out.push_back(line.substr(0, sp));
    if (sp == std::string_view::npos) break;
    line.remove_prefix(sp + 1);
  }
  return out;
}

std::string device_word(const std::string& device) {
  return device.empty() ? "-" : device;
}

}  // namespace

std::string serialize_state(const KernelState& state) {
  std::string out(kMagic);
  out += "\nboot_id " + state.boot_id + "\n";
  if (state.last_seq) out += "last_seq " + std::to_string(*state.last_seq) + "\n";
  out += "lost " + std::to_string(state.counts.lost) + "\n";
  for (const auto& [key, n] : state.counts.events)
    out += "event " + key.first + " " + device_word(key.second) + " " + std::to_string(n) + "\n";
  for (const auto& [key, n] : state.counts.xids)
    out += "xid " + key.first + " " + key.second + " " + std::to_string(n) + "\n";
  for (const auto& [key, n] : state.counts.sxids)
    out += "sxid " + key.first + " " + key.second + " " + std::to_string(n) + "\n";
  out += "checksum " + hex64(fnv1a(out)) + "\n";
  return out;
}

std::optional<KernelState> parse_state(std::string_view text, std::string* why) {
  auto refuse = [why](std::string reason) -> std::optional<KernelState> {
    *why = std::move(reason);
    return std::nullopt;
  };
  std::size_t mark = text.rfind("\nchecksum ");
  if (mark == std::string_view::npos) return refuse("no checksum line (a torn write?)");
  std::string_view body = text.substr(0, mark + 1);
  std::string_view sum_line = text.substr(mark + 1);
  if (sum_line != "checksum " + hex64(fnv1a(body)) + "\n")
    return refuse("the checksum does not match the content");
  KernelState s;
  bool seen_boot = false;
  bool seen_lost = false;
  std::size_t line_no = 0;
  while (!body.empty()) {
    std::size_t nl = body.find('\n');
    std::string_view line = body.substr(0, nl);
    body.remove_prefix(nl + 1);
    ++line_no;
    const std::string where = "line " + std::to_string(line_no) + ": ";
    if (line_no == 1) {
      if (line != kMagic) return refuse(where + "not a nodewatch-kernel-state 1 file");
      continue;
    }
    std::vector<std::string_view> w = words(line);
    std::uint64_t n = 0;
    if (w.size() == 2 && w[0] == "boot_id" && name_ok(w[1]) && !seen_boot) {
      s.boot_id = std::string(w[1]);
      seen_boot = true;
    } else if (w.size() == 2 && w[0] == "last_seq" && number(w[1], &n) && !s.last_seq) {
      s.last_seq = n;
    } else if (w.size() == 2 && w[0] == "lost" && number(w[1], &n) && !seen_lost) {
      s.counts.lost = n;
      seen_lost = true;
    } else if (w.size() == 4 && (w[0] == "event" || w[0] == "xid" || w[0] == "sxid") &&
               name_ok(w[1]) && name_ok(w[2]) && number(w[3], &n)) {
      auto& table = w[0] == "event" ? s.counts.events
                    : w[0] == "xid" ? s.counts.xids
                                    : s.counts.sxids;
      std::string second(w[2]);
      if (w[0] == "event" && second == "-") second.clear();
      if (!table.emplace(KernelCounts::Key{std::string(w[1]), second}, n).second)
        return refuse(where + "a repeated " + std::string(w[0]));
    } else {
      return refuse(where + "not a state line: \"" + std::string(line.substr(0, 80)) + "\"");
    }
  }
  if (!seen_boot) return refuse("no boot_id");
  if (!seen_lost) return refuse("no lost count");
  return s;
}

int write_state_file(const std::string& path, const KernelState& state) {
  return write_state_text(path, serialize_state(state));
}

}  // namespace nodewatch::kernel
