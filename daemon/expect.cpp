#include "expect.hpp"
#include "toml_guard.hpp"

#include "nodewatch/fs_helper.hpp"
#include "nodewatch/text.hpp"

#include <sys/stat.h>

#include <toml++/toml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <stdexcept>

#include "accelerator/accelerator_metrics.hpp"
#include "bmc/bmc_metrics.hpp"
#include "interconnect/interconnect_metrics.hpp"
#include "nic/nic_metrics.hpp"
#include "pcie/pcie_metrics.hpp"
#include "storage/storage_metrics.hpp"
#include "versions.hpp"

namespace nodewatch {

extern const char kThresholdsToml[];  // alerts/thresholds.toml, generated into the build

namespace {

constexpr std::size_t kMaxExpectFileBytes = 1 << 20;

bool is_pci_address(std::string_view s) {
  // dddd:bb:dd.f, lower-case hex, as sysfs and NVML name them
  if (s.size() != 12 || s[4] != ':' || s[7] != ':' || s[10] != '.') return false;
  for (std::size_t i : {0, 1, 2, 3, 5, 6, 8, 9, 11}) {
    char c = s[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// "<number><unit>" with an optional space; the number's scale by unit.
std::optional<double> parse_scaled(
    std::string_view text, std::initializer_list<std::pair<std::string_view, double>> units) {
  std::size_t n = 0;
  while (n < text.size() && ((text[n] >= '0' && text[n] <= '9') || text[n] == '.')) ++n;
  if (n == 0) return std::nullopt;
  double v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + n, v);
  if (ec != std::errc() || ptr != text.data() + n || !std::isfinite(v) || v <= 0)
    return std::nullopt;
  std::string_view unit = text.substr(n);
  if (!unit.empty() && unit.front() == ' ') unit.remove_prefix(1);
  for (const auto& [name, scale] : units)
    if (unit == name) return v * scale;
  return std::nullopt;
}

std::string format_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

std::string toml_quote(std::string_view s) {
  // Appended, not "\"" + ... + "\"": GCC 12 at -O3 warns (-Wrestrict) on that.
  std::string out = "\"";
  out += text::json_escaped(s);
  out += '"';
  return out;
}

// The rate at `key`, if given; `what` names the form in the error.
std::optional<double> optional_rate(OptionReader& x, std::string_view key,
                                    std::optional<double> (*parse)(std::string_view),
                                    std::string_view what, Help help) {
  std::string text = x.get_string(key, "", std::move(help));
  if (text.empty()) return std::nullopt;
  auto v = parse(text);
  if (!v) x.error(key, "\"" + text + "\" is not " + std::string(what));
  return v;
}

// Shown for an expectation left out.
constexpr const char* kNotChecked = "not checked";

void read_accelerator(OptionReader& a, Expectations* e) {
  if (auto v = a.get_int("count", -1, 0, 4096, {"accelerators the node must have", kNotChecked});
      v >= 0)
    e->accelerator_count = static_cast<int>(v);
  OptionReader mr = a.sub("models");
  mr.for_each_key("model", [&](std::string_view model) {
    auto n = mr.get_int(model, -1, 1, 4096,
                        {"accelerators of this model (its name as the driver gives it) the node "
                         "must have; they add up to count",
                         kNotChecked});
    if (n >= 1) e->accelerator_models[std::string(model)] = static_cast<int>(n);
  });
  mr.finish();
  int sum = 0;
  for (const auto& [model, n] : e->accelerator_models) sum += n;
  if (e->accelerator_count && !e->accelerator_models.empty() && sum != *e->accelerator_count)
    a.error("models", "the models add up to " + std::to_string(sum) + ", count is " +
                          std::to_string(*e->accelerator_count));
  if (!e->accelerator_count && !e->accelerator_models.empty()) e->accelerator_count = sum;
  if (auto v = a.get_int("nvlinks_active", -1, 0, 1024,
                         {"active NVLink links per accelerator", kNotChecked});
      v >= 0)
    e->nvlinks_active = static_cast<int>(v);
}

void read_storage(OptionReader& s, Expectations* e) {
  e->probes = s.get_string_array("probes", {},
                                 {"absolute paths that must have a storage probe "
                                  "([[collectors.storage.probe]]) that is not stuck",
                                  kNotChecked},
                                 kMaxExpectEntries);
  e->nfs_mounts = s.get_string_array(
      "nfs_mounts", {}, {"absolute paths that must be NFS mounts", kNotChecked}, kMaxExpectEntries);
  for (const char* key : {"probes", "nfs_mounts"}) {
    auto& list = std::string_view(key) == "probes" ? e->probes : e->nfs_mounts;
    std::set<std::string> unique;
    for (const std::string& path : list) {
      if (path.empty() || path.front() != '/') s.error(key, "\"" + path + "\" is not absolute");
      if (!unique.insert(path).second) s.error(key, "\"" + path + "\" is listed twice");
    }
  }
}

// The versions `key` of `r` allows: a string, or an array of them.
std::vector<std::string> read_allowed(OptionReader& r, std::string_view key, Help help) {
  const toml::node* node = r.table().get(key);
  std::vector<std::string> out;
  if (node != nullptr && node->is_array())
    out = r.get_string_array(key, {}, help, kMaxExpectEntries);
  else if (std::string one = r.get_string(key, "", help); !one.empty())
    out.push_back(std::move(one));
  for (const std::string& v : out)
    if (v.empty()) r.error(key, "an empty version");
  if (node != nullptr && out.empty()) r.error(key, "allows no version");
  return out;
}

// [expect.versions]: per component, the version allowed (or a list), or a
// table of them by device, "*" for the others.
void read_versions(OptionReader& v, Expectations* e) {
  const char* help =
      "the versions allowed: one (\"6.1.0-28-amd64\"), a list, or a table by device "
      "({ \"*\" = \"28.39.1002\", ens1f1np1 = \"28.40.1000\" }, \"*\" for the others); a "
      "node that runs another is unhealthy (problem version_mismatch)";
  for (std::string_view component : kVersionComponents) {
    VersionPin pin;
    const toml::node* node = v.table().get(component);
    if (node != nullptr && node->is_table()) {
      OptionReader by = v.sub(component);
      by.for_each_key("device", [&](std::string_view device) {
        auto allowed = read_allowed(by, device, {help, kNotChecked});
        if (device == "*")
          pin.any = std::move(allowed);
        else
          pin.devices[std::string(device)] = std::move(allowed);
      });
      by.finish();
    } else {
      pin.any = read_allowed(v, component, {help, kNotChecked});
    }
    if (!pin.any.empty() || !pin.devices.empty()) e->versions[std::string(component)] = pin;
  }
}

// [expect.thresholds.<alert>]: a key of alerts/thresholds.toml, whose
// value there is the default.
void read_thresholds(OptionReader& th, Expectations* e) {
  const auto& defaults = threshold_defaults();
  const std::string help =
      "overrides the threshold of the alerts/thresholds.toml key of the same name, for the "
      "verdict";
  const char* from_alerts = "that of alerts/thresholds.toml";
  auto read_one = [&](OptionReader& kr, std::string_view key, bool duration, std::string name) {
    if (duration) {
      Millis d = kr.get_duration(key, Millis(0), Millis(1000), Millis(7LL * 24 * 3600 * 1000),
                                 {help + " (a duration there)", from_alerts});
      if (d.count() > 0) e->thresholds[name] = static_cast<double>(d.count()) / 1000.0;
    } else {
      double x = kr.get_number(key, NAN, -1e18, 1e18, {help + " (a number there)", from_alerts});
      if (!std::isnan(x)) e->thresholds[name] = x;
    }
  };
  th.for_each_key("alert", [&](std::string_view alert) {
    std::string alert_name(alert);
    auto known = defaults.lower_bound(alert_name + ".");
    bool is_known = known != defaults.end() && known->first.rfind(alert_name + ".", 0) == 0;
    if (!is_known && !th.describing()) return;  // finish() reports it
    OptionReader kr = th.sub(alert_name);
    if (th.describing()) {
      read_one(kr, "<duration key>", true, "");
      read_one(kr, "<number key>", false, "");
      return;
    }
    kr.for_each_key("key", [&](std::string_view k) {
      std::string name = alert_name + "." + std::string(k);
      auto def = defaults.find(name);
      if (def == defaults.end()) return;  // finish() reports it
      read_one(kr, k, def->second.duration, name);
    });
    kr.finish();
  });
}

// The body of an [expect] table, without `file`.
void read_body(OptionReader& r, Expectations* e) {
  OptionReader a = r.sub("accelerator");
  read_accelerator(a, e);
  a.finish();
  std::set<std::string> seen;
  r.for_each_table(
      "pcie", "a PCI function whose link must be as given",
      [&](OptionReader& x, std::size_t) {
        ExpectedPcie d;
        d.device = x.get_string("device", "",
                                {"its PCI address, such as \"0000:1a:00.0\"; needs width, speed "
                                 "or both",
                                 "none: required"});
        if (!is_pci_address(d.device))
          x.error("device", "\"" + d.device + "\" is not a PCI address such as \"0000:1a:00.0\"");
        else if (!seen.insert(d.device).second)
          x.error("device", "\"" + d.device + "\" is listed twice");
        if (auto w = x.get_int("width", -1, 1, 32, {"the link width (lanes)", kNotChecked}); w >= 1)
          d.width = static_cast<int>(w);
        d.speed = optional_rate(x, "speed", parse_transfer_rate, "a link speed such as \"32GT/s\"",
                                {"the link speed, such as \"32GT/s\"", kNotChecked});
        if (!d.width && !d.speed) x.error("device", "needs width, speed or both");
        e->pcie.push_back(std::move(d));
      },
      kMaxExpectEntries);
  seen.clear();
  r.for_each_table(
      "fabric", "an InfiniBand or RoCE port that must be active",
      [&](OptionReader& x, std::size_t) {
        ExpectedPort port;
        port.device =
            x.get_string("device", "", {"the RDMA device, such as \"mlx5_0\"", "none: required"});
        if (port.device.empty()) x.error("device", "needs the device, such as \"mlx5_0\"");
        port.port = static_cast<int>(x.get_int("port", 1, 1, 255, "the port number"));
        port.rate = optional_rate(x, "rate", parse_bit_rate, "a rate such as \"400Gb/s\"",
                                  {"the least rate, such as \"400Gb/s\"", kNotChecked});
        if (!port.device.empty() && !seen.insert(port.component()).second)
          x.error("device", "port " + port.component() + " is listed twice");
        e->ports.push_back(std::move(port));
      },
      kMaxExpectEntries);
  seen.clear();
  r.for_each_table(
      "nic", "a network interface that must be up",
      [&](OptionReader& x, std::size_t) {
        ExpectedNic nic;
        nic.interface = x.get_string(
            "interface", "", {"the interface name, such as \"ens1f0np0\"", "none: required"});
        if (nic.interface.empty() || nic.interface.size() > 15 ||
            nic.interface.find('/') != std::string::npos)
          x.error("interface", "\"" + nic.interface + "\" is not an interface name");
        else if (!seen.insert(nic.interface).second)
          x.error("interface", "\"" + nic.interface + "\" is listed twice");
        nic.speed = optional_rate(x, "speed", parse_bit_rate, "a speed such as \"100Gb/s\"",
                                  {"the least speed, such as \"100Gb/s\"", kNotChecked});
        e->nics.push_back(std::move(nic));
      },
      kMaxExpectEntries);
  OptionReader s = r.sub("storage");
  read_storage(s, e);
  s.finish();
  OptionReader ver = r.sub("versions");
  read_versions(ver, e);
  ver.finish();
  OptionReader b = r.sub("bmc");
  e->bmc = b.get_bool("present", false,
                      {"the node has a BMC, which must answer the bmc collector", kNotChecked});
  b.finish();
  OptionReader th = r.sub("thresholds");
  read_thresholds(th, e);
  th.finish();
}

}  // namespace

double Expectations::threshold(std::string_view name) const {
  if (auto it = thresholds.find(name); it != thresholds.end()) return it->second;
  const auto& defaults = threshold_defaults();
  auto it = defaults.find(name);
  if (it == defaults.end())
    throw std::out_of_range("no threshold " + std::string(name) + " in alerts/thresholds.toml");
  return it->second.value;
}

const std::map<std::string, ThresholdDefault, std::less<>>& threshold_defaults() {
  static const auto kDefaults = [] {
    std::map<std::string, ThresholdDefault, std::less<>> out;
    toml::table root =
        toml::parse(std::string_view(kThresholdsToml), std::string_view("alerts/thresholds.toml"));
    for (auto&& [alert, node] : root) {
      if (alert.str() == "selectors") continue;
      const toml::table* t = node.as_table();
      if (t == nullptr) continue;
      for (auto&& [k, v] : *t) {
        std::string name = std::string(alert.str()) + "." + std::string(k.str());
        ThresholdDefault d;
        if (auto s = v.value_exact<std::string>()) {
          auto ms = parse_duration(*s);
          if (!ms) continue;
          d.duration = true;
          d.value = static_cast<double>(ms->count()) / 1000.0;
        } else if (auto i = v.value_exact<std::int64_t>()) {
          d.value = static_cast<double>(*i);
        } else if (auto f = v.value_exact<double>()) {
          d.value = *f;
        } else {
          continue;
        }
        out.emplace(std::move(name), d);
      }
    }
    return out;
  }();
  return kDefaults;
}

const std::set<std::string, std::less<>>& application_xids() {
  static const auto kXids = [] {
    std::set<std::string, std::less<>> out;
    toml::table root =
        toml::parse(std::string_view(kThresholdsToml), std::string_view("alerts/thresholds.toml"));
    // alerts/render.py refuses anything but a list of positive integers.
    if (const toml::array* list = root["xid"]["application"].as_array())
      for (const toml::node& x : *list)
        if (auto code = x.value_exact<std::int64_t>()) out.insert(std::to_string(*code));
    return out;
  }();
  return kXids;
}

Expectations read_expectations(OptionReader& r, const std::string& config_file,
                               std::vector<ConfigError>* errors) {
  Expectations e;
  std::string file =
      r.get_string("file", "",
                   {"a file with the [expect] tables instead of this one (not both), relative "
                    "to this file's directory; nodewatchd --learn-expected prints one",
                    "none: the tables here"});
  if (file.empty()) {
    read_body(r, &e);
    return e;
  }
  for (auto&& [k, v] : r.table()) {
    if (k.str() == "file") continue;
    r.mark_known(k.str());
    r.error(k.str(), "with expect.file set, every expectation is in that file");
  }
  if (file.front() != '/')
    file = (std::filesystem::path(config_file).parent_path() / file).lexically_normal().string();
  auto fail = [&](const std::string& why) {
    errors->push_back(ConfigError{file, 0, 0, "", why});
    return e;
  };
  // A regular file only (a FIFO or a device would block or never end), read
  // by a helper within its timeout (fs_helper.hpp).
  helper::OperatorFile f = helper::read_operator_file(file, kMaxExpectFileBytes);
  if (!f.ok) {
    if (f.error == "not a regular file") {
      r.error("file", "\"" + file + "\" is not a regular file");
      return e;
    }
    if (f.error.rfind("larger than", 0) == 0) return fail("file is " + f.error);
    r.error("file", "cannot read \"" + file + "\": " + f.error);
    return e;
  }
  const std::string& text = f.text;
  e = parse_expect_file(text, file, errors);
  e.file = file;
  return e;
}

Expectations parse_expect_file(std::string_view text, const std::string& file,
                               std::vector<ConfigError>* errors) {
  Expectations e;
  std::optional<toml::table> parsed = parse_toml_text(text, file, errors);
  if (!parsed) return e;
  const toml::table& root = *parsed;
  OptionReader top(root, "", file, errors);
  OptionReader r = top.sub("expect");
  if (r.table().contains("file")) {
    r.mark_known("file");
    r.error("file", "an expect file cannot name another");
  }
  read_body(r, &e);
  r.finish();
  top.finish();
  return e;
}

std::optional<double> parse_transfer_rate(std::string_view text) {
  return parse_scaled(text, {{"GT/s", 1e9}, {"MT/s", 1e6}});
}

std::optional<double> parse_bit_rate(std::string_view text) {
  return parse_scaled(text, {{"Tb/s", 1e12 / 8}, {"Gb/s", 1e9 / 8}, {"Mb/s", 1e6 / 8}});
}

std::string format_transfer_rate(double t) {
  return format_number(t / 1e9) + "GT/s";
}

std::string format_bit_rate(double bytes) {
  double bits = bytes * 8;
  if (bits < 1e9) return format_number(bits / 1e6) + "Mb/s";
  return format_number(bits / 1e9) + "Gb/s";
}

const FamilySet& learn_families() {
  static const FamilySet kFamilies = family_set({
      accelerator::families::kInfo,
      interconnect::families::kNvlinkLinksActive,
      pcie::families::kDeviceInfo,
      pcie::families::kLinkWidth,
      pcie::families::kLinkSpeedTransfersPerSecond,
      interconnect::families::kPortState,
      interconnect::families::kPortRateBytesPerSecond,
      nic::families::kInfo,
      nic::families::kUp,
      nic::families::kSpeedBytesPerSecond,
      storage::families::kProbeStuck,
      storage::families::kProbeSuccess,
      storage::families::kNfsMountInfo,
      bmc::families::kUp,
  });
  static const FamilySet kWithVersions = [] {
    FamilySet all = kFamilies;
    all.insert(version_families().begin(), version_families().end());
    return all;
  }();
  return kWithVersions;
}

namespace {

// The value of `family` for the sample whose `labels` match, or nullopt.
std::optional<double> value_of(
    const Samples& s, std::string_view family,
    std::initializer_list<std::pair<std::string_view, std::string_view>> labels) {
  const Sample* x = s.find(family, labels);
  return x ? std::optional<double>(x->value) : std::nullopt;
}

}  // namespace

Learned learn_expectations(const Samples& s, const NodeVersions& node) {
  Learned out;
  Expectations& e = out.expect;
  const auto& info = s.of(accelerator::families::kInfo);
  if (!info.empty()) {
    e.accelerator_count = static_cast<int>(info.size());
    for (const Sample& x : info) e.accelerator_models[std::string(x.label("model"))] += 1;
  }
  const auto& links = s.of(interconnect::families::kNvlinkLinksActive);
  if (!links.empty()) {
    double lo = links.front().value, hi = lo;
    for (const Sample& x : links) lo = std::min(lo, x.value), hi = std::max(hi, x.value);
    e.nvlinks_active = static_cast<int>(lo);
    if (hi != lo)
      out.notes.push_back("accelerators have " + format_number(lo) + " to " + format_number(hi) +
                          " active NVLinks; the fewest is expected: check the others");
  }
  bool accelerator_speed_left_out = false;
  for (const Sample& x : s.of(pcie::families::kDeviceInfo)) {
    std::string_view kind = x.label("kind");
    if (kind != "accelerator" && kind != "network") continue;
    std::string device(x.label("device"));
    ExpectedPcie d;
    d.device = device;
    if (auto w = value_of(s, pcie::families::kLinkWidth, {{"device", device}}); w && *w > 0)
      d.width = static_cast<int>(*w);
    if (kind == "network") {
      if (auto v = value_of(s, pcie::families::kLinkSpeedTransfersPerSecond, {{"device", device}});
          v && *v > 0)
        d.speed = *v;
    } else {
      accelerator_speed_left_out = true;
    }
    if (d.width || d.speed) e.pcie.push_back(std::move(d));
  }
  if (accelerator_speed_left_out)
    out.notes.push_back(
        "the PCIe speed of accelerators is not expected: GPUs lower it when idle; add speed = "
        "\"...GT/s\" to check it anyway");
  for (const Sample& x : s.of(interconnect::families::kPortState)) {
    std::string device(x.label("device"));
    std::string port_text(x.label("port"));
    int port = 0;
    auto [ptr, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (ec != std::errc() || port < 1) continue;
    if (x.value != 4) {
      out.notes.push_back("fabric port " + device + "/" + port_text +
                          " is not active: not expected");
      continue;
    }
    ExpectedPort p;
    p.device = device;
    p.port = port;
    if (auto r = value_of(s, interconnect::families::kPortRateBytesPerSecond,
                          {{"device", device}, {"port", port_text}});
        r && *r > 0)
      p.rate = *r;
    e.ports.push_back(std::move(p));
  }
  for (const Sample& x : s.of(nic::families::kInfo)) {
    if (x.label("bus_info").empty()) continue;  // virtual: veth, bridges, bonds
    std::string name(x.label("interface"));
    auto up = value_of(s, nic::families::kUp, {{"interface", name}});
    if (!up || *up != 1) {
      out.notes.push_back("interface " + name + " is not up: not expected");
      continue;
    }
    ExpectedNic nic;
    nic.interface = name;
    if (auto v = value_of(s, nic::families::kSpeedBytesPerSecond, {{"interface", name}});
        v && *v > 0)
      nic.speed = *v;
    e.nics.push_back(std::move(nic));
  }
  for (const Sample& x : s.of(storage::families::kProbeStuck)) {
    std::string path(x.label("path"));
    bool ok = x.value == 0;
    for (const Sample& y : s.of(storage::families::kProbeSuccess))
      if (y.label("path") == path && y.value != 1) ok = false;
    if (ok)
      e.probes.push_back(path);
    else
      out.notes.push_back("storage probe " + path + " does not answer: not expected");
  }
  for (const Sample& x : s.of(storage::families::kNfsMountInfo))
    e.nfs_mounts.emplace_back(x.label("mountpoint"));
  std::sort(e.nfs_mounts.begin(), e.nfs_mounts.end());
  e.nfs_mounts.erase(std::unique(e.nfs_mounts.begin(), e.nfs_mounts.end()), e.nfs_mounts.end());
  // Versions: one per component where every device runs the same, else
  // one per device.
  std::map<std::string, std::map<std::string, std::string>> seen;
  for (const VersionFact& f : version_facts(s, node)) seen[f.component][f.device] = f.version;
  for (const auto& [component, by_device] : seen) {
    std::set<std::string> distinct;
    for (const auto& [device, version] : by_device) distinct.insert(version);
    VersionPin& pin = e.versions[component];
    if (distinct.size() == 1) {
      pin.any = {*distinct.begin()};
      continue;
    }
    for (const auto& [device, version] : by_device) pin.devices[device] = {version};
    out.notes.push_back(component + ": devices run " + std::to_string(distinct.size()) +
                        " versions, each pinned to its own: check that they should");
  }
  const Sample* bmc_up = s.find(bmc::families::kUp, {});
  e.bmc = bmc_up != nullptr && bmc_up->value == 1;
  if (bmc_up != nullptr && bmc_up->value != 1)
    out.notes.push_back("the BMC does not answer: not expected");
  return out;
}

std::string expectations_toml(const Expectations& e, const std::vector<std::string>& notes,
                              const std::vector<std::string>& header) {
  std::string out;
  for (const std::string& h : header) out += "# " + h + "\n";
  for (const std::string& n : notes) out += "# note: " + n + "\n";
  if (!header.empty() || !notes.empty()) out += "\n";
  if (e.accelerator_count || !e.accelerator_models.empty() || e.nvlinks_active) {
    out += "[expect.accelerator]\n";
    if (e.accelerator_count) out += "count = " + std::to_string(*e.accelerator_count) + "\n";
    if (!e.accelerator_models.empty()) {
      out += "models = { ";
      bool first = true;
      for (const auto& [model, n] : e.accelerator_models) {
        out += (first ? "" : ", ") + toml_quote(model) + " = " + std::to_string(n);
        first = false;
      }
      out += " }\n";
    }
    if (e.nvlinks_active) out += "nvlinks_active = " + std::to_string(*e.nvlinks_active) + "\n";
  }
  for (const ExpectedPcie& d : e.pcie) {
    out += "\n[[expect.pcie]]\ndevice = " + toml_quote(d.device) + "\n";
    if (d.width) out += "width = " + std::to_string(*d.width) + "\n";
    if (d.speed) out += "speed = " + toml_quote(format_transfer_rate(*d.speed)) + "\n";
  }
  for (const ExpectedPort& p : e.ports) {
    out += "\n[[expect.fabric]]\ndevice = " + toml_quote(p.device) +
           "\nport = " + std::to_string(p.port) + "\n";
    if (p.rate) out += "rate = " + toml_quote(format_bit_rate(*p.rate)) + "\n";
  }
  for (const ExpectedNic& n : e.nics) {
    out += "\n[[expect.nic]]\ninterface = " + toml_quote(n.interface) + "\n";
    if (n.speed) out += "speed = " + toml_quote(format_bit_rate(*n.speed)) + "\n";
  }
  auto list = [](const std::vector<std::string>& v) {
    std::string s = "[";
    for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + toml_quote(v[i]);
    return s + "]";
  };
  if (!e.probes.empty() || !e.nfs_mounts.empty()) {
    out += "\n[expect.storage]\n";
    if (!e.probes.empty()) out += "probes = " + list(e.probes) + "\n";
    if (!e.nfs_mounts.empty()) out += "nfs_mounts = " + list(e.nfs_mounts) + "\n";
  }
  if (!e.versions.empty()) {
    out += "\n[expect.versions]\n";
    auto allowed = [](const std::vector<std::string>& v) {
      if (v.size() == 1) return toml_quote(v.front());
      std::string s = "[";
      for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + toml_quote(v[i]);
      return s + "]";
    };
    for (const auto& [component, pin] : e.versions) {
      if (pin.devices.empty()) {
        out += component + " = " + allowed(pin.any) + "\n";
        continue;
      }
      out += component + " = { ";
      bool first = true;
      if (!pin.any.empty()) {
        out += "\"*\" = " + allowed(pin.any);
        first = false;
      }
      for (const auto& [device, v] : pin.devices) {
        out += (first ? "" : ", ") + toml_quote(device) + " = " + allowed(v);
        first = false;
      }
      out += " }\n";
    }
  }
  if (e.bmc) out += "\n[expect.bmc]\npresent = true\n";
  std::string current;
  for (const auto& [name, v] : e.thresholds) {
    auto dot = name.find('.');
    std::string alert = name.substr(0, dot);
    if (alert != current) {
      out += "\n[expect.thresholds." + alert + "]\n";
      current = alert;
    }
    const auto& defaults = threshold_defaults();
    auto def = defaults.find(name);
    std::string key = name.substr(dot + 1);
    if (def != defaults.end() && def->second.duration)
      out += key + " = " +
             toml_quote(format_duration(Millis(static_cast<long long>(std::llround(v * 1000))))) +
             "\n";
    else
      out += key + " = " + format_number(v) + "\n";
  }
  return out;
}

}  // namespace nodewatch
