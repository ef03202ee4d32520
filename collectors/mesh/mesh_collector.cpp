#include "mesh/mesh_collector.hpp"

#include <net/if.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <utility>

#include "mesh/mesh_metrics.hpp"

namespace nodewatch {
namespace mesh {
namespace {

constexpr std::size_t kMaxKeyFileBytes = 8192;
constexpr std::size_t kMaxPeersFileBytes = std::size_t{16} << 20;

bool valid_rail_name(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.';
  });
}

}  // namespace

const MetricTable& mesh_metric_table() {
  static const MetricTable kTable = [] {
    std::vector<MetricDesc> d;
    d.push_back(describe(families::kRttSeconds, rtt_buckets()));
    d.push_back(describe(families::kSentTotal));
    d.push_back(describe(families::kLostTotal));
    d.push_back(describe(families::kPeers));
    d.push_back(describe(families::kListedPeers));
    d.push_back(describe(families::kAnsweredTotal));
    d.push_back(describe(families::kDroppedPacketsTotal));
    d.push_back(describe(families::kUserTimestampsTotal));
    d.push_back(describe(families::kResponderUp));
    return MetricTable(std::move(d));
  }();
  return kTable;
}

MeshOptions read_mesh_options(OptionReader& r) {
  MeshOptions o;
  MeshSettings& s = o.settings;
  s.listen = r.get_string("listen", s.listen,
                          "UDP address the responder answers probes on (\"0.0.0.0:9843\", "
                          "\"[::]:9843\", \":9843\"); \"\": no port is opened");
  if (!s.listen.empty()) {
    std::string why;
    if (!parse_endpoint(s.listen, &why))
      r.error("listen", why + " (e.g. \"0.0.0.0:9843\", \"[::]:9843\", \":9843\")");
  }
  o.peers_file = r.get_string(
      "peers_file", o.peers_file,
      "absolute path of the peers, in Prometheus's file_sd format (JSON or YAML), re-read when "
      "it changes; a group's rail label names its rail (\"default\" without one); \"\": none");
  if (!o.peers_file.empty() && o.peers_file[0] != '/')
    r.error("peers_file", "must be an absolute path");
  o.key_file = r.get_string(
      "key_file", o.key_file,
      "absolute path of the shared keys, one per line (16-4096 bytes each, at most 4): the "
      "first signs, every one is accepted; required with listen or peers_file; refused while "
      "others can read or write it");
  if (!o.key_file.empty() && o.key_file[0] != '/') r.error("key_file", "must be an absolute path");
  if (o.key_file.empty() && (!s.listen.empty() || !o.peers_file.empty()))
    r.error("key_file",
            "is required with listen or peers_file: probes are signed with a shared key, and "
            "an unsigned probe is never answered");
  s.probe_interval =
      r.get_duration("probe_interval", s.probe_interval, std::chrono::milliseconds(100),
                     std::chrono::minutes(1), "one probe per peer and rail every interval");
  s.probe_timeout =
      r.get_duration("probe_timeout", s.probe_timeout, std::chrono::milliseconds(10),
                     std::chrono::seconds(10), "no valid answer within this counts a probe lost");
  s.max_peers = static_cast<std::size_t>(r.get_int(
      "max_peers", static_cast<std::int64_t>(s.max_peers), 1, 1024,
      "peers probed per rail at most; beyond it, the neighbours that follow the node in the "
      "ring plus a random sample of the rest"));
  s.neighbours = static_cast<std::size_t>(
      r.get_int("neighbours", static_cast<std::int64_t>(s.neighbours), 0, 1024,
                "peers that follow the node in the ring always probed; at most max_peers"));
  if (s.neighbours > s.max_peers) r.error("neighbours", "must not be more than max_peers");
  s.resample_interval = r.get_duration("resample_interval", s.resample_interval,
                                       std::chrono::seconds(10), std::chrono::hours(24),
                                       "how often the random part of the sample is drawn again");
  s.replay_window = r.get_duration(
      "replay_window", s.replay_window, std::chrono::seconds(1), std::chrono::minutes(10),
      "a probe stamped further than this from the responder's clock is refused as "
      "stale: the nodes' clocks must agree to within it");
  s.max_answers_per_second = static_cast<double>(r.get_int(
      "max_answers_per_second", static_cast<std::int64_t>(s.max_answers_per_second), 1, 1000000,
      "the responder's answer budget; beyond it probes are dropped as "
      "rate_limited"));
  std::set<std::string> names;
  r.for_each_table(
      "rails", "a rail: one socket, from its own address or device",
      [&](OptionReader& e, std::size_t) {
        RailSettings rail;
        rail.name = e.get_string("name", "",
                                 {"the rail's name, as the peers' rail label gives it (not "
                                  "\"default\"); 1-64 letters, digits, '_', '-', '.'",
                                  "none: required"});
        rail.source =
            e.get_string("source", "", {"the numeric address its probes leave from", "none"});
        rail.interface = e.get_string("interface", "",
                                      {"the device its probes are bound to (SO_BINDTODEVICE); a "
                                       "rail needs source, interface or both",
                                       "none"});
        if (!valid_rail_name(rail.name))
          e.error("name", "must be 1-64 characters of letters, digits, '_', '-', '.'");
        else if (rail.name == kDefaultRail)
          e.error("name",
                  "\"default\" is the rail of targets without a rail label; choose another");
        else if (!names.insert(rail.name).second)
          e.error("name", "rail \"" + rail.name + "\" is defined twice");
        if (!rail.source.empty() && !parse_address(rail.source))
          e.error("source", "\"" + rail.source + "\" is not a numeric IPv4 or IPv6 address");
        if (rail.interface.size() >= IFNAMSIZ)
          e.error("interface", "longer than an interface name can be");
        if (rail.source.empty() && rail.interface.empty())
          e.error("name", "a rail needs a source address, an interface, or both");
        s.rails.push_back(std::move(rail));
      });
  return o;
}

MeshCollector::MeshCollector(std::shared_ptr<MeshService> service, MeshOptions options,
                             std::shared_ptr<sources::Faults> faults)
    : service_(std::move(service)), options_(std::move(options)) {
  service_->apply(options_.settings);
  key_.path = options_.key_file;
  peers_.path = options_.peers_file;
  if (!key_.path.empty()) key_.fs = std::make_unique<helper::Fs>("mesh:" + key_.path, faults);
  if (!peers_.path.empty()) peers_.fs = std::make_unique<helper::Fs>("mesh:" + peers_.path, faults);
}

std::optional<MeshCollector::Changed> MeshCollector::changed_text(Followed& f,
                                                                  const helper::Deadline& d,
                                                                  std::string_view reason,
                                                                  bool private_file,
                                                                  MetricSink& out) {
  helper::StatInfo info;
  helper::Answer a = f.fs->stat(f.path, d, &info);
  if (!a.answered()) {
    out.error("stuck", f.path, "no answer (" + std::string(helper::failure_name(a.failure)) + ")");
    return std::nullopt;
  }
  if (!a.ok()) {
    out.error(reason, f.path, std::strerror(a.err));
    return std::nullopt;
  }
  if (!S_ISREG(info.mode)) {
    out.error(reason, f.path, "not a regular file");
    return std::nullopt;
  }
  if (private_file && (info.mode & S_IRWXO) != 0) {
    out.error(reason, f.path, "readable or writable by others: chmod o-rwx it");
    return std::nullopt;
  }
  std::pair<std::uint64_t, double> now{info.size, info.mtime_seconds};
  if (f.seen && *f.seen == now) return std::nullopt;
  helper::Answer ra;
  sources::FsRoot::FileRead r =
      f.fs->read_regular(f.path, private_file ? kMaxKeyFileBytes : kMaxPeersFileBytes, d, &ra);
  if (!ra.answered()) {
    out.error("stuck", f.path, "no answer (" + std::string(helper::failure_name(ra.failure)) + ")");
    return std::nullopt;
  }
  if (!r.ok()) {
    out.error(reason, f.path,
              r.err == EFBIG ? std::string("too large") : std::string(std::strerror(r.err)));
    return std::nullopt;
  }
  // The stat from before the read: a file replaced meanwhile is read again
  // next time rather than missed.
  return Changed{std::move(r.text), now};
}

void MeshCollector::collect(const CollectContext& ctx, MetricSink& out) {
  const helper::Deadline d{ctx.deadline, ctx.cancelled};
  if (key_.fs) {
    if (std::optional<Changed> changed = changed_text(key_, d, "key_error", true, out)) {
      std::string why;
      if (std::optional<std::vector<std::string>> keys = parse_keys(changed->text, &why)) {
        service_->set_keys(std::move(*keys));
        key_.seen = changed->stat;
      } else {
        out.error("key_error", key_.path, why);
      }
    }
  }
  if (peers_.fs) {
    if (std::optional<Changed> changed = changed_text(peers_, d, "peers_error", false, out)) {
      std::string why;
      if (std::optional<PeerList> list = parse_peers(changed->text, true, &why)) {
        peer_problems_ = list->problems;
        peers_skipped_ = list->skipped;
        service_->set_peers(std::move(list->peers));
        peers_.seen = changed->stat;
      } else {
        out.error("peers_error", peers_.path, why);
      }
    }
    // Skipped targets are counted every collection while the file lists them.
    if (peers_skipped_ > 0) {
      out.error("bad_target", peers_.path,
                std::to_string(peers_skipped_) + " target(s) skipped; first: " +
                    (peer_problems_.empty() ? std::string() : peer_problems_.front()));
      if (peers_skipped_ > 1) out.error("bad_target", peers_skipped_ - 1);
    }
  }

  MeshSnapshot s = service_->snapshot();
  for (const MeshSnapshot::Problem& p : s.problems) out.error(p.reason, p.subject, p.detail);
  for (const PeerStats& p : s.peers) {
    out.add_histogram(families::kRttSeconds, {p.peer, p.rail}, p.rtt);
    out.add(families::kSentTotal, {p.peer, p.rail}, static_cast<double>(p.sent));
    out.add(families::kLostTotal, {p.peer, p.rail}, static_cast<double>(p.lost));
  }
  for (const auto& [rail, n] : s.probed) {
    // The default rail is reported only where it is used.
    if (rail == kDefaultRail && n == 0 && s.listed.count(rail) != 0 && s.listed.at(rail) == 0 &&
        !options_.settings.rails.empty())
      continue;
    out.add(families::kPeers, {rail}, static_cast<double>(n));
    auto l = s.listed.find(rail);
    out.add(families::kListedPeers, {rail},
            static_cast<double>(l == s.listed.end() ? 0 : l->second));
    auto u = s.user_timestamps.find(rail);
    out.add(families::kUserTimestampsTotal, {rail},
            static_cast<double>(u == s.user_timestamps.end() ? 0 : u->second));
  }
  if (!options_.settings.listen.empty()) {
    out.add(families::kAnsweredTotal, {}, static_cast<double>(s.answered));
    out.add(families::kResponderUp, {}, s.answering ? 1.0 : 0.0);
  }
  for (Drop drop : kDrops) {
    auto it = s.dropped.find(drop);
    out.add(families::kDroppedPacketsTotal, {drop_name(drop)},
            static_cast<double>(it == s.dropped.end() ? 0 : it->second));
  }
}

}  // namespace mesh

const CollectorSpec& mesh_collector_spec() {
  static const CollectorSpec spec = [] {
    CollectorSpec s;
    s.name = "mesh";
    s.description =
        "pingmesh: signed UDP probes between nodes, per rail; round-trip time, sent and lost "
        "per peer (off by default; opens a port only with listen)";
    s.enabled_by_default = false;
    // The key and peers files are read through helper processes, which may
    // wait up to the timeout on a hung mount.
    s.default_interval = std::chrono::seconds(15);
    s.default_timeout = std::chrono::seconds(5);
    s.read_options = typed_options<mesh::MeshOptions>(mesh::read_mesh_options);
    s.metrics = mesh::mesh_metric_table;
    s.create = [](const CollectorEnv& env) -> std::unique_ptr<Collector> {
      const auto& o = env.options_as<mesh::MeshOptions>();
      auto service = env.service<mesh::MeshService>(
          "mesh", [] { return std::make_shared<mesh::MeshService>(); });
      return std::make_unique<mesh::MeshCollector>(std::move(service), o, env.roots.faults);
    };
    return s;
  }();
  return spec;
}

}  // namespace nodewatch
