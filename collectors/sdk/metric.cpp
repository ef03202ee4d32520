#include "nodewatch/metric.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <stdexcept>
#include <utility>

namespace nodewatch {
namespace {

bool valid_name(std::string_view s, bool allow_colon) {
  if (s.empty()) return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    bool alpha =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (allow_colon && c == ':');
    bool digit = c >= '0' && c <= '9';
    if (!(alpha || (i > 0 && digit))) return false;
  }
  return true;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// "nodewatch_nvlink_", "nodewatch_accelerator_nvlink_": "nodewatch_", then
// one or more lower-case words, each followed by '_'.
bool well_formed_prefix(std::string_view p) {
  constexpr std::string_view kRoot = "nodewatch_";
  if (p.rfind(kRoot, 0) != 0 || p.size() == kRoot.size() || p.back() != '_') return false;
  char previous = '_';
  for (char c : p.substr(kRoot.size())) {
    const bool word = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    if (!word && !(c == '_' && previous != '_')) return false;
    previous = c;
  }
  return true;
}

}  // namespace

bool is_valid_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = 0;
    std::uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    for (std::size_t k = 1; k <= n; ++k) {
      if (i + k >= s.size()) return false;
      auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    // Overlong encodings, surrogates, and values past U+10FFFF are invalid.
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) ||
        cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += n + 1;
  }
  return true;
}

Histogram::Histogram(std::span<const double> upper_bounds)
    : bounds_(upper_bounds.begin(), upper_bounds.end()), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  if (std::isnan(value)) return;
  // A value equal to a bound belongs to that bound's bucket (le = "less or equal").
  auto it = std::lower_bound(bounds_.begin(), bounds_.end(), value);
  ++counts_[static_cast<std::size_t>(it - bounds_.begin())];
  ++count_;
  sum_ += value;
}

MetricDesc describe(const Family& family, std::vector<double> buckets) {
  return MetricDesc{std::string(family.name),
                    family.type,
                    std::string(family.unit),
                    std::string(family.help),
                    std::vector<std::string>(family.labels.begin(), family.labels.end()),
                    std::move(buckets)};
}

std::vector<double> exponential_buckets(double start, double factor, std::size_t count) {
  std::vector<double> out;
  out.reserve(count);
  double v = start;
  for (std::size_t i = 0; i < count; ++i, v *= factor) out.push_back(v);
  return out;
}

MetricTable::MetricTable(std::vector<MetricDesc> descs, std::vector<std::string> borrowed_prefixes)
    : descs_(std::move(descs)), borrowed_(std::move(borrowed_prefixes)) {
  for (std::size_t i = 0; i < descs_.size(); ++i)
    index_.emplace(descs_[i].name, static_cast<int>(i));
}

int MetricTable::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? -1 : it->second;
}

std::vector<std::string> MetricTable::lint(std::string_view prefix) const {
  std::vector<std::string> out;
  auto starts_with = [](std::string_view s, std::string_view p) { return s.rfind(p, 0) == 0; };
  std::unordered_set<std::string_view> borrowed;
  for (const std::string& p : borrowed_) {
    auto bad = [&](const std::string& what) {
      out.push_back("borrowed prefix " + p + ": " + what);
    };
    if (!borrowed.insert(p).second) bad("declared twice");
    if (!well_formed_prefix(p)) bad("is not nodewatch_<word>_ (lower-case words, ending in _)");
    for (std::string_view daemon :
         {"nodewatch_collector_", "nodewatch_config_", "nodewatch_build_", "nodewatch_http_"})
      if (starts_with(p, daemon)) bad("is the daemon's own " + std::string(daemon));
    if (starts_with(p, prefix)) bad("is inside the table's own prefix " + std::string(prefix));
    if (starts_with(prefix, p)) bad("would widen the table's own prefix " + std::string(prefix));
    if (std::none_of(descs_.begin(), descs_.end(),
                     [&](const MetricDesc& d) { return starts_with(d.name, p); }))
      bad("no family uses it");
  }
  std::unordered_set<std::string_view> names;
  for (const MetricDesc& d : descs_) {
    auto bad = [&](const std::string& what) { out.push_back(d.name + ": " + what); };
    if (!names.insert(d.name).second) bad("declared twice");
    if (!valid_name(d.name, false)) bad("not a valid metric name");
    if (!starts_with(d.name, prefix) &&
        std::none_of(borrowed_.begin(), borrowed_.end(),
                     [&](const std::string& p) { return starts_with(d.name, p); }))
      bad("does not start with " + std::string(prefix) +
          (borrowed_.empty() ? std::string() : " or a borrowed prefix"));
    bool is_total = ends_with(d.name, "_total");
    if (d.type == MetricType::kCounter && !is_total) bad("a counter must end in _total");
    if (d.type != MetricType::kCounter && is_total) bad("only a counter may end in _total");
    if (d.type == MetricType::kHistogram) {
      if (d.buckets.empty()) bad("a histogram needs buckets");
      for (std::size_t i = 0; i < d.buckets.size(); ++i) {
        if (!std::isfinite(d.buckets[i]) || (i > 0 && !(d.buckets[i] > d.buckets[i - 1])))
          bad("histogram buckets must be finite and strictly increasing");
      }
      for (std::string_view suffix : {"_bucket", "_count", "_sum"})
        if (ends_with(d.name, suffix))
          bad("a histogram name must not end in " + std::string(suffix));
    } else if (!d.buckets.empty()) {
      bad("only a histogram has buckets");
    }
    std::string_view base = d.name;
    if (is_total) base.remove_suffix(6);
    if (!d.unit.empty() && !ends_with(base, "_" + d.unit))
      bad("name does not end in its unit _" + d.unit);
    for (std::string_view forbidden : {"_percent", "_milliseconds", "_microseconds", "_kilobytes",
                                       "_megabytes", "_bits", "_celcius"}) {
      if (base.find(forbidden) != std::string_view::npos)
        bad("uses a non-base unit " + std::string(forbidden));
    }
    if (ends_with(base, "_info") && d.type != MetricType::kGauge)
      bad("an _info metric must be a gauge");
    if (d.help.empty()) bad("has no help text");
    if (d.help.find_first_of("\\\n") != std::string::npos)
      bad("help text contains a backslash or newline");
    std::unordered_set<std::string_view> labels;
    for (const std::string& l : d.labels) {
      if (!valid_name(l, false) || l.rfind("__", 0) == 0)
        bad("label '" + l + "' is not a valid label name");
      if (l == "le" || l == "quantile") bad("label '" + l + "' is reserved");
      if (!labels.insert(l).second) bad("label '" + l + "' declared twice");
    }
  }
  return out;
}

std::size_t SeriesCache::size() const {
  std::size_t n = 0;
  for (const Family& f : families_) n += f.series.size();
  return n;
}

namespace {

void append_escaped(std::string& out, std::string_view value) {
  for (char c : value) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '"': out += "\\\""; break;
      case '\n': out += "\\n"; break;
      default: out.push_back(c);
    }
  }
}

const char* type_name(MetricType t) {
  switch (t) {
    case MetricType::kCounter: return "counter";
    case MetricType::kGauge: return "gauge";
    case MetricType::kHistogram: return "histogram";
  }
  return "untyped";
}

void append_integer(std::string& out, std::uint64_t v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

}  // namespace

void append_sample_value(std::string& out, double value) {
  if (std::isnan(value)) {
    out += "Nan";
    return;
  }
  if (std::isinf(value)) {
    out += value < 0 ? "-Inf" : "+Inf";
    return;
  }
  char buf[32];
  // Most values are counts: an integer below 10^15 is what %.16g writes of
  // it, its digits, and to_chars of an integer is the cheapest way there.
  if (value == std::trunc(value) && std::fabs(value) < 1e15 &&
      !(value == 0 && std::signbit(value))) {
    auto r = std::to_chars(buf, buf + sizeof buf, static_cast<std::int64_t>(value));
    out.append(buf, r.ptr);
    return;
  }
  auto r = std::to_chars(buf, buf + sizeof buf, value, std::chars_format::general, 16);
  out.append(buf, r.ptr);
}

void SeriesCache::bind(const MetricTable& table) {
  if (lent_) throw std::logic_error("a SeriesCache is lent to one MetricSink at a time");
  lent_ = true;
  ++generation_;
  if (table_ == &table) {
    for (Family& f : families_) f.samples.clear();
    return;
  }
  table_ = &table;
  families_.clear();
  families_.resize(table.descs().size());
  for (std::size_t i = 0; i < families_.size(); ++i) {
    const MetricDesc& d = table.descs()[i];
    std::string& h = families_[i].header;
    if (!d.help.empty()) h += "# HELP " + d.name + " " + d.help + "\n";
    h += "# TYPE " + d.name + " " + type_name(d.type) + "\n";
  }
}

MetricSink::MetricSink(const MetricTable& table)
    : table_(&table), own_cache_(std::make_unique<SeriesCache>()), cache_(own_cache_.get()) {
  cache_->bind(table);
}

MetricSink::MetricSink(const MetricTable& table, SeriesCache& cache)
    : table_(&table), cache_(&cache) {
  cache_->bind(table);
}

MetricSink::MetricSink(MetricSink&& other) noexcept
    : table_(other.table_),
      own_cache_(std::move(other.own_cache_)),
      cache_(std::exchange(other.cache_, nullptr)),
      histograms_(std::move(other.histograms_)),
      external_(std::move(other.external_)),
      violations_(std::move(other.violations_)),
      errors_(std::move(other.errors_)),
      failures_(std::move(other.failures_)),
      samples_(other.samples_) {}

MetricSink::~MetricSink() {
  if (cache_ == nullptr) return;  // moved from
  // Series this collection did not add are gone from the node: drop their
  // rendered heads. When every cached series was added again (the steady
  // state) there is nothing to scan.
  for (SeriesCache::Family& f : cache_->families_) {
    if (f.samples.size() == f.series.size()) continue;
    const std::uint64_t g = cache_->generation_;
    std::erase_if(f.series, [g](const auto& kv) { return kv.second.seen != g; });
  }
  cache_->lent_ = false;
}

bool MetricSink::add(std::string_view name, std::initializer_list<std::string_view> label_values,
                     double value) {
  return add_impl(name, label_values.begin(), label_values.size(), value, nullptr);
}

bool MetricSink::add_histogram(std::string_view name,
                               std::initializer_list<std::string_view> label_values,
                               const Histogram& histogram) {
  return add_impl(name, label_values.begin(), label_values.size(), 0, &histogram);
}

bool MetricSink::add(std::string_view name, const std::vector<std::string>& label_values,
                     double value) {
  constexpr std::size_t kInline = 16;
  std::string_view inline_views[kInline];
  std::vector<std::string_view> heap;
  std::string_view* views = inline_views;
  if (label_values.size() > kInline) {
    heap.resize(label_values.size());
    views = heap.data();
  }
  for (std::size_t i = 0; i < label_values.size(); ++i) views[i] = label_values[i];
  return add_impl(name, views, label_values.size(), value, nullptr);
}

bool MetricSink::add(std::string_view name, std::span<const std::string_view> label_values,
                     double value) {
  return add_impl(name, label_values.data(), label_values.size(), value, nullptr);
}

namespace {
// A series' key in its family: each label value after its length, so that
// no two lists of values share one.
void make_key(std::string& key, const std::string_view* values, std::size_t count) {
  key.clear();
  for (std::size_t i = 0; i < count; ++i) {
    const auto n = static_cast<std::uint32_t>(values[i].size());
    key.append(reinterpret_cast<const char*>(&n), sizeof n);
    key.append(values[i]);
  }
}
}  // namespace

bool MetricSink::add_impl(std::string_view name, const std::string_view* values, std::size_t count,
                          double value, const Histogram* histogram) {
  int idx = table_->find(name);
  if (idx < 0) {
    violations_.push_back("undeclared metric " + std::string(name));
    return false;
  }
  const MetricDesc& d = table_->descs()[static_cast<std::size_t>(idx)];
  if ((d.type == MetricType::kHistogram) != (histogram != nullptr)) {
    violations_.push_back(d.name + (histogram != nullptr
                                        ? ": histogram sample for a metric that is not a histogram"
                                        : ": plain sample for a histogram"));
    return false;
  }
  if (histogram != nullptr &&
      !std::equal(d.buckets.begin(), d.buckets.end(), histogram->upper_bounds().begin(),
                  histogram->upper_bounds().end())) {
    violations_.push_back(d.name + ": histogram bounds differ from the declared buckets");
    return false;
  }
  if (count != d.labels.size()) {
    violations_.push_back(d.name + ": " + std::to_string(count) + " label values for " +
                          std::to_string(d.labels.size()) + " declared labels");
    return false;
  }
  if (d.type == MetricType::kCounter && !(value >= 0)) {
    violations_.push_back(d.name + ": counter value " + std::to_string(value) +
                          " is negative or NaN");
    return false;
  }
  SeriesCache::Family& family = cache_->families_[static_cast<std::size_t>(idx)];
  std::string& key = cache_->key_;
  make_key(key, values, count);
  auto it = family.series.find(std::string_view(key));
  if (it == family.series.end()) {
    // A series not seen in the last collection: its values are checked and
    // its head rendered once, here.
    for (std::size_t i = 0; i < count; ++i) {
      if (!is_valid_utf8(values[i])) {
        violations_.push_back(d.name + ": label " + d.labels[i] + " is not valid UTF-8");
        return false;
      }
    }
    SeriesCache::Series series;
    std::string& h = series.head;
    if (histogram == nullptr) h = d.name;
    if (count > 0 && histogram == nullptr) h.push_back('{');
    for (std::size_t i = 0; i < count; ++i) {
      if (i > 0) h.push_back(',');
      h += d.labels[i];
      h += "=\"";
      append_escaped(h, values[i]);
      h.push_back('"');
    }
    if (count > 0 && histogram == nullptr) h.push_back('}');
    if (histogram == nullptr) h.push_back(' ');
    it = family.series.emplace(key, std::move(series)).first;
  } else if (it->second.seen == cache_->generation_) {
    violations_.push_back(d.name + ": duplicate series");
    return false;
  }
  it->second.seen = cache_->generation_;
  int hist_index = -1;
  if (histogram != nullptr) {
    hist_index = static_cast<int>(histograms_.size());
    histograms_.push_back(*histogram);
  }
  family.samples.push_back({&it->first, &it->second, value, hist_index});
  ++samples_;
  return true;
}

void MetricSink::add_external(std::string text, std::size_t samples) {
  external_ += text;
  samples_ += samples;
}

void MetricSink::error(std::string_view reason, std::uint64_t n) {
  auto it = errors_.find(reason);
  if (it == errors_.end()) it = errors_.emplace(std::string(reason), 0).first;
  it->second += n;
}

void MetricSink::error(std::string_view reason, std::string_view subject, std::string_view detail) {
  error(reason);
  still_failing(reason, subject, detail);
}

void MetricSink::still_failing(std::string_view reason, std::string_view subject,
                               std::string_view detail) {
  failures_.emplace(FailureKey{std::string(reason), std::string(subject)}, std::string(detail));
}

const SeriesCache::Sample* MetricSink::find(std::string_view name,
                                            const std::vector<std::string>& label_values) const {
  int idx = table_->find(name);
  if (idx < 0) return nullptr;
  std::vector<std::string_view> views(label_values.begin(), label_values.end());
  std::string key;
  make_key(key, views.data(), views.size());
  for (const SeriesCache::Sample& s : cache_->families_[static_cast<std::size_t>(idx)].samples)
    if (*s.key == key) return &s;
  return nullptr;
}

bool MetricSink::get(std::string_view name, const std::vector<std::string>& label_values,
                     double* value) const {
  const SeriesCache::Sample* s = find(name, label_values);
  if (s == nullptr) return false;
  *value = s->value;
  return true;
}

const Histogram* MetricSink::get_histogram(std::string_view name,
                                           const std::vector<std::string>& label_values) const {
  const SeriesCache::Sample* s = find(name, label_values);
  if (s == nullptr || s->histogram < 0) return nullptr;
  return &histograms_[static_cast<std::size_t>(s->histogram)];
}

namespace {

// One histogram line's head: name, suffix and labels, with `le` last when given.
void histogram_head(std::string& out, const MetricDesc& d, std::string_view suffix,
                    const std::string& labels, const double* le, bool inf) {
  out += d.name;
  out += suffix;
  if (!labels.empty() || le != nullptr || inf) {
    out.push_back('{');
    out += labels;
    if (le != nullptr || inf) {
      if (!labels.empty()) out.push_back(',');
      out += "le=\"";
      if (inf)
        out += "+Inf";
      else
        append_sample_value(out, *le);
      out.push_back('"');
    }
    out.push_back('}');
  }
  out.push_back(' ');
}

}  // namespace

std::string MetricSink::render() const {
  std::string out;
  out.reserve(std::max(cache_->rendered_size_, external_.size()) + 64);
  const auto& descs = table_->descs();
  for (std::size_t i = 0; i < descs.size(); ++i) {
    const SeriesCache::Family& f = cache_->families_[i];
    if (f.samples.empty()) continue;
    const MetricDesc& d = descs[i];
    out += f.header;
    for (const SeriesCache::Sample& s : f.samples) {
      if (s.histogram < 0) {
        out += s.series->head;
        append_sample_value(out, s.value);
        out.push_back('\n');
        continue;
      }
      const Histogram& h = histograms_[static_cast<std::size_t>(s.histogram)];
      const std::string& labels = s.series->head;
      histogram_head(out, d, "_count", labels, nullptr, false);
      append_integer(out, h.count());
      out.push_back('\n');
      histogram_head(out, d, "_sum", labels, nullptr, false);
      append_sample_value(out, h.sum());
      out.push_back('\n');
      std::uint64_t cumulative = 0;
      for (std::size_t b = 0; b < h.upper_bounds().size(); ++b) {
        cumulative += h.bucket_counts()[b];
        histogram_head(out, d, "_bucket", labels, &h.upper_bounds()[b], false);
        append_integer(out, cumulative);
        out.push_back('\n');
      }
      histogram_head(out, d, "_bucket", labels, nullptr, true);
      append_integer(out, h.count());
      out.push_back('\n');
    }
  }
  out += external_;
  cache_->rendered_size_ = out.size();
  return out;
}

}  // namespace nodewatch
