// A fake libnvidia-ml.so.1 for tests: the NVML symbols nodewatch calls,
// with C linkage and NVML's documented ABI (declared once, in
// collectors/accelerator/nvml/nvml_api.hpp; the static_asserts at the end check
// every exported signature against it), driven by a scenario file.
//
// Built three times from this file (see CMakeLists.txt here):
//  - full:   every symbol, versioned and unversioned, like a current driver;
//  - old:    -DFAKE_NVML_OLD_DRIVER: no _v2/_v3/V variants, no
//            nvmlDeviceGetCurrentClocksEventReasons, no nvmlDeviceGetFieldValues,
//            like a driver from before those existed;
//  - broken: -DFAKE_NVML_NO_DEVICE_COUNT: no nvmlDeviceGetCount(_v2) at all.
//
// Every nvmlInit reads the scenario named by FAKE_NVML_SCENARIO again and
// starts it afresh (call counts, lost devices, pending events); with the
// variable unset the scenario is "devices 8". The format, and the value each
// device reports (derived from its index only), are in
// tests/fixtures/nvml/README.md; the derivation is also in the functions
// below. A scenario that does not parse makes nvmlInit fail with UNKNOWN
// (999) and prints why on stderr.
//
// Every nvmlInit call is counted for the library's whole life (across
// sessions), readable through fake_nvml_inits(); with FAKE_NVML_INIT_LOG
// naming a file, each call also appends the line "nvmlInit <pid>" to it, so
// that a test can count the nvmlInit calls of another process (the daemon).
//
// Besides NVML, four hooks for tests (not part of NVML):
//   int fake_nvml_script(const char* line)  applies one more scenario line now;
//                                           0, or -1 if it does not parse
//   unsigned long long fake_nvml_calls(const char* function, int device)
//                                           calls so far (since the last
//                                           nvmlInit) of `function` (exact
//                                           exported name, "*" for all;
//                                           "field N": asks of field id N,
//                                           one per link) on
//                                           `device` (-1 for all; calls on no
//                                           device, nvmlDeviceGetCount, count
//                                           on device 0)
//   int fake_nvml_blocked()                 calls sleeping in a `block` now
//   unsigned long long fake_nvml_inits()    nvmlInit calls since the library
//                                           was loaded (every session's)

#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <type_traits>
#include <vector>

#include "accelerator/nvml/nvml_api.hpp"
#include "nvml_field_ids.hpp"

namespace nvml = nodewatch::accelerator::nvml;

// The opaque handles, completed here: a device is its index.
struct nodewatch::accelerator::nvml::DeviceSt {
  unsigned index;
  int gpu_instance = -1;  // a MIG device handle: the id of its GPU instance
};
// A GPM sample: whose it is, and its number among that device's (or GPU
// instance's) samples since the last nvmlInit.
struct nodewatch::accelerator::nvml::GpmSampleSt {
  bool taken = false;
  unsigned device = 0;
  int gpu_instance = -1;
  unsigned long long seq = 0;
};
struct nodewatch::accelerator::nvml::EventSetSt {
  std::array<bool, 64> registered{};  // by device index
};

#define FAKE_NVML_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

constexpr unsigned kMaxDevices = 64;
constexpr unsigned kMaxMigDevices = 7;  // nvmlDeviceGetMaxMigDeviceCount
constexpr const char* kDefaultDriver = "580.65.06";
constexpr unsigned long long kGiB = 1ull << 30;
constexpr unsigned long long kMiB = 1ull << 20;

// A device index in a rule, or every device.
constexpr int kAnyDevice = -1;

struct FailRule {  // fail DEV FUNCTION CODE [after_calls N]
  int device;
  std::string function;
  nvml::Return code;
  unsigned long long after_calls;
};
struct LostRule {  // lost|reset_required DEV [from FUNCTION] [after_calls N]
  int device;
  std::string function;  // empty: any function
  nvml::Return code;
  unsigned long long after_calls;
};
struct BlockRule {  // block DEV FUNCTION MS [times N]
  int device;
  std::string function;
  unsigned ms;
  unsigned times;
};
struct FieldFailRule {  // field_fail DEV FIELD CODE
  int device;
  unsigned field;
  nvml::Return code;
};
struct WaitErrorRule {  // wait_error DEV CODE [after_waits N]
  unsigned device;
  nvml::Return code;
  unsigned long long after_waits;
};
struct PendingXid {  // xid DEV CODE [after_waits N]
  unsigned device;
  unsigned long long code;
  unsigned long long after_waits;
  bool delivered;
};

struct FieldValueRule {  // field_value DEV FIELD TYPE VALUE
  int device;
  unsigned field;
  unsigned type;
  std::string value;
};
struct FabricRule {  // fabric DEV STATE [status CODE] [health MASK] [clique N] [summary S]
  unsigned state = 0;
  nvml::Return status = nvml::kSuccess;
  unsigned long long health = 0;
  unsigned long long clique = 7;
  unsigned long long summary = 0;
};

struct FakeProcess {  // processes DEV PID[:MIB|:-][@GI] ...
  unsigned pid;
  unsigned long long memory;  // bytes, or NVML_VALUE_NOT_AVAILABLE
  int gpu_instance;           // -1: none
};

struct State {
  unsigned devices = 8;
  std::string driver = kDefaultDriver;  // driver VERSION
  unsigned branch = 580;                // its major number
  std::string header;                   // header H: field ids as NVML H (else the branch's)
  // nvlink_ber DEV LINK KIND MANTISSA EXPONENT: in place of the derived rate.
  std::map<std::tuple<unsigned, unsigned, std::string>, unsigned long long> nvlink_ber;
  bool version_unknown = false;  // version_unknown: both version calls answer NOT_SUPPORTED
  nvml::Return init_error = nvml::kSuccess;
  std::string parse_error;
  std::vector<FailRule> fails;
  std::vector<LostRule> losts;
  std::vector<BlockRule> blocks;
  std::vector<FieldFailRule> field_fails;
  std::vector<PendingXid> xids;
  std::vector<WaitErrorRule> wait_errors;
  bool events_once = false;  // events_once: an event delivered in any session is not again
  nvml::Return count_error = nvml::kSuccess;  // count_error CODE [times N]
  unsigned long long count_error_times = 0;
  std::array<bool, kMaxDevices> no_events{};
  std::array<unsigned, kMaxDevices> c2c_links{};
  std::array<unsigned, kMaxDevices> nvlinks{};  // nvlink / nvlink5 DEV LINKS
  std::array<bool, kMaxDevices> nvlink5{};
  std::map<std::pair<unsigned, unsigned>, bool> nvlink_down;  // (device, link)
  // nvlink_errors DEV LINK TYPE N: added to the derived value.
  std::map<std::tuple<unsigned, unsigned, std::string>, unsigned long long> nvlink_errors;
  std::vector<FieldValueRule> field_values;
  std::array<unsigned, kMaxDevices> recovery_action{};           // recovery_action DEV N
  std::set<std::pair<unsigned, std::string>> repair_pending;     // repair_pending DEV channel|tpc
  std::array<bool, kMaxDevices> unrepairable{};                  // unrepairable DEV
  std::map<std::pair<unsigned, unsigned>, unsigned> p2p_status;  // p2p_status DEV PEER CODE
  // remapped_rows DEV CORR UNC PENDING FAILED, in place of the derived values.
  std::array<std::optional<std::array<unsigned, 4>>, kMaxDevices> remapped_rows{};
  std::array<bool, kMaxDevices> no_gpm{};
  std::array<std::vector<unsigned>, kMaxDevices> mig;  // mig DEV GI...: GPU instance ids
  std::map<unsigned, FabricRule> fabric;               // by device
  std::array<std::vector<FakeProcess>, kMaxDevices> processes;
  // Runtime.
  std::map<std::pair<unsigned, int>, unsigned long long> gpm_seq;  // (device, GI): samples taken
  std::string scenario_path;             // FAKE_NVML_SCENARIO at the last nvmlInit
  unsigned long long count_calls = 0;    // kept across nvmlInit while scenario_path stays
  nvml::Return broken = nvml::kSuccess;  // set by a count_error: every call fails until nvmlInit
  int init_count = 0;
  std::array<nvml::Return, kMaxDevices> lost{};  // sticky once set
  std::map<std::string, std::array<unsigned long long, kMaxDevices>, std::less<>> calls;
  std::map<std::string, std::array<unsigned long long, kMaxDevices>, std::less<>> base_calls;
  std::array<unsigned long long, kMaxDevices> device_calls{};
  // Field ids asked of nvmlDeviceGetFieldValues, each link's ask one.
  std::map<unsigned, std::array<unsigned long long, kMaxDevices>> field_asks;
  unsigned long long waits = 0;
  int blocked = 0;
  unsigned long long inits = 0;  // every nvmlInit call, kept across sessions
  std::vector<std::unique_ptr<nvml::EventSetSt>> sets;
};

std::mutex g_mu;
State g_state;  // guarded by g_mu

const std::array<nvml::DeviceSt, kMaxDevices> g_devices = [] {
  std::array<nvml::DeviceSt, kMaxDevices> d{};
  for (unsigned i = 0; i < kMaxDevices; ++i) d[i].index = i;
  return d;
}();

nvml::Device handle(unsigned index) {
  return const_cast<nvml::Device>(&g_devices[index]);
}

// MIG device handles: slot k of device i.
const std::array<std::array<nvml::DeviceSt, kMaxMigDevices>, kMaxDevices> g_mig_devices = [] {
  std::array<std::array<nvml::DeviceSt, kMaxMigDevices>, kMaxDevices> d{};
  for (unsigned i = 0; i < kMaxDevices; ++i)
    for (unsigned k = 0; k < kMaxMigDevices; ++k) d[i][k].index = i;
  return d;
}();

// The MIG handle a MIG device of this library is, or null.
[[maybe_unused]] const nvml::DeviceSt* mig_of(nvml::Device dev) {
  const std::less_equal<const nvml::DeviceSt*> le;
  if (dev == nullptr || !le(&g_mig_devices.front().front(), dev) ||
      !le(dev, &g_mig_devices.back().back()))
    return nullptr;
  return dev;
}

// Live GPM samples (allocated and not freed), for fake_nvml_gpm_samples().
std::atomic<long> g_gpm_samples{0};

// The index of a handle this library gave out, or -1.
int index_of(nvml::Device dev) {
  const std::less_equal<const nvml::DeviceSt*> le;
  if (dev == nullptr || !le(&g_devices.front(), dev) || !le(dev, &g_devices.back())) return -1;
  return static_cast<int>(dev->index);
}

// ---------------------------------------------------------------------------
// Scenario.

bool parse_device(const std::string& s, int* out) {
  if (s == "*") {
    *out = kAnyDevice;
    return true;
  }
  char* end = nullptr;
  const unsigned long v = std::strtoul(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || v >= kMaxDevices) return false;
  *out = static_cast<int>(v);
  return true;
}

bool parse_number(const std::string& s, unsigned long long* out) {
  char* end = nullptr;
  *out = std::strtoull(s.c_str(), &end, 10);
  return !s.empty() && *end == '\0';
}

// "590.44.01": the branch is the leading number.
bool parse_branch(const std::string& s, unsigned long long* out) {
  char* end = nullptr;
  *out = std::strtoull(s.c_str(), &end, 10);
  return end != s.c_str() && (*end == '\0' || *end == '.') && *out >= 100 && *out < 10000;
}

// A value type by its nvmlValue_t member name (d, ui, ul, ull, sll, si, us)
// or as a number (any, to answer with a type NVML does not have).
bool parse_value_type(const std::string& s, unsigned long long* out) {
  static const std::map<std::string, unsigned, std::less<>> kNames = {
      {"d", nvml::kValueTypeDouble},           {"ui", nvml::kValueTypeUnsignedInt},
      {"ul", nvml::kValueTypeUnsignedLong},    {"ull", nvml::kValueTypeUnsignedLongLong},
      {"sll", nvml::kValueTypeSignedLongLong}, {"si", nvml::kValueTypeSignedInt},
      {"us", nvml::kValueTypeUnsignedShort}};
  if (auto it = kNames.find(s); it != kNames.end()) {
    *out = it->second;
    return true;
  }
  return parse_number(s, out);
}

// Applies one line; false (and `error` set) if it does not parse.
bool apply_line(State& st, const std::string& raw, std::string* error) {
  const std::string line = raw.substr(0, raw.find('#'));
  std::istringstream in(line);
  std::vector<std::string> w;
  for (std::string t; in >> t;) w.push_back(t);
  if (w.empty()) return true;
  auto bad = [&] {
    *error = "bad scenario line: " + raw;
    return false;
  };
  // Optional "KEY VALUE" pairs after the positional words.
  auto option = [&](std::size_t from, const char* key, unsigned long long* value) {
    for (std::size_t i = from; i + 1 < w.size(); i += 2)
      if (w[i] == key) return parse_number(w[i + 1], value);
    return true;
  };
  auto options_only = [&](std::size_t from, std::initializer_list<const char*> keys) {
    for (std::size_t i = from; i < w.size(); i += 2) {
      if (i + 1 >= w.size()) return false;
      if (std::none_of(keys.begin(), keys.end(), [&](const char* k) { return w[i] == k; }))
        return false;
    }
    return true;
  };
  unsigned long long n = 0;
  int dev = 0;
  const std::string& cmd = w[0];
  if (cmd == "devices" && w.size() == 2 && parse_number(w[1], &n) && n <= kMaxDevices) {
    st.devices = static_cast<unsigned>(n);
  } else if (cmd == "init_error" && w.size() == 2 && parse_number(w[1], &n)) {
    st.init_error = static_cast<nvml::Return>(n);
  } else if (cmd == "fail" && w.size() >= 4 && parse_device(w[1], &dev) && parse_number(w[3], &n) &&
             options_only(4, {"after_calls"})) {
    unsigned long long after = 0;
    if (!option(4, "after_calls", &after)) return bad();
    st.fails.push_back({dev, w[2], static_cast<nvml::Return>(n), after});
  } else if (cmd == "no_ecc" && w.size() == 2 && parse_device(w[1], &dev)) {
    st.fails.push_back({dev, "nvmlDeviceGetTotalEccErrors", nvml::kErrorNotSupported, 0});
  } else if ((cmd == "lost" || cmd == "reset_required") && w.size() >= 2 &&
             parse_device(w[1], &dev)) {
    std::string function;
    std::size_t opts = 2;
    if (w.size() >= 4 && w[2] == "from") {
      function = w[3];
      opts = 4;
    }
    unsigned long long after = 0;
    if (!options_only(opts, {"after_calls"}) || !option(opts, "after_calls", &after)) return bad();
    st.losts.push_back(
        {dev, function, cmd == "lost" ? nvml::kErrorGpuIsLost : nvml::kErrorResetRequired, after});
  } else if (cmd == "block" && w.size() >= 4 && parse_device(w[1], &dev) &&
             parse_number(w[3], &n) && options_only(4, {"times"})) {
    unsigned long long times = 1;
    if (!option(4, "times", &times)) return bad();
    st.blocks.push_back({dev, w[2], static_cast<unsigned>(n), static_cast<unsigned>(times)});
  } else if (cmd == "field_fail" && w.size() == 4 && parse_device(w[1], &dev)) {
    unsigned long long field = 0;
    if (!parse_number(w[2], &field) || !parse_number(w[3], &n)) return bad();
    st.field_fails.push_back({dev, static_cast<unsigned>(field), static_cast<nvml::Return>(n)});
  } else if (cmd == "no_events" && w.size() == 2 && parse_device(w[1], &dev)) {
    for (unsigned i = 0; i < kMaxDevices; ++i)
      if (dev == kAnyDevice || dev == static_cast<int>(i)) st.no_events[i] = true;
  } else if (cmd == "xid" && w.size() >= 3 && parse_device(w[1], &dev) && dev != kAnyDevice &&
             parse_number(w[2], &n) && options_only(3, {"after_waits"})) {
    unsigned long long after = 0;
    if (!option(3, "after_waits", &after)) return bad();
    st.xids.push_back({static_cast<unsigned>(dev), n, after, false});
  } else if (cmd == "wait_error" && w.size() >= 3 && parse_device(w[1], &dev) &&
             dev != kAnyDevice && parse_number(w[2], &n) && options_only(3, {"after_waits"})) {
    unsigned long long after = 0;
    if (!option(3, "after_waits", &after)) return bad();
    st.wait_errors.push_back({static_cast<unsigned>(dev), static_cast<nvml::Return>(n), after});
  } else if (cmd == "events_once" && w.size() == 1) {
    st.events_once = true;
  } else if (cmd == "count_error" && w.size() >= 2 && parse_number(w[1], &n) &&
             options_only(2, {"times"})) {
    unsigned long long times = 1;
    if (!option(2, "times", &times)) return bad();
    st.count_error = static_cast<nvml::Return>(n);
    st.count_error_times = times;
  } else if ((cmd == "nvlink" || cmd == "nvlink5") && w.size() == 3 && parse_device(w[1], &dev) &&
             parse_number(w[2], &n) && n <= 64) {
    for (unsigned i = 0; i < kMaxDevices; ++i) {
      if (dev == kAnyDevice || dev == static_cast<int>(i)) {
        st.nvlinks[i] = static_cast<unsigned>(n);
        st.nvlink5[i] = cmd == "nvlink5";
      }
    }
  } else if (cmd == "nvlink_down" && w.size() == 3 && parse_device(w[1], &dev) &&
             parse_number(w[2], &n)) {
    for (unsigned i = 0; i < kMaxDevices; ++i)
      if (dev == kAnyDevice || dev == static_cast<int>(i))
        st.nvlink_down[{i, static_cast<unsigned>(n)}] = true;
  } else if (cmd == "nvlink_errors" && w.size() == 5 && parse_device(w[1], &dev) &&
             parse_number(w[2], &n)) {
    unsigned long long add = 0;
    if (!parse_number(w[4], &add)) return bad();
    for (unsigned i = 0; i < kMaxDevices; ++i)
      if (dev == kAnyDevice || dev == static_cast<int>(i))
        st.nvlink_errors[{i, static_cast<unsigned>(n), w[3]}] += add;
  } else if (cmd == "c2c" && w.size() == 3 && parse_device(w[1], &dev) && parse_number(w[2], &n)) {
    for (unsigned i = 0; i < kMaxDevices; ++i)
      if (dev == kAnyDevice || dev == static_cast<int>(i))
        st.c2c_links[i] = static_cast<unsigned>(n);
  } else if (cmd == "driver" && w.size() == 2 && w[1].size() < 40 && parse_branch(w[1], &n)) {
    st.driver = w[1];
    st.branch = static_cast<unsigned>(n);
  } else if (cmd == "header" && w.size() == 2 &&
             std::find(nodewatch::testing::nvml_h::kHeaders.begin(),
                       nodewatch::testing::nvml_h::kHeaders.end(),
                       w[1]) != nodewatch::testing::nvml_h::kHeaders.end()) {
    st.header = w[1];
  } else if (cmd == "nvlink_ber" && w.size() == 6 && parse_device(w[1], &dev) &&
             parse_number(w[2], &n) && (w[3] == "effective" || w[3] == "symbol" || w[3] == "raw")) {
    unsigned long long mantissa = 0, exponent = 0;
    if (!parse_number(w[4], &mantissa) || !parse_number(w[5], &exponent) || mantissa > 15 ||
        exponent > 255)
      return bad();
    for (unsigned i = 0; i < kMaxDevices; ++i)
      if (dev == kAnyDevice || dev == static_cast<int>(i))
        st.nvlink_ber[{i, static_cast<unsigned>(n), w[3]}] = mantissa << 8 | exponent;
  } else if (cmd == "repair_pending" && w.size() == 3 && parse_device(w[1], &dev) &&
             (w[2] == "channel" || w[2] == "tpc")) {
    for (unsigned i = 0; i < kMaxDevices; ++i)
      if (dev == kAnyDevice || dev == static_cast<int>(i)) st.repair_pending.insert({i, w[2]});
  } else if (cmd == "p2p_status" && w.size() == 4 && parse_device(w[1], &dev) &&
             dev != kAnyDevice && parse_number(w[2], &n)) {
    unsigned long long code = 0;
    if (!parse_number(w[3], &code)) return bad();
    st.p2p_status[{static_cast<unsigned>(dev), static_cast<unsigned>(n)}] =
        static_cast<unsigned>(code);
  } else if (cmd == "unrepairable" && w.size() == 2 && parse_device(w[1], &dev)) {
    for (unsigned i = 0; i < kMaxDevices; ++i)
      if (dev == kAnyDevice || dev == static_cast<int>(i)) st.unrepairable[i] = true;
  } else if (cmd == "version_unknown" && w.size() == 1) {
    st.version_unknown = true;
  } else if (cmd == "field_value" && w.size() == 5 && parse_device(w[1], &dev)) {
    unsigned long long field = 0, type = 0;
    if (!parse_number(w[2], &field) || !parse_value_type(w[3], &type)) return bad();
    st.field_values.push_back(
        {dev, static_cast<unsigned>(field), static_cast<unsigned>(type), w[4]});
  } else if (cmd == "recovery_action" && w.size() == 3 && parse_device(w[1], &dev) &&
             parse_number(w[2], &n)) {
    for (unsigned i = 0; i < kMaxDevices; ++i)
      if (dev == kAnyDevice || dev == static_cast<int>(i))
        st.recovery_action[i] = static_cast<unsigned>(n);
  } else if (cmd == "remapped_rows" && w.size() == 6 && parse_device(w[1], &dev)) {
    std::array<unsigned, 4> rows{};
    for (std::size_t k = 0; k < 4; ++k) {
      if (!parse_number(w[2 + k], &n)) return bad();
      rows[k] = static_cast<unsigned>(n);
    }
    for (unsigned i = 0; i < kMaxDevices; ++i)
      if (dev == kAnyDevice || dev == static_cast<int>(i)) st.remapped_rows[i] = rows;
  } else if (cmd == "no_gpm" && w.size() == 2 && parse_device(w[1], &dev)) {
    for (unsigned i = 0; i < kMaxDevices; ++i)
      if (dev == kAnyDevice || dev == static_cast<int>(i)) st.no_gpm[i] = true;
  } else if (cmd == "mig" && w.size() >= 2 && w.size() <= 2 + kMaxMigDevices &&
             parse_device(w[1], &dev) && dev != kAnyDevice) {
    std::vector<unsigned> gis;
    for (std::size_t k = 2; k < w.size(); ++k) {
      if (!parse_number(w[k], &n) || n > 14) return bad();
      gis.push_back(static_cast<unsigned>(n));
    }
    st.mig[static_cast<unsigned>(dev)] = std::move(gis);
  } else if (cmd == "processes" && w.size() >= 2 && parse_device(w[1], &dev)) {
    std::vector<FakeProcess> ps;
    for (std::size_t k = 2; k < w.size(); ++k) {
      std::string spec = w[k];
      FakeProcess p{0, nvml::kValueNotAvailable, -1};
      if (const auto at = spec.find('@'); at != std::string::npos) {
        if (!parse_number(spec.substr(at + 1), &n) || n > 14) return bad();
        p.gpu_instance = static_cast<int>(n);
        spec.resize(at);
      }
      if (const auto colon = spec.find(':'); colon != std::string::npos) {
        const std::string mem = spec.substr(colon + 1);
        if (mem != "-") {
          if (!parse_number(mem, &n)) return bad();
          p.memory = n * kMiB;
        }
        spec.resize(colon);
      }
      if (!parse_number(spec, &n) || n == 0 || n > 0xFFFFFFFFull) return bad();
      p.pid = static_cast<unsigned>(n);
      ps.push_back(p);
    }
    for (unsigned i = 0; i < kMaxDevices; ++i)
      if (dev == kAnyDevice || dev == static_cast<int>(i)) st.processes[i] = ps;
  } else if (cmd == "fabric" && w.size() >= 3 && parse_device(w[1], &dev) &&
             parse_number(w[2], &n) && n <= 3 &&
             options_only(3, {"status", "health", "clique", "summary"})) {
    FabricRule f;
    f.state = static_cast<unsigned>(n);
    unsigned long long status = 0;
    if (!option(3, "status", &status) || !option(3, "health", &f.health) ||
        !option(3, "clique", &f.clique) || !option(3, "summary", &f.summary))
      return bad();
    f.status = static_cast<nvml::Return>(status);
    for (unsigned i = 0; i < kMaxDevices; ++i)
      if (dev == kAnyDevice || dev == static_cast<int>(i)) st.fabric[i] = f;
  } else {
    return bad();
  }
  return true;
}

// A fresh state from FAKE_NVML_SCENARIO (or the default, 8 healthy GPUs).
State load_scenario() {
  State st;
  const char* path = std::getenv("FAKE_NVML_SCENARIO");
  if (path == nullptr || *path == '\0') return st;
  st.scenario_path = path;
  std::ifstream in(path);
  if (!in) {
    st.parse_error = std::string("cannot read ") + path;
    return st;
  }
  for (std::string line; std::getline(in, line);)
    if (!apply_line(st, line, &st.parse_error)) break;
  return st;
}

// ---------------------------------------------------------------------------
// The common entry of every device call: counts it, sleeps if a `block`
// says so, and returns the scripted failure if any (else SUCCESS).

bool matches(int rule_device, const std::string& rule_function, unsigned index,
             const char* function, const char* base) {
  return (rule_device == kAnyDevice || rule_device == static_cast<int>(index)) &&
         (rule_function == "*" || rule_function == function || rule_function == base);
}

nvml::Return enter_index(const char* function, const char* base, unsigned index) {
  std::unique_lock lock(g_mu);
  State& st = g_state;
  if (st.init_count == 0) return nvml::kErrorUninitialized;
  if (index >= st.devices) return nvml::kErrorInvalidArgument;
  const unsigned long long prior_device = st.device_calls[index]++;
  const unsigned long long prior_base = st.base_calls[base][index]++;
  ++st.calls[function][index];
  if (st.broken != nvml::kSuccess) return st.broken;

  for (BlockRule& b : st.blocks) {
    if (b.times == 0 || !matches(b.device, b.function, index, function, base)) continue;
    --b.times;
    const unsigned ms = b.ms;
    ++st.blocked;
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    lock.lock();
    --g_state.blocked;
    break;
  }
  State& now = g_state;  // the same object; a new nvmlInit may have reset it meanwhile
  if (now.lost[index] != nvml::kSuccess) return now.lost[index];
  for (const LostRule& r : now.losts) {
    if (r.device != kAnyDevice && r.device != static_cast<int>(index)) continue;
    const bool any = r.function.empty();
    if (!any && r.function != function && r.function != base) continue;
    if ((any ? prior_device : prior_base) < r.after_calls) continue;
    now.lost[index] = r.code;
    return r.code;
  }
  for (const FailRule& r : now.fails)
    if (matches(r.device, r.function, index, function, base) && prior_base >= r.after_calls)
      return r.code;
  return nvml::kSuccess;
}

nvml::Return enter(const char* function, const char* base, nvml::Device dev) {
  const int index = index_of(dev);
  if (index < 0) return nvml::kErrorInvalidArgument;
  return enter_index(function, base, static_cast<unsigned>(index));
}

nvml::Return copy_string(const std::string& s, char* out, unsigned length) {
  if (out == nullptr) return nvml::kErrorInvalidArgument;
  if (s.size() + 1 > length) return nvml::kErrorInsufficientSize;
  std::memcpy(out, s.c_str(), s.size() + 1);
  return nvml::kSuccess;
}

// ---------------------------------------------------------------------------
// The values of device i (see tests/fixtures/nvml/README.md).

std::string uuid_of(unsigned i) {
  std::array<char, 64> b{};
  std::snprintf(b.data(), b.size(), "GPU-00000000-0000-4000-8000-0000000000%02u", i);
  return b.data();
}
unsigned bus_of(unsigned i) {
  return (0x1A + 0x10 * i) & 0xFF;
}
unsigned long long memory_used(unsigned i) {
  return (i + 1ull) * kGiB;
}
// NVLink error counter `type` of link l on device i: derived, plus what
// nvlink_errors added. Legacy counters: (id + 1)(i + l); NVLink5 fields:
// (field - 200)(i + l + 1).
unsigned long long nvlink_error(unsigned i, unsigned l, const std::string& type,
                                unsigned long long derived) {
  auto it = g_state.nvlink_errors.find({i, l, type});
  return derived + (it == g_state.nvlink_errors.end() ? 0 : it->second);
}
#ifndef FAKE_NVML_OLD_DRIVER
// NVLink5 link quality of link l on device i (field id `field`): the bit
// error rates as NVML encodes them (mantissa << 8 | exponent): effective
// (i%9+1)e-15, symbol (l%9+1)e-8, raw (l%9+1)e-6, or `nvlink_ber`; FEC
// history bin b (16-b)*1000*(i+1)+l; PLR blocks 10^9(i+1)+l sent,
// 1000(i+1)+l retried; the data rate 47000 (MB/s, under field 164's 50000).
unsigned long long nvlink_quality(unsigned i, unsigned l, unsigned field) {
  namespace h = nodewatch::testing::nvml_h;
  auto ber = [&](const char* kind, unsigned long long mantissa, unsigned long long exponent) {
    auto it = g_state.nvlink_ber.find({i, l, kind});
    return it != g_state.nvlink_ber.end() ? it->second : mantissa << 8 | exponent;
  };
  if (field == h::fi("NVML_FI_DEV_NVLINK_COUNT_EFFECTIVE_BER"))
    return ber("effective", i % 9 + 1, 15);
  if (field == h::fi("NVML_FI_DEV_NVLINK_COUNT_SYMBOL_BER")) return ber("symbol", l % 9 + 1, 8);
  if (field == h::fi("NVML_FI_DEV_NVLINK_COUNT_RAW_BER_V2")) return ber("raw", l % 9 + 1, 6);
  if (field == h::fi("NVML_FI_DEV_NVLINK_PLR_XMIT_BLOCKS"))
    return nvlink_error(i, l, "xmit_blocks", 1000000000ull * (i + 1) + l);
  if (field == h::fi("NVML_FI_DEV_NVLINK_PLR_XMIT_RETRY_BLOCKS"))
    return nvlink_error(i, l, "xmit_retry_blocks", 1000ull * (i + 1) + l);
  if (field == h::fi("NVML_FI_DEV_NVLINK_GET_DATA_RATE")) return 47000;
  const unsigned bin = field - h::fi("NVML_FI_DEV_NVLINK_COUNT_FEC_HISTORY_0");
  return nvlink_error(i, l, "fec_" + std::to_string(bin), (16ull - bin) * 1000 * (i + 1) + l);
}
#endif
constexpr std::array<const char*, 5> kNvlinkLegacyTypes = {"replay", "recovery", "crc_flit",
                                                           "crc_data", "ecc"};

constexpr unsigned long long kMemoryTotal = 80 * kGiB;
constexpr unsigned long long kMemoryReserved = 512 * kMiB;

void fill_pci(unsigned i, nvml::PciInfo* p, bool legacy) {
  std::memset(p, 0, sizeof *p);
  std::snprintf(p->bus_id_legacy, sizeof p->bus_id_legacy, "0000:%02X:00.0", bus_of(i));
  p->domain = 0;
  p->bus = bus_of(i);
  p->device = 0;
  p->pci_device_id = 0x233010DE;
  p->pci_sub_system_id = 0x16C110DE;
  if (legacy)
    // The oldest drivers had reserved words here: a caller of the v1 symbol
    // must not read busId, so fill it with junk (and no NUL) to prove it.
    std::memset(p->bus_id, 'X', sizeof p->bus_id);
  else
    std::snprintf(p->bus_id, sizeof p->bus_id, "00000000:%02X:00.0", bus_of(i));
}

// FAKE_NVML_INIT_LOG: one line per nvmlInit call, for a test in another
// process.
void log_init() {
  const char* path = std::getenv("FAKE_NVML_INIT_LOG");
  if (path == nullptr || *path == '\0') return;
  if (FILE* f = std::fopen(path, "a")) {
    std::fprintf(f, "nvmlInit %ld\n", static_cast<long>(getpid()));
    std::fclose(f);
  }
}

nvml::Return init() {
  std::lock_guard lock(g_mu);
  log_init();
  State fresh = load_scenario();
  fresh.inits = g_state.inits + 1;
  // events_once: what an earlier session delivered stays delivered, as long
  // as the scenario is the same file (the events happened once on the node).
  if (fresh.events_once && fresh.scenario_path == g_state.scenario_path)
    for (std::size_t i = 0; i < fresh.xids.size() && i < g_state.xids.size(); ++i)
      fresh.xids[i].delivered = g_state.xids[i].delivered;
  // Kept across a restart: calls still sleeping in a block, and event sets a
  // thread of an earlier session may still be waiting on.
  fresh.init_count = g_state.init_count;
  fresh.blocked = g_state.blocked;
  // count_error's "first N calls" span sessions (a driver reload lasts
  // across several nvmlInit), as long as the scenario stays the same.
  if (fresh.scenario_path == g_state.scenario_path) fresh.count_calls = g_state.count_calls;
  fresh.sets = std::move(g_state.sets);
  g_state = std::move(fresh);
  if (!g_state.parse_error.empty()) {
    std::fprintf(stderr, "fake_nvml: %s\n", g_state.parse_error.c_str());
    return nvml::kErrorUnknown;
  }
  if (g_state.init_error != nvml::kSuccess) return g_state.init_error;
  ++g_state.init_count;
  return nvml::kSuccess;
}

// Unused in the build without nvmlDeviceGetCount.
[[maybe_unused]] nvml::Return get_count(const char* function, unsigned* count) {
  if (count == nullptr) return nvml::kErrorInvalidArgument;
  std::lock_guard lock(g_mu);
  if (g_state.init_count == 0) return nvml::kErrorUninitialized;
  ++g_state.calls[function][0];  // a call on no device counts on device 0
  if (g_state.broken != nvml::kSuccess) return g_state.broken;
  if (g_state.count_error != nvml::kSuccess && g_state.count_calls++ < g_state.count_error_times) {
    g_state.broken = g_state.count_error;
    return g_state.count_error;
  }
  *count = g_state.devices;
  return nvml::kSuccess;
}

nvml::Return get_handle(const char* function, unsigned index, nvml::Device* dev) {
  if (dev == nullptr || index >= kMaxDevices) return nvml::kErrorInvalidArgument;
  const nvml::Return rc = enter_index(function, "nvmlDeviceGetHandleByIndex", index);
  if (rc == nvml::kSuccess) *dev = handle(index);
  return rc;
}

nvml::Return get_pci(const char* function, nvml::Device dev, nvml::PciInfo* p, bool legacy) {
  if (p == nullptr) return nvml::kErrorInvalidArgument;
  const nvml::Return rc = enter(function, "nvmlDeviceGetPciInfo", dev);
  if (rc == nvml::kSuccess) fill_pci(dev->index, p, legacy);
  return rc;
}

nvml::Return get_reasons(const char* function, nvml::Device dev, unsigned long long* mask) {
  if (mask == nullptr) return nvml::kErrorInvalidArgument;
  const nvml::Return rc = enter(function, "nvmlDeviceGetCurrentClocksEventReasons", dev);
  if (rc == nvml::kSuccess) *mask = dev->index < 9 ? 1ull << dev->index : 0;
  return rc;
}

#ifndef FAKE_NVML_OLD_DRIVER
// Field ids: NVIDIA's headers', read into tests/fixtures/nvml/field_ids.txt,
// never the backend's (nvml_api.hpp, nvml_fields.cpp), so that an id the
// backend gets wrong is answered with another field's value.
using nodewatch::testing::nvml_h::fi;

// What a driver of `branch` answers for field `id`: what that driver's
// header defines `id` as, or nothing (INVALID_ARGUMENT) when it does not.
enum class Meaning { kUnknown, kDerived, kClockEventNs, kPowerSmoothing };
struct FieldMeaning {
  Meaning meaning;
  unsigned k = 0;  // kClockEventNs: 3, 4, 5 (the multiplier); kPowerSmoothing: its ordinal
};
FieldMeaning meaning_of(unsigned branch, unsigned id) {
  namespace h = nodewatch::testing::nvml_h;
  // (13.2 changed the GPM metric count, which is not modelled: R590 is
  // answered as 13.1.)
  const std::string_view header =
      g_state.header.empty() ? h::header_of_branch(branch) : std::string_view(g_state.header);
  const h::FieldId* f = h::defined(id, header);
  if (f == nullptr) return {Meaning::kUnknown};
  static constexpr std::array<std::string_view, 3> kClockEventTimes = {
      "NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN",
      "NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN",
      "NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN",
  };
  for (unsigned k = 0; k < kClockEventTimes.size(); ++k)
    if (f->name == kClockEventTimes[k]) return {Meaning::kClockEventNs, k + 3};
  // Power smoothing (251-268 in 12.8 and from 13.1, 256-273 in 12.9/13.0):
  // numbered from its first field, ENABLED.
  if (f->name.starts_with("NVML_FI_PWR_SMOOTHING_"))
    return {Meaning::kPowerSmoothing, id - h::id_in("NVML_FI_PWR_SMOOTHING_ENABLED", header) + 1};
  return {Meaning::kDerived};
}

template <typename Ull, typename Ui>
void fill_derived(unsigned i, nvml::FieldValue& f, unsigned links, unsigned link, const Ull& ull,
                  const Ui& ui);

// Fills one field of nvmlDeviceGetFieldValues for device i.
void fill_field(unsigned i, nvml::FieldValue& f) {
  f.timestamp = 1700000000000000;
  f.latency_usec = 0;
  f.nvml_return = nvml::kSuccess;
  auto ull = [&f](unsigned long long v) {
    f.value_type = nvml::kValueTypeUnsignedLongLong;
    f.value.ull_val = v;
  };
  auto ui = [&f](unsigned v) {
    f.value_type = nvml::kValueTypeUnsignedInt;
    f.value.ui_val = v;
  };
  const unsigned links = g_state.c2c_links[i];
  const unsigned link = f.scope_id;
  const FieldMeaning m = meaning_of(g_state.branch, f.field_id);
  switch (m.meaning) {
    case Meaning::kUnknown: f.nvml_return = nvml::kErrorInvalidArgument; break;
    case Meaning::kClockEventNs: ull((i + 1ull) * m.k * 1000000000ull); break;
    // Power smoothing: flags and small settings, as unsigned ints.
    case Meaning::kPowerSmoothing: ui(m.k); break;
    case Meaning::kDerived: fill_derived(i, f, links, link, ull, ui); break;
  }
  for (const FieldFailRule& r : g_state.field_fails)
    if ((r.device == kAnyDevice || r.device == static_cast<int>(i)) && r.field == f.field_id)
      f.nvml_return = r.code;
  for (const FieldValueRule& r : g_state.field_values) {
    if ((r.device != kAnyDevice && r.device != static_cast<int>(i)) || r.field != f.field_id)
      continue;
    f.nvml_return = nvml::kSuccess;
    f.value_type = r.type;
    f.value.ull_val = 0;
    switch (r.type) {
      case nvml::kValueTypeDouble: f.value.d_val = std::strtod(r.value.c_str(), nullptr); break;
      case nvml::kValueTypeSignedInt:
        f.value.si_val = static_cast<int>(std::strtol(r.value.c_str(), nullptr, 10));
        break;
      case nvml::kValueTypeSignedLongLong:
        f.value.sll_val = std::strtoll(r.value.c_str(), nullptr, 10);
        break;
      case nvml::kValueTypeUnsignedInt:
      case nvml::kValueTypeUnsignedShort:
        f.value.ui_val = static_cast<unsigned>(std::strtoul(r.value.c_str(), nullptr, 10));
        if (r.type == nvml::kValueTypeUnsignedShort)
          f.value.us_val = static_cast<unsigned short>(f.value.ui_val);
        break;
      default: f.value.ull_val = std::strtoull(r.value.c_str(), nullptr, 10); break;
    }
  }
}

// The value of a field whose meaning never moved, derived from device i.
template <typename Ull, typename Ui>
void fill_derived(unsigned i, nvml::FieldValue& f, unsigned links, unsigned link, const Ull& ull,
                  const Ui& ui) {
  switch (f.field_id) {
    case fi("NVML_FI_DEV_PERF_POLICY_POWER"): ull((i + 1ull) * 1000000000ull); break;
    case fi("NVML_FI_DEV_PERF_POLICY_SYNC_BOOST"): ull((i + 1ull) * 2000000000ull); break;
    case fi("NVML_FI_DEV_GET_GPU_RECOVERY_ACTION"): ui(g_state.recovery_action[i]); break;
    case fi("NVML_FI_DEV_MEMORY_TEMP"):
      f.value_type = nvml::kValueTypeSignedInt;
      f.value.si_val = static_cast<int>(40 + i);
      break;
    case fi("NVML_FI_DEV_PCIE_COUNT_TX_BYTES"): ull(1000000000000ull + i * 1000000000ull); break;
    case fi("NVML_FI_DEV_PCIE_COUNT_RX_BYTES"): ull(2000000000000ull + i * 1000000000ull); break;
    case fi("NVML_FI_DEV_C2C_LINK_COUNT"):
      if (links == 0)
        f.nvml_return = nvml::kErrorNotSupported;
      else
        ui(links);
      break;
    case fi("NVML_FI_DEV_C2C_LINK_GET_STATUS"):
    case fi("NVML_FI_DEV_C2C_LINK_GET_MAX_BW"):
    case fi("NVML_FI_DEV_C2C_LINK_ERROR_INTR"):
    case fi("NVML_FI_DEV_C2C_LINK_ERROR_REPLAY"):
    case fi("NVML_FI_DEV_C2C_LINK_ERROR_REPLAY_B2B"):
    case fi("NVML_FI_DEV_C2C_LINK_POWER_STATE"):
      if (link >= links)
        f.nvml_return = links == 0 ? nvml::kErrorNotSupported : nvml::kErrorInvalidArgument;
      else if (f.field_id == fi("NVML_FI_DEV_C2C_LINK_GET_STATUS"))
        ui(link % 2 == 0 ? 1 : 0);
      else if (f.field_id == fi("NVML_FI_DEV_C2C_LINK_GET_MAX_BW"))
        ui(45000 + 100 * link);
      else if (f.field_id == fi("NVML_FI_DEV_C2C_LINK_ERROR_INTR"))
        ull(i + link);
      else if (f.field_id == fi("NVML_FI_DEV_C2C_LINK_ERROR_REPLAY"))
        ull(10ull * link);
      else if (f.field_id == fi("NVML_FI_DEV_C2C_LINK_ERROR_REPLAY_B2B"))
        ull(i + 2ull * link);
      else
        ui(link % 2);  // low power (1) on the inactive links
      break;
    case fi("NVML_FI_DEV_NVLINK_LINK_COUNT"):
      if (g_state.nvlinks[i] == 0)
        f.nvml_return = nvml::kErrorNotSupported;
      else
        ui(g_state.nvlinks[i]);
      break;
    case fi("NVML_FI_DEV_NVLINK_GET_SPEED"):
    case fi("NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX"):
    case fi("NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX"):
      if (link >= g_state.nvlinks[i])
        f.nvml_return = nvml::kErrorNotSupported;
      else if (f.field_id == fi("NVML_FI_DEV_NVLINK_GET_SPEED"))
        ui(g_state.nvlink5[i] ? 50000 : 25000);
      else
        ull((f.field_id == fi("NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX") ? 1000ull : 2000ull) *
                (i + 1) +
            link);
      break;
    case fi("NVML_FI_DEV_NVLINK_COUNT_EFFECTIVE_BER"):
    case fi("NVML_FI_DEV_NVLINK_COUNT_SYMBOL_BER"):
    case fi("NVML_FI_DEV_NVLINK_COUNT_RAW_BER_V2"):
    case fi("NVML_FI_DEV_NVLINK_COUNT_FEC_HISTORY_0"):
    case fi("NVML_FI_DEV_NVLINK_COUNT_FEC_HISTORY_1"):
    case fi("NVML_FI_DEV_NVLINK_COUNT_FEC_HISTORY_2"):
    case fi("NVML_FI_DEV_NVLINK_COUNT_FEC_HISTORY_3"):
    case fi("NVML_FI_DEV_NVLINK_COUNT_FEC_HISTORY_4"):
    case fi("NVML_FI_DEV_NVLINK_COUNT_FEC_HISTORY_5"):
    case fi("NVML_FI_DEV_NVLINK_COUNT_FEC_HISTORY_6"):
    case fi("NVML_FI_DEV_NVLINK_COUNT_FEC_HISTORY_7"):
    case fi("NVML_FI_DEV_NVLINK_COUNT_FEC_HISTORY_8"):
    case fi("NVML_FI_DEV_NVLINK_COUNT_FEC_HISTORY_9"):
    case fi("NVML_FI_DEV_NVLINK_COUNT_FEC_HISTORY_10"):
    case fi("NVML_FI_DEV_NVLINK_COUNT_FEC_HISTORY_11"):
    case fi("NVML_FI_DEV_NVLINK_COUNT_FEC_HISTORY_12"):
    case fi("NVML_FI_DEV_NVLINK_COUNT_FEC_HISTORY_13"):
    case fi("NVML_FI_DEV_NVLINK_COUNT_FEC_HISTORY_14"):
    case fi("NVML_FI_DEV_NVLINK_COUNT_FEC_HISTORY_15"):
    case fi("NVML_FI_DEV_NVLINK_PLR_XMIT_BLOCKS"):
    case fi("NVML_FI_DEV_NVLINK_PLR_XMIT_RETRY_BLOCKS"):
    case fi("NVML_FI_DEV_NVLINK_GET_DATA_RATE"):
      // Link quality: on an "nvlink5" device; a Hopper ("nvlink") has the
      // ids (from the header that defines them) but not the counters.
      if (!g_state.nvlink5[i] || link >= g_state.nvlinks[i])
        f.nvml_return = nvml::kErrorNotSupported;
      else
        ull(nvlink_quality(i, link, f.field_id));
      break;
    default: {
      // NVLink5 counters, only on an "nvlink5" device; a driver without them
      // does not know the ids.
      struct Nvlink5 {
        unsigned field;
        const char* type;  // null: a byte counter
      };
      static constexpr std::array<Nvlink5, 13> kNvlink5 = {{
          {fi("NVML_FI_DEV_NVLINK_COUNT_XMIT_BYTES"), nullptr},
          {fi("NVML_FI_DEV_NVLINK_COUNT_RCV_BYTES"), nullptr},
          {fi("NVML_FI_DEV_NVLINK_COUNT_SYMBOL_ERRORS"), "symbol"},
          {fi("NVML_FI_DEV_NVLINK_COUNT_EFFECTIVE_ERRORS"), "effective"},
          {fi("NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_EVENTS"), "recovery"},
          {fi("NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_FAILED_EVENTS"), "recovery_failed"},
          {fi("NVML_FI_DEV_NVLINK_COUNT_MALFORMED_PACKET_ERRORS"), "malformed_packet"},
          {fi("NVML_FI_DEV_NVLINK_COUNT_BUFFER_OVERRUN_ERRORS"), "buffer_overrun"},
          {fi("NVML_FI_DEV_NVLINK_COUNT_RCV_ERRORS"), "receive"},
          {fi("NVML_FI_DEV_NVLINK_COUNT_RCV_REMOTE_ERRORS"), "receive_remote"},
          {fi("NVML_FI_DEV_NVLINK_COUNT_RCV_GENERAL_ERRORS"), "receive_general"},
          {fi("NVML_FI_DEV_NVLINK_COUNT_LOCAL_LINK_INTEGRITY_ERRORS"), "local_link_integrity"},
          {fi("NVML_FI_DEV_NVLINK_COUNT_XMIT_DISCARDS"), "transmit_discard"},
      }};
      const Nvlink5* known = nullptr;
      for (const Nvlink5& n : kNvlink5)
        if (n.field == f.field_id) known = &n;
      if (known == nullptr || !g_state.nvlink5[i]) {
        // A field id this "driver" does not know, as a real one answers it.
        f.nvml_return = nvml::kErrorInvalidArgument;
      } else if (link >= g_state.nvlinks[i]) {
        f.nvml_return = nvml::kErrorNotSupported;
      } else if (known->type == nullptr) {
        ull((f.field_id == fi("NVML_FI_DEV_NVLINK_COUNT_XMIT_BYTES") ? 1000000000ull
                                                                     : 2000000000ull) *
                (i + 1) +
            link);
      } else {
        ull(nvlink_error(i, link, known->type, (f.field_id - 200ull) * (i + link + 1)));
      }
      break;
    }
  }
}
#endif

nvml::Return wait_event(nvml::EventSet set, nvml::EventData* data, unsigned timeout_ms, bool v2) {
  if (set == nullptr || data == nullptr) return nvml::kErrorInvalidArgument;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  unsigned long long wait_number = 0;
  {
    std::lock_guard lock(g_mu);
    wait_number = ++g_state.waits;
  }
  // Returns as soon as an event is due (as NVML does), else at the timeout.
  // A due wait_error on a device registered in this set comes first.
  for (;;) {
    {
      std::lock_guard lock(g_mu);
      for (const WaitErrorRule& r : g_state.wait_errors)
        if (wait_number > r.after_waits && set->registered[r.device]) return r.code;
      for (PendingXid& x : g_state.xids) {
        if (x.delivered || wait_number <= x.after_waits || !set->registered[x.device]) continue;
        x.delivered = true;
        nvml::EventData e{};
        e.device = handle(x.device);
        e.event_type = nvml::kEventTypeXidCriticalError;
        e.event_data = x.code;
        e.gpu_instance_id = 0xFFFFFFFF;
        e.compute_instance_id = 0xFFFFFFFF;
        // v1's nvmlEventData_t ends before the instance ids.
        std::memcpy(data, &e, v2 ? sizeof e : offsetof(nvml::EventData, gpu_instance_id));
        return nvml::kSuccess;
      }
    }
    if (std::chrono::steady_clock::now() >= until) return nvml::kErrorTimeout;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace

// ---------------------------------------------------------------------------
// The NVML ABI.

FAKE_NVML_EXPORT nvml::Return nvmlInit() {
  return init();
}
FAKE_NVML_EXPORT nvml::Return nvmlShutdown() {
  std::lock_guard lock(g_mu);
  // Extra shutdowns are not an error (NVML counts inits).
  if (g_state.init_count > 0) --g_state.init_count;
  return nvml::kSuccess;
}

FAKE_NVML_EXPORT const char* nvmlErrorString(nvml::Return rc) {
  switch (rc) {
    case nvml::kSuccess: return "Success";
    case nvml::kErrorUninitialized: return "Uninitialized";
    case nvml::kErrorInvalidArgument: return "Invalid Argument";
    case nvml::kErrorNotSupported: return "Not Supported";
    case nvml::kErrorNoPermission: return "Insufficient Permissions";
    case nvml::kErrorDriverNotLoaded: return "Driver Not Loaded";
    case nvml::kErrorTimeout: return "Timeout";
    case nvml::kErrorGpuIsLost: return "GPU is lost";
    case nvml::kErrorResetRequired: return "GPU requires reset";
    case nvml::kErrorLibRmVersionMismatch: return "RM has detected an NVML/RM version mismatch";
    default: return "Unknown Error";
  }
}

FAKE_NVML_EXPORT nvml::Return nvmlSystemGetDriverVersion(char* version, unsigned length) {
  {
    std::lock_guard lock(g_mu);
    if (g_state.init_count == 0) return nvml::kErrorUninitialized;
  }
  std::string driver;
  {
    std::lock_guard lock(g_mu);
    if (g_state.version_unknown) return nvml::kErrorNotSupported;
    driver = g_state.driver;
  }
  return copy_string(driver, version, length);
}

// "13.580.65.06": the CUDA major version the driver branch came with (13
// from R580, 12 before), then the driver version.
// Answered before nvmlInit too, as NVIDIA's libraries answer it (535, 550
// and 555 of Debian's archive, loaded without a driver: init 9, this call
// 0): the version is the library's, not the driver's; the scenario names it.
FAKE_NVML_EXPORT nvml::Return nvmlSystemGetNVMLVersion(char* version, unsigned length) {
  std::string v;
  {
    std::lock_guard lock(g_mu);
    State before_init;
    if (g_state.init_count == 0) before_init = load_scenario();
    const State& st = g_state.init_count == 0 ? before_init : g_state;
    if (st.version_unknown) return nvml::kErrorNotSupported;
    v = (st.branch >= 580 ? "13." : "12.") + st.driver;
  }
  return copy_string(v, version, length);
}

#ifndef FAKE_NVML_NO_DEVICE_COUNT
FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetCount(unsigned* count) {
  return get_count(__func__, count);
}
#endif

FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetHandleByIndex(unsigned index, nvml::Device* dev) {
  return get_handle(__func__, index, dev);
}

FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetUUID(nvml::Device dev, char* uuid, unsigned length) {
  if (const nvml::DeviceSt* m = mig_of(dev)) {
    // A MIG device: MIG-...-<device><slot>.
    const auto slot = static_cast<unsigned>(m - &g_mig_devices[m->index][0]);
    std::array<char, 64> b{};
    std::snprintf(b.data(), b.size(), "MIG-00000000-0000-4000-9000-00000000%02u%02u", m->index,
                  slot);
    return copy_string(b.data(), uuid, length);
  }
  const nvml::Return rc = enter(__func__, __func__, dev);
  return rc != nvml::kSuccess ? rc : copy_string(uuid_of(dev->index), uuid, length);
}

FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetName(nvml::Device dev, char* name, unsigned length) {
  const nvml::Return rc = enter(__func__, __func__, dev);
  return rc != nvml::kSuccess ? rc : copy_string("NVIDIA H100 80GB HBM3", name, length);
}

FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetSerial(nvml::Device dev, char* serial, unsigned length) {
  const nvml::Return rc = enter(__func__, __func__, dev);
  return rc != nvml::kSuccess
             ? rc
             : copy_string(std::to_string(1650000000000ull + dev->index), serial, length);
}

// The form of H100 SXM5 boards' VBIOS versions.
FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetVbiosVersion(nvml::Device dev, char* version,
                                                        unsigned length) {
  const nvml::Return rc = enter(__func__, __func__, dev);
  return rc != nvml::kSuccess ? rc : copy_string("96.00.99.00.01", version, length);
}

FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetPciInfo(nvml::Device dev, nvml::PciInfo* pci) {
  return get_pci(__func__, dev, pci, true);
}

// Utilization: gpu 10i+5 %, memory 3i+1 %.
FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetUtilizationRates(nvml::Device dev,
                                                            nvml::Utilization* u) {
  if (u == nullptr) return nvml::kErrorInvalidArgument;
  const nvml::Return rc = enter(__func__, __func__, dev);
  if (rc != nvml::kSuccess) return rc;
  {
    std::lock_guard lock(g_mu);
    // "Not supported on MIG-enabled GPUs".
    if (!g_state.mig[dev->index].empty()) return nvml::kErrorNotSupported;
  }
  *u = {10 * dev->index + 5, 3 * dev->index + 1};
  return rc;
}

// v1: used includes the driver's reserved memory.
FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetMemoryInfo(nvml::Device dev, nvml::Memory* m) {
  if (m == nullptr) return nvml::kErrorInvalidArgument;
  const nvml::Return rc = enter(__func__, "nvmlDeviceGetMemoryInfo", dev);
  if (rc != nvml::kSuccess) return rc;
  const unsigned long long used = memory_used(dev->index) + kMemoryReserved;
  *m = {kMemoryTotal, kMemoryTotal - used, used};
  return rc;
}

// GPU temperature 30+i °C.
FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetTemperature(nvml::Device dev, unsigned sensor,
                                                       unsigned* temp) {
  if (temp == nullptr || sensor != nvml::kTemperatureGpu) return nvml::kErrorInvalidArgument;
  const nvml::Return rc = enter(__func__, "nvmlDeviceGetTemperature", dev);
  if (rc == nvml::kSuccess) *temp = 30 + dev->index;
  return rc;
}

// Slowdown threshold 80+i °C; shutdown 95 °C.
FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetTemperatureThreshold(nvml::Device dev,
                                                                unsigned threshold,
                                                                unsigned* temp) {
  if (temp == nullptr) return nvml::kErrorInvalidArgument;
  const nvml::Return rc = enter(__func__, __func__, dev);
  if (rc != nvml::kSuccess) return rc;
  if (threshold == nvml::kTemperatureThresholdSlowdown)
    *temp = 80 + dev->index;
  else if (threshold == 0)
    *temp = 95;
  else
    return nvml::kErrorNotSupported;
  return rc;
}

// Power 100250+1000i mW.
FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetPowerUsage(nvml::Device dev, unsigned* mw) {
  if (mw == nullptr) return nvml::kErrorInvalidArgument;
  const nvml::Return rc = enter(__func__, __func__, dev);
  if (rc == nvml::kSuccess) *mw = 100250 + 1000 * dev->index;
  return rc;
}

// Enforced limit 700000-10000i mW.
FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetEnforcedPowerLimit(nvml::Device dev, unsigned* mw) {
  if (mw == nullptr) return nvml::kErrorInvalidArgument;
  const nvml::Return rc = enter(__func__, __func__, dev);
  if (rc == nvml::kSuccess) *mw = 700000 - 10000 * dev->index;
  return rc;
}

// Energy 5e9+1000i mJ.
FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetTotalEnergyConsumption(nvml::Device dev,
                                                                  unsigned long long* mj) {
  if (mj == nullptr) return nvml::kErrorInvalidArgument;
  const nvml::Return rc = enter(__func__, __func__, dev);
  if (rc == nvml::kSuccess) *mj = 5000000000ull + 1000ull * dev->index;
  return rc;
}

// Clocks: graphics 1700+i, sm 1800+i, memory 2600+i MHz.
FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetClockInfo(nvml::Device dev, unsigned type,
                                                     unsigned* mhz) {
  if (mhz == nullptr) return nvml::kErrorInvalidArgument;
  const nvml::Return rc = enter(__func__, __func__, dev);
  if (rc != nvml::kSuccess) return rc;
  switch (type) {
    case nvml::kClockGraphics: *mhz = 1700 + dev->index; break;
    case nvml::kClockSm: *mhz = 1800 + dev->index; break;
    case nvml::kClockMem: *mhz = 2600 + dev->index; break;
    default: return nvml::kErrorNotSupported;
  }
  return rc;
}

// Reasons: bit i set on device i (i < 9).
FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetCurrentClocksThrottleReasons(nvml::Device dev,
                                                                        unsigned long long* r) {
  return get_reasons(__func__, dev, r);
}

// ECC: volatile corrected 10i, uncorrected i; aggregate 100 times those.
FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetTotalEccErrors(nvml::Device dev, unsigned error_type,
                                                          unsigned counter_type,
                                                          unsigned long long* count) {
  if (count == nullptr || error_type > 1 || counter_type > 1) return nvml::kErrorInvalidArgument;
  const nvml::Return rc = enter(__func__, __func__, dev);
  if (rc != nvml::kSuccess) return rc;
  const unsigned long long v =
      error_type == nvml::kMemoryErrorCorrected ? 10ull * dev->index : dev->index;
  *count = counter_type == nvml::kEccCounterVolatile ? v : 100 * v;
  return rc;
}

// Remapped rows: correctable i, uncorrectable i%3, pending i%2, failed i==7,
// unless the scenario's remapped_rows says otherwise.
FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetRemappedRows(nvml::Device dev, unsigned* corr,
                                                        unsigned* unc, unsigned* pending,
                                                        unsigned* failed) {
  if (corr == nullptr || unc == nullptr || pending == nullptr || failed == nullptr)
    return nvml::kErrorInvalidArgument;
  const nvml::Return rc = enter(__func__, __func__, dev);
  if (rc != nvml::kSuccess) return rc;
  if (const auto& rows = g_state.remapped_rows[dev->index]) {
    *corr = (*rows)[0];
    *unc = (*rows)[1];
    *pending = (*rows)[2];
    *failed = (*rows)[3];
    return rc;
  }
  *corr = dev->index;
  *unc = dev->index % 3;
  *pending = dev->index % 2;
  *failed = dev->index == 7 ? 1 : 0;
  return rc;
}

// PCIe replays 100+i.
FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetPcieReplayCounter(nvml::Device dev, unsigned* n) {
  if (n == nullptr) return nvml::kErrorInvalidArgument;
  const nvml::Return rc = enter(__func__, __func__, dev);
  if (rc == nvml::kSuccess) *n = 100 + dev->index;
  return rc;
}

// The PCIe link now: generation 5, 16 lanes (as tests/hardware's
// fake-nvidia-smi and sysfs tree have it).
FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetCurrPcieLinkGeneration(nvml::Device dev,
                                                                  unsigned* generation) {
  if (generation == nullptr) return nvml::kErrorInvalidArgument;
  const nvml::Return rc = enter(__func__, __func__, dev);
  if (rc == nvml::kSuccess) *generation = 5;
  return rc;
}

FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetCurrPcieLinkWidth(nvml::Device dev, unsigned* width) {
  if (width == nullptr) return nvml::kErrorInvalidArgument;
  const nvml::Return rc = enter(__func__, __func__, dev);
  if (rc == nvml::kSuccess) *width = 16;
  return rc;
}

// Throughput: tx 1000+i, rx 2000+i KB/s. Like NVML, it samples for 20 ms.
FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetPcieThroughput(nvml::Device dev, unsigned counter,
                                                          unsigned* kb) {
  if (kb == nullptr || counter > nvml::kPcieUtilRxBytes) return nvml::kErrorInvalidArgument;
  const nvml::Return rc = enter(__func__, __func__, dev);
  if (rc != nvml::kSuccess) return rc;
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  *kb = (counter == nvml::kPcieUtilTxBytes ? 1000 : 2000) + dev->index;
  return rc;
}

FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetNvLinkState(nvml::Device dev, unsigned link,
                                                       unsigned* is_active) {
  if (is_active == nullptr) return nvml::kErrorInvalidArgument;
  const nvml::Return rc = enter(__func__, __func__, dev);
  if (rc != nvml::kSuccess) return rc;
  std::lock_guard lock(g_mu);
  const unsigned links = g_state.nvlinks[dev->index];
  if (links == 0) return nvml::kErrorNotSupported;
  if (link >= links) return nvml::kErrorInvalidArgument;
  *is_active = g_state.nvlink_down.count({dev->index, link}) != 0 ? 0 : 1;
  return nvml::kSuccess;
}

FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetNvLinkErrorCounter(nvml::Device dev, unsigned link,
                                                              unsigned counter,
                                                              unsigned long long* value) {
  if (value == nullptr || counter >= kNvlinkLegacyTypes.size()) return nvml::kErrorInvalidArgument;
  const nvml::Return rc = enter(__func__, __func__, dev);
  if (rc != nvml::kSuccess) return rc;
  std::lock_guard lock(g_mu);
  const unsigned i = dev->index;
  const unsigned links = g_state.nvlinks[i];
  // Blackwell and later: this call is not supported; the NVLink5 fields are.
  if (links == 0 || g_state.nvlink5[i]) return nvml::kErrorNotSupported;
  if (link >= links) return nvml::kErrorInvalidArgument;
  *value = nvlink_error(i, link, kNvlinkLegacyTypes[counter], (counter + 1ull) * (i + link));
  return nvml::kSuccess;
}

FAKE_NVML_EXPORT nvml::Return nvmlEventSetCreate(nvml::EventSet* set) {
  if (set == nullptr) return nvml::kErrorInvalidArgument;
  std::lock_guard lock(g_mu);
  if (g_state.init_count == 0) return nvml::kErrorUninitialized;
  g_state.sets.push_back(std::make_unique<nvml::EventSetSt>());
  *set = g_state.sets.back().get();
  return nvml::kSuccess;
}

FAKE_NVML_EXPORT nvml::Return nvmlDeviceRegisterEvents(nvml::Device dev, unsigned long long types,
                                                       nvml::EventSet set) {
  if (set == nullptr) return nvml::kErrorInvalidArgument;
  const nvml::Return rc = enter(__func__, __func__, dev);
  if (rc != nvml::kSuccess) return rc;
  std::lock_guard lock(g_mu);
  if (g_state.no_events[dev->index]) return nvml::kErrorNotSupported;
  if ((types & nvml::kEventTypeXidCriticalError) != 0) set->registered[dev->index] = true;
  return nvml::kSuccess;
}

FAKE_NVML_EXPORT nvml::Return nvmlEventSetWait(nvml::EventSet set, nvml::EventData* data,
                                               unsigned timeout_ms) {
  return wait_event(set, data, timeout_ms, false);
}

FAKE_NVML_EXPORT nvml::Return nvmlEventSetFree(nvml::EventSet set) {
  std::lock_guard lock(g_mu);
  auto& sets = g_state.sets;
  auto it = std::find_if(sets.begin(), sets.end(), [&](const auto& s) { return s.get() == set; });
  // A set from before the last nvmlInit is already gone with that state.
  if (it != sets.end()) sets.erase(it);
  return nvml::kSuccess;
}

#ifndef FAKE_NVML_OLD_DRIVER
FAKE_NVML_EXPORT nvml::Return nvmlInit_v2() {
  return init();
}

#ifndef FAKE_NVML_NO_DEVICE_COUNT
FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetCount_v2(unsigned* count) {
  return get_count(__func__, count);
}
#endif

FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetHandleByIndex_v2(unsigned index, nvml::Device* dev) {
  return get_handle(__func__, index, dev);
}

FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetPciInfo_v2(nvml::Device dev, nvml::PciInfo* pci) {
  return get_pci(__func__, dev, pci, false);
}

FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetPciInfo_v3(nvml::Device dev, nvml::PciInfo* pci) {
  return get_pci(__func__, dev, pci, false);
}

// v2: total 80 GiB, reserved 512 MiB, used (i+1) GiB, free the rest.
FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetMemoryInfo_v2(nvml::Device dev, nvml::MemoryV2* m) {
  if (m == nullptr) return nvml::kErrorInvalidArgument;
  if (m->version != nvml::kMemoryV2Version) return 25;  // ARGUMENT_VERSION_MISMATCH
  const nvml::Return rc = enter(__func__, "nvmlDeviceGetMemoryInfo", dev);
  if (rc != nvml::kSuccess) return rc;
  const unsigned long long used = memory_used(dev->index);
  m->total = kMemoryTotal;
  m->reserved = kMemoryReserved;
  m->used = used;
  m->free = kMemoryTotal - kMemoryReserved - used;
  return rc;
}

FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetTemperatureV(nvml::Device dev, nvml::TemperatureV1* t) {
  if (t == nullptr) return nvml::kErrorInvalidArgument;
  if (t->version != nvml::kTemperatureV1Version) return 25;  // ARGUMENT_VERSION_MISMATCH
  if (t->sensor_type != nvml::kTemperatureGpu) return nvml::kErrorInvalidArgument;
  const nvml::Return rc = enter(__func__, "nvmlDeviceGetTemperature", dev);
  if (rc == nvml::kSuccess) t->temperature = static_cast<int>(30 + dev->index);
  return rc;
}

namespace {

// enter() for a call that drivers before `branch` lack: NOT_SUPPORTED on
// those (nodewatch exports the same for a symbol missing and for this).
nvml::Return enter_since(const char* function, nvml::Device dev, unsigned branch) {
  const nvml::Return rc = enter(function, function, dev);
  if (rc != nvml::kSuccess) return rc;
  std::lock_guard lock(g_mu);
  return g_state.branch < branch ? nvml::kErrorNotSupported : nvml::kSuccess;
}

}  // namespace

// A GB200 NVL72-like placement: chassis "1821225000123", four GPUs a tray,
// tray i/4 in slot 2+i/4, host 0, module i%4+1. Drivers before R570 (NVML
// 12.8) have no such call: NOT_SUPPORTED there.
FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetPlatformInfo(nvml::Device dev, nvml::PlatformInfoV2* p) {
  if (p == nullptr) return nvml::kErrorInvalidArgument;
  if (p->version != nvml::kPlatformInfoV2Version) return 25;  // ARGUMENT_VERSION_MISMATCH
  const nvml::Return rc = enter_since(__func__, dev, 570);
  if (rc != nvml::kSuccess) return rc;
  const char serial[] = "1821225000123";
  std::memset(p->chassis_serial, 0, sizeof p->chassis_serial);
  std::memcpy(p->chassis_serial, serial, sizeof serial - 1);
  p->slot_number = static_cast<unsigned char>(2 + dev->index / 4);
  p->tray_index = static_cast<unsigned char>(dev->index / 4);
  p->host_id = 0;
  p->module_id = static_cast<unsigned char>(dev->index % 4 + 1);
  return rc;
}

// P2P over NVLink (index 2): OK (0) between two devices with NVLink links
// of which at least one is active each, NOT_SUPPORTED (5) otherwise, or
// what `p2p_status DEV PEER CODE` says (for that order of the two); the
// other capabilities: OK.
FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetP2PStatus(nvml::Device a, nvml::Device b, unsigned index,
                                                     unsigned* status) {
  if (b == nullptr || status == nullptr) return nvml::kErrorInvalidArgument;
  const nvml::Return rc = enter(__func__, __func__, a);
  if (rc != nvml::kSuccess) return rc;
  std::lock_guard lock(g_mu);
  auto linked = [](unsigned i) {
    for (unsigned l = 0; l < g_state.nvlinks[i]; ++l)
      if (!g_state.nvlink_down.contains({i, l})) return true;
    return false;
  };
  *status = 0;
  if (index == 2) {
    auto it = g_state.p2p_status.find({a->index, b->index});
    if (it != g_state.p2p_status.end())
      *status = it->second;
    else if (!linked(a->index) || !linked(b->index))
      *status = 5;
  }
  return nvml::kSuccess;
}

// No repair pending unless `repair_pending` says so. Drivers before R580
// (NVML 13.0) have no such call: NOT_SUPPORTED there.
FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetRepairStatus(nvml::Device dev, nvml::RepairStatusV1* r) {
  if (r == nullptr) return nvml::kErrorInvalidArgument;
  if (r->version != nvml::kRepairStatusV1Version) return 25;  // ARGUMENT_VERSION_MISMATCH
  const nvml::Return rc = enter_since(__func__, dev, 580);
  if (rc != nvml::kSuccess) return rc;
  std::lock_guard lock(g_mu);
  r->channel_repair_pending = g_state.repair_pending.contains({dev->index, "channel"}) ? 1 : 0;
  r->tpc_repair_pending = g_state.repair_pending.contains({dev->index, "tpc"}) ? 1 : 0;
  return rc;
}

// 0 unless `unrepairable` says so; before R590 (NVML 13.1), NOT_SUPPORTED.
FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetUnrepairableMemoryFlag_v1(
    nvml::Device dev, nvml::UnrepairableMemoryStatusV1* u) {
  if (u == nullptr) return nvml::kErrorInvalidArgument;
  const nvml::Return rc = enter_since(__func__, dev, 590);
  if (rc != nvml::kSuccess) return rc;
  std::lock_guard lock(g_mu);
  u->unrepairable_memory = g_state.unrepairable[dev->index] ? 1 : 0;
  return rc;
}

// 45-i °C: nearer than the GPU's own slowdown (80+i, at 30+i: 50), as a
// driver that counts memory's threshold too may say. Drivers before R570
// (NVML 12.8) have no such call: NOT_SUPPORTED there.
FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetMarginTemperature(nvml::Device dev,
                                                             nvml::MarginTemperatureV1* m) {
  if (m == nullptr) return nvml::kErrorInvalidArgument;
  if (m->version != nvml::kMarginTemperatureV1Version) return 25;  // ARGUMENT_VERSION_MISMATCH
  const nvml::Return rc = enter_since(__func__, dev, 570);
  if (rc != nvml::kSuccess) return rc;
  m->margin = 45 - static_cast<int>(dev->index);
  return rc;
}

FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetCurrentClocksEventReasons(nvml::Device dev,
                                                                     unsigned long long* r) {
  return get_reasons(__func__, dev, r);
}

FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetFieldValues(nvml::Device dev, int count,
                                                       nvml::FieldValue* values) {
  if (count < 0 || (count > 0 && values == nullptr)) return nvml::kErrorInvalidArgument;
  const nvml::Return rc = enter(__func__, __func__, dev);
  if (rc != nvml::kSuccess) return rc;
  std::lock_guard lock(g_mu);
  for (int k = 0; k < count; ++k) {
    ++g_state.field_asks[values[k].field_id][dev->index];
    fill_field(dev->index, values[k]);
  }
  return rc;
}

FAKE_NVML_EXPORT nvml::Return nvmlEventSetWait_v2(nvml::EventSet set, nvml::EventData* data,
                                                  unsigned timeout_ms) {
  return wait_event(set, data, timeout_ms, true);
}

// ---------------------------------------------------------------------------
// GPM. Supported on every device but a `no_gpm` one. The whole device of a
// MIG-enabled GPU answers NOT_SUPPORTED; its GPU instances answer through
// nvmlGpmMigSampleGet. A metric over samples a and b (a taken before b, of
// the same device or GPU instance) is, in percent:
//   base + i + (a.seq mod 10) + gi
// base 50 graphics (1), 40 SM active (2), 30 SM occupancy (3), 20 tensor
// (5), 10 DRAM bandwidth (10); seq counts that device's (or instance's)
// samples from 1 since the last nvmlInit; gi the GPU instance id, 0 for the
// whole device. The whole device of one with C2C links answers the
// NVLink-C2C throughput metrics its driver's header has (see
// c2c_mib_per_second). Other metric ids answer NOT_SUPPORTED.

FAKE_NVML_EXPORT nvml::Return nvmlGpmQueryDeviceSupport(nvml::Device dev,
                                                        nvml::GpmSupport* support) {
  if (support == nullptr) return nvml::kErrorInvalidArgument;
  if (support->version != nvml::kGpmSupportVersion) return nvml::kErrorArgumentVersionMismatch;
  const nvml::Return rc = enter(__func__, __func__, dev);
  if (rc != nvml::kSuccess) return rc;
  std::lock_guard lock(g_mu);
  support->is_supported_device = g_state.no_gpm[dev->index] ? 0 : 1;
  return rc;
}

FAKE_NVML_EXPORT nvml::Return nvmlGpmSampleAlloc(nvml::GpmSample* sample) {
  if (sample == nullptr) return nvml::kErrorInvalidArgument;
  *sample = new nvml::GpmSampleSt{};
  ++g_gpm_samples;
  return nvml::kSuccess;
}

FAKE_NVML_EXPORT nvml::Return nvmlGpmSampleFree(nvml::GpmSample sample) {
  if (sample == nullptr) return nvml::kErrorInvalidArgument;
  delete sample;
  --g_gpm_samples;
  return nvml::kSuccess;
}

namespace {
nvml::Return take_sample(unsigned i, int gi, nvml::GpmSample sample) {
  std::lock_guard lock(g_mu);
  sample->taken = true;
  sample->device = i;
  sample->gpu_instance = gi;
  sample->seq = ++g_state.gpm_seq[{i, gi}];
  return nvml::kSuccess;
}
}  // namespace

FAKE_NVML_EXPORT nvml::Return nvmlGpmSampleGet(nvml::Device dev, nvml::GpmSample sample) {
  if (sample == nullptr) return nvml::kErrorInvalidArgument;
  const nvml::Return rc = enter(__func__, __func__, dev);
  if (rc != nvml::kSuccess) return rc;
  {
    std::lock_guard lock(g_mu);
    if (g_state.no_gpm[dev->index] || !g_state.mig[dev->index].empty())
      return nvml::kErrorNotSupported;
  }
  return take_sample(dev->index, -1, sample);
}

FAKE_NVML_EXPORT nvml::Return nvmlGpmMigSampleGet(nvml::Device dev, unsigned gpu_instance_id,
                                                  nvml::GpmSample sample) {
  if (sample == nullptr) return nvml::kErrorInvalidArgument;
  const nvml::Return rc = enter(__func__, __func__, dev);
  if (rc != nvml::kSuccess) return rc;
  {
    std::lock_guard lock(g_mu);
    const std::vector<unsigned>& gis = g_state.mig[dev->index];
    if (g_state.no_gpm[dev->index]) return nvml::kErrorNotSupported;
    if (std::find(gis.begin(), gis.end(), gpu_instance_id) == gis.end())
      return nvml::kErrorInvalidArgument;
  }
  return take_sample(dev->index, static_cast<int>(gpu_instance_id), sample);
}

namespace {
// The MiB/s of NVLink-C2C throughput metric `id` over device i's samples,
// from the name the driver's header gives `id`: the device's total
// 1000(i+1) tx, 2000(i+1) rx; link l's total 100(l+1)+i tx, 200(l+1)+i
// rx, for a link the device has. nullopt: not a C2C metric of that header,
// or one the device does not have (NOT_SUPPORTED).
std::optional<double> c2c_mib_per_second(unsigned i, unsigned id) {
  namespace h = nodewatch::testing::nvml_h;
  const h::FieldId* f = h::gpm_defined(id, h::header_of_branch(g_state.branch));
  const unsigned links = g_state.c2c_links[i];
  if (f == nullptr || links == 0) return std::nullopt;
  const std::string_view name = f->name;
  const bool tx = name.ends_with("_TX_PER_SEC");
  if (name == "NVML_GPM_METRIC_C2C_TOTAL_TX_PER_SEC" ||
      name == "NVML_GPM_METRIC_C2C_TOTAL_RX_PER_SEC")
    return (tx ? 1000.0 : 2000.0) * (i + 1);
  unsigned link = 0;
  if (std::sscanf(f->name.data(), "NVML_GPM_METRIC_C2C_LINK%u_TOTAL_", &link) != 1 || link >= links)
    return std::nullopt;
  return (tx ? 100.0 : 200.0) * (link + 1) + i;
}
}  // namespace

FAKE_NVML_EXPORT nvml::Return nvmlGpmMetricsGet(nvml::GpmMetricsGet* m) {
  if (m == nullptr) return nvml::kErrorInvalidArgument;
  if (m->version != nvml::kGpmMetricsGetVersion) return nvml::kErrorArgumentVersionMismatch;
  std::lock_guard lock(g_mu);
  if (g_state.init_count == 0) return nvml::kErrorUninitialized;
  // NVML_GPM_METRIC_MAX of the driver's own header: 98 up to NVML 12.8,
  // 210 in 12.9-13.1 (333 from 13.2 is not modelled).
  const unsigned max = g_state.branch < 575 ? nvml::kGpmMetricMaxOldest : 210;
  const nvml::GpmSampleSt* a = m->sample1;
  const nvml::GpmSampleSt* b = m->sample2;
  if (m->num_metrics > max || a == nullptr || b == nullptr || !a->taken || !b->taken ||
      a->device != b->device || a->gpu_instance != b->gpu_instance || a->seq >= b->seq)
    return nvml::kErrorInvalidArgument;
  // An id past the driver's NVML_GPM_METRIC_MAX fails the whole request
  // (modelled so: the test of an older driver then sees every metric lost).
  for (unsigned k = 0; k < m->num_metrics; ++k)
    if (m->metrics[k].metric_id >= max) return nvml::kErrorInvalidArgument;
  static char kPercent[] = "%";
  static char kMibPerSecond[] = "MiB/s";
  for (unsigned k = 0; k < m->num_metrics; ++k) {
    nvml::GpmMetric& r = m->metrics[k];
    r.metric_info.short_name = nullptr;
    r.metric_info.long_name = nullptr;
    if (a->gpu_instance < 0) {
      if (auto c2c = c2c_mib_per_second(a->device, r.metric_id)) {
        r.nvml_return = nvml::kSuccess;
        r.value = *c2c;
        r.metric_info.unit = kMibPerSecond;
        continue;
      }
    }
    unsigned base = 0;
    switch (r.metric_id) {
      case nvml::kGpmGraphicsUtil: base = 50; break;
      case nvml::kGpmSmUtil: base = 40; break;
      case nvml::kGpmSmOccupancy: base = 30; break;
      case nvml::kGpmAnyTensorUtil: base = 20; break;
      case nvml::kGpmDramBwUtil: base = 10; break;
      default: r.nvml_return = nvml::kErrorNotSupported; continue;
    }
    r.nvml_return = nvml::kSuccess;
    r.value = base + a->device + static_cast<double>(a->seq % 10) +
              (a->gpu_instance < 0 ? 0 : a->gpu_instance);
    r.metric_info.unit = kPercent;
  }
  return nvml::kSuccess;
}

// ---------------------------------------------------------------------------
// MIG: a `mig DEV GI...` device is in MIG mode with one MIG device per
// listed GPU instance.

FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetMigMode(nvml::Device dev, unsigned* current,
                                                   unsigned* pending) {
  if (current == nullptr || pending == nullptr) return nvml::kErrorInvalidArgument;
  const nvml::Return rc = enter(__func__, __func__, dev);
  if (rc != nvml::kSuccess) return rc;
  std::lock_guard lock(g_mu);
  *current = *pending = g_state.mig[dev->index].empty() ? 0 : nvml::kDeviceMigEnable;
  return rc;
}

FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetMaxMigDeviceCount(nvml::Device dev, unsigned* count) {
  if (count == nullptr) return nvml::kErrorInvalidArgument;
  const nvml::Return rc = enter(__func__, __func__, dev);
  if (rc == nvml::kSuccess) *count = kMaxMigDevices;
  return rc;
}

FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetMigDeviceHandleByIndex(nvml::Device dev, unsigned index,
                                                                  nvml::Device* mig) {
  if (mig == nullptr) return nvml::kErrorInvalidArgument;
  const nvml::Return rc = enter(__func__, __func__, dev);
  if (rc != nvml::kSuccess) return rc;
  std::lock_guard lock(g_mu);
  const std::vector<unsigned>& gis = g_state.mig[dev->index];
  if (index >= gis.size()) return nvml::kErrorNotFound;
  *mig = const_cast<nvml::Device>(&g_mig_devices[dev->index][index]);
  return nvml::kSuccess;
}

FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetGpuInstanceId(nvml::Device mig, unsigned* id) {
  if (id == nullptr) return nvml::kErrorInvalidArgument;
  const nvml::DeviceSt* m = mig_of(mig);
  if (m == nullptr) return nvml::kErrorInvalidArgument;  // not a MIG device handle
  std::lock_guard lock(g_mu);
  const std::vector<unsigned>& gis = g_state.mig[m->index];
  const auto slot = static_cast<std::size_t>(m - &g_mig_devices[m->index][0]);
  if (slot >= gis.size()) return nvml::kErrorInvalidArgument;
  *id = gis[slot];
  return nvml::kSuccess;
}

#endif  // FAKE_NVML_OLD_DRIVER

// ---------------------------------------------------------------------------
// Running compute processes: the `processes` lines. On a GPU in MIG mode
// the parent handle answers NO_PERMISSION (what NVML answers a caller
// without the privilege to see every instance) and each MIG device handle
// answers its GPU instance's processes. The count protocol is NVML's: a
// short array gets INSUFFICIENT_SIZE and the count needed.

// What `_v3` filled on drivers 535.43 to 535.86: the instance ids, then
// the confidential-computing protected memory (32 bytes).
struct ProcessInfoWide {
  unsigned pid;
  unsigned long long used_gpu_memory;
  unsigned gpu_instance_id;
  unsigned compute_instance_id;
  unsigned long long used_gpu_cc_protected_memory;
};
static_assert(sizeof(ProcessInfoWide) == 32);

bool v3_is_wide() {
  std::lock_guard lock(g_mu);
  unsigned major = 0, minor = 0;
  return std::sscanf(g_state.driver.c_str(), "%u.%u", &major, &minor) == 2 && major == 535 &&
         minor >= 43 && minor < 104;
}

template <class Info>
nvml::Return running_processes(const char* function, nvml::Device dev, unsigned* count,
                               void* infos) {
  if (count == nullptr) return nvml::kErrorInvalidArgument;
  std::vector<FakeProcess> ps;
  if (const nvml::DeviceSt* m = mig_of(dev)) {
    const nvml::Return rc = enter_index(function, "nvmlDeviceGetComputeRunningProcesses", m->index);
    if (rc != nvml::kSuccess) return rc;
    std::lock_guard lock(g_mu);
    const std::vector<unsigned>& gis = g_state.mig[m->index];
    const auto slot = static_cast<std::size_t>(m - &g_mig_devices[m->index][0]);
    if (slot >= gis.size()) return nvml::kErrorInvalidArgument;
    for (const FakeProcess& p : g_state.processes[m->index])
      if (p.gpu_instance == static_cast<int>(gis[slot])) ps.push_back(p);
  } else {
    const nvml::Return rc = enter(function, "nvmlDeviceGetComputeRunningProcesses", dev);
    if (rc != nvml::kSuccess) return rc;
    std::lock_guard lock(g_mu);
    if (!g_state.mig[dev->index].empty()) return nvml::kErrorNoPermission;
    ps = g_state.processes[dev->index];
  }
  if (*count < ps.size()) {
    *count = static_cast<unsigned>(ps.size());
    return nvml::kErrorInsufficientSize;
  }
  if (!ps.empty() && infos == nullptr) return nvml::kErrorInvalidArgument;
  auto* out = static_cast<Info*>(infos);
  for (std::size_t k = 0; k < ps.size(); ++k) {
    Info info{};
    info.pid = ps[k].pid;
    info.used_gpu_memory = ps[k].memory;
    if constexpr (!std::is_same_v<Info, nvml::ProcessInfoV1>) {
      info.gpu_instance_id = ps[k].gpu_instance < 0 ? nvml::kInstanceIdNone
                                                    : static_cast<unsigned>(ps[k].gpu_instance);
      info.compute_instance_id = ps[k].gpu_instance < 0 ? nvml::kInstanceIdNone : 0;
    }
    std::memcpy(out + k, &info, sizeof info);
  }
  *count = static_cast<unsigned>(ps.size());
  return nvml::kSuccess;
}

FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetComputeRunningProcesses(nvml::Device dev,
                                                                   unsigned* count, void* infos) {
  return running_processes<nvml::ProcessInfoV1>(__func__, dev, count, infos);
}
#ifndef FAKE_NVML_OLD_DRIVER
FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetComputeRunningProcesses_v2(nvml::Device dev,
                                                                      unsigned* count,
                                                                      void* infos) {
  return running_processes<nvml::ProcessInfo>(__func__, dev, count, infos);
}
FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetComputeRunningProcesses_v3(nvml::Device dev,
                                                                      unsigned* count,
                                                                      void* infos) {
  if (v3_is_wide()) return running_processes<ProcessInfoWide>(__func__, dev, count, infos);
  return running_processes<nvml::ProcessInfo>(__func__, dev, count, infos);
}
#endif

#ifndef FAKE_NVML_OLD_DRIVER

// ---------------------------------------------------------------------------
// Fabric: NOT_SUPPORTED unless a `fabric` line names the device. v2 of the
// struct from R550 (NVML 12.4), v3 from R580 (13.0); before R550 the
// function does not exist (FUNCTION_NOT_FOUND). The cluster UUID is the 16
// bytes 0xa0 + k.

FAKE_NVML_EXPORT nvml::Return nvmlDeviceGetGpuFabricInfoV(nvml::Device dev, void* info) {
  if (info == nullptr) return nvml::kErrorInvalidArgument;
  const nvml::Return rc = enter(__func__, __func__, dev);
  if (rc != nvml::kSuccess) return rc;
  std::lock_guard lock(g_mu);
  if (g_state.branch < 550) return nvml::kErrorFunctionNotFound;
  unsigned version = 0;
  std::memcpy(&version, info, sizeof version);
  const bool v3 = version == nvml::kGpuFabricInfoV3Version;
  if (!(v3 && g_state.branch >= 580) && version != nvml::kGpuFabricInfoV2Version)
    return nvml::kErrorArgumentVersionMismatch;
  auto it = g_state.fabric.find(dev->index);
  if (it == g_state.fabric.end()) return nvml::kErrorNotSupported;
  const FabricRule& f = it->second;
  nvml::GpuFabricInfoV3 out{};
  out.version = version;
  for (unsigned k = 0; k < nvml::kGpuFabricUuidLen; ++k)
    out.cluster_uuid[k] = static_cast<unsigned char>(0xa0 + k);
  out.status = f.status;
  out.clique_id = static_cast<unsigned>(f.clique);
  out.state = static_cast<unsigned char>(f.state);
  out.health_mask = static_cast<unsigned>(f.health);
  out.health_summary = static_cast<unsigned char>(f.summary);
  std::memcpy(info, &out, v3 ? sizeof(nvml::GpuFabricInfoV3) : sizeof(nvml::GpuFabricInfoV2));
  return nvml::kSuccess;
}

// ---------------------------------------------------------------------------
// PRM counters (R590, NVML 13.1, on): on an "nvlink5" device, local port p
// is link p-1 (port 0, or one past the links, answers INVALID_ARGUMENT per
// counter); NOT_SUPPORTED on any other device. Values of link l on device
// i: link_down 0, PORT_XMIT_WAIT 10^6(i+1)+l, PLR rcv_codes and xmit_codes
// 10^9(i+1)+l, rcv_code_errors i+l, rcv_uncorrectable_codes 0,
// xmit_retry_codes 100(i+1)+l, xmit_retry_events 10(i+1)+l, sync_events 0;
// each plus what `nvlink_errors DEV LINK NAME N` added (NAME: the exported
// counter or type: link_down, transmit_wait, xmit_codes, ...).

FAKE_NVML_EXPORT nvml::Return nvmlDeviceReadPRMCounters_v1(nvml::Device dev,
                                                           nvml::PrmCounterList* list) {
  if (list == nullptr || (list->num_counters > 0 && list->counters == nullptr))
    return nvml::kErrorInvalidArgument;
  const nvml::Return rc = enter_since(__func__, dev, 590);
  if (rc != nvml::kSuccess) return rc;
  std::lock_guard lock(g_mu);
  const unsigned i = dev->index;
  if (!g_state.nvlink5[i]) return nvml::kErrorNotSupported;
  struct Counter {
    unsigned id;
    const char* name;
    unsigned long long per_device;  // the value: per_device(i+1)+l, or 0
  };
  static constexpr std::array<Counter, 9> kCounters = {{
      {1, "link_down", 0},
      {201, "transmit_wait", 1000000},
      {301, "rcv_codes", 1000000000},
      {302, "rcv_code_errors", 0},  // i+l
      {303, "rcv_uncorrectable_codes", 0},
      {304, "xmit_codes", 1000000000},
      {305, "xmit_retry_codes", 100},
      {306, "xmit_retry_events", 10},
      {307, "sync_events", 0},
  }};
  for (unsigned k = 0; k < list->num_counters; ++k) {
    nvml::PrmCounter& c = list->counters[k];
    c.status = nvml::kErrorInvalidArgument;
    if (c.local_port == 0 || c.local_port > g_state.nvlinks[i]) continue;
    const unsigned l = c.local_port - 1;
    for (const Counter& known : kCounters) {
      if (known.id != c.counter_id) continue;
      unsigned long long v = known.per_device * (i + 1ull) + (known.per_device ? l : 0);
      if (known.id == 302) v = i + l;
      c.status = nvml::kSuccess;
      c.output_type = nvml::kValueTypeUnsignedLongLong;
      c.output_value.ull_val = nvlink_error(i, l, known.name, v);
    }
  }
  return nvml::kSuccess;
}
#endif  // FAKE_NVML_OLD_DRIVER

// ---------------------------------------------------------------------------
// Test hooks.

FAKE_NVML_EXPORT int fake_nvml_script(const char* line) {
  if (line == nullptr) return -1;
  std::lock_guard lock(g_mu);
  std::string error;
  if (apply_line(g_state, line, &error)) return 0;
  std::fprintf(stderr, "fake_nvml: %s\n", error.c_str());
  return -1;
}

FAKE_NVML_EXPORT unsigned long long fake_nvml_calls(const char* function, int device) {
  if (function == nullptr) return 0;
  std::lock_guard lock(g_mu);
  unsigned long long total = 0;
  // "field N": how often field id N was asked (one per link asked).
  if (std::strncmp(function, "field ", 6) == 0) {
    auto it =
        g_state.field_asks.find(static_cast<unsigned>(std::strtoul(function + 6, nullptr, 10)));
    if (it == g_state.field_asks.end()) return 0;
    for (unsigned i = 0; i < kMaxDevices; ++i)
      if (device < 0 || device == static_cast<int>(i)) total += it->second[i];
    return total;
  }
  for (const auto& [name, per_device] : g_state.calls) {
    if (std::strcmp(function, "*") != 0 && name != function) continue;
    for (unsigned i = 0; i < kMaxDevices; ++i)
      if (device < 0 || device == static_cast<int>(i)) total += per_device[i];
  }
  return total;
}

FAKE_NVML_EXPORT int fake_nvml_blocked() {
  std::lock_guard lock(g_mu);
  return g_state.blocked;
}

FAKE_NVML_EXPORT long fake_nvml_gpm_samples() {
  return g_gpm_samples.load();
}

FAKE_NVML_EXPORT unsigned long long fake_nvml_inits() {
  std::lock_guard lock(g_mu);
  return g_state.inits;
}

// Every exported NVML function has exactly the signature the backend
// declares for it.
static_assert(std::is_same_v<decltype(&nvmlInit), nvml::InitFn>);
static_assert(std::is_same_v<decltype(&nvmlShutdown), nvml::ShutdownFn>);
static_assert(std::is_same_v<decltype(&nvmlErrorString), nvml::ErrorStringFn>);
static_assert(std::is_same_v<decltype(&nvmlSystemGetDriverVersion), nvml::SystemGetStringFn>);
static_assert(std::is_same_v<decltype(&nvmlSystemGetNVMLVersion), nvml::SystemGetNvmlVersionFn>);
static_assert(
    std::is_same_v<decltype(&nvmlDeviceGetHandleByIndex), nvml::DeviceGetHandleByIndexFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetUUID), nvml::DeviceGetStringFn>);
static_assert(
    std::is_same_v<decltype(&nvmlDeviceGetComputeRunningProcesses), nvml::DeviceGetProcessesFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetName), nvml::DeviceGetStringFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetSerial), nvml::DeviceGetStringFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetVbiosVersion), nvml::DeviceGetStringFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetPciInfo), nvml::DeviceGetPciInfoFn>);
static_assert(
    std::is_same_v<decltype(&nvmlDeviceGetUtilizationRates), nvml::DeviceGetUtilizationFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetMemoryInfo), nvml::DeviceGetMemoryInfoFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetTemperature), nvml::DeviceGetTemperatureFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetTemperatureThreshold),
                             nvml::DeviceGetTemperatureThresholdFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetPowerUsage), nvml::DeviceGetUintFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetEnforcedPowerLimit), nvml::DeviceGetUintFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetTotalEnergyConsumption), nvml::DeviceGetUllFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetClockInfo), nvml::DeviceGetClockInfoFn>);
static_assert(
    std::is_same_v<decltype(&nvmlDeviceGetCurrentClocksThrottleReasons), nvml::DeviceGetUllFn>);
static_assert(
    std::is_same_v<decltype(&nvmlDeviceGetTotalEccErrors), nvml::DeviceGetTotalEccErrorsFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetRemappedRows), nvml::DeviceGetRemappedRowsFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetPcieReplayCounter), nvml::DeviceGetUintFn>);
static_assert(
    std::is_same_v<decltype(&nvmlDeviceGetCurrPcieLinkGeneration), nvml::DeviceGetUintFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetCurrPcieLinkWidth), nvml::DeviceGetUintFn>);
static_assert(
    std::is_same_v<decltype(&nvmlDeviceGetPcieThroughput), nvml::DeviceGetPcieThroughputFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetNvLinkState), nvml::DeviceGetNvLinkStateFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetNvLinkErrorCounter),
                             nvml::DeviceGetNvLinkErrorCounterFn>);
static_assert(std::is_same_v<decltype(&nvmlEventSetCreate), nvml::EventSetCreateFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceRegisterEvents), nvml::DeviceRegisterEventsFn>);
static_assert(std::is_same_v<decltype(&nvmlEventSetWait), nvml::EventSetWaitFn>);
static_assert(std::is_same_v<decltype(&nvmlEventSetFree), nvml::EventSetFreeFn>);
#ifndef FAKE_NVML_NO_DEVICE_COUNT
static_assert(std::is_same_v<decltype(&nvmlDeviceGetCount), nvml::DeviceGetCountFn>);
#endif
#ifndef FAKE_NVML_OLD_DRIVER
static_assert(std::is_same_v<decltype(&nvmlInit_v2), nvml::InitFn>);
static_assert(
    std::is_same_v<decltype(&nvmlDeviceGetHandleByIndex_v2), nvml::DeviceGetHandleByIndexFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetPciInfo_v2), nvml::DeviceGetPciInfoFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetPciInfo_v3), nvml::DeviceGetPciInfoFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetMemoryInfo_v2), nvml::DeviceGetMemoryInfoV2Fn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetTemperatureV), nvml::DeviceGetTemperatureVFn>);
static_assert(
    std::is_same_v<decltype(&nvmlDeviceGetMarginTemperature), nvml::DeviceGetMarginTemperatureFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetPlatformInfo), nvml::DeviceGetPlatformInfoFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetRepairStatus), nvml::DeviceGetRepairStatusFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetP2PStatus), nvml::DeviceGetP2pStatusFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetUnrepairableMemoryFlag_v1),
                             nvml::DeviceGetUnrepairableMemoryFlagFn>);
static_assert(
    std::is_same_v<decltype(&nvmlDeviceGetCurrentClocksEventReasons), nvml::DeviceGetUllFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetFieldValues), nvml::DeviceGetFieldValuesFn>);
static_assert(std::is_same_v<decltype(&nvmlEventSetWait_v2), nvml::EventSetWaitFn>);
static_assert(std::is_same_v<decltype(&nvmlGpmQueryDeviceSupport), nvml::GpmQueryDeviceSupportFn>);
static_assert(std::is_same_v<decltype(&nvmlGpmSampleAlloc), nvml::GpmSampleAllocFn>);
static_assert(std::is_same_v<decltype(&nvmlGpmSampleFree), nvml::GpmSampleFreeFn>);
static_assert(std::is_same_v<decltype(&nvmlGpmSampleGet), nvml::GpmSampleGetFn>);
static_assert(std::is_same_v<decltype(&nvmlGpmMigSampleGet), nvml::GpmMigSampleGetFn>);
static_assert(std::is_same_v<decltype(&nvmlGpmMetricsGet), nvml::GpmMetricsGetFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetMigMode), nvml::DeviceGetMigModeFn>);
static_assert(
    std::is_same_v<decltype(&nvmlDeviceGetMaxMigDeviceCount), nvml::DeviceGetMaxMigDeviceCountFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetMigDeviceHandleByIndex),
                             nvml::DeviceGetMigDeviceHandleByIndexFn>);
static_assert(
    std::is_same_v<decltype(&nvmlDeviceGetGpuInstanceId), nvml::DeviceGetGpuInstanceIdFn>);
static_assert(
    std::is_same_v<decltype(&nvmlDeviceGetGpuFabricInfoV), nvml::DeviceGetGpuFabricInfoVFn>);
static_assert(
    std::is_same_v<decltype(&nvmlDeviceReadPRMCounters_v1), nvml::DeviceReadPrmCountersFn>);
static_assert(
    std::is_same_v<decltype(&nvmlDeviceGetComputeRunningProcesses_v3), nvml::DeviceGetProcessesFn>);
static_assert(
    std::is_same_v<decltype(&nvmlDeviceGetComputeRunningProcesses_v2), nvml::DeviceGetProcessesFn>);
#ifndef FAKE_NVML_NO_DEVICE_COUNT
static_assert(std::is_same_v<decltype(&nvmlDeviceGetCount_v2), nvml::DeviceGetCountFn>);
#endif
#endif
