"""Interleaved A/B of two code trees on the sliding window (issue 32: the CPU per byte of
the message back ends before and after a change).

    python bench/collective/ab.py BEFORE_SRC AFTER_SRC OUT.json [--ranks 8] [--repeat 4]
        [--methods thread,servers,rma]

``BEFORE_SRC`` / ``AFTER_SRC`` are ``src`` directories of two snapshots of the package
(``pvfs`` with ``bench`` inside it); each job runs with its tree first on ``PYTHONPATH``.
One private file system serves every job; per repeat every method runs under both trees,
the order of the trees alternating between repeats, and the JSON keeps every job's row
and the 1-minute load, with per method the median of after / before within a repeat, its
range and a distribution-free interval of that median (order statistics of the repeats'
ratios, the narrowest pair covering at least 95 %), the medians and ranges of each tree's
own CPU per byte, and ``uptime`` at the start and the end.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time


def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True,
                              check=False).stdout.strip()
    except OSError:
        return ""


def median_interval(xs: list[float], level: float = 0.95) -> dict:
    """The median of ``xs`` with its range and an order-statistics interval: the sorted
    values ``(x[k], x[n-1-k])`` for the largest ``k`` whose coverage (binomial, p = ½)
    is still at least ``level`` (the whole range when no narrower pair covers it)."""
    v = sorted(xs)
    n = len(v)
    k, coverage = 0, 1 - 2 * 0.5 ** n
    for j in range(1, n // 2):
        c = 1 - 2 * sum(math.comb(n, i) for i in range(j + 1)) / 2 ** n
        if c < level:
            break
        k, coverage = j, c
    return {"median": round(statistics.median(v), 3), "min": round(v[0], 3),
            "max": round(v[-1], 3), "ci_lo": round(v[k], 3), "ci_hi": round(v[n - 1 - k], 3),
            "ci_coverage": round(coverage, 3), "n": n}


def main() -> int:
    from pvfs.bench.collective.drive import WINDOW, _load, private_cluster, run_job

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("out")
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=4)
    ap.add_argument("--methods", default="thread,servers,rma")
    args = ap.parse_args()
    trees = {"before": args.before, "after": args.after}
    methods = args.methods.split(",")
    rows: list[dict] = []
    started, load_before, uptime_before = time.time(), _load(), _uptime()
    with private_cluster() as cfg:
        for rep in range(args.repeat):
            order = ["before", "after"] if rep % 2 == 0 else ["after", "before"]
            for method in methods:
                for tree in order:
                    opts = {"benchmark": "sliding_window", "method": method, **WINDOW}
                    k = 1 if method.partition("+")[0] == "servers" else 0
                    if k:
                        opts["lock_servers"] = k
                    os.environ["PYTHONPATH"] = trees[tree]
                    r = run_job(cfg, args.ranks + k, opts)
                    r.update(tree=tree, repeat=rep, load=_load())
                    rows.append(r)
                    print(f"[{rep + 1}/{args.repeat}] {method} {tree}: "
                          f"{r['cpu_s_per_gib']:.2f} CPU s/GiB, {r['mib_s']:.1f} MiB/s",
                          file=sys.stderr, flush=True)
    summary = {}
    for method in methods:
        pairs = [(a, b) for a in rows for b in rows if a["method"] == b["method"] == method
                 and a["repeat"] == b["repeat"] and a["tree"] == "after"
                 and b["tree"] == "before"]
        cpu = [a["cpu_s_per_gib"] / b["cpu_s_per_gib"] for a, b in pairs]
        speed = [a["mib_s"] / b["mib_s"] for a, b in pairs]
        own = {tree: median_interval([r["cpu_s_per_gib"] for r in rows
                                      if r["method"] == method and r["tree"] == tree])
               for tree in trees}
        summary[method] = {"cpu_after_over_before": [round(x, 3) for x in cpu],
                           "cpu_median": round(statistics.median(cpu), 3),
                           "cpu_ratio": median_interval(cpu),
                           "cpu_lower_in": sum(x < 1 for x in cpu),
                           "cpu_s_per_gib": own,
                           "mib_s_after_over_before": [round(x, 3) for x in speed],
                           "mib_s_median": round(statistics.median(speed), 3),
                           "mib_s_ratio": median_interval(speed)}
    with open(args.out, "w") as f:
        json.dump({"rows": rows, "summary": summary, "trees": trees, "ranks": args.ranks,
                   "repeat": args.repeat, "load_before": load_before, "load_after": _load(),
                   "uptime_before": uptime_before, "uptime_after": _uptime(),
                   "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
                   "seconds": round(time.time() - started, 1)}, f, indent=1)
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
