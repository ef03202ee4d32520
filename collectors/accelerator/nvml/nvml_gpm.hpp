#pragma once
// GPM (GPU performance monitoring, Hopper and later): SM activity, SM
// occupancy, tensor activity, DRAM bandwidth and graphics activity of one
// device, over the interval between two of its samples. Unlike the
// profiling (DCP) metrics of DCGM, GPM needs no profiling lock and can run
// beside a profiler.
//
// The device's worker thread keeps the previous sample and takes one each
// cycle: the values exported in a cycle are those of the interval since
// the last cycle (so the first cycle after a start, or after the driver
// was reloaded, has none). On a device with NVLink-C2C links and a driver
// of R575 or later, the C2C throughput of the device and of each link is
// asked too and integrated over the interval into byte counters (the
// host link "c2c"). Two samples taken less than 100 ms apart (NVML
// asks for more) give nothing; the older one is kept for the next cycle.
// On a MIG-enabled GPU each GPU instance has its own pair
// (nvmlGpmMigSampleGet), and the whole device is still asked (a driver
// that does not support that in MIG mode answers NOT_SUPPORTED).
//
// Samples are allocated by one NVML session and freed through it: a new
// session (a driver reload) frees the old ones, and the state holds the
// session it allocated from until it has freed them.

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "accelerator/backend.hpp"
#include "accelerator/nvml/nvml_api.hpp"
#include "accelerator/nvml/nvml_library.hpp"

namespace nodewatch::accelerator {

class NvmlGpmState {
 public:
  // `ok(rc, call)`: true on SUCCESS; otherwise reports the failure the way
  // the other device queries do (and may throw for a GPU that is lost).
  using Check = std::function<bool(nvml::Return, const char*)>;

  NvmlGpmState();
  NvmlGpmState(const NvmlGpmState&) = delete;
  NvmlGpmState& operator=(const NvmlGpmState&) = delete;
  ~NvmlGpmState();

  // This cycle's activity of `dev` into d.gpm and d.gpm_instances.
  void read(const std::shared_ptr<const NvmlSession>& session, nvml::Device dev, DeviceSample& d,
            const Check& ok);

 private:
  using Clock = std::chrono::steady_clock;
  struct Pair {
    nvml::GpmSample prev = nullptr;
    nvml::GpmSample cur = nullptr;
    bool have_prev = false;
    Clock::time_point prev_at{};
  };
  using Take = std::function<nvml::Return(nvml::GpmSample)>;
  // What was asked, by position in the request (empty: did not answer),
  // and the seconds between the two samples.
  using Use = std::function<void(const std::vector<std::optional<double>>&, double)>;

  void read_samples(const std::shared_ptr<const NvmlSession>& session, nvml::Device dev,
                    DeviceSample& d, const Check& ok);
  // Takes a sample into `pair` and, given an older one far enough back,
  // asks `ids` over the two and hands the answers to `use`.
  void step(Pair& pair, const Take& take, const char* call, const std::vector<unsigned>& ids,
            const Use& use, const Check& ok);
  // The activity metrics' ids, first in every request; their answers.
  static const std::vector<unsigned>& activity_ids();
  static GpmActivity activity(const std::vector<std::optional<double>>& values);
  void free_pair(Pair& pair);
  void release();

  std::shared_ptr<const NvmlSession> session_;
  std::optional<bool> supported_;  // asked once per session
  Pair device_;
  std::map<unsigned, Pair> instances_;            // by GPU instance id
  std::unique_ptr<nvml::GpmMetricsGet> request_;  // 13 KB: not on the stack
  // NVLink-C2C bytes: the rates integrated since the first answer (empty,
  // or no entry for a link, before it), kept across driver sessions (a
  // reload does not reset them).
  std::optional<C2cLinkBytes> c2c_;
  std::map<unsigned, C2cLinkBytes> c2c_per_link_;
};

// A GPM percentage as a ratio: value / 100 within 0..1; nullopt for a value
// that is not a number.
std::optional<double> gpm_ratio(double percent);

}  // namespace nodewatch::accelerator
