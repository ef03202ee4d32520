#pragma once
// The nic collector's access to the kernel, behind one small interface so
// that tests can feed it (a fake fed from fixture files) and the collector
// logic stays free of sockets.
//
// The real implementation (make_kernel_source) opens its sockets when it is
// constructed: netlink and ioctl sockets belong to the network namespace of
// the thread that creates them, so a source built on a thread that entered a
// namespace (setns) reads that namespace from any thread afterwards.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "nic/nic_parse.hpp"

namespace nodewatch::nic {

// How one per-interface kernel call went.
enum class Status {
  kOk,
  kUnsupported,  // the driver does not implement it (EOPNOTSUPP): not an error
  kGone,         // the interface disappeared (ENODEV): not an error
  kError,        // anything else: counted
};

struct DriverInfo {
  std::string driver;
  std::string firmware;
  std::string bus_info;
};

// Outcome of a dump: its records and how many messages could not be parsed.
template <class Record>
struct Dump {
  std::vector<Record> records;
  std::size_t malformed = 0;
};

class KernelSource {
 public:
  virtual ~KernelSource() = default;

  // One RTM_GETLINK dump of every interface, without per-VF information.
  // Throws CollectError("netlink_error") when the dump cannot be done.
  virtual Dump<LinkRecord> dump_links() = 0;
  // One RTM_GETQDISC dump. Throws CollectError("netlink_error").
  virtual Dump<QdiscRecord> dump_qdiscs() = 0;

  // ETHTOOL_GDRVINFO.
  virtual Status driver_info(const std::string& ifname, DriverInfo* out) = 0;
  // ETHTOOL_GLINKSETTINGS: *mbps is left empty when the kernel does not know
  // the speed (SPEED_UNKNOWN, a link that is down, a virtual device).
  virtual Status link_speed(const std::string& ifname, std::optional<std::uint32_t>* mbps) = 0;

  // ETHTOOL_GSSET_INFO(ETH_SS_STATS): how many driver statistics.
  virtual Status stats_count(const std::string& ifname, std::uint32_t* count) = 0;
  // ETHTOOL_GSTRINGS(ETH_SS_STATS): `count` names.
  virtual Status stats_names(const std::string& ifname, std::uint32_t count,
                             std::vector<std::string>* names) = 0;
  // ETHTOOL_GSTATS: the values, as many as the driver has now (which may
  // differ from `count` when the set changed in between).
  virtual Status stats_values(const std::string& ifname, std::uint32_t count,
                              std::vector<std::uint64_t>* values) = 0;

  // ethtool netlink dumps of standard statistics (kernel 5.10+ for pause,
  // 5.13+ for FEC); kUnsupported when the kernel has no "ethtool" family or
  // does not accept the statistics flag. Drivers that do not implement a
  // group are simply absent from the dump.
  virtual Status pause_stats(Dump<PauseStats>* out) = 0;
  virtual Status fec_stats(Dump<FecStats>* out) = 0;
};

// The netlink (libnl) and SIOCETHTOOL implementation, bound to the network
// namespace of the calling thread. Throws CollectError when the route
// netlink socket cannot be opened. `receive_buffer`: the starting size of
// the buffer dumps are received into (0: the default, 64 KiB); a datagram
// larger than it grows it, and the dump is asked again.
std::unique_ptr<KernelSource> make_kernel_source(std::size_t receive_buffer = 0);

}  // namespace nodewatch::nic
