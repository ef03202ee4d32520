#pragma once
// The one include/exclude filter on device, port, interface and mount
// names, for every collector that takes `*_include` / `*_exclude` options.
//
// Patterns are RE2 (the dialect Prometheus users write in relabelling),
// searched anywhere in the name (anchor with ^...$ to match the whole):
// RE2 runs in time linear in the name and without recursion, so neither a
// 60,000-character name in /proc/diskstats nor "^(a+)+$" can exhaust the
// stack or a core. A pattern is at most kMaxPatternBytes and compiles
// within RE2's default memory budget; anything else is a configuration
// error at the key's position, with the same message in every collector.

#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace re2 {
class RE2;
}

namespace nodewatch {
class OptionReader;
}

namespace nodewatch::sources {

inline constexpr std::size_t kMaxPatternBytes = 4096;

// The two patterns as configured ("" include: every name; "" exclude:
// none). A plain, comparable value: it lives in a collector's options.
struct NameFilterSpec {
  std::string include;
  std::string exclude;
  bool operator==(const NameFilterSpec&) const = default;
};

// Reads and validates `<include_key>` and `<exclude_key>`, with the given
// defaults; errors are reported at each key. `what` names what is
// filtered in their description ("block device").
NameFilterSpec read_name_filter(OptionReader& r, std::string_view what,
                                std::string_view include_key, std::string_view exclude_key,
                                std::string include_default = "", std::string exclude_default = "");

// Why `pattern` is not usable, or "" when it is.
std::string pattern_error(std::string_view pattern);

class NameFilter {
 public:
  // Everything passes.
  NameFilter();
  // Throws std::invalid_argument when a pattern does not compile (a spec
  // that read_name_filter() validated always does).
  explicit NameFilter(const NameFilterSpec& spec);
  ~NameFilter();
  NameFilter(NameFilter&&) noexcept;
  NameFilter& operator=(NameFilter&&) noexcept;

  // Included (or no include pattern) and not excluded.
  bool matches(std::string_view name) const;

 private:
  std::unique_ptr<re2::RE2> include_;
  std::unique_ptr<re2::RE2> exclude_;
};

}  // namespace nodewatch::sources
