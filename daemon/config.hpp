#pragma once
// Configuration: one TOML file, every key with a default (an empty file is a
// valid configuration). Unknown keys, wrong types and out-of-range values are
// errors that name the key with its line and column; parsing collects every
// error rather than stopping at the first. A Config is a plain value: a
// reload parses a new one and swaps it in only when it has no error.
// The daemon's own header: collectors see nodewatch/options.hpp only.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "expect.hpp"
#include "nodewatch/collector.hpp"
#include "nodewatch/options.hpp"

namespace nodewatch {

struct ListenAddress {
  std::string host;  // IP literal; empty means every interface
  std::uint16_t port = 0;
};
// Accepts ":9842", "127.0.0.1:9842", "[::1]:9842", "localhost:9842".
std::optional<ListenAddress> parse_listen_address(std::string_view text);

struct ServerConfig {
  std::vector<std::string> listen{":9842"};
  int max_connections = 64;
  // A request's header must arrive within read_timeout (a client that sends
  // one byte a second is dropped); an idle keep-alive connection is closed
  // after idle_timeout.
  Millis read_timeout{10000};
  Millis idle_timeout{60000};
  // A response must be read by its client within write_timeout, well under
  // Prometheus's scrape timeout (10 s by default): a client that does not
  // read loses its connection, and its slot, then.
  Millis write_timeout{5000};
  // Connections from one client address at once (at most max_connections);
  // see http_server.hpp for how the slots are shared.
  int max_connections_per_client = 8;
  // The exporter-toolkit web configuration (TLS, basic authentication):
  // absolute, or relative to the configuration file's directory; "" none.
  std::string web_config_file;
  bool healthy_without_auth = false;  // /-/healthy and /-/node-health answer without credentials
  // The unix socket --check and --learn-expected ask (check_socket.hpp);
  // "" none. In the unit's runtime directory (RuntimeDirectory=nodewatch).
  std::string check_socket = "/run/nodewatch/check.sock";
};

struct LogConfig {
  std::string level = "info";
};

struct CollectorConfig {
  const CollectorSpec* spec = nullptr;
  bool enabled = true;
  Millis interval{15000};
  Millis timeout{10000};
  // What the spec's read_options() made of [collectors.<name>]; null for a
  // collector without options.
  std::shared_ptr<const CollectorOptions> options;

  std::string_view name() const { return spec->name; }
  // Same collector, same schedule, equal options: a reload keeps the
  // running instance.
  bool same_as(const CollectorConfig& o) const {
    return spec == o.spec && enabled == o.enabled && interval == o.interval &&
           timeout == o.timeout &&
           (options == nullptr ? o.options == nullptr
                               : o.options != nullptr && options->equals(*o.options));
  }
};

struct Config {
  std::string source;  // the file it came from, or "built-in defaults"
  ServerConfig server;
  LogConfig log;
  SharedSettings shared;                    // [nvml]
  Expectations expect;                      // [expect], or the file it names
  std::vector<CollectorConfig> collectors;  // one per catalog entry, catalog order
};

struct ConfigResult {
  std::optional<Config> config;  // set only when errors is empty
  std::vector<ConfigError> errors;
};

inline constexpr std::size_t kMaxConfigBytes = 1 << 20;

ConfigResult parse_config(std::string_view text, std::string_view file,
                          std::span<const CollectorSpec> catalog);

// Every key of the configuration, described by the calls that read it, in
// the order they are read: `nodewatchd --list-options`, docs/configuration.md.
// Reads no file and checks no path.
std::vector<OptionDoc> describe_config(std::span<const CollectorSpec> catalog);

// Loads `path`. A missing file is an error when `must_exist`, else the
// built-in defaults.
ConfigResult load_config(const std::string& path, bool must_exist,
                         std::span<const CollectorSpec> catalog);

}  // namespace nodewatch
