// Tests of the kernel collector's parts: the /dev/kmsg record format
// (Documentation/ABI/testing/dev-kmsg: its own example records, continuation
// lines, escapes, fragments, a long record, malformed prefixes) and the
// state file kept across restarts (round trip, and every way a file is
// refused whole).

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>  // before support/collector_test.hpp
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "config.hpp"
#include "kernel/edac.hpp"
#include "kernel/kernel_collector.hpp"
#include "kernel/kernel_events.hpp"
#include "kernel/kernel_log.hpp"
#include "kernel/kernel_service.hpp"
#include "kernel/kernel_state.hpp"
#include "kernel/kmsg.hpp"
#include "kernel/kmsg_reader.hpp"
#include "nodewatch/services.hpp"
#include "support/collector_test.hpp"
#include "support/daemon_process.hpp"
#include "support/kernel_state_checksum.hpp"
#include "support/log_capture.hpp"
#include "support/paths.hpp"

namespace nodewatch::kernel {
namespace {

using nodewatch::testing::CollectOnce;
using nodewatch::testing::ErrorCount;
using nodewatch::testing::ExpectWellFormedTable;
using nodewatch::testing::HasSeries;
using nodewatch::testing::ReadFile;
using nodewatch::testing::TempDir;
using nodewatch::testing::Value;

TEST(Kmsg, TheAbiDocumentsOwnExamples) {
  // The three example records of Documentation/ABI/testing/dev-kmsg.
  auto r = parse_kmsg_record(
      "7,160,424069,-;pci_root PNP0A03:00: host bridge window [io  0x0000-0x0cf7] (ignored)\n"
      " SUBSYSTEM=acpi\n"
      " DEVICE=+acpi:PNP0A03:00\n");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->facility, 0);
  EXPECT_EQ(r->level, 7);
  EXPECT_EQ(r->seq, 160u);
  EXPECT_EQ(r->ts_usec, 424069u);
  EXPECT_FALSE(r->fragment);
  EXPECT_EQ(r->message, "pci_root PNP0A03:00: host bridge window [io  0x0000-0x0cf7] (ignored)");
  EXPECT_EQ(r->subsystem, "acpi");
  EXPECT_EQ(r->device, "+acpi:PNP0A03:00");

  r = parse_kmsg_record("6,339,5140900,-;NET: Registered protocol family 10\n");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->level, 6);
  EXPECT_EQ(r->seq, 339u);
  EXPECT_EQ(r->message, "NET: Registered protocol family 10");
  EXPECT_EQ(r->subsystem, "");
  EXPECT_EQ(r->device, "");

  r = parse_kmsg_record("30,340,5690716,-;udevd[80]: starting version 181\n");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->facility, 3);  // daemon
  EXPECT_EQ(r->level, 6);
}

TEST(Kmsg, ExtraPrefixFieldsFragmentsAndDeviceKinds) {
  // Fields after the flags are reserved for extensions: ignored. 'c' marks
  // a fragment. DEVICE= kinds: block dev_t, netdev ifindex.
  auto r = parse_kmsg_record("4,12,99,c,caller=T123;partial line\n DEVICE=b259:0\n");
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->fragment);
  EXPECT_EQ(r->message, "partial line");
  EXPECT_EQ(r->device, "b259:0");
  r = parse_kmsg_record(
      "3,13,100,-;mlx5_core 0000:3b:00.0 ens1f0: Link down\n SUBSYSTEM=net\n"
      " DEVICE=n4\n");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->subsystem, "net");
  EXPECT_EQ(r->device, "n4");
  // A record without its final newline (read whole all the same) and a
  // continuation line that is not KEY=value.
  r = parse_kmsg_record("6,14,101,-;no newline");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->message, "no newline");
  r = parse_kmsg_record("6,15,102,-;text\n garbage line\n SUBSYSTEM=pci\n");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->subsystem, "pci");
}

TEST(Kmsg, EscapesAreDecodedAndAnyByteSurvives) {
  // The kernel escapes non-printable bytes and '\' as \xHH.
  auto r = parse_kmsg_record("6,1,1,-;tab\\x09here back\\x5cslash \\xff\\xfe end\n");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->message, std::string("tab\there back\\slash \xff\xfe end"));
  // An escape cut short, or not hex, stays as it is.
  EXPECT_EQ(unescape_kmsg("a\\x4"), "a\\x4");
  EXPECT_EQ(unescape_kmsg("a\\xzz"), "a\\xzz");
  EXPECT_EQ(unescape_kmsg("\\x41\\x42"), "AB");
  EXPECT_EQ(unescape_kmsg("\\"), "\\");
}

TEST(Kmsg, ALongRecordIsReadWhole) {
  // An 8 KiB record (the size of the buffer a reader must offer).
  std::string text(8000, 'x');
  auto r = parse_kmsg_record("6,2,2,-;" + text + "\n SUBSYSTEM=pci\n");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->message.size(), 8000u);
  EXPECT_EQ(r->subsystem, "pci");
}

TEST(Kmsg, MalformedPrefixesAreRefused) {
  for (const char* raw : {
           "no semicolon at all\n",
           ";empty prefix\n",
           "6,;no sequence\n",
           "6,1;no timestamp\n",
           "6,1,2;no flags\n",
           "x,1,2,-;priority not a number\n",
           "6,-1,2,-;negative sequence\n",
           "6,1,2x,-;trailing junk in the timestamp\n",
           "-6,1,2,-;negative priority\n",
           "6,1,2,;empty flags\n",
           "6,18446744073709551616,2,-;sequence past 64 bits\n",
       }) {
    EXPECT_FALSE(parse_kmsg_record(raw)) << raw;
  }
}

KernelState sample_state() {
  KernelState s;
  s.boot_id = "3f0c8f8e-7a61-4d5e-9a39-0b1c2d3e4f50";
  s.last_seq = 48113;
  s.counts.lost = 7;
  s.counts.events[{"nvidia_xid", "0000:18:00.0"}] = 2;
  s.counts.events[{"oom_kill", ""}] = 1;
  s.counts.xids[{"0000:18:00.0", "79"}] = 2;
  s.counts.sxids[{"0000:05:00.0", "12028"}] = 18446744073709551615ull;
  return s;
}

TEST(KernelState, RoundTrip) {
  KernelState s = sample_state();
  std::string text = serialize_state(s);
  EXPECT_NE(text.find("\nevent oom_kill - 1\n"), std::string::npos) << text;
  std::string why;
  auto back = parse_state(text, &why);
  ASSERT_TRUE(back) << why;
  EXPECT_EQ(*back, s);
  // Before the first record: no last_seq.
  KernelState fresh;
  fresh.boot_id = "b";
  back = parse_state(serialize_state(fresh), &why);
  ASSERT_TRUE(back) << why;
  EXPECT_FALSE(back->last_seq);
}

TEST(KernelState, ACorruptFileIsRefusedWhole) {
  const std::string good = serialize_state(sample_state());
  std::string why;
  // A flipped digit anywhere before the checksum.
  std::string flipped = good;
  flipped[flipped.find("48113")] = '5';
  EXPECT_FALSE(parse_state(flipped, &why));
  EXPECT_NE(why.find("checksum"), std::string::npos) << why;
  // Torn: cut anywhere.
  for (std::size_t cut : {std::size_t{0}, good.size() / 3, good.size() / 2, good.size() - 2})
    EXPECT_FALSE(parse_state(good.substr(0, cut), &why)) << cut;
  // Something after the checksum.
  EXPECT_FALSE(parse_state(good + "event extra - 1\n", &why));
  // Well checksummed (FNV-1a 64, as the writer makes it) but not ours, or
  // of another shape.
  auto resum = [](const std::string& body) {
    return nodewatch::testing::with_kernel_state_checksum(body);
  };
  const std::string head = "nodewatch-kernel-state 1\nboot_id b\nlost 0\n";
  ASSERT_TRUE(parse_state(resum(head), &why)) << why;
  for (const std::string& body : {
           std::string("nodewatch-kernel-state 2\nboot_id b\nlost 0\n"),
           head + "event nvidia_xid 0000:18:00.0 2\nevent nvidia_xid 0000:18:00.0 3\n",
           head + "event nvidia xid 0000:18:00.0 2\n",
           head + "event nvidia_xid 0000:18:00.0 -2\n",
           head + "event nvidia_xid dev\"ice 2\n",
           head + "last_seq 1\nlast_seq 2\n",
           head + "lost 1\n",
           head + "mystery 1\n",
           std::string("nodewatch-kernel-state 1\nlost 0\n"),
           std::string("nodewatch-kernel-state 1\nboot_id b\n"),
       }) {
    EXPECT_FALSE(parse_state(resum(body), &why)) << body;
  }
}

TEST(KernelState, WrittenAtomically) {
  TempDir dir;
  const std::string path = (dir.path() / "kernel-log.state").string();
  KernelState s = sample_state();
  ASSERT_EQ(write_state_file(path, s), 0);
  std::string why;
  auto back = parse_state(ReadFile(path), &why);
  ASSERT_TRUE(back) << why;
  EXPECT_EQ(*back, s);
  auto files = [&] {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir.path()))
      names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  };
  EXPECT_EQ(files(), std::vector<std::string>{"kernel-log.state"}) << "no temporary file left";
  // A missing directory is made (the daemon run without systemd's
  // StateDirectory=), but only its last component: above it, the errno.
  ASSERT_EQ(write_state_file((dir.path() / "made" / "state").string(), s), 0);
  EXPECT_TRUE(parse_state(ReadFile(dir.path() / "made" / "state"), &why)) << why;
  EXPECT_EQ(write_state_file((dir.path() / "none" / "deeper" / "state").string(), s), ENOENT);
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "none"));
  // A write that fails half way (the file size limit: EFBIG, which root
  // does not bypass as it would a mode) leaves the old state as it was, and
  // no temporary file.
  std::filesystem::remove_all(dir.path() / "made");
  s.counts.lost = 99;
  rlimit old_limit{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit small = old_limit;
  small.rlim_cur = 16;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  const int err = write_state_file(path, s);
  ::setrlimit(RLIMIT_FSIZE, &old_limit);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_EQ(err, EFBIG);
  back = parse_state(ReadFile(path), &why);
  ASSERT_TRUE(back) << why;
  EXPECT_EQ(back->counts.lost, 7u);
  EXPECT_EQ(files(), std::vector<std::string>{"kernel-log.state"});
}

TEST(KernelState, TwoWritersOfOnePathEachRenameAWholeState) {
  TempDir dir;
  const std::string path = (dir.path() / "kernel-log.state").string();
  std::vector<std::thread> writers;
  std::atomic<int> failures{0};
  for (int w = 0; w < 4; ++w) {
    writers.emplace_back([&, w] {
      KernelState s = sample_state();
      for (int i = 0; i < 50; ++i) {
        s.counts.lost = static_cast<std::uint64_t>(w * 1000 + i);
        if (write_state_file(path, s) != 0) ++failures;
      }
    });
  }
  for (auto& t : writers) t.join();
  EXPECT_EQ(failures, 0);
  std::string why;
  EXPECT_TRUE(parse_state(ReadFile(path), &why)) << why;  // never a torn mix of two
}

// A FIFO, a symbolic link (to a regular file) and a directory in `dir`,
// each standing where a state file could be named.
std::vector<std::filesystem::path> not_regular_paths(const TempDir& dir) {
  const auto fifo = dir.path() / "fifo";
  EXPECT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  const auto target = dir.write("target", "not a state\n");
  const auto link = dir.path() / "link";
  std::filesystem::create_symlink(target, link);
  const auto directory = dir.path() / "directory";
  std::filesystem::create_directories(directory / "inside");
  return {fifo, link, directory};
}

TEST(KernelState, APathThatIsNotARegularFileIsNeverReplaced) {
  TempDir dir;
  for (const auto& path : not_regular_paths(dir)) {
    SCOPED_TRACE(path.string());
    const auto type = std::filesystem::symlink_status(path).type();
    EXPECT_EQ(write_state_file(path.string(), sample_state()), EEXIST);
    EXPECT_EQ(std::filesystem::symlink_status(path).type(), type) << "left as it was";
  }
  EXPECT_EQ(ReadFile(dir.path() / "target"), "not a state\n");
  std::size_t entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir.path())) ++entries;
  EXPECT_EQ(entries, 4u) << "no temporary file left";
}

TEST(KernelState, APathThatIsNotARegularFileIsRefusedBeforeATemporaryFile) {
  // In sysfs no file can be made, not even by root: EEXIST (not the
  // EACCES of a temporary file) shows the path was looked at first.
  if (!std::filesystem::is_directory("/sys/kernel"))
    GTEST_SKIP() << "NOT CHECKED: no /sys/kernel here";
  EXPECT_EQ(write_state_file("/sys/kernel", sample_state()), EEXIST);
}

// A matcher for the counting tests: "EVENT <name> <device>" messages.
std::optional<KernelEvent> test_matcher(const KmsgRecord& r) {
  if (r.message.rfind("EVENT ", 0) != 0) return std::nullopt;
  std::string rest = r.message.substr(6);
  std::size_t sp = rest.find(' ');
  KernelEvent e;
  e.event = rest.substr(0, sp);
  e.device = sp == std::string::npos ? "" : rest.substr(sp + 1);
  if (e.event == "nvidia_xid") e.code = "79";
  return e;
}

KmsgRecord record(std::uint64_t seq, std::string message, int facility = 0) {
  KmsgRecord r;
  r.seq = seq;
  r.ts_usec = seq * 1000;
  r.facility = facility;
  r.level = 3;
  r.message = std::move(message);
  return r;
}

TEST(KernelLog, CountsEachRecordOnceAcrossARestart) {
  KernelLog first(std::nullopt, "boot-a", test_matcher);
  for (std::uint64_t seq = 5; seq <= 9; ++seq)
    first.feed(record(seq, seq % 2 ? "EVENT oom_kill" : "something else"));
  first.feed(record(10, "EVENT nvidia_xid 0000:18:00.0"));
  EXPECT_FALSE(first.continued());
  const KernelState saved = first.state();
  EXPECT_EQ(saved.last_seq, 10u);
  EXPECT_EQ((saved.counts.events.at({"oom_kill", ""})), 3u);  // 5, 7, 9
  EXPECT_EQ((saved.counts.xids.at({"0000:18:00.0", "79"})), 1u);
  // A boot's first record is number 0: 0-4 were overwritten before the
  // first read of this boot.
  EXPECT_EQ(saved.counts.lost, 5u);

  // Restarted in the same boot: the buffer is read from its start again;
  // what was counted is skipped, what was logged while down is counted.
  std::string why;
  auto reread = parse_state(serialize_state(saved), &why);
  ASSERT_TRUE(reread) << why;
  KernelLog second(reread, "boot-a", test_matcher);
  EXPECT_TRUE(second.continued());
  for (std::uint64_t seq = 5; seq <= 10; ++seq) second.feed(record(seq, "EVENT oom_kill"));
  second.feed(record(11, "EVENT oom_kill"));
  EXPECT_EQ(second.skipped(), 6u);
  EXPECT_EQ((second.state().counts.events.at({"oom_kill", ""})), 4u);
  EXPECT_EQ((second.state().counts.xids.at({"0000:18:00.0", "79"})), 1u);

  // A gap: records overwritten before they were read.
  second.feed(record(20, "EVENT oom_kill"));
  EXPECT_EQ(second.state().counts.lost, 5u + 8u);  // and 12..19
  EXPECT_EQ(second.last_ts_usec(), 20000u);

  // Another boot: afresh.
  KernelLog third(second.state(), "boot-b", test_matcher);
  EXPECT_FALSE(third.continued());
  EXPECT_TRUE(third.state().counts.events.empty());
  EXPECT_EQ(third.state().counts.lost, 0u);
  EXPECT_EQ(third.state().boot_id, "boot-b");
  third.feed(record(0, "EVENT oom_kill"));
  EXPECT_EQ((third.state().counts.events.at({"oom_kill", ""})), 1u);
}

TEST(KernelLog, UserSpaceCannotForgeAnEvent) {
  // A process that writes to /dev/kmsg gets facility 1 (user) whatever it
  // asks for: never matched.
  KernelLog log(std::nullopt, "b", test_matcher);
  EXPECT_FALSE(log.feed(record(0, "EVENT nvidia_xid 0000:18:00.0", /*facility=*/1)));
  EXPECT_TRUE(log.state().counts.events.empty());
  EXPECT_EQ(log.state().last_seq, 0u);  // still read: the next record is not a gap
  EXPECT_TRUE(log.feed(record(1, "EVENT nvidia_xid 0000:18:00.0")));
  EXPECT_EQ(log.state().counts.lost, 0u);
}

TEST(KernelLog, DevicesPerEventAreBounded) {
  KernelLog log(std::nullopt, "b", test_matcher, /*max_devices=*/2);
  log.feed(record(1, "EVENT io_error sda"));
  log.feed(record(2, "EVENT io_error sdb"));
  log.feed(record(3, "EVENT io_error sdc"));
  log.feed(record(4, "EVENT io_error sdd"));
  log.feed(record(5, "EVENT io_error sda"));  // a known one stays itself
  log.feed(record(6, "EVENT fs_error sdc"));  // per event
  const auto& ev = log.state().counts.events;
  EXPECT_EQ((ev.at({"io_error", "sda"})), 2u);
  EXPECT_EQ((ev.at({"io_error", "sdb"})), 1u);
  EXPECT_EQ((ev.at({"io_error", "other"})), 2u);
  EXPECT_EQ(ev.count({"io_error", "sdc"}), 0u);
  EXPECT_EQ((ev.at({"fs_error", "sdc"})), 1u);
}

TEST(KernelLog, RecordsOfAFileAreSplitAtLinesThatDoNotStartWithASpace) {
  auto records = split_records(
      "6,1,10,-;first\n"
      " SUBSYSTEM=pci\n"
      " DEVICE=+pci:0000:18:00.0\n"
      "\n"
      "3,2,20,-;second\n"
      "4,3,30,-;third without newline");
  ASSERT_EQ(records.size(), 3u);
  auto r = parse_kmsg_record(records[0]);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->device, "+pci:0000:18:00.0");
  EXPECT_EQ(parse_kmsg_record(records[2])->message, "third without newline");
}

TEST(KmsgReader, AFileOfRecordsIsReadFromWhereItLeftOff) {
  TempDir dir;
  auto path = dir.write("kmsg", "6,1,10,-;first\n SUBSYSTEM=pci\n3,2,20,-;second\n");
  KmsgReader reader(path.string());
  std::vector<std::string> seen;
  auto collect = [&](std::string_view r) { seen.emplace_back(r); };
  ASSERT_EQ(reader.read_available(collect), 0);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0], "6,1,10,-;first\n SUBSYSTEM=pci\n");
  EXPECT_EQ(reader.poll_fd(), -1);  // a file is read again on the caller's schedule
  { std::ofstream(path, std::ios::app) << "4,3,30,-;third\n"; }
  seen.clear();
  ASSERT_EQ(reader.read_available(collect), 0);
  ASSERT_EQ(seen.size(), 1u) << "what was appended, not the whole file again";
  EXPECT_EQ(parse_kmsg_record(seen[0])->message, "third");
  seen.clear();
  ASSERT_EQ(reader.read_available(collect), 0);
  EXPECT_TRUE(seen.empty());
  // A line being written is not taken before its end.
  { std::ofstream(path, std::ios::app) << "4,4,40,-;fou"; }
  ASSERT_EQ(reader.read_available(collect), 0);
  EXPECT_TRUE(seen.empty());
  { std::ofstream(path, std::ios::app) << "rth\n"; }
  ASSERT_EQ(reader.read_available(collect), 0);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(parse_kmsg_record(seen[0])->message, "fourth");
  // Rewritten shorter: read again from its start.
  { std::ofstream(path, std::ios::trunc) << "6,0,1,-;another boot\n"; }
  seen.clear();
  ASSERT_EQ(reader.read_available(collect), 0);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(parse_kmsg_record(seen[0])->message, "another boot");
  KmsgReader missing((dir.path() / "none").string());
  EXPECT_EQ(missing.read_available(collect), ENOENT);
}

TEST(KmsgReader, ARecordLongerThanTheKernelsIsRefusedAndCounted) {
  // The largest record the kernel formats is 8 KiB with its newline.
  const std::string prefix = "6,2,2,-;";
  const std::string largest =
      prefix + std::string(KmsgReader::kRecordLimit - prefix.size() - 1, 'x') + "\n";
  TempDir dir;
  auto path =
      dir.write("kmsg", "6,1,1,-;one\n" + largest + "6,3,3,-;" + std::string(9000, 'y') + "\n" +
                            "6,4,4,-;two\n" + "6,5,5,-;many lines\n" + std::string(3, ' ') +
                            std::string(3000, 'k') + "\n " + std::string(3000, 'k') + "\n " +
                            std::string(3000, 'k') + "\n" + "6,6,6,-;three\n" +
                            std::string(40000, 'z') + "\n6,7,7,-;four\n");
  KmsgReader reader(path.string());
  std::vector<std::string> seen;
  ASSERT_EQ(reader.read_available([&](std::string_view r) { seen.emplace_back(r); }), 0);
  ASSERT_EQ(seen.size(), 5u);
  EXPECT_EQ(seen[0], "6,1,1,-;one\n");
  EXPECT_EQ(seen[1], largest);
  EXPECT_EQ(seen[2], "6,4,4,-;two\n");
  EXPECT_EQ(seen[3], "6,6,6,-;three\n");
  EXPECT_EQ(seen[4], "6,7,7,-;four\n");
  EXPECT_EQ(reader.refused(), 3u) << "a long line, long continuation lines, no prefix at all";
}

TEST(KmsgReader, TheRealKernelLog) {
  // The real /dev/kmsg (root, as in CI): a record this test writes with a
  // unique marker is read back, and the kernel gave it facility 1 (user)
  // although it asked for 0 (kern): no process can forge a kernel event.
  // Only the marker is written, never a fake hardware event.
  if (::geteuid() != 0 || ::access("/dev/kmsg", R_OK | W_OK) != 0)
    GTEST_SKIP() << "NOT CHECKED AGAINST THE REAL KERNEL LOG: /dev/kmsg needs root here";
  const std::string marker =
      "nodewatch-kernel-test-marker-" + std::to_string(::getpid()) + "-" +
      std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
  {
    int w = ::open("/dev/kmsg", O_WRONLY | O_CLOEXEC);
    ASSERT_GE(w, 0) << std::strerror(errno);
    const std::string line = "<6>" + marker + "\n";  // facility 0, level 6 asked for
    ASSERT_EQ(::write(w, line.data(), line.size()), static_cast<ssize_t>(line.size()));
    ::close(w);
  }
  KmsgReader reader("/dev/kmsg");
  ASSERT_EQ(reader.open(), 0);
  EXPECT_GE(reader.poll_fd(), 0);
  std::optional<KmsgRecord> found;
  std::uint64_t records = 0;
  std::uint64_t malformed = 0;
  ASSERT_EQ(reader.read_available([&](std::string_view raw) {
    ++records;
    auto r = parse_kmsg_record(raw);
    if (!r) {
      ++malformed;
      return;
    }
    if (r->message == marker) found = r;
  }),
            0);
  ASSERT_TRUE(found) << "the marker was not read back from " << records << " records";
  // A pass stops after as many records as it is given, and says there is more.
  KmsgReader again("/dev/kmsg");
  bool more = false;
  std::uint64_t one_pass = 0;
  ASSERT_EQ(again.read_available([&](std::string_view) { ++one_pass; }, 2, &more), 0);
  EXPECT_EQ(one_pass, 2u);
  EXPECT_TRUE(more) << "the ring buffer holds more than two records";
  EXPECT_EQ(found->facility, 1);
  EXPECT_EQ(found->level, 6);
  EXPECT_EQ(malformed, 0u) << "records of this kernel that the parser refused";
}

// The cases of tests/fixtures/kernel/events.txt (README.md there says
// where each format comes from): "# event:", "# device:", "# detail:"
// comments, then the message as it follows the ';' of a /dev/kmsg record.
struct EventCase {
  std::string event, device, detail, message;
  int line = 0;
};

std::vector<EventCase> event_cases() {
  std::vector<EventCase> out;
  std::istringstream in(ReadFile(nodewatch::testing::fixtures_dir() / "kernel" / "events.txt"));
  std::string line;
  EventCase c;
  int n = 0;
  auto field = [&](const char* key, std::string* into) {
    std::string k = std::string("# ") + key + ":";
    if (line.rfind(k, 0) != 0) return false;
    *into = line.substr(k.size());
    while (!into->empty() && into->front() == ' ') into->erase(0, 1);
    return true;
  };
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) continue;
    if (field("event", &c.event) || field("device", &c.device) || field("detail", &c.detail))
      continue;
    if (line[0] == '#') continue;
    c.message = line;
    c.line = n;
    out.push_back(c);
    c = EventCase{};
  }
  return out;
}

TEST(KernelEvents, EveryCaseOfTheFixture) {
  std::vector<EventCase> cases = event_cases();
  ASSERT_GT(cases.size(), 150u);
  std::map<std::string, int> positives;
  std::uint64_t seq = 0;
  for (const EventCase& c : cases) {
    SCOPED_TRACE("events.txt:" + std::to_string(c.line) + ": " + c.message);
    auto r = parse_kmsg_record("3," + std::to_string(seq++) + ",1000,-;" + c.message + "\n");
    ASSERT_TRUE(r);
    std::optional<KernelEvent> e = match_kernel_record(*r);
    if (c.event == "none") {
      EXPECT_FALSE(e) << "matched as " << e->event;
      continue;
    }
    ++positives[c.event];
    ASSERT_TRUE(e) << "expected " << c.event;
    EXPECT_EQ(e->event, c.event);
    EXPECT_EQ(e->device, c.device);
    if (c.detail.rfind("xid=", 0) == 0 || c.detail.rfind("sxid=", 0) == 0) {
      EXPECT_EQ(e->code, c.detail.substr(c.detail.find('=') + 1));
    }
  }
  // Every event of the vocabulary has real lines behind it.
  for (std::string_view name : kernel_event_names())
    EXPECT_GE(positives[std::string(name)], 2) << name;
  EXPECT_EQ(positives.size(), kernel_event_names().size());
}

TEST(KernelEvents, AnEdacRecordCountsTheErrorsItReports) {
  auto e = match_kernel_event(
      "EDAC MC1: 262 CE memory read error on CPU_SrcID#0_Ha#0_Chan#1_DIMM#0 (channel:1 slot:0)");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->event, "memory_corrected");
  EXPECT_EQ(e->count, 262u);
  KernelLog log(std::nullopt, "b", match_kernel_record);
  KmsgRecord r;
  r.seq = 1;
  r.message = "EDAC MC1: 262 CE memory read error on X (channel:1)";
  log.feed(r);
  EXPECT_EQ((log.state().counts.events.at({"memory_corrected", ""})), 262u);
}

TEST(KernelEvents, AnXidIsCountedByGpuAndNumber) {
  KernelLog log(std::nullopt, "b", match_kernel_record);
  std::uint64_t seq = 0;
  for (const char* m :
       {"NVRM: Xid (PCI:0000:18:00): 79, pid=1, name=x, GPU has fallen off the bus.",
        "NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus.",
        "NVRM: Xid (PCI:0000:2A:00): 48, pid=2, name=y, An uncorrectable ECC error",
        "nvidia-nvswitch0: SXid (PCI:0000:c3:00.0): 24007, Fatal, Link 28",
        "nvidia-nvswitch0: SXid (PCI:0000:c3:00.0): 24007, Severity 1 Engine"}) {
    KmsgRecord r;
    r.seq = seq++;
    r.message = m;
    log.feed(r);
  }
  const KernelCounts& c = log.state().counts;
  EXPECT_EQ((c.xids.at({"0000:18:00.0", "79"})), 2u);
  EXPECT_EQ((c.xids.at({"0000:2a:00.0", "48"})), 1u);  // lower case, as nodewatch_accelerator_info
  EXPECT_EQ((c.sxids.at({"0000:c3:00.0", "24007"})), 1u);  // its Severity line is not another
  EXPECT_EQ((c.events.at({"nvidia_xid", "0000:18:00.0"})), 2u);
}

TEST(KernelEvents, CodesPerDeviceAreBoundedAndTheRestCountAsOther) {
  // A source of records that are not a driver's (NVIDIA defines fewer than
  // 200 XIDs) must not grow the series or the state file without bound.
  KernelLog log(std::nullopt, "b", match_kernel_record);
  std::uint64_t seq = 0;
  auto xid = [&](const char* bus, std::size_t code) {
    KmsgRecord r;
    r.seq = seq++;
    r.message = "NVRM: Xid (PCI:" + std::string(bus) + "): " + std::to_string(code) + ", x";
    return log.feed(r);
  };
  for (std::size_t code = 1; code <= kMaxCodesPerDevice + 10; ++code) xid("0000:18:00", code);
  std::optional<KernelEvent> past = xid("0000:18:00", kMaxCodesPerDevice + 11);
  ASSERT_TRUE(past);
  EXPECT_EQ(past->code, "other");
  EXPECT_TRUE(xid("0000:18:00", 1));  // one it has stays itself
  xid("0000:2a:00", 999);             // per device
  const KernelCounts& c = log.state().counts;
  EXPECT_EQ((c.xids.at({"0000:18:00.0", "1"})), 2u);
  EXPECT_EQ((c.xids.at({"0000:18:00.0", std::to_string(kMaxCodesPerDevice)})), 1u);
  EXPECT_EQ(c.xids.count({"0000:18:00.0", std::to_string(kMaxCodesPerDevice + 1)}), 0u);
  EXPECT_EQ((c.xids.at({"0000:18:00.0", "other"})), 11u);
  EXPECT_EQ((c.xids.at({"0000:2a:00.0", "999"})), 1u);
  EXPECT_EQ(c.xids.size(), kMaxCodesPerDevice + 2);
  // Every record still counts as the device's event.
  EXPECT_EQ((c.events.at({"nvidia_xid", "0000:18:00.0"})), kMaxCodesPerDevice + 12);
}

TEST(KernelState, LoadedCodesPerDeviceAreBoundedAsCountingBoundsThem) {
  KernelState state;
  for (std::size_t code = 1; code <= kMaxCodesPerDevice + 3; ++code)
    state.counts.sxids[{"0000:c3:00.0", std::to_string(code)}] = 2;
  state.counts.sxids[{"0000:c3:00.0", "other"}] = 1;
  state.counts.sxids[{"0000:c4:00.0", "7"}] = 1;
  EXPECT_TRUE(sanitize_state(state, {"nvidia_sxid"}, 64).empty());
  const auto& t = state.counts.sxids;
  EXPECT_EQ(t.size(), kMaxCodesPerDevice + 2);
  // The first codes in name order are kept ("1", "10", "100", ...); the
  // rest join "other", added up.
  EXPECT_EQ((t.at({"0000:c3:00.0", "1"})), 2u);
  EXPECT_EQ((t.at({"0000:c3:00.0", "other"})), 1u + 3 * 2);
  EXPECT_EQ((t.at({"0000:c4:00.0", "7"})), 1u);
}

TEST(KernelEvents, AnOverLongNumberIsAMalformedRecordNotItsFirstDigits) {
  const std::string nines(23, '9');
  KernelLog log(std::nullopt, "b", match_kernel_record);
  std::uint64_t seq = 0;
  for (const std::string& m : {
           "NVRM: Xid (PCI:0000:18:00): " + nines + ", pid=1, name=x, GPU has fallen off the bus.",
           "nvidia-nvswitch0: SXid (PCI:0000:c3:00.0): " + nines + ", Fatal, Link 28",
           "EDAC MC1: " + nines + " CE memory read error on X (channel:1)",
           "Out of memory: Killed process " + nines + " (python3) total-vm:1kB",
       }) {
    SCOPED_TRACE(m);
    auto e = match_kernel_event(m);
    ASSERT_TRUE(e);
    EXPECT_TRUE(e->malformed);
    KmsgRecord r;
    r.seq = seq++;
    r.message = m;
    EXPECT_FALSE(log.feed(r));
  }
  EXPECT_EQ(log.malformed(), 4u);
  EXPECT_TRUE(log.state().counts.events.empty());
  EXPECT_TRUE(log.state().counts.xids.empty());
  EXPECT_TRUE(log.state().counts.sxids.empty());
  // The largest number that fits is still one.
  auto e = match_kernel_event("NVRM: Xid (PCI:0000:18:00): 18446744073709551615, x");
  ASSERT_TRUE(e);
  EXPECT_FALSE(e->malformed);
  EXPECT_EQ(e->code, "18446744073709551615");
}

TEST(KernelEvents, NamesThatAreNotLabelSafeAreOther) {
  auto e = match_kernel_event("EXT4-fs error (device we\"ird): ext4_find_entry:1: inode #2");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->device, "other");
  e = match_kernel_event(std::string("I/O error, dev sd\xff, sector 1 op 0x0:(READ)"));
  ASSERT_TRUE(e);
  EXPECT_EQ(e->device, "other");
}

// A service over a file of records in `dir`, with this boot id.
struct ServiceFiles {
  TempDir dir;
  std::filesystem::path kmsg = dir.write("kmsg", "");
  std::filesystem::path boot = dir.write("boot_id", "3f0c8f8e-7a61-4d5e-9a39-0b1c2d3e4f50\n");
  std::string state = (dir.path() / "kernel-log.state").string();
  KernelLogOptions options() const {
    KernelLogOptions o;
    o.kmsg_path = kmsg.string();
    o.boot_id_path = boot.string();
    o.state_file = state;
    o.save_interval = std::chrono::milliseconds(50);
    o.file_poll = std::chrono::milliseconds(20);
    return o;
  }
  void append(std::uint64_t seq, const std::string& message) const {
    std::ofstream(kmsg, std::ios::app) << "3," << seq << ",1000,-;" << message << "\n";
  }
};

std::uint64_t oom_kills(const KernelLogService& s) {
  auto snap = s.snapshot();
  auto it = snap.state.counts.events.find({"oom_kill", ""});
  return it == snap.state.counts.events.end() ? 0 : it->second;
}

template <class Pred>
bool soon(Pred pred) {
  for (int i = 0; i < 500; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return pred();
}

TEST(KernelLogService, CountsOnceAcrossRestartsAndStartsAfreshOnANewBoot) {
  ServiceFiles f;
  const std::string oom = "Out of memory: Killed process 42 (python3) total-vm:1kB";
  f.append(1, oom);
  f.append(2, "NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus.");
  {
    KernelLogService s(f.options());
    ASSERT_TRUE(soon([&] { return oom_kills(s) == 1; }));
    EXPECT_FALSE(s.snapshot().continued);
    f.append(3, oom);  // logged while it runs
    ASSERT_TRUE(soon([&] { return oom_kills(s) == 2; }));
    EXPECT_TRUE(s.snapshot().state_refused.empty()) << s.snapshot().state_refused;
    EXPECT_TRUE(s.snapshot().state_error.empty()) << s.snapshot().state_error;
  }                  // stopped: the state is saved
  f.append(4, oom);  // logged while nodewatch is down
  {
    KernelLogService s(f.options());
    EXPECT_TRUE(s.snapshot().continued);
    ASSERT_TRUE(soon([&] { return s.snapshot().passes >= 2; }));
    EXPECT_EQ(oom_kills(s), 3u) << "records 1-3 once, and 4";
    EXPECT_EQ((s.snapshot().state.counts.xids.at({"0000:18:00.0", "79"})), 1u);
  }
  // A new boot: the old counts are not this boot's.
  std::ofstream(f.boot, std::ios::trunc) << "8d2b6a40-1c3e-4f7a-b5d9-6e0f1a2b3c4d\n";
  std::ofstream(f.kmsg, std::ios::trunc) << "3,0,10,-;" << oom << "\n";
  {
    KernelLogService s(f.options());
    EXPECT_FALSE(s.snapshot().continued);
    ASSERT_TRUE(soon([&] { return s.snapshot().passes >= 1; }));
    EXPECT_EQ(oom_kills(s), 1u);
    EXPECT_EQ(s.snapshot().state.counts.xids.count({"0000:18:00.0", "79"}), 0u);
  }
}

TEST(KernelLogService, ACorruptStateFileIsRefusedAndSaidWhy) {
  ServiceFiles f;
  f.append(1, "Out of memory: Killed process 1 (x) total-vm:1kB");
  {
    KernelLogService s(f.options());
    ASSERT_TRUE(soon([&] { return oom_kills(s) == 1; }));
  }
  std::string text = ReadFile(f.state);
  text[text.find("oom_kill - 1") + 11] = '7';  // an edit the checksum does not cover
  std::ofstream(f.state, std::ios::trunc) << text;
  KernelLogService s(f.options());
  EXPECT_NE(s.snapshot().state_refused.find("checksum"), std::string::npos)
      << s.snapshot().state_refused;
  EXPECT_FALSE(s.snapshot().continued);
  ASSERT_TRUE(soon([&] { return s.snapshot().passes >= 1; }));
  EXPECT_EQ(oom_kills(s), 1u) << "counted afresh, never from the edited file";
}

TEST(KernelLogService, WithoutABootIdNoStateIsLoadedOrSaved) {
  ServiceFiles f;
  f.append(0, "Out of memory: Killed process 1 (x) total-vm:1kB");
  {
    KernelLogService s(f.options());
    ASSERT_TRUE(soon([&] { return oom_kills(s) == 1; }));
  }
  ASSERT_TRUE(std::filesystem::exists(f.state));
  const std::string saved = ReadFile(f.state);
  std::uint64_t seq = 1;
  for (const char* bad : {"", "not a uuid\n"}) {
    SCOPED_TRACE(bad);
    std::ofstream(f.boot, std::ios::trunc) << bad;
    f.append(seq++, "Out of memory: Killed process 2 (x) total-vm:1kB");
    KernelLogService s(f.options());
    // A saved state could be another boot's: not trusted; counted afresh.
    EXPECT_FALSE(s.snapshot().continued);
    EXPECT_NE(s.snapshot().state_refused.find("no boot id"), std::string::npos)
        << s.snapshot().state_refused;
    ASSERT_TRUE(soon([&] { return s.snapshot().passes >= 1; }));
    EXPECT_GE(oom_kills(s), 2u);
  }
  // Nor is this state written over the saved one.
  EXPECT_EQ(ReadFile(f.state), saved);
  EXPECT_EQ(read_boot_id(f.boot.string()), "");
}

TEST(KernelLogService, AMissingLogIsAnErrorNotACrash) {
  ServiceFiles f;
  KernelLogOptions o = f.options();
  o.kmsg_path = (f.dir.path() / "none").string();
  o.state_file.clear();
  KernelLogService s(o);
  ASSERT_TRUE(soon([&] { return s.snapshot().passes >= 2; }));
  EXPECT_NE(s.snapshot().read_error.find("No such file"), std::string::npos)
      << s.snapshot().read_error;
}

TEST(KernelLogService, AStatePathThatIsNotARegularFileIsNeverReplaced) {
  // The configuration refuses such a path; one made after it was checked
  // is still never written over.
  ServiceFiles f;
  f.append(1, "Out of memory: Killed process 1 (x) total-vm:1kB");
  ASSERT_EQ(::mkfifo(f.state.c_str(), 0600), 0) << std::strerror(errno);
  {
    KernelLogService s(f.options());
    EXPECT_NE(s.snapshot().state_refused.find("not a regular file"), std::string::npos)
        << s.snapshot().state_refused;
    ASSERT_TRUE(soon([&] { return !s.snapshot().state_error.empty(); }));
    EXPECT_NE(s.snapshot().state_error.find("not a regular file"), std::string::npos)
        << s.snapshot().state_error;
    EXPECT_EQ(oom_kills(s), 1u);
  }  // stopped: saved again, and refused again
  EXPECT_TRUE(std::filesystem::is_fifo(std::filesystem::symlink_status(f.state)));
}

TEST(KernelLogService, ASaveThatFailsAtStopIsLogged) {
  ServiceFiles f;
  const auto state_dir = f.dir.path() / "state";
  KernelLogOptions o = f.options();
  o.state_file = (state_dir / "kernel-log.state").string();
  const std::string oom = "Out of memory: Killed process 1 (x) total-vm:1kB";
  f.append(1, oom);
  nodewatch::testing::LogCapture log;
  {
    KernelLogService s(o);
    ASSERT_TRUE(soon([&] { return std::filesystem::exists(o.state_file); }));
    // The directory becomes a file (as good as a full disk): every save
    // from now on fails, the one at stop too.
    std::filesystem::remove_all(state_dir);
    std::ofstream(state_dir) << "in the way\n";
    f.append(2, oom);
    ASSERT_TRUE(soon([&] { return oom_kills(s) == 2; }));
    EXPECT_EQ(log.text().find("state_write_error"), std::string::npos)
        << "a periodic failure is the collection's to count and log";
  }
  const std::string text = log.text();
  EXPECT_NE(text.find("warning kernel: state_write_error: " + o.state_file +
                      ": cannot be written: Not a directory (at stop"),
            std::string::npos)
      << text;
}

// A state of the ServiceFiles' boot, written as the service writes one.
KernelState boot_state(std::optional<std::uint64_t> last_seq) {
  KernelState s;
  s.boot_id = "3f0c8f8e-7a61-4d5e-9a39-0b1c2d3e4f50";
  s.last_seq = last_seq;
  return s;
}

TEST(KernelLogService, ASavedSeqAheadOfTheLogIsNotTrusted) {
  ServiceFiles f;
  const std::string oom = "Out of memory: Killed process 1 (x) total-vm:1kB";
  for (std::uint64_t seq = 0; seq < 3; ++seq) f.append(seq, oom);
  // A state of this boot that claims a record the log never held.
  KernelState ahead = boot_state(1000);
  ahead.counts.events[{"oom_kill", ""}] = 5;
  ahead.counts.events[{"reset_gpu", ""}] = 1;  // dropped by sanitize_state at start
  ASSERT_EQ(write_state_file(f.state, ahead), 0);
  {
    KernelLogService s(f.options());
    ASSERT_TRUE(s.wait_first_pass(std::chrono::steady_clock::now() + std::chrono::seconds(5)));
    // Counted afresh from the log, as if no state had been saved: the
    // saved counts are the same file's and not trusted either.
    EXPECT_EQ(oom_kills(s), 3u);
    EXPECT_FALSE(s.snapshot().continued);
    EXPECT_EQ(s.snapshot().state.last_seq, 2u);
    const KernelLogService::News news = s.take_news();
    // The whole state refused: what was dropped of it is not said as well.
    EXPECT_EQ(news.state_dropped, "");
    const std::string why = news.state_refused;
    EXPECT_NE(why.find("last_seq 1000 is ahead of the newest record"), std::string::npos) << why;
    EXPECT_NE(why.find("(2)"), std::string::npos) << why;
  }
  // Saved again, from the log: the next start continues it.
  f.append(3, oom);
  {
    KernelLogService again(f.options());
    EXPECT_TRUE(again.snapshot().continued);
    ASSERT_TRUE(soon([&] { return oom_kills(again) == 4; }));
    EXPECT_EQ(again.take_news().state_refused, "");
  }
  // A last_seq that is the newest record is trusted: nothing is new.
  KernelState exact = boot_state(3);
  exact.counts.events[{"oom_kill", ""}] = 9;
  ASSERT_EQ(write_state_file(f.state, exact), 0);
  KernelLogService trusted(f.options());
  ASSERT_TRUE(trusted.wait_first_pass(std::chrono::steady_clock::now() + std::chrono::seconds(5)));
  EXPECT_TRUE(trusted.snapshot().continued);
  EXPECT_EQ(oom_kills(trusted), 9u);
}

TEST(KernelLogService, ASavedSeqAheadOfALongLogIsNeverServed) {
  // More records than one pass reads: the first pass is announced once the
  // whole log was read and last_seq checked, never with the saved counts.
  ServiceFiles f;
  const std::size_t records = KernelLogService::kRecordsPerPass + 1000;
  {
    std::ofstream out(f.kmsg, std::ios::app);
    for (std::size_t seq = 0; seq < records; ++seq)
      out << "3," << seq << ",1000,-;Out of memory: Killed process 1 (x) total-vm:1kB\n";
  }
  KernelState ahead = boot_state(1000000);
  ahead.counts.events[{"oom_kill", ""}] = 5;
  ASSERT_EQ(write_state_file(f.state, ahead), 0);
  KernelLogService s(f.options());
  ASSERT_TRUE(s.wait_first_pass(std::chrono::steady_clock::now() + std::chrono::seconds(10)));
  // Afresh from the first pass on (which, as always, may be one pass's
  // records of a long log), never the saved 5.
  EXPECT_FALSE(s.snapshot().continued);
  EXPECT_GE(oom_kills(s), KernelLogService::kRecordsPerPass);
  EXPECT_TRUE(soon([&] { return oom_kills(s) == records; })) << oom_kills(s);
}

TEST(KernelLogService, AStateFileOthersCouldHaveWrittenIsRefused) {
  ServiceFiles f;
  f.append(0, "Out of memory: Killed process 1 (x) total-vm:1kB");
  KernelState saved = boot_state(0);
  saved.counts.events[{"oom_kill", ""}] = 7;
  const auto dir = f.dir.path() / "state";
  std::filesystem::create_directories(dir);
  KernelLogOptions o = f.options();
  o.state_file = (dir / "kernel-log.state").string();
  auto start = [&](mode_t dir_mode) {
    EXPECT_EQ(::chmod(dir.c_str(), dir_mode), 0);
    EXPECT_EQ(write_state_file(o.state_file, saved), 0);
  };
  auto loaded = [&](const std::string& refusal) {
    KernelLogService s(o);
    EXPECT_TRUE(s.wait_first_pass(std::chrono::steady_clock::now() + std::chrono::seconds(5)));
    const std::string why = s.take_news().state_refused;
    if (refusal.empty()) {
      EXPECT_EQ(why, "");
    } else {
      EXPECT_NE(why.find(refusal), std::string::npos) << why;
    }
    return s.snapshot().continued ? oom_kills(s) : 0;
  };
  auto text = [&] {
    std::ifstream in(o.state_file);
    std::stringstream out;
    out << in.rdbuf();
    return out.str();
  };
  // A directory anyone can write to: anyone could have made the file. It
  // is left as it was: the service's stop does not save over it.
  start(0777);
  const std::string saved_text = text();
  EXPECT_EQ(loaded("writable by others"), 0u);
  EXPECT_EQ(text(), saved_text);
  // With the sticky bit (/tmp's mode) only the file's owner can replace it.
  start(01777);
  EXPECT_EQ(loaded(""), 7u);
  start(0755);
  EXPECT_EQ(loaded(""), 7u);
  // Owned by another user.
  if (::geteuid() != 0) GTEST_SKIP() << "NOT CHECKED: giving a file to another user needs root";
  start(0755);
  ASSERT_EQ(::chown(o.state_file.c_str(), 65534, 65534), 0) << std::strerror(errno);
  EXPECT_EQ(loaded("owned by uid 65534"), 0u);
  EXPECT_EQ(text(), saved_text);  // another user's counts: never written over
  struct ::stat st {};
  ASSERT_EQ(::stat(o.state_file.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 65534u);
}

TEST(KernelLogService, AStateFileOfRootsIsTrustedByAnotherUser) {
  // The daemon runs under a dynamic uid; `--once` run by root beside it
  // leaves a file of root's. The daemon's next start continues it.
  if (::geteuid() != 0) GTEST_SKIP() << "NOT CHECKED: running as another user needs root";
  ServiceFiles f;
  f.append(0, "Out of memory: Killed process 1 (x) total-vm:1kB");
  KernelState saved = boot_state(0);
  saved.counts.events[{"oom_kill", ""}] = 7;
  ASSERT_EQ(write_state_file(f.state, saved), 0);
  ASSERT_EQ(::chmod(f.dir.path().c_str(), 0755), 0);  // nobody reads the log and boot id there
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0) << std::strerror(errno);
  if (pid == 0) {
    // The child says what it found by its exit status alone.
    if (::setresgid(65534, 65534, 65534) != 0 || ::setresuid(65534, 65534, 65534) != 0) ::_exit(2);
    KernelLogService s(f.options());
    if (!s.wait_first_pass(std::chrono::steady_clock::now() + std::chrono::seconds(5))) ::_exit(3);
    if (!s.snapshot().state_refused.empty()) ::_exit(4);
    ::_exit(s.snapshot().continued && oom_kills(s) == 7 ? 0 : 5);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "2: no setresuid, 3: no first pass, 4: refused, 5: not "
                                       "continued from the saved counts";
}

TEST(KernelLogService, ARecordLongerThanTheKernelsIsMalformed) {
  ServiceFiles f;
  f.append(1, "Out of memory: Killed process 1 (x) total-vm:1kB " + std::string(9000, 'x'));
  f.append(2, "Out of memory: Killed process 2 (x) total-vm:1kB");
  KernelLogService s(f.options());
  ASSERT_TRUE(s.wait_first_pass(std::chrono::steady_clock::now() + std::chrono::seconds(5)));
  EXPECT_EQ(oom_kills(s), 1u);
  EXPECT_EQ(s.snapshot().malformed, 1u);
  EXPECT_EQ(s.take_news().malformed, 1u);
}

TEST(KernelLogService, ASourceOfMalformedRecordsAloneIsLoggedAndBounded) {
  // /dev/zero named as the kernel log: each read is 16 KiB of zeros, past
  // any record. One pass, a line, then a pause of file_poll, not a core.
  if (::access("/dev/zero", R_OK) != 0) GTEST_SKIP() << "NOT CHECKED: no /dev/zero here";
  ServiceFiles f;
  KernelLogOptions o = f.options();
  o.kmsg_path = "/dev/zero";
  o.state_file.clear();
  o.file_poll = std::chrono::seconds(2);
  nodewatch::testing::LogCapture log;
  KernelLogService s(o);
  ASSERT_TRUE(s.wait_first_pass(std::chrono::steady_clock::now() + std::chrono::seconds(5)));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // what must not happen meanwhile
  const auto snap = s.snapshot();
  EXPECT_EQ(snap.passes, 1u);
  EXPECT_EQ(snap.malformed, KernelLogService::kRecordsPerPass);
  const std::string text = log.text();
  EXPECT_NE(text.find("warning kernel: malformed_record: /dev/zero: 4096 record(s) refused, and "
                      "none read well-formed"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("malformed_record"), text.rfind("malformed_record")) << "one line";
}

// EDAC from the fixture trees of tests/fixtures/edac (README.md there:
// i10nm_edac with dimmN directories, amd64_edac with rankN).
std::filesystem::path edac_fixture(const char* tree) {
  return nodewatch::testing::fixtures_dir() / "edac" / tree;
}

TEST(Edac, IntelControllersAndTheirDimms) {
  EdacRead r = read_edac(sources::FsRoot(edac_fixture("sys")));
  EXPECT_TRUE(r.errors.empty());
  ASSERT_EQ(r.controllers.size(), 2u);
  const EdacController& mc0 = r.controllers[0];
  EXPECT_EQ(mc0.name, "mc0");
  EXPECT_EQ(mc0.mc_name, "Intel_10nm Socket#0 IMC#0");
  EXPECT_EQ(mc0.corrected, 7839u);
  ASSERT_EQ(mc0.modules.size(), 4u);
  EXPECT_EQ(mc0.modules[0].slot, "dimm0");
  EXPECT_EQ(mc0.modules[0].corrected, 7836u);
  const EdacController& mc1 = r.controllers[1];
  EXPECT_EQ(mc1.corrected, 15u);
  EXPECT_EQ(mc1.uncorrected, 1u);
  EXPECT_EQ(mc1.corrected_noinfo, 2u);
  auto dimm2 = std::find_if(mc1.modules.begin(), mc1.modules.end(),
                            [](const EdacModule& m) { return m.slot == "dimm2"; });
  ASSERT_NE(dimm2, mc1.modules.end());
  EXPECT_EQ(dimm2->corrected, 12u);
  EXPECT_EQ(dimm2->uncorrected, 1u);
  EXPECT_EQ(dimm2->label, "CPU_SrcID#0_MC#1_Chan#1_DIMM#0");
  // The controller's count is its modules' and the unplaced ones (5.5 on).
  for (const EdacController& c : r.controllers) {
    std::uint64_t ce = c.corrected_noinfo.value(), ue = c.uncorrected_noinfo.value();
    for (const EdacModule& m : c.modules) {
      ce += m.corrected.value();
      ue += m.uncorrected.value();
    }
    EXPECT_EQ(ce, c.corrected) << c.name;
    EXPECT_EQ(ue, c.uncorrected) << c.name;
  }
}

TEST(Edac, AmdRanksInSlotOrder) {
  EdacRead r = read_edac(sources::FsRoot(edac_fixture("sys-amd")));
  EXPECT_TRUE(r.errors.empty());
  ASSERT_EQ(r.controllers.size(), 2u);  // power/ beside them is not one
  const EdacController& mc0 = r.controllers[0];
  ASSERT_EQ(mc0.modules.size(), 16u);
  EXPECT_EQ(mc0.modules[2].slot, "rank2");  // numeric order: rank10 after rank9
  EXPECT_EQ(mc0.modules[10].slot, "rank10");
  EXPECT_EQ(mc0.modules[3].corrected, 5u);
  EXPECT_EQ(mc0.modules[3].label, "mc#0csrow#0channel#3");
  EXPECT_EQ(mc0.modules[11].corrected, 2u);
  EXPECT_EQ(mc0.corrected, 7u);
}

TEST(Edac, BadValuesAreSkippedAndNamed) {
  TempDir dir;
  const std::string mc = "devices/system/edac/mc/mc0";
  dir.write(mc + "/ce_count", "oops\n");
  dir.write(mc + "/ue_count", "-1\n");  // a u32 printed signed by an old kernel
  dir.write(mc + "/dimm0/dimm_ce_count", "3\n");
  dir.write(mc + "/dimm0/dimm_ue_count", "0\n");
  dir.write(mc + "/dimm1/dimm_ce_count", "9\n");
  dir.write(mc + "/dimm1/dimm_ue_count", "0\n");
  dir.write(mc + "/dimm0/dimm_label", "slot \xff\xfe A1\n");  // anything can be written there
  auto faults = std::make_shared<sources::Faults>();
  faults->inject("mc0/dimm1/dimm_ce_count", EIO);
  EdacRead r = read_edac(sources::FsRoot(dir.path(), faults));
  ASSERT_EQ(r.controllers.size(), 1u);
  EXPECT_EQ(r.controllers[0].uncorrected, 4294967295u);
  ASSERT_EQ(r.controllers[0].modules.size(), 2u);
  EXPECT_FALSE(r.controllers[0].modules[1].corrected);     // unread, left out: never a 0
  EXPECT_EQ(r.controllers[0].modules[1].uncorrected, 0u);  // the module's UE still read
  EXPECT_FALSE(r.controllers[0].corrected);
  EXPECT_EQ(r.controllers[0].modules[0].label, "") << "a label must be UTF-8";
  EXPECT_EQ(r.controllers[0].modules[0].corrected, 3u);
  ASSERT_EQ(r.errors.size(), 3u);
  EXPECT_EQ(r.errors[0].first, "mc0");
  EXPECT_NE(r.errors[0].second.find("not a number"), std::string::npos);
  EXPECT_EQ(r.errors[1].first, "mc0/dimm0");
  EXPECT_NE(r.errors[1].second.find("dimm_label: not UTF-8"), std::string::npos);
  EXPECT_EQ(r.errors[2].first, "mc0/dimm1");
  EXPECT_NE(r.errors[2].second.find("EIO"), std::string::npos);
  // No EDAC at all (the module not loaded): nothing, and no error.
  TempDir empty;
  EdacRead none = read_edac(sources::FsRoot(empty.path()));
  EXPECT_TRUE(none.controllers.empty());
  EXPECT_TRUE(none.errors.empty());
}

// A listing of the controllers that fails (no descriptor left) is an
// error, not "no EDAC": its series go, and the collector counts why.
TEST(Edac, AListingThatFailsIsAnError) {
  auto faults = std::make_shared<sources::Faults>();
  faults->inject("devices/system/edac/mc", EMFILE);
  EdacRead r = read_edac(sources::FsRoot(edac_fixture("sys"), faults));
  EXPECT_TRUE(r.controllers.empty());
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].first, "mc");
  EXPECT_NE(r.errors[0].second.find("EMFILE"), std::string::npos) << r.errors[0].second;
}

// --- The collector, over the modelled node's log (tests/fixtures/kernel/
// kmsg-node.txt) and the i10nm_edac tree (tests/fixtures/edac/sys). ---

const std::filesystem::path kKernelFixtures =
    std::filesystem::path(NODEWATCH_FIXTURES_DIR) / "kernel";

// A node: the fixture log copied (so that a test may append to it), the
// fixture boot id, the EDAC tree, and a state file, all in a scratch dir.
struct CollectorNode {
  TempDir dir;
  std::filesystem::path kmsg = dir.path() / "kmsg";
  Roots roots;
  CollectorNode() {
    std::filesystem::copy_file(kKernelFixtures / "kmsg-node.txt", kmsg);
    std::filesystem::create_directories(dir.path() / "proc");
    std::filesystem::copy(kKernelFixtures / "proc", dir.path() / "proc",
                          std::filesystem::copy_options::recursive);
    roots.sysfs = edac_fixture("sys");
    roots.procfs = dir.path() / "proc";
  }
  KernelOptions options() const {
    KernelOptions o;
    o.kmsg_path = kmsg.string();
    o.state_file = (dir.path() / "kernel-log.state").string();
    return o;
  }
  CollectorEnv env(Services* services) const { return CollectorEnv{roots, nullptr, {}, services}; }
  std::unique_ptr<KernelCollector> collector(Services* services, const KernelOptions& o) const {
    return std::make_unique<KernelCollector>(kernel_log_service(env(services), o), roots, o.edac);
  }
  std::unique_ptr<KernelCollector> collector(Services* services) const {
    return collector(services, options());
  }
};

// The series of family `name` in the sink.
std::size_t SeriesCount(const MetricSink& s, const std::string& name) {
  std::istringstream in(s.render());
  std::size_t n = 0;
  for (std::string line; std::getline(in, line);)
    if (line.rfind(name + "{", 0) == 0 || line.rfind(name + " ", 0) == 0) ++n;
  return n;
}

double Event(const MetricSink& s, const std::string& event, const std::string& device) {
  return Value(s, "nodewatch_kernel_events_total", {event, device});
}

TEST(KernelCollector, MetricTableIsWellFormed) {
  ExpectWellFormedTable(kernel_metric_table(), "nodewatch_kernel_");
}

TEST(KernelCollector, TheModelledNodesEventsAndMemoryErrors) {
  CollectorNode node;
  Services services;
  auto c = node.collector(&services);
  MetricSink s(c->metrics());
  CollectOnce(*c, s);
  EXPECT_TRUE(s.errors().empty());
  // Worked out by hand from the fixture's 28 records (README.md there).
  EXPECT_EQ(Event(s, "aer_correctable", "0000:1a:00.0"), 1);  // not the root port's notice too
  EXPECT_EQ(Event(s, "nvidia_xid", "0000:4a:00.0"), 2);
  EXPECT_EQ(Event(s, "nvidia_xid", "0000:8a:00.0"), 1);
  EXPECT_EQ(Event(s, "gpu_fallen_off_bus", "0000:8a:00.0"), 1);
  EXPECT_EQ(Event(s, "nvidia_sxid", "0000:05:00.0"), 1);  // not its Severity and Data lines
  EXPECT_EQ(Event(s, "mlx5_health", "0000:c1:00.0"), 1);
  EXPECT_EQ(Event(s, "link_down", "ibp193s0"), 1);
  EXPECT_EQ(Event(s, "hung_task", ""), 1);
  EXPECT_EQ(Event(s, "oom_kill", ""), 1);
  EXPECT_EQ(Event(s, "memory_corrected", ""), 2);  // "2 CE" is two errors
  EXPECT_EQ(Event(s, "io_error", "nvme1n1"), 1);
  EXPECT_EQ(Event(s, "nfs_not_responding", ""), 1);
  EXPECT_EQ(Event(s, "nfs_ok", ""), 1);
  EXPECT_EQ(SeriesCount(s, "nodewatch_kernel_events_total"), 13u);
  // The XID a process wrote to /dev/kmsg (facility user) is not one.
  EXPECT_FALSE(HasSeries(s, "nodewatch_kernel_xid_events_total", {"0000:1a:00.0", "79"}));
  EXPECT_EQ(Value(s, "nodewatch_kernel_xid_events_total", {"0000:4a:00.0", "13"}), 2);
  EXPECT_EQ(Value(s, "nodewatch_kernel_xid_events_total", {"0000:8a:00.0", "79"}), 1);
  EXPECT_EQ(Value(s, "nodewatch_kernel_sxid_events_total", {"0000:05:00.0", "12028"}), 1);
  EXPECT_EQ(Value(s, "nodewatch_kernel_log_lost_records_total", {}), 0);
  EXPECT_EQ(Value(s, "nodewatch_kernel_log_up", {}), 1);
  // The last record's monotonic stamp (3720.091002 s) plus the boot time.
  const double boot =
      static_cast<double>(std::time(nullptr)) -
      std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  EXPECT_NEAR(Value(s, "nodewatch_kernel_log_last_record_timestamp_seconds", {}),
              boot + 3720.091002, 2.0);
  // EDAC: per module, and under dimm="" what the driver could not place.
  EXPECT_EQ(Value(s, "nodewatch_memory_corrected_errors_total", {"mc0", "dimm0"}), 7836);
  EXPECT_EQ(Value(s, "nodewatch_memory_corrected_errors_total", {"mc0", ""}), 0);
  EXPECT_EQ(Value(s, "nodewatch_memory_corrected_errors_total", {"mc1", ""}), 2);
  EXPECT_EQ(Value(s, "nodewatch_memory_uncorrected_errors_total", {"mc1", "dimm2"}), 1);
  EXPECT_EQ(
      Value(s, "nodewatch_memory_module_info", {"mc1", "dimm2", "CPU_SrcID#0_MC#1_Chan#1_DIMM#0"}),
      1);
  EXPECT_EQ(Value(s, "nodewatch_memory_controller_info", {"mc0", "Intel_10nm Socket#0 IMC#0"}), 1);
  EXPECT_EQ(SeriesCount(s, "nodewatch_memory_corrected_errors_total"), 10u);  // 2 x (4 + 1)
}

TEST(KernelCollector, AnUnreadableLogKeepsItsCountsAndSaysSo) {
  CollectorNode node;
  Services services;
  {
    auto c = node.collector(&services);
    MetricSink s(c->metrics());
    CollectOnce(*c, s);
    ASSERT_EQ(Event(s, "oom_kill", ""), 1);
  }  // the service stops and saves
  std::filesystem::remove(node.kmsg);
  auto c = node.collector(&services);
  for (int round = 0; round < 2; ++round) {
    MetricSink s(c->metrics());
    CollectOnce(*c, s);
    EXPECT_EQ(Value(s, "nodewatch_kernel_log_up", {}), 0);
    EXPECT_EQ(ErrorCount(s, "log_unreadable"), 1u) << "each collection while it lasts";
    // The saved counts are still served: nothing vanishes or resets.
    EXPECT_EQ(Event(s, "oom_kill", ""), 1);
    EXPECT_EQ(Value(s, "nodewatch_kernel_xid_events_total", {"0000:8a:00.0", "79"}), 1);
    // EDAC does not depend on the log.
    EXPECT_EQ(Value(s, "nodewatch_memory_corrected_errors_total", {"mc0", "dimm0"}), 7836);
  }
}

TEST(KernelCollector, OneTimeErrorsAreCountedOnceEvenByARebuiltCollector) {
  CollectorNode node;
  std::ofstream(node.dir.path() / "kernel-log.state") << "nodewatch-kernel-state 9\n";
  std::ofstream(node.kmsg, std::ios::app) << "3,28;no timestamp field\n";
  Services services;
  auto first = node.collector(&services);
  MetricSink s(first->metrics());
  CollectOnce(*first, s);
  EXPECT_EQ(ErrorCount(s, "state_refused"), 1u);
  EXPECT_EQ(ErrorCount(s, "malformed_record"), 1u);
  EXPECT_EQ(Event(s, "oom_kill", ""), 1);  // counted afresh
  // A reload that rebuilds the collector (same options: same service).
  auto second = node.collector(&services);
  first.reset();
  MetricSink again(second->metrics());
  CollectOnce(*second, again);
  EXPECT_EQ(ErrorCount(again, "state_refused"), 0u);
  EXPECT_EQ(ErrorCount(again, "malformed_record"), 0u);
  EXPECT_EQ(Event(again, "oom_kill", ""), 1);
  EXPECT_EQ(services.made_of<KernelLogService>(), 1u);
}

TEST(KernelCollector, AnOverLongXidIsAMalformedRecord) {
  CollectorNode node;
  std::ofstream(node.kmsg, std::ios::app)
      << "3,28,3800000000,-;NVRM: Xid (PCI:0000:18:00): " << std::string(23, '9')
      << ", pid=1, name=x, GPU has fallen off the bus.\n";
  Services services;
  auto c = node.collector(&services);
  MetricSink s(c->metrics());
  CollectOnce(*c, s);
  EXPECT_EQ(ErrorCount(s, "malformed_record"), 1u);
  EXPECT_FALSE(
      HasSeries(s, "nodewatch_kernel_xid_events_total", {"0000:18:00.0", std::string(19, '9')}));
  EXPECT_FALSE(HasSeries(s, "nodewatch_kernel_events_total", {"nvidia_xid", "0000:18:00.0"}));
}

TEST(KernelCollector, SavedCountsThatCountingCannotMakeAreDroppedFoldedAndSaturated) {
  CollectorNode node;
  KernelState saved;
  saved.boot_id = read_boot_id((node.dir.path() / "proc/sys/kernel/random/boot_id").string());
  ASSERT_FALSE(saved.boot_id.empty());
  saved.last_seq = 27;  // the fixture's last record: all of it counted
  auto& ev = saved.counts.events;
  ev[{"reset_gpu", "0000:18:00.0"}] = 1;  // no event of the vocabulary
  ev[{"oom_kill", ""}] = UINT64_MAX;
  for (const char* d : {"sda", "sdb", "sdc", "sdd", "sde"}) ev[{"io_error", d}] = 1;
  saved.counts.xids[{"0000:18:00.0", "reset"}] = 1;  // no XID
  saved.counts.xids[{"0000:18:00.0", "79"}] = 2;
  saved.counts.sxids[{"0000:05:00.0", "012028"}] = 1;  // no number as the matcher writes one
  KernelOptions o = node.options();
  o.max_devices = 2;
  ASSERT_EQ(write_state_file(o.state_file, saved), 0);
  std::ofstream(node.kmsg, std::ios::app)
      << "3,28,3800000000,-;Out of memory: Killed process 7 (python3) total-vm:1kB\n";
  Services services;
  auto c = node.collector(&services, o);
  MetricSink s(c->metrics());
  CollectOnce(*c, s);
  EXPECT_EQ(ErrorCount(s, "state_entry_dropped"), 1u);
  EXPECT_EQ(ErrorCount(s, "state_refused"), 0u);
  EXPECT_FALSE(HasSeries(s, "nodewatch_kernel_events_total", {"reset_gpu", "0000:18:00.0"}));
  EXPECT_FALSE(HasSeries(s, "nodewatch_kernel_xid_events_total", {"0000:18:00.0", "reset"}));
  EXPECT_FALSE(HasSeries(s, "nodewatch_kernel_sxid_events_total", {"0000:05:00.0", "012028"}));
  EXPECT_EQ(Value(s, "nodewatch_kernel_xid_events_total", {"0000:18:00.0", "79"}), 2);
  // max_devices applies to what was loaded: the first two by name, the
  // rest as "other".
  EXPECT_EQ(Event(s, "io_error", "sda"), 1);
  EXPECT_EQ(Event(s, "io_error", "sdb"), 1);
  EXPECT_EQ(Event(s, "io_error", "other"), 3);
  EXPECT_FALSE(HasSeries(s, "nodewatch_kernel_events_total", {"io_error", "sdc"}));
  // One more OOM kill saturates: the counter never wraps to 0.
  const auto service = kernel_log_service(node.env(&services), o);
  EXPECT_EQ((service->snapshot().state.counts.events.at({"oom_kill", ""})), UINT64_MAX);
  // Said once.
  MetricSink again(c->metrics());
  CollectOnce(*c, again);
  EXPECT_EQ(ErrorCount(again, "state_entry_dropped"), 0u);
}

TEST(KernelCollector, ARebuiltCollectorTakesOverTheReaderWithItsNewOptions) {
  CollectorNode node;
  Services services;
  auto old_collector = node.collector(&services);
  MetricSink s(old_collector->metrics());
  CollectOnce(*old_collector, s);
  const std::string oom = "Out of memory: Killed process 7 (python3) total-vm:1kB";
  std::ofstream(node.kmsg, std::ios::app) << "3,28,3800000000,-;" << oom << "\n";
  // A reload that changes the state file and the device bound builds the
  // new collector before the old one goes: both share the one reader of
  // the log, which takes the new options and counts on.
  KernelOptions changed = node.options();
  changed.max_devices = 8;
  changed.state_file = (node.dir.path() / "moved" / "kernel-log.state").string();
  auto rebuilt = node.collector(&services, changed);
  EXPECT_EQ(services.made_of<KernelLogService>(), 1u);
  ASSERT_TRUE(soon([&] {
    MetricSink m(rebuilt->metrics());
    CollectOnce(*rebuilt, m);
    return Event(m, "oom_kill", "") == 2;
  }));
  old_collector.reset();
  MetricSink later(rebuilt->metrics());
  CollectOnce(*rebuilt, later);
  EXPECT_EQ(Event(later, "oom_kill", ""), 2);
  EXPECT_EQ(Value(later, "nodewatch_kernel_xid_events_total", {"0000:4a:00.0", "13"}), 2);
  rebuilt.reset();  // the reader stops and saves, to the new file
  // The next start reads the new file and continues: nothing counted twice.
  Services next_process;
  auto next = node.collector(&next_process, changed);
  MetricSink after(next->metrics());
  CollectOnce(*next, after);
  EXPECT_EQ(Event(after, "oom_kill", ""), 2);
  EXPECT_EQ(Value(after, "nodewatch_kernel_xid_events_total", {"0000:4a:00.0", "13"}), 2);
}

TEST(KernelCollector, AnEdacValueThatCannotBeReadIsLeftOutAndCounted) {
  CollectorNode node;
  auto faults = std::make_shared<sources::Faults>();
  faults->inject("mc1/dimm2/dimm_ce_count", EIO);
  node.roots.faults = faults;
  Services services;
  auto c = node.collector(&services);
  MetricSink s(c->metrics());
  CollectOnce(*c, s);
  EXPECT_EQ(ErrorCount(s, "edac_read_error"), 1u);
  EXPECT_FALSE(HasSeries(s, "nodewatch_memory_corrected_errors_total", {"mc1", "dimm2"}));
  EXPECT_EQ(Value(s, "nodewatch_memory_uncorrected_errors_total", {"mc1", "dimm2"}), 1);
  // Without EDAC (the option off) nothing of it is read.
  KernelOptions off = node.options();
  off.edac = false;
  auto no_edac = node.collector(&services, off);
  MetricSink n(no_edac->metrics());
  CollectOnce(*no_edac, n);
  EXPECT_EQ(SeriesCount(n, "nodewatch_memory_corrected_errors_total"), 0u);
  EXPECT_TRUE(n.errors().empty());
}

TEST(KernelConfig, PathsMustBeAbsoluteAndDevicesBounded) {
  std::vector<CollectorSpec> catalog = {kernel_collector_spec()};
  auto parse = [&](const std::string& text) {
    return parse_config(text, "nodewatch.toml", catalog);
  };
  ConfigResult ok = parse("[collectors.kernel]\nstate_file = \"\"\nmax_devices = 4096\n");
  EXPECT_TRUE(ok.config) << (ok.errors.empty() ? "" : ok.errors[0].str());
  for (const char* bad : {"kmsg_path = \"dev/kmsg\"", "state_file = \"kernel.state\"",
                          "state_file = \"/var/lib/nodewatch/\"", "max_devices = 0",
                          "max_devices = 4097", "edac = 1"}) {
    SCOPED_TRACE(bad);
    ConfigResult r = parse(std::string("[collectors.kernel]\n") + bad + "\n");
    EXPECT_FALSE(r.config);
    ASSERT_EQ(r.errors.size(), 1u);
    EXPECT_EQ(r.errors[0].line, 2);
    EXPECT_EQ(r.errors[0].key.rfind("collectors.kernel.", 0), 0u) << r.errors[0].key;
  }
}

TEST(KernelConfig, AStatePathThatIsNotARegularFileIsRefused) {
  std::vector<CollectorSpec> catalog = {kernel_collector_spec()};
  auto parse = [&](const std::filesystem::path& state) {
    return parse_config("[collectors.kernel]\nstate_file = \"" + state.string() + "\"\n",
                        "nodewatch.toml", catalog);
  };
  TempDir dir;
  for (const auto& path : not_regular_paths(dir)) {
    SCOPED_TRACE(path.string());
    ConfigResult r = parse(path);
    EXPECT_FALSE(r.config);
    ASSERT_EQ(r.errors.size(), 1u);
    EXPECT_EQ(r.errors[0].key, "collectors.kernel.state_file");
    EXPECT_NE(r.errors[0].message.find("not a regular file"), std::string::npos)
        << r.errors[0].message;
  }
  // A regular file, or none yet: taken.
  for (const auto& path : {dir.write("kernel-log.state", ""), dir.path() / "none"}) {
    ConfigResult r = parse(path);
    EXPECT_TRUE(r.config) << (r.errors.empty() ? "" : r.errors[0].str());
  }
}

}  // namespace
}  // namespace nodewatch::kernel
