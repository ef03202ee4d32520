#include "uncore/uncore_collector.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <utility>

#include <spdlog/spdlog.h>

#include "nodewatch/sources/fs.hpp"
#include "nodewatch/text.hpp"
#include "uncore/known.hpp"
#include "uncore/uncore_metrics.hpp"

namespace nodewatch {
namespace uncore {

const MetricTable& uncore_metric_table() {
  static const MetricTable kTable(
      {describe(families::kEventsTotal), describe(families::kEventRunningRatio),
       describe(families::kEventScaleCorrected), describe(families::kPmuUp),
       describe(families::kHostLinkBytesTotal), describe(families::kHostLinkDeviceInfo)});
  return kTable;
}

// One event on one PMU: its descriptors (one per CPU), their last
// readings and the scaled total so far.
struct Event {
  std::uint32_t type = 0;
  std::vector<int> cpus;
  EventAttr attr;
  std::vector<int> fds;  // empty: not open
  std::vector<PerfReading> last;
  bool have_last = false;
  double total = 0;
  std::vector<double> cpu_totals;  // the total by CPU of `cpus`, in its order
  bool counted = false;            // was open once: its total is exported while it is not
  bool corrected = false;          // its scale is known::scale_correction's
};

class Counters {
 public:
  explicit Counters(PerfApi& perf) : perf(perf) {}
  ~Counters() {
    for (auto& [key, e] : events) close(e);
  }
  Counters(const Counters&) = delete;
  Counters& operator=(const Counters&) = delete;

  void close(Event& e) {
    for (int fd : e.fds) perf.close(fd);
    held -= e.fds.size();
    e.fds.clear();
    e.have_last = false;
  }

  PerfApi& perf;
  std::mutex mu;
  // By (PMU, event terms).
  std::map<std::pair<std::string, std::string>, Event> events;
  std::size_t held = 0;
  bool said_correction = false;  // the scale correction's log line
};

std::shared_ptr<Counters> make_counters(PerfApi& perf) {
  return std::make_shared<Counters>(perf);
}

namespace {

using Key = std::pair<std::string, std::string>;

// The errors_total reason for a refused open.
std::string_view open_reason(int err) {
  return err == EACCES || err == EPERM ? "no_permission" : "open_failed";
}

std::string subject(const Key& key) {
  return key.first + "/" + key.second + "/";
}

bool matches(const EventRequest& req, std::string_view pmu) {
  return req.prefix ? pmu.starts_with(req.pmu) : pmu == req.pmu;
}

// One collection's work over the shared counters, under their lock.
class Round {
 public:
  // `known`: the events the collector counts by itself (host links),
  // kept as a request's are, and exported only through their own
  // families.
  Round(Counters& c, const sources::FsRoot& sys, const Cpu& cpu, std::int64_t max_counters,
        const std::vector<EventRequest>& requests, std::set<Key> known, MetricSink& out)
      : c_(c),
        sys_(sys),
        cpu_(cpu),
        max_(static_cast<std::size_t>(max_counters)),
        requests_(requests),
        known_(std::move(known)),
        out_(out) {}

  // Forgets the events no request asks for any more, closing their
  // counters: first, so that what a reload dropped holds no descriptor
  // against max_counters when the new events are opened.
  void forget_unasked() {
    for (auto it = c_.events.begin(); it != c_.events.end();) {
      if (asked(it->first, false)) {
        ++it;
        continue;
      }
      c_.close(it->second);
      it = c_.events.erase(it);
    }
  }

  // Opens (when needed) and reads the event `terms` of PMU `name`; false
  // when it is not counting. An event two requests name (`msr/tsc/` and
  // `msr*/tsc/`) is read once: the second gets the first's answer.
  bool visit(const std::string& name, const std::string& terms) {
    const Key key{name, terms};
    if (auto done = results_.find(key); done != results_.end()) return done->second;
    const bool counting = visit_once(key);
    results_[key] = counting;
    return counting;
  }

  // The events the round did not visit. A round cut short (the deadline,
  // a stop) leaves them as they are. Otherwise their PMU has gone: their
  // counters are closed; an event of a PMU named exactly keeps its total,
  // exported, for when the PMU comes back; one found through a prefix is
  // forgotten (such PMUs may come back under other names, and the
  // events must not pile up).
  void finish(bool cut_short) {
    for (auto it = c_.events.begin(); it != c_.events.end();) {
      Event& e = it->second;
      if (results_.contains(it->first) || cut_short) {
        ++it;
        continue;
      }
      c_.close(e);
      if (!asked(it->first, true)) {
        it = c_.events.erase(it);
        continue;
      }
      if (e.counted) emit(it->first, e, std::nullopt);
      ++it;
    }
  }

 private:
  // Whether a request names the event (`exact`: by the PMU's whole name).
  bool named(const Key& key, bool exact) const {
    return std::any_of(requests_.begin(), requests_.end(), [&](const EventRequest& r) {
      return r.terms == key.second &&
             (exact ? !r.prefix && r.pmu == key.first : matches(r, key.first));
    });
  }

  // Whether the event is to be kept: named, or known (a known event whose
  // PMU went is forgotten, as one found through a prefix).
  bool asked(const Key& key, bool exact) const {
    return named(key, exact) || (!exact && known_.contains(key));
  }

  bool visit_once(const Key& key) {
    Event& e = c_.events[key];
    std::string error;
    const std::optional<Pmu>& pmu = pmu_of(key.first, &error);
    if (!pmu) {
      // A description that could not be read this once is no reason to
      // lose counts: what is open is read, the PMU reported down.
      out_.error("pmu_unreadable", text::escaped(key.first), error);
      if (!e.fds.empty() && read(key, e, true)) return false;
    } else {
      if (!e.fds.empty() && (e.type != pmu->type || e.cpus != pmu->cpus)) {
        // Moved (CPU hotplug): what the counters counted since the last
        // read is taken before they are opened where the PMU is now.
        read(key, e, false);
        c_.close(e);
      }
      if ((!e.fds.empty() || open(key, *pmu, e)) && read(key, e, true)) return true;
    }
    // Not counting now: what it counted stays, without a ratio.
    if (e.counted) emit(key, e, std::nullopt);
    return false;
  }

  // The PMU's type and CPUs, read once a collection however many events
  // it has.
  const std::optional<Pmu>& pmu_of(const std::string& name, std::string* error) {
    auto [it, fresh] = pmus_.try_emplace(name);
    if (fresh) {
      it->second.pmu = read_pmu(sys_, name, &it->second.error);
    }
    *error = it->second.error;
    return it->second.pmu;
  }

  bool open(const Key& key, const Pmu& pmu, Event& e) {
    std::string error;
    std::optional<EventAttr> attr = resolve_event(sys_, pmu.name, key.second, &error);
    if (!attr) {
      out_.error("bad_event", subject(key), error);
      return false;
    }
    std::optional<Correction> fix =
        scale_correction(pmu.name, attr->alias, attr->sysfs_scale, cpu_);
    if (fix) attr->scale *= fix->factor;
    if (c_.held + pmu.cpus.size() > max_) {
      out_.error("too_many_counters", subject(key),
                 std::to_string(pmu.cpus.size()) + " more descriptors would pass max_counters (" +
                     std::to_string(max_) + ")");
      return false;
    }
    for (int cpu : pmu.cpus) {
      int err = 0;
      const int fd = c_.perf.open(pmu.type, attr->config, cpu, &err);
      if (fd < 0) {
        c_.close(e);
        out_.error(open_reason(err), subject(key),
                   sources::errno_name(err) + " opening it on CPU " + std::to_string(cpu));
        return false;
      }
      e.fds.push_back(fd);
      ++c_.held;
    }
    e.type = pmu.type;
    e.cpus = pmu.cpus;
    e.attr = *attr;
    // Said once a daemon: every IIO bandwidth counter of the machine has
    // the same fault.
    if (fix && !c_.said_correction) {
      spdlog::info("uncore: {} and the like: {}", subject(key), fix->why);
      c_.said_correction = true;
    }
    e.corrected = fix.has_value();
    e.have_last = false;
    return true;
  }

  // Reads the counters into the total, and exports it with `show`.
  bool read(const Key& key, Event& e, bool show) {
    std::vector<PerfReading> now(e.fds.size());
    for (std::size_t i = 0; i < e.fds.size(); ++i) {
      int err = 0;
      if (!c_.perf.read(e.fds[i], &now[i], &err)) {
        c_.close(e);
        out_.error("read_failed", subject(key), sources::errno_name(err));
        return false;
      }
    }
    double counted = 0;
    // Never shrunk: a die whose CPUs all went offline keeps its total.
    if (e.cpu_totals.size() < now.size()) e.cpu_totals.resize(now.size(), 0);
    std::uint64_t enabled = 0;
    std::uint64_t running = 0;
    for (std::size_t i = 0; i < now.size(); ++i) {
      const PerfReading base = e.have_last ? e.last[i] : PerfReading{};
      // A kernel counter of 64 bits does not wrap; one that went back is
      // taken as nothing counted.
      const std::uint64_t dv = now[i].value >= base.value ? now[i].value - base.value : 0;
      const std::uint64_t de =
          now[i].enabled_ns >= base.enabled_ns ? now[i].enabled_ns - base.enabled_ns : 0;
      const std::uint64_t dr =
          now[i].running_ns >= base.running_ns ? now[i].running_ns - base.running_ns : 0;
      enabled += de;
      running += dr;
      // Counted for dr of de nanoseconds: perf's estimate of the rest.
      if (dr > 0) {
        const double here =
            static_cast<double>(dv) * static_cast<double>(de) / static_cast<double>(dr);
        counted += here;
        e.cpu_totals[i] += here * e.attr.scale;
      }
    }
    // The first reading after an open is the baseline: what it counted
    // since the open adds to the total.
    e.total += counted * e.attr.scale;
    e.last = std::move(now);
    e.have_last = true;
    e.counted = true;
    const double ratio =
        enabled > 0 ? std::min(1.0, static_cast<double>(running) / static_cast<double>(enabled))
                    : 1.0;
    if (show) emit(key, e, ratio);
    return true;
  }

  void emit(const Key& key, const Event& e, std::optional<double> ratio) {
    if (!named(key, false)) return;
    out_.add(families::kEventsTotal, {key.first, key.second, e.attr.unit}, e.total);
    if (ratio) out_.add(families::kEventRunningRatio, {key.first, key.second}, *ratio);
    if (e.corrected) out_.add(families::kEventScaleCorrected, {key.first, key.second}, 1);
  }

  Counters& c_;
  const sources::FsRoot& sys_;
  const Cpu& cpu_;
  std::size_t max_;
  const std::vector<EventRequest>& requests_;
  std::set<Key> known_;
  MetricSink& out_;
  std::map<Key, bool> results_;  // what each visit answered
  struct PmuRead {
    std::optional<Pmu> pmu;
    std::string error;
  };
  std::map<std::string, PmuRead> pmus_;
};

}  // namespace

UncoreOptions read_uncore_options(OptionReader& r) {
  UncoreOptions o;
  o.events = r.get_string_array(
      "events", o.events,
      "events to count, in perf's syntax: \"<pmu>/<event or terms>/\" (`msr/tsc/`, "
      "`nvidia_scf_pmu_0/gmem_rd_data/`, `nvidia_nvlink_c2c0_pmu_0/total_bytes_loc,port=0x1/`); "
      "a PMU name ending in `*` names every PMU so prefixed",
      64);
  std::set<std::string> seen;
  for (const std::string& text : o.events) {
    std::string error;
    if (!parse_request(text, &error)) r.error("events", "\"" + text + "\": " + error);
    if (!seen.insert(text).second) r.error("events", "\"" + text + "\" is named twice");
  }
  o.host_links = r.get_bool(
      "host_links", o.host_links,
      "count the traffic between the CPU and the devices it hosts on the PMUs nodewatch knows "
      "(NVIDIA Grace and Vera, Intel IIO), where the node has them");
  o.max_counters = r.get_int("max_counters", o.max_counters, 1, 4096,
                             "descriptors the events may hold together (one per event and CPU "
                             "of its PMU's cpumask); an event past it is not opened");
  return o;
}

UncoreCollector::UncoreCollector(Roots roots, UncoreOptions options,
                                 std::shared_ptr<Counters> counters)
    : roots_(std::move(roots)),
      options_(std::move(options)),
      counters_(std::move(counters)),
      cpu_(read_cpu(roots_.proc())) {
  for (const std::string& text : options_.events) {
    std::string error;
    if (std::optional<EventRequest> req = parse_request(text, &error)) requests_.push_back(*req);
  }
}

UncoreCollector::~UncoreCollector() = default;

std::size_t UncoreCollector::open_counters() const {
  std::lock_guard lock(counters_->mu);
  return counters_->held;
}

std::size_t UncoreCollector::known_events() const {
  std::lock_guard lock(counters_->mu);
  return counters_->events.size();
}

void UncoreCollector::collect(const CollectContext& ctx, MetricSink& out) {
  if (requests_.empty() && !options_.host_links) {
    // Nothing asked (a reload turned everything off): what an earlier
    // configuration opened is closed.
    std::lock_guard lock(counters_->mu);
    for (auto& [key, e] : counters_->events) counters_->close(e);
    counters_->events.clear();
    return;
  }
  const sources::FsRoot sys = roots_.sys();
  sources::Listing pmus = sys.list(kPmuDir);
  if (!pmus.ok() && pmus.status == sources::Status::kError)
    throw CollectError("unreadable",
                       sources::errno_name(pmus.err) + " listing " + sys.full(kPmuDir));
  std::set<Key> known;
  if (options_.host_links) {
    // Found again when the PMUs change, and now and then besides: a
    // description that could not be read once is not lost for good.
    if (!links_found_ || pmus.names != link_pmus_ || ++rounds_since_found_ >= kRefindRounds) {
      std::vector<HostLinkEvent> found = host_link_events(sys, pmus.names, cpu_);
      // An event of a PMU still listed that this look did not find (its
      // description unreadable for a moment) stays, with its total: only
      // a PMU that went takes its events with it.
      for (HostLinkEvent& old : links_) {
        const bool listed =
            std::find(pmus.names.begin(), pmus.names.end(), old.pmu) != pmus.names.end();
        const bool kept = std::any_of(found.begin(), found.end(), [&](const HostLinkEvent& e) {
          return e.pmu == old.pmu && e.terms == old.terms;
        });
        if (listed && !kept) found.push_back(std::move(old));
      }
      links_ = std::move(found);
      link_pmus_ = pmus.names;
      links_found_ = true;
      devices_found_ = false;
      rounds_since_found_ = 0;
    }
    for (const HostLinkEvent& e : links_) known.insert({e.pmu, e.terms});
    find_link_devices(sys);
  }
  std::lock_guard lock(counters_->mu);
  Round round(*counters_, sys, cpu_, options_.max_counters, requests_, known, out);
  round.forget_unasked();
  std::map<std::string, bool> up;  // by PMU
  bool cut_short = false;
  for (const EventRequest& req : requests_) {
    bool any = false;
    for (const std::string& name : pmus.names) {
      if (!matches(req, name)) continue;
      any = true;
      if ((cut_short = ctx.should_stop())) break;
      const bool counting = round.visit(name, req.terms);
      auto [it, fresh] = up.try_emplace(name, counting);
      if (!fresh) it->second = it->second && counting;
    }
    if (cut_short) break;
    // A prefix that finds no PMU is a node without that hardware: nothing
    // to say. A PMU named whole that is not there is worth saying.
    if (!any && !req.prefix) {
      out.error("pmu_missing", req.pmu, "no such PMU in " + sys.full(kPmuDir));
      up[req.pmu] = false;
    }
  }
  if (!cut_short) {
    for (const HostLinkEvent& e : links_) {
      if ((cut_short = ctx.should_stop())) break;
      const bool counting = round.visit(e.pmu, e.terms);
      auto [it, fresh] = up.try_emplace(e.pmu, counting);
      if (!fresh) it->second = it->second && counting;
    }
  }
  for (const auto& [name, ok] : up) out.add(families::kPmuUp, {name}, ok ? 1 : 0);
  round.finish(cut_short);
  if (options_.host_links) emit_host_links(out);
}

// The known events' totals summed by series. An event counts in its
// series once it has counted: its total stays in while it is not
// counting, so that a series never goes back.
void UncoreCollector::emit_host_links(MetricSink& out) const {
  using Series = std::array<std::string, 5>;  // pmu, die, port, link, direction
  std::map<Series, double> bytes;
  for (const HostLinkEvent& e : links_) {
    auto it = counters_->events.find({e.pmu, e.terms});
    if (it == counters_->events.end() || !it->second.counted) continue;
    const Event& ev = it->second;
    const double factor = ev.attr.unit == "bytes" ? 1 : e.bytes_per_count;
    if (!e.per_die) {
      bytes[{e.pmu, "", e.port, e.link, e.direction}] += ev.total * factor;
      continue;
    }
    for (std::size_t d = 0; d < e.dies.size() && d < ev.cpu_totals.size(); ++d) {
      if (!e.dies[d].port) continue;
      bytes[{e.pmu, std::to_string(d), *e.dies[d].port, e.link, e.direction}] +=
          ev.cpu_totals[d] * factor;
    }
  }
  for (const auto& [s, v] : bytes)
    out.add(families::kHostLinkBytesTotal, {s[0], s[1], s[2], s[3], s[4]}, v);
  for (const HostLinkDevice& d : link_devices_)
    out.add(families::kHostLinkDeviceInfo, {d.pmu, d.die, d.port, d.device}, 1);
}

void UncoreCollector::find_link_devices(const sources::FsRoot& sys) {
  // Only for links that name devices; the PCI listing tells when to look
  // again (a device added, removed or rescanned).
  if (links_.empty()) {
    link_devices_.clear();
    return;
  }
  sources::Listing pci = sys.list("bus/pci/devices");
  if (devices_found_ && pci.names == link_pci_) return;
  link_devices_ = host_link_devices(sys, links_, cpu_);
  link_pci_ = std::move(pci.names);
  devices_found_ = true;
}

}  // namespace uncore

const CollectorSpec& uncore_collector_spec() {
  static const CollectorSpec kSpec = [] {
    CollectorSpec spec;
    spec.name = "uncore";
    spec.description =
        "Counters of the CPU's uncore PMUs (perf_event_open): events named in perf's syntax";
    // Until the known PMU tables (Grace, Vera, Intel IIO) choose events by
    // themselves, it counts only what is named.
    spec.enabled_by_default = false;
    spec.default_interval = std::chrono::seconds(15);
    spec.default_timeout = std::chrono::seconds(5);
    spec.read_options = typed_options<uncore::UncoreOptions>(uncore::read_uncore_options);
    spec.metrics = uncore::uncore_metric_table;
    spec.create = [](const CollectorEnv& env) -> std::unique_ptr<Collector> {
      return std::make_unique<uncore::UncoreCollector>(
          env.roots, env.options_as<uncore::UncoreOptions>(),
          env.service<uncore::Counters>("uncore", [] { return uncore::make_counters(); }));
    };
    return spec;
  }();
  return kSpec;
}

}  // namespace nodewatch
