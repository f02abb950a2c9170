"""Driver for scripts/bench-history: the present measured on an empty store,
then again on the same store filled with a long history."""

import os
import subprocess
import sys
import time
import urllib.request

from bench_ingest import load
from bench_outbox import settle_refunds
from cluster import ADMIN_TOKEN, Cluster, orders


def timed_get(c, path, times=20):
    """Median and worst milliseconds of GET path on the operator listener."""
    spent = []
    for _ in range(times):
        req = urllib.request.Request(f"http://127.0.0.1:{c.operator_port}{path}")
        req.add_header("Authorization", "Bearer " + ADMIN_TOKEN)
        start = time.perf_counter()
        with urllib.request.urlopen(req, timeout=30) as r:
            body = r.read()
        spent.append((time.perf_counter() - start) * 1000)
    spent.sort()
    return spent[len(spent) // 2], spent[-1], body


def timed_cli(c, bin_dir, args, times=10):
    """Median and worst milliseconds of the opgate CLI, and the rows it printed."""
    env = dict(os.environ, OPGATE_URL=f"http://127.0.0.1:{c.operator_port}",
               OPGATE_TOKEN=ADMIN_TOKEN)
    spent, rows = [], 0
    for _ in range(times):
        start = time.perf_counter()
        out = subprocess.run([os.path.join(bin_dir, "opgate")] + args, env=env, check=True,
                             capture_output=True, text=True).stdout
        spent.append((time.perf_counter() - start) * 1000)
        rows = sum(1 for line in out.splitlines() if "outcome_unknown" in line)
    spent.sort()
    return spent[len(spent) // 2], spent[-1], rows


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def dir_bytes(path):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path)
               for f in files)


def present(c, bin_dir, seconds, refunds, prefix):
    """Ingest at 64 connections, then approve→settled for `refunds` refunds."""
    r = load(bin_dir, c.ingress_port, 64, seconds)
    acks = r["accepted"] / r["seconds"]
    rss_ingest = rss_mib(c.daemon.pid)
    settled, rate, p50, p99 = settle_refunds(c, bin_dir, refunds, prefix)
    return {"acks": acks, "ingest_p99": r["p99_ms"], "rss_ingest": rss_ingest,
            "settled": settled, "settled_per_s": rate, "settle_p99": p99}


def main():
    bin_dir, history, seconds, refunds = (sys.argv[1], int(sys.argv[2]), int(sys.argv[3]),
                                          int(sys.argv[4]))
    c = Cluster(bin_dir, orders(refunds, prefix="E") + orders(refunds, prefix="F"))
    data = os.path.join(c.dir, "data")
    try:
        print(f"== empty store: ingest at 64 connections for {seconds} s, then {refunds} refunds",
              flush=True)
        empty = present(c, bin_dir, seconds, refunds, "E")

        c.daemon.terminate()
        c.daemon.wait()
        print(f"== writing {history:,} settled refunds and 10 outcome_unknown through the "
              "storage port", flush=True)
        before = dir_bytes(data)
        start = time.time()
        subprocess.run([os.path.join(bin_dir, "opgate-sim"), "history", "--data-dir", data,
                        "--settled", str(history), "--outcome-unknown", "10"], check=True)
        fill_s = time.time() - start
        print(f"written in {fill_s:.0f} s ({history / fill_s:,.0f} operations/s)", flush=True)

        start = time.time()
        c.start_daemon()  # returns once the ports file is written: store open, listeners up
        ready_s = time.time() - start
        size = dir_bytes(data) - before
        metrics_p50, metrics_max, _ = timed_get(c, "/metrics")
        unknown_p50, unknown_max, body = timed_get(
            c, "/v1/operations?state=outcome_unknown&limit=100")
        listed = body.count(b'"state":"outcome_unknown"')
        cli_p50, cli_max, cli_rows = timed_cli(c, bin_dir, ["ops", "list", "--state",
                                                            "outcome_unknown"])
        rss_idle = rss_mib(c.daemon.pid)
        print(f"== the same store with {history:,} operations of history", flush=True)
        full = present(c, bin_dir, seconds, refunds, "F")

        print()
        print(f"{'':<34} {'empty':>10} {'history':>10} {'ratio':>7}")
        for label, key in (("ingest acks/s (64 connections)", "acks"),
                           ("ingest p99 ms", "ingest_p99"),
                           ("approve->settled ops/s", "settled_per_s"),
                           ("approve->settled p99 ms", "settle_p99"),
                           ("resident MiB after ingest", "rss_ingest")):
            print(f"{label:<34} {empty[key]:>10.1f} {full[key]:>10.1f} "
                  f"{full[key] / empty[key]:>7.2f}")
        print(f"restart to ready: {ready_s * 1000:.0f} ms")
        print(f"/metrics scrape: median {metrics_p50:.1f} ms, worst {metrics_max:.1f} ms")
        print(f"list outcome_unknown ({listed} listed): median {unknown_p50:.1f} ms, "
              f"worst {unknown_max:.1f} ms over HTTP; `opgate ops list --state "
              f"outcome_unknown` ({cli_rows} rows) median {cli_p50:.1f} ms, worst "
              f"{cli_max:.1f} ms, the CLI's own start included")
        print(f"data directory: {size / history:,.0f} bytes per operation of history "
              f"({size / 2**20:,.0f} MiB in all)")
        print(f"resident memory, idle after restart: {rss_idle:.0f} MiB")
        goals = [
            ("ingest within 15%", full["acks"] >= 0.85 * empty["acks"]),
            ("approve->settled within 15%", full["settled_per_s"] >= 0.85 * empty["settled_per_s"]),
            ("/metrics under 50 ms", metrics_max < 50),
            ("outcome_unknown list under 50 ms", unknown_max < 50 and listed == 10),
            ("ops list --state outcome_unknown under 50 ms", cli_max < 50 and cli_rows >= 10),
            ("ready under 2 s", ready_s < 2),
            ("resident memory under 200 MiB", max(full["rss_ingest"], rss_idle) < 200),
        ]
        for name, ok in goals:
            print(f"{'met' if ok else 'MISSED':>6}  {name}")
        return 0 if all(ok for _, ok in goals) else 1
    finally:
        c.close()


if __name__ == "__main__":
    sys.exit(main())
