#pragma once
// Counting the kernel log exactly once across restarts (kernel_state.hpp):
// records are fed in sequence order; a record at or before the state's
// last_seq of the same boot was counted already and is skipped; a gap in
// the sequence numbers is records the ring buffer overwrote before they
// were read (while nodewatch was down, or an overrun while it ran), counted
// as lost; so are the records before the first one read afresh (a boot's
// first record is number 0), which the ring buffer overwrote before
// nodewatch first ran in this boot. A state of another boot is dropped: a new boot starts afresh.
//
// Only facility 0 (the kernel) is matched: user space cannot write it
// (kmsg.hpp).

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kernel/kernel_state.hpp"
#include "kernel/kmsg.hpp"

namespace nodewatch::kernel {

// What a matcher found in a record.
struct KernelEvent {
  std::string event;        // the vocabulary's name ("nvidia_xid")
  std::string device;       // PCI address, interface or block device; "" for none
  std::string code;         // the XID or SXID number, for those two events
  std::uint64_t count = 1;  // errors the record reports ("EDAC MC1: 262 CE ..."), else 1
  bool malformed = false;   // of an event's shape, but not as the kernel prints it: no event
};

using Matcher = std::function<std::optional<KernelEvent>(const KmsgRecord&)>;

// At most this many distinct XID (or SXID) codes are kept per device; the
// rest count under code "other". NVIDIA's drivers define fewer than 200 XIDs:
// past this, the records are not a driver's, and their codes must not grow
// the series (or the state file) without bound.
inline constexpr std::size_t kMaxCodesPerDevice = 256;

class KernelLog {
 public:
  // `saved`: the state file's content, if any; `boot_id`: this boot's.
  // At most `max_devices` distinct devices per event; the rest count as
  // device "other". Counts saturate at 2^64-1 (add_saturating).
  KernelLog(std::optional<KernelState> saved, std::string boot_id, Matcher match,
            std::size_t max_devices = 64);

  // Feeds the next record read. Returns the event it counted, if any.
  std::optional<KernelEvent> feed(const KmsgRecord& r);

  const KernelState& state() const { return state_; }
  // A new bound for devices not seen yet (those counted keep their series).
  void set_max_devices(std::size_t n) { max_devices_ = n; }
  // Records fed that were counted before (a restart re-reads the buffer).
  std::uint64_t skipped() const { return skipped_; }
  // Records the matcher found malformed (KernelEvent::malformed).
  std::uint64_t malformed() const { return malformed_; }
  // The monotonic timestamp of the last record fed, in microseconds.
  std::optional<std::uint64_t> last_ts_usec() const { return last_ts_; }
  // True when the state came from the file (same boot), false when afresh.
  bool continued() const { return continued_; }

 private:
  std::string device_key(const std::string& event, const std::string& device) const;
  // `code`, or "other" once `device` has kMaxCodesPerDevice others in `table`.
  static std::string code_key(const std::map<KernelCounts::Key, std::uint64_t>& table,
                              const std::string& device, const std::string& code);

  KernelState state_;
  Matcher match_;
  std::size_t max_devices_;
  std::uint64_t skipped_ = 0;
  std::uint64_t malformed_ = 0;
  std::optional<std::uint64_t> last_ts_;
  bool continued_ = false;
};

// What a saved state holds that counting could not have made, taken out
// before the state is trusted (its syntax is parse_state's): events not in
// `event_names` and XIDs or SXIDs that are neither a number as the matcher
// writes one nor "other" are dropped, each with its reason in the answer; past
// `max_devices` distinct devices of one event (or one table of XIDs or
// SXIDs), the devices after the first `max_devices` in name order are
// folded into "other", as counting folds them; so are a device's codes past
// the first kMaxCodesPerDevice. Counts add up saturating.
std::vector<std::string> sanitize_state(KernelState& state,
                                        const std::vector<std::string_view>& event_names,
                                        std::size_t max_devices);

// a + b, or the largest count where that would wrap: a counter never steps
// back to 0.
inline std::uint64_t add_saturating(std::uint64_t a, std::uint64_t b) {
  return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

// The records in a file that holds /dev/kmsg records one after another (a
// fixture, or a saved copy): a record starts at each line that does not
// begin with a space.
std::vector<std::string> split_records(std::string_view text);

}  // namespace nodewatch::kernel
