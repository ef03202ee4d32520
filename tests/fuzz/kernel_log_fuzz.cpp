// The kernel log (collectors/kernel): /dev/kmsg records as a saved file
// holds them (split_records), each parsed, matched against the event
// vocabulary and fed to the exactly-once counter; and the state file that
// carries the counts across restarts. The input is both: a state file
// text (its checksum line added when it has none), a line "==", then
// records.
// Properties: the state file round-trips (what parse_state accepts,
// serialize_state writes back to the same state); a record fed twice is
// never counted twice; the counters only grow.

#include "fuzz_support.hpp"
#include "kernel/kernel_events.hpp"
#include "kernel/kernel_log.hpp"
#include "kernel/kernel_state.hpp"
#include "kernel/kmsg.hpp"
#include "support/kernel_state_checksum.hpp"

using namespace nodewatch::kernel;
using nodewatch::fuzz::require;

namespace {

// The state file's checksum line (support/kernel_state_checksum.hpp),
// added when the input has none, so that mutated state files reach the
// line parser instead of stopping at the checksum.
std::string with_checksum(std::string_view body) {
  if (body.find("\nchecksum ") != std::string_view::npos || body.empty() || body.back() != '\n')
    return std::string(body);
  return nodewatch::testing::with_kernel_state_checksum(body);
}

std::uint64_t total(const KernelState& s) {
  std::uint64_t n = s.counts.lost;
  for (const auto& [k, v] : s.counts.events) n += v;
  for (const auto& [k, v] : s.counts.xids) n += v;
  for (const auto& [k, v] : s.counts.sxids) n += v;
  return n;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto [state_text, records_text] =
      nodewatch::fuzz::split_once(nodewatch::fuzz::as_text(data, size), "\n==\n");

  std::string why;
  std::optional<KernelState> saved = parse_state(with_checksum(state_text), &why);
  if (saved) {
    std::string written = serialize_state(*saved);
    std::string why2;
    std::optional<KernelState> again = parse_state(written, &why2);
    require(again.has_value(), "kernel state: what serialize_state wrote does not parse");
    require(*again == *saved, "kernel state: the state changed through a write and a read");
  } else {
    require(!why.empty(), "kernel state: refused without a reason");
  }

  std::string boot = saved ? saved->boot_id : "8d5a3c1e-7f2b-4e9a-9c1d-2b3e4f5a6b7c";
  KernelLog log(saved, boot, match_kernel_record, 8);
  std::uint64_t before = total(log.state());
  std::vector<KmsgRecord> parsed;
  for (const std::string& raw : split_records(records_text)) {
    std::optional<KmsgRecord> r = parse_kmsg_record(raw);
    if (!r) continue;
    (void)unescape_kmsg(raw);
    (void)match_kernel_event(r->message);
    log.feed(*r);
    std::uint64_t now = total(log.state());
    require(now >= before, "kernel log: a counter went down");
    before = now;
    parsed.push_back(std::move(*r));
    if (parsed.size() >= 256) break;
  }
  // The same records again, as a restart re-reads the ring buffer: nothing
  // new is counted.
  for (const KmsgRecord& r : parsed) {
    std::optional<KernelEvent> e = log.feed(r);
    require(!e.has_value(), "kernel log: a record counted twice");
  }
  require(total(log.state()) == before,
          "kernel log: re-reading the same records changed the counts");
  return 0;
}
