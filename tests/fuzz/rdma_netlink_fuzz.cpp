// One datagram of RDMA netlink (NLDEV) replies (collectors/interconnect).
// The sequence number asked for is the first message's own, so that a
// mutated reply still reaches the attribute parser.

#include <cstring>

#include "fuzz_support.hpp"
#include "interconnect/rdma_netlink.hpp"

using namespace nodewatch::interconnect;
using nodewatch::fuzz::require;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::uint8_t> copy(data, data + size);
  std::uint32_t seq = 0;
  if (size >= 12) std::memcpy(&seq, copy.data() + 8, sizeof seq);  // nlmsghdr.nlmsg_seq
  std::vector<RdmaMessage> out;
  int error = 0;
  NlParse r = parse_rdma_messages(copy, seq, &out, &error);
  if (r == NlParse::kError) require(error != 0, "rdma netlink: an error without an errno");
  std::size_t entries = 0;
  for (const RdmaMessage& m : out) {
    require(m.dev_name.size() <= size, "rdma netlink: a name longer than the datagram");
    entries += m.hwcounters.size();
    for (const HwCounterEntry& e : m.hwcounters)
      require(e.name.find('\0') == std::string::npos, "rdma netlink: a counter name with a NUL");
  }
  // Each entry takes a name and a u64 attribute at least (8 + 12 bytes).
  require(entries * 20 <= size, "rdma netlink: more counters than the bytes can hold");
  return 0;
}
