#!/usr/bin/env python3
"""nodewatch-soak-report against a scripted Prometheus HTTP API: the verdicts
it can give (PASS, FAIL with when, INCONCLUSIVE below the scrape coverage),
its exit status, the selector it sends, nodewatch's node verdict (subsystems
not healthy and for how long, the problems seen, a failure only where their
action is not "none"), and its refusals (no target, an unreachable server, a
bad range). The end-to-end run against a real Prometheus is in
ecosystem_test.py."""

import http.server
import json
import os
import subprocess
import sys
import tempfile
import threading
import unittest
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REPORT = os.path.join(ROOT, "packaging", "nodewatch-soak-report")


class FakePrometheus:
    """Answers /api/v1/query and /api/v1/query_range from `answer(path, params)`."""

    def __init__(self, answer):
        self.queries = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                url = urllib.parse.urlparse(self.path)
                params = {k: v[0] for k, v in urllib.parse.parse_qs(url.query).items()}
                outer.queries.append((url.path, params))
                body = json.dumps(answer(url.path, params)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def vector(*samples):
    return {"status": "success", "data": {"resultType": "vector",
                                          "result": [{"metric": m, "value": [1000, str(v)]} for m, v in samples]}}


def matrix(*series):
    return {"status": "success", "data": {"resultType": "matrix",
                                          "result": [{"metric": m, "values": vals} for m, vals in series]}}


def load_report_module():
    import importlib.machinery
    import importlib.util
    loader = importlib.machinery.SourceFileLoader("nodewatch_soak_report", REPORT)
    spec = importlib.util.spec_from_loader("nodewatch_soak_report", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def verdict_detail(query):
    """One of the node verdict's detail queries (asked for every soak, besides
    one query per failure class)."""
    module = load_report_module()
    heads = [t.split("{S")[0] for t in module.VERDICT_QUERIES]
    return any(query.startswith(h) for h in heads)


def run(url, *extra):
    with tempfile.TemporaryDirectory() as d:
        js = os.path.join(d, "r.json")
        r = subprocess.run([sys.executable, REPORT, "--prometheus", url, "--start", "1000", "--end", "4600",
                            "--json", js, *extra], capture_output=True, text=True, timeout=60)
        report = None
        if os.path.exists(js):
            with open(js, encoding="utf-8") as f:
                report = json.load(f)
        return r.returncode, r.stdout, r.stderr, report


class SoakReportTest(unittest.TestCase):
    def test_verdicts_and_when(self):
        def answer(path, params):
            q = params.get("query", "")
            if q.startswith("avg by (instance) (avg_over_time(up"):
                return vector(({"instance": "n1"}, 1), ({"instance": "n2"}, 1), ({"instance": "n3"}, 0.9))
            if path == "/api/v1/query" and "nodewatch_interconnect_port_link_downed_total" in q:
                return vector(({"instance": "n1"}, 3))
            if path == "/api/v1/query_range" and "nodewatch_interconnect_port_link_downed_total" in q:
                return matrix(({"instance": "n1"}, [[1500, "0"], [2000, "1"], [2500, "0"], [3000, "2"]]))
            return vector() if path == "/api/v1/query" else matrix()

        prom = FakePrometheus(answer)
        try:
            rc, md, err, rep = run(prom.url, "--selector", 'job="nodewatch",cluster="a"')
        finally:
            prom.close()
        self.assertEqual(rc, 1, err)
        verdicts = {n["instance"]: n["verdict"] for n in rep["nodes"]}
        self.assertEqual(verdicts, {"n1": "FAIL", "n2": "PASS", "n3": "INCONCLUSIVE"})
        n1 = rep["nodes"][0]
        self.assertEqual(n1["instance"], "n1")  # failures first
        downed = n1["failures"]["fabric_link_downed"]
        self.assertEqual(downed["count"], 3)
        step = 60  # a one-hour soak: one-minute steps
        self.assertEqual(downed["first_seen"], "1970-01-01T00:32:20Z")  # 2000 - step
        self.assertEqual(downed["last_seen"], "1970-01-01T00:50:00Z")   # 3000
        self.assertEqual(rep["totals"], {"PASS": 1, "FAIL": 1, "INCONCLUSIVE": 1})
        self.assertEqual(rep["nodes_failing_by_class"]["fabric_link_downed"], 1)
        self.assertIn("| n1 | FAIL | 100.0% | Fabric link downed (3) |", md)
        self.assertIn("| n3 | INCONCLUSIVE | 90.0% | none |", md)
        # Every class was asked with the selector and the soak's duration
        # (and the node verdict's details, tested below).
        class_queries = [p["query"] for path, p in prom.queries
                         if path == "/api/v1/query" and not verdict_detail(p["query"])][1:]
        self.assertEqual(len(class_queries), len(rep["classes"]))
        for q in class_queries:
            self.assertIn('job="nodewatch",cluster="a"', q)
            self.assertIn("[3600s]", q)
        ranged = [p for path, p in prom.queries if path == "/api/v1/query_range"]
        self.assertEqual(len(ranged), 1)  # only the failing class is looked up in time
        self.assertEqual(ranged[0]["step"], str(step))

    def test_recovery_action_and_nvlink_fabric_classes(self):
        # n1: the driver asked for a GPU reset on one GPU and a node reboot on
        # another; n2: a GPU's NVLink fabric turned unhealthy after
        # registration; n3: clean.
        def answer(path, params):
            q = params.get("query", "")
            if q.startswith("avg by (instance) (avg_over_time(up"):
                return vector(({"instance": "n1"}, 1), ({"instance": "n2"}, 1), ({"instance": "n3"}, 1))
            if "accelerator_action:nodewatch_accelerator_recovery_action:required" in q:
                if path == "/api/v1/query":
                    return vector(({"instance": "n1"}, 2))
                return matrix(({"instance": "n1"}, [[1500, "0"], [1800, "1"], [2400, "2"], [3000, "0"]]))
            if "accelerator:nodewatch_accelerator_fabric_healthy:completed" in q:
                if path == "/api/v1/query":
                    return vector(({"instance": "n2"}, 1))
                return matrix(({"instance": "n2"}, [[2100, "1"]]))
            return vector() if path == "/api/v1/query" else matrix()

        prom = FakePrometheus(answer)
        try:
            rc, md, err, rep = run(prom.url)
        finally:
            prom.close()
        self.assertEqual(rc, 1, err)
        verdicts = {n["instance"]: n["verdict"] for n in rep["nodes"]}
        self.assertEqual(verdicts, {"n1": "FAIL", "n2": "FAIL", "n3": "PASS"})
        failures = {n["instance"]: n["failures"] for n in rep["nodes"]}
        self.assertEqual(set(failures["n1"]), {"recovery_action"})
        self.assertEqual(failures["n1"]["recovery_action"]["count"], 2)
        self.assertEqual(failures["n1"]["recovery_action"]["first_seen"], "1970-01-01T00:29:00Z")  # 1800 - step
        self.assertEqual(failures["n1"]["recovery_action"]["last_seen"], "1970-01-01T00:40:00Z")   # 2400
        self.assertEqual(set(failures["n2"]), {"nvlink_fabric_unhealthy"})
        self.assertIn("| n1 | FAIL | 100.0% | Driver recovery action required (2) |", md)
        self.assertIn("| n2 | FAIL | 100.0% | NVLink fabric unhealthy (1) |", md)
        self.assertIn("| Driver recovery action required | 1 |", md)
        # The classes read the recording rules (the one list of the actions
        # that count, and health only after registration), with the selector.
        queries = [p["query"] for path, p in prom.queries if path == "/api/v1/query"]
        self.assertIn('count by (instance) (max_over_time(accelerator_action:nodewatch_accelerator_recovery_action:required'
                      '{job="nodewatch"}[3600s]) == 1)', queries)
        self.assertIn('count by (instance) (min_over_time(accelerator:nodewatch_accelerator_fabric_healthy:completed'
                      '{job="nodewatch"}[3600s]) == 0)', queries)

    def test_mesh_pairs_are_named(self):
        # n1 -> n3 was slow and lossy, n3 -> n1 slow; n2 clean.
        alerts = 'alertname=~"NodewatchMeshLatencyInconsistent|NodewatchMeshPacketLoss"'

        def answer(path, params):
            q = params.get("query", "")
            if q.startswith("avg by (instance) (avg_over_time(up"):
                return vector(({"instance": "n1"}, 1), ({"instance": "n2"}, 1), ({"instance": "n3"}, 1))
            if alerts in q and q.startswith("count by (instance)"):
                if path == "/api/v1/query":
                    return vector(({"instance": "n1"}, 2), ({"instance": "n3"}, 1))
                return matrix(({"instance": "n1"}, [[2000, "1"]]), ({"instance": "n3"}, [[2100, "1"]]))
            if alerts in q and q.startswith("max by (instance, peer, rail, alertname)"):
                return vector(
                    ({"instance": "n1", "peer": "n3:9843", "rail": "0", "alertname": "NodewatchMeshPacketLoss"}, 1),
                    ({"instance": "n1", "peer": "n3:9843", "rail": "0", "alertname": "NodewatchMeshLatencyInconsistent"}, 1),
                    ({"instance": "n3", "peer": "n1:9843", "rail": "0", "alertname": "NodewatchMeshLatencyInconsistent"}, 1),
                    ({"instance": "n2", "peer": "n1:9843", "rail": "0", "alertname": "NodewatchMeshPacketLoss"}, 1))
            return vector() if path == "/api/v1/query" else matrix()

        prom = FakePrometheus(answer)
        try:
            rc, md, err, rep = run(prom.url)
        finally:
            prom.close()
        self.assertEqual(rc, 1, err)
        verdicts = {n["instance"]: n["verdict"] for n in rep["nodes"]}
        self.assertEqual(verdicts, {"n1": "FAIL", "n2": "PASS", "n3": "FAIL"})
        failures = {n["instance"]: n["failures"] for n in rep["nodes"]}
        self.assertEqual(failures["n1"]["mesh_pairs"]["pairs"],
                         [{"peer": "n3:9843", "rail": "0", "alert": "lossy"},
                          {"peer": "n3:9843", "rail": "0", "alert": "slow"}])
        self.assertEqual(failures["n3"]["mesh_pairs"]["pairs"], [{"peer": "n1:9843", "rail": "0", "alert": "slow"}])
        self.assertNotIn("n2", [n["instance"] for n in rep["nodes"] if n["failures"]])
        self.assertIn("  - to n3:9843 on rail 0: slow", md)
        self.assertIn("  - to n1:9843 on rail 0: slow", md)

    def test_node_verdict(self):
        # n1: its fabric port mlx5_0/1 went down for half the soak (action
        # check_cable), and one collector could not be read for a while
        # (action none); n2: a storage probe path of its [expect] was never
        # probed (action none: not checked, not a failure); n3: clean.
        sel = 'job="nodewatch"'

        def answer(path, params):
            q = params.get("query", "")
            instant = path == "/api/v1/query"
            if q.startswith("avg by (instance) (avg_over_time(up"):
                return vector(({"instance": "n1"}, 1), ({"instance": "n2"}, 1), ({"instance": "n3"}, 1))
            if q == f'count by (instance) (max_over_time(nodewatch_node_problem_info{{{sel}, action!="none"}}[3600s]))':
                return vector(({"instance": "n1"}, 1))
            if q.startswith("count by (instance) (max_over_time(nodewatch_node_problem_info") and not instant:
                return matrix(({"instance": "n1"}, [[2000, "1"], [2060, "1"], [3800, "1"]]))
            if q == f"max by (instance, subsystem) (1 - avg_over_time(nodewatch_node_healthy{{{sel}}}[3600s])) > 0":
                return vector(({"instance": "n1", "subsystem": "fabric"}, 0.5),
                              ({"instance": "n1", "subsystem": "exporter"}, 0.05),
                              ({"instance": "n2", "subsystem": "storage"}, 1))
            if q == f"min by (instance, subsystem) (min_over_time(nodewatch_node_healthy{{{sel}}}[60s])) == 0":
                return matrix(({"instance": "n1", "subsystem": "fabric"}, [[2000, "0"], [2060, "0"], [3800, "0"]]),
                              ({"instance": "n1", "subsystem": "exporter"}, [[1300, "0"], [1360, "0"]]),
                              ({"instance": "n2", "subsystem": "storage"}, [[1060, "0"], [4600, "0"]]))
            problems = ("max by (instance, subsystem, component, problem, action) "
                        f"(max_over_time(nodewatch_node_problem_info{{{sel}}}")
            port = {"instance": "n1", "subsystem": "fabric", "component": "mlx5_0/1", "problem": "port_down",
                    "action": "check_cable"}
            down = {"instance": "n1", "subsystem": "exporter", "component": "accelerator",
                    "problem": "collector_down", "action": "none"}
            probe = {"instance": "n2", "subsystem": "storage", "component": "/checkpoints",
                     "problem": "probe_not_configured", "action": "none"}
            if q == problems + "[3600s]))":
                return vector((port, 1), (down, 1), (probe, 1))
            if q == problems + "[60s]))" and not instant:
                return matrix((port, [[2000, "1"], [3800, "1"]]), (down, [[1300, "1"], [1360, "1"]]),
                              (probe, [[1060, "1"], [4600, "1"]]))
            return vector() if instant else matrix()

        prom = FakePrometheus(answer)
        try:
            rc, md, err, rep = run(prom.url)
        finally:
            prom.close()
        self.assertEqual(rc, 1, err)
        nodes = {n["instance"]: n for n in rep["nodes"]}
        self.assertEqual({i: n["verdict"] for i, n in nodes.items()}, {"n1": "FAIL", "n2": "PASS", "n3": "PASS"})
        # Only the problem with an action fails the node, as a class of its own.
        self.assertEqual(set(nodes["n1"]["failures"]), {"node_problems"})
        f = nodes["n1"]["failures"]["node_problems"]
        self.assertEqual(f["count"], 1)
        self.assertEqual(f["first_seen"], "1970-01-01T00:32:20Z")  # 2000 - step
        self.assertEqual(f["last_seen"], "1970-01-01T01:03:20Z")   # 3800
        self.assertEqual(rep["nodes_failing_by_class"]["node_problems"], 1)
        # How long each subsystem was not healthy: the share of the samples
        # times the range, and when.
        self.assertEqual(nodes["n1"]["unhealthy"], {
            "exporter": {"share": 0.05, "seconds": 180,
                         "first_seen": "1970-01-01T00:20:40Z", "last_seen": "1970-01-01T00:22:40Z"},
            "fabric": {"share": 0.5, "seconds": 1800,
                       "first_seen": "1970-01-01T00:32:20Z", "last_seen": "1970-01-01T01:03:20Z"}})
        self.assertEqual(nodes["n2"]["unhealthy"]["storage"]["seconds"], 3600)
        self.assertEqual(nodes["n3"]["unhealthy"], {})
        # Every problem seen, with its action, the ones not checked too.
        self.assertEqual(nodes["n1"]["problems"], [
            {"subsystem": "exporter", "component": "accelerator", "problem": "collector_down", "action": "none",
             "first_seen": "1970-01-01T00:20:40Z", "last_seen": "1970-01-01T00:22:40Z"},
            {"subsystem": "fabric", "component": "mlx5_0/1", "problem": "port_down", "action": "check_cable",
             "first_seen": "1970-01-01T00:32:20Z", "last_seen": "1970-01-01T01:03:20Z"}])
        self.assertEqual([p["problem"] for p in nodes["n2"]["problems"]], ["probe_not_configured"])
        self.assertEqual(nodes["n3"]["problems"], [])
        self.assertIn("| n1 | FAIL | 100.0% | Node verdict problems (1) |", md)
        self.assertIn("| n2 | PASS | 100.0% | none |", md)
        self.assertIn("## Node verdict", md)
        self.assertIn("| fabric | 30m (50.0%) | 1970-01-01T00:32:20Z | 1970-01-01T01:03:20Z |", md)
        self.assertIn("| exporter | 3m (5.0%) |", md)
        self.assertIn("| fabric | mlx5_0/1 | port_down | check_cable | 1970-01-01T00:32:20Z | 1970-01-01T01:03:20Z |", md)
        self.assertIn("| storage | /checkpoints | probe_not_configured | none |", md)
        self.assertNotIn("### n3", md)
        # The details are asked with the selector and the soak's range; the
        # timelines only where something was found, one step each.
        queries = [p for path, p in prom.queries]
        ranged = [p for path, p in prom.queries if path == "/api/v1/query_range"]
        self.assertEqual(len(ranged), 3)  # the failing class, the subsystems, the problems
        for p in ranged:
            self.assertEqual((p["start"], p["end"], p["step"]), ("1060.0", "4600.0", "60"))
        self.assertTrue(all(sel in p["query"] for p in queries))

    def test_node_verdict_not_checked_only_passes(self):
        # Problems that could not be checked (action none) are reported but
        # fail nothing: the node passes, the exit status is 0.
        def answer(path, params):
            q = params.get("query", "")
            if q.startswith("avg by (instance) (avg_over_time(up"):
                return vector(({"instance": "n1"}, 1))
            if "nodewatch_node_healthy" in q:
                if path == "/api/v1/query":
                    return vector(({"instance": "n1", "subsystem": "kernel"}, 0.25))
                return matrix(({"instance": "n1", "subsystem": "kernel"}, [[1060, "0"]]))
            if q.startswith("max by (instance, subsystem, component, problem, action)"):
                m = {"instance": "n1", "subsystem": "kernel", "problem": "log_unreadable", "action": "none"}
                if path == "/api/v1/query":
                    return vector((m, 1))
                return matrix((m, [[1060, "1"]]))
            return vector() if path == "/api/v1/query" else matrix()

        prom = FakePrometheus(answer)
        try:
            rc, md, err, rep = run(prom.url)
        finally:
            prom.close()
        self.assertEqual(rc, 0, err)
        n1 = rep["nodes"][0]
        self.assertEqual(n1["verdict"], "PASS")
        self.assertEqual(n1["failures"], {})
        self.assertEqual(n1["unhealthy"]["kernel"]["seconds"], 900)
        self.assertEqual(n1["problems"], [{"subsystem": "kernel", "component": "", "problem": "log_unreadable",
                                           "action": "none", "first_seen": "1970-01-01T00:16:40Z",
                                           "last_seen": "1970-01-01T00:17:40Z"}])
        self.assertIn("| kernel |  | log_unreadable | none |", md)
        self.assertNotIn("## When", md)

    def test_soak_dashboard_has_every_class(self):
        # The soak dashboard is generated from SOAK_CLASSES: each class is a
        # column of the verdict table and a stat of its own.
        module = load_report_module()
        with open(os.path.join(ROOT, "dashboards", "nodewatch-soak.json"), encoding="utf-8") as f:
            panels = json.load(f)["panels"]
        stats = {p["title"] for p in panels if p["type"] == "stat"}
        table = next(p for p in panels if p["type"] == "table")
        columns = set(next(t for t in table["transformations"] if t["id"] == "organize")["options"]["renameByName"].values())
        for key, title, _ in module.SOAK_CLASSES:
            self.assertIn(title, stats, key)
            self.assertIn(title, columns, key)

    def test_all_pass_exits_zero(self):
        prom = FakePrometheus(lambda path, params: vector(({"instance": "n1"}, 1))
                              if params.get("query", "").startswith("avg by (instance)") else vector())
        try:
            rc, md, err, rep = run(prom.url)
        finally:
            prom.close()
        self.assertEqual(rc, 0, err)
        self.assertEqual(rep["nodes"][0]["verdict"], "PASS")
        self.assertNotIn("## When", md)

    def test_refusals(self):
        prom = FakePrometheus(lambda path, params: vector())
        try:
            rc, _, err, _ = run(prom.url)
            self.assertEqual(rc, 2)
            self.assertIn("no target matches", err)
        finally:
            prom.close()
        prom = FakePrometheus(lambda path, params: {"status": "error", "errorType": "bad_data",
                                                    "error": "parse error"})
        try:
            rc, _, err, _ = run(prom.url)
            self.assertEqual(rc, 2)
            self.assertIn("bad_data: parse error", err)
        finally:
            prom.close()
        rc, _, err, _ = run("http://127.0.0.1:1")
        self.assertEqual(rc, 2)
        self.assertIn("cannot query", err)
        r = subprocess.run([sys.executable, REPORT, "--start", "2000", "--end", "1000"],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("--start must be before --end", r.stderr)


if __name__ == "__main__":
    unittest.main()
