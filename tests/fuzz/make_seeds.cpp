// Writes the binary seeds of the netlink harnesses into the directory given
// (one subdirectory per harness): messages as the kernel sends them, built
// with the constants of the kernel headers the parsers use, so that the
// fuzzer starts from inputs that reach past the headers.
//   rdma_netlink/  an RDMA_NLDEV_CMD_STAT_GET reply of an mlx5 port (4
//                  hw_counters, one of them with the _DYNAMIC attribute of
//                  newer kernels), a two-device GET dump with NLMSG_DONE,
//                  and an NLMSG_ERROR
//   nic/           the route netlink messages of tests/fixtures/nic/netlink
//                  (hex, one message per paragraph) as bytes, and an
//                  ethtool pause and FEC statistics reply
// Usage: make_seeds OUT_DIR FIXTURES_DIR

#include <linux/ethtool_netlink.h>
#include <linux/genetlink.h>
#include <linux/netlink.h>
#include <rdma/rdma_netlink.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace {

class Msg {
 public:
  Msg(std::uint16_t type, std::uint16_t flags, std::uint32_t seq, bool genl = false) {
    bytes_.resize(NLMSG_HDRLEN);
    std::memcpy(&bytes_[4], &type, 2);
    std::memcpy(&bytes_[6], &flags, 2);
    std::memcpy(&bytes_[8], &seq, 4);
    if (genl) bytes_.resize(bytes_.size() + GENL_HDRLEN, 0);
  }
  void raw(std::uint16_t type, const void* data, std::size_t n) {
    auto len = static_cast<std::uint16_t>(NLA_HDRLEN + n);
    std::size_t at = bytes_.size();
    bytes_.resize(at + NLA_ALIGN(len), 0);
    std::memcpy(&bytes_[at], &len, 2);
    std::memcpy(&bytes_[at + 2], &type, 2);
    if (n > 0) std::memcpy(&bytes_[at + NLA_HDRLEN], data, n);
  }
  void u32(std::uint16_t type, std::uint32_t v) { raw(type, &v, 4); }
  void u64(std::uint16_t type, std::uint64_t v) { raw(type, &v, 8); }
  void str(std::uint16_t type, const std::string& s) { raw(type, s.c_str(), s.size() + 1); }
  std::size_t begin(std::uint16_t type) {
    std::size_t at = bytes_.size();
    raw(type | NLA_F_NESTED, nullptr, 0);
    return at;
  }
  void end(std::size_t at) {
    auto len = static_cast<std::uint16_t>(bytes_.size() - at);
    std::memcpy(&bytes_[at], &len, 2);
  }
  std::vector<std::uint8_t> finish() {
    auto len = static_cast<std::uint32_t>(bytes_.size());
    std::memcpy(bytes_.data(), &len, 4);
    return bytes_;
  }

 private:
  std::vector<std::uint8_t> bytes_;
};

void write(const std::filesystem::path& p, const std::vector<std::uint8_t>& b) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary)
      .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

std::vector<std::uint8_t> cat(std::vector<std::uint8_t> a, const std::vector<std::uint8_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

constexpr std::uint16_t kStatGet = RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_STAT_GET);
constexpr std::uint16_t kGet = RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_GET);

void rdma_seeds(const std::filesystem::path& dir) {
  Msg m(kStatGet, 0, 7);
  m.u32(RDMA_NLDEV_ATTR_DEV_INDEX, 3);
  m.str(RDMA_NLDEV_ATTR_DEV_NAME, "mlx5_0");
  m.u32(RDMA_NLDEV_ATTR_PORT_INDEX, 1);
  std::size_t counters = m.begin(RDMA_NLDEV_ATTR_STAT_HWCOUNTERS);
  const char* names[] = {"np_cnp_sent", "rp_cnp_handled", "out_of_sequence",
                         "local_ack_timeout_err"};
  std::uint64_t value = 1000;
  for (const char* name : names) {
    std::size_t entry = m.begin(RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY);
    m.str(RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_NAME, name);
    m.raw(RDMA_NLDEV_ATTR_PAD, nullptr, 0);
    m.u64(RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_VALUE, value *= 7);
    if (value > 100000) m.raw(RDMA_NLDEV_ATTR_STAT_HWCOUNTER_DYNAMIC, "\1", 1);
    m.end(entry);
  }
  m.end(counters);
  write(dir / "stat_get_mlx5_0_port1.bin", m.finish());

  std::vector<std::uint8_t> dump;
  for (std::uint32_t i : {0u, 1u}) {
    Msg d(kGet, NLM_F_MULTI, 8);
    d.u32(RDMA_NLDEV_ATTR_DEV_INDEX, i);
    d.str(RDMA_NLDEV_ATTR_DEV_NAME, "mlx5_" + std::to_string(i));
    dump = cat(dump, d.finish());
  }
  Msg done(NLMSG_DONE, NLM_F_MULTI, 8);
  int zero = 0;
  done.raw(0, &zero, 0);
  std::vector<std::uint8_t> d = done.finish();
  d.resize(NLMSG_HDRLEN + 4, 0);
  std::uint32_t dl = static_cast<std::uint32_t>(d.size());
  std::memcpy(d.data(), &dl, 4);
  write(dir / "get_dump_two_devices.bin", cat(dump, d));

  std::vector<std::uint8_t> err(NLMSG_HDRLEN + sizeof(nlmsgerr), 0);
  std::uint32_t len = static_cast<std::uint32_t>(err.size());
  std::uint16_t type = NLMSG_ERROR;
  std::uint32_t seq = 9;
  int code = -95;  // EOPNOTSUPP
  std::memcpy(&err[0], &len, 4);
  std::memcpy(&err[4], &type, 2);
  std::memcpy(&err[8], &seq, 4);
  std::memcpy(&err[NLMSG_HDRLEN], &code, 4);
  write(dir / "error_eopnotsupp.bin", err);
}

void nic_seeds(const std::filesystem::path& dir, const std::filesystem::path& fixtures) {
  for (const char* name : {"link_veth", "qdisc_veth"}) {
    std::ifstream in(fixtures / "nic" / "netlink" / (std::string(name) + ".hex"));
    std::string line, hex;
    int n = 0;
    auto flush = [&] {
      if (hex.empty()) return;
      std::vector<std::uint8_t> b;
      for (std::size_t i = 0; i + 1 < hex.size(); i += 2)
        b.push_back(static_cast<std::uint8_t>(std::stoi(hex.substr(i, 2), nullptr, 16)));
      write(dir / (std::string(name) + "_" + std::to_string(n++) + ".bin"), b);
      hex.clear();
    };
    while (std::getline(in, line)) {
      if (line.empty()) {
        flush();
        continue;
      }
      for (char c : line)
        if (std::isxdigit(static_cast<unsigned char>(c))) hex += c;
    }
    flush();
  }
  Msg p(0x1d, 0, 3, true);
  std::size_t h = p.begin(ETHTOOL_A_PAUSE_HEADER);
  p.u32(ETHTOOL_A_HEADER_DEV_INDEX, 4);
  p.str(ETHTOOL_A_HEADER_DEV_NAME, "ens1f0np0");
  p.end(h);
  std::size_t s = p.begin(ETHTOOL_A_PAUSE_STATS);
  p.raw(ETHTOOL_A_PAUSE_STAT_PAD, nullptr, 0);
  p.u64(ETHTOOL_A_PAUSE_STAT_TX_FRAMES, 123456789012ull);
  p.u64(ETHTOOL_A_PAUSE_STAT_RX_FRAMES, 42);
  p.end(s);
  write(dir / "ethtool_pause_reply.bin", p.finish());

  Msg f(0x1d, 0, 4, true);
  h = f.begin(ETHTOOL_A_FEC_HEADER);
  f.u32(ETHTOOL_A_HEADER_DEV_INDEX, 4);
  f.end(h);
  s = f.begin(ETHTOOL_A_FEC_STATS);
  std::uint64_t corrected[3] = {1000, 600, 400};  // the total, then per lane
  std::uint64_t uncorrected[1] = {2};
  f.raw(ETHTOOL_A_FEC_STAT_CORRECTED, corrected, sizeof corrected);
  f.raw(ETHTOOL_A_FEC_STAT_UNCORR, uncorrected, sizeof uncorrected);
  f.end(s);
  write(dir / "ethtool_fec_reply.bin", f.finish());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: make_seeds OUT_DIR FIXTURES_DIR\n";
    return 2;
  }
  std::filesystem::path out = argv[1];
  rdma_seeds(out / "rdma_netlink");
  nic_seeds(out / "nic", argv[2]);
  return 0;
}
