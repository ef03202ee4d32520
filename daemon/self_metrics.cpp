#include "self_metrics.hpp"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <spdlog/spdlog.h>

#include "daemon_metrics.hpp"
#include "nodewatch/fs_helper.hpp"
#include "version.hpp"

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
      describe(families::kBuildInfo),
      describe(families::kCollectorUp),
      describe(families::kCollectorDurationSeconds),
      describe(families::kCollectorLastSuccessTimestampSeconds),
      describe(families::kCollectorIntervalSeconds),
      describe(families::kCollectorErrorsTotal),
      describe(families::kConfigLastReloadSuccessful),
      describe(families::kConfigLastReloadSuccessTimestampSeconds),
      describe(families::kHttpRequestsTotal),
      describe(families::kHttpTlsHandshakeErrorsTotal),
      describe(families::kHttpConnectionsDroppedTotal),
      describe(families::kHelperProcesses),
      describe(families::kTextfileAbandonedHelpers),
  });
  return t;
}

const MetricTable& SelfMetrics::process_table() {
  static const MetricTable t({
      describe(families::kProcessCpuSecondsTotal),
      describe(families::kProcessResidentMemoryBytes),
      describe(families::kProcessVirtualMemoryBytes),
      describe(families::kProcessOpenFds),
      describe(families::kProcessMaxFds),
      describe(families::kProcessStartTimeSeconds),
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
  if (close != std::string::npos && close + 2 <= stat.size()) {
    std::istringstream in(stat.substr(close + 2));
    std::string field;
    std::vector<std::string> f;
    while (in >> field) f.push_back(field);
    s.stat_read = f.size() >= 22;  // up to rss, field 24
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
    s.fds_read = true;
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
  sink.add(families::kBuildInfo, {kVersion, kRevision}, 1);
  for (const CollectorStatus& c : statuses) {
    if (include && !include(c.name)) continue;
    sink.add(families::kCollectorUp, {c.name}, c.up ? 1 : 0);
    sink.add(families::kCollectorDurationSeconds, {c.name}, c.last_duration_seconds);
    sink.add(families::kCollectorLastSuccessTimestampSeconds, {c.name},
             c.last_success_unix_seconds);
    sink.add(families::kCollectorIntervalSeconds, {c.name},
             std::chrono::duration<double>(c.interval).count());
    for (const auto& [reason, n] : c.errors)
      sink.add(families::kCollectorErrorsTotal, {c.name, reason}, static_cast<double>(n));
  }
  sink.add(families::kConfigLastReloadSuccessful, {}, reload_ok_ ? 1 : 0);
  sink.add(families::kConfigLastReloadSuccessTimestampSeconds, {}, reload_success_ts_);
  for (const auto& [key, n] : requests_)
    sink.add(families::kHttpRequestsTotal, {key.first, std::to_string(key.second)},
             static_cast<double>(n));

  sink.add(families::kHttpTlsHandshakeErrorsTotal, {"failed"}, static_cast<double>(tls_failures_));
  sink.add(families::kHttpTlsHandshakeErrorsTotal, {"timeout"}, static_cast<double>(tls_timeouts_));
  for (std::size_t i = 0; i < kDropReasons.size(); ++i)
    sink.add(families::kHttpConnectionsDroppedTotal, {std::string(kDropReasons[i])},
             static_cast<double>(drops_[i]));
  sink.add(families::kHelperProcesses, {"running"}, static_cast<double>(helper::running()));
  sink.add(families::kHelperProcesses, {"abandoned"}, static_cast<double>(helper::abandoned()));
  if (!include || include("textfile"))
    sink.add(families::kTextfileAbandonedHelpers, {},
             static_cast<double>(helper::abandoned("textfile:")));

  MetricSink proc(process_table());
  const ProcessStats now = read_process_stats();
  if (now.stat_read) {
    process_.cpu_seconds = now.cpu_seconds;
    process_.resident_bytes = now.resident_bytes;
    process_.virtual_bytes = now.virtual_bytes;
  }
  if (now.fds_read) process_.open_fds = now.open_fds;
  process_.max_fds = now.max_fds;
  const bool unread = !now.stat_read || !now.fds_read;
  if (unread && !process_unread_)
    spdlog::warn(
        "process metrics: {} could not be read (no descriptor left?); "
        "serving the figures last read until it can",
        !now.stat_read && !now.fds_read ? "/proc/self/stat and /proc/self/fd"
        : !now.stat_read                ? "/proc/self/stat"
                                        : "/proc/self/fd");
  process_unread_ = unread;
  const ProcessStats& p = process_;
  proc.add(families::kProcessCpuSecondsTotal, {}, p.cpu_seconds);
  proc.add(families::kProcessResidentMemoryBytes, {}, p.resident_bytes);
  proc.add(families::kProcessVirtualMemoryBytes, {}, p.virtual_bytes);
  proc.add(families::kProcessOpenFds, {}, p.open_fds);
  proc.add(families::kProcessMaxFds, {}, p.max_fds);
  proc.add(families::kProcessStartTimeSeconds, {}, start_time_);
  return sink.render() + proc.render();
}

}  // namespace nodewatch
