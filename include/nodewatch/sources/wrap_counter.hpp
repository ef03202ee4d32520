#pragma once
// One wrap-accumulating counter for every collector whose source keeps a
// counter in 32 bits (the kernel's unsigned int diskstats fields, mlx5's
// Q-counters, a qdisc's 32-bit packet count), and a keyed set of them that
// can live in a service so that a rebuilt collector continues its counters
// instead of exporting a reset.
//
// A decrease is taken as a 32-bit wrap when the counter is 32 bits wide,
// the previous value fits in 32 bits and the modular difference
// (2^32 - previous + raw) is below 2^31: a busy counter that passed 2^32
// between two reads. Example: 4294967290 then 5 reads as +11
// (4294967301). Any other decrease (the device was reset or re-created, a
// 64-bit counter went down, a 32-bit one whose modular increase would be
// 2^31 or more) restarts from the raw value, which Prometheus reads as a counter reset:
// a reset counter is exported as the small number it now is, never as a
// jump of 2^32.

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

namespace nodewatch::sources {

class WrapCounter {
 public:
  // Feeds the latest raw value; returns the accumulated one.
  std::uint64_t update(std::uint64_t raw, bool wraps32 = true);
  std::uint64_t value() const { return offset_ + last_raw_; }

 private:
  std::uint64_t last_raw_ = 0;
  std::uint64_t offset_ = 0;
  bool primed_ = false;
};

// True when going from `previous` to `raw` is a 32-bit wrap (see above).
bool is_32bit_wrap(std::uint64_t previous, std::uint64_t raw);

// Counters by key ("sda/read_time", "mlx5_0/1/out_of_buffer"). A cycle
// that does not update a key forgets it (the device went away, and a new
// one under the name starts afresh). Thread-safe; meant to be held through
// CollectorEnv::service() so that it outlives one collector instance. The
// cycle is the instance's, not a caller's: one collector name per instance
// (the scheduler never runs two collects of one name at once, so an old and
// a rebuilt collector sharing it never interleave their cycles).
class WrapCounters {
 public:
  std::uint64_t update(std::string_view key, std::uint64_t raw, bool wraps32 = true);
  // Keeps `key` through this cycle without a value: its read failed for
  // now (EIO), and forgetting it would turn the next value of a counter
  // that wrapped into a reset of 2^32. No-op for an unknown key.
  void keep(std::string_view key);
  void begin_cycle();
  // Forgets keys not updated since begin_cycle(); returns how many.
  std::size_t end_cycle();
  std::size_t size() const;

 private:
  struct Entry {
    WrapCounter counter;
    std::uint64_t cycle = 0;
  };
  mutable std::mutex mu_;
  std::unordered_map<std::string, Entry> counters_;
  std::uint64_t cycle_ = 0;
};

}  // namespace nodewatch::sources
