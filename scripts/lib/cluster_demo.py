"""Driver for scripts/cluster-demo: see that script for what it shows."""

import sys
import time

from nodes import Nodes


def wait_for(what, fn, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = fn()
        if v:
            return v
        time.sleep(0.1)
    raise RuntimeError("timed out waiting for " + what)


def main():
    bin_dir, pg_url = sys.argv[1], sys.argv[2]
    placed = int(time.time()) - 86400
    orders = [{"order_id": "ORDER-100", "owner": "demo-user", "amount_minor": 2500,
               "currency": "USD", "payment_intent": "pi_ORDER-100", "customer": "cus_demo",
               "payment_method": "visa ending 4242", "status": "paid", "placed_at": placed}]
    c = Nodes(bin_dir, orders, pg_url, count=3)
    try:
        for i in range(3):
            print(f"node {i}: webhooks on {c.ports[i][0]}, operator API on {c.ports[i][1]}")
        print("\n==> webhooks go to node 0; the session is bound through node 1")
        c.point_webhooks(0)
        _, s = c.agent_admin("POST", "/_sim/sessions", {
            "input": "I want a refund for ORDER-100",
            "script": [{"name": "lookup_order", "arguments": {"order_id": "ORDER-100"}},
                       {"name": "request_refund", "arguments": {"order_id": "ORDER-100"}}]})
        session = s["id"]
        status, _ = c.op("POST", f"/v1/sessions/{session}/bind", {"owner": "demo-user"}, node=1)
        print(f"bind {session} via node 1: {status}")
        op = wait_for("the proposal", lambda: next(iter(
            c.op("GET", "/v1/operations?state=pending", node=2)[1]["operations"]), None), 60)
        print(f"node 2 lists it pending: {op['key']} {op['amount_minor']} {op['currency']}")
        print("\n==> approved on node 1: exactly what was shown")
        status, body = c.op("POST", f"/v1/operations/{op['key']}/approve", {
            "amount_minor": op["amount_minor"], "currency": op["currency"],
            "fingerprint": op["fingerprint"]}, node=1)
        print(f"approve via node 1: {status}")
        settled = wait_for("settlement", lambda: (lambda o: o if o["state"] == "settled" else None)(
            c.op("GET", f"/v1/operations/{op['key']}", node=0)[1]), 60)
        print(f"node 0 sees it {settled['state']}/{settled.get('outcome')}")
        _, ledger = c.op("GET", "/v1/ledger", node=2)
        _, truth = c.payments_admin("GET", "/_sim/ledger")
        print(f"\nledger (node 2): {[(r['operation_key'], r['provider_object_id']) for r in ledger['ledger']]}")
        print(f"provider's refunds: {[(r['metadata'].get('operation_key'), r['id']) for r in truth['refunds']]}")
        _, sess = c.agent_admin("GET", f"/_sim/sessions/{session}")
        outputs = [i for i in sess.get("items", []) if i.get("type") == "function_call_output"]
        print(f"tool results the session received: {len(outputs)}")
        _, audit = c.op("GET", "/v1/audit/verify", node=1)
        print(f"audit chain (node 1): ok={audit['ok']} records={audit['records']}")
        ok = (settled.get("outcome") == "succeeded" and len(ledger["ledger"]) == 1
              and len(truth["refunds"]) == 1 and audit["ok"] and len(outputs) == 2)
        print("\nPASS" if ok else "\nFAIL")
        return 0 if ok else 1
    finally:
        c.close()


if __name__ == "__main__":
    sys.exit(main())
