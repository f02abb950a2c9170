"""Driver for scripts/bench-outbox: opgate's approved -> settled refunds per
second, then (given a PostgreSQL and graphile-worker) the same refunds as
graphile-worker jobs on that PostgreSQL, each making the same idempotent
call to the same payment simulator, in the same run."""

import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse

from cluster import ADMIN_TOKEN, Cluster, orders


def approve_all(bin_dir, ops_by_port, connections=64):
    """Every approval, `connections` at a time in all, from opgate-sim's
    approver (C++, kept connections), one approver per operator port: each
    approval waits for its synced commit, so the rate is the daemon's, not
    the driver's. Returns the approvers' reports added up."""
    procs, files = [], []
    for port, ops in ops_by_port.items():
        with tempfile.NamedTemporaryFile("w", suffix=".ndjson", delete=False) as f:
            for op in ops:
                f.write(json.dumps({"key": op["key"], "amount_minor": op["amount_minor"],
                                    "currency": op["currency"],
                                    "fingerprint": op["fingerprint"]}) + "\n")
        files.append(f.name)
        procs.append(subprocess.Popen(
            [f"{bin_dir}/opgate-sim", "approve", "--port", str(port), "--jobs", f.name,
             "--token-env", "OPGATE_BENCH_TOKEN", "--connections",
             str(max(1, connections // len(ops_by_port)))],
            env=dict(os.environ, OPGATE_BENCH_TOKEN=ADMIN_TOKEN), stdout=subprocess.PIPE,
            text=True))
    try:
        total = {"sent": 0, "statuses": {}, "errors": 0, "seconds": 0.0, "p99_ms": 0.0}
        for p in procs:
            out, _ = p.communicate()
            if p.returncode != 0:
                raise RuntimeError(f"opgate-sim approve failed ({p.returncode})")
            r = json.loads(out)
            total["sent"] += r["sent"]
            total["errors"] += r["errors"]
            for status, count in r["statuses"].items():
                total["statuses"][status] = total["statuses"].get(status, 0) + count
            total["seconds"] = max(total["seconds"], r["seconds"])
            total["p99_ms"] = max(total["p99_ms"], r["p99_ms"])
        return total
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for name in files:
            os.remove(name)


def settle_refunds(c, bin_dir, n, prefix):
    """Sessions that ask for refunds of orders PREFIX0..n-1, bound; waits for
    the pending proposals, approves them all 64 at a time and waits until
    they settle. Returns (settled, settled per second, p50 ms, p99 ms)."""
    for i in range(n):
        _, body = c.agent_admin("POST", "/_sim/sessions", {
            "input": f"refund {prefix}{i}",
            "script": [{"name": "request_refund", "arguments": {"order_id": f"{prefix}{i}"}}]})
        c.op("POST", f"/v1/sessions/{body['id']}/bind", {"owner": "demo-user"})
    deadline = time.time() + 600
    mine = lambda ops: [o for o in ops if o["order_id"].startswith(prefix)]
    while time.time() < deadline and len(mine(c.operations("pending"))) < n:
        time.sleep(0.2)
    pending = mine(c.operations("pending"))
    print(f"{len(pending)} pending proposals ready; approving all", flush=True)

    # 64 approvals in flight at once: approvals arrive as a burst, as
    # graphile-worker's jobs are queued at once.
    settled_before = c.metric("opgate_operations_settled", absent=0)
    cpu_before = cpu_seconds(c.daemon.pid)
    report = approve_all(bin_dir, {c.operator_port: pending})
    # Settled counts come from a counter kept in the same batch as each
    # settlement, so waiting costs the same with or without history.
    while time.time() < deadline and \
            c.metric("opgate_operations_settled", absent=0) - settled_before < len(pending):
        time.sleep(0.1)
    cpu = cpu_seconds(c.daemon.pid) - cpu_before
    ops = [c.op("GET", "/v1/operations/" + urllib.parse.quote(op["key"], safe=""))[1]
           for op in pending]
    latencies = sorted((o["updated_at_ms"] - o["approvals"][0]["at_ms"]) for o in ops
                       if o["state"] == "settled" and o["approvals"])
    first = min(o["approvals"][0]["at_ms"] for o in ops if o["approvals"])
    last = max(o["updated_at_ms"] for o in ops)
    settled = sum(1 for o in ops if o["outcome"] == "succeeded")
    print(f"operations: {n}, approved: {report['statuses'].get('200', 0)} in "
          f"{report['seconds']:.2f} s (p99 {report['p99_ms']:.0f} ms); the daemon's CPU "
          f"from the first approval to the last settlement: {cpu * 1000 / n:.2f} ms a refund",
          flush=True)
    return (settled, settled / ((last - first) / 1000), statistics.median(latencies),
            percentile(latencies, 0.99))


def stat_cpu(path):
    """The name and the user and system CPU seconds so far of a process or
    thread, from its /proc stat file."""
    with open(path) as f:
        text = f.read()
    fields = text[text.rindex(")") + 2:].split()
    return (text[text.index("(") + 1:text.rindex(")")],
            (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"))


def cpu_seconds(pid):
    """User and system CPU the process has used so far (/proc/PID/stat),
    which a busy neighbour on a shared machine moves far less than a rate."""
    return stat_cpu(f"/proc/{pid}/stat")[1]


def percentile(sorted_values, q):
    return sorted_values[max(0, int(len(sorted_values) * q) - 1)]


def libpq_fields(url):
    """'host=/tmp/x port=5 user=postgres dbname=postgres' as a dict."""
    return dict(part.split("=", 1) for part in shlex.split(url))


def graphile_jobs(pg_url, graphile_dir, payments_port, n, prefix, concurrency):
    """n refund jobs queued at once in graphile-worker on its own database,
    run by one worker with `concurrency` jobs at a time until the queue is
    empty. Returns (done, jobs per second, p50 ms, p99 ms) from queueing to
    each job's end."""
    from nodes import psql
    db = "opgate_graphile_" + os.urandom(3).hex()
    psql(pg_url, f"CREATE DATABASE {db}")
    f = libpq_fields(pg_url)
    conn = (f"postgres:///{db}?host={urllib.parse.quote(f['host'], safe='')}"
            f"&port={f['port']}&user={f.get('user', 'postgres')}")
    bin_ = os.path.join(graphile_dir, "node_modules", ".bin", "graphile-worker")
    work = tempfile.mkdtemp(prefix="opgate-graphile-")
    try:
        os.makedirs(os.path.join(work, "tasks"))
        shutil.copy(os.path.join(os.path.dirname(__file__), "graphile", "refund.js"),
                    os.path.join(work, "tasks", "refund.js"))
        subprocess.run([bin_, "--connection", conn, "--schema-only"], cwd=work, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        psql(f"{pg_url} dbname={db}",
             "SELECT graphile_worker.add_job('refund', json_build_object("
             f"'key', 'graphile:{prefix}' || i || ':full-refund:v1', "
             f"'payment_intent', 'pi_{prefix}' || i, 'amount', 1000 + i, "
             f"'port', {payments_port}, 'secret_key', 'sk_test_script', "
             "'enqueued_ms', (extract(epoch from clock_timestamp()) * 1000)::bigint)) "
             f"FROM generate_series(0, {n - 1}) AS i")
        print(f"{n} graphile-worker jobs queued; running them {concurrency} at a time",
              flush=True)
        out = subprocess.run([bin_, "--connection", conn, "--once", "--jobs", str(concurrency),
                              "--max-pool-size", str(concurrency + 1)], cwd=work,
                             capture_output=True, text=True, check=True).stdout
        done = [tuple(map(int, line.split()[1:3])) for line in out.splitlines()
                if line.startswith("done ")]
        if len(done) < n:
            raise RuntimeError(f"graphile-worker finished {len(done)} of {n} jobs")
        first = min(q for q, _ in done)
        last = max(e for _, e in done)
        latencies = sorted(e - q for q, e in done)
        return (len(done), len(done) / max((last - first) / 1000, 0.001),
                statistics.median(latencies), percentile(latencies, 0.99))
    finally:
        shutil.rmtree(work, ignore_errors=True)
        psql(pg_url, f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")


def main():
    bin_dir, n = sys.argv[1], int(sys.argv[2])
    pg_url = sys.argv[3] if len(sys.argv) > 3 else ""
    graphile_dir = sys.argv[4] if len(sys.argv) > 4 else ""
    c = Cluster(bin_dir, orders(n, prefix="P") + orders(n, prefix="G"))
    try:
        settled, rate, p50, p99 = settle_refunds(c, bin_dir, n, "P")
        print(f"opgate: {settled} settled, {rate:.0f}/s, approval -> settled p50 {p50:.0f} ms, "
              f"p99 {p99:.0f} ms", flush=True)
        if not pg_url:
            return
        done, jobs_rate, jp50, jp99 = graphile_jobs(pg_url, graphile_dir, c.payments_port, n,
                                                    "G", 32)
        print(f"graphile-worker: {done} jobs, {jobs_rate:.0f}/s, queued -> done p50 {jp50:.0f} "
              f"ms, p99 {jp99:.0f} ms (32 at a time, same PostgreSQL host, same simulator)")
        print(f"opgate / graphile-worker: {rate / jobs_rate:.2f}x the throughput; p99 "
              f"{p99:.0f} ms vs {jp99:.0f} ms")
    finally:
        c.close()


if __name__ == "__main__":
    sys.exit(main())
