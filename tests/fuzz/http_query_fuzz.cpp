// What a scraper sends that nodewatch parses itself (daemon/router.cpp):
// the /metrics query string (collect[], exclude[]) and Accept-Encoding.
// The input is the query, a NUL, then the header value.

#include "fuzz_support.hpp"
#include "router.hpp"

using namespace nodewatch;
using nodewatch::fuzz::require;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto [query, accept] = fuzz::split_once(fuzz::as_text(data, size), std::string_view("\0", 1));
  MetricsFilter filter;
  std::string error = parse_metrics_query(query, &filter);
  if (error.empty()) {
    for (const std::string& c : filter.collect)
      require(c.size() <= query.size(), "query: a name longer than the query");
  }
  std::string decoded = url_decode(query);
  require(decoded.size() <= query.size(), "url_decode: the result grew");
  (void)accepts_gzip(accept);
  return 0;
}
