#include "pcie/pcie_parse.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <limits>
#include <system_error>
#include <unordered_set>
#include <utility>

namespace nodewatch::pcie {
namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f' || c == '\0';
}
bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_lower(char c) {
  return c >= 'a' && c <= 'z';
}
bool is_upper(char c) {
  return c >= 'A' && c <= 'Z';
}
bool is_hex(char c) {
  return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

template <typename T>
bool parse_number(std::string_view token, T* out, int base = 10) {
  if (token.empty()) return false;
  const char* end = token.data() + token.size();
  auto [ptr, ec] = std::from_chars(token.data(), end, *out, base);
  return ec == std::errc() && ptr == end;
}

// "0x" followed by 1 to `max_digits` hex digits.
bool parse_prefixed_hex(std::string_view text, std::size_t max_digits, std::uint32_t* out) {
  if (text.size() < 3 || text[0] != '0' || (text[1] != 'x' && text[1] != 'X')) return false;
  std::string_view digits = text.substr(2);
  if (digits.size() > max_digits) return false;
  if (!std::all_of(digits.begin(), digits.end(), is_hex)) return false;
  return parse_number(digits, out, 16);
}

// Splits at whitespace.
std::vector<std::string_view> tokens(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && is_space(line[i])) ++i;
    std::size_t begin = i;
    while (i < line.size() && !is_space(line[i])) ++i;
    if (i > begin) out.push_back(line.substr(begin, i - begin));
  }
  return out;
}

// Long names of kernels before the short ones (the ABI document's sample
// output and aer.c of that time), by error bit, and the short name of the
// same bit in current kernels.
constexpr std::array<std::pair<std::string_view, std::string_view>, 25> kOldAerNames = {{
    // correctable (PCI_ERR_COR_*)
    {"Receiver Error", "RxErr"},                 // bit 0
    {"Bad TLP", "BadTLP"},                       // bit 6
    {"Bad DLLP", "BadDLLP"},                     // bit 7
    {"RELAY_NUM Rollover", "Rollover"},          // bit 8
    {"Replay Timer Timeout", "Timeout"},         // bit 12
    {"Advisory Non-Fatal", "NonFatalErr"},       // bit 13
    {"Corrected Internal Error", "CorrIntErr"},  // bit 14
    {"Header Log Overflow", "HeaderOF"},         // bit 15
    // uncorrectable (PCI_ERR_UNC_*), both nonfatal and fatal
    {"Undefined", "Undefined"},                        // bit 0
    {"Data Link Protocol", "DLP"},                     // bit 4
    {"Surprise Down Error", "SDES"},                   // bit 5
    {"Poisoned TLP", "TLP"},                           // bit 12
    {"Flow Control Protocol", "FCP"},                  // bit 13
    {"Completion Timeout", "CmpltTO"},                 // bit 14
    {"Completer Abort", "CmpltAbrt"},                  // bit 15
    {"Unexpected Completion", "UnxCmplt"},             // bit 16
    {"Receiver Overflow", "RxOF"},                     // bit 17
    {"Malformed TLP", "MalfTLP"},                      // bit 18
    {"ECRC", "ECRC"},                                  // bit 19
    {"Unsupported Request", "UnsupReq"},               // bit 20
    {"ACS Violation", "ACSViol"},                      // bit 21
    {"Uncorrectable Internal Error", "UncorrIntErr"},  // bit 22
    {"MC Blocked TLP", "BlockedTLP"},                  // bit 23
    {"AtomicOp Egress Blocked", "AtomicOpBlocked"},    // bit 24
    {"TLP Prefix Blocked Error", "TLPBlockedErr"},     // bit 25
}};

constexpr std::string_view kTotalPrefix = "TOTAL_ERR_";

}  // namespace

std::string_view trim(std::string_view raw) {
  while (!raw.empty() && is_space(raw.front())) raw.remove_prefix(1);
  while (!raw.empty() && is_space(raw.back())) raw.remove_suffix(1);
  return raw;
}

LinkSpeed parse_link_speed(std::string_view raw) {
  std::string_view text = trim(raw);
  if (text == "Unknown" || text == "Unknown speed") return {Reading::kUnknown, 0};
  std::vector<std::string_view> t = tokens(text);
  if (t.size() < 2 || t.size() > 3 || t[1] != "GT/s") return {};
  if (t.size() == 3 && t[2] != "PCIe") return {};
  // Digits with at most one '.', so that from_chars' "inf", "nan" and
  // exponents are refused.
  std::string_view number = t[0];
  if (number.empty() || !is_digit(number.front()) || !is_digit(number.back())) return {};
  if (std::count(number.begin(), number.end(), '.') > 1) return {};
  if (!std::all_of(number.begin(), number.end(), [](char c) { return is_digit(c) || c == '.'; }))
    return {};
  double gts = 0;
  const char* end = number.data() + number.size();
  auto [ptr, ec] = std::from_chars(number.data(), end, gts, std::chars_format::fixed);
  if (ec != std::errc() || ptr != end || !(gts > 0)) return {};
  return {Reading::kValue, gts * 1e9};
}

std::optional<double> generation_transfers_per_second(unsigned generation) {
  static constexpr std::array<double, 6> kGts = {2.5, 5, 8, 16, 32, 64};
  if (generation == 0 || generation > kGts.size()) return std::nullopt;
  return kGts[generation - 1] * 1e9;
}

double lane_bytes_per_second(double transfers_per_second) {
  double encoding = 1.0;
  if (transfers_per_second < 8e9)
    encoding = 8.0 / 10.0;
  else if (transfers_per_second <= 32e9)
    encoding = 128.0 / 130.0;
  return transfers_per_second * encoding / 8.0;
}

LinkWidth parse_link_width(std::string_view raw) {
  std::string_view text = trim(raw);
  if (text.empty() || !std::all_of(text.begin(), text.end(), is_digit)) return {};
  unsigned lanes = 0;
  if (!parse_number(text, &lanes)) return {};
  if (lanes == 0) return {Reading::kUnknown, 0};
  if (lanes <= kMaxLinkWidth) return {Reading::kValue, lanes};
  if (lanes <= 63) return {Reading::kUnknown, 0};
  return {};
}

std::optional<std::uint32_t> parse_pci_class(std::string_view raw) {
  std::uint32_t value = 0;
  if (!parse_prefixed_hex(trim(raw), 6, &value)) return std::nullopt;
  return value;
}

std::optional<std::string> parse_pci_id(std::string_view raw) {
  std::string_view text = trim(raw);
  std::uint32_t value = 0;
  if (!parse_prefixed_hex(text, 4, &value)) return std::nullopt;
  return std::string(text);
}

std::optional<std::string> parse_numa_node(std::string_view raw) {
  std::string_view text = trim(raw);
  std::string_view digits = text;
  if (!digits.empty() && digits.front() == '-') digits.remove_prefix(1);
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), is_digit)) return std::nullopt;
  int node = 0;
  if (!parse_number(text, &node) || node < -1) return std::nullopt;
  return std::string(text);
}

std::optional<DeviceKind> classify(std::uint32_t pci_class) {
  std::uint32_t base = pci_class >> 16;
  if (base == 0x03 || base == 0x12) return DeviceKind::kAccelerator;
  if (base == 0x02) return DeviceKind::kNetwork;
  if ((pci_class >> 8) == 0x0c06) return DeviceKind::kNetwork;
  return std::nullopt;
}

std::string_view kind_name(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::kAccelerator: return "accelerator";
    case DeviceKind::kNetwork: return "network";
    case DeviceKind::kBridge: return "bridge";
  }
  return "";
}

bool is_bdf(std::string_view name) {
  // dddd:bb:dd.f, the domain possibly longer
  std::size_t colon = name.find(':');
  if (colon == std::string_view::npos || colon < 4) return false;
  std::string_view domain = name.substr(0, colon);
  std::string_view rest = name.substr(colon + 1);
  if (!std::all_of(domain.begin(), domain.end(), is_hex)) return false;
  if (rest.size() != 7 || rest[2] != ':' || rest[5] != '.') return false;
  if (!is_hex(rest[0]) || !is_hex(rest[1]) || !is_hex(rest[3]) || !is_hex(rest[4])) return false;
  std::uint32_t device = 0;
  if (!parse_number(rest.substr(3, 2), &device, 16) || device > 0x1f) return false;
  return rest[6] >= '0' && rest[6] <= '7';
}

std::string snake_case(std::string_view name) {
  std::string out;
  auto separate = [&out] {
    if (!out.empty() && out.back() != '_') out.push_back('_');
  };
  for (std::size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    if (is_upper(c)) {
      char prev = i > 0 ? name[i - 1] : '\0';
      char next = i + 1 < name.size() ? name[i + 1] : '\0';
      // "RxErr": a capital after a lower-case letter or digit starts a word;
      // "TLPBlocked": so does the last capital of an acronym before a
      // lower-case letter.
      if (is_lower(prev) || is_digit(prev) || (is_upper(prev) && is_lower(next))) separate();
      out.push_back(static_cast<char>(c - 'A' + 'a'));
    } else if (is_lower(c) || is_digit(c)) {
      out.push_back(c);
    } else {
      separate();
    }
  }
  while (!out.empty() && out.back() == '_') out.pop_back();
  return out;
}

std::string aer_error_label(std::string_view kernel_name) {
  // Names are matched with their blanks collapsed: older aer.c kept the
  // long names padded for its log lines ("Receiver Error        ").
  std::string name;
  for (std::string_view word : tokens(kernel_name)) {
    if (!name.empty()) name.push_back(' ');
    name.append(word);
  }
  // "dev_cor_errs_bit[5]", "dev_fatal_errs_bit[27]": an unnamed bit. The
  // severity is its own label, so the array name is dropped.
  std::size_t bit = name.rfind("_bit[");
  if (bit != std::string::npos && name.back() == ']') {
    std::string_view index = std::string_view(name).substr(bit + 5, name.size() - bit - 6);
    unsigned n = 0;
    if (parse_number(index, &n) && n < 32) return "bit_" + std::to_string(n);
  }
  for (const auto& [old_name, new_name] : kOldAerNames) {
    if (name == old_name) return snake_case(new_name);
  }
  return snake_case(name);
}

std::optional<std::vector<AerCount>> parse_aer_stats(std::string_view text,
                                                     std::optional<std::uint64_t>* total) {
  std::vector<AerCount> out;
  std::optional<std::uint64_t> total_line;
  std::unordered_set<std::string> seen;
  while (!text.empty()) {
    std::size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    std::string_view body = trim(line);
    if (body.empty()) continue;

    std::size_t split = body.find_last_of(" \t");
    if (split == std::string_view::npos) return std::nullopt;  // a name or a count alone
    std::string_view name = trim(body.substr(0, split));
    std::string_view count_text = body.substr(split + 1);
    std::uint64_t count = 0;
    if (!std::all_of(count_text.begin(), count_text.end(), is_digit) ||
        !parse_number(count_text, &count)) {
      return std::nullopt;
    }
    if (name.starts_with(kTotalPrefix)) {
      if (total_line) return std::nullopt;
      total_line = count;
      continue;
    }
    std::string label = aer_error_label(name);
    if (label.empty() || !seen.insert(label).second) return std::nullopt;
    out.push_back(AerCount{std::move(label), count});
  }
  if (total != nullptr) *total = total_line;
  return out;
}

std::uint64_t aer_severity_total(const std::vector<AerCount>& counts,
                                 std::optional<std::uint64_t> total) {
  if (total) return *total;
  std::uint64_t sum = 0;
  for (const AerCount& c : counts) {
    sum = c.count > std::numeric_limits<std::uint64_t>::max() - sum
              ? std::numeric_limits<std::uint64_t>::max()
              : sum + c.count;
  }
  return sum;
}

std::optional<bool> link_width_degraded(std::optional<unsigned> current,
                                        std::optional<unsigned> device_max,
                                        std::optional<unsigned> upstream_max) {
  if (!current || !device_max || !upstream_max) return std::nullopt;
  return *current < std::min(*device_max, *upstream_max);
}

}  // namespace nodewatch::pcie
