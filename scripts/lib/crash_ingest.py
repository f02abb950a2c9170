"""Driver for scripts/crash-ingest: see that script for what it proves."""

import base64
import concurrent.futures
import hashlib
import hmac
import http.client
import json
import random
import sys
import threading
import time

from cluster import WEBHOOK_SECRET, Cluster, orders

KEY = base64.b64decode(WEBHOOK_SECRET[len("whsec_"):])


def event(wid, session=None):
    """An action_required event for `session` (work for the worker), or an
    event opgate only stores."""
    if session:
        return json.dumps({"id": "evt_" + wid, "object": "event", "created_at": int(time.time()),
                           "type": "agent.session.action_required", "data": {"id": session}})
    return json.dumps({"id": "evt_" + wid, "object": "event", "created_at": int(time.time()),
                       "type": "response.completed", "data": {"id": wid}})


def headers_for(wid, body):
    """Signed now: a sender signs every attempt afresh, over the same body."""
    ts = str(int(time.time()))
    sig = base64.b64encode(hmac.new(KEY, f"{wid}.{ts}.{body}".encode(),
                                    hashlib.sha256).digest()).decode()
    return {"webhook-id": wid, "webhook-timestamp": ts, "webhook-signature": "v1," + sig,
            "Content-Type": "application/json"}


def send(port, wid, body, headers):
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("POST", "/v1/webhooks/agents", body, headers)
        r = conn.getresponse()
        data = r.read()
        conn.close()
        return r.status, data
    except OSError:
        return 0, b""


def main():
    bin_dir, n, kills = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    c = Cluster(bin_dir, orders(1))
    acked = {}  # webhook-id -> body
    lock = threading.Lock()
    try:
        # A bound session with nothing to answer: its events go through the
        # worker's queue (fetch the session, mark the event processed).
        status, created = c.agent_admin("POST", "/_sim/sessions", {"input": "hi", "script": []})
        session = created["id"]
        c.op("POST", f"/v1/sessions/{session}/bind", {"owner": "demo-user"})
        events = [f"msg_crash_{i}" for i in range(n)]
        kill_points = set(sorted(random.sample(range(n // 10, n), kills)))
        sent = 0

        def worker(wid):
            body = event(wid, session if int(wid.rsplit("_", 1)[1]) % 2 == 0 else None)
            while True:
                status, data = send(c.ingress_port, wid, body, headers_for(wid, body))
                if status == 200:
                    with lock:
                        acked[wid] = body
                    return
                if status in (0, 503):  # daemon down or draining: a sender retries
                    time.sleep(0.05)
                    continue
                return

        with concurrent.futures.ThreadPoolExecutor(32) as pool:
            futures = []
            for i, wid in enumerate(events):
                futures.append(pool.submit(worker, wid))
                sent += 1
                if i in kill_points:
                    time.sleep(random.random() * 0.2)
                    c.kill_daemon()
                    print(f"kill -9 after {i} submitted, {len(acked)} acknowledged", flush=True)
                    c.start_daemon()
            for f in futures:
                f.result()
        # Every acknowledged event must be there: resending it is a duplicate.
        found = lost = 0
        for wid, body in acked.items():
            status, data = send(c.ingress_port, wid, body, headers_for(wid, body))
            if status == 200 and json.loads(data).get("duplicate"):
                found += 1
            else:
                lost += 1
        # Every queued event is processed: the worker's backlog drains to 0.
        deadline, backlog = time.time() + 60, None
        while time.time() < deadline:
            backlog = c.metric("opgate_inbox_backlog")
            if backlog == 0:
                break
            time.sleep(0.1)
        print(f"sent: {sent} (half of them action_required events for the worker)")
        print(f"acknowledged: {len(acked)}")
        print(f"found after restarts: {found}")
        print(f"lost: {lost} (must be 0)")
        print(f"left unprocessed: {backlog:.0f} (must be 0)")
        ok = lost == 0 and len(acked) == sent and backlog == 0
        print("PASS" if ok else "FAIL")
        return 0 if ok else 1
    finally:
        c.close()


if __name__ == "__main__":
    sys.exit(main())
