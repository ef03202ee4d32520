#include "self_metrics.hpp"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "nodewatch/helper.hpp"
#include "nodewatch/version.hpp"

namespace nodewatch {
namespace {

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string read_small_file(const char* path) {
  std::FILE* f = std::fopen(path, "re");
  if (f == nullptr) return {};
  std::string out;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  std::fclose(f);
  return out;
}

}  // namespace

const MetricTable& SelfMetrics::table() {
  static const MetricTable t({
      {"nodewatch_build_info",
       MetricType::kGauge,
       "",
       "Version and source revision nodewatchd was built from; always 1.",
       {"version", "revision"}},
      {"nodewatch_collector_up",
       MetricType::kGauge,
       "",
       "1 if the collector's last collection succeeded within its timeout, else 0.",
       {"collector"}},
      {"nodewatch_collector_duration_seconds",
       MetricType::kGauge,
       "seconds",
       "How long the collector's last collection took (up to its timeout).",
       {"collector"}},
      {"nodewatch_collector_last_success_timestamp_seconds",
       MetricType::kGauge,
       "seconds",
       "Unix time of the collector's last successful collection; 0 before the first.",
       {"collector"}},
      {"nodewatch_collector_interval_seconds",
       MetricType::kGauge,
       "seconds",
       "Configured interval between collections; served values are at most this old.",
       {"collector"}},
      {"nodewatch_collector_errors_total",
       MetricType::kCounter,
       "",
       "Collection errors by reason: whole-collection failures and skipped devices, files or "
       "counters.",
       {"collector", "reason"}},
      {"nodewatch_config_last_reload_successful",
       MetricType::kGauge,
       "",
       "1 if the last configuration load or reload succeeded, 0 if it was rejected.",
       {}},
      {"nodewatch_config_last_reload_success_timestamp_seconds",
       MetricType::kGauge,
       "seconds",
       "Unix time of the last successful configuration load or reload.",
       {}},
      {"nodewatch_http_requests_total",
       MetricType::kCounter,
       "",
       "HTTP responses sent, by request path and status code.",
       {"path", "code"}},
      {"nodewatch_http_tls_handshake_errors_total",
       MetricType::kCounter,
       "",
       "TLS handshakes that did not complete: reason \"timeout\" (not done within "
       "server.read_timeout) or \"failed\" (refused: protocol, certificate, client certificate).",
       {"reason"}},
      {"nodewatch_http_connections_dropped_total",
       MetricType::kCounter,
       "",
       "Connections the server closed: \"server_limit\" and \"client_limit\" (refused with "
       "503: every slot busy serving, or server.max_connections_per_client from one address), "
       "\"evicted\" (a client waiting or not reading, closed for a new connection's slot), "
       "\"write_timeout\" (a response not read within server.write_timeout).",
       {"reason"}},
      {"nodewatch_helper_processes",
       MetricType::kGauge,
       "",
       "Helper processes that make the file-system calls on configured paths: running, and "
       "abandoned after their timeout but still held by the kernel (state D on a hung mount).",
       {"state"}},
      {"nodewatch_textfile_abandoned_helpers",
       MetricType::kGauge,
       "",
       "Textfile helper processes abandoned after the collection's timeout that are still "
       "alive (the textfile collector is down meanwhile, so the daemon reports them).",
       {}},
  });
  return t;
}

const MetricTable& SelfMetrics::process_table() {
  static const MetricTable t({
      {"process_cpu_seconds_total",
       MetricType::kCounter,
       "seconds",
       "Total user and system CPU time spent in seconds.",
       {}},
      {"process_resident_memory_bytes",
       MetricType::kGauge,
       "bytes",
       "Resident memory size in bytes.",
       {}},
      {"process_virtual_memory_bytes",
       MetricType::kGauge,
       "bytes",
       "Virtual memory size in bytes.",
       {}},
      {"process_open_fds", MetricType::kGauge, "", "Number of open file descriptors.", {}},
      {"process_max_fds", MetricType::kGauge, "", "Maximum number of open file descriptors.", {}},
      {"process_start_time_seconds",
       MetricType::kGauge,
       "seconds",
       "Start time of the process since unix epoch in seconds.",
       {}},
  });
  return t;
}

ProcessStats read_process_stats() {
  ProcessStats s;
  static const long kTicks = sysconf(_SC_CLK_TCK);
  static const long kPage = sysconf(_SC_PAGESIZE);
  std::string stat = read_small_file("/proc/self/stat");
  // The command name is in parentheses and may contain spaces: parse after the last ')'.
  auto close = stat.rfind(')');
  if (close != std::string::npos) {
    std::istringstream in(stat.substr(close + 2));
    std::string field;
    std::vector<std::string> f;
    while (in >> field) f.push_back(field);
    // f[0] is field 3 (state): utime is field 14, stime 15, starttime 22, vsize 23, rss 24.
    auto at = [&](int field_no) -> double {
      std::size_t i = static_cast<std::size_t>(field_no - 3);
      return i < f.size() ? std::strtod(f[i].c_str(), nullptr) : 0.0;
    };
    s.cpu_seconds = (at(14) + at(15)) / static_cast<double>(kTicks);
    s.virtual_bytes = at(23);
    s.resident_bytes = at(24) * static_cast<double>(kPage);
    // The boot time is constant: /proc/stat (large on many-CPU hosts) is read once.
    static const double kBootTime = [] {
      std::string pstat = read_small_file("/proc/stat");
      auto pos = pstat.find("\nbtime ");
      return pos == std::string::npos ? 0.0 : std::strtod(pstat.c_str() + pos + 7, nullptr);
    }();
    s.start_time_seconds = kBootTime + at(22) / static_cast<double>(kTicks);
  }
  if (DIR* d = opendir("/proc/self/fd")) {
    int n = 0;
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] != '.') ++n;
    }
    closedir(d);
    s.open_fds = n - 1;  // the directory stream's own descriptor
  }
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0) s.max_fds = static_cast<double>(rl.rlim_cur);
  return s;
}

SelfMetrics::SelfMetrics()
    : reload_success_ts_(unix_now()), start_time_(read_process_stats().start_time_seconds) {}

void SelfMetrics::count_request(std::string_view target, unsigned code) {
  std::string_view path = target.substr(0, target.find('?'));
  std::string label;
  if (path == "/metrics" || path == "/" || path == "/-/healthy" || path == "/-/ready" ||
      path == "/-/node-health")
    label = path;
  else
    label = "other";
  requests_[{std::move(label), code}]++;
}

namespace {
constexpr std::array<std::string_view, 4> kDropReasons = {"server_limit", "client_limit", "evicted",
                                                          "write_timeout"};
}  // namespace

void SelfMetrics::count_drop(std::string_view reason) {
  for (std::size_t i = 0; i < kDropReasons.size(); ++i)
    if (kDropReasons[i] == reason) ++drops_[i];
}

void SelfMetrics::count_tls_error(std::string_view reason) {
  ++(reason == "timeout" ? tls_timeouts_ : tls_failures_);
}

void SelfMetrics::set_reload_result(bool ok) {
  reload_ok_ = ok;
  if (ok) reload_success_ts_ = unix_now();
}

std::string SelfMetrics::render(const std::vector<CollectorStatus>& statuses,
                                const std::function<bool(std::string_view)>& include) const {
  MetricSink sink(table());
  sink.add("nodewatch_build_info", {kVersion, kRevision}, 1);
  for (const CollectorStatus& c : statuses) {
    if (include && !include(c.name)) continue;
    sink.add("nodewatch_collector_up", {c.name}, c.up ? 1 : 0);
    sink.add("nodewatch_collector_duration_seconds", {c.name}, c.last_duration_seconds);
    sink.add("nodewatch_collector_last_success_timestamp_seconds", {c.name},
             c.last_success_unix_seconds);
    sink.add("nodewatch_collector_interval_seconds", {c.name},
             std::chrono::duration<double>(c.interval).count());
    for (const auto& [reason, n] : c.errors)
      sink.add("nodewatch_collector_errors_total", {c.name, reason}, static_cast<double>(n));
  }
  sink.add("nodewatch_config_last_reload_successful", {}, reload_ok_ ? 1 : 0);
  sink.add("nodewatch_config_last_reload_success_timestamp_seconds", {}, reload_success_ts_);
  for (const auto& [key, n] : requests_)
    sink.add("nodewatch_http_requests_total", {key.first, std::to_string(key.second)},
             static_cast<double>(n));

  sink.add("nodewatch_http_tls_handshake_errors_total", {"failed"},
           static_cast<double>(tls_failures_));
  sink.add("nodewatch_http_tls_handshake_errors_total", {"timeout"},
           static_cast<double>(tls_timeouts_));
  for (std::size_t i = 0; i < kDropReasons.size(); ++i)
    sink.add("nodewatch_http_connections_dropped_total", {std::string(kDropReasons[i])},
             static_cast<double>(drops_[i]));
  sink.add("nodewatch_helper_processes", {"running"}, static_cast<double>(helper::running()));
  sink.add("nodewatch_helper_processes", {"abandoned"}, static_cast<double>(helper::abandoned()));
  if (!include || include("textfile"))
    sink.add("nodewatch_textfile_abandoned_helpers", {},
             static_cast<double>(helper::abandoned("textfile:")));

  MetricSink proc(process_table());
  ProcessStats p = read_process_stats();
  proc.add("process_cpu_seconds_total", {}, p.cpu_seconds);
  proc.add("process_resident_memory_bytes", {}, p.resident_bytes);
  proc.add("process_virtual_memory_bytes", {}, p.virtual_bytes);
  proc.add("process_open_fds", {}, p.open_fds);
  proc.add("process_max_fds", {}, p.max_fds);
  proc.add("process_start_time_seconds", {}, start_time_);
  return sink.render() + proc.render();
}

}  // namespace nodewatch
