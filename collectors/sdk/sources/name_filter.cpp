#include "nodewatch/sources/name_filter.hpp"

#include <re2/re2.h>

#include <stdexcept>

#include "nodewatch/options.hpp"

namespace nodewatch::sources {
namespace {

RE2::Options re2_options() {
  RE2::Options o;
  o.set_log_errors(false);  // the configuration reports the error, once
  return o;
}

std::unique_ptr<RE2> compile(std::string_view pattern) {
  if (pattern.empty()) return nullptr;
  auto re = std::make_unique<RE2>(re2::StringPiece(pattern.data(), pattern.size()), re2_options());
  if (!re->ok()) throw std::invalid_argument("invalid pattern: " + re->error());
  return re;
}

}  // namespace

std::string pattern_error(std::string_view pattern) {
  if (pattern.size() > kMaxPatternBytes)
    return "is longer than " + std::to_string(kMaxPatternBytes) + " bytes";
  RE2 re(re2::StringPiece(pattern.data(), pattern.size()), re2_options());
  if (!re.ok()) return "is not a valid regular expression (RE2 syntax): " + re.error();
  return {};
}

NameFilterSpec read_name_filter(OptionReader& r, std::string_view what,
                                std::string_view include_key, std::string_view exclude_key,
                                std::string include_default, std::string exclude_default) {
  NameFilterSpec spec;
  const std::string noun(what);
  spec.include = r.get_string(include_key, std::move(include_default),
                              "RE2 regular expression, searched anywhere in the " + noun +
                                  " name, of those to export (anchor with ^ and $); \"\": all");
  spec.exclude = r.get_string(exclude_key, std::move(exclude_default),
                              "RE2 regular expression, searched anywhere in the " + noun +
                                  " name, of those not to export; \"\": none");
  if (std::string e = pattern_error(spec.include); !e.empty()) r.error(include_key, e);
  if (std::string e = pattern_error(spec.exclude); !e.empty()) r.error(exclude_key, e);
  return spec;
}

NameFilter::NameFilter() = default;
NameFilter::NameFilter(const NameFilterSpec& spec)
    : include_(compile(spec.include)), exclude_(compile(spec.exclude)) {}
NameFilter::~NameFilter() = default;
NameFilter::NameFilter(NameFilter&&) noexcept = default;
NameFilter& NameFilter::operator=(NameFilter&&) noexcept = default;

bool NameFilter::matches(std::string_view name) const {
  re2::StringPiece text(name.data(), name.size());
  if (include_ && !RE2::PartialMatch(text, *include_)) return false;
  if (exclude_ && RE2::PartialMatch(text, *exclude_)) return false;
  return true;
}

}  // namespace nodewatch::sources
