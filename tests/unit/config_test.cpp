#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <toml++/toml.h>
#include <unistd.h>

#include "app.hpp"
#include "config.hpp"
#include "support/daemon_process.hpp"
#include "support/paths.hpp"
#include "toml_guard.hpp"

namespace nodewatch {
namespace {

using namespace std::chrono_literals;

// Beta's options, as a collector keeps them.
struct BetaOptions {
  std::string library;
  std::int64_t depth = 0;
  std::vector<std::string> probe_paths;
  bool operator==(const BetaOptions&) const = default;
};

// A catalog of two collectors, one with an option of its own.
std::vector<CollectorSpec> TestCatalog() {
  CollectorSpec a;
  a.name = "alpha";
  a.default_interval = 15s;
  a.default_timeout = 10s;
  CollectorSpec b;
  b.name = "beta";
  b.enabled_by_default = false;
  b.default_interval = 30s;
  b.default_timeout = 5s;
  b.read_options = typed_options<BetaOptions>([](OptionReader& r) {
    BetaOptions o;
    o.library = r.get_string("library", "libfoo.so.1", "the library");
    o.depth = r.get_int("depth", 4, 1, 16, "how deep");
    r.for_each_table("probe", "a probe", [&o](OptionReader& p, std::size_t) {
      o.probe_paths.push_back(p.get_string("path", "", {"the path", "none: required"}));
      if (o.probe_paths.back().empty()) p.error("path", "is required");
      p.get_int("size", 1, 1, 10, "bytes");
    });
    return o;
  });
  return {a, b};
}

ConfigResult Parse(std::string_view text) {
  static const auto catalog = TestCatalog();
  return parse_config(text, "test.toml", catalog);
}

// The single error of a config that must fail.
ConfigError OnlyError(std::string_view text) {
  ConfigResult r = Parse(text);
  EXPECT_FALSE(r.config.has_value());
  EXPECT_EQ(r.errors.size(), 1u) << (r.errors.empty() ? "" : r.errors[0].str());
  return r.errors.empty() ? ConfigError{} : r.errors[0];
}

// A string as the configuration reference writes it parses back to itself:
// quotes, backslashes and every control character escaped as TOML asks.
TEST(ConfigTest, TomlValueParsesBackToTheString) {
  const std::string s = "a\"b\\c\nd\te\rf\x01g\x7fh\x1b[31m";
  const std::string v = toml_value(s);
  EXPECT_EQ(v, "\"a\\\"b\\\\c\\nd\\te\\rf\\u0001g\\u007fh\\u001b[31m\"");
  toml::table t;
  ASSERT_NO_THROW(t = toml::parse("k = " + v)) << v;
  EXPECT_EQ(t["k"].value<std::string>(), s);
}

TEST(ConfigTest, EmptyFileGivesDefaults) {
  ConfigResult r = Parse("");
  ASSERT_TRUE(r.config) << r.errors[0].str();
  EXPECT_EQ(r.config->server.listen, std::vector<std::string>{":9842"});
  EXPECT_EQ(r.config->server.max_connections, 64);
  EXPECT_EQ(r.config->log.level, "info");
  ASSERT_EQ(r.config->collectors.size(), 2u);
  EXPECT_EQ(r.config->collectors[0].name(), "alpha");
  EXPECT_TRUE(r.config->collectors[0].enabled);
  EXPECT_EQ(r.config->collectors[0].interval, 15s);
  EXPECT_EQ(r.config->collectors[0].timeout, 10s);
  EXPECT_FALSE(r.config->collectors[1].enabled);
  EXPECT_EQ(r.config->collectors[1].interval, 30s);
}

TEST(ConfigTest, FullFileIsRead) {
  ConfigResult r = Parse(R"(
[server]
listen = ["127.0.0.1:9100", "[::1]:9100"]
max_connections = 8
read_timeout = "2s"
idle_timeout = "1m"
[log]
level = "debug"
[collectors.alpha]
enabled = false
interval = "1m30s"
timeout = "500ms"
[collectors.beta]
enabled = true
library = "/opt/lib/libfoo.so"
depth = 8
)");
  ASSERT_TRUE(r.config) << r.errors[0].str();
  const Config& c = *r.config;
  EXPECT_EQ(c.server.listen.size(), 2u);
  EXPECT_EQ(c.server.max_connections, 8);
  EXPECT_EQ(c.server.read_timeout, 2s);
  EXPECT_EQ(c.server.idle_timeout, 60s);
  EXPECT_EQ(c.log.level, "debug");
  EXPECT_FALSE(c.collectors[0].enabled);
  EXPECT_EQ(c.collectors[0].interval, 90s);
  EXPECT_EQ(c.collectors[0].timeout, 500ms);
  EXPECT_TRUE(c.collectors[1].enabled);
  ASSERT_TRUE(c.collectors[1].options);
  CollectorEnv env{Roots{}, c.collectors[1].options};
  EXPECT_EQ(env.options_as<BetaOptions>().library, "/opt/lib/libfoo.so");
  EXPECT_THROW(env.options_as<std::string>(), std::invalid_argument);
}

// A reload keeps a collector whose configuration compares equal: the same
// values written differently still compare equal; any change does not.
TEST(ConfigTest, CollectorConfigsCompareByValue) {
  auto a = Parse("[collectors.beta]\nenabled = true\nlibrary = \"/l.so\"\n");
  auto same = Parse(
      "# comment\n[collectors.beta]\nlibrary = \"/l.so\"\nenabled = true\ndepth = 4\n"
      "interval = \"30s\"\n");
  auto other = Parse("[collectors.beta]\nenabled = true\nlibrary = \"/m.so\"\n");
  auto slower =
      Parse("[collectors.beta]\nenabled = true\nlibrary = \"/l.so\"\ninterval = \"1m\"\n");
  auto probed = Parse(
      "[collectors.beta]\nenabled = true\nlibrary = \"/l.so\"\n[[collectors.beta.probe]]\n"
      "path = \"/p\"\n");
  ASSERT_TRUE(a.config && same.config && other.config && slower.config && probed.config);
  EXPECT_TRUE(a.config->collectors[1].same_as(same.config->collectors[1]));
  EXPECT_TRUE(a.config->collectors[0].same_as(other.config->collectors[0]));  // alpha: no options
  EXPECT_FALSE(a.config->collectors[1].same_as(other.config->collectors[1]));
  EXPECT_FALSE(a.config->collectors[1].same_as(slower.config->collectors[1]));
  EXPECT_FALSE(a.config->collectors[1].same_as(probed.config->collectors[1]));
  EXPECT_FALSE(a.config->collectors[0].same_as(a.config->collectors[1]));
}

TEST(ConfigTest, SyntaxErrorHasLineAndColumn) {
  ConfigError e = OnlyError("[server]\nlisten = [\":9842\"\nmax_connections = 3\n");
  EXPECT_EQ(e.file, "test.toml");
  EXPECT_GE(e.line, 2);
  EXPECT_GT(e.column, 0);
  EXPECT_NE(e.str().find("test.toml:"), std::string::npos);
}

TEST(ConfigTest, UnknownKeyIsNamedWithPosition) {
  ConfigError e = OnlyError("[server]\nmax_connections = 3\nlisen = [\":1\"]\n");
  EXPECT_EQ(e.key, "server.lisen");
  EXPECT_EQ(e.line, 3);
  EXPECT_EQ(e.column, 1);
  EXPECT_EQ(e.message, "unknown key");
  EXPECT_EQ(e.str(), "test.toml:3:1: server.lisen: unknown key");
}

TEST(ConfigTest, UnknownSectionAndCollector) {
  EXPECT_EQ(OnlyError("[sever]\n").key, "sever");
  ConfigError e = OnlyError("[collectors.gamma]\nenabled = true\n");
  EXPECT_EQ(e.key, "collectors.gamma");
  EXPECT_EQ(e.line, 1);
  EXPECT_NE(e.message.find("unknown collector"), std::string::npos);
  EXPECT_NE(e.message.find("alpha, beta"), std::string::npos);
}

TEST(ConfigTest, UnknownCollectorOption) {
  ConfigError e = OnlyError("[collectors.alpha]\nlibrary = \"x\"\n");
  EXPECT_EQ(e.key, "collectors.alpha.library");
  EXPECT_EQ(e.line, 2);
}

TEST(ConfigTest, ArrayOfTablesElementsAreValidatedOneByOne) {
  ConfigResult ok = Parse(
      "[[collectors.beta.probe]]\npath = \"/a\"\n[[collectors.beta.probe]]\npath = \"/b\"\n"
      "size = 3\n");
  EXPECT_TRUE(ok.config.has_value()) << (ok.errors.empty() ? "" : ok.errors[0].str());

  ConfigError unknown = OnlyError(
      "[[collectors.beta.probe]]\npath = \"/a\"\n[[collectors.beta.probe]]\npath = \"/b\"\n"
      "bogus = 1\n");
  EXPECT_EQ(unknown.key, "collectors.beta.probe[1].bogus");
  EXPECT_EQ(unknown.message, "unknown key");
  EXPECT_EQ(unknown.line, 5);

  ConfigError missing = OnlyError("[[collectors.beta.probe]]\nsize = 2\n");
  EXPECT_EQ(missing.key, "collectors.beta.probe[0].path");
  EXPECT_EQ(missing.message, "is required");
  EXPECT_EQ(missing.line, 1);  // the element's own position

  ConfigError range = OnlyError("[[collectors.beta.probe]]\npath = \"/a\"\nsize = 11\n");
  EXPECT_EQ(range.key, "collectors.beta.probe[0].size");
  EXPECT_EQ(range.line, 3);

  ConfigError scalar = OnlyError("[collectors.beta]\nprobe = 3\n");
  EXPECT_EQ(scalar.key, "collectors.beta.probe");
  EXPECT_NE(scalar.message.find("expected an array of tables"), std::string::npos);

  ConfigError element = OnlyError("[collectors.beta]\nprobe = [1]\n");
  EXPECT_NE(element.message.find("found an element of type integer"), std::string::npos)
      << element.message;
}

TEST(ConfigTest, WrongTypes) {
  ConfigError e = OnlyError("[server]\nmax_connections = \"64\"\n");
  EXPECT_EQ(e.key, "server.max_connections");
  EXPECT_EQ(e.line, 2);
  EXPECT_EQ(e.column, 19);
  EXPECT_NE(e.message.find("expected an integer, found string"), std::string::npos);
  EXPECT_NE(OnlyError("[collectors.alpha]\nenabled = 1\n").message.find("expected a boolean"),
            std::string::npos);
  EXPECT_NE(OnlyError("[collectors.alpha]\ninterval = 15\n").message.find("duration"),
            std::string::npos);
  EXPECT_NE(OnlyError("server = 3\n").message.find("expected a table"), std::string::npos);
  EXPECT_NE(OnlyError("[server]\nlisten = \":9842\"\n").message.find("array of strings"),
            std::string::npos);
  EXPECT_NE(OnlyError("[server]\nlisten = [9842]\n").message.find("array of strings"),
            std::string::npos);
}

TEST(ConfigTest, OutOfRange) {
  ConfigError e = OnlyError("[server]\nmax_connections = 0\n");
  EXPECT_NE(e.message.find("out of range [1, 100000]"), std::string::npos);
  EXPECT_EQ(OnlyError("[collectors.beta]\ndepth = 17\n").key, "collectors.beta.depth");
  EXPECT_NE(OnlyError("[collectors.alpha]\ninterval = \"10ms\"\n").message.find("out of range"),
            std::string::npos);
  EXPECT_NE(OnlyError("[log]\nlevel = \"loud\"\n").message.find("not one of"), std::string::npos);
  // READY=1 waits for the first round: a collector may not hold it past a minute.
  EXPECT_NE(OnlyError("[collectors.alpha]\ninterval = \"5m\"\ntimeout = \"2m\"\n")
                .message.find("out of range"),
            std::string::npos);
  EXPECT_NE(OnlyError("[server]\nlisten = [\"nohost\"]\n").message.find("not an address"),
            std::string::npos);
  EXPECT_NE(OnlyError("[server]\nlisten = []\n").message.find("at least one"), std::string::npos);
}

TEST(ConfigTest, TimeoutMustNotExceedInterval) {
  ConfigError e = OnlyError("[collectors.alpha]\ninterval = \"5s\"\ntimeout = \"6s\"\n");
  EXPECT_EQ(e.key, "collectors.alpha.timeout");
  EXPECT_EQ(e.line, 3);
}

// As Prometheus's scrape_timeout: a timeout not set is the default or the
// interval, whichever is shorter; one set longer than the interval is
// still refused.
TEST(ConfigTest, AnUnsetTimeoutIsNeverLongerThanTheInterval) {
  ConfigResult r = Parse("[collectors.alpha]\ninterval = \"1s\"\n");
  ASSERT_TRUE(r.config) << r.errors.at(0).message;
  EXPECT_EQ(r.config->collectors[0].interval, 1s);
  EXPECT_EQ(r.config->collectors[0].timeout, 1s);
  ConfigResult longer = Parse("[collectors.alpha]\ninterval = \"1m\"\n");
  ASSERT_TRUE(longer.config);
  EXPECT_EQ(longer.config->collectors[0].timeout, 10s);
  ConfigError e = OnlyError("[collectors.alpha]\ninterval = \"1s\"\ntimeout = \"10s\"\n");
  EXPECT_EQ(e.key, "collectors.alpha.timeout");
  EXPECT_NE(e.message.find("timeout (10s) must not be longer than interval (1s)"),
            std::string::npos)
      << e.message;
}

// A file that grows while it is read (an editor writing it) is refused as
// changed, not as larger than the bound. A procfs file stands for it: it
// stat()s as 0 bytes and reads as more, every time.
TEST(ConfigTest, AFileThatGrowsWhileReadIsRefusedAsChanged) {
  static const auto catalog = TestCatalog();
  ConfigResult r = load_config("/proc/self/status", true, catalog);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_NE(r.errors[0].message.find("changed while being read"), std::string::npos)
      << r.errors[0].message;
  EXPECT_EQ(r.errors[0].message.find("larger than"), std::string::npos) << r.errors[0].message;
}

TEST(ConfigTest, EveryErrorIsReported) {
  ConfigResult r = Parse("[server]\nmax_connections = -1\nbogus = 1\n[log]\nlevel = 3\n");
  EXPECT_FALSE(r.config);
  EXPECT_EQ(r.errors.size(), 3u);
}

TEST(ConfigTest, OversizedFileIsRejectedBeforeParsing) {
  std::string big(kMaxConfigBytes + 1, '#');
  ConfigResult r = Parse(big);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_NE(r.errors[0].message.find("larger than"), std::string::npos);
}

TEST(ConfigTest, Durations) {
  EXPECT_EQ(parse_duration("15s"), 15s);
  EXPECT_EQ(parse_duration("500ms"), 500ms);
  EXPECT_EQ(parse_duration("1m30s"), 90s);
  EXPECT_EQ(parse_duration("2h"), 7200s);
  EXPECT_EQ(parse_duration("0s"), 0s);
  for (const char* bad :
       {"", "15", "s", "1.5s", "-1s", "15 s", "1d", "99999999999999999999s", "1s2"})
    EXPECT_FALSE(parse_duration(bad).has_value()) << bad;
  EXPECT_EQ(format_duration(15s), "15s");
  EXPECT_EQ(format_duration(90s), "90s");
  EXPECT_EQ(format_duration(120s), "2m");
  EXPECT_EQ(format_duration(1500ms), "1500ms");
}

TEST(ConfigTest, ListenAddresses) {
  auto a = parse_listen_address(":9842");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->host, "");
  EXPECT_EQ(a->port, 9842);
  a = parse_listen_address("[::1]:80");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->host, "::1");
  EXPECT_EQ(parse_listen_address("localhost:1")->host, "127.0.0.1");
  EXPECT_EQ(parse_listen_address("10.1.2.3:0")->port, 0);
  for (const char* bad :
       {"9842", ":", ":65536", "::1:80", "[::1]80", "host.example:80", "1.2.3.4:x"})
    EXPECT_FALSE(parse_listen_address(bad).has_value()) << bad;
}

// The check socket: an absolute, normal path a socket address can hold,
// or "" for none.
TEST(ConfigTest, CheckSocketPaths) {
  EXPECT_EQ(Parse("").config->server.check_socket, "/run/nodewatch/check.sock");
  EXPECT_EQ(Parse("[server]\ncheck_socket = \"\"\n").config->server.check_socket, "");
  EXPECT_EQ(Parse("[server]\ncheck_socket = \"/run/x/c.sock\"\n").config->server.check_socket,
            "/run/x/c.sock");
  for (const std::string& bad :
       std::vector<std::string>{"c.sock", "/run/x/", "/run/../tmp/c.sock", "/run/./c.sock",
                                "/run//c.sock", "/" + std::string(107, 'a')}) {
    ConfigResult r = Parse("[server]\ncheck_socket = \"" + bad + "\"\n");
    EXPECT_FALSE(r.config) << bad;
    ASSERT_EQ(r.errors.size(), 1u) << bad;
    EXPECT_NE(r.errors[0].str().find("server.check_socket: \"" + bad +
                                     "\" is not an absolute file path of at most 107 bytes"),
              std::string::npos)
        << r.errors[0].str();
  }
}

TEST(ConfigTest, MissingFile) {
  static const auto catalog = TestCatalog();
  ConfigResult must = load_config("/nonexistent/nodewatch.toml", true, catalog);
  EXPECT_FALSE(must.config);
  ASSERT_EQ(must.errors.size(), 1u);
  EXPECT_NE(must.errors[0].str().find("/nonexistent/nodewatch.toml"), std::string::npos);
  ConfigResult opt = load_config("/nonexistent/nodewatch.toml", false, catalog);
  ASSERT_TRUE(opt.config);
  EXPECT_EQ(opt.config->source, "built-in defaults");
}

TEST(ConfigTest, ANulInsideAStringIsRefusedNotCut) {
  static const auto catalog = TestCatalog();
  ConfigResult r = parse_config(
      "[server]\nweb_config_file = \"web\\u0000.yml\"\nlisten = [\":1\", \"a\\u0000b\"]\n",
      "t.toml", catalog);
  EXPECT_FALSE(r.config);
  std::string all;
  for (const auto& e : r.errors) all += e.str() + "\n";
  EXPECT_NE(all.find("t.toml:2:19: server.web_config_file: contains a NUL character"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("server.listen: contains a NUL character"), std::string::npos) << all;
}

TEST(ConfigTest, OnlyARegularFileIsAConfiguration) {
  // A directory read as an empty file would be "configuration OK" with the
  // defaults; a FIFO would block the open (and a reload with it).
  static const auto catalog = TestCatalog();
  testing::TempDir dir;
  ConfigResult d = load_config(dir.path().string(), true, catalog);
  ASSERT_FALSE(d.config);
  ASSERT_EQ(d.errors.size(), 1u);
  EXPECT_EQ(d.errors[0].str(), dir.path().string() + ": the configuration is not a regular file");
  ConfigResult d_default = load_config(dir.path().string(), false, catalog);
  EXPECT_FALSE(d_default.config) << "an existing directory is not a missing file";
  ASSERT_EQ(::mkfifo((dir.path() / "fifo").c_str(), 0644), 0);
  auto start = std::chrono::steady_clock::now();
  ConfigResult f = load_config((dir.path() / "fifo").string(), true, catalog);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  ASSERT_FALSE(f.config);
  EXPECT_NE(f.errors[0].str().find("not a regular file"), std::string::npos);
  ConfigResult null = load_config("/dev/null", true, catalog);
  EXPECT_FALSE(null.config);
  // Through a symbolic link to a regular file: read.
  dir.write("real.toml", "[collectors.alpha]\ninterval = \"20s\"\n");
  std::filesystem::create_symlink(dir.path() / "real.toml", dir.path() / "link.toml");
  EXPECT_TRUE(load_config((dir.path() / "link.toml").string(), true, catalog).config);
  // Unreadable: the reason is said.
  if (::geteuid() != 0) {
    std::filesystem::permissions(dir.path() / "real.toml", std::filesystem::perms::none);
    ConfigResult denied = load_config((dir.path() / "real.toml").string(), true, catalog);
    ASSERT_FALSE(denied.config);
    EXPECT_NE(denied.errors[0].str().find("Permission denied"), std::string::npos);
  }
}

TEST(ConfigTest, LoadsFromFile) {
  static const auto catalog = TestCatalog();
  auto path = std::filesystem::temp_directory_path() /
              ("nw-config-" + std::to_string(::getpid()) + ".toml");
  { std::ofstream(path) << "[collectors.alpha]\ninterval = \"20s\"\n"; }
  ConfigResult r = load_config(path, true, catalog);
  std::filesystem::remove(path);
  ASSERT_TRUE(r.config);
  EXPECT_EQ(r.config->collectors[0].interval, 20s);
  EXPECT_EQ(r.config->source, path.string());
}

TEST(ConfigTest, DescribingReadsEveryKeyOnce) {
  static const auto catalog = TestCatalog();
  std::map<std::string, OptionDoc> docs;
  for (OptionDoc& d : describe_config(catalog)) {
    std::string key = d.key;
    EXPECT_TRUE(docs.emplace(key, std::move(d)).second) << key << " is described twice";
  }
  ASSERT_TRUE(docs.count("collectors.beta.depth"));
  const OptionDoc& depth = docs["collectors.beta.depth"];
  EXPECT_EQ(depth.type, "integer");
  EXPECT_EQ(depth.default_value, "4");
  EXPECT_EQ(depth.range, "1–16");
  EXPECT_EQ(depth.help, "how deep");
  EXPECT_EQ(docs["collectors.beta.enabled"].default_value, "false");
  EXPECT_EQ(docs["collectors.beta.interval"].default_value, "\"30s\"");
  EXPECT_EQ(docs["collectors.alpha.timeout"].range, "10ms–1m");
  EXPECT_EQ(docs["collectors.beta.library"].default_value, "\"libfoo.so.1\"");
  EXPECT_EQ(docs["collectors.beta.probe"].type, "array of tables");
  // An element's keys, though the file has no element.
  ASSERT_TRUE(docs.count("collectors.beta.probe[].path"));
  EXPECT_EQ(docs["collectors.beta.probe[].path"].default_value, "");
  EXPECT_EQ(docs["collectors.beta.probe[].path"].instead_of_default, "none: required");
  EXPECT_EQ(docs["log.level"].range,
            "`trace`, `debug`, `info`, `warn`, `error`, `critical`, `off`");
  EXPECT_EQ(docs["server.listen"].default_value, "[\":9842\"]");
  // Every table, the expectations too, and the keys that are any name.
  EXPECT_TRUE(docs.count("expect.accelerator.models.<model>"));
  EXPECT_TRUE(docs.count("expect.thresholds.<alert>.<duration key>"));
  EXPECT_TRUE(docs.count("expect.pcie[].device"));
  for (const auto& [key, d] : docs) EXPECT_FALSE(d.help.empty()) << key << " has no description";
}

// The lines of a TOML file that are TOML commented out ("#key = value",
// "#[table]", and the lines of an array that one of them opens), without
// their '#'; prose comments ("# text") stay comments.
std::string uncomment(std::istream& in) {
  std::string out, line;
  bool in_array = false;
  while (std::getline(in, line)) {
    bool toml_line = line.size() > 1 && line[0] == '#' && line[1] != ' ' && line[1] != '#';
    if (in_array || toml_line) {
      line.erase(0, 1);
      std::string trimmed = line.substr(0, line.find_last_not_of(' ') + 1);
      std::size_t first = trimmed.find_first_not_of(' ');
      bool closes =
          first != std::string::npos && trimmed.compare(first, std::string::npos, "]") == 0;
      in_array = in_array ? !closes : !trimmed.empty() && trimmed.back() == '[';
    }
    out += line + "\n";
  }
  return out;
}

// A value as TOML writes it, with durations in one form ("60s" is "1m").
std::string canonical(const toml::node& n, bool duration) {
  if (auto s = n.value_exact<std::string>()) {
    std::optional<Millis> d = duration ? parse_duration(*s) : std::nullopt;
    return toml_value(d ? format_duration(*d) : *s);
  }
  if (const toml::array* a = n.as_array()) {
    std::string out = "[";
    for (const toml::node& el : *a) out += (out.size() > 1 ? ", " : "") + canonical(el, duration);
    return out + "]";
  }
  std::ostringstream out;
  n.visit([&](const auto& v) {
    if constexpr (toml::is_value<decltype(v)>) out << v;
  });
  return out.str();
}

// Whether `key` is described by `pattern`, where a component "<name>"
// stands for any one.
bool matches(const std::vector<std::string>& key, const std::string& pattern) {
  std::vector<std::string> parts;
  std::stringstream ss(pattern);
  for (std::string p; std::getline(ss, p, '.');) parts.push_back(p);
  if (parts.size() != key.size()) return false;
  for (std::size_t i = 0; i < key.size(); ++i)
    if (parts[i] != key[i] && !(parts[i].size() > 2 && parts[i].front() == '<')) return false;
  return true;
}

void check_shown(const toml::table& t, std::vector<std::string> path,
                 const std::vector<OptionDoc>& docs) {
  for (auto&& [k, v] : t) {
    std::vector<std::string> key = path;
    key.emplace_back(k.str());
    if (const toml::table* sub = v.as_table()) {
      check_shown(*sub, key, docs);
      continue;
    }
    std::string dotted;
    for (const std::string& c : key) dotted += (dotted.empty() ? "" : ".") + c;
    if (const toml::array* a = v.as_array(); a != nullptr && a->is_array_of_tables()) {
      key.back() += "[]";
      for (const toml::node& el : *a) check_shown(*el.as_table(), key, docs);
      continue;
    }
    auto d = std::find_if(docs.begin(), docs.end(),
                          [&](const OptionDoc& d) { return matches(key, d.key); });
    if (d == docs.end()) {
      ADD_FAILURE() << "packaging/nodewatch.toml:" << v.source().begin.line << ": " << dotted
                    << " is not a configuration key";
      continue;
    }
    if (d->default_value.empty()) continue;  // no default: the value is an example
    const bool duration = d->type == "duration";
    toml::table def = toml::parse("v = " + d->default_value);
    EXPECT_EQ(canonical(v, duration), canonical(*def.get("v"), duration))
        << "packaging/nodewatch.toml:" << v.source().begin.line << ": " << dotted
        << " shows another value than its default";
  }
}

// packaging/nodewatch.toml shows every key it names with its default,
// commented out: each is a key that is read, and its value the one the
// reader takes by default (an expectation, a probe or a rail, which have
// none, shows an example).
TEST(ConfigTest, ShippedFileShowsKeysWithTheirDefaults) {
  std::ifstream in(std::string(NODEWATCH_TESTS_SOURCE_DIR) + "/../packaging/nodewatch.toml");
  ASSERT_TRUE(in) << "packaging/nodewatch.toml";
  std::string text = uncomment(in);
  toml::table shown = toml::parse(text, std::string_view("packaging/nodewatch.toml"));
  const std::vector<OptionDoc> docs = describe_config(builtin_collectors());
  check_shown(shown, {}, docs);
  // The file shows something of every collector.
  for (const CollectorSpec& spec : builtin_collectors())
    EXPECT_TRUE(shown["collectors"][spec.name].is_table()) << spec.name;
}

// What toml++ 3.3.0 must not read (daemon/toml_guard.hpp): non-ASCII
// outside strings and comments, and right after a line-ending backslash.
TEST(TomlGuard, NonAsciiOnlyWhereTomlAllowsIt) {
  for (std::string_view ok :
       {"a = \"é\" # é\n", "a = 'é'\n", "a = \"\"\"é\n\\\n  x é\"\"\"\n", "a = '''é'''\n",
        "a = \"\\\"é\"\n", "a = \"\"\"x\"\"\"\"\"\nb = 1\n", "# only é\n"})
    EXPECT_FALSE(unsafe_toml_text(ok)) << ok;
  const auto key = unsafe_toml_text("a = 1\n[é]\n");
  ASSERT_TRUE(key);
  EXPECT_EQ(key->line, 2u);
  EXPECT_EQ(key->column, 2u);
  EXPECT_TRUE(unsafe_toml_text("a = 1é\n"));
  EXPECT_TRUE(unsafe_toml_text("a = \"x\" é\n"));
  const auto trimmed = unsafe_toml_text("a = \"\"\"x\\\n\n   é\"\"\"\n");
  ASSERT_TRUE(trimmed);
  EXPECT_EQ(trimmed->line, 3u);
  EXPECT_EQ(trimmed->column, 4u);
  // Through the configuration: an error with its place, not toml++'s UB.
  const ConfigResult r = parse_config("[collectors.accélérateur]\n", "x.toml", {});
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].line, 1);
  EXPECT_NE(r.errors[0].message.find("non-ASCII"), std::string::npos);
}

}  // namespace
}  // namespace nodewatch
