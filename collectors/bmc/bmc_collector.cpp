#include "bmc/bmc_collector.hpp"

#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <sstream>

#include "bmc/bmc_metrics.hpp"
#include "nodewatch/state_file.hpp"

namespace nodewatch {
namespace bmc {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr std::string_view kStateMagic = "nodewatch-bmc-sel 1";
constexpr std::size_t kMaxCounts = 1024;
// What the helper's answer may take beyond the request's timeout (its
// own session gives up within it), and what is kept back of the
// collection's deadline for the rest of the collection.
constexpr auto kAnswerMargin = 500ms;
constexpr auto kKeptBack = 100ms;

// IPMI base unit codes (IPMI 2.0, table 43-15) of the typed families.
enum Unit : int {
  kCelsius = 1,
  kFahrenheit = 2,
  kKelvin = 3,
  kVolts = 4,
  kAmperes = 5,
  kWatts = 6,
  kRpm = 18
};

bool absolute(const std::string& p) {
  return !p.empty() && p[0] == '/';
}

std::string sel_state_path(const BmcOptions& o) {
  return o.state_directory + "/bmc-sel.state";
}

// The SDR cache of this target: another BMC's would be out of date.
std::string sdr_cache_path(const BmcOptions& o) {
  std::string name = o.host.empty() ? "local" : o.host;
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-') c = '_';
  return o.state_directory + "/bmc-sdr-" + name + ".cache";
}

std::vector<std::string> helper_argv(const BmcOptions& o) {
  std::vector<std::string> a = {o.helper.empty() ? helper_path("nwd-bmc") : o.helper};
  if (o.host.empty()) {
    a.insert(a.end(), {"--device", o.device});
  } else {
    a.insert(a.end(), {"--host", o.host, "--protocol", o.protocol, "--privilege", o.privilege});
    if (!o.username.empty()) a.insert(a.end(), {"--username", o.username});
    if (!o.password_file.empty()) a.insert(a.end(), {"--password-file", o.password_file});
  }
  a.insert(a.end(), {"--sdr-cache", sdr_cache_path(o)});
  if (!o.interpret_config.empty()) a.insert(a.end(), {"--interpret-config", o.interpret_config});
  return a;
}

double state_value(std::string_view s) {
  return s == "critical" ? 2 : s == "warning" ? 1 : 0;
}

// Each sensor's series name: the SDR's, with " #2", " #3"... for a name
// that an earlier record already had (one per entity on many boards).
std::vector<std::string> sensor_names(const std::vector<Sensor>& sensors) {
  std::map<std::string, int> seen;
  std::vector<std::string> out;
  for (const Sensor& s : sensors) {
    int n = ++seen[s.name];
    out.push_back(n == 1 ? s.name : s.name + " #" + std::to_string(n));
  }
  return out;
}

void emit_sensors(const Reading& r, MetricSink& out) {
  const std::vector<std::string> names = sensor_names(r.sensors);
  std::map<std::string, double> by_state = {
      {"nominal", 0}, {"warning", 0}, {"critical", 0}, {"unknown", 0}};
  for (std::size_t i = 0; i < r.sensors.size(); ++i) {
    const Sensor& s = r.sensors[i];
    const std::string& name = names[i];
    by_state[s.state] += 1;
    if (s.state != "unknown") out.add(families::kSensorState, {name, s.type}, state_value(s.state));
    if (!s.value) continue;
    const double v = *s.value;
    switch (s.unit) {
      case kCelsius: out.add(families::kTemperatureCelsius, {name}, v); break;
      case kFahrenheit: out.add(families::kTemperatureCelsius, {name}, (v - 32) * 5 / 9); break;
      case kKelvin: out.add(families::kTemperatureCelsius, {name}, v - 273.15); break;
      case kVolts: out.add(families::kVoltageVolts, {name}, v); break;
      case kAmperes: out.add(families::kCurrentAmperes, {name}, v); break;
      case kWatts: out.add(families::kPowerWatts, {name}, v); break;
      case kRpm: out.add(families::kFanSpeedRpm, {name}, v); break;
      default: out.add(families::kSensorValue, {name, s.type, s.unit_text}, v);
    }
  }
  for (const auto& [state, n] : by_state) out.add(families::kSensors, {state}, n);
}

}  // namespace

const MetricTable& bmc_metric_table() {
  static const MetricTable kTable({
      describe(families::kUp),
      describe(families::kInfo),
      describe(families::kTemperatureCelsius),
      describe(families::kFanSpeedRpm),
      describe(families::kPowerWatts),
      describe(families::kVoltageVolts),
      describe(families::kCurrentAmperes),
      describe(families::kSensorValue),
      describe(families::kSensorState),
      describe(families::kSensors),
      describe(families::kNodePowerWatts),
      describe(families::kSelEntries),
      describe(families::kSelFreeBytes),
      describe(families::kSelEventsTotal),
  });
  return kTable;
}

BmcOptions read_bmc_options(OptionReader& r) {
  BmcOptions o;
  o.device = r.get_string("device", o.device,
                          "the kernel's IPMI device, read when `host` is \"\" (in-band)");
  if (!absolute(o.device)) r.error("device", "must be an absolute path");
  o.host = r.get_string(
      "host", o.host,
      "\"ADDRESS:PORT\" of a BMC to read over the network instead (port 623 when left out), for "
      "nodes whose in-band interface is off; \"\": in-band");
  if (std::any_of(o.host.begin(), o.host.end(), [](char c) { return std::isspace(c) != 0; }))
    r.error("host", "must be an address, with its port after a colon");
  o.protocol = r.get_string("protocol", o.protocol,
                            "with `host`: \"lan\" (IPMI 1.5, MD5) or \"lanplus\" (IPMI 2.0, "
                            "cipher suite 3)");
  if (o.protocol != "lan" && o.protocol != "lanplus")
    r.error("protocol", "must be \"lan\" or \"lanplus\"");
  o.username = r.get_string("username", o.username, "with `host`: the BMC user (\"\": none)");
  o.password_file = r.get_string(
      "password_file", o.password_file,
      "with `host`: a file whose first line is the user's password, readable by nodewatch and "
      "by no other user (\"\": no password)");
  if (!o.password_file.empty()) {
    struct stat st {};
    if (!absolute(o.password_file))
      r.error("password_file", "must be an absolute path");
    else if (::stat(o.password_file.c_str(), &st) != 0)
      r.error("password_file", o.password_file + ": " + std::strerror(errno));
    else if (!S_ISREG(st.st_mode))
      r.error("password_file", o.password_file + " is not a regular file");
    else if ((st.st_mode & S_IRWXO) != 0)
      r.error("password_file",
              o.password_file + " can be read by other users: chmod o-rwx, then reload");
  }
  o.privilege = r.get_string("privilege", o.privilege,
                             "with `host`: the session's privilege, \"user\" (enough to read "
                             "sensors, the SEL and DCMI power), \"operator\" or \"admin\"");
  if (o.privilege != "user" && o.privilege != "operator" && o.privilege != "admin")
    r.error("privilege", "must be \"user\", \"operator\" or \"admin\"");
  o.interpret_config = r.get_string(
      "interpret_config", o.interpret_config,
      "FreeIPMI's sensor and SEL interpretation file (freeipmi_interpret_sensor.conf's format), "
      "to name OEM sensors' states; \"\": FreeIPMI's default");
  if (!o.interpret_config.empty() && !absolute(o.interpret_config))
    r.error("interpret_config", "must be an absolute path");
  o.state_directory = r.get_string(
      "state_directory", o.state_directory,
      "where the SDR cache (bmc-sdr-TARGET.cache) and the SEL's counts (bmc-sel.state) are kept");
  if (!absolute(o.state_directory))
    r.error("state_directory", "must be an absolute path");
  else if (std::string why = state_path_problem(sel_state_path(o)); !why.empty())
    r.error("state_directory", why);
  o.sel_entries_per_collection = r.get_int(
      "sel_entries_per_collection", o.sel_entries_per_collection, 0, kMaxEvents,
      "the most SEL entries read in one collection (a long SEL is counted over several); 0 reads "
      "only its fill");
  return o;
}

std::string serialize_sel_book(const SelBook& book) {
  std::string out(kStateMagic);
  out += "\ntarget\t" + field(book.target) + "\ncursor\t" + std::to_string(book.cursor.record_id) +
         "\t" + std::to_string(book.cursor.timestamp) + "\n";
  for (const auto& [key, n] : book.counts)
    out +=
        "count\t" + field(key.first) + "\t" + field(key.second) + "\t" + std::to_string(n) + "\n";
  return out;
}

bool parse_sel_book(std::string_view text, SelBook* book, std::string* why) {
  SelBook b;
  std::istringstream in{std::string(text)};
  std::string line;
  if (!std::getline(in, line) || line != kStateMagic) {
    *why = "not a state file of this version";
    return false;
  }
  auto num = [](std::string_view s, auto* v) {
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
    return !s.empty() && ec == std::errc() && end == s.data() + s.size();
  };
  while (std::getline(in, line)) {
    // Every field, an empty last one too ("target\t" has one).
    std::vector<std::string> f;
    for (std::size_t from = 0;;) {
      const std::size_t tab = line.find('\t', from);
      f.push_back(line.substr(from, tab - from));
      if (tab == std::string::npos) break;
      from = tab + 1;
    }
    // What field() would have changed is not what the daemon wrote.
    if (std::any_of(f.begin(), f.end(), [](const std::string& x) {
          return x.size() > kMaxFieldBytes || x.find('\r') != std::string::npos;
        })) {
      *why = "a field over " + std::to_string(kMaxFieldBytes) + " bytes, or with a carriage return";
      return false;
    }
    if (f.size() == 2 && f[0] == "target") {
      b.target = f[1];
    } else if (f.size() == 3 && f[0] == "cursor" && num(f[1], &b.cursor.record_id) &&
               num(f[2], &b.cursor.timestamp) && b.cursor.record_id >= -1 &&
               b.cursor.record_id <= 0xffff) {
    } else if (f.size() == 4 && f[0] == "count" && !f[1].empty() &&
               std::find(std::begin(kStates), std::end(kStates), f[2]) != std::end(kStates) &&
               b.counts.size() < kMaxCounts && num(f[3], &b.counts[{f[1], f[2]}])) {
    } else {
      *why = "a line it does not understand: " + line.substr(0, 80);
      return false;
    }
  }
  book->target = std::move(b.target);
  book->cursor = b.cursor;
  book->counts = std::move(b.counts);
  return true;
}

BmcCollector::BmcCollector(BmcOptions options, std::shared_ptr<SelBook> book)
    : options_(std::move(options)),
      book_(std::move(book)),
      helper_("the BMC helper", helper_argv(options_), kMaxFrameBytes) {}

std::string BmcCollector::target() const {
  return options_.host.empty() ? "inband:" + options_.device
                               : options_.protocol + ":" + options_.host;
}

// The counts of an earlier run, once per book.
void BmcCollector::load(MetricSink& out) {
  if (book_->loaded) return;
  book_->loaded = true;
  const std::string path = sel_state_path(options_);
  std::ifstream in(path);
  if (!in) return;
  std::stringstream text;
  text << in.rdbuf();
  std::string why;
  if (!parse_sel_book(text.str(), book_.get(), &why))
    out.error("state_refused", path, why + ": the SEL is counted afresh");
}

void BmcCollector::count(const Reading& r, MetricSink& out) {
  bool changed = false;
  for (const SelEvent& e : r.events) {
    auto key = std::make_pair(e.type, e.state);
    if (!book_->counts.count(key) && book_->counts.size() >= kMaxCounts) {
      out.error("sel_type_dropped", e.type, "more SEL types and states than nodewatch keeps");
      continue;
    }
    ++book_->counts[key];
    changed = true;
  }
  if (r.cursor != book_->cursor) {
    book_->cursor = r.cursor;
    changed = true;
  }
  if (!changed) return;
  const std::string path = sel_state_path(options_);
  if (int err = write_state_text(path, serialize_sel_book(*book_)); err != 0)
    out.error("state_write_error", path, std::strerror(err));
}

void BmcCollector::emit_counts(MetricSink& out) {
  for (const auto& [key, n] : book_->counts)
    out.add(families::kSelEventsTotal, {key.first, key.second}, static_cast<double>(n));
}

void BmcCollector::collect(const CollectContext& ctx, MetricSink& out) {
  if (options_.host.empty() && ::access(options_.device.c_str(), F_OK) != 0) {
    if (!said_absent_)
      spdlog::info("bmc: no {} and no host set: this node's BMC is not read", options_.device);
    said_absent_ = true;
    return;
  }
  said_absent_ = false;
  std::lock_guard lock(book_->mu);
  load(out);
  // Under systemd the unit's StateDirectory= makes it; run by hand, its
  // last component is made here (FreeIPMI makes no directory for its
  // cache).
  if (!made_directory_)
    made_directory_ = ::mkdir(options_.state_directory.c_str(), 0755) == 0 || errno == EEXIST;
  if (book_->target != target()) {
    // Another BMC: its SEL is read from its first entry, into the same
    // counts (they never go back).
    book_->target = target();
    book_->cursor = {};
  }
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(ctx.left());
  const auto timeout = std::max<std::chrono::milliseconds>(left - kAnswerMargin - kKeptBack, 250ms);
  Request req{timeout, book_->cursor,
              static_cast<std::size_t>(options_.sel_entries_per_collection)};
  HelperProcess::Answer got = helper_.ask(
      encode_request(req), Clock::now() + std::max<Clock::duration>(left - kKeptBack, 0ms));
  std::optional<Reading> r;
  std::string why = got.why;
  if (got.payload) {
    r = decode_reading(*got.payload, &why);
    if (!r) helper_.discard();
  }
  if (!r || !r->error_reason.empty()) {
    out.add(families::kUp, {}, 0);
    if (r)
      out.error(r->error_reason, "bmc", r->error);
    else if (got.timed_out)
      out.error("bmc_timeout", "bmc", why);
    else if (got.payload)
      out.error("bmc_answer_invalid", "bmc", "the BMC helper answered " + why);
    else
      out.error("helper_unavailable", "bmc", why);
    emit_counts(out);
    return;
  }
  out.add(families::kUp, {}, 1);
  if (r->have_device)
    out.add(families::kInfo,
            {r->firmware, r->manufacturer, r->product, r->ipmi_version,
             options_.host.empty() ? "inband" : options_.protocol},
            1);
  emit_sensors(*r, out);
  if (r->node_power_watts) out.add(families::kNodePowerWatts, {}, *r->node_power_watts);
  if (r->have_sel) {
    out.add(families::kSelEntries, {}, r->sel_entries);
    out.add(families::kSelFreeBytes, {}, r->sel_free_bytes);
  }
  if (r->sdr_fetched)
    spdlog::info("bmc: fetched the SDR of {} ({} records) into {}", target(), *r->sdr_fetched,
                 sdr_cache_path(options_));
  count(*r, out);
  emit_counts(out);
}

}  // namespace bmc

const CollectorSpec& bmc_collector_spec() {
  static const CollectorSpec spec = [] {
    CollectorSpec s;
    s.name = "bmc";
    s.description =
        "The node's BMC through FreeIPMI (helper nwd-bmc): power supplies, fans, temperatures, "
        "voltages and OEM sensors with their states, the System Event Log, DCMI power; in-band "
        "(/dev/ipmi0) or over the network";
    s.enabled_by_default = true;
    s.default_interval = std::chrono::seconds(30);
    s.default_timeout = std::chrono::seconds(10);
    s.read_options = typed_options<bmc::BmcOptions>(bmc::read_bmc_options);
    s.metrics = bmc::bmc_metric_table;
    s.create = [](const CollectorEnv& env) -> std::unique_ptr<Collector> {
      const auto& o = env.options_as<bmc::BmcOptions>();
      auto book = env.service<bmc::SelBook>("bmc:" + o.state_directory,
                                            [] { return std::make_shared<bmc::SelBook>(); });
      return std::make_unique<bmc::BmcCollector>(o, std::move(book));
    };
    return s;
  }();
  return spec;
}

}  // namespace nodewatch
