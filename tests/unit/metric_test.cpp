#include <gtest/gtest.h>
#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>

#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "exposition.hpp"
#include "nodewatch/metric.hpp"
#include "support/collector_test.hpp"

namespace nodewatch {
namespace {

const MetricTable& Table() {
  static const MetricTable t({
      {"nodewatch_test_read_bytes_total", MetricType::kCounter, "bytes", "Bytes read.", {"device"}},
      {"nodewatch_test_temperature_celsius",
       MetricType::kGauge,
       "celsius",
       "Temperature.",
       {"device", "sensor"}},
      {"nodewatch_test_device_info",
       MetricType::kGauge,
       "",
       "Device facts; always 1.",
       {"device", "model"}},
  });
  return t;
}

TEST(MetricTableTest, WellFormedTablePasses) {
  testing::ExpectWellFormedTable(Table(), "nodewatch_test_");
}

// A table may carry families named after what they measure rather than
// the collector that reads them (the interconnect collector's NVLink
// families), but only under prefixes it declares, and the lint checks them.
TEST(MetricTableTest, BorrowedPrefixesAllowTheirFamiliesOnly) {
  MetricTable t(
      {
          {"nodewatch_test_reads_total", MetricType::kCounter, "", "Reads.", {}},
          {"nodewatch_thing_up", MetricType::kGauge, "", "Up.", {}},
          {"nodewatch_other_thing_ratio", MetricType::kGauge, "", "R.", {}},
      },
      {"nodewatch_thing_", "nodewatch_other_thing_"});
  EXPECT_TRUE(t.lint("nodewatch_test_").empty());
  testing::ExpectWellFormedTable(t, "nodewatch_test_");
  EXPECT_EQ(t.borrowed_prefixes(),
            (std::vector<std::string>{"nodewatch_thing_", "nodewatch_other_thing_"}));

  // A family under no declared prefix is still refused.
  MetricTable stray({{"nodewatch_test_up", MetricType::kGauge, "", "Up.", {}},
                     {"nodewatch_thing_up", MetricType::kGauge, "", "Up.", {}},
                     {"nodewatch_other_up", MetricType::kGauge, "", "Up.", {}}},
                    {"nodewatch_thing_"});
  const auto problems = stray.lint("nodewatch_test_");
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0],
            "nodewatch_other_up: does not start with nodewatch_test_ or a borrowed prefix");
}

// A borrowed prefix cannot weaken the rule: it must be narrow, not the
// daemon's own names, not around or inside the table's prefix, declared
// once and used.
TEST(MetricTableTest, LintRefusesBorrowedPrefixesThatWidenTheRule) {
  MetricTable bad({{"nodewatch_test_up", MetricType::kGauge, "", "Up.", {}},
                   {"nodewatch_collector_x", MetricType::kGauge, "", "X.", {}},
                   {"nodewatch_a_b", MetricType::kGauge, "", "B.", {}}},
                  {"nodewatch_", "nodewatch_collector_", "nodewatch_test_sub_", "nodewatch_unused_",
                   "Nodewatch_a_", "nodewatch_a", "nodewatch__a_", "nodewatch_a_", "nodewatch_a_"});
  const auto problems = bad.lint("nodewatch_test_");
  auto has = [&](std::string_view what) {
    for (const auto& p : problems)
      if (p == what) return true;
    return false;
  };
  EXPECT_TRUE(
      has("borrowed prefix nodewatch_: is not nodewatch_<word>_ (lower-case words, "
          "ending in _)"));
  EXPECT_TRUE(
      has("borrowed prefix nodewatch_: would widen the table's own prefix "
          "nodewatch_test_"));
  EXPECT_TRUE(
      has("borrowed prefix nodewatch_collector_: is the daemon's own "
          "nodewatch_collector_"));
  EXPECT_TRUE(
      has("borrowed prefix nodewatch_test_sub_: is inside the table's own prefix "
          "nodewatch_test_"));
  EXPECT_TRUE(has("borrowed prefix nodewatch_unused_: no family uses it"));
  EXPECT_TRUE(
      has("borrowed prefix Nodewatch_a_: is not nodewatch_<word>_ (lower-case words, "
          "ending in _)"));
  EXPECT_TRUE(
      has("borrowed prefix nodewatch_a: is not nodewatch_<word>_ (lower-case words, "
          "ending in _)"));
  EXPECT_TRUE(
      has("borrowed prefix nodewatch__a_: is not nodewatch_<word>_ (lower-case words, "
          "ending in _)"));
  EXPECT_TRUE(has("borrowed prefix nodewatch_a_: declared twice"));
  // The well-formed, used, declared-once prefix itself is fine.
  for (const auto& p : problems) EXPECT_NE(p.rfind("nodewatch_a_b:", 0), 0u) << p;
}

TEST(MetricTableTest, LintFindsEveryRuleBroken) {
  MetricTable bad({
      {"nodewatch_test_reads", MetricType::kCounter, "", "Reads.", {}},           // no _total
      {"nodewatch_test_temp_total", MetricType::kGauge, "", "T.", {}},            // gauge _total
      {"nodewatch_test_latency_seconds", MetricType::kGauge, "bytes", "L.", {}},  // unit mismatch
      {"nodewatch_test_util_percent", MetricType::kGauge, "", "U.", {}},          // non-base unit
      {"other_thing", MetricType::kGauge, "", "O.", {}},                          // prefix
      {"nodewatch_test_x", MetricType::kGauge, "", "", {}},                       // no help
      {"nodewatch_test_y", MetricType::kGauge, "", "a\\b", {}},                   // backslash
      {"nodewatch_test_z", MetricType::kGauge, "", "Z.", {"le", "1bad", "a", "a"}},  // labels
      {"nodewatch_test_z", MetricType::kGauge, "", "Z.", {}},                        // twice
      {"nodewatch_test-bad", MetricType::kGauge, "", "B.", {}},                      // name
  });
  auto problems = bad.lint("nodewatch_test_");
  auto has = [&](std::string_view what) {
    for (const auto& p : problems)
      if (p.find(what) != std::string::npos) return true;
    return false;
  };
  EXPECT_TRUE(has("nodewatch_test_reads: a counter must end in _total"));
  EXPECT_TRUE(has("nodewatch_test_temp_total: only a counter may end in _total"));
  EXPECT_TRUE(has("nodewatch_test_latency_seconds: name does not end in its unit _bytes"));
  EXPECT_TRUE(has("non-base unit _percent"));
  EXPECT_TRUE(has("other_thing: does not start with"));
  EXPECT_TRUE(has("nodewatch_test_x: has no help text"));
  EXPECT_TRUE(has("backslash"));
  EXPECT_TRUE(has("label 'le' is reserved"));
  EXPECT_TRUE(has("label '1bad' is not a valid label name"));
  EXPECT_TRUE(has("label 'a' declared twice"));
  EXPECT_TRUE(has("nodewatch_test_z: declared twice"));
  EXPECT_TRUE(has("nodewatch_test-bad: not a valid metric name"));
}

TEST(MetricSinkTest, AcceptsDeclaredSamplesAndRenders) {
  MetricSink sink(Table());
  EXPECT_TRUE(sink.add("nodewatch_test_read_bytes_total", {"nvme0n1"}, 4096));
  EXPECT_TRUE(sink.add("nodewatch_test_temperature_celsius", {"gpu0", "edge"}, 41.5));
  EXPECT_TRUE(sink.add("nodewatch_test_device_info", {"gpu0", "say \"hi\"\\\n"}, 1));
  testing::ExpectConformant(sink);
  EXPECT_EQ(sink.sample_count(), 3u);
  EXPECT_EQ(sink.render(),
            "# HELP nodewatch_test_read_bytes_total Bytes read.\n"
            "# TYPE nodewatch_test_read_bytes_total counter\n"
            "nodewatch_test_read_bytes_total{device=\"nvme0n1\"} 4096\n"
            "# HELP nodewatch_test_temperature_celsius Temperature.\n"
            "# TYPE nodewatch_test_temperature_celsius gauge\n"
            "nodewatch_test_temperature_celsius{device=\"gpu0\",sensor=\"edge\"} 41.5\n"
            "# HELP nodewatch_test_device_info Device facts; always 1.\n"
            "# TYPE nodewatch_test_device_info gauge\n"
            "nodewatch_test_device_info{device=\"gpu0\",model=\"say \\\"hi\\\"\\\\\\n\"} 1\n");
}

TEST(MetricSinkTest, RefusesWhatTheTableDoesNotAllow) {
  MetricSink sink(Table());
  EXPECT_FALSE(sink.add("nodewatch_test_undeclared", {}, 1));
  EXPECT_FALSE(sink.add("nodewatch_test_read_bytes_total", {}, 1));
  EXPECT_FALSE(sink.add("nodewatch_test_read_bytes_total", {"a", "b"}, 1));
  EXPECT_TRUE(sink.add("nodewatch_test_read_bytes_total", {"a"}, 1));
  EXPECT_FALSE(sink.add("nodewatch_test_read_bytes_total", {"a"}, 2));   // duplicate series
  EXPECT_FALSE(sink.add("nodewatch_test_read_bytes_total", {"b"}, -1));  // negative counter
  EXPECT_FALSE(sink.add("nodewatch_test_read_bytes_total", {"c"}, std::nan("")));
  EXPECT_FALSE(sink.add("nodewatch_test_read_bytes_total", {"\xff\xfe"}, 1));  // not UTF-8
  EXPECT_EQ(sink.violations().size(), 7u);
  EXPECT_EQ(sink.sample_count(), 1u);
  // The render holds only the accepted sample.
  EXPECT_EQ(sink.render().find("} 2"), std::string::npos);
}

TEST(MetricSinkTest, GaugesMayBeNaNAndInfinite) {
  MetricSink sink(Table());
  EXPECT_TRUE(sink.add("nodewatch_test_temperature_celsius", {"a", "x"}, std::nan("")));
  EXPECT_TRUE(sink.add("nodewatch_test_temperature_celsius", {"a", "y"}, INFINITY));
  std::string text = sink.render();
  EXPECT_NE(text.find("sensor=\"y\"} +Inf"), std::string::npos) << text;
}

TEST(MetricSinkTest, CountsPartialErrors) {
  MetricSink sink(Table());
  sink.error("parse_error");
  sink.error("parse_error", 2);
  sink.error("read_error");
  EXPECT_EQ(sink.errors().at("parse_error"), 3u);
  EXPECT_EQ(sink.errors().at("read_error"), 1u);
}

const MetricTable& HistogramTable() {
  static const MetricTable t({
      {"nodewatch_test_latency_seconds",
       MetricType::kHistogram,
       "seconds",
       "Latency.",
       {"path"},
       {0.001, 0.01, 0.1}},
      {"nodewatch_test_up", MetricType::kGauge, "", "Up.", {}},
  });
  return t;
}

TEST(HistogramTest, ObservationsLandInTheirBucketsBoundsInclusive) {
  const std::vector<double> bounds = {0.001, 0.01, 0.1};
  Histogram h(bounds);
  for (double v : {0.0005, 0.001, 0.002, 0.01, 0.05, 0.1, 0.5, 7.0}) h.observe(v);
  h.observe(std::nan(""));  // ignored
  EXPECT_EQ(h.bucket_counts(), (std::vector<std::uint64_t>{2, 2, 2, 2}));
  EXPECT_EQ(h.count(), 8u);
  EXPECT_DOUBLE_EQ(h.sum(), 0.0005 + 0.001 + 0.002 + 0.01 + 0.05 + 0.1 + 0.5 + 7.0);
}

TEST(HistogramTest, ExponentialBuckets) {
  auto b = exponential_buckets(0.0001, 10, 4);
  ASSERT_EQ(b.size(), 4u);
  EXPECT_DOUBLE_EQ(b[0], 0.0001);
  EXPECT_DOUBLE_EQ(b[3], 0.1);
}

TEST(MetricTableTest, LintChecksHistograms) {
  MetricTable bad({
      {"nodewatch_test_a_seconds", MetricType::kHistogram, "seconds", "A.", {}, {}},
      {"nodewatch_test_b_seconds", MetricType::kHistogram, "seconds", "B.", {}, {0.1, 0.1}},
      {"nodewatch_test_c_total", MetricType::kHistogram, "", "C.", {}, {1}},
      {"nodewatch_test_d", MetricType::kGauge, "", "D.", {}, {1}},
      {"nodewatch_test_e_count", MetricType::kHistogram, "", "E.", {}, {1}},
  });
  auto problems = bad.lint("nodewatch_test_");
  std::string all;
  for (const auto& p : problems) all += p + "\n";
  EXPECT_NE(all.find("nodewatch_test_a_seconds: a histogram needs buckets"), std::string::npos);
  EXPECT_NE(all.find("nodewatch_test_b_seconds: histogram buckets must be finite and strictly"),
            std::string::npos);
  EXPECT_NE(all.find("nodewatch_test_c_total: only a counter may end in _total"),
            std::string::npos);
  EXPECT_NE(all.find("nodewatch_test_d: only a histogram has buckets"), std::string::npos);
  EXPECT_NE(all.find("nodewatch_test_e_count: a histogram name must not end in _count"),
            std::string::npos);
  testing::ExpectWellFormedTable(HistogramTable(), "nodewatch_test_");
}

TEST(MetricSinkTest, RendersHistogramsCumulativeWithInf) {
  const std::vector<double> bounds = {0.001, 0.01, 0.1};
  Histogram h(bounds);
  for (double v : {0.0005, 0.02, 0.03, 3.0}) h.observe(v);
  MetricSink sink(HistogramTable());
  EXPECT_TRUE(sink.add_histogram("nodewatch_test_latency_seconds", {"/data"}, h));
  EXPECT_TRUE(sink.add("nodewatch_test_up", {}, 1));
  testing::ExpectConformant(sink);
  const Histogram* got = sink.get_histogram("nodewatch_test_latency_seconds", {"/data"});
  ASSERT_NE(got, nullptr);
  EXPECT_EQ(got->count(), 4u);
  EXPECT_EQ(sink.render(),
            "# HELP nodewatch_test_latency_seconds Latency.\n"
            "# TYPE nodewatch_test_latency_seconds histogram\n"
            "nodewatch_test_latency_seconds_count{path=\"/data\"} 4\n"
            "nodewatch_test_latency_seconds_sum{path=\"/data\"} 3.0505\n"
            "nodewatch_test_latency_seconds_bucket{path=\"/data\",le=\"0.001\"} 1\n"
            "nodewatch_test_latency_seconds_bucket{path=\"/data\",le=\"0.01\"} 1\n"
            "nodewatch_test_latency_seconds_bucket{path=\"/data\",le=\"0.1\"} 3\n"
            "nodewatch_test_latency_seconds_bucket{path=\"/data\",le=\"+Inf\"} 4\n"
            "# HELP nodewatch_test_up Up.\n"
            "# TYPE nodewatch_test_up gauge\n"
            "nodewatch_test_up 1\n");
}

TEST(MetricSinkTest, RefusesMismatchedHistograms) {
  MetricSink sink(HistogramTable());
  const std::vector<double> other = {0.001, 0.01};
  Histogram wrong_bounds(other);
  EXPECT_FALSE(sink.add_histogram("nodewatch_test_latency_seconds", {"/a"}, wrong_bounds));
  EXPECT_FALSE(sink.add("nodewatch_test_latency_seconds", {"/a"}, 1));  // plain sample
  const std::vector<double> bounds = {0.001, 0.01, 0.1};
  Histogram h(bounds);
  EXPECT_FALSE(sink.add_histogram("nodewatch_test_up", {}, h));  // not a histogram
  EXPECT_TRUE(sink.add_histogram("nodewatch_test_latency_seconds", {"/a"}, h));
  EXPECT_FALSE(sink.add_histogram("nodewatch_test_latency_seconds", {"/a"}, h));  // duplicate
  EXPECT_EQ(sink.violations().size(), 4u);
  EXPECT_EQ(sink.sample_count(), 1u);
}

TEST(MetricSinkTest, EmptySinkRendersNothing) {
  EXPECT_EQ(MetricSink(Table()).render(), "");
}

TEST(Utf8Test, Validation) {
  EXPECT_TRUE(is_valid_utf8("plain ascii"));
  EXPECT_TRUE(is_valid_utf8("Grüße 温度 🚀"));
  EXPECT_FALSE(is_valid_utf8("\xc3"));              // truncated
  EXPECT_FALSE(is_valid_utf8("\xc0\xaf"));          // overlong
  EXPECT_FALSE(is_valid_utf8("\xed\xa0\x80"));      // surrogate
  EXPECT_FALSE(is_valid_utf8("\xf4\x90\x80\x80"));  // past U+10FFFF
  EXPECT_FALSE(is_valid_utf8("a\x80"));
}

TEST(ExpositionTest, GzipSegmentsConcatenateIntoOneValidStream) {
  std::string a, b;
  for (int i = 0; i < 2000; ++i)
    a += "metric_a{i=\"" + std::to_string(i) + "\"} " + std::to_string(i * 7) + "\n";
  for (int i = 0; i < 500; ++i) b += "metric_b " + std::to_string(i) + "\n";
  auto ra = make_rendered(a);
  auto rb = make_rendered(b);
  auto empty = make_rendered("");
  std::string tail = "process_open_fds 10\n";
  std::string gz = assemble_gzip({ra.get(), empty.get(), rb.get()}, tail);
  EXPECT_EQ(gunzip(gz), a + b + tail);
  EXPECT_LT(gz.size(), (a + b).size() / 3);  // it really compressed
  // Any subset, in any order, also forms a valid stream.
  EXPECT_EQ(gunzip(assemble_gzip({rb.get()}, "")), b);
  EXPECT_EQ(gunzip(assemble_gzip({}, tail)), tail);
  EXPECT_EQ(gunzip(assemble_gzip({rb.get(), ra.get()}, tail)), b + a + tail);
}

// The sink renders the text itself; prometheus-cpp's TextSerializer, which
// it replaced, is the reference: the same families, in the same order, must
// come out byte for byte the same, values and escapes included.
std::string Reference(const MetricTable& table, const std::vector<std::vector<std::string>>& labels,
                      const std::vector<int>& family, const std::vector<double>& values,
                      const std::vector<const Histogram*>& histograms) {
  std::vector<prometheus::MetricFamily> out;
  for (std::size_t f = 0; f < table.descs().size(); ++f) {
    const MetricDesc& d = table.descs()[f];
    prometheus::MetricFamily fam;
    fam.name = d.name;
    fam.help = d.help;
    fam.type = d.type == MetricType::kCounter ? prometheus::MetricType::Counter
               : d.type == MetricType::kGauge ? prometheus::MetricType::Gauge
                                              : prometheus::MetricType::Histogram;
    for (std::size_t i = 0; i < values.size(); ++i) {
      if (family[i] != static_cast<int>(f)) continue;
      prometheus::ClientMetric m;
      for (std::size_t l = 0; l < d.labels.size(); ++l)
        m.label.push_back({d.labels[l], labels[i][l]});
      if (d.type == MetricType::kCounter) m.counter.value = values[i];
      if (d.type == MetricType::kGauge) m.gauge.value = values[i];
      if (const Histogram* h = histograms[i]) {
        m.histogram.sample_count = h->count();
        m.histogram.sample_sum = h->sum();
        std::uint64_t cumulative = 0;
        for (std::size_t b = 0; b < h->upper_bounds().size(); ++b) {
          cumulative += h->bucket_counts()[b];
          m.histogram.bucket.push_back({cumulative, h->upper_bounds()[b]});
        }
      }
      fam.metric.push_back(std::move(m));
    }
    if (!fam.metric.empty()) out.push_back(std::move(fam));
  }
  std::ostringstream text;
  prometheus::TextSerializer().Serialize(text, out);
  return text.str();
}

TEST(MetricSinkTest, RendersWhatPrometheusCppRendersForTheSameFamilies) {
  const std::vector<double> bounds = {0.001, 0.25, 1, 7.5, 1e6};
  const MetricTable table({
      {"nodewatch_t_ops_total", MetricType::kCounter, "", "Operations.", {"device", "op"}},
      {"nodewatch_t_level", MetricType::kGauge, "", "A level.", {"x"}},
      {"nodewatch_t_plain", MetricType::kGauge, "", "No labels.", {}},
      {"nodewatch_t_wait_seconds", MetricType::kHistogram, "seconds", "Waits.", {"path"}, bounds},
      {"nodewatch_t_bare_seconds", MetricType::kHistogram, "seconds", "Bare.", {}, bounds},
  });
  // Values of every shape the text format has to write.
  const std::vector<double> special = {0,
                                       -0.0,
                                       1,
                                       -1,
                                       0.1,
                                       0.07,
                                       0.009,
                                       1.0 / 3,
                                       2.5e-7,
                                       1e-300,
                                       4.9e-324,
                                       999999999999999,
                                       1e15,
                                       1e15 + 1,
                                       9007199254740993.0,
                                       1e16,
                                       3.62e11,
                                       1.8446744073709552e19,
                                       std::numeric_limits<double>::max(),
                                       -123456.789,
                                       std::nan(""),
                                       INFINITY,
                                       -INFINITY};
  const std::vector<std::string> texts = {"",           "a",           "sda",       "nvme0n1",
                                          "say \"hi\"", "back\\slash", "new\nline", "Grüße 温度 🚀",
                                          "{}=,",       "trailing\\"};
  std::mt19937_64 rng(20261202);
  for (int round = 0; round < 40; ++round) {
    std::vector<std::vector<std::string>> labels;
    std::vector<int> family;
    std::vector<double> values;
    std::vector<std::unique_ptr<Histogram>> owned;
    std::vector<const Histogram*> histograms;
    MetricSink sink(table);
    std::set<std::pair<int, std::vector<std::string>>> used;
    for (int i = 0; i < 60; ++i) {
      const int f = static_cast<int>(rng() % table.descs().size());
      const MetricDesc& d = table.descs()[static_cast<std::size_t>(f)];
      std::vector<std::string> lv;
      for (std::size_t l = 0; l < d.labels.size(); ++l) lv.push_back(texts[rng() % texts.size()]);
      if (!used.insert({f, lv}).second) continue;
      double v = rng() % 3 == 0 ? special[rng() % special.size()]
                                : std::ldexp(static_cast<double>(rng() % 1000000),
                                             static_cast<int>(rng() % 80) - 40);
      if (d.type == MetricType::kCounter && !(v >= 0)) v = std::isnan(v) ? 0 : -v;
      const Histogram* hp = nullptr;
      if (d.type == MetricType::kHistogram) {
        owned.push_back(std::make_unique<Histogram>(bounds));
        for (int k = 0, n = static_cast<int>(rng() % 20); k < n; ++k)
          owned.back()->observe(special[rng() % (special.size() - 3)]);
        hp = owned.back().get();
      }
      std::vector<std::string_view> views(lv.begin(), lv.end());
      if (hp != nullptr) {
        ASSERT_EQ(views.size() <= 1, true);
        EXPECT_TRUE(views.empty() ? sink.add_histogram(d.name, {}, *hp)
                                  : sink.add_histogram(d.name, {views[0]}, *hp));
      } else {
        EXPECT_TRUE(sink.add(d.name, lv, v)) << d.name << " " << v;
      }
      labels.push_back(lv);
      family.push_back(f);
      values.push_back(v);
      histograms.push_back(hp);
    }
    // The reference keeps the order the samples were added within a family.
    EXPECT_EQ(sink.render(), Reference(table, labels, family, values, histograms))
        << "round " << round;
  }
}

TEST(MetricSinkTest, ACachedCollectionRendersAsAFreshOneAndForgetsVanishedSeries) {
  SeriesCache cache;
  auto collect = [&](const std::vector<std::pair<std::string, double>>& disks) {
    MetricSink sink(Table(), cache);
    for (const auto& [disk, bytes] : disks) {
      EXPECT_TRUE(sink.add("nodewatch_test_read_bytes_total", {disk}, bytes));
      EXPECT_TRUE(sink.add("nodewatch_test_device_info", {disk, "m \"1\""}, 1));
    }
    MetricSink fresh(Table());
    for (const auto& [disk, bytes] : disks) {
      fresh.add("nodewatch_test_read_bytes_total", {disk}, bytes);
      fresh.add("nodewatch_test_device_info", {disk, "m \"1\""}, 1);
    }
    EXPECT_EQ(sink.render(), fresh.render());
    EXPECT_TRUE(sink.violations().empty());
    return sink.render();
  };
  std::string first = collect({{"sda", 1}, {"sdb", 2}});
  EXPECT_EQ(cache.size(), 4u);
  // The same series again, new values: accepted (not duplicates of the last
  // collection's), rendered with the new values.
  std::string second = collect({{"sda", 10.5}, {"sdb", 20}});
  EXPECT_NE(second.find("{device=\"sda\"} 10.5\n"), std::string::npos) << second;
  EXPECT_EQ(second.find("} 1\n"
                        "nodewatch_test_read"),
            std::string::npos);
  // sdb is gone: its series are not rendered and no longer held.
  std::string third = collect({{"sda", 11}});
  EXPECT_EQ(third.find("sdb"), std::string::npos);
  EXPECT_EQ(cache.size(), 2u);
  // A series twice in one collection is still a duplicate.
  MetricSink sink(Table(), cache);
  EXPECT_TRUE(sink.add("nodewatch_test_read_bytes_total", {"sda"}, 1));
  EXPECT_FALSE(sink.add("nodewatch_test_read_bytes_total", {"sda"}, 2));
  // And a cache is lent to one sink at a time.
  EXPECT_THROW(MetricSink(Table(), cache), std::logic_error);
}

TEST(MetricSinkTest, LabelValuesThatRunTogetherAreDifferentSeries) {
  MetricSink sink(Table());
  using namespace std::string_literals;
  EXPECT_TRUE(sink.add("nodewatch_test_device_info", {"a"s + '\0', "b"}, 1));
  EXPECT_TRUE(sink.add("nodewatch_test_device_info", {"a", '\0' + "b"s}, 1));
  EXPECT_TRUE(sink.violations().empty());
}

TEST(ExpositionTest, ASegmentIsDeflatedOnceWhoeverAsksFirst) {
  std::string text;
  for (int i = 0; i < 3000; ++i) text += "m{i=\"" + std::to_string(i) + "\"} 1\n";
  auto r = make_rendered(text);
  EXPECT_FALSE(r->is_deflated());
  std::vector<const std::string*> seen(4);
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < seen.size(); ++t)
    threads.emplace_back([&, t] { seen[t] = &r->deflated(); });
  for (auto& t : threads) t.join();
  EXPECT_TRUE(r->is_deflated());
  for (const std::string* s : seen) EXPECT_EQ(s, seen[0]);
  EXPECT_EQ(gunzip(assemble_gzip({r.get()}, "")), text);
  auto d = make_deflated("x 1\n");
  EXPECT_TRUE(d->is_deflated());
}

TEST(ExpositionTest, CorruptGzipIsRejected) {
  auto r = make_rendered("hello\n");
  std::string gz = assemble_gzip({r.get()}, "x\n");
  std::string bad = gz;
  bad[bad.size() - 6] ^= 0x01;  // CRC
  EXPECT_THROW(gunzip(bad), std::runtime_error);
  EXPECT_THROW(gunzip(gz.substr(0, gz.size() - 3)), std::runtime_error);
}

}  // namespace
}  // namespace nodewatch
