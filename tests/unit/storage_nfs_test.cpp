// Tests of the storage collector's NFS part: the mountstats parser on
// captured-layout files (tests/fixtures/storage/mountstats, see the README
// there) and on inline edge cases, and the collector over the fixture procfs
// tree. Expected values are read from the fixture's raw lines by the test's
// own tokenizer, not from the parser.

#include <gtest/gtest.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <cmath>  // before support/collector_test.hpp
#include <cstdint>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "config.hpp"
#include "nodewatch/sources/fs.hpp"
#include "storage/mountstats.hpp"
#include "storage/nfs_mounts.hpp"
#include "storage/storage_collector.hpp"
#include "support/collector_test.hpp"
#include "support/daemon_process.hpp"

namespace nodewatch::storage {
namespace {

using nodewatch::testing::CollectOnce;
using nodewatch::testing::ReadFile;
using nodewatch::testing::TempDir;
using nodewatch::testing::Value;

std::filesystem::path fixture(const std::string& name) {
  return nodewatch::testing::fixtures_dir() / "storage" / "mountstats" / name;
}

Roots fixture_roots() {
  std::filesystem::path base = nodewatch::testing::fixtures_dir() / "storage";
  return Roots{base / "sys", base / "proc"};
}

// The numbers after "<prefix>" on the first line of `text` (after `after`,
// when given) whose first token is `prefix`: the test's own reading of the file.
std::vector<std::uint64_t> raw_numbers(const std::string& text, const std::string& prefix,
                                       const std::string& after = "") {
  std::istringstream in(text.substr(after.empty() ? 0 : text.find(after)));
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string first;
    words >> first;
    if (first != prefix) continue;
    std::vector<std::uint64_t> out;
    std::string w;
    while (words >> w) {
      if (w.find_first_not_of("0123456789") != std::string::npos) continue;  // "tcp"
      out.push_back(std::stoull(w));
    }
    return out;
  }
  ADD_FAILURE() << "no line " << prefix;
  return {};
}

const NfsOpStats* find_op(const NfsMount& m, std::string_view name) {
  for (const NfsOpStats& op : m.ops) {
    if (op.name == name) return &op;
  }
  return nullptr;
}

void expect_op_matches(const NfsOpStats* op, const std::vector<std::uint64_t>& raw) {
  ASSERT_NE(op, nullptr);
  ASSERT_GE(raw.size(), 8u);
  EXPECT_EQ(op->operations, raw[0]);
  EXPECT_EQ(op->transmissions, raw[1]);
  EXPECT_EQ(op->major_timeouts, raw[2]);
  EXPECT_EQ(op->sent_bytes, raw[3]);
  EXPECT_EQ(op->received_bytes, raw[4]);
  EXPECT_EQ(op->queue_ms, raw[5]);
  EXPECT_EQ(op->rtt_ms, raw[6]);
  EXPECT_EQ(op->execute_ms, raw[7]);
  EXPECT_EQ(op->has_errors, raw.size() == 9);
  if (raw.size() == 9) {
    EXPECT_EQ(op->errors, raw[8]);
  }
}

// ---------------------------------------------------------------------------
// Captured layouts

TEST(MountstatsParse, Nfs3OverTcp) {
  std::string text = ReadFile(fixture("nfs3-tcp.txt"));
  MountstatsResult r = parse_mountstats(text);
  EXPECT_EQ(r.malformed, 0u);
  EXPECT_EQ(r.skipped_op_lines, 0u);
  ASSERT_EQ(r.mounts.size(), 1u);  // proc and sysfs are ignored
  const NfsMount& m = r.mounts[0];
  EXPECT_EQ(m.export_name, "10.20.0.5:/export/datasets");
  EXPECT_EQ(m.mountpoint, "/mnt/datasets");
  EXPECT_EQ(m.server, "10.20.0.5");
  EXPECT_EQ(m.fstype, "nfs");
  EXPECT_EQ(m.statvers, "1.1");
  EXPECT_EQ(m.version, "3");
  EXPECT_EQ(m.transport.protocol, "tcp");
  EXPECT_EQ(m.ops.size(), 22u);  // every NFSv3 procedure, NULL to COMMIT
  expect_op_matches(find_op(m, "READ"), raw_numbers(text, "READ:"));
  expect_op_matches(find_op(m, "LOOKUP"), raw_numbers(text, "LOOKUP:"));
  expect_op_matches(find_op(m, "NULL"), raw_numbers(text, "NULL:"));
  // xprt tcp 1.1: port bind connect connect_time idle sends recvs bad_xids ...
  std::vector<std::uint64_t> x = raw_numbers(text, "xprt:");
  ASSERT_EQ(x.size(), 13u);
  EXPECT_EQ(m.transport.connects, x[2]);
  EXPECT_EQ(m.transport.sends, x[5]);
  EXPECT_EQ(m.transport.receives, x[6]);
  EXPECT_EQ(m.transport.bad_xids, x[7]);
}

TEST(MountstatsParse, NconnectTransportsAreSummed) {
  // nconnect=2: the kernel prints one xprt line per transport.
  std::string text = ReadFile(fixture("nfs41-tcp.txt"));
  const std::string one = "\txprt:\ttcp 912 1 3 0 4 1063395 1063393 0 95212544 0 128 4523 1203\n";
  const std::string two = "\txprt:\ttcp 913 1 2 0 4 1000 999 1 9000 0 12 45 12\n";
  auto at = text.find(one);
  ASSERT_NE(at, std::string::npos);
  text.insert(at + one.size(), two);
  MountstatsResult r = parse_mountstats(text);
  EXPECT_EQ(r.malformed, 0u);
  ASSERT_EQ(r.mounts.size(), 1u);
  const NfsTransport& t = r.mounts[0].transport;
  EXPECT_EQ(t.connects, 3u + 2u);
  EXPECT_EQ(t.sends, 1063395u + 1000u);
  EXPECT_EQ(t.receives, 1063393u + 999u);
  EXPECT_EQ(t.bad_xids, 0u + 1u);
}

TEST(MountstatsParse, Nfs41OverTcp) {
  std::string text = ReadFile(fixture("nfs41-tcp.txt"));
  MountstatsResult r = parse_mountstats(text);
  EXPECT_EQ(r.malformed, 0u);
  ASSERT_EQ(r.mounts.size(), 1u);
  const NfsMount& m = r.mounts[0];
  EXPECT_EQ(m.fstype, "nfs4");
  EXPECT_EQ(m.version, "4.1");
  EXPECT_EQ(m.server, "fs01.cluster.example");
  EXPECT_EQ(m.transport.protocol, "tcp");
  // impl_id:, nfsv4: and the other unknown lines are skipped, every op line kept.
  std::size_t op_lines = 0;
  std::istringstream in(text.substr(text.find("per-op statistics")));
  std::string line;
  std::getline(in, line);
  while (std::getline(in, line)) op_lines += line.find(':') != std::string::npos;
  EXPECT_EQ(m.ops.size(), op_lines);
  expect_op_matches(find_op(m, "WRITE"), raw_numbers(text, "WRITE:"));
  expect_op_matches(find_op(m, "OPEN"), raw_numbers(text, "OPEN:"));
  expect_op_matches(find_op(m, "COMMIT"), raw_numbers(text, "COMMIT:"));
}

TEST(MountstatsParse, RdmaTransport) {
  std::string text = ReadFile(fixture("nfs3-rdma.txt"));
  MountstatsResult r = parse_mountstats(text);
  EXPECT_EQ(r.malformed, 0u);
  ASSERT_EQ(r.mounts.size(), 1u);
  const NfsMount& m = r.mounts[0];
  EXPECT_EQ(m.transport.protocol, "rdma");
  std::vector<std::uint64_t> x = raw_numbers(text, "xprt:");
  EXPECT_EQ(x.size(), 27u);  // 10 generic + 11 + 6 RDMA counters (Linux 6.x)
  EXPECT_EQ(m.transport.sends, x[5]);
  EXPECT_EQ(m.transport.receives, x[6]);
  expect_op_matches(find_op(m, "READ"), raw_numbers(text, "READ:"));
}

TEST(MountstatsParse, OldStatversWithEightNumberOps) {
  std::string text = ReadFile(fixture("statvers-1.0.txt"));
  MountstatsResult r = parse_mountstats(text);
  EXPECT_EQ(r.malformed, 0u);
  ASSERT_EQ(r.mounts.size(), 1u);
  const NfsMount& m = r.mounts[0];
  EXPECT_EQ(m.statvers, "1.0");
  EXPECT_EQ(raw_numbers(text, "xprt:").size(), 10u);  // tcp, statvers 1.0
  EXPECT_EQ(m.transport.sends, raw_numbers(text, "xprt:")[5]);
  const NfsOpStats* read = find_op(m, "READ");
  expect_op_matches(read, raw_numbers(text, "READ:"));
  ASSERT_NE(read, nullptr);
  EXPECT_FALSE(read->has_errors);
}

TEST(MountstatsParse, ShortNullLineIsSkippedAndTheMountKept) {
  std::string text = ReadFile(fixture("null-short.txt"));
  ASSERT_EQ(raw_numbers(text, "NULL:").size(), 6u);  // the fixture's point
  MountstatsResult r = parse_mountstats(text);
  EXPECT_EQ(r.malformed, 0u);
  EXPECT_EQ(r.skipped_op_lines, 1u);
  ASSERT_EQ(r.mounts.size(), 1u);
  EXPECT_EQ(find_op(r.mounts[0], "NULL"), nullptr);
  EXPECT_EQ(r.mounts[0].ops.size(), 21u);
  expect_op_matches(find_op(r.mounts[0], "READ"), raw_numbers(text, "READ:"));
}

TEST(MountstatsParse, TruncatedBlockIsDroppedAndCounted) {
  std::string text = ReadFile(fixture("truncated.txt"));
  ASSERT_NE(text.back(), '\n');  // cut in the middle of a line
  MountstatsResult r = parse_mountstats(text);
  EXPECT_EQ(r.malformed, 1u);
  ASSERT_EQ(r.mounts.size(), 1u);
  EXPECT_EQ(r.mounts[0].mountpoint, "/mnt/datasets");
  expect_op_matches(find_op(r.mounts[0], "READ"), raw_numbers(text, "READ:"));
}

// ---------------------------------------------------------------------------
// Inline edge cases

constexpr std::string_view kMinimalBlock =
    "device srv:/a mounted on /mnt/a with fstype nfs statvers=1.1\n"
    "\topts:\trw,vers=3,proto=tcp\n"
    "\txprt:\ttcp 1 2 3 4 5 6 7 8 9 10 11 12 13\n"
    "\tper-op statistics\n"
    "\t        READ: 1 2 3 4 5 6 7 8 9\n\n";

std::string with_mountpoint(const std::string& mountpoint) {
  std::string block(kMinimalBlock);
  return block.replace(block.find("/mnt/a"), 6, mountpoint);
}

TEST(MountstatsParse, MalformedBlockDoesNotHideTheOthers) {
  std::string text = std::string(kMinimalBlock) +
                     "device srv:/b mounted on /mnt/b with fstype nfs statvers=1.1\n"
                     "\txprt:\ttcp 1 2 3 4 5 6 7 8 9 10 11 12 13\n"
                     "\tper-op statistics\n"
                     "\t        READ: 1 2 x3 4 5 6 7 8 9\n\n" +
                     "device srv:/c mounted on /mnt/c with fstype nfs statvers=1.1\n"
                     "\txprt:\ttcp 1 2 3\n"  // too few for tcp 1.1
                     "\tper-op statistics\n\n" +
                     "device srv:/d mounted at /mnt/d\n" +                  // not a header
                     "device srv:/e mounted on /mnt/e with fstype nfs\n" +  // no statvers
                     with_mountpoint("/mnt/f");
  MountstatsResult r = parse_mountstats(text);
  EXPECT_EQ(r.malformed, 4u);
  ASSERT_EQ(r.mounts.size(), 2u);
  EXPECT_EQ(r.mounts[0].mountpoint, "/mnt/a");
  EXPECT_EQ(r.mounts[1].mountpoint, "/mnt/f");
}

TEST(MountstatsParse, BlockWithoutPerOpStatisticsIsMalformed) {
  MountstatsResult r = parse_mountstats(
      "device srv:/a mounted on /mnt/a with fstype nfs statvers=1.1\n"
      "\txprt:\ttcp 1 2 3 4 5 6 7 8 9 10 11 12 13\n");
  EXPECT_EQ(r.malformed, 1u);
  EXPECT_TRUE(r.mounts.empty());
}

TEST(MountstatsParse, UdpLayoutsOfBothStatvers) {
  MountstatsResult r = parse_mountstats(
      "device srv:/a mounted on /mnt/a with fstype nfs statvers=1.0\n"
      "\txprt:\tudp 800 1 70 69 2 100 0\n\tper-op statistics\n\n"
      "device srv:/b mounted on /mnt/b with fstype nfs statvers=1.1\n"
      "\txprt:\tudp 800 1 71 70 3 100 0 16 0 0\n\tper-op statistics\n\n"
      "device srv:/c mounted on /mnt/c with fstype nfs statvers=1.1\n"
      "\txprt:\tudp 800 1 71 70 3 100 0\n\tper-op statistics\n\n");
  EXPECT_EQ(r.malformed, 1u);  // srv:/c has the 1.0 field count under 1.1
  ASSERT_EQ(r.mounts.size(), 2u);
  EXPECT_EQ(r.mounts[0].transport.sends, 70u);
  EXPECT_EQ(r.mounts[0].transport.receives, 69u);
  EXPECT_EQ(r.mounts[0].transport.bad_xids, 2u);
  EXPECT_EQ(r.mounts[1].transport.sends, 71u);
  EXPECT_EQ(r.mounts[1].transport.connects, 0u);
}

TEST(MountstatsParse, EscapedNamesAndServers) {
  MountstatsResult r = parse_mountstats(
      "device [fd00::5]:/ex\\040port mounted on /mnt/my\\040data\\134x with fstype nfs4 "
      "statvers=1.1\n\topts:\trw,vers=4.2\n\txprt:\ttcp 1 2 3 4 5 6 7 8 9 10 11 12 13\n"
      "\tper-op statistics\n");
  ASSERT_EQ(r.mounts.size(), 1u);
  EXPECT_EQ(r.mounts[0].mountpoint, "/mnt/my data\\x");
  EXPECT_EQ(r.mounts[0].export_name, "[fd00::5]:/ex port");
  EXPECT_EQ(r.mounts[0].server, "fd00::5");
  EXPECT_EQ(r.mounts[0].version, "4.2");
  EXPECT_EQ(nfs_server("nohost"), "");
  EXPECT_EQ(unescape_mount_field("a\\011b\\\\"), "a\tb\\\\");
}

TEST(MountstatsParse, EmptyAndForeignInput) {
  EXPECT_TRUE(parse_mountstats("").mounts.empty());
  MountstatsResult r = parse_mountstats(
      "no device mounted on /x with fstype none\n"
      "device cgroup2 mounted on /sys/fs/cgroup with fstype cgroup2\n"
      "\tsomething: 1 2 3\n");
  EXPECT_EQ(r.malformed, 0u);
  EXPECT_TRUE(r.mounts.empty());
}

// ---------------------------------------------------------------------------
// The collector over the fixture procfs (proc/self -> 4242)

TEST(StorageNfs, ValuesFromTheFixture) {
  StorageCollector c(fixture_roots(), StorageOptions{});
  MetricSink sink(c.metrics());
  CollectOnce(c, sink);
  EXPECT_EQ(sink.errors().count("mountstats_parse_error"), 0u);
  EXPECT_EQ(sink.errors().count("mountstats_short_op_line"), 0u);
  EXPECT_EQ(sink.errors().count("mountstats_read_error"), 0u);
  std::string text = ReadFile(fixture_roots().procfs / "4242" / "mountstats");
  const std::string ds = "/mnt/datasets", dsx = "10.20.0.5:/export/datasets";
  std::vector<std::uint64_t> read = raw_numbers(text, "READ:", "/mnt/datasets");
  EXPECT_EQ(Value(sink, "nodewatch_storage_nfs_operations_total", {ds, dsx, "READ"}), read[0]);
  EXPECT_EQ(Value(sink, "nodewatch_storage_nfs_transmissions_total", {ds, dsx, "READ"}), read[1]);
  EXPECT_EQ(Value(sink, "nodewatch_storage_nfs_major_timeouts_total", {ds, dsx, "READ"}), read[2]);
  EXPECT_EQ(Value(sink, "nodewatch_storage_nfs_sent_bytes_total", {ds, dsx, "READ"}), read[3]);
  EXPECT_EQ(Value(sink, "nodewatch_storage_nfs_received_bytes_total", {ds, dsx, "READ"}),
            static_cast<double>(read[4]));
  EXPECT_DOUBLE_EQ(Value(sink, "nodewatch_storage_nfs_queue_seconds_total", {ds, dsx, "READ"}),
                   read[5] / 1000.0);
  EXPECT_DOUBLE_EQ(Value(sink, "nodewatch_storage_nfs_rtt_seconds_total", {ds, dsx, "READ"}),
                   read[6] / 1000.0);
  EXPECT_DOUBLE_EQ(Value(sink, "nodewatch_storage_nfs_execute_seconds_total", {ds, dsx, "READ"}),
                   read[7] / 1000.0);
  std::vector<std::uint64_t> lookup = raw_numbers(text, "LOOKUP:", "/mnt/datasets");
  EXPECT_EQ(Value(sink, "nodewatch_storage_nfs_errors_total", {ds, dsx, "LOOKUP"}), lookup[8]);
  EXPECT_EQ(Value(sink, "nodewatch_storage_nfs_mount_info", {ds, dsx, "10.20.0.5", "tcp", "3"}), 1);
  EXPECT_EQ(Value(sink, "nodewatch_storage_nfs_mount_info",
                  {"/mnt/checkpoints", "fs01.cluster.example:/checkpoints", "fs01.cluster.example",
                   "tcp", "4.1"}),
            1);
  EXPECT_EQ(Value(sink, "nodewatch_storage_nfs_mount_info",
                  {"/mnt/scratch", "192.168.100.2:/scratch", "192.168.100.2", "rdma", "3"}),
            1);
  EXPECT_EQ(Value(sink, "nodewatch_storage_nfs_mount_info",
                  {"/home", "filer:/vol/home", "filer", "tcp", "3"}),
            1);
  // Statvers 1.0 op lines have no error count: no errors series.
  double v = 0;
  EXPECT_FALSE(
      sink.get("nodewatch_storage_nfs_errors_total", {"/home", "filer:/vol/home", "READ"}, &v));
  EXPECT_TRUE(
      sink.get("nodewatch_storage_nfs_operations_total", {"/home", "filer:/vol/home", "READ"}, &v));
  // Not in the default op set.
  EXPECT_FALSE(sink.get("nodewatch_storage_nfs_operations_total",
                        {"/mnt/checkpoints", "fs01.cluster.example:/checkpoints", "CLOSE"}, &v));
  EXPECT_FALSE(sink.get("nodewatch_storage_nfs_operations_total", {ds, dsx, "NULL"}, &v));
  // Transport: the xprt line's sends; retransmissions summed over every op line.
  std::vector<std::uint64_t> x = raw_numbers(text, "xprt:", "/mnt/datasets");
  EXPECT_EQ(Value(sink, "nodewatch_storage_nfs_transport_sends_total", {ds, dsx}), x[5]);
  EXPECT_EQ(Value(sink, "nodewatch_storage_nfs_transport_receives_total", {ds, dsx}), x[6]);
  std::uint64_t retrans = 0;
  std::size_t ops_begin = text.find("per-op statistics", text.find("/mnt/datasets"));
  std::istringstream in(text.substr(ops_begin, text.find("device", ops_begin) - ops_begin));
  std::string line;
  std::getline(in, line);
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string name;
    std::uint64_t ops = 0, trans = 0;
    if (words >> name >> ops >> trans) retrans += trans - ops;
  }
  EXPECT_GT(retrans, 0u);
  EXPECT_EQ(Value(sink, "nodewatch_storage_nfs_transport_retransmits_total", {ds, dsx}), retrans);
}

TEST(StorageNfs, OperationSetIsConfigurable) {
  StorageOptions o;
  o.nfs_operations = {"CLOSE", "SEQUENCE"};
  StorageCollector c(fixture_roots(), o);
  MetricSink sink(c.metrics());
  CollectOnce(c, sink);
  double v = 0;
  const std::string cp = "/mnt/checkpoints", cpx = "fs01.cluster.example:/checkpoints";
  EXPECT_TRUE(sink.get("nodewatch_storage_nfs_operations_total", {cp, cpx, "CLOSE"}, &v));
  EXPECT_TRUE(sink.get("nodewatch_storage_nfs_operations_total", {cp, cpx, "SEQUENCE"}, &v));
  EXPECT_FALSE(sink.get("nodewatch_storage_nfs_operations_total", {cp, cpx, "READ"}, &v));
}

TEST(StorageNfs, MountstatsFileIsConfigurableAndMayBeAbsent) {
  TempDir dir;
  std::filesystem::copy_file(fixture_roots().procfs / "diskstats", dir.path() / "diskstats");
  std::filesystem::create_directories(dir.path() / "1");
  std::filesystem::copy_file(fixture("nfs3-rdma.txt"), dir.path() / "1" / "mountstats");
  Roots roots{fixture_roots().sysfs, dir.path()};
  {
    StorageCollector c(roots, StorageOptions{});  // self/mountstats: absent here
    MetricSink sink(c.metrics());
    CollectOnce(c, sink);
    EXPECT_EQ(sink.errors().count("mountstats_read_error"), 0u);
    double v = 0;
    EXPECT_FALSE(sink.get("nodewatch_storage_nfs_mount_info",
                          {"/mnt/scratch", "192.168.100.2:/scratch", "192.168.100.2", "rdma", "3"},
                          &v));
  }
  StorageOptions o;
  o.mountstats = "1/mountstats";
  StorageCollector c(roots, o);
  MetricSink sink(c.metrics());
  CollectOnce(c, sink);
  EXPECT_EQ(Value(sink, "nodewatch_storage_nfs_mount_info",
                  {"/mnt/scratch", "192.168.100.2:/scratch", "192.168.100.2", "rdma", "3"}),
            1);
}

// A collection of NfsMounts alone (the rest of the storage collector needs
// block devices).
void CollectNfs(NfsMounts& nfs, MetricSink& sink) {
  CollectContext ctx{std::chrono::steady_clock::now() + std::chrono::seconds(10), nullptr};
  nfs.collect(ctx, sink);
}

MetricTable nfs_table() {
  return MetricTable(NfsMounts::metric_descs());
}

TEST(StorageNfs, WithoutNfsTheRealMountstatsIsReadAgainOnlyWhenTheMountTableChanges) {
  // The kernel's own files: mountinfo's poll() is what a fixture cannot
  // imitate (a regular file never reports POLLPRI).
  if (ReadFile("/proc/self/mountstats").find("with fstype nfs") != std::string::npos)
    GTEST_SKIP() << "this host has NFS mounts: mountstats is read at every collection here";
  const MetricTable table = nfs_table();
  NfsMounts nfs(Roots{}, "self/mountstats", {"READ"}, 16);
  for (int i = 0; i < 3; ++i) {
    MetricSink sink(table);
    CollectNfs(nfs, sink);
    EXPECT_TRUE(sink.errors().empty());
    EXPECT_EQ(sink.render().find("nodewatch_storage_nfs_mount_info{"), std::string::npos);
  }
  EXPECT_EQ(nfs.reads(), 1u);  // no NFS mount, and the table did not change
  if (::geteuid() != 0)
    GTEST_SKIP() << "mounting a tmpfs to change the mount table needs root (CI runs as root)";
  TempDir dir;
  ASSERT_EQ(::mount("nodewatch-test", dir.path().c_str(), "tmpfs", 0, "size=64k"), 0)
      << std::strerror(errno);
  {
    MetricSink sink(table);
    CollectNfs(nfs, sink);
  }
  EXPECT_EQ(nfs.reads(), 2u);  // the table changed: read again, still no NFS
  {
    MetricSink sink(table);
    CollectNfs(nfs, sink);
  }
  EXPECT_EQ(nfs.reads(), 2u);
  ASSERT_EQ(::umount(dir.path().c_str()), 0) << std::strerror(errno);
  {
    MetricSink sink(table);
    CollectNfs(nfs, sink);
  }
  EXPECT_EQ(nfs.reads(), 3u);
}

TEST(StorageNfs, OffProcfsEveryCollectionReadsMountstats) {
  // A fixture tree: a mount added to the file between two collections must
  // be seen at the second, with no poll() to say so.
  TempDir dir;
  dir.write("self/mountstats", "device proc mounted on /proc with fstype proc\n");
  dir.write("self/mountinfo", "22 1 0:21 / /proc rw - proc proc rw\n");
  const MetricTable table = nfs_table();
  NfsMounts nfs(Roots{fixture_roots().sysfs, dir.path()}, "self/mountstats", {"READ"}, 16);
  {
    MetricSink sink(table);
    CollectNfs(nfs, sink);
  }
  std::filesystem::copy_file(fixture("nfs3-rdma.txt"), dir.path() / "self" / "mountstats",
                             std::filesystem::copy_options::overwrite_existing);
  MetricSink sink(table);
  CollectNfs(nfs, sink);
  EXPECT_EQ(nfs.reads(), 2u);
  EXPECT_EQ(Value(sink, "nodewatch_storage_nfs_mount_info",
                  {"/mnt/scratch", "192.168.100.2:/scratch", "192.168.100.2", "rdma", "3"}),
            1);
}

TEST(StorageNfs, MalformedBlocksAndShortLinesAreCounted) {
  TempDir dir;
  std::filesystem::copy_file(fixture_roots().procfs / "diskstats", dir.path() / "diskstats");
  dir.write("self/mountstats",
            ReadFile(fixture("null-short.txt")) + ReadFile(fixture("truncated.txt")));
  StorageCollector c(Roots{fixture_roots().sysfs, dir.path()}, StorageOptions{});
  MetricSink sink(c.metrics());
  CollectOnce(c, sink);
  EXPECT_EQ(sink.errors().at("mountstats_short_op_line"), 1u);
  EXPECT_EQ(sink.errors().at("mountstats_parse_error"), 1u);
  // Both well-formed blocks name /mnt/datasets: the later one (truncated.txt's
  // first block, with a full NULL line) is the one exported, once.
  EXPECT_EQ(Value(sink, "nodewatch_storage_nfs_mount_info",
                  {"/mnt/datasets", "10.20.0.5:/export/datasets", "10.20.0.5", "tcp", "3"}),
            1);
}

TEST(StorageNfs, UnreadableMountstatsIsCounted) {
  TempDir dir;
  std::filesystem::copy_file(fixture_roots().procfs / "diskstats", dir.path() / "diskstats");
  std::filesystem::create_directories(dir.path() / "self" / "mountstats");  // EISDIR on read
  StorageCollector c(Roots{fixture_roots().sysfs, dir.path()}, StorageOptions{});
  MetricSink sink(c.metrics());
  CollectOnce(c, sink);
  EXPECT_EQ(sink.errors().at("mountstats_read_error"), 1u);
  EXPECT_EQ(Value(sink, "nodewatch_storage_reads_completed_total", {"sda"}), 45678);
}

// An errno injected on mountstats in the middle of a collection: an error
// is counted under the file and the NFS series are left out for that
// collection; absent or gone is no error. The block devices are unaffected
// and the next collection has the mounts again, on the same descriptor.
TEST(StorageNfs, MountstatsFailuresAreCountedUnderTheFile) {
  const std::vector<std::string> info = {"/mnt/datasets", "10.20.0.5:/export/datasets", "10.20.0.5",
                                         "tcp", "3"};
  for (int err : {EACCES, EIO, ENODEV, ENOENT}) {
    SCOPED_TRACE(sources::errno_name(err));
    auto faults = std::make_shared<sources::Faults>();
    Roots roots = fixture_roots();
    roots.faults = faults;
    StorageCollector c(roots, StorageOptions{});
    MetricSink first(c.metrics());
    CollectOnce(c, first);
    EXPECT_EQ(Value(first, "nodewatch_storage_nfs_mount_info", info), 1);
    const std::size_t held = c.held_descriptors();

    faults->inject("proc/self/mountstats", err, 1);
    MetricSink failed(c.metrics());
    CollectOnce(c, failed);
    double v = 0;
    EXPECT_FALSE(failed.get("nodewatch_storage_nfs_mount_info", info, &v));
    EXPECT_EQ(Value(failed, "nodewatch_storage_reads_completed_total", {"sda"}), 45678);
    bool counted = err == EACCES || err == EIO;
    EXPECT_EQ(failed.errors().count("mountstats_read_error"), counted ? 1u : 0u);
    if (counted) {
      auto it = failed.failures().find({"mountstats_read_error", "self/mountstats"});
      ASSERT_NE(it, failed.failures().end());
      EXPECT_EQ(it->second, sources::errno_name(err));
    } else {
      EXPECT_TRUE(failed.failures().empty());
    }

    MetricSink again(c.metrics());
    CollectOnce(c, again);
    EXPECT_EQ(Value(again, "nodewatch_storage_nfs_mount_info", info), 1);
    EXPECT_TRUE(again.failures().empty());
    EXPECT_EQ(c.held_descriptors(), held);
  }
}

TEST(StorageNfs, MountstatsOptionIsValidated) {
  std::vector<CollectorSpec> catalog = {storage_collector_spec()};
  for (const char* bad : {"/proc/1/mountstats", "../etc/passwd", ""}) {
    ConfigResult r = parse_config(
        std::string("[collectors.storage]\nmountstats = \"") + bad + "\"\n", "n.toml", catalog);
    EXPECT_FALSE(r.config) << bad;
    ASSERT_EQ(r.errors.size(), 1u) << bad;
    EXPECT_EQ(r.errors[0].key, "collectors.storage.mountstats");
  }
  ConfigResult ok = parse_config(
      "[collectors.storage]\nmountstats = \"1/mountstats\"\nnfs_operations = [\"READ\"]\n",
      "n.toml", catalog);
  EXPECT_TRUE(ok.config) << (ok.errors.empty() ? "" : ok.errors[0].str());
}

}  // namespace
}  // namespace nodewatch::storage
