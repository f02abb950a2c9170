"""Starts opgate-sim payments, opgate-sim agent and opgate serve on free
loopback ports in a temporary directory, for the scripts under scripts/.
Standard library only."""

import hashlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

WEBHOOK_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
ADMIN_TOKEN = "tok-admin-" + secrets.token_hex(8)


def _wait_file(path, proc, timeout=20.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if os.path.exists(path) and os.path.getsize(path) > 0:
            return open(path).read().strip()
        if proc.poll() is not None:
            raise RuntimeError(f"process exited early ({proc.returncode}); see {path}.log")
        time.sleep(0.02)
    raise RuntimeError(f"timed out waiting for {path}")


def http(method, url, body=None, token=None, timeout=30):
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read()
            return r.status, (json.loads(raw) if raw else None)
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, json.loads(raw)
        except ValueError:
            return e.code, raw.decode(errors="replace")


def token_toml(principal, token, scopes, owners=("*",), max_amount_minor=None, tiers=()):
    """An [[operator.tokens]] entry for a token (stored as its SHA-256)."""
    q = lambda items: ", ".join(json.dumps(i) for i in items)
    lines = ["[[operator.tokens]]", f'principal = "{principal}"',
             f'token_sha256 = "{hashlib.sha256(token.encode()).hexdigest()}"',
             f"scopes = [{q(scopes)}]", f"owners = [{q(owners)}]"]
    if max_amount_minor:
        lines.append("max_amount_minor = { " +
                     ", ".join(f"{c} = {a}" for c, a in max_amount_minor.items()) + " }")
    if tiers:
        lines.append(f"tiers = [{q(tiers)}]")
    return "\n".join(lines) + "\n"


class Cluster:
    """tokens: more [[operator.tokens]] (token_toml's output) beside admin's;
    policy: the [policy] table's lines instead of a threshold no refund
    reaches; extra_config: TOML appended at the end (more tables)."""

    def __init__(self, bin_dir, orders, payments_timeout_ms=1000, keep=False, tokens="",
                 policy=None, extra_config=""):
        self.bin = bin_dir
        self.tokens = tokens
        self.policy = policy if policy is not None else \
            "two_person_threshold_minor = { USD = 100000000 }"
        self.extra_config = extra_config
        self.dir = tempfile.mkdtemp(prefix="opgate-script-")
        os.chmod(self.dir, 0o700)
        self.keep = keep
        self.daemon = None
        self.ingress_port = self.operator_port = self.mcp_port = 0
        self.payments_timeout_ms = payments_timeout_ms
        with open(os.path.join(self.dir, "orders.ndjson"), "w") as f:
            for o in orders:
                f.write(json.dumps(o) + "\n")
        self.payments = self._spawn("payments", [
            f"{bin_dir}/opgate-sim", "payments", "--listen", "127.0.0.1:0",
            "--port-file", self._p("payments.port"), "--orders", self._p("orders.ndjson"),
            "--secret-key", "sk_test_script"])
        self.payments_port = int(_wait_file(self._p("payments.port"), self.payments))
        self.agent = self._spawn("agent", [
            f"{bin_dir}/opgate-sim", "agent", "--listen", "127.0.0.1:0",
            "--port-file", self._p("agent.port"), "--webhook-secret", WEBHOOK_SECRET,
            "--api-key", "sk-agent-script"])
        self.agent_port = int(_wait_file(self._p("agent.port"), self.agent))
        self.start_daemon()

    def _p(self, name):
        return os.path.join(self.dir, name)

    def _spawn(self, name, args, env=None):
        log = open(self._p(name + ".log"), "a")
        return subprocess.Popen(args, stdout=log, stderr=log, env=env)

    def write_config(self):
        sha = hashlib.sha256(ADMIN_TOKEN.encode()).hexdigest()
        ingress = f"127.0.0.1:{self.ingress_port}"
        operator = f"127.0.0.1:{self.operator_port}"
        with open(self._p("opgate.toml"), "w") as f:
            f.write(f'''data_dir = "data"
[ingress]
listen = "{ingress}"
[[ingress.sources]]
name = "agents"
secrets = ["{WEBHOOK_SECRET}"]
[operator]
listen = "{operator}"
[[operator.tokens]]
principal = "admin"
token_sha256 = "{sha}"
scopes = ["admin"]
owners = ["*"]
max_amount_minor = {{ USD = 100000000 }}
{self.tokens}
[agent]
base_url = "http://127.0.0.1:{self.agent_port}/v1"
api_key_env = "OPGATE_SCRIPT_AGENT_KEY"
[payments]
base_url = "http://127.0.0.1:{self.payments_port}"
secret_key_env = "OPGATE_SCRIPT_PAYMENTS_KEY"
timeout_ms = {self.payments_timeout_ms}
[orders]
seed_file = "orders.ndjson"
[policy]
{self.policy}
{self.extra_config}
''')

    def start_daemon(self):
        self.write_config()
        ports = self._p("daemon.ports")
        if os.path.exists(ports):
            os.remove(ports)
        env = dict(os.environ, OPGATE_SCRIPT_AGENT_KEY="sk-agent-script",
                   OPGATE_SCRIPT_PAYMENTS_KEY="sk_test_script")
        self.daemon = self._spawn("daemon", [f"{self.bin}/opgate", "serve", "--config",
                                             self._p("opgate.toml"), "--ports-file", ports], env)
        p = json.loads(_wait_file(ports, self.daemon))
        self.ingress_port, self.operator_port = p["ingress"], p["operator"]
        self.mcp_port = p.get("mcp", 0)
        self.agent_admin("POST", "/_sim/webhook_target",
                         {"url": f"http://127.0.0.1:{self.ingress_port}/v1/webhooks/agents"})

    def kill_daemon(self):
        self.daemon.send_signal(signal.SIGKILL)
        self.daemon.wait()

    def op(self, method, path, body=None):
        return http(method, f"http://127.0.0.1:{self.operator_port}{path}", body, ADMIN_TOKEN)

    def agent_admin(self, method, path, body=None):
        return http(method, f"http://127.0.0.1:{self.agent_port}{path}", body)

    def payments_admin(self, method, path, body=None):
        return http(method, f"http://127.0.0.1:{self.payments_port}{path}", body)

    def metric(self, name, absent=None):
        """The sum of every series of a metric on the daemon's /metrics; a
        labelled counter has no series before its first increment, so the
        caller says what absence means (None: an error)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.operator_port}/metrics") as r:
            text = r.read().decode()
        values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                  if line.startswith(name + " ") or line.startswith(name + "{")]
        if not values:
            if absent is None:
                raise KeyError(f"/metrics has no {name}")
            return absent
        return sum(values)

    def operations(self, state=None):
        q = "/v1/operations?limit=1000" + (f"&state={state}" if state else "")
        out, cursor = [], None
        while True:
            status, body = self.op("GET", q + (f"&cursor={cursor}" if cursor else ""))
            if status != 200:
                raise RuntimeError(f"list operations: {status} {body}")
            out += body["operations"]
            cursor = body.get("next_cursor")
            if not cursor:
                return out

    def close(self):
        for p in (self.daemon, self.agent, self.payments):
            if p and p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    p.kill()
        if not self.keep:
            shutil.rmtree(self.dir, ignore_errors=True)


def orders(n, amount=1000, prefix="B"):
    placed = int(time.time()) - 3600
    return [{"order_id": f"{prefix}{i}", "owner": "demo-user", "amount_minor": amount + i,
             "currency": "USD", "payment_intent": f"pi_{prefix}{i}", "customer": "cus_demo",
             "payment_method": "visa ending 4242", "status": "paid", "placed_at": placed}
            for i in range(n)]
