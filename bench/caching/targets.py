"""Issue 32's targets for ``pvfs-admin study caching --quick --json``, read from its result.

Fixed before the run they judge (2026-11-28):

* **bypass**: on LU and DB2, runtime bypass (``runtime10`` or ``runtime25``, each reported)
  is at least 4 % faster than cache-everything, ``time_norm <= 0.96``, with the interval's
  upper end below 1.0 (``time_norm_hi < 1``). Met on a trace if either threshold meets both.
* **adaptive**: the better of ``adaptive``/``sketch`` (by median ``time_norm``) against the
  better fixed threshold: the median over the rounds of its run ÷ the threshold's run of the
  same round, with the order-statistic interval. *At least as good* on a trace: that median
  ``<= 1``; *better*: the interval's upper end ``< 1``. Met if at least as good on all six
  and better on at least two.

    python -m pvfs.bench.caching.targets bench/results/FILE.json [--write]

``--write`` adds the verdicts to the file as ``"targets"``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from pvfs.bench.caching.stats import ratio_interval

__all__ = ["caching_targets"]

BYPASS_TRACES = ("lu", "db2")
FIXED = ("runtime10", "runtime25")
OURS = ("adaptive", "sketch")


def _cells(doc: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r["trace"], r["policy"]): r for r in doc["results"]}


def _bypass(cells: dict, traces: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for t in BYPASS_TRACES:
        per = {}
        for pol in FIXED:
            r = cells.get((t, pol))
            if r is None or r.get("time_norm") is None:
                continue
            per[pol] = {"time_norm": r["time_norm"], "lo": r.get("time_norm_lo"),
                        "hi": r.get("time_norm_hi"), "level": r.get("time_norm_level"),
                        "met": r["time_norm"] <= 0.96 and (r.get("time_norm_hi") or 1) < 1.0}
        out[t] = {"policies": per, "met": any(v["met"] for v in per.values())} if per else \
            {"policies": {}, "met": None}
    missing = [t for t in BYPASS_TRACES if t not in traces]
    out["met"] = None if missing else all(out[t]["met"] for t in BYPASS_TRACES)
    return out


def _adaptive(cells: dict, traces: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    better = as_good = 0
    for t in traces:
        fixed = [cells[(t, p)] for p in FIXED if (t, p) in cells]
        ours = [cells[(t, p)] for p in OURS if (t, p) in cells]
        if not fixed or not ours:
            continue
        best = min(fixed, key=lambda r: r["time_norm"])
        mine = min(ours, key=lambda r: r["time_norm"])
        med, lo, hi, level = ratio_interval(mine["runs_s"], best["runs_s"])
        row = {"ours": mine["policy"], "fixed": best["policy"], "ratio": med, "lo": lo,
               "hi": hi, "level": level, "as_good": med <= 1.0, "better": hi < 1.0}
        as_good += row["as_good"]
        better += row["better"]
        out[t] = row
    n = len(out)
    out["as_good_on"], out["better_on"], out["traces"] = as_good, better, n
    out["met"] = None if n < 6 else (as_good == n and better >= 2)
    return out


def caching_targets(doc: dict[str, Any]) -> dict[str, Any]:
    """Both targets' verdicts (``met``: True, False, or None when a trace or policy the
    target needs was not run), with the numbers behind them."""
    cells = _cells(doc)
    traces = list(dict.fromkeys(r["trace"] for r in doc["results"]))
    return {"bypass": _bypass(cells, traces), "adaptive": _adaptive(cells, traces),
            "rules": __doc__.split("\n\n")[1]}


def main(argv: list[str]) -> None:
    path = argv[0]
    with open(path) as f:
        doc = json.load(f)
    got = caching_targets(doc)
    if "--write" in argv:
        doc["targets"] = got
        with open(path, "w") as f:
            json.dump(doc, f, indent=1)
    print(json.dumps({k: v for k, v in got.items() if k != "rules"}, indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
