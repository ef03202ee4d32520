#!/usr/bin/env python3
"""Checks the conventions of nodewatch's Grafana dashboards (the rules of
grafana/dashboard-linter that matter here, and a few of our own).

    python3 dashboards/lint.py [--metrics FILE] [--rules FILE ...] dashboards/*.json

--metrics FILE: the metric families nodewatch declares, one per line
  (`nodewatchd --list-metrics`); a nodewatch_* name used in a query that is
  not among them (histogram suffixes _bucket/_sum/_count allowed) is an error.
--rules FILE: a Prometheus rule file; a recording rule (a name with ':') used
  in a query must be recorded in one of them.
--promtool: every query and variable query, with Grafana's variables
  substituted, must parse (each is checked as a recording rule by
  `promtool check rules`).
--coverage FILE: every family of --metrics must be queried by a panel or a
  variable, or used by a rule file, or be named (in backticks) in FILE's
  section whose heading contains "Not charted" (the test suite passes
  docs/developing.md).

Exits 1 with one line per problem. Rules checked, for each dashboard:
  - classic JSON model, schemaVersion >= 39, a stable uid (the file name),
    not editable, unique panel ids;
  - variables: `datasource` (type datasource, prometheus), and `cluster`,
    `job`, `instance` query variables over $datasource, multi-select with an
    all value, refreshed on time-range change;
  - every panel but rows: a title, a description, a unit, the $datasource,
    at least one target, no deprecated (Angular) panel type;
  - every target: the $datasource; each metric selector carries the
    cluster, job and instance matchers; rate/irate use [$__rate_interval];
    increase uses [$__rate_interval] or [$__range]; every *_total counter
    is inside rate/irate/increase, except in the one idiom that counts a
    series which first appeared within the range whole (increase() sees 0
    for it): `(increase(C{...}[$__range]) and last_over_time(C{...}
    [$__range] offset $__range)) or C{...}`, the same selector three times.
"""

import json
import os
import re
import sys

ALLOWED_TYPES = {
    "row", "timeseries", "stat", "gauge", "bargauge", "table", "state-timeline",
    "status-history", "heatmap", "histogram", "barchart", "piechart", "text",
}
REQUIRED_MATCHERS = ['cluster=~"$cluster"', 'job=~"$job"', 'instance=~"$instance"']
# A metric name (or recording rule) followed by a selector.
SELECTOR = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)\s*\{([^{}]*)\}")
# The appear-or-increase idiom (see the header): the same selector three times.
APPEARED = re.compile(r"\(increase\(([A-Za-z_:][A-Za-z0-9_:]*\{[^{}]*\})\[\$__range\]\)"
                      r" and last_over_time\(\1\[\$__range\] offset \$__range\)\) or \1(?![A-Za-z0-9_{])")
# Names that are metrics even without braces.
BARE_METRIC = re.compile(r"(?<![\w:\"$])(nodewatch_[a-z0-9_]+|[a-z_]+:[a-z0-9_:]+|ALERTS|up|process_[a-z_]+|scrape_[a-z_]+)(?![\w:])")
RANGE_FN = re.compile(r"\b(rate|irate|increase)\s*\(")
PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset"}


def problems_in_expr(expr, where, metrics, records):
    out = []
    # Selectors: each must carry the three matchers.
    for m in SELECTOR.finditer(expr):
        name, body = m.group(1), m.group(2)
        if name in PROMQL_WORDS:
            continue
        for req in REQUIRED_MATCHERS:
            if req not in body:
                out.append(f"{where}: selector {name}{{{body}}} lacks {req}")
    # Metric names without a selector.
    stripped = SELECTOR.sub("", expr)
    stripped = re.sub(r"\[[^\]]*\]", "", stripped)
    stripped = re.sub(r'"[^"]*"', "", stripped)
    for m in BARE_METRIC.finditer(stripped):
        after = stripped[m.end():].lstrip()
        if after.startswith("("):
            continue  # a function call, not a metric
        out.append(f"{where}: metric {m.group(1)} without the cluster/job/instance selector")
    # Range functions and their windows.
    for m in RANGE_FN.finditer(expr):
        fn = m.group(1)
        depth, i = 1, m.end()
        while i < len(expr) and depth:
            depth += {"(": 1, ")": -1}.get(expr[i], 0)
            i += 1
        inner = expr[m.end():i - 1]
        windows = re.findall(r"\[([^\]]*)\]$", inner.strip())
        window = windows[0] if windows else None
        allowed = ["$__rate_interval"] if fn in ("rate", "irate") else ["$__rate_interval", "$__range"]
        if window not in allowed:
            out.append(f"{where}: {fn}() window is [{window}], expected [" + "] or [".join(allowed) + "]")
    # Counters only inside rate/irate/increase (the idiom counts as increase()).
    counted = APPEARED.sub(lambda m: "increase(" + m.group(1) + "[$__range])", expr)
    for m in SELECTOR.finditer(counted):
        name = m.group(1)
        if not name.endswith("_total"):
            continue
        before = counted[:m.start()].rstrip()
        if not re.search(r"\b(rate|irate|increase)\s*\($", before):
            out.append(f"{where}: counter {name} used outside rate/irate/increase")
    # Names must exist.
    for m in SELECTOR.finditer(expr):
        name = m.group(1)
        if name in PROMQL_WORDS:
            continue
        if ":" in name:
            if records is not None and name not in records:
                out.append(f"{where}: recording rule {name} is not defined in the rule files")
        elif name.startswith("nodewatch_") and metrics is not None:
            base = re.sub(r"_(bucket|sum|count)$", "", name)
            if name not in metrics and base not in metrics:
                out.append(f"{where}: nodewatch does not declare a metric {name}")
    return out


def lint_dashboard(path, metrics, records):
    out = []
    name = os.path.basename(path)
    try:
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
    except (OSError, ValueError) as e:
        return [f"{name}: cannot read: {e}"]
    if d.get("schemaVersion", 0) < 39:
        out.append(f"{name}: schemaVersion {d.get('schemaVersion')} < 39")
    if d.get("uid") != name[: -len(".json")]:
        out.append(f"{name}: uid {d.get('uid')!r} is not the file name")
    if d.get("editable") is not False:
        out.append(f"{name}: dashboard is editable")
    for key in ("title", "description"):
        if not d.get(key):
            out.append(f"{name}: no {key}")
    variables = {v.get("name"): v for v in d.get("templating", {}).get("list", [])}
    ds = variables.get("datasource")
    if not ds or ds.get("type") != "datasource" or ds.get("query") != "prometheus":
        out.append(f"{name}: no datasource variable of type datasource over prometheus")
    for var in ("cluster", "job", "instance"):
        v = variables.get(var)
        if not v:
            out.append(f"{name}: no {var} variable")
            continue
        if v.get("type") != "query" or v.get("datasource", {}).get("uid") != "${datasource}":
            out.append(f"{name}: variable {var} is not a query over $datasource")
        if not v.get("multi") or not v.get("includeAll") or not v.get("allValue"):
            out.append(f"{name}: variable {var} is not multi-select with an all value")
        if v.get("refresh") != 2:
            out.append(f"{name}: variable {var} is not refreshed on time-range change")
        q = v.get("query", {})
        q = q.get("query") if isinstance(q, dict) else q
        if not q or not q.startswith("label_values("):
            out.append(f"{name}: variable {var} query is not label_values(...)")
    ids = set()
    panels = list(d.get("panels", []))
    for p in d.get("panels", []):
        panels.extend(p.get("panels", []))
    for p in panels:
        where = f"{name}: panel {p.get('id')} {p.get('title')!r}"
        if p.get("id") in ids:
            out.append(f"{where}: duplicate id")
        ids.add(p.get("id"))
        kind = p.get("type")
        if kind not in ALLOWED_TYPES:
            out.append(f"{where}: panel type {kind!r} is deprecated or unknown")
        if kind in ("row", "text"):
            continue
        if not p.get("title"):
            out.append(f"{where}: no title")
        if not p.get("description"):
            out.append(f"{where}: no description")
        if not p.get("fieldConfig", {}).get("defaults", {}).get("unit"):
            out.append(f"{where}: no unit")
        if p.get("datasource", {}).get("uid") != "${datasource}":
            out.append(f"{where}: panel does not use $datasource")
        targets = p.get("targets", [])
        if not targets:
            out.append(f"{where}: no target")
        for t in targets:
            tw = f"{where} target {t.get('refId')}"
            if t.get("datasource", {}).get("uid") != "${datasource}":
                out.append(f"{tw}: target does not use $datasource")
            expr = t.get("expr", "")
            if not expr:
                out.append(f"{tw}: empty expression")
                continue
            out.extend(problems_in_expr(expr, tw, metrics, records))
    return out


def load(path):
    """A dashboard and its panels, rows' own panels included."""
    with open(path, encoding="utf-8") as f:
        d = json.load(f)
    panels = list(d.get("panels", []))
    for p in d.get("panels", []):
        panels.extend(p.get("panels", []))
    return d, panels


def variable_query(v):
    q = v.get("query")
    return q.get("query", "") if isinstance(q, dict) else str(q or "")


def not_charted(doc):
    names, inside = set(), False
    with open(doc, encoding="utf-8") as f:
        for line in f:
            if line.startswith("#"):
                inside = "not charted" in line.lower()
                continue
            if inside:
                names.update(re.findall(r"`([a-z_:][a-z0-9_:]*)`", line))
    return names


def coverage_problems(metrics, dashboard_paths, rule_paths, doc):
    text = []
    for path in dashboard_paths:
        d, panels = load(path)
        text += [t.get("expr", "") for p in panels for t in p.get("targets", [])]
        text += [variable_query(v) for v in d.get("templating", {}).get("list", [])]
    for path in rule_paths:
        with open(path, encoding="utf-8") as f:
            text.append(f.read())
    blob = "\n".join(text)
    exempt = not_charted(doc)
    out = []
    for m in sorted(metrics):
        if m in exempt:
            continue
        if not re.search(r"(?<![\w:])" + re.escape(m) + r"(_bucket|_sum|_count)?(?![\w:])", blob):
            out.append(f"coverage: {m} is in no dashboard panel or rule, and not listed under "
                       f"'Not charted' in {doc}")
    return out


def substitute(expr):
    for var, value in (("$__rate_interval", "5m"), ("$__range", "72h"), ("$__interval", "1m"),
                       ("$cluster", ".*"), ("$job", ".+"), ("$instance", ".+")):
        expr = expr.replace(var, value)
    return expr


def promtool_problems(dashboard_paths):
    import subprocess
    import tempfile
    exprs = []
    for path in dashboard_paths:
        d, panels = load(path)
        for p in panels:
            for t in p.get("targets", []):
                exprs.append((f"{os.path.basename(path)}: panel {p.get('id')} target {t.get('refId')}", t.get("expr", "")))
        for v in d.get("templating", {}).get("list", []):
            q = variable_query(v)
            m = re.match(r"label_values\((.*),\s*\w+\)$", q or "")
            if m:
                exprs.append((f"{os.path.basename(path)}: variable {v.get('name')}", m.group(1)))
    def check(batch, tmp):
        rule = os.path.join(tmp, "rules.yml")
        with open(rule, "w", encoding="utf-8") as f:
            f.write("groups:\n  - name: lint\n    rules:\n")
            for _, expr in batch:
                f.write("      - record: lint:expr\n        expr: " + json.dumps(substitute(expr)) + "\n")
        return subprocess.run(["promtool", "check", "rules", rule], capture_output=True, text=True)

    def problems(batch, tmp):
        # One promtool run for the batch; where something does not parse,
        # each half again, down to the expressions that do not: a few runs
        # for one bad expression, not one per expression (a run takes about
        # 0.1 s, and the dashboards hold hundreds).
        r = check(batch, tmp)
        if r.returncode == 0:
            return []
        if len(batch) > 1:
            half = len(batch) // 2
            return problems(batch[:half], tmp) + problems(batch[half:], tmp)
        msg = [m.strip() for m in (r.stderr + r.stdout).splitlines()
               if m.strip() and not m.startswith("Checking ") and "FAILED" not in m]
        return [f"{batch[0][0]}: PromQL does not parse: {' '.join(msg) or '?'}"]

    if not exprs:
        return []
    with tempfile.TemporaryDirectory() as tmp:
        return problems(exprs, tmp)


def read_records(paths):
    records = set()
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for line in f:
                m = re.match(r"\s*-?\s*record:\s*(\S+)", line)
                if m:
                    records.add(m.group(1))
    return records


def main(argv):
    args = argv[1:]
    metrics = None
    use_promtool = False
    coverage = None
    rule_files = []
    files = []
    i = 0
    while i < len(args):
        if args[i] == "--metrics":
            with open(args[i + 1], encoding="utf-8") as f:
                metrics = {line.split()[0] for line in f if line.strip()}
            i += 2
        elif args[i] == "--promtool":
            use_promtool = True
            i += 1
        elif args[i] == "--coverage":
            coverage = args[i + 1]
            i += 2
        elif args[i] == "--rules":
            rule_files.append(args[i + 1])
            i += 2
        else:
            files.append(args[i])
            i += 1
    if not files:
        print("usage: lint.py [--metrics FILE] [--rules FILE ...] DASHBOARD.json ...", file=sys.stderr)
        return 2
    records = read_records(rule_files) if rule_files else None
    out = []
    uids = {}
    for path in files:
        out.extend(lint_dashboard(path, metrics, records))
        try:
            with open(path, encoding="utf-8") as f:
                uid = json.load(f).get("uid")
            if uid in uids:
                out.append(f"{os.path.basename(path)}: uid {uid} also used by {uids[uid]}")
            uids[uid] = os.path.basename(path)
        except (OSError, ValueError):
            pass
    if use_promtool:
        out.extend(promtool_problems(files))
    if coverage:
        if metrics is None:
            out.append("--coverage needs --metrics")
        else:
            out.extend(coverage_problems(metrics, files, rule_files, coverage))
    for line in out:
        print(line)
    if out:
        print(f"lint.py: {len(out)} problem(s) in {len(files)} dashboard(s)", file=sys.stderr)
        return 1
    print(f"lint.py: {len(files)} dashboard(s) clean")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
