"""Driver for scripts/bench-report: the decision report over a long history."""

import json
import os
import subprocess
import sys
import time

from bench_history import timed_cli, timed_get
from cluster import Cluster, orders


def main():
    bin_dir, history = sys.argv[1], int(sys.argv[2])
    c = Cluster(bin_dir, orders(10, prefix="R"))
    data = os.path.join(c.dir, "data")
    try:
        c.daemon.terminate()
        c.daemon.wait()
        print(f"== writing {history:,} settled refunds through the storage port", flush=True)
        start = time.time()
        subprocess.run([os.path.join(bin_dir, "opgate-sim"), "history", "--data-dir", data,
                        "--settled", str(history), "--outcome-unknown", "10"], check=True,
                       stdout=subprocess.DEVNULL)
        print(f"written in {time.time() - start:.0f} s", flush=True)
        c.start_daemon()
        timed_get(c, "/v1/report?from_ms=0", times=1)  # the first read warms the block cache
        whole_p50, whole_max, body = timed_get(c, "/v1/report?from_ms=0", times=5)
        report = json.loads(body)
        week_ms = int(time.time() * 1000) - 7 * 86400 * 1000
        week_p50, week_max, _ = timed_get(c, f"/v1/report?from_ms={week_ms}", times=5)
        chart_p50, chart_max, svg = timed_get(c, "/v1/report/charts/outcomes.svg?from_ms=0",
                                              times=3)
        cli_p50, cli_max, _ = timed_cli(c, bin_dir, ["--json", "report", "--since", "3650d"],
                                        times=3)
        proposals = report.get("proposals", 0)
        print()
        print(f"report over the whole history ({proposals:,} proposals): median "
              f"{whole_p50:.0f} ms, worst {whole_max:.0f} ms over HTTP")
        print(f"`opgate report --since 3650d --json`: median {cli_p50:.0f} ms, worst "
              f"{cli_max:.0f} ms")
        print(f"report over the last 7 days: median {week_p50:.0f} ms, worst {week_max:.0f} ms")
        print(f"outcomes chart (SVG, {len(svg):,} bytes): median {chart_p50:.0f} ms")
        ok = proposals >= history and whole_max < 2000
        print(f"{'met' if ok else 'MISSED':>6}  the whole-history report under 2 s")
        return 0 if ok else 1
    finally:
        c.close()


if __name__ == "__main__":
    sys.exit(main())
