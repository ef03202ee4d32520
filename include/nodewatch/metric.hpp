#pragma once
// The metric model every collector uses.
//
// A collector declares each metric it can emit exactly once, in a table of
// MetricDesc (name, type, unit, help, label names). During collect() it adds
// samples to a MetricSink built over that table. The sink refuses anything
// the table does not allow (an undeclared name, a wrong number of label
// values, a duplicate series, a label value that is not valid UTF-8) and
// records each refusal as a violation: production counts them as errors,
// tests fail on them (see tests/support/collector_test.hpp).
//
// A sink is filled by one thread; the rendered text is immutable afterwards.

#include <array>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace nodewatch {

enum class MetricType { kCounter, kGauge, kHistogram };

// The label names of a family, fixed where it is declared.
class LabelNames {
 public:
  static constexpr std::size_t kMax = 10;

  constexpr LabelNames() = default;
  // More than kMax names does not compile in a constant expression.
  constexpr LabelNames(std::initializer_list<std::string_view> names) {
    if (names.size() > kMax)
      throw std::length_error("a family has at most LabelNames::kMax labels");
    for (std::string_view n : names) names_[size_++] = n;
  }

  constexpr std::size_t size() const { return size_; }
  constexpr const std::string_view* begin() const { return names_.data(); }
  constexpr const std::string_view* end() const { return names_.data() + size_; }
  constexpr std::string_view operator[](std::size_t i) const { return names_[i]; }

 private:
  std::array<std::string_view, kMax> names_{};
  std::size_t size_ = 0;
};

// A metric family, declared once as a constant in the public metrics header
// of the collector that emits it (accelerator/accelerator_metrics.hpp, ...),
// or of the daemon for its own. The collector's MetricTable is built from
// these constants and it emits through them; whatever else reads the family
// (the node verdict, the expect file, --list-metrics) refers to the same
// constant, so that a rename is one edit, and a family removed is a
// compile error wherever it is read. Converts to its name.
struct Family {
  std::string_view name;  // nodewatch_<collector>_<what>_<unit>[_total]
  MetricType type;
  std::string_view
      unit;  // base unit in the name ("bytes", "seconds"), or "" for counts, ratios, info
  std::string_view help;  // one line, no backslash
  LabelNames labels = {};

  constexpr operator std::string_view() const { return name; }
};

// A family as a table holds it: its own strings, and a histogram's bounds.
struct MetricDesc {
  std::string name;  // full name: nodewatch_<collector>_<what>_<unit>[_total]
  MetricType type;
  std::string unit;  // base unit in the name ("bytes", "seconds"), or "" for counts, ratios, info
  std::string help;  // one line, no backslash
  std::vector<std::string> labels;
  // Histograms only: the finite upper bounds, strictly increasing (the +Inf
  // bucket is implied).
  std::vector<double> buckets = {};
};

// The declaration of `family` as a table holds it; `buckets` for a histogram.
MetricDesc describe(const Family& family, std::vector<double> buckets = {});

// A cumulative histogram over fixed upper bounds, as a collector keeps it
// between collections (observations only ever add). Not thread-safe.
class Histogram {
 public:
  explicit Histogram(std::span<const double> upper_bounds);

  void observe(double value);

  std::span<const double> upper_bounds() const { return bounds_; }
  // Observations per bucket, not cumulative: bounds().size() + 1 entries,
  // the last one for values above every bound.
  const std::vector<std::uint64_t>& bucket_counts() const { return counts_; }
  std::uint64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  std::vector<double> bounds_;
  std::vector<std::uint64_t> counts_;
  std::uint64_t count_ = 0;
  double sum_ = 0;
};

// Upper bounds growing by `factor` from `start`, `count` of them.
std::vector<double> exponential_buckets(double start, double factor, std::size_t count);

// An immutable, indexed set of declarations. Build it once per collector.
class MetricTable {
 public:
  // `borrowed_prefixes`: name prefixes besides the collector's own that the
  // table may use, for families named after what they measure rather than
  // after the collector that reads them (the interconnect collector emits
  // NVLink's "nodewatch_nvlink_" and "nodewatch_accelerator_nvlink_"
  // families). Declared here, in the table, so that the exception is
  // explicit and checked (lint()), never a looser prefix in a test.
  explicit MetricTable(std::vector<MetricDesc> descs,
                       std::vector<std::string> borrowed_prefixes = {});

  const std::vector<MetricDesc>& descs() const { return descs_; }
  const std::vector<std::string>& borrowed_prefixes() const { return borrowed_; }
  // Index of the declaration called `name`, or -1.
  int find(std::string_view name) const;

  // Problems with the declarations themselves (naming rules of DESIGN.md):
  // empty when the table is well formed. `prefix` is the collector's own,
  // e.g. "nodewatch_storage_": every name starts with it or with one of the
  // borrowed prefixes. A borrowed prefix must be "nodewatch_<word>_" or
  // longer (lower-case words), not the daemon's own (nodewatch_collector_,
  // _config_, _build_, _http_), not inside `prefix` (it would add nothing)
  // nor around it (it would widen it), declared once, and used by at least
  // one family.
  std::vector<std::string> lint(std::string_view prefix) const;

 private:
  std::vector<MetricDesc> descs_;
  std::vector<std::string> borrowed_;
  std::unordered_map<std::string_view, int> index_;
};

// What a collector's sink keeps from one collection to the next: each
// series' name and labels, escaped and rendered once when the series first
// appears, so that a collection formats only the values of the series it
// has seen before, and the buffers of the last collection, reused. Owned by
// whoever runs the collector (the scheduler keeps one per collector) and
// lent to one sink at a time; a series no collection added is dropped when
// the sink that did not add it ends.
class SeriesCache {
 public:
  SeriesCache() = default;
  SeriesCache(const SeriesCache&) = delete;
  SeriesCache& operator=(const SeriesCache&) = delete;

  // Series held (those the last collection added).
  std::size_t size() const;

 private:
  friend class MetricSink;
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  struct Series {
    // "name{a=\"x\",b=\"y\"} " for a plain series; for a histogram, the
    // escaped labels alone ("a=\"x\",b=\"y\"").
    std::string head;
    std::uint64_t seen = 0;  // the generation of the last sink that added it
  };
  using SeriesMap = std::unordered_map<std::string, Series, Hash, std::equal_to<>>;
  struct Sample {
    const std::string* key;  // the series' key in its family's map
    const Series* series;
    double value;
    int histogram;  // index into the sink's histograms, or -1
  };
  struct Family {
    SeriesMap series;
    std::vector<Sample> samples;  // this collection's, in the order added
    std::string header;           // "# HELP ...\n# TYPE ...\n"
  };
  void bind(const MetricTable& table);

  const MetricTable* table_ = nullptr;
  std::vector<Family> families_;
  std::uint64_t generation_ = 0;
  std::size_t rendered_size_ = 0;  // the last render's size, reserved for the next
  std::string key_;                // scratch for the key of the series being added
  bool lent_ = false;
};

class MetricSink {
 public:
  // A sink with a cache of its own: every series is rendered in full.
  explicit MetricSink(const MetricTable& table);
  // A sink over `cache`, kept from the collector's last collection. The
  // cache must not be lent to another sink while this one lives.
  MetricSink(const MetricTable& table, SeriesCache& cache);
  ~MetricSink();
  MetricSink(const MetricSink&) = delete;
  MetricSink& operator=(const MetricSink&) = delete;
  MetricSink(MetricSink&& other) noexcept;
  MetricSink& operator=(MetricSink&&) = delete;

  // Adds one sample. Returns false, and records a violation, when the sample
  // does not match the table; the sample is then dropped.
  bool add(std::string_view name, std::initializer_list<std::string_view> label_values,
           double value);
  bool add(std::string_view name, const std::vector<std::string>& label_values, double value);
  bool add(std::string_view name, std::span<const std::string_view> label_values, double value);
  // Adds one histogram series; its bounds must be the declared ones.
  bool add_histogram(std::string_view name, std::initializer_list<std::string_view> label_values,
                     const Histogram& histogram);

  // Appends exposition text that did not come from the table: families the
  // caller parsed, validated and rendered itself (the textfile collector's
  // inputs). `text` must be complete text-format families ending in '\n';
  // render() puts it after the table's families. `samples` counts toward
  // sample_count().
  void add_external(std::string text, std::size_t samples);

  // Counts a partial failure (one device, file or counter skipped) under `reason`.
  // Reasons are short snake_case words: they become label values.
  void error(std::string_view reason, std::uint64_t n = 1);
  // Counts one partial failure of `subject` (the device, port, file or mount
  // it concerns: "sda", "mlx5_0/1", "0000:17:00.0") under `reason`, with an
  // optional `detail` ("EIO reading link_state"). The scheduler logs a
  // (reason, subject) when it starts failing and when it stops, with a
  // count: collectors never log partial failures themselves.
  void error(std::string_view reason, std::string_view subject, std::string_view detail = {});
  // The failure of `subject` under `reason` still stands, but was counted
  // when it was found: a fact or a sampled counter read only every N
  // collections that failed then. Keeps the failure log from reading the
  // collections in between as recoveries; counts nothing.
  void still_failing(std::string_view reason, std::string_view subject,
                     std::string_view detail = {});

  const std::vector<std::string>& violations() const { return violations_; }
  const std::map<std::string, std::uint64_t, std::less<>>& errors() const { return errors_; }
  // The subjects that failed in this collection: (reason, subject) -> the
  // first detail given (may be empty).
  using FailureKey = std::pair<std::string, std::string>;
  const std::map<FailureKey, std::string>& failures() const { return failures_; }
  std::size_t sample_count() const { return samples_; }

  // Looks up the value of one series, for tests. Returns false if absent.
  bool get(std::string_view name, const std::vector<std::string>& label_values,
           double* value) const;

  // The histogram series, for tests. Returns nullptr if absent.
  const Histogram* get_histogram(std::string_view name,
                                 const std::vector<std::string>& label_values) const;

  // Renders every family that has samples, in declaration order, as
  // Prometheus text format 0.0.4 (what prometheus-cpp's TextSerializer
  // writes for the same families, byte for byte: tests/unit/metric_test.cpp
  // compares the two).
  std::string render() const;

 private:
  bool add_impl(std::string_view name, const std::string_view* values, std::size_t count,
                double value, const Histogram* histogram);
  const SeriesCache::Sample* find(std::string_view name,
                                  const std::vector<std::string>& label_values) const;

  const MetricTable* table_;
  std::unique_ptr<SeriesCache> own_cache_;
  SeriesCache* cache_;
  std::vector<Histogram> histograms_;
  std::string external_;
  std::vector<std::string> violations_;
  std::map<std::string, std::uint64_t, std::less<>> errors_;
  std::map<FailureKey, std::string> failures_;
  std::size_t samples_ = 0;
};

// Appends `value` as the text format writes a sample value: "Nan", "+Inf",
// "-Inf", or the shortest of %.16g's forms (an integer below 10^15 without
// a decimal point or exponent).
void append_sample_value(std::string& out, double value);

// True when `s` is valid UTF-8 (what the text format requires of label values).
bool is_valid_utf8(std::string_view s);

}  // namespace nodewatch
