#include "config.hpp"

#include "nodewatch/helper.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <toml++/toml.h>

#include "nodewatch/unique_fd.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <fstream>
#include <sstream>
#include <system_error>

namespace nodewatch {
namespace {

constexpr std::array<std::string_view, 7> kLogLevels{"trace", "debug",    "info", "warn",
                                                     "error", "critical", "off"};

}  // namespace

std::optional<ListenAddress> parse_listen_address(std::string_view text) {
  ListenAddress out;
  std::string_view port_text;
  if (!text.empty() && text.front() == '[') {
    auto close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':')
      return std::nullopt;
    out.host = std::string(text.substr(1, close - 1));
    if (out.host.empty()) return std::nullopt;
    port_text = text.substr(close + 2);
  } else {
    auto colon = text.rfind(':');
    if (colon == std::string_view::npos) return std::nullopt;
    out.host = std::string(text.substr(0, colon));
    if (out.host.find(':') != std::string::npos) return std::nullopt;  // bare IPv6 needs brackets
    port_text = text.substr(colon + 1);
  }
  if (out.host == "localhost") out.host = "127.0.0.1";
  unsigned port = 0;
  auto [ptr, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || ptr != port_text.data() + port_text.size() || port_text.empty() ||
      port > 65535)
    return std::nullopt;
  out.port = static_cast<std::uint16_t>(port);
  if (!out.host.empty()) {
    // Only IP literals: a name would need a resolver at bind time.
    bool ok_v4 = std::all_of(out.host.begin(), out.host.end(),
                             [](char c) { return (c >= '0' && c <= '9') || c == '.'; });
    bool ok_v6 = std::all_of(out.host.begin(), out.host.end(), [](char c) {
      return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') ||
             c == ':' || c == '.';
    });
    bool has_colon = out.host.find(':') != std::string::npos;
    if (!(ok_v4 && !has_colon) && !(ok_v6 && has_colon)) return std::nullopt;
  }
  return out;
}

namespace {

// [server]: where and how the exporter serves.
void read_server(const toml::table& t, OptionReader& r, ServerConfig& server,
                 const std::string& file_s, std::vector<ConfigError>& errors) {
  server.listen = r.get_string_array("listen", server.listen, 16);
  if (const toml::node* n = t.get("listen"); n != nullptr && n->is_array()) {
    if (server.listen.empty()) r.error("listen", "needs at least one address");
    for (std::size_t i = 0; i < server.listen.size(); ++i) {
      if (!parse_listen_address(server.listen[i])) {
        const toml::node* el = n->as_array()->get(i);
        errors.push_back(ConfigError{
            file_s, static_cast<int>(el->source().begin.line),
            static_cast<int>(el->source().begin.column), "server.listen",
            "\"" + server.listen[i] +
                "\" is not an address (use \":9842\", \"127.0.0.1:9842\" or \"[::1]:9842\")"});
      }
    }
  }
  server.max_connections =
      static_cast<int>(r.get_int("max_connections", server.max_connections, 1, 100000));
  server.read_timeout =
      r.get_duration("read_timeout", server.read_timeout, Millis(100), Millis(300000));
  server.idle_timeout =
      r.get_duration("idle_timeout", server.idle_timeout, Millis(100), Millis(3600000));
  server.write_timeout =
      r.get_duration("write_timeout", server.write_timeout, Millis(100), Millis(300000));
  server.max_connections_per_client = static_cast<int>(
      r.get_int("max_connections_per_client", server.max_connections_per_client, 1, 100000));
  if (server.max_connections_per_client > server.max_connections)
    server.max_connections_per_client = server.max_connections;
  server.web_config_file = r.get_string("web_config_file", server.web_config_file);
  if (!server.web_config_file.empty() && server.web_config_file[0] != '/') {
    std::filesystem::path dir = std::filesystem::path(file_s).parent_path();
    server.web_config_file = (dir / server.web_config_file).lexically_normal().string();
  }
  server.healthy_without_auth = r.get_bool("healthy_without_auth", server.healthy_without_auth);
}

// The keys of [collectors] that name no collector, each an error that
// lists the known ones.
void report_unknown_collectors(const toml::table& collectors,
                               std::span<const CollectorSpec> catalog, const std::string& file_s,
                               std::vector<ConfigError>& errors) {
  for (auto&& [k, v] : collectors) {
    const std::string_view name = k.str();  // (Clang 14 cannot capture a structured binding)
    bool known = std::any_of(catalog.begin(), catalog.end(),
                             [&](const CollectorSpec& s) { return s.name == name; });
    if (!known) {
      std::string names;
      for (const auto& s : catalog) names += (names.empty() ? "" : ", ") + std::string(s.name);
      errors.push_back(ConfigError{
          file_s, static_cast<int>(k.source().begin.line),
          static_cast<int>(k.source().begin.column), "collectors." + std::string(k.str()),
          "unknown collector (known: " + (names.empty() ? std::string("none") : names) + ")"});
    }
  }
}

const toml::table kEmpty;

// [collectors.<name>]: the common keys, then the collector's own options.
CollectorConfig read_collector(const CollectorSpec& spec, OptionReader& all,
                               const std::string& file_s, std::vector<ConfigError>& errors) {
  CollectorConfig cc;
  cc.spec = &spec;
  cc.enabled = spec.enabled_by_default;
  cc.interval = spec.default_interval;
  cc.timeout = spec.default_timeout;
  std::string prefix = "collectors." + std::string(spec.name);
  const toml::table* t = all.get_table(spec.name);
  // Read the parsed table itself: copies of toml++ nodes lose their source
  // positions, which every error message needs.
  const toml::table& src = t != nullptr ? *t : kEmpty;
  OptionReader r(src, prefix, file_s, &errors);
  cc.enabled = r.get_bool("enabled", cc.enabled);
  cc.interval = r.get_duration("interval", cc.interval, Millis(100), Millis(24LL * 3600 * 1000));
  // At most a minute: READY=1 waits for the first round, and the unit
  // gives the start 90 s.
  cc.timeout = r.get_duration("timeout", cc.timeout, Millis(10), Millis(60000));
  if (cc.timeout > cc.interval) {
    r.error(src.contains("timeout") ? "timeout" : "interval",
            "timeout (" + format_duration(cc.timeout) + ") must not be longer than interval (" +
                format_duration(cc.interval) + ")");
  }
  if (spec.read_options) cc.options = spec.read_options(r);
  r.finish();
  return cc;
}

}  // namespace

ConfigResult parse_config(std::string_view text, std::string_view file,
                          std::span<const CollectorSpec> catalog) {
  ConfigResult result;
  std::string file_s(file);
  if (text.size() > kMaxConfigBytes) {
    result.errors.push_back(ConfigError{
        file_s, 0, 0, "", "file is larger than " + std::to_string(kMaxConfigBytes) + " bytes"});
    return result;
  }
  toml::table root;
  try {
    root = toml::parse(text, file);
  } catch (const toml::parse_error& e) {
    result.errors.push_back(ConfigError{file_s, static_cast<int>(e.source().begin.line),
                                        static_cast<int>(e.source().begin.column), "",
                                        std::string(e.description())});
    return result;
  }

  std::vector<ConfigError>& errors = result.errors;
  Config cfg;
  cfg.source = file_s;
  OptionReader top(root, "", file_s, &errors);
  // Sections are known by name so that finish() flags unknown ones.
  if (const toml::table* t = top.get_table("server")) {
    OptionReader r(*t, "server", file_s, &errors);
    read_server(*t, r, cfg.server, file_s, errors);
    r.finish();
  }
  if (const toml::table* t = top.get_table("log")) {
    OptionReader r(*t, "log", file_s, &errors);
    cfg.log.level = r.get_enum("level", cfg.log.level, kLogLevels);
    r.finish();
  }

  if (const toml::table* t = top.get_table("nvml")) {
    OptionReader r(*t, "nvml", file_s, &errors);
    cfg.shared.nvml_library = r.get_string("library", cfg.shared.nvml_library);
    if (cfg.shared.nvml_library.empty()) r.error("library", "must not be empty");
    r.finish();
  }

  if (const toml::table* t = top.get_table("expect")) {
    OptionReader r(*t, "expect", file_s, &errors);
    cfg.expect = read_expectations(*t, r, file_s, &errors);
    r.finish();
  }

  const toml::table* collectors = top.get_table("collectors");
  if (collectors != nullptr) report_unknown_collectors(*collectors, catalog, file_s, errors);
  // Over [collectors]: its unknown keys are reported above, with the names
  // that are known, so this reader is never finished.
  OptionReader all(collectors != nullptr ? *collectors : kEmpty, "collectors", file_s, &errors);
  for (const CollectorSpec& spec : catalog)
    cfg.collectors.push_back(read_collector(spec, all, file_s, errors));
  top.finish();

  if (errors.empty()) result.config = std::move(cfg);
  return result;
}

ConfigResult load_config(const std::string& path, bool must_exist,
                         std::span<const CollectorSpec> catalog) {
  auto fail = [&](const std::string& why) {
    ConfigResult r;
    r.errors.push_back(ConfigError{path, 0, 0, "", why});
    return r;
  };
  // A regular file only. A directory would read as an empty file (the
  // defaults, "configuration OK"); a FIFO or a device would block the open
  // or never end. Read by a helper within its timeout (helper.hpp): a
  // configuration on a hung mount fails the reload, and --check-config,
  // instead of freezing them.
  helper::OperatorFile f = helper::read_operator_file(path, kMaxConfigBytes);
  if (!f.ok) {
    if (f.absent && !must_exist) return parse_config("", "built-in defaults", catalog);
    if (f.error == "not a regular file") return fail("the configuration is not a regular file");
    return fail("cannot read configuration file: " + f.error);
  }
  std::string text = std::move(f.text);
  return parse_config(text, path, catalog);
}

}  // namespace nodewatch
