"""The compressed soak (bench/soak.sh sets up the node, then runs this):
nodewatchd under load, with faults at random times drawn from a seed, and
the invariants checked by an independent scraper (scraper.py). See
bench/README.md, "Compressed soak"."""

import argparse
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import threading
import time

from . import client, faults, report, scraper
from .kmsg import XID_CODE, XID_DEVICE, KernelLog
from .node import Node

# After a restart the daemon must answer a scrape within this.
READY_SECONDS = 5.0
# The kernel log's trickle: records a second, between the storms.
TRICKLE_PER_SECOND = 2
# Warm-up before the first fault, and the quiet end before the last count.
WARMUP_SECONDS = 5
SETTLE_SECONDS = 5
# A fault starts only if it can end before the settle time (the longest,
# state_disk_full with a kill -9, takes about 35 s).
LONGEST_FAULT_SECONDS = 40
# Resource samples every SAMPLE_SECONDS (report.py judges them), a row of
# the table every TABLE_SECONDS.
SAMPLE_SECONDS = 5
TABLE_SECONDS = 30


def log(msg):
    print(f"soak: {msg}", file=sys.stderr, flush=True)


class Soak:
    def __init__(self, args):
        self.args = args
        self.t0 = time.monotonic()
        self.node = Node(args.binary, args.scratch, args.fixtures, args.fake_nvml or None,
                         not args.no_tls, log)
        self.kmsg = KernelLog(self.node.kmsg)
        self.violations = []
        self.faults = {}
        self.fault_log = []
        self.busy_until = 0.0  # a fault under way, and a little after
        self.down = multiprocessing.Value("b", 0)
        self.epoch = multiprocessing.Value("i", 0)
        self.started_at = time.monotonic()  # of the current run of the daemon
        self.stop = threading.Event()
        self.restarts_unplanned = 0
        self.state_tmpfs = False
        self.load_done = self.load_failed = 0

    def now(self):
        return time.monotonic() - self.t0

    def violation(self, what):
        t = round(self.now(), 2)
        self.violations.append({"time": t, "what": what})
        print(f"soak: VIOLATION at {t:.1f} s: {what}", flush=True)

    def count_fault(self, kind):
        self.faults[kind] = self.faults.get(kind, 0) + 1

    # --- the daemon's state disk -----------------------------------------

    def mount_state_tmpfs(self):
        if os.geteuid() != 0:
            log("not root: the state_disk_full fault is SKIPPED (it mounts a tmpfs)")
            return
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k,mode=0755", "soak-state",
                            self.node.state_dir], capture_output=True, text=True)
        if r.returncode != 0:
            log(f"mount failed ({r.stderr.strip()}): the state_disk_full fault is SKIPPED")
            return
        self.state_tmpfs = True

    def unmount_state_tmpfs(self):
        if self.state_tmpfs:
            subprocess.run(["umount", "-l", self.node.state_dir])
            self.state_tmpfs = False

    # --- the daemon --------------------------------------------------------

    def wait_ready(self, deadline_s):
        """Seconds until a scrape answered 200, or None."""
        t = time.monotonic()
        c = client.Client(self.node, "127.0.0.1", 1)
        while time.monotonic() - t < deadline_s:
            try:
                if c.get("/metrics")[0] == 200:
                    c.close()
                    return time.monotonic() - t
            except Exception:  # noqa: BLE001 - not listening yet
                pass
            c.close()
            time.sleep(0.05)
        return None

    def restart(self):
        self.node.start()
        self.started_at = time.monotonic()
        with self.epoch.get_lock():
            self.epoch.value += 1
        took = self.wait_ready(30)
        if took is None:
            self.violation("not ready 30 s after a restart:\n" + self.node.tail_log())
            took = float("inf")
        elif took > READY_SECONDS:
            self.violation(f"ready {took:.2f} s after a restart (more than {READY_SECONDS:g} s)")
        return took

    def kill_and_restart(self):
        self.down.value = 1
        try:
            self.node.kill9()
            return self.restart()
        finally:
            self.down.value = 0

    def expect_reload(self, ok):
        """Waits for the daemon's log to say the reload was taken (ok) or
        rejected; a violation otherwise."""
        path = os.path.join(self.node.scratch, "daemon.log")
        want = "configuration reloaded" if ok else "reload rejected"
        other = "reload rejected" if ok else "configuration reloaded"
        end = time.monotonic() + 5
        while time.monotonic() < end:
            with open(path, errors="replace") as f:
                f.seek(self.log_offset)
                new = f.read()
            if want in new or other in new:
                self.log_offset += len(new.encode())
                if want not in new:
                    self.violation(f"a reload that should be {'taken' if ok else 'rejected'} was not")
                return
            time.sleep(0.05)
        self.violation("no answer in the log to a SIGHUP within 5 s")

    # --- the background ------------------------------------------------------

    def monitor(self):
        """The daemon alive (a restart where it died by itself), resource
        samples, the table."""
        next_sample = time.monotonic()
        next_table = time.monotonic() + TABLE_SECONDS
        while not self.stop.is_set():
            code = None if self.down.value else self.node.exited()
            if code is not None and not self.down.value:
                self.violation(f"the daemon exited by itself (status {code}):\n" + self.node.tail_log())
                self.restarts_unplanned += 1
                self.down.value = 1
                try:
                    self.restart()
                finally:
                    self.down.value = 0
            now = time.monotonic()
            if now >= next_sample:
                st = self.node.stats()
                if st and not self.down.value:
                    quiet = now >= self.busy_until
                    self.samples.append((self.now() / 60, self.epoch.value,
                                         (now - self.started_at) / 60, *st, quiet,
                                         self.node.descriptor_groups()))
                next_sample += SAMPLE_SECONDS
            if now >= next_table and self.samples:
                m, _, _, rss, fds, thr, _, _ = self.samples[-1]
                self.table(f"| {m:.1f} | {rss} | {fds} | {thr} | {self.load_done} | {self.load_failed} |")
                next_table += TABLE_SECONDS
            time.sleep(0.2)

    def table(self, line):
        print(line, flush=True)
        self.table_lines.append(line)

    def load(self):
        """50 scrapes a second over a keep-alive connection: plain, gzip and
        filtered in turn."""
        targets = [("/metrics", {}), ("/metrics", {"Accept-Encoding": "gzip"}),
                   ("/metrics?collect[]=storage&collect[]=pcie", {})]
        c = client.Client(self.node, "127.0.0.2", 5)
        start = time.monotonic()
        i = 0
        while not self.stop.is_set():
            path, headers = targets[i % 3]
            was_down, e = self.down.value, self.epoch.value
            try:
                status = c.get(path, headers)[0]
            except Exception:  # noqa: BLE001
                status = 0
            if status == 200:
                self.load_done += 1
            elif not (was_down or self.down.value or e != self.epoch.value):
                self.load_failed += 1
            i += 1
            time.sleep(max(0.0, start + i * 0.02 - time.monotonic()))

    def trickle(self):
        while not self.stop.wait(1.0 / TRICKLE_PER_SECOND):
            self.kmsg.append(1)

    # --- the run ---------------------------------------------------------------

    def kernel_counters(self):
        c = client.Client(self.node, "127.0.0.1", 5)
        status, body = c.get("/metrics")
        c.close()
        series, types = client.parse(body.decode(errors="replace"))
        return {k: v for k, v in series.items()
                if k.startswith("nodewatch_kernel_") and scraper.is_counter(k, types)}

    def run(self):
        a = self.args
        self.samples, self.table_lines = [], []
        self.mount_state_tmpfs()
        self.log_offset = 0
        self.node.start()
        if self.wait_ready(30) is None:
            log("the daemon did not start:\n" + self.node.tail_log())
            return 2
        log(f"nodewatchd pid {self.node.pid} on 127.0.0.1:{self.node.port} for {a.minutes} min, "
            f"seed {a.seed}, {'TLS and basic authentication' if self.node.tls else 'plain HTTP'}")
        with open(os.path.join(self.node.scratch, "daemon.log"), "rb") as f:
            self.log_offset = len(f.read())
        time.sleep(WARMUP_SECONDS)
        baseline = self.kernel_counters()
        result_path = os.path.join(a.scratch, "scraper.json")
        scr_stop = multiprocessing.Event()
        scr = multiprocessing.Process(target=scraper.run, args=(
            self.node, self.t0, self.down, self.epoch, scr_stop, result_path), daemon=True)
        scr.start()
        self.table("| minute | RSS KiB | fds | threads | scrapes | failed |")
        self.table("| ---: | ---: | ---: | ---: | ---: | ---: |")
        threads = [threading.Thread(target=f, daemon=True) for f in (self.monitor, self.load, self.trickle)]
        for t in threads:
            t.start()
        self.schedule(random.Random(a.seed), self.t0 + a.minutes * 60 - SETTLE_SECONDS)
        self.stop.set()
        for t in threads:
            t.join()
        scr_stop.set()
        scr.join()
        time.sleep(SETTLE_SECONDS)  # the last records read and counted
        self.check_kernel_counts(baseline)
        self.node.stop()
        self.unmount_state_tmpfs()
        return report.write(self, result_path)

    def schedule(self, rng, end):
        """Faults in rounds: each round every kind once, in an order drawn
        from the seed, a random gap between two; a valid reload also every
        --reload-every seconds."""
        kinds = self.args.faults.split(",") if self.args.faults else list(faults.KINDS)
        last_reload = time.monotonic()
        while True:
            rng.shuffle(kinds)
            for kind in kinds:
                if self.stop.wait(rng.uniform(1, 6)):
                    return
                if time.monotonic() + LONGEST_FAULT_SECONDS > end:
                    left = end - time.monotonic()
                    if left > 0:
                        time.sleep(left)
                    return
                if time.monotonic() - last_reload >= self.args.reload_every:
                    self.inject("reload_valid", rng)
                    last_reload = time.monotonic()
                self.inject(kind, rng)
                if kind == "reload_valid":
                    last_reload = time.monotonic()

    def inject(self, kind, rng):
        t = self.now()
        self.busy_until = float("inf")
        try:
            detail = faults.KINDS[kind](self, rng)
        except faults.Skip as e:
            log(f"{t:7.1f} s {kind}: SKIPPED, {e}")
            self.fault_log.append({"time": round(t, 2), "kind": kind, "skipped": str(e)})
            return
        except Exception as e:  # noqa: BLE001 - the soak's own failure, said as such
            self.violation(f"the soak could not inject {kind}: {type(e).__name__}: {e}")
            return
        finally:
            self.busy_until = time.monotonic() + 3
        self.count_fault(kind)
        log(f"{t:7.1f} s {kind}: {detail}")
        self.fault_log.append({"time": round(t, 2), "kind": kind, "detail": detail})

    def check_kernel_counts(self, baseline):
        """Each injected record counted exactly once, and the modelled
        node's records still counted once, whatever the restarts."""
        try:
            final = self.kernel_counters()
        except Exception as e:  # noqa: BLE001
            self.violation(f"no final scrape: {e}")
            return
        expected = dict(baseline)
        xid = next((k for k in final if k.startswith("nodewatch_kernel_xid_events_total{")
                    and client.label(k, "pci_bus_id") == XID_DEVICE
                    and client.label(k, "xid") == XID_CODE), None)
        self.kernel_result = {"injected": self.kmsg.injected,
                              "counted": int(final.get(xid, 0)) if xid else 0}
        if xid:
            expected[xid] = expected.get(xid, 0) + self.kmsg.injected
        ev = next((k for k in baseline if k.startswith("nodewatch_kernel_events_total{")
                   and client.label(k, "event") == "nvidia_xid"
                   and client.label(k, "device") == XID_DEVICE), None)
        if ev:
            expected[ev] += self.kmsg.injected
        if self.kmsg.injected and not xid:
            self.violation(f"{self.kmsg.injected} XID {XID_CODE} records injected, none counted")
        for k in sorted(set(expected) | set(final)):
            if expected.get(k) != final.get(k):
                self.violation(f"kernel count {k}: expected {number(expected.get(k))}, "
                               f"counted {number(final.get(k))}")


def number(v):
    return "none" if v is None else f"{v:g}"


def main():
    p = argparse.ArgumentParser(prog="bench/soak.sh")
    p.add_argument("--binary", required=True)
    p.add_argument("--scratch", required=True)
    p.add_argument("--fixtures", required=True)
    p.add_argument("--fake-nvml", default="")
    p.add_argument("--minutes", type=float, default=60)
    p.add_argument("--reload-every", type=float, default=60)
    p.add_argument("--seed", type=int)
    p.add_argument("--out", default="")
    p.add_argument("--report", default="")
    p.add_argument("--no-tls", action="store_true")
    p.add_argument("--faults", default="")
    a = p.parse_args()
    unknown = set(filter(None, a.faults.split(","))) - set(faults.KINDS)
    if unknown:
        p.error(f"unknown fault kinds {', '.join(sorted(unknown))}; known: {', '.join(faults.KINDS)}")
    # The report's folders now: a long run must not end unable to write it.
    for path in (a.report, a.out):
        if path:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    if a.seed is None:
        a.seed = random.SystemRandom().randrange(1 << 31)
    log(f"seed {a.seed} (--seed {a.seed} runs the same schedule again)")
    s = Soak(a)
    # Stopped by a signal (SIGTERM from soak.sh, a CI limit), it still stops
    # its daemon and unmounts its state disk: SystemExit runs the finally.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    try:
        return s.run()
    finally:
        s.stop.set()
        s.node.stop()
        s.unmount_state_tmpfs()


if __name__ == "__main__":
    sys.exit(main())
