"""Several opgate nodes on one PostgreSQL database, beside the simulators,
for scripts/cluster-demo, scripts/crash-cluster and scripts/bench-cluster.
The server is started by the shell script (scripts/lib/postgres.sh) and
its connection string passed in; each run makes a database of its own.
Standard library only (psql for the database)."""

import hashlib
import json
import os
import random
import signal
import subprocess

from cluster import ADMIN_TOKEN, WEBHOOK_SECRET, Cluster, _wait_file, http


def psql(url, sql):
    """Runs sql; returns what it printed (unaligned, tuples only)."""
    return subprocess.run(["psql", url, "-v", "ON_ERROR_STOP=1", "-qAtc", sql], check=True,
                          stdout=subprocess.PIPE, text=True).stdout


class Nodes(Cluster):
    """Cluster with `count` daemons (opgate serve) sharing one database."""

    def __init__(self, bin_dir, orders, pg_url, count=3, payments_timeout_ms=1000, keep=False,
                 pool_size=8):
        self.pg_url = pg_url
        self.count = count
        self.pool_size = pool_size
        self.database = "opgate_" + os.urandom(4).hex()
        psql(pg_url, f"CREATE DATABASE {self.database}")
        self.db_url = f"{pg_url} dbname={self.database}"
        self.procs = [None] * count
        self.ports = [(0, 0)] * count
        self.stopped = set()  # nodes paused with SIGSTOP
        self.target = 0
        super().__init__(bin_dir, orders, payments_timeout_ms, keep)

    def node_config(self, i):
        sha = hashlib.sha256(ADMIN_TOKEN.encode()).hexdigest()
        ingress, operator = self.ports[i]
        path = self._p(f"opgate-{i}.toml")
        seed = '[orders]\nseed_file = "orders.ndjson"\n' if i == 0 else ""
        with open(path, "w") as f:
            f.write(f'''data_dir = "data-{i}"
[store]
backend = "postgres"
url_env = "OPGATE_SCRIPT_DB_URL"
pool_size = {self.pool_size}
[ingress]
listen = "127.0.0.1:{ingress}"
[[ingress.sources]]
name = "agents"
secrets = ["{WEBHOOK_SECRET}"]
[operator]
listen = "127.0.0.1:{operator}"
[[operator.tokens]]
principal = "admin"
token_sha256 = "{sha}"
scopes = ["admin"]
owners = ["*"]
max_amount_minor = {{ USD = 100000000 }}
[agent]
base_url = "http://127.0.0.1:{self.agent_port}/v1"
api_key_env = "OPGATE_SCRIPT_AGENT_KEY"
[payments]
base_url = "http://127.0.0.1:{self.payments_port}"
secret_key_env = "OPGATE_SCRIPT_PAYMENTS_KEY"
timeout_ms = {self.payments_timeout_ms}
{seed}[policy]
two_person_threshold_minor = {{ USD = 100000000 }}
''')
        return path

    def start_daemon(self):
        # Node 0 first: it seeds the orders; the others find them there.
        for i in range(self.count):
            self.start_node(i)
        self.point_webhooks(0)

    def start_node(self, i):
        path = self.node_config(i)
        ports = self._p(f"node{i}.ports")
        if os.path.exists(ports):
            os.remove(ports)
        env = dict(os.environ, OPGATE_SCRIPT_AGENT_KEY="sk-agent-script",
                   OPGATE_SCRIPT_PAYMENTS_KEY="sk_test_script", OPGATE_SCRIPT_DB_URL=self.db_url)
        self.procs[i] = self._spawn(f"node{i}", [f"{self.bin}/opgate", "serve", "--config", path,
                                                 "--ports-file", ports], env)
        p = json.loads(_wait_file(ports, self.procs[i], timeout=60))
        # The same ports again after a restart, so the simulators' target holds.
        self.ports[i] = (p["ingress"], p["operator"])
        self.stopped.discard(i)
        if i == 0 or self.daemon is None:
            self.daemon = self.procs[0]
        self.ingress_port, self.operator_port = self.ports[self.alive()[0]]

    def point_webhooks(self, i):
        self.target = i
        self.agent_admin("POST", "/_sim/webhook_target",
                         {"url": f"http://127.0.0.1:{self.ports[i][0]}/v1/webhooks/agents"})

    def alive(self):
        return [i for i in range(self.count)
                if self.procs[i] and self.procs[i].poll() is None and i not in self.stopped]

    def kill_node(self, i):
        self.procs[i].send_signal(signal.SIGKILL)
        self.procs[i].wait()
        self.stopped.discard(i)

    def pause_node(self, i):
        self.procs[i].send_signal(signal.SIGSTOP)
        self.stopped.add(i)

    def resume_node(self, i):
        self.procs[i].send_signal(signal.SIGCONT)
        self.stopped.discard(i)

    def op(self, method, path, body=None, node=None):
        alive = self.alive()
        i = node if node is not None else (random.choice(alive) if alive else 0)
        return http(method, f"http://127.0.0.1:{self.ports[i][1]}{path}", body, ADMIN_TOKEN,
                    timeout=60)

    def close(self):
        for i in list(self.stopped):
            self.resume_node(i)
        for p in self.procs:
            if p and p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
        self.daemon = None
        super().close()
        try:
            psql(self.pg_url, f"DROP DATABASE IF EXISTS {self.database} WITH (FORCE)")
        except subprocess.CalledProcessError:
            pass
