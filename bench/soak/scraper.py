"""The independent scraper: a process of its own (so that the load and the
faults cannot delay it), SCRAPES_PER_SECOND full scrapes, each checked:

- answered 200 within SCRAPE_TIMEOUT, unless the daemon is down on purpose
  (the soak's `down` flag, set from the kill -9 until the restarted daemon
  answered);
- no counter (a family of TYPE counter, or a sample named *_total) lower
  than in the scrape before, in one run of the daemon; across a restart,
  no nodewatch_kernel_* counter lower than at the kill (docs/collectors.md,
  kernel: counted once across restarts), and none of them missing; every
  other counter restarts with the process;
- no series that was there in the scrape before missing, unless its
  collector is down in this scrape (nodewatch_collector_up, its snapshot is
  withdrawn: docs/architecture.md), it is a GPU's that is down in this
  scrape (nodewatch_accelerator_up 0 for its uuid: a GPU whose driver call
  did not answer in time keeps only _info and _up, docs/collectors.md,
  accelerator), its collector counted an error since the scrape before
  (nodewatch_collector_errors_total: a partial failure leaves the value
  out and counts it, docs/developing.md), it is a textfile's family while
  a file is refused (nodewatch_textfile_file_valid 0: which families the
  refused file held cannot be told), its source churns on purpose
  (faults.CHURNED_PREFIXES), it is one of this machine's network
  interfaces (the nic collector reads the host's, which other programs
  create and remove), it is a node verdict's problem (one series per
  current problem), a job's or a GPU process's (jobs come and go, and a
  process whose job could not be read is shown under job "unknown" until
  it can), or it is a GPM ratio (none from collections closer
  than 100 ms apart, docs/collectors.md, accelerator: at the soak's 100 ms
  interval a late collection is followed by an early one).
"""

import json
import sys
import time

from . import client
from .faults import CHURNED_PREFIXES

SCRAPES_PER_SECOND = 5
SCRAPE_TIMEOUT = 1.0
# Series whose coming and going is their meaning, or out of the soak's hands.
VOLATILE_PREFIXES = CHURNED_PREFIXES + ("nodewatch_nic_", "nodewatch_node_problem",
                                         "nodewatch_accelerator_job_info",
                                         "nodewatch_accelerator_process_")
GPM_SUFFIXES = ("_active_ratio", "_occupancy_ratio", "_bandwidth_ratio")


# Families named outside their collector's prefix (docs/collectors.md).
BORROWED = (("nodewatch_memory_", "kernel"), ("nodewatch_nvlink_", "interconnect"),
            ("nodewatch_accelerator_nvlink_", "interconnect"))


def owner(name, collectors):
    for prefix, c in BORROWED:
        if name.startswith(prefix):
            return c
    if not name.startswith(("nodewatch_", "process_")):
        return "textfile"  # the files' own families
    for c in collectors:
        if name.startswith(f"nodewatch_{c}_"):
            return c
    return None


def is_counter(series, types):
    name = client.name_of(series)
    return name.endswith("_total") or types.get(client.family_of(name, types)) == "counter"


class Checker:
    def __init__(self, t0, out):
        self.t0, self.out = t0, out
        self.prev = None  # (epoch, series, types)
        self.last_kernel = {}  # the kernel counters of the last scrape
        self.errors = {}  # collector -> its errors counted, in the last scrape
        self.violations = []

    def violation(self, what):
        t = round(time.monotonic() - self.t0, 2)
        self.violations.append({"time": t, "what": what})
        print(f"soak: VIOLATION at {t:.1f} s: {what}", file=self.out, flush=True)

    def check(self, epoch, series, types):
        up = {client.label(k, "collector"): v for k, v in series.items()
              if k.startswith("nodewatch_collector_up{")}
        gpu_up = {client.label(k, "uuid"): v for k, v in series.items()
                  if k.startswith("nodewatch_accelerator_up{")}
        # A file refused in this scrape (a read error, half-written): its
        # families are not served, and which they are cannot be told.
        refused = any(v == 0 for k, v in series.items()
                      if k.startswith("nodewatch_textfile_file_valid{"))
        errors = {}
        for k, v in series.items():
            if k.startswith("nodewatch_collector_errors_total{"):
                c = client.label(k, "collector")
                errors[c] = errors.get(c, 0) + v
        kernel = {k: v for k, v in series.items()
                  if k.startswith("nodewatch_kernel_") and is_counter(k, types)}
        if self.prev and self.prev[0] == epoch:
            _, before, _ = self.prev
            for k, v in before.items():
                now = series.get(k)
                name = client.name_of(k)
                if name.startswith(VOLATILE_PREFIXES) or (
                        name.startswith("nodewatch_accelerator_") and name.endswith(GPM_SUFFIXES)):
                    continue
                if now is None:
                    c = owner(name, up)
                    uuid = client.label(k, "uuid")
                    if uuid is not None and gpu_up.get(uuid) != 1:
                        continue
                    if c is not None and errors.get(c, 0) > self.errors.get(c, 0):
                        continue
                    if c == "textfile" and refused:
                        continue
                    if c is None or up.get(c) == 1:
                        why = ""
                        if c:
                            why = (f" (collector {c} up, its errors {self.errors.get(c, 0):g} "
                                   f"-> {errors.get(c, 0):g}" + (", its GPU up)" if uuid else ")"))
                        self.violation(f"series vanished: {k}{why}")
                elif now < v and is_counter(k, types):
                    self.violation(f"counter decreased: {k} {v:g} -> {now:g}")
        elif self.prev:
            for k, v in self.last_kernel.items():
                now = series.get(k)
                if now is None:
                    self.violation(f"kernel counter missing after the restart: {k} (was {v:g})")
                elif now < v:
                    self.violation(f"kernel counter went back across the restart: {k} {v:g} -> {now:g}")
        self.prev = (epoch, series, types)
        self.last_kernel = kernel
        self.errors = errors


def run(node, t0, down, epoch, stop, result_path, out=sys.stdout):
    c = client.Client(node, "127.0.0.1", SCRAPE_TIMEOUT)
    checker = Checker(t0, out)
    latencies = []
    scrapes = excused = 0
    i = 0
    start = time.monotonic()
    while not stop.is_set():
        i += 1
        was_down, e = down.value, epoch.value
        t = time.monotonic()
        status, body, err = 0, b"", ""
        try:
            status, body = c.get("/metrics", deadline=t + SCRAPE_TIMEOUT)
        except Exception as ex:  # noqa: BLE001 - any failure is a failed scrape
            err = f"{type(ex).__name__}: {ex}"
        took = time.monotonic() - t
        if was_down or down.value or e != epoch.value:
            excused += 1  # down on purpose, or restarted meanwhile
            c.close()
        else:
            scrapes += 1
            latencies.append(took)
            if status != 200 or took > SCRAPE_TIMEOUT:
                checker.violation(f"scrape not answered within {SCRAPE_TIMEOUT:g} s: "
                                  f"status {status} after {took:.3f} s {err}".rstrip())
            else:
                series, types = client.parse(body.decode(errors="replace"))
                checker.check(e, series, types)
        time.sleep(max(0.0, start + i / SCRAPES_PER_SECOND - time.monotonic()))
    with open(result_path, "w") as f:
        json.dump({"scrapes": scrapes, "excused": excused, "latencies": latencies,
                   "violations": checker.violations}, f)
