// The real KernelSource: route netlink dumps and ethtool netlink (libnl and
// libnl-genl build and send the requests; run_dump() reads the replies into
// a buffer kept between dumps, and our parsers read them), and the
// SIOCETHTOOL ioctl for driver information, speed and driver statistics.

#include <linux/ethtool.h>
#include <linux/ethtool_netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <netlink/genl/ctrl.h>
#include <netlink/genl/genl.h>
#include <netlink/msg.h>
#include <netlink/netlink.h>
#include <netlink/socket.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <vector>

#include "nic/nic_kernel.hpp"
#include "nodewatch/collector.hpp"
#include "nodewatch/unique_fd.hpp"

namespace nodewatch::nic {
namespace {

// A dump that does not complete within this time is abandoned: the kernel
// answers a dump in microseconds to milliseconds, so this only bounds a
// wedged kernel (the collector's own deadline is the scheduler's business).
constexpr int kReceiveTimeoutSeconds = 5;

// Driver statistics may grow between ETHTOOL_GSSET_INFO and the GSTRINGS or
// GSTATS that follows (the kernel writes as many as the driver has *now*,
// whatever length we pass): buffers get this much room beyond the count just
// read, and end at an inaccessible page (GuardedBuffer), so that a larger
// growth fails the call with EFAULT instead of writing past the buffer.
constexpr std::uint32_t kStatsSlack = 256;

class GuardedBuffer {
 public:
  GuardedBuffer() = default;
  ~GuardedBuffer() { release(); }
  GuardedBuffer(const GuardedBuffer&) = delete;
  GuardedBuffer& operator=(const GuardedBuffer&) = delete;

  // `bytes` (rounded up to 8) that end where the guard page begins, zeroed;
  // null when no mapping could be made. The mapping is kept for the next
  // call and grown only when a call needs more: a collection costs no
  // mmap, mprotect and munmap per interface (three system calls and the
  // page faults of a fresh mapping, twice: names and values).
  std::uint8_t* get(std::size_t bytes) {
    const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    const std::size_t rounded = (bytes + 7) / 8 * 8;
    if (rounded > data_bytes_) {
      release();
      const std::size_t data = (rounded + page - 1) / page * page;
      void* p =
          ::mmap(nullptr, data + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) return nullptr;
      base_ = static_cast<std::uint8_t*>(p);
      if (::mprotect(base_ + data, page, PROT_NONE) != 0) {
        ::munmap(base_, data + page);
        base_ = nullptr;
        return nullptr;
      }
      data_bytes_ = data;
    }
    std::uint8_t* start = base_ + data_bytes_ - rounded;
    std::memset(start, 0, rounded);
    return start;
  }

 private:
  void release() {
    if (base_ == nullptr) return;
    const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    ::munmap(base_, data_bytes_ + page);
    base_ = nullptr;
    data_bytes_ = 0;
  }
  std::uint8_t* base_ = nullptr;
  std::size_t data_bytes_ = 0;  // below the guard page
};
// A driver reporting more statistics than this is not believed.
constexpr std::uint32_t kMaxStats = 1 << 16;

struct SockDeleter {
  void operator()(nl_sock* s) const { nl_socket_free(s); }
};
using SockPtr = std::unique_ptr<nl_sock, SockDeleter>;
struct MsgDeleter {
  void operator()(nl_msg* m) const { nlmsg_free(m); }
};
using MsgPtr = std::unique_ptr<nl_msg, MsgDeleter>;

SockPtr open_netlink(int protocol) {
  SockPtr sk(nl_socket_alloc());
  if (!sk) return nullptr;
  if (nl_connect(sk.get(), protocol) < 0) return nullptr;
  timeval tv{kReceiveTimeoutSeconds, 0};
  ::setsockopt(nl_socket_get_fd(sk.get()), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return sk;
}

// Empties the socket after an abandoned dump, so the next request does not
// read the tail of the old one. The socket itself is kept: it is bound to
// the network namespace it was created in.
void drain(nl_sock* sk, std::vector<std::uint8_t>& buf) {
  while (::recv(nl_socket_get_fd(sk), buf.data(), buf.size(), MSG_DONTWAIT) > 0) {
  }
}

// The buffer a dump is received into, kept between dumps. The kernel sizes
// a dump's datagrams to the largest receive buffer the socket has been
// given, capped at 32 KiB less the skb overhead, or to the dump's own
// minimum when that is larger (net/netlink/af_netlink.c: netlink_recvmsg
// records max_recvmsg_len, netlink_dump allocates by it); RTM_GETLINK's
// minimum is the largest link message, which without per-VF data is a few
// KiB. So 64 KiB takes every datagram in one recvmsg: no MSG_PEEK to size
// each one first (libnl's way: two system calls a datagram, and a malloc).
// A larger one is still seen (MSG_TRUNC gives its real length): the dump
// is abandoned, the buffer grown, and the dump asked again.
constexpr std::size_t kReceiveBuffer = 64 * 1024;
constexpr std::size_t kMaxReceiveBuffer = 16 * 1024 * 1024;

// Sends `request` (already built) and reads the whole dump into `buf`,
// calling `on_message` with each message of the request's sequence number
// (replies to an earlier, abandoned request carry another: skipped).
// Returns 0 or a negative libnl error: -NLE_DUMP_INTR when a message said
// the dump was interrupted by a change (read to its end first),
// -NLE_MSG_TRUNC when a datagram did not fit (`buf` is grown for the next
// try), -NLE_AGAIN when the kernel did not finish within the receive
// timeout, the kernel's error for an NLMSG_ERROR (the request refused) or
// for an NLMSG_DONE that carries one (the dump failed part way, after the
// messages already passed on); `*in_done` says which of the last two.
int run_dump(nl_sock* sk, std::vector<std::uint8_t>& buf, nl_msg* request,
             const std::function<void(Bytes)>& on_message, bool* in_done) {
  *in_done = false;
  int err = nl_send_auto(sk, request);
  if (err < 0) return err;
  const std::uint32_t seq = nlmsg_hdr(request)->nlmsg_seq;
  const int fd = nl_socket_get_fd(sk);
  DumpScan scan;
  err = 0;
  for (bool done = false; !done && err == 0;) {
    sockaddr_nl from{};
    iovec iov{buf.data(), buf.size()};
    msghdr msg{};
    msg.msg_name = &from;
    msg.msg_namelen = sizeof(from);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    const ssize_t n = ::recvmsg(fd, &msg, MSG_TRUNC);
    if (n < 0) {
      if (errno == EINTR) continue;
      // The receive timeout: the dump never finished.
      err = errno == EAGAIN || errno == EWOULDBLOCK ? -NLE_AGAIN : -nl_syserr2nlerr(errno);
      break;
    }
    if (n == 0) {
      err = -NLE_AGAIN;
      break;
    }
    if ((msg.msg_flags & MSG_TRUNC) != 0 || static_cast<std::size_t>(n) > buf.size()) {
      // At least the kernel's cap on the sizes it takes from receive
      // buffers (a larger receive since, the drain's or libnl's own, then
      // cannot make the next datagrams larger than this buffer), and twice
      // the buffer (a dump whose minimum allocation is over the cap sizes
      // its datagrams by that, and the next may be larger).
      const std::size_t want = std::max<std::size_t>(
          {(static_cast<std::size_t>(n) + 4095) / 4096 * 4096, 32 * 1024, 2 * buf.size()});
      if (want <= kMaxReceiveBuffer) buf.resize(want);
      err = -NLE_MSG_TRUNC;
      break;
    }
    if (from.nl_pid != 0) continue;  // not from the kernel
    scan_dump_datagram(Bytes(buf.data(), static_cast<std::size_t>(n)), seq, scan, on_message);
    if (scan.truncated || scan.malformed) {
      // Not the kernel's layout: the rest of the dump cannot be trusted
      // (nor its end found).
      err = -NLE_MSG_TRUNC;
    } else if (scan.overrun) {
      err = -NLE_MSG_OVERFLOW;
    } else if (scan.error != 0) {
      err = -nl_syserr2nlerr(scan.error);
      *in_done = scan.error_in_done;
    }
    done = scan.done;
  }
  if (err < 0) {
    drain(sk, buf);
    return err;
  }
  return scan.interrupted ? -NLE_DUMP_INTR : 0;
}

// The on_message of run_dump() for a dump of `Record`s: each message
// parsed into `out`, or counted malformed.
template <class Record, class Parse>
std::function<void(Bytes)> records_into(Dump<Record>& out, Parse parse) {
  return [&out, parse](Bytes m) {
    if (auto rec = parse(m)) {
      out.records.push_back(std::move(*rec));
    } else {
      ++out.malformed;
    }
  };
}

Status status_of_errno(int err) {
  switch (err) {
    case EOPNOTSUPP: return Status::kUnsupported;
    case ENODEV:
    case ENXIO: return Status::kGone;
    default: return Status::kError;
  }
}

class RealKernelSource final : public KernelSource {
 public:
  explicit RealKernelSource(std::size_t receive_buffer)
      : rx_(receive_buffer),
        route_(open_netlink(NETLINK_ROUTE)),
        genl_(open_netlink(NETLINK_GENERIC)),
        ioctl_fd_(open_ioctl_socket()) {
    if (!route_) {
      throw CollectError("netlink_error", "cannot open a route netlink socket: " +
                                              std::string(std::strerror(errno)));
    }
  }

  Dump<LinkRecord> dump_links() override {
    // The request carries no IFLA_EXT_MASK: without RTEXT_FILTER_VF the
    // kernel does not fill per-VF information under the RTNL lock (libnl's
    // rtnl_link_alloc_cache always asks for it).
    ifinfomsg ifi{};
    ifi.ifi_family = AF_UNSPEC;
    return dump<LinkRecord>(RTM_GETLINK, &ifi, sizeof(ifi), parse_link_message);
  }

  Dump<QdiscRecord> dump_qdiscs() override {
    tcmsg tc{};
    tc.tcm_family = AF_UNSPEC;
    return dump<QdiscRecord>(RTM_GETQDISC, &tc, sizeof(tc), parse_qdisc_message);
  }

  Status driver_info(const std::string& ifname, DriverInfo* out) override {
    ethtool_drvinfo info{};
    info.cmd = ETHTOOL_GDRVINFO;
    Status s = ethtool_ioctl(ifname, &info);
    if (s != Status::kOk) return s;
    out->driver = bounded(info.driver, sizeof(info.driver));
    out->firmware = bounded(info.fw_version, sizeof(info.fw_version));
    out->bus_info = bounded(info.bus_info, sizeof(info.bus_info));
    return Status::kOk;
  }

  Status link_speed(const std::string& ifname, std::optional<std::uint32_t>* mbps) override {
    // ETHTOOL_GLINKSETTINGS starts with a handshake: asked with 0 mask
    // words, the kernel answers with -(the number it uses), a constant of
    // the running kernel, then fills the settings when asked with it. The
    // masks (3 x nwords u32, nwords an s8) follow the fixed part.
    alignas(8) std::uint8_t buf[sizeof(ethtool_link_settings) + 3 * 127 * 4] = {};
    ethtool_link_settings base{};
    base.cmd = ETHTOOL_GLINKSETTINGS;
    base.link_mode_masks_nwords = nwords_;
    std::memcpy(buf, &base, sizeof(base));
    Status s = ethtool_ioctl(ifname, buf);
    if (s != Status::kOk) return s;
    std::memcpy(&base, buf, sizeof(base));
    if (base.link_mode_masks_nwords <= 0) {
      if (base.link_mode_masks_nwords == 0 || nwords_ != 0) return Status::kError;
      nwords_ = static_cast<std::int8_t>(-base.link_mode_masks_nwords);
      return link_speed(ifname, mbps);
    }
    std::uint32_t speed = base.speed;
    if (speed == 0 || speed == static_cast<std::uint32_t>(SPEED_UNKNOWN)) {
      mbps->reset();
    } else {
      *mbps = speed;
    }
    return Status::kOk;
  }

  Status stats_count(const std::string& ifname, std::uint32_t* count) override {
    alignas(8) std::uint8_t buf[sizeof(ethtool_sset_info) + sizeof(std::uint32_t)] = {};
    ethtool_sset_info info{};
    info.cmd = ETHTOOL_GSSET_INFO;
    info.sset_mask = std::uint64_t{1} << ETH_SS_STATS;
    std::memcpy(buf, &info, sizeof(info));
    Status s = ethtool_ioctl(ifname, buf);
    if (s != Status::kOk) return s;
    std::memcpy(&info, buf, sizeof(info));
    if ((info.sset_mask & (std::uint64_t{1} << ETH_SS_STATS)) == 0) return Status::kUnsupported;
    std::uint32_t n = 0;
    std::memcpy(&n, buf + sizeof(info), sizeof(n));
    if (n > kMaxStats) return Status::kError;
    *count = n;
    return Status::kOk;
  }

  Status stats_names(const std::string& ifname, std::uint32_t count,
                     std::vector<std::string>* names) override {
    std::uint32_t room = count + kStatsSlack;
    std::uint8_t* buf =
        guarded_.get(sizeof(ethtool_gstrings) + std::size_t{room} * ETH_GSTRING_LEN);
    if (buf == nullptr) return Status::kError;
    ethtool_gstrings hdr{};
    hdr.cmd = ETHTOOL_GSTRINGS;
    hdr.string_set = ETH_SS_STATS;
    hdr.len = count;
    std::memcpy(buf, &hdr, sizeof(hdr));
    Status s = ethtool_ioctl(ifname, buf);
    if (s != Status::kOk) return s;
    std::memcpy(&hdr, buf, sizeof(hdr));
    std::uint32_t n = std::min(hdr.len, room);
    names->clear();
    names->reserve(n);
    const char* base = reinterpret_cast<const char*>(buf + sizeof(ethtool_gstrings));
    for (std::uint32_t i = 0; i < n; ++i) {
      names->push_back(bounded(base + std::size_t{i} * ETH_GSTRING_LEN, ETH_GSTRING_LEN));
    }
    return Status::kOk;
  }

  Status stats_values(const std::string& ifname, std::uint32_t count,
                      std::vector<std::uint64_t>* values) override {
    std::uint32_t room = count + kStatsSlack;
    std::uint8_t* buf =
        guarded_.get(sizeof(ethtool_stats) + std::size_t{room} * sizeof(std::uint64_t));
    if (buf == nullptr) return Status::kError;
    ethtool_stats hdr{};
    hdr.cmd = ETHTOOL_GSTATS;
    hdr.n_stats = count;
    std::memcpy(buf, &hdr, sizeof(hdr));
    Status s = ethtool_ioctl(ifname, buf);
    if (s != Status::kOk) return s;
    std::memcpy(&hdr, buf, sizeof(hdr));
    std::uint32_t n = std::min(hdr.n_stats, room);
    values->resize(n);
    std::memcpy(values->data(), buf + sizeof(ethtool_stats), std::size_t{n} * 8);
    return Status::kOk;
  }

  Status pause_stats(Dump<PauseStats>* out) override {
    return ethtool_dump(ETHTOOL_MSG_PAUSE_GET, ETHTOOL_A_PAUSE_HEADER, &pause_supported_, out,
                        parse_ethtool_pause_reply);
  }

  Status fec_stats(Dump<FecStats>* out) override {
    return ethtool_dump(ETHTOOL_MSG_FEC_GET, ETHTOOL_A_FEC_HEADER, &fec_supported_, out,
                        parse_ethtool_fec_reply);
  }

 private:
  static int open_ioctl_socket() {
    // Any socket carries SIOCETHTOOL to the device layer; AF_INET is what
    // ethtool uses, AF_UNIX serves a kernel built without IPv4.
    int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    return fd;
  }

  static std::string bounded(const char* s, std::size_t max) {
    return std::string(s, strnlen(s, max));
  }

  Status ethtool_ioctl(const std::string& ifname, void* data) {
    if (ioctl_fd_.get() < 0) return Status::kError;
    if (ifname.size() >= IFNAMSIZ) return Status::kError;
    ifreq ifr{};
    std::memcpy(ifr.ifr_name, ifname.data(), ifname.size());
    ifr.ifr_data = static_cast<char*>(data);
    if (::ioctl(ioctl_fd_.get(), SIOCETHTOOL, &ifr) < 0) return status_of_errno(errno);
    return Status::kOk;
  }

  template <class Record, class Parse>
  Dump<Record> dump(int type, const void* header, std::size_t size, Parse parse) {
    Dump<Record> out;
    int err = 0;
    // A dump interrupted by a concurrent change (NLM_F_DUMP_INTR) is
    // inconsistent, and one whose datagram did not fit the buffer is
    // incomplete: done again, once (with the buffer grown).
    for (int attempt = 0; attempt < 2; ++attempt) {
      out = Dump<Record>{};
      MsgPtr msg(nlmsg_alloc_simple(type, NLM_F_REQUEST | NLM_F_DUMP));
      if (!msg || nlmsg_append(msg.get(), const_cast<void*>(header), size, NLMSG_ALIGNTO) < 0) {
        throw CollectError("netlink_error", "cannot build a netlink request");
      }
      bool in_done = false;
      err = run_dump(route_.get(), rx_, msg.get(), records_into(out, parse), &in_done);
      if (err != -NLE_DUMP_INTR && err != -NLE_MSG_TRUNC) break;
    }
    if (err < 0) {
      throw CollectError("netlink_error", std::string("netlink dump failed: ") + nl_geterror(err));
    }
    return out;
  }

  template <class Record, class Parse>
  Status ethtool_dump(std::uint8_t cmd, int header_attr, bool* supported, Dump<Record>* out,
                      Parse parse) {
    if (!*supported || !genl_) return Status::kUnsupported;
    if (family_ < 0) {
      family_ = genl_ctrl_resolve(genl_.get(), ETHTOOL_GENL_NAME);
      if (family_ < 0) {
        // No "ethtool" family: kernel before 5.6 or built without it.
        *supported = false;
        return Status::kUnsupported;
      }
    }
    int err = 0;
    bool in_done = false;
    // Done again, once, like the route dumps (dump()).
    for (int attempt = 0; attempt < 2; ++attempt) {
      *out = Dump<Record>{};
      MsgPtr msg(nlmsg_alloc());
      if (!msg) return Status::kError;
      if (!genlmsg_put(msg.get(), NL_AUTO_PORT, NL_AUTO_SEQ, family_, 0, NLM_F_DUMP, cmd,
                       ETHTOOL_GENL_VERSION)) {
        return Status::kError;
      }
      nlattr* nest = nla_nest_start(msg.get(), header_attr | NLA_F_NESTED);
      if (nest == nullptr ||
          nla_put_u32(msg.get(), ETHTOOL_A_HEADER_FLAGS, ETHTOOL_FLAG_STATS) < 0) {
        return Status::kError;
      }
      nla_nest_end(msg.get(), nest);
      err = run_dump(genl_.get(), rx_, msg.get(), records_into(*out, parse), &in_done);
      if (err != -NLE_DUMP_INTR && err != -NLE_MSG_TRUNC) break;
    }
    if (in_done) {
      // Until "ethtool: don't propagate EOPNOTSUPP from dumps" (v6.7, and
      // the stable kernels it went back to), an ethtool dump whose last
      // device lacks the request ended with -EOPNOTSUPP in NLMSG_DONE,
      // after the other devices' replies: a whole dump. Any other error
      // there fails this dump only (counted; asked again next time).
      return err == -NLE_OPNOTSUPP ? Status::kOk : Status::kError;
    }
    if (err == -NLE_OPNOTSUPP || err == -NLE_INVAL) {
      // The kernel knows the family but not this request or the statistics
      // flag (5.6 to 5.9 for pause, before 5.13 for FEC): not asked again.
      *supported = false;
      return Status::kUnsupported;
    }
    return err < 0 ? Status::kError : Status::kOk;
  }

  std::vector<std::uint8_t> rx_;  // run_dump()'s buffer
  SockPtr route_;
  SockPtr genl_;
  UniqueFd ioctl_fd_;
  GuardedBuffer guarded_;  // GSTRINGS and GSTATS, one after the other
  std::int8_t nwords_ = 0;
  int family_ = -1;
  bool pause_supported_ = true;
  bool fec_supported_ = true;
};

}  // namespace

std::unique_ptr<KernelSource> make_kernel_source(std::size_t receive_buffer) {
  return std::make_unique<RealKernelSource>(receive_buffer == 0 ? kReceiveBuffer : receive_buffer);
}

}  // namespace nodewatch::nic
