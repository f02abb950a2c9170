"""Driver for scripts/bench-cluster: see that script for what it measures."""

import json
import os
import subprocess
import sys
import time

from bench_outbox import approve_all
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


def settle(c, bin_dir, nodes, names):
    """Settled operations per second for refunds of the orders `names`, the
    approvals spread over the first `nodes` nodes."""
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
    by_port = {}
    for k, op in enumerate(pending):
        by_port.setdefault(c.ports[k % nodes][1], []).append(op)
    approve_all(bin_dir, by_port)
    while time.time() < deadline:
        if all(o["state"] == "settled" for o in mine(c.operations())):
            break
        time.sleep(0.1)
    ops = mine(c.operations())
    first = min(o["approvals"][0]["at_ms"] for o in ops if o["approvals"])
    last = max(o["updated_at_ms"] for o in ops)
    done = sum(1 for o in ops if o["outcome"] == "succeeded")
    return done / max((last - first) / 1000, 0.001), done


def main():
    bin_dir, pg_url, seconds, conns, n = (sys.argv[1], sys.argv[2], int(sys.argv[3]),
                                          int(sys.argv[4]), int(sys.argv[5]))
    c = Nodes(bin_dir, orders(2 * n, prefix="S"), pg_url, count=3, pool_size=16)
    try:
        base, _, _ = pgbench(pg_url, conns, seconds)
        print(f"pgbench: {base:.0f} committed 1-row inserts/s at {conns} clients "
              f"(row ~{BODY_BYTES + 100} B bytea, fsync and synchronous_commit on)", flush=True)
        for nodes in (1, 3):
            acks = ingest(c, bin_dir, nodes, conns, seconds)
            print(f"ingest, {nodes} node(s), {conns} connections: {acks:.0f} acks/s = "
                  f"{acks / base:.2f} x pgbench", flush=True)
        for nodes, names in ((1, [f"S{i}" for i in range(n)]),
                             (3, [f"S{i}" for i in range(n, 2 * n)])):
            rate, done = settle(c, bin_dir, nodes, names)
            print(f"settle, approvals on {nodes} node(s): {rate:.0f} ops/s "
                  f"({done} of {n} succeeded)", flush=True)
    finally:
        c.close()


if __name__ == "__main__":
    sys.exit(main())
