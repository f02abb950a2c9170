"""Driver for scripts/bench-outbox."""

import concurrent.futures
import http.client
import json
import statistics
import sys
import time
import urllib.parse

from cluster import ADMIN_TOKEN, Cluster, orders


_conn = None


def approve(job):
    """One approval over a kept-alive connection (one per worker process)."""
    global _conn
    host, port, key, amount, currency, fingerprint = job
    if _conn is None:
        _conn = http.client.HTTPConnection(host, port, timeout=30)
    body = json.dumps({"amount_minor": amount, "currency": currency,
                       "fingerprint": fingerprint})
    _conn.request("POST", f"/v1/operations/{urllib.parse.quote(key, safe='')}/approve", body,
                  {"Authorization": "Bearer " + ADMIN_TOKEN,
                   "Content-Type": "application/json"})
    r = _conn.getresponse()
    r.read()
    return r.status


def settle_refunds(c, n, prefix):
    """Sessions that ask for refunds of orders PREFIX0..n-1, bound; waits for
    the pending proposals, approves them all from 8 processes and waits until
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

    # Approvals come from several processes, so the Python client is not
    # what is measured.
    jobs = [("127.0.0.1", c.operator_port, op["key"], op["amount_minor"], op["currency"],
             op["fingerprint"]) for op in pending]
    settled_before = c.metric("opgate_operations_settled", absent=0)
    start = time.time()
    with concurrent.futures.ProcessPoolExecutor(8) as pool:
        statuses = list(pool.map(approve, jobs, chunksize=16))
    approved_s = time.time() - start
    # Settled counts come from a counter kept in the same batch as each
    # settlement, so waiting costs the same with or without history.
    while time.time() < deadline and \
            c.metric("opgate_operations_settled", absent=0) - settled_before < len(pending):
        time.sleep(0.1)
    ops = [c.op("GET", "/v1/operations/" + urllib.parse.quote(op["key"], safe=""))[1]
           for op in pending]
    latencies = sorted((o["updated_at_ms"] - o["approvals"][0]["at_ms"]) for o in ops
                       if o["state"] == "settled" and o["approvals"])
    first = min(o["approvals"][0]["at_ms"] for o in ops if o["approvals"])
    last = max(o["updated_at_ms"] for o in ops)
    settled = sum(1 for o in ops if o["outcome"] == "succeeded")
    print(f"operations: {n}, approved: {statuses.count(200)} in {approved_s:.2f} s", flush=True)
    return (settled, settled / ((last - first) / 1000), statistics.median(latencies),
            latencies[int(len(latencies) * 0.99) - 1])


def main():
    bin_dir, n = sys.argv[1], int(sys.argv[2])
    c = Cluster(bin_dir, orders(n, prefix="P"))
    try:
        settled, rate, p50, p99 = settle_refunds(c, n, "P")
        print(f"settled (succeeded): {settled}")
        print(f"settled per second: {rate:.0f}")
        print(f"approval -> settled p50: {p50:.0f} ms, p99: {p99:.0f} ms")
    finally:
        c.close()

if __name__ == "__main__":
    sys.exit(main())
