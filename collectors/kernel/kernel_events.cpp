#include "kernel/kernel_events.hpp"

#include <array>
#include <cctype>
#include <charconv>
#include <string>

namespace nodewatch::kernel {
namespace {

using std::string_view;

bool starts(string_view s, string_view p) {
  return s.substr(0, p.size()) == p;
}
bool ends(string_view s, string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}
bool has(string_view s, string_view p) {
  return s.find(p) != string_view::npos;
}

bool is_hex(char c) {
  return std::isxdigit(static_cast<unsigned char>(c)) != 0;
}
bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

std::string lower(string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// A label-safe name, or "other" ("-" too: the state file's mark for none).
std::string label(string_view s) {
  if (s.empty() || s == "-") return "other";
  for (char c : s) {
    bool ok = std::isalnum(static_cast<unsigned char>(c)) != 0 || c == ':' || c == '.' ||
              c == '_' || c == '-';
    if (!ok) return "other";
  }
  return std::string(s);
}

// A PCI address at the start of `s`: DDDD:BB:SS, then ".F" (required when
// `function` is true; NVRM prints none). Normalized to 0000:18:00.0, with
// its length in `*used`.
std::optional<std::string> pci_at(string_view s, bool function, std::size_t* used = nullptr) {
  auto hex_run = [&](std::size_t at, std::size_t n) {
    if (s.size() < at + n) return false;
    for (std::size_t i = 0; i < n; ++i)
      if (!is_hex(s[at + i])) return false;
    return true;
  };
  if (!hex_run(0, 4) || s.size() < 10 || s[4] != ':' || !hex_run(5, 2) || s[7] != ':' ||
      !hex_run(8, 2))
    return std::nullopt;
  std::string out = lower(s.substr(0, 10));
  std::size_t n = 10;
  if (s.size() >= 12 && s[10] == '.' && s[11] >= '0' && s[11] <= '7') {
    out += s.substr(10, 2);
    n = 12;
  } else if (function) {
    return std::nullopt;
  } else {
    out += ".0";
  }
  if (n < s.size() && (is_hex(s[n]) || s[n] == '.')) return std::nullopt;  // longer than an address
  if (used != nullptr) *used = n;
  return out;
}

// A leading number, all its digits. One past 64 bits is no number the
// kernel printed: `*too_long` is set (the record is malformed, never its
// first digits taken for the number).
std::optional<std::uint64_t> number_at(string_view s, std::size_t* used = nullptr,
                                       bool* too_long = nullptr) {
  std::size_t i = 0;
  while (i < s.size() && is_digit(s[i])) ++i;
  if (i == 0) return std::nullopt;
  std::uint64_t v = 0;
  if (std::from_chars(s.data(), s.data() + i, v).ec != std::errc()) {
    if (too_long != nullptr) *too_long = true;
    return std::nullopt;
  }
  if (used != nullptr) *used = i;
  return v;
}

KernelEvent malformed() {
  KernelEvent e;
  e.malformed = true;
  return e;
}

// dev_printk's "<driver> <device>: " and netdev_printk's
// "<driver> <device> <interface>: " prefixes.
struct DevLine {
  string_view driver, device, iface, rest;
};
std::optional<DevLine> dev_line(string_view m) {
  std::size_t colon = m.find(": ");
  if (colon == string_view::npos) return std::nullopt;
  string_view head = m.substr(0, colon);
  DevLine d;
  d.rest = m.substr(colon + 2);
  std::size_t sp = head.find(' ');
  if (sp == string_view::npos) return std::nullopt;
  d.driver = head.substr(0, sp);
  head.remove_prefix(sp + 1);
  sp = head.find(' ');
  d.device = head.substr(0, sp);
  if (sp != string_view::npos) {
    d.iface = head.substr(sp + 1);
    if (d.iface.empty() || has(d.iface, " ")) return std::nullopt;
  }
  if (d.driver.empty() || d.device.empty()) return std::nullopt;
  return d;
}

// The PCI device of a dev_printk line, "" when it names none.
std::string pci_device(const DevLine& d) {
  auto p = pci_at(d.device, true);
  return p ? *p : std::string();
}

KernelEvent event(string_view name, std::string device = {}, std::string code = {},
                  std::uint64_t count = 1) {
  KernelEvent e;
  e.event = std::string(name);
  e.device = std::move(device);
  e.code = std::move(code);
  e.count = count;
  return e;
}

// --- NVIDIA -----------------------------------------------------------------

// "NVRM: Xid (PCI:0000:9b:00): 119, ..." (also without "PCI:", with a MIG
// instance after the address).
std::optional<KernelEvent> nvidia_xid(string_view m) {
  if (!starts(m, "NVRM: Xid (")) return std::nullopt;
  string_view s = m.substr(11);
  if (starts(s, "PCI:")) s.remove_prefix(4);
  std::size_t used = 0;
  auto pci = pci_at(s, false, &used);
  if (!pci) return std::nullopt;
  std::size_t close = s.find("): ", used);
  if (close == string_view::npos) return std::nullopt;
  bool too_long = false;
  auto xid = number_at(s.substr(close + 3), nullptr, &too_long);
  if (too_long) return malformed();
  if (!xid) return std::nullopt;
  return event("nvidia_xid", *pci, std::to_string(*xid));
}

// "nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Non-fatal, ..." (its
// "Severity ..." and "Data {...}" lines repeat the number: not counted).
std::optional<KernelEvent> nvidia_sxid(string_view m) {
  if (!starts(m, "nvidia-nvswitch")) return std::nullopt;
  std::size_t at = m.find(": SXid (PCI:");
  if (at == string_view::npos) return std::nullopt;
  string_view s = m.substr(at + 12);
  std::size_t used = 0;
  auto pci = pci_at(s, false, &used);
  if (!pci || !starts(s.substr(used), "): ")) return std::nullopt;
  s.remove_prefix(used + 3);
  std::size_t n = 0;
  bool too_long = false;
  auto sxid = number_at(s, &n, &too_long);
  if (too_long) return malformed();
  if (!sxid) return std::nullopt;
  string_view rest = s.substr(n);
  if (starts(rest, ", ")) rest.remove_prefix(2);
  if (starts(rest, "Severity ") || starts(rest, "Data {")) return std::nullopt;
  return event("nvidia_sxid", *pci, std::to_string(*sxid));
}

// NVRM's own "fallen off the bus" lines, in their several forms, each with
// the GPU's address right after its fixed start ("NVRM: GPU 0000:29:00.0:
// ...", "NVRM: GPU at PCI:0000:18:00: ...", "NVRM: GPU at 0000:01:00.0 has
// ...", "NVRM: The NVIDIA GPU 0000:b3:00.0\nNVRM: ... fallen off the bus"):
// other NVRM lines carry text a process chose (an API mismatch names the
// client's version string) and are never searched for an address.
std::optional<KernelEvent> gpu_fallen_off_bus(string_view m) {
  if (!starts(m, "NVRM: ") || !has(m, "fallen off the bus")) return std::nullopt;
  static constexpr std::array<string_view, 4> kStarts = {"NVRM: GPU at PCI:", "NVRM: GPU at ",
                                                         "NVRM: The NVIDIA GPU ", "NVRM: GPU "};
  for (string_view start : kStarts) {
    if (!starts(m, start)) continue;
    std::size_t used = 0;
    auto pci = pci_at(m.substr(start.size()), false, &used);
    if (!pci) continue;
    string_view rest = m.substr(start.size() + used);
    if (starts(rest, ": ") || starts(rest, " has ") || starts(rest, "\n")) {
      return event("gpu_fallen_off_bus", *pci);
    }
  }
  return std::nullopt;
}

// --- AMD --------------------------------------------------------------------

std::optional<KernelEvent> amdgpu(string_view m) {
  if (starts(m, "[drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring ") && has(m, " timeout"))
    return event("amdgpu_ring_timeout");
  if (!starts(m, "amdgpu ")) return std::nullopt;
  auto d = dev_line(m);
  if (!d || !d->iface.empty()) return std::nullopt;
  std::string pci = pci_device(*d);
  if (pci.empty()) return std::nullopt;
  string_view rest = d->rest;
  if (starts(rest, "amdgpu: ")) rest.remove_prefix(8);
  if (starts(rest, "GPU reset begin!")) return event("amdgpu_reset", pci);
  if (starts(rest, "ring ") && has(rest, " timeout")) return event("amdgpu_ring_timeout", pci);
  return std::nullopt;
}

// --- PCIe -------------------------------------------------------------------

std::optional<KernelEvent> pcie(string_view m) {
  auto d = dev_line(m);
  if (!d) return std::nullopt;
  string_view rest = d->rest;
  if (starts(rest, "PCIe Bus Error: severity=") || starts(rest, "CXL Bus Error: severity=")) {
    std::string pci = pci_device(*d);
    if (pci.empty()) return std::nullopt;
    string_view sev = rest.substr(rest.find('=') + 1);
    if (starts(sev, "Corrected") || starts(sev, "Correctable"))
      return event("aer_correctable", pci);
    if (starts(sev, "Uncorrected (Non-Fatal)") || starts(sev, "Uncorrectable (Non-Fatal)"))
      return event("aer_nonfatal", pci);
    if (starts(sev, "Uncorrected (Fatal)") || starts(sev, "Uncorrectable (Fatal)"))
      return event("aer_fatal", pci);
    return std::nullopt;
  }
  // 5.x on: "<driver> 0000:30:03.0: DPC: containment event, ..."; 4.x:
  // "dpc 0000:00:03.2:pcie008: DPC containment event, ...".
  if (starts(rest, "DPC: containment event") || starts(rest, "DPC containment event")) {
    auto pci = pci_at(d->device, false);
    if (!pci || !has(d->device, ".")) return std::nullopt;
    return event("dpc_containment", *pci);
  }
  return std::nullopt;
}

// --- NICs -------------------------------------------------------------------

// "<func>:<line>:(pid N): ..." after mlx5_core's device prefix.
string_view mlx5_function(string_view rest) {
  std::size_t colon = rest.find(':');
  return colon == string_view::npos ? string_view() : rest.substr(0, colon);
}

std::optional<KernelEvent> mlx5(string_view m) {
  if (!starts(m, "mlx5_core ")) return std::nullopt;
  auto d = dev_line(m);
  if (!d || !d->iface.empty()) return std::nullopt;
  std::string pci = pci_device(*d);
  if (pci.empty()) return std::nullopt;
  string_view fn = mlx5_function(d->rest);
  if (fn == "poll_health" && (has(d->rest, "Fatal error") || has(d->rest, "health compromised")))
    return event("mlx5_health", pci);
  if ((fn == "wait_func" || fn == "cb_timeout_handler") && has(d->rest, "timeout"))
    return event("mlx5_cmd_timeout", pci);
  return std::nullopt;
}

std::optional<KernelEvent> netdev(string_view m) {
  // Before 6.8: "NETDEV WATCHDOG: eth1 (mlx5_core): transmit queue 19 timed out[ N ms]".
  if (starts(m, "NETDEV WATCHDOG: ") && has(m, "timed out")) {
    string_view s = m.substr(17);
    std::size_t sp = s.find(' ');
    return event("netdev_tx_timeout", label(s.substr(0, sp)));
  }
  auto d = dev_line(m);
  if (!d || d->iface.empty()) return std::nullopt;
  // 6.8 on: "<driver> <device> <ifname>: NETDEV WATCHDOG: CPU: N: transmit queue ...".
  if (starts(d->rest, "NETDEV WATCHDOG: ") && has(d->rest, "timed out"))
    return event("netdev_tx_timeout", label(d->iface));
  string_view rest = d->rest;
  bool down = rest == "Link down" || starts(rest, "NIC Link is Down") ||
              (starts(rest, "Port: ") && ends(rest, " Link DOWN"));
  if (down) return event("link_down", label(d->iface));
  return std::nullopt;
}

// --- CPU and memory ---------------------------------------------------------

std::optional<KernelEvent> host(string_view m) {
  if (m == "mce: [Hardware Error]: Machine check events logged" ||
      m == "[Hardware Error]: Machine check events logged" || m == "Machine check events logged")
    return event("machine_check");
  if (starts(m, "EDAC MC")) {
    std::size_t colon = m.find(": ");
    if (colon == string_view::npos) return std::nullopt;
    string_view mc = m.substr(7, colon - 7);
    if (mc.empty() || mc.find_first_not_of("0123456789") != string_view::npos) return std::nullopt;
    string_view rest = m.substr(colon + 2);
    std::size_t n = 0;
    std::uint64_t count = 1;
    bool too_long = false;
    auto c = number_at(rest, &n, &too_long);
    if (too_long) return malformed();
    if (c && n < rest.size() && rest[n] == ' ') {
      // The kernel's count is a u16 (edac_raw_error_desc.error_count): a
      // larger number is not one it printed.
      if (*c > 65535) return std::nullopt;
      count = *c;
      rest.remove_prefix(n + 1);
    }
    if (starts(rest, "CE ")) return event("memory_corrected", {}, {}, count);
    if (starts(rest, "UE ")) return event("memory_uncorrected", {}, {}, count);
    return std::nullopt;
  }
  if (starts(m, "INFO: task ") && has(m, " blocked for more than ")) return event("hung_task");
  for (string_view p : {"watchdog: BUG: soft lockup - CPU#",
                        "NMI watchdog: BUG: soft lockup - CPU#", "BUG: soft lockup - CPU#"}) {
    if (starts(m, p)) return event("soft_lockup");
  }
  for (string_view p : {"Out of memory: Killed process ",
                        "Memory cgroup out of memory: Killed process ", "Killed process "}) {
    if (!starts(m, p)) continue;
    std::size_t n = 0;
    bool too_long = false;
    if (number_at(m.substr(p.size()), &n, &too_long) && starts(m.substr(p.size() + n), " ("))
      return event("oom_kill");
    if (too_long) return malformed();
  }
  return std::nullopt;
}

// --- Storage ----------------------------------------------------------------

std::optional<KernelEvent> storage(string_view m) {
  if (starts(m, "nfs: server ")) {
    if (has(m, " not responding")) return event("nfs_not_responding");
    if (ends(m, " OK")) return event("nfs_ok");
    return std::nullopt;
  }
  if (starts(m, "EXT4-fs error (device ")) {
    string_view s = m.substr(22);
    std::size_t close = s.find(')');
    if (close == string_view::npos) return std::nullopt;
    return event("fs_error", label(s.substr(0, close)));
  }
  if (starts(m, "XFS (")) {
    std::size_t close = m.find("): ");
    if (close == string_view::npos) return std::nullopt;
    string_view rest = m.substr(close + 3);
    static constexpr std::array<string_view, 5> kErrors = {
        "Metadata corruption detected", "Metadata CRC error detected", "xfs_do_force_shutdown",
        "Filesystem has been shut down", "Corruption of in-memory data"};
    for (string_view e : kErrors) {
      if (starts(rest, e)) return event("fs_error", label(m.substr(5, close - 5)));
    }
    return std::nullopt;
  }
  // blk_status_to_str's "I/O error", "critical medium error", ... then
  // ", dev <disk>, sector": the block layer's line (prefixed by
  // "blk_update_request: " or "print_req_error: " on older kernels).
  std::size_t at = m.find(" error, dev ");
  if (at != string_view::npos && has(m, ", sector")) {
    string_view head = m.substr(0, at);
    if (starts(head, "blk_update_request: ")) head.remove_prefix(20);
    if (starts(head, "print_req_error: ")) head.remove_prefix(17);
    if (head.find(':') != string_view::npos) return std::nullopt;  // another driver's line
    string_view dev = m.substr(at + 12);
    dev = dev.substr(0, dev.find(','));
    return event("io_error", label(dev));
  }
  return std::nullopt;
}

}  // namespace

const std::vector<std::string_view>& kernel_event_names() {
  static const std::vector<std::string_view> kNames = {
      "nvidia_xid",
      "nvidia_sxid",
      "gpu_fallen_off_bus",
      "amdgpu_reset",
      "amdgpu_ring_timeout",
      "aer_correctable",
      "aer_nonfatal",
      "aer_fatal",
      "dpc_containment",
      "mlx5_health",
      "mlx5_cmd_timeout",
      "netdev_tx_timeout",
      "link_down",
      "machine_check",
      "memory_corrected",
      "memory_uncorrected",
      "hung_task",
      "soft_lockup",
      "oom_kill",
      "nfs_not_responding",
      "nfs_ok",
      "fs_error",
      "io_error",
  };
  return kNames;
}

namespace {

// A line that starts with a task's name. The kernel prints text a process
// chose at facility 0: its name (comm, up to 15 bytes) and, for a
// segfault, its file's name ("python3[4242]: segfault at 0 ip ... in
// libx.so[7f..]", arch/x86/mm/fault.c; "traps: a.out[77] general
// protection fault ...", arch/x86/kernel/traps.c). A process named
// "EDAC MC0: 9 CE " would otherwise log a memory error. No line of the
// vocabulary has "[<digits>]" in its first 16 bytes.
bool starts_with_task(string_view m) {
  if (starts(m, "traps: ")) return true;
  for (std::size_t i = 0; i < m.size() && i <= 15; ++i) {
    if (m[i] != '[') continue;
    std::size_t j = i + 1;
    while (j < m.size() && is_digit(m[j])) ++j;
    if (j > i + 1 && j < m.size() && m[j] == ']') return true;
  }
  return false;
}

}  // namespace

std::optional<KernelEvent> match_kernel_event(std::string_view m) {
  if (starts_with_task(m)) return std::nullopt;
  using Fn = std::optional<KernelEvent> (*)(string_view);
  static constexpr std::array<Fn, 9> kMatchers = {
      nvidia_xid, nvidia_sxid, gpu_fallen_off_bus, amdgpu, pcie, mlx5, netdev, host, storage};
  for (Fn f : kMatchers) {
    if (auto e = f(m)) return e;
  }
  return std::nullopt;
}

std::optional<KernelEvent> match_kernel_record(const KmsgRecord& r) {
  return match_kernel_event(r.message);
}

}  // namespace nodewatch::kernel
