// The sources layer: file-system root reads and their four answers, held
// descriptors, injected errnos, the RE2 name filter, the wrap-accumulating
// counter, the device table and the services registry.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <toml++/toml.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <string>

#include "nodewatch/options.hpp"
#include "nodewatch/services.hpp"
#include "nodewatch/sources/device_table.hpp"
#include "nodewatch/sources/fs.hpp"
#include "nodewatch/sources/name_filter.hpp"
#include "nodewatch/sources/wrap_counter.hpp"

namespace nodewatch::sources {
namespace {

namespace fs = std::filesystem;

class Tree {
 public:
  Tree() {
    char tmpl[] = "/tmp/nodewatch-sources-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
  }
  ~Tree() { fs::remove_all(dir_); }
  void write(const std::string& rel, const std::string& text) {
    fs::create_directories((dir_ / rel).parent_path());
    std::ofstream(dir_ / rel, std::ios::binary) << text;
  }
  const fs::path& dir() const { return dir_; }

 private:
  fs::path dir_;
};

int open_fds() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

TEST(FsRoot, ReadAnswersOkAbsentAndErrorsByErrno) {
  Tree t;
  t.write("class/net/eth0/mtu", "9000\n");
  auto faults = std::make_shared<Faults>();
  FsRoot root(t.dir(), faults);

  Read ok = root.read("class/net/eth0/mtu");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok.text, "9000\n");
  EXPECT_EQ(ok.value(), "9000");

  Read absent = root.read("class/net/eth0/speed");
  EXPECT_EQ(absent.status, Status::kAbsent);
  EXPECT_EQ(absent.err, ENOENT);
  EXPECT_FALSE(absent.failed());
  EXPECT_EQ(root.read("class/net/eth0/mtu/x").status, Status::kAbsent);  // ENOTDIR

  faults->inject("eth0/mtu", EIO, 1);
  Read eio = root.read("class/net/eth0/mtu");
  EXPECT_EQ(eio.status, Status::kError);
  EXPECT_EQ(eio.error_name(), "EIO");
  EXPECT_TRUE(eio.failed());
  EXPECT_TRUE(root.read("class/net/eth0/mtu").ok());  // only once

  faults->inject("eth0/mtu", ENODEV);
  EXPECT_EQ(root.read("class/net/eth0/mtu").status, Status::kGone);
  EXPECT_EQ(root.read("class/net/eth0/mtu").status, Status::kGone);  // until cleared
  faults->clear();
  EXPECT_TRUE(root.read("class/net/eth0/mtu").ok());
  EXPECT_EQ(faults->hits(), 3u);

  EXPECT_EQ(classify_errno(EACCES), Status::kError);
  EXPECT_EQ(classify_errno(ENXIO), Status::kGone);
  EXPECT_EQ(classify_errno(ESTALE), Status::kGone);
  EXPECT_EQ(errno_name(EACCES), "EACCES");
  EXPECT_EQ(errno_name(4000), "E4000");  // one glibc has no name for
}

// An action runs once, just before the read of the path it waits for: a
// test removes a device there, mid-collection.
TEST(Faults, ActionRunsOnceBeforeTheReadOfItsPath) {
  Tree t;
  t.write("class/drm/card1/device/vendor", "0x1002\n");
  t.write("class/drm/card1/device/gpu_busy_percent", "87\n");
  auto faults = std::make_shared<Faults>();
  FsRoot root(t.dir(), faults);
  int runs = 0;
  faults->on_read("card1/device/gpu_busy_percent", [&] {
    ++runs;
    fs::remove_all(t.dir() / "class/drm/card1");
  });
  EXPECT_TRUE(root.read("class/drm/card1/device/vendor").ok());  // another path: not yet
  EXPECT_EQ(runs, 0);
  EXPECT_EQ(root.read("class/drm/card1/device/gpu_busy_percent").status, Status::kAbsent);
  EXPECT_EQ(runs, 1);
  t.write("class/drm/card1/device/gpu_busy_percent", "5\n");
  EXPECT_EQ(root.read("class/drm/card1/device/gpu_busy_percent").value(), "5");
  EXPECT_EQ(runs, 1);
  // An action may inject the errno that the read it precedes then answers.
  faults->on_read("gpu_busy_percent", [&] { faults->inject("gpu_busy_percent", EIO, 1); });
  EXPECT_EQ(root.read("class/drm/card1/device/gpu_busy_percent").err, EIO);
  EXPECT_TRUE(root.read("class/drm/card1/device/gpu_busy_percent").ok());
  EXPECT_EQ(faults->hits(), 1u);
  // clear() drops waiting actions too.
  faults->on_read("gpu_busy_percent", [&] { ++runs; });
  faults->clear();
  EXPECT_TRUE(root.read("class/drm/card1/device/gpu_busy_percent").ok());
  EXPECT_EQ(runs, 1);
}

TEST(FsRoot, AFileOverTheLimitIsAnErrorNotATruncation) {
  Tree t;
  t.write("proc/diskstats", std::string(10000, 'x'));
  FsRoot root(t.dir());
  Read big = root.read("proc/diskstats", 9999);
  EXPECT_EQ(big.status, Status::kError);
  EXPECT_EQ(big.err, EFBIG);
  EXPECT_TRUE(big.text.empty());
  Read exact = root.read("proc/diskstats", 10000);
  ASSERT_TRUE(exact.ok());
  EXPECT_EQ(exact.text.size(), 10000u);
}

TEST(FsRoot, ListingAndLinks) {
  Tree t;
  t.write("class/infiniband/mlx5_1/ports/1/state", "4: ACTIVE\n");
  t.write("class/infiniband/mlx5_0/ports/1/state", "4: ACTIVE\n");
  fs::create_directory_symlink("../../devices/pci0000:00/0000:17:00.0",
                               t.dir() / "class/infiniband/mlx5_0/device");
  auto faults = std::make_shared<Faults>();
  FsRoot root(t.dir(), faults);
  Listing l = root.list("class/infiniband");
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l.names, (std::vector<std::string>{"mlx5_0", "mlx5_1"}));
  EXPECT_EQ(root.list("class/nope").status, Status::kAbsent);
  faults->inject("class/infiniband", EACCES, 1);
  Listing denied = root.list("class/infiniband");
  EXPECT_EQ(denied.status, Status::kError);
  EXPECT_TRUE(denied.names.empty());
  Read link = root.readlink("class/infiniband/mlx5_0/device");
  ASSERT_TRUE(link.ok());
  EXPECT_EQ(link.text, "../../devices/pci0000:00/0000:17:00.0");
  EXPECT_EQ(root.readlink("class/infiniband/mlx5_1/device").status, Status::kAbsent);
  EXPECT_EQ(root.full("/a/b"), (t.dir() / "a/b").string());
}

// A directory whose entries take several of the listing's 32 KiB reads
// (3,000 names of 60 characters: about 240 KiB of records), listed whole
// and sorted, by path and on a descriptor the caller opened; a file where a
// directory should be is absent (ENOTDIR, as for a path through a file);
// one removed while open is empty; no descriptor is left behind.
TEST(FsRoot, ListingLargerThanOneReadIsWholeAndSorted) {
  Tree t;
  fs::create_directories(t.dir() / "many");
  std::vector<std::string> want;
  for (int i = 2999; i >= 0; --i) {
    std::string name = "entry-" + std::to_string(i);
    name.resize(60, 'x');
    std::ofstream(t.dir() / "many" / name) << "";
    want.push_back(name);
  }
  std::sort(want.begin(), want.end());
  t.write("file", "not a directory\n");
  FsRoot root(t.dir());
  const int fds = open_fds();

  Listing l = root.list("many");
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l.names, want);

  const int dirfd = ::open((t.dir() / "many").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(dirfd, 0);
  Listing by_fd = FsRoot::list_fd(dirfd);
  ASSERT_TRUE(by_fd.ok());
  EXPECT_EQ(by_fd.names, want);
  // Left open, at its end: listed again, nothing more.
  EXPECT_TRUE(FsRoot::list_fd(dirfd).names.empty());
  ::close(dirfd);

  // A directory removed while open answers ENOENT to getdents64: the end
  // of the listing (as readdir() takes it), not an error.
  fs::create_directories(t.dir() / "gone");
  const int gone = ::open((t.dir() / "gone").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(gone, 0);
  fs::remove(t.dir() / "gone");
  Listing removed = FsRoot::list_fd(gone);
  EXPECT_TRUE(removed.ok()) << removed.err;
  EXPECT_TRUE(removed.names.empty());
  ::close(gone);

  Listing file = root.list("file");
  EXPECT_EQ(file.status, Status::kAbsent);
  EXPECT_EQ(file.err, ENOTDIR);
  EXPECT_TRUE(file.names.empty());
  EXPECT_EQ(open_fds(), fds);
}

// resolve() works a sysfs link out from its text, within the root.
TEST(FsRoot, ResolveFollowsARelativeLinkWithinTheRoot) {
  Tree t;
  t.write("devices/pci0000:16/0000:16:02.0/0000:17:00.0/vendor", "0x15b3\n");
  fs::create_directories(t.dir() / "bus/pci/devices");
  fs::create_directory_symlink("../../../devices/pci0000:16/0000:16:02.0/0000:17:00.0",
                               t.dir() / "bus/pci/devices/0000:17:00.0");
  fs::create_directory_symlink("../../../../../../outside", t.dir() / "bus/pci/devices/escape");
  fs::create_directory_symlink("/sys/devices", t.dir() / "bus/pci/devices/absolute");
  fs::create_directory_symlink("../../../devices/gone", t.dir() / "bus/pci/devices/dangling");
  auto faults = std::make_shared<Faults>();
  FsRoot root(t.dir(), faults);
  Read r = root.resolve("bus/pci/devices/0000:17:00.0");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.text, "devices/pci0000:16/0000:16:02.0/0000:17:00.0");
  EXPECT_EQ(root.read(r.text + "/vendor").value(), "0x15b3");
  EXPECT_EQ(root.resolve("bus/pci/devices/escape").err, EXDEV);
  EXPECT_EQ(root.resolve("bus/pci/devices/absolute").err, EXDEV);
  // The target need not exist: the reads below it will say so.
  EXPECT_EQ(root.resolve("bus/pci/devices/dangling").text, "devices/gone");
  EXPECT_EQ(root.resolve("bus/pci/devices/none").status, Status::kAbsent);
  Read not_link = root.resolve("devices/pci0000:16");
  EXPECT_EQ(not_link.status, Status::kError);
  EXPECT_EQ(not_link.err, EINVAL);
  faults->inject("devices/0000:17:00.0", ENODEV, 1);
  EXPECT_EQ(root.resolve("bus/pci/devices/0000:17:00.0").status, Status::kGone);
}

// read_regular() on files other programs write: the facts of the content
// read, and neither a FIFO nor a growing file is taken.
TEST(FsRoot, ReadRegularGivesTypeSizeAndMtimeAndNeverBlocks) {
  Tree t;
  t.write("textfile/burnin.prom", "burnin_ok 1\n");
  ASSERT_EQ(::mkfifo((t.dir() / "textfile/pipe.prom").c_str(), 0600), 0);
  auto faults = std::make_shared<Faults>();
  FsRoot root(t.dir() / "textfile", faults);

  FsRoot::FileRead ok = root.read_regular("burnin.prom", 1024);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok.text, "burnin_ok 1\n");
  ASSERT_TRUE(ok.info);
  EXPECT_TRUE(ok.info->regular);
  EXPECT_EQ(ok.info->size, 12u);
  struct ::stat st {};
  ASSERT_EQ(::stat((t.dir() / "textfile/burnin.prom").c_str(), &st), 0);
  EXPECT_DOUBLE_EQ(ok.info->mtime_seconds, st.st_mtim.tv_sec + st.st_mtim.tv_nsec / 1e9);

  FsRoot::FileRead fifo = root.read_regular("pipe.prom", 1024);  // would block without O_NONBLOCK
  EXPECT_EQ(fifo.err, EINVAL);
  ASSERT_TRUE(fifo.info);
  EXPECT_FALSE(fifo.info->regular);
  EXPECT_GT(fifo.info->mtime_seconds, 0);

  FsRoot::FileRead big = root.read_regular("burnin.prom", 11);
  EXPECT_EQ(big.err, EFBIG);
  EXPECT_EQ(big.info->size, 12u);
  EXPECT_TRUE(big.text.empty());

  FsRoot::FileRead absent = root.read_regular("none.prom", 1024);
  EXPECT_EQ(absent.status, Status::kAbsent);
  EXPECT_FALSE(absent.info);
  faults->inject("burnin.prom", EACCES, 1);
  FsRoot::FileRead denied = root.read_regular("burnin.prom", 1024);
  EXPECT_EQ(denied.err, EACCES);
  EXPECT_FALSE(denied.info);
}

// A held descriptor reads the file afresh on every read (pread at 0), keeps
// one descriptor, and is reopened by path after the device went away.
// A FIFO (no writer) or a directory where an attribute should be: read(),
// a held file and the held-file table answer EINVAL at once (an open()
// without O_NONBLOCK waits for a writer forever), hold no descriptor, and
// read the attribute again once it is a file.
TEST(FsRoot, ANonRegularFileInPlaceOfAnAttributeIsAnErrorAtOnce) {
  Tree t;
  t.write("class/net/eth0/mtu", "9000\n");
  fs::create_directories(t.dir() / "class/net/eth0/dir");
  ASSERT_EQ(::mkfifo((t.dir() / "class/net/eth0/carrier").c_str(), 0600), 0);
  FsRoot root(t.dir());
  const int fds = open_fds();

  Read fifo = root.read("class/net/eth0/carrier");
  EXPECT_EQ(fifo.status, Status::kError);
  EXPECT_EQ(fifo.err, EINVAL);
  EXPECT_EQ(root.read("class/net/eth0/dir").err, EISDIR);
  HeldFile held = root.hold("class/net/eth0/carrier");
  EXPECT_EQ(held.read().err, EINVAL);
  EXPECT_FALSE(held.is_open());
  HeldFiles table(root);
  table.begin_cycle();
  EXPECT_EQ(table.read("class/net/eth0/carrier").err, EINVAL);
  EXPECT_TRUE(table.read("class/net/eth0/mtu").ok());
  EXPECT_EQ(open_fds(), fds + 1);  // the mtu's descriptor only

  fs::remove(t.dir() / "class/net/eth0/carrier");
  t.write("class/net/eth0/carrier", "1\n");
  EXPECT_EQ(held.read().value(), "1");
  EXPECT_EQ(table.read("class/net/eth0/carrier").value(), "1");
}

TEST(HeldFile, ReadsAfreshOnOneDescriptorAndReopensAfterGone) {
  Tree t;
  t.write("counter", "1\n");
  auto faults = std::make_shared<Faults>();
  FsRoot root(t.dir(), faults);
  int before = open_fds();
  HeldFile h = root.hold("counter");
  EXPECT_FALSE(h.is_open());
  EXPECT_EQ(h.read().value(), "1");
  EXPECT_TRUE(h.is_open());
  EXPECT_EQ(open_fds(), before + 1);
  {
    // Rewrite in place: the same inode, new content.
    std::ofstream(t.dir() / "counter", std::ios::binary | std::ios::trunc) << "12345\n";
  }
  EXPECT_EQ(h.read().value(), "12345");
  EXPECT_EQ(open_fds(), before + 1);

  // Replaced by a new file (a re-created device): the old descriptor still
  // reads the old inode until the kernel says gone; then the path is opened.
  fs::remove(t.dir() / "counter");
  t.write("counter", "7\n");
  EXPECT_EQ(h.read().value(), "12345");
  faults->inject("counter", ENODEV, 1);
  EXPECT_EQ(h.read().status, Status::kGone);
  EXPECT_EQ(h.read().value(), "7");
  fs::remove(t.dir() / "counter");
  HeldFile gone = root.hold("counter");
  EXPECT_EQ(gone.read().status, Status::kAbsent);
  h = HeldFile();
  EXPECT_EQ(open_fds(), before);
}

TEST(HeldFiles, ClosesWhatACycleDidNotReadAndFallsBackPastItsLimit) {
  Tree t;
  for (int i = 0; i < 4; ++i) t.write("f" + std::to_string(i), std::to_string(i));
  int before = open_fds();
  HeldFiles files(FsRoot(t.dir()), 3);
  files.begin_cycle();
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(files.read("f" + std::to_string(i)).value(), std::to_string(i));
  EXPECT_EQ(files.size(), 3u);
  EXPECT_EQ(files.fallbacks(), 1u);
  EXPECT_EQ(files.read("absent").status, Status::kAbsent);
  EXPECT_EQ(files.size(), 3u);  // an absent file is not held
  EXPECT_EQ(files.end_cycle(), 0u);
  EXPECT_EQ(open_fds(), before + 3);
  files.begin_cycle();
  files.read("f0");
  EXPECT_EQ(files.end_cycle(), 2u);
  EXPECT_EQ(files.size(), 1u);
  EXPECT_EQ(open_fds(), before + 1);
}

// A held file larger than an attribute (a /proc/diskstats of 1,000
// devices), held or past the limit, is read whole under its own bound.
TEST(HeldFiles, AFileLargerThanAnAttributeIsReadUnderItsOwnBound) {
  Tree t;
  std::string big(3 * kMaxAttributeBytes, 'x');
  t.write("diskstats", big);
  HeldFiles held(FsRoot(t.dir()));
  EXPECT_EQ(held.read("diskstats").err, EFBIG);  // the attribute bound by default
  HeldFiles files(FsRoot(t.dir()));
  Read r = files.read("diskstats", 4 * kMaxAttributeBytes);
  ASSERT_TRUE(r.ok()) << r.error_name();
  EXPECT_EQ(r.text.size(), big.size());
  EXPECT_EQ(files.size(), 1u);
  EXPECT_EQ(files.read("diskstats", 4 * kMaxAttributeBytes).text.size(), big.size());
  HeldFiles none(FsRoot(t.dir()), 0);  // nothing held: open/read/close, same bound
  Read fallback = none.read("diskstats", 4 * kMaxAttributeBytes);
  ASSERT_TRUE(fallback.ok()) << fallback.error_name();
  EXPECT_EQ(fallback.text.size(), big.size());
  EXPECT_EQ(none.fallbacks(), 1u);
  EXPECT_EQ(none.read("diskstats", kMaxAttributeBytes).err, EFBIG);
}

TEST(NameFilter, IncludeThenExcludeSearchedAnywhere) {
  NameFilter all;
  EXPECT_TRUE(all.matches("anything"));
  NameFilter f(NameFilterSpec{"^(sd|nvme)", "p[0-9]+$"});
  EXPECT_TRUE(f.matches("sda"));
  EXPECT_TRUE(f.matches("nvme0n1"));
  EXPECT_FALSE(f.matches("nvme0n1p1"));
  EXPECT_FALSE(f.matches("loop0"));
  NameFilter unanchored(NameFilterSpec{"mlx5", ""});
  EXPECT_TRUE(unanchored.matches("dev_mlx5_3"));
  EXPECT_THROW(NameFilter(NameFilterSpec{"(", ""}), std::invalid_argument);
}

// What std::regex could not survive: a 60,000-character name (the
// recursive executor overflowed the stack) and a pattern with nested
// quantifiers on a legal name (exponential backtracking). RE2 answers both.
TEST(NameFilter, LinearTimeOnHostileNamesAndPatterns) {
  std::string huge(60000, 'a');
  NameFilter nested(NameFilterSpec{"^(a+)+$", ""});
  EXPECT_TRUE(nested.matches(huge));
  EXPECT_FALSE(nested.matches(std::string(30, 'a') + "b"));
  NameFilter alternation(NameFilterSpec{"", "(a|aa)*c"});
  EXPECT_TRUE(alternation.matches(huge));
  EXPECT_FALSE(alternation.matches(huge + "c"));
}

TEST(NameFilter, ConfigurationErrorsNameTheKey) {
  toml::table t = toml::parse(
      "devices_include = \"(\"\ndevices_exclude = \"a{2,1}\"\ninterfaces_include = \"(?=x)\"\n");
  std::vector<ConfigError> errors;
  OptionReader r(t, "collectors.storage", "n.toml", &errors);
  NameFilterSpec devices = read_name_filter(r, "device", "devices_include", "devices_exclude");
  NameFilterSpec nics =
      read_name_filter(r, "interface", "interfaces_include", "interfaces_exclude", "", "^lo$");
  r.finish();
  ASSERT_EQ(errors.size(), 3u);
  EXPECT_EQ(errors[0].key, "collectors.storage.devices_include");
  EXPECT_EQ(errors[0].line, 1);
  EXPECT_EQ(errors[1].key, "collectors.storage.devices_exclude");
  EXPECT_EQ(errors[2].key, "collectors.storage.interfaces_include");  // no lookahead in RE2
  for (const auto& e : errors)
    EXPECT_NE(e.message.find("not a valid regular expression"), std::string::npos) << e.str();
  EXPECT_EQ(nics.exclude, "^lo$");
  EXPECT_EQ(devices.include, "(");
  EXPECT_NE(pattern_error(std::string(kMaxPatternBytes + 1, 'a')), "");
  EXPECT_EQ(pattern_error(std::string(kMaxPatternBytes, 'a')), "");
}

TEST(WrapCounter, WrapsAt32BitsAndReadsOtherDecreasesAsResets) {
  WrapCounter c;
  EXPECT_EQ(c.update(4294967290u), 4294967290u);
  EXPECT_EQ(c.update(5), 4294967301u);  // +11 across the wrap
  EXPECT_EQ(c.update(100), 4294967396u);
  // A small fall would be a modular increase of almost 2^32: a reset.
  WrapCounter r;
  r.update(3000000000u);
  EXPECT_EQ(r.update(2999999000u), 2999999000u);
  // The largest modular increase still taken as a wrap is below 2^31.
  WrapCounter edge;
  edge.update(3000000000u);
  EXPECT_EQ(edge.update(852516351u), 852516351u + (1ULL << 32));  // +2^31 - 1
  WrapCounter past;
  past.update(3000000000u);
  EXPECT_EQ(past.update(852516352u), 852516352u);  // +2^31: a reset
  // A 64-bit counter never wraps: any decrease is a reset.
  WrapCounter wide;
  wide.update(4294967290u, false);
  EXPECT_EQ(wide.update(5, false), 5u);
  // A reset after a wrap drops the offset too.
  WrapCounter again;
  again.update(4294967290u);
  again.update(5);
  EXPECT_EQ(again.update(1), 1u);
  EXPECT_TRUE(is_32bit_wrap(4294967290u, 5));
  EXPECT_FALSE(is_32bit_wrap(100, 5));
  EXPECT_FALSE(is_32bit_wrap(1ULL << 33, 5));
}

TEST(WrapCounters, KeyedCountersForgetWhatACycleDidNotUpdate) {
  WrapCounters c;
  c.begin_cycle();
  c.update("sda/read_ms", 4294967290u);
  c.update("sdb/read_ms", 7);
  EXPECT_EQ(c.end_cycle(), 0u);
  c.begin_cycle();
  EXPECT_EQ(c.update("sda/read_ms", 5), 4294967301u);
  EXPECT_EQ(c.end_cycle(), 1u);  // sdb went away
  c.begin_cycle();
  EXPECT_EQ(c.update("sdb/read_ms", 3), 3u);  // and comes back afresh
  EXPECT_EQ(c.size(), 2u);

  // A key whose read failed for a cycle is kept: its wrap offset too.
  WrapCounters k;
  k.begin_cycle();
  k.update("sda/read_ms", 4294967290u);
  k.update("sdb/read_ms", 7);
  k.end_cycle();
  k.begin_cycle();
  EXPECT_EQ(k.update("sda/read_ms", 5), 4294967301u);
  k.update("sdb/read_ms", 8);
  k.end_cycle();
  k.begin_cycle();
  k.keep("sda/read_ms");
  k.keep("sdc/read_ms");         // unknown: nothing to keep
  EXPECT_EQ(k.end_cycle(), 1u);  // sdb only
  k.begin_cycle();
  EXPECT_EQ(k.update("sda/read_ms", 6), 4294967302u);
  EXPECT_EQ(k.size(), 1u);
}

TEST(DeviceTable, FactsRefreshEveryNCyclesAndUnseenEntriesGo) {
  DeviceTable<int> t(3);
  std::vector<bool> refreshes;
  for (int cycle = 0; cycle < 7; ++cycle) {
    t.begin_cycle();
    auto seen = t.see("mlx5_0");
    seen.entry++;
    refreshes.push_back(seen.refresh);
    if (cycle < 2) t.see("mlx5_1");
    t.end_cycle();
  }
  EXPECT_EQ(refreshes, (std::vector<bool>{true, false, false, true, false, false, true}));
  EXPECT_EQ(*t.find("mlx5_0"), 7);
  EXPECT_EQ(t.find("mlx5_1"), nullptr);
  t.begin_cycle();
  t.see("mlx5_0");
  t.invalidate("mlx5_0");
  EXPECT_TRUE(t.see("mlx5_0").refresh);
  t.forget("mlx5_0");
  EXPECT_EQ(t.size(), 0u);
}

struct Session {
  int id;
};

// Services live as long as a holder does, and are shared while they live.
TEST(Services, SharedWhileHeldAndGoneWhenReleased) {
  Services s;
  int made = 0;
  auto make = [&made] { return std::make_shared<Session>(Session{++made}); };
  auto a = s.get<Session>("libnvidia-ml.so.1", make);
  auto b = s.get<Session>("libnvidia-ml.so.1", make);
  EXPECT_EQ(a.get(), b.get());
  auto other = s.get<Session>("/opt/libnvidia-ml.so.1", make);
  EXPECT_NE(a.get(), other.get());
  EXPECT_EQ(s.made(), 2u);
  // The same key under another type is another service.
  auto counters =
      s.get<WrapCounters>("libnvidia-ml.so.1", [] { return std::make_shared<WrapCounters>(); });
  EXPECT_EQ(s.alive(), 3u);
  a.reset();
  EXPECT_EQ(s.alive(), 3u);  // b still holds it
  b.reset();
  EXPECT_EQ(s.alive(), 2u);
  auto c = s.get<Session>("libnvidia-ml.so.1", make);
  EXPECT_EQ(c->id, 3);
}

}  // namespace
}  // namespace nodewatch::sources
