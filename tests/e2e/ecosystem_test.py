#!/usr/bin/env python3
"""The real ecosystem end to end: Debian's Prometheus scrapes nodewatchd
running against the fixture node (every collector populated: the fixture
trees, the fake NVML with 8 GPUs and their NVLinks, burn-in textfiles, a
storage probe on a real directory, the machine's own NICs), with the shipped
rule files loaded. After a few scrapes:

  - every expression of every dashboard panel and variable (variables
    substituted) executes, and a panel whose metrics the node exports
    returns series (unless each of its queries filters with a comparison);
  - every alert and recording rule evaluates without error, and every
    recording rule whose inputs the node exports records series;
  - the alert the fixture node was built to show (a failed burn-in check)
    fires, and nodewatch-soak-report names that failure for the node.

Usage: ecosystem_test.py --nodewatchd BIN --fake-nvml LIB --source DIR
"""

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

SCRAPE = "1s"
WARMUP_SECONDS = 14
# In order: "$job_id" before "$job", which it starts with.
SUBSTITUTIONS = (("$__rate_interval", "10s"), ("$__range", "1m"), ("$__interval", "1s"),
                 ("$cluster", ".*"), ("$job_id", ".*"), ("$scheduler", ".*"), ("$namespace", ".*"),
                 ("$pod", ".*"), ("$job", "nodewatch"), ("$instance", ".+"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url, deadline):
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.2)
    return False


class Prom:
    def __init__(self, port):
        self.base = f"http://127.0.0.1:{port}"

    def get(self, path, **params):
        url = f"{self.base}{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                return json.load(r)
        except urllib.error.HTTPError as e:
            return json.load(e)

    def query(self, expr):
        return self.get("/api/v1/query", query=expr)


def substitute(expr):
    """A dashboard expression with Grafana's variables filled in."""
    for k, val in SUBSTITUTIONS:
        expr = expr.replace(k, val)
    return expr


def dashboards_of(src):
    """Each shipped dashboard as (file name, variables, panels): the
    variables that query Prometheus as (variable, expression with the
    variables filled in, label), the panels (those inside rows too) without
    the rows themselves."""
    for fn in sorted(os.listdir(os.path.join(src, "dashboards"))):
        if not fn.endswith(".json"):
            continue
        with open(os.path.join(src, "dashboards", fn)) as f:
            d = json.load(f)
        variables = []
        for v in d["templating"]["list"]:
            q = v.get("query")
            q = q.get("query") if isinstance(q, dict) else None
            m = re.match(r"label_values\((.*),\s*(\w+)\)$", q or "")
            if m:
                variables.append((v, substitute(m.group(1)), m.group(2)))
        panels = list(d["panels"])
        for p in d["panels"]:
            panels.extend(p.get("panels", []))
        yield fn, variables, [p for p in panels if p["type"] != "row"]


def metric_names(expr):
    """Metric and recording-rule names an expression reads."""
    stripped = re.sub(r'"[^"]*"', '""', expr)
    names = set(re.findall(r"(?<![\w:])([a-zA-Z_][a-zA-Z0-9_]*:[a-zA-Z0-9_:]+|nodewatch_[a-z0-9_]+|burnin_[a-z0-9_]+)(?![\w:(])", stripped))
    return {re.sub(r"_(bucket|sum|count)$", "", n) if n.startswith("nodewatch_storage_probe_duration") else n for n in names}


def filters(expr):
    """True when the expression filters with a comparison (may rightly be empty)."""
    e = re.sub(r"\{[^}]*\}", "", expr)
    e = re.sub(r'"[^"]*"', "", e)
    return re.search(r"(>=|<=|==|!=|>|<)", e) is not None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodewatchd", required=True)
    ap.add_argument("--fake-nvml", required=True)
    ap.add_argument("--source", required=True)
    a = ap.parse_args()
    src = os.path.abspath(a.source)
    if shutil.which("prometheus") is None or shutil.which("promtool") is None:
        print("FAIL: prometheus is not installed: run packaging/install-deps.sh --test")
        return 1
    fixtures = os.path.join(src, "tests", "fixtures")
    tmp = tempfile.mkdtemp(prefix="nodewatch-eco-")
    procs = []
    problems = []
    try:
        # The fixture node: every collector's trees side by side.
        node = os.path.join(tmp, "node")
        for tree in sorted(os.listdir(fixtures)):
            for root in ("sys", "proc"):
                from_dir = os.path.join(fixtures, tree, root)
                if os.path.isdir(from_dir):
                    shutil.copytree(from_dir, os.path.join(node, root), symlinks=True, dirs_exist_ok=True)
        textfile = os.path.join(node, "textfile")
        os.makedirs(textfile)
        for f in os.listdir(os.path.join(fixtures, "textfile")):
            if f.endswith(".prom"):
                shutil.copy(os.path.join(fixtures, "textfile", f), textfile)
        probe_dir = os.path.join(tmp, "probed")
        os.makedirs(probe_dir)
        nw_port = free_port()
        with open(os.path.join(tmp, "nodewatch.toml"), "w") as f:
            f.write(f'[server]\nlisten = ["127.0.0.1:{nw_port}"]\ncheck_socket = ""\n'
                    f'[nvml]\nlibrary = "{a.fake_nvml}"\n'
                    f'[collectors.accelerator]\ninterval = "1s"\ntimeout = "1s"\n'
                    f'[collectors.interconnect]\ninterval = "1s"\ntimeout = "1s"\n'
                    f'[collectors.textfile]\ninterval = "1s"\ntimeout = "1s"\ndirectory = "{textfile}"\n'
                    f'[collectors.storage]\ninterval = "1s"\ntimeout = "1s"\n'
                    f'[[collectors.storage.probe]]\npath = "{probe_dir}"\n'
                    f'operations = ["stat", "read", "write", "fsync"]\ninterval = "1s"\ntimeout = "1s"\n'
                    f'[collectors.pcie]\ninterval = "1s"\ntimeout = "1s"\n[collectors.nic]\ninterval = "1s"\ntimeout = "1s"\n'
                    f'[collectors.kernel]\ninterval = "1s"\ntimeout = "1s"\n'
                    f'kmsg_path = "{os.path.join(fixtures, "kernel", "kmsg-node.txt")}"\n'
                    f'state_file = "{os.path.join(tmp, "kernel-log.state")}"\n')
        env = dict(os.environ, FAKE_NVML_SCENARIO=os.path.join(fixtures, "nvml", "e2e_node.scenario"))
        nw_log = open(os.path.join(tmp, "nodewatch.log"), "w")
        procs.append(subprocess.Popen(
            [a.nodewatchd, "--config", os.path.join(tmp, "nodewatch.toml"),
             "--sysfs", os.path.join(node, "sys"), "--procfs", os.path.join(node, "proc")],
            stdout=nw_log, stderr=subprocess.STDOUT, env=env))
        if not wait_http(f"http://127.0.0.1:{nw_port}/-/ready", time.time() + 20):
            print(open(os.path.join(tmp, "nodewatch.log")).read())
            print("FAIL: nodewatchd did not become ready")
            return 1

        prom_port = free_port()
        rules = [os.path.join(src, "alerts", "nodewatch-recording.yml"),
                 os.path.join(src, "alerts", "nodewatch-rules.yml")]
        with open(os.path.join(tmp, "prometheus.yml"), "w") as f:
            f.write(f"global:\n  scrape_interval: {SCRAPE}\n  scrape_timeout: {SCRAPE}\n"
                    f"  evaluation_interval: {SCRAPE}\n"
                    "rule_files:\n" + "".join(f"  - {r}\n" for r in rules) +
                    "scrape_configs:\n  - job_name: nodewatch\n    static_configs:\n"
                    f"      - targets: ['127.0.0.1:{nw_port}']\n")
        prom_log = open(os.path.join(tmp, "prometheus.log"), "w")
        procs.append(subprocess.Popen(
            ["prometheus", f"--config.file={tmp}/prometheus.yml", f"--storage.tsdb.path={tmp}/data",
             f"--web.listen-address=127.0.0.1:{prom_port}"],
            stdout=prom_log, stderr=subprocess.STDOUT))
        if not wait_http(f"http://127.0.0.1:{prom_port}/-/ready", time.time() + 30):
            print(open(os.path.join(tmp, "prometheus.log")).read()[-4000:])
            print("FAIL: prometheus did not become ready")
            return 1
        started = time.time()
        prom = Prom(prom_port)
        # Scrapes and rule evaluations accumulate.
        deadline = time.time() + 30
        while time.time() < deadline:
            r = prom.query('up{job="nodewatch"}')
            if r.get("data", {}).get("result") and r["data"]["result"][0]["value"][1] == "1":
                break
            time.sleep(0.5)
        else:
            problems.append("Prometheus never scraped nodewatchd successfully")
        time.sleep(WARMUP_SECONDS)

        present = set(prom.get("/api/v1/label/__name__/values").get("data", []))

        def has_series(name):
            r = prom.query(f"count({name})")
            return bool(r.get("data", {}).get("result"))

        def inputs_present(expr):
            names = metric_names(expr)
            return names and all((n in present) if ":" not in n else has_series(n) for n in names)

        # Dashboards.
        checked = 0
        with_data = 0
        for fn, variables, panels in dashboards_of(src):
            for v, expr, _label in variables:
                r = prom.get("/api/v1/series", **{"match[]": expr})
                if r.get("status") != "success":
                    problems.append(f"{fn}: variable {v['name']}: {r.get('error')}")
                elif v["name"] in ("job", "instance") and not r.get("data"):
                    problems.append(f"{fn}: variable {v['name']} finds no series: {expr}")
            for p in panels:
                expect, got = False, False
                for t in p.get("targets", []):
                    expr = substitute(t["expr"])
                    r = prom.query(expr)
                    checked += 1
                    if r.get("status") != "success":
                        problems.append(f"{fn}: panel {p['title']!r} target {t['refId']}: {r.get('error')}")
                        continue
                    result = r["data"]["result"]
                    if result:
                        got = True
                    if not filters(t["expr"]) and inputs_present(t["expr"]):
                        expect = True
                if expect:
                    with_data += 1
                if expect and not got:
                    problems.append(f"{fn}: panel {p['title']!r} returns no series though the node exports its metrics")
        print(f"dashboards: {checked} expressions executed, {with_data} panels required to return series")
        if with_data < 70:
            problems.append(f"only {with_data} panels were required to return series: the fixture node lost a collector?")

        # Rules: evaluated without error (after a few evaluations).
        r = prom.get("/api/v1/rules")
        groups = r.get("data", {}).get("groups", [])
        n_rules = 0
        n_recorded = 0
        for g in groups:
            for rule in g["rules"]:
                n_rules += 1
                if rule.get("health") != "ok":
                    problems.append(f"rule {rule.get('name')} in {g['name']}: health {rule.get('health')}: {rule.get('lastError')}")
                if rule["type"] == "recording" and not filters(rule["query"]) and inputs_present(rule["query"]):
                    n_recorded += 1
                    if not has_series(rule["name"]):
                        problems.append(f"recording rule {rule['name']} records nothing though its inputs exist")
        if n_rules < 50:
            problems.append(f"only {n_rules} rules loaded")
        print(f"rules: {n_rules} evaluated, {n_recorded} recording rules required to record series")

        # The failure the fixture node was built to show.
        r = prom.query('ALERTS{alertname="NodewatchBurninCheckFailed",alertstate="firing",check="hbm_stress"}')
        if not r.get("data", {}).get("result"):
            problems.append("NodewatchBurninCheckFailed does not fire for the failed hbm_stress check")

        # The soak report over what Prometheus has.
        end = time.time()
        report_json = os.path.join(tmp, "report.json")
        report_md = os.path.join(tmp, "report.md")
        rep = subprocess.run(
            [sys.executable, os.path.join(src, "packaging", "nodewatch-soak-report"),
             "--prometheus", prom.base, "--start", str(int(started) - 5), "--end", str(int(end)),
             "--selector", 'job="nodewatch"', "--json", report_json, "--markdown", report_md],
            capture_output=True, text=True, timeout=120)
        if rep.returncode != 1:
            problems.append(f"soak report exit status {rep.returncode} (expected 1, a failing node): {rep.stderr}")
        else:
            with open(report_json) as f:
                report = json.load(f)
            with open(report_md) as f:
                md = f.read()
            nodes = report["nodes"]
            if len(nodes) != 1 or nodes[0]["verdict"] != "FAIL":
                problems.append(f"soak report: expected one FAIL node, got {[(n['instance'], n['verdict']) for n in nodes]}")
            elif "burnin_failed" not in nodes[0]["failures"] or "first_seen" not in nodes[0]["failures"]["burnin_failed"]:
                problems.append(f"soak report does not name the failed burn-in check with its time: {nodes[0]['failures']}")
            if "Burn-in checks failed" not in md or "| FAIL |" not in md:
                problems.append("the Markdown report does not show the failure:\n" + md)
            print(md)
    finally:
        for p in reversed(procs):
            p.send_signal(signal.SIGTERM)
        for p in reversed(procs):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        if problems:
            for name in ("nodewatch.log", "prometheus.log"):
                path = os.path.join(tmp, name)
                if os.path.exists(path):
                    print(f"--- {name} (tail)")
                    print(open(path, errors="replace").read()[-3000:])
        shutil.rmtree(tmp, ignore_errors=True)
    for p in problems:
        print("FAIL:", p)
    print(f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
