#!/usr/bin/env python3
"""The host-link load step of the hardware check: copies a known volume
between the host and one GPU with PyTorch, and checks that nodewatch's
nodewatch_accelerator_host_link_bytes_total of that GPU grows by it.

usage: host_link_load.py --nodewatchd PATH [--nvml-library LIB] [--gib N]
                         [--device K] [--timeout SECONDS] [--json FILE]

nodewatchd runs with the accelerator collector alone, every second, on a
loopback port. Over an idle window of the same length as the load the
counters' own growth is measured and taken off. Then N GiB are copied to
the GPU (rx) and N GiB back (tx), from and to pinned host memory, one GiB
per copy. For each direction, the link that moved the most (pcie on x86
nodes, c2c on Grace nodes) must have grown by N GiB within 5 %; each link's
figures are printed.

Exit status: 0 both directions within 5 %; 1 one outside, or nodewatchd
failed; 2 the check cannot run (no PyTorch, no CUDA device, no series for
the GPU).
"""

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

GIB = 1 << 30
TOLERANCE = 0.05
FAMILY = "nodewatch_accelerator_host_link_bytes_total"
SAMPLE = re.compile(r"^" + FAMILY + r"\{([^}]*)\} (\S+)$")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def cannot_run(why):
    print(f"host-link load: cannot run: {why}", file=sys.stderr)
    sys.exit(2)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port, uuid):
    """{(link, direction): bytes} of the GPU `uuid`."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        m = SAMPLE.match(line)
        if not m:
            continue
        labels = dict(LABEL.findall(m.group(1)))
        if labels.get("uuid") == uuid:
            out[(labels["link"], labels["direction"])] = float(m.group(2))
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodewatchd", required=True)
    p.add_argument("--nvml-library", default="libnvidia-ml.so.1")
    p.add_argument("--gib", type=int, default=8)
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--timeout", type=int, default=120)
    p.add_argument("--json")
    a = p.parse_args()
    try:
        import torch  # pylint: disable=import-outside-toplevel
    except ImportError:
        cannot_run("PyTorch is not installed")
    if not torch.cuda.is_available() or a.device >= torch.cuda.device_count():
        cannot_run(f"no CUDA device {a.device}")
    props = torch.cuda.get_device_properties(a.device)
    if not hasattr(props, "uuid"):
        cannot_run("this PyTorch does not give the device's UUID")
    uuid = "GPU-" + str(props.uuid)

    work = tempfile.mkdtemp(prefix="host-link-load.")
    port = free_port()
    config = os.path.join(work, "nodewatch.toml")
    with open(config, "w", encoding="utf-8") as f:
        f.write("# Written by tests/hardware/host_link_load.py.\n"
                f'[server]\nlisten = ["127.0.0.1:{port}"]\ncheck_socket = ""\n'
                f"[nvml]\nlibrary = '{a.nvml_library}'\n"
                '[collectors.accelerator]\ninterval = "1s"\ntimeout = "1s"\n')
        for other in ("pcie", "interconnect", "storage", "nic", "textfile", "kernel", "mesh"):
            f.write(f"[collectors.{other}]\nenabled = false\n")
    with open(os.path.join(work, "nodewatchd.log"), "w", encoding="utf-8") as log:
        daemon = subprocess.Popen([a.nodewatchd, "--config", config], stdout=log,
                                  stderr=subprocess.STDOUT)
        try:
            return run(a, torch, uuid, port, daemon, work)
        finally:
            daemon.send_signal(signal.SIGTERM)
            try:
                daemon.wait(10)
            except subprocess.TimeoutExpired:
                daemon.kill()


def run(a, torch, uuid, port, daemon, work):
    # The series, each direction with a value (C2C's need two GPM samples).
    deadline = time.monotonic() + a.timeout
    before = {}
    while time.monotonic() < deadline:
        if daemon.poll() is not None:
            print(open(os.path.join(work, "nodewatchd.log"), encoding="utf-8").read(), file=sys.stderr)
            print(f"host-link load: FAILED: nodewatchd exited with status {daemon.returncode}",
                  file=sys.stderr)
            return 1
        try:
            before = scrape(port, uuid)
        except OSError:
            before = {}
        if {d for _, d in before} == {"tx", "rx"}:
            break
        time.sleep(0.5)
    else:
        cannot_run(f"no {FAMILY} for {uuid} within {a.timeout} s (links: {sorted(before)})")
    time.sleep(2.5)  # a C2C counter that appeared last round has a first interval now

    host = torch.empty(GIB, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(GIB, dtype=torch.uint8, device=f"cuda:{a.device}")
    torch.cuda.synchronize(a.device)

    # The idle growth over a window as long as the load.
    t0 = time.monotonic()
    idle0 = scrape(port, uuid)
    start = time.monotonic()
    for _ in range(a.gib):
        dev.copy_(host, non_blocking=True)
    torch.cuda.synchronize(a.device)
    for _ in range(a.gib):
        host.copy_(dev, non_blocking=True)
    torch.cuda.synchronize(a.device)
    load = time.monotonic() - start
    time.sleep(3)  # two collections after the last copy
    loaded = scrape(port, uuid)
    t1 = time.monotonic()
    time.sleep(t1 - t0)
    idle1 = scrape(port, uuid)
    window = time.monotonic() - t1

    expected = a.gib * GIB
    rows = []
    for (link, direction), value in sorted(loaded.items()):
        grew = value - idle0.get((link, direction), value)
        idle = idle1.get((link, direction), value) - value
        moved = grew - idle * (t1 - t0) / window
        rows.append({"link": link, "direction": direction, "grew_bytes": grew, "idle_bytes": idle,
                     "moved_bytes": moved, "expected_bytes": expected, "ratio": moved / expected})
    print(f"== {uuid}: {a.gib} GiB to the GPU and {a.gib} GiB back in {load:.2f} s "
          f"({2 * expected / load / 1e9:.1f} GB/s)")
    status = 0
    for direction in ("rx", "tx"):
        mine = [r for r in rows if r["direction"] == direction]
        if not mine:
            print(f"{direction}: no series")
            status = 1
            continue
        best = max(mine, key=lambda r: r["moved_bytes"])
        for r in mine:
            verdict = ""
            if r is best:
                verdict = "AGREE" if abs(r["ratio"] - 1) <= TOLERANCE else "DISAGREE"
                if verdict == "DISAGREE":
                    status = 1
            print(f"{direction} {r['link']:>4}: moved {r['moved_bytes'] / GIB:10.3f} GiB "
                  f"(idle {r['idle_bytes'] / GIB:.3f} GiB taken off), "
                  f"{r['ratio']:.4f} of {a.gib} GiB {verdict}")
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump({"uuid": uuid, "gib": a.gib, "load_seconds": load, "rows": rows,
                       "tolerance": TOLERANCE, "status": status}, f, indent=1)
    return status


if __name__ == "__main__":
    sys.exit(main())
