"""Driver for scripts/bench-cluster: see that script for what it measures."""

import json
import os
import subprocess
import sys
import time
import urllib.request

from bench_outbox import approve_all, graphile_jobs
from cluster import WEBHOOK_SECRET, orders
from nodes import Nodes
from pgbench import BODY_BYTES, pgbench


def load(bin_dir, port, conns, seconds):
    args = [os.path.join(bin_dir, "opgate-sim"), "load", "--port", str(port), "--secret",
            WEBHOOK_SECRET, "--connections", str(conns), "--seconds", str(seconds),
            "--body-bytes", str(BODY_BYTES), "--threads", "1"]
    return subprocess.Popen(args, stdout=subprocess.PIPE, text=True)


def ingest(c, bin_dir, nodes, conns, seconds):
    """acks/s with `conns` connections shared out over the first `nodes`."""
    procs = [load(bin_dir, c.ports[i][0], max(1, conns // nodes), seconds) for i in range(nodes)]
    reports = [json.loads(p.communicate()[0]) for p in procs]
    return sum(r["accepted"] for r in reports) / max(r["seconds"] for r in reports)


def settled_count(c):
    """Settled operations, any outcome, from node 0's /metrics."""
    url = f"http://127.0.0.1:{c.ports[0][1]}/metrics"
    with urllib.request.urlopen(url, timeout=30) as r:
        text = r.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("opgate_operations_settled{"))


def settle(c, bin_dir, nodes, names, before_approving=lambda: None):
    """Settled operations per second for refunds of the orders `names`, the
    approvals spread over the first `nodes` nodes; `before_approving` runs
    once every refund is pending."""
    for name in names:
        _, body = c.agent_admin("POST", "/_sim/sessions", {
            "input": f"refund {name}",
            "script": [{"name": "request_refund", "arguments": {"order_id": name}}]})
        c.op("POST", f"/v1/sessions/{body['id']}/bind", {"owner": "demo-user"}, node=0)
    wanted = set(names)
    mine = lambda ops: [o for o in ops if o["order_id"] in wanted]
    deadline = time.time() + 600
    while time.time() < deadline and len(mine(c.operations("pending"))) < len(names):
        time.sleep(0.2)
    pending = mine(c.operations("pending"))
    before = settled_count(c)
    before_approving()
    by_port = {}
    for k, op in enumerate(pending):
        by_port.setdefault(c.ports[k % nodes][1], []).append(op)
    approve_all(bin_dir, by_port)
    # Waits on the settled count of /metrics, which costs the nodes one read
    # of their counts: listing every operation ten times a second would take
    # a share of the CPU from the settling it measures.
    while time.time() < deadline and settled_count(c) < before + len(names):
        time.sleep(0.1)
    ops = mine(c.operations())
    first = min(o["approvals"][0]["at_ms"] for o in ops if o["approvals"])
    last = max(o["updated_at_ms"] for o in ops)
    done = sum(1 for o in ops if o["outcome"] == "succeeded")
    return done / max((last - first) / 1000, 0.001), done


def quiesce(c):
    """Checkpoints the server, so that each measured phase (the two
    settles, graphile-worker's jobs) starts alike, with no checkpoint owed
    by the phase before. No VACUUM or ANALYZE: either would record the
    tables a settle fills from empty (funds, the ledger) as empty, and the
    plans made after it would scan them whole on every read for the rest
    of the phase (a store that has run a while has them analyzed full)."""
    from nodes import psql
    psql(c.db_url, "CHECKPOINT")


def statements(pg_url, database, operations, limit=6):
    """The statements of the database that took the most time since the last
    reset (pg_stat_statements), and how many statements were run per
    operation, as lines to print."""
    from nodes import psql
    url = f"{pg_url} dbname={database}"
    mine = "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
    rows = psql(url,
                "SELECT calls, round(total_exec_time::numeric), round(mean_exec_time::numeric, 3), "
                "left(regexp_replace(query, '\\s+', ' ', 'g'), 70) FROM pg_stat_statements "
                f"{mine} ORDER BY total_exec_time DESC LIMIT {limit}")
    most = psql(url, "SELECT round(calls::numeric / " + str(operations) + ", 1), "
                "left(regexp_replace(query, '\\s+', ' ', 'g'), 70) FROM pg_stat_statements "
                f"{mine} ORDER BY calls DESC LIMIT {limit}")
    total = psql(url, f"SELECT sum(calls) FROM pg_stat_statements {mine}").strip()
    return ([f"  {r}" for r in rows.strip().splitlines()] +
            [f"  statements per operation: {int(total) / operations:.0f} in all; the most run:"] +
            [f"  {r}" for r in most.strip().splitlines()])


def main():
    bin_dir, pg_url, seconds, conns, n = (sys.argv[1], sys.argv[2], int(sys.argv[3]),
                                          int(sys.argv[4]), int(sys.argv[5]))
    graphile_dir = sys.argv[6] if len(sys.argv) > 6 else ""
    c = Nodes(bin_dir, orders(2 * n, prefix="S") + orders(n, prefix="G"), pg_url, count=3)
    from nodes import psql
    try:
        base, _, _ = pgbench(pg_url, conns, seconds)
        print(f"pgbench: {base:.0f} committed 1-row inserts/s at {conns} clients "
              f"(row ~{BODY_BYTES + 100} B bytea, fsync and synchronous_commit on)", flush=True)
        for nodes in (1, 3):
            acks = ingest(c, bin_dir, nodes, conns, seconds)
            print(f"ingest, {nodes} node(s), {conns} connections: {acks:.0f} acks/s = "
                  f"{acks / base:.2f} x pgbench", flush=True)
        try:  # the server was started with pg_stat_statements loaded
            psql(c.db_url, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            profiled = True
        except subprocess.CalledProcessError:
            profiled = False
        rates = {}
        for nodes, names in ((1, [f"S{i}" for i in range(n)]),
                             (3, [f"S{i}" for i in range(n, 2 * n)])):
            def reset():
                quiesce(c)
                if profiled:
                    psql(c.db_url, "SELECT pg_stat_statements_reset()")
            rate, done = settle(c, bin_dir, nodes, names, reset)
            rates[nodes] = rate
            print(f"settle, approvals on {nodes} node(s): {rate:.0f} ops/s "
                  f"({done} of {n} succeeded)", flush=True)
            if profiled:
                print("  where the time went from approval to settled (calls, total ms, mean ms):")
                for line in statements(pg_url, c.database, n):
                    print(line)
        if graphile_dir:
            quiesce(c)
            done, jobs_rate, jp50, jp99 = graphile_jobs(pg_url, graphile_dir, c.payments_port, n,
                                                        "G", 32)
            print(f"graphile-worker, same PostgreSQL: {done} jobs, {jobs_rate:.0f}/s "
                  f"(p50 {jp50:.0f} ms, p99 {jp99:.0f} ms, 32 at a time)", flush=True)
            for nodes, rate in rates.items():
                print(f"settle on {nodes} node(s) / graphile-worker: {rate / jobs_rate:.2f}x")
    finally:
        c.close()


if __name__ == "__main__":
    sys.exit(main())
