"""Driver for scripts/bench-ingest."""

import base64
import hashlib
import hmac
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

from cluster import WEBHOOK_SECRET, Cluster, orders

HERE = os.path.dirname(os.path.abspath(__file__))


def metric(c, name):
    with urllib.request.urlopen(f"http://127.0.0.1:{c.operator_port}/metrics") as r:
        text = r.read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def stored_check(stored, acked):
    """Every 2xx must be stored. wrk stops counting at the deadline, so a
    few requests stored while in flight may have no counted 2xx."""
    if stored < acked:
        return f"LOST {acked - stored:.0f}"
    return "yes" if stored == acked else f"yes (+{stored - acked:.0f} in flight)"


def disk_sync_rate(directory, seconds=2.0):
    path = os.path.join(directory, "fsync-probe")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    block = b"x" * 1024
    n, start = 0, time.time()
    while time.time() - start < seconds:
        os.write(fd, block)
        os.fdatasync(fd)
        n += 1
    os.close(fd)
    os.remove(path)
    return n / (time.time() - start)


def main():
    bin_dir, seconds = sys.argv[1], int(sys.argv[2])
    c = Cluster(bin_dir, orders(1))
    work = tempfile.mkdtemp(prefix="opgate-bench-ingest-")
    try:
        key = base64.b64decode(WEBHOOK_SECRET[len("whsec_"):])
        ts = str(int(time.time()))
        pad = "x" * 880
        body = json.dumps({"id": "evt_bench", "object": "event", "created_at": int(ts),
                           "type": "response.completed", "data": {"id": "resp_1", "pad": pad}})
        with open(os.path.join(work, "body.json"), "w") as f:
            f.write(body)
        rate = disk_sync_rate(c.dir)
        print(f"disk: {rate:.0f} synced 1 KiB writes/s (write + fdatasync loop)")
        print(f"body: {len(body)} bytes; {seconds} s per level\n")
        print(f"{'conns':>5} {'acks/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'p99.9 ms':>8} "
              f"{'fsyncs/s':>8} {'ev/fsync':>8} {'x disk':>6} {'stored>=2xx':>10}")
        for conns in (1, 16, 64, 256):
            n = 60000 * seconds if conns > 1 else 4000 * seconds
            reqs = os.path.join(work, f"reqs-{conns}.txt")
            with open(reqs, "w") as f:
                for i in range(n):
                    wid = f"msg_b{conns}_{i}"
                    mac = hmac.new(key, f"{wid}.{ts}.{body}".encode(), hashlib.sha256).digest()
                    f.write(f"{wid} v1,{base64.b64encode(mac).decode()}\n")
            accepted0 = metric(c, "opgate_webhooks_accepted_total")
            fsync0 = metric(c, "opgate_wal_fsyncs_total")
            threads = min(2, conns)
            out = subprocess.run(
                ["wrk", "-t", str(threads), "-c", str(conns), "-d", f"{seconds}s", "--timeout",
                 "10s", "-s", os.path.join(HERE, "bench_ingest.lua"),
                 f"http://127.0.0.1:{c.ingress_port}", "--", reqs,
                 os.path.join(work, "body.json"), ts, "/v1/webhooks/agents", str(threads)],
                capture_output=True, text=True, check=True).stdout
            m = re.search(r"RESULT (\d+) (\d+) (\d+) (\d+) (\d+) (\d+) (\d+)", out)
            requests, non2xx, sock_errors, duration_us, p50, p99, p999 = map(int, m.groups())
            ok = requests - non2xx
            time.sleep(0.5)  # let the last answers' writes settle into the counters
            accepted = metric(c, "opgate_webhooks_accepted_total") - accepted0
            fsyncs = metric(c, "opgate_wal_fsyncs_total") - fsync0
            secs = duration_us / 1e6
            print(f"{conns:>5} {ok / secs:>8.0f} {p50 / 1000:>7.2f} {p99 / 1000:>7.2f} "
                  f"{p999 / 1000:>8.2f} {fsyncs / secs:>8.0f} {accepted / max(fsyncs, 1):>8.1f} "
                  f"{ok / secs / rate:>6.1f} {stored_check(accepted, ok):>10}"
                  + (f"  socket errors: {sock_errors}" if sock_errors else ""), flush=True)
    finally:
        c.close()
        subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    sys.exit(main())
