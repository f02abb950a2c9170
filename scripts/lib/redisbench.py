"""The Redis baseline the ingest benchmark compares with: a private
redis-server (Debian's redis-server 7) logging every write to its
append-only file with `appendfsync always` (one fsync per event-loop pass,
before any reply of that pass), and redis-benchmark sending XADDs of a
1 KiB field from `clients` connections. Standard library only."""

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


def redis_xadd(clients, seconds, expected_rate=50_000):
    """(XADDs per second, p50 ms, p99 ms), about `seconds` long."""
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
        out = subprocess.run(
            ["redis-benchmark", "-p", str(port), "-c", str(clients),
             "-n", str(int(expected_rate * seconds)), "--csv",
             "XADD", "opgate", "*", "body", "x" * BODY_BYTES],
            capture_output=True, text=True, check=True).stdout
        row = list(csv.DictReader(io.StringIO(out)))[-1]
        return float(row["rps"]), float(row["p50_latency_ms"]), float(row["p99_latency_ms"])
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(work, ignore_errors=True)
