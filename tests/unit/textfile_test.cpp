// The textfile collector: the strict text-format parser (each malformation
// refused with its line), the canonical rendering, and the collector over a
// real directory (files taken whole or refused whole, merged across files,
// conflicts, reserved names, a FIFO, an oversized file, a missing
// directory), with promtool checking what it renders.

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "config.hpp"
#include "support/collector_test.hpp"
#include "support/daemon_process.hpp"
#include "textfile/textfile_collector.hpp"
#include "textfile/textfile_parse.hpp"

namespace nodewatch::textfile {
namespace {

using nodewatch::testing::CollectOnce;
using nodewatch::testing::TempDir;
using nodewatch::testing::Value;

std::string ParseError(std::string_view text) {
  ParseResult r = parse(text);
  EXPECT_FALSE(r.ok()) << "accepted: " << text;
  return r.error;
}

TEST(TextfileParse, EveryTypeRoundTripsToCanonicalText) {
  const std::string text =
      "# A comment.\n"
      "# HELP burnin_allreduce_bus_bandwidth_bytes_per_second NCCL all-reduce bus bandwidth.\n"
      "# TYPE burnin_allreduce_bus_bandwidth_bytes_per_second gauge\n"
      "burnin_allreduce_bus_bandwidth_bytes_per_second{size=\"8GiB\"} 3.6e+11\n"
      "\n"
      "# TYPE burnin_runs_total counter\n"
      "burnin_runs_total{result=\"pass\"}   12\n"
      "burnin_runs_total{result=\"fail\",} 0\n"
      "burnin_note{text=\"say \\\"hi\\\"\\\\ \\n\"} 1\n"
      "# HELP burnin_step_seconds Step time.\\nSecond line \\\\ done.\n"
      "# TYPE burnin_step_seconds histogram\n"
      "burnin_step_seconds_bucket{le=\"0.5\"} 3\n"
      "burnin_step_seconds_bucket{le=\"+Inf\"} 4\n"
      "burnin_step_seconds_sum 1.75\n"
      "burnin_step_seconds_count 4\n"
      "# TYPE burnin_latency_seconds summary\n"
      "burnin_latency_seconds{quantile=\"0.99\"} NaN\n"
      "burnin_latency_seconds_sum +Inf\n"
      "burnin_latency_seconds_count 0\n"
      "burnin_temperature_delta_celsius -2.5\r\n";
  ParseResult r = parse(text);
  ASSERT_TRUE(r.ok()) << r.error;
  ASSERT_EQ(r.families.size(), 6u);
  EXPECT_EQ(r.families[1].type, FamilyType::kCounter);
  EXPECT_EQ(r.families[2].type, FamilyType::kUntyped);
  EXPECT_EQ(r.families[2].samples[0].labels[0].second, "say \"hi\"\\ \n");
  EXPECT_EQ(r.families[3].help, "Step time.\nSecond line \\ done.");
  EXPECT_EQ(render(r.families),
            "# HELP burnin_allreduce_bus_bandwidth_bytes_per_second NCCL all-reduce bus "
            "bandwidth.\n"
            "# TYPE burnin_allreduce_bus_bandwidth_bytes_per_second gauge\n"
            "burnin_allreduce_bus_bandwidth_bytes_per_second{size=\"8GiB\"} 3.6e+11\n"
            "# TYPE burnin_runs_total counter\n"
            "burnin_runs_total{result=\"pass\"} 12\n"
            "burnin_runs_total{result=\"fail\"} 0\n"
            "# TYPE burnin_note untyped\n"
            "burnin_note{text=\"say \\\"hi\\\"\\\\ \\n\"} 1\n"
            "# HELP burnin_step_seconds Step time.\\nSecond line \\\\ done.\n"
            "# TYPE burnin_step_seconds histogram\n"
            "burnin_step_seconds_bucket{le=\"0.5\"} 3\n"
            "burnin_step_seconds_bucket{le=\"+Inf\"} 4\n"
            "burnin_step_seconds_sum 1.75\n"
            "burnin_step_seconds_count 4\n"
            "# TYPE burnin_latency_seconds summary\n"
            "burnin_latency_seconds{quantile=\"0.99\"} NaN\n"
            "burnin_latency_seconds_sum +Inf\n"
            "burnin_latency_seconds_count 0\n"
            "# TYPE burnin_temperature_delta_celsius untyped\n"
            "burnin_temperature_delta_celsius -2.5\n");
}

TEST(TextfileParse, EmptyAndCommentOnlyFilesAreValid) {
  EXPECT_TRUE(parse("").ok());
  ParseResult r = parse("# nothing yet\n# TYPE x gauge\n");
  EXPECT_TRUE(r.ok());
  EXPECT_TRUE(r.families.empty());  // a family without samples is dropped
}

TEST(TextfileParse, RefusesEachMalformation) {
  EXPECT_EQ(ParseError("a 1\nb 2"),
            "line 2: the last line does not end with a newline (a file still being written?)");
  EXPECT_EQ(ParseError("a 1 1700000000000\n"), "line 1: timestamps are not accepted in a textfile");
  EXPECT_EQ(ParseError("1a 1\n"), "line 1: invalid metric name");
  EXPECT_EQ(ParseError("a{1b=\"x\"} 1\n"), "line 1: invalid label name");
  EXPECT_EQ(ParseError("a{__name__=\"x\"} 1\n"), "line 1: invalid label name");
  EXPECT_EQ(ParseError("a{b=\"x\",b=\"y\"} 1\n"), "line 1: label b given twice");
  EXPECT_EQ(ParseError("a{b=\"\\t\"} 1\n"), "line 1: bad escape in the value of label b");
  EXPECT_EQ(ParseError("a{b=\"x} 1\n"), "line 1: unterminated value of label b");
  EXPECT_EQ(ParseError("a{b=\"\xff\"} 1\n"), "line 1: label b is not valid UTF-8");
  EXPECT_EQ(ParseError("a{b=x} 1\n"), "line 1: expected '\"' for label b");
  EXPECT_EQ(ParseError("a one\n"), "line 1: invalid value");
  EXPECT_EQ(ParseError("a 1\nb 1\na 2\n"), "line 3: family a appears in two separate blocks");
  EXPECT_EQ(ParseError("a 1\n# TYPE a gauge\n"), "line 2: TYPE of a after its samples");
  EXPECT_EQ(ParseError("# TYPE a gauge\n# TYPE a counter\n"), "line 2: second TYPE for a");
  EXPECT_EQ(ParseError("# HELP a x\n# HELP a y\n"), "line 2: second HELP for a");
  EXPECT_EQ(ParseError("# TYPE a gauges\n"),
            "line 1: unknown type (counter, gauge, histogram, summary or untyped)");
  EXPECT_EQ(ParseError("a{b=\"1\"} 1\na{b=\"1\"} 2\n"), "line 2: duplicate series a");
  EXPECT_EQ(ParseError("# TYPE h histogram\nh_bucket 1\n"),
            "line 2: histogram bucket h_bucket without a valid le label");
  EXPECT_EQ(ParseError("# TYPE h histogram\nh 1\n"), "line 2: h is not a sample of histogram h");
  EXPECT_EQ(ParseError("# TYPE s summary\ns 1\n"), "line 2: summary sample s without quantile");
  EXPECT_EQ(ParseError("# TYPE c counter\nc -1\n"), "line 2: counter c is negative or NaN");
  // Histograms as histogram_quantile reads them: a +Inf bucket per series,
  // cumulative counts, _count equal to +Inf.
  EXPECT_EQ(ParseError("# TYPE h histogram\nh_bucket{le=\"1\"} 3\nh_sum 1\nh_count 3\n"),
            "histogram h has a series without its le=\"+Inf\" bucket");
  EXPECT_EQ(
      ParseError("# TYPE h histogram\nh_bucket{le=\"0.5\"} 5\nh_bucket{le=\"1\"} 3\n"
                 "h_bucket{le=\"+Inf\"} 6\n"),
      "histogram h: the bucket le=\"1\" counts fewer than le=\"0.5\" (buckets are cumulative)");
  EXPECT_EQ(ParseError("# TYPE h histogram\nh_bucket{le=\"+Inf\"} 6\nh_count 7\n"),
            "histogram h: _count differs from its le=\"+Inf\" bucket");
  EXPECT_EQ(
      ParseError("# TYPE h histogram\nh_bucket{le=\"+Inf\"} NaN\nh_bucket{le=\"1\"} 1\n"),
      "histogram h: the bucket le=\"+Inf\" counts fewer than le=\"1\" (buckets are cumulative)");
  // Each series on its own; in any order in the file.
  EXPECT_TRUE(
      parse("# TYPE h histogram\nh_bucket{x=\"a\",le=\"+Inf\"} 2\nh_bucket{x=\"b\",le=\"1\"} 9\n"
            "h_bucket{x=\"a\",le=\"1\"} 1\nh_bucket{x=\"b\",le=\"+Inf\"} 9\nh_count{x=\"b\"} 9\n")
          .ok());
}

TEST(TextfileParse, SameSeriesWithLabelsInAnotherOrderIsADuplicate) {
  EXPECT_EQ(ParseError("a{x=\"1\",y=\"2\"} 1\na{y=\"2\",x=\"1\"} 1\n"),
            "line 2: duplicate series a");
}

// A collector over a directory of this test's.
struct Dir {
  TempDir dir;
  TextfileOptions options() const {
    TextfileOptions o;
    o.directory = dir.path().string();
    return o;
  }
};

double Get(const MetricSink& sink, const std::string& name, const std::string& file) {
  return Value(sink, name, {file});
}

std::uint64_t Errors(const MetricSink& sink, const std::string& reason) {
  auto it = sink.errors().find(reason);
  return it == sink.errors().end() ? 0 : it->second;
}

TEST(TextfileCollector, TableIsWellFormed) {
  TextfileCollector c({});
  nodewatch::testing::ExpectWellFormedTable(c.metrics(), "nodewatch_textfile_");
}

TEST(TextfileCollector, TakesValidFilesWholeAndRefusesMalformedOnesWhole) {
  Dir d;
  d.dir.write("burnin.prom",
              "# HELP burnin_result 1 if the burn-in step passed.\n"
              "# TYPE burnin_result gauge\n"
              "burnin_result{step=\"nccl\"} 1\n"
              "burnin_result{step=\"hbm\"} 0\n");
  // Valid first line, malformed second: nothing of it may appear.
  d.dir.write("broken.prom", "broken_first 1\nbroken_second{ 2\n");
  d.dir.write("ignored.txt", "not_a_prom_file 1\n");
  TextfileCollector c(d.options());
  MetricSink sink(c.metrics());
  CollectOnce(c, sink);
  const std::string text = sink.render();
  EXPECT_NE(text.find("burnin_result{step=\"nccl\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("burnin_result{step=\"hbm\"} 0\n"), std::string::npos);
  EXPECT_EQ(text.find("broken_first"), std::string::npos) << text;
  EXPECT_EQ(text.find("not_a_prom_file"), std::string::npos);
  EXPECT_EQ(Get(sink, "nodewatch_textfile_file_valid", "burnin.prom"), 1);
  EXPECT_EQ(Get(sink, "nodewatch_textfile_file_valid", "broken.prom"), 0);
  EXPECT_EQ(Errors(sink, "parse_error"), 1u);
  struct stat st {};
  ASSERT_EQ(stat((d.dir.path() / "burnin.prom").c_str(), &st), 0);
  EXPECT_DOUBLE_EQ(Get(sink, "nodewatch_textfile_file_mtime_seconds", "burnin.prom"),
                   st.st_mtim.tv_sec + st.st_mtim.tv_nsec / 1e9);
  // 2 burn-in samples + 2 mtimes + 2 valid.
  EXPECT_EQ(sink.sample_count(), 6u);

  // Fixed in place: taken on the next collection.
  d.dir.write("broken.prom", "broken_first 1\nbroken_second 2\n");
  MetricSink again(c.metrics());
  CollectOnce(c, again);
  EXPECT_EQ(Get(again, "nodewatch_textfile_file_valid", "broken.prom"), 1);
  EXPECT_NE(again.render().find("broken_second 2\n"), std::string::npos);
}

TEST(TextfileCollector, MergesAFamilyAcrossFilesAndRefusesConflicts) {
  Dir d;
  d.dir.write("gpu0.prom", "# TYPE burnin_gpu_pass gauge\nburnin_gpu_pass{gpu=\"0\"} 1\n");
  d.dir.write("gpu1.prom",
              "# HELP burnin_gpu_pass Pass.\n# TYPE burnin_gpu_pass gauge\n"
              "burnin_gpu_pass{gpu=\"1\"} 0\n");
  d.dir.write("gpu2.prom", "# TYPE burnin_gpu_pass counter\nburnin_gpu_pass{gpu=\"2\"} 1\n");
  d.dir.write("gpu3.prom", "burnin_other 1\nburnin_gpu_pass{gpu=\"0\"} 1\n");
  TextfileCollector c(d.options());
  MetricSink sink(c.metrics());
  CollectOnce(c, sink);
  const std::string text = sink.render();
  // One block, HELP from the file that had one, both series.
  EXPECT_NE(text.find("# HELP burnin_gpu_pass Pass.\n# TYPE burnin_gpu_pass gauge\n"
                      "burnin_gpu_pass{gpu=\"0\"} 1\nburnin_gpu_pass{gpu=\"1\"} 0\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(Get(sink, "nodewatch_textfile_file_valid", "gpu2.prom"), 0);  // other type
  EXPECT_EQ(Get(sink, "nodewatch_textfile_file_valid", "gpu3.prom"), 0);  // repeated series
  EXPECT_EQ(text.find("burnin_other"), std::string::npos);                // refused whole
  EXPECT_EQ(Errors(sink, "conflict"), 2u);
}

TEST(TextfileCollector, RefusesNamesNodewatchExports) {
  Dir d;
  d.dir.write("fake.prom", "nodewatch_accelerator_up{accelerator=\"0\"} 1\n");
  d.dir.write("proc.prom", "process_open_fds 3\n");
  TextfileCollector c(d.options());
  MetricSink sink(c.metrics());
  CollectOnce(c, sink);
  EXPECT_EQ(Errors(sink, "reserved_name"), 2u);
  EXPECT_EQ(sink.render().find("nodewatch_accelerator_up"), std::string::npos);
}

TEST(TextfileCollector, AFifoDoesNotBlockAndIsRefused) {
  Dir d;
  ASSERT_EQ(mkfifo((d.dir.path() / "pipe.prom").c_str(), 0600), 0);
  d.dir.write("ok.prom", "ok_metric 1\n");
  TextfileCollector c(d.options());
  MetricSink sink(c.metrics());
  CollectOnce(c, sink);  // would hang here if the FIFO were opened for a blocking read
  EXPECT_EQ(Errors(sink, "not_regular_file"), 1u);
  EXPECT_EQ(Get(sink, "nodewatch_textfile_file_valid", "pipe.prom"), 0);
  EXPECT_EQ(Get(sink, "nodewatch_textfile_file_valid", "ok.prom"), 1);
}

TEST(TextfileCollector, OversizedFileAndTooManyFiles) {
  Dir d;
  d.dir.write("a.prom", "a 1\n");
  d.dir.write("b.prom", std::string(100, '#') + "\n");
  d.dir.write("c.prom", "c 1\n");
  TextfileOptions o = d.options();
  o.max_file_bytes = 50;
  o.max_files = 2;
  TextfileCollector c(o);
  MetricSink sink(c.metrics());
  CollectOnce(c, sink);
  EXPECT_EQ(Errors(sink, "too_large"), 1u);
  EXPECT_EQ(Errors(sink, "too_many_files"), 1u);
  EXPECT_EQ(Get(sink, "nodewatch_textfile_file_valid", "a.prom"), 1);
  double v = 0;
  EXPECT_FALSE(sink.get("nodewatch_textfile_file_valid", {"c.prom"}, &v));  // past max_files
}

TEST(TextfileCollector, TotalBudgetRefusesLaterFiles) {
  Dir d;
  d.dir.write("a.prom", "a_metric 1\n");         // 11 bytes
  d.dir.write("b.prom", "b_metric_longer 1\n");  // 18 bytes: 29 > 20
  d.dir.write("c.prom", "c 1\n");                // 4 bytes: 15 <= 20
  TextfileOptions o = d.options();
  o.max_total_bytes = 20;
  TextfileCollector c(o);
  MetricSink sink(c.metrics());
  CollectOnce(c, sink);
  EXPECT_EQ(Errors(sink, "budget"), 1u);
  EXPECT_EQ(Get(sink, "nodewatch_textfile_file_valid", "a.prom"), 1);
  EXPECT_EQ(Get(sink, "nodewatch_textfile_file_valid", "b.prom"), 0);
  EXPECT_EQ(Get(sink, "nodewatch_textfile_file_valid", "c.prom"), 1);
  EXPECT_EQ(sink.render().find("b_metric_longer"), std::string::npos);
}

TEST(TextfileParse, LabelValuesWithNulDoNotCollide) {
  // {a="x\0b\0y"} and {a="x",b="y"} are different series.
  std::string text = "m{a=\"x";
  text += '\0';
  text += "b";
  text += '\0';
  text += "y\"} 1\nm{a=\"x\",b=\"y\"} 2\n";
  ParseResult r = parse(text);
  EXPECT_TRUE(r.ok()) << r.error;
}

int OpenFds() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

// The detail counted for (reason, subject), or "<none>".
std::string Failure(const MetricSink& sink, const std::string& reason, const std::string& subject) {
  auto it = sink.failures().find({reason, subject});
  return it == sink.failures().end() ? "<none>" : it->second;
}

// Errnos on files between two collections: each file that cannot be read
// is refused whole and counted with its name, the others are taken, and
// all of them are taken again once the faults stop. Nothing is held open
// but the helper's two descriptors.
TEST(TextfileCollector, ErrnosBetweenCollections) {
  Dir d;
  for (const char* f : {"a", "b", "c", "d", "e"})
    d.dir.write(std::string(f) + ".prom", std::string("burnin_") + f + " 1\n");
  auto faults = std::make_shared<sources::Faults>();
  TextfileCollector c(d.options(), faults);
  MetricSink first(c.metrics());
  CollectOnce(c, first);
  ASSERT_TRUE(first.errors().empty());
  // From here on: the collector's helper is running (its socket and pidfd
  // are this process's), and no collection leaves a descriptor behind.
  const int fds = OpenFds();

  faults->inject("/a.prom", EACCES);
  faults->inject("/b.prom", EIO);
  faults->inject("/c.prom", ENODEV);  // a FUSE or NFS server gone
  faults->inject("/d.prom", ENOENT);  // removed between the listing and the read
  MetricSink s(c.metrics());
  CollectOnce(c, s);
  EXPECT_EQ(Failure(s, "read_error", "a.prom"), "cannot read: Permission denied");
  EXPECT_EQ(Failure(s, "read_error", "b.prom"), "cannot read: Input/output error");
  EXPECT_EQ(Failure(s, "read_error", "c.prom"), "cannot read: No such device");
  EXPECT_EQ(Failure(s, "read_error", "d.prom"), "cannot read: No such file or directory");
  EXPECT_EQ(s.failures().size(), 4u);
  EXPECT_EQ(Errors(s, "read_error"), 4u);
  for (const char* f : {"a.prom", "b.prom", "c.prom", "d.prom"}) {
    EXPECT_EQ(Get(s, "nodewatch_textfile_file_valid", f), 0) << f;
    double v = 0;
    EXPECT_FALSE(s.get("nodewatch_textfile_file_mtime_seconds", {f}, &v)) << f;  // never opened
  }
  const std::string text = s.render();
  EXPECT_EQ(text.find("burnin_a"), std::string::npos);
  EXPECT_NE(text.find("burnin_e 1\n"), std::string::npos);
  EXPECT_EQ(Get(s, "nodewatch_textfile_file_valid", "e.prom"), 1);

  faults->clear();
  MetricSink back(c.metrics());
  CollectOnce(c, back);
  EXPECT_TRUE(back.errors().empty());
  EXPECT_EQ(back.render(), first.render());
  EXPECT_EQ(OpenFds(), fds);
}

// A file removed during a collection (after the listing, while an earlier
// file is read), a directory that cannot be listed, and refusals for
// their content: each counted with what it concerns.
TEST(TextfileCollector, FailuresDuringACollectionNameTheirFile) {
  Dir d;
  d.dir.write("a.prom", "burnin_a 1\n");
  d.dir.write("b.prom", "burnin_b 1\n");
  d.dir.write("c.prom", "burnin_c{ 1\n");
  auto faults = std::make_shared<sources::Faults>();
  TextfileCollector c(d.options(), faults);
  faults->on_read("/a.prom", [&] { std::filesystem::remove(d.dir.path() / "b.prom"); });
  MetricSink s(c.metrics());
  CollectOnce(c, s);
  EXPECT_EQ(Failure(s, "read_error", "b.prom"), "cannot read: No such file or directory");
  EXPECT_NE(Failure(s, "parse_error", "c.prom").find("line 1"), std::string::npos);
  EXPECT_EQ(Get(s, "nodewatch_textfile_file_valid", "a.prom"), 1);
  EXPECT_EQ(Get(s, "nodewatch_textfile_file_valid", "b.prom"), 0);

  faults->inject(d.dir.path().string(), EACCES, 1);
  MetricSink denied(c.metrics());
  CollectOnce(c, denied);
  EXPECT_EQ(Failure(denied, "read_error", d.dir.path().string()), "cannot list: Permission denied");
  EXPECT_EQ(denied.sample_count(), 0u);

  TextfileOptions o = d.options();
  o.max_files = 1;
  TextfileCollector few(o);
  MetricSink many(few.metrics());
  CollectOnce(few, many);
  EXPECT_EQ(Failure(many, "too_many_files", "c.prom"), "past max_files (1) in name order");
  EXPECT_EQ(Errors(many, "too_many_files"), 1u);
}

TEST(TextfileCollector, MissingDirectory) {
  TextfileCollector quiet({});  // the default directory, absent on a node without inputs
  if (std::filesystem::exists(std::string(kDefaultDirectory)))
    GTEST_SKIP() << kDefaultDirectory << " exists on this machine";
  MetricSink a(quiet.metrics());
  CollectOnce(quiet, a);
  EXPECT_TRUE(a.errors().empty());
  EXPECT_EQ(a.sample_count(), 0u);

  TextfileOptions o;
  o.directory = "/nonexistent/textfile";
  TextfileCollector configured(o);
  MetricSink b(configured.metrics());
  CollectOnce(configured, b);
  EXPECT_EQ(Errors(b, "read_error"), 1u);
}

// mountinfo lines in the kernel's layout (proc(5)): ID PARENT MAJ:MIN ROOT
// MOUNT-POINT OPTIONS [OPTIONAL...] - TYPE SOURCE SUPER-OPTIONS.
constexpr std::string_view kMountinfo =
    "22 1 252:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw\n"
    "23 22 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw\n"
    "40 22 0:35 / /var/lib rw,relatime shared:20 - xfs /dev/nvme0n1p2 rw,attr2\n"
    "41 40 0:36 / /var/lib/nodewatch/net rw,relatime shared:21 - nfs4 "
    "10.0.0.5:/export rw,vers=4.1\n"
    "42 22 0:37 / /mnt/with\\040space rw,relatime shared:22 - tmpfs tmpfs rw\n"
    "43 22 0:38 / /mnt/fuse rw,nosuid shared:23 - fuse.sshfs host:/ rw\n"
    "44 22 0:39 / /mnt/auto rw shared:24 master:3 - autofs systemd-1 rw\n";

TEST(TextfileCollector, OnlyPathsUnderLocalMountsCountAsLocal) {
  EXPECT_TRUE(on_local_mounts(kMountinfo, "/var/lib/nodewatch/textfile"));
  EXPECT_TRUE(on_local_mounts(kMountinfo, "/var/lib/nodewatch/network"));  // not under .../net
  EXPECT_FALSE(on_local_mounts(kMountinfo, "/var/lib/nodewatch/net"));
  EXPECT_FALSE(on_local_mounts(kMountinfo, "/var/lib/nodewatch/net/textfile"));
  EXPECT_TRUE(on_local_mounts(kMountinfo, "/mnt/with space/textfile"));  // \040 read back
  EXPECT_FALSE(on_local_mounts(kMountinfo, "/mnt/fuse/textfile"));
  EXPECT_FALSE(on_local_mounts(kMountinfo, "/mnt/auto"));
  // A stack of two mounts on one point: both must be local.
  std::string stacked = std::string(kMountinfo) +
                        "45 40 0:40 / /var/lib rw shared:25 - nfs 10.0.0.6:/lib rw,vers=3\n";
  EXPECT_FALSE(on_local_mounts(stacked, "/var/lib/nodewatch/textfile"));
  // No mount at all for the path, or a line that cannot be read: not local.
  EXPECT_FALSE(on_local_mounts("", "/var/lib/nodewatch/textfile"));
  EXPECT_FALSE(on_local_mounts("22 1 252:1 / / rw\n", "/var"));
}

// The directory of `d` is under local mounts of this machine; else the
// test says so.
bool UnderLocalMounts(const Dir& d) {
  std::ifstream in("/proc/self/mountinfo");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return on_local_mounts(text, d.dir.path().string());
}

TEST(TextfileCollector, ALocalDirectoryIsReadInTheDaemonWithoutAHelper) {
  Dir d;
  if (!UnderLocalMounts(d)) GTEST_SKIP() << d.dir.path() << " is not on a local file system here";
  d.dir.write("burnin.prom", "burnin_result{step=\"nccl\"} 1\n");
  d.dir.write("fifo.prom", "");
  std::filesystem::remove(d.dir.path() / "fifo.prom");
  ASSERT_EQ(::mkfifo((d.dir.path() / "fifo.prom").c_str(), 0600), 0);
  TextfileCollector c(d.options());
  MetricSink sink(c.metrics());
  CollectOnce(c, sink);
  EXPECT_TRUE(c.read_in_process());
  EXPECT_EQ(c.helper_pid(), 0);
  EXPECT_NE(sink.render().find("burnin_result{step=\"nccl\"} 1\n"), std::string::npos);
  EXPECT_EQ(Get(sink, "nodewatch_textfile_file_valid", "fifo.prom"), 0);  // not regular
  EXPECT_EQ(Errors(sink, "not_regular_file"), 1u);
}

// Anyone who may write the directory can put a link in it; the daemon may
// run as root. A link is never followed, wherever it leads: out of the
// directory (a file only root may read would be served on /metrics), or to
// a file of the same directory (that file is read under its own name). Each
// is refused and counted as not a regular file, and what is logged says
// what was wrong, never what the file holds. An operator's link to the
// directory itself is followed (it is the configured path).
TEST(TextfileCollector, LinksInTheDirectoryAreNotFollowed) {
  Dir d;
  TempDir elsewhere;
  const std::string secret = "root:$6$salt$hash:19000:0:99999:7:::\n";
  elsewhere.write("shadow", secret);
  elsewhere.write("secret.prom", "secret_value 42\n");
  ::chmod((elsewhere.path() / "shadow").c_str(), 0600);
  d.dir.write("plain.prom", "plain_value 1\n");
  std::filesystem::create_symlink(elsewhere.path() / "secret.prom", d.dir.path() / "out.prom");
  std::filesystem::create_symlink(elsewhere.path() / "shadow", d.dir.path() / "shadow.prom");
  std::filesystem::create_symlink("plain.prom", d.dir.path() / "same.prom");
  // A link to the directory itself: the configured path, followed.
  TempDir links;
  std::filesystem::create_symlink(d.dir.path(), links.path() / "textfile");
  TextfileOptions through_link;
  through_link.directory = (links.path() / "textfile").string();
  struct Way {
    const char* name;
    TextfileOptions options;
    std::shared_ptr<sources::Faults> faults;  // any: the helper reads
  };
  const std::vector<Way> ways = {
      {"in the daemon where it may", d.options(), nullptr},
      {"by the helper", d.options(), std::make_shared<sources::Faults>()},
      {"through a linked directory", through_link, nullptr},
  };
  for (const Way& w : ways) {
    SCOPED_TRACE(w.name);
    TextfileCollector c(w.options, w.faults);
    MetricSink sink(c.metrics());
    CollectOnce(c, sink);
    const std::string text = sink.render();
    EXPECT_NE(text.find("plain_value 1\n"), std::string::npos) << text;
    EXPECT_EQ(text.find("secret_value"), std::string::npos) << text;
    EXPECT_EQ(text.find("19000"), std::string::npos) << text;
    EXPECT_EQ(Errors(sink, "not_regular_file"), 3u);
    for (const char* f : {"out.prom", "shadow.prom", "same.prom"}) {
      EXPECT_EQ(Get(sink, "nodewatch_textfile_file_valid", f), 0) << f;
      EXPECT_EQ(Failure(sink, "not_regular_file", f), "a symbolic link (not followed)") << f;
    }
    EXPECT_EQ(Get(sink, "nodewatch_textfile_file_valid", "plain.prom"), 1);
    EXPECT_EQ(sink.failures().size(), 3u);
  }
}

// A refused file's content stays out of the log: the detail says which
// line and what was wrong, never the bytes found there; the file's name is
// logged escaped (it may hold a newline or a terminal's escape sequence).
TEST(TextfileCollector, ARefusedFileIsLoggedWithoutItsContent) {
  Dir d;
  const std::string bad = "evil\n\x1b[2Jname.prom";
  d.dir.write("shadow.prom", "root:$6$salt$hash:19000:0:99999:7:::\n");
  d.dir.write("labels.prom", "metric{pa$$word=\"x\"} 1\n");
  d.dir.write("type.prom", "# TYPE metric s3cr3t\n");
  d.dir.write(bad, "broken{ 1\n");
  TextfileCollector c(d.options());
  MetricSink sink(c.metrics());
  CollectOnce(c, sink);
  ASSERT_EQ(Errors(sink, "parse_error"), 4u);
  for (const auto& [key, detail] : sink.failures()) {
    SCOPED_TRACE(key.second);
    EXPECT_EQ(detail.rfind("line 1: ", 0), 0u) << detail;
    for (const char* content : {"$6$", "19000", "pa$$word", "s3cr3t", "salt"})
      EXPECT_EQ(detail.find(content), std::string::npos) << detail;
    for (char ch : key.second) EXPECT_GE(static_cast<unsigned char>(ch), 0x20) << key.second;
  }
  EXPECT_NE(Failure(sink, "parse_error", "evil\\n\\x1b[2Jname.prom"), "<none>");
  EXPECT_EQ(Get(sink, "nodewatch_textfile_file_valid", bad), 0);  // the label: the name itself
}

TEST(TextfileCollector, RelativeDirectoryIsAConfigurationError) {
  std::vector<CollectorSpec> catalog = {textfile_collector_spec()};
  ConfigResult r =
      parse_config("[collectors.textfile]\ndirectory = \"var/lib\"\n", "t.toml", catalog);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].key, "collectors.textfile.directory");
  EXPECT_EQ(r.errors[0].message, "must be an absolute path");
}

TEST(TextfileCollector, RenderPassesPromtool) {
  if (std::system("command -v promtool >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "promtool not installed (packaging/install-deps.sh --test installs it)";
  Dir d;
  d.dir.write(
      "burnin.prom",
      "# HELP burnin_step_seconds Step time.\n# TYPE burnin_step_seconds histogram\n"
      "burnin_step_seconds_bucket{le=\"0.5\"} 3\nburnin_step_seconds_bucket{le=\"+Inf\"} 4\n"
      "burnin_step_seconds_sum 1.75\nburnin_step_seconds_count 4\n"
      "# HELP burnin_runs_total Runs.\n# TYPE burnin_runs_total counter\n"
      "burnin_runs_total 3\n");
  TextfileCollector c(d.options());
  MetricSink sink(c.metrics());
  CollectOnce(c, sink);
  const auto out = d.dir.write("out.txt", sink.render());
  const std::string cmd = "promtool check metrics < " + out.string() + " > " +
                          (d.dir.path() / "promtool.log").string() + " 2>&1";
  EXPECT_EQ(std::system(cmd.c_str()), 0)
      << nodewatch::testing::ReadFile(d.dir.path() / "promtool.log") << sink.render();
}

}  // namespace
}  // namespace nodewatch::textfile
