#include "config.hpp"
#include "toml_guard.hpp"

#include "nodewatch/fs_helper.hpp"

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
void read_server(OptionReader& r, ServerConfig& server, const std::string& file_s,
                 std::vector<ConfigError>& errors) {
  server.listen = r.get_string_array(
      "listen", server.listen,
      "addresses to listen on, at least one: \":9842\" (every interface), \"127.0.0.1:9842\", "
      "\"[::1]:9842\"; ignored under socket activation",
      16);
  if (const toml::node* n = r.table().get("listen"); n != nullptr && n->is_array()) {
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
  server.max_connections = static_cast<int>(
      r.get_int("max_connections", server.max_connections, 1, 100000,
                "connections served at once; when all are taken, a new one takes the slot of one "
                "waiting on its client, else it gets a 503"));
  server.read_timeout =
      r.get_duration("read_timeout", server.read_timeout, Millis(100), Millis(300000),
                     "a request's header and body must arrive within this, or the connection is "
                     "dropped");
  server.idle_timeout =
      r.get_duration("idle_timeout", server.idle_timeout, Millis(100), Millis(3600000),
                     "an idle keep-alive connection is closed after this");
  server.write_timeout =
      r.get_duration("write_timeout", server.write_timeout, Millis(100), Millis(300000),
                     "a client that has not read its response within this is dropped");
  server.max_connections_per_client = static_cast<int>(r.get_int(
      "max_connections_per_client", server.max_connections_per_client, 1, 100000,
      "connections one client address may hold at once (at most max_connections: a larger "
      "value is lowered to it); see docs/running.md, \"Connection slots\""));
  if (server.max_connections_per_client > server.max_connections)
    server.max_connections_per_client = server.max_connections;
  server.web_config_file = r.get_string(
      "web_config_file", server.web_config_file,
      "the exporter-toolkit web configuration (TLS, basic authentication, headers, rate "
      "limit), relative to this file's directory; \"\": plain HTTP, no authentication");
  if (!server.web_config_file.empty() && server.web_config_file[0] != '/') {
    std::filesystem::path dir = std::filesystem::path(file_s).parent_path();
    server.web_config_file = (dir / server.web_config_file).lexically_normal().string();
  }
  server.healthy_without_auth =
      r.get_bool("healthy_without_auth", server.healthy_without_auth,
                 "/-/healthy and /-/node-health answer without credentials (a liveness probe, a "
                 "load balancer); everything else still needs them");
  server.check_socket = r.get_string(
      "check_socket", server.check_socket,
      "the unix socket nodewatchd --check and --learn-expected ask the daemon on, in a "
      "directory only the daemon's user and root may write; \"\": none (they then collect "
      "one round themselves); see docs/verdict.md");
  if (const std::string& p = server.check_socket;
      !p.empty() && (p[0] != '/' || p.back() == '/' || p.size() > 107 ||
                     std::filesystem::path(p).lexically_normal().string() != p)) {
    r.error("check_socket", "\"" + p +
                                "\" is not an absolute file path of at most 107 bytes without "
                                "\".\" or \"..\" parts");
  }
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

// [collectors.<name>]: the common keys, then the collector's own options.
CollectorConfig read_collector(const CollectorSpec& spec, OptionReader& all) {
  CollectorConfig cc;
  cc.spec = &spec;
  cc.enabled = spec.enabled_by_default;
  cc.interval = spec.default_interval;
  cc.timeout = spec.default_timeout;
  // Over the parsed table itself: copies of toml++ nodes lose their source
  // positions, which every error message needs.
  OptionReader r = all.sub(spec.name);
  cc.enabled = r.get_bool("enabled", cc.enabled, "run the collector");
  cc.interval = r.get_duration("interval", cc.interval, Millis(100), Millis(24LL * 3600 * 1000),
                               "time between collections; served values are at most this old");
  // At most a minute: READY=1 waits for the first round, and the unit
  // gives the start 90 s. Not set, it is never longer than the interval
  // (as Prometheus's scrape_timeout is the global one or the interval,
  // whichever is shorter), so an interval alone is never refused for it.
  cc.timeout = r.get_duration(
      "timeout", std::min(cc.timeout, cc.interval), Millis(10), Millis(60000),
      "a collection still running after this is failed and its metrics withdrawn; at most "
      "interval, and not set, the interval when that is shorter than the default (readiness "
      "waits for the first round)");
  if (cc.timeout > cc.interval) {
    r.error("timeout", "timeout (" + format_duration(cc.timeout) +
                           ") must not be longer than interval (" + format_duration(cc.interval) +
                           ")");
  }
  if (spec.read_options) cc.options = spec.read_options(r);
  r.finish();
  return cc;
}

// Every table of the file, read through `top`; also what describe_config()
// runs over an empty file.
void read_sections(OptionReader& top, std::span<const CollectorSpec> catalog, Config& cfg) {
  const std::string& file = cfg.source;
  std::vector<ConfigError>& errors = *top.errors();
  // Sections are known by name so that finish() flags unknown ones.
  OptionReader server = top.sub("server");
  read_server(server, cfg.server, file, errors);
  server.finish();

  OptionReader log = top.sub("log");
  cfg.log.level = log.get_enum("level", cfg.log.level, kLogLevels,
                               "the least severe log level written; under systemd the log goes "
                               "to the journal with priorities, elsewhere to stderr");
  log.finish();

  OptionReader nvml = top.sub("nvml");
  cfg.shared.nvml_library = nvml.get_string(
      "library", cfg.shared.nvml_library,
      "NVML library name or path, one session for the accelerator collector and NVLink alike "
      "(a missing library means no NVIDIA devices, not an error); not empty. "
      "collectors.accelerator.nvml_library and collectors.interconnect.nvml_library are "
      "refused with a message naming this key");
  if (cfg.shared.nvml_library.empty()) nvml.error("library", "must not be empty");
  nvml.finish();

  OptionReader expect = top.sub("expect");
  cfg.expect = read_expectations(expect, file, &errors);
  expect.finish();

  OptionReader all = top.sub("collectors");
  report_unknown_collectors(all.table(), catalog, file, errors);
  // Over [collectors]: its unknown keys are reported above, with the names
  // that are known, so this reader is never finished.
  for (const CollectorSpec& spec : catalog) cfg.collectors.push_back(read_collector(spec, all));
}

}  // namespace

std::vector<OptionDoc> describe_config(std::span<const CollectorSpec> catalog) {
  static const toml::table kNoFile;
  std::vector<ConfigError> ignored;
  std::vector<OptionDoc> docs;
  Config cfg;
  cfg.source = "built-in defaults";
  OptionReader top(kNoFile, "", cfg.source, &ignored, &docs);
  read_sections(top, catalog, cfg);
  return docs;
}

ConfigResult parse_config(std::string_view text, std::string_view file,
                          std::span<const CollectorSpec> catalog) {
  ConfigResult result;
  std::string file_s(file);
  if (text.size() > kMaxConfigBytes) {
    result.errors.push_back(ConfigError{
        file_s, 0, 0, "", "file is larger than " + std::to_string(kMaxConfigBytes) + " bytes"});
    return result;
  }
  std::optional<toml::table> parsed = parse_toml_text(text, file_s, &result.errors);
  if (!parsed) return result;
  const toml::table& root = *parsed;

  Config cfg;
  cfg.source = file_s;
  OptionReader top(root, "", file_s, &result.errors);
  read_sections(top, catalog, cfg);
  top.finish();
  std::vector<ConfigError>& errors = result.errors;
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
  // or never end. Read by a helper within its timeout (fs_helper.hpp): a
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
