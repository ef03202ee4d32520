#include "imex/imex_collector.hpp"

#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "imex/imex_metrics.hpp"
#include "nodewatch/command.hpp"

namespace nodewatch {
namespace imex {
namespace {

constexpr std::string_view kUnit = "nvidia-imex.service";
// The domain's answer: every member's connections to every other, so its
// size grows as the square of the members (about 1.3 MiB for 144).
constexpr std::size_t kMaxDomainAnswer = std::size_t{4} << 20;
constexpr std::size_t kMaxStateAnswer = 64 * 1024;

// The addresses of this node's interfaces, as text (in the daemon's
// network namespace, which the unit leaves the host's).
std::vector<std::string> local_addresses() {
  std::vector<std::string> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    char buf[INET6_ADDRSTRLEN];
    const void* a = nullptr;
    if (i->ifa_addr->sa_family == AF_INET)
      a = &reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr;
    else if (i->ifa_addr->sa_family == AF_INET6)
      a = &reinterpret_cast<const sockaddr_in6*>(i->ifa_addr)->sin6_addr;
    if (a != nullptr && ::inet_ntop(i->ifa_addr->sa_family, a, buf, sizeof buf) != nullptr)
      out.emplace_back(buf);
  }
  ::freeifaddrs(list);
  return out;
}

// This node's host name, and its first label ("n1.example" -> "n1").
std::pair<std::string, std::string> host_names() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return {};
  std::string full(buf);
  return {full, full.substr(0, full.find('.'))};
}

bool is_socket(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

bool is_daemon_state(std::string_view s) {
  return std::find(std::begin(kDaemonStates), std::end(kDaemonStates), s) !=
         std::end(kDaemonStates);
}

}  // namespace

const MetricTable& imex_metric_table() {
  static const MetricTable kTable = [] {
    std::vector<MetricDesc> d;
    d.push_back(describe(families::kInfo));
    d.push_back(describe(families::kUp));
    d.push_back(describe(families::kDaemonState));
    d.push_back(describe(families::kDomainState));
    d.push_back(describe(families::kNodesConfigured));
    d.push_back(describe(families::kDomainNodes));
    d.push_back(describe(families::kDomainNodesReady));
    d.push_back(describe(families::kPeerConnected));
    return MetricTable(std::move(d));
  }();
  return kTable;
}

ImexOptions read_imex_options(OptionReader& r) {
  ImexOptions o;
  // An absolute path, or "" where `may_be_empty`.
  auto path = [&](std::string_view key, std::string& v, bool may_be_empty, Help help) {
    v = r.get_string(key, v, help);
    if ((!may_be_empty || !v.empty()) && (v.empty() || v[0] != '/'))
      r.error(key, "must be an absolute path");
  };
  path("config_file", o.config_file, false,
       "IMEX's configuration (nvidia-imex -c): where its nodes file and command service are");
  path("ctl", o.ctl, true,
       "absolute path of nvidia-imex-ctl; \"\": the first of /usr/bin, /usr/sbin, /usr/local/bin, "
       "/opt/nvidia/imex/bin, /usr/local/nvidia/imex/bin");
  path("socket", o.socket, true,
       "IMEX's command socket (a host-managed ComputeDomain's); \"\": IMEX_CMD_UNIX_DOMAIN_PATH of "
       "config_file, else /etc/nvidia-imex/imex_ctrl.sock");
  path("systemd_dir", o.systemd_dir, false,
       "systemd's directory of enabled and masked units, where nvidia-imex.service is looked for "
       "(the host's, in a container)");
  return o;
}

ImexCollector::ImexCollector(ImexOptions options, std::shared_ptr<sources::Faults> faults)
    : options_(std::move(options)), root_(std::filesystem::path("/"), std::move(faults)) {}

std::string ImexCollector::unit_state() const {
  const std::string etc = options_.systemd_dir + "/";
  sources::Read link = root_.readlink(etc + std::string(kUnit));
  if (link.ok() && link.value() == "/dev/null") return "masked";
  sources::Listing l = root_.list(options_.systemd_dir);
  for (const std::string& dir : l.names) {
    if (!dir.ends_with(".wants")) continue;
    struct stat st {};
    if (::lstat(root_.full(etc + dir + "/" + std::string(kUnit)).c_str(), &st) == 0)
      return "enabled";
  }
  struct stat st {};
  if (::stat(root_.full(etc + std::string(kUnit)).c_str(), &st) == 0) return "disabled";
  for (const std::string& lib : options_.systemd_lib)
    if (::stat(root_.full(lib + "/" + std::string(kUnit)).c_str(), &st) == 0) return "disabled";
  return "absent";
}

std::string ImexCollector::find_ctl() const {
  if (!options_.ctl.empty()) return ::access(options_.ctl.c_str(), X_OK) == 0 ? options_.ctl : "";
  for (std::string_view dir : kCtlSearchPath) {
    std::string p = std::string(dir) + "/nvidia-imex-ctl";
    if (::access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

ImexCollector::Setup ImexCollector::look(MetricSink& out) const {
  Setup s;
  sources::FsRoot::FileRead cfg = root_.read_regular(options_.config_file, kMaxFileBytes);
  if (cfg.ok())
    s.config = parse_config(cfg.text);
  else if (cfg.failed())
    out.error("config_unreadable", options_.config_file, cfg.error_name());

  std::string socket = !options_.socket.empty()           ? options_.socket
                       : !s.config.command_socket.empty() ? s.config.command_socket
                                                          : std::string(kDefaultSocket);
  if (is_socket(socket)) s.socket = socket;

  sources::FsRoot::FileRead nodes = root_.read_regular(s.config.nodes_file, kMaxFileBytes);
  if (nodes.ok())
    s.members = parse_nodes(nodes.text).size();
  else if (nodes.failed())
    out.error("nodes_unreadable", s.config.nodes_file, nodes.error_name());

  // The unit's links are looked at only where they can matter.
  if (s.socket.empty() && s.members == 0) return s;
  s.service = unit_state();
  if (!s.socket.empty()) {
    s.configured = true;
    s.mode = "socket";
  } else if (s.members > 0 && s.service != "masked") {
    s.configured = true;
    s.mode = "nodes_file";
  }
  return s;
}

void ImexCollector::collect(const CollectContext& ctx, MetricSink& out) {
  const Setup s = look(out);
  if (!s.configured) return;
  out.add(families::kNodesConfigured, {}, static_cast<double>(s.members));
  query(ctx, s, out);
  out.add(families::kInfo, {s.mode, options_.config_file, s.service, version_}, 1);
}

void ImexCollector::query(const CollectContext& ctx, const Setup& s, MetricSink& out) {
  const auto deadline = std::chrono::steady_clock::now() + ctx.left();
  std::string_view state;
  std::string ctl = find_ctl();
  if (!s.socket.empty()) {
    if (::access(s.socket.c_str(), W_OK) != 0 && errno == EACCES) {
      state = "no_permission";
      out.error("imex_no_permission", s.socket, "the command socket is not writable");
    }
  } else if (!s.config.command_enabled) {
    state = "command_off";
  }
  if (state.empty() && ctl.empty()) state = "ctl_missing";

  // NVIDIA's DRA driver asks a host-managed daemon with --u=<socket>.
  std::vector<std::string> base = {ctl};
  if (!s.socket.empty()) {
    base.push_back("--u=" + s.socket);
  } else {
    base.push_back("-c");
    base.push_back(options_.config_file);
  }
  auto with = [&](std::initializer_list<const char*> args) {
    std::vector<std::string> argv = base;
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  };

  if (state.empty()) {
    command::Result r = command::run(with({"-q"}), deadline, kMaxStateAnswer);
    if (!r.started) {
      state = "query_failed";
      out.error("imex_query_failed", ctl, std::strerror(r.err));
    } else {
      // A ctl killed by a signal (it crashed) says nothing of the daemon.
      StateAnswer a = r.timed_out     ? StateAnswer{"unreachable", "no answer in time"}
                      : r.signal != 0 ? StateAnswer{"query_failed",
                                                    "killed by signal " + std::to_string(r.signal)}
                                      : parse_state(r.output, r.exit_status);
      state = a.state;
      if (state == "unreachable") out.error("imex_unreachable", "imex", a.detail);
      if (state == "query_failed") out.error("imex_query_failed", "imex", a.detail);
      if (state == "no_permission") out.error("imex_no_permission", "imex", a.detail);
    }
  }
  const bool up = is_daemon_state(state);
  out.add(families::kUp, {}, up ? 1 : 0);
  for (std::string_view x : kDaemonStates) out.add(families::kDaemonState, {x}, x == state ? 1 : 0);
  for (std::string_view x : kQueryStates) out.add(families::kDaemonState, {x}, x == state ? 1 : 0);

  std::optional<Domain> domain;
  if (up) {
    command::Result r = command::run(with({"-N", "-j"}), deadline, kMaxDomainAnswer);
    std::string why;
    if (r.ok() && !r.truncated)
      domain = parse_domain(r.output, &why);
    else if (r.timed_out)
      why = "no answer in time";
    else if (r.truncated)
      why = "answer larger than " + std::to_string(kMaxDomainAnswer) + " bytes";
    else
      why = "exit status " + std::to_string(r.exit_status);
    if (!domain) out.error("imex_domain_unparsable", "imex", why);
  }
  for (std::string_view x : {"up", "degraded", "down", "unknown"})
    out.add(families::kDomainState, {x}, x == (domain ? domain->status : "unknown") ? 1 : 0);
  if (!domain) return;

  std::size_t ready = 0;
  for (const Domain::Member& m : domain->members) ready += m.status == "ready";
  out.add(families::kDomainNodes, {}, static_cast<double>(domain->members.size()));
  out.add(families::kDomainNodesReady, {}, static_cast<double>(ready));

  const Domain::Member* self = local_member(*domain, s.config.bind_ip, local_addresses());
  if (self == nullptr && s.config.bind_ip.empty()) {
    auto [full, short_name] = host_names();
    for (const Domain::Member& m : domain->members)
      if (!m.host_name.empty() && (m.host_name == full || m.host_name == short_name)) self = &m;
  }
  if (self == nullptr) {
    out.error("imex_local_member_unknown", "imex",
              "no member of the domain has this node's address or name");
    return;
  }
  version_ = self->version;
  for (const Domain::Connection& c : self->connections)
    if (!c.host.empty() && c.host != self->host)
      out.add(families::kPeerConnected, {c.host}, c.status == "CONNECTED" ? 1 : 0);
}

}  // namespace imex

const CollectorSpec& imex_collector_spec() {
  static const CollectorSpec spec = [] {
    CollectorSpec s;
    s.name = "imex";
    s.description =
        "NVIDIA IMEX: the daemon's and its domain's state, where IMEX is configured (a nodes file "
        "with members, or a ComputeDomain's command socket); nothing elsewhere";
    s.enabled_by_default = true;
    s.default_interval = std::chrono::seconds(30);
    s.default_timeout = std::chrono::seconds(10);
    s.read_options = typed_options<imex::ImexOptions>(imex::read_imex_options);
    s.metrics = imex::imex_metric_table;
    s.create = [](const CollectorEnv& env) -> std::unique_ptr<Collector> {
      return std::make_unique<imex::ImexCollector>(env.options_as<imex::ImexOptions>(),
                                                   env.roots.faults);
    };
    return s;
  }();
  return spec;
}

}  // namespace nodewatch
