// Tests of the accelerator collector's amdgpu backend: the sysfs parsers with
// the kernel's formats, the gpu_metrics layouts, and the backend over the
// fixture tree tests/fixtures/amdgpu (an MI300X, an MI210 and a BMC's VGA
// card; see its README for where each file's format comes from). Expected
// values are worked out by hand from the fixture files, in base units.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cmath>  // before support/collector_test.hpp, which uses std::nan without it
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "accelerator/accelerator_collector.hpp"
#include "accelerator/amdgpu_backend.hpp"
#include "accelerator/amdgpu_parse.hpp"
#include "support/collector_test.hpp"

namespace nodewatch::accelerator {
namespace {

namespace fs = std::filesystem;
using namespace amdgpu;
using nodewatch::testing::CollectOnce;
using nodewatch::testing::ExpectConformant;
using nodewatch::testing::ExpectWellFormedTable;
using nodewatch::testing::Value;

// The two AMD boards of the fixture, relative to its sysfs root.
const std::string kMi300x = "devices/pci0000:00/0000:00:01.1/0000:05:00.0";
const std::string kMi210 = "devices/pci0000:c0/0000:c0:01.1/0000:c1:00.0";

fs::path fixture_sysfs() {
  return nodewatch::testing::fixtures_dir() / "amdgpu" / "sys";
}

Roots fixture_roots() {
  return Roots{fixture_sysfs(), "/nonexistent-procfs"};
}

CollectContext generous_context() {
  return CollectContext{std::chrono::steady_clock::now() + std::chrono::seconds(30), nullptr};
}

std::vector<DeviceSample> sample(const Roots& roots) {
  return make_amdgpu_backend(roots)->sample(generous_context());
}

// Roots over the fixture whose reads fail as `faults` says.
Roots faulty_roots(const std::shared_ptr<sources::Faults>& faults, Roots roots = fixture_roots()) {
  roots.faults = faults;
  return roots;
}

const DeviceSample* find_bus(const std::vector<DeviceSample>& devices, std::string_view bus) {
  for (const DeviceSample& d : devices) {
    if (d.pci_bus_id == bus) return &d;
  }
  return nullptr;
}

std::size_t count(const std::vector<DeviceError>& errors, std::string_view reason) {
  std::size_t n = 0;
  for (const DeviceError& e : errors) n += e.reason == reason ? 1 : 0;
  return n;
}

std::vector<std::string> reasons(const std::vector<DeviceError>& errors) {
  std::vector<std::string> r;
  for (const DeviceError& e : errors) r.push_back(e.reason);
  return r;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A private copy of the fixture tree (relative symlinks copied as symlinks,
// so that it keeps the shape of real sysfs) that a test may damage.
class TempTree {
 public:
  TempTree() {
    static int counter = 0;
    dir_ = fs::temp_directory_path() / ("nodewatch-amdgpu-test-" + std::to_string(::getpid()) +
                                        "-" + std::to_string(counter++));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    fs::copy(fixture_sysfs(), dir_ / "sys",
             fs::copy_options::recursive | fs::copy_options::copy_symlinks);
  }
  ~TempTree() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  TempTree(const TempTree&) = delete;
  TempTree& operator=(const TempTree&) = delete;

  fs::path path(const std::string& relative) const { return dir_ / "sys" / relative; }
  void write(const std::string& relative, const std::string& content) const {
    std::ofstream out(path(relative), std::ios::binary | std::ios::trunc);
    out << content;
  }
  void remove(const std::string& relative) const { fs::remove(path(relative)); }
  Roots roots() const { return Roots{dir_ / "sys", dir_ / "proc"}; }
  // Lays the KFD overlay (tests/fixtures/amdgpu/kfd/sys) over the copy.
  void add_kfd() const {
    fs::copy(nodewatch::testing::fixtures_dir() / "amdgpu" / "kfd" / "sys", dir_ / "sys",
             fs::copy_options::recursive | fs::copy_options::copy_symlinks);
  }

 private:
  fs::path dir_;
};

// The KFD overlay's directories, relative to the sysfs root, and its GPUs'
// gpu_ids (see the fixture README).
const std::string kKfdProc = "devices/virtual/kfd/kfd/proc";
const std::string kKfdNodes = "devices/virtual/kfd/kfd/topology/nodes";
constexpr std::uint32_t kMi300xGpuId = 42735;
constexpr std::uint32_t kMi210GpuId = 9017;
constexpr double kGiB = 1024.0 * 1024 * 1024;

// ---------------------------------------------------------------------------
// Parsing of text attributes

TEST(AmdgpuParse, Numbers) {
  EXPECT_EQ(parse_u64("206158430208\n"), 206158430208u);
  EXPECT_EQ(parse_u64("0"), 0u);
  EXPECT_EQ(parse_u64(""), std::nullopt);
  EXPECT_EQ(parse_u64("\n"), std::nullopt);
  EXPECT_EQ(parse_u64("12 34\n"), std::nullopt);
  EXPECT_EQ(parse_u64("-1\n"), std::nullopt);
  EXPECT_EQ(parse_u64("18446744073709551616\n"), std::nullopt);  // 2^64
  EXPECT_EQ(parse_i64("-273150\n"), -273150);                    // temp1_crit_hyst of a SOC15 dGPU
  EXPECT_EQ(parse_i64("71000\n"), 71000);
  EXPECT_EQ(parse_i64("71.5\n"), std::nullopt);
}

TEST(AmdgpuParse, PciId) {
  EXPECT_EQ(parse_pci_id("0x1002\n"), 0x1002u);
  EXPECT_EQ(parse_pci_id("0x74a1\n"), 0x74a1u);
  EXPECT_EQ(parse_pci_id("0x1a03"), 0x1a03u);
  EXPECT_EQ(parse_pci_id("1002\n"), std::nullopt);
  EXPECT_EQ(parse_pci_id("0x\n"), std::nullopt);
  EXPECT_EQ(parse_pci_id("0xzz\n"), std::nullopt);
}

TEST(AmdgpuParse, CardNumber) {
  EXPECT_EQ(parse_card_number("card0"), 0u);
  EXPECT_EQ(parse_card_number("card10"), 10u);
  EXPECT_EQ(parse_card_number("card1-DP-1"), std::nullopt);
  EXPECT_EQ(parse_card_number("card0-VGA-1"), std::nullopt);
  EXPECT_EQ(parse_card_number("renderD128"), std::nullopt);
  EXPECT_EQ(parse_card_number("version"), std::nullopt);
  EXPECT_EQ(parse_card_number("card"), std::nullopt);
  EXPECT_EQ(parse_card_number("card01"), std::nullopt);
  EXPECT_EQ(parse_card_number("cardX"), std::nullopt);
}

TEST(AmdgpuParse, KfdNames) {
  EXPECT_EQ(parse_kfd_pid("4242"), 4242u);
  EXPECT_EQ(parse_kfd_pid("1"), 1u);
  EXPECT_EQ(parse_kfd_pid("4294967295"), 4294967295u);
  EXPECT_EQ(parse_kfd_pid("4294967296"), std::nullopt);
  EXPECT_EQ(parse_kfd_pid(""), std::nullopt);
  EXPECT_EQ(parse_kfd_pid("04242"), std::nullopt);
  EXPECT_EQ(parse_kfd_pid("-1"), std::nullopt);
  EXPECT_EQ(parse_kfd_pid("+1"), std::nullopt);
  EXPECT_EQ(parse_kfd_pid("42a"), std::nullopt);
  EXPECT_EQ(parse_kfd_pid("4242 "), std::nullopt);

  EXPECT_EQ(parse_kfd_vram_gpu_id("vram_42735"), 42735u);
  EXPECT_EQ(parse_kfd_vram_gpu_id("vram_9017"), 9017u);
  EXPECT_EQ(parse_kfd_vram_gpu_id("vram_"), std::nullopt);
  EXPECT_EQ(parse_kfd_vram_gpu_id("vram"), std::nullopt);
  EXPECT_EQ(parse_kfd_vram_gpu_id("vram_12ab"), std::nullopt);
  EXPECT_EQ(parse_kfd_vram_gpu_id("vram_-1"), std::nullopt);
  EXPECT_EQ(parse_kfd_vram_gpu_id("vram_042"), std::nullopt);
  EXPECT_EQ(parse_kfd_vram_gpu_id("sdma_42735"), std::nullopt);
  EXPECT_EQ(parse_kfd_vram_gpu_id("stats_42735"), std::nullopt);
  EXPECT_EQ(parse_kfd_vram_gpu_id("pasid"), std::nullopt);
}

TEST(AmdgpuParse, KfdNodeProperties) {
  const std::string mi300x =
      read_file(fixture_sysfs().parent_path() / "kfd" / "sys" / kKfdNodes / "2" / "properties");
  ASSERT_FALSE(mi300x.empty());
  EXPECT_EQ(parse_kfd_node_properties(mi300x), (KfdNodeLocation{130, 0, 1280}));
  // A CPU node has them all 0.
  EXPECT_EQ(parse_kfd_node_properties("cpu_cores_count 96\nlocation_id 0\ndomain 0\n"
                                      "drm_render_minor 0\n"),
            (KfdNodeLocation{0, 0, 0}));
  // Keys not given stay empty; lines not read here are skipped, whatever they are.
  EXPECT_EQ(parse_kfd_node_properties("simd_count 1216\nname gfx942 x\n\nodd\n"
                                      "drm_render_minor 128"),
            (KfdNodeLocation{128, std::nullopt, std::nullopt}));
  EXPECT_EQ(parse_kfd_node_properties(""), KfdNodeLocation{});
  // A key read here must hold an unsigned number.
  EXPECT_EQ(parse_kfd_node_properties("drm_render_minor x\n"), std::nullopt);
  EXPECT_EQ(parse_kfd_node_properties("location_id -1\n"), std::nullopt);
  EXPECT_EQ(parse_kfd_node_properties("domain 4294967296\n"), std::nullopt);

  EXPECT_EQ(kfd_pci_bus_id(0, 49408), "0000:c1:00.0");
  EXPECT_EQ(kfd_pci_bus_id(0, 1282), "0000:05:00.2");
  EXPECT_EQ(kfd_pci_bus_id(1, 0x1a0b), "0001:1a:01.3");
  EXPECT_EQ(kfd_pci_bus_id(0, 0x10000500), "0000:05:00.0");  // bits above 16 ignored
}

TEST(AmdgpuParse, BusyPercentBecomesRatio) {
  EXPECT_DOUBLE_EQ(*parse_busy_ratio("87\n"), 0.87);
  EXPECT_DOUBLE_EQ(*parse_busy_ratio("100\n"), 1.0);
  EXPECT_DOUBLE_EQ(*parse_busy_ratio("0\n"), 0.0);
  EXPECT_EQ(parse_busy_ratio("101\n"), std::nullopt);
  EXPECT_EQ(parse_busy_ratio("-1\n"), std::nullopt);
  EXPECT_EQ(parse_busy_ratio("busy\n"), std::nullopt);
}

TEST(AmdgpuParse, TemperatureSensorNames) {
  EXPECT_EQ(temperature_sensor("edge\n", 1), "edge");
  EXPECT_EQ(temperature_sensor("junction\n", 2), "junction");
  EXPECT_EQ(temperature_sensor("mem\n", 3), "memory");
  // No label file: amdgpu's fixed channels.
  EXPECT_EQ(temperature_sensor("", 1), "edge");
  EXPECT_EQ(temperature_sensor("", 2), "junction");
  EXPECT_EQ(temperature_sensor("", 3), "memory");
  EXPECT_EQ(temperature_sensor("", 7), "temp7");
  // Other labels: kept when they are plain words.
  EXPECT_EQ(temperature_sensor("hbm_0\n", 4), "hbm_0");
  EXPECT_EQ(temperature_sensor("Tdie\n", 4), std::nullopt);
  EXPECT_EQ(temperature_sensor("vr soc\n", 4), std::nullopt);
}

TEST(AmdgpuParse, RasErrCount) {
  // amdgpu_ras.c: "%s: %lu\n%s: %lu\n" ue, ce; newer kernels add "de".
  std::optional<RasCounts> c = parse_ras_err_count("ue: 0\nce: 2\nde: 0\n");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->uncorrected, 0u);
  EXPECT_EQ(c->corrected, 2u);
  EXPECT_FALSE(c->inaccessible);

  c = parse_ras_err_count("ue: 1\nce: 17\n");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->uncorrected, 1u);
  EXPECT_EQ(c->corrected, 17u);

  c = parse_ras_err_count("Query currently inaccessible\n");
  ASSERT_TRUE(c);
  EXPECT_TRUE(c->inaccessible);
  EXPECT_FALSE(c->uncorrected);
  EXPECT_FALSE(c->corrected);

  EXPECT_EQ(parse_ras_err_count("ue: x\nce: 1\n"), std::nullopt);
  EXPECT_EQ(parse_ras_err_count("poison: 1\n"), std::nullopt);
  EXPECT_EQ(parse_ras_err_count("ue 1\n"), std::nullopt);
  EXPECT_EQ(parse_ras_err_count(""), std::nullopt);
}

TEST(AmdgpuParse, LabelValue) {
  EXPECT_EQ(label_value("AMD Instinct MI210\n"), "AMD Instinct MI210");
  EXPECT_EQ(label_value("a\tb\n"), "a b");
  EXPECT_EQ(label_value(std::string("MI\xff\xfe", 4)), "MI??");
  EXPECT_EQ(label_value("Stra\xc3\x9f"
                        "e\n"),
            "Stra\xc3\x9f"
            "e");
  EXPECT_EQ(label_value(std::string("X\0\0", 3)), "X");
}

TEST(AmdgpuParse, UnavailableErrnos) {
  for (int err : {EPERM, ENODATA, EOPNOTSUPP, EBUSY, EACCES}) {
    EXPECT_TRUE(is_unavailable_errno(err)) << err;
    EXPECT_EQ(sources::classify_errno(err), sources::Status::kError) << err;
  }
  for (int err : {EIO, EISDIR, EINVAL, ETIMEDOUT}) EXPECT_FALSE(is_unavailable_errno(err)) << err;
  // The others are the sources layer's: absent, and the device gone.
  EXPECT_EQ(sources::classify_errno(ENOENT), sources::Status::kAbsent);
  EXPECT_EQ(sources::classify_errno(ENODEV), sources::Status::kGone);
  EXPECT_EQ(sources::classify_errno(ENXIO), sources::Status::kGone);
}

// ---------------------------------------------------------------------------
// gpu_metrics layouts

// A table as the kernel builds it: 0xff everywhere, then the header.
std::string metrics_table(std::size_t size, std::uint16_t structure_size, std::uint8_t format,
                          std::uint8_t content) {
  std::string t(size, '\xff');
  if (size >= 4) {
    t[0] = static_cast<char>(structure_size & 0xff);
    t[1] = static_cast<char>(structure_size >> 8);
    t[2] = static_cast<char>(format);
    t[3] = static_cast<char>(content);
  }
  return t;
}

void put_u64(std::string& t, std::size_t offset, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) t[offset + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

// Little-endian, byte by byte: independent of the parser's memcpy.
std::uint64_t get_le(std::string_view t, std::size_t offset, std::size_t width) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < width; ++i) {
    v |= std::uint64_t{static_cast<unsigned char>(t[offset + i])} << (8 * i);
  }
  return v;
}

// 2^16 ticks of energy_accumulator per joule.
double joules(std::uint64_t ticks) {
  return static_cast<double>(ticks) / 65536.0;
}

// Parses `bytes` from a buffer of exactly their size, so that the sanitizers
// catch any read past the end.
GpuMetrics parse_exact(std::string_view bytes) {
  std::vector<char> buf(bytes.begin(), bytes.end());
  return parse_gpu_metrics(std::string_view(buf.data(), buf.size()));
}

struct LayoutCase {
  std::uint16_t size;
  std::uint8_t format;
  std::uint8_t content;
  std::size_t energy_offset;  // offsetof(struct gpu_metrics_vX_Y, energy_accumulator)
};

// From kgd_pp_interface.h under natural alignment (gen_gpu_metrics.py --check).
const LayoutCase kLayoutCases[] = {
    {96, 1, 1, 24},  {104, 1, 2, 24},  {120, 1, 3, 24},  {288, 1, 4, 24},  {360, 1, 5, 88},
    {384, 1, 6, 88}, {1664, 1, 6, 16}, {2208, 1, 7, 24}, {3872, 1, 8, 24},
};

TEST(AmdgpuGpuMetrics, EnergyAtEachLayoutsOffset) {
  if constexpr (std::endian::native != std::endian::little) GTEST_SKIP() << "little-endian tables";
  for (const LayoutCase& c : kLayoutCases) {
    std::string t = metrics_table(c.size, c.size, c.format, c.content);
    // Decoys where the other layouts keep their energy: reading any of them
    // would give a different value.
    for (std::size_t decoy : {16u, 24u, 88u}) put_u64(t, decoy, 7 * 65536);
    put_u64(t, c.energy_offset, 3 * 65536 + 16384);  // 3.25 J
    GpuMetrics m = parse_exact(t);
    SCOPED_TRACE("v" + std::to_string(c.format) + "_" + std::to_string(c.content) + " size " +
                 std::to_string(c.size));
    EXPECT_EQ(m.status, GpuMetricsStatus::kOk);
    EXPECT_EQ(m.structure_size, c.size);
    ASSERT_TRUE(m.energy_joules);
    EXPECT_DOUBLE_EQ(*m.energy_joules, 3.25);
  }
}

TEST(AmdgpuGpuMetrics, UnsetEnergyIsEmpty) {
  if constexpr (std::endian::native != std::endian::little) GTEST_SKIP() << "little-endian tables";
  // All ones: the kernel's 0xff fill, never written.
  GpuMetrics m = parse_gpu_metrics(metrics_table(120, 120, 1, 3));
  EXPECT_EQ(m.status, GpuMetricsStatus::kOk);
  EXPECT_FALSE(m.energy_joules);
  // UINT_MAX: firmware that no longer reports energy; 0: a secondary die.
  for (std::uint64_t unset : {std::uint64_t{0xffffffff}, std::uint64_t{0}}) {
    std::string t = metrics_table(120, 120, 1, 3);
    put_u64(t, 24, unset);
    m = parse_gpu_metrics(t);
    EXPECT_EQ(m.status, GpuMetricsStatus::kOk);
    EXPECT_FALSE(m.energy_joules) << unset;
  }
}

TEST(AmdgpuGpuMetrics, TruncatedTables) {
  EXPECT_EQ(parse_gpu_metrics("").status, GpuMetricsStatus::kTruncated);
  EXPECT_EQ(parse_gpu_metrics(std::string("\x78\x00\x01", 3)).status, GpuMetricsStatus::kTruncated);
  // A v1_3 header announcing 120 bytes, and 60 of them.
  GpuMetrics m = parse_gpu_metrics(metrics_table(60, 120, 1, 3));
  EXPECT_EQ(m.status, GpuMetricsStatus::kTruncated);
  EXPECT_EQ(m.problem, "v1_3, 120 bytes, 60 read");
  // One byte short of v1_8, and of a v1_9 of 1150 bytes.
  EXPECT_EQ(parse_gpu_metrics(metrics_table(3871, 3872, 1, 8)).status,
            GpuMetricsStatus::kTruncated);
  EXPECT_EQ(parse_gpu_metrics(metrics_table(1149, 1150, 1, 9)).status,
            GpuMetricsStatus::kTruncated);
  // Trailing bytes past structure_size are ignored.
  EXPECT_EQ(parse_gpu_metrics(metrics_table(130, 120, 1, 3)).status, GpuMetricsStatus::kOk);
}

TEST(AmdgpuGpuMetrics, UnknownLayouts) {
  struct {
    std::uint16_t size;
    std::uint8_t format, content;
  } const unknown[] = {
      {100, 1, 0},    // v1_0: not naturally aligned
      {96, 1, 3},     // v1_3 with v1_1's size
      {1000, 1, 6},   // neither v1_6
      {3872, 1, 7},   // v1_7 with v1_8's size
      {2208, 1, 8},   // and the other way round
      {1150, 1, 10},  // after v1_9
      {120, 2, 1},    // APU layouts
      {120, 9, 9},
  };
  for (const auto& u : unknown) {
    GpuMetrics m = parse_gpu_metrics(metrics_table(4096, u.size, u.format, u.content));
    EXPECT_EQ(m.status, GpuMetricsStatus::kUnknownLayout) << u.size;
    EXPECT_FALSE(m.energy_joules);
    EXPECT_FALSE(m.problem.empty());
  }
  EXPECT_EQ(parse_gpu_metrics(metrics_table(4096, 3872, 1, 7)).problem,
            "v1_7, 3872 bytes: not a layout known here");
}

// The MI300X's v1_7 and v1_8 files: energy read at offset 24 by the test, and
// the value the fixture README documents.
TEST(AmdgpuGpuMetrics, FixedLayoutFixtureFiles) {
  if constexpr (std::endian::native != std::endian::little) GTEST_SKIP() << "little-endian tables";
  const fs::path dir = fixture_sysfs().parent_path() / "gpu_metrics";
  struct {
    const char* file;
    std::uint8_t content;
    std::uint16_t size;
    double documented;
  } const cases[] = {
      {"mi300x_v1_7.bin", 7, 2208, 2345678.75},
      {"mi300x_v1_8.bin", 8, 3872, 3456789.125},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.file);
    const std::string t = read_file(dir / c.file);
    ASSERT_EQ(t.size(), c.size);
    EXPECT_EQ(get_le(t, 0, 2), c.size);  // structure_size
    GpuMetrics m = parse_exact(t);
    EXPECT_EQ(m.status, GpuMetricsStatus::kOk);
    EXPECT_EQ(m.format_revision, 1);
    EXPECT_EQ(m.content_revision, c.content);
    ASSERT_TRUE(m.energy_joules);
    EXPECT_DOUBLE_EQ(*m.energy_joules, joules(get_le(t, 24, 8)));
    EXPECT_DOUBLE_EQ(*m.energy_joules, c.documented);
  }
}

TEST(AmdgpuGpuMetrics, TreeFixtureFiles) {
  if constexpr (std::endian::native != std::endian::little) GTEST_SKIP() << "little-endian tables";
  const std::string v1_9 = read_file(fixture_sysfs() / kMi300x / "gpu_metrics");
  GpuMetrics mi300 = parse_exact(v1_9);
  EXPECT_EQ(mi300.status, GpuMetricsStatus::kOk);
  EXPECT_EQ(mi300.format_revision, 1);
  EXPECT_EQ(mi300.content_revision, 9);
  EXPECT_EQ(mi300.structure_size, 1150);
  EXPECT_EQ(get_le(v1_9, 4, 4), 47u);  // attr_count
  // energy_accumulator's tag (id 7, u64, one value) at 84, its value at 92.
  EXPECT_EQ(get_le(v1_9, 84, 8), gpu_metrics_tag(0, kAttrTypeU64, kAttrIdEnergyAccumulator, 1));
  ASSERT_TRUE(mi300.energy_joules);
  EXPECT_DOUBLE_EQ(*mi300.energy_joules, joules(get_le(v1_9, 92, 8)));
  // = 123456789 * 2^16 + 2^15 ticks.
  EXPECT_DOUBLE_EQ(*mi300.energy_joules, 123456789.5);

  GpuMetrics mi210 = parse_exact(read_file(fixture_sysfs() / kMi210 / "gpu_metrics"));
  EXPECT_EQ(mi210.status, GpuMetricsStatus::kOk);
  EXPECT_EQ(mi210.content_revision, 3);
  EXPECT_EQ(mi210.structure_size, 120);
  // 987654 * 2^16 + 2^14 ticks.
  EXPECT_DOUBLE_EQ(*mi210.energy_joules, 987654.25);
}

// A v1_9 table, attribute by attribute, in the kernel's encoding.
class V1_9Table {
 public:
  // Widths of u8, s8, u16, s16, u32, s32, u64, s64.
  static constexpr std::size_t kWidth[] = {1, 1, 2, 2, 4, 4, 8, 8};

  // `count` values of `type`, each 0x11 bytes unless `value` is given (then
  // each value is `value`).
  V1_9Table& add(unsigned id, unsigned type, unsigned count,
                 std::optional<std::uint64_t> value = {}, unsigned unit = 0) {
    return add_raw(gpu_metrics_tag(unit, type, id, count), count * kWidth[type], value,
                   kWidth[type]);
  }
  // Any tag, followed by `value_bytes` bytes.
  V1_9Table& add_raw(std::uint64_t tag, std::size_t value_bytes,
                     std::optional<std::uint64_t> value = {}, std::size_t width = 8) {
    append(tag, 8);
    for (std::size_t done = 0; done < value_bytes; done += width) {
      if (value) {
        append(*value, std::min(width, value_bytes - done));
      } else {
        body_.append(std::min(width, value_bytes - done), '\x11');
      }
    }
    ++count_;
    return *this;
  }
  V1_9Table& raw_bytes(std::size_t n) {
    body_.append(n, '\x22');
    return *this;
  }
  // The whole table; structure_size and attr_count as the kernel sets them
  // unless overridden.
  std::string bytes(std::optional<std::int32_t> attr_count = {},
                    std::optional<std::uint16_t> structure_size = {}) const {
    std::string t;
    const std::size_t size = 8 + body_.size();
    auto put = [&t](std::uint64_t v, std::size_t width) {
      for (std::size_t i = 0; i < width; ++i) t.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
    };
    put(structure_size.value_or(static_cast<std::uint16_t>(size)), 2);
    put(1, 1);
    put(9, 1);
    put(static_cast<std::uint32_t>(attr_count.value_or(count_)), 4);
    return t + body_;
  }

 private:
  void append(std::uint64_t v, std::size_t width) {
    for (std::size_t i = 0; i < width; ++i)
      body_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  std::string body_;
  std::int32_t count_ = 0;
};

constexpr unsigned kU16 = 2, kU32 = 4, kS64 = 7;

TEST(AmdgpuGpuMetrics, V1_9EnergyAmongOtherAttributes) {
  if constexpr (std::endian::native != std::endian::little) GTEST_SKIP() << "little-endian tables";
  const std::uint64_t ticks = 42 * 65536 + 8192;  // 42.125 J
  V1_9Table table;
  table
      .add(0, kU16, 1, 71)            // temperature_hotspot
      .add(6, kAttrTypeU64, 1, 5300)  // mem_max_bandwidth: a u64 before the energy
      .add(1000, kU16, 3)             // an id this code does not know: skipped by its size
      .add(900, kS64, 2)
      .add(kAttrIdEnergyAccumulator, kAttrTypeU64, 1, ticks)
      .add(41, kU16, 40);  // jpeg_busy[40] after it
  const std::string t = table.bytes();
  GpuMetrics m = parse_exact(t);
  EXPECT_EQ(m.status, GpuMetricsStatus::kOk) << m.problem;
  EXPECT_EQ(m.structure_size, t.size());
  ASSERT_TRUE(m.energy_joules);
  EXPECT_DOUBLE_EQ(*m.energy_joules, joules(ticks));
  EXPECT_DOUBLE_EQ(*m.energy_joules, 42.125);

  // Bytes after structure_size are not the table's.
  GpuMetrics longer = parse_exact(t + std::string(40, '\x7f'));
  EXPECT_EQ(longer.status, GpuMetricsStatus::kOk);
  EXPECT_DOUBLE_EQ(*longer.energy_joules, 42.125);
}

TEST(AmdgpuGpuMetrics, V1_9WithoutEnergy) {
  if constexpr (std::endian::native != std::endian::little) GTEST_SKIP() << "little-endian tables";
  // No energy attribute at all, and none at all: well formed, no energy.
  for (const std::string& t : {V1_9Table().add(0, kU16, 1, 60).bytes(), V1_9Table().bytes()}) {
    GpuMetrics m = parse_exact(t);
    EXPECT_EQ(m.status, GpuMetricsStatus::kOk) << m.problem;
    EXPECT_FALSE(m.energy_joules);
  }
  // The kernel's 0xff fill: never written.
  GpuMetrics unset = parse_exact(
      V1_9Table().add(kAttrIdEnergyAccumulator, kAttrTypeU64, 1, ~std::uint64_t{0}).bytes());
  EXPECT_EQ(unset.status, GpuMetricsStatus::kOk);
  EXPECT_FALSE(unset.energy_joules);
}

TEST(AmdgpuGpuMetrics, MalformedV1_9) {
  if constexpr (std::endian::native != std::endian::little) GTEST_SKIP() << "little-endian tables";
  V1_9Table good;
  good.add(0, kU16, 1, 71).add(kAttrIdEnergyAccumulator, kAttrTypeU64, 1, 65536);
  const std::string ok = good.bytes();
  ASSERT_EQ(parse_exact(ok).status, GpuMetricsStatus::kOk);

  const std::uint64_t energy_tag = gpu_metrics_tag(0, kAttrTypeU64, kAttrIdEnergyAccumulator, 1);
  struct Case {
    const char* what;
    std::string bytes;
  };
  const Case cases[] = {
      {"negative attribute count", good.bytes(-1)},
      {"most negative count", good.bytes(std::numeric_limits<std::int32_t>::min())},
      {"huge attribute count", good.bytes(std::numeric_limits<std::int32_t>::max())},
      // Three attributes said, two there: the third tag would lie past the end.
      {"count one too many", good.bytes(3)},
      {"count one too few: bytes left over", good.bytes(1)},
      {"no room for the count", metrics_table(6, 6, 1, 9)},
      {"structure_size below the header", metrics_table(16, 2, 1, 9)},
      // A tag whose count asks for more values than the table holds.
      {"values run past the end",
       V1_9Table().add_raw(gpu_metrics_tag(0, kU32, 0, 1023), 4).bytes()},
      {"type 8", V1_9Table().add_raw(gpu_metrics_tag(0, 8, 0, 1), 8).bytes()},
      {"type 15", V1_9Table().add_raw(gpu_metrics_tag(0, 15, 0, 1), 8).bytes()},
      {"bits 32..63 set", V1_9Table().add_raw(energy_tag | (std::uint64_t{1} << 40), 8).bytes()},
      {"energy as u32", V1_9Table().add(kAttrIdEnergyAccumulator, kU32, 1, 65536).bytes()},
      {"energy with two values",
       V1_9Table().add(kAttrIdEnergyAccumulator, kAttrTypeU64, 2, 65536).bytes()},
      {"energy with none", V1_9Table().add(kAttrIdEnergyAccumulator, kAttrTypeU64, 0).bytes()},
      {"energy twice",
       V1_9Table(good).add(kAttrIdEnergyAccumulator, kAttrTypeU64, 1, 65536).bytes()},
      {"stray bytes after the last attribute", V1_9Table(good).raw_bytes(3).bytes()},
  };
  for (const Case& c : cases) {
    GpuMetrics m = parse_exact(c.bytes);
    EXPECT_EQ(m.status, GpuMetricsStatus::kMalformed) << c.what;
    EXPECT_FALSE(m.energy_joules) << c.what;
    EXPECT_FALSE(m.problem.empty()) << c.what;
  }
  EXPECT_EQ(parse_exact(good.bytes(-1)).problem,
            "v1_9, 34 bytes: attribute count -1, room for at most 3");
  EXPECT_EQ(parse_exact(V1_9Table().add_raw(gpu_metrics_tag(0, 8, 0, 1), 8).bytes()).problem,
            "v1_9, 24 bytes: attribute 0 of 1 (tag 0x800001) has unknown type 8");
}

// Every prefix of every table, and every table with one byte broken: never
// a read outside the buffer (the sanitizers watch), never a value from a
// table cut short.
TEST(AmdgpuGpuMetrics, TruncationsAndDamageNeverCrash) {
  const fs::path dir = fixture_sysfs().parent_path() / "gpu_metrics";
  const std::string tables[] = {
      read_file(fixture_sysfs() / kMi300x / "gpu_metrics"),  // v1_9
      read_file(fixture_sysfs() / kMi210 / "gpu_metrics"),   // v1_3
      read_file(dir / "mi300x_v1_7.bin"),
      read_file(dir / "mi300x_v1_8.bin"),
      V1_9Table().add(1000, kU16, 3).add(kAttrIdEnergyAccumulator, kAttrTypeU64, 1, 65536).bytes(),
  };
  for (const std::string& full : tables) {
    ASSERT_GE(full.size(), 8u);
    ASSERT_EQ(parse_exact(full).status, GpuMetricsStatus::kOk);
    for (std::size_t n = 0; n < full.size(); ++n) {
      const std::string_view prefix(full.data(), n);
      GpuMetrics m = parse_exact(prefix);
      EXPECT_EQ(m.status, GpuMetricsStatus::kTruncated) << n;
      EXPECT_FALSE(m.energy_joules) << n;
      // The same prefix claiming to be whole: a v1_9 must not walk off its end.
      if (n >= 4) {
        std::string claimed(prefix);
        claimed[0] = static_cast<char>(n & 0xff);
        claimed[1] = static_cast<char>(n >> 8);
        GpuMetrics c = parse_exact(claimed);
        EXPECT_NE(c.status, GpuMetricsStatus::kOk) << n;
      }
    }
    for (std::size_t i = 0; i < full.size(); ++i) {
      for (char b : {'\x00', '\xff', '\x80'}) {
        std::string damaged = full;
        damaged[i] = b;
        GpuMetrics m = parse_exact(damaged);
        if (m.status != GpuMetricsStatus::kOk) {
          EXPECT_FALSE(m.energy_joules);
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------
// The backend over the fixture tree

TEST(AmdgpuBackend, FindsTheAmdCardsInCardNumberOrder) {
  std::vector<DeviceSample> devices = sample(fixture_roots());
  // card0 (ASPEED), card0-VGA-1, renderD130, renderD138 and version are not AMD cards.
  ASSERT_EQ(devices.size(), 2u);
  // card2 before card10: by number, not by name.
  EXPECT_EQ(devices[0].pci_bus_id, "0000:05:00.0");
  EXPECT_EQ(devices[0].index, 0u);
  EXPECT_EQ(devices[1].pci_bus_id, "0000:c1:00.0");
  EXPECT_EQ(devices[1].index, 1u);
  EXPECT_EQ(find_bus(devices, "0000:63:00.0"), nullptr);
}

TEST(AmdgpuBackend, Mi300xValues) {
  std::vector<DeviceSample> devices = sample(fixture_roots());
  const DeviceSample* d = find_bus(devices, "0000:05:00.0");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->uuid, "amd-4f8a2c1e9b3d7065");
  EXPECT_EQ(d->vendor, "amd");
  EXPECT_EQ(d->model, "AMD Instinct MI300X OAM");
  EXPECT_EQ(d->serial, "692331000142");
  EXPECT_EQ(d->driver_version, "6.10.5");
  EXPECT_TRUE(d->up);
  EXPECT_DOUBLE_EQ(*d->utilization_ratio, 0.87);         // 87 %
  EXPECT_DOUBLE_EQ(*d->memory_utilization_ratio, 0.41);  // 41 %
  EXPECT_DOUBLE_EQ(*d->memory_used_bytes, 144.0 * 1024 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(*d->memory_total_bytes, 192.0 * 1024 * 1024 * 1024);
  // GC 9.4.3 has no edge sensor (no temp1): junction and memory only.
  EXPECT_EQ(d->temperature_celsius.size(), 2u);
  EXPECT_EQ(d->temperature_celsius.count("edge"), 0u);
  EXPECT_DOUBLE_EQ(d->temperature_celsius.at("junction"), 71.0);  // 71000 m°C
  EXPECT_DOUBLE_EQ(d->temperature_celsius.at("memory"), 52.0);
  EXPECT_DOUBLE_EQ(*d->temperature_slowdown_celsius, 110.0);  // temp2_crit, junction
  EXPECT_DOUBLE_EQ(*d->power_watts, 612.0);                   // power1_input 612000000 µW
  EXPECT_DOUBLE_EQ(*d->power_limit_watts, 750.0);             // power1_cap
  EXPECT_DOUBLE_EQ(*d->energy_joules, 123456789.5);           // gpu_metrics v1_9
  EXPECT_EQ(d->clock_hertz.size(), 2u);
  EXPECT_DOUBLE_EQ(d->clock_hertz.at("graphics"), 2.1e9);  // freq1_input, sclk
  EXPECT_DOUBLE_EQ(d->clock_hertz.at("memory"), 1.3e9);    // freq2_input, mclk
  EXPECT_DOUBLE_EQ(*d->ecc_corrected, 2.0);
  EXPECT_DOUBLE_EQ(*d->ecc_uncorrected, 0.0);
  EXPECT_DOUBLE_EQ(*d->pcie_replays, 3.0);
  // Nothing amdgpu has no file for.
  EXPECT_FALSE(d->remapped_rows_correctable);
  EXPECT_FALSE(d->row_remap_pending);
  EXPECT_TRUE(d->clock_throttle_active.empty());
  EXPECT_TRUE(d->host_links.empty());
  EXPECT_TRUE(d->errors.empty());
}

TEST(AmdgpuBackend, Mi210Values) {
  std::vector<DeviceSample> devices = sample(fixture_roots());
  const DeviceSample* d = find_bus(devices, "0000:c1:00.0");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->uuid, "amd-71b6c2d8e04f9a35");
  EXPECT_EQ(d->model, "AMD Instinct MI210");
  EXPECT_EQ(d->serial, "692247000318");
  EXPECT_DOUBLE_EQ(*d->utilization_ratio, 1.0);
  EXPECT_DOUBLE_EQ(*d->memory_utilization_ratio, 0.09);
  EXPECT_DOUBLE_EQ(*d->memory_used_bytes, 8.0 * 1024 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(*d->memory_total_bytes, 65520.0 * 1024 * 1024);
  EXPECT_EQ(d->temperature_celsius.size(), 3u);
  EXPECT_DOUBLE_EQ(d->temperature_celsius.at("edge"), 58.0);
  EXPECT_DOUBLE_EQ(d->temperature_celsius.at("junction"), 67.0);
  EXPECT_DOUBLE_EQ(d->temperature_celsius.at("memory"), 61.0);
  // The junction's crit (110 C), not the edge's (100 C) nor memory's.
  EXPECT_DOUBLE_EQ(*d->temperature_slowdown_celsius, 110.0);
  EXPECT_DOUBLE_EQ(*d->power_watts, 287.0);  // power1_average: MI200 has no power1_input
  EXPECT_DOUBLE_EQ(*d->power_limit_watts, 300.0);
  EXPECT_DOUBLE_EQ(*d->energy_joules, 987654.25);  // gpu_metrics v1_3
  EXPECT_DOUBLE_EQ(d->clock_hertz.at("graphics"), 1.7e9);
  EXPECT_DOUBLE_EQ(d->clock_hertz.at("memory"), 1.6e9);
  EXPECT_DOUBLE_EQ(*d->ecc_corrected, 17.0);
  EXPECT_DOUBLE_EQ(*d->ecc_uncorrected, 1.0);
  EXPECT_DOUBLE_EQ(*d->pcie_replays, 0.0);
  EXPECT_TRUE(d->errors.empty());
}

TEST(AmdgpuBackend, NeverAsksForPcieBw) {
  // Every read, listing and link of the sources layer asks the faults
  // first: a rule on pcie_bw would be hit by any of them.
  auto faults = std::make_shared<sources::Faults>();
  faults->inject("pcie_bw", EIO);
  std::vector<DeviceSample> devices = sample(faulty_roots(faults));
  EXPECT_EQ(devices.size(), 2u);
  EXPECT_TRUE(devices[0].errors.empty());
  EXPECT_EQ(faults->hits(), 0u);
}

TEST(AmdgpuBackend, UnavailableValuesAreEmptyWithoutErrors) {
  // A runtime-suspended or resetting GPU: amdgpu_pm.c answers EPERM for its
  // power-management attributes; others answer ENODATA, EOPNOTSUPP, EBUSY.
  // Identity files still read.
  for (int err : {EPERM, ENODATA, EOPNOTSUPP, EBUSY}) {
    SCOPED_TRACE(err);
    auto faults = std::make_shared<sources::Faults>();
    for (const char* file :
         {"gpu_busy_percent", "mem_busy_percent", "gpu_metrics", "mem_info_vram_used",
          "mem_info_vram_total", "ras/umc_err_count", "pcie_replay_count",
          "hwmon/hwmon3/temp2_input", "hwmon/hwmon3/temp2_crit", "hwmon/hwmon3/temp3_input",
          "hwmon/hwmon3/temp3_crit", "hwmon/hwmon3/power1_input", "hwmon/hwmon3/power1_cap",
          "hwmon/hwmon3/freq1_input", "hwmon/hwmon3/freq2_input"}) {
      faults->inject(kMi300x + "/" + file, err);
    }
    std::vector<DeviceSample> devices = sample(faulty_roots(faults));
    ASSERT_EQ(devices.size(), 2u);
    const DeviceSample* d = find_bus(devices, "0000:05:00.0");
    ASSERT_NE(d, nullptr);
    EXPECT_TRUE(d->up);
    EXPECT_EQ(d->uuid, "amd-4f8a2c1e9b3d7065");
    EXPECT_FALSE(d->utilization_ratio);
    EXPECT_FALSE(d->memory_utilization_ratio);
    EXPECT_FALSE(d->memory_used_bytes);
    EXPECT_TRUE(d->temperature_celsius.empty());
    EXPECT_FALSE(d->temperature_slowdown_celsius);
    EXPECT_FALSE(d->power_watts);
    EXPECT_FALSE(d->power_limit_watts);
    EXPECT_FALSE(d->energy_joules);
    EXPECT_TRUE(d->clock_hertz.empty());
    EXPECT_FALSE(d->ecc_corrected);
    EXPECT_FALSE(d->pcie_replays);
    EXPECT_TRUE(d->errors.empty());
    // The other card is untouched.
    EXPECT_DOUBLE_EQ(*find_bus(devices, "0000:c1:00.0")->utilization_ratio, 1.0);
  }
}

TEST(AmdgpuBackend, IoErrorIsAReadError) {
  auto faults = std::make_shared<sources::Faults>();
  faults->inject(kMi210 + "/gpu_busy_percent", EIO);
  faults->inject(kMi210 + "/hwmon/hwmon5/temp2_input", EIO);
  std::vector<DeviceSample> devices = sample(faulty_roots(faults));
  const DeviceSample* d = find_bus(devices, "0000:c1:00.0");
  ASSERT_NE(d, nullptr);
  EXPECT_FALSE(d->utilization_ratio);
  EXPECT_EQ(d->temperature_celsius.count("junction"), 0u);
  EXPECT_DOUBLE_EQ(d->temperature_celsius.at("edge"), 58.0);
  EXPECT_EQ(count(d->errors, "read_error"), 2u);
  EXPECT_EQ(d->errors.size(), 2u);
}

TEST(AmdgpuBackend, DirectoryInPlaceOfAFileIsAReadError) {
  // read() of a directory fails with EISDIR: an unexpected failure.
  TempTree tree;
  tree.remove(kMi210 + "/mem_info_vram_used");
  fs::create_directory(tree.path(kMi210 + "/mem_info_vram_used"));
  std::vector<DeviceSample> devices = sample(tree.roots());
  const DeviceSample* d = find_bus(devices, "0000:c1:00.0");
  ASSERT_NE(d, nullptr);
  EXPECT_FALSE(d->memory_used_bytes);
  EXPECT_DOUBLE_EQ(*d->memory_total_bytes, 68702699520.0);
  EXPECT_EQ(reasons(d->errors), std::vector<std::string>{"read_error"});
}

TEST(AmdgpuBackend, MalformedValuesAreParseErrors) {
  TempTree tree;
  tree.write(kMi300x + "/gpu_busy_percent", "busy\n");
  tree.write(kMi300x + "/hwmon/hwmon3/temp3_input", "52.0\n");
  tree.write(kMi300x + "/ras/umc_err_count", "ue: 0\nce: lots\n");
  std::vector<DeviceSample> devices = sample(tree.roots());
  const DeviceSample* d = find_bus(devices, "0000:05:00.0");
  ASSERT_NE(d, nullptr);
  EXPECT_FALSE(d->utilization_ratio);
  EXPECT_EQ(d->temperature_celsius.count("memory"), 0u);
  EXPECT_DOUBLE_EQ(d->temperature_celsius.at("junction"), 71.0);
  EXPECT_FALSE(d->ecc_corrected);
  EXPECT_FALSE(d->ecc_uncorrected);
  EXPECT_EQ(count(d->errors, "parse_error"), 3u);
  EXPECT_DOUBLE_EQ(*d->memory_utilization_ratio, 0.41);
}

TEST(AmdgpuBackend, ATemperatureBelowAbsoluteZeroIsRefusedAndCounted) {
  TempTree tree;
  tree.write(kMi300x + "/hwmon/hwmon3/temp3_input", "-300000\n");
  tree.write(kMi300x + "/hwmon/hwmon3/temp2_input", "-5000\n");  // cold, but can be
  std::vector<DeviceSample> devices = sample(tree.roots());
  const DeviceSample* d = find_bus(devices, "0000:05:00.0");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->temperature_celsius.count("memory"), 0u);
  EXPECT_DOUBLE_EQ(d->temperature_celsius.at("junction"), -5.0);
  EXPECT_EQ(count(d->errors, "out_of_range"), 1u);
}

TEST(AmdgpuBackend, RasQueryInaccessibleIsNotAnError) {
  TempTree tree;
  tree.write(kMi210 + "/ras/umc_err_count", "Query currently inaccessible\n");
  std::vector<DeviceSample> devices = sample(tree.roots());
  const DeviceSample* d = find_bus(devices, "0000:c1:00.0");
  ASSERT_NE(d, nullptr);
  EXPECT_FALSE(d->ecc_corrected);
  EXPECT_FALSE(d->ecc_uncorrected);
  EXPECT_TRUE(d->errors.empty());
}

// The card's gpu_metrics as each kernel sends it: the MI300X's v1_7 (Linux
// 6.13 to 6.15) and v1_8 (6.16 to 6.18) files in place of its v1_9.
TEST(AmdgpuBackend, EnergyFromEachMi300xVersion) {
  if constexpr (std::endian::native != std::endian::little) GTEST_SKIP() << "little-endian tables";
  const fs::path dir = fixture_sysfs().parent_path() / "gpu_metrics";
  for (const char* file : {"mi300x_v1_7.bin", "mi300x_v1_8.bin"}) {
    SCOPED_TRACE(file);
    const std::string table = read_file(dir / file);
    TempTree tree;
    tree.write(kMi300x + "/gpu_metrics", table);
    std::vector<DeviceSample> devices = sample(tree.roots());
    const DeviceSample* d = find_bus(devices, "0000:05:00.0");
    ASSERT_NE(d, nullptr);
    ASSERT_TRUE(d->energy_joules);
    EXPECT_DOUBLE_EQ(*d->energy_joules, joules(get_le(table, 24, 8)));
    EXPECT_TRUE(d->errors.empty());
  }
}

TEST(AmdgpuBackend, GpuMetricsFailures) {
  const std::string full = read_file(fixture_sysfs() / kMi300x / "gpu_metrics");
  ASSERT_EQ(full.size(), 1150u);
  std::string unknown = full;  // a version after this code's: v1_10
  unknown[3] = 10;
  std::string malformed = full;  // an attribute count past what the table holds
  malformed[4] = static_cast<char>(0xf0);
  struct {
    std::string bytes;
    const char* reason;
    const char* detail;
  } const cases[] = {
      {full.substr(0, 60), "gpu_metrics_truncated", "gpu_metrics v1_9, 1150 bytes, 60 read"},
      {full.substr(0, 2), "gpu_metrics_truncated", "gpu_metrics 2 bytes, shorter than its header"},
      {unknown, "gpu_metrics_layout", "gpu_metrics v1_10, 1150 bytes: not a layout known here"},
      {malformed, "gpu_metrics_layout",
       "gpu_metrics v1_9, 1150 bytes: attribute count 240, room for at most 142"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.detail);
    TempTree tree;
    tree.write(kMi300x + "/gpu_metrics", c.bytes);
    std::vector<DeviceSample> devices = sample(tree.roots());
    const DeviceSample* d = find_bus(devices, "0000:05:00.0");
    ASSERT_NE(d, nullptr);
    EXPECT_FALSE(d->energy_joules);
    ASSERT_EQ(reasons(d->errors), std::vector<std::string>{c.reason});
    EXPECT_EQ(d->errors[0].detail, c.detail);
    EXPECT_FALSE(d->errors[0].logged_by_backend);
    // Everything else of the card is still read.
    EXPECT_DOUBLE_EQ(*d->power_watts, 612.0);
  }
}

TEST(AmdgpuBackend, IdentityFallbacks) {
  TempTree tree;
  tree.remove(kMi300x + "/unique_id");
  tree.remove(kMi300x + "/product_name");
  tree.remove(kMi300x + "/serial_number");
  tree.remove("module/amdgpu/version");  // the in-tree driver has none
  std::vector<DeviceSample> devices = sample(tree.roots());
  const DeviceSample* d = find_bus(devices, "0000:05:00.0");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->uuid, "amd-0000:05:00.0");
  EXPECT_EQ(d->model, "AMD 0x74a1");
  EXPECT_EQ(d->serial, "");
  EXPECT_EQ(d->driver_version, "");
  EXPECT_TRUE(d->errors.empty());
}

TEST(AmdgpuBackend, AbsentFilesAreAbsentValues) {
  // An older kernel on the MI300X: no temp2_crit (no threshold), no power
  // attribute at all, no ras/ directory, no gpu_metrics, no freq labels.
  TempTree tree;
  const std::string hwmon = kMi300x + "/hwmon/hwmon3/";
  tree.remove(hwmon + "temp2_crit");
  tree.remove(hwmon + "temp3_crit");
  tree.remove(hwmon + "power1_input");
  tree.remove(hwmon + "freq1_label");
  tree.remove(hwmon + "freq2_label");
  tree.remove(hwmon + "temp3_label");
  fs::remove_all(tree.path(kMi300x + "/ras"));
  tree.remove(kMi300x + "/gpu_metrics");
  std::vector<DeviceSample> devices = sample(tree.roots());
  const DeviceSample* d = find_bus(devices, "0000:05:00.0");
  ASSERT_NE(d, nullptr);
  EXPECT_FALSE(d->temperature_slowdown_celsius);
  EXPECT_FALSE(d->power_watts);
  EXPECT_DOUBLE_EQ(*d->power_limit_watts, 750.0);
  EXPECT_FALSE(d->ecc_corrected);
  EXPECT_FALSE(d->energy_joules);
  // Unlabelled channels keep amdgpu's fixed meaning.
  EXPECT_DOUBLE_EQ(d->temperature_celsius.at("memory"), 52.0);
  EXPECT_DOUBLE_EQ(d->clock_hertz.at("graphics"), 2.1e9);
  EXPECT_DOUBLE_EQ(d->clock_hertz.at("memory"), 1.3e9);
  EXPECT_TRUE(d->errors.empty());
}

TEST(AmdgpuBackend, CardVanishingMidReadIsSkipped) {
  TempTree tree;
  const fs::path mi210 = tree.path(kMi210);
  // The MI210 is hot-removed while its attributes are being read.
  auto faults = std::make_shared<sources::Faults>();
  faults->on_read(kMi210 + "/gpu_busy_percent", [mi210] { fs::remove_all(mi210); });
  std::vector<DeviceSample> devices = sample(faulty_roots(faults, tree.roots()));
  ASSERT_EQ(devices.size(), 1u);
  EXPECT_EQ(devices[0].pci_bus_id, "0000:05:00.0");
  EXPECT_EQ(devices[0].index, 0u);
  EXPECT_TRUE(devices[0].errors.empty());
}

TEST(AmdgpuBackend, CardAnsweringEnodevIsSkipped) {
  // Every hwmon file of the MI300X's answers ENODEV, or its hwmon
  // directory does when it is listed.
  for (std::string suffix : {"/hwmon/hwmon3/temp2_input", "/hwmon"}) {
    SCOPED_TRACE(suffix);
    auto faults = std::make_shared<sources::Faults>();
    faults->inject(kMi300x + suffix, ENODEV);
    std::vector<DeviceSample> devices = sample(faulty_roots(faults));
    ASSERT_EQ(devices.size(), 1u);
    EXPECT_EQ(devices[0].pci_bus_id, "0000:c1:00.0");
    EXPECT_EQ(devices[0].index, 1u);  // indexes do not shift
    EXPECT_TRUE(devices[0].errors.empty());
  }
}

int open_fds() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

// Errnos that start between two samples, on values read through held
// descriptors: EIO is a read_error of that value, EACCES (unreadable by
// design) and ENOENT empty the value quietly, ENODEV drops the card from
// that sample only; every other value and card is unchanged, and all of
// it comes back once the faults stop.
TEST(AmdgpuBackend, ErrnosBetweenSamples) {
  auto faults = std::make_shared<sources::Faults>();
  std::unique_ptr<Backend> backend = make_amdgpu_backend(faulty_roots(faults));
  std::vector<DeviceSample> first = backend->sample(generous_context());
  ASSERT_EQ(first.size(), 2u);

  faults->inject(kMi210 + "/gpu_busy_percent", EIO);
  faults->inject(kMi300x + "/hwmon/hwmon3/power1_input", EACCES);
  faults->inject(kMi300x + "/mem_busy_percent", ENOENT);
  std::vector<DeviceSample> faulty = backend->sample(generous_context());
  ASSERT_EQ(faulty.size(), 2u);
  const DeviceSample* mi300x = find_bus(faulty, "0000:05:00.0");
  const DeviceSample* mi210 = find_bus(faulty, "0000:c1:00.0");
  ASSERT_TRUE(mi300x && mi210);
  EXPECT_FALSE(mi210->utilization_ratio);
  EXPECT_EQ(reasons(mi210->errors), std::vector<std::string>{"read_error"});
  EXPECT_EQ(mi210->errors[0].detail.rfind("EIO reading ", 0), 0u) << mi210->errors[0].detail;
  EXPECT_NE(mi210->errors[0].detail.find("gpu_busy_percent"), std::string::npos);
  EXPECT_DOUBLE_EQ(*mi210->memory_utilization_ratio, 0.09);
  EXPECT_FALSE(mi300x->power_watts);
  EXPECT_FALSE(mi300x->memory_utilization_ratio);
  EXPECT_TRUE(mi300x->errors.empty());
  EXPECT_DOUBLE_EQ(*mi300x->power_limit_watts, 750.0);
  EXPECT_DOUBLE_EQ(*mi300x->utilization_ratio, 0.87);

  faults->clear();
  faults->inject(kMi210 + "/hwmon/hwmon5/temp1_input", ENODEV, 1);
  std::vector<DeviceSample> one = backend->sample(generous_context());
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].pci_bus_id, "0000:05:00.0");
  EXPECT_TRUE(one[0].errors.empty());

  std::vector<DeviceSample> back = backend->sample(generous_context());
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[1].index, 1u);
  EXPECT_EQ(back[1].uuid, first[1].uuid);
  EXPECT_DOUBLE_EQ(*back[1].utilization_ratio, 1.0);
  EXPECT_TRUE(back[1].errors.empty());
}

// Through the collector: the reasons are counted under the card's uuid with
// the file in the detail, and a card gone mid-collection (its
// gpu_metrics answers ENODEV once GPU 0's power was read) leaves no series.
TEST(AmdgpuCollector, ErrnosDuringACollection) {
  auto faults = std::make_shared<sources::Faults>();
  std::vector<std::unique_ptr<Backend>> backends;
  backends.push_back(make_amdgpu_backend(faulty_roots(faults)));
  AcceleratorCollector collector(std::move(backends));
  {
    MetricSink sink(collector.metrics());
    CollectOnce(collector, sink);
  }
  faults->inject(kMi300x + "/ras/umc_err_count", EIO, 1);
  faults->on_read(kMi300x + "/hwmon/hwmon3/power1_cap",
                  [&] { faults->inject(kMi210 + "/gpu_metrics", ENODEV, 1); });
  MetricSink sink(collector.metrics());
  CollectOnce(collector, sink);
  EXPECT_EQ(sink.errors(), (std::map<std::string, std::uint64_t, std::less<>>{{"read_error", 1}}));
  ASSERT_EQ(sink.failures().size(), 1u);
  const auto& [key, detail] = *sink.failures().begin();
  EXPECT_EQ(key, (MetricSink::FailureKey{"read_error", "amd-4f8a2c1e9b3d7065"}));
  EXPECT_NE(detail.find("EIO reading "), std::string::npos) << detail;
  EXPECT_NE(detail.find("ras/umc_err_count"), std::string::npos) << detail;
  double v = 0;
  EXPECT_FALSE(sink.get("nodewatch_accelerator_ecc_errors_total",
                        {"0", "amd-4f8a2c1e9b3d7065", "corrected"}, &v));
  EXPECT_TRUE(sink.get("nodewatch_accelerator_power_watts", {"0", "amd-4f8a2c1e9b3d7065"}, &v));
  EXPECT_EQ(sink.render().find("amd-71b6c2d8e04f9a35"), std::string::npos);
  EXPECT_EQ(faults->hits(), 2u);
}

// Held descriptors follow the cards: a card removed from the tree between
// two samples takes its descriptors with it, and none are left when the
// last card goes.
TEST(AmdgpuBackend, HeldDescriptorsDoNotLeak) {
  TempTree tree;
  const int before = open_fds();
  {
    std::unique_ptr<Backend> backend = make_amdgpu_backend(tree.roots());
    ASSERT_EQ(backend->sample(generous_context()).size(), 2u);
    // Per card: busy (2), VRAM (2), replays, RAS, gpu_metrics; then the
    // MI300X's 2 temperatures with crit, power1_input and cap, 2 clocks
    // (15); the MI210's 3 with crit, power1_average and cap, 2 clocks (17).
    EXPECT_EQ(open_fds(), before + 15 + 17);
    ASSERT_EQ(backend->sample(generous_context()).size(), 2u);
    EXPECT_EQ(open_fds(), before + 15 + 17);

    fs::remove(tree.path("class/drm/card10"));
    fs::remove(tree.path("class/drm/renderD138"));
    fs::remove_all(tree.path(kMi210));
    std::vector<DeviceSample> one = backend->sample(generous_context());
    ASSERT_EQ(one.size(), 1u);
    EXPECT_EQ(one[0].pci_bus_id, "0000:05:00.0");
    EXPECT_EQ(open_fds(), before + 15);

    fs::remove_all(tree.path("class/drm"));
    EXPECT_TRUE(backend->sample(generous_context()).empty());
    EXPECT_EQ(open_fds(), before);
  }
  EXPECT_EQ(open_fds(), before);
}

TEST(AmdgpuBackend, OnlyCardsBoundToAmdgpu) {
  TempTree tree;
  // An AMD GPU driven by radeon is not ours.
  tree.remove(kMi210 + "/driver");
  fs::create_directory_symlink("../../../../bus/pci/drivers/radeon", tree.path(kMi210 + "/driver"));
  std::vector<DeviceSample> devices = sample(tree.roots());
  ASSERT_EQ(devices.size(), 1u);
  EXPECT_EQ(devices[0].pci_bus_id, "0000:05:00.0");

  // No driver link at all (a container's copy of sysfs): amdgpu's files decide.
  tree.remove(kMi210 + "/driver");
  devices = sample(tree.roots());
  EXPECT_EQ(devices.size(), 2u);
}

TEST(AmdgpuBackend, NoDrmOrNoAmdCardIsNoDevices) {
  Roots none{fs::temp_directory_path() / "nodewatch-amdgpu-no-such-sysfs", "/nonexistent"};
  EXPECT_TRUE(sample(none).empty());

  TempTree tree;
  tree.remove("class/drm/card2");
  tree.remove("class/drm/card10");
  EXPECT_TRUE(sample(tree.roots()).empty());
}

TEST(AmdgpuBackend, StopsWhenTheCollectionIsCancelled) {
  std::atomic<bool> cancelled{true};
  CollectContext ctx{std::chrono::steady_clock::now() + std::chrono::seconds(30), &cancelled};
  EXPECT_TRUE(make_amdgpu_backend(fixture_roots())->sample(ctx).empty());

  // Cancelled after the first card: that card is kept, the next not read.
  cancelled = false;
  auto faults = std::make_shared<sources::Faults>();
  faults->on_read(kMi300x + "/gpu_busy_percent", [&cancelled] { cancelled = true; });
  std::vector<DeviceSample> devices = make_amdgpu_backend(faulty_roots(faults))->sample(ctx);
  ASSERT_EQ(devices.size(), 1u);
  EXPECT_EQ(devices[0].pci_bus_id, "0000:05:00.0");
}

// ---------------------------------------------------------------------------
// Processes from KFD (class/kfd/kfd/proc), over the fixture's KFD overlay

std::vector<DeviceProcess> processes_of(const std::vector<DeviceSample>& devices,
                                        std::string_view bus) {
  const DeviceSample* d = find_bus(devices, bus);
  if (d == nullptr || !d->processes) {
    ADD_FAILURE() << bus << (d == nullptr ? ": no such device" : ": processes not known");
    return {};
  }
  return *d->processes;
}

std::vector<unsigned> pids_of(const std::vector<DeviceProcess>& ps) {
  std::vector<unsigned> pids;
  for (const DeviceProcess& p : ps) pids.push_back(p.pid);
  return pids;
}

// The file, below the sysfs root; and the end of its path as the backend
// reads it (through class/kfd/kfd), for Faults.
std::string vram(unsigned pid, std::uint32_t gpu_id) {
  return kKfdProc + "/" + std::to_string(pid) + "/vram_" + std::to_string(gpu_id);
}
std::string vram_suffix(unsigned pid, std::uint32_t gpu_id) {
  return "kfd/proc/" + std::to_string(pid) + "/vram_" + std::to_string(gpu_id);
}

TEST(AmdgpuKfd, ProcessesPerDeviceWithTheirMemory) {
  TempTree tree;
  tree.add_kfd();
  std::vector<DeviceSample> devices = sample(tree.roots());
  ASSERT_EQ(devices.size(), 2u);
  // 4242 has a vram file for the MI210 too, holding 0 bytes (KFD makes one
  // for every GPU the process may open): it is not on the MI210.
  EXPECT_EQ(processes_of(devices, "0000:05:00.0"),
            (std::vector<DeviceProcess>{{4242, 64 * kGiB, std::nullopt},
                                        {5151, 8 * kGiB, std::nullopt}}));
  EXPECT_EQ(
      processes_of(devices, "0000:c1:00.0"),
      (std::vector<DeviceProcess>{{5151, 4 * kGiB, std::nullopt}, {6262, 2 * kGiB, std::nullopt}}));
  for (const DeviceSample& d : devices) EXPECT_TRUE(d.errors.empty()) << d.pci_bus_id;
}

TEST(AmdgpuKfd, AProcessOnTwoGpusIsOnBoth) {
  TempTree tree;
  tree.add_kfd();
  fs::remove_all(tree.path(kKfdProc + "/4242"));
  fs::remove_all(tree.path(kKfdProc + "/6262"));
  tree.write(vram(5151, kMi300xGpuId), "1048576\n");
  std::vector<DeviceSample> devices = sample(tree.roots());
  EXPECT_EQ(processes_of(devices, "0000:05:00.0"),
            (std::vector<DeviceProcess>{{5151, 1048576.0, std::nullopt}}));
  EXPECT_EQ(processes_of(devices, "0000:c1:00.0"),
            (std::vector<DeviceProcess>{{5151, 4 * kGiB, std::nullopt}}));
}

TEST(AmdgpuKfd, NoKfdIsNoProcessesAndNoError) {
  // The plain fixture has no class/kfd: processes are not known.
  std::vector<DeviceSample> devices = sample(fixture_roots());
  ASSERT_EQ(devices.size(), 2u);
  for (const DeviceSample& d : devices) {
    EXPECT_FALSE(d.processes) << d.pci_bus_id;
    EXPECT_TRUE(d.errors.empty()) << d.pci_bus_id;
  }
  // KFD without processes: every device has none, known.
  TempTree tree;
  tree.add_kfd();
  for (const char* pid : {"4242", "5151", "6262"}) fs::remove_all(tree.path(kKfdProc + "/" + pid));
  devices = sample(tree.roots());
  ASSERT_EQ(devices.size(), 2u);
  for (const DeviceSample& d : devices) {
    ASSERT_TRUE(d.processes) << d.pci_bus_id;
    EXPECT_TRUE(d.processes->empty()) << d.pci_bus_id;
    EXPECT_TRUE(d.errors.empty()) << d.pci_bus_id;
  }
}

TEST(AmdgpuKfd, UnknownGpuIdIsCountedOncePerCollection) {
  TempTree tree;
  tree.add_kfd();
  tree.write(vram(5151, 999), "1048576\n");
  tree.write(vram(6262, 999), "2097152\n");
  std::unique_ptr<Backend> backend = make_amdgpu_backend(tree.roots());
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(round);
    std::vector<DeviceSample> devices = backend->sample(generous_context());
    ASSERT_EQ(devices.size(), 2u);
    // Counted with the first device, once for the gpu_id; the rest is read.
    ASSERT_EQ(reasons(devices[0].errors), std::vector<std::string>{"kfd_unknown_gpu"});
    EXPECT_NE(devices[0].errors[0].detail.find("gpu_id 999"), std::string::npos)
        << devices[0].errors[0].detail;
    EXPECT_NE(devices[0].errors[0].detail.find("2 processes"), std::string::npos)
        << devices[0].errors[0].detail;
    EXPECT_TRUE(devices[1].errors.empty());
    EXPECT_EQ(pids_of(processes_of(devices, "0000:05:00.0")), (std::vector<unsigned>{4242, 5151}));
    EXPECT_EQ(pids_of(processes_of(devices, "0000:c1:00.0")), (std::vector<unsigned>{5151, 6262}));
  }
  // A GPU node of the topology that leads to no card (its render node gone,
  // its PCI address no card's) is unknown too.
  tree.write(kKfdNodes + "/3/properties", "drm_render_minor 250\ndomain 0\nlocation_id 4096\n");
  std::vector<DeviceSample> devices = backend->sample(generous_context());
  EXPECT_EQ(count(devices[0].errors, "kfd_unknown_gpu"), 2u);  // 999 and the MI210's 9017
  EXPECT_EQ(pids_of(processes_of(devices, "0000:c1:00.0")), std::vector<unsigned>{});
}

TEST(AmdgpuKfd, MalformedVramFileIsCountedOnItsDevice) {
  TempTree tree;
  tree.add_kfd();
  tree.write(vram(6262, kMi210GpuId), "lots\n");
  tree.write(vram(5151, kMi300xGpuId), "-8\n");
  std::vector<DeviceSample> devices = sample(tree.roots());
  const DeviceSample* mi300x = find_bus(devices, "0000:05:00.0");
  const DeviceSample* mi210 = find_bus(devices, "0000:c1:00.0");
  ASSERT_TRUE(mi300x && mi210);
  ASSERT_EQ(reasons(mi210->errors), std::vector<std::string>{"kfd_parse"});
  EXPECT_NE(mi210->errors[0].detail.find("proc/6262/vram_9017"), std::string::npos)
      << mi210->errors[0].detail;
  ASSERT_EQ(reasons(mi300x->errors), std::vector<std::string>{"kfd_parse"});
  // The file that did not parse is skipped; the process's other GPUs are read.
  EXPECT_EQ(pids_of(processes_of(devices, "0000:05:00.0")), std::vector<unsigned>{4242});
  EXPECT_EQ(processes_of(devices, "0000:c1:00.0"),
            (std::vector<DeviceProcess>{{5151, 4 * kGiB, std::nullopt}}));
}

TEST(AmdgpuKfd, ReadErrorsAndBadTopologyAreCounted) {
  TempTree tree;
  tree.add_kfd();
  auto faults = std::make_shared<sources::Faults>();
  faults->inject("kfd/proc/4242/vram_42735", EIO, 1);
  faults->inject("kfd/proc/6262", EACCES, 1);
  std::vector<DeviceSample> devices = sample(faulty_roots(faults, tree.roots()));
  EXPECT_EQ(reasons(devices[0].errors), (std::vector<std::string>{"read_error", "read_error"}));
  EXPECT_TRUE(devices[1].errors.empty());
  EXPECT_EQ(pids_of(processes_of(devices, "0000:05:00.0")), std::vector<unsigned>{5151});
  EXPECT_EQ(pids_of(processes_of(devices, "0000:c1:00.0")), std::vector<unsigned>{5151});

  // A topology node whose gpu_id does not parse is counted, and the processes
  // on that GPU then count its gpu_id as unknown.
  tree.write(kKfdNodes + "/3/gpu_id", "gpu\n");
  devices = sample(tree.roots());
  EXPECT_EQ(reasons(devices[0].errors), (std::vector<std::string>{"kfd_parse", "kfd_unknown_gpu"}));
  EXPECT_EQ(pids_of(processes_of(devices, "0000:c1:00.0")), std::vector<unsigned>{});
}

TEST(AmdgpuKfd, ATopologyThatCannotBeReadLeavesTheProcessesUnknown) {
  // Processes in KFD, but no GPU's gpu_id readable: whose they are is not
  // known, which must not read as "no process on any GPU".
  TempTree tree;
  tree.add_kfd();
  for (int err : {ENOENT, EIO}) {
    SCOPED_TRACE(err);
    auto faults = std::make_shared<sources::Faults>();
    faults->inject("kfd/topology/nodes", err);
    std::vector<DeviceSample> devices = sample(faulty_roots(faults, tree.roots()));
    EXPECT_GE(faults->hits(), 1u);
    for (const DeviceSample& d : devices) EXPECT_FALSE(d.processes.has_value()) << d.pci_bus_id;
  }
}

TEST(AmdgpuKfd, ProcessEndingMidReadIsSkippedSilently) {
  TempTree tree;
  tree.add_kfd();
  {
    // Its directory is gone by the time it is listed.
    auto faults = std::make_shared<sources::Faults>();
    faults->inject("kfd/proc/5151", ENOENT);
    std::vector<DeviceSample> devices = sample(faulty_roots(faults, tree.roots()));
    EXPECT_GE(faults->hits(), 1u);
    EXPECT_EQ(pids_of(processes_of(devices, "0000:05:00.0")), std::vector<unsigned>{4242});
    EXPECT_EQ(pids_of(processes_of(devices, "0000:c1:00.0")), std::vector<unsigned>{6262});
    for (const DeviceSample& d : devices) EXPECT_TRUE(d.errors.empty()) << d.pci_bus_id;
  }
  for (int err : {ENOENT, ENODEV}) {
    SCOPED_TRACE(err);
    // Gone after its first GPU's file was read (vram_42735 before vram_9017):
    // nothing of it is kept, not half of its GPUs.
    auto faults = std::make_shared<sources::Faults>();
    faults->inject(vram_suffix(5151, kMi210GpuId), err);
    std::vector<DeviceSample> devices = sample(faulty_roots(faults, tree.roots()));
    EXPECT_EQ(faults->hits(), 1u);
    EXPECT_EQ(pids_of(processes_of(devices, "0000:05:00.0")), std::vector<unsigned>{4242});
    EXPECT_EQ(pids_of(processes_of(devices, "0000:c1:00.0")), std::vector<unsigned>{6262});
    for (const DeviceSample& d : devices) EXPECT_TRUE(d.errors.empty()) << d.pci_bus_id;
  }
  {
    // Really removed, just as its first file is read.
    auto faults = std::make_shared<sources::Faults>();
    faults->on_read(vram_suffix(4242, kMi300xGpuId),
                    [&tree] { fs::remove_all(tree.path(kKfdProc + "/4242")); });
    std::vector<DeviceSample> devices = sample(faulty_roots(faults, tree.roots()));
    EXPECT_EQ(pids_of(processes_of(devices, "0000:05:00.0")), std::vector<unsigned>{5151});
    EXPECT_EQ(pids_of(processes_of(devices, "0000:c1:00.0")), (std::vector<unsigned>{5151, 6262}));
    for (const DeviceSample& d : devices) EXPECT_TRUE(d.errors.empty()) << d.pci_bus_id;
  }
}

// Without the render node (a partition's belongs to a platform device), the
// PCI address: the exact function, else the one card on its bus (a
// partition's location_id may carry the partition in its low bits). The
// memory of one process on two partitions of a card adds up.
TEST(AmdgpuKfd, PartitionsFallBackToThePciAddress) {
  TempTree tree;
  tree.add_kfd();
  // No drm_render_minor at all: domain and location_id name the MI210.
  std::string mi210 = read_file(tree.path(kKfdNodes + "/3/properties"));
  const std::size_t at = mi210.find("drm_render_minor 138\n");
  ASSERT_NE(at, std::string::npos);
  tree.write(kKfdNodes + "/3/properties",
             mi210.erase(at, std::string("drm_render_minor 138\n").size()));
  // A second partition of the MI300X: its render node is a platform
  // device's, its location_id 0x0501 (function 1, no such card).
  fs::create_directories(tree.path("devices/platform/amdgpu_xcp.1/drm/renderD200"));
  fs::create_directory_symlink("../../../amdgpu_xcp.1",
                               tree.path("devices/platform/amdgpu_xcp.1/drm/renderD200/device"));
  fs::create_directory_symlink("../../devices/platform/amdgpu_xcp.1/drm/renderD200",
                               tree.path("class/drm/renderD200"));
  fs::create_directories(tree.path(kKfdNodes + "/4"));
  tree.write(kKfdNodes + "/4/gpu_id", "777\n");
  tree.write(kKfdNodes + "/4/properties",
             "simd_count 152\nlocation_id 1281\ndomain 0\ndrm_render_minor 200\n");
  tree.write(vram(4242, 777), "1073741824\n");
  std::vector<DeviceSample> devices = sample(tree.roots());
  for (const DeviceSample& d : devices) EXPECT_TRUE(d.errors.empty()) << d.pci_bus_id;
  EXPECT_EQ(processes_of(devices, "0000:05:00.0"),
            (std::vector<DeviceProcess>{{4242, 65 * kGiB, std::nullopt},
                                        {5151, 8 * kGiB, std::nullopt}}));
  EXPECT_EQ(pids_of(processes_of(devices, "0000:c1:00.0")), (std::vector<unsigned>{5151, 6262}));
}

TEST(AmdgpuKfd, AtMostSoManyProcessDirectories) {
  TempTree tree;
  tree.add_kfd();
  // 4094 more process directories, named so that they come first (empty:
  // they count all the same), then 4242 and 5151, the last two read; 6262
  // is the 4097th.
  for (unsigned pid = 100000; pid < 100000 + kMaxKfdProcesses - 2; ++pid)
    fs::create_directory(tree.path(kKfdProc + "/" + std::to_string(pid)));
  std::vector<DeviceSample> devices = sample(tree.roots());
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_EQ(pids_of(processes_of(devices, "0000:05:00.0")), (std::vector<unsigned>{4242, 5151}));
  EXPECT_EQ(pids_of(processes_of(devices, "0000:c1:00.0")), std::vector<unsigned>{5151});
  ASSERT_EQ(reasons(devices[0].errors), std::vector<std::string>{"kfd_limit"});
  EXPECT_NE(devices[0].errors[0].detail.find("4097 process directories"), std::string::npos)
      << devices[0].errors[0].detail;
  EXPECT_TRUE(devices[1].errors.empty());

  // One fewer: all read, nothing counted.
  fs::remove(tree.path(kKfdProc + "/100000"));
  devices = sample(tree.roots());
  EXPECT_EQ(pids_of(processes_of(devices, "0000:c1:00.0")), (std::vector<unsigned>{5151, 6262}));
  EXPECT_TRUE(devices[0].errors.empty());
}

TEST(AmdgpuKfd, CancelledWhileReadingProcessesLeavesThemUnknown) {
  TempTree tree;
  tree.add_kfd();
  std::atomic<bool> cancelled{false};
  CollectContext ctx{std::chrono::steady_clock::now() + std::chrono::seconds(30), &cancelled};
  auto faults = std::make_shared<sources::Faults>();
  faults->on_read("kfd/proc/4242", [&cancelled] { cancelled = true; });
  std::vector<DeviceSample> devices =
      make_amdgpu_backend(faulty_roots(faults, tree.roots()))->sample(ctx);
  ASSERT_EQ(devices.size(), 2u);
  for (const DeviceSample& d : devices) EXPECT_FALSE(d.processes) << d.pci_bus_id;
}

// ---------------------------------------------------------------------------
// The accelerator collector over the amdgpu backend

TEST(AmdgpuCollector, SeriesFromTheFixture) {
  ExpectWellFormedTable(accelerator_metric_table(), "nodewatch_accelerator_");
  std::vector<std::unique_ptr<Backend>> backends;
  backends.push_back(make_amdgpu_backend(fixture_roots()));
  AcceleratorCollector collector(std::move(backends));
  MetricSink sink(collector.metrics());
  CollectOnce(collector, sink);
  ExpectConformant(sink);
  EXPECT_TRUE(sink.errors().empty());

  const std::string a0 = "0", u0 = "amd-4f8a2c1e9b3d7065";
  const std::string a1 = "1", u1 = "amd-71b6c2d8e04f9a35";
  EXPECT_EQ(Value(sink, "nodewatch_accelerator_info",
                  {a0, u0, "amd", "AMD Instinct MI300X OAM", "0000:05:00.0", "6.10.5",
                   "692331000142", "113-M3000100-102"}),
            1);
  EXPECT_EQ(Value(sink, "nodewatch_accelerator_info",
                  {a1, u1, "amd", "AMD Instinct MI210", "0000:c1:00.0", "6.10.5", "692247000318",
                   "113-D67301-063"}),
            1);
  EXPECT_EQ(Value(sink, "nodewatch_accelerator_up", {a0, u0}), 1);
  EXPECT_DOUBLE_EQ(Value(sink, "nodewatch_accelerator_utilization_ratio", {a0, u0}), 0.87);
  EXPECT_DOUBLE_EQ(Value(sink, "nodewatch_accelerator_memory_total_bytes", {a1, u1}),
                   68702699520.0);
  EXPECT_DOUBLE_EQ(Value(sink, "nodewatch_accelerator_temperature_celsius", {a0, u0, "junction"}),
                   71.0);
  EXPECT_DOUBLE_EQ(Value(sink, "nodewatch_accelerator_temperature_celsius", {a1, u1, "edge"}),
                   58.0);
  double v = 0;
  EXPECT_FALSE(sink.get("nodewatch_accelerator_temperature_celsius", {a0, u0, "edge"}, &v));
  EXPECT_DOUBLE_EQ(Value(sink, "nodewatch_accelerator_temperature_slowdown_celsius", {a1, u1}),
                   110.0);
  EXPECT_DOUBLE_EQ(Value(sink, "nodewatch_accelerator_power_watts", {a1, u1}), 287.0);
  EXPECT_DOUBLE_EQ(Value(sink, "nodewatch_accelerator_power_limit_watts", {a0, u0}), 750.0);
  EXPECT_DOUBLE_EQ(Value(sink, "nodewatch_accelerator_energy_joules_total", {a0, u0}), 123456789.5);
  EXPECT_DOUBLE_EQ(Value(sink, "nodewatch_accelerator_clock_hertz", {a0, u0, "graphics"}), 2.1e9);
  EXPECT_DOUBLE_EQ(Value(sink, "nodewatch_accelerator_ecc_errors_total", {a1, u1, "corrected"}),
                   17.0);
  EXPECT_DOUBLE_EQ(Value(sink, "nodewatch_accelerator_ecc_errors_total", {a1, u1, "uncorrected"}),
                   1.0);
  EXPECT_DOUBLE_EQ(Value(sink, "nodewatch_accelerator_pcie_replays_total", {a0, u0}), 3.0);
  EXPECT_FALSE(sink.get("nodewatch_accelerator_remapped_rows", {a0, u0, "correctable"}, &v));
}

TEST(AmdgpuCollector, PartialFailuresAreCounted) {
  TempTree tree;
  tree.write(kMi300x + "/gpu_busy_percent", "busy\n");
  tree.write(kMi210 + "/gpu_metrics", "\x78");
  std::vector<std::unique_ptr<Backend>> backends;
  backends.push_back(make_amdgpu_backend(tree.roots()));
  AcceleratorCollector collector(std::move(backends));
  MetricSink sink(collector.metrics());
  CollectOnce(collector, sink);
  ASSERT_EQ(sink.errors().count("parse_error"), 1u);
  EXPECT_EQ(sink.errors().at("parse_error"), 1u);
  ASSERT_EQ(sink.errors().count("gpu_metrics_truncated"), 1u);
  EXPECT_EQ(sink.errors().at("gpu_metrics_truncated"), 1u);
  double v = 0;
  EXPECT_FALSE(
      sink.get("nodewatch_accelerator_utilization_ratio", {"0", "amd-4f8a2c1e9b3d7065"}, &v));
  EXPECT_TRUE(sink.get("nodewatch_accelerator_up", {"0", "amd-4f8a2c1e9b3d7065"}, &v));
}

// A table this code does not understand, unknown or malformed, is counted
// as gpu_metrics_layout with the device as subject (which the scheduler logs
// when it starts and stops failing), on every collection while it lasts;
// the energy series is absent and the rest of the device is exported.
TEST(AmdgpuCollector, GpuMetricsLayoutIsCountedPerDevice) {
  if constexpr (std::endian::native != std::endian::little) GTEST_SKIP() << "little-endian tables";
  const std::string v1_9 = read_file(fixture_sysfs() / kMi300x / "gpu_metrics");
  std::string unknown_type = v1_9;  // the first attribute's tag: type 2 (u16) becomes 9
  ASSERT_EQ(get_le(unknown_type, 8, 8), gpu_metrics_tag(2, 2, 0, 1));
  unknown_type[10] = static_cast<char>(0x92);
  std::string mi210_v1_8 = read_file(fixture_sysfs() / kMi210 / "gpu_metrics");
  mi210_v1_8[3] = 8;  // v1_8's revision with v1_3's 120 bytes
  TempTree tree;
  tree.write(kMi300x + "/gpu_metrics", unknown_type);
  tree.write(kMi210 + "/gpu_metrics", mi210_v1_8);
  std::vector<std::unique_ptr<Backend>> backends;
  backends.push_back(make_amdgpu_backend(tree.roots()));
  AcceleratorCollector collector(std::move(backends));
  const std::string u0 = "amd-4f8a2c1e9b3d7065", u1 = "amd-71b6c2d8e04f9a35";
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(round);
    MetricSink sink(collector.metrics());
    CollectOnce(collector, sink);
    ExpectConformant(sink);
    ASSERT_EQ(sink.errors().size(), 1u);
    EXPECT_EQ(sink.errors().at("gpu_metrics_layout"), 2u);
    using Key = MetricSink::FailureKey;
    ASSERT_EQ(sink.failures().count(Key{"gpu_metrics_layout", u0}), 1u);
    EXPECT_EQ(sink.failures().at(Key{"gpu_metrics_layout", u0}),
              "gpu_metrics v1_9, 1150 bytes: attribute 0 of 47 (tag 0x2920001) has unknown type 9");
    ASSERT_EQ(sink.failures().count(Key{"gpu_metrics_layout", u1}), 1u);
    EXPECT_EQ(sink.failures().at(Key{"gpu_metrics_layout", u1}),
              "gpu_metrics v1_8, 120 bytes: not a layout known here");
    double v = 0;
    EXPECT_FALSE(sink.get("nodewatch_accelerator_energy_joules_total", {"0", u0}, &v));
    EXPECT_FALSE(sink.get("nodewatch_accelerator_energy_joules_total", {"1", u1}, &v));
    EXPECT_DOUBLE_EQ(Value(sink, "nodewatch_accelerator_power_watts", {"0", u0}), 612.0);
    EXPECT_EQ(Value(sink, "nodewatch_accelerator_up", {"1", u1}), 1);
  }
}

// The jobs on the AMD devices: KFD's processes, each one's /proc/PID/cgroup
// (the fixture's kfd/proc) read as a Slurm job or a Kubernetes pod.
TEST(AmdgpuCollector, JobsFromKfdProcesses) {
  TempTree tree;
  tree.add_kfd();
  std::vector<std::unique_ptr<Backend>> backends;
  backends.push_back(make_amdgpu_backend(tree.roots()));
  JobSources jobs;
  jobs.proc = sources::FsRoot(nodewatch::testing::fixtures_dir() / "amdgpu" / "kfd" / "proc");
  AcceleratorCollector collector(std::move(backends), std::move(jobs));
  MetricSink sink(collector.metrics());
  CollectOnce(collector, sink);
  ExpectConformant(sink);
  EXPECT_TRUE(sink.errors().empty());
  const std::string u0 = "amd-4f8a2c1e9b3d7065", u1 = "amd-71b6c2d8e04f9a35";
  const std::string info = "nodewatch_accelerator_job_info";
  // accelerator, uuid, scheduler, job_id, step, namespace, pod, container, gpu_instance
  EXPECT_EQ(Value(sink, info, {"0", u0, "slurm", "77", "0", "", "", "", "", ""}), 1);
  EXPECT_EQ(Value(sink, info, {"0", u0, "slurm", "78", "batch", "", "", "", "", ""}), 1);
  EXPECT_EQ(Value(sink, info, {"1", u1, "slurm", "78", "batch", "", "", "", "", ""}), 1);
  double v = 0;
  EXPECT_FALSE(sink.get(info, {"1", u1, "slurm", "77", "0", "", "", "", ""}, &v));
  EXPECT_EQ(Value(sink, "nodewatch_accelerator_processes", {"0", u0}), 2);
  EXPECT_EQ(Value(sink, "nodewatch_accelerator_processes", {"1", u1}), 2);
  EXPECT_DOUBLE_EQ(Value(sink, "nodewatch_accelerator_process_memory_used_bytes", {"0", u0, "77"}),
                   64 * kGiB);
  EXPECT_DOUBLE_EQ(Value(sink, "nodewatch_accelerator_process_memory_used_bytes", {"1", u1, "78"}),
                   4 * kGiB);
  // 6262 is a Kubernetes container (a kubepods cgroup): its pod UID.
  EXPECT_DOUBLE_EQ(Value(sink, "nodewatch_accelerator_process_memory_used_bytes",
                         {"1", u1, "1f0e6a5c-2b9d-4c3e-8f7a-6b5c4d3e2f1a"}),
                   2 * kGiB);
}

// AMD's driver state: the AMD GPU functions on the bus (VGA, 3D, other
// display) and whether amdgpu holds each. One that no driver holds (amdgpu
// failed to load, or is blacklisted) is not_bound; a GPU handed to a
// virtual machine (vfio-pci) is not the host's; no AMD GPU, nothing said.
TEST(AmdgpuDriver, UpWhenAmdgpuHoldsEveryAmdGpuOnTheBus) {
  const fs::path root =
      fs::temp_directory_path() / ("nodewatch-amd-driver-" + std::to_string(::getpid()));
  auto function = [&](const std::string& bdf, const std::string& vendor, const std::string& cls,
                      const std::string& driver) {
    const fs::path dir = root / "bus/pci/devices" / bdf;
    fs::create_directories(dir);
    std::ofstream(dir / "vendor") << vendor << "\n";
    std::ofstream(dir / "class") << cls << "\n";
    if (driver.empty()) return;
    fs::create_directories(root / "bus/pci/drivers" / driver);
    fs::create_directory_symlink("../../../bus/pci/drivers/" + driver, dir / "driver");
  };
  const Roots roots{root, "/nonexistent-procfs"};
  fs::create_directories(root / "bus/pci/devices");
  EXPECT_FALSE(make_amdgpu_backend(roots)->driver_state().known);
  function("0000:03:00.0", "0x1a03", "0x030000", "ast");            // the BMC's display
  function("0000:c1:00.0", "0x1002", "0x038000", "amdgpu");         // an Instinct GPU
  function("0000:c2:00.0", "0x1002", "0x038000", "vfio-pci");       // given to a VM
  function("0000:c1:00.1", "0x1002", "0x040300", "snd_hda_intel");  // its audio: not a GPU
  std::unique_ptr<Backend> b = make_amdgpu_backend(roots);
  DriverState d = b->driver_state();
  EXPECT_TRUE(d.known);
  EXPECT_TRUE(d.up);
  EXPECT_EQ(d.state, "ok");
  EXPECT_EQ(d.devices, 1);
  function("0000:c3:00.0", "0x1002", "0x030200", "");  // a GPU no driver holds
  d = b->driver_state();
  EXPECT_FALSE(d.up);
  EXPECT_EQ(d.state, "not_bound");
  EXPECT_EQ(d.devices, 2);
  fs::remove_all(root);
}

}  // namespace
}  // namespace nodewatch::accelerator
