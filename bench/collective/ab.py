"""Interleaved A/B of two code trees on the sliding window (issue 32: the CPU per byte of
the message back ends before and after a change).

    python bench/collective/ab.py BEFORE_SRC AFTER_SRC OUT.json [--ranks 8] [--repeat 4]
        [--methods thread,servers,rma]

``BEFORE_SRC`` / ``AFTER_SRC`` are ``src`` directories of two snapshots of the package
(``pvfs`` with ``bench`` inside it); each job runs with its tree first on ``PYTHONPATH``.
One private file system serves every job; per repeat every method runs under both trees,
the order of the trees alternating between repeats, and the JSON keeps every job's row
and the 1-minute load, with per method the median of after / before within a repeat.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time


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
    started, load_before = time.time(), _load()
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
        summary[method] = {"cpu_after_over_before": [round(x, 3) for x in cpu],
                           "cpu_median": round(statistics.median(cpu), 3),
                           "mib_s_after_over_before": [round(x, 3) for x in speed],
                           "mib_s_median": round(statistics.median(speed), 3)}
    with open(args.out, "w") as f:
        json.dump({"rows": rows, "summary": summary, "trees": trees, "ranks": args.ranks,
                   "repeat": args.repeat, "load_before": load_before, "load_after": _load(),
                   "seconds": round(time.time() - started, 1)}, f, indent=1)
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
