#pragma once
// Configuration: one TOML file, every key with a default (an empty file is a
// valid configuration). Unknown keys, wrong types and out-of-range values are
// errors that name the key with its line and column; parsing collects every
// error rather than stopping at the first. A Config is a plain value: a
// reload parses a new one and swaps it in only when it has no error.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "nodewatch/collector.hpp"

namespace toml {
inline namespace v3 {
class node;
}
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

struct ListenAddress {
  std::string host;  // IP literal; empty means every interface
  std::uint16_t port = 0;
};
// Accepts ":9842", "127.0.0.1:9842", "[::1]:9842", "localhost:9842".
std::optional<ListenAddress> parse_listen_address(std::string_view text);

// Reads typed keys out of one TOML table, recording errors with positions.
// Every key that was never asked for is reported as unknown by finish().
class OptionReader {
 public:
  OptionReader(const toml::table& table, std::string key_prefix, std::string file,
               std::vector<ConfigError>* errors);

  bool get_bool(std::string_view key, bool def);
  std::int64_t get_int(std::string_view key, std::int64_t def, std::int64_t min, std::int64_t max);
  std::string get_string(std::string_view key, std::string def);
  // One of `allowed`.
  std::string get_enum(std::string_view key, std::string def,
                       std::span<const std::string_view> allowed);
  std::vector<std::string> get_string_array(std::string_view key, std::vector<std::string> def);
  Millis get_duration(std::string_view key, Millis def, Millis min, Millis max);
  // Reads an array of tables ([[<table>.<key>]]): calls `each` once per
  // element with a reader over that element, whose keys are named
  // "<prefix>.<key>[<index>].<name>"; unknown keys in an element are
  // reported. Returns the number of elements (0 when absent or not an array
  // of tables, which is reported).
  std::size_t for_each_table(std::string_view key,
                             const std::function<void(OptionReader&, std::size_t)>& each);
  // Reports an error at the key's position (or the table's, if the key is absent).
  void error(std::string_view key, std::string message);
  // Declares a key as known without reading it (a sub-table read separately).
  void mark_known(std::string_view key);
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

// Reads a collector's own options again in its factory (CollectorSpec::
// create). They were validated when the configuration was loaded, so an
// error here is a bug, reported as std::invalid_argument. `read` is the same
// function the spec's options() uses.
OptionReader collector_options_reader(const CollectorEnv& env, std::string_view collector,
                                      std::vector<ConfigError>* errors);
void throw_if_option_errors(const std::vector<ConfigError>& errors);

template <class Read>
auto reread_options(const CollectorEnv& env, std::string_view collector, Read read) {
  std::vector<ConfigError> errors;
  OptionReader r = collector_options_reader(env, collector, &errors);
  auto options = read(r);
  throw_if_option_errors(errors);
  return options;
}

struct ServerConfig {
  std::vector<std::string> listen{":9842"};
  int max_connections = 64;
  // A request's header must arrive within read_timeout (a client that sends
  // one byte a second is dropped); an idle keep-alive connection is closed
  // after idle_timeout.
  Millis read_timeout{10000};
  Millis idle_timeout{60000};
};

struct LogConfig {
  std::string level = "info";
};

struct CollectorConfig {
  const CollectorSpec* spec = nullptr;
  bool enabled = true;
  Millis interval{15000};
  Millis timeout{10000};
  // The collector's whole table ([collectors.<name>]), for its options.
  std::shared_ptr<const toml::table> options;

  std::string_view name() const { return spec->name; }
};

struct Config {
  std::string source;  // the file it came from, or "built-in defaults"
  ServerConfig server;
  LogConfig log;
  std::vector<CollectorConfig> collectors;  // one per catalog entry, catalog order
};

struct ConfigResult {
  std::optional<Config> config;  // set only when errors is empty
  std::vector<ConfigError> errors;
};

inline constexpr std::size_t kMaxConfigBytes = 1 << 20;

ConfigResult parse_config(std::string_view text, std::string_view file,
                          std::span<const CollectorSpec> catalog);

// Loads `path`. A missing file is an error when `must_exist`, else the
// built-in defaults.
ConfigResult load_config(const std::string& path, bool must_exist,
                         std::span<const CollectorSpec> catalog);

}  // namespace nodewatch
