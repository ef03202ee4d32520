#pragma once
// What toml++ 3.3.0 (Debian bookworm) must not be given. Its character
// tables reach __builtin_unreachable for most non-ASCII characters where it
// asks whether a character is whitespace: outside strings and comments
// ("[é]", "a = 1é"), and after a line-ending backslash in a multi-line basic
// string. That is undefined behaviour, in the library as Debian ships it
// too, where GCC's code happens to answer "not whitespace"; UBSan and the
// configuration fuzzer (tests/fuzz/regressions/config/) see it. TOML allows
// non-ASCII only in strings and comments, so refusing it elsewhere refuses
// no valid file but the one rare form, which gets an error that says so.

#include <toml++/toml.h>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "nodewatch/options.hpp"

namespace nodewatch {

struct TomlTextProblem {
  std::size_t line = 0;    // 1-based
  std::size_t column = 0;  // 1-based, in bytes
  std::string message;
};

// The first place in `text` that toml++ must not read; nullopt when none.
std::optional<TomlTextProblem> unsafe_toml_text(std::string_view text);

// The configuration's and the expect file's one way in: `text` checked,
// then parsed; nullopt, with the error (file, line, column) added to
// `errors`, when it is refused or is not TOML.
std::optional<toml::table> parse_toml_text(std::string_view text, const std::string& file,
                                           std::vector<ConfigError>* errors);

}  // namespace nodewatch
