"""The end of a soak: growth over the run, the report (JSON and its
Markdown summary), the exit status (0 only without any violation)."""

import json
import os

# Growth is judged after WARMUP_MINUTES of each run of the daemon, on the
# samples taken with no fault under way (hostile clients hold descriptors),
# against these thresholds.
WARMUP_MINUTES = 1.0
RSS_KIB_PER_HOUR = 1024
FDS_RANGE = 2
# RSS's slope is judged over at least this many minutes of such samples: over
# a few minutes it measures the allocator's warm-up, not growth.
RSS_JUDGED_MINUTES = 10


def slope_per_hour(groups):
    """Least-squares slope per hour of y over x (minutes), fitted within
    each group (one run of the daemon: a restart starts from a new level)
    and pooled: sum of each group's Sxy over the sum of their Sxx."""
    sxy = sxx = 0.0
    for pts in groups:
        if len(pts) < 2:
            continue
        mx = sum(x for x, _ in pts) / len(pts)
        my = sum(y for _, y in pts) / len(pts)
        sxy += sum((x - mx) * (y - my) for x, y in pts)
        sxx += sum((x - mx) ** 2 for x, _ in pts)
    return 0.0 if sxx == 0 else 60 * sxy / sxx


def percentile(xs, q):
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def groups_changed(low, high, most=6):
    """What the descriptors of two samples differ by, largest first:
    "+63 <scratch>/node/sys/class/infiniband/mlx5_0/ports/1/counters, ..."."""
    diff = {k: high.get(k, 0) - low.get(k, 0) for k in set(low) | set(high)}
    diff = sorted(((d, k) for k, d in diff.items() if d), key=lambda e: (-abs(e[0]), e[1]))
    if not diff:
        return "the same descriptors by directory"
    shown = ", ".join(f"{d:+d} {k}" for d, k in diff[:most])
    return shown + (f" and {len(diff) - most} more" if len(diff) > most else "")


def growth(s):
    """Slopes, and a violation for each threshold passed (RSS, descriptors,
    threads), on the quiet samples after each run's warm-up."""
    steady = {}
    for m, epoch, age, rss, fds, thr, quiet, fd_groups in s.samples:
        if quiet and age >= WARMUP_MINUTES:
            steady.setdefault(epoch, []).append((m, rss, fds, thr, fd_groups))
    groups = list(steady.values())
    slopes = {k: slope_per_hour([[(p[0], p[i]) for p in g] for g in groups])
              for k, i in (("rss_kib", 1), ("fds", 2), ("threads", 3))}
    if not groups:
        return slopes, "no quiet samples after a run's first minute: growth not judged"
    span = sum(g[-1][0] - g[0][0] for g in groups)
    if span < RSS_JUDGED_MINUTES:
        rss_note = f"RSS not judged: {span:.1f} quiet minutes, fewer than {RSS_JUDGED_MINUTES}; "
    else:
        rss_note = ""
        if slopes["rss_kib"] > RSS_KIB_PER_HOUR:
            s.violation(f"RSS grows {slopes['rss_kib']:+.0f} KiB an hour (more than {RSS_KIB_PER_HOUR})")
    for g in groups:
        fds = [p[2] for p in g]
        if max(fds) - min(fds) > FDS_RANGE:
            low = min(g, key=lambda p: p[2])
            high = max(g, key=lambda p: p[2])
            s.violation(f"descriptors from {min(fds)} to {max(fds)} in one run of the daemon, "
                        f"with no fault under way (more than {FDS_RANGE} apart): "
                        f"{low[2]} at {low[0]:.1f} min, {high[2]} at {high[0]:.1f} min; "
                        f"{groups_changed(low[4], high[4])}")
        # A reload's thread lives while it reads the file, so a sample may
        # see it: growth is the least count of the last five samples above
        # that of the first five.
        thr = [p[3] for p in g]
        if len(thr) >= 10 and min(thr[-5:]) > min(thr[:5]):
            s.violation(f"threads from {min(thr[:5])} to {min(thr[-5:])} in one run of the daemon")
    return slopes, (f"{rss_note}{sum(len(g) for g in groups)} quiet samples in {len(groups)} "
                    f"run(s) of the daemon")


def write(s, scraper_result):
    a = s.args
    with open(scraper_result) as f:
        scr = json.load(f)
    slopes, judged = growth(s)
    violations = sorted(s.violations + scr["violations"], key=lambda v: v["time"])
    rss = [x[3] for x in s.samples]
    lat = scr["latencies"]
    r = {
        "duration_seconds": round(s.now(), 1),
        "seed": a.seed,
        "tls": bool(s.node.tls),
        "faults": dict(sorted(s.faults.items())),
        "faults_skipped": sorted({f["kind"] for f in s.fault_log if "skipped" in f}),
        "fault_log": s.fault_log,
        "violations": violations,
        "scrapes": scr["scrapes"],
        "scrapes_while_down": scr["excused"],
        "scrape_p99_seconds": round(percentile(lat, 0.99) or 0, 4),
        "scrape_max_seconds": round(max(lat, default=0), 4),
        "load_scrapes": s.load_done,
        "load_failed": s.load_failed,
        "rss_kib": {"start": rss[0] if rss else None, "end": rss[-1] if rss else None,
                    "max": max(rss, default=None)},
        "fds_max": max((x[4] for x in s.samples), default=None),
        "threads_max": max((x[5] for x in s.samples), default=None),
        "slope_per_hour": {k: round(v, 2) for k, v in slopes.items()},
        "growth_judged_on": judged,
        "kernel_records": getattr(s, "kernel_result", None),
        "restarts_unplanned": s.restarts_unplanned,
    }
    if s.load_failed:
        s.violation(f"{s.load_failed} scrapes of the load not answered (5 s, one retry)")
        violations = sorted(s.violations + scr["violations"], key=lambda v: v["time"])
        r["violations"] = violations
    md = markdown(r, s.table_lines)
    print("\n".join(md), flush=True)
    if a.report:
        with open(a.report, "w") as f:
            json.dump(r, f, indent=2)
            f.write("\n")
        with open(os.path.splitext(a.report)[0] + ".md", "w") as f:
            f.write("\n".join(md) + "\n")
    if a.out:
        with open(a.out, "w") as f:
            f.write("\n".join(md) + "\n")
    return 3 if violations else 0


def markdown(r, table):
    out = [f"# Soak: {'PASS' if not r['violations'] else 'FAIL'}", "",
           f"{r['duration_seconds']:.0f} s, seed {r['seed']}, "
           f"{'TLS and basic authentication' if r['tls'] else 'plain HTTP'}.", "",
           "| fault | count |", "| --- | ---: |"]
    out += [f"| {k} | {v} |" for k, v in r["faults"].items()]
    if r["faults_skipped"]:
        out += ["", "Skipped: " + ", ".join(r["faults_skipped"]) + "."]
    k = r["kernel_records"] or {}
    out += ["", f"Independent scraper: {r['scrapes']} scrapes (and {r['scrapes_while_down']} while "
            f"the daemon was down on purpose), p99 {r['scrape_p99_seconds']:.3f} s, max "
            f"{r['scrape_max_seconds']:.3f} s. Load: {r['load_scrapes']} scrapes, {r['load_failed']} failed.",
            "", f"Kernel log records injected {k.get('injected')}, counted {k.get('counted')}.",
            "", f"RSS KiB start {r['rss_kib']['start']}, end {r['rss_kib']['end']}, max "
            f"{r['rss_kib']['max']}; descriptors at most {r['fds_max']}; slope per hour: RSS "
            f"{r['slope_per_hour']['rss_kib']:+.0f} KiB, fds {r['slope_per_hour']['fds']:+.2f}, "
            f"threads {r['slope_per_hour']['threads']:+.2f} ({r['growth_judged_on']}).", ""]
    out += table + [""]
    if r["violations"]:
        out += ["## Violations", ""] + [f"- {v['time']:.1f} s: {v['what']}" for v in r["violations"]]
    else:
        out += ["No violation."]
    return out
