#include "toml_guard.hpp"

namespace nodewatch {
namespace {

bool non_ascii(char c) {
  return static_cast<unsigned char>(c) >= 0x80;
}

}  // namespace

std::optional<TomlTextProblem> unsafe_toml_text(std::string_view text) {
  enum class In { kNothing, kComment, kBasic, kLiteral, kMultiBasic, kMultiLiteral };
  In in = In::kNothing;
  std::size_t line = 1, line_start = 0;
  auto problem = [&](std::size_t at, const char* what) {
    return TomlTextProblem{line, at - line_start + 1, what};
  };
  auto starts = [&](std::size_t i, std::string_view s) { return text.substr(i, s.size()) == s; };
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
      line_start = i + 1;
      // A single-line string or a comment ends with its line (an
      // unterminated string is toml++'s error to give).
      if (in == In::kComment || in == In::kBasic || in == In::kLiteral) in = In::kNothing;
      continue;
    }
    switch (in) {
      case In::kNothing:
        if (c == '#') {
          in = In::kComment;
        } else if (starts(i, "\"\"\"")) {
          in = In::kMultiBasic;
          i += 2;
        } else if (c == '"') {
          in = In::kBasic;
        } else if (starts(i, "'''")) {
          in = In::kMultiLiteral;
          i += 2;
        } else if (c == '\'') {
          in = In::kLiteral;
        } else if (non_ascii(c)) {
          return problem(i, "a non-ASCII character outside a string or comment");
        }
        break;
      case In::kComment: break;
      case In::kBasic:
        if (c == '\\')
          ++i;  // an escape: the next character is not the end
        else if (c == '"')
          in = In::kNothing;
        break;
      case In::kLiteral:
        if (c == '\'') in = In::kNothing;
        break;
      case In::kMultiBasic:
        if (c == '\\') {
          // A line-ending backslash: spaces or tabs, a line end, then the
          // whitespace toml++ trims up to the next character.
          std::size_t j = i + 1;
          while (j < text.size() && (text[j] == ' ' || text[j] == '\t')) ++j;
          if (j < text.size() && (text[j] == '\n' || starts(j, "\r\n"))) {
            while (j < text.size() &&
                   (text[j] == ' ' || text[j] == '\t' || text[j] == '\r' || text[j] == '\n')) {
              if (text[j] == '\n') {
                ++line;
                line_start = j + 1;
              }
              ++j;
            }
            if (j < text.size() && non_ascii(text[j]))
              return problem(j,
                             "a non-ASCII character right after a line-ending backslash in a "
                             "multi-line string (put it after another character)");
            i = j - 1;
          } else {
            ++i;  // an escape
          }
        } else if (starts(i, "\"\"\"")) {
          // Up to two more quotes are the string's own.
          i += 2;
          for (int k = 0; k < 2 && i + 1 < text.size() && text[i + 1] == '"'; ++k) ++i;
          in = In::kNothing;
        }
        break;
      case In::kMultiLiteral:
        if (starts(i, "'''")) {
          i += 2;
          for (int k = 0; k < 2 && i + 1 < text.size() && text[i + 1] == '\''; ++k) ++i;
          in = In::kNothing;
        }
        break;
    }
  }
  return std::nullopt;
}

std::optional<toml::table> parse_toml_text(std::string_view text, const std::string& file,
                                           std::vector<ConfigError>* errors) {
  if (const auto bad = unsafe_toml_text(text)) {
    errors->push_back(ConfigError{file, static_cast<int>(bad->line), static_cast<int>(bad->column),
                                  "", bad->message});
    return std::nullopt;
  }
  try {
    return toml::parse(text, file);
  } catch (const toml::parse_error& e) {
    errors->push_back(ConfigError{file, static_cast<int>(e.source().begin.line),
                                  static_cast<int>(e.source().begin.column), "",
                                  std::string(e.description())});
    return std::nullopt;
  }
}

}  // namespace nodewatch
