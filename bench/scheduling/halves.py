"""The two I/O daemons' halves of single-block runs (issue 31: opt4's two groups of runs).

In single blocks of one stripe unit (64 KiB per task over 64 KiB stripes on two daemons),
task k's block is on daemon k mod 2: the even tasks wait on the first daemon, the odd ones on
the second. Per run, the mean task time of each half says whether one daemon was late, and
which. ``python -m pvfs.bench.scheduling.halves STUDY.json ... [--out FILE]``: per study,
pass (fitting, scored), operation, cache state and setting, each run's halves and how many
runs had one half later than the other by more than ``LATE_S``; no verdict.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from statistics import mean

LATE_S = 0.008   # one half's mean task time this much above the other's: that daemon late
SSIZE = 64 << 10


def halves(run: dict) -> tuple[float, float]:
    """(even tasks' mean, odd tasks' mean) of one run's task times."""
    t = run["task_s"]
    return mean(t[0::2]), mean(t[1::2])


def study_halves(doc: dict, label: str) -> dict:
    rows, counts = [], {}
    for part in ("fit_results", "results"):
        for r in doc.get(part) or []:
            if r["workload"] != "single-block" or r["request_bytes"] != SSIZE \
                    or "runs" not in r:
                continue
            hs = [halves(x) for x in r["runs"] if "task_s" in x]
            rows.append({"pass": "fit" if part == "fit_results" else "scored",
                         "operation": r["operation"], "cached": r["cached"],
                         "algorithm": r["algorithm"],
                         "even_ms": [round(e * 1e3, 1) for e, _ in hs],
                         "odd_ms": [round(o * 1e3, 1) for _, o in hs],
                         "mean_task_ms": [round(x["mean_task_service_s"] * 1e3, 1)
                                          for x in r["runs"]]})
            key = f"{r['operation']}/{'opt4' if r['algorithm'] == 'opt4' else 'others'}"
            c = counts.setdefault(key, {"runs": 0, "odd_late": 0, "even_late": 0})
            c["runs"] += len(hs)
            c["odd_late"] += sum(o - e > LATE_S for e, o in hs)
            c["even_late"] += sum(e - o > LATE_S for e, o in hs)
    return {"study": label, "late_s": LATE_S, "counts": counts, "cells": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pvfs.bench.scheduling.halves")
    ap.add_argument("studies", nargs="+")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    doc = {"what": "single-block 64 KiB runs: the even tasks' (first daemon) and odd tasks' "
                   "(second daemon) mean task times per run",
           "studies": [study_halves(json.loads(Path(p).read_text()), Path(p).name)
                       for p in a.studies]}
    text = json.dumps(doc, indent=1)
    if a.out:
        Path(a.out).write_text(text + "\n")
    for s in doc["studies"]:
        print(s["study"], json.dumps(s["counts"]), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
