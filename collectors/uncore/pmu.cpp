#include "uncore/pmu.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "nodewatch/text.hpp"

namespace nodewatch::uncore {
namespace {

using sources::Status;
using text::trim;

// More CPUs than any machine has: a cpulist past it is malformed.
constexpr int kMaxCpu = 1 << 16;

// Splits on `sep`, keeping empty pieces.
std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  while (true) {
    const std::size_t at = s.find(sep);
    out.push_back(s.substr(0, at));
    if (at == std::string_view::npos) return out;
    s.remove_prefix(at + 1);
  }
}

std::optional<std::uint64_t> parse_decimal(std::string_view s) {
  std::uint64_t v = 0;
  if (s.empty()) return std::nullopt;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

// "0x3c", "0X3C", "60": as perf reads a term's value.
std::optional<std::uint64_t> parse_value(std::string_view s) {
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
    s.remove_prefix(2);
    std::uint64_t v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v, 16);
    if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
    return v;
  }
  return parse_decimal(s);
}

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-' || c == '.';
}

bool is_name(std::string_view s) {
  return !s.empty() && s.size() <= 128 && std::all_of(s.begin(), s.end(), is_name_char) &&
         s != "." && s != "..";
}

// Sets `value` into `attr` at the bits of `format`, low bits first.
bool apply(const FormatTerm& format, std::uint64_t value, EventAttr& attr) {
  std::uint64_t& word = attr.config[format.word];
  std::size_t i = 0;
  for (; i < format.bits.size() && i < 64; ++i) {
    const std::uint64_t bit = (value >> i) & 1U;
    word = (word & ~(std::uint64_t{1} << format.bits[i])) | (bit << format.bits[i]);
  }
  return format.bits.size() >= 64 || (value >> format.bits.size()) == 0;
}

// MiB -> (bytes, 1048576): the units sysfs gives byte counts in, turned
// into the base unit Prometheus names.
std::pair<std::string, double> base_unit(std::string_view unit) {
  static constexpr std::pair<std::string_view, double> kBytes[] = {
      {"B", 1},        {"Bytes", 1},       {"bytes", 1},
      {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}};
  for (const auto& [name, factor] : kBytes)
    if (unit == name) return {"bytes", factor};
  return {std::string(unit), 1.0};
}

struct Resolver {
  const sources::FsRoot& sys;
  std::string_view pmu;
  std::string* error;
  EventAttr attr;
  bool aliased = false;

  std::optional<FormatTerm> format(std::string_view term) {
    if (term == "config") return FormatTerm{0, {}};
    if (term == "config1") return FormatTerm{1, {}};
    if (term == "config2") return FormatTerm{2, {}};
    const sources::Read r = sys.read(pmu_path(pmu, "format/" + std::string(term)));
    if (!r.ok()) {
      if (r.failed())
        *error = r.error_name() + " reading " + pmu_path(pmu, "format/" + std::string(term));
      return std::nullopt;
    }
    std::optional<FormatTerm> f = parse_format(r.value());
    if (!f) *error = "malformed " + pmu_path(pmu, "format/" + std::string(term));
    return f;
  }

  bool set(std::string_view term, std::uint64_t value) {
    std::optional<FormatTerm> f = format(term);
    if (!f) {
      if (error->empty())
        *error = std::string(pmu) + " has no format term or event '" + std::string(term) + "'";
      return false;
    }
    if (f->bits.empty()) {  // config, config1, config2: the whole word
      attr.config[f->word] = value;
      return true;
    }
    if (!apply(*f, value, attr)) {
      *error = "the value of " + std::string(term) + " is wider than its format";
      return false;
    }
    return true;
  }

  // An alias from events/<name>, with its .scale and .unit.
  bool alias(std::string_view name) {
    const std::string path = pmu_path(pmu, "events/" + std::string(name));
    const sources::Read r = sys.read(path);
    if (!r.ok()) {
      if (r.failed()) *error = r.error_name() + " reading " + path;
      return false;
    }
    if (aliased) {
      *error = "two events named in one: " + std::string(name);
      return false;
    }
    aliased = true;
    attr.alias = std::string(name);
    if (!terms(r.value(), false)) return false;
    const sources::Read scale = sys.read(path + ".scale");
    if (scale.ok()) {
      const std::string text(scale.value());
      char* end = nullptr;
      const double s = std::strtod(text.c_str(), &end);
      if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(s) || s <= 0) {
        *error = "malformed " + path + ".scale";
        return false;
      }
      attr.scale = s;
      attr.sysfs_scale = s;
    }
    const sources::Read unit = sys.read(path + ".unit");
    if (unit.ok()) {
      auto [base, factor] = base_unit(unit.value());
      attr.unit = base;
      attr.scale *= factor;
    }
    return true;
  }

  // "a=0x1,b,c=3". `user`: written by the operator (a bare word may be an
  // alias), else an alias's own text (a bare word is a flag term).
  bool terms(std::string_view text, bool user) {
    text = trim(text);
    if (text.empty()) {
      *error = "no event named";
      return false;
    }
    for (std::string_view term : split(text, ',')) {
      term = trim(term);
      const std::size_t eq = term.find('=');
      const std::string_view name = term.substr(0, eq);
      if (!is_name(name)) {
        *error = "malformed term '" + std::string(term) + "'";
        return false;
      }
      if (eq == std::string_view::npos) {
        if (user && alias(name)) continue;
        if (!error->empty()) return false;
        if (!set(name, 1)) return false;
        continue;
      }
      const std::string_view text_value = term.substr(eq + 1);
      if (text_value == "?") {
        *error = "the event leaves " + std::string(name) + " to be given: name it with a value";
        return false;
      }
      std::optional<std::uint64_t> v = parse_value(text_value);
      if (!v) {
        *error = "malformed value in '" + std::string(term) + "'";
        return false;
      }
      if (!set(name, *v)) return false;
    }
    return true;
  }
};

}  // namespace

std::string pmu_path(std::string_view pmu, std::string_view rest) {
  std::string p(kPmuDir);
  p += '/';
  p += pmu;
  p += '/';
  p += rest;
  return p;
}

std::optional<std::vector<int>> parse_cpulist(std::string_view text) {
  text = trim(text);
  if (text.empty()) return std::nullopt;
  std::vector<int> cpus;
  for (std::string_view piece : split(text, ',')) {
    const std::size_t dash = piece.find('-');
    std::optional<std::uint64_t> lo = parse_decimal(piece.substr(0, dash));
    std::optional<std::uint64_t> hi =
        dash == std::string_view::npos ? lo : parse_decimal(piece.substr(dash + 1));
    if (!lo || !hi || *lo > *hi || *hi >= kMaxCpu) return std::nullopt;
    if (cpus.size() + (*hi - *lo + 1) > kMaxCpu) return std::nullopt;
    for (std::uint64_t c = *lo; c <= *hi; ++c) cpus.push_back(static_cast<int>(c));
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

std::optional<FormatTerm> parse_format(std::string_view text) {
  text = trim(text);
  const std::size_t colon = text.find(':');
  if (colon == std::string_view::npos) return std::nullopt;
  FormatTerm f;
  const std::string_view word = text.substr(0, colon);
  if (word == "config") {
    f.word = 0;
  } else if (word == "config1") {
    f.word = 1;
  } else if (word == "config2") {
    f.word = 2;
  } else {
    return std::nullopt;
  }
  for (std::string_view piece : split(text.substr(colon + 1), ',')) {
    const std::size_t dash = piece.find('-');
    std::optional<std::uint64_t> lo = parse_decimal(piece.substr(0, dash));
    std::optional<std::uint64_t> hi =
        dash == std::string_view::npos ? lo : parse_decimal(piece.substr(dash + 1));
    if (!lo || !hi || *lo > *hi || *hi > 63) return std::nullopt;
    for (std::uint64_t b = *lo; b <= *hi; ++b) f.bits.push_back(static_cast<int>(b));
  }
  std::sort(f.bits.begin(), f.bits.end());
  if (std::adjacent_find(f.bits.begin(), f.bits.end()) != f.bits.end()) return std::nullopt;
  return f;
}

std::optional<Pmu> read_pmu(const sources::FsRoot& sys, std::string_view name, std::string* error) {
  if (!is_name(name)) {
    *error = "not a PMU name";
    return std::nullopt;
  }
  const sources::Read type = sys.read(pmu_path(name, "type"));
  if (!type.ok()) {
    *error = type.status == Status::kAbsent || type.status == Status::kGone
                 ? "no such PMU"
                 : type.error_name() + " reading " + pmu_path(name, "type");
    return std::nullopt;
  }
  std::optional<std::uint64_t> t = parse_decimal(type.value());
  if (!t || *t > 0xffffffffU) {
    *error = "malformed " + pmu_path(name, "type");
    return std::nullopt;
  }
  Pmu pmu;
  pmu.name = std::string(name);
  pmu.type = static_cast<std::uint32_t>(*t);
  const sources::Read mask = sys.read(pmu_path(name, "cpumask"));
  std::string_view cpus;
  std::string source = pmu_path(name, "cpumask");
  if (mask.ok() && !trim(mask.value()).empty()) {
    cpus = mask.value();
    pmu.has_cpumask = true;
  } else if (mask.failed()) {
    *error = mask.error_name() + " reading " + source;
    return std::nullopt;
  }
  sources::Read online;
  if (!pmu.has_cpumask) {
    source = "devices/system/cpu/online";
    online = sys.read(source);
    if (!online.ok()) {
      *error = online.error_name() + " reading " + source;
      return std::nullopt;
    }
    cpus = online.value();
  }
  std::optional<std::vector<int>> list = parse_cpulist(cpus);
  if (!list) {
    *error = "malformed " + source;
    return std::nullopt;
  }
  pmu.cpus = std::move(*list);
  return pmu;
}

std::optional<EventRequest> parse_request(std::string_view text, std::string* error) {
  const std::size_t first = text.find('/');
  const std::size_t last = text.rfind('/');
  if (first == std::string_view::npos || last == first) {
    *error = "not an event in perf's syntax (pmu/event/)";
    return std::nullopt;
  }
  if (last + 1 != text.size()) {
    *error = "modifiers after the event ('" + std::string(text.substr(last + 1)) +
             "') are not taken: an uncore count is the whole machine's";
    return std::nullopt;
  }
  EventRequest req;
  std::string_view pmu = text.substr(0, first);
  if (!pmu.empty() && pmu.back() == '*') {
    req.prefix = true;
    pmu.remove_suffix(1);
  }
  if (!is_name(pmu)) {
    *error = "malformed PMU name";
    return std::nullopt;
  }
  req.pmu = std::string(pmu);
  req.terms = std::string(trim(text.substr(first + 1, last - first - 1)));
  if (req.terms.empty()) {
    *error = "no event named";
    return std::nullopt;
  }
  if (req.terms.find('/') != std::string::npos) {
    *error = "one event between two slashes (pmu/event/)";
    return std::nullopt;
  }
  return req;
}

std::optional<EventAttr> resolve_event(const sources::FsRoot& sys, std::string_view pmu,
                                       std::string_view terms, std::string* error) {
  error->clear();
  Resolver r{sys, pmu, error, {}};
  if (!r.terms(terms, true)) {
    if (error->empty()) *error = "cannot resolve " + std::string(terms);
    return std::nullopt;
  }
  return r.attr;
}

}  // namespace nodewatch::uncore
