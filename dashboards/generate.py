#!/usr/bin/env python3
"""Generates nodewatch's Grafana dashboards (classic JSON model).

    python3 dashboards/generate.py          # writes dashboards/*.json
    python3 dashboards/generate.py --check  # exits 1 if a committed file differs

Only the standard library. The dashboards are data: the panel lists below are
the whole definition, and the JSON files are what this script makes of them
(the test suite checks that they match). dashboards/lint.py checks the
conventions on the JSON files themselves.

Every query selects `cluster=~"$cluster", job=~"$job", instance=~"$instance"`
through sel(); every rate uses $__rate_interval; totals over the dashboard's
time range use increase(...[$__range]).
"""

import json
import os
import sys
import tomllib

SCHEMA_VERSION = 42
HERE = os.path.dirname(os.path.abspath(__file__))
DS = {"type": "prometheus", "uid": "${datasource}"}
RI = "$__rate_interval"
FIRING = 'alertstate="firing"'
CRITICAL = 'alertstate="firing", severity="critical"'
WARNING = 'alertstate="firing", severity="warning"'
UNCORRECTED = 'type="uncorrected"'
SM = 'clock="sm"'
NOT_MEMORY = 'sensor!="memory"'
NOT_NONE = 'action!="none"'
STALE_VERDICT = 'alertstate="firing", alertname="NodewatchNodeVerdictStale"'


def application_xids():
    """alerts/thresholds.toml's xid.application, as "13, 31 and 43"."""
    with open(os.path.join(HERE, "..", "alerts", "thresholds.toml"), "rb") as f:
        codes = [str(x) for x in tomllib.load(f)["xid"]["application"]]
    return ", ".join(codes[:-1]) + " and " + codes[-1] if len(codes) > 1 else codes[0]


KERNEL_FAULTS = ('event=~"gpu_fallen_off_bus|dpc_containment|aer_fatal|mlx5_health|mlx5_cmd_timeout|'
                 'machine_check|memory_uncorrected|amdgpu_reset"')


def sel(extra=""):
    """The label matchers every query carries, plus `extra`."""
    m = 'cluster=~"$cluster", job=~"$job", instance=~"$instance"'
    return "{" + m + (", " + extra if extra else "") + "}"


def target(expr, legend="", ref="A", instant=False, table=False):
    t = {"datasource": DS, "expr": expr, "refId": ref, "legendFormat": legend or "__auto"}
    if instant:
        t["instant"] = True
        t["range"] = False
    if table:
        t["format"] = "table"
    return t


def panel(kind, title, description, unit, targets, w=12, h=8, **extra):
    """One panel. `targets` is a list of (expr, legend) or target dicts."""
    ts = []
    for i, t in enumerate(targets):
        if isinstance(t, tuple):
            t = target(t[0], t[1] if len(t) > 1 else "")
        t = dict(t)
        t["refId"] = chr(ord("A") + i)
        ts.append(t)
    p = {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DS,
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "targets": ts,
        "_w": w,
        "_h": h,
    }
    defaults = p["fieldConfig"]["defaults"]
    if kind == "timeseries":
        defaults["custom"] = {"lineWidth": 1, "fillOpacity": 0, "showPoints": "never"}
        p["options"] = {
            "legend": {"displayMode": "table", "placement": "right", "calcs": ["lastNotNull", "max"]},
            "tooltip": {"mode": "multi", "sort": "desc"},
        }
    elif kind == "stat":
        p["options"] = {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "colorMode": "value",
            "graphMode": "none",
            "textMode": "auto",
        }
    elif kind == "state-timeline":
        p["options"] = {"showValue": "never", "mergeValues": True, "rowHeight": 0.9}
    elif kind == "table":
        p["options"] = {"showHeader": True, "cellHeight": "sm"}
    if "thresholds" in extra:
        defaults["thresholds"] = {"mode": "absolute", "steps": extra.pop("thresholds")}
        defaults.setdefault("color", {"mode": "thresholds"})
    if "mappings" in extra:
        defaults["mappings"] = extra.pop("mappings")
    if "min" in extra:
        defaults["min"] = extra.pop("min")
    if "max" in extra:
        defaults["max"] = extra.pop("max")
    p.update(extra)
    return p


def ts(title, description, unit, targets, **kw):
    return panel("timeseries", title, description, unit, targets, **kw)


def right_axis(p, pattern, unit):
    """`p` with the series whose legend matches `pattern` on a right axis in `unit`."""
    p["fieldConfig"]["overrides"].append(
        {"matcher": {"id": "byRegexp", "options": pattern},
         "properties": [{"id": "unit", "value": unit}, {"id": "custom.axisPlacement", "value": "right"}]})
    return p


def stat(title, description, unit, targets, **kw):
    kw.setdefault("w", 6)
    kw.setdefault("h", 4)
    return panel("stat", title, description, unit, targets, **kw)


def state_timeline(title, description, unit, targets, **kw):
    return panel("state-timeline", title, description, unit, targets, **kw)


def table(title, description, unit, targets, **kw):
    """An instant table: each target becomes a column, joined on instance."""
    ts_ = [target(t[0], t[1], instant=True, table=True) for t in targets]
    kw.setdefault("w", 24)
    p = panel("table", title, description, unit, ts_, **kw)
    p["transformations"] = [
        {"id": "merge", "options": {}},
        {
            "id": "organize",
            "options": {
                "excludeByName": {"Time": True},
                "renameByName": {f"Value #{chr(ord('A') + i)}": t[1] for i, t in enumerate(targets)},
            },
        },
    ]
    return p


def row(title):
    return {"type": "row", "title": title, "collapsed": False, "panels": []}


UP_DOWN = [
    {"type": "value", "options": {"0": {"text": "down", "color": "red"}, "1": {"text": "up", "color": "green"}}}
]
RED_IF_ANY = [{"color": "green", "value": None}, {"color": "red", "value": 1}]
HEALTHY = [
    {"type": "value", "options": {"0": {"text": "not healthy", "color": "red"}, "1": {"text": "healthy", "color": "green"}}}
]
READY = [
    {"type": "value", "options": {"0": {"text": "not ready", "color": "red"}, "1": {"text": "ready", "color": "green"}}}
]

# One-hot families (one series per label value, exactly one of them 1) are
# drawn as one series per accelerator whose value is the code of the label
# value that is 1: the driver's recovery action (codes: NVML's
# nvmlDeviceGpuRecoveryAction_t) and the NVLink fabric registration state
# (NVML_GPU_FABRIC_STATE_*). An action not listed here (a newer driver's)
# reads OTHER_ACTION.
RECOVERY_ACTIONS = [("none", 0, "green"), ("gpu_reset", 1, "red"), ("node_reboot", 2, "red"),
                    ("drain_p2p", 3, "red"), ("drain_and_reset", 4, "red"), ("recover_imex_domain", 5, "orange")]
OTHER_ACTION = 99
FABRIC_STATES = [("not_supported", 0, "text"), ("not_started", 1, "red"), ("in_progress", 2, "orange"),
                 ("completed", 3, "green")]


def one_hot_code(metric, label, values, other=None):
    """The code of the label value whose series is 1: the sum, without the
    label, of each value's series times its code. With `other`, a value not
    listed counts as that code."""
    parts = []
    for value, code, _ in values:
        matcher = f'{label}="{value}"'
        parts.append(f"{metric}{sel(matcher)} * {code}")
    if other is not None:
        matcher = label + '!~"' + "|".join(v for v, _, _ in values) + '"'
        parts.append(f"{metric}{sel(matcher)} * {other}")
    return f"sum without ({label}) (" + " or ".join(parts) + ")"


def code_mappings(values, other=None):
    options = {str(code): {"text": value, "color": color} for value, code, color in values}
    if other is not None:
        options[str(other)] = {"text": "other action", "color": "red"}
    return [{"type": "value", "options": options}]


# Jobs (nodewatch_accelerator_job_info). Empty labels are absent in
# Prometheus: gpu_instance="" selects the jobs of whole accelerators. Joins
# of an accelerator's series with its jobs match on ACC (on NODE for a
# node's series); job and cluster are in both so that two scrape jobs or two
# clusters with the same instance names never match each other. A
# group_left always has the job side on the left (an accelerator may carry
# several jobs, so only the accelerator's series is one per key).
ACC = "cluster, job, instance, accelerator, uuid"
NODE = "cluster, job, instance"
IN_JOB = 'scheduler=~"slurm|kubernetes"'
HARD_THROTTLE = 'reason=~"hw_thermal|hw_slowdown|hw_power_brake|sw_thermal"'
JOB_COLUMNS = ["instance", "accelerator", "uuid", "gpu_instance", "scheduler", "job_id", "step", "namespace", "pod",
               "container", "claim"]
NOT_REPORTED = [{"type": "special", "options": {"match": "nan", "result": {"text": "not reported"}}}]


def with_job(expr, mig=False):
    """`expr` (one series per accelerator, or per MIG GPU instance with
    `mig`) once for each Slurm job or Kubernetes pod on it, with the job's
    scheduler, job_id, namespace and pod labels (its steps, containers and,
    without `mig`, GPU instances counted once); as it is where there is
    none. Whole-accelerator series get only the jobs of whole accelerators."""
    key = ACC + (", gpu_instance" if mig else "")
    grouped = "step, container" if mig else "step, container, gpu_instance"
    matcher = IN_JOB + (', gpu_instance!=""' if mig else ', gpu_instance=""')
    jobs = f"group without ({grouped}) (nodewatch_accelerator_job_info{sel(matcher)})"
    return f"({jobs} * on ({key}) group_left () {expr}) or on ({key}) {expr}"


def jobs_table(title, description, jobs, memory, memory_column, **kw):
    """One row per job_info series of `jobs`, its value the memory of its
    job_id's processes on the accelerator (`memory`, one series per
    accelerator and job_id), or "not reported"."""
    expr = f"{jobs} * on ({ACC}, job_id) group_left () {memory} or {jobs} * NaN"
    kw.setdefault("w", 24)
    p = panel("table", title, description, "bytes", [target(expr, memory_column, instant=True, table=True)], **kw)
    p["transformations"] = [
        {"id": "organize", "options": {
            "excludeByName": {"Time": True, "job": True, "cluster": True},
            "indexByName": {**{c: i for i, c in enumerate(JOB_COLUMNS)}, "Value": len(JOB_COLUMNS)},
            "renameByName": {"Value": memory_column},
        }},
    ]
    p["fieldConfig"]["defaults"]["mappings"] = NOT_REPORTED
    p["fieldConfig"]["overrides"] = [node_link("instance")]
    return p


def node_link(column):
    """A column of instances that opens the node dashboard on the one clicked."""
    return {"matcher": {"id": "byName", "options": column},
            "properties": [{"id": "links", "value": [{
                "title": "Node dashboard",
                "url": "/d/nodewatch-node?var-datasource=${datasource}&var-instance=${__value.raw}&${__url_time_range}"}]}]}


# The node verdict's subsystems (nodewatch_node_healthy{subsystem}), in the
# daemon's order, with their titles.
SUBSYSTEMS = [("accelerator", "Accelerators"), ("nvlink", "NVLink"), ("pcie", "PCIe"), ("fabric", "Fabric ports"),
              ("nic", "NICs"), ("storage", "Storage"), ("kernel", "Kernel"), ("platform", "Power and cooling"),
              ("versions", "Versions"), ("exporter", "Exporter")]
VERDICT_HEALTHY = [
    {"type": "value", "options": {"0": {"text": "problem or not checked", "color": "red"},
                                  "1": {"text": "healthy", "color": "green"}}}
]


def labelled(expr, subsystem, what, component=None):
    """A measured series labelled as its nodewatch_node_expected counterpart:
    subsystem and what set, component copied from the label `component`
    (a tuple of labels is joined with "/": device/port)."""
    e = f'label_replace(label_replace({expr}, "subsystem", "{subsystem}", "", ""), "what", "{what}", "", "")'
    if isinstance(component, tuple):
        e = f'label_join({e}, "component", "/", ' + ", ".join(f'"{c}"' for c in component) + ")"
    elif component:
        e = f'label_replace({e}, "component", "$1", "{component}", "(.+)")'
    return e


def expected_vs_measured():
    """One row per nodewatch_node_expected series: the expected value and
    what the collectors measure for the same subsystem, component and what."""
    key = "instance, subsystem, component, what"
    measured = [
        labelled(f"instance:nodewatch_accelerator_info:count{sel()}", "accelerator", "count"),
        labelled(f"count by (job, instance, model) (nodewatch_accelerator_info{sel()})", "accelerator", "count", "model"),
        labelled(f"min by (job, instance) (nodewatch_accelerator_nvlink_links_active{sel()})", "nvlink", "links_active"),
        labelled(f"nodewatch_pcie_link_width{sel()}", "pcie", "width", "device"),
        labelled(f"nodewatch_pcie_link_speed_transfers_per_second{sel()}", "pcie", "speed_transfers_per_second", "device"),
        labelled(f"instance_device_port:nodewatch_interconnect_port_active:bool{sel()}", "fabric", "active", ("device", "port")),
        labelled(f"nodewatch_interconnect_port_rate_bytes_per_second{sel()}", "fabric", "rate_bytes_per_second",
                 ("device", "port")),
        labelled(f"nodewatch_nic_up{sel()}", "nic", "up", "interface"),
        labelled(f"nodewatch_nic_speed_bytes_per_second{sel()}", "nic", "speed_bytes_per_second", "interface"),
        labelled(f"min by (job, instance, path) (nodewatch_storage_probe_success{sel()})", "storage", "probe", "path"),
        labelled(f"max by (job, instance, mountpoint) (nodewatch_storage_nfs_mount_info{sel()})", "storage", "nfs_mount",
                 "mountpoint"),
    ]
    measured_expr = (f"max by ({key}) ({' or '.join(measured)}) "
                     f"and on ({key}) nodewatch_node_expected{sel()}")
    return table("Expected vs measured",
                 "The node's expected inventory (nodewatch_node_expected, from its [expect] configuration) next to "
                 "what nodewatch measures for the same part: accelerators enumerated (per model too), the fewest "
                 "active NVLinks of any accelerator, PCIe link width and speed (transfers/s), fabric ports active "
                 "(1) and their rate (bytes/s), NICs up (1) and their speed (bytes/s), storage probes succeeding "
                 "(1: every operation) and NFS mounts present (1). An empty measured cell: the part is gone. "
                 "Empty without an [expect] configuration.", "short",
                 [(f"max by ({key}) (nodewatch_node_expected{sel()})", "expected"), (measured_expr, "measured")],
                 h=10)


def verdict_row():
    """The node verdict: one stat per subsystem, the current problems, and
    expected against measured."""
    stats = [stat(title, f"nodewatch's verdict on the {name} subsystem, evaluated after each collection round: "
                  "1 healthy (or degraded: fit, with a problem to look at), 0 a problem or not checked (see the "
                  "problems' actions: none means not checked).",
                  "none", [("nodewatch_node_healthy" + sel('subsystem="' + name + '"'), "{{instance}}")],
                  mappings=VERDICT_HEALTHY, w=2, h=4)
             for name, title in SUBSYSTEMS]
    problems = panel("table", "Current problems",
                     "Every current problem of the node verdict (nodewatch_node_problem_info, at most 100 series) "
                     "with the part it concerns and the action it calls for: reset_gpu, reboot, drain, "
                     "inspect_hardware, check_cable, check_storage, contact_vendor, or none (could not be checked). "
                     "docs/runbook.md, NodewatchNodeProblem, says what each means.", "none",
                     [target(f"nodewatch_node_problem_info{sel()}", "problem", instant=True, table=True)], w=24, h=8)
    problems["options"] = {"showHeader": True, "cellHeight": "sm"}
    problems["transformations"] = [
        {"id": "organize", "options": {
            "excludeByName": {"Time": True, "Value": True, "__name__": True, "job": True, "cluster": True},
            "indexByName": {"instance": 0, "subsystem": 1, "component": 2, "problem": 3, "action": 4},
        }},
    ]
    problems["fieldConfig"]["overrides"] = [
        {"matcher": {"id": "byName", "options": "action"},
         "properties": [{"id": "mappings", "value": [{"type": "value", "options": {
             "none": {"text": "none (not checked)", "color": "text"}}},
             {"type": "regex", "options": {"pattern": "^(?!none$).+", "result": {"color": "red"}}}]},
             {"id": "custom.cellOptions", "value": {"type": "color-text"}}]},
    ]
    return [
        row("Node verdict"),
        *stats,
        stat("Verdict age", "Seconds since the verdict was last evaluated (it is after every collection round); "
             "NodewatchNodeVerdictStale fires when it stops.", "s",
             [(f"time() - nodewatch_node_verdict_timestamp_seconds{sel()}", "{{instance}}")],
             thresholds=[{"color": "green", "value": None}, {"color": "red", "value": 300}], w=4, h=4),
        problems,
        state_timeline("Subsystem health over time", "nodewatch_node_healthy per subsystem: 1 healthy, 0 a problem or "
                       "not checked.", "none", [(f"nodewatch_node_healthy{sel()}", "{{instance}} {{subsystem}}")],
                       mappings=VERDICT_HEALTHY),
        ts("Problems per subsystem", "Current problems of each subsystem (nodewatch_node_problems: all of them, also "
           "those beyond the 100 series of the problems table).", "none",
           [(f"nodewatch_node_problems{sel()}", "{{instance}} {{subsystem}}")], min=0),
        expected_vs_measured(),
    ]


def query_var(name, label, query, all_value):
    """A query variable over $datasource: multi-select with an all value,
    refreshed on time-range change."""
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DS,
        "query": {"query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
        "definition": query,
        "refresh": 2,
        "includeAll": True,
        "multi": True,
        "allValue": all_value,
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "sort": 1,
        "hide": 0,
    }


def variables():
    return [
        {
            "name": "datasource",
            "label": "Data Source",
            "type": "datasource",
            "query": "prometheus",
            "current": {},
            "hide": 0,
            "refresh": 1,
            "regex": "",
        },
        # Series without a cluster label match ".*", so a single-cluster
        # setup needs no cluster label at all.
        query_var("cluster", "cluster", "label_values(nodewatch_build_info, cluster)", ".*"),
        query_var("job", "job", 'label_values(nodewatch_build_info{cluster=~"$cluster"}, job)', ".+"),
        query_var(
            "instance",
            "instance",
            'label_values(nodewatch_build_info{cluster=~"$cluster", job=~"$job"}, instance)',
            ".+",
        ),
    ]


def layout(items):
    """Assigns ids and grid positions: panels flow left to right, rows start a new line."""
    out, x, y, line_h, pid = [], 0, 0, 0, 1
    for it in items:
        it = dict(it)
        it["id"] = pid
        pid += 1
        if it["type"] == "row":
            if x:
                y += line_h
            it["gridPos"] = {"h": 1, "w": 24, "x": 0, "y": y}
            y += 1
            x, line_h = 0, 0
        else:
            w, h = it.pop("_w"), it.pop("_h")
            if x + w > 24:
                y += line_h
                x, line_h = 0, 0
            it["gridPos"] = {"h": h, "w": w, "x": x, "y": y}
            x += w
            line_h = max(line_h, h)
        out.append(it)
    return out


def dashboard(uid, title, description, items, tags, time_from="now-6h", links=True, extra_variables=()):
    d = {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": ["nodewatch"] + tags,
        "editable": False,
        "graphTooltip": 1,
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "time": {"from": time_from, "to": "now"},
        "timezone": "",
        "refresh": "1m" if time_from != "now-72h" else "",
        "annotations": {"list": []},
        "templating": {"list": variables() + list(extra_variables)},
        "panels": layout(items),
    }
    if links:
        d["links"] = [
            {
                "type": "dashboards",
                "tags": ["nodewatch"],
                "asDropdown": True,
                "title": "nodewatch",
                "includeVars": True,
                "keepTime": True,
            }
        ]
    return d


# ---------------------------------------------------------------------------
# Fleet overview.


def latency_matrix():
    """The mesh's pair matrix: a row per probing node, a column per peer, the
    p99 round trip (the worst rail) in each cell."""
    expr = f"max by (instance, peer) (instance_peer_rail:nodewatch_mesh_rtt_seconds:p99_5m{sel()})"
    p = panel("table", "Latency matrix (p99 RTT)",
              "The mesh collector's round trips: one row per probing node (instance), one column per peer, "
              "the p99 over 5m of its worst rail. A slow pair stands out in its row and in its peer's row; a "
              "slow node in its whole row and column. Empty unless collectors.mesh is on.", "s",
              [target(expr, "p99", instant=True, table=True)], w=24, h=10)
    p["transformations"] = [
        {"id": "groupingToMatrix", "options": {"columnField": "peer", "rowField": "instance", "valueField": "Value"}},
    ]
    p["fieldConfig"]["defaults"]["thresholds"] = {"mode": "absolute", "steps": [
        {"color": "green", "value": None}, {"color": "orange", "value": 0.0005}, {"color": "red", "value": 0.005}]}
    p["fieldConfig"]["defaults"]["custom"] = {"cellOptions": {"type": "color-background"}}
    return p


def fleet():
    items = [
        row("Coverage"),
        stat("Nodes up", "nodewatch targets Prometheus scrapes successfully.", "none",
             [(f"count(up{sel()} == 1)", "up")]),
        stat("Nodes not scraped", "nodewatch targets that fail to be scraped: those nodes are blind.",
             "none", [(f"count(up{sel()} == 0) or vector(0)", "down")], thresholds=RED_IF_ANY),
        stat("Accelerators up", "Accelerators answering their driver, over all selected nodes.",
             "none", [(f"sum(nodewatch_accelerator_up{sel()})", "up")]),
        stat("Accelerators not answering",
             "Accelerators lost, needing a reset or stuck in their driver.", "none",
             [(f"count(nodewatch_accelerator_up{sel()} == 0) or vector(0)", "down")],
             thresholds=RED_IF_ANY),
        stat("Collectors failing", "Collectors whose last collection failed or timed out, over all nodes.",
             "none", [(f"count(nodewatch_collector_up{sel()} == 0) or vector(0)", "failing")],
             thresholds=RED_IF_ANY),
        stat("Nodes with verdict problems",
             "Nodes whose nodewatch verdict has a current problem that calls for an action (not none: could not "
             "be checked).", "none",
             [(f"count(count by (instance) (nodewatch_node_problem_info{sel(NOT_NONE)} == 1)) or vector(0)", "nodes")],
             thresholds=RED_IF_ANY),
        stat("Verdicts stale", "Nodes whose verdict is no longer evaluated (NodewatchNodeVerdictStale firing).", "none",
             [(f"count(ALERTS{sel(STALE_VERDICT)}) or vector(0)",
               "stale")], thresholds=RED_IF_ANY),
        stat("Accelerators needing recovery",
             "Accelerators whose driver asks for a reset, a reboot or a drain before they are usable again.", "none",
             [(f"count(accelerator_action:nodewatch_accelerator_recovery_action:required{sel()} == 1) or vector(0)",
               "recovery")], thresholds=RED_IF_ANY),
        stat("NVLink fabric not healthy",
             "Accelerators of NVSwitch systems whose NVLink fabric is unhealthy or not registered yet.", "none",
             [(f"count(nodewatch_accelerator_fabric_healthy{sel()} == 0) or vector(0)", "not healthy")],
             thresholds=RED_IF_ANY),
        stat("Critical alerts firing", "nodewatch critical alerts firing now.", "none",
             [(f"count(ALERTS{sel(CRITICAL)}) or vector(0)", "critical")],
             thresholds=RED_IF_ANY),
        stat("Warning alerts firing", "nodewatch warning alerts firing now.", "none",
             [(f"count(ALERTS{sel(WARNING)}) or vector(0)", "warning")],
             thresholds=[{"color": "green", "value": None}, {"color": "orange", "value": 1}]),
        stat("Exporter CPU", "CPU used by nodewatchd, summed over the selected nodes.", "percentunit",
             [(f"sum(rate(process_cpu_seconds_total{sel()}[{RI}]))", "cpu")]),
        table("Firing alerts", "Every nodewatch alert firing now, by node.", "none",
              [(f"count by (instance, alertname, severity) (ALERTS{sel(FIRING)})", "firing")],
              h=8),
        row("Node verdicts"),
        table("Nodes not healthy, by subsystem", "Per subsystem, the nodes whose nodewatch verdict is not healthy "
              "now (a problem, or not checked).", "none",
              [(f"sum by (subsystem) (1 - nodewatch_node_healthy{sel()})", "nodes")], w=12),
        table("Problems across the fleet", "Each kind of current verdict problem with its action, and on how many "
              "nodes (one component each).", "none",
              [(f"count by (subsystem, problem, action) (nodewatch_node_problem_info{sel()})", "series")], w=12),
        table("GPUs by chassis and tray", "Where the driver says where GPUs sit (NVIDIA Blackwell and later): "
              "each compute tray's GPUs and how many answer; several down in one tray is "
              "NodewatchAcceleratorTrayDegraded.", "none",
              [(f"count by (chassis_serial, slot, tray) (nodewatch_accelerator_platform_info{sel()})", "GPUs"),
               (f"sum by (chassis_serial, slot, tray) (nodewatch_accelerator_up{sel()} "
                f"* on (job, instance, accelerator, uuid) group_left (chassis_serial, slot, tray) "
                f"nodewatch_accelerator_platform_info{sel()})", "answering")], w=24),
        row("Versions"),
        table("Nodes per version", "Per component (kernel, BIOS, BMC firmware, accelerator driver, NIC and HCA "
              "firmware), how many nodes run each version: a node back from repair with another one stands out "
              "as a count of 1. [expect.versions] pins them (docs/verdict.md).", "none",
              [(f"count by (component, version) (count by (instance, component, version) "
                f"(nodewatch_version_info{sel()}))", "nodes")], w=12),
        table("Nodes off their pinned version", "The nodes whose verdict says a component runs a version "
              "[expect.versions] does not allow (problem version_mismatch), with the component and device.",
              "none",
              [("nodewatch_node_problem_info" + sel('problem="version_mismatch"') + " == 1", "problem")], w=12),
        row("Power and cooling"),
        stat("Nodes with a critical BMC sensor", "Nodes where a BMC sensor reads critical now (a failed fan or PSU, "
             "a temperature past its critical threshold, a leak).", "none",
             [(f"count(count by (instance) (nodewatch_bmc_sensor_state{sel()} == 2)) or vector(0)", "nodes")],
             thresholds=RED_IF_ANY, w=6),
        stat("BMCs not answering", "Nodes whose BMC does not answer nodewatch.", "none",
             [(f"count(nodewatch_bmc_up{sel()} == 0) or vector(0)", "nodes")], thresholds=RED_IF_ANY, w=6),
        ts("Fleet power (DCMI)", "The selected nodes' draw as their BMCs measure it, summed.", "watt",
           [(f"sum(nodewatch_bmc_node_power_watts{sel()})", "power")], w=12),
        row("Worst nodes"),
        table("Hottest accelerators", "The ten nodes with the hottest accelerator sensor now.", "celsius",
              [(f"topk(10, max by (instance) (nodewatch_accelerator_temperature_celsius{sel()}))", "max °C")],
              w=12),
        table("Accelerator errors in range",
              "The ten nodes with the most hardware-class XIDs and uncorrectable ECC errors over the range.",
              "none",
              [(f"topk(10, sum by (instance) (increase(accelerator_xid:nodewatch_accelerator_xid_errors_total:hardware{sel()}[$__range])) "
                f"+ sum by (instance) (increase(nodewatch_accelerator_ecc_errors_total{sel(UNCORRECTED)}[$__range])))",
                "errors")],
              w=12),
        table("Kernel-logged hardware faults in range",
              "The ten nodes whose kernel logged the most GPU, PCIe, NIC and memory faults over the range: XIDs "
              "outside the application list, GPUs fallen off the bus, PCIe containment and fatal AER, mlx5 health "
              "and command timeouts, machine checks, uncorrected memory errors.", "none",
              [(f"topk(10, sum by (instance) ((increase(kernel_xid:nodewatch_kernel_xid_events_total:hardware{sel()}[$__range]) "
                f"and last_over_time(kernel_xid:nodewatch_kernel_xid_events_total:hardware{sel()}[$__range] offset $__range)) "
                f"or kernel_xid:nodewatch_kernel_xid_events_total:hardware{sel()} "
                f"or (increase(nodewatch_kernel_events_total{sel(KERNEL_FAULTS)}[$__range]) "
                f"and last_over_time(nodewatch_kernel_events_total{sel(KERNEL_FAULTS)}[$__range] offset $__range)) "
                f"or nodewatch_kernel_events_total{sel(KERNEL_FAULTS)}) > 0)", "faults")],
              w=12),
        table("Recovery actions requested", "Nodes whose driver asks for an action (any but none) on accelerators, "
              "with the action and the number of accelerators.", "none",
              [(f"count by (instance, action) (nodewatch_accelerator_recovery_action{sel(NOT_NONE)} == 1)",
                "accelerators")],
              w=12),
        table("NVLink fabric not healthy", "Nodes with accelerators whose NVLink fabric is unhealthy or not "
              "registered, and how many.", "none",
              [(f"count by (instance) (nodewatch_accelerator_fabric_healthy{sel()} == 0)", "accelerators")],
              w=12),
        table("NIC drops", "The ten nodes dropping the most packets (receive, transmit and missed) per second.",
              "pps",
              [(f"topk(10, sum by (instance) (rate(nodewatch_nic_receive_dropped_total{sel()}[{RI}]) "
                f"+ rate(nodewatch_nic_transmit_dropped_total{sel()}[{RI}]) + rate(nodewatch_nic_receive_missed_total{sel()}[{RI}])))",
                "drops/s")],
              w=12),
        table("Fabric port errors in range",
              "The ten nodes with the most fabric symbol, link-integrity and receive errors over the range.",
              "none",
              [(f"topk(10, sum by (instance) (increase(nodewatch_interconnect_port_symbol_errors_total{sel()}[$__range]) "
                f"+ increase(nodewatch_interconnect_port_local_link_integrity_errors_total{sel()}[$__range]) "
                f"+ increase(nodewatch_interconnect_port_receive_errors_total{sel()}[$__range])))",
                "errors")],
              w=12),
        table("Slowest block devices", "The ten nodes with the highest average read latency now.", "s",
              [(f"topk(10, max by (instance) (rate(nodewatch_storage_read_time_seconds_total{sel()}[{RI}]) "
                f"/ rate(nodewatch_storage_reads_completed_total{sel()}[{RI}]) > 0))", "read s/op")],
              w=12),
        table("Slowest storage probes", "The ten nodes with the highest 99th-percentile probe latency.", "s",
              [(f"topk(10, max by (instance) (histogram_quantile(0.99, sum by (instance, path, operation, le) "
                f"(rate(nodewatch_storage_probe_duration_seconds_bucket{sel()}[{RI}])))))", "p99")],
              w=12),
        row("Network mesh"),
        latency_matrix(),
        table("Inconsistent pairs", "The ten pairs whose p99 round trip is the furthest above the median of "
              "their node's pairs on the rail (NodewatchMeshLatencyInconsistent fires above 3x and 1 ms).", "x",
              [(f"topk(10, instance_peer_rail:nodewatch_mesh_rtt_seconds:p99_over_median_5m{sel()})",
                "p99 / median")],
              w=12),
        table("Lossy pairs", "The ten pairs losing the largest share of their mesh probes over 5m.",
              "percentunit",
              [(f"topk(10, instance_peer_rail:nodewatch_mesh_loss:ratio_5m{sel()} > 0)", "lost")],
              w=12),
        row("Fleet trends"),
        ts("Accelerator utilization", "Mean accelerator utilization per node.", "percentunit",
           [(f"avg by (instance) (nodewatch_accelerator_utilization_ratio{sel()})", "{{instance}}")],
           min=0, max=1),
        ts("SM activity", "Mean SM activity (GPM, Hopper and later) of each node's accelerators: unlike utilization "
           "it shows how much of the GPUs the work uses.", "percentunit",
           [(f"avg by (instance) (nodewatch_accelerator_sm_active_ratio{sel()})", "{{instance}}")],
           min=0, max=1),
        ts("Fabric throughput", "Fabric bytes sent plus received per node.", "Bps",
           [(f"sum by (instance) (rate(nodewatch_interconnect_port_transmitted_bytes_total{sel()}[{RI}]) "
             f"+ rate(nodewatch_interconnect_port_received_bytes_total{sel()}[{RI}]))", "{{instance}}")]),
    ]
    return dashboard("nodewatch-fleet", "nodewatch / Fleet overview",
                     "Nodes and accelerators up, firing alerts and the worst nodes of the fleet.", items, ["fleet"])


# ---------------------------------------------------------------------------
# Node.


def node():
    acc = "{{instance}} {{accelerator}}"
    # The job (Slurm job id, Kubernetes pod) in the legend of the series
    # with_job() joins it to.
    acc_job = acc + " {{job_id}} {{pod}}"
    with_jobs = (" Each series carries the Slurm job or Kubernetes pod on its accelerator (or MIG GPU instance): one "
                 "series per job.")

    def gpm(title, metric, what):
        gi_metric = metric.replace("nodewatch_accelerator_", "nodewatch_accelerator_gpu_instance_", 1)
        return ts(title, what + " From NVML GPM (Hopper and later), averaged over the last collection interval; "
                  "on a MIG-enabled accelerator also per GPU instance (GI)." + with_jobs, "percentunit",
                  [(with_job(f"{metric}{sel()}"), acc_job),
                   (with_job(f"{gi_metric}{sel()}", mig=True), acc + " GI {{gpu_instance}} {{job_id}} {{pod}}")],
                  min=0, max=1)
    items = verdict_row() + [
        row("Accelerators"),
        state_timeline("Accelerator driver", "1 while the vendor's driver answers; 0 it does not (why, and the "
                       "versions: the table beside). With GPUs of the vendor on the bus that is "
                       "NodewatchAcceleratorDriverDown.", "none",
                       [(f"nodewatch_accelerator_driver_up{sel()}", "{{vendor}}")], mappings=UP_DOWN, w=12, h=6),
        table("Accelerator driver state", "Each vendor's driver: the state it is in, the versions of its "
              "library and kernel module, and its GPUs on the PCI bus.", "none",
              [(f"nodewatch_accelerator_driver_state{sel()} == 1", "state"),
               (f"nodewatch_accelerator_driver_info{sel()}", "versions"),
               (f"nodewatch_accelerator_driver_devices{sel()}", "GPUs on the bus")], w=12, h=6),
        state_timeline("Accelerator up", "1 while the accelerator answers its driver; 0 lost, reset required or stuck.",
                       "none", [(f"nodewatch_accelerator_up{sel()}", acc)], mappings=UP_DOWN, w=24, h=6),
        state_timeline("Recovery action", "The driver's verdict on what the accelerator needs before it is usable "
                       "again (NVML recovery action, drivers R565 and later): none, a reset, a reboot or a drain.",
                       "none", [(one_hot_code("nodewatch_accelerator_recovery_action", "action", RECOVERY_ACTIONS,
                                              OTHER_ACTION), acc)],
                       mappings=code_mappings(RECOVERY_ACTIONS, OTHER_ACTION), w=24, h=6),
        jobs_table("Jobs on this node's accelerators",
                   "Every job on each accelerator now (nodewatch_accelerator_job_info): scheduler slurm (job_id the "
                   "job id or SLUID, step the step), kubernetes (job_id the pod UID; namespace, pod and container "
                   "from the kubelet's pod-resources API, no job_id when only those are known), none (a process in "
                   "no job) or unknown (a process whose cgroup could not be read); gpu_instance the MIG GPU "
                   "instance; claim the ResourceClaim (Dynamic Resource Allocation) that gave the pod the "
                   "accelerator. Memory: the device memory of the job_id's processes on the accelerator (for rows "
                   "without a job_id, of all the processes without one). At most "
                   "collectors.accelerator.max_jobs_per_device jobs per accelerator.",
                   f"nodewatch_accelerator_job_info{sel()}",
                   f"nodewatch_accelerator_process_memory_used_bytes{sel()}", "memory", h=8),
        state_timeline("Jobs over time", "When each job was on each accelerator (one row per accelerator, job, "
                       "step, container and GPU instance).", "none",
                       [(f"nodewatch_accelerator_job_info{sel()}",
                         acc + " {{scheduler}} {{job_id}} {{step}} {{namespace}} {{pod}} {{container}} {{gpu_instance}}")],
                       mappings=[{"type": "value", "options": {"1": {"text": "on the accelerator", "color": "blue"}}}]),
        table("ResourceClaims on this node's accelerators",
              "Each ResourceClaim (Kubernetes Dynamic Resource Allocation) whose device is an accelerator of this "
              "node, with its DRA driver and device name (a MIG device is shown on its GPU), and the number of "
              "pods using it through the claim: more than 1 is a shared claim, whose pods share the memory.",
              "none", [(f"nodewatch_accelerator_claim_pods{sel()}", "pods")],
              w=12, h=6),
        ts("Compute processes", "Compute processes running on each accelerator, as the driver reports them.", "none",
           [(f"nodewatch_accelerator_processes{sel()}", acc)], min=0, w=6),
        state_timeline("Kubelet pod-resources API", "1 while the kubelet's pod-resources API answers (the "
                       "namespace, pod and container of the Kubernetes jobs come from it); absent on nodes without a "
                       "kubelet socket.", "none",
                       [(f"nodewatch_accelerator_pod_resources_up{sel()}", "{{instance}}")], mappings=UP_DOWN, w=6),
        ts("Pod-resources helper restarts", "Times the helper process that asks the kubelet (nwd-pod-resources) "
           "was killed or lost and started again, over the window: it hung, exited or answered nonsense.", "none",
           [(f"increase(nodewatch_accelerator_pod_resources_helper_restarts_total{sel()}[{RI}])", "{{instance}}")],
           min=0, w=6),
        ts("Utilization", "Share of time a kernel ran on the accelerator (100% even for a kernel that keeps one SM "
           "busy: see SM active)." + with_jobs, "percentunit",
           [(with_job(f"nodewatch_accelerator_utilization_ratio{sel()}"), acc_job)], min=0, max=1),
        gpm("SM active (GPM)", "nodewatch_accelerator_sm_active_ratio",
            "Share of the streaming multiprocessors that were busy: the activity to compare across GPUs and nodes."),
        gpm("SM occupancy (GPM)", "nodewatch_accelerator_sm_occupancy_ratio",
            "Warps resident on the SMs against the theoretical maximum."),
        gpm("Tensor active (GPM)", "nodewatch_accelerator_tensor_active_ratio",
            "Share of time the SMs ran tensor-core operations of any kind."),
        gpm("DRAM bandwidth (GPM)", "nodewatch_accelerator_dram_bandwidth_ratio",
            "Device memory bandwidth used against the theoretical maximum."),
        gpm("Graphics engine active (GPM)", "nodewatch_accelerator_graphics_active_ratio",
            "Share of time the graphics or compute engine was active."),
        ts("Memory used", "Device memory in use, against the total, and the share of it of each job's processes "
           "(no job_id: the processes in no job)." + with_jobs, "bytes",
           [(with_job(f"nodewatch_accelerator_memory_used_bytes{sel()}"), acc_job),
            (f"nodewatch_accelerator_memory_total_bytes{sel()}", acc + " total"),
            (f"nodewatch_accelerator_process_memory_used_bytes{sel()}", acc + " job {{job_id}}")]),
        ts("Temperature", "Accelerator temperatures by sensor.", "celsius",
           [(f"nodewatch_accelerator_temperature_celsius{sel()}", acc + " {{sensor}}")]),
        ts("Margin to thermal slowdown", "The driver's own margin to the nearest slowdown threshold where it "
           "gives one (NVML 12.8 on), else slowdown temperature minus the hottest core sensor; alerts below 3 °C.",
           "celsius",
           [(f"nodewatch_accelerator_thermal_margin_celsius{sel()} or on (job, instance, accelerator, uuid) "
             f"(nodewatch_accelerator_temperature_slowdown_celsius{sel()} - on (job, instance, accelerator, uuid) "
             f"group_left () max without (sensor) (nodewatch_accelerator_temperature_celsius{sel(NOT_MEMORY)}))",
             acc)]),
        ts("Power", "Power draw against the enforced limit.", "watt",
           [(f"nodewatch_accelerator_power_watts{sel()}", acc),
            (f"nodewatch_accelerator_power_limit_watts{sel()}", acc + " limit")]),
        ts("Energy", "Energy used per second (from the cumulative energy counter).", "watt",
           [(f"rate(nodewatch_accelerator_energy_joules_total{sel()}[{RI}])", acc)]),
        ts("SM clock", "Streaming-multiprocessor clock.", "hertz",
           [(f"nodewatch_accelerator_clock_hertz{sel(SM)}", acc)]),
        ts("Throttled time", "Share of time clocks were held down, by reason.", "percentunit",
           [(f"rate(nodewatch_accelerator_clock_throttle_seconds_total{sel()}[{RI}])", acc + " {{reason}}")]),
        ts("Throttle reasons active", "Clock throttle reasons active now (1).", "none",
           [(f"nodewatch_accelerator_clock_throttle_active{sel()} == 1", acc + " {{reason}}")]),
        ts("ECC errors", "Corrected and uncorrected memory errors per second.", "cps",
           [(f"rate(nodewatch_accelerator_ecc_errors_total{sel()}[{RI}])", acc + " {{type}}")]),
        ts("Row remapping and repair", "Remapped rows by cause, pending or failed remaps, channel or TPC repairs "
           "pending a reset, and memory the GPU can no longer repair.", "none",
           [(f"nodewatch_accelerator_remapped_rows{sel()}", acc + " {{cause}}"),
            (f"nodewatch_accelerator_row_remap_pending{sel()}", acc + " pending"),
            (f"nodewatch_accelerator_row_remap_failed{sel()}", acc + " failed"),
            (f"nodewatch_accelerator_repair_pending{sel()}", acc + " {{unit}} repair pending"),
            (f"nodewatch_accelerator_memory_unrepairable{sel()}", acc + " memory unrepairable")]),
        ts("XID events", "XID events by code over the rate window.", "none",
           [(f"increase(nodewatch_accelerator_xid_errors_total{sel()}[{RI}]) > 0", acc + " xid {{xid}}")]),
        ts("Memory controller utilization", "Share of time device memory was read or written.", "percentunit",
           [(f"nodewatch_accelerator_memory_utilization_ratio{sel()}", acc)], min=0, max=1),
        row("Host links (PCIe, NVLink-C2C)"),
        ts("Host link throughput", "Bytes per second between each accelerator and its CPU, by link (pcie on x86 "
           "nodes, c2c on Grace nodes) and direction (tx from the accelerator, rx to it).", "Bps",
           [(f"rate(nodewatch_accelerator_host_link_bytes_total{sel()}[{RI}])", acc + " {{link}} {{direction}}"),
            (f"nodewatch_accelerator_host_link_throughput_bytes_per_second{sel()}",
             acc + " {{link}} {{direction}} (sampled)")]),
        ts("Host link utilization", "Throughput against what the link carries per direction now; near 100% while "
           "compute is under-used (next panel) is NodewatchAcceleratorsWaitOnHostLink.", "percentunit",
           [(f"(rate(nodewatch_accelerator_host_link_bytes_total{sel()}[{RI}]) or "
             f"nodewatch_accelerator_host_link_throughput_bytes_per_second{sel()}) / on ({ACC}, link) group_left () "
             f"nodewatch_accelerator_host_link_capacity_bytes_per_second{sel()}", acc + " {{link}} {{direction}}")],
           min=0, max=1),
        ts("Compute beside the host link", "SM activity (GPM), else utilization: low compute with a busy host link "
           "means the accelerator waits on data from the CPU.", "percentunit",
           [(f"nodewatch_accelerator_sm_active_ratio{sel()} or on ({ACC}) "
             f"nodewatch_accelerator_utilization_ratio{sel()}", acc)], min=0, max=1),
        ts("Host link capacity", "What each link carries per direction as trained now (PCIe lowers its speed at "
           "idle); C2C: the active links' speeds summed.", "Bps",
           [(f"nodewatch_accelerator_host_link_capacity_bytes_per_second{sel()}", acc + " {{link}}")]),
        ts("Host links as the CPU counts them", "Bytes per second the CPU's own PMUs count between it and "
           "the devices it hosts (the uncore collector's host-link tables: Grace C2C, SCF and PCIe; Vera UCF "
           "and PCIe; Intel IIO per stack and port), by PMU, port and direction; empty unless the uncore "
           "collector runs with its permissions. PCIe here holds NICs and drives too "
           "(nodewatch_uncore_host_link_device_info names them).", "Bps",
           [(f"rate(nodewatch_uncore_host_link_bytes_total{sel()}[{RI}])",
             "{{pmu}} {{die}} {{port}} {{link}} {{direction}}")]),
        table("Devices behind the CPU's host-link counters", "The PCI functions each of the CPU's host-link "
              "series counts (Intel: below the IIO port's root port; Grace: the socket's GPUs), to read the panel "
              "before against the accelerators and NICs.", "none",
              [(f"nodewatch_uncore_host_link_device_info{sel()}", "device")], w=12),
        ts("NVLink-C2C per link", "Bytes per second over each C2C link; empty unless "
           "collectors.accelerator.c2c_link_bytes is on.", "Bps",
           [(f"rate(nodewatch_accelerator_c2c_link_bytes_total{sel()}[{RI}])", acc + " link {{link}} {{direction}}")]),
        ts("PCIe link width", "Lanes trained against the maximum.", "none",
           [(f"nodewatch_pcie_link_width{sel()}", "{{device}}"),
            (f"nodewatch_pcie_link_max_width{sel()}", "{{device}} max")]),
        ts("PCIe link speed", "Transfer rate trained against the maximum; it drops legitimately at idle.", "none",
           [(f"nodewatch_pcie_link_speed_transfers_per_second{sel()}", "{{device}}"),
            (f"nodewatch_pcie_link_max_speed_transfers_per_second{sel()}", "{{device}} max")]),
        ts("Links trained narrow", "1 while a link runs narrower than both ends allow.", "none",
           [(f"nodewatch_pcie_link_width_degraded{sel()}", "{{device}}")]),
        ts("PCIe replays", "Accelerator PCIe replays per second.", "cps",
           [(f"rate(nodewatch_accelerator_pcie_replays_total{sel()}[{RI}])", acc)]),
        ts("AER errors", "PCIe AER error reports per second, by severity.", "cps",
           [(f"rate(nodewatch_pcie_aer_errors_total{sel()}[{RI}]) > 0", "{{device}} {{severity}}")]),
        ts("AER errors by bit", "PCIe AER errors per second by error bit; empty unless collectors.pcie.aer_detail is on.", "cps",
           [(f"rate(nodewatch_pcie_aer_detail_errors_total{sel()}[{RI}]) > 0", "{{device}} {{severity}} {{error}}")]),
        table("PCIe devices", "Functions the pcie collector watches, with their kind, driver, NUMA node and upstream port.",
              "none", [(f"nodewatch_pcie_device_info{sel()}", "info")], h=8),
        ts("NVLink-C2C", "Grace NVLink-C2C links active or in low power, their error and back-to-back replay "
           "rates.", "none",
           [(f"nodewatch_accelerator_c2c_link_active{sel()}", acc + " link {{link}} active"),
            (f"nodewatch_accelerator_c2c_link_low_power{sel()}", acc + " link {{link}} low power"),
            (f"rate(nodewatch_accelerator_c2c_link_errors_total{sel()}[{RI}])", acc + " link {{link}} errors/s"),
            (f"rate(nodewatch_accelerator_c2c_link_b2b_replays_total{sel()}[{RI}])",
             acc + " link {{link}} back-to-back replays/s")]),
        row("NVLink"),
        ts("NVLink links active", "Active NVLink links per accelerator against the links the driver reports.", "none",
           [(f"nodewatch_accelerator_nvlink_links_active{sel()}", acc),
            (f"nodewatch_accelerator_nvlink_links{sel()}", acc + " present")]),
        state_timeline("NVLink link state", "1 while the link is active.", "none",
                       [(f"nodewatch_nvlink_up{sel()}", acc + " link {{link}}")], mappings=UP_DOWN),
        ts("NVLink throughput", "Data bytes per second over all links of each accelerator.", "Bps",
           [(f"sum without (link) (rate(nodewatch_nvlink_transmitted_bytes_total{sel()}[{RI}]))", acc + " tx"),
            (f"sum without (link) (rate(nodewatch_nvlink_received_bytes_total{sel()}[{RI}]))", acc + " rx")]),
        ts("NVLink errors", "NVLink errors per second by type, over each accelerator's links (replay and recovery are the serious ones).", "cps",
           [(f"rate(nodewatch_nvlink_errors_total{sel()}[{RI}]) > 0", acc + " {{type}}")]),
        ts("NVLink errors by link", "NVLink errors per second per link and type; empty unless "
           "collectors.interconnect.nvlink_link_errors is on.", "cps",
           [(f"rate(nodewatch_nvlink_link_errors_total{sel()}[{RI}]) > 0", acc + " link {{link}} {{type}}")]),
        ts("NVLink P2P peers", "Other accelerators each one reaches peer-to-peer over NVLink, as the driver says "
           "(asked again when its links change).", "none",
           [(f"sum without (peer) (nodewatch_accelerator_nvlink_p2p_ok{sel()})", acc)]),
        ts("NVLink speed", "Per-direction link speed as the driver reports it, and the data rate left after the "
           "FEC overhead (NVLink5, NVML 13.3 on).", "Bps",
           [(f"min without (link) (nodewatch_nvlink_speed_bytes_per_second{sel()})", acc + " slowest link"),
            (f"min without (link) (nodewatch_nvlink_data_rate_bytes_per_second{sel()})",
             acc + " slowest link, data rate")]),
        ts("NVLink bit error rate", "The worst active link's bit error rate (NVLink5): effective (after FEC; the "
           "alert's), symbol and raw (before FEC); with nvlink_link_errors, each link's effective rate.", "sci",
           [(f"nodewatch_nvlink_bit_error_rate{sel()}", acc + " {{kind}}"),
            ("nodewatch_nvlink_link_bit_error_rate" + sel('kind="effective"'), acc + " link {{link}} effective")]),
        ts("NVLink FEC history", "Codewords per second by FEC history bin (symbol errors corrected in them, 0-15) "
           "over each accelerator's links; the high bins filling is a link near uncorrectable errors; with "
           "nvlink_link_errors, the top bin per link.", "cps",
           [("rate(nodewatch_nvlink_fec_codewords_total" + sel('bin!="0"') + f"[{RI}]) > 0", acc + " bin {{bin}}"),
            ("rate(nodewatch_nvlink_link_fec_codewords_total" + sel('bin="15"') + f"[{RI}]) > 0",
             acc + " link {{link}} bin 15")]),
        ts("NVLink retransmission and transmit wait", "Physical-layer retransmission: the fraction of codewords "
           "(blocks) sent again, each accelerator's links together (the alert's); PORT_XMIT_WAIT ticks per second, "
           "NVLink's congestion signal; with nvlink_link_errors, per link.", "short",
           [("sum without (counter) (rate(nodewatch_nvlink_plr_total"
             + sel('counter=~"xmit_retry_codes|xmit_retry_blocks"') + f"[{RI}]))"
             " / sum without (counter) (rate(nodewatch_nvlink_plr_total"
             + sel('counter=~"xmit_codes|xmit_blocks"') + f"[{RI}]))", acc + " retransmitted (ratio)"),
            (f"rate(nodewatch_nvlink_transmit_wait_ticks_total{sel()}[{RI}])", acc + " transmit-wait ticks/s"),
            ("rate(nodewatch_nvlink_link_plr_total" + sel('counter="xmit_retry_codes"') + f"[{RI}]) > 0",
             acc + " link {{link}} retransmitted codes/s"),
            (f"rate(nodewatch_nvlink_link_transmit_wait_ticks_total{sel()}[{RI}]) > 0",
             acc + " link {{link}} transmit-wait ticks/s")]),
        state_timeline("NVLink fabric registration", "Registration of the accelerator with the NVLink fabric of an "
                       "NVSwitch system (HGX, NVL72), done by the fabric manager; until it completes the accelerator "
                       "has no NVLink peers.", "none",
                       [(one_hot_code("nodewatch_accelerator_fabric_state", "state", FABRIC_STATES), acc)],
                       mappings=code_mappings(FABRIC_STATES)),
        state_timeline("NVLink fabric health", "1 when registration completed with success and the fabric reports no "
                       "degraded bandwidth, route recovery, unhealthy route, access-timeout recovery or incorrect "
                       "configuration; 0 otherwise, also while registration is under way.", "none",
                       [(f"nodewatch_accelerator_fabric_healthy{sel()}", acc)], mappings=HEALTHY),
        table("NVLink fabric", "Clique and cluster each accelerator registered in (the accelerators of one NVLink "
              "domain share them).", "none", [(f"nodewatch_accelerator_fabric_info{sel()}", "info")], h=6),
        table("NVLink fabric faults", "What the fabric health says now: the driver's summary (NVML 13.0 on) and each "
              "fault of its health mask that is present (degraded bandwidth, route recovery or unhealthy route, "
              "access-timeout recovery, an incorrect configuration and which).", "none",
              [(f"nodewatch_accelerator_fabric_health_summary{sel()} == 1", "summary"),
               (f"nodewatch_accelerator_fabric_fault{sel()} == 1", "fault")], h=6),
        state_timeline("IMEX daemon", "Where IMEX is configured (empty elsewhere): 1 while this node's IMEX daemon "
                       "says it is ready; the table beside it gives the state it is in otherwise.", "none",
                       [("nodewatch_imex_daemon_state" + sel('state="ready"'), "IMEX")], mappings=READY, w=8, h=6),
        table("IMEX state", "The daemon's state (as it reports it, or why it could not: unreachable, command_off, "
              "ctl_missing, no_permission, query_failed), the domain's (up, degraded, down, unknown), and how IMEX "
              "was found (nodes file or a ComputeDomain's socket, nvidia-imex.service, driver version).", "none",
              [(f"nodewatch_imex_daemon_state{sel()} == 1", "daemon"),
               (f"nodewatch_imex_domain_state{sel()} == 1", "domain"),
               (f"nodewatch_imex_info{sel()}", "info")], w=16, h=6),
        ts("IMEX domain members", "Members the nodes file lists, those the domain reports and those it reports "
           "ready, and this node's connections to the others.", "none",
           [(f"nodewatch_imex_nodes_configured{sel()}", "configured"),
            (f"nodewatch_imex_domain_nodes{sel()}", "in the domain"),
            (f"nodewatch_imex_domain_nodes_ready{sel()}", "ready"),
            (f"sum without (peer) (nodewatch_imex_peer_connected{sel()}) + 1", "connected (this node included)"),
            (f"nodewatch_imex_up{sel()}", "daemon answering")], w=12, h=6),
        table("IMEX peers not connected", "Members this node's IMEX daemon has no connection to (down, never "
              "connected, version or node-map mismatch).", "none",
              [(f"nodewatch_imex_peer_connected{sel()} == 0", "connected")], w=12, h=6),
        row("Fabric ports"),
        state_timeline("Port state", "InfiniBand port state: 4 active; 1 down, 2 init, 3 armed.", "none",
                       [(f"nodewatch_interconnect_port_state{sel()}", "{{device}}/{{port}}")],
                       mappings=[{"type": "value", "options": {
                           "1": {"text": "down", "color": "red"}, "2": {"text": "init", "color": "orange"},
                           "3": {"text": "armed", "color": "yellow"}, "4": {"text": "active", "color": "green"}}}]),
        ts("Port rate", "Signalling rate of each port.", "Bps",
           [(f"nodewatch_interconnect_port_rate_bytes_per_second{sel()}", "{{device}}/{{port}}")]),
        ts("Port throughput", "Bytes per second sent and received per port.", "Bps",
           [(f"rate(nodewatch_interconnect_port_transmitted_bytes_total{sel()}[{RI}])", "{{device}}/{{port}} tx"),
            (f"rate(nodewatch_interconnect_port_received_bytes_total{sel()}[{RI}])", "{{device}}/{{port}} rx")]),
        ts("Port errors", "Symbol, integrity, overrun, receive and discard errors per second.", "cps",
           [(f"rate(nodewatch_interconnect_port_symbol_errors_total{sel()}[{RI}])", "{{device}}/{{port}} symbol"),
            (f"rate(nodewatch_interconnect_port_local_link_integrity_errors_total{sel()}[{RI}])", "{{device}}/{{port}} integrity"),
            (f"rate(nodewatch_interconnect_port_excessive_buffer_overrun_errors_total{sel()}[{RI}])", "{{device}}/{{port}} overrun"),
            (f"rate(nodewatch_interconnect_port_receive_errors_total{sel()}[{RI}])", "{{device}}/{{port}} receive"),
            (f"rate(nodewatch_interconnect_port_transmit_discards_total{sel()}[{RI}])", "{{device}}/{{port}} discards")]),
        ts("Link flaps", "Link-downed and error-recovery events, and state changes, over the rate window.", "none",
           [(f"increase(nodewatch_interconnect_port_link_downed_total{sel()}[{RI}])", "{{device}}/{{port}} downed"),
            (f"increase(nodewatch_interconnect_port_link_error_recovery_total{sel()}[{RI}])", "{{device}}/{{port}} recovery"),
            (f"increase(nodewatch_interconnect_port_state_changes_total{sel()}[{RI}])", "{{device}}/{{port}} state changes")]),
        ts("RoCE congestion", "ECN-marked packets, CNPs sent and handled per second.", "pps",
           [(f"rate(nodewatch_interconnect_roce_ecn_marked_packets_total{sel()}[{RI}])", "{{device}}/{{port}} ECN marked"),
            (f"rate(nodewatch_interconnect_roce_cnp_sent_total{sel()}[{RI}])", "{{device}}/{{port}} CNP sent"),
            (f"rate(nodewatch_interconnect_roce_cnp_handled_total{sel()}[{RI}])", "{{device}}/{{port}} CNP handled")]),
        row("NIC"),
        ts("NIC throughput", "Bytes per second per interface.", "Bps",
           [(f"rate(nodewatch_nic_received_bytes_total{sel()}[{RI}])", "{{interface}} rx"),
            (f"rate(nodewatch_nic_transmitted_bytes_total{sel()}[{RI}])", "{{interface}} tx")]),
        ts("NIC drops and errors", "Dropped, missed and errored packets per second.", "pps",
           [(f"rate(nodewatch_nic_receive_dropped_total{sel()}[{RI}])", "{{interface}} rx dropped"),
            (f"rate(nodewatch_nic_transmit_dropped_total{sel()}[{RI}])", "{{interface}} tx dropped"),
            (f"rate(nodewatch_nic_receive_missed_total{sel()}[{RI}])", "{{interface}} rx missed"),
            (f"rate(nodewatch_nic_receive_errors_total{sel()}[{RI}])", "{{interface}} rx errors"),
            (f"rate(nodewatch_nic_transmit_errors_total{sel()}[{RI}])", "{{interface}} tx errors")]),
        ts("Qdisc drops", "Packets dropped by queueing disciplines.", "pps",
           [(f"rate(nodewatch_nic_qdisc_drops_total{sel()}[{RI}]) > 0", "{{interface}} {{qdisc}} {{handle}}")]),
        ts("Qdisc backlog", "Bytes queued in queueing disciplines.", "bytes",
           [(f"nodewatch_nic_qdisc_backlog_bytes{sel()} > 0", "{{interface}} {{qdisc}} {{handle}}")]),
        ts("FEC", "Corrected and uncorrectable FEC blocks per second.", "cps",
           [(f"rate(nodewatch_nic_fec_corrected_blocks_total{sel()}[{RI}])", "{{interface}} corrected"),
            (f"rate(nodewatch_nic_fec_uncorrectable_blocks_total{sel()}[{RI}])", "{{interface}} uncorrectable")]),
        ts("TCP health", "Retransmitted segments, timeouts, listen drops and UDP buffer errors per second.", "cps",
           [(f"rate(nodewatch_nic_tcp_retransmitted_segments_total{sel()}[{RI}])", "{{instance}} retransmits"),
            (f"rate(nodewatch_nic_tcp_timeouts_total{sel()}[{RI}])", "{{instance}} timeouts"),
            (f"rate(nodewatch_nic_tcp_listen_drops_total{sel()}[{RI}])", "{{instance}} listen drops"),
            (f"rate(nodewatch_nic_udp_receive_buffer_errors_total{sel()}[{RI}])", "{{instance}} UDP buffer errors")]),
        ts("Carrier", "Interface operational state (1 up), carrier, and carrier changes over the window.", "none",
           [(f"nodewatch_nic_up{sel()}", "{{interface}} up"),
            (f"nodewatch_nic_carrier{sel()}", "{{interface}} carrier"),
            (f"increase(nodewatch_nic_carrier_changes_total{sel()}[{RI}])", "{{interface}} carrier changes"),
            (f"increase(nodewatch_nic_carrier_up_changes_total{sel()}[{RI}])", "{{interface}} carrier up"),
            (f"increase(nodewatch_nic_carrier_down_changes_total{sel()}[{RI}])", "{{interface}} carrier down")]),
        table("Interfaces", "Driver, firmware, bus, MAC and state of each interface, with its speed and MTU.", "none",
              [(f"nodewatch_nic_info{sel()}", "info"),
               (f"nodewatch_nic_speed_bytes_per_second{sel()}", "speed B/s"),
               (f"nodewatch_nic_mtu_bytes{sel()}", "MTU")], h=8),
        ts("Receive error detail", "Receive errors by kind, per second (CRC and frame errors point at the cable or optics).", "pps",
           [(f"rate(nodewatch_nic_receive_crc_errors_total{sel()}[{RI}])", "{{interface}} CRC"),
            (f"rate(nodewatch_nic_receive_frame_errors_total{sel()}[{RI}])", "{{interface}} frame"),
            (f"rate(nodewatch_nic_receive_length_errors_total{sel()}[{RI}])", "{{interface}} length"),
            (f"rate(nodewatch_nic_receive_over_errors_total{sel()}[{RI}])", "{{interface}} overrun"),
            (f"rate(nodewatch_nic_receive_fifo_errors_total{sel()}[{RI}])", "{{interface}} FIFO"),
            (f"rate(nodewatch_nic_receive_nohandler_total{sel()}[{RI}])", "{{interface}} no handler"),
            (f"rate(nodewatch_nic_receive_otherhost_dropped_total{sel()}[{RI}])", "{{interface}} other host")]),
        ts("Transmit error detail", "Transmit errors by kind and collisions, per second.", "pps",
           [(f"rate(nodewatch_nic_transmit_aborted_errors_total{sel()}[{RI}])", "{{interface}} aborted"),
            (f"rate(nodewatch_nic_transmit_carrier_errors_total{sel()}[{RI}])", "{{interface}} carrier"),
            (f"rate(nodewatch_nic_transmit_fifo_errors_total{sel()}[{RI}])", "{{interface}} FIFO"),
            (f"rate(nodewatch_nic_transmit_heartbeat_errors_total{sel()}[{RI}])", "{{interface}} heartbeat"),
            (f"rate(nodewatch_nic_transmit_window_errors_total{sel()}[{RI}])", "{{interface}} window"),
            (f"rate(nodewatch_nic_collisions_total{sel()}[{RI}])", "{{interface}} collisions")]),
        ts("Multicast and compressed", "Multicast packets received and compressed packets, per second.", "pps",
           [(f"rate(nodewatch_nic_received_multicast_packets_total{sel()}[{RI}])", "{{interface}} multicast rx"),
            (f"rate(nodewatch_nic_received_compressed_packets_total{sel()}[{RI}])", "{{interface}} compressed rx"),
            (f"rate(nodewatch_nic_transmitted_compressed_packets_total{sel()}[{RI}])", "{{interface}} compressed tx")]),
        ts("Qdisc throughput", "Bytes and packets per second through each queueing discipline.", "Bps",
           [(f"rate(nodewatch_nic_qdisc_bytes_total{sel()}[{RI}])", "{{interface}} {{qdisc}} {{handle}}")]),
        ts("Qdisc overlimits and requeues", "Overlimits and requeues per second, and packets queued.", "none",
           [(f"rate(nodewatch_nic_qdisc_overlimits_total{sel()}[{RI}])", "{{interface}} {{qdisc}} {{handle}} overlimits/s"),
            (f"rate(nodewatch_nic_qdisc_requeues_total{sel()}[{RI}])", "{{interface}} {{qdisc}} {{handle}} requeues/s"),
            (f"rate(nodewatch_nic_qdisc_packets_total{sel()}[{RI}])", "{{interface}} {{qdisc}} {{handle}} packets/s"),
            (f"nodewatch_nic_qdisc_queue_length_packets{sel()}", "{{interface}} {{qdisc}} {{handle}} queued")]),
        ts("Driver counters", "Allow-listed driver statistics without a curated name, per second.", "cps",
           [(f"rate(nodewatch_nic_driver_counters_total{sel()}[{RI}]) > 0", "{{interface}} {{counter}}")]),
        ts("TCP/IP errors", "Listen overflows, SYN retransmits, receive-queue drops and input errors, per second.", "cps",
           [(f"rate(nodewatch_nic_tcp_listen_overflows_total{sel()}[{RI}])", "{{instance}} listen overflows"),
            (f"rate(nodewatch_nic_tcp_syn_retransmits_total{sel()}[{RI}])", "{{instance}} SYN retransmits"),
            (f"rate(nodewatch_nic_tcp_receive_queue_drops_total{sel()}[{RI}])", "{{instance}} receive-queue drops"),
            (f"rate(nodewatch_nic_tcp_input_errors_total{sel()}[{RI}])", "{{instance}} TCP input errors"),
            (f"rate(nodewatch_nic_udp_input_errors_total{sel()}[{RI}])", "{{instance}} UDP input errors"),
            (f"rate(nodewatch_nic_ip_input_errors_total{sel()}[{RI}])", "{{instance}} IP input errors")]),
        row("Congestion"),
        right_axis(ts("Throughput stability", "Each port's throughput per direction (2m) against its own median of the last "
           "30m, and the dips (under half that median while it is busy) that began in the last hour, all of them "
           "and those with drops, discards or pauses at the same time (the deployment guide's check: no periodic "
           "drops in throughput).", "Bps",
           [("instance_interface_direction:nodewatch_nic_bytes:rate2m" + sel(), "{{interface}} {{direction}}"),
            ("instance_interface_direction:nodewatch_nic_bytes:median_rate2m" + sel(),
             "{{interface}} {{direction}} median"),
            ("instance_interface_direction:nodewatch_nic_throughput_dips:count1h" + sel() + " > 0",
             "{{interface}} {{direction}} dips/h"),
            ("instance_interface_direction:nodewatch_nic_throughput_dips_with_loss:count1h" + sel() + " > 0",
             "{{interface}} {{direction}} dips with loss/h")]), ".*dips.*", "none"),
        table("Congestion diagnosis", "Each port's congestion diagnosis now (recording rules, docs/runbook.md "
              "\"Congestion\"): wire_errors, host_cannot_absorb, pfc_escalation, loss_retransmission, "
              "fabric_congestion_handled or none, and the evidence that decided it with its value.", "none",
              [("instance_interface:nodewatch_congestion_diagnosis:state" + sel() + " == 1", "diagnosis"),
               ("instance_interface:nodewatch_congestion_evidence:value" + sel(), "evidence")], w=12, h=8),
        ts("Congestion diagnosis over time", "When each port was in a diagnosis other than none.", "none",
           [("instance_interface:nodewatch_congestion_diagnosis:state" + sel('diagnosis!="none"') + " == 1",
             "{{interface}} {{diagnosis}}")], w=12, h=8),
        ts("Host side (PCIe)", "Whether the host takes what the NIC receives: the share of the last second the "
           "NIC could not write to host memory for want of PCIe credits (mlx5 outbound_pci_stalled), the seconds "
           "above 30 % per second, the PCIe congestion state (1 while above 90 % of the link until below 75 %, "
           "Linux 6.17 on) and its threshold crossings, PCIe buffer overflows and link recoveries.", "short",
           [(f"nodewatch_nic_pcie_stalled_ratio{sel()}", "{{interface}} stalled {{operation}} (ratio)"),
            (f"rate(nodewatch_nic_pcie_stalled_seconds_total{sel()}[{RI}])", "{{interface}} {{operation}} s/s above 30%"),
            (f"nodewatch_nic_pcie_congested{sel()}", "{{interface}} {{direction}} congested"),
            (f"increase(nodewatch_nic_pcie_congestion_events_total{sel()}[{RI}]) > 0",
             "{{interface}} {{direction}} {{level}} crossings"),
            (f"rate(nodewatch_nic_pcie_buffer_overflow_packets_total{sel()}[{RI}]) > 0", "{{interface}} overflow pps"),
            (f"increase(nodewatch_nic_pcie_recoveries_total{sel()}[{RI}]) > 0", "{{interface}} {{direction}} recoveries")]),
        ts("Port buffer and ECN", "The port's receive buffer passing 85 % full, packets discarded per priority for "
           "want of a buffer or by WRED, and packets marked with ECN per priority (the fabric's congestion "
           "control at work), per second.", "pps",
           [(f"rate(nodewatch_nic_receive_buffer_almost_full_total{sel()}[{RI}])", "{{interface}} buffer > 85%"),
            (f"rate(nodewatch_nic_priority_discards_total{sel()}[{RI}]) > 0", "{{interface}} prio {{priority}} {{reason}} discards"),
            (f"rate(nodewatch_nic_ecn_marked_packets_total{sel()}[{RI}]) > 0", "{{interface}} prio {{priority}} ECN marked")]),
        ts("Wire bit error rate", "The port's bit error rates before and after FEC, over its line rate "
           "(recording rules; mlx5).", "sci",
           [(f"instance_interface:nodewatch_nic_pre_fec_ber:rate5m{sel()}", "{{interface}} pre-FEC"),
            (f"instance_interface:nodewatch_nic_post_fec_ber:rate5m{sel()}", "{{interface}} post-FEC")]),
        ts("Link and module events", "Physical link-down events and cable or module events (unplug, I2C bus "
           "stuck, high temperature, shorted cable) over the window.", "none",
           [(f"increase(nodewatch_nic_link_down_events_total{sel()}[{RI}]) > 0", "{{interface}} link down"),
            (f"increase(nodewatch_nic_module_events_total{sel()}[{RI}]) > 0", "{{interface}} module {{event}}")]),
        ts("PFC pause", "Share of time paused by priority flow control, per direction and priority.", "percentunit",
           [(f"rate(nodewatch_nic_pfc_pause_seconds_total{sel()}[{RI}])", "{{interface}} {{direction}} prio {{priority}}")]),
        ts("Pause frames", "PFC and link-level pause frames per second.", "pps",
           [(f"rate(nodewatch_nic_pfc_pause_frames_total{sel()}[{RI}])", "{{interface}} {{direction}} prio {{priority}}"),
            (f"rate(nodewatch_nic_pause_frames_total{sel()}[{RI}])", "{{interface}} {{direction}} link")]),
        ts("Discards and out-of-buffer", "Packets discarded by the port or a priority, and receive out-of-buffer drops.", "pps",
           [(f"rate(nodewatch_nic_discards_total{sel()}[{RI}])", "{{interface}} {{direction}} prio {{priority}}"),
            (f"rate(nodewatch_nic_out_of_buffer_total{sel()}[{RI}])", "{{interface}} out of buffer"),
            (f"increase(nodewatch_nic_pause_storm_events_total{sel()}[{RI}])", "{{interface}} pause storm {{level}}")]),
        row("Storage"),
        ts("Block read latency", "Average time per completed read.", "s",
           [(f"rate(nodewatch_storage_read_time_seconds_total{sel()}[{RI}]) / rate(nodewatch_storage_reads_completed_total{sel()}[{RI}])", "{{device}}")]),
        ts("Block write latency", "Average time per completed write.", "s",
           [(f"rate(nodewatch_storage_write_time_seconds_total{sel()}[{RI}]) / rate(nodewatch_storage_writes_completed_total{sel()}[{RI}])", "{{device}}")]),
        ts("Block throughput", "Bytes read and written per second.", "Bps",
           [(f"rate(nodewatch_storage_read_bytes_total{sel()}[{RI}])", "{{device}} read"),
            (f"rate(nodewatch_storage_written_bytes_total{sel()}[{RI}])", "{{device}} write")]),
        ts("Block queue", "Average queue length (weighted I/O time) and utilization.", "none",
           [(f"rate(nodewatch_storage_io_time_weighted_seconds_total{sel()}[{RI}])", "{{device}} queue"),
            (f"rate(nodewatch_storage_io_time_seconds_total{sel()}[{RI}])", "{{device}} busy")]),
        ts("Merged, discarded and flushed", "Reads and writes merged, discards and flushes completed, per second.", "ops",
           [(f"rate(nodewatch_storage_reads_merged_total{sel()}[{RI}])", "{{device}} reads merged"),
            (f"rate(nodewatch_storage_writes_merged_total{sel()}[{RI}])", "{{device}} writes merged"),
            (f"rate(nodewatch_storage_discards_completed_total{sel()}[{RI}])", "{{device}} discards"),
            (f"rate(nodewatch_storage_discards_merged_total{sel()}[{RI}])", "{{device}} discards merged"),
            (f"rate(nodewatch_storage_flushes_completed_total{sel()}[{RI}])", "{{device}} flushes")]),
        ts("Flush and discard latency", "Average time per completed flush and per completed discard.", "s",
           [(f"rate(nodewatch_storage_flush_time_seconds_total{sel()}[{RI}]) / rate(nodewatch_storage_flushes_completed_total{sel()}[{RI}])", "{{device}} flush"),
            (f"rate(nodewatch_storage_discard_time_seconds_total{sel()}[{RI}]) / rate(nodewatch_storage_discards_completed_total{sel()}[{RI}])", "{{device}} discard")]),
        ts("Discarded bytes", "Bytes discarded (TRIM) per second.", "Bps",
           [(f"rate(nodewatch_storage_discarded_bytes_total{sel()}[{RI}])", "{{device}}")]),
        ts("I/O in flight", "Requests issued to the device and not yet completed, against its queue depth.", "none",
           [(f"nodewatch_storage_io_in_progress{sel()}", "{{device}}"),
            (f"nodewatch_storage_queue_depth{sel()}", "{{device}} queue depth")]),
        table("Block devices", "Model, serial and rotational flag of each device, with its logical block size.", "none",
              [(f"nodewatch_storage_device_info{sel()}", "info"),
               (f"nodewatch_storage_logical_block_size_bytes{sel()}", "block size")], h=8),
        ts("NFS RTT per operation", "Average round-trip time per NFS operation, by mount and operation.", "s",
           [(f"rate(nodewatch_storage_nfs_rtt_seconds_total{sel()}[{RI}]) / rate(nodewatch_storage_nfs_operations_total{sel()}[{RI}])", "{{mountpoint}} {{op}}")]),
        ts("NFS operations", "NFS operations per second, and major timeouts and retransmits.", "ops",
           [(f"rate(nodewatch_storage_nfs_operations_total{sel()}[{RI}])", "{{mountpoint}} {{op}}"),
            (f"rate(nodewatch_storage_nfs_major_timeouts_total{sel()}[{RI}]) > 0", "{{mountpoint}} {{op}} major timeouts"),
            (f"rate(nodewatch_storage_nfs_transport_retransmits_total{sel()}[{RI}]) > 0", "{{mountpoint}} retransmits")]),
        ts("NFS bytes", "Bytes sent and received per second by mount and operation (RPC headers included).", "Bps",
           [(f"sum without (op) (rate(nodewatch_storage_nfs_sent_bytes_total{sel()}[{RI}]))", "{{mountpoint}} sent"),
            (f"sum without (op) (rate(nodewatch_storage_nfs_received_bytes_total{sel()}[{RI}]))", "{{mountpoint}} received")]),
        ts("NFS queue and execute time", "Average client queue time and whole execute time per operation.", "s",
           [(f"rate(nodewatch_storage_nfs_queue_seconds_total{sel()}[{RI}]) / rate(nodewatch_storage_nfs_operations_total{sel()}[{RI}])", "{{mountpoint}} {{op}} queue"),
            (f"rate(nodewatch_storage_nfs_execute_seconds_total{sel()}[{RI}]) / rate(nodewatch_storage_nfs_operations_total{sel()}[{RI}])", "{{mountpoint}} {{op}} execute")]),
        ts("NFS errors and retransmissions", "Operations that ended in an error, and transmissions beyond one per operation, per second.", "ops",
           [(f"rate(nodewatch_storage_nfs_errors_total{sel()}[{RI}])", "{{mountpoint}} {{op}} errors"),
            (f"rate(nodewatch_storage_nfs_transmissions_total{sel()}[{RI}]) - rate(nodewatch_storage_nfs_operations_total{sel()}[{RI}])", "{{mountpoint}} {{op}} retransmissions")]),
        ts("NFS transport", "RPC transport sends, receives, bad XIDs and (re)connects per second, per mount.", "ops",
           [(f"rate(nodewatch_storage_nfs_transport_sends_total{sel()}[{RI}])", "{{mountpoint}} sends"),
            (f"rate(nodewatch_storage_nfs_transport_receives_total{sel()}[{RI}])", "{{mountpoint}} receives"),
            (f"rate(nodewatch_storage_nfs_transport_bad_xids_total{sel()}[{RI}])", "{{mountpoint}} bad XIDs"),
            (f"increase(nodewatch_storage_nfs_transport_connects_total{sel()}[{RI}])", "{{mountpoint}} connects")]),
        table("NFS mounts", "Each NFS mount with its server, transport and protocol version.", "none",
              [(f"nodewatch_storage_nfs_mount_info{sel()}", "info")], h=8),
        ts("Since last probe success", "Seconds since each probe operation last succeeded.", "s",
           [(f"time() - nodewatch_storage_probe_last_success_timestamp_seconds{sel()}", "{{path}} {{operation}}")]),
        ts("Probe latency p99", "99th percentile of each probe operation.", "s",
           [(f"histogram_quantile(0.99, sum by (instance, path, operation, le) (rate(nodewatch_storage_probe_duration_seconds_bucket{sel()}[{RI}])))", "{{path}} {{operation}}")]),
        ts("Probe health", "Last probe result (1 success), and 1 while a probe is stuck past its timeout.", "none",
           [(f"nodewatch_storage_probe_success{sel()}", "{{path}} {{operation}} success"),
            (f"nodewatch_storage_probe_stuck{sel()}", "{{path}} stuck")]),
        ts("Helpers held by the kernel", "nodewatch's helper processes (the file-system calls on probe paths and the textfile directory): running, and abandoned after their timeout but still held by the kernel on a mount that does not answer (state D).", "none",
           [(f"nodewatch_helper_processes{sel()}", "{{state}}"),
            (f"nodewatch_storage_probe_abandoned_helpers{sel()}", "probe abandoned"),
            (f"nodewatch_textfile_abandoned_helpers{sel()}", "textfile abandoned")]),
        row("Power and cooling (BMC)"),
        state_timeline("BMC answering", "1 while the BMC answers the bmc collector (in-band or over the network); "
                       "empty where the node has no IPMI device and no host is set.", "none",
                       [(f"nodewatch_bmc_up{sel()}", "BMC")], mappings=UP_DOWN, w=6, h=6),
        table("BMC sensors not nominal", "Every BMC sensor FreeIPMI reads at a warning (1) or critical (2): a failed "
              "fan or PSU, a temperature past its critical threshold, a leak where the interpretation names it; and "
              "the BMC itself (firmware, manufacturer, how it is reached).", "none",
              [(f"nodewatch_bmc_sensor_state{sel()} >= 1", "state"),
               (f"nodewatch_bmc_info{sel()}", "BMC")], w=18, h=6),
        ts("BMC temperatures", "Every temperature sensor of the BMC (inlet, board, CPUs, PSUs).", "celsius",
           [(f"nodewatch_bmc_temperature_celsius{sel()}", "{{sensor}}")]),
        ts("Fans", "Every fan's speed.", "rpm", [(f"nodewatch_bmc_fan_speed_rpm{sel()}", "{{sensor}}")]),
        ts("Power", "The node's draw as DCMI measures it, and every power sensor (PSU input and output).", "watt",
           [(f"nodewatch_bmc_node_power_watts{sel()}", "node (DCMI)"),
            (f"nodewatch_bmc_power_watts{sel()}", "{{sensor}}")]),
        ts("Voltages, currents and other sensors", "Every voltage and current sensor, and the analog sensors of no "
           "other unit (flows, percentages), with their unit.", "none",
           [(f"nodewatch_bmc_voltage_volts{sel()}", "{{sensor}} V"),
            (f"nodewatch_bmc_current_amperes{sel()}", "{{sensor}} A"),
            (f"nodewatch_bmc_sensor_value{sel()}", "{{sensor}} {{unit}}")]),
        ts("BMC sensors by state", "How many sensors are nominal, at a warning, critical, or unknown (no reading).",
           "none", [(f"nodewatch_bmc_sensors{sel()}", "{{state}}")], min=0),
        ts("System Event Log", "New SEL entries over the rate window by sensor type and state, and the SEL's entries "
           "and free bytes (a full SEL records nothing more).", "none",
           [(f"increase(nodewatch_bmc_sel_events_total{sel()}[{RI}]) > 0", "{{type}} {{state}}"),
            (f"nodewatch_bmc_sel_entries{sel()}", "entries"),
            (f"nodewatch_bmc_sel_free_bytes{sel()}", "free bytes")]),
        row("Kernel events and host memory"),
        ts("Kernel events", "Hardware and system events in the kernel log, by event and the device the record "
           "names, over the rate window (counted once across nodewatch restarts).", "none",
           [(f"increase(nodewatch_kernel_events_total{sel()}[{RI}]) > 0", "{{event}} {{device}}")]),
        table("Kernel events in range", "Every kernel log event over the dashboard's range, by event and device "
              "(a series that first appeared in the range counts whole).", "none",
              [(f"sum by (instance, event, device) ((increase(nodewatch_kernel_events_total{sel()}[$__range]) "
                f"and last_over_time(nodewatch_kernel_events_total{sel()}[$__range] offset $__range)) or nodewatch_kernel_events_total{sel()}) > 0",
                "events")], w=12),
        ts("XIDs and SXIDs (kernel log)", "NVIDIA XIDs by GPU PCI address and code, and NVSwitch SXIDs, from the "
           "kernel log: also those logged while nodewatch restarted and on nodes where NVML hangs.", "none",
           [(f"increase(nodewatch_kernel_xid_events_total{sel()}[{RI}]) > 0", "{{pci_bus_id}} xid {{xid}}"),
            (f"increase(nodewatch_kernel_sxid_events_total{sel()}[{RI}]) > 0", "{{pci_bus_id}} sxid {{sxid}}")]),
        ts("Kernel log", "1 while the kernel log is read; records the ring buffer overwrote before nodewatch read "
           "them, over the rate window; seconds since the last record.", "none",
           [(f"nodewatch_kernel_log_up{sel()}", "{{instance}} up"),
            (f"increase(nodewatch_kernel_log_lost_records_total{sel()}[{RI}])", "{{instance}} lost records"),
            (f"time() - nodewatch_kernel_log_last_record_timestamp_seconds{sel()}", "{{instance}} since last record (s)")]),
        ts("Host memory errors", "Corrected and uncorrected host memory errors per second (EDAC), by memory "
           "controller and module slot; an empty slot is what the driver could not place.", "cps",
           [(f"rate(nodewatch_memory_corrected_errors_total{sel()}[{RI}]) > 0", "{{controller}} {{dimm}} corrected"),
            (f"rate(nodewatch_memory_uncorrected_errors_total{sel()}[{RI}]) > 0", "{{controller}} {{dimm}} uncorrected")]),
        table("Memory modules", "Each populated module EDAC knows, with its label (the board's name for the "
              "slot), its controller's name, and its corrected and uncorrected errors over the range.", "none",
              [(f"nodewatch_memory_module_info{sel()}", "info"),
               (f"nodewatch_memory_controller_info{sel()}", "controller"),
               (f"increase(nodewatch_memory_corrected_errors_total{sel()}[$__range])", "corrected"),
               (f"increase(nodewatch_memory_uncorrected_errors_total{sel()}[$__range])", "uncorrected")], h=8),
        row("Network mesh"),
        ts("Round trip per peer (p99)", "p99 of the mesh probes' round trips to each peer, per rail, the "
           "responder's turnaround taken out. Empty unless collectors.mesh is on.", "s",
           [(f"histogram_quantile(0.99, rate(nodewatch_mesh_rtt_seconds_bucket{sel()}[{RI}]))", "{{peer}} {{rail}}")]),
        ts("Probes lost per peer", "Share of the mesh probes to each peer with no valid answer in time.",
           "percentunit",
           [(f"rate(nodewatch_mesh_lost_total{sel()}[{RI}]) / (rate(nodewatch_mesh_sent_total{sel()}[{RI}]) > 0)",
             "{{peer}} {{rail}}")], min=0),
        ts("Peers probed", "Peers probed now against those the peers file lists, per rail (a sample beyond "
           "collectors.mesh.max_peers).", "none",
           [(f"nodewatch_mesh_peers{sel()}", "probed {{rail}}"),
            (f"nodewatch_mesh_listed_peers{sel()}", "listed {{rail}}")]),
        ts("Responder", "Probes this node answered per second, and packets it dropped by reason (forged, "
           "replayed, stale or rate-limited probes; late replies); the responder's socket (1 open).", "pps",
           [(f"rate(nodewatch_mesh_answered_total{sel()}[{RI}])", "answered"),
            (f"rate(nodewatch_mesh_dropped_packets_total{sel()}[{RI}]) > 0", "dropped {{reason}}"),
            (f"nodewatch_mesh_responder_up{sel()}", "socket open")]),
        ts("RTT samples without kernel timestamps", "Round trips per second, per rail, timed in user space "
           "because the kernel gave no transmit or receive timestamp (less exact).", "cps",
           [(f"rate(nodewatch_mesh_user_timestamps_total{sel()}[{RI}])", "{{rail}}")]),
        row("CPU uncore counters"),
        ts("Uncore events", "Each event of collectors.uncore.events per second, summed over its PMU's CPUs and "
           "scaled: in the unit the legend names (bytes where sysfs gives a byte unit; none: a count). Empty "
           "unless collectors.uncore is on.", "none",
           [(f"rate(nodewatch_uncore_events_total{sel()}[{RI}])", "{{pmu}}/{{event}}/ {{unit}}")]),
        ts("Uncore counting", "1 while every event asked of a PMU counts (0: missing PMU, no CAP_PERFMON, a "
           "refused event: the reason in the collector's errors); the part of the interval each event was on "
           "its PMU (below 1: multiplexed, extrapolated); 1 where the kernel's scale was corrected.", "none",
           [(f"nodewatch_uncore_pmu_up{sel()}", "{{pmu}} up"),
            (f"nodewatch_uncore_event_running_ratio{sel()} < 1", "{{pmu}}/{{event}}/ running"),
            (f"nodewatch_uncore_event_scale_corrected{sel()}", "{{pmu}}/{{event}}/ scale corrected")]),
        row("Exporter health"),
        state_timeline("Collectors up", "1 while the collector's last collection succeeded within its timeout.", "none",
                       [(f"nodewatch_collector_up{sel()}", "{{instance}} {{collector}}")], mappings=UP_DOWN),
        ts("Collection duration", "Duration of each collector's last collection.", "s",
           [(f"nodewatch_collector_duration_seconds{sel()}", "{{instance}} {{collector}}")]),
        ts("Duration over interval", "Last collection's duration over the collector's interval; near 1 it cannot keep up.",
           "percentunit",
           [(f"nodewatch_collector_duration_seconds{sel()} / nodewatch_collector_interval_seconds{sel()}", "{{instance}} {{collector}}")]),
        ts("Since last success", "Seconds since each collector last succeeded.", "s",
           [(f"time() - nodewatch_collector_last_success_timestamp_seconds{sel()}", "{{instance}} {{collector}}")]),
        ts("Configuration", "1 if the last load or reload succeeded; seconds since the last successful one.", "none",
           [(f"nodewatch_config_last_reload_successful{sel()}", "{{instance}} ok"),
            (f"time() - nodewatch_config_last_reload_success_timestamp_seconds{sel()}", "{{instance}} seconds since")]),
        ts("HTTP requests", "Responses per second by path and status code (401: refused credentials, "
           "429: over the web configuration's rate limit).", "reqps",
           [(f"rate(nodewatch_http_requests_total{sel()}[{RI}])", "{{instance}} {{path}} {{code}}")]),
        ts("TLS handshake errors", "TLS handshakes that failed (protocol, certificate, client certificate) or "
           "did not complete within server.read_timeout, per second.", "cps",
           [(f"rate(nodewatch_http_tls_handshake_errors_total{sel()}[{RI}]) > 0", "{{instance}} {{reason}}")]),
        ts("HTTP connections dropped", "Connections closed per second: refused with 503 (every slot busy "
           "serving, or one address past server.max_connections_per_client), evicted for a new connection's "
           "slot (a client waiting or not reading), or not read within server.write_timeout.", "cps",
           [(f"rate(nodewatch_http_connections_dropped_total{sel()}[{RI}]) > 0", "{{instance}} {{reason}}")]),
        ts("File descriptors", "Open file descriptors over the limit.", "percentunit",
           [(f"process_open_fds{sel()} / process_max_fds{sel()}", "{{instance}}")]),
        ts("Uptime", "Seconds since nodewatchd started.", "s",
           [(f"time() - process_start_time_seconds{sel()}", "{{instance}}")]),
        ts("Textfile inputs", "1 if each *.prom file was taken, 0 if refused; and its age.", "none",
           [(f"nodewatch_textfile_file_valid{sel()}", "{{instance}} {{file}} valid"),
            (f"time() - nodewatch_textfile_file_mtime_seconds{sel()}", "{{instance}} {{file}} age (s)")]),
        ts("Collector errors", "Skipped values and failures per second, by collector and reason.", "cps",
           [(f"rate(nodewatch_collector_errors_total{sel()}[{RI}]) > 0", "{{instance}} {{collector}} {{reason}}")]),
        ts("Exporter CPU", "CPU seconds per second used by nodewatchd.", "percentunit",
           [(f"rate(process_cpu_seconds_total{sel()}[{RI}])", "{{instance}} cpu")]),
        ts("Exporter memory", "Resident memory of nodewatchd.", "bytes",
           [(f"process_resident_memory_bytes{sel()}", "{{instance}}")]),
        ts("Scrape duration", "How long Prometheus takes to scrape nodewatch.", "s",
           [(f"scrape_duration_seconds{sel()}", "{{instance}}")]),
    ]
    return dashboard("nodewatch-node", "nodewatch / Node",
                     "One node: nodewatch's verdict per subsystem with its current problems and the expected "
                     "inventory against what is measured, then one row per subsystem: accelerators, host links, "
                     "NVLink, fabric ports, NIC, storage, kernel events and host memory, exporter.",
                     items, ["node"])


# ---------------------------------------------------------------------------
# Fabric.


def fabric():
    port = "{{instance}} {{device}}/{{port}}"
    items = [
        row("Throughput"),
        ts("Transmit per port", "Bytes per second sent per fabric port.", "Bps",
           [(f"rate(nodewatch_interconnect_port_transmitted_bytes_total{sel()}[{RI}])", port)]),
        ts("Receive per port", "Bytes per second received per fabric port.", "Bps",
           [(f"rate(nodewatch_interconnect_port_received_bytes_total{sel()}[{RI}])", port)]),
        ts("Utilization of the port rate", "Larger of transmit and receive over the port's signalling rate.", "percentunit",
           [(f"((rate(nodewatch_interconnect_port_transmitted_bytes_total{sel()}[{RI}]) "
             f">= rate(nodewatch_interconnect_port_received_bytes_total{sel()}[{RI}])) "
             f"or rate(nodewatch_interconnect_port_received_bytes_total{sel()}[{RI}])) "
             f"/ on (job, instance, device, port) group_left () nodewatch_interconnect_port_rate_bytes_per_second{sel()}",
             port)],
           min=0, max=1),
        ts("Packets", "Packets per second sent and received.", "pps",
           [(f"rate(nodewatch_interconnect_port_transmitted_packets_total{sel()}[{RI}])", port + " tx"),
            (f"rate(nodewatch_interconnect_port_received_packets_total{sel()}[{RI}])", port + " rx")]),
        ts("Transmit wait", "Ticks per second a port had data to send but no credit: back-pressure from the fabric.", "cps",
           [(f"rate(nodewatch_interconnect_port_transmit_wait_total{sel()}[{RI}])", port)]),
        ts("Port rate", "Signalling rate per port; a port below its peers trained down.", "Bps",
           [(f"nodewatch_interconnect_port_rate_bytes_per_second{sel()}", port)]),
        ts("Port width", "Lanes per port (4X is 4); a port narrower than its peers trained down.", "none",
           [(f"nodewatch_interconnect_port_width{sel()}", port)]),
        row("Link state"),
        state_timeline("Port state over time", "4 active; anything else is a port down or training.", "none",
                       [(f"nodewatch_interconnect_port_state{sel()}", port)],
                       mappings=[{"type": "value", "options": {
                           "1": {"text": "down", "color": "red"}, "2": {"text": "init", "color": "orange"},
                           "3": {"text": "armed", "color": "yellow"}, "4": {"text": "active", "color": "green"}}}],
                       w=24, h=10),
        state_timeline("Physical state over time", "5 LinkUp; 2 polling, 3 disabled, 7 link error recovery.", "none",
                       [(f"nodewatch_interconnect_port_physical_state{sel()}", port)],
                       mappings=[{"type": "value", "options": {"5": {"text": "LinkUp", "color": "green"}}},
                                 {"type": "range", "options": {"from": 0, "to": 4, "result": {"text": "not up", "color": "red"}}}],
                       w=24, h=10),
        ts("Link downed and recoveries", "Link-downed and link-error-recovery events over the rate window.", "none",
           [(f"increase(nodewatch_interconnect_port_link_downed_total{sel()}[{RI}]) > 0", port + " downed"),
            (f"increase(nodewatch_interconnect_port_link_error_recovery_total{sel()}[{RI}]) > 0", port + " recovery")]),
        table("Ports", "Every port with its link layer, network device, firmware and board.", "none",
              [(f"nodewatch_interconnect_port_info{sel()}", "info")], h=8, w=12),
        row("Errors"),
        ts("Symbol errors", "Symbol errors per second (IBTA BER 1e-12 allows about 120 per hour).", "cps",
           [(f"rate(nodewatch_interconnect_port_symbol_errors_total{sel()}[{RI}])", port)]),
        ts("Integrity and overrun", "Local link integrity and excessive buffer overrun errors per second.", "cps",
           [(f"rate(nodewatch_interconnect_port_local_link_integrity_errors_total{sel()}[{RI}])", port + " integrity"),
            (f"rate(nodewatch_interconnect_port_excessive_buffer_overrun_errors_total{sel()}[{RI}])", port + " overrun")]),
        ts("Receive errors", "Receive errors and remote physical errors per second.", "cps",
           [(f"rate(nodewatch_interconnect_port_receive_errors_total{sel()}[{RI}])", port),
            (f"rate(nodewatch_interconnect_port_receive_remote_physical_errors_total{sel()}[{RI}])", port + " remote physical")]),
        ts("Discards", "Transmit discards and VL15 drops per second.", "cps",
           [(f"rate(nodewatch_interconnect_port_transmit_discards_total{sel()}[{RI}])", port + " discards"),
            (f"rate(nodewatch_interconnect_port_vl15_dropped_total{sel()}[{RI}])", port + " VL15")]),
        ts("Other PMA counters", "Port counters without a curated name (multicast, unicast, ...), per second.", "cps",
           [(f"rate(nodewatch_interconnect_port_pma_total{sel()}[{RI}]) > 0", port + " {{counter}}")]),
        ts("Other hardware counters", "Hardware counters without a curated name, per second.", "cps",
           [(f"rate(nodewatch_interconnect_hw_counters_total{sel()}[{RI}]) > 0", port + " {{counter}}")]),
        row("Congestion (RoCE)"),
        table("Ports by congestion diagnosis", "How many ports of the selected nodes are in each congestion "
              "diagnosis now (docs/runbook.md, \"Congestion\").", "none",
              [("count by (diagnosis) (instance_interface:nodewatch_congestion_diagnosis:state" + sel() + " == 1)",
                "ports")], w=12, h=8),
        table("Congested ports", "The ports in a diagnosis other than none (the evidence that decided it: the node "
              "dashboard's Congestion diagnosis).",
              "none",
              [("instance_interface:nodewatch_congestion_diagnosis:state" + sel('diagnosis!="none"') + " == 1",
                "diagnosis")], w=12, h=8),
        ts("ECN marked", "RoCE packets that arrived ECN-marked, per second.", "pps",
           [(f"rate(nodewatch_interconnect_roce_ecn_marked_packets_total{sel()}[{RI}])", port)]),
        ts("CNPs", "Congestion notification packets sent (as receiver), handled and ignored (as sender), per second.", "pps",
           [(f"rate(nodewatch_interconnect_roce_cnp_sent_total{sel()}[{RI}])", port + " sent"),
            (f"rate(nodewatch_interconnect_roce_cnp_handled_total{sel()}[{RI}])", port + " handled"),
            (f"rate(nodewatch_interconnect_roce_cnp_ignored_total{sel()}[{RI}])", port + " ignored")]),
        ts("RoCE drops and retries", "Out-of-buffer, out-of-sequence, sequence errors, ACK timeouts and retransmits per second.", "cps",
           [(f"rate(nodewatch_interconnect_roce_out_of_buffer_total{sel()}[{RI}])", port + " out of buffer"),
            (f"rate(nodewatch_interconnect_roce_out_of_sequence_total{sel()}[{RI}])", port + " out of sequence"),
            (f"rate(nodewatch_interconnect_roce_packet_sequence_errors_total{sel()}[{RI}])", port + " sequence errors"),
            (f"rate(nodewatch_interconnect_roce_local_ack_timeouts_total{sel()}[{RI}])", port + " ACK timeouts"),
            (f"rate(nodewatch_interconnect_roce_retransmits_total{sel()}[{RI}])", port + " retransmits")]),
        ts("NIC PFC pause (RoCE netdevs)", "Share of time paused by PFC on each interface, per direction and priority.", "percentunit",
           [(f"rate(nodewatch_nic_pfc_pause_seconds_total{sel()}[{RI}])", "{{instance}} {{interface}} {{direction}} prio {{priority}}")]),
        row("NVLink fabric (NVSwitch)"),
        table("NVLink cliques", "Accelerators registered in each NVLink cluster and clique: the accelerators of one "
              "NVLink domain (an NVL72 rack spans several nodes) share them.", "none",
              [(f"count by (cluster_uuid, clique_id) (nodewatch_accelerator_fabric_info{sel()})", "accelerators")],
              w=12, h=8),
        state_timeline("NVLink fabric health per node", "The least healthy accelerator of each node: 1 when every "
                       "accelerator completed registration and its fabric is healthy.", "none",
                       [(f"min by (instance) (nodewatch_accelerator_fabric_healthy{sel()})", "{{instance}}")],
                       mappings=HEALTHY, w=12, h=8),
        state_timeline("IMEX daemon per node", "Nodes where IMEX is configured: 1 while the node's IMEX daemon "
                       "says it is ready.", "none",
                       [("nodewatch_imex_daemon_state" + sel('state="ready"'), "{{instance}}")],
                       mappings=READY, w=12, h=8),
        table("IMEX members not reached", "Members of an IMEX domain that other nodes have no IMEX connection to, "
              "with how many nodes see it so (all of them: the member is down; one: the path between two).",
              "none", [(f"count by (peer) (nodewatch_imex_peer_connected{sel()} == 0)", "nodes")], w=12, h=8),
    ]
    return dashboard("nodewatch-fabric", "nodewatch / Fabric",
                     "InfiniBand and RoCE ports: throughput, link state over time, errors and congestion; NVLink "
                     "fabric registration and health; IMEX.", items, ["fabric"])


# ---------------------------------------------------------------------------
# Job: the nodes and accelerators of one Slurm job or Kubernetes pod.

# The job's variables, each narrowing the next: scheduler, then for
# Kubernetes namespace and pod, then job_id (the Slurm job id or SLUID, the
# pod UID). Slurm jobs have no namespace or pod, a pod known by its names
# only no job_id: the all values (.*) match an absent label.
JOB_SEL = 'scheduler=~"$scheduler", namespace=~"$namespace", pod=~"$pod", job_id=~"$job_id"'
WHOLE = 'gpu_instance=""'
MIG_INSTANCE = 'gpu_instance!=""'
SELECTED_JOB_ID = 'job_id=~"$job_id"'
# How long after a job left an accelerator its health panels still show it:
# an XID that ends the job is counted once the job's processes are gone.
TAIL = "10m"


def job_variables():
    base = 'nodewatch_accelerator_job_info{cluster=~"$cluster", job=~"$job", instance=~"$instance"'
    return [
        query_var("scheduler", "scheduler", f"label_values({base}}}, scheduler)", ".*"),
        query_var("namespace", "namespace", f'label_values({base}, scheduler=~"$scheduler"}}, namespace)', ".*"),
        query_var("pod", "pod", f'label_values({base}, scheduler=~"$scheduler", namespace=~"$namespace"}}, pod)', ".*"),
        query_var("job_id", "job_id", f'label_values({base}, scheduler=~"$scheduler", namespace=~"$namespace", '
                  f'pod=~"$pod"}}, job_id)', ".*"),
    ]


def appeared(counter):
    """The increase of `counter` (a selector) over the range, a series that
    first appeared within the range counted whole (lint.py's idiom)."""
    return (f"(increase({counter}[$__range]) and last_over_time({counter}[$__range] offset $__range)) "
            f"or {counter}")


def job():
    acc = "{{instance}} {{accelerator}}"
    port = "{{instance}} {{device}}/{{port}}"
    info = f"nodewatch_accelerator_job_info{sel(JOB_SEL)}"
    info_whole = f"nodewatch_accelerator_job_info{sel(JOB_SEL + ', ' + WHOLE)}"
    info_mig = f"nodewatch_accelerator_job_info{sel(JOB_SEL + ', ' + MIG_INSTANCE)}"
    # `X and <these>`: X's series of the job's accelerators now, during the
    # range, and while the job ran there and TAIL after; of its nodes now
    # and with TAIL after.
    now = f"on ({ACC}) {info}"
    in_range = f"on ({ACC}) max_over_time({info}[$__range])"
    tail = f"on ({ACC}) max_over_time({info}[{TAIL}])"
    nodes_now = f"on ({NODE}) group by ({NODE}) ({info})"
    nodes_tail = f"on ({NODE}) group by ({NODE}) (max_over_time({info}[{TAIL}]))"
    by_acc = "cluster, instance, accelerator, uuid"
    # SM activity of the job's accelerators: whole ones, and the GPU
    # instances of MIG ones.
    sm_active = (f"(nodewatch_accelerator_sm_active_ratio{sel()} and on ({ACC}) {info_whole}) or "
                 f"(nodewatch_accelerator_gpu_instance_sm_active_ratio{sel()} and on ({ACC}, gpu_instance) {info_mig})")
    job_memory = f"nodewatch_accelerator_process_memory_used_bytes{sel(SELECTED_JOB_ID)}"
    xids = appeared(f"nodewatch_accelerator_xid_errors_total{sel()}")
    tail_note = (f" On the accelerators of the job while it ran there and for {TAIL} after it left (an error that "
                 "ends the job is counted once its processes are gone).")

    health = table(
        "Health of the job's accelerators",
        "Each accelerator the job ran on during the range, now: up (1 answering its driver), the driver's recovery "
        "action, XIDs (every code) and uncorrected ECC errors over the range, thermal or hardware throttle reasons "
        "active, NVLink fabric health (NVSwitch systems), SM activity (GPM) and the hottest core sensor.", "none",
        [(f"max by ({by_acc}) (nodewatch_accelerator_up{sel()} and {in_range})", "up"),
         (f"max by ({by_acc}) ({one_hot_code('nodewatch_accelerator_recovery_action', 'action', RECOVERY_ACTIONS, OTHER_ACTION)}"
          f" and {in_range})", "recovery action"),
         (f"sum by ({by_acc}) (({xids}) and {in_range})", "XIDs in range"),
         (f"sum by ({by_acc}) (increase(nodewatch_accelerator_ecc_errors_total{sel(UNCORRECTED)}[$__range]) and {in_range})",
          "uncorrected ECC in range"),
         (f"count by ({by_acc}) (nodewatch_accelerator_clock_throttle_active{sel(HARD_THROTTLE)} == 1 and {in_range})",
          "throttle reasons"),
         (f"max by ({by_acc}) (nodewatch_accelerator_fabric_healthy{sel()} and {in_range})", "NVLink fabric"),
         (f"max by ({by_acc}) (nodewatch_accelerator_sm_active_ratio{sel()} and {in_range})", "SM active"),
         (f"max by ({by_acc}) (nodewatch_accelerator_temperature_celsius{sel(NOT_MEMORY)} and {in_range})", "°C")],
        h=10)
    health["fieldConfig"]["overrides"] = [
        {"matcher": {"id": "byName", "options": "up"}, "properties": [{"id": "mappings", "value": UP_DOWN}]},
        {"matcher": {"id": "byName", "options": "recovery action"},
         "properties": [{"id": "mappings", "value": code_mappings(RECOVERY_ACTIONS, OTHER_ACTION)}]},
        {"matcher": {"id": "byName", "options": "NVLink fabric"}, "properties": [{"id": "mappings", "value": HEALTHY}]},
        {"matcher": {"id": "byName", "options": "SM active"}, "properties": [{"id": "unit", "value": "percentunit"}]},
        {"matcher": {"id": "byName", "options": "°C"}, "properties": [{"id": "unit", "value": "celsius"}]},
        node_link("instance"),
    ]
    node_rows = table(
        "Nodes of the job",
        "Each node the job ran on during the range: its accelerators the job had, the node verdict's current "
        "problems, and over the range the fabric port errors (symbol, link integrity, receive) and NIC packets "
        "dropped (receive, missed, transmit).", "none",
        [(f"count by (cluster, instance) (group by ({ACC}) (max_over_time({info}[$__range])))", "accelerators"),
         (f"sum by (cluster, instance) (nodewatch_node_problems{sel()} and on ({NODE}) max_over_time({info}[$__range]))",
          "verdict problems"),
         (f"sum by (cluster, instance) ((increase(nodewatch_interconnect_port_symbol_errors_total{sel()}[$__range]) "
          f"+ increase(nodewatch_interconnect_port_local_link_integrity_errors_total{sel()}[$__range]) "
          f"+ increase(nodewatch_interconnect_port_receive_errors_total{sel()}[$__range])) "
          f"and on ({NODE}) max_over_time({info}[$__range]))", "fabric port errors"),
         (f"sum by (cluster, instance) ((increase(nodewatch_nic_receive_dropped_total{sel()}[$__range]) "
          f"+ increase(nodewatch_nic_receive_missed_total{sel()}[$__range]) "
          f"+ increase(nodewatch_nic_transmit_dropped_total{sel()}[$__range])) "
          f"and on ({NODE}) max_over_time({info}[$__range]))", "NIC drops")],
        h=8)
    node_rows["fieldConfig"]["overrides"] = [node_link("instance")]

    items = [
        row("Job"),
        stat("Nodes", "Nodes the job runs on now.", "none",
             [(f"count(group by ({NODE}) ({info})) or vector(0)", "nodes")], w=3),
        stat("Accelerators", "Accelerators the job runs on now (a MIG-partitioned one counts once).", "none",
             [(f"count(group by ({ACC}) ({info})) or vector(0)", "accelerators")], w=3),
        stat("Device memory", "Device memory of the job's processes now, over all its accelerators.", "bytes",
             [(f"sum({job_memory} and on ({ACC}, job_id) {info})", "memory")], w=3),
        stat("SM active", "Mean SM activity (GPM, Hopper and later) of the job's accelerators now (of its GPU "
             "instance on a MIG-partitioned one).", "percentunit",
             [(f"avg({sm_active})", "SM active")], min=0, max=1, w=3),
        stat("Accelerators not up", "Accelerators the job ran on during the range that do not answer their driver "
             "now.", "none",
             [(f"count(nodewatch_accelerator_up{sel()} == 0 and {in_range}) or vector(0)", "not up")],
             thresholds=RED_IF_ANY, w=3),
        stat("Needing recovery", "Accelerators the job ran on during the range whose driver asks for a reset, a "
             "reboot or a drain now.", "none",
             [(f"count(accelerator_action:nodewatch_accelerator_recovery_action:required{sel()} == 1 and {in_range}) "
               "or vector(0)", "recovery")], thresholds=RED_IF_ANY, w=3),
        stat("XIDs in range", "XIDs of every code over the range on the accelerators the job ran on during it ("
             f"{application_xids()} are often the job's own faults; see the XID events panel for the codes).", "none",
             [(f"sum(({xids}) and {in_range}) or vector(0)", "XIDs")], thresholds=RED_IF_ANY, w=3),
        stat("Uncorrected ECC in range", "Uncorrectable device memory errors over the range on the accelerators the "
             "job ran on during it.", "none",
             [(f"sum(increase(nodewatch_accelerator_ecc_errors_total{sel(UNCORRECTED)}[$__range]) and {in_range}) "
               "or vector(0)", "ECC")], thresholds=RED_IF_ANY, w=3),
        jobs_table("Accelerators of the job",
                   "Every accelerator the job ran on during the range, with the job's labels there "
                   "(nodewatch_accelerator_job_info: step for Slurm, namespace, pod and container for Kubernetes, "
                   "the MIG GPU instance) and the most device memory its processes held on it during the range.",
                   f"max_over_time({info}[$__range])",
                   f"max_over_time(nodewatch_accelerator_process_memory_used_bytes{sel()}[$__range])",
                   "peak memory", h=8),
        node_rows,
        health,
        row("Accelerator health"),
        state_timeline("Accelerator up", "1 while the accelerator answers its driver; 0 lost, reset required or "
                       "stuck." + tail_note, "none",
                       [(f"nodewatch_accelerator_up{sel()} and {tail}", acc)], mappings=UP_DOWN),
        state_timeline("Recovery action", "The driver's verdict on what the accelerator needs before it is usable "
                       "again (drivers R565 and later)." + tail_note, "none",
                       [(f"{one_hot_code('nodewatch_accelerator_recovery_action', 'action', RECOVERY_ACTIONS, OTHER_ACTION)}"
                         f" and {tail}", acc)],
                       mappings=code_mappings(RECOVERY_ACTIONS, OTHER_ACTION)),
        ts("XID events", "XID events by code over the rate window (the first of a code since nodewatch started is "
           "counted in the XIDs in range stat and the health table only)." + tail_note, "none",
           [(f"increase(nodewatch_accelerator_xid_errors_total{sel()}[{RI}]) > 0 and {tail}", acc + " xid {{xid}}")]),
        ts("ECC errors", "Corrected and uncorrected device memory errors per second." + tail_note, "cps",
           [(f"rate(nodewatch_accelerator_ecc_errors_total{sel()}[{RI}]) and {tail}", acc + " {{type}}")]),
        ts("Throttle reasons active", "Clock throttle reasons active now (1): gpu_idle and sw_power_cap are "
           "ordinary, the thermal and hardware ones are not." + tail_note, "none",
           [(f"nodewatch_accelerator_clock_throttle_active{sel()} == 1 and {tail}", acc + " {{reason}}")]),
        state_timeline("NVLink fabric health", "1 when the accelerator's NVLink fabric registration completed and "
                       "the fabric reports no problem (NVSwitch systems)." + tail_note, "none",
                       [(f"nodewatch_accelerator_fabric_healthy{sel()} and {tail}", acc)], mappings=HEALTHY),
        ts("Temperature", "The hottest core sensor of each accelerator." + tail_note, "celsius",
           [(f"max without (sensor) (nodewatch_accelerator_temperature_celsius{sel(NOT_MEMORY)}) and {tail}", acc)]),
        ts("Power", "Power draw of each accelerator (of the whole accelerator on a MIG-partitioned one).", "watt",
           [(f"nodewatch_accelerator_power_watts{sel()} and {now}", acc)]),
        row("Activity"),
        ts("SM active (GPM)", "Share of the streaming multiprocessors busy, on each of the job's accelerators while "
           "it runs there (on a MIG-partitioned one, of the job's GPU instance).", "percentunit",
           [(f"nodewatch_accelerator_sm_active_ratio{sel()} and on ({ACC}) {info_whole}", acc),
            (f"nodewatch_accelerator_gpu_instance_sm_active_ratio{sel()} and on ({ACC}, gpu_instance) {info_mig}",
             acc + " GI {{gpu_instance}}")], min=0, max=1),
        ts("SM active across the job", "The least, mean and most SM activity of the job's accelerators: a least "
           "far below the mean is a straggler that holds the whole job back.", "percentunit",
           [(f"min({sm_active})", "least"), (f"avg({sm_active})", "mean"), (f"max({sm_active})", "most")],
           min=0, max=1),
        ts("Utilization", "Share of time a kernel ran on each of the job's whole accelerators while it runs there.",
           "percentunit",
           [(f"nodewatch_accelerator_utilization_ratio{sel()} and on ({ACC}) {info_whole}", acc)], min=0, max=1),
        ts("Compute processes", "Compute processes on each of the job's accelerators (also other jobs').", "none",
           [(f"nodewatch_accelerator_processes{sel()} and {now}", acc)], min=0),
        ts("Memory per accelerator", "Device memory of the job's processes on each accelerator, against the "
           "accelerator's total.", "bytes",
           [(f"{job_memory} and on ({ACC}, job_id) {info}", acc + " {{job_id}}"),
            (f"nodewatch_accelerator_memory_total_bytes{sel()} and {now}", acc + " total")]),
        ts("Memory per job", "Device memory of each selected job's processes over all its accelerators.", "bytes",
           [(f"sum by (job_id) ({job_memory} and on ({ACC}, job_id) {info})", "{{job_id}}")]),
        row("NVLink"),
        ts("NVLink errors", "NVLink errors per second by type, over each accelerator's links (replay and recovery "
           "are the serious ones)." + tail_note, "cps",
           [(f"rate(nodewatch_nvlink_errors_total{sel()}[{RI}]) > 0 and {tail}", acc + " {{type}}")]),
        ts("NVLink throughput", "Data bytes per second over all links of each of the job's accelerators.", "Bps",
           [(f"sum without (link) (rate(nodewatch_nvlink_transmitted_bytes_total{sel()}[{RI}])) and {now}", acc + " tx"),
            (f"sum without (link) (rate(nodewatch_nvlink_received_bytes_total{sel()}[{RI}])) and {now}", acc + " rx")]),
        ts("NVLink links active", "Active NVLink links of each accelerator against the links it has." + tail_note,
           "none",
           [(f"nodewatch_accelerator_nvlink_links_active{sel()} and {tail}", acc),
            (f"nodewatch_accelerator_nvlink_links{sel()} and {tail}", acc + " present")]),
        row("Fabric and NICs of the job's nodes"),
        ts("Fabric port errors", "Symbol, link integrity and receive errors per second on the fabric ports of the "
           f"job's nodes, while it runs there and for {TAIL} after.", "cps",
           [(f"rate(nodewatch_interconnect_port_symbol_errors_total{sel()}[{RI}]) > 0 and {nodes_tail}", port + " symbol"),
            (f"rate(nodewatch_interconnect_port_local_link_integrity_errors_total{sel()}[{RI}]) > 0 and {nodes_tail}",
             port + " integrity"),
            (f"rate(nodewatch_interconnect_port_receive_errors_total{sel()}[{RI}]) > 0 and {nodes_tail}", port + " receive")]),
        state_timeline("Fabric port state", "InfiniBand port state of the job's nodes: 4 active; 1 down, 2 init, 3 "
                       f"armed (while the job runs there and for {TAIL} after).", "none",
                       [(f"nodewatch_interconnect_port_state{sel()} and {nodes_tail}", port)],
                       mappings=[{"type": "value", "options": {
                           "1": {"text": "down", "color": "red"}, "2": {"text": "init", "color": "orange"},
                           "3": {"text": "armed", "color": "yellow"}, "4": {"text": "active", "color": "green"}}}]),
        ts("Fabric throughput", "Bytes per second sent and received per fabric port of the job's nodes.", "Bps",
           [(f"rate(nodewatch_interconnect_port_transmitted_bytes_total{sel()}[{RI}]) and {nodes_now}", port + " tx"),
            (f"rate(nodewatch_interconnect_port_received_bytes_total{sel()}[{RI}]) and {nodes_now}", port + " rx")]),
        ts("Transmit wait", "Ticks per second a fabric port of the job's nodes had data to send but no credit: "
           "back-pressure from the fabric.", "cps",
           [(f"rate(nodewatch_interconnect_port_transmit_wait_total{sel()}[{RI}]) and {nodes_now}", port)]),
        ts("Link flaps", "Link-downed and link-error-recovery events of the job's nodes' fabric ports over the rate "
           f"window, while the job runs there and for {TAIL} after.", "none",
           [(f"increase(nodewatch_interconnect_port_link_downed_total{sel()}[{RI}]) > 0 and {nodes_tail}", port + " downed"),
            (f"increase(nodewatch_interconnect_port_link_error_recovery_total{sel()}[{RI}]) > 0 and {nodes_tail}",
             port + " recovery")]),
        ts("RoCE congestion", "ECN-marked packets, CNPs sent and handled per second on the job's nodes.", "pps",
           [(f"rate(nodewatch_interconnect_roce_ecn_marked_packets_total{sel()}[{RI}]) and {nodes_now}", port + " ECN marked"),
            (f"rate(nodewatch_interconnect_roce_cnp_sent_total{sel()}[{RI}]) and {nodes_now}", port + " CNP sent"),
            (f"rate(nodewatch_interconnect_roce_cnp_handled_total{sel()}[{RI}]) and {nodes_now}", port + " CNP handled")]),
        ts("NIC drops", "Packets dropped per second by the interfaces of the job's nodes (receive, missed, "
           f"transmit), while the job runs there and for {TAIL} after.", "pps",
           [(f"rate(nodewatch_nic_receive_dropped_total{sel()}[{RI}]) > 0 and {nodes_tail}", "{{instance}} {{interface}} rx dropped"),
            (f"rate(nodewatch_nic_receive_missed_total{sel()}[{RI}]) > 0 and {nodes_tail}", "{{instance}} {{interface}} rx missed"),
            (f"rate(nodewatch_nic_transmit_dropped_total{sel()}[{RI}]) > 0 and {nodes_tail}", "{{instance}} {{interface}} tx dropped")]),
        ts("PFC pause", "Share of time the interfaces of the job's nodes were paused by priority flow control.",
           "percentunit",
           [(f"rate(nodewatch_nic_pfc_pause_seconds_total{sel()}[{RI}]) and {nodes_now}",
             "{{instance}} {{interface}} {{direction}} prio {{priority}}")]),
        ts("NIC throughput", "Bytes per second per interface of the job's nodes.", "Bps",
           [(f"rate(nodewatch_nic_received_bytes_total{sel()}[{RI}]) and {nodes_now}", "{{instance}} {{interface}} rx"),
            (f"rate(nodewatch_nic_transmitted_bytes_total{sel()}[{RI}]) and {nodes_now}", "{{instance}} {{interface}} tx")]),
    ]
    return dashboard("nodewatch-job", "nodewatch / Job",
                     "One Slurm job or Kubernetes pod (nodewatch_accelerator_job_info): the nodes and accelerators "
                     "it runs on, their health, SM activity, memory and NVLink, and the fabric and NIC signals of "
                     "its nodes.", items, ["job"], extra_variables=job_variables())


# ---------------------------------------------------------------------------
# 72-hour soak report.

def soak_classes():
    """The failure classes, from their one definition in nodewatch-soak-report."""
    import importlib.machinery
    import importlib.util
    path = os.path.join(HERE, "..", "packaging", "nodewatch-soak-report")
    loader = importlib.machinery.SourceFileLoader("nodewatch_soak_report", path)
    spec = importlib.util.spec_from_loader("nodewatch_soak_report", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    matchers = 'cluster=~"$cluster", job=~"$job", instance=~"$instance"'
    return [(module.expression(t, matchers, "$__range"), title) for _, title, t in module.SOAK_CLASSES]


def soak():
    classes = soak_classes()
    # The verdict: 1 (FAIL) where any class is above 0, else 0 (PASS), for
    # every scraped node.
    any_failure = " or ".join(f"({e}) > 0" for e, _ in classes)
    verdict = (f"max by (instance) (clamp_max((({any_failure})) > 0, 1)) "
               f"or max by (instance) (0 * up{sel()})")
    verdict_mapping = [{"type": "value", "options": {"0": {"text": "PASS", "color": "green"},
                                                      "1": {"text": "FAIL", "color": "red"}}}]
    report = table("Per-node verdict",
                   "For the dashboard's time range (set it to the 72 hours of the soak): per node, the count of "
                   "each failure class and the verdict (FAIL when any class is above 0).",
                   "none", [(verdict, "Verdict")] + classes, h=14)
    report["fieldConfig"]["overrides"] = [
        {"matcher": {"id": "byName", "options": "Verdict"},
         "properties": [{"id": "mappings", "value": verdict_mapping},
                        {"id": "custom.cellOptions", "value": {"type": "color-background"}}]},
    ]
    totals = [
        stat("Nodes", "Nodes scraped during the range.", "none",
             [(f"count(max_over_time(up{sel()}[$__range]))", "nodes")], w=4),
        stat("Nodes failing", "Nodes with at least one failure class above 0.", "none",
             [(f"count(({any_failure})) or vector(0)", "failing")], thresholds=RED_IF_ANY, w=4),
        stat("Nodes passing", "Nodes scraped during the range with no failure.", "none",
             [(f"count(max_over_time(up{sel()}[$__range])) - (count(({any_failure})) or vector(0))", "passing")], w=4),
        stat("Worst scrape coverage", "Lowest share of successful scrapes of any node over the range: a node that was unreachable hides its failures.",
             "percentunit", [(f"min(avg_over_time(up{sel()}[$__range]))", "coverage")], w=4,
             thresholds=[{"color": "red", "value": None}, {"color": "green", "value": 0.99}]),
    ]
    class_totals = [
        stat(name, f"Total over every selected node and the range: {name.lower()}.", "none",
             [(f"sum({e}) or vector(0)", name)], w=4, h=3, thresholds=RED_IF_ANY)
        for e, name in classes
    ]
    # nodewatch's own verdict over the range, as the report gives it.
    unhealthy = table("Subsystems not healthy",
                      "Per node and subsystem, the share of the range's samples in which nodewatch's verdict did not "
                      "find it healthy (a problem, or not checked: the report lists the problems and their actions).",
                      "percentunit",
                      [(f"max by (instance, subsystem) (1 - avg_over_time(nodewatch_node_healthy{sel()}[$__range])) > 0",
                        "not healthy")], w=12, h=10)
    problems = table("Verdict problems seen",
                     "Every problem of nodewatch's verdict seen during the range, with its action (none: could not be "
                     "checked, not a failure).", "none",
                     [(f"max by (instance, subsystem, component, problem, action) "
                       f"(max_over_time(nodewatch_node_problem_info{sel()}[$__range]))", "seen")], w=12, h=10)
    items = ([row("Verdict")] + totals + [report, unhealthy, problems, row("Totals by failure class")]
             + class_totals)
    return dashboard("nodewatch-soak", "nodewatch / 72-hour soak report",
                     "Burn-in verdict for a fixed time range: per node, the count of each failure class and pass/fail.",
                     items, ["soak"], time_from="now-72h")


DASHBOARDS = {
    "nodewatch-fleet.json": fleet,
    "nodewatch-node.json": node,
    "nodewatch-fabric.json": fabric,
    "nodewatch-soak.json": soak,
    "nodewatch-job.json": job,
}


def render(make):
    return json.dumps(make(), indent=2, ensure_ascii=False, sort_keys=False) + "\n"


def main(argv):
    check = "--check" in argv[1:]
    out_dir = HERE
    for a in argv[1:]:
        if a.startswith("--out="):
            out_dir = a[len("--out="):]
    stale = []
    for name, make in DASHBOARDS.items():
        text = render(make)
        path = os.path.join(out_dir, name)
        if check:
            try:
                with open(path, encoding="utf-8") as f:
                    if f.read() != text:
                        stale.append(name)
            except OSError:
                stale.append(name)
        else:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
    if stale:
        print("dashboards differ from what dashboards/generate.py produces: " + ", ".join(stale) +
              "\nrun: python3 dashboards/generate.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
