#include "app.hpp"

#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <functional>
#include <iostream>
#include <mutex>
#include <set>
#include <thread>
#include <utility>

#include "asio.hpp"
#include "check_socket.hpp"
#include "config.hpp"
#include "config_reference.hpp"
#include "http_server.hpp"
#include "logging.hpp"
#include "node_health.hpp"
#include "nodewatch/fs_helper.hpp"
#include "router.hpp"
#include "scheduler.hpp"
#include "self_metrics.hpp"
#include "snapshot_store.hpp"
#include "systemd.hpp"
#include "version.hpp"

namespace nodewatch {
namespace {

using namespace std::chrono_literals;

// How long shutdown waits for in-flight responses, then for collectors.
constexpr auto kDrainGrace = 2500ms;
constexpr auto kWorkerGrace = 1500ms;

// systemd's default soft limit (1024) is far below its hard limit; every
// connection costs a descriptor, and collectors need theirs too.
void raise_fd_limit(int max_connections) {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
  if (rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    getrlimit(RLIMIT_NOFILE, &rl);
  }
  constexpr rlim_t kReserve = 256;  // collectors, listeners, logs
  if (rl.rlim_cur != RLIM_INFINITY && static_cast<rlim_t>(max_connections) + kReserve > rl.rlim_cur)
    spdlog::warn(
        "server.max_connections = {} leaves fewer than {} of the {} file descriptors for "
        "collectors",
        max_connections, kReserve, rl.rlim_cur);
}

ConfigResult load(const CommandLine& cmd, std::span<const CollectorSpec> catalog) {
  return load_config(cmd.config_path, cmd.config_explicit, catalog);
}

void print_errors(const std::vector<ConfigError>& errors) {
  for (const auto& e : errors) std::cerr << e.str() << "\n";
}

// Builds the collectors a configuration enables. With `previous` (a
// reload), a collector whose configuration is unchanged is not built again:
// its job says keep, and the scheduler keeps the running instance. Throws on
// failure.
std::vector<CollectorJob> make_jobs(const Config& cfg, const Roots& roots, Services& services,
                                    const Config* previous = nullptr) {
  std::vector<CollectorJob> jobs;
  for (const CollectorConfig& cc : cfg.collectors) {
    if (!cc.enabled) continue;
    CollectorJob job;
    job.name = std::string(cc.name());
    job.interval = cc.interval;
    job.timeout = cc.timeout;
    if (previous != nullptr && previous->shared == cfg.shared) {
      auto old = std::find_if(previous->collectors.begin(), previous->collectors.end(),
                              [&](const CollectorConfig& o) { return o.spec == cc.spec; });
      if (old != previous->collectors.end() && old->same_as(cc)) {
        job.keep = true;
        jobs.push_back(std::move(job));
        continue;
      }
    }
    CollectorEnv env{roots, cc.options, cfg.shared, &services};
    try {
      job.collector = cc.spec->create(env);
    } catch (const std::exception& e) {
      throw std::runtime_error("collector " + job.name + ": " + e.what());
    }
    jobs.push_back(std::move(job));
  }
  return jobs;
}

// --list-metrics: every family nodewatchd declares (the daemon's own, the
// process metrics, the node verdict's, and every collector's, enabled or
// not). `format` "text": one per line as "name type", for tools that check
// dashboards and rules against it; "markdown": docs/metrics.md, a section
// per owner with each family's type, unit, labels and help. Read from the
// specs: no collector is built, no thread started, no device or path
// touched.
int list_metrics(std::span<const CollectorSpec> catalog, std::string_view format) {
  if (format != "text" && format != "markdown") {
    std::cerr << "--format: text or markdown, not " << format << "\n";
    return 2;
  }
  const bool md = format == "markdown";
  auto type_name = [](MetricType t) {
    return t == MetricType::kCounter ? "counter" : t == MetricType::kGauge ? "gauge" : "histogram";
  };
  auto cell = [](std::string_view text) {
    std::string out;
    for (char c : text) {
      if (c == '|') out += '\\';
      out += c;
    }
    return out;
  };
  std::set<std::string> seen;
  auto print = [&](const MetricTable& t, std::string_view heading, std::string_view about) {
    if (md) {
      std::cout << "\n## " << heading << "\n\n";
      if (!about.empty()) std::cout << about << "\n\n";
      std::cout << "| family | type | unit | labels | help |\n| --- | --- | --- | --- | --- |\n";
    }
    for (const MetricDesc& d : t.descs()) {
      if (!seen.insert(d.name).second) continue;
      if (!md) {
        std::cout << d.name << " " << type_name(d.type) << "\n";
        continue;
      }
      std::string labels;
      for (const std::string& l : d.labels) labels += (labels.empty() ? "`" : ", `") + l + "`";
      std::cout << "| `" << d.name << "` | " << type_name(d.type) << " | " << d.unit << " | "
                << labels << " | " << cell(d.help) << " |\n";
    }
  };
  if (md)
    std::cout << "<!-- Generated by `nodewatchd --list-metrics --format markdown` from the "
                 "declarations (collectors/<name>/<name>_metrics.hpp, daemon/daemon_metrics.hpp); "
                 "the test Docs.MetricsReferenceIsCurrent fails when it is not. -->\n\n"
                 "# Metrics\n\n"
                 "Every family nodewatchd can export. What each collector reads and how it "
                 "fails: [collectors.md](collectors.md); their options: "
                 "[configuration.md](configuration.md).\n";
  print(SelfMetrics::table(), "The daemon's own", "");
  print(SelfMetrics::process_table(), "The process", "");
  print(VerdictEngine::metric_table(), "The node verdict", "See [verdict.md](verdict.md).");
  for (const CollectorSpec& spec : catalog) {
    if (!spec.metrics) {
      std::cerr << "collector " << spec.name << " declares no metric table\n";
      return 1;
    }
    print(spec.metrics(), "Collector " + std::string(spec.name), collector_summary(spec));
  }
  return 0;
}

// --list-options: every configuration key, as the calls that read it
// describe it. Like --list-metrics, from the specs alone: no file is read,
// no path checked.
int list_options(std::span<const CollectorSpec> catalog, std::string_view format) {
  if (format != "text" && format != "markdown") {
    std::cerr << "--format: text or markdown, not " << format << "\n";
    return 2;
  }
  std::cout << (format == "markdown" ? options_markdown(catalog) : options_text(catalog));
  return 0;
}

HttpLimits limits_of(const ServerConfig& s) {
  HttpLimits l;
  l.max_connections = static_cast<std::size_t>(s.max_connections);
  l.read_timeout = s.read_timeout;
  l.idle_timeout = s.idle_timeout;
  l.write_timeout = s.write_timeout;
  l.max_connections_per_client = static_cast<std::size_t>(s.max_connections_per_client);
  l.healthy_without_auth = s.healthy_without_auth;
  return l;
}

// The web configuration in force: --web.config.file, else the file's key.
std::string web_config_path(const CommandLine& cmd, const Config& cfg) {
  return cmd.web_config_file.empty() ? cfg.server.web_config_file : cmd.web_config_file;
}

WebSecurity::Built build_security(const CommandLine& cmd, const Config& cfg) {
  WebSecurity::Built b = WebSecurity::build(web_config_path(cmd, cfg));
  if (b.security && b.security->config().http2_asked && b.security->tls())
    spdlog::info("{}: http_server_config.http2: HTTP/2 is not served; HTTP/1.1 is",
                 b.security->path());
  return b;
}

class Daemon {
 public:
  Daemon(const CommandLine& cmd, std::span<const CollectorSpec> catalog, Config cfg)
      : cmd_(cmd),
        catalog_(catalog),
        config_(std::move(cfg)),
        signals_(io_),
        scheduler_(io_, store_),
        node_(
            config_.expect,
            [this] {
              return NodeInput{store_.current(), collector_states(scheduler_.statuses())};
            },
            NodeHealth::kRefresh, &scheduler_.pool(), read_node_versions(cmd.roots)),
        router_(Router::Sources{
            &store_, [this] { return scheduler_.statuses(); }, &self_, [this] { return ready_; },
            [this] { return server_.security()->summary(); }, [this] { return node_.current(); }}),
        server_(
            io_, [this](const HttpRequest& r) { return router_.handle(r); },
            [this](std::string_view target, unsigned code) { self_.count_request(target, code); }),
        check_socket_(io_, [this](const HttpRequest& r) { return router_.handle(r); }),
        watchdog_(io_),
        drain_(io_) {}

  // One collection round (each collector within its timeout), then
  // `after` on the io thread with every snapshot and status of it, then
  // stop. False when a collector could not be built.
  bool run_one_round(const std::function<void()>& after) {
    std::vector<CollectorJob> jobs;
    try {
      jobs = make_jobs(config_, cmd_.roots, services_);
    } catch (const std::exception& e) {
      spdlog::error("{}", e.what());
      return false;
    }
    scheduler_.on_first_round([this, after] {
      after();
      scheduler_.stop();
      io_.stop();
    });
    scheduler_.start(std::move(jobs));
    io_.run();
    return true;
  }

  int once() {
    bool ran = run_one_round([this] {
      node_.evaluate_now(*store_.current(), collector_states(scheduler_.statuses()));
      std::string text = router_.metrics_text({});
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
    });
    return ran ? finish() : 1;
  }

  // One collection round, then its verdict (or nothing when a collector
  // could not be built).
  std::shared_ptr<const NodeReport> round_verdict() {
    bool ran = run_one_round(
        [this] { node_.evaluate_now(*store_.current(), collector_states(scheduler_.statuses())); });
    return ran ? node_.current() : nullptr;
  }

  const NodeVersions& node_versions() const { return node_.versions(); }

  // One collection round; the samples of `families` it produced.
  std::optional<Samples> round_samples(const FamilySet& families,
                                       std::vector<CollectorState>* collectors) {
    Samples out(&families);
    bool ran = run_one_round([this, &out, collectors] {
      for (const auto& [name, text] : store_.current()->by_collector) out.add(text->text);
      *collectors = collector_states(scheduler_.statuses());
    });
    if (!ran) return std::nullopt;
    return out;
  }

  // After a round_*() whose output is written: every collector finished
  // its round, so nothing is left to wait for but threads that notice a
  // stop only at their next timeout (NVML's event wait: 500 ms), which a
  // Slurm prolog should not pay. Exits with `code`.
  [[noreturn]] void end_round(int code) {
    std::fflush(stdout);
    spdlog::shutdown();
    std::_Exit(code);
  }

  int serve() {
    std::vector<CollectorJob> jobs;
    try {
      jobs = make_jobs(config_, cmd_.roots, services_);
    } catch (const std::exception& e) {
      spdlog::error("{}", e.what());
      return 1;
    }
    server_.set_limits(limits_of(config_.server));
    {
      WebSecurity::Built web = build_security(cmd_, config_);
      if (!web.security) {
        for (const std::string& e : web.errors) spdlog::error("{}", e);
        return 1;
      }
      server_.set_security(web.security);
    }
    // The handlers before the first log line that says where to reach the
    // daemon: a SIGHUP sent as soon as it listens must reload, not kill it
    // (asio keeps a signal that arrives before wait_signal() waits).
    signals_.add(SIGTERM);
    signals_.add(SIGINT);
    signals_.add(SIGHUP);
    server_.set_tls_observer([this](std::string_view reason) { self_.count_tls_error(reason); });
    server_.set_drop_observer([this](std::string_view reason) { self_.count_drop(reason); });
    std::vector<int> fds = systemd::listen_fds();
    std::string err;
    if (!fds.empty()) {
      socket_activated_ = true;
      err = server_.adopt(fds);
    } else {
      err = server_.listen(listen_addresses(config_));
    }
    if (!err.empty()) {
      spdlog::error("{}", err);
      return 1;
    }
    const char* scheme = server_.security()->tls() ? "https" : "http";
    for (const auto& ep : server_.local_endpoints()) {
      spdlog::info("listening on {}; scrape {}://{}:{}/metrics{}", ep_string(ep), scheme,
                   scrape_host(ep), ep.port(), socket_activated_ ? " (socket activation)" : "");
    }
    if (!server_.security()->path().empty())
      spdlog::info("web configuration {}: {}", server_.security()->path(),
                   server_.security()->summary());
    spdlog::info("nodewatch {} (revision {}) using {}; {} collector(s) enabled", kVersion,
                 kRevision, config_.source, jobs.size());
    open_check_socket();

    server_.set_first_round([this] { return ready_; });
    scheduler_.on_first_round([this] {
      if (!ready_) {
        // Ready means the first round and its verdict (once, in place: the
        // worker would take up to NodeHealth::kMinGap).
        node_.evaluate_now(*store_.current(), collector_states(scheduler_.statuses()));
        ready_ = true;
        spdlog::info("first collection round complete; ready");
        systemd::notify("READY=1\nSTATUS=" + status_line());
      }
    });
    scheduler_.on_state_change([this] { systemd::notify("STATUS=" + status_line()); });
    // The verdict follows the results, on the collections' pool, reading the
    // latest snapshots and statuses at most once per NodeHealth::kMinGap.
    scheduler_.on_result([this] { node_.changed(); });
    scheduler_.start(std::move(jobs));

    wait_signal();
    if (auto period = systemd::watchdog_period()) {
      spdlog::info("systemd watchdog enabled; pinging every {} ms",
                   std::chrono::duration_cast<std::chrono::milliseconds>(*period).count());
      watchdog_tick(*period);
    }
    io_.run();
    return finish();
  }

 private:
  static std::string ep_string(const asio::ip::tcp::endpoint& ep) {
    std::string a = ep.address().to_string();
    if (ep.address().is_v6()) a = "[" + a + "]";
    return a + ":" + std::to_string(ep.port());
  }
  static std::string scrape_host(const asio::ip::tcp::endpoint& ep) {
    if (ep.address().is_unspecified()) {
      char host[256] = {};
      if (gethostname(host, sizeof(host) - 1) == 0 && host[0] != '\0') return host;
      return "localhost";
    }
    std::string a = ep.address().to_string();
    return ep.address().is_v6() ? "[" + a + "]" : a;
  }

  std::vector<std::string> listen_addresses(const Config& cfg) const {
    return cmd_.listen.empty() ? cfg.server.listen : cmd_.listen;
  }

  std::string status_line() const {
    auto st = scheduler_.statuses();
    std::size_t up = 0;
    for (const auto& s : st) up += s.up ? 1 : 0;
    return "collectors up " + std::to_string(up) + "/" + std::to_string(st.size());
  }

  void wait_signal() {
    signals_.async_wait([this](const boost::system::error_code& ec, int sig) {
      if (ec) return;
      if (sig == SIGHUP) {
        reload();
        wait_signal();
      } else {
        spdlog::info("received {}; shutting down", sig == SIGTERM ? "SIGTERM" : "SIGINT");
        shutdown();
      }
    });
  }

  void watchdog_tick(std::chrono::microseconds period) {
    // Runs on the io thread: a stalled io loop stops the pings, and systemd
    // restarts the daemon.
    systemd::notify("WATCHDOG=1");
    watchdog_.expires_after(period);
    watchdog_.async_wait([this, period](const boost::system::error_code& ec) {
      if (!ec && !stopping_) watchdog_tick(period);
    });
  }

  // SIGHUP. The file is read and checked on a thread of its own, never on
  // the io thread: checking a probe path on a hung mount waits up to a
  // second for its helper (storage/path_check.hpp), and scrapes must not
  // wait with it. A SIGHUP during a reload runs one more after it.
  void reload() {
    if (reload_thread_.joinable()) {
      reload_again_ = true;
      return;
    }
    spdlog::info("SIGHUP: reloading {}", cmd_.config_path);
    systemd::notify_reloading();
    reload_done_ = false;
    reload_thread_ = std::thread([this] {
      auto r = std::make_shared<PreparedReload>();
      r->result = load(cmd_, catalog_);
      if (r->result.config) {
        // All or nothing with the main file: a web configuration that does
        // not load rejects the reload, and the running one keeps serving.
        // It is checked first: it costs little, and no collector is built
        // for a reload that is then rejected.
        WebSecurity::Built web = build_security(cmd_, *r->result.config);
        if (!web.security) {
          for (const std::string& e : web.errors)
            r->result.errors.push_back(ConfigError{"", 0, 0, "", e});
          r->result.config.reset();
        } else {
          // The collectors are built here too, off the io thread: a
          // configuration with thousands of probes or patterns takes a
          // while to build, and scrapes answer from the current snapshots
          // meanwhile. config_ is only written by apply_reload(), which
          // runs after this thread has ended.
          try {
            r->jobs = make_jobs(*r->result.config, cmd_.roots, services_, &config_);
            std::lock_guard lock(reload_mu_);
            reload_security_ = web.security;
          } catch (const std::exception& e) {
            r->result.errors.push_back(ConfigError{cmd_.config_path, 0, 0, "", e.what()});
            r->result.config.reset();
          }
        }
      }
      {
        std::lock_guard lock(reload_mu_);
        reload_done_ = true;
      }
      reload_cv_.notify_all();
      asio::post(io_, [this, r] {
        if (reload_thread_.joinable()) reload_thread_.join();
        if (stopping_) return;
        apply_reload(std::move(r->result), std::move(r->jobs));
        if (std::exchange(reload_again_, false)) reload();
      });
    });
  }

  // Waits until `deadline` for a reload's reading of the file; false if it
  // is still reading (its thread is then left to the process's exit).
  bool finish_reload_thread(std::chrono::steady_clock::time_point deadline) {
    if (!reload_thread_.joinable()) return true;
    std::unique_lock lock(reload_mu_);
    if (!reload_cv_.wait_until(lock, deadline, [this] { return reload_done_; })) return false;
    lock.unlock();
    reload_thread_.join();
    return true;
  }

  struct PreparedReload {
    ConfigResult result;
    std::vector<CollectorJob> jobs;  // built from result.config
  };

  void apply_reload(ConfigResult r, std::vector<CollectorJob> jobs) {
    auto finish_reload = [this](bool ok) {
      self_.set_reload_result(ok);
      systemd::notify("READY=1\nSTATUS=" + status_line() + (ok ? "" : "; last reload failed"));
    };
    if (!r.config) {
      for (const auto& e : r.errors) spdlog::error("reload rejected: {}", e.str());
      finish_reload(false);
      return;
    }
    if (!socket_activated_ && listen_addresses(*r.config) != listen_addresses(config_)) {
      // listen() replaces the acceptors only when every new address binds.
      if (std::string err = server_.listen(listen_addresses(*r.config)); !err.empty()) {
        spdlog::error("reload rejected: {}", err);
        finish_reload(false);
        return;
      }
      for (const auto& ep : server_.local_endpoints())
        spdlog::info("now listening on {}", ep_string(ep));
    }
    std::string level = cmd_.log_level.empty() ? r.config->log.level : cmd_.log_level;
    set_log_level(level);
    server_.set_limits(limits_of(r.config->server));
    {
      std::lock_guard lock(reload_mu_);
      if (reload_security_) server_.set_security(std::move(reload_security_));
    }
    config_ = std::move(*r.config);
    open_check_socket();
    node_.set_expectations(config_.expect);
    std::size_t kept =
        std::count_if(jobs.begin(), jobs.end(), [](const auto& j) { return j.keep; });
    std::size_t total = jobs.size();
    scheduler_.start(std::move(jobs));
    spdlog::info("configuration reloaded; {} collector(s) enabled, {} unchanged and kept", total,
                 kept);
    finish_reload(true);
  }

  void shutdown() {
    if (stopping_) return;
    stopping_ = true;
    systemd::notify("STOPPING=1");
    server_.stop();
    check_socket_.close();
    scheduler_.stop();
    watchdog_.cancel();
    signals_.cancel();
    // Let in-flight responses finish, but never for long.
    auto until = std::chrono::steady_clock::now() + kDrainGrace;
    drain_wait(until);
  }

  // Serves the configuration's check socket (kept when it names the one
  // served). Without it the daemon runs on; --check then collects itself.
  void open_check_socket() {
    const std::string& path = config_.server.check_socket;
    if (path == check_socket_.path() && !path.empty()) return;
    std::string warning;
    if (std::string err = check_socket_.open(path, &warning); !err.empty()) {
      spdlog::warn("no check socket: {}; nodewatchd --check will collect a round itself", err);
    } else if (!path.empty()) {
      spdlog::info("check socket {} (nodewatchd --check)", path);
      if (!warning.empty())
        spdlog::warn("nodewatchd --check will not trust the check socket: {}", warning);
    }
  }

  void drain_wait(std::chrono::steady_clock::time_point until) {
    if (server_.active_connections() == 0 || std::chrono::steady_clock::now() >= until) {
      io_.stop();
      return;
    }
    drain_.expires_after(20ms);
    drain_.async_wait([this, until](const boost::system::error_code&) { drain_wait(until); });
  }

  int finish(int code = 0) {
    bool reload_ended = finish_reload_thread(std::chrono::steady_clock::now() + kWorkerGrace);
    if (!reload_ended || !scheduler_.shutdown_workers(kWorkerGrace)) {
      // A collector is stuck in the kernel and cannot be interrupted (or a
      // reload is still reading the configuration). Exiting without running
      // destructors is safe: nothing is left to flush but the log.
      spdlog::warn(reload_ended ? "exiting with a collector still running"
                                : "exiting while a reload is still reading the configuration");
      spdlog::shutdown();
      std::fflush(stdout);
      std::_Exit(code);
    }
    spdlog::info("stopped");
    return code;
  }

  const CommandLine& cmd_;
  std::span<const CollectorSpec> catalog_;
  Config config_;
  asio::io_context io_;
  asio::signal_set signals_;
  // Before the scheduler: the collectors it holds share these services.
  Services services_;
  SnapshotStore store_;
  SelfMetrics self_;
  Scheduler scheduler_;
  NodeHealth node_;
  Router router_;
  HttpServer server_;
  CheckSocket check_socket_;
  asio::steady_timer watchdog_;
  asio::steady_timer drain_;
  bool ready_ = false;
  bool stopping_ = false;
  // The reload reading the file now, if any (see reload()).
  std::thread reload_thread_;
  std::mutex reload_mu_;
  std::condition_variable reload_cv_;
  bool reload_done_ = false;  // under reload_mu_
  std::shared_ptr<const WebSecurity>
      reload_security_;  // under reload_mu_: the reload's web configuration
  bool reload_again_ = false;
  bool socket_activated_ = false;
};

// What the daemon serving the check socket answered for `target`, when it
// did: nothing when no daemon serves it, or one that cannot be trusted
// (said on stderr: --check then collects here).
std::optional<FetchResult> ask_daemon(const Config& cfg, const std::string& target,
                                      std::chrono::milliseconds timeout) {
  const std::string& path = cfg.server.check_socket;
  if (path.empty()) return std::nullopt;
  FetchResult f = fetch_check_socket(path, target, timeout);
  if (!f.untrusted.empty()) {
    std::cerr << "not asking what listens on " << path << ": " << printable_body(f.untrusted)
              << "; collecting here instead\n";
    return std::nullopt;
  }
  if (!f.connected) return std::nullopt;
  return f;
}

int exit_code_of(std::string_view health) {
  if (health == "healthy" || health == "degraded") return 0;
  if (health == "unhealthy") return 1;
  return 2;
}

std::string_view format_param(const std::string& output) {
  if (output == "json") return "format=json";
  if (output == "line") return "format=line";
  return "format=table";
}

std::string report_text(const NodeReport& r, const std::string& output) {
  if (output == "json") return r.json();
  if (output == "line") return r.line();
  return r.table();
}

std::string seconds_since(std::chrono::steady_clock::time_point start) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f s",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return buf;
}

// --check. Asks the running daemon (no second NVML session, no second read
// of anything); where none answers, collects one round here.
int check(const CommandLine& cmd, std::span<const CollectorSpec> catalog) {
  auto start = std::chrono::steady_clock::now();
  ConfigResult r = load(cmd, catalog);
  if (!r.config) {
    print_errors(r.errors);
    std::cerr << "cannot decide: " << r.errors.size() << " error(s) in " << cmd.config_path << "\n";
    return 2;
  }
  if (!cmd.local) {
    const std::string& path = r.config->server.check_socket;
    if (auto f = ask_daemon(*r.config, "/-/node-health?" + std::string(format_param(cmd.output)),
                            std::chrono::milliseconds(2000))) {
      if ((f->status == 200 || f->status == 503) && !f->node_status.empty()) {
        std::cout << printable_body(f->body);
        if (cmd.output == "table")
          std::cout << "source: the running daemon on " << path << " (" << seconds_since(start)
                    << ")\n";
        std::cout.flush();
        return exit_code_of(f->node_status);
      }
      std::cerr << "the daemon on " << path << " gave no verdict ("
                << printable_body(f->status != 0 ? "HTTP " + std::to_string(f->status) : f->error)
                << "); collecting here instead\n";
    }
  }
  Daemon d(cmd, catalog, std::move(*r.config));
  std::shared_ptr<const NodeReport> report = d.round_verdict();
  if (!report) {
    std::cerr << "cannot decide: no collection round\n";
    d.end_round(2);
  }
  std::cout << report_text(*report, cmd.output);
  if (cmd.output == "table")
    std::cout << "source: one collection round in this process (" << seconds_since(start) << ")\n";
  std::cout.flush();
  d.end_round(exit_code_of(health_name(report->verdict.overall())));
}

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// --learn-expected: the running daemon's /metrics, else one round here.
int learn(const CommandLine& cmd, std::span<const CollectorSpec> catalog) {
  ConfigResult r = load(cmd, catalog);
  if (!r.config) {
    print_errors(r.errors);
    return 2;
  }
  Samples samples(&learn_families());
  std::string source;
  std::vector<std::string> notes;
  if (!cmd.local) {
    const std::string& path = r.config->server.check_socket;
    if (auto f = ask_daemon(*r.config, "/metrics", std::chrono::milliseconds(5000))) {
      if (f->status == 200) {
        samples.add(f->body);
        source = "the running daemon on " + path;
      } else {
        std::cerr << "the daemon on " << path << " answered "
                  << printable_body(f->status != 0 ? "HTTP " + std::to_string(f->status) : f->error)
                  << "; collecting here instead\n";
      }
    }
  }
  std::optional<Daemon> d;
  if (source.empty()) {
    d.emplace(cmd, catalog, std::move(*r.config));
    std::vector<CollectorState> collectors;
    auto s = d->round_samples(learn_families(), &collectors);
    if (!s) d->end_round(2);
    samples = std::move(*s);
    source = "one collection round";
    for (const CollectorState& c : collectors)
      if (!c.up)
        notes.push_back("collector " + c.name + " was down (" + c.error +
                        "): nothing it reads is expected");
  }
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  // A running daemon's /metrics has the versions it read itself as series.
  Learned learned = learn_expectations(samples, d ? d->node_versions() : NodeVersions{});
  notes.insert(notes.end(), learned.notes.begin(), learned.notes.end());
  std::cout << expectations_toml(
      learned.expect, notes,
      {"Expected inventory of " + std::string(host) +
           ", learned by nodewatchd --learn-expected at " + utc_now() + " from " + source + ".",
       "Review it, then ship it as the file [expect] file names, or paste it into the",
       "configuration."});
  std::cout.flush();
  if (d) d->end_round(0);
  return 0;
}

}  // namespace

int run(const CommandLine& cmd, std::span<const CollectorSpec> catalog) {
  // First, while this process has one thread and no descriptor but its
  // standard ones: the launcher of the helper processes that make every
  // file-system call on a configured path (nodewatch/fs_helper.hpp). The
  // configuration's check of probe paths needs it already.
  std::string launcher_error;
  if (!cmd.list_metrics && !cmd.list_options) launcher_error = helper::start_launcher();
  setup_logging(cmd.log_level.empty() ? "info" : cmd.log_level);
  if (!launcher_error.empty())
    spdlog::error(
        "no helper launcher ({}): storage probes, the textfile directory and probe path "
        "checks will fail",
        launcher_error);
  if (!cmd.log_level.empty() && !set_log_level(cmd.log_level)) {
    std::cerr << "--log-level: \"" << cmd.log_level
              << "\" is not one of trace, debug, info, warn, error, critical, off\n";
    return 1;
  }
  // The declared families do not depend on the configuration: nothing is
  // read for them, not even the file (whose probe paths would be checked).
  if (cmd.list_metrics) return list_metrics(catalog, cmd.list_format);
  if (cmd.list_options) return list_options(catalog, cmd.list_format);
  if (cmd.check || cmd.learn_expected) {
    // Nothing on stdout but the verdict or the file; the log only says
    // what went wrong.
    if (cmd.log_level.empty()) set_log_level("warn");
    if (cmd.output != "table" && cmd.output != "json" && cmd.output != "line") {
      std::cerr << "--output: \"" << cmd.output << "\" is not one of table, json, line\n";
      return 2;
    }
    return cmd.check ? check(cmd, catalog) : learn(cmd, catalog);
  }
  ConfigResult r = load(cmd, catalog);
  if (cmd.check_config) {
    if (!r.config) {
      print_errors(r.errors);
      std::cerr << r.errors.size() << " error(s) in " << cmd.config_path << "\n";
      return 1;
    }
    WebSecurity::Built web = WebSecurity::build(web_config_path(cmd, *r.config));
    if (!web.security) {
      for (const std::string& e : web.errors) std::cerr << e << "\n";
      std::cerr << web.errors.size() << " error(s) in " << web_config_path(cmd, *r.config) << "\n";
      return 1;
    }
    std::cout << "configuration OK (" << r.config->source << ")\n";
    if (!web.security->path().empty())
      std::cout << "web configuration OK (" << web.security->path() << ": "
                << web.security->summary() << ")\n";
    return 0;
  }
  if (!r.config) {
    print_errors(r.errors);
    return 1;
  }
  if (r.config->source == "built-in defaults")
    spdlog::info("{} not found; using built-in defaults", cmd.config_path);
  if (cmd.log_level.empty()) set_log_level(r.config->log.level);
  if (cmd.once) {
    // Nothing on stdout but the exposition.
    Daemon d(cmd, catalog, std::move(*r.config));
    return d.once();
  }
  std::signal(SIGPIPE, SIG_IGN);
  raise_fd_limit(r.config->server.max_connections);
  Daemon d(cmd, catalog, std::move(*r.config));
  return d.serve();
}

}  // namespace nodewatch
