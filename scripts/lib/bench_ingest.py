"""Driver for scripts/bench-ingest: durable webhook acknowledgements per
second at several connection counts, with opgate-sim load signing every
request as a real sender does (a fresh webhook-id and timestamp each); then,
given a private PostgreSQL, pgbench's committed inserts of a row of the same
size at 64 connections beside opgate's acks at 64, in the same run.
With --cpu instead of a PostgreSQL URL: 64 connections only, and the
daemon's and the load generator's CPU per acknowledged event, then
redis-server's and redis-benchmark's per XADD the same way. With --fill:
64 connections for that many seconds in 5 s windows as the store fills,
each window's rate and the daemon's CPU per ack, then each of the daemon's
threads' CPU (RocksDB's compactions run on those named rocksdb:low)."""

import glob
import json
import os
import shutil
import subprocess
import sys
import time

from cluster import WEBHOOK_SECRET, Cluster, orders


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


def load(bin_dir, port, conns, seconds, bad=False, background=False):
    args = [os.path.join(bin_dir, "opgate-sim"), "load", "--port", str(port), "--secret",
            WEBHOOK_SECRET, "--connections", str(conns), "--seconds", str(seconds),
            "--body-bytes", "1024"]
    if bad:
        args.append("--bad-signatures")
    if background:
        return subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    return json.loads(subprocess.run(args, capture_output=True, text=True, check=True).stdout)


def stored_check(stored, acked, duplicates):
    """Every 2xx for a new event must be stored; duplicates are counted apart."""
    if stored < acked:
        return f"LOST {acked - stored}"
    extra = f" ({duplicates} dup)" if duplicates else ""
    return "yes" + extra if stored == acked else f"yes (+{stored - acked}){extra}"


def cpu_per_ack(bin_dir, seconds, conns=64):
    """One level only, with the daemon's CPU (user + system, from /proc) and
    the load generator's (from its exit's rusage) per acknowledged event:
    for comparing two builds alternately, as a busy neighbour on a shared
    machine moves CPU per event less than the rate."""
    from bench_outbox import cpu_seconds
    c = Cluster(bin_dir, orders(1))
    try:
        load(bin_dir, c.ingress_port, conns, 2)  # warm up
        before, children = cpu_seconds(c.daemon.pid), os.times()
        r = load(bin_dir, c.ingress_port, conns, seconds)
        used = cpu_seconds(c.daemon.pid) - before
        after = os.times()
        sender = (after.children_user + after.children_system
                  - children.children_user - children.children_system)
        acks = max(r['accepted'], 1)
        print(f"{conns} connections: {r['accepted'] / r['seconds']:.0f} acks/s, p99 "
              f"{r['p99_ms']:.2f} ms, daemon CPU {used / acks * 1e6:.1f} us per ack, "
              f"load generator CPU {sender / acks * 1e6:.1f} us per ack")
    finally:
        c.close()
    if shutil.which("redis-server"):  # installed by scripts/bench-ingest
        from redisbench import redis_cpu
        rate, server, client = redis_cpu(conns, 300_000)
        print(f"Redis, {conns} connections: {rate:.0f} XADDs/s, redis-server CPU {server:.1f} us "
              f"per XADD, redis-benchmark CPU {client:.1f} us per XADD")


def thread_cpu(pid):
    """CPU seconds so far by thread name, summed over threads of one name."""
    from bench_outbox import stat_cpu
    used = {}
    for stat in glob.glob(f"/proc/{pid}/task/*/stat"):
        name, seconds = stat_cpu(stat)
        used[name] = used.get(name, 0) + seconds
    return used


def fill(bin_dir, seconds, conns=64, window=5):
    """The rate as the store fills: RocksDB's compactions come in bursts,
    and a window they fall in acks fewer at more CPU per ack."""
    from bench_outbox import cpu_seconds
    c = Cluster(bin_dir, orders(1))
    try:
        load(bin_dir, c.ingress_port, conns, 2)  # warm up
        print(f"{'after s':>7} {'acks/s':>8} {'p99 ms':>7} {'daemon us/ack':>13}")
        for end in range(window, seconds + 1, window):
            before = cpu_seconds(c.daemon.pid)
            r = load(bin_dir, c.ingress_port, conns, window)
            acks = max(r["accepted"], 1)
            print(f"{end:>7} {r['accepted'] / r['seconds']:>8.0f} {r['p99_ms']:>7.2f} "
                  f"{(cpu_seconds(c.daemon.pid) - before) / acks * 1e6:>13.1f}", flush=True)
        used = sorted(thread_cpu(c.daemon.pid).items(), key=lambda kv: -kv[1])
        print("CPU s by thread: " + ", ".join(f"{n} {s:.1f}" for n, s in used if s >= 0.05))
    finally:
        c.close()


def main():
    bin_dir, seconds = sys.argv[1], int(sys.argv[2])
    pg_url = sys.argv[3] if len(sys.argv) > 3 else ""
    if pg_url == "--cpu":
        return cpu_per_ack(bin_dir, seconds)
    if pg_url == "--fill":
        return fill(bin_dir, seconds)
    c = Cluster(bin_dir, orders(1))
    try:
        rate = disk_sync_rate(c.dir)
        print(f"disk: {rate:.0f} synced 1 KiB writes/s (write + fdatasync loop)")
        print(f"body: about 1 KiB, signed per request; {seconds} s per level\n")
        print(f"{'conns':>5} {'acks/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'p99.9 ms':>8} "
              f"{'fsyncs/s':>8} {'ev/fsync':>8} {'x disk':>6} {'stored=2xx':>10}")
        for conns in (1, 16, 64, 256):
            stored0 = c.metric("opgate_inbox_group_commit_events_total", absent=0)
            fsync0 = c.metric("opgate_wal_fsyncs_total", absent=0)
            r = load(bin_dir, c.ingress_port, conns, seconds)
            stored = c.metric("opgate_inbox_group_commit_events_total", absent=0) - stored0
            fsyncs = c.metric("opgate_wal_fsyncs_total", absent=0) - fsync0
            secs = r["seconds"]
            ok = r["accepted"]
            refused = sum(r["refused"].values())
            print(f"{conns:>5} {ok / secs:>8.0f} {r['p50_ms']:>7.2f} {r['p99_ms']:>7.2f} "
                  f"{r['p999_ms']:>8.2f} {fsyncs / secs:>8.0f} {stored / max(fsyncs, 1):>8.1f} "
                  f"{ok / secs / rate:>6.1f} {stored_check(int(stored), ok, r['duplicates']):>10}"
                  + (f"  refused: {r['refused']}" if refused else "")
                  + (f"  connection errors: {r['errors']}" if r["errors"] else ""),
                  flush=True)

        # Good senders alone, then the same good senders while a flood of
        # badly signed requests arrives on other connections.
        print("\nflood of bad signatures: 16 good connections, with and without 64 flooding")
        print(f"{'':>14} {'good acks/s':>11} {'p50 ms':>7} {'p99 ms':>7} {'bad req/s':>9}")
        alone = load(bin_dir, c.ingress_port, 16, seconds)
        flood = load(bin_dir, c.ingress_port, 64, seconds + 2, bad=True, background=True)
        time.sleep(1)
        during = load(bin_dir, c.ingress_port, 16, seconds)
        flood_result = json.loads(flood.communicate()[0])
        for label, r, bad_rate in (("alone", alone, 0.0),
                                   ("during flood", during,
                                    flood_result["requests"] / flood_result["seconds"])):
            print(f"{label:>14} {r['accepted'] / r['seconds']:>11.0f} {r['p50_ms']:>7.2f} "
                  f"{r['p99_ms']:>7.2f} {bad_rate:>9.0f}")
        if pg_url:
            compare_with_postgres(bin_dir, c, pg_url, seconds)
    finally:
        c.close()


def compare_with_postgres(bin_dir, c, pg_url, seconds, conns=64):
    """opgate, pgbench and Redis one after the other at the same concurrency,
    each alone on the machine (the others idle), twice, so drift shows."""
    from pgbench import pgbench
    from redisbench import redis_xadd
    print(f"\nopgate beside PostgreSQL 15 (synchronous commit) and Redis 7 (appendfsync "
          f"always), {conns} connections, {seconds} s each, twice:")
    print(f"{'':>22} {'per s':>8} {'p50 ms':>7} {'p99 ms':>7}")
    rounds = []
    for _ in range(2):
        tps, pg50, pg99 = pgbench(pg_url, conns, seconds)
        xadds, rd50, rd99 = redis_xadd(conns, seconds)
        r = load(bin_dir, c.ingress_port, conns, seconds)
        acks = r["accepted"] / r["seconds"]
        print(f"{'pgbench inserts':>22} {tps:>8.0f} {pg50:>7.2f} {pg99:>7.2f}")
        print(f"{'redis XADDs':>22} {xadds:>8.0f} {rd50:>7.2f} {rd99:>7.2f}")
        print(f"{'opgate acks':>22} {acks:>8.0f} {r['p50_ms']:>7.2f} {r['p99_ms']:>7.2f}",
              flush=True)
        rounds.append((acks / tps, acks / xadds, r["p99_ms"], pg99, rd99))
    for to_pg, to_redis, p99, pg99, rd99 in rounds:
        print(f"opgate / pgbench: {to_pg:.2f}x the rate, p99 {p99:.2f} ms vs {pg99:.2f} ms; "
              f"opgate / redis: {to_redis:.2f}x, p99 vs {rd99:.2f} ms")


if __name__ == "__main__":
    sys.exit(main())
