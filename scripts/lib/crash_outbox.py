"""Driver for scripts/crash-outbox: see that script for what it proves."""

import random
import sys
import time

from cluster import Cluster, orders

FAULTS = ["drop_before_commit", "drop_after_commit", "error_500_before_commit",
          "error_500_after_commit", "rate_limit", "delay"]


def settle_all(c, poll_s, seconds=300):
    """Clears the provider's faults and asks for reconciliation of every
    outcome_unknown operation until all are settled (or time runs out);
    returns the operations as they then are."""
    c.payments_admin("DELETE", "/_sim/faults")
    deadline = time.time() + seconds
    while time.time() < deadline:
        open_ops = [o for o in c.operations() if o["state"] != "settled"]
        if not open_ops:
            break
        for o in open_ops:
            if o["state"] == "outcome_unknown":
                c.op("POST", f"/v1/operations/{o['key']}/reconcile")
        time.sleep(poll_s)
    return c.operations()


def main():
    bin_dir, n, kills = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rng = random.Random(int(time.time()))
    c = Cluster(bin_dir, orders(n, prefix="K"), payments_timeout_ms=500)
    try:
        rules = []
        for i in range(n):
            if rng.random() < 0.5:
                rules.append({"method": "POST", "path_prefix": "/v1/refunds",
                              "operation_key": f"demo-user:K{i}:full-refund:v1",
                              "action": rng.choice(FAULTS), "delay_ms": 800,
                              "times": rng.choice([1, 2])})
        c.payments_admin("POST", "/_sim/faults", {"rules": rules})
        # Sessions propose; the operator approves each as soon as it is pending.
        for i in range(n):
            status, body = c.agent_admin("POST", "/_sim/sessions", {
                "input": f"refund K{i}",
                "script": [{"name": "request_refund", "arguments": {"order_id": f"K{i}"}}]})
            c.op("POST", f"/v1/sessions/{body['id']}/bind", {"owner": "demo-user"})
        approved = set()
        kill_at = sorted(rng.sample(range(1, n), min(kills, n - 1)))
        deadline = time.time() + 300
        while len(approved) < n and time.time() < deadline:
            try:
                pending = c.operations("pending")
            except Exception:  # the daemon may be down between a kill and restart
                pending = []
            for op in pending:
                status, _ = c.op("POST", f"/v1/operations/{op['key']}/approve", {
                    "amount_minor": op["amount_minor"], "currency": op["currency"],
                    "fingerprint": op["fingerprint"]})
                if status == 200:
                    approved.add(op["key"])
                while kill_at and len(approved) >= kill_at[0]:
                    kill_at.pop(0)
                    time.sleep(rng.random() * 0.3)  # a random moment, mid-flight
                    c.kill_daemon()
                    print(f"kill -9 after {len(approved)} approvals", flush=True)
                    c.start_daemon()
            time.sleep(0.05)
        # Let the provider recover, then wait for every operation to settle.
        ops = settle_all(c, poll_s=0.2)
        status, ledger = c.op("GET", "/v1/ledger")
        _, truth = c.payments_admin("GET", "/_sim/ledger")
        per_key = {}
        for r in truth["refunds"]:
            per_key.setdefault(r["metadata"].get("operation_key"), []).append(r)
        duplicates = sum(len(v) - 1 for v in per_key.values() if len(v) > 1)
        ours = {row["operation_key"]: row["provider_object_id"] for row in ledger["ledger"]}
        theirs = {k: v[0]["id"] for k, v in per_key.items() if v[0]["status"] == "succeeded"}
        mismatches = len(set(ours.items()) ^ set(theirs.items()))
        settled = sum(1 for o in ops if o["state"] == "settled")
        unknown = sum(1 for o in ops if o["state"] == "outcome_unknown")
        executing = sum(1 for o in ops if o["state"] == "executing")
        print(f"approved: {len(approved)}")
        print(f"settled: {settled}")
        print(f"outcome_unknown: {unknown}")
        print(f"duplicates at the provider: {duplicates} (must be 0)")
        print(f"ledger mismatches: {mismatches} (must be 0)")
        print(f"stuck in executing: {executing} (must be 0)")
        ok = duplicates == 0 and mismatches == 0 and executing == 0 and len(approved) == n
        print("PASS" if ok else "FAIL")
        return 0 if ok else 1
    finally:
        c.close()


if __name__ == "__main__":
    sys.exit(main())
