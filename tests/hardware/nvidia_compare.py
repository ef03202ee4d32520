#!/usr/bin/env python3
"""Compares what nodewatchd exported for the NVIDIA GPUs of this node with
what nvidia-smi reports for them, value by value.

    nvidia_compare.py --nodewatch once.prom --smi before.xml [--smi after.xml] [--json FILE]

once.prom is the output of `nodewatchd --once` (accelerator and pcie
collectors); each --smi file is the output of `nvidia-smi -q -x`, normally
one taken just before nodewatchd ran and one just after. GPUs are matched by
UUID. A value that moves (temperature, power, clocks, utilization) agrees
when nodewatch's reading lies between the two nvidia-smi readings, widened
by the tolerance printed with it; a counter agrees when it lies between the
two readings (a counter may grow between them, never shrink); identity and
static values must be equal. A value that only one side prints (nvidia-smi's
"N/A", a metric nodewatch does not export on this driver) is SKIP, with the
reason.

Exit status: 0 when every comparable pair agrees, 1 when one does not (or
nothing was comparable), 2 when the nvidia-smi output cannot be used (not
XML, no GPU).

nvidia-smi's element names are those of nvsmi_device_v12.dtd (drivers 550
and later) and of the older DTDs: clocks_event_reasons or
clocks_throttle_reasons, gpu_power_readings or power_readings, power_draw
or average_power_draw/instant_power_draw, ECC counts per location
(sram_correctable, dram_uncorrectable, ...) or per bit class
(single_bit/total, double_bit/total).
"""

import argparse
import json
import math
import re
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from typing import Callable, Optional

MIB = 1024 * 1024

# ---------------------------------------------------------------------------
# nodewatch's exposition


@dataclass
class Sample:
    name: str
    labels: dict
    value: float


_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?')


def _unescape(s):
    return re.sub(r'\\(.)', lambda m: "\n" if m.group(1) == "n" else m.group(1), s)


def parse_exposition(text):
    """The samples of a Prometheus text exposition (comments skipped)."""
    samples = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        labels = {}
        brace = line.find("{")
        if brace >= 0:
            name = line[:brace]
            end = line.rfind("}")
            body, rest = line[brace + 1:end], line[end + 1:]
            pos = 0
            while pos < len(body):
                m = _LABEL.match(body, pos)
                if not m:
                    raise ValueError(f"cannot parse labels of: {line}")
                labels[m.group(1)] = _unescape(m.group(2))
                pos = m.end()
        else:
            name, _, rest = line.partition(" ")
        fields = rest.split()
        if not fields:
            raise ValueError(f"no value in: {line}")
        samples.append(Sample(name, labels, float(fields[0])))
    return samples


@dataclass
class NodewatchGpu:
    index: str
    uuid: str
    info: dict
    # (metric name, the other labels as sorted tuple) -> value
    series: dict = field(default_factory=dict)

    def get(self, metric, **labels):
        return self.series.get((metric, tuple(sorted(labels.items()))))


@dataclass
class Nodewatch:
    gpus: dict          # uuid -> NodewatchGpu (NVIDIA only)
    pcie: dict          # (metric, device) -> value
    collector_up: dict  # collector -> value
    nvml_errors: dict = field(default_factory=dict)  # (collector, reason) -> count


NVML_ERROR_REASONS = ("nvml_error", "nvml_field_type")


def read_nodewatch(text):
    samples = parse_exposition(text)
    gpus = {}
    for s in samples:
        if s.name == "nodewatch_accelerator_info" and s.labels.get("vendor") == "nvidia":
            gpus[s.labels["uuid"]] = NodewatchGpu(s.labels.get("accelerator", "?"), s.labels["uuid"],
                                                  s.labels)
    pcie, up = {}, {}
    for s in samples:
        if s.name.startswith("nodewatch_accelerator_") and s.labels.get("uuid") in gpus:
            rest = tuple(sorted((k, v) for k, v in s.labels.items() if k not in ("accelerator", "uuid")))
            gpus[s.labels["uuid"]].series[(s.name, rest)] = s.value
        elif s.name.startswith("nodewatch_pcie_link_") and "device" in s.labels:
            pcie[(s.name, s.labels["device"])] = s.value
        elif s.name == "nodewatch_collector_up":
            up[s.labels.get("collector", "")] = s.value
    # An answer of the real driver that nodewatch did not expect (a call
    # failing otherwise than NOT_SUPPORTED, a field of another value type).
    errors = {(s.labels.get("collector", ""), s.labels["reason"]): s.value for s in samples
              if s.name == "nodewatch_collector_errors_total"
              and s.labels.get("reason") in NVML_ERROR_REASONS and s.value > 0}
    return Nodewatch(gpus, pcie, up, errors)


# ---------------------------------------------------------------------------
# nvidia-smi -q -x


class NotComparable(Exception):
    """A value one side does not give; the message says why."""


_NUMBER = re.compile(r"^\s*([-+]?\d+(?:\.\d+)?)\s*([A-Za-z%/]*)\s*$")


def smi_text(gpu, path):
    e = gpu.find(path)
    if e is None:
        return None
    return (e.text or "").strip()


def smi_number(gpu, paths, unit=""):
    """The number in the first of `paths` that holds one, in `unit`.
    "N/A", "[N/A]", "Not Supported" and other words are not numbers."""
    return smi_number_at(gpu, paths, unit)[0]


def smi_number_at(gpu, paths, unit=""):
    """smi_number, and the path it was read from."""
    found = None
    for path in paths:
        text = smi_text(gpu, path)
        if text is None:
            continue
        m = _NUMBER.match(text)
        if m and m.group(2) == unit:
            return float(m.group(1)), path
        if found is None:
            found = (path, text, m is not None)
    if found is None:
        raise NotComparable(absent(paths))
    path, text, numeric = found
    if numeric:
        raise NotComparable(f"{path} is '{text}', not in {unit or 'a plain number'}")
    raise NotComparable(f"{path} is '{text}'")


def smi_flag(gpu, paths, yes, no):
    for path in paths:
        text = smi_text(gpu, path)
        if text is None:
            continue
        if text == yes:
            return 1.0
        if text == no:
            return 0.0
        raise NotComparable(f"{path} is '{text}'")
    raise NotComparable(absent(paths))


def absent(paths):
    more = f" (nor any of its {len(paths) - 1} other names)" if len(paths) > 1 else ""
    return f"nvidia-smi prints no {paths[0]}{more}"


def normalize_bdf(text):
    """'00000000:1A:00.0' (nvidia-smi) -> '0000:1a:00.0' (sysfs, nodewatch)."""
    m = re.match(r"^([0-9A-Fa-f]+):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})\.([0-7])$", text.strip())
    if not m:
        raise NotComparable(f"pci_bus_id '{text}' is not a PCI address")
    return f"{int(m.group(1), 16):04x}:{m.group(2).lower()}:{m.group(3).lower()}.{m.group(4)}"


def smi_bdf(gpu):
    text = smi_text(gpu, "pci/pci_bus_id") or gpu.get("id")
    if not text:
        raise NotComparable("nvidia-smi prints no pci/pci_bus_id")
    return normalize_bdf(text)


def smi_ecc(gpu, corrected):
    """Volatile ECC errors: the sum over memory locations (sram_correctable +
    dram_correctable, sram_uncorrectable[_parity|_secded] + dram_uncorrectable)
    as NVML's total counts them, or single_bit/total and double_bit/total on
    older drivers."""
    vol = gpu.find("ecc_errors/volatile")
    if vol is None:
        raise NotComparable("nvidia-smi prints no ecc_errors/volatile")
    old = "single_bit/total" if corrected else "double_bit/total"
    if vol.find(old) is not None:
        return smi_number(vol, [old])
    parts = [c for c in vol if "correctable" in c.tag and ("uncorrectable" in c.tag) != corrected]
    if not parts:
        raise NotComparable("ecc_errors/volatile has no counts")
    total = 0.0
    for c in parts:
        total += smi_number(vol, [c.tag])
    return total


# ---------------------------------------------------------------------------
# What is compared


@dataclass
class Quantity:
    name: str
    unit: str
    # nodewatch's value in `unit` (None: not exported), from (gpu, nodewatch)
    nodewatch: Callable
    # nvidia-smi's value in `unit` from a <gpu> element; raises NotComparable
    smi: Callable
    # allowed distance beyond the range of the nvidia-smi readings
    tolerance: float = 0.0
    relative: float = 0.0
    tolerance_text: str = "exact"
    why: str = ""
    text: bool = False  # compared as a string


_GEN_OF_SPEED = {2.5e9: 1, 5e9: 2, 8e9: 3, 16e9: 4, 32e9: 5, 64e9: 6, 128e9: 7}


def nw_gen(nw, metric, bdf):
    speed = nw.pcie.get((metric, bdf))
    if speed is None:
        return None
    gen = _GEN_OF_SPEED.get(speed)
    if gen is None:
        raise NotComparable(f"nodewatch's speed {speed:g} T/s is no PCIe generation")
    return float(gen)


# PCIe per lane and direction, bytes per second, by generation: the transfer
# rate less the line encoding (8b/10b for 1 and 2, 128b/130b for 3 to 5,
# none for 6's FLIT mode), written out here to check nodewatch's own table.
_LANE_BYTES_OF_GEN = {1: 2.5e9 * 8 / 10 / 8, 2: 5e9 * 8 / 10 / 8, 3: 8e9 * 128 / 130 / 8,
                      4: 16e9 * 128 / 130 / 8, 5: 32e9 * 128 / 130 / 8, 6: 64e9 / 8}


def smi_pcie_capacity(gpu):
    """GB/s per direction of the link as trained now, from nvidia-smi's
    current generation and width."""
    gen = smi_number(gpu, ["pci/pci_gpu_link_info/pcie_gen/current_link_gen"])
    width = smi_number(gpu, ["pci/pci_gpu_link_info/link_widths/current_link_width"], "x")
    lane = _LANE_BYTES_OF_GEN.get(int(gen))
    if lane is None:
        raise NotComparable(f"nvidia-smi's generation {gen:g} is no PCIe generation")
    return width * lane / 1e9


def nw_scaled(metric, scale, **labels):
    def get(g, _nw):
        v = g.get(metric, **labels)
        return None if v is None else v * scale
    return get


def nw_info(label):
    def get(g, _nw):
        v = g.info.get(label, "")
        return v or None
    return get


def nw_pcie(metric):
    def get(g, nw):
        bdf = g.info.get("pci_bus_id", "")
        return nw.pcie.get((metric, bdf))
    return get


# nodewatch's clock_throttle_active reasons and nvidia-smi's element suffixes.
THROTTLE_REASONS = [
    ("gpu_idle", ["gpu_idle"]),
    ("applications_clocks_setting", ["applications_clocks_setting"]),
    ("sw_power_cap", ["sw_power_cap"]),
    ("hw_slowdown", ["hw_slowdown"]),
    ("hw_thermal", ["hw_thermal_slowdown"]),
    ("hw_power_brake", ["hw_power_brake_slowdown"]),
    ("sync_boost", ["sync_boost"]),
    ("sw_thermal", ["sw_thermal_slowdown"]),
    ("display_clock_setting", ["display_clocks_setting", "display_clock_setting"]),
]
# nodewatch's clock_throttle_seconds_total reasons and nvidia-smi's counters.
THROTTLE_COUNTERS = [
    ("sw_power_cap", "sw_power_cap"),
    ("sync_boost", "sync_boost"),
    ("sw_thermal", "sw_therm_slowdown"),
    ("hw_thermal", "hw_therm_slowdown"),
    ("hw_power_brake", "hw_power_brake"),
]


def throttle_paths(suffixes):
    return [f"{block}/{prefix}{s}"
            for block, prefix in (("clocks_event_reasons", "clocks_event_reason_"),
                                  ("clocks_throttle_reasons", "clocks_throttle_reason_"))
            for s in suffixes]


def counter_paths(suffix):
    return [f"{block}/{block}_{suffix}"
            for block in ("clocks_event_reasons_counters", "clocks_throttle_reasons_counters")]


BETWEEN = "between the reads"
UTIL_WHY = ("utilization is the busy fraction of the driver's last sample period (1/6 s to 1 s by "
            "product), so a read between two others may see a period neither saw; a steady or idle "
            "load stays within this")
CLOCK_WHY = ("boost clocks move in steps of about 15 MHz as power and temperature change; two steps "
             "beyond the reads")
POWER_WHY = ("power is a 1 s average on Ampere and later (instantaneous before): it follows the load "
             "between the reads; 5 W or 5 % covers an idle or steady load")
TEMP_WHY = "the sensors read in whole degrees and move with the load between the reads"
MIB_WHY = "nvidia-smi prints whole MiB"
COUNTER_WHY = "a counter may grow between the reads, never shrink or jump past the later read"
STATIC_WHY = "does not change between the reads"


def quantities():
    q = [
        Quantity("model", "", nw_info("model"),
                 lambda g: smi_text(g, "product_name") or _raise("nvidia-smi prints no product_name"),
                 text=True, why=STATIC_WHY),
        Quantity("serial", "", nw_info("serial"), lambda g: _smi_word(g, "serial"), text=True,
                 why=STATIC_WHY),
        Quantity("pci_bus_id", "", nw_info("pci_bus_id"), smi_bdf, text=True, why=STATIC_WHY),
        Quantity("utilization.gpu", "%", nw_scaled("nodewatch_accelerator_utilization_ratio", 100),
                 lambda g: smi_number(g, ["utilization/gpu_util"], "%"), tolerance=10,
                 tolerance_text="±10 points beyond the reads", why=UTIL_WHY),
        Quantity("utilization.memory", "%",
                 nw_scaled("nodewatch_accelerator_memory_utilization_ratio", 100),
                 lambda g: smi_number(g, ["utilization/memory_util"], "%"), tolerance=10,
                 tolerance_text="±10 points beyond the reads", why=UTIL_WHY),
        Quantity("memory.used", "MiB", nw_scaled("nodewatch_accelerator_memory_used_bytes", 1 / MIB),
                 lambda g: smi_number(g, ["fb_memory_usage/used"], "MiB"), tolerance=1,
                 tolerance_text="±1 MiB beyond the reads",
                 why=MIB_WHY + "; allocations between the reads are inside the range"),
        Quantity("memory.total", "MiB", nw_scaled("nodewatch_accelerator_memory_total_bytes", 1 / MIB),
                 lambda g: smi_number(g, ["fb_memory_usage/total"], "MiB"), tolerance=1,
                 tolerance_text="±1 MiB", why=MIB_WHY),
        Quantity("temperature.gpu", "C",
                 nw_scaled("nodewatch_accelerator_temperature_celsius", 1, sensor="gpu"),
                 lambda g: smi_number(g, ["temperature/gpu_temp"], "C"), tolerance=2,
                 tolerance_text="±2 C beyond the reads", why=TEMP_WHY),
        Quantity("temperature.memory", "C",
                 nw_scaled("nodewatch_accelerator_temperature_celsius", 1, sensor="memory"),
                 lambda g: smi_number(g, ["temperature/memory_temp"], "C"), tolerance=2,
                 tolerance_text="±2 C beyond the reads", why=TEMP_WHY),
        # gpu_temp_slow_tlimit_threshold (newer drivers) is relative to the
        # current temperature: a different quantity, not compared.
        Quantity("temperature.slowdown", "C",
                 nw_scaled("nodewatch_accelerator_temperature_slowdown_celsius", 1),
                 lambda g: smi_number(g, ["temperature/gpu_temp_slow_threshold"], "C"),
                 why=STATIC_WHY),
        Quantity("power.draw", "W", nw_scaled("nodewatch_accelerator_power_watts", 1),
                 smi_power,
                 tolerance=5, relative=0.05, tolerance_text="±max(5 W, 5 %) beyond the reads",
                 why=POWER_WHY),
        # power_readings/power_limit is the requested (management) limit; the
        # enforced one is what nodewatch exports.
        Quantity("power.limit", "W", nw_scaled("nodewatch_accelerator_power_limit_watts", 1),
                 lambda g: smi_number(g, ["gpu_power_readings/current_power_limit",
                                          "power_readings/enforced_power_limit"], "W"),
                 tolerance=0.01, tolerance_text="±0.01 W",
                 why="nvidia-smi prints hundredths of a watt; " + STATIC_WHY),
    ]
    for clock, element in (("graphics", "graphics_clock"), ("sm", "sm_clock"), ("memory", "mem_clock")):
        q.append(Quantity(f"clock.{clock}", "MHz",
                          nw_scaled("nodewatch_accelerator_clock_hertz", 1e-6, clock=clock),
                          lambda g, e=element: smi_number(g, [f"clocks/{e}"], "MHz"), tolerance=30,
                          tolerance_text="±30 MHz beyond the reads", why=CLOCK_WHY))
    for reason, suffixes in THROTTLE_REASONS:
        q.append(Quantity(f"throttle.{reason}", "",
                          nw_scaled("nodewatch_accelerator_clock_throttle_active", 1, reason=reason),
                          lambda g, p=throttle_paths(suffixes): smi_flag(g, p, "Active", "Not Active"),
                          tolerance_text="exact (either read)",
                          why="a reason can start or end between the reads"))
    for reason, suffix in THROTTLE_COUNTERS:
        q.append(Quantity(f"throttle_time.{reason}", "s",
                          nw_scaled("nodewatch_accelerator_clock_throttle_seconds_total", 1,
                                    reason=reason),
                          lambda g, p=counter_paths(suffix): smi_number(g, p, "us") / 1e6,
                          tolerance=1e-6, tolerance_text=BETWEEN + " (±1 us)",
                          why=COUNTER_WHY + "; nvidia-smi prints whole microseconds"))
    q += [
        Quantity("ecc.volatile.corrected", "",
                 nw_scaled("nodewatch_accelerator_ecc_errors_total", 1, type="corrected"),
                 lambda g: smi_ecc(g, True), tolerance_text=BETWEEN, why=COUNTER_WHY),
        Quantity("ecc.volatile.uncorrected", "",
                 nw_scaled("nodewatch_accelerator_ecc_errors_total", 1, type="uncorrected"),
                 lambda g: smi_ecc(g, False), tolerance_text=BETWEEN, why=COUNTER_WHY),
        Quantity("remapped_rows.correctable", "",
                 nw_scaled("nodewatch_accelerator_remapped_rows", 1, cause="correctable"),
                 lambda g: smi_number(g, ["remapped_rows/remapped_row_corr"]),
                 tolerance_text=BETWEEN, why=COUNTER_WHY),
        Quantity("remapped_rows.uncorrectable", "",
                 nw_scaled("nodewatch_accelerator_remapped_rows", 1, cause="uncorrectable"),
                 lambda g: smi_number(g, ["remapped_rows/remapped_row_unc"]),
                 tolerance_text=BETWEEN, why=COUNTER_WHY),
        Quantity("remapped_rows.pending", "", nw_scaled("nodewatch_accelerator_row_remap_pending", 1),
                 lambda g: smi_flag(g, ["remapped_rows/remapped_row_pending"], "Yes", "No"),
                 tolerance_text="exact (either read)", why="set by an error, cleared by a reset"),
        Quantity("remapped_rows.failed", "", nw_scaled("nodewatch_accelerator_row_remap_failed", 1),
                 lambda g: smi_flag(g, ["remapped_rows/remapped_row_failure"], "Yes", "No"),
                 tolerance_text="exact (either read)", why="set by an error, cleared by a reset"),
        Quantity("pcie.replay_counter", "", nw_scaled("nodewatch_accelerator_pcie_replays_total", 1),
                 lambda g: smi_number(g, ["pci/replay_counter"]), tolerance_text=BETWEEN,
                 why=COUNTER_WHY),
        # From the pcie collector (sysfs), for the GPU's PCI address.
        Quantity("pcie.link.gen.current", "",
                 lambda g, nw: nw_gen(nw, "nodewatch_pcie_link_speed_transfers_per_second",
                                      g.info.get("pci_bus_id", "")),
                 lambda g: smi_number(g, ["pci/pci_gpu_link_info/pcie_gen/current_link_gen"]),
                 tolerance_text="exact (either read)",
                 why="the GPU lowers its link speed at idle and raises it under load"),
        # max_link_gen is the device-and-system maximum (the slower end);
        # only max_device_link_gen is the device's own, as sysfs's.
        Quantity("pcie.link.gen.max", "",
                 lambda g, nw: nw_gen(nw, "nodewatch_pcie_link_max_speed_transfers_per_second",
                                      g.info.get("pci_bus_id", "")),
                 lambda g: smi_number(g, ["pci/pci_gpu_link_info/pcie_gen/max_device_link_gen"]),
                 why=STATIC_WHY),
        Quantity("pcie.link.width.current", "", nw_pcie("nodewatch_pcie_link_width"),
                 lambda g: smi_number(g, ["pci/pci_gpu_link_info/link_widths/current_link_width"], "x"),
                 tolerance_text="exact (either read)", why="a link can retrain between the reads"),
        # The accelerator collector's host-link capacity (NVML's generation
        # and width, less the encoding) against nvidia-smi's generation and
        # width.
        Quantity("host_link.pcie.capacity", "GB/s",
                 nw_scaled("nodewatch_accelerator_host_link_capacity_bytes_per_second", 1e-9,
                           link="pcie"),
                 smi_pcie_capacity, tolerance_text="exact (either read)",
                 why="a link can retrain between the reads"),
    ]
    return q


# nvmlDeviceGetPowerUsage, which nodewatch reads, is what nvidia-smi printed
# as power_draw; drivers from 550 print it as average_power_draw (a 1 s
# average on Ampere and later) next to instant_power_draw.
POWER_PATHS = ["gpu_power_readings/power_draw", "gpu_power_readings/average_power_draw",
               "power_readings/power_draw", "power_readings/average_power_draw",
               "gpu_power_readings/instant_power_draw", "power_readings/instant_power_draw"]


def smi_power(gpu):
    value, path = smi_number_at(gpu, POWER_PATHS, "W")
    return value, f"nvidia-smi's {path}"


def _raise(message):
    raise NotComparable(message)


def _smi_word(gpu, path):
    text = smi_text(gpu, path)
    if text is None:
        raise NotComparable(f"nvidia-smi prints no {path}")
    if not text or text.strip("[]") in ("N/A", "Not Supported", "Unknown Error"):
        raise NotComparable(f"{path} is '{text}'")
    return text


# ---------------------------------------------------------------------------
# The comparison


@dataclass
class Pair:
    gpu: str          # nodewatch's accelerator index, or "-" for the node
    uuid: str
    quantity: str
    nodewatch: Optional[str]
    nvidia_smi: Optional[str]
    tolerance: str
    verdict: str      # AGREE, DISAGREE, SKIP
    note: str = ""


def fmt(v, unit=""):
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    if math.isfinite(v) and v == round(v) and abs(v) < 1e15:
        s = str(int(round(v)))
    else:
        s = f"{v:.6g}"
    return f"{s} {unit}".strip()


def fmt_reads(reads, unit):
    shown = []
    for r in reads:
        s = fmt(r, unit)
        if not shown or shown[-1] != s:
            shown.append(s)
    return " -> ".join(shown)


def compare_value(q, nw_value, reads):
    """(verdict, note) of nodewatch's value against the nvidia-smi reads."""
    if q.text:
        return ("AGREE", "") if nw_value in reads else ("DISAGREE", "")
    lo, hi = min(reads), max(reads)
    tol = max(q.tolerance, q.relative * max(abs(lo), abs(hi)))
    eps = 1e-9 * max(1.0, abs(lo), abs(hi))
    if lo - tol - eps <= nw_value <= hi + tol + eps:
        return "AGREE", ""
    off = nw_value - hi if nw_value > hi else nw_value - lo
    return "DISAGREE", f"off by {fmt(off, q.unit)}"


def compare(nw, smi_roots):
    """Every pair, in nvidia-smi's order of GPUs."""
    pairs = []
    smi_gpus = [list(root.findall("gpu")) for root in smi_roots]

    # The node: driver version and the GPUs each side sees.
    nw_drivers = sorted({g.info.get("driver_version", "") for g in nw.gpus.values()} - {""})
    smi_drivers = [(root.findtext("driver_version") or "").strip() for root in smi_roots]
    if nw_drivers and all(smi_drivers):
        nw_driver = ",".join(nw_drivers)
        pairs.append(Pair("-", "", "driver_version", nw_driver, fmt_reads(smi_drivers, ""), "exact",
                          "AGREE" if nw_driver in smi_drivers else "DISAGREE"))
    else:
        pairs.append(Pair("-", "", "driver_version", ",".join(nw_drivers) or None,
                          fmt_reads(smi_drivers, "") or None, "exact", "SKIP",
                          "not printed by " + ("nodewatch" if not nw_drivers else "nvidia-smi")))
    counts = [float(len(g)) for g in smi_gpus]
    n = float(len(nw.gpus))
    pairs.append(Pair("-", "", "gpus", fmt(n), fmt_reads(counts, ""), "exact",
                      "AGREE" if n in counts else "DISAGREE"))

    by_uuid = []
    for gpus in smi_gpus:
        by_uuid.append({(g.findtext("uuid") or "").strip(): g for g in gpus})
    order = list(by_uuid[0])
    for reads in by_uuid[1:]:
        order += [u for u in reads if u not in order]
    qs = quantities()
    for uuid in order:
        g = nw.gpus.get(uuid)
        elements = [r[uuid] for r in by_uuid if uuid in r]
        if g is None:
            pairs.append(Pair("?", uuid, "present", "absent", "listed", "exact", "DISAGREE",
                              "nvidia-smi lists this GPU, nodewatch exports nothing for it"))
            continue
        if len(elements) < len(smi_roots):
            pairs.append(Pair(g.index, uuid, "present", "exported", "listed in some reads", "exact",
                              "DISAGREE", "the GPU came or went between the nvidia-smi reads"))
            continue
        up = g.get("nodewatch_accelerator_up")
        pairs.append(Pair(g.index, uuid, "up", fmt(up), "1", "exact",
                          "AGREE" if up == 1 else "DISAGREE",
                          "" if up == 1 else "nodewatch says the GPU does not answer"))
        for q in qs:
            pairs.append(compare_quantity(q, g, nw, elements))
    for uuid, g in sorted(nw.gpus.items(), key=lambda kv: kv[1].index):
        if uuid not in order:
            pairs.append(Pair(g.index, uuid, "present", "exported", "absent", "exact", "DISAGREE",
                              "nodewatch exports a GPU that nvidia-smi does not list"))
    return pairs


def compare_quantity(q, g, nw, elements):
    try:
        nw_value = q.nodewatch(g, nw)
    except NotComparable as e:
        return Pair(g.index, g.uuid, q.name, None, None, q.tolerance_text, "SKIP", str(e))
    reads, skip, source = [], None, ""
    for e in elements:
        try:
            value = q.smi(e)
        except NotComparable as why:
            skip = str(why)
            break
        if isinstance(value, tuple):  # (value, where nvidia-smi printed it)
            value, source = value
        reads.append(value)
    shown = fmt_reads(reads, q.unit) if reads else None
    if skip is not None:
        return Pair(g.index, g.uuid, q.name, fmt(nw_value, q.unit), shown, q.tolerance_text, "SKIP",
                    skip)
    if nw_value is None:
        return Pair(g.index, g.uuid, q.name, None, shown, q.tolerance_text, "SKIP",
                    "not exported by nodewatch")
    verdict, note = compare_value(q, nw_value, reads)
    note = "; ".join(filter(None, [note, source]))
    return Pair(g.index, g.uuid, q.name, fmt(nw_value, q.unit), shown, q.tolerance_text, verdict, note)


# ---------------------------------------------------------------------------
# Report


def print_report(pairs, nw, out):
    headers = ("VERDICT", "GPU", "QUANTITY", "NODEWATCH", "NVIDIA-SMI", "TOLERANCE", "NOTE")
    rows = [(p.verdict, p.gpu, p.quantity, p.nodewatch or "-", p.nvidia_smi or "-", p.tolerance, p.note)
            for p in pairs]
    widths = [max(len(r[i]) for r in rows + [headers]) for i in range(len(headers) - 1)]
    current_uuid = None
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths)) + "  " + headers[-1], file=out)
    for p, r in zip(pairs, rows):
        if p.uuid and p.uuid != current_uuid:
            current_uuid = p.uuid
            print(f"# GPU {p.gpu}: {p.uuid}", file=out)
        print(("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1]).rstrip(), file=out)

    print("\nTolerances (beyond the range of the nvidia-smi reads taken before and after nodewatchd):",
          file=out)
    seen = set()
    for q in quantities():
        key = (q.tolerance_text, q.why)
        if key in seen:
            continue
        seen.add(key)
        names = [x.name for x in quantities() if (x.tolerance_text, x.why) == key]
        label = names[0] if len(names) == 1 else f"{names[0]} (and {len(names) - 1} more)"
        print(f"  {label}: {q.tolerance_text}; {q.why}", file=out)

    for collector in ("accelerator", "pcie"):
        if nw.collector_up.get(collector, 1) != 1:
            print(f"\nnodewatch_collector_up{{collector=\"{collector}\"}} is 0: its collection failed",
                  file=out)
    count = {v: sum(1 for p in pairs if p.verdict == v) for v in ("AGREE", "DISAGREE", "SKIP")}
    print(f"\n{len(pairs)} pairs: {count['AGREE']} agree, {count['DISAGREE']} disagree, "
          f"{count['SKIP']} skipped (not comparable)", file=out)
    for p in pairs:
        if p.verdict == "DISAGREE":
            print(f"DISAGREE gpu {p.gpu} {p.quantity}: nodewatch {p.nodewatch or '-'}, "
                  f"nvidia-smi {p.nvidia_smi or '-'} ({p.tolerance}) {p.note}".rstrip(), file=out)
    return count


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodewatch", required=True, help="output of nodewatchd --once")
    ap.add_argument("--smi", action="append", required=True,
                    help="output of nvidia-smi -q -x (give it twice: before and after nodewatchd)")
    ap.add_argument("--json", help="also write the pairs and the summary to this file")
    args = ap.parse_args(argv)

    roots = []
    for path in args.smi:
        try:
            roots.append(ET.parse(path).getroot())
        except (ET.ParseError, OSError) as e:
            print(f"cannot read nvidia-smi output {path}: {e}", file=sys.stderr)
            return 2
        if roots[-1].tag != "nvidia_smi_log":
            print(f"{path} is not nvidia-smi -q -x output (root <{roots[-1].tag}>)", file=sys.stderr)
            return 2
    if not roots[0].findall("gpu"):
        print("nvidia-smi lists no GPU: nothing to compare", file=sys.stderr)
        return 2
    try:
        with open(args.nodewatch, encoding="utf-8") as f:
            nw = read_nodewatch(f.read())
    except (OSError, ValueError) as e:
        print(f"cannot read nodewatch's exposition {args.nodewatch}: {e}", file=sys.stderr)
        return 1

    pairs = compare(nw, roots)
    count = print_report(pairs, nw, sys.stdout)
    status = 0
    for (collector, reason), n in sorted(nw.nvml_errors.items()):
        print(f"nodewatch's {collector} collector counted {n:.0f} {reason}: the driver answered "
              "a question as nodewatch does not expect (nodewatchd's log says which)")
        status = 1
    if count["DISAGREE"]:
        status = 1
    elif not count["AGREE"]:
        print("nothing was comparable", file=sys.stdout)
        status = 1
    print("result: " + ("every comparable value agrees" if status == 0 else "FAILED"))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"pairs": [p.__dict__ for p in pairs], "summary": count, "status": status,
                       "nvml_errors": {f"{c}/{r}": n for (c, r), n in nw.nvml_errors.items()}}, f,
                      indent=1)
    return status


if __name__ == "__main__":
    sys.exit(main())
