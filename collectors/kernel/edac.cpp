#include "kernel/edac.hpp"

#include <algorithm>
#include <charconv>
#include <optional>
#include <string_view>

#include "nodewatch/metric.hpp"

namespace nodewatch::kernel {
namespace {

constexpr std::string_view kMc = "devices/system/edac/mc";

// "mc12" -> 12; nullopt for power/, subsystem, uevent.
std::optional<unsigned> index_of(std::string_view name, std::string_view prefix) {
  if (name.size() <= prefix.size() || name.substr(0, prefix.size()) != prefix) return std::nullopt;
  unsigned n = 0;
  std::string_view digits = name.substr(prefix.size());
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  return n;
}

std::string trimmed(std::string_view s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\0'))
    s.remove_suffix(1);
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  return std::string(s);
}

// A count attribute: a decimal (old kernels print the u32 signed).
std::optional<std::uint64_t> count(const sources::FsRoot& sys, const std::string& rel,
                                   const std::string& subject, EdacRead* out) {
  sources::Read r = sys.read(rel);
  if (!r.ok()) {
    if (r.failed()) out->errors.emplace_back(subject, rel + ": " + r.error_name());
    return std::nullopt;
  }
  std::string_view v = r.value();
  long long n = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || end != v.data() + v.size()) {
    out->errors.emplace_back(subject,
                             rel + ": not a number: \"" + std::string(v.substr(0, 32)) + "\"");
    return std::nullopt;
  }
  if (n < 0) n += 4294967296LL;  // a u32 printed with %d
  return static_cast<std::uint64_t>(n);
}

// A name read from sysfs as a label value: anything may be written to
// dimm_label (rasdaemon, or root by hand), and a label must be UTF-8.
std::string text_label(std::string text, const std::string& subject, const char* attribute,
                       EdacRead* out) {
  if (is_valid_utf8(text)) return text;
  out->errors.emplace_back(subject, std::string(attribute) + ": not UTF-8: left empty");
  return {};
}

}  // namespace

EdacRead read_edac(const sources::FsRoot& sys) {
  EdacRead out;
  sources::Listing mcs = sys.list(kMc);
  if (!mcs.ok()) {
    // EDAC not loaded (absent) is nothing, not an error; a listing that
    // failed (EMFILE, EIO) is one: the series it would have given are
    // left out, and counted.
    if (mcs.status == sources::Status::kError)
      out.errors.emplace_back("mc", std::string(kMc) + ": " + sources::errno_name(mcs.err));
    return out;
  }
  std::vector<std::pair<unsigned, std::string>> names;
  for (const std::string& n : mcs.names) {
    if (auto i = index_of(n, "mc")) names.emplace_back(*i, n);
  }
  std::sort(names.begin(), names.end());
  for (const auto& [index, name] : names) {
    const std::string dir = std::string(kMc) + "/" + name;
    EdacController c;
    c.name = name;
    if (sources::Read r = sys.read(dir + "/mc_name"); r.ok())
      c.mc_name = text_label(trimmed(r.text), name, "mc_name", &out);
    c.corrected = count(sys, dir + "/ce_count", name, &out);
    c.uncorrected = count(sys, dir + "/ue_count", name, &out);
    c.corrected_noinfo = count(sys, dir + "/ce_noinfo_count", name, &out);
    c.uncorrected_noinfo = count(sys, dir + "/ue_noinfo_count", name, &out);
    sources::Listing entries = sys.list(dir);
    std::vector<std::pair<std::pair<int, unsigned>, std::string>> slots;
    for (const std::string& e : entries.names) {
      if (auto i = index_of(e, "dimm")) slots.push_back({{0, *i}, e});
      if (auto i = index_of(e, "rank")) slots.push_back({{1, *i}, e});
    }
    std::sort(slots.begin(), slots.end());
    for (const auto& [key, slot] : slots) {
      const std::string mdir = dir + "/" + slot;
      const std::string subject = name + "/" + slot;
      EdacModule m;
      m.slot = slot;
      if (sources::Read r = sys.read(mdir + "/dimm_label"); r.ok())
        m.label = text_label(trimmed(r.text), subject, "dimm_label", &out);
      auto ce = count(sys, mdir + "/dimm_ce_count", subject, &out);
      auto ue = count(sys, mdir + "/dimm_ue_count", subject, &out);
      if (!ce && !ue) continue;  // nothing to say about this module
      m.corrected = ce;
      m.uncorrected = ue;
      c.modules.push_back(std::move(m));
    }
    out.controllers.push_back(std::move(c));
  }
  return out;
}

}  // namespace nodewatch::kernel
