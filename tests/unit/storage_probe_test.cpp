// Tests of the storage collector's active probes: configuration validation
// (each error names the probe and its key), and a probe of a real directory
// of this machine (every operation, real latencies in the histogram, the
// probe file created once, rewritten in place, never grown).

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>  // before support/collector_test.hpp
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "config.hpp"
#include "nodewatch/fs_helper.hpp"
#include "nodewatch/services.hpp"
#include "nodewatch/sources/fs.hpp"
#include "nodewatch/unique_fd.hpp"
#include "storage/path_check.hpp"
#include "storage/probe.hpp"
#include "storage/storage_collector.hpp"
#include "support/collector_test.hpp"
#include "support/daemon_process.hpp"
#include "support/eventually.hpp"
#include "support/lease.hpp"
#include "support/log_capture.hpp"
#include "support/open_gate.hpp"

namespace nodewatch::storage {
namespace {

using namespace std::chrono_literals;
using nodewatch::testing::CollectOnce;
using nodewatch::testing::Eventually;
using nodewatch::testing::ReadFile;
using nodewatch::testing::TempDir;
using nodewatch::testing::Value;

// The timeout of a probe of a path that does not hang: long enough that an
// error or a stuck probe is the path's, not a loaded machine's (a helper
// call under a sanitizer, beside other tests, took over 200 ms).
constexpr std::chrono::milliseconds kNoHang = 2s;

Roots fixture_roots() {
  std::filesystem::path base = nodewatch::testing::fixtures_dir() / "storage";
  return Roots{base / "sys", base / "proc"};
}

// Failures of `ops` with errno `name` so far.
std::uint64_t errno_count(const Probe& p, std::initializer_list<ProbeOp> ops, const char* name) {
  ProbeSnapshot snap = p.snapshot();
  std::uint64_t n = 0;
  for (ProbeOp op : ops) {
    const auto& e = snap.ops[static_cast<std::size_t>(op)].errors;
    auto it = e.find(name);
    if (it != e.end()) n += it->second;
  }
  return n;
}

// Options of one probe of `dir` that reads every 100 ms.
StorageOptions one_read_probe(const TempDir& dir, std::chrono::milliseconds timeout) {
  ProbeConfig pc;
  pc.path = dir.path().string();
  pc.operations = {ProbeOp::kRead};
  pc.interval = 100ms;
  pc.timeout = timeout;
  StorageOptions o;
  o.probes = {pc};
  return o;
}

// The state of `p`'s read operation.
ProbeOpState read_state_of(const Probe& p) {
  return p.snapshot().ops[static_cast<std::size_t>(ProbeOp::kRead)];
}

ConfigResult parse(const std::string& probe_body) {
  static const std::vector<CollectorSpec> catalog = {storage_collector_spec()};
  return parse_config("[[collectors.storage.probe]]\n" + probe_body, "n.toml", catalog);
}

TEST(ProbeConfig, ValidProbeIsAccepted) {
  TempDir dir;
  ConfigResult r = parse("path = \"" + dir.path().string() +
                         "\"\noperations = [\"read\", \"stat\"]\ninterval = \"10s\"\n"
                         "timeout = \"5s\"\nsize = \"64KiB\"\n");
  ASSERT_TRUE(r.config) << r.errors[0].str();
}

TEST(ProbeConfig, EachErrorNamesTheProbe) {
  TempDir dir;
  std::string file = dir.write("plain", "x").string();
  std::string ok = dir.path().string();
  struct Case {
    std::string body;
    std::string key;
    std::string words;
  };
  const std::vector<Case> cases = {
      {"path = \"data/training\"\n", "path", "must be absolute"},
      {"path = \"" + ok + "/missing\"\n", "path", "No such file or directory"},
      {"path = \"" + file + "\"\n", "path", "not a directory"},
      {"path = \"" + ok + "\"\ninterval = \"1s\"\ntimeout = \"2s\"\n", "timeout",
       "longer than interval"},
      {"path = \"" + ok + "\"\nsize = \"2MiB\"\n", "size", "over the maximum"},
      {"path = \"" + ok + "\"\nsize = \"4 parsecs\"\n", "size", "not a size"},
      {"path = \"" + ok + "\"\noperations = [\"stat\", \"unlink\"]\n", "operations",
       "unknown operation \"unlink\""},
      {"path = \"" + ok + "\"\noperations = []\n", "operations", "no operation"},
  };
  for (const Case& c : cases) {
    ConfigResult r = parse(c.body);
    EXPECT_FALSE(r.config) << c.body;
    ASSERT_EQ(r.errors.size(), 1u) << c.body;
    const ConfigError& e = r.errors[0];
    EXPECT_EQ(e.key, "collectors.storage.probe[0]." + c.key) << e.str();
    EXPECT_NE(e.message.find(c.words), std::string::npos) << e.str();
    EXPECT_NE(e.message.find("probe \""), std::string::npos) << e.str();
  }
  ConfigResult twice = parse_config("[[collectors.storage.probe]]\npath = \"" + ok +
                                        "\"\n[[collectors.storage.probe]]\npath = \"" + ok + "\"\n",
                                    "n.toml", std::vector<CollectorSpec>{storage_collector_spec()});
  ASSERT_EQ(twice.errors.size(), 1u);
  EXPECT_EQ(twice.errors[0].key, "collectors.storage.probe[1].path");
  EXPECT_NE(twice.errors[0].message.find("probed twice"), std::string::npos);
}

// Lists with no reason to be huge are bounded: 3,000 probes (each a path
// check at load and a helper process) or 100,000 NFS operations are a
// configuration error, found before any probe path is checked.
TEST(ProbeConfig, TooManyProbesOrNfsOperationsAreRefusedBeforeAnyIsChecked) {
  const std::vector<CollectorSpec> catalog{storage_collector_spec()};
  std::string many;
  for (std::size_t i = 0; i <= storage::kMaxProbes; ++i)
    many += "[[collectors.storage.probe]]\npath = \"/nonexistent/p" + std::to_string(i) + "\"\n";
  ConfigResult probes = parse_config(many, "n.toml", catalog);
  ASSERT_EQ(probes.errors.size(), 1u) << probes.errors[0].str();
  EXPECT_EQ(probes.errors[0].key, "collectors.storage.probe");
  EXPECT_NE(probes.errors[0].message.find("17 tables; at most 16"), std::string::npos)
      << probes.errors[0].str();

  std::string ops = "[collectors.storage]\nnfs_operations = [";
  for (std::size_t i = 0; i <= storage::kMaxNfsOperations; ++i)
    ops += std::string(i ? ", " : "") + "\"OP" + std::to_string(i) + "\"";
  ConfigResult nfs = parse_config(ops + "]\n", "n.toml", catalog);
  ASSERT_EQ(nfs.errors.size(), 1u);
  EXPECT_NE(nfs.errors[0].message.find("129 elements; at most 128"), std::string::npos)
      << nfs.errors[0].str();
  // At the bound, taken.
  std::string sixteen;
  TempDir dir;
  for (std::size_t i = 0; i < storage::kMaxProbes; ++i) {
    std::filesystem::create_directory(dir.path() / std::to_string(i));
    sixteen += "[[collectors.storage.probe]]\npath = \"" +
               (dir.path() / std::to_string(i)).string() + "\"\n";
  }
  ConfigResult ok = parse_config(sixteen, "n.toml", catalog);
  EXPECT_TRUE(ok.config) << (ok.errors.empty() ? "" : ok.errors[0].str());
}

TEST(ProbeConfig, Sizes) {
  EXPECT_EQ(parse_size("4KiB"), 4096u);
  EXPECT_EQ(parse_size("1MiB"), 1048576u);
  EXPECT_EQ(parse_size("512B"), 512u);
  EXPECT_EQ(parse_size("4096"), 4096u);
  EXPECT_FALSE(parse_size("4kb"));
  EXPECT_FALSE(parse_size("KiB"));
  EXPECT_FALSE(parse_size("-1"));
}

TEST(ProbeConfig, Names) {
  // The probes' errno labels come from the sources layer's names.
  EXPECT_EQ(sources::errno_name(ENOSPC), "ENOSPC");
  EXPECT_EQ(sources::errno_name(EACCES), "EACCES");
  EXPECT_EQ(sources::errno_name(EROFS), "EROFS");
  EXPECT_EQ(sources::errno_name(99999), "E99999");
  EXPECT_EQ(probe_file_name("node-17.cluster"), ".nodewatch-probe-node-17.cluster");
  EXPECT_EQ(probe_file_name("a/b c"), ".nodewatch-probe-a_b_c");
  EXPECT_EQ(probe_buckets().front(), 0.0001);
  EXPECT_EQ(probe_buckets().back(), 30.0);
}

// ---------------------------------------------------------------------------
// A probe of a real directory (/tmp is a real file system on the build machines)

TEST(Probe, EveryOperationOnARealDirectory) {
  TempDir dir;
  StorageOptions o;
  ProbeConfig pc;
  pc.path = dir.path().string();
  pc.operations = {ProbeOp::kStat, ProbeOp::kWrite, ProbeOp::kFsync, ProbeOp::kRead};
  pc.interval = 100ms;
  pc.timeout = kNoHang;
  pc.size = 6000;  // not a multiple of the block size: the O_DIRECT read still reads it all
  o.probes = {pc};
  StorageCollector c(fixture_roots(), o, "test-host");
  ASSERT_EQ(c.probes().size(), 1u);
  const Probe& probe = *c.probes()[0];
  // Three full cycles.
  ASSERT_TRUE(Eventually([&] {
    ProbeSnapshot s = probe.snapshot();
    return s.ops[static_cast<std::size_t>(ProbeOp::kRead)].histogram->count() >= 3;
  }));
  std::filesystem::path file = dir.path() / ".nodewatch-probe-test-host";
  EXPECT_EQ(probe.file_path(), file.string());
  MetricSink sink(c.metrics());
  CollectOnce(c, sink);
  const std::string path = dir.path().string();
  double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  EXPECT_EQ(Value(sink, "nodewatch_storage_probe_stuck", {path}), 0);
  for (const char* op : {"stat", "write", "fsync", "read"}) {
    SCOPED_TRACE(op);
    const Histogram* h = sink.get_histogram("nodewatch_storage_probe_duration_seconds", {path, op});
    ASSERT_NE(h, nullptr);
    EXPECT_GE(h->count(), 3u);
    EXPECT_GT(h->sum(), 0.0);  // real time was spent
    // In seconds: on a local disk well under one each, even with a build
    // writing beside it (an fsync took over 100 ms so, in a test run).
    EXPECT_LT(h->sum() / h->count(), 1.0);
    EXPECT_EQ(Value(sink, "nodewatch_storage_probe_success", {path, op}), 1);
    double last = Value(sink, "nodewatch_storage_probe_last_success_timestamp_seconds", {path, op});
    EXPECT_LE(last, now);
    EXPECT_GT(last, now - 10);
  }
  // Created once with `size` bytes, rewritten in place: the only file there.
  struct stat st {};
  ASSERT_EQ(::stat(file.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 6000);
  ino_t inode = st.st_ino;
  std::size_t entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir.path())) ++entries;
  EXPECT_EQ(entries, 1u);
  std::uint64_t before =
      probe.snapshot().ops[static_cast<std::size_t>(ProbeOp::kWrite)].histogram->count();
  ASSERT_TRUE(Eventually([&] {
    return probe.snapshot().ops[static_cast<std::size_t>(ProbeOp::kWrite)].histogram->count() >
           before + 1;
  }));
  ASSERT_EQ(::stat(file.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 6000);
  EXPECT_EQ(st.st_ino, inode);
  double v = 0;
  EXPECT_FALSE(sink.get("nodewatch_storage_probe_errors_total", {path, "write", "EROFS"}, &v));
}

TEST(Probe, OnlyTheConfiguredOperationsAreTimed) {
  TempDir dir;
  StorageOptions o;
  ProbeConfig pc;
  pc.path = dir.path().string();
  pc.operations = {ProbeOp::kStat};
  pc.interval = 100ms;
  pc.timeout = kNoHang;
  o.probes = {pc};
  StorageCollector c(fixture_roots(), o, "h");
  ASSERT_TRUE(Eventually([&] {
    return c.probes()[0]->snapshot().ops[static_cast<std::size_t>(ProbeOp::kStat)].observed;
  }));
  MetricSink sink(c.metrics());
  CollectOnce(c, sink);
  EXPECT_EQ(Value(sink, "nodewatch_storage_probe_success", {pc.path, "stat"}), 1);
  EXPECT_EQ(sink.get_histogram("nodewatch_storage_probe_duration_seconds", {pc.path, "read"}),
            nullptr);
}

TEST(Probe, FileRemovedUnderItIsCreatedAgain) {
  TempDir dir;
  StorageOptions o;
  ProbeConfig pc;
  pc.path = dir.path().string();
  pc.operations = {ProbeOp::kStat, ProbeOp::kRead};
  pc.interval = 100ms;
  pc.timeout = kNoHang;
  o.probes = {pc};
  StorageCollector c(fixture_roots(), o, "h");
  const Probe& p = *c.probes()[0];
  // The removal is seen by whichever operation comes next: the stat, or the
  // read when the file goes between the two.
  auto stat_errors = [&] { return errno_count(p, {ProbeOp::kStat, ProbeOp::kRead}, "ENOENT"); };
  ASSERT_TRUE(Eventually([&] { return std::filesystem::exists(p.file_path()); }));
  std::filesystem::remove(p.file_path());
  ASSERT_TRUE(Eventually([&] { return stat_errors() >= 1; }));
  ASSERT_TRUE(Eventually([&] {
    return std::filesystem::exists(p.file_path()) &&
           p.snapshot().ops[static_cast<std::size_t>(ProbeOp::kStat)].success;
  }));
}

// What a test put somewhere, to check that it is left as it was.
struct Planted {
  struct stat st {};
  explicit Planted(const std::filesystem::path& p) { EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p; }
  bool same(const std::filesystem::path& p) const {
    struct stat now {};
    return ::lstat(p.c_str(), &now) == 0 && now.st_ino == st.st_ino && now.st_mode == st.st_mode &&
           now.st_size == st.st_size && now.st_uid == st.st_uid &&
           now.st_mtim.tv_sec == st.st_mtim.tv_sec && now.st_mtim.tv_nsec == st.st_mtim.tv_nsec;
  }
};

// The uid a test gives what it plants (another user's, when it may).
uid_t planter_uid() {
  return ::geteuid() == 0 ? 65534 : ::geteuid();
}

// The regular files under `dir` whose name starts with `prefix`.
std::vector<std::filesystem::path> files_named(const std::filesystem::path& dir,
                                               const std::string& prefix) {
  std::vector<std::filesystem::path> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.is_regular_file() && !e.is_symlink() &&
        e.path().filename().string().rfind(prefix, 0) == 0)
      out.push_back(e.path());
  }
  return out;
}

// Probes `dirs` with the default size until every operation of `ops`
// succeeded without an error; the collector is still probing.
std::unique_ptr<StorageCollector> probe_until_all_succeed(const std::vector<const TempDir*>& dirs,
                                                          std::vector<ProbeOp> ops = {
                                                              ProbeOp::kStat, ProbeOp::kWrite,
                                                              ProbeOp::kRead}) {
  StorageOptions o;
  for (const TempDir* d : dirs) {
    ProbeConfig pc;
    pc.path = d->path().string();
    pc.operations = ops;
    pc.interval = 100ms;
    pc.timeout = kNoHang;
    o.probes.push_back(pc);
  }
  auto c = std::make_unique<StorageCollector>(fixture_roots(), o, "h");
  for (const auto& probe : c->probes()) {
    SCOPED_TRACE(probe->config().path);
    EXPECT_TRUE(Eventually(
        [&] {
          ProbeSnapshot s = probe->snapshot();
          for (ProbeOp op : probe->config().operations)
            if (!s.ops[static_cast<std::size_t>(op)].success) return false;
          return true;
        },
        5s));
    for (const auto& op : probe->snapshot().ops) EXPECT_TRUE(op.errors.empty());
  }
  return c;
}

TEST(Probe, AFifoOrADirectoryAtItsFileNameIsLeftAloneLoggedAndProbedAround) {
  // The probe file's first name is predictable: anyone who may write the
  // probed directory (a shared scratch space) can put something there
  // first. A FIFO must not hold the probe (an open() of it waits for a
  // writer), a directory must not leave it failing; neither is touched, and
  // the log says what was found, whose it is, and which name is probed
  // instead. Bounded in time: a probe that waits on the FIFO never succeeds.
  nodewatch::testing::LogCapture log;
  TempDir fifo_dir, dir_dir;
  const std::string name = probe_file_name("h");
  const std::filesystem::path fifo = fifo_dir.path() / name;
  const std::filesystem::path subdir = dir_dir.path() / name;
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0666), 0);
  std::filesystem::create_directory(subdir);
  std::ofstream(subdir / "inside") << "x";
  for (const auto& p : {fifo, subdir}) ASSERT_EQ(::lchown(p.c_str(), planter_uid(), -1), 0);
  const Planted fifo_was(fifo), subdir_was(subdir), inside_was(subdir / "inside");

  auto c = probe_until_all_succeed(
      {&fifo_dir, &dir_dir}, {ProbeOp::kStat, ProbeOp::kWrite, ProbeOp::kFsync, ProbeOp::kRead});
  for (const auto& probe : c->probes()) {
    SCOPED_TRACE(probe->config().path);
    EXPECT_FALSE(probe->snapshot().stuck);
    // The probe's own file is beside what was there.
    EXPECT_EQ(files_named(probe->config().path, name + ".").size(), 1u);
  }
  EXPECT_TRUE(fifo_was.same(fifo));
  EXPECT_TRUE(subdir_was.same(subdir));
  EXPECT_TRUE(inside_was.same(subdir / "inside"));
  const std::string uid = "owned by uid " + std::to_string(planter_uid());
  const std::string text = log.text();
  EXPECT_NE(text.find("a FIFO " + uid + " is at " + fifo.string() + ", not made by the probe"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("a directory " + uid + " is at " + subdir.string()), std::string::npos)
      << text;
  // Stopped, each probe removes its own file and only that. A stop waits
  // for the probe's thread 500 ms at most (Probe::~Probe): on a loaded
  // machine the removal can come after it.
  c.reset();
  EXPECT_TRUE(Eventually([&] {
    return files_named(fifo_dir.path(), name + ".").empty() &&
           files_named(dir_dir.path(), name + ".").empty();
  }));
  EXPECT_TRUE(fifo_was.same(fifo));
  EXPECT_TRUE(subdir_was.same(subdir));
}

TEST(Probe, ALeftoverOfAnEarlierRunAtTheFirstNameIsRemovedAndTheNameUsed) {
  // An earlier run that did not stop cleanly (or a version that never
  // removed its file) left the probe file: a regular file of the daemon's
  // user, one link, at most `size` bytes. It is removed, made afresh, and
  // the probe stays at the first name; the log says so at info level, with
  // no warning. A file with a second link, or larger than a probe writes,
  // is not the probe's: left alone and probed around, as before.
  nodewatch::testing::LogCapture log;
  TempDir left_dir, linked_dir, big_dir, elsewhere;
  const std::string name = probe_file_name("h");
  const std::filesystem::path left = left_dir.write(name, std::string(100, 'x'));
  const std::filesystem::path linked = linked_dir.write(name, "linked\n");
  std::filesystem::create_hard_link(linked, elsewhere.path() / "second");
  const std::filesystem::path big = big_dir.write(name, std::string(4097, 'b'));
  const Planted linked_was(linked), big_was(big);

  auto c = probe_until_all_succeed({&left_dir, &linked_dir, &big_dir});
  // Made afresh at the first name, the only probe file there: the probe's
  // `size` bytes, none of the leftover's.
  EXPECT_TRUE(files_named(left_dir.path(), name) == std::vector<std::filesystem::path>{left});
  const std::string now = ReadFile(left);
  EXPECT_EQ(now.size(), 4096u);
  EXPECT_EQ(now.find('x'), std::string::npos);
  c.reset();  // the removal can come after the stop's 500 ms, as above
  EXPECT_TRUE(Eventually([&] { return !std::filesystem::exists(left); }));
  const std::string text = log.text();
  EXPECT_NE(text.find("removed " + left.string() + ", left by an earlier run"), std::string::npos)
      << text;
  EXPECT_EQ(text.find("is at " + left.string()), std::string::npos) << text;
  // Not the probe's: untouched, and the probe went elsewhere.
  for (const auto& [at, was] : {std::pair{linked, &linked_was}, std::pair{big, &big_was}}) {
    EXPECT_TRUE(was->same(at)) << at;
    EXPECT_NE(text.find("a regular file owned by uid " + std::to_string(::geteuid()) + " is at " +
                        at.string() + ", not made by the probe"),
              std::string::npos)
        << text;
    EXPECT_EQ(text.find("removed " + at.string()), std::string::npos) << text;
  }
  EXPECT_EQ(ReadFile(elsewhere.path() / "second"), "linked\n");
}

TEST(Probe, ASmallFileOfAnotherUserAtTheFirstNameIsNoLeftover) {
  if (::geteuid() != 0) GTEST_SKIP() << "chown to another user needs root";
  nodewatch::testing::LogCapture log;
  TempDir dir;
  const std::filesystem::path other = dir.write(probe_file_name("h"), "theirs\n");
  ASSERT_EQ(::lchown(other.c_str(), planter_uid(), -1), 0);
  const Planted other_was(other);

  probe_until_all_succeed({&dir}).reset();
  EXPECT_TRUE(other_was.same(other));
  EXPECT_EQ(ReadFile(other), "theirs\n");
  const std::string text = log.text();
  EXPECT_NE(text.find("a regular file owned by uid " + std::to_string(planter_uid()) + " is at " +
                      other.string() + ", not made by the probe"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("left by an earlier run"), std::string::npos) << text;
}

TEST(Probe, WhatIsPutInPlaceOfItsFileIsNeitherOpenedNorWritten) {
  // Renamed over the probe's file between two cycles: a FIFO (an open()
  // would wait), a regular file of someone else's (a write would clobber
  // it), a link to a file elsewhere. None is opened or changed; each is
  // logged once and the probe carries on with a file of its own.
  nodewatch::testing::LogCapture log;
  TempDir dir, elsewhere;
  const std::filesystem::path victim = elsewhere.write("victim", "precious\n");
  StorageOptions o;
  ProbeConfig pc;
  pc.path = dir.path().string();
  pc.operations = {ProbeOp::kWrite, ProbeOp::kRead, ProbeOp::kStat};
  pc.interval = 100ms;
  pc.timeout = kNoHang;
  o.probes = {pc};
  StorageCollector c(fixture_roots(), o, "h");
  const Probe& p = *c.probes()[0];
  auto writes = [&] {
    return p.snapshot().ops[static_cast<std::size_t>(ProbeOp::kWrite)].histogram->count();
  };
  struct Case {
    const char* what;
    std::function<void(const std::filesystem::path&)> make;
  };
  const std::vector<Case> cases = {
      {"a FIFO", [](const auto& at) { ASSERT_EQ(::mkfifo(at.c_str(), 0666), 0); }},
      {"a regular file", [](const auto& at) { std::ofstream(at) << "someone else's\n"; }},
      {"a symbolic link", [&](const auto& at) { std::filesystem::create_symlink(victim, at); }},
  };
  const Planted victim_was(victim);
  std::vector<std::pair<std::filesystem::path, Planted>> planted;
  std::vector<UniqueFd> replaced;
  for (const Case& k : cases) {
    SCOPED_TRACE(k.what);
    // The probe's file: the one regular file of its name the test did not put there.
    std::vector<std::filesystem::path> own;
    ASSERT_TRUE(Eventually([&] {
      own = files_named(dir.path(), probe_file_name("h"));
      std::erase_if(own, [&](const auto& f) {
        return std::any_of(planted.begin(), planted.end(),
                           [&](const auto& e) { return e.first == f; });
      });
      return own.size() == 1 && writes() > 0;
    }));
    const std::filesystem::path own_file = own.at(0);
    const std::filesystem::path tmp = elsewhere.path() / "planted";
    k.make(tmp);
    if (::testing::Test::HasFatalFailure()) return;
    // The probe's file stays open here until the end: were it freed, what
    // the test plants next could get its inode number, and the probe take
    // that for a file it made.
    replaced.emplace_back(::open(own_file.c_str(), O_RDONLY | O_CLOEXEC));
    ASSERT_GE(replaced.back().get(), 0) << own_file;
    std::filesystem::rename(tmp, own_file);
    planted.emplace_back(own_file, Planted(own_file));
    const std::uint64_t before = writes();
    ASSERT_TRUE(Eventually([&] {
      return writes() >= before + 2 &&
             p.snapshot().ops[static_cast<std::size_t>(ProbeOp::kRead)].success;
    }));
    EXPECT_NE(log.text().find(std::string(k.what) + " owned by uid " + std::to_string(::geteuid()) +
                              " is at " + own_file.string()),
              std::string::npos)
        << log.text();
  }
  for (const auto& [at, was] : planted) EXPECT_TRUE(was.same(at)) << at;
  EXPECT_TRUE(victim_was.same(victim));
  EXPECT_EQ(ReadFile(victim), "precious\n");
  ProbeSnapshot s = p.snapshot();
  EXPECT_FALSE(s.stuck);
  for (const auto& op : s.ops) EXPECT_TRUE(op.errors.empty());
}

TEST(Probe, AKillableWaitTimesOutEachCycleIsStuckAndRecoversByItself) {
  // A lease held on the probe file: the read's open() waits for it to be
  // given back, the helper is abandoned at the timeout, and since that wait
  // is killable (as NFS's RPC waits are) the SIGKILL ends it: each cycle counts
  // ETIMEDOUT on a new helper, the probe is stuck until an operation
  // answers again, the path's key is never held for long (a FUSE request
  // the server has read is not killable: hung_mount_test), and nothing
  // piles up.
  TempDir dir;
  // The timeout: long enough for a creation to answer on a loaded machine
  // under a sanitizer (one that does not is the next test's case).
  StorageCollector c(fixture_roots(), one_read_probe(dir, 200ms), "h");
  const Probe& p = *c.probes()[0];
  const std::string path = dir.path().string();
  auto read_state = [&] { return read_state_of(p); };
  auto timeouts = [&] { return errno_count(p, {ProbeOp::kRead, ProbeOp::kCreate}, "ETIMEDOUT"); };
  ASSERT_TRUE(Eventually([&] { return read_state().success; }));
  const std::uint64_t reads_before = read_state().histogram->count();
  // On the probe's file as it is when the lease is granted: a write lease
  // waits for the probe's helper to close it.
  std::optional<nodewatch::testing::Lease> lease;
  ASSERT_TRUE(Eventually([&] {
    lease.emplace(p.file_path(), 1s);
    return lease->held() && lease->on(p.file_path());
  })) << lease->error();
  ASSERT_TRUE(Eventually([&] { return timeouts() >= 3; }));
  EXPECT_FALSE(read_state().success);
  EXPECT_TRUE(p.snapshot().stuck);
  // A timed-out read is observed at the timeout: the histogram sees it.
  EXPECT_GT(read_state().histogram->count(), reads_before);
  MetricSink sink(c.metrics());
  CollectOnce(c, sink);  // does not wait on the helper
  double exported = 0;
  for (const char* op : {"read", "create"}) {
    double v = 0;
    if (sink.get("nodewatch_storage_probe_errors_total", {path, op, "ETIMEDOUT"}, &v))
      exported += v;
  }
  EXPECT_GE(exported, 3);
  EXPECT_EQ(Value(sink, "nodewatch_storage_probe_stuck", {path}), 1);
  EXPECT_LE(helper::abandoned("probe:" + p.file_path()), 1u) << "abandoned helpers piled up";
  // The lease is given back: the probe reads again by itself.
  lease->release();
  ASSERT_TRUE(Eventually([&] { return read_state().success; }));
  EXPECT_TRUE(std::filesystem::is_regular_file(p.file_path()));
  EXPECT_TRUE(Eventually([&] { return helper::abandoned("probe:" + p.file_path()) == 0; }));
  EXPECT_FALSE(p.snapshot().stuck);  // an operation answered
}

TEST(Probe, AFileAnUnansweredCreationMadeIsTakenBackNotLeftBehind) {
  // The probe's file is removed, and the creation of the next one makes
  // the file but never answers (a gate on opens in the directory holds it
  // after the kernel made the file, as a storage server that made the file
  // and then stopped answering). The helper is abandoned; the next
  // creation finds a file there. Under a name of the probe's own choosing
  // (here the second: a FIFO holds the first), that file is the probe's:
  // it is removed and made again under the same name, not warned about as
  // someone else's and left behind with the probe moving to a third name.
  TempDir dir;
  nodewatch::testing::OpenGate gate(dir.path());
  if (!gate.ok()) GTEST_SKIP() << gate.error();
  nodewatch::testing::LogCapture log;
  const std::string first = probe_file_name("h");
  const std::filesystem::path fifo = dir.path() / first;
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0666), 0);
  StorageCollector c(fixture_roots(), one_read_probe(dir, 300ms), "h");
  const Probe& p = *c.probes()[0];
  auto read_state = [&] { return read_state_of(p); };
  // The probe's file: the one regular file of its first name and a suffix.
  std::vector<std::filesystem::path> own;
  ASSERT_TRUE(Eventually([&] {
    own = files_named(dir.path(), first + ".");
    return read_state().success && own.size() == 1;
  }));
  const std::filesystem::path second = own.at(0);
  gate.shut();
  std::filesystem::remove(second);
  const bool timed_out = Eventually(
      [&] { return errno_count(p, {ProbeOp::kCreate}, "ETIMEDOUT") >= 1 && gate.held() >= 1; });
  // A stat, not an open: the gate lets it by.
  const bool made = std::filesystem::is_regular_file(second);
  gate.open();
  ASSERT_TRUE(timed_out) << "held opens: " << gate.held();
  EXPECT_TRUE(made) << "the unanswered creation made the file";
  ASSERT_TRUE(Eventually([&] { return read_state().success; }));

  EXPECT_EQ(files_named(dir.path(), first + "."), std::vector<std::filesystem::path>{second});
  EXPECT_TRUE(std::filesystem::is_fifo(fifo));
  const std::string text = log.text();
  EXPECT_NE(
      text.find("removed " + second.string() + ", left by its own creation that did not answer"),
      std::string::npos)
      << text;
  EXPECT_EQ(text.find("a regular file owned by"), std::string::npos) << text;
}

TEST(Probe, AReplacementWaitsForItsPredecessorsCallInsteadOfStartingAnother) {
  // A reload replaces the probe while its call is in flight (here the
  // read's open() of a file a lease is held on): the new probe starts no
  // helper call on the path until the old one's ends; the old one stops
  // promptly all the same (its wait is interrupted and its helper
  // abandoned), and the new one then takes over with a file of its own,
  // saying nothing of the one its predecessor made.
  nodewatch::testing::LogCapture log;
  auto registry = std::make_shared<ProbeRegistry>();
  TempDir dir;
  ProbeConfig pc;
  pc.path = dir.path().string();
  pc.operations = {ProbeOp::kRead};
  pc.interval = 100ms;
  pc.timeout = 5s;
  const std::string file = "nodewatch-probe-predecessor-test";
  auto read_of = [](const Probe& p) {
    return p.snapshot().ops[static_cast<std::size_t>(ProbeOp::kRead)];
  };
  std::shared_ptr<Probe> first = registry->acquire(pc, file);
  const std::string key = first->helper_key();
  ASSERT_TRUE(Eventually([&] { return read_of(*first).success; }));
  std::optional<nodewatch::testing::Lease> lease;
  ASSERT_TRUE(Eventually([&] {
    lease.emplace(first->file_path(), 1s);
    return lease->held() && lease->on(first->file_path());
  })) << lease->error();
  // The call is in flight from before its helper is spawned (busy first,
  // then running): wait for both, or the count below misses the first's.
  ASSERT_TRUE(Eventually([&] { return helper::busy(key) && helper::running() > 0; }));
  const std::size_t running_with_first = helper::running();
  // The path's record goes on from one probe to the next: its reads so far.
  const std::uint64_t reads = read_of(*first).histogram->count();

  ProbeConfig changed = pc;
  changed.size = 8192;
  std::shared_ptr<Probe> next = registry->acquire(changed, file);
  ASSERT_NE(next.get(), first.get());
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(helper::running(), running_with_first) << "a second helper was started on the path";
  EXPECT_EQ(read_of(*next).histogram->count(), reads);

  auto t0 = std::chrono::steady_clock::now();
  first->request_stop();
  EXPECT_TRUE(first->finish(std::chrono::steady_clock::now() + 1s))
      << "a probe waiting on its helper must stop promptly";
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
  first.reset();
  ASSERT_TRUE(Eventually([&] {
    ProbeOpState r = read_of(*next);
    return r.histogram->count() > reads && r.success;
  }));
  lease->release();
  // The new probe's file, of its size, wherever the old one's was left.
  std::size_t of_new_size = 0;
  for (const auto& f : files_named(dir.path(), file))
    of_new_size += std::filesystem::file_size(f) == 8192u ? 1 : 0;
  EXPECT_EQ(of_new_size, 1u);
  EXPECT_EQ(log.text().find("not made by the probe"), std::string::npos) << log.text();
  // The cancelled read was nobody's failure.
  EXPECT_TRUE(next->snapshot().ops[static_cast<std::size_t>(ProbeOp::kCreate)].errors.empty());
  EXPECT_TRUE(read_of(*next).errors.empty());
}

// ---------------------------------------------------------------------------
// A rebuilt collector (a reload that changed the options builds the new one
// from the same Services while the old one exists, then releases the old)

std::shared_ptr<const CollectorOptions> typed(StorageOptions o) {
  return std::make_shared<const TypedOptions<StorageOptions>>(std::move(o));
}

ProbeConfig quick_probe(const std::filesystem::path& dir) {
  ProbeConfig pc;
  pc.path = dir.string();
  pc.operations = {ProbeOp::kStat, ProbeOp::kWrite, ProbeOp::kRead};
  pc.interval = 100ms;
  pc.timeout = kNoHang;
  return pc;
}

const StorageCollector& as_storage(const std::unique_ptr<Collector>& c) {
  return dynamic_cast<const StorageCollector&>(*c);
}

// Every series of `before` that is a counter or a histogram is in `after`
// and did not go down.
void ExpectNothingWentDown(const MetricSink& before, const MetricSink& after,
                           const std::string& path) {
  for (const char* op : {"stat", "write", "read"}) {
    SCOPED_TRACE(op);
    const Histogram* a =
        before.get_histogram("nodewatch_storage_probe_duration_seconds", {path, op});
    const Histogram* b =
        after.get_histogram("nodewatch_storage_probe_duration_seconds", {path, op});
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    EXPECT_GE(b->count(), a->count());
    EXPECT_GE(b->sum(), a->sum());
    for (std::size_t i = 0; i < a->bucket_counts().size(); ++i) {
      EXPECT_GE(b->bucket_counts()[i], a->bucket_counts()[i]) << "bucket " << i;
    }
  }
}

TEST(ProbeRebuild, AnUnchangedProbeKeepsItsThreadHistogramAndCounts) {
  TempDir data, checkpoints;
  Services services;
  const CollectorSpec& spec = storage_collector_spec();
  StorageOptions one;
  one.probes = {quick_probe(data.path())};
  std::unique_ptr<Collector> first =
      spec.create(CollectorEnv{fixture_roots(), typed(one), {}, &services});
  const Probe* probe = as_storage(first).probes().at(0).get();
  ASSERT_TRUE(Eventually([&] {
    return probe->snapshot().ops[static_cast<std::size_t>(ProbeOp::kRead)].histogram->count() >= 2;
  }));
  MetricSink before(first->metrics());
  CollectOnce(*first, before);

  StorageOptions two = one;  // one probe added: the collector is rebuilt
  two.probes.push_back(quick_probe(checkpoints.path()));
  std::unique_ptr<Collector> second =
      spec.create(CollectorEnv{fixture_roots(), typed(two), {}, &services});
  ASSERT_EQ(as_storage(second).probes().size(), 2u);
  // The very probe, thread and all, not a new one on the path.
  EXPECT_EQ(as_storage(second).probes()[0].get(), probe);
  first.reset();
  EXPECT_FALSE(as_storage(second).probes()[0]->stop_requested());

  const std::string path = data.path().string();
  std::uint64_t reads =
      before.get_histogram("nodewatch_storage_probe_duration_seconds", {path, "read"})->count();
  ASSERT_TRUE(Eventually([&] {
    return probe->snapshot().ops[static_cast<std::size_t>(ProbeOp::kRead)].histogram->count() >
           reads;  // it goes on probing
  }));
  MetricSink after(second->metrics());
  CollectOnce(*second, after);
  ExpectNothingWentDown(before, after, path);
  EXPECT_EQ(Value(after, "nodewatch_storage_probe_success", {path, "read"}), 1);
}

TEST(ProbeRebuild, AChangedProbeOfAPathContinuesThePathsHistograms) {
  TempDir data;
  Services services;
  const CollectorSpec& spec = storage_collector_spec();
  StorageOptions one;
  one.probes = {quick_probe(data.path())};
  std::unique_ptr<Collector> first =
      spec.create(CollectorEnv{fixture_roots(), typed(one), {}, &services});
  const Probe& probe = *as_storage(first).probes().at(0);
  ASSERT_TRUE(Eventually([&] {
    return probe.snapshot().ops[static_cast<std::size_t>(ProbeOp::kRead)].histogram->count() >= 2;
  }));
  MetricSink before(first->metrics());
  CollectOnce(*first, before);

  StorageOptions slower = one;
  slower.probes[0].interval = 200ms;  // another probe of the same path
  std::unique_ptr<Collector> second =
      spec.create(CollectorEnv{fixture_roots(), typed(slower), {}, &services});
  EXPECT_NE(as_storage(second).probes()[0].get(), &probe);
  first.reset();
  MetricSink after(second->metrics());
  CollectOnce(*second, after);
  ExpectNothingWentDown(before, after, data.path().string());
}

TEST(ProbeRebuild, ARemovedProbeStopsAndItsPathIsForgotten) {
  TempDir data;
  auto registry = std::make_shared<ProbeRegistry>();
  StorageOptions one;
  one.probes = {quick_probe(data.path())};
  std::weak_ptr<Probe> gone;
  auto reads = [](const Probe& p) {
    return p.snapshot().ops[static_cast<std::size_t>(ProbeOp::kRead)].histogram->count();
  };
  {
    StorageCollector c(fixture_roots(), one, "h", StorageServices{nullptr, registry});
    gone = c.probes()[0];
    EXPECT_EQ(registry->paths(), 1u);
    ASSERT_TRUE(Eventually([&] { return reads(*c.probes()[0]) >= 3; }));
  }
  EXPECT_TRUE(gone.expired());  // stopped and released: no thread left on the path
  EXPECT_EQ(registry->paths(), 0u);
  // Configured again later, the path starts afresh (at most the cycle its
  // new thread may have run already).
  StorageCollector again(fixture_roots(), one, "h", StorageServices{nullptr, registry});
  EXPECT_LE(reads(*again.probes()[0]), 1u);
}

// ---------------------------------------------------------------------------
// The configuration's path check (path_check.hpp)

TEST(ProbePathCheck, AnswersForDirectoriesFilesAndMissingPaths) {
  TempDir dir;
  DirectoryCheck check;
  EXPECT_EQ(check.check(dir.path().string(), 1s), 0);
  EXPECT_EQ(check.check(dir.write("plain", "x").string(), 1s), ENOTDIR);
  EXPECT_EQ(check.check((dir.path() / "missing").string(), 1s), ENOENT);
  EXPECT_EQ(check.in_flight(), 0u);
}

TEST(Probe, CollectorWithProbesIsDestroyedPromptly) {
  TempDir dir;
  StorageOptions o;
  ProbeConfig pc;
  pc.path = dir.path().string();
  pc.operations = {ProbeOp::kStat};
  pc.interval = 3600s;  // the thread sleeps between cycles: the stop must wake it
  pc.timeout = 1s;
  o.probes = {pc};
  auto c = std::make_unique<StorageCollector>(fixture_roots(), o, "h");
  ASSERT_TRUE(Eventually([&] { return c->probes()[0]->snapshot().ops[0].observed; }));
  auto t0 = std::chrono::steady_clock::now();
  c.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 100ms);
}

}  // namespace
}  // namespace nodewatch::storage
