#!/usr/bin/env python3
"""Renders nodewatch's alert and recording rules from their templates and thresholds.

    python3 alerts/render.py [--config FILE ...] [--set TABLE.KEY=VALUE ...]
                             [--out FILE] [--recording-out FILE]
    python3 alerts/render.py --check     # the committed rules are the defaults' rendering

alerts/nodewatch-rules.yml.in (the alerts) and alerts/nodewatch-recording.yml.in
(the recording rules) hold the rules with <<TABLE.KEY>> where a threshold, a
duration, a selector or a list goes; alerts/thresholds.toml holds every such
value with its default (the one place to change them). --config files (same
tables and keys, only what they change) and --set apply in order. The alerts
go to standard output or --out, the recording rules to --recording-out.
Standard library only (tomllib: Python 3.11).
"""

import os
import re
import sys
import tomllib

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULTS = os.path.join(HERE, "thresholds.toml")
# What each template renders to: the alerts, then the recording rules.
RULES = "nodewatch-rules.yml"
RECORDING = "nodewatch-recording.yml"
OUTPUTS = (RULES, RECORDING)
PLACEHOLDER = re.compile(r"<<([A-Za-z_][A-Za-z0-9_]*)\.([A-Za-z_][A-Za-z0-9_]*)>>")
DURATION = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")


class Error(Exception):
    pass


def format_value(table, key, value):
    if key in ("for", "window"):
        if not isinstance(value, str) or not DURATION.match(value):
            raise Error(f"{table}.{key}: {value!r} is not a Prometheus duration such as \"5m\"")
        return value
    if table == "xid":
        # A list of XID codes: a regular expression's alternatives.
        if (not isinstance(value, list) or not value or
                any(isinstance(x, bool) or not isinstance(x, int) or x <= 0 for x in value)):
            raise Error(f"{table}.{key}: expected a list of XID codes such as [13, 43]")
        return "|".join(str(x) for x in value)
    if table == "selectors":
        if not isinstance(value, str) or not value:
            raise Error(f"{table}.{key}: expected a label matcher such as 'job=\"nodewatch\"'")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Error(f"{table}.{key}: {value!r} is not a number")
    return format(value, "g") if isinstance(value, float) else str(value)


def merge(values, override, origin):
    for table, keys in override.items():
        if table not in values or not isinstance(keys, dict):
            raise Error(f"{origin}: unknown table [{table}]")
        for key, value in keys.items():
            if key not in values[table]:
                raise Error(f"{origin}: unknown key {table}.{key}")
            values[table][key] = value


def parse_set(text):
    m = re.match(r"^([A-Za-z_]\w*)\.([A-Za-z_]\w*)=(.*)$", text)
    if not m:
        raise Error(f"--set {text!r}: expected TABLE.KEY=VALUE")
    table, key, raw = m.groups()
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw  # a bare string, e.g. 5m or job="x"
    return {table: {key: value}}


def render(overrides=()):
    """{output name: its text} for each of OUTPUTS."""
    with open(DEFAULTS, "rb") as f:
        values = tomllib.load(f)
    for origin, override in overrides:
        merge(values, override, origin)
    used = set()

    def sub(m):
        table, key = m.group(1), m.group(2)
        if table not in values or key not in values[table]:
            raise Error(f"template: <<{table}.{key}>> has no value in {os.path.basename(DEFAULTS)}")
        used.add((table, key))
        return format_value(table, key, values[table][key])

    texts = {}
    for name in OUTPUTS:
        with open(os.path.join(HERE, name + ".in"), encoding="utf-8") as f:
            template = f.read()
        header = (f"# Rendered by alerts/render.py from alerts/{name}.in and\n"
                  "# alerts/thresholds.toml: change those, not this file.\n")
        texts[name] = header + PLACEHOLDER.sub(sub, template)
    unused = [f"{t}.{k}" for t, keys in values.items() for k in keys if (t, k) not in used]
    if unused:
        raise Error("values no template uses: " + ", ".join(unused))
    return texts


def main(argv):
    args = argv[1:]
    overrides, out_paths, check = [], {}, False
    i = 0
    try:
        while i < len(args):
            a = args[i]
            if a == "--check":
                check = True
                i += 1
            elif a in ("--config", "--set", "--out", "--recording-out") and i + 1 < len(args):
                if a == "--config":
                    with open(args[i + 1], "rb") as f:
                        overrides.append((args[i + 1], tomllib.load(f)))
                elif a == "--set":
                    overrides.append(("--set " + args[i + 1], parse_set(args[i + 1])))
                else:
                    out_paths[RULES if a == "--out" else RECORDING] = args[i + 1]
                i += 2
            else:
                raise Error(f"unknown argument {a!r} (see the top of alerts/render.py)")
        texts = render(overrides)
    except (Error, OSError, tomllib.TOMLDecodeError) as e:
        print(f"render.py: {e}", file=sys.stderr)
        return 2
    if check:
        status = 0
        for name, text in texts.items():
            with open(os.path.join(HERE, name), encoding="utf-8") as f:
                if f.read() != text:
                    print(f"render.py: alerts/{name} is not the rendering of its template and "
                          "thresholds.toml; run: python3 alerts/render.py "
                          "--out alerts/nodewatch-rules.yml --recording-out alerts/nodewatch-recording.yml",
                          file=sys.stderr)
                    status = 1
        return status
    for name, path in out_paths.items():
        with open(path, "w", encoding="utf-8") as f:
            f.write(texts[name])
    if RULES not in out_paths:
        sys.stdout.write(texts[RULES])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
