#include "nodewatch/options.hpp"

#include "nodewatch/collector.hpp"
#include "nodewatch/text.hpp"

#include <toml++/toml.h>
#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <fstream>
#include <sstream>
#include <system_error>
#include <utility>

namespace nodewatch {
namespace {

std::string join_key(const std::string& prefix, std::string_view key) {
  if (prefix.empty()) return std::string(key);
  return prefix + "." + std::string(key);
}

std::string_view type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::table: return "table";
    case toml::node_type::array: return "array";
    case toml::node_type::string: return "string";
    case toml::node_type::integer: return "integer";
    case toml::node_type::floating_point: return "float";
    case toml::node_type::boolean: return "boolean";
    case toml::node_type::date: return "date";
    case toml::node_type::time: return "time";
    case toml::node_type::date_time: return "date-time";
    default: return "nothing";
  }
}

}  // namespace

std::string ConfigError::str() const {
  // Appended piece by piece: GCC 12 at -O3 warns (-Wrestrict, a false
  // positive) on the equivalent chain of operator+.
  std::string out = file;
  if (line > 0) {
    out.append(1, ':').append(std::to_string(line));
    out.append(1, ':').append(std::to_string(column));
  }
  out.append(": ");
  if (!key.empty()) out.append(key).append(": ");
  out.append(message);
  return out;
}

std::optional<Millis> parse_duration(std::string_view text) {
  if (text.empty()) return std::nullopt;
  std::int64_t total_ms = 0;
  std::size_t i = 0;
  while (i < text.size()) {
    std::int64_t value = 0;
    const char* begin = text.data() + i;
    auto [ptr, ec] = std::from_chars(begin, text.data() + text.size(), value);
    if (ec != std::errc() || ptr == begin || value < 0) return std::nullopt;
    i = static_cast<std::size_t>(ptr - text.data());
    std::size_t unit_start = i;
    while (i < text.size() && text[i] >= 'a' && text[i] <= 'z') ++i;
    std::string_view unit = text.substr(unit_start, i - unit_start);
    std::int64_t scale = 0;
    if (unit == "ms")
      scale = 1;
    else if (unit == "s")
      scale = 1000;
    else if (unit == "m")
      scale = 60 * 1000;
    else if (unit == "h")
      scale = 3600 * 1000;
    else
      return std::nullopt;
    // Bound each term so that the sum cannot overflow (30 days is far beyond any valid value).
    constexpr std::int64_t kMaxMs = 30LL * 24 * 3600 * 1000;
    if (value > kMaxMs / scale) return std::nullopt;
    total_ms += value * scale;
    if (total_ms > kMaxMs) return std::nullopt;
  }
  return Millis(total_ms);
}

std::string format_duration(Millis d) {
  auto ms = d.count();
  if (ms != 0 && ms % 1000 == 0) {
    auto s = ms / 1000;
    if (s % 3600 == 0) return std::to_string(s / 3600) + "h";
    if (s % 60 == 0) return std::to_string(s / 60) + "m";
    return std::to_string(s) + "s";
  }
  return std::to_string(ms) + "ms";
}

std::string toml_value(std::string_view s) {
  std::string out = "\"";
  out += text::json_escaped(s);
  out += '"';
  return out;
}

std::string toml_value(const std::vector<std::string>& v) {
  std::string out = "[";
  for (const std::string& s : v) {
    if (out.size() > 1) out += ", ";
    out += toml_value(s);
  }
  out += ']';
  return out;
}

OptionReader::OptionReader(const toml::table& table, std::string key_prefix, std::string file,
                           std::vector<ConfigError>* errors, std::vector<OptionDoc>* docs)
    : table_(table),
      prefix_(std::move(key_prefix)),
      file_(std::move(file)),
      errors_(errors),
      docs_(docs) {}

void OptionReader::describe(std::string_view key, std::string type, std::string def,
                            std::string range, Help help) {
  if (docs_ == nullptr) return;
  OptionDoc d;
  d.key = join_key(prefix_, key);
  d.type = std::move(type);
  if (help.instead_of_default.empty())
    d.default_value = std::move(def);
  else
    d.instead_of_default = std::move(help.instead_of_default);
  d.range = std::move(range);
  d.help = std::move(help.text);
  docs_->push_back(std::move(d));
}

const toml::node* OptionReader::lookup(std::string_view key) {
  seen_.emplace_back(key);
  return table_.get(key);
}

void OptionReader::error_at(const toml::node* node, std::string_view key, std::string message) {
  const toml::source_region& src = node != nullptr ? node->source() : table_.source();
  errors_->push_back(ConfigError{file_, static_cast<int>(src.begin.line),
                                 static_cast<int>(src.begin.column), join_key(prefix_, key),
                                 std::move(message)});
}

void OptionReader::error(std::string_view key, std::string message) {
  error_at(table_.get(key), key, std::move(message));
}

bool OptionReader::get_bool(std::string_view key, bool def, Help help) {
  describe(key, "boolean", def ? "true" : "false", "", std::move(help));
  const toml::node* n = lookup(key);
  if (n == nullptr) return def;
  if (auto v = n->value_exact<bool>()) return *v;
  error_at(n, key, "expected a boolean, found " + std::string(type_name(*n)));
  return def;
}

std::int64_t OptionReader::get_int(std::string_view key, std::int64_t def, std::int64_t min,
                                   std::int64_t max, Help help) {
  describe(key, "integer", std::to_string(def), std::to_string(min) + "–" + std::to_string(max),
           std::move(help));
  const toml::node* n = lookup(key);
  if (n == nullptr) return def;
  auto v = n->value_exact<std::int64_t>();
  if (!v) {
    error_at(n, key, "expected an integer, found " + std::string(type_name(*n)));
    return def;
  }
  if (*v < min || *v > max) {
    error_at(n, key,
             "value " + std::to_string(*v) + " is out of range [" + std::to_string(min) + ", " +
                 std::to_string(max) + "]");
    return def;
  }
  return *v;
}

double OptionReader::get_number(std::string_view key, double def, double min, double max,
                                Help help) {
  if (docs_ != nullptr) {
    std::ostringstream d, r;
    d << def;
    r << min << "–" << max;
    describe(key, "number", d.str(), r.str(), std::move(help));
  }
  const toml::node* n = lookup(key);
  if (n == nullptr) return def;
  std::optional<double> v;
  if (auto i = n->value_exact<std::int64_t>()) v = static_cast<double>(*i);
  if (auto f = n->value_exact<double>()) v = *f;
  if (!v || !std::isfinite(*v)) {
    error_at(n, key, "expected a number, found " + std::string(type_name(*n)));
    return def;
  }
  if (*v < min || *v > max) {
    std::ostringstream m;
    m << "value " << *v << " is out of range [" << min << ", " << max << "]";
    error_at(n, key, m.str());
    return def;
  }
  return *v;
}

std::string OptionReader::get_string(std::string_view key, std::string def, Help help) {
  describe(key, "string", toml_value(def), "", std::move(help));
  const toml::node* n = lookup(key);
  if (n == nullptr) return def;
  if (auto v = n->value_exact<std::string>()) {
    // TOML allows "\u0000"; a path or name would be cut at it silently.
    if (v->find('\0') != std::string::npos) {
      error_at(n, key, "contains a NUL character (\\u0000)");
      return def;
    }
    return *v;
  }
  error_at(n, key, "expected a string, found " + std::string(type_name(*n)));
  return def;
}

std::string OptionReader::get_enum(std::string_view key, std::string def,
                                   std::span<const std::string_view> allowed, Help help) {
  if (docs_ != nullptr) {
    std::string values;
    for (auto a : allowed) values += (values.empty() ? "`" : ", `") + std::string(a) + "`";
    describe(key, "string", toml_value(def), values, std::move(help));
  }
  const toml::node* n = table_.get(key);
  std::vector<OptionDoc>* docs = std::exchange(docs_, nullptr);  // described above
  std::string v = get_string(key, def, "");
  docs_ = docs;
  if (n == nullptr || !n->is_string()) return v;
  if (std::find(allowed.begin(), allowed.end(), v) != allowed.end()) return v;
  std::string list;
  for (auto a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
  error_at(n, key, "\"" + v + "\" is not one of: " + list);
  return def;
}

std::vector<std::string> OptionReader::get_string_array(std::string_view key,
                                                        std::vector<std::string> def, Help help,
                                                        std::size_t max) {
  describe(key, "array of strings", toml_value(def), "at most " + std::to_string(max),
           std::move(help));
  const toml::node* n = lookup(key);
  if (n == nullptr) return def;
  const toml::array* arr = n->as_array();
  if (arr == nullptr) {
    error_at(n, key, "expected an array of strings, found " + std::string(type_name(*n)));
    return def;
  }
  if (arr->size() > max) {
    error_at(
        n, key,
        std::to_string(arr->size()) + " elements; at most " + std::to_string(max) + " are allowed");
    return def;
  }
  std::vector<std::string> out;
  for (const toml::node& el : *arr) {
    if (auto s = el.value_exact<std::string>()) {
      if (s->find('\0') != std::string::npos) {
        error_at(&el, key, "contains a NUL character (\\u0000)");
        return def;
      }
      out.push_back(*s);
    } else {
      error_at(
          &el, key,
          "expected an array of strings, found an element of type " + std::string(type_name(el)));
      return def;
    }
  }
  return out;
}

Millis OptionReader::get_duration(std::string_view key, Millis def, Millis min, Millis max,
                                  Help help) {
  describe(key, "duration", toml_value(format_duration(def)),
           format_duration(min) + "–" + format_duration(max), std::move(help));
  const toml::node* n = lookup(key);
  if (n == nullptr) return def;
  auto s = n->value_exact<std::string>();
  if (!s) {
    error_at(n, key,
             "expected a duration string such as \"15s\" or \"500ms\", found " +
                 std::string(type_name(*n)));
    return def;
  }
  auto d = parse_duration(*s);
  if (!d) {
    error_at(n, key, "\"" + *s + "\" is not a duration (use ms, s, m, h, e.g. \"15s\", \"1m30s\")");
    return def;
  }
  if (*d < min || *d > max) {
    error_at(n, key,
             "\"" + *s + "\" is out of range [" + format_duration(min) + ", " +
                 format_duration(max) + "]");
    return def;
  }
  return *d;
}

std::size_t OptionReader::for_each_table(
    std::string_view key, Help help, const std::function<void(OptionReader&, std::size_t)>& each,
    std::size_t max) {
  if (docs_ != nullptr) {
    if (help.instead_of_default.empty()) help.instead_of_default = "none";
    describe(key, "array of tables", "", "at most " + std::to_string(max), std::move(help));
    static const toml::table kNoElement;
    std::vector<ConfigError> ignored;  // the element's required keys are missing
    OptionReader element(kNoElement, join_key(prefix_, key) + "[]", file_, &ignored, docs_);
    each(element, 0);
  }
  const toml::node* n = lookup(key);
  if (n == nullptr) return 0;
  const toml::array* arr = n->as_array();
  if (arr == nullptr) {
    error_at(n, key,
             "expected an array of tables ([[" + join_key(prefix_, key) + "]]), found " +
                 std::string(type_name(*n)));
    return 0;
  }
  if (arr->size() > max) {
    error_at(
        n, key,
        std::to_string(arr->size()) + " tables; at most " + std::to_string(max) + " are allowed");
    return 0;
  }
  std::size_t count = 0;
  for (std::size_t i = 0; i < arr->size(); ++i) {
    const toml::node& el = *arr->get(i);
    const toml::table* t = el.as_table();
    if (t == nullptr) {
      error_at(
          &el, key,
          "expected an array of tables, found an element of type " + std::string(type_name(el)));
      continue;
    }
    OptionReader element(*t, join_key(prefix_, key) + "[" + std::to_string(i) + "]", file_,
                         errors_);
    each(element, i);
    element.finish();
    ++count;
  }
  return count;
}

void OptionReader::for_each_key(std::string_view name,
                                const std::function<void(std::string_view)>& each) {
  if (docs_ != nullptr) {
    each("<" + std::string(name) + ">");
    return;
  }
  for (auto&& [k, v] : table_) each(k.str());
}

OptionReader OptionReader::sub(std::string_view key) {
  static const toml::table kAbsent;
  const toml::table* t = get_table(key);
  return OptionReader(t != nullptr ? *t : kAbsent, join_key(prefix_, key), file_, errors_, docs_);
}

void OptionReader::mark_known(std::string_view key) {
  seen_.emplace_back(key);
}

const toml::table* OptionReader::get_table(std::string_view key) {
  mark_known(key);
  const toml::node* n = lookup(key);
  if (n == nullptr) return nullptr;
  if (const toml::table* t = n->as_table()) return t;
  error_at(n, key, "expected a table, found " + std::string(type_name(*n)));
  return nullptr;
}

void OptionReader::refuse_moved(std::string_view key, std::string_view new_place) {
  mark_known(key);
  if (lookup(key) == nullptr) return;
  error(key, "moved: set " + std::string(new_place) + " instead");
}

void OptionReader::finish() {
  for (auto&& [k, v] : table_) {
    std::string_view key = k.str();
    if (std::find(seen_.begin(), seen_.end(), key) != seen_.end()) continue;
    errors_->push_back(ConfigError{file_, static_cast<int>(k.source().begin.line),
                                   static_cast<int>(k.source().begin.column),
                                   join_key(prefix_, key), "unknown key"});
  }
}

std::shared_ptr<const CollectorOptions> default_options(const CollectorSpec& spec) {
  if (!spec.read_options) return nullptr;
  static const toml::table kEmpty;
  std::vector<ConfigError> errors;
  OptionReader r(kEmpty, "collectors." + std::string(spec.name), "built-in defaults", &errors);
  auto options = spec.read_options(r);
  r.finish();
  if (!errors.empty()) throw std::invalid_argument(errors.front().str());
  return options;
}

}  // namespace nodewatch
