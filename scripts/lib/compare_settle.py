"""Driver for scripts/compare-settle: see that script for what it measures."""

import os
import statistics
import sys

from bench_cluster import settle
from cluster import orders
from nodes import Nodes, psql

HZ = os.sysconf("SC_CLK_TCK")


def machine():
    """Busy clock ticks of the whole machine (/proc/stat: user, nice,
    system, irq, softirq)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return v[0] + v[1] + v[2] + v[5] + v[6]


def processes():
    """CPU ticks (user + system) and name of every process, by pid."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                st = f.read()
            with open(f"/proc/{pid}/cmdline") as f:
                argv = f.read().split("\0")
        except OSError:
            continue
        name = st[st.index("(") + 1:st.rindex(")")]
        fields = st[st.rindex(")") + 2:].split()
        if name == "postgres":
            name = "PostgreSQL"
        elif os.path.basename(argv[0]) == "opgate":
            name = "opgate"
        elif os.path.basename(argv[0]) == "opgate-sim" and len(argv) > 1:
            name = "opgate-sim " + argv[1]
        out[pid] = (name, int(fields[11]) + int(fields[12]))
    return out


def split(before, after, done):
    """ms of CPU per refund by process name, largest first. A kernel worker
    renames itself as it takes other work: a process is known by its pid."""
    by = {}
    for pid, (name, ticks) in after.items():
        used = ticks - before.get(pid, ("", 0))[1]
        if used > 0:
            by[name] = by.get(name, 0) + used
    return sorted(((n, t * 1000 / HZ / done) for n, t in by.items()), key=lambda x: -x[1])


def round_of(bin_dir, pg_url, n, nodes):
    c = Nodes(bin_dir, orders(n, prefix="S"), pg_url, count=nodes)
    try:
        mark = {}

        def before():
            psql(c.db_url, "CHECKPOINT")
            mark["machine"], mark["processes"] = machine(), processes()

        rate, done = settle(c, bin_dir, nodes, [f"S{i}" for i in range(n)], before)
        busy, procs, done = machine(), processes(), max(done, 1)
        cpu = (busy - mark["machine"]) * 1000 / HZ / done
        return rate, cpu, split(mark["processes"], procs, done)
    finally:
        c.close()


def main():
    a, b, pg_url = sys.argv[1], sys.argv[2], sys.argv[3]
    rounds, n, nodes = int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
    names = {a: "A", b: "B"}
    where = "on one node" if nodes == 1 else f"approved on {nodes} nodes in turn"
    print(f"A = {a}\nB = {b}\n{n} refunds {where}, {rounds} rounds, the order swapped each")
    results = {a: [], b: []}
    for r in range(rounds):
        for bin_dir in ((a, b) if r % 2 == 0 else (b, a)):
            rate, cpu, by = round_of(bin_dir, pg_url, n, nodes)
            results[bin_dir].append((rate, cpu))
            top = ", ".join(f"{name} {ms:.2f}" for name, ms in by[:4])
            print(f"round {r + 1} {names[bin_dir]}: {rate:.0f} refunds/s, {cpu:.2f} ms CPU per "
                  f"refund ({top})", flush=True)
    ahead = sum(1 for (ra, _), (rb, _) in zip(results[a], results[b]) if rb > ra)
    lower = sum(1 for (_, ca), (_, cb) in zip(results[a], results[b]) if cb < ca)
    for bin_dir in (a, b):
        rates = [x[0] for x in results[bin_dir]]
        cpus = [x[1] for x in results[bin_dir]]
        print(f"{names[bin_dir]}: median {statistics.median(rates):.0f} refunds/s, "
              f"{statistics.median(cpus):.2f} ms CPU per refund")
    print(f"B against A: ahead in {ahead} of {rounds} rounds, less CPU in {lower} of {rounds}")


if __name__ == "__main__":
    main()
