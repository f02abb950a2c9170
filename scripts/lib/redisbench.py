"""The Redis baseline the ingest benchmark compares with: a private
redis-server (Debian's redis-server 7) logging every write to its
append-only file with `appendfsync always` (one fsync per event-loop pass,
before any reply of that pass), and redis-benchmark sending XADDs of a
1 KiB field from `clients` connections. Standard library only."""

import contextlib
import csv
import io
import os
import shutil
import socket
import subprocess
import tempfile
import time

from pgbench import BODY_BYTES


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def private_redis():
    """A private redis-server on a free port, logging every write with
    `appendfsync always`: (its port, its pid)."""
    work = tempfile.mkdtemp(prefix="opgate-redis-")
    port = free_port()
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", work,
         "--appendonly", "yes", "--appendfsync", "always", "--save", "", "--protected-mode",
         "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 10
        while subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True,
                             text=True).stdout.strip() != "PONG":
            if time.time() > deadline:
                raise RuntimeError("redis-server did not start")
            time.sleep(0.05)
        yield port, server.pid
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(work, ignore_errors=True)


def xadds(port, clients, count):
    """redis-benchmark's XADDs of a 1 KiB field: its last CSV row."""
    out = subprocess.run(
        ["redis-benchmark", "-p", str(port), "-c", str(clients), "-n", str(count), "--csv",
         "XADD", "opgate", "*", "body", "x" * BODY_BYTES],
        capture_output=True, text=True, check=True).stdout
    return list(csv.DictReader(io.StringIO(out)))[-1]


def redis_xadd(clients, seconds, expected_rate=50_000):
    """(XADDs per second, p50 ms, p99 ms), about `seconds` long."""
    with private_redis() as (port, _):
        row = xadds(port, clients, int(expected_rate * seconds))
        return float(row["rps"]), float(row["p50_latency_ms"]), float(row["p99_latency_ms"])


def redis_cpu(clients, count):
    """(XADDs per second, redis-server's CPU and redis-benchmark's per XADD in
    microseconds) for `count` XADDs: the server's from /proc, the client's
    from its exit's rusage."""
    from bench_outbox import cpu_seconds
    with private_redis() as (port, pid):
        before, children = cpu_seconds(pid), os.times()
        row = xadds(port, clients, count)
        server = cpu_seconds(pid) - before
        after = os.times()
        client = (after.children_user + after.children_system
                  - children.children_user - children.children_system)
        return float(row["rps"]), server / count * 1e6, client / count * 1e6
