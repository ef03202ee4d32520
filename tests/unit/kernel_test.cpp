// Tests of the kernel collector's parts: the /dev/kmsg record format
// (Documentation/ABI/testing/dev-kmsg: its own example records, continuation
// lines, escapes, fragments, a long record, malformed prefixes) and the
// state file kept across restarts (round trip, and every way a file is
// refused whole).

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

#include "kernel/kernel_state.hpp"
#include "kernel/kmsg.hpp"
#include "support/daemon_process.hpp"

namespace nodewatch::kernel {
namespace {

using nodewatch::testing::ReadFile;
using nodewatch::testing::TempDir;

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
    std::uint64_t h = 14695981039346656037ull;
    for (unsigned char c : body) {
      h ^= c;
      h *= 1099511628211ull;
    }
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
    return body + "checksum " + buf + "\n";
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
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  // A directory that is not there: the errno, and nothing written.
  EXPECT_EQ(write_state_file((dir.path() / "none" / "state").string(), s), ENOENT);
  // A directory that refuses the temporary file leaves the old state as it
  // was (root ignores permissions, so the file is made a directory instead).
  std::filesystem::create_directory(path + ".tmp");
  s.counts.lost = 99;
  EXPECT_NE(write_state_file(path, s), 0);
  back = parse_state(ReadFile(path), &why);
  ASSERT_TRUE(back) << why;
  EXPECT_EQ(back->counts.lost, 7u);
}

}  // namespace
}  // namespace nodewatch::kernel
