#pragma once
// Maps requests to responses: /metrics, /, /-/healthy, /-/ready,
// /-/node-health.
// Runs on the io thread; a /metrics response only concatenates rendered
// snapshots and the self-metrics (see exposition.hpp).

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "http_server.hpp"
#include "node_health.hpp"
#include "scheduler.hpp"
#include "self_metrics.hpp"
#include "snapshot_store.hpp"

namespace nodewatch {

inline constexpr std::string_view kMetricsContentType = "text/plain; version=0.0.4; charset=utf-8";
// /-/node-health's header with the node's state (healthy, unhealthy,
// unknown): what `nodewatchd --check` turns into its exit status.
inline constexpr std::string_view kNodeStatusHeader = "Nodewatch-Node-Status";

// A parsed collect[]/exclude[] query.
struct MetricsFilter {
  std::vector<std::string> collect;
  std::vector<std::string> exclude;
};
// Parses the query string of a /metrics request. Returns an error message
// (for a 400) or empty.
std::string parse_metrics_query(std::string_view query, MetricsFilter* out);
// True if an Accept-Encoding value admits gzip (q=0 refuses it).
bool accepts_gzip(std::string_view accept_encoding);
std::string url_decode(std::string_view s);

class Router {
 public:
  struct Sources {
    const SnapshotStore* store;
    std::function<std::vector<CollectorStatus>()> statuses;
    SelfMetrics* self;
    std::function<bool()> ready;
    // One line on how the server is reached: TLS, authentication (the
    // landing page shows it). Empty: not shown.
    std::function<std::string()> access = nullptr;
    // The latest node verdict (null: none yet, or no verdict in this process).
    std::function<std::shared_ptr<const NodeReport>()> node = nullptr;
  };
  explicit Router(Sources sources) : src_(std::move(sources)) {}

  HttpResponse handle(const HttpRequest& req) const;

  // The body /metrics serves for `filter` (the --once output when empty).
  std::string metrics_text(const MetricsFilter& filter) const;

 private:
  struct Parts {
    std::shared_ptr<const SnapshotSet> set;  // keeps the segments alive
    std::shared_ptr<const NodeReport> node;  // keeps its segment alive
    std::vector<const RenderedText*> segments;
    std::vector<std::string_view> collectors;  // whose snapshots the segments are
    std::string self;
  };
  Parts parts(const MetricsFilter& filter, const std::vector<CollectorStatus>& statuses) const;
  HttpResponse metrics(const HttpRequest& req, std::string_view query) const;
  HttpResponse landing(const HttpRequest& req) const;
  HttpResponse node_health(std::string_view query) const;

  Sources src_;
};

}  // namespace nodewatch
