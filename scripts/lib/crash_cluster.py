"""Driver for scripts/crash-cluster: see that script for what it proves."""

import concurrent.futures
import json
import random
import sys
import threading
import time

from crash_ingest import event, headers_for, send
from crash_outbox import FAULTS, settle_all
from nodes import Nodes
from cluster import orders


def main():
    bin_dir, pg_url, n, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    seed = int(time.time())
    rng = random.Random(seed)
    print(f"seed {seed}", flush=True)
    c = Nodes(bin_dir, orders(n, prefix="K"), pg_url, count=3, payments_timeout_ms=500)
    acked, lock, stop = {}, threading.Lock(), threading.Event()
    try:
        rules = []
        for i in range(n):
            if rng.random() < 0.5:
                rules.append({"method": "POST", "path_prefix": "/v1/refunds",
                              "operation_key": f"demo-user:K{i}:full-refund:v1",
                              "action": rng.choice(FAULTS), "delay_ms": 800,
                              "times": rng.choice([1, 2])})
        c.payments_admin("POST", "/_sim/faults", {"rules": rules})
        sessions = []
        for i in range(n):
            _, body = c.agent_admin("POST", "/_sim/sessions", {
                "input": f"refund K{i}",
                "script": [{"name": "request_refund", "arguments": {"order_id": f"K{i}"}}]})
            sessions.append(body["id"])
            c.op("POST", f"/v1/sessions/{body['id']}/bind", {"owner": "demo-user"})

        # Raw webhooks to random live nodes, as a sender retrying until 2xx.
        def ingest(k):
            wid = f"msg_cluster_{seed}_{k}"
            body = event(wid, sessions[k % n] if k % 2 == 0 else None)
            while not stop.is_set():
                alive = c.alive()
                port = c.ports[rng.choice(alive)][0] if alive else c.ports[0][0]
                status, _ = send(port, wid, body, headers_for(wid, body))
                if status == 200:
                    with lock:
                        acked[wid] = body
                    return
                time.sleep(0.05)

        pool = concurrent.futures.ThreadPoolExecutor(8)
        futures = [pool.submit(ingest, k) for k in range(n * 5)]

        # Chaos: kill -9 or pause a random node, while approvals flow
        # through the others; the simulator's webhooks follow a live node.
        def chaos():
            for r in range(rounds):
                if stop.wait(rng.uniform(0.3, 1.5)):
                    return
                i = rng.randrange(c.count)
                if rng.random() < 0.6:
                    c.kill_node(i)
                    print(f"round {r}: kill -9 node {i}", flush=True)
                    if c.target == i:
                        c.point_webhooks((i + 1) % c.count)
                    c.start_node(i)
                else:
                    c.pause_node(i)
                    print(f"round {r}: SIGSTOP node {i}", flush=True)
                    if stop.wait(rng.uniform(0.2, 3.0)):
                        c.resume_node(i)
                        return
                    c.resume_node(i)
                    print(f"round {r}: SIGCONT node {i}", flush=True)

        # On-call asks random live nodes to reconcile whatever is
        # outcome_unknown, while other nodes execute, reconcile and die.
        manual = {"asked": 0}

        def reconcile_now():
            while not stop.wait(rng.uniform(0.1, 0.6)):
                try:
                    status, body = c.op("GET", "/v1/operations?state=outcome_unknown&limit=1000")
                    unknown = body["operations"] if status == 200 else []
                except Exception:
                    continue
                for op in unknown:
                    try:
                        c.op("POST", f"/v1/operations/{op['key']}/reconcile")
                        manual["asked"] += 1
                    except Exception:
                        pass

        chaos_thread = threading.Thread(target=chaos)
        chaos_thread.start()
        reconcile_thread = threading.Thread(target=reconcile_now)
        reconcile_thread.start()
        approved = set()
        deadline = time.time() + 600
        while (len(approved) < n or chaos_thread.is_alive()) and time.time() < deadline:
            try:
                listed = c.operations()
            except Exception:
                listed = []
            # An approval whose node died after its commit, before its
            # answer, is approved all the same: the operation says so.
            approved |= {o["key"] for o in listed if o.get("approvals")}
            for op in (o for o in listed if o["state"] == "pending"):
                try:
                    status, _ = c.op("POST", f"/v1/operations/{op['key']}/approve", {
                        "amount_minor": op["amount_minor"], "currency": op["currency"],
                        "fingerprint": op["fingerprint"]})
                except Exception:
                    continue
                if status == 200:
                    approved.add(op["key"])
            time.sleep(0.1)
        chaos_thread.join()
        for f in futures:
            f.result()
        stop.set()
        reconcile_thread.join()
        pool.shutdown()
        # Left alone, with the provider healthy again, every operation must
        # settle by its own reconcile items: one in outcome_unknown with no
        # item (or executing with no live claim) would stay, and is stuck.
        c.payments_admin("DELETE", "/_sim/faults")
        deadline = time.time() + 150
        while time.time() < deadline:
            if all(o["state"] == "settled" for o in c.operations()):
                break
            time.sleep(1)
        stuck = [o["key"] for o in c.operations() if o["state"] != "settled"]
        ops = settle_all(c, poll_s=0.5)
        # Every acknowledged webhook is there: resent to any node, a duplicate.
        lost = 0
        for wid, body in acked.items():
            status, data = send(c.ports[rng.choice(c.alive())][0], wid, body,
                                headers_for(wid, body))
            if not (status == 200 and json.loads(data).get("duplicate")):
                lost += 1
        _, ledger = c.op("GET", "/v1/ledger")
        _, truth = c.payments_admin("GET", "/_sim/ledger")
        per_key = {}
        for r in truth["refunds"]:
            per_key.setdefault(r["metadata"].get("operation_key"), []).append(r)
        over_one = sum(1 for v in per_key.values() if len(v) > 1)
        ours = {row["operation_key"]: row["provider_object_id"] for row in ledger["ledger"]}
        theirs = {k: v[0]["id"] for k, v in per_key.items() if v[0]["status"] == "succeeded"}
        mismatches = len(set(ours.items()) ^ set(theirs.items()))
        executing = sum(1 for o in ops if o["state"] == "executing")
        settled = [o for o in ops if o["state"] == "settled"]
        unanswered = 0
        for o in settled:
            _, full = c.op("GET", f"/v1/operations/{o['key']}")
            for call in full.get("calls", []):
                _, s = c.agent_admin("GET", f"/_sim/sessions/{call['session_id']}")
                if call["call_id"] not in s.get("results", {}):
                    unanswered += 1
        _, audit = c.op("GET", "/v1/audit/verify")
        print(f"approved: {len(approved)} of {n}")
        print(f"settled: {len(settled)}")
        print(f"webhooks acknowledged: {len(acked)}; lost: {lost} (must be 0)")
        print(f"operation keys with more than one provider object: {over_one} (must be 0)")
        print(f"ledger mismatches: {mismatches} (must be 0)")
        print(f"stuck in executing: {executing} (must be 0)")
        print(f"manual reconciles asked during the chaos: {manual['asked']}")
        print(f"unsettled without a person's help: {len(stuck)} (must be 0) {stuck[:5]}")
        print(f"settled operations' calls without their result: {unanswered} (must be 0)")
        print(f"audit chain: ok={audit['ok']} records={audit['records']}")
        ok = (lost == 0 and over_one == 0 and mismatches == 0 and executing == 0 and not stuck
              and unanswered == 0 and audit["ok"] and len(approved) == n
              and len(settled) == n)
        never = sorted({o["key"] for o in ops} - approved)
        if never:
            print(f"never approved: {never[:5]}")
        if not ok:
            c.keep = True
            print(f"the nodes' and simulators' logs are kept in {c.dir}")
        print("PASS" if ok else "FAIL")
        return 0 if ok else 1
    finally:
        stop.set()
        c.close()


if __name__ == "__main__":
    sys.exit(main())
