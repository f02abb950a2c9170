#!/usr/bin/env bash
# A lint-level check of the Dockerfile (ctest: dockerfile_lint); Docker does
# not run here, so the image itself is never built by the tests. Checks:
#  - both stages are debian:12-slim, the runtime runs as opgate, exposes
#    8080 and 8081, keeps /var/lib/opgate in a volume, and its ENTRYPOINT
#    and CMD are the contract's JSON arrays;
#  - the build stage installs every build dependency that
#    scripts/lib/common.sh installs (so the two lists cannot drift);
#  - the runtime stage's sed moves both listeners of deploy/opgate.toml to
#    0.0.0.0 and changes nothing else.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
python3 - <<'PY'
import json, re, subprocess, sys, tempfile

failures = []
text = open("Dockerfile").read()
# Instructions with their continuation lines joined; comments dropped.
lines = [l for l in text.splitlines() if not l.lstrip().startswith("#")]
instructions = re.findall(r"^(\w+)\s+(.*?)(?<!\\)$", re.sub(r"\\\n", " ", "\n".join(lines)), re.M)

froms = [args for op, args in instructions if op == "FROM"]
if len(froms) != 2 or not all(f.split()[0] == "debian:12-slim" for f in froms):
    failures.append(f"expected two stages FROM debian:12-slim, got {froms}")
runtime = instructions[[i for i, (op, _) in enumerate(instructions) if op == "FROM"][-1]:]
build = instructions[: len(instructions) - len(runtime)]

def last(op, stage=runtime):
    found = [args.strip() for o, args in stage if o == op]
    return found[-1] if found else None

for op, want in (("USER", "opgate"), ("EXPOSE", "8080 8081"), ("VOLUME", "/var/lib/opgate")):
    if last(op) != want:
        failures.append(f"runtime {op} is {last(op)!r}, expected {want!r}")
for op, want in (("ENTRYPOINT", ["/usr/bin/opgate"]),
                 ("CMD", ["serve", "--config", "/etc/opgate/opgate.toml"])):
    try:
        got = json.loads(last(op) or "null")
    except json.JSONDecodeError:
        got = last(op)
    if got != want:
        failures.append(f"runtime {op} is {got!r}, expected {want!r}")

# The build stage's packages against scripts/lib/common.sh's.
listed = subprocess.run(["bash", "-c", "source scripts/lib/common.sh; printf '%s\\n' \"${OPGATE_PACKAGES[@]}\""],
                        capture_output=True, text=True, check=True).stdout.split()
# postgresql-15: the private server of the PostgreSQL tests, not the build.
not_for_building = {"ccache", "python3", "curl", "openssl", "postgresql-15"}
build_runs = " ".join(args for op, args in build if op == "RUN")
installed = set(re.findall(r"[a-z0-9][a-z0-9.+-]+", build_runs))
for package in listed:
    if package not in not_for_building and package not in installed:
        failures.append(f"the build stage does not install {package} (scripts/lib/common.sh does)")

# The runtime stage's sed over the shipped config.
runtime_runs = " ".join(args for op, args in runtime if op == "RUN")
m = re.search(r"sed -i '([^']*)' /etc/opgate/opgate.toml", runtime_runs)
if not m:
    failures.append("the runtime stage does not rewrite /etc/opgate/opgate.toml's listeners")
else:
    original = open("deploy/opgate.toml").read()
    changed = subprocess.run(["sed", m.group(1)], input=original, capture_output=True,
                             text=True, check=True).stdout
    diff = [(a, b) for a, b in zip(original.splitlines(), changed.splitlines()) if a != b]
    if sorted(b for _, b in diff) != ['listen = "0.0.0.0:8080"', 'listen = "0.0.0.0:8081"']:
        failures.append(f"the runtime sed changes {diff}, expected both listeners to 0.0.0.0")

for f in failures:
    print("FAIL: Dockerfile:", f)
if failures:
    sys.exit(1)
print(f"Dockerfile: {len(instructions)} instructions in 2 stages; build packages match "
      f"scripts/lib/common.sh; runtime listeners on 0.0.0.0")
PY
