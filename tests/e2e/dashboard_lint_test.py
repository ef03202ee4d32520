#!/usr/bin/env python3
"""dashboards/lint.py must catch each convention it claims to check: every
case breaks one rule in a copy of a committed dashboard and expects the
linter to name it (and a committed dashboard, unchanged, to pass)."""

import copy
import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LINT = os.path.join(ROOT, "dashboards", "lint.py")
NODE = os.path.join(ROOT, "dashboards", "nodewatch-node.json")


def first(d, kind):
    return next(p for p in d["panels"] if p["type"] == kind)


class LintTest(unittest.TestCase):
    def setUp(self):
        with open(NODE, encoding="utf-8") as f:
            self.dashboard = json.load(f)
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.dir.cleanup()

    def lint(self, d, *extra):
        path = os.path.join(self.dir.name, "nodewatch-node.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(d, f)
        r = subprocess.run([sys.executable, LINT, *extra, path], capture_output=True, text=True)
        return r.returncode, r.stdout

    def expect(self, d, message, *extra):
        rc, out = self.lint(d, *extra)
        self.assertEqual(rc, 1, out)
        self.assertIn(message, out)

    def test_committed_dashboard_passes(self):
        rc, out = self.lint(self.dashboard)
        self.assertEqual(rc, 0, out)

    def test_old_schema(self):
        self.dashboard["schemaVersion"] = 27
        self.expect(self.dashboard, "schemaVersion 27 < 39")

    def test_uid_must_be_the_file_name(self):
        self.dashboard["uid"] = "abc123"
        self.expect(self.dashboard, "uid 'abc123' is not the file name")

    def test_editable(self):
        self.dashboard["editable"] = True
        self.expect(self.dashboard, "dashboard is editable")

    def test_missing_variable(self):
        self.dashboard["templating"]["list"] = [
            v for v in self.dashboard["templating"]["list"] if v["name"] != "job"
        ]
        self.expect(self.dashboard, "no job variable")

    def test_variable_not_refreshed_on_time_change(self):
        self.dashboard["templating"]["list"][3]["refresh"] = 1
        self.expect(self.dashboard, "variable instance is not refreshed on time-range change")

    def test_deprecated_panel_type(self):
        first(self.dashboard, "timeseries")["type"] = "graph"
        self.expect(self.dashboard, "panel type 'graph' is deprecated or unknown")

    def test_panel_without_description_or_unit(self):
        p = first(self.dashboard, "timeseries")
        del p["description"]
        del p["fieldConfig"]["defaults"]["unit"]
        rc, out = self.lint(self.dashboard)
        self.assertEqual(rc, 1)
        self.assertIn("no description", out)
        self.assertIn("no unit", out)

    def test_panel_with_fixed_datasource(self):
        first(self.dashboard, "timeseries")["datasource"] = {"type": "prometheus", "uid": "prom1"}
        self.expect(self.dashboard, "panel does not use $datasource")

    def test_selector_without_instance(self):
        p = first(self.dashboard, "timeseries")
        p["targets"][0]["expr"] = 'nodewatch_accelerator_utilization_ratio{cluster=~"$cluster", job=~"$job"}'
        self.expect(self.dashboard, 'lacks instance=~"$instance"')

    def test_bare_metric(self):
        p = first(self.dashboard, "timeseries")
        p["targets"][0]["expr"] = "nodewatch_accelerator_utilization_ratio"
        self.expect(self.dashboard, "metric nodewatch_accelerator_utilization_ratio without the")

    def test_fixed_rate_window(self):
        p = first(self.dashboard, "timeseries")
        p["targets"][0]["expr"] = (
            'rate(nodewatch_accelerator_energy_joules_total{cluster=~"$cluster", job=~"$job", '
            'instance=~"$instance"}[5m])')
        self.expect(self.dashboard, "rate() window is [5m], expected [$__rate_interval]")

    def test_increase_over_range_is_allowed_but_rate_is_not(self):
        sel = '{cluster=~"$cluster", job=~"$job", instance=~"$instance"}'
        p = first(self.dashboard, "timeseries")
        p["targets"][0]["expr"] = f"increase(nodewatch_accelerator_energy_joules_total{sel}[$__range])"
        rc, out = self.lint(self.dashboard)
        self.assertEqual(rc, 0, out)
        p["targets"][0]["expr"] = f"rate(nodewatch_accelerator_energy_joules_total{sel}[$__range])"
        self.expect(self.dashboard, "rate() window is [$__range]")

    def test_counter_outside_rate(self):
        p = first(self.dashboard, "timeseries")
        p["targets"][0]["expr"] = (
            'nodewatch_accelerator_energy_joules_total{cluster=~"$cluster", job=~"$job", instance=~"$instance"}')
        self.expect(self.dashboard, "counter nodewatch_accelerator_energy_joules_total used outside")

    def test_a_counter_that_appeared_within_the_range_counts_whole_only_in_the_idiom(self):
        sel = '{cluster=~"$cluster", job=~"$job", instance=~"$instance"}'
        other = '{cluster=~"$cluster", job=~"$job", instance=~"$instance", event="oom_kill"}'
        c = "nodewatch_kernel_events_total"
        p = first(self.dashboard, "timeseries")
        p["targets"][0]["expr"] = f"sum((increase({c}{sel}[$__range]) and last_over_time({c}{sel}[$__range] offset $__range)) or {c}{sel})"
        rc, out = self.lint(self.dashboard)
        self.assertEqual(rc, 0, out)
        # Another selector in the last place is a bare counter, not the idiom.
        p["targets"][0]["expr"] = f"sum((increase({c}{sel}[$__range]) and last_over_time({c}{sel}[$__range] offset $__range)) or {c}{other})"
        self.expect(self.dashboard, f"counter {c} used outside")
        # Nor the former idiom (a stale marker at the range's start makes
        # every series look new), the counter alone after `or`, or compared
        # with its past.
        p["targets"][0]["expr"] = f"sum((increase({c}{sel}[$__range]) and {c}{sel} offset $__range) or {c}{sel})"
        self.expect(self.dashboard, f"counter {c} used outside")
        p["targets"][0]["expr"] = f"sum(increase({c}{sel}[$__range]) or {c}{sel})"
        self.expect(self.dashboard, f"counter {c} used outside")
        p["targets"][0]["expr"] = f"{c}{sel} - {c}{sel} offset $__range"
        self.expect(self.dashboard, f"counter {c} used outside")

    def test_unknown_metric_and_recording_rule(self):
        sel = '{cluster=~"$cluster", job=~"$job", instance=~"$instance"}'
        p = first(self.dashboard, "timeseries")
        p["targets"][0]["expr"] = f"nodewatch_accelerator_utilisation_ratio{sel} + instance:nodewatch_nope:sum{sel}"
        metrics = os.path.join(self.dir.name, "metrics.txt")
        with open(metrics, "w", encoding="utf-8") as f:
            f.write("nodewatch_accelerator_utilization_ratio gauge\n")
        rules = os.path.join(self.dir.name, "rules.yml")
        with open(rules, "w", encoding="utf-8") as f:
            f.write("groups:\n  - name: x\n    rules:\n      - record: instance:nodewatch_yes:sum\n        expr: up\n")
        rc, out = self.lint(self.dashboard, "--metrics", metrics, "--rules", rules)
        self.assertEqual(rc, 1)
        self.assertIn("nodewatch does not declare a metric nodewatch_accelerator_utilisation_ratio", out)
        self.assertIn("recording rule instance:nodewatch_nope:sum is not defined", out)

    def test_promql_that_does_not_parse(self):
        # Two broken queries among the dashboard's: each is named, and
        # nothing else (the lint halves the batch down to them).
        targets = [(p, t) for p in self.dashboard["panels"] for t in p.get("targets", [])]
        broken = [targets[0], targets[-1]]
        for _, t in broken:
            t["expr"] = ('sum by (instance (nodewatch_accelerator_utilization_ratio{cluster=~"$cluster", '
                         'job=~"$job", instance=~"$instance"})')
        rc, out = self.lint(self.dashboard, "--promtool")
        self.assertEqual(rc, 1, out)
        named = [line for line in out.splitlines() if "PromQL does not parse" in line]
        self.assertEqual(len(named), 2, out)
        for (p, t), line in zip(broken, named):
            self.assertIn(f"nodewatch-node.json: panel {p.get('id')} target {t.get('refId')}:", line)

    def test_coverage(self):
        metrics = os.path.join(self.dir.name, "metrics.txt")
        with open(metrics, "w", encoding="utf-8") as f:
            f.write("nodewatch_accelerator_utilization_ratio gauge\nnodewatch_never_used gauge\n"
                    "nodewatch_listed gauge\n")
        readme = os.path.join(self.dir.name, "README.md")
        with open(readme, "w", encoding="utf-8") as f:
            f.write("# x\n`nodewatch_never_used` here does not count\n## Not charted\n- `nodewatch_listed`\n")
        rc, out = self.lint(self.dashboard, "--metrics", metrics, "--coverage", readme)
        self.assertIn("coverage: nodewatch_never_used is in no dashboard panel or rule", out)
        self.assertNotIn("coverage: nodewatch_listed", out)
        self.assertNotIn("coverage: nodewatch_accelerator_utilization_ratio", out)


if __name__ == "__main__":
    unittest.main()
