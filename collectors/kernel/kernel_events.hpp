#pragma once
// The kernel collector's vocabulary: which kernel log records are which
// hardware or system event, and the device each names. Every format, its
// source (the kernel's and NVIDIA's driver sources, by version) and real
// captured lines are in tests/fixtures/kernel/ (README.md, events.txt,
// whose cases the tests run one by one).
//
// Counting rules that follow from the sources:
//  - one record, one event: the lines a driver prints after the one that
//    names the event (an SXid's Severity and Data lines, AER's root-port
//    notice and register dumps, mlx5's health details, "oom-kill:" and
//    "invoked oom-killer") match nothing;
//  - AER counts the per-device "PCIe Bus Error: severity=..." line (the
//    device is the error's source), not the root port's "error received"
//    notice, which would count one error twice;
//  - XID 79 is nvidia_xid; gpu_fallen_off_bus is NVRM's own "fallen off the
//    bus" line, which also appears without an XID;
//  - an EDAC record counts the errors it reports ("262 CE" is 262).
//
// Devices: PCI addresses in the 0000:18:00.0 form of nodewatch_accelerator_
// info (NVRM's "PCI:0000:18:00" gets ".0"), network interfaces and block
// devices by name; "" where the record names none. A name with characters
// outside [A-Za-z0-9:._-] is not trusted as a label: "other".

#include <optional>
#include <string_view>
#include <vector>

#include "kernel/kernel_log.hpp"
#include "kernel/kmsg.hpp"

namespace nodewatch::kernel {

// Every event name, in the order they are matched.
const std::vector<std::string_view>& kernel_event_names();

// The event in a record's message, if any. Does not look at the facility
// (KernelLog takes facility 0 only). A record of an event's shape whose
// number (XID, SXID, EDAC count, pid) does not fit 64 bits is no record the
// kernel printed: an event with `malformed` set, which KernelLog counts as
// a malformed record, never as the event.
std::optional<KernelEvent> match_kernel_event(std::string_view message);

// The matcher KernelLog takes.
std::optional<KernelEvent> match_kernel_record(const KmsgRecord& r);

}  // namespace nodewatch::kernel
