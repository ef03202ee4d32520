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

// Reads typed keys out of one TOML table, recording errors with positions.
// Every key that was never asked for is reported as unknown by finish().
class OptionReader {
 public:
  OptionReader(const toml::table& table, std::string key_prefix, std::string file,
               std::vector<ConfigError>* errors);

  bool get_bool(std::string_view key, bool def);
  std::int64_t get_int(std::string_view key, std::int64_t def, std::int64_t min, std::int64_t max);
  // An integer or a float, within [min, max].
  double get_number(std::string_view key, double def, double min, double max);
  std::string get_string(std::string_view key, std::string def);
  // One of `allowed`.
  std::string get_enum(std::string_view key, std::string def,
                       std::span<const std::string_view> allowed);
  // At most `max` elements: a longer array is an error (and `def` is kept),
  // so that no list is taken that has no reason to be huge and would cost a
  // reload or every collection its length.
  static constexpr std::size_t kMaxArray = 1024;
  std::vector<std::string> get_string_array(std::string_view key, std::vector<std::string> def,
                                            std::size_t max = kMaxArray);
  Millis get_duration(std::string_view key, Millis def, Millis min, Millis max);
  // Reads an array of tables ([[<table>.<key>]]): calls `each` once per
  // element with a reader over that element, whose keys are named
  // "<prefix>.<key>[<index>].<name>"; unknown keys in an element are
  // reported. Returns the number of elements (0 when absent or not an array
  // of tables, which is reported). More than `max` elements is an error,
  // and none is read.
  std::size_t for_each_table(std::string_view key,
                             const std::function<void(OptionReader&, std::size_t)>& each,
                             std::size_t max = kMaxArray);
  // Reports an error at the key's position (or the table's, if the key is absent).
  void error(std::string_view key, std::string message);
  // Declares a key as known without reading it (a sub-table read separately).
  void mark_known(std::string_view key);
  // The sub-table at `key` (marked known), or nullptr when it is absent or
  // not a table (reported).
  const toml::table* get_table(std::string_view key);
  // A key that moved elsewhere: present, it is an error that names its new
  // place ("`nvml_library` moved: set library in [nvml]").
  void refuse_moved(std::string_view key, std::string_view new_place);
  void finish();

  const std::string& prefix() const { return prefix_; }

 private:
  const toml::node* lookup(std::string_view key);
  void error_at(const toml::node* node, std::string_view key, std::string message);

  const toml::table& table_;
  std::string prefix_;
  std::string file_;
  std::vector<ConfigError>* errors_;
  std::vector<std::string> seen_;
};

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
