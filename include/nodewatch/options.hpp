#pragma once
// Reading options: typed keys out of a TOML table, every error named with
// its key, line and column; and the typed, comparable value a collector's
// options become (a reload keeps a collector whose options compare equal).

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace toml {
inline namespace v3 {
class node;
class table;
}  // namespace v3
}  // namespace toml

namespace nodewatch {

using Millis = std::chrono::milliseconds;

struct ConfigError {
  std::string file;
  int line = 0;  // 0 when the error has no position (a missing file)
  int column = 0;
  std::string key;  // dotted key, may be empty
  std::string message;

  // "file:line:column: key: message"
  std::string str() const;
};

// Parses a duration such as "15s", "500ms", "1m30s", "2h". Units: ms, s, m, h.
std::optional<Millis> parse_duration(std::string_view text);
std::string format_duration(Millis d);

// The one line that documents a key, given at the call that reads it, so
// that the key's type, default and range, which that call holds, are
// written nowhere else (`nodewatchd --list-options`, docs/configuration.md).
// `instead_of_default`: what to show where the default only stands for
// "not set" (a required key, an expectation not checked).
struct Help {
  Help(const char* text) : text(text) {}             // NOLINT(google-explicit-constructor)
  Help(std::string text) : text(std::move(text)) {}  // NOLINT(google-explicit-constructor)
  Help(std::string text, std::string instead_of_default)
      : text(std::move(text)), instead_of_default(std::move(instead_of_default)) {}
  std::string text;
  std::string instead_of_default;
};

// One key as the reader that reads it describes it.
struct OptionDoc {
  // Dotted; an element of an array of tables is "[]", a key that is any
  // name "<name>": "collectors.storage.probe[].path".
  std::string key;
  std::string type;  // "boolean", "integer", "number", "string", "duration", ...
  // The default as a TOML value ("\"15s\"", "64", "[\"a\", \"b\"]"); empty
  // when `instead_of_default` says what not setting the key means.
  std::string default_value;
  std::string instead_of_default;
  std::string range;  // "1–100000", "100ms–5m", "`info`, `warn`", ...; "" when any value
  std::string help;
};

// Reads typed keys out of one TOML table, recording errors with positions.
// Every key that was never asked for is reported as unknown by finish().
// A reader made with a `docs` list describes too: every key asked for is
// appended to it (see Help), and sub() and for_each_table() go into the
// tables they read even when the table is empty, so that one pass over
// an empty table describes every key.
class OptionReader {
 public:
  OptionReader(const toml::table& table, std::string key_prefix, std::string file,
               std::vector<ConfigError>* errors, std::vector<OptionDoc>* docs = nullptr);

  bool get_bool(std::string_view key, bool def, Help help);
  std::int64_t get_int(std::string_view key, std::int64_t def, std::int64_t min, std::int64_t max,
                       Help help);
  // An integer or a float, within [min, max].
  double get_number(std::string_view key, double def, double min, double max, Help help);
  std::string get_string(std::string_view key, std::string def, Help help);
  // One of `allowed`.
  std::string get_enum(std::string_view key, std::string def,
                       std::span<const std::string_view> allowed, Help help);
  // At most `max` elements: a longer array is an error (and `def` is kept),
  // so that no list is taken that has no reason to be huge and would cost a
  // reload or every collection its length.
  static constexpr std::size_t kMaxArray = 1024;
  std::vector<std::string> get_string_array(std::string_view key, std::vector<std::string> def,
                                            Help help, std::size_t max = kMaxArray);
  Millis get_duration(std::string_view key, Millis def, Millis min, Millis max, Help help);
  // Reads an array of tables ([[<table>.<key>]]): calls `each` once per
  // element with a reader over that element, whose keys are named
  // "<prefix>.<key>[<index>].<name>"; unknown keys in an element are
  // reported. Returns the number of elements (0 when absent or not an array
  // of tables, which is reported). More than `max` elements is an error,
  // and none is read. Describing, `each` is called once, over an empty
  // element named "<prefix>.<key>[]", and 0 is returned.
  std::size_t for_each_table(std::string_view key, Help help,
                             const std::function<void(OptionReader&, std::size_t)>& each,
                             std::size_t max = kMaxArray);
  // Calls `each` with every key of the table, a map whose keys are names
  // (models, alerts); describing, once with "<name>".
  void for_each_key(std::string_view name, const std::function<void(std::string_view)>& each);
  // Reports an error at the key's position (or the table's, if the key is absent).
  void error(std::string_view key, std::string message);
  // Declares a key as known without reading it (a sub-table read separately).
  void mark_known(std::string_view key);
  // The sub-table at `key` (marked known), or nullptr when it is absent or
  // not a table (reported).
  const toml::table* get_table(std::string_view key);
  // A reader over the sub-table at `key` (marked known), named
  // "<prefix>.<key>", with the same file, errors and docs; over an empty
  // table when it is absent or not a table (reported), so that its keys
  // take their defaults, and are described.
  OptionReader sub(std::string_view key);
  // A key that moved elsewhere: present, it is an error that names its new
  // place ("`nvml_library` moved: set library in [nvml]").
  void refuse_moved(std::string_view key, std::string_view new_place);
  void finish();

  const std::string& prefix() const { return prefix_; }
  std::vector<ConfigError>* errors() const { return errors_; }
  const toml::table& table() const { return table_; }
  bool describing() const { return docs_ != nullptr; }

 private:
  const toml::node* lookup(std::string_view key);
  void error_at(const toml::node* node, std::string_view key, std::string message);
  void describe(std::string_view key, std::string type, std::string def, std::string range,
                Help help);

  const toml::table& table_;
  std::string prefix_;
  std::string file_;
  std::vector<ConfigError>* errors_;
  std::vector<OptionDoc>* docs_;
  std::vector<std::string> seen_;
};

// A value as TOML writes it: a basic string with its escapes, an array
// "[a, b]". What OptionDoc::default_value holds.
std::string toml_value(std::string_view s);
std::string toml_value(const std::vector<std::string>& v);

// A collector's options after validation: a typed value with equality. The
// configuration reads them once (CollectorSpec::read_options); the factory
// receives them in CollectorEnv; a reload compares old and new to decide
// whether the running collector can stay.
class CollectorOptions {
 public:
  virtual ~CollectorOptions() = default;
  virtual bool equals(const CollectorOptions& other) const = 0;
};

template <class T>
class TypedOptions final : public CollectorOptions {
 public:
  explicit TypedOptions(T value) : value_(std::move(value)) {}
  const T& value() const { return value_; }
  bool equals(const CollectorOptions& other) const override {
    const auto* o = dynamic_cast<const TypedOptions<T>*>(&other);
    return o != nullptr && o->value_ == value_;
  }

 private:
  T value_;
};

using OptionsReadFn = std::function<std::shared_ptr<const CollectorOptions>(OptionReader&)>;

// Wraps `read(OptionReader&) -> T` (T with operator==) as a spec's
// read_options function.
template <class T, class Read>
OptionsReadFn typed_options(Read read) {
  return [read](OptionReader& r) -> std::shared_ptr<const CollectorOptions> {
    return std::make_shared<const TypedOptions<T>>(read(r));
  };
}

}  // namespace nodewatch
