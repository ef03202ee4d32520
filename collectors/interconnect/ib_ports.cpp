#include "interconnect/ib_ports.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <utility>

#include "interconnect/interconnect_metrics.hpp"
#include "nodewatch/options.hpp"

namespace nodewatch::interconnect {
namespace {

using sources::Read;
using sources::Status;

constexpr std::string_view kClassDir = "class/infiniband";

struct CuratedMetric {
  const Family& family;
};

// Indexed by PmaMetric.
constexpr std::array<CuratedMetric, static_cast<std::size_t>(PmaMetric::kCount)> kPmaMetrics = {{
    {families::kPortTransmittedBytesTotal},
    {families::kPortReceivedBytesTotal},
    {families::kPortTransmittedPacketsTotal},
    {families::kPortReceivedPacketsTotal},
    {families::kPortSymbolErrorsTotal},
    {families::kPortLinkDownedTotal},
    {families::kPortLinkErrorRecoveryTotal},
    {families::kPortReceiveErrorsTotal},
    {families::kPortReceiveRemotePhysicalErrorsTotal},
    {families::kPortTransmitDiscardsTotal},
    {families::kPortTransmitWaitTotal},
    {families::kPortLocalLinkIntegrityErrorsTotal},
    {families::kPortExcessiveBufferOverrunErrorsTotal},
    {families::kPortVl15DroppedTotal},
}};

// Indexed by HwMetric.
constexpr std::array<CuratedMetric, static_cast<std::size_t>(HwMetric::kCount)> kHwMetrics = {{
    {families::kRoceEcnMarkedPacketsTotal},
    {families::kRoceCnpSentTotal},
    {families::kRoceCnpHandledTotal},
    {families::kRoceCnpIgnoredTotal},
    {families::kRoceOutOfBufferTotal},
    {families::kRoceOutOfSequenceTotal},
    {families::kRocePacketSequenceErrorsTotal},
    {families::kRoceLocalAckTimeoutsTotal},
    {families::kRoceRetransmitsTotal},
}};

std::optional<unsigned> parse_port_dir(std::string_view name) {
  if (name.empty() || name.size() > 3) return std::nullopt;
  unsigned v = 0;
  for (char c : name) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<unsigned>(c - '0');
  }
  if (v == 0 || v > 255) return std::nullopt;
  return v;
}

// Counter values go into doubles; below 2^53 they are exact.
double as_double(std::uint64_t v) {
  return static_cast<double>(v);
}

// "EIO reading counters/port_xmit_wait".
std::string reading(const Read& r, std::string_view what) {
  return r.error_name() + " reading " + std::string(what);
}

bool gone(const Read& r) {
  return r.status == Status::kGone;
}

}  // namespace

IbOptions read_ib_options(OptionReader& r) {
  IbOptions o;
  o.pma_interval =
      r.get_duration("pma_interval", o.pma_interval, Millis(0), std::chrono::hours(1),
                     "how often the PMA counters/ files are read (one firmware MAD each); last "
                     "values re-emitted in between; \"0s\": every collection");
  o.devices = sources::read_name_filter(r, "RDMA device", "devices_include", "devices_exclude");
  return o;
}

// What one device produced, handed to the sink only when the device did
// not vanish half-way (its errors are then not counted either).
class IbPorts::Staging {
 public:
  // The label values go into one buffer: no allocation per sample.
  void add(std::string_view name, std::initializer_list<std::string_view> labels, double value) {
    samples_.push_back({name, spans_.size(), labels.size(), value});
    for (std::string_view l : labels) {
      spans_.emplace_back(text_.size(), l.size());
      text_.append(l);
    }
  }
  struct Error {
    std::string reason;
    std::string subject;
    std::string detail;
    bool counted = true;  // false: still failing since it was counted
  };

  void error(std::string_view reason, std::string_view subject, std::string detail) {
    errors_.push_back({std::string(reason), std::string(subject), std::move(detail)});
  }
  // A failure found by a read made only now and then (device and port
  // facts, PMA counters): counted now, and kept in `sticky` so that the
  // collections that do not read again report it as still failing.
  void sampled_error(std::vector<Error>& sticky, std::string_view reason, std::string_view subject,
                     std::string detail) {
    error(reason, subject, detail);
    sticky.push_back({std::string(reason), std::string(subject), std::move(detail), false});
  }
  void still_failing(const std::vector<Error>& sticky) {
    errors_.insert(errors_.end(), sticky.begin(), sticky.end());
  }
  void flush(MetricSink& out) {
    std::vector<std::string_view> labels;
    for (const Sample& s : samples_) {
      labels.clear();
      for (std::size_t i = s.first; i < s.first + s.count; ++i)
        labels.push_back(std::string_view(text_).substr(spans_[i].first, spans_[i].second));
      out.add(s.name, std::span<const std::string_view>(labels), s.value);
    }
    for (const Error& e : errors_) {
      if (e.counted)
        out.error(e.reason, e.subject, e.detail);
      else
        out.still_failing(e.reason, e.subject, e.detail);
    }
  }

 private:
  struct Sample {
    std::string_view name;  // one of the static names of this file
    std::size_t first;      // its label values: spans_[first, first + count)
    std::size_t count;
    double value;
  };
  std::vector<Sample> samples_;
  std::vector<std::pair<std::size_t, std::size_t>> spans_;  // (offset, size) in text_
  std::string text_;
  std::vector<Error> errors_;
};

struct IbPorts::Port {
  unsigned number = 0;
  std::string label;  // "1"
  std::string dir;    // class/infiniband/<dev>/ports/<n>, below the sysfs root
  bool facts_read = false;
  std::string link_layer;
  std::string netdev;
  bool pma_read = false;
  std::chrono::steady_clock::time_point pma_at;
  std::array<std::optional<double>, static_cast<std::size_t>(PmaMetric::kCount)> pma;
  std::map<std::string, double, std::less<>> pma_generic;
  // Failures of the last facts and PMA reads, reported as still failing
  // until those are read again.
  std::vector<Staging::Error> fact_failures;
  std::vector<Staging::Error> pma_failures;
  bool seen = false;
};

struct IbPorts::Device {
  std::string dir;  // class/infiniband/<dev>, below the sysfs root
  std::string firmware;
  std::string board_id;
  std::string hca_type;
  std::string node_guid;
  std::vector<Staging::Error> fact_failures;  // as Port's
  std::map<unsigned, Port> ports;
};

namespace {

template <class Sink>
void emit_hw(Sink& out, std::string_view device, std::string_view port, const std::string& name,
             std::uint64_t value) {
  HwMetric m = classify_hw_counter(name);
  if (m == HwMetric::kSkip) return;
  if (m == HwMetric::kGeneric) {
    std::string label = attribute_label(name);
    out.add(families::kHwCountersTotal, {device, port, label}, as_double(value));
    return;
  }
  out.add(kHwMetrics[static_cast<std::size_t>(m)].family, {device, port}, as_double(value));
}

}  // namespace

IbPorts::IbPorts(Roots roots, IbOptions options, std::unique_ptr<HwCounterSource> hw_source,
                 std::unique_ptr<VerbsSource> verbs, Clock clock,
                 std::shared_ptr<sources::WrapCounters> counters, std::size_t max_held)
    : sys_(roots.sys()),
      held_(sys_, max_held - max_held / 2),
      pma_held_(sys_, max_held / 2),
      options_(std::move(options)),
      filter_(options_.devices),
      hw_source_(std::move(hw_source)),
      verbs_(std::move(verbs)),
      clock_(std::move(clock)),
      counters_(counters ? std::move(counters) : std::make_shared<sources::WrapCounters>()),
      devices_(kInfoRefreshCycles) {}

IbPorts::~IbPorts() = default;

std::vector<MetricDesc> IbPorts::metric_descs() {
  std::vector<MetricDesc> d;
  d.push_back(describe(families::kPortInfo));
  d.push_back(describe(families::kVerbsLibraryInfo));
  d.push_back(describe(families::kPortState));
  d.push_back(describe(families::kPortPhysicalState));
  d.push_back(describe(families::kPortRateBytesPerSecond));
  d.push_back(describe(families::kPortWidth));
  d.push_back(describe(families::kPortStateChangesTotal));
  for (const CuratedMetric& m : kPmaMetrics) d.push_back(describe(m.family));
  d.push_back(describe(families::kPortPmaTotal));
  for (const CuratedMetric& m : kHwMetrics) d.push_back(describe(m.family));
  d.push_back(describe(families::kHwCountersTotal));
  return d;
}

std::size_t IbPorts::tracked_devices() const {
  return devices_.size();
}

std::size_t IbPorts::held_descriptors() const {
  return held_.size() + pma_held_.size();
}

void IbPorts::collect(const CollectContext& ctx, MetricSink& out) {
  sources::Listing listed = sys_.list(kClassDir);
  if (!listed.ok()) {
    if (listed.err == ENOENT) {
      // No RDMA device on this node (or none any more): drop every device,
      // descriptor and counter.
      devices_.begin_cycle();
      devices_.end_cycle();
      held_.begin_cycle();
      held_.end_cycle();
      pma_held_.begin_cycle();
      pma_held_.end_cycle();
      listings_.clear();
      counters_->begin_cycle();
      counters_->end_cycle();
      verbs_->sync({});
      return;
    }
    throw CollectError("read_error", "cannot list " + sys_.full(kClassDir) + ": " +
                                         sources::errno_name(listed.err));
  }
  std::vector<std::string> names;
  for (std::string& n : listed.names) {
    if (is_valid_utf8(n) && filter_.matches(n)) names.push_back(std::move(n));
  }
  for (const VerbsFailure& f : verbs_->sync(names)) out.error("verbs_error", f.device, f.detail);
  if (std::string v = verbs_->library_version(); !v.empty() && !names.empty())
    out.add(families::kVerbsLibraryInfo, {v}, 1);
  bool netlink_ok = !names.empty() && hw_source_->begin_cycle();

  devices_.begin_cycle();
  held_.begin_cycle();
  pma_held_.begin_cycle();
  counters_->begin_cycle();
  bool complete = true;
  for (const std::string& name : names) {
    if (ctx.should_stop()) {
      complete = false;
      break;
    }
    // A device that went away half-way is read once more from scratch:
    // when it came back under the same name (a driver reload between two
    // collections), that reads the new one.
    for (int attempt = 0; attempt < 2; ++attempt) {
      auto [dev, refresh] = devices_.see(name);
      if (!dev) {
        dev = std::make_unique<Device>();
        dev->dir = std::string(kClassDir) + "/" + name;
      }
      // Emits into a scratch sink first: a device that vanishes half-way
      // must not leave half of its series behind.
      Staging staged;
      if (collect_device(name, *dev, refresh, netlink_ok, staged)) {
        staged.flush(out);
        break;
      }
      devices_.forget(name);
      forget_listings(std::string(kClassDir) + "/" + name);
    }
  }
  // An unfinished collection forgets nothing: the devices it did not reach
  // keep their state and counters.
  if (complete) {
    devices_.end_cycle();
    held_.end_cycle();
    pma_held_.end_cycle();
    counters_->end_cycle();
    // The listings of devices that are gone.
    std::erase_if(listings_, [&](const auto& kv) {
      std::string_view rest =
          std::string_view(kv.first).substr(std::string_view(kClassDir).size() + 1);
      std::string_view device = rest.substr(0, rest.find('/'));
      return std::find(names.begin(), names.end(), device) == names.end();
    });
  }
}

const sources::Listing& IbPorts::list_cached(const std::string& dir) {
  auto [it, inserted] = listings_.try_emplace(dir);
  // An error is asked again next time; an absent directory (no
  // counters_ext, no device-level hw_counters) is as lasting as a listing.
  if (inserted || it->second.status == Status::kError) it->second = sys_.list(dir);
  return it->second;
}

void IbPorts::forget_listings(const std::string& device_dir) {
  const std::string prefix = device_dir + "/";
  std::erase_if(listings_, [&](const auto& kv) { return kv.first.rfind(prefix, 0) == 0; });
}

bool IbPorts::collect_device(const std::string& name, Device& dev, bool refresh, bool netlink_ok,
                             Staging& out) {
  if (refresh) {
    // What lies below the device is listed again with its facts.
    forget_listings(dev.dir);
    dev.fact_failures.clear();
    auto fact = [&](const char* file, std::string* dst) {
      Read r = sys_.read(dev.dir + "/" + file);
      *dst = r.ok() ? attribute_label(r.text) : std::string();
      if (r.status == Status::kAbsent)
        out.sampled_error(dev.fact_failures, "missing_attribute", name, std::string("no ") + file);
      if (r.failed()) {
        out.error("read_error", name, reading(r, file));
        devices_.invalidate(name);  // read again next time
      }
      return !gone(r);
    };
    if (!fact("fw_ver", &dev.firmware) || !fact("board_id", &dev.board_id) ||
        !fact("hca_type", &dev.hca_type) || !fact("node_guid", &dev.node_guid))
      return false;
  } else {
    out.still_failing(dev.fact_failures);
  }

  sources::Listing port_names = sys_.list(dev.dir + "/ports");
  if (!port_names.ok()) {
    if (port_names.status != Status::kError) return false;
    out.error("read_error", name, sources::errno_name(port_names.err) + " listing ports");
  }
  auto now = clock_();
  for (auto& [number, port] : dev.ports) port.seen = false;
  for (const std::string& pn : port_names.names) {
    std::optional<unsigned> number = parse_port_dir(pn);
    if (!number) continue;
    auto [it, inserted] = dev.ports.try_emplace(*number);
    Port& port = it->second;
    if (inserted) {
      port.number = *number;
      port.label = pn;
      port.dir = dev.dir + "/ports/" + pn;
    }
    const std::string subject = name + "/" + port.label;
    if (!port.facts_read || refresh) {
      port.fact_failures.clear();
      Read layer = sys_.read(port.dir + "/link_layer");
      if (gone(layer)) return false;
      port.link_layer = layer.ok() ? attribute_label(layer.text) : std::string();
      if (layer.status == Status::kAbsent)
        out.sampled_error(port.fact_failures, "missing_attribute", subject, "no link_layer");
      if (layer.failed()) out.error("read_error", subject, reading(layer, "link_layer"));
      // Only RoCE ports have a netdev; on InfiniBand ports the read fails.
      Read netdev = sys_.read(port.dir + "/gid_attrs/ndevs/0");
      if (gone(netdev)) return false;
      port.netdev = netdev.ok() ? attribute_label(netdev.text) : std::string();
      port.facts_read = layer.ok() || layer.status == Status::kAbsent;
    } else {
      out.still_failing(port.fact_failures);
    }
    bool pma_due =
        !port.pma_read || now - port.pma_at + options_.pma_interval / 10 >= options_.pma_interval;
    if (!collect_port(name, port, netlink_ok, pma_due, out)) return false;
    if (pma_due) {
      port.pma_read = true;
      port.pma_at = now;
    }
    port.seen = true;
    std::string_view device = name;
    out.add(families::kPortInfo,
            {device, port.label, port.link_layer, port.netdev, dev.node_guid, dev.firmware,
             dev.board_id, dev.hca_type},
            1.0);
    if (std::optional<std::uint64_t> changes = verbs_->state_changes(name, port.number)) {
      out.add(families::kPortStateChangesTotal, {device, port.label}, as_double(*changes));
    }
  }
  std::erase_if(dev.ports, [](const auto& e) { return !e.second.seen; });

  // Device-level hw_counters (mlx5 in switchdev mode, some iWARP devices).
  return read_hw_dir(dev.dir + "/hw_counters", name, "0", name, out);
}

bool IbPorts::read_hw_dir(const std::string& dir, const std::string& device,
                          const std::string& port, const std::string& subject, Staging& out) {
  const sources::Listing& files = list_cached(dir);
  if (files.status == Status::kGone) return false;
  if (files.status == Status::kError)
    out.error("read_error", subject, sources::errno_name(files.err) + " listing hw_counters");
  for (const std::string& f : files.names) {
    if (classify_hw_counter(f) == HwMetric::kSkip) continue;
    Read r = held_.read(dir + "/" + f);
    if (gone(r)) return false;
    if (r.status == Status::kAbsent) continue;  // the file alone went away
    const std::string key = device + "/" + port + "/" + f;
    if (r.failed()) {
      out.error("read_error", subject, reading(r, "hw_counters/" + f));
      counters_->keep(key);  // its wrap offset too, for the next read
      continue;
    }
    Counter c = parse_counter(r.text);
    if (c.reading != CounterReading::kValue) {
      out.error("parse_error", subject, "malformed hw_counters/" + f);
      counters_->keep(key);
      continue;
    }
    std::uint64_t v = counters_->update(key, c.value, hw_counter_is_32bit(f));
    emit_hw(out, device, port, f, v);
  }
  return true;
}

bool IbPorts::collect_port(const std::string& device, Port& port, bool netlink_ok, bool pma_due,
                           Staging& out) {
  const std::string_view label = port.label;
  const std::string subject = device + "/" + port.label;

  // state, phys_state, rate: held descriptors; every port has them, so
  // their absence means the port has gone.
  for (const char* file : {"state", "phys_state", "rate"}) {
    Read r = held_.read(port.dir + "/" + file);
    if (r.status == Status::kAbsent || gone(r)) return false;
    if (r.failed()) {
      // Rates of a port whose link is down read EINVAL on some kernels.
      out.error("read_error", subject, reading(r, file));
      continue;
    }
    if (file == std::string_view("rate")) {
      std::optional<PortRate> rate = parse_rate(r.text);
      if (!rate) {
        out.error("parse_error", subject, "malformed rate");
        continue;
      }
      out.add(families::kPortRateBytesPerSecond, {device, label}, rate->bytes_per_second);
      if (rate->width)
        out.add(families::kPortWidth, {device, label}, static_cast<double>(*rate->width));
      continue;
    }
    std::optional<unsigned> state = parse_numbered_state(r.text);
    if (!state) {
      out.error("parse_error", subject, std::string("malformed ") + file);
      continue;
    }
    out.add(file == std::string_view("state") ? families::kPortState : families::kPortPhysicalState,
            {device, label}, static_cast<double>(*state));
  }

  // hw_counters: netlink, else the sysfs files.
  bool from_netlink = false;
  if (netlink_ok) {
    int err = 0;
    if (auto counters = hw_source_->port_counters(device, port.number, &err)) {
      from_netlink = true;
      for (const HwCounterEntry& e : *counters) {
        if (classify_hw_counter(e.name) == HwMetric::kSkip) continue;
        std::uint64_t v = counters_->update(device + "/" + port.label + "/" + e.name, e.value,
                                            hw_counter_is_32bit(e.name));
        emit_hw(out, device, label, e.name, v);
      }
    }
  }
  if (!from_netlink && !read_hw_dir(port.dir + "/hw_counters", device, port.label, subject, out))
    return false;

  // PMA counters: only every pma_interval.
  if (!pma_due) {
    out.still_failing(port.pma_failures);
    pma_held_.keep_under(port.dir + "/counters/");
    pma_held_.keep_under(port.dir + "/counters_ext/");
  }
  if (pma_due) {
    port.pma_failures.clear();
    decltype(port.pma) pma{};
    std::map<std::string, double, std::less<>> generic;
    std::array<bool, static_cast<std::size_t>(PmaMetric::kCount)> from_ext{};
    for (bool ext : {false, true}) {
      const std::string sub = ext ? "counters_ext" : "counters";
      const sources::Listing& files = list_cached(port.dir + "/" + sub);
      if (files.status == Status::kGone) return false;
      if (files.status == Status::kError)
        out.error("read_error", subject, sources::errno_name(files.err) + " listing " + sub);
      for (const std::string& f : files.names) {
        Read r = pma_held_.read(port.dir + "/" + sub + "/" + f);
        if (gone(r)) return false;
        if (r.status == Status::kAbsent) continue;  // the file alone went away
        if (r.failed()) {
          out.sampled_error(port.pma_failures, "read_error", subject, reading(r, sub + "/" + f));
          continue;
        }
        Counter c = parse_counter(r.text);
        if (c.reading == CounterReading::kNoPma) {
          out.sampled_error(port.pma_failures, "no_pma", subject,
                            sub + "/" + f + " reads N/A (no PMA)");
          continue;
        }
        if (c.reading == CounterReading::kMalformed) {
          out.sampled_error(port.pma_failures, "parse_error", subject,
                            "malformed " + sub + "/" + f);
          continue;
        }
        PmaFile pf = classify_pma_file(f, ext);
        double v = as_double(c.value) * static_cast<double>(pf.multiplier);
        if (pf.metric == PmaMetric::kGeneric) {
          generic[attribute_label(pf.label)] = v;
          continue;
        }
        auto i = static_cast<std::size_t>(pf.metric);
        // A counters_ext/ _64 file wins over its 32-bit counters/ twin.
        if (from_ext[i] && !pf.overrides) continue;
        pma[i] = v;
        from_ext[i] = pf.overrides;
      }
    }
    port.pma = pma;
    port.pma_generic = std::move(generic);
  }
  for (std::size_t i = 0; i < port.pma.size(); ++i) {
    if (port.pma[i]) out.add(kPmaMetrics[i].family, {device, label}, *port.pma[i]);
  }
  for (const auto& [name, v] : port.pma_generic)
    out.add(families::kPortPmaTotal, {device, label, name}, v);
  return true;
}

}  // namespace nodewatch::interconnect
