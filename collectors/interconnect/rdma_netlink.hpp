#pragma once
// RDMA netlink (NETLINK_RDMA, client RDMA_NL_NLDEV): the source of port
// hw_counters where the kernel has it. One RDMA_NLDEV_CMD_STAT_GET request
// per port returns every hw_counter of the port (kernel nldev.c
// stat_get_doit_default_counter(): the driver's get_hw_stats() is called
// once, outside the 10 ms sysfs `lifespan` cache), instead of one sysfs
// open+read per counter. Device names are mapped to the kernel's device
// index with one RDMA_NLDEV_CMD_GET dump per collection: the index changes
// when a device is re-registered, and sysfs has no file that gives it.
//
// The reply parser is a pure function over the bytes received, so that it
// is tested with hand-built messages (tests/unit/interconnect_netlink_test.cpp).
//
// Reply layout (nldev.c fill_nldev_handle() and fill_stat_hwcounters):
//   nlmsghdr type RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_STAT_GET)
//     RDMA_NLDEV_ATTR_DEV_INDEX u32, RDMA_NLDEV_ATTR_DEV_NAME string,
//     RDMA_NLDEV_ATTR_PORT_INDEX u32,
//     RDMA_NLDEV_ATTR_STAT_HWCOUNTERS (nested)
//       RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY (nested), one per counter
//         RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_NAME string
//         RDMA_NLDEV_ATTR_PAD (alignment), RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_VALUE u64
// Attributes the parser does not know (newer kernels add _INDEX, _DYNAMIC
// to each entry) are skipped.

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace nodewatch::interconnect {

struct HwCounterEntry {
  std::string name;
  std::uint64_t value = 0;
};

// What one NLDEV message carried that the collector uses.
struct RdmaMessage {
  std::optional<std::uint32_t> dev_index;
  std::string dev_name;
  std::optional<std::uint32_t> port_index;
  bool has_hwcounters = false;
  std::vector<HwCounterEntry> hwcounters;
};

enum class NlParse {
  kMore,       // a multipart reply that has not ended yet: receive again
  kDone,       // complete (NLMSG_DONE, or a single reply)
  kError,      // NLMSG_ERROR with a negative errno, in *error
  kMalformed,  // truncated or inconsistent bytes
};

// Parses one datagram of netlink messages. Messages whose sequence number
// is not `seq` (a late reply to an earlier request) are skipped; RDMA NLDEV
// messages are appended to `out`.
NlParse parse_rdma_messages(std::span<const std::uint8_t> bytes, std::uint32_t seq,
                            std::vector<RdmaMessage>* out, int* error);

// The request bytes (for tests; the real source builds them with libnl):
// RDMA_NLDEV_CMD_STAT_GET for one port, and the RDMA_NLDEV_CMD_GET dump.
std::vector<std::uint8_t> build_stat_get_request(std::uint32_t seq, std::uint32_t dev_index,
                                                 std::uint32_t port);

// Where the collector gets port hw_counters from, when it can.
class HwCounterSource {
 public:
  virtual ~HwCounterSource() = default;
  // Called once per collection before any port_counters(): false when
  // RDMA netlink cannot be used now (no NETLINK_RDMA family because ib_core
  // is not loaded, or the device dump failed); the caller then reads sysfs.
  virtual bool begin_cycle() = 0;
  // Every hw_counter of one port, or nullopt with an errno in *error (0 when
  // the device is not known to netlink): the caller falls back to sysfs.
  virtual std::optional<std::vector<HwCounterEntry>> port_counters(std::string_view device,
                                                                   std::uint32_t port,
                                                                   int* error) = 0;
};

// The real source, over a libnl socket. Opens the socket lazily and tries
// again on the next collection when the family is missing (ib_core is
// loaded when the first RDMA device appears).
std::unique_ptr<HwCounterSource> make_netlink_hw_counter_source();

// A source that is never available (the `netlink = false` option).
std::unique_ptr<HwCounterSource> make_disabled_hw_counter_source();

}  // namespace nodewatch::interconnect
