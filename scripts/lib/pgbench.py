"""The PostgreSQL baseline the benchmarks compare with: pgbench committing
single-row inserts of a row like an inbox event's (source, webhook id, body
hash, flags and a ~1.1 KiB body; primary key on source and id), with fsync
and synchronous_commit on, from `clients` connections. Standard library
only (psql and pgbench from Debian's postgresql-15)."""

import glob
import os
import shutil
import subprocess
import tempfile

from nodes import psql

BODY_BYTES = 1024


def pgbench(pg_url, clients, seconds):
    """(committed inserts per second, p50 ms, p99 ms)."""
    db = "opgate_pgbench_" + os.urandom(3).hex()
    psql(pg_url, f"CREATE DATABASE {db}")
    url = f"{pg_url} dbname={db}"
    work = tempfile.mkdtemp(prefix="opgate-pgbench-")
    try:
        psql(url, "CREATE TABLE events (source text, webhook_id text, body_sha256 bytea, "
                  "processed boolean, processed_at_ms bigint, data bytea, "
                  "PRIMARY KEY (source, webhook_id))")
        script = os.path.join(work, "insert.sql")
        with open(script, "w") as f:
            f.write("INSERT INTO events VALUES ('agents', md5(random()::text || :client_id), "
                    "sha256(random()::text::bytea), false, 0, "
                    f"convert_to(repeat('x', {BODY_BYTES + 100}), 'UTF8'));\n")
        out = subprocess.run(["pgbench", "-n", "-c", str(clients), "-j", "2", "-T", str(seconds),
                              "-l", "--log-prefix", os.path.join(work, "log"), "-f", script, url],
                             capture_output=True, text=True, check=True, cwd=work).stdout
        tps = None
        for line in out.splitlines():
            if line.startswith("tps"):
                tps = float(line.split("=")[1].split()[0])
        if tps is None:
            raise RuntimeError("pgbench printed no tps: " + out)
        # Per-transaction log: client, transaction, latency (us), ...
        latencies = []
        for path in glob.glob(os.path.join(work, "log*")):
            with open(path) as f:
                latencies += [int(line.split()[2]) for line in f if line.strip()]
        latencies.sort()
        pick = lambda q: latencies[max(0, int(len(latencies) * q) - 1)] / 1000 if latencies else 0
        return tps, pick(0.5), pick(0.99)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        psql(pg_url, f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
