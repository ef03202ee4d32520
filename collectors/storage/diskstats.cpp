#include "storage/diskstats.hpp"

#include "nodewatch/text.hpp"

#include <charconv>
#include <system_error>

#include "nodewatch/metric.hpp"

namespace nodewatch::storage {
namespace {

using text::is_space;
using text::next_token;

template <typename T>
bool parse_decimal(std::string_view token, T* out) {
  if (token.empty()) return false;
  const char* end = token.data() + token.size();
  auto [ptr, ec] = std::from_chars(token.data(), end, *out);
  return ec == std::errc() && ptr == end;
}

}  // namespace

std::optional<DiskStatsLine> parse_diskstats_line(std::string_view line) {
  DiskStatsLine out;
  std::string_view rest = line;
  if (!parse_decimal(next_token(rest), &out.major)) return std::nullopt;
  if (!parse_decimal(next_token(rest), &out.minor)) return std::nullopt;
  out.name = next_token(rest);
  if (out.name.empty()) return std::nullopt;

  std::size_t count = 0;
  for (std::string_view token = next_token(rest); !token.empty(); token = next_token(rest)) {
    std::uint64_t value = 0;
    if (!parse_decimal(token, &value)) return std::nullopt;
    if (count < kDiskStatCount) out.stats[count] = value;
    ++count;
  }
  if (count == kBaseStatCount || count == kDiscardStatCount) {
    out.stat_count = count;
  } else if (count >= kFlushStatCount) {
    out.stat_count = kFlushStatCount;
  } else {
    return std::nullopt;
  }
  return out;
}

bool is_blank(std::string_view line) {
  for (char c : line) {
    if (!is_space(c)) return false;
  }
  return true;
}

std::string_view next_line(std::string_view& text) {
  std::size_t nl = text.find('\n');
  std::string_view line = text.substr(0, nl);
  text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
  return line;
}

std::optional<std::uint64_t> parse_attribute_uint(std::string_view raw) {
  std::uint64_t value = 0;
  if (!parse_decimal(text::trim(raw), &value)) return std::nullopt;
  return value;
}

std::string sysfs_block_name(std::string_view diskstats_name) {
  if (diskstats_name.empty() || diskstats_name == "." || diskstats_name == "..") return {};
  std::string out(diskstats_name);
  for (char& c : out) {
    if (c == '/') c = '!';
  }
  return out;
}

}  // namespace nodewatch::storage
