#!/usr/bin/env bash
# Checks what the package ships for monitoring (ctest: deploy_files):
#  - `promtool check rules` accepts the alert rules, and `promtool test rules`
#    passes tests/package/alerts_test.yml (each alert fires when it should);
#  - every alert has summary, description and a runbook naming a README
#    section that exists;
#  - the Grafana dashboard parses as JSON and its queries name only metrics
#    that begin with opgate_, process_ or up;
#  - every opgate_ metric the rules or the dashboard name is one the code
#    exports (a string in the C++ sources), except the ones listed as planned.
# Without promtool (Debian package prometheus) it skips, except in CI.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
rules=$root/deploy/prometheus/opgate-alerts.yml
dashboard=$root/deploy/grafana/opgate-dashboard.json

if ! command -v promtool >/dev/null; then
  if [ "${CI:-}" = "true" ]; then
    echo "FAIL: promtool not found (apt-get install prometheus)" >&2
    exit 1
  fi
  echo "SKIP: promtool not found (apt-get install prometheus)"
  exit 77
fi
promtool check rules "$rules"
(cd "$root/tests/package" && promtool test rules alerts_test.yml)

python3 - "$root" "$rules" "$dashboard" <<'PY'
import json, pathlib, re, sys

root, rules_path, dashboard_path = map(pathlib.Path, sys.argv[1:])
# Metrics the rules may name before the code exports them.
PLANNED = {"opgate_oldest_pending_seconds"}
failures = []

def metric_names(expr):
    """The metric names a PromQL expression selects."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)           # string literals
    expr = re.sub(r"\{[^}]*\}", " ", expr)                     # label matchers
    expr = re.sub(r"\[[^\]]*\]", " ", expr)                    # ranges
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    keywords = {"and", "or", "unless", "bool", "offset", "inf", "nan"}
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", expr):
        rest = expr[m.end():].lstrip()
        if rest.startswith("(") or m.group(0).lower() in keywords:
            continue  # a function or an operator
        if m.group(0).startswith("__") or m.group(0) == "$":
            continue
        names.add(m.group(0))
    return names

def base(name):
    return re.sub(r"_(bucket|sum|count)$", "", name)

sources = "\n".join(p.read_text(errors="replace") for p in root.rglob("*.cpp")
                    if "build" not in p.relative_to(root).parts[0])
exported = set(re.findall(r'"(opgate_[a-z0-9_]+)"', sources))

# README sections, as GitHub anchors.
readme = (root / "README.md").read_text()
anchors = set()
for line in readme.splitlines():
    m = re.match(r"#+\s+(.*)", line)
    if m:
        slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
        anchors.add(slug)

def check_known(name, where):
    if name.startswith("opgate_") and base(name) not in exported and name not in PLANNED:
        failures.append(f"{where}: {name} is not a metric opgate exports")

# Alert rules: plain YAML of a known shape; read the fields we check.
text = rules_path.read_text()
alerts = re.split(r"\n\s*- alert: ", text)[1:]
if len(alerts) < 9:
    failures.append(f"{rules_path}: expected at least 9 alerts, found {len(alerts)}")
for block in alerts:
    name = block.split("\n", 1)[0].strip()
    expr = re.search(r"\n\s*expr: (.*)", block).group(1)
    for field in ("summary", "description", "runbook"):
        if not re.search(rf"\n\s*{field}: ", block):
            failures.append(f"alert {name}: no {field} annotation")
    runbook = re.search(r'\n\s*runbook: "([^"]*)"', block)
    if runbook:
        anchor = runbook.group(1).partition("#")[2]
        if not runbook.group(1).startswith("/usr/share/doc/opgate/README.md#") or anchor not in anchors:
            failures.append(f"alert {name}: runbook {runbook.group(1)} names no README section")
    for metric in metric_names(expr):
        if not (metric.startswith("opgate_") or metric in ("up", "probe_success")):
            failures.append(f"alert {name}: unexpected metric {metric}")
        check_known(metric, f"alert {name}")

# The dashboard.
dashboard = json.loads(dashboard_path.read_text())
exprs = []
def walk(node):
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "expr" and isinstance(v, str):
                exprs.append(v)
            elif k == "definition" and isinstance(v, str):
                exprs.append(re.sub(r"^label_values\((.*),[^,]*\)$", r"\1", v))
            else:
                walk(v)
    elif isinstance(node, list):
        for v in node:
            walk(v)
walk(dashboard)
if len(exprs) < 10:
    failures.append(f"{dashboard_path}: only {len(exprs)} queries")
for expr in exprs:
    names = metric_names(expr)
    if not names:
        failures.append(f"dashboard query names no metric: {expr}")
    for metric in names:
        if not re.match(r"(opgate_|process_|up$)", metric):
            failures.append(f"dashboard: {metric} is not an opgate_, process_ or up metric")
        check_known(metric, "dashboard")

for f in failures:
    print("FAIL:", f)
if failures:
    sys.exit(1)
print(f"{len(alerts)} alerts with runbooks; dashboard: {len(exprs)} queries over "
      f"{len(set().union(*map(metric_names, exprs)))} metrics, all known")
PY
