#!/usr/bin/env python3
"""nodewatch-soak-report against a scripted Prometheus HTTP API: the verdicts
it can give (PASS, FAIL with when, INCONCLUSIVE below the scrape coverage),
its exit status, the selector it sends, and its refusals (no target, an
unreachable server, a bad range). The end-to-end run against a real
Prometheus is in ecosystem_test.py."""

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
        # Every class was asked with the selector and the soak's duration.
        class_queries = [p["query"] for path, p in prom.queries if path == "/api/v1/query"][1:]
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

    def test_soak_dashboard_has_every_class(self):
        # The soak dashboard is generated from SOAK_CLASSES: each class is a
        # column of the verdict table and a stat of its own.
        import importlib.machinery
        import importlib.util
        loader = importlib.machinery.SourceFileLoader("nodewatch_soak_report", REPORT)
        spec = importlib.util.spec_from_loader("nodewatch_soak_report", loader)
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
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
