#!/usr/bin/env python3
"""The fleet topology of docs/fleet.md end to end, on one machine:

  - 20 nodewatchd on the fixture node (the fixture trees, the fake NVML with
    8 GPUs, the burn-in textfiles, a storage probe each), each on its own
    loopback address and port (127.0.0.11, 127.0.0.12, ...);
  - two Prometheus servers in agent mode, one per "rack" of 10 nodes, each
    with its own file_sd node list, running the agent configuration of
    docs/fleet.md (its addresses, paths and intervals rewritten for the
    test) and remote-writing to
  - one VictoriaMetrics (single node) started by the test, and
  - vmalert evaluating the shipped recording and alert rules (and the
    overrides example) centrally against the store, writing the recorded
    series and ALERTS back to it and sending alerts to a stand-in
    Alertmanager.

Then, against the store's Prometheus query API:

  - every template variable and every panel expression of every dashboard
    (variables substituted as tests/e2e/ecosystem_test.py does) evaluates
    without error; a panel whose metrics the nodes export returns series,
    and a per-node panel (no topk, no comparison) returns all 20 nodes;
  - every metric a dashboard reads that the nodes export is in the store
    for all 20 nodes;
  - every rule vmalert loaded evaluates without error, both in vmalert and
    queried directly; every recording rule whose inputs exist records
    series, for all 20 nodes when it keeps the instance label;
  - the alert the fixture node shows (a failed burn-in check) fires for all
    20 nodes, in the store's ALERTS and at the Alertmanager, and
    nodewatch-soak-report over the store fails all 20 on it.

An expression that returns nothing on the store only because all its values
are NaN (0/0 over idle counters: VictoriaMetrics drops NaN from results,
Prometheus returns it) is noted, not failed.

It prints what docs/fleet.md sizes from: series per node, samples per second
ingested, the bytes per sample sent, the store's active series, CPU and
memory, the agents' memory, and which selectors of the shipped dashboards and
rules would select more than VictoriaMetrics's default per-selector limit of
series at 2,000 nodes.

Usage: fleet_test.py --nodewatchd BIN --fake-nvml LIB --source DIR [--nodes N] [--agents N]
Exit status 77 (skipped) when Prometheus or VictoriaMetrics is not installed.
"""

import argparse
import ctypes
import http.server
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ecosystem_test as eco  # noqa: E402  (wait_http, Prom, metric_names, filters, dashboards_of, substitute)

SKIP = 77
SCRAPE = "2s"            # the agents' scrape interval
EVALUATION = "5s"        # vmalert's evaluation interval
COLLECT = "2s"           # every collector's interval on the test nodes
MIN_DATA_SECONDS = 12    # data in the store before the first check (rate windows of 10s)
CHECK_DEADLINE = 75      # seconds from the first successful scrape to a clean pass
DOC_MARKER = "<!-- tests/e2e/fleet_test.py runs the next block"


def fail(msg):
    raise RuntimeError(msg)


_libc = ctypes.CDLL(None, use_errno=True)


def die_with_parent():
    """In a child before exec: SIGKILL when the test dies, even by SIGKILL
    (a timed-out ctest leaves no store or agent behind)."""
    _libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def node_address(i):
    return f"127.0.0.{11 + i}"


def free_port_on(addr, taken):
    for _ in range(50):
        with socket.socket() as s:
            s.bind((addr, 0))
            port = s.getsockname()[1]
        if port not in taken:
            taken.add(port)
            return port
    fail(f"no free port on {addr}")


def agent_config(doc, targets_glob, vm_url):
    """The agent configuration of docs/fleet.md with the test's store, node
    list and intervals: each rewritten line must be there exactly once."""
    at = doc.find(DOC_MARKER)
    m = re.compile(r"```yaml\n(.*?)```", re.S).search(doc, at) if at >= 0 else None
    if not m:
        fail("docs/fleet.md has no agent configuration block after its test marker")
    text = m.group(1)
    for pattern, repl in ((r"(?m)^(  scrape_interval: )15s\b", rf"\g<1>{SCRAPE}"),
                          (r"(?m)^(  scrape_timeout: )10s\b", rf"\g<1>{SCRAPE}"),
                          (r"(?m)^(\s+- )/etc/prometheus/nodewatch-nodes/\*\.json$", rf"\g<1>{targets_glob}"),
                          (r"(?m)^(  - url: )\S+$", rf"\g<1>{vm_url}/api/v1/write"),
                          (r"(?m)^(\s+batch_send_deadline: )5s\b", r"\g<1>1s")):
        text, n = re.subn(pattern, repl, text)
        if n != 1:
            fail(f"docs/fleet.md's agent configuration: {pattern!r} matched {n} times (expected once)")
    return text


class Store(eco.Prom):
    """The store's (or vmalert's) Prometheus API; a loaded machine gets time,
    and a request that fails reads as an error answer."""

    def get(self, path, **params):
        url = f"{self.base}{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=60) as r:
                return json.load(r)
        except urllib.error.HTTPError as e:
            try:
                return json.load(e)
            except ValueError:
                return {"status": "error", "errorType": f"HTTP {e.code}", "error": str(e)}
        except (OSError, ValueError) as e:
            return {"status": "error", "errorType": "request", "error": f"{path}: {e}"}


def cpu_seconds(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def rss_bytes(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def scrape_metrics(url):
    """A /metrics page as {name{labels}: value} (no comments)."""
    out = {}
    with urllib.request.urlopen(url, timeout=30) as r:
        for line in r.read().decode().splitlines():
            if line and not line.startswith("#"):
                key, _, value = line.rpartition(" ")
                try:
                    out[key] = float(value)
                except ValueError:
                    pass
    return out


def metric_sum(metrics, name, **labels):
    total = 0.0
    for key, value in metrics.items():
        if key == name or key.startswith(name + "{"):
            if all(f'{k}="{v}"' in key for k, v in labels.items()):
                total += value
    return total


def dir_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


class AlertSink:
    """A stand-in Alertmanager: remembers (alertname, instance) of what it is sent."""

    def __init__(self):
        self.seen = set()
        self.lock = threading.Lock()
        sink = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    alerts = json.loads(body or b"[]")
                except ValueError:
                    alerts = []
                with sink.lock:
                    for a in alerts if isinstance(alerts, list) else []:
                        labels = a.get("labels", {})
                        sink.seen.add((labels.get("alertname"), labels.get("instance")))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = None

    def serve(self):
        """Answers from now on (until then vmalert's sends wait in the backlog
        or are retried): no thread runs while the test starts processes."""
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def instances(self, alertname):
        with self.lock:
            return {i for a, i in self.seen if a == alertname}

    def close(self):
        if self.thread:
            self.server.shutdown()
        self.server.server_close()


class Fleet:
    def __init__(self, args):
        self.a = args
        self.src = os.path.abspath(args.source)
        self.fixtures = os.path.join(self.src, "tests", "fixtures")
        self.tmp = tempfile.mkdtemp(prefix="nodewatch-fleet-")
        self.procs = []      # (name, Popen, log path)
        self.ports = set()
        self.sink = None

    # -- processes ---------------------------------------------------------
    def start(self, name, argv, env=None):
        log = os.path.join(self.tmp, f"{name}.log")
        with open(log, "w") as f:
            p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, env=env,
                                 stdin=subprocess.DEVNULL, preexec_fn=die_with_parent)
        self.procs.append((name, p, log))
        return p

    def wait_ready(self, name, proc, url, seconds):
        deadline = time.time() + seconds
        while time.time() < deadline:
            if proc.poll() is not None:
                fail(f"{name} exited with status {proc.returncode} before it was ready:\n{self.tail(name)}")
            if eco.wait_http(url, min(deadline, time.time() + 1)):
                return
        fail(f"{name} not ready at {url} within {seconds}s:\n{self.tail(name)}")

    def tail(self, name, n=3000):
        path = os.path.join(self.tmp, f"{name}.log")
        try:
            with open(path, errors="replace") as f:
                return f.read()[-n:]
        except OSError:
            return ""

    def stop(self):
        for _, p, _ in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for _, p, _ in reversed(self.procs):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if self.sink:
            self.sink.close()

    # -- the pieces --------------------------------------------------------
    def make_node_tree(self):
        """One fixture node shared read-only by every daemon (they only read it)."""
        node = os.path.join(self.tmp, "node")
        for tree in sorted(os.listdir(self.fixtures)):
            for root in ("sys", "proc"):
                from_dir = os.path.join(self.fixtures, tree, root)
                if os.path.isdir(from_dir):
                    shutil.copytree(from_dir, os.path.join(node, root), symlinks=True, dirs_exist_ok=True)
        textfile = os.path.join(node, "textfile")
        os.makedirs(textfile)
        for f in os.listdir(os.path.join(self.fixtures, "textfile")):
            if f.endswith(".prom"):
                shutil.copy(os.path.join(self.fixtures, "textfile", f), textfile)
        return node, textfile

    def start_nodes(self):
        node, textfile = self.make_node_tree()
        env = dict(os.environ, FAKE_NVML_SCENARIO=os.path.join(self.fixtures, "nvml", "e2e_node.scenario"))
        kmsg = os.path.join(self.fixtures, "kernel", "kmsg-node.txt")
        # The nic collector reads the machine's own interfaces; those there
        # now, so that one made by something else meanwhile is not on some
        # nodes only.
        nics = "|".join(re.escape(x) for x in sorted(os.listdir("/sys/class/net")))
        self.nodes = []   # (address, port)
        started = []
        for i in range(self.a.nodes):
            addr = node_address(i)
            port = free_port_on(addr, self.ports)
            own = os.path.join(self.tmp, f"node{i:02d}")
            probe = os.path.join(own, "probed")
            os.makedirs(probe)
            conf = os.path.join(own, "nodewatch.toml")
            every = f'interval = "{COLLECT}"\ntimeout = "{COLLECT}"\n'
            with open(conf, "w") as f:
                f.write(f'[server]\nlisten = ["{addr}:{port}"]\ncheck_socket = ""\n'
                        f'[log]\nlevel = "warn"\n'
                        f'[nvml]\nlibrary = "{self.a.fake_nvml}"\n'
                        f'[collectors.accelerator]\n{every}'
                        f'[collectors.interconnect]\n{every}'
                        f'[collectors.textfile]\n{every}directory = "{textfile}"\n'
                        f'[collectors.storage]\n{every}'
                        f'[[collectors.storage.probe]]\npath = "{probe}"\n'
                        f'operations = ["stat", "read", "write", "fsync"]\n{every}'
                        f'[collectors.pcie]\n{every}[collectors.nic]\n{every}interfaces_include = \'^({nics})$\'\n'
                        f'[collectors.kernel]\n{every}kmsg_path = "{kmsg}"\n'
                        f'state_file = "{os.path.join(own, "kernel-log.state")}"\n')
            name = f"nodewatchd-{i:02d}"
            p = self.start(name, [self.a.nodewatchd, "--config", conf, "--sysfs", os.path.join(node, "sys"),
                                  "--procfs", os.path.join(node, "proc")], env=env)
            self.nodes.append((addr, port))
            started.append((name, p, f"http://{addr}:{port}/-/ready"))
        for name, p, url in started:
            self.wait_ready(name, p, url, 30)

    def start_store(self):
        self.vm_port = free_port_on("127.0.0.1", self.ports)
        self.vm_url = f"http://127.0.0.1:{self.vm_port}"
        self.vm = self.start("victoria-metrics", [
            "victoria-metrics", f"-storageDataPath={self.tmp}/vm-data",
            f"-httpListenAddr=127.0.0.1:{self.vm_port}", "-retentionPeriod=1d",
            # The latest data is queryable at once (the default 30s keeps
            # instant queries half a minute behind, fine in production).
            "-search.latencyOffset=1s", "-loggerLevel=WARN"])
        self.wait_ready("victoria-metrics", self.vm, f"{self.vm_url}/health", 30)
        self.vm_rss_idle = rss_bytes(self.vm.pid)

    def start_ruler(self):
        self.sink = AlertSink()
        self.vmalert_port = free_port_on("127.0.0.1", self.ports)
        rules = [os.path.join(self.src, "alerts", "nodewatch-recording.yml"),
                 os.path.join(self.src, "alerts", "nodewatch-rules.yml"),
                 os.path.join(self.src, "packaging", "prometheus", "nodewatch-overrides.example.yml")]
        self.rule_files = rules
        self.vmalert = self.start("vmalert", [
            "vmalert", f"-datasource.url={self.vm_url}", f"-remoteWrite.url={self.vm_url}",
            f"-remoteRead.url={self.vm_url}", f"-notifier.url=http://127.0.0.1:{self.sink.port}",
            *[f"-rule={r}" for r in rules], f"-evaluationInterval={EVALUATION}",
            "-remoteWrite.flushInterval=1s", f"-httpListenAddr=127.0.0.1:{self.vmalert_port}",
            "-loggerLevel=WARN"])
        self.wait_ready("vmalert", self.vmalert, f"http://127.0.0.1:{self.vmalert_port}/api/v1/rules", 30)

    def start_agents(self):
        with open(os.path.join(self.src, "docs", "fleet.md")) as f:
            doc = f.read()
        self.agents = []
        per = -(-self.a.nodes // self.a.agents)
        for k in range(self.a.agents):
            own = os.path.join(self.tmp, f"agent{k}")
            nodes_dir = os.path.join(own, "nodewatch-nodes")
            os.makedirs(nodes_dir)
            rack = f"r{k + 1:02d}"
            mine = self.nodes[k * per:(k + 1) * per]
            with open(os.path.join(nodes_dir, f"{rack}.json"), "w") as f:
                json.dump([{"targets": [f"{a}:{p}" for a, p in mine], "labels": {"rack": rack}}], f, indent=1)
            conf = os.path.join(own, "agent.yml")
            with open(conf, "w") as f:
                f.write(agent_config(doc, os.path.join(nodes_dir, "*.json"), self.vm_url))
            chk = subprocess.run(["promtool", "check", "config", "--agent", conf],
                                 capture_output=True, text=True, timeout=60)
            if chk.returncode != 0:
                fail(f"promtool check config --agent refuses docs/fleet.md's agent configuration:\n"
                     f"{chk.stdout}{chk.stderr}")
            port = free_port_on("127.0.0.1", self.ports)
            name = f"prometheus-agent-{k}"
            p = self.start(name, [
                "prometheus", "--enable-feature=agent", f"--config.file={conf}",
                f"--storage.agent.path={own}/wal", f"--web.listen-address=127.0.0.1:{port}",
                # At the end, what is queued is not worth a minute's wait.
                "--storage.remote.flush-deadline=2s", "--log.level=warn"])
            self.agents.append((name, p, port))
        for name, p, port in self.agents:
            self.wait_ready(name, p, f"http://127.0.0.1:{port}/-/ready", 30)


def rule_counts(paths):
    """record: and alert: entries of the rule files, counted from their text."""
    rec = alert = 0
    for path in paths:
        with open(path) as f:
            text = f.read()
        rec += len(re.findall(r"(?m)^\s*-\s+record:", text))
        alert += len(re.findall(r"(?m)^\s*-\s+alert:", text))
    return rec, alert


def instances_of(result):
    return {s["metric"].get("instance") for s in result if s["metric"].get("instance")}


class Checks:
    """Every check, each under a key; a later pass runs again only the keys
    that failed (data and rule results accumulate), so that a loaded
    machine does not pay for the whole set more than once."""

    def __init__(self, fleet, store, expected):
        self.fleet, self.store, self.expected = fleet, store, expected
        self.n = len(expected)
        self.stats = {}
        self.notes = set()   # expressions empty on the store only because their values are NaN
        self.final = set()   # keys of problems that another pass cannot mend
        self.reads = []      # (what, expression): every query a dashboard or rule makes

    def run(self, only=None):
        """One pass over every key, or over `only`; returns {key: problem}."""
        self.only = only
        self.problems = {k: v for k, v in (only or {}).items() if k in self.final}
        r = self.store.query('count by (__name__, instance) ({__name__=~".+"})')
        if r.get("status") != "success":
            return {"store": f"the store does not answer: {r.get('errorType')}: {r.get('error')}"}
        # Which node has which metric (raw, recorded, ALERTS).
        self.coverage = {}
        self.counts = {}
        for x in r["data"]["result"]:
            name = x["metric"].get("__name__")
            self.coverage.setdefault(name, set()).add(x["metric"].get("instance"))
            self.counts[name] = self.counts.get(name, 0) + int(float(x["value"][1]))
        r = self.fleet.vmalert_get("/api/v1/rules")
        groups = r.get("data", {}).get("groups", [])
        self.rule_list = [(g["name"], rule) for g in groups for rule in g["rules"]]
        self.recording = {x["name"]: x["query"] for _, x in self.rule_list if x["type"] == "recording"}
        self.dashboards()
        self.rules()
        self.alerts()
        return self.problems

    # -- helpers -----------------------------------------------------------
    def wanted(self, key):
        return self.only is None or key in self.only

    def problem(self, key, msg, answer=None):
        """A problem under key; one the store answered as a bad query (a
        parse or evaluation error, not a timeout) is final: not run again."""
        if key in self.final:
            return
        self.problems[key] = msg
        if answer is not None and str(answer.get("errorType")) in ("422", "400", "bad_data", "execution"):
            self.final.add(key)

    def query(self, expr):
        return self.store.query(expr)

    def inputs_present(self, expr, seen=()):
        """Every metric the expression reads is in the store, or is recorded
        by a rule whose own inputs are (it is then only slower to appear)."""
        names = eco.metric_names(expr)
        return bool(names) and all(
            x in self.coverage or (x in self.recording and x not in seen and not eco.filters(self.recording[x])
                                   and self.inputs_present(self.recording[x], seen + (x,)))
            for x in names)

    def per_node(self, name):
        """Nodes a stored metric covers, or None when it has no instance label at all."""
        got = self.coverage.get(name, set())
        return None if got == {None} else got - {None}

    def missing(self, got):
        return f"{len(got)} of {self.n} nodes, missing {sorted(self.expected - got)[:4]}"

    def nan_only(self, expr):
        """True when the expression has series whose values are all NaN, which
        VictoriaMetrics leaves out of a result where Prometheus returns them:
        the same expression with every division an addition (the same label
        matching, no 0/0) returns series."""
        parts = re.split(r'("(?:[^"\\]|\\.)*")', expr)
        added = "".join(x if i % 2 else x.replace("/", "+") for i, x in enumerate(parts))
        if added == expr:
            return False
        r = self.query(added)
        return r.get("status") == "success" and bool(r["data"]["result"])

    # -- the checks --------------------------------------------------------
    def dashboards(self):
        read = set()
        checked = with_data = 0
        src = self.fleet.src
        for fn, variables, panels in eco.dashboards_of(src):
            for v, expr, label in variables:
                key = f"{fn}: variable {v['name']}"
                if not self.wanted(key):
                    continue
                r = self.store.get(f"/api/v1/label/{label}/values", **{"match[]": expr})
                if r.get("status") != "success":
                    self.problem(key, f"{key}: {r.get('errorType')}: {r.get('error')}", r)
                    continue
                values = set(r.get("data") or [])
                if label == "instance" and values != self.expected:
                    self.problem(key, f"{key} finds {self.missing(values)}")
                elif label in ("cluster", "job") and len(values) != 1:
                    self.problem(key, f"{key} finds {sorted(values)} (expected one value)")
            for p in panels:
                key = f"{fn}: panel {p['title']!r}"
                targets = p.get("targets", [])
                for t in targets:
                    read |= eco.metric_names(t["expr"])
                if not self.wanted(key):
                    continue
                expect, got, nan = False, False, []
                for t in targets:
                    raw = t["expr"]
                    expr = eco.substitute(raw)
                    r = self.query(expr)
                    checked += 1
                    if self.only is None:
                        self.reads.append((f"{fn} panel {p['title']!r}", expr))
                    where = f"{key} target {t.get('refId')}"
                    if r.get("status") != "success":
                        self.problem(key, f"{where}: {r.get('errorType')}: {r.get('error')}", r)
                        break
                    result = r["data"]["result"]
                    if not isinstance(result, list) or result:
                        got = True
                    if re.fullmatch(r"count\(up\{[^}]*\} == 1\)", raw.strip()):
                        value = result[0]["value"][1] if result else "none"
                        if value != str(self.n):
                            self.problem(key, f"{where}: {value} nodes up, not {self.n}")
                    if eco.filters(raw) or not self.inputs_present(raw):
                        continue
                    expect = True
                    if not result and self.nan_only(expr):
                        nan.append(where)
                    nodes = instances_of(result) if isinstance(result, list) else set()
                    if nodes and nodes != self.expected and not re.search(r"\b(topk|bottomk|limitk)\s*\(", raw):
                        self.problem(key, f"{where}: {self.missing(nodes)}")
                if expect:
                    with_data += 1
                    if not got and nan:
                        self.notes.update(nan)
                    elif not got:
                        self.problem(key, f"{key} returns no series though the nodes export its metrics")
        # Every metric a dashboard reads, for every node.
        covered = 0
        for name in sorted(read):
            got = self.per_node(name)
            if not got:
                continue          # not exported by the fixture node, or a fleet-level rule
            covered += 1
            key = f"metric {name}"
            if self.wanted(key) and got != self.expected:
                self.problem(key, f"{key} in the store for {self.missing(got)}")
        got = self.per_node("up")
        if self.wanted("up") and got != self.expected:
            self.problem("up", f"up in the store for {self.missing(got or set())}")
        if self.only is None:
            self.stats.update(dashboard_expressions=checked, panels_with_data=with_data, metrics_per_node=covered)

    def rules(self):
        """Every rule vmalert loaded: as vmalert evaluated it, and queried directly."""
        rules = self.rule_list
        n_rec = sum(1 for _, x in rules if x["type"] == "recording")
        n_alert = sum(1 for _, x in rules if x["type"] == "alerting")
        want_rec, want_alert = rule_counts(self.fleet.rule_files)
        if self.wanted("rule files") and (n_rec, n_alert) != (want_rec, want_alert):
            self.problem("rule files", f"vmalert loaded {n_rec} recording and {n_alert} alerting rules; "
                                       f"the files have {want_rec} and {want_alert}")
        recorded = 0
        for group, rule in rules:
            name = rule["name"]
            key = f"rule {name} in {group}"
            required = (rule["type"] == "recording" and not eco.filters(rule["query"])
                        and self.inputs_present(rule["query"]))
            recorded += required
            if self.only is None:
                self.reads.append((f"rule {name}", rule["query"]))
            if not self.wanted(key):
                continue
            if rule.get("lastError") or rule.get("health", "ok") != "ok":
                self.problem(key, f"vmalert: {key}: {rule.get('health')}: {rule.get('lastError')}")
                continue
            res = self.query(rule["query"])
            if res.get("status") != "success":
                self.problem(key, f"{key} does not evaluate on the store: {res.get('errorType')}: {res.get('error')}",
                             res)
                continue
            if not required:
                continue
            got = self.per_node(name)
            if got is None:
                continue          # aggregated over the nodes, and there
            if not got and not res["data"]["result"] and self.nan_only(rule["query"]):
                self.notes.add(f"recording rule {name}")
            elif not got:
                self.problem(key, f"recording {key} records nothing in the store though its inputs exist "
                                  f"(queried directly: {len(res['data']['result'])} series)")
            elif got != self.expected:
                self.problem(key, f"recording {key}: {self.missing(got)}")
        if self.only is None:
            self.stats.update(rules=len(rules), recording_rules_required=recorded)

    def alerts(self):
        """The fixture node's failed burn-in check, alerted for every node."""
        if self.wanted("ALERTS"):
            r = self.query('ALERTS{alertname="NodewatchBurninCheckFailed",alertstate="firing",check="hbm_stress"}')
            got = instances_of(r.get("data", {}).get("result", []))
            if got != self.expected:
                self.problem("ALERTS", f"ALERTS in the store: NodewatchBurninCheckFailed fires for {self.missing(got)}")
        if self.wanted("Alertmanager"):
            got = self.fleet.sink.instances("NodewatchBurninCheckFailed")
            if got != self.expected:
                self.problem("Alertmanager", f"the Alertmanager received NodewatchBurninCheckFailed for "
                                             f"{self.missing(got)}")


def at_scale(checks, store, nodes, limit=300000):
    """What the shipped queries select at `nodes` nodes, projected from the
    test's nodes: the largest metrics per node, and every selector that would
    pass VictoriaMetrics's default -search.maxUniqueTimeseries (a limit per
    selector of a query) with the dashboards and rules that use it."""
    n = checks.n
    per_node = {k: v / n for k, v in checks.counts.items() if k}
    largest = sorted(per_node.items(), key=lambda kv: -kv[1])[:6]
    over = {}
    for what, expr in checks.reads:
        for name in eco.metric_names(expr):
            if per_node.get(name, 0) * nodes <= limit:
                continue
            for m in re.finditer(rf"(?<![\w:]){re.escape(name)}\s*(\{{[^}}]*\}})?", expr):
                sel = m.group(0).replace(" ", "")
                if sel not in over:
                    r = store.query(f"count({sel})")
                    res = r.get("data", {}).get("result", [])
                    over[sel] = [int(float(res[0]["value"][1])) * nodes // n if res else 0, set()]
                over[sel][1].add(what)
    over = {k: v for k, v in over.items() if v[0] > limit}
    return largest, over


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodewatchd", required=True)
    ap.add_argument("--fake-nvml", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--nodes", type=int, default=20)
    ap.add_argument("--agents", type=int, default=2)
    a = ap.parse_args()
    missing = [b for b in ("prometheus", "promtool", "victoria-metrics", "vmalert") if shutil.which(b) is None]
    if missing:
        print(f"SKIP: {', '.join(missing)} not installed (Debian's prometheus and victoria-metrics: "
              "packaging/install-deps.sh --test)")
        return SKIP
    t0 = time.time()

    def terminated(signum, _frame):
        raise SystemExit(f"stopped by signal {signum}")

    signal.signal(signal.SIGTERM, terminated)
    fleet = Fleet(a)
    problems = []
    try:
        fleet.vmalert_get = lambda path: Store(fleet.vmalert_port).get(path)
        fleet.start_store()
        fleet.start_ruler()
        fleet.start_nodes()
        print(f"fleet: store, ruler and {a.nodes} nodes ready in {time.time() - t0:.1f}s", flush=True)
        fleet.start_agents()
        fleet.sink.serve()
        t_started = time.time()
        store = Store(fleet.vm_port)
        expected = {addr for addr, _ in fleet.nodes}

        # Every node scraped and in the store.
        # (VictoriaMetrics makes a new series searchable within about 10s.)
        deadline = time.time() + 60
        t_data = None
        while True:
            r = store.query('count by (instance) (up{job="nodewatch"} == 1)')
            got = instances_of(r.get("data", {}).get("result", []))
            if got and t_data is None:
                t_data = time.time()
            if got == expected:
                break
            if time.time() > deadline:
                fail(f"the store has up == 1 for {len(got)} of {len(expected)} nodes after 60s:\n"
                     + "\n".join(fleet.tail(name, 1500) for name, _, _ in fleet.agents))
            time.sleep(0.5)
        t_first = time.time()
        print(f"fleet: {len(expected)} nodes in the store {t_first - t_started:.1f}s after the agents started")

        # While data accumulates: what the store ingests and what the agents
        # send (docs/fleet.md sizes from these), before any query load.
        def sample():
            vm = scrape_metrics(f"{fleet.vm_url}/metrics")
            sent = [scrape_metrics(f"http://127.0.0.1:{port}/metrics") for _, _, port in fleet.agents]
            return time.time(), vm, sent, cpu_seconds(fleet.vm.pid)

        time.sleep(2)
        t1, vm1, sent1, cpu1 = sample()
        time.sleep(max(4.0, MIN_DATA_SECONDS - (time.time() - t_data)))
        t2, vm2, sent2, cpu2 = sample()
        vm_cores = (cpu2 - cpu1) / (t2 - t1)
        rows = (metric_sum(vm2, "vm_rows_inserted_total", type="promremotewrite")
                - metric_sum(vm1, "vm_rows_inserted_total", type="promremotewrite")) / (t2 - t1)
        agent_samples = sum(metric_sum(y, "prometheus_remote_storage_samples_total")
                            - metric_sum(x, "prometheus_remote_storage_samples_total") for x, y in zip(sent1, sent2))
        agent_bytes = sum(metric_sum(y, "prometheus_remote_storage_bytes_total")
                          - metric_sum(x, "prometheus_remote_storage_bytes_total") for x, y in zip(sent1, sent2))
        active = metric_sum(vm2, "vm_cache_entries", type="storage/hour_metric_ids")
        vm_rss_ingest = rss_bytes(fleet.vm.pid)

        # Checks, repeated until they hold (data and rule results accumulate)
        # or the deadline passes; the last pass's problems are the verdict.
        deadline = t_first + CHECK_DEADLINE
        checks = Checks(fleet, store, expected)
        failed = None
        passes = 0
        while True:
            passes += 1
            tp = time.time()
            failed = checks.run(failed)
            again = [k for k in failed if k not in checks.final]
            print(f"fleet: check pass {passes}: {len(failed)} problem(s) in {time.time() - tp:.1f}s"
                  + (f", the first: {failed[again[0]][:240]}" if again else ""), flush=True)
            if not again or time.time() > deadline:
                break
            time.sleep(2)
        problems = list(failed.values())
        stats = checks.stats
        print(f"fleet: checks {'held' if not problems else 'failed'} after {passes} pass(es), "
              f"{time.time() - t_first:.0f}s of data: {stats.get('dashboard_expressions')} dashboard expressions, "
              f"{stats.get('panels_with_data')} panels required to return series, {stats.get('metrics_per_node')} "
              f"metrics required for every node, {stats.get('rules')} rules, "
              f"{stats.get('recording_rules_required')} recording rules required to record series")
        for where in sorted(checks.notes):
            print(f"fleet: note: {where}: no series on the store, as every value is NaN (0/0), "
                  "which VictoriaMetrics leaves out where Prometheus returns NaN")
        if stats.get("panels_with_data", 0) < 70:
            problems.append(f"only {stats.get('panels_with_data')} panels were required to return series: "
                            "the fixture node lost a collector?")

        # The soak verdict over the store: every node FAILs on its burn-in check.
        t_rep = time.time()
        report_json = os.path.join(fleet.tmp, "report.json")
        rep = subprocess.run(
            [sys.executable, os.path.join(fleet.src, "packaging", "nodewatch-soak-report"),
             "--prometheus", fleet.vm_url, "--start", str(int(t_data) - 5), "--end", str(int(time.time())),
             "--selector", 'job="nodewatch"', "--json", report_json, "--timeout", "60"],
            capture_output=True, text=True, timeout=300)
        if rep.returncode != 1 or not os.path.exists(report_json):
            problems.append(f"soak report over the store: exit status {rep.returncode} (expected 1, failing nodes): "
                            f"{rep.stderr[-2000:]}")
        else:
            with open(report_json) as f:
                nodes = json.load(f)["nodes"]
            verdicts = {x["instance"]: x["verdict"] for x in nodes}
            burnin = {x["instance"] for x in nodes if "burnin_failed" in x.get("failures", {})}
            if set(verdicts) != expected or set(verdicts.values()) != {"FAIL"} or burnin != expected:
                problems.append(f"soak report over the store: verdicts {sorted(verdicts.items())[:4]}..., "
                                f"burn-in failure named for {len(burnin)} of {len(expected)} nodes")
            print(f"fleet: soak report over the store: {len(verdicts)} nodes, "
                  f"{sum(v == 'FAIL' for v in verdicts.values())} FAIL, in {time.time() - t_rep:.1f}s")

        # The numbers docs/fleet.md sizes from.
        addr, port = fleet.nodes[0]
        exposition = scrape_metrics(f"http://{addr}:{port}/metrics")
        r = store.query('count by (instance) ({job="nodewatch", __name__!~".*:.*|ALERTS.*"})')
        stored = [int(float(x["value"][1])) for x in r.get("data", {}).get("result", [])] or [0]
        r = store.query('count by (instance) ({__name__=~".+:.+"})')
        rec = r.get("data", {}).get("result", [])
        per_node_rec = [int(float(x["value"][1])) for x in rec if x["metric"].get("instance")] or [0]
        r = store.query('count({__name__=~".+:.+"})')
        rec = r.get("data", {}).get("result", [])
        recorded_series = int(float(rec[0]["value"][1])) if rec else 0
        vm_rss = rss_bytes(fleet.vm.pid)
        scrape_s = float(SCRAPE.rstrip("s"))
        print(f"fleet: series per node: {len(exposition)} sample lines on /metrics; {min(stored)}..{max(stored)} "
              f"stored per node (those and up, scrape_*); {min(per_node_rec)}..{max(per_node_rec)} recorded per node, "
              f"{recorded_series} recorded in all")
        print(f"fleet: ingested {rows:.0f} samples/s at a {SCRAPE} scrape interval (the agents' share: "
              f"{sum(stored) / scrape_s:.0f}, the rest vmalert's at {EVALUATION}); agents sent "
              f"{agent_bytes / max(agent_samples, 1):.1f} bytes per sample (compressed); "
              f"{active:.0f} active series in the store, its CPU {vm_cores:.2f} cores (with vmalert's queries)")
        print(f"fleet: VictoriaMetrics RSS {fleet.vm_rss_idle / 2**20:.0f} MiB idle, "
              f"{vm_rss_ingest / 2**20:.0f} MiB ingesting "
              f"({(vm_rss_ingest - fleet.vm_rss_idle) / max(active, 1):.0f} bytes per active series above idle), "
              f"{vm_rss / 2**20:.0f} MiB after the checks' queries; data directory "
              f"{dir_bytes(os.path.join(fleet.tmp, 'vm-data')) / 2**20:.1f} MiB")
        largest, over = at_scale(checks, store, 2000)
        print("fleet: the largest metrics per node: " + ", ".join(f"{k} {v:.0f}" for k, v in largest))
        for sel, (count, users) in sorted(over.items(), key=lambda kv: -kv[1][0]):
            print(f"fleet: at 2,000 nodes {sel} selects {count} series (over 300000, VictoriaMetrics's default "
                  f"-search.maxUniqueTimeseries), in: {'; '.join(sorted(users))}")
        print("fleet: agents RSS " + ", ".join(f"{rss_bytes(p.pid) / 2**20:.0f} MiB" for _, p, _ in fleet.agents)
              + f" ({a.nodes // a.agents} nodes each); vmalert RSS {rss_bytes(fleet.vmalert.pid) / 2**20:.0f} MiB; "
              + f"{time.time() - t0:.0f}s in all")
    except RuntimeError as e:
        problems.append(str(e))
    except Exception as e:  # noqa: BLE001  (reported, and everything is still stopped)
        problems.append(f"{type(e).__name__}: {e}")
    finally:
        fleet.stop()
        if problems:
            for name in ("victoria-metrics", "vmalert", "prometheus-agent-0", "nodewatchd-00"):
                text = fleet.tail(name, 2000)
                if text:
                    print(f"--- {name}.log (tail)\n{text}")
        shutil.rmtree(fleet.tmp, ignore_errors=True)
    for p in problems:
        print("FAIL:", p)
    print(f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
