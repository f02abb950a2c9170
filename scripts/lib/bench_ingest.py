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

from cluster import WEBHOOK_SECRET, Cluster, orders

HERE = os.path.dirname(os.path.abspath(__file__))


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
        def write_requests(name, n, valid):
            path = os.path.join(work, name)
            with open(path, "w") as f:
                for i in range(n):
                    wid = f"msg_{name}_{i}"
                    mac = hmac.new(key if valid else b"not-the-secret",
                                   f"{wid}.{ts}.{body}".encode(), hashlib.sha256).digest()
                    f.write(f"{wid} v1,{base64.b64encode(mac).decode()}\n")
            return path

        def wrk(conns, reqs, secs, background=False):
            threads = min(2, conns)
            args = ["wrk", "-t", str(threads), "-c", str(conns), "-d", f"{secs}s", "--timeout",
                    "10s", "-s", os.path.join(HERE, "bench_ingest.lua"),
                    f"http://127.0.0.1:{c.ingress_port}", "--", reqs,
                    os.path.join(work, "body.json"), ts, "/v1/webhooks/agents", str(threads)]
            if background:
                return subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
            return parse(subprocess.run(args, capture_output=True, text=True, check=True).stdout)

        def parse(out):
            m = re.search(r"RESULT (\d+) (\d+) (\d+) (\d+) (\d+) (\d+) (\d+)", out)
            return dict(zip(["requests", "non2xx", "sock_errors", "duration_us", "p50", "p99",
                             "p999"], map(int, m.groups())))

        for conns in (1, 16, 64, 256):
            n = 60000 * seconds if conns > 1 else 4000 * seconds
            reqs = write_requests(f"c{conns}", n, True)
            accepted0 = c.metric("opgate_webhooks_accepted_total", absent=0)
            fsync0 = c.metric("opgate_wal_fsyncs_total", absent=0)
            r = wrk(conns, reqs, seconds)
            ok = r["requests"] - r["non2xx"]
            time.sleep(0.5)  # let the last answers' writes settle into the counters
            accepted = c.metric("opgate_webhooks_accepted_total", absent=0) - accepted0
            fsyncs = c.metric("opgate_wal_fsyncs_total", absent=0) - fsync0
            secs = r["duration_us"] / 1e6
            print(f"{conns:>5} {ok / secs:>8.0f} {r['p50'] / 1000:>7.2f} {r['p99'] / 1000:>7.2f} "
                  f"{r['p999'] / 1000:>8.2f} {fsyncs / secs:>8.0f} {accepted / max(fsyncs, 1):>8.1f} "
                  f"{ok / secs / rate:>6.1f} {stored_check(accepted, ok):>10}"
                  + (f"  socket errors: {r['sock_errors']}" if r["sock_errors"] else ""),
                  flush=True)

        # Good senders alone, then the same good senders while a flood of
        # badly signed requests arrives on other connections.
        print("\nflood of bad signatures: 16 good connections, with and without 64 flooding")
        print(f"{'':>14} {'good acks/s':>11} {'p50 ms':>7} {'p99 ms':>7} {'bad req/s':>9} "
              f"{'bad 401s':>8}")
        good = write_requests("good", 60000 * seconds, True)
        alone = wrk(16, good, seconds)
        bad = write_requests("bad", 200000 * seconds, False)
        good2 = write_requests("good2", 60000 * seconds, True)
        rejected0 = c.metric("opgate_webhooks_rejected_total", absent=0)
        flood = wrk(64, bad, seconds + 2, background=True)
        time.sleep(1)
        during = wrk(16, good2, seconds)
        flood_result = parse(flood.communicate()[0])
        rejected = c.metric("opgate_webhooks_rejected_total", absent=0) - rejected0
        for label, r, bad_rate in (("alone", alone, 0.0), ("during flood", during,
                                   flood_result["requests"] / (flood_result["duration_us"] / 1e6))):
            secs = r["duration_us"] / 1e6
            print(f"{label:>14} {(r['requests'] - r['non2xx']) / secs:>11.0f} "
                  f"{r['p50'] / 1000:>7.2f} {r['p99'] / 1000:>7.2f} {bad_rate:>9.0f} "
                  f"{(rejected if bad_rate else 0):>8.0f}")
    finally:
        c.close()
        subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    sys.exit(main())
