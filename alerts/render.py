#!/usr/bin/env python3
"""Renders nodewatch's alert rules from their template and thresholds.

    python3 alerts/render.py [--config FILE ...] [--set TABLE.KEY=VALUE ...] [--out FILE]
    python3 alerts/render.py --check     # the committed rules are the defaults' rendering

alerts/nodewatch-rules.yml.in holds the rules with <<TABLE.KEY>> where a
threshold, a duration or a selector goes; alerts/thresholds.toml holds every
such value with its default (the one place to change them). --config files
(same tables and keys, only what they change) and --set apply in order.
Standard library only (tomllib: Python 3.11).
"""

import os
import re
import sys
import tomllib

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATE = os.path.join(HERE, "nodewatch-rules.yml.in")
DEFAULTS = os.path.join(HERE, "thresholds.toml")
RENDERED = os.path.join(HERE, "nodewatch-rules.yml")
PLACEHOLDER = re.compile(r"<<([A-Za-z_][A-Za-z0-9_]*)\.([A-Za-z_][A-Za-z0-9_]*)>>")
DURATION = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")


class Error(Exception):
    pass


def format_value(table, key, value):
    if key in ("for", "window"):
        if not isinstance(value, str) or not DURATION.match(value):
            raise Error(f"{table}.{key}: {value!r} is not a Prometheus duration such as \"5m\"")
        return value
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
    with open(DEFAULTS, "rb") as f:
        values = tomllib.load(f)
    for origin, override in overrides:
        merge(values, override, origin)
    with open(TEMPLATE, encoding="utf-8") as f:
        template = f.read()
    used = set()

    def sub(m):
        table, key = m.group(1), m.group(2)
        if table not in values or key not in values[table]:
            raise Error(f"template: <<{table}.{key}>> has no value in {os.path.basename(DEFAULTS)}")
        used.add((table, key))
        return format_value(table, key, values[table][key])

    out = PLACEHOLDER.sub(sub, template)
    unused = [f"{t}.{k}" for t, keys in values.items() for k in keys if (t, k) not in used]
    if unused:
        raise Error("values the template never uses: " + ", ".join(unused))
    header = ("# Rendered by alerts/render.py from alerts/nodewatch-rules.yml.in and\n"
              "# alerts/thresholds.toml: change those, not this file.\n")
    return header + out


def main(argv):
    args = argv[1:]
    overrides, out_path, check = [], None, False
    i = 0
    try:
        while i < len(args):
            a = args[i]
            if a == "--check":
                check = True
                i += 1
            elif a in ("--config", "--set", "--out") and i + 1 < len(args):
                if a == "--config":
                    with open(args[i + 1], "rb") as f:
                        overrides.append((args[i + 1], tomllib.load(f)))
                elif a == "--set":
                    overrides.append(("--set " + args[i + 1], parse_set(args[i + 1])))
                else:
                    out_path = args[i + 1]
                i += 2
            else:
                raise Error(f"unknown argument {a!r} (see the top of alerts/render.py)")
        text = render(overrides)
    except (Error, OSError, tomllib.TOMLDecodeError) as e:
        print(f"render.py: {e}", file=sys.stderr)
        return 2
    if check:
        with open(RENDERED, encoding="utf-8") as f:
            if f.read() != text:
                print("render.py: alerts/nodewatch-rules.yml is not the rendering of the template "
                      "and thresholds.toml; run: python3 alerts/render.py --out alerts/nodewatch-rules.yml",
                      file=sys.stderr)
                return 1
        return 0
    if out_path:
        with open(out_path, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
