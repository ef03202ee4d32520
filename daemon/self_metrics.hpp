#pragma once
// The daemon's own metrics: collector health, HTTP requests, configuration
// reloads, build information and the standard process_* metrics. Rendered
// per scrape (a few KiB), on the io thread.

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "nodewatch/metric.hpp"
#include "scheduler.hpp"

namespace nodewatch {

// Reads /proc/self: CPU seconds, RSS and virtual size, open fds; exposed for tests.
// stat_read and fds_read say whether /proc/self/stat and /proc/self/fd
// could be read (not with every descriptor in use: EMFILE); the figures
// of a part not read are 0.
struct ProcessStats {
  double cpu_seconds = 0;
  double resident_bytes = 0;
  double virtual_bytes = 0;
  double open_fds = 0;
  double max_fds = 0;
  double start_time_seconds = 0;
  bool stat_read = false;
  bool fds_read = false;
};
ProcessStats read_process_stats();

class SelfMetrics {
 public:
  SelfMetrics();

  // Counts one HTTP response. Paths other than the served ones are counted
  // as "other" so that a client cannot grow the label set.
  void count_request(std::string_view target, unsigned code);
  void set_reload_result(bool ok);
  // Counts one TLS handshake that did not complete ("timeout", "failed").
  void count_tls_error(std::string_view reason);
  // A connection the HTTP server dropped (http_server.hpp's DropObserver).
  void count_drop(std::string_view reason);

  // Renders nodewatch_* for the collectors `include` accepts, then process_*.
  std::string render(const std::vector<CollectorStatus>& statuses,
                     const std::function<bool(std::string_view)>& include) const;

  static const MetricTable& table();
  static const MetricTable& process_table();

 private:
  std::map<std::pair<std::string, unsigned>, std::uint64_t> requests_;
  std::uint64_t tls_timeouts_ = 0, tls_failures_ = 0;
  // By reason: server_limit, client_limit, evicted, write_timeout.
  std::array<std::uint64_t, 4> drops_{};
  bool reload_ok_ = true;
  double reload_success_ts_ = 0;
  double start_time_ = 0;
  // The last figures read: a part that cannot be read is served as it was
  // last read, not as 0 (a counter that went back to 0 is a reset to
  // Prometheus), and said once in the log until it is read again.
  mutable ProcessStats process_;
  mutable bool process_unread_ = false;
};

}  // namespace nodewatch
