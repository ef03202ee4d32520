// Tests of the storage collector's block-device part: the /proc/diskstats
// parser with real lines, wrap accumulation, device selection, sysfs facts,
// the configuration options and the failure contract.

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>  // before support/collector_test.hpp, which uses std::nan without it
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "config.hpp"
#include "nodewatch/services.hpp"
#include "nodewatch/sources/fs.hpp"
#include "nodewatch/sources/name_filter.hpp"
#include "nodewatch/sources/wrap_counter.hpp"
#include "nodewatch/text.hpp"
#include "storage/diskstats.hpp"
#include "storage/storage_collector.hpp"
#include "support/collector_test.hpp"
#include "support/daemon_process.hpp"

namespace nodewatch::storage {
namespace {

using nodewatch::testing::CollectOnce;
using nodewatch::testing::ExpectConformant;
using nodewatch::testing::ExpectWellFormedTable;
using nodewatch::testing::TempDir;
using nodewatch::testing::Value;

constexpr std::uint64_t kTwoPow32 = std::uint64_t{1} << 32;

// Lines from the kernel's Documentation/admin-guide/iostats.rst.
constexpr std::string_view kIostats20 =
    " 259       0 nvme0n1 255999 814 12369153 47919 996852 81 36123024 425995 0 301795 580470 0 0 "
    "0 0 60602 106555";
constexpr std::string_view kIostats18 =
    "   3    0   hda 446216 784926 9550688 4382310 424847 312726 5922052 19310380 0 3376340 "
    "23705160 0 0 0 0";
constexpr std::string_view kIostats14 =
    "   3    0   hda 446216 784926 9550688 4382310 424847 312726 5922052 19310380 0 3376340 "
    "23705160";

Roots fixture_roots() {
  std::filesystem::path base = nodewatch::testing::fixtures_dir() / "storage";
  return Roots{base / "sys", base / "proc"};
}

std::vector<CollectorSpec> storage_catalog() {
  return {storage_collector_spec()};
}

StorageOptions device_options(std::string include, std::string exclude) {
  StorageOptions o;
  o.devices = sources::NameFilterSpec{std::move(include), std::move(exclude)};
  return o;
}

bool has_series(const MetricSink& sink, std::string_view name, const std::string& device) {
  double v = 0;
  return sink.get(name, {device}, &v);
}

std::uint64_t error_count(const MetricSink& sink, std::string_view reason) {
  auto it = sink.errors().find(reason);
  return it == sink.errors().end() ? 0 : it->second;
}

// A procfs root in the temporary directory whose diskstats a test rewrites
// between collects; the sysfs root is the (absent) sys/ beside it.
class TempProcfs {
 public:
  TempProcfs() {
    static int counter = 0;
    dir_ =
        std::filesystem::temp_directory_path() /
        ("nodewatch-storage-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_ / "proc");
  }
  ~TempProcfs() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  TempProcfs(const TempProcfs&) = delete;
  TempProcfs& operator=(const TempProcfs&) = delete;

  void write(const std::string& diskstats) {
    std::ofstream out(dir_ / "proc" / "diskstats", std::ios::trunc);
    out << diskstats;
  }
  void write_sysfs(const std::string& relative, const std::string& content) {
    std::filesystem::path p = dir_ / "sys" / relative;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream out(p, std::ios::trunc);
    out << content;
  }
  Roots roots() const { return Roots{dir_ / "sys", dir_ / "proc"}; }

 private:
  std::filesystem::path dir_;
};

// A 14-field line for `name` whose read time (field 4) is `read_ms` and
// reads completed (field 1) is `reads`.
std::string line14(const std::string& name, std::uint64_t reads, std::uint64_t read_ms,
                   int minor = 0) {
  return "   8       " + std::to_string(minor) + " " + name + " " + std::to_string(reads) +
         " 0 72 " + std::to_string(read_ms) + " 0 0 0 0 0 0 0\n";
}

// ---------------------------------------------------------------------------
// Parsing

TEST(DiskstatsParse, TwentyFieldLine) {
  auto line = parse_diskstats_line(kIostats20);
  ASSERT_TRUE(line);
  EXPECT_EQ(line->major, 259u);
  EXPECT_EQ(line->minor, 0u);
  EXPECT_EQ(line->name, "nvme0n1");
  EXPECT_EQ(line->stat_count, kFlushStatCount);
  EXPECT_EQ(line->stats[kReadsCompleted], 255999u);
  EXPECT_EQ(line->stats[kReadsMerged], 814u);
  EXPECT_EQ(line->stats[kSectorsRead], 12369153u);
  EXPECT_EQ(line->stats[kReadTimeMs], 47919u);
  EXPECT_EQ(line->stats[kWritesCompleted], 996852u);
  EXPECT_EQ(line->stats[kSectorsWritten], 36123024u);
  EXPECT_EQ(line->stats[kIoInProgress], 0u);
  EXPECT_EQ(line->stats[kIoTimeMs], 301795u);
  EXPECT_EQ(line->stats[kIoWeightedTimeMs], 580470u);
  EXPECT_EQ(line->stats[kFlushesCompleted], 60602u);
  EXPECT_EQ(line->stats[kFlushTimeMs], 106555u);
  EXPECT_TRUE(line->has(kDiscardTimeMs));
  EXPECT_TRUE(line->has(kFlushTimeMs));
}

TEST(DiskstatsParse, EighteenFieldLine) {
  auto line = parse_diskstats_line(kIostats18);
  ASSERT_TRUE(line);
  EXPECT_EQ(line->major, 3u);
  EXPECT_EQ(line->name, "hda");
  EXPECT_EQ(line->stat_count, kDiscardStatCount);
  EXPECT_EQ(line->stats[kWriteTimeMs], 19310380u);
  EXPECT_EQ(line->stats[kIoWeightedTimeMs], 23705160u);
  EXPECT_TRUE(line->has(kDiscardsCompleted));
  EXPECT_TRUE(line->has(kDiscardTimeMs));
  EXPECT_FALSE(line->has(kFlushesCompleted));
}

TEST(DiskstatsParse, FourteenFieldLine) {
  auto line = parse_diskstats_line(kIostats14);
  ASSERT_TRUE(line);
  EXPECT_EQ(line->stat_count, kBaseStatCount);
  EXPECT_EQ(line->stats[kReadsCompleted], 446216u);
  EXPECT_EQ(line->stats[kIoWeightedTimeMs], 23705160u);
  EXPECT_FALSE(line->has(kDiscardsCompleted));
  EXPECT_EQ(line->stats[kDiscardsCompleted], 0u);
}

TEST(DiskstatsParse, ToleratesTabsAndCarriageReturn) {
  auto line = parse_diskstats_line("8\t0\tsda\t1 2 3 4 5 6 7 8 9 10 11\r");
  ASSERT_TRUE(line);
  EXPECT_EQ(line->name, "sda");
  EXPECT_EQ(line->stats[kIoWeightedTimeMs], 11u);
}

TEST(DiskstatsParse, AcceptsFieldsAppendedByAFutureKernel) {
  auto line = parse_diskstats_line(std::string(kIostats20) + " 7 8");
  ASSERT_TRUE(line);
  EXPECT_EQ(line->stat_count, kFlushStatCount);
  EXPECT_EQ(line->stats[kFlushTimeMs], 106555u);
}

TEST(DiskstatsParse, FullRangeOfUnsignedLong) {
  auto line = parse_diskstats_line("8 0 sda 18446744073709551615 0 0 0 0 0 0 0 0 0 0");
  ASSERT_TRUE(line);
  EXPECT_EQ(line->stats[kReadsCompleted], std::numeric_limits<std::uint64_t>::max());
}

TEST(DiskstatsParse, RejectsMalformedLines) {
  const char* bad[] = {
      "", "259 0", "259 0 nvme0n1",
      // the 7-field partition line of 2.6 kernels before 2.6.25 (iostats.rst)
      "   3    1   hda1 35486 38030 38030 38030",
      "   8      16 sdb 3381 0 271978 x19 0 0 0 0 0 1244 1244", "   8      32 sdc 12 0 96",
      "8 0 sda 1 2 3 4 5 6 7 8 9 10 11 12",              // 16 fields
      "8 0 sda 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16",  // 19 fields
      "8 0 sda -1 2 3 4 5 6 7 8 9 10 11", "8 0 sda +1 2 3 4 5 6 7 8 9 10 11",
      "8 0 sda 18446744073709551616 2 3 4 5 6 7 8 9 10 11",  // 2^64
      "x 0 sda 1 2 3 4 5 6 7 8 9 10 11", "8 0.5 sda 1 2 3 4 5 6 7 8 9 10 11",
      "4294967296 0 sda 1 2 3 4 5 6 7 8 9 10 11",  // major past 32 bits
  };
  for (const char* line : bad) EXPECT_FALSE(parse_diskstats_line(line)) << "accepted: " << line;
}

TEST(DiskstatsParse, SplitsLines) {
  std::string_view text = "a\n\n  \nb";
  EXPECT_EQ(next_line(text), "a");
  EXPECT_EQ(next_line(text), "");
  std::string_view blank = next_line(text);
  EXPECT_EQ(blank, "  ");
  EXPECT_TRUE(is_blank(blank));
  EXPECT_EQ(next_line(text), "b");
  EXPECT_TRUE(text.empty());
  EXPECT_FALSE(is_blank(" 8 0 sda"));
}

TEST(SysfsAttribute, TrimsAndParses) {
  EXPECT_EQ(text::label_value("Samsung SSD 980 PRO 2TB                 \n"),
            "Samsung SSD 980 PRO 2TB");
  EXPECT_EQ(text::label_value("overlayblk"), "overlayblk");
  EXPECT_EQ(text::label_value(" \n"), "");
  EXPECT_EQ(parse_attribute_uint("1023\n"), std::optional<std::uint64_t>(1023));
  EXPECT_EQ(parse_attribute_uint("4096"), std::optional<std::uint64_t>(4096));
  EXPECT_FALSE(parse_attribute_uint("none\n"));
  EXPECT_FALSE(parse_attribute_uint(""));
  EXPECT_FALSE(parse_attribute_uint("-1\n"));
}

TEST(SysfsAttribute, LabelIsValidUtf8) {
  EXPECT_EQ(text::label_value("ST4000NM0035-1V4\n"), "ST4000NM0035-1V4");
  EXPECT_EQ(text::label_value("bad\xff\xfe model"), "bad?? model");
  EXPECT_EQ(text::label_value("tab\there"), "tab here");
  EXPECT_EQ(text::label_value("caf\xc3\xa9"), "caf\xc3\xa9");  // valid UTF-8 is kept
  EXPECT_TRUE(is_valid_utf8(text::label_value("\x80\xc3")));
}

TEST(SysfsAttribute, BlockDirectoryName) {
  EXPECT_EQ(sysfs_block_name("nvme0n1"), "nvme0n1");
  EXPECT_EQ(sysfs_block_name("cciss/c0d0"), "cciss!c0d0");
  EXPECT_EQ(sysfs_block_name(".."), "");
  EXPECT_EQ(sysfs_block_name("."), "");
}

// ---------------------------------------------------------------------------
// Wrap accumulation

// The shared wrap rule (sources::WrapCounter) on the example of
// diskstats.hpp, and its boundaries as the diskstats fields meet them.
TEST(DiskstatsWrapRule, AccumulatesAcrossA32BitWrap) {
  sources::WrapCounter c;
  EXPECT_EQ(c.update(4294967000u), 4294967000u);
  EXPECT_EQ(c.update(200), kTwoPow32 + 200);
  EXPECT_EQ(c.update(5000), kTwoPow32 + 5000);
  EXPECT_EQ(c.update(4294967000u), kTwoPow32 + 4294967000u);
  EXPECT_EQ(c.update(10), 2 * kTwoPow32 + 10);  // a second wrap
  EXPECT_EQ(c.value(), 2 * kTwoPow32 + 10);
}

TEST(DiskstatsWrapRule, OtherDecreasesAreResets) {
  sources::WrapCounter c;
  EXPECT_EQ(c.update(1000), 1000u);
  EXPECT_EQ(c.update(10), 10u);  // re-created device: previous far below 2^31
  EXPECT_EQ(c.update(20), 20u);
  // A 64-bit counter cannot have wrapped at 32 bits.
  EXPECT_EQ(c.update(5'000'000'000u), 5'000'000'000u);
  EXPECT_EQ(c.update(7), 7u);
  // Above 2^31 but the modular difference would be near 2^32: a reset.
  EXPECT_EQ(c.update(2'200'000'000u), 2'200'000'000u);
  EXPECT_EQ(c.update(2'100'000'000u), 2'100'000'000u);
  // Equal values are not a decrease.
  EXPECT_EQ(c.update(2'100'000'000u), 2'100'000'000u);
}

TEST(DiskstatsWrapRule, WrapHeuristicBoundaries) {
  constexpr std::uint64_t kTwoPow31 = std::uint64_t{1} << 31;
  EXPECT_TRUE(sources::is_32bit_wrap(kTwoPow32 - 1, 0));
  EXPECT_TRUE(sources::is_32bit_wrap(kTwoPow31 + 1, 0));
  EXPECT_FALSE(sources::is_32bit_wrap(kTwoPow31, 0));  // not above 2^31
  EXPECT_FALSE(sources::is_32bit_wrap(kTwoPow32, 0));  // does not fit in 32 bits
  EXPECT_TRUE(sources::is_32bit_wrap(kTwoPow32 - 1, kTwoPow31 - 2));
  EXPECT_FALSE(sources::is_32bit_wrap(kTwoPow32 - 1, kTwoPow31 - 1));
}

// ---------------------------------------------------------------------------
// The collector over the fixture tree

TEST(StorageCollector, TableIsWellFormed) {
  StorageCollector c(fixture_roots(), StorageOptions{});
  ExpectWellFormedTable(c.metrics(), "nodewatch_storage_");
  const char* expected[] = {
      "nodewatch_storage_reads_completed_total",
      "nodewatch_storage_reads_merged_total",
      "nodewatch_storage_read_bytes_total",
      "nodewatch_storage_read_time_seconds_total",
      "nodewatch_storage_writes_completed_total",
      "nodewatch_storage_writes_merged_total",
      "nodewatch_storage_written_bytes_total",
      "nodewatch_storage_write_time_seconds_total",
      "nodewatch_storage_io_in_progress",
      "nodewatch_storage_io_time_seconds_total",
      "nodewatch_storage_io_time_weighted_seconds_total",
      "nodewatch_storage_discards_completed_total",
      "nodewatch_storage_discards_merged_total",
      "nodewatch_storage_discarded_bytes_total",
      "nodewatch_storage_discard_time_seconds_total",
      "nodewatch_storage_flushes_completed_total",
      "nodewatch_storage_flush_time_seconds_total",
      "nodewatch_storage_device_info",
      "nodewatch_storage_queue_depth",
      "nodewatch_storage_logical_block_size_bytes",
      // NFS client operations (issue 6's contract), then per mount.
      "nodewatch_storage_nfs_operations_total",
      "nodewatch_storage_nfs_transmissions_total",
      "nodewatch_storage_nfs_major_timeouts_total",
      "nodewatch_storage_nfs_errors_total",
      "nodewatch_storage_nfs_sent_bytes_total",
      "nodewatch_storage_nfs_received_bytes_total",
      "nodewatch_storage_nfs_queue_seconds_total",
      "nodewatch_storage_nfs_rtt_seconds_total",
      "nodewatch_storage_nfs_execute_seconds_total",
      "nodewatch_storage_nfs_transport_retransmits_total",
      "nodewatch_storage_nfs_transport_sends_total",
      "nodewatch_storage_nfs_transport_receives_total",
      "nodewatch_storage_nfs_transport_bad_xids_total",
      "nodewatch_storage_nfs_transport_connects_total",
      "nodewatch_storage_nfs_mount_info",
      // Active probes.
      "nodewatch_storage_probe_duration_seconds",
      "nodewatch_storage_probe_success",
      "nodewatch_storage_probe_errors_total",
      "nodewatch_storage_probe_stuck",
      "nodewatch_storage_probe_last_success_timestamp_seconds",
      "nodewatch_storage_probe_abandoned_helpers",
  };
  EXPECT_EQ(c.metrics().descs().size(), std::size(expected));
  for (const char* name : expected) EXPECT_GE(c.metrics().find(name), 0) << name;
  const MetricDesc& info =
      c.metrics()
          .descs()[static_cast<std::size_t>(c.metrics().find("nodewatch_storage_device_info"))];
  EXPECT_EQ(info.labels, (std::vector<std::string>{"device", "model", "serial", "rotational"}));
}

TEST(StorageCollector, Spec) {
  const CollectorSpec& spec = storage_collector_spec();
  EXPECT_EQ(spec.name, "storage");
  EXPECT_TRUE(spec.enabled_by_default);
  EXPECT_EQ(spec.default_interval, std::chrono::seconds(15));
  EXPECT_EQ(spec.default_timeout, std::chrono::seconds(10));
  EXPECT_TRUE(spec.read_options);
  EXPECT_TRUE(spec.create);
  EXPECT_FALSE(spec.description.empty());
}

TEST(StorageCollector, ValuesFromTheFixture) {
  StorageCollector c(fixture_roots(), StorageOptions{});
  MetricSink sink(c.metrics());
  CollectOnce(c, sink);

  // nvme0n1, 20 fields:
  // 259 0 nvme0n1 1834512 421 123456789 456789 2987654 1876543 234567890 3456789 2 1987654
  //               4012345 123456 0 98765432 12345 456789 23456
  const std::vector<std::string> nvme{"nvme0n1"};
  EXPECT_EQ(Value(sink, "nodewatch_storage_reads_completed_total", nvme), 1834512);
  EXPECT_EQ(Value(sink, "nodewatch_storage_reads_merged_total", nvme), 421);
  EXPECT_EQ(Value(sink, "nodewatch_storage_read_bytes_total", nvme), 63209875968.0);  // *512
  EXPECT_DOUBLE_EQ(Value(sink, "nodewatch_storage_read_time_seconds_total", nvme), 456.789);
  EXPECT_EQ(Value(sink, "nodewatch_storage_writes_completed_total", nvme), 2987654);
  EXPECT_EQ(Value(sink, "nodewatch_storage_writes_merged_total", nvme), 1876543);
  EXPECT_EQ(Value(sink, "nodewatch_storage_written_bytes_total", nvme), 120098759680.0);
  EXPECT_DOUBLE_EQ(Value(sink, "nodewatch_storage_write_time_seconds_total", nvme), 3456.789);
  EXPECT_EQ(Value(sink, "nodewatch_storage_io_in_progress", nvme), 2);
  EXPECT_DOUBLE_EQ(Value(sink, "nodewatch_storage_io_time_seconds_total", nvme), 1987.654);
  EXPECT_DOUBLE_EQ(Value(sink, "nodewatch_storage_io_time_weighted_seconds_total", nvme), 4012.345);
  EXPECT_EQ(Value(sink, "nodewatch_storage_discards_completed_total", nvme), 123456);
  EXPECT_EQ(Value(sink, "nodewatch_storage_discards_merged_total", nvme), 0);
  EXPECT_EQ(Value(sink, "nodewatch_storage_discarded_bytes_total", nvme), 50567901184.0);
  EXPECT_DOUBLE_EQ(Value(sink, "nodewatch_storage_discard_time_seconds_total", nvme), 12.345);
  EXPECT_EQ(Value(sink, "nodewatch_storage_flushes_completed_total", nvme), 456789);
  EXPECT_DOUBLE_EQ(Value(sink, "nodewatch_storage_flush_time_seconds_total", nvme), 23.456);
  EXPECT_EQ(Value(sink, "nodewatch_storage_queue_depth", nvme), 1023);
  EXPECT_EQ(Value(sink, "nodewatch_storage_logical_block_size_bytes", nvme), 512);

  // vda, 18 fields: discards but no flushes.
  // 254 0 vda 31950 7164 2595986 10219 28243 8886 2505624 8643 0 6032 19282 5888 26 675440 353
  const std::vector<std::string> vda{"vda"};
  EXPECT_EQ(Value(sink, "nodewatch_storage_read_bytes_total", vda), 1329144832.0);  // 2595986*512
  EXPECT_DOUBLE_EQ(Value(sink, "nodewatch_storage_write_time_seconds_total", vda), 8.643);
  EXPECT_EQ(Value(sink, "nodewatch_storage_discarded_bytes_total", vda),
            345825280.0);  // 675440*512
  EXPECT_DOUBLE_EQ(Value(sink, "nodewatch_storage_discard_time_seconds_total", vda), 0.353);
  EXPECT_FALSE(has_series(sink, "nodewatch_storage_flushes_completed_total", "vda"));
  EXPECT_FALSE(has_series(sink, "nodewatch_storage_flush_time_seconds_total", "vda"));
  EXPECT_EQ(Value(sink, "nodewatch_storage_queue_depth", vda), 256);

  // md0, 14 fields: neither discards nor flushes.
  // 9 0 md0 12345 0 987654 0 23456 0 1234567 0 0 0 0
  const std::vector<std::string> md{"md0"};
  EXPECT_EQ(Value(sink, "nodewatch_storage_reads_completed_total", md), 12345);
  EXPECT_EQ(Value(sink, "nodewatch_storage_written_bytes_total", md), 632098304.0);  // 1234567*512
  EXPECT_EQ(Value(sink, "nodewatch_storage_read_time_seconds_total", md), 0);
  EXPECT_FALSE(has_series(sink, "nodewatch_storage_discards_completed_total", "md0"));
  EXPECT_FALSE(has_series(sink, "nodewatch_storage_flushes_completed_total", "md0"));
  // Bio-based queues have no nr_requests: no queue-depth series.
  EXPECT_FALSE(has_series(sink, "nodewatch_storage_queue_depth", "md0"));
  EXPECT_FALSE(has_series(sink, "nodewatch_storage_queue_depth", "dm-0"));
  EXPECT_EQ(Value(sink, "nodewatch_storage_logical_block_size_bytes", {"dm-0"}), 512);

  // sda: 8 0 sda 45678 1234 9876543 234567 34567 8765 4567890 345678 0 123456 580245 0 0 0 0
  //              4321 9876
  const std::vector<std::string> sda{"sda"};
  EXPECT_DOUBLE_EQ(Value(sink, "nodewatch_storage_read_time_seconds_total", sda), 234.567);
  EXPECT_DOUBLE_EQ(Value(sink, "nodewatch_storage_io_time_weighted_seconds_total", sda), 580.245);
  EXPECT_EQ(Value(sink, "nodewatch_storage_flushes_completed_total", sda), 4321);
  EXPECT_EQ(Value(sink, "nodewatch_storage_queue_depth", sda), 64);

  // Two malformed lines (sdb, sdc), each skipped and counted.
  EXPECT_EQ(error_count(sink, "parse_error"), 2u);
  EXPECT_EQ(sink.errors().size(), 1u);

  // nvme0n1 20 + sda 20 (17 + info, depth, block size) + vda 18 + dm-0 19 + md0 13.
  std::string text = sink.render();
  std::size_t block_samples = 0;
  for (std::size_t pos = 0; (pos = text.find("\nnodewatch_storage_", pos)) != std::string::npos;
       ++pos) {
    block_samples += text.compare(pos + 1, 22, "nodewatch_storage_nfs_") != 0;
  }
  EXPECT_EQ(block_samples, 90u);
  EXPECT_NE(text.find("# TYPE nodewatch_storage_reads_completed_total counter"), std::string::npos);
  EXPECT_NE(text.find("# TYPE nodewatch_storage_io_in_progress gauge"), std::string::npos);
}

TEST(StorageCollector, DefaultExclusions) {
  StorageCollector c(fixture_roots(), StorageOptions{});
  MetricSink sink(c.metrics());
  CollectOnce(c, sink);
  for (const char* kept : {"nvme0n1", "sda", "vda", "dm-0", "md0"}) {
    EXPECT_TRUE(has_series(sink, "nodewatch_storage_reads_completed_total", kept)) << kept;
  }
  for (const char* dropped : {"nvme0n1p1", "sda1", "loop0", "ram0", "zram0"}) {
    EXPECT_FALSE(has_series(sink, "nodewatch_storage_reads_completed_total", dropped)) << dropped;
  }
}

TEST(StorageCollector, DefaultExcludeRegex) {
  sources::NameFilter exclude(sources::NameFilterSpec{"", std::string(kDefaultDevicesExclude)});
  for (const char* excluded : {"ram0", "loop12", "zram0", "fd0", "sr0", "sda1", "sdaa12", "vdb3",
                               "xvda1", "hdc2", "nvme0n1p1", "nvme12n3p14", "mmcblk0p2"}) {
    EXPECT_FALSE(exclude.matches(excluded)) << excluded;
  }
  for (const char* kept : {"sda", "sdaa", "vda", "xvdb", "nvme0n1", "nvme10n2", "dm-0", "md0",
                           "md127", "mmcblk0", "nbd0", "rbd0", "drbd1"}) {
    EXPECT_TRUE(exclude.matches(kept)) << kept;
  }
}

TEST(StorageCollector, IncludeRegex) {
  StorageCollector c(fixture_roots(),
                     device_options("^(nvme|sd)", std::string(kDefaultDevicesExclude)));
  MetricSink sink(c.metrics());
  CollectOnce(c, sink);
  EXPECT_TRUE(has_series(sink, "nodewatch_storage_reads_completed_total", "nvme0n1"));
  EXPECT_TRUE(has_series(sink, "nodewatch_storage_reads_completed_total", "sda"));
  for (const char* dropped : {"nvme0n1p1", "sda1", "vda", "dm-0", "md0", "loop0"}) {
    EXPECT_FALSE(has_series(sink, "nodewatch_storage_reads_completed_total", dropped)) << dropped;
  }
}

TEST(StorageCollector, EmptyExcludeExportsEverything) {
  StorageCollector c(fixture_roots(), device_options("", ""));
  MetricSink sink(c.metrics());
  CollectOnce(c, sink);
  for (const char* name :
       {"nvme0n1", "nvme0n1p1", "sda", "sda1", "vda", "dm-0", "md0", "loop0", "ram0", "zram0"}) {
    EXPECT_TRUE(has_series(sink, "nodewatch_storage_reads_completed_total", name)) << name;
  }
  EXPECT_EQ(Value(sink, "nodewatch_storage_logical_block_size_bytes", {"zram0"}), 4096);
  EXPECT_FALSE(has_series(sink, "nodewatch_storage_queue_depth", "zram0"));
  EXPECT_EQ(Value(sink, "nodewatch_storage_queue_depth", {"loop0"}), 128);
}

TEST(StorageCollector, DeviceInfoFromSysfs) {
  StorageCollector c(fixture_roots(), device_options("", ""));
  MetricSink sink(c.metrics());
  CollectOnce(c, sink);
  const char* info = "nodewatch_storage_device_info";
  // NVMe: model and serial from the controller, trimmed of their padding.
  EXPECT_EQ(Value(sink, info, {"nvme0n1", "Samsung SSD 980 PRO 2TB", "S6B0NL0T123456A", "0"}), 1);
  // SATA: no serial attribute, the wwid stands in.
  EXPECT_EQ(Value(sink, info, {"sda", "ST4000NM0035-1V4", "naa.5000c500a1b2c3d4", "1"}), 1);
  // virtio-blk: serial on the disk, no model.
  EXPECT_EQ(Value(sink, info, {"vda", "", "overlayblk", "1"}), 1);
  EXPECT_EQ(Value(sink, info, {"dm-0", "", "", "0"}), 1);
  EXPECT_EQ(Value(sink, info, {"md0", "", "", "0"}), 1);
  // A partition has no /sys/block entry: every sysfs label is empty, no gauges.
  EXPECT_EQ(Value(sink, info, {"nvme0n1p1", "", "", ""}), 1);
  EXPECT_FALSE(has_series(sink, "nodewatch_storage_queue_depth", "nvme0n1p1"));
  EXPECT_FALSE(has_series(sink, "nodewatch_storage_logical_block_size_bytes", "nvme0n1p1"));
  // A missing sysfs file is not an error.
  EXPECT_EQ(error_count(sink, "parse_error"), 2u);
  EXPECT_EQ(sink.errors().size(), 1u);
}

TEST(StorageCollector, InvalidRegexThrowsAtConstruction) {
  EXPECT_THROW(StorageCollector(fixture_roots(), device_options("(", "")), std::invalid_argument);
}

TEST(StorageCollector, MissingDiskstatsIsACollectError) {
  Roots roots = fixture_roots();
  roots.procfs = roots.procfs / "does-not-exist";
  StorageCollector c(roots, StorageOptions{});
  MetricSink sink(c.metrics());
  CollectContext ctx{std::chrono::steady_clock::now() + std::chrono::seconds(10), nullptr};
  try {
    c.collect(ctx, sink);
    ADD_FAILURE() << "collect() did not throw";
  } catch (const CollectError& e) {
    EXPECT_EQ(e.reason(), "read_error");
    EXPECT_NE(std::string(e.what()).find("diskstats"), std::string::npos) << e.what();
  }
  EXPECT_EQ(sink.sample_count(), 0u);
}

TEST(StorageCollector, StopsWhenCancelled) {
  StorageCollector c(fixture_roots(), StorageOptions{});
  MetricSink first(c.metrics());
  CollectOnce(c, first);
  std::size_t tracked = c.tracked_devices();
  EXPECT_EQ(tracked, 10u);  // every well-formed line, selected or not

  std::atomic<bool> cancelled{true};
  CollectContext ctx{std::chrono::steady_clock::now() + std::chrono::seconds(10), &cancelled};
  MetricSink sink(c.metrics());
  c.collect(ctx, sink);
  ExpectConformant(sink);
  EXPECT_EQ(sink.sample_count(), 0u);
  // An interrupted pass forgets nobody.
  EXPECT_EQ(c.tracked_devices(), tracked);

  // A passed deadline stops it too.
  MetricSink late(c.metrics());
  c.collect(CollectContext{std::chrono::steady_clock::now() - std::chrono::seconds(1), nullptr},
            late);
  EXPECT_EQ(late.sample_count(), 0u);
}

// ---------------------------------------------------------------------------
// State across collects, with a diskstats that the test rewrites

TEST(StorageCollector, WrapAccumulatesAcrossThreeCollects) {
  TempProcfs proc;
  StorageCollector c(proc.roots(), StorageOptions{});
  const char* read_time = "nodewatch_storage_read_time_seconds_total";

  proc.write(line14("sda", 9, 4294967000u));
  MetricSink s1(c.metrics());
  CollectOnce(c, s1);
  EXPECT_DOUBLE_EQ(Value(s1, read_time, {"sda"}), 4294967000.0 / 1000.0);

  proc.write(line14("sda", 10, 200));  // the unsigned int wrapped
  MetricSink s2(c.metrics());
  CollectOnce(c, s2);
  EXPECT_DOUBLE_EQ(Value(s2, read_time, {"sda"}), (4294967296.0 + 200) / 1000.0);
  EXPECT_EQ(Value(s2, "nodewatch_storage_reads_completed_total", {"sda"}), 10);

  proc.write(line14("sda", 11, 5000));
  MetricSink s3(c.metrics());
  CollectOnce(c, s3);
  EXPECT_DOUBLE_EQ(Value(s3, read_time, {"sda"}), (4294967296.0 + 5000) / 1000.0);
  EXPECT_EQ(Value(s3, "nodewatch_storage_reads_completed_total", {"sda"}), 11);

  // No sysfs root at all: labels empty, no error.
  EXPECT_EQ(Value(s3, "nodewatch_storage_device_info", {"sda", "", "", ""}), 1);
  EXPECT_TRUE(s3.errors().empty());
}

TEST(StorageCollector, DecreaseBelowHalfRangeIsAReset) {
  TempProcfs proc;
  StorageCollector c(proc.roots(), StorageOptions{});
  proc.write(line14("sda", 5000, 90000));
  MetricSink s1(c.metrics());
  CollectOnce(c, s1);
  proc.write(line14("sda", 3, 40));  // re-initialized device: restarts from the raw value
  MetricSink s2(c.metrics());
  CollectOnce(c, s2);
  EXPECT_EQ(Value(s2, "nodewatch_storage_reads_completed_total", {"sda"}), 3);
  EXPECT_DOUBLE_EQ(Value(s2, "nodewatch_storage_read_time_seconds_total", {"sda"}), 0.04);
}

TEST(StorageCollector, NewMinorStartsAfresh) {
  TempProcfs proc;
  StorageCollector c(proc.roots(), StorageOptions{});
  proc.write(line14("dm-0", 1, 4294967000u, 0));
  MetricSink s1(c.metrics());
  CollectOnce(c, s1);
  // Same name, another minor: a new device whose counters are not a wrap.
  proc.write(line14("dm-0", 2, 100, 3));
  MetricSink s2(c.metrics());
  CollectOnce(c, s2);
  EXPECT_DOUBLE_EQ(Value(s2, "nodewatch_storage_read_time_seconds_total", {"dm-0"}), 0.1);
}

TEST(StorageCollector, DevicesComeAndGo) {
  TempProcfs proc;
  StorageCollector c(proc.roots(), StorageOptions{});
  proc.write(line14("sda", 1, 4294967000u) + line14("sdb", 1, 1, 16));
  MetricSink s1(c.metrics());
  CollectOnce(c, s1);
  EXPECT_EQ(c.tracked_devices(), 2u);

  proc.write(line14("sdb", 2, 2, 16));  // sda unplugged
  MetricSink s2(c.metrics());
  CollectOnce(c, s2);
  EXPECT_FALSE(has_series(s2, "nodewatch_storage_reads_completed_total", "sda"));
  EXPECT_EQ(c.tracked_devices(), 1u);

  // sda back with a small value: its old state is gone, so no wrap offset.
  proc.write(line14("sdb", 3, 3, 16) + line14("sdc", 7, 7, 32) + line14("sda", 1, 100));
  MetricSink s3(c.metrics());
  CollectOnce(c, s3);
  EXPECT_DOUBLE_EQ(Value(s3, "nodewatch_storage_read_time_seconds_total", {"sda"}), 0.1);
  EXPECT_EQ(Value(s3, "nodewatch_storage_reads_completed_total", {"sdc"}), 7);
  EXPECT_EQ(c.tracked_devices(), 3u);

  proc.write("");  // no block devices at all: not an error
  MetricSink s4(c.metrics());
  CollectOnce(c, s4);
  EXPECT_EQ(s4.sample_count(), 0u);
  EXPECT_TRUE(s4.errors().empty());
  EXPECT_EQ(c.tracked_devices(), 0u);
}

TEST(StorageCollector, SysfsFactsAreCachedAndRefreshed) {
  TempProcfs proc;
  StorageCollector c(proc.roots(), StorageOptions{});
  proc.write(line14("sda", 1, 1));
  proc.write_sysfs("block/sda/queue/rotational", "1\n");
  proc.write_sysfs("block/sda/queue/nr_requests", "64\n");
  const char* info = "nodewatch_storage_device_info";
  MetricSink s1(c.metrics());
  CollectOnce(c, s1);
  EXPECT_EQ(Value(s1, info, {"sda", "", "", "1"}), 1);
  EXPECT_EQ(Value(s1, "nodewatch_storage_queue_depth", {"sda"}), 64);

  // A udev rule rewrites rotational, an operator nr_requests.
  proc.write_sysfs("block/sda/queue/rotational", "0\n");
  proc.write_sysfs("block/sda/queue/nr_requests", "256\n");
  MetricSink s2(c.metrics());
  CollectOnce(c, s2);
  EXPECT_EQ(Value(s2, info, {"sda", "", "", "1"}), 1);                  // cached
  EXPECT_EQ(Value(s2, "nodewatch_storage_queue_depth", {"sda"}), 256);  // read every collect

  // Collects 3 to 20 still use the cache; collect 21 reads sysfs again.
  for (int i = 3; i <= 20; ++i) {
    MetricSink s(c.metrics());
    CollectOnce(c, s);
    EXPECT_EQ(Value(s, info, {"sda", "", "", "1"}), 1) << "collect " << i;
  }
  MetricSink s21(c.metrics());
  CollectOnce(c, s21);
  EXPECT_EQ(Value(s21, info, {"sda", "", "", "0"}), 1);
}

TEST(StorageCollector, DuplicateLineIsSkipped) {
  TempProcfs proc;
  StorageCollector c(proc.roots(), StorageOptions{});
  proc.write(line14("sda", 1, 1) + line14("sda", 2, 2));
  MetricSink sink(c.metrics());
  CollectOnce(c, sink);
  EXPECT_EQ(Value(sink, "nodewatch_storage_reads_completed_total", {"sda"}), 1);
  EXPECT_EQ(error_count(sink, "duplicate_device"), 1u);
}

// ---------------------------------------------------------------------------
// Failures through the sources layer: errnos injected on one file in the
// middle of a collection (Roots::faults), and the descriptors held

int open_fds() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

Roots faulty_fixture_roots(std::shared_ptr<sources::Faults> faults) {
  Roots roots = fixture_roots();
  roots.faults = std::move(faults);
  return roots;
}

TEST(StorageFaults, DiskstatsThatFailsFailsTheCollectionAndTheNextOneRecovers) {
  for (int err : {EACCES, EIO, ENODEV, ENOENT}) {
    SCOPED_TRACE(sources::errno_name(err));
    auto faults = std::make_shared<sources::Faults>();
    StorageCollector c(faulty_fixture_roots(faults), StorageOptions{});
    MetricSink before(c.metrics());
    CollectOnce(c, before);
    // diskstats, mountstats, and nr_requests of nvme0n1, sda and vda.
    const std::size_t held = c.held_descriptors();
    EXPECT_EQ(held, 5u);
    const int fds = open_fds();

    faults->inject("proc/diskstats", err, 1);
    MetricSink failed(c.metrics());
    try {
      c.collect(CollectContext{std::chrono::steady_clock::now() + std::chrono::seconds(10)},
                failed);
      ADD_FAILURE() << "collect() did not throw";
    } catch (const CollectError& e) {
      EXPECT_EQ(e.reason(), "read_error");
      EXPECT_NE(std::string(e.what()).find(sources::errno_name(err)), std::string::npos)
          << e.what();
    }
    EXPECT_EQ(failed.sample_count(), 0u);

    MetricSink after(c.metrics());
    CollectOnce(c, after);
    EXPECT_EQ(Value(after, "nodewatch_storage_reads_completed_total", {"sda"}), 45678);
    EXPECT_EQ(after.sample_count(), before.sample_count());
    // ENODEV closed the held diskstats; it is opened again, nothing leaks.
    EXPECT_EQ(c.held_descriptors(), held);
    EXPECT_EQ(open_fds(), fds);
  }
}

TEST(StorageFaults, SysfsAttributeFailuresAreCountedUnderTheDevice) {
  auto faults = std::make_shared<sources::Faults>();
  StorageCollector c(faulty_fixture_roots(faults), StorageOptions{});
  faults->inject("block/sda/queue/rotational", EIO, 1);
  faults->inject("block/nvme0n1/queue/nr_requests", EACCES, 1);
  faults->inject("block/nvme0n1/device/model", ENOENT, 1);
  faults->inject("block/dm-0/queue/logical_block_size", ENODEV, 1);
  const char* info = "nodewatch_storage_device_info";
  MetricSink s1(c.metrics());
  CollectOnce(c, s1);
  // EIO: the label is empty, the failure counted under sda with its detail.
  EXPECT_EQ(Value(s1, info, {"sda", "ST4000NM0035-1V4", "naa.5000c500a1b2c3d4", ""}), 1);
  // EACCES on a value read every collection: no gauge, counted under nvme0n1.
  EXPECT_FALSE(has_series(s1, "nodewatch_storage_queue_depth", "nvme0n1"));
  EXPECT_EQ(Value(s1, "nodewatch_storage_reads_completed_total", {"nvme0n1"}), 1834512);
  // ENOENT: the driver has no such attribute: an empty label, not an error.
  EXPECT_EQ(Value(s1, info, {"nvme0n1", "", "S6B0NL0T123456A", "0"}), 1);
  // ENODEV: dm-0 went away under the read: not exported, not an error.
  EXPECT_FALSE(has_series(s1, "nodewatch_storage_reads_completed_total", "dm-0"));
  EXPECT_FALSE(has_series(s1, info, "dm-0"));
  EXPECT_EQ(c.tracked_devices(), 9u);
  const std::map<MetricSink::FailureKey, std::string> expected = {
      {{"read_error", "sda"}, "EIO reading queue/rotational"},
      {{"read_error", "nvme0n1"}, "EACCES reading queue/nr_requests"},
  };
  EXPECT_EQ(s1.failures(), expected);
  EXPECT_EQ(error_count(s1, "read_error"), 2u);
  EXPECT_EQ(error_count(s1, "parse_error"), 2u);  // sdb and sdc, as always
  EXPECT_EQ(Value(s1, "nodewatch_storage_reads_completed_total", {"vda"}), 31950);

  MetricSink s2(c.metrics());
  CollectOnce(c, s2);
  EXPECT_TRUE(s2.failures().empty());
  // The failed facts are read again at once; the absent one stays as it was
  // until the next refresh.
  EXPECT_EQ(Value(s2, info, {"sda", "ST4000NM0035-1V4", "naa.5000c500a1b2c3d4", "1"}), 1);
  EXPECT_EQ(Value(s2, info, {"nvme0n1", "", "S6B0NL0T123456A", "0"}), 1);
  EXPECT_EQ(Value(s2, "nodewatch_storage_queue_depth", {"nvme0n1"}), 1023);
  // dm-0 is back, afresh.
  EXPECT_EQ(Value(s2, info, {"dm-0", "", "", "0"}), 1);
  EXPECT_EQ(Value(s2, "nodewatch_storage_logical_block_size_bytes", {"dm-0"}), 512);
  EXPECT_EQ(c.tracked_devices(), 10u);
}

TEST(StorageFaults, HeldDescriptorsFollowTheDevicesAndDoNotLeak) {
  TempProcfs proc;
  proc.write(line14("sda", 1, 1) + line14("sdb", 1, 1, 16));
  proc.write_sysfs("block/sda/queue/nr_requests", "64\n");
  proc.write_sysfs("block/sdb/queue/nr_requests", "32\n");
  const int fds = open_fds();
  {
    StorageCollector c(proc.roots(), StorageOptions{});
    for (int i = 0; i < 3; ++i) {
      MetricSink sink(c.metrics());
      CollectOnce(c, sink);
      EXPECT_EQ(Value(sink, "nodewatch_storage_queue_depth", {"sdb"}), 32);
      // diskstats and two nr_requests; no mountstats here (absent: not held).
      EXPECT_EQ(c.held_descriptors(), 3u);
      EXPECT_EQ(open_fds(), fds + 3) << "collection " << i;
    }
    proc.write(line14("sda", 2, 2));  // sdb unplugged: its descriptor goes
    proc.write_sysfs("block/sda/queue/nr_requests", "128\n");
    MetricSink sink(c.metrics());
    CollectOnce(c, sink);
    EXPECT_EQ(Value(sink, "nodewatch_storage_queue_depth", {"sda"}), 128);  // read afresh
    EXPECT_EQ(Value(sink, "nodewatch_storage_reads_completed_total", {"sda"}), 2);
    EXPECT_EQ(c.held_descriptors(), 2u);
    EXPECT_EQ(open_fds(), fds + 2);

    // max_held 0: nothing held, every file opened and closed (the "before").
    StorageCollector none(proc.roots(), StorageOptions{}, "h", {}, 0);
    MetricSink other(none.metrics());
    CollectOnce(none, other);
    EXPECT_EQ(Value(other, "nodewatch_storage_queue_depth", {"sda"}), 128);
    EXPECT_EQ(none.held_descriptors(), 0u);
    EXPECT_EQ(open_fds(), fds + 2);
  }
  EXPECT_EQ(open_fds(), fds);
}

// The real kernel: a held descriptor on /proc/diskstats (a seq_file) and
// one pread at offset 0 generate it afresh; so does a held mountstats, which
// shows a mount made after it was opened.
TEST(StorageHeldProcfs, ARealDiskstatsIsReadAfreshThroughOneDescriptor) {
  sources::FsRoot proc("/proc");
  if (!proc.read("diskstats").ok()) GTEST_SKIP() << "SKIPPED: no /proc/diskstats here";
  auto names = [](const std::string& text) {
    std::set<std::string> out;
    std::string_view rest = text;
    while (!rest.empty()) {
      std::optional<DiskStatsLine> l = parse_diskstats_line(next_line(rest));
      if (l) out.insert(std::string(l->name));
    }
    return out;
  };
  sources::HeldFile held = proc.hold("diskstats", std::size_t{64} << 20);
  sources::Read first = held.read();
  ASSERT_TRUE(first.ok()) << first.error_name();
  for (int i = 0; i < 3; ++i) {
    sources::Read again = held.read();  // at EOF after the first read, were it read()
    ASSERT_TRUE(again.ok()) << again.error_name();
    EXPECT_FALSE(again.text.empty());
    EXPECT_EQ(names(again.text), names(proc.read("diskstats", std::size_t{64} << 20).text));
  }
  EXPECT_TRUE(held.is_open());
}

TEST(StorageHeldProcfs, AHeldMountstatsShowsAMountMadeAfterItWasOpened) {
  TempDir dir;
  const std::string mountpoint = dir.path().string();
  const std::string line = "device nodewatch-test mounted on " + mountpoint + " with fstype tmpfs";
  // A child in a mount namespace of its own: the mount is its alone, and
  // its self/mountstats (what the collector reads) shows that namespace.
  // (thread-self has no mountstats: the kernel lists it per process only.)
  enum Exit { kSeen = 0, kBeforeFailed = 10, kNotSeen, kStillSeen, kNoNamespace = 77 };
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (::unshare(CLONE_NEWNS) != 0 ||
        ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
      ::_exit(kNoNamespace);
    }
    sources::HeldFile held = sources::FsRoot("/proc").hold("self/mountstats", 64 << 20);
    sources::Read before = held.read();
    if (!before.ok() || before.text.empty() || before.text.find(line) != std::string::npos) {
      ::_exit(kBeforeFailed);
    }
    if (::mount("nodewatch-test", mountpoint.c_str(), "tmpfs", 0, "size=64k") != 0) {
      ::_exit(kNoNamespace);
    }
    sources::Read during = held.read();
    bool seen = during.ok() && during.text.find(line) != std::string::npos;
    ::umount2(mountpoint.c_str(), MNT_DETACH);
    sources::Read after = held.read();
    bool gone = after.ok() && after.text.find(line) == std::string::npos;
    ::_exit(!seen ? kNotSeen : !gone ? kStillSeen : kSeen);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == kNoNamespace) {
    GTEST_SKIP() << "SKIPPED: no mount namespace of its own here (needs CAP_SYS_ADMIN)";
  }
  EXPECT_NE(WEXITSTATUS(status), kBeforeFailed) << "self/mountstats unreadable, or the mount early";
  EXPECT_NE(WEXITSTATUS(status), kNotSeen) << "the held descriptor did not read afresh";
  EXPECT_NE(WEXITSTATUS(status), kStillSeen) << "the unmounted tmpfs is still shown";
  EXPECT_EQ(WEXITSTATUS(status), kSeen);
}

// ---------------------------------------------------------------------------
// State across a rebuilt collector: a reload that changed the options
// builds the new collector from the same Services while the old one still
// exists, then releases the old one.

std::shared_ptr<const CollectorOptions> typed(StorageOptions o) {
  return std::make_shared<const TypedOptions<StorageOptions>>(std::move(o));
}

TEST(StorageRebuild, ACounterPast2To32GoesOnInTheCollectorThatReplacesIt) {
  TempProcfs proc;
  const std::string fixture = nodewatch::testing::ReadFile(fixture_roots().procfs / "diskstats");
  // sda's read time (field 4) near 2^32, then wrapped to 200.
  const std::string sda = " sda 45678 1234 9876543 234567 ";
  ASSERT_NE(fixture.find(sda), std::string::npos);
  auto with_read_time = [&](std::uint64_t ms) {
    std::string text = fixture;
    text.replace(text.find(sda), sda.size(), " sda 45678 1234 9876543 " + std::to_string(ms) + " ");
    return text;
  };
  proc.write(with_read_time(4294967000u));
  Services services;
  const CollectorSpec& spec = storage_collector_spec();
  StorageOptions first_options;
  std::unique_ptr<Collector> first =
      spec.create(CollectorEnv{proc.roots(), typed(first_options), {}, &services});
  MetricSink s1(first->metrics());
  CollectOnce(*first, s1);
  const char* read_time = "nodewatch_storage_read_time_seconds_total";
  EXPECT_DOUBLE_EQ(Value(s1, read_time, {"sda"}), 4294967.0);
  std::size_t made = services.made();

  StorageOptions second_options = first_options;
  second_options.nfs_operations.push_back("CLOSE");  // changed: the collector is rebuilt
  std::unique_ptr<Collector> second =
      spec.create(CollectorEnv{proc.roots(), typed(second_options), {}, &services});
  EXPECT_EQ(services.made(), made);  // the first one's services, not new ones
  first.reset();

  proc.write(with_read_time(200));
  MetricSink s2(second->metrics());
  CollectOnce(*second, s2);
  EXPECT_DOUBLE_EQ(Value(s2, read_time, {"sda"}), (4294967296.0 + 200) / 1000.0);
  // No counter went down.
  const MetricTable& table = second->metrics();
  for (const MetricDesc& d : table.descs()) {
    if (d.type != MetricType::kCounter || d.labels != std::vector<std::string>{"device"}) continue;
    for (const char* dev : {"nvme0n1", "sda", "vda", "dm-0", "md0"}) {
      double a = 0, b = 0;
      if (!s1.get(d.name, {dev}, &a)) continue;
      ASSERT_TRUE(s2.get(d.name, {dev}, &b)) << d.name << " " << dev;
      EXPECT_GE(b, a) << d.name << " " << dev;
    }
  }
}

TEST(StorageRebuild, WithoutSharedServicesTheWrapWouldBeLost) {
  // The same sequence with two private collectors: the second sees 200 as
  // the first value it ever had (what the service prevents above).
  TempProcfs proc;
  proc.write(line14("sda", 1, 4294967000u));
  StorageCollector first(proc.roots(), StorageOptions{});
  MetricSink s1(first.metrics());
  CollectOnce(first, s1);
  StorageCollector second(proc.roots(), StorageOptions{});
  proc.write(line14("sda", 2, 200));
  MetricSink s2(second.metrics());
  CollectOnce(second, s2);
  EXPECT_DOUBLE_EQ(Value(s2, "nodewatch_storage_read_time_seconds_total", {"sda"}), 0.2);
}

// ---------------------------------------------------------------------------
// Configuration

TEST(StorageConfig, InvalidExcludeRegexIsAConfigError) {
  auto catalog = storage_catalog();
  ConfigResult r =
      parse_config("[collectors.storage]\ndevices_exclude = \"(\"\n", "nodewatch.toml", catalog);
  EXPECT_FALSE(r.config);
  ASSERT_EQ(r.errors.size(), 1u);
  const ConfigError& e = r.errors[0];
  EXPECT_EQ(e.line, 2);
  EXPECT_EQ(e.column, 19);
  EXPECT_EQ(e.key, "collectors.storage.devices_exclude");
  // The shared message of every name filter (sources/name_filter.hpp).
  EXPECT_NE(e.message.find("is not a valid regular expression (RE2 syntax)"), std::string::npos)
      << e.message;
  EXPECT_EQ(e.str().rfind("nodewatch.toml:2:19: collectors.storage.devices_exclude: ", 0), 0u)
      << e.str();
}

TEST(StorageConfig, InvalidIncludeRegexIsAConfigError) {
  auto catalog = storage_catalog();
  ConfigResult r = parse_config(
      "[collectors.storage]\ninterval = \"30s\"\ndevices_include = \"[a-\"\n", "n.toml", catalog);
  EXPECT_FALSE(r.config);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].line, 3);
  EXPECT_EQ(r.errors[0].key, "collectors.storage.devices_include");
}

TEST(StorageConfig, OverlongRegexIsAConfigError) {
  auto catalog = storage_catalog();
  std::string text = "[collectors.storage]\ndevices_include = \"" + std::string(5000, 'a') + "\"\n";
  ConfigResult r = parse_config(text, "n.toml", catalog);
  EXPECT_FALSE(r.config);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].key, "collectors.storage.devices_include");
}

TEST(StorageConfig, WrongTypeAndUnknownKey) {
  auto catalog = storage_catalog();
  ConfigResult r = parse_config(
      "[collectors.storage]\ndevices_exclude = 3\ndevice_exclude = \"x\"\n", "n.toml", catalog);
  EXPECT_FALSE(r.config);
  EXPECT_EQ(r.errors.size(), 2u);
}

TEST(StorageConfig, OptionsReachTheCollector) {
  auto catalog = storage_catalog();
  ConfigResult r = parse_config(
      "[collectors.storage]\ndevices_include = \"^(sda|loop0)$\"\ndevices_exclude = \"\"\n",
      "n.toml", catalog);
  ASSERT_TRUE(r.config) << (r.errors.empty() ? "" : r.errors[0].str());
  const CollectorConfig& cc = r.config->collectors.at(0);
  EXPECT_EQ(cc.name(), "storage");
  EXPECT_TRUE(cc.enabled);
  EXPECT_EQ(cc.interval, std::chrono::seconds(15));
  EXPECT_EQ(cc.timeout, std::chrono::seconds(10));

  std::unique_ptr<Collector> c = cc.spec->create(CollectorEnv{fixture_roots(), cc.options});
  ASSERT_TRUE(c);
  MetricSink sink(c->metrics());
  CollectOnce(*c, sink);
  EXPECT_TRUE(has_series(sink, "nodewatch_storage_reads_completed_total", "sda"));
  EXPECT_TRUE(has_series(sink, "nodewatch_storage_reads_completed_total", "loop0"));
  EXPECT_FALSE(has_series(sink, "nodewatch_storage_reads_completed_total", "nvme0n1"));
  EXPECT_FALSE(has_series(sink, "nodewatch_storage_reads_completed_total", "sda1"));
}

TEST(StorageConfig, EmptyConfigurationUsesTheDefaults) {
  auto catalog = storage_catalog();
  ConfigResult r = parse_config("", "built-in defaults", catalog);
  ASSERT_TRUE(r.config);
  const CollectorConfig& cc = r.config->collectors.at(0);
  std::unique_ptr<Collector> c = cc.spec->create(CollectorEnv{fixture_roots(), cc.options});
  MetricSink sink(c->metrics());
  CollectOnce(*c, sink);
  EXPECT_TRUE(has_series(sink, "nodewatch_storage_reads_completed_total", "nvme0n1"));
  EXPECT_FALSE(has_series(sink, "nodewatch_storage_reads_completed_total", "loop0"));
  EXPECT_FALSE(has_series(sink, "nodewatch_storage_reads_completed_total", "nvme0n1p1"));
}

TEST(StorageConfig, CreateWithoutOptionsTable) {
  std::unique_ptr<Collector> c = storage_collector_spec().create(
      CollectorEnv{fixture_roots(), default_options(storage_collector_spec())});
  MetricSink sink(c->metrics());
  CollectOnce(*c, sink);
  EXPECT_TRUE(has_series(sink, "nodewatch_storage_reads_completed_total", "sda"));
}

// ---------------------------------------------------------------------------
// Whole files, one per kernel layout (tests/fixtures/storage/diskstats, see
// the README there): every line parses, with the layout of its kernel, and
// every statistic equals the file's own field.

void ExpectWholeFile(const std::string& name, std::size_t stat_count, std::size_t lines) {
  SCOPED_TRACE(name);
  std::ifstream in(nodewatch::testing::fixtures_dir() / "storage" / "diskstats" / name);
  ASSERT_TRUE(in) << name;
  std::string line;
  std::size_t parsed = 0;
  while (std::getline(in, line)) {
    std::optional<DiskStatsLine> l = parse_diskstats_line(line);
    ASSERT_TRUE(l) << line;
    EXPECT_EQ(l->stat_count, stat_count) << line;
    std::istringstream words(line);
    std::uint64_t major = 0, minor = 0;
    std::string dev;
    words >> major >> minor >> dev;
    EXPECT_EQ(l->major, major);
    EXPECT_EQ(l->minor, minor);
    EXPECT_EQ(l->name, dev);
    for (std::size_t i = 0; i < stat_count; ++i) {
      std::uint64_t v = 0;
      ASSERT_TRUE(words >> v);
      EXPECT_EQ(l->stats[i], v) << line << " statistic " << i + 1;
    }
    ++parsed;
  }
  EXPECT_EQ(parsed, lines);
}

TEST(DiskstatsFiles, Kernel4Has14Fields) {
  ExpectWholeFile("linux-4.15.txt", kBaseStatCount, 11);
}

TEST(DiskstatsFiles, Kernel5Before5Point5Has18Fields) {
  ExpectWholeFile("linux-5.4.txt", kDiscardStatCount, 7);
}

TEST(DiskstatsFiles, Kernel6Has20Fields) {
  ExpectWholeFile("linux-6.18-vm.txt", kFlushStatCount, 10);
}

TEST(DiskstatsFiles, ThisMachinesKernel) {
  // The running kernel's own file: 20 fields since 5.5.
  std::ifstream in("/proc/diskstats");
  if (!in) GTEST_SKIP() << "SKIPPED: no /proc/diskstats on this machine";
  std::string line;
  std::size_t parsed = 0;
  while (std::getline(in, line)) {
    std::optional<DiskStatsLine> l = parse_diskstats_line(line);
    ASSERT_TRUE(l) << line;
    EXPECT_GE(l->stat_count, kBaseStatCount);
    ++parsed;
  }
  EXPECT_GT(parsed, 0u);
}

// What killed the daemon with std::regex: a 60,000-character device name
// (the recursive executor overflowed the stack under ASan) and a pattern
// with nested quantifiers that --check-config accepted, on a legal
// 31-character name (exponential backtracking, a core at 100 % forever).
// On RE2 both are answered, and correctly.
TEST(StorageCollectorTest, HostileDeviceNamesAndPatternsAreAnsweredInLinearTime) {
  TempProcfs t;
  const std::string huge(60000, 'a');
  const std::string legal = std::string(30, 'a') + "b";
  t.write(line14(huge, 1, 2, 0) + line14(legal, 3, 4, 1) + line14("sda", 5, 6, 2));
  StorageCollector c(t.roots(), device_options("^(a+)+$", ""));
  MetricSink sink(c.metrics());
  CollectOnce(c, sink);
  EXPECT_TRUE(has_series(sink, "nodewatch_storage_reads_completed_total", huge));
  EXPECT_FALSE(has_series(sink, "nodewatch_storage_reads_completed_total", legal));
  EXPECT_FALSE(has_series(sink, "nodewatch_storage_reads_completed_total", "sda"));
  // The same pattern as an exclusion.
  StorageCollector x(t.roots(), device_options("", "^(a+)+$"));
  MetricSink s2(x.metrics());
  CollectOnce(x, s2);
  EXPECT_FALSE(has_series(s2, "nodewatch_storage_reads_completed_total", huge));
  EXPECT_TRUE(has_series(s2, "nodewatch_storage_reads_completed_total", legal));
  EXPECT_EQ(Value(s2, "nodewatch_storage_reads_completed_total", {"sda"}), 5);
}

}  // namespace
}  // namespace nodewatch::storage
