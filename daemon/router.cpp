#include "router.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <optional>

#include "config.hpp"
#include "expect.hpp"
#include "nodewatch/text.hpp"
#include "version.hpp"

namespace nodewatch {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

std::string html_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

HttpResponse text_response(http::status status, std::string body) {
  HttpResponse res{status, 11};
  res.set(http::field::content_type, "text/plain; charset=utf-8");
  res.body() = std::move(body);
  return res;
}

bool in(const std::vector<std::string>& v, std::string_view s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

}  // namespace

std::string url_decode(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out.push_back(' ');
    } else if (s[i] == '%' && i + 2 < s.size()) {
      auto hex = [](char c) -> int {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        return -1;
      };
      int hi = hex(s[i + 1]), lo = hex(s[i + 2]);
      if (hi < 0 || lo < 0) {
        out.push_back(s[i]);
        continue;
      }
      out.push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

std::string parse_metrics_query(std::string_view query, MetricsFilter* out) {
  while (!query.empty()) {
    auto amp = query.find('&');
    std::string_view part = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    if (part.empty()) continue;
    auto eq = part.find('=');
    std::string key = url_decode(part.substr(0, eq));
    std::string value =
        eq == std::string_view::npos ? std::string() : url_decode(part.substr(eq + 1));
    if (key == "collect[]")
      out->collect.push_back(value);
    else if (key == "exclude[]")
      out->exclude.push_back(value);
    // Other parameters (Prometheus adds none by default) are ignored.
  }
  if (!out->collect.empty() && !out->exclude.empty())
    return "collect[] and exclude[] cannot be used together";
  return {};
}

bool accepts_gzip(std::string_view value) {
  // An explicit "gzip" entry decides; "*" only when gzip is not named.
  std::optional<bool> gzip, star;
  while (!value.empty()) {
    auto comma = value.find(',');
    std::string_view item = trim(value.substr(0, comma));
    value = comma == std::string_view::npos ? std::string_view{} : value.substr(comma + 1);
    auto semi = item.find(';');
    std::string_view coding = trim(item.substr(0, semi));
    bool is_gzip = iequals(coding, "gzip") || iequals(coding, "x-gzip");
    if (!is_gzip && coding != "*") continue;
    bool accepted = true;
    if (semi != std::string_view::npos) {
      std::string_view params = trim(item.substr(semi + 1));
      if (params.size() >= 2 && (params[0] == 'q' || params[0] == 'Q') && params[1] == '=')
        accepted = std::strtod(std::string(params.substr(2)).c_str(), nullptr) > 0;
    }
    (is_gzip ? gzip : star) = accepted;
  }
  if (gzip) return *gzip;
  return star.value_or(false);
}

Router::Parts Router::parts(const MetricsFilter& filter,
                            const std::vector<CollectorStatus>& statuses) const {
  auto include = [&](std::string_view name) {
    if (!filter.collect.empty()) return in(filter.collect, name);
    return !in(filter.exclude, name);
  };
  Parts p;
  p.set = src_.store->current();
  for (const auto& [name, rendered] : p.set->by_collector) {
    if (!include(name)) continue;
    p.segments.push_back(rendered.get());
    p.collectors.push_back(name);
  }
  // The verdict covers every collector: served whatever the filter.
  if (src_.node) p.node = src_.node();
  if (p.node && p.node->metrics) p.segments.push_back(p.node->metrics.get());
  p.self = src_.self->render(statuses, include);
  return p;
}

std::string Router::metrics_text(const MetricsFilter& filter) const {
  Parts p = parts(filter, src_.statuses());
  std::size_t size = p.self.size();
  for (const RenderedText* s : p.segments) size += s->text.size();
  std::string body;
  body.reserve(size);
  for (const RenderedText* s : p.segments) body += s->text;
  body += p.self;
  return body;
}

HttpResponse Router::metrics(const HttpRequest& req, std::string_view query) const {
  MetricsFilter filter;
  if (std::string err = parse_metrics_query(query, &filter); !err.empty())
    return text_response(http::status::bad_request, err + "\n");
  auto statuses = src_.statuses();
  for (const auto* list : {&filter.collect, &filter.exclude}) {
    for (const std::string& name : *list) {
      bool known = std::any_of(statuses.begin(), statuses.end(),
                               [&](const CollectorStatus& s) { return s.name == name; });
      if (!known) {
        std::string enabled;
        for (const auto& s : statuses) enabled += (enabled.empty() ? "" : ", ") + s.name;
        // The name is the client's: echoed with its control characters
        // escaped, as a JSON string is (a CR LF, a NUL, a terminal's escape).
        return text_response(http::status::bad_request,
                             "unknown or disabled collector \"" + text::json_escaped(name) +
                                 "\" (enabled: " + (enabled.empty() ? "none" : enabled) + ")\n");
      }
    }
  }
  HttpResponse res{http::status::ok, req.version()};
  res.set(http::field::content_type, kMetricsContentType);
  res.set(http::field::vary, "Accept-Encoding");
  if (accepts_gzip(req[http::field::accept_encoding])) {
    Parts p = parts(filter, statuses);
    src_.store->gzip_scraped(p.collectors, std::chrono::steady_clock::now());
    res.set(http::field::content_encoding, "gzip");
    res.body() = assemble_gzip(p.segments, p.self);
  } else {
    res.body() = metrics_text(filter);
  }
  return res;
}

HttpResponse Router::landing(const HttpRequest& req) const {
  std::string h;
  h += "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>nodewatch</title>"
       "<style>body{font-family:sans-serif;margin:2em}td,th{padding:.2em .8em;text-align:left}"
       ".down{color:#b00}.up{color:#070}</style></head><body>\n";
  h += "<h1>nodewatch</h1>\n<p>Version ";
  h += html_escape(kVersion);
  h += " (revision ";
  h += html_escape(kRevision);
  h +=
      ")</p>\n<p><a href=\"metrics\">Metrics</a> &middot; <a href=\"-/healthy\">Health</a>"
      " &middot; <a href=\"-/ready\">Readiness</a> &middot; <a href=\"-/node-health?format=table\">"
      "Node health</a></p>\n";
  if (src_.access) h += "<p>Access: " + html_escape(src_.access()) + "</p>\n";
  h += "<h2>Collectors</h2>\n<table><tr><th>collector</th><th>state</th><th>interval</th>"
       "<th>last duration</th><th>last success</th><th>last error</th></tr>\n";
  auto statuses = src_.statuses();
  for (const CollectorStatus& s : statuses) {
    const char* state = !s.ran ? "pending" : s.up ? "up" : "down";
    char dur[32];
    std::snprintf(dur, sizeof dur, "%.3f s", s.last_duration_seconds);
    std::string success = "never";
    if (s.last_success_unix_seconds > 0) {
      std::time_t t = static_cast<std::time_t>(s.last_success_unix_seconds);
      std::tm tm{};
      gmtime_r(&t, &tm);
      char buf[32];
      std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
      success = buf;
    }
    h += "<tr><td>" + html_escape(s.name) + "</td><td class=\"" + (s.up ? "up" : "down") + "\">" +
         state + "</td><td>" + format_duration(s.interval) + "</td><td>" + dur + "</td><td>" +
         success + "</td><td>" + html_escape(s.last_error) + "</td></tr>\n";
  }
  if (statuses.empty()) h += "<tr><td colspan=\"6\">no collector is enabled</td></tr>\n";
  h += "</table>\n</body></html>\n";
  HttpResponse res{http::status::ok, req.version()};
  res.set(http::field::content_type, "text/html; charset=utf-8");
  res.body() = std::move(h);
  return res;
}

// 200 when the node is fit (healthy or degraded), else 503; the body is the verdict as JSON,
// or as the table `--check` prints with ?format=table.
HttpResponse Router::node_health(std::string_view query) const {
  std::string_view format = "json";
  while (!query.empty()) {
    auto amp = query.find('&');
    std::string_view part = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    if (part == "format=table" || part == "format=json" || part == "format=line")
      format = part.substr(7);
    else if (!part.empty())
      return text_response(http::status::bad_request,
                           "unknown parameter; use format=json, format=table or format=line\n");
  }
  std::shared_ptr<const NodeReport> r = src_.node ? src_.node() : nullptr;
  Health h = r ? r->verdict.overall() : Health::kUnknown;
  std::string body;
  if (r)
    body = format == "table" ? r->table() : format == "line" ? r->line() : r->json();
  else
    body = format == "json" ? "{\"status\":\"unknown\",\"problems\":[]}\n"
                            : "unknown: no verdict yet\n";
  HttpResponse res =
      text_response(fit(h) ? http::status::ok : http::status::service_unavailable, std::move(body));
  if (format == "json") res.set(http::field::content_type, "application/json");
  res.set(http::field::cache_control, "no-store");
  res.set(kNodeStatusHeader, health_name(h));
  return res;
}

HttpResponse Router::handle(const HttpRequest& req) const {
  std::string_view target = req.target();
  auto qpos = target.find('?');
  std::string_view path = target.substr(0, qpos);
  std::string_view query =
      qpos == std::string_view::npos ? std::string_view{} : target.substr(qpos + 1);

  HttpResponse res;
  bool known = path == "/metrics" || path == "/" || path == "/-/healthy" || path == "/-/ready" ||
               path == "/-/node-health";
  if (!known) {
    res = text_response(http::status::not_found, "not found; try /metrics\n");
  } else if (req.method() != http::verb::get && req.method() != http::verb::head) {
    res = text_response(http::status::method_not_allowed, "only GET and HEAD are allowed\n");
    res.set(http::field::allow, "GET, HEAD");
  } else if (path == "/metrics") {
    res = metrics(req, query);
  } else if (path == "/") {
    res = landing(req);
  } else if (path == "/-/node-health") {
    res = node_health(query);
  } else if (path == "/-/healthy") {
    res = text_response(http::status::ok, "OK\n");
  } else {
    bool ready = src_.ready();
    res = text_response(ready ? http::status::ok : http::status::service_unavailable,
                        ready ? "ready\n" : "not ready: first collection round in progress\n");
  }
  res.version(req.version());
  res.prepare_payload();
  if (req.method() == http::verb::head) {
    auto n = res.body().size();
    res.body().clear();
    res.content_length(n);
  }
  return res;
}

}  // namespace nodewatch
