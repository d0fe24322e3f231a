"""Figs. 5.7-5.11 scored from runs with ``--cache-reports`` (issue 31): per cell, rs as
measured, rs told the cache right and rs told 0, each setting's median over the best fixed
algorithm's with ``score.score_cell``'s interval and verdict, and per setting and cache
column how many cells are decided within 5 %, over it or undecided. Cells may come from
several runs, each taking only its uncached or cached column::

    python -m pvfs.bench.scheduling.told F2.json:uncached F3.json:cached --out S.json \\
        --plot-dir docs/study/...

A cell given by two runs is refused.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pvfs.bench.scheduling import score

COLUMNS = {"uncached": (False,), "cached": (True,), "both": (False, True)}


def cells_of(parts: list[tuple[dict, str]]) -> dict[tuple, dict[str, dict]]:
    """(cached, workload, bytes) -> setting -> row, the read cells of each run's column."""
    cells: dict[tuple, dict[str, dict]] = {}
    for doc, column in parts:
        mine: dict[tuple, dict[str, dict]] = {}
        for r in doc["results"]:
            if (r["workload"] != "mixed-phase" and r.get("operation", "read") == "read"
                    and r["cached"] in COLUMNS[column]):
                mine.setdefault((r["cached"], r["workload"], r["request_bytes"]), {})[
                    r["algorithm"]] = r
        for k in mine:
            if k in cells:
                raise ValueError(f"cell {k} is in two runs")
        cells.update(mine)
    return cells


def score_all(cells: dict[tuple, dict[str, dict]], settings: list[str]) -> dict:
    rows, summary = [], {}
    for k in sorted(cells, key=str):
        by = cells[k]
        row = {"cached": k[0], "workload": k[1], "request_bytes": k[2]}
        for st in settings:
            if st in by and all(a in by for a in score.ALGOS):
                sc = score.score_cell(by, st, f"{k[1]}/{k[2]}/{k[0]}/read/{st}")
                row[st] = {"best": sc["best"], "over_best": sc["rs_over_best"],
                           "ci95": sc["ci95"], "within_5pct": sc["within_5pct"]}
        rows.append(row)
    for st in settings:
        for cached in (False, True):
            mine = [r[st] for r in rows if r["cached"] == cached and st in r]
            if not mine:
                continue
            ex = sorted(x["over_best"] for x in mine)
            summary[f"{st}/{'cached' if cached else 'uncached'}"] = {
                "cells": len(mine),
                "within": sum(x["within_5pct"] == "met" for x in mine),
                "over": sum(x["within_5pct"] == "missed" for x in mine),
                "undecided": sum(x["within_5pct"] == "undecided" for x in mine),
                "within_on_medians": sum(x["over_best"] <= score.WITHIN for x in mine),
                "median_over_best": ex[(len(ex) - 1) // 2] if len(ex) % 2 else
                (ex[len(ex) // 2 - 1] + ex[len(ex) // 2]) / 2}
    return {"cells": rows, "summary": summary}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pvfs.bench.scheduling.told",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="FILE[:uncached|:cached|:both] (default both)")
    ap.add_argument("--out", default=None, help="write the JSON here too")
    ap.add_argument("--plot-dir", default=None, help="draw figs. 5.7-5.11 here")
    a = ap.parse_args(argv)
    parts, names = [], []
    for spec in a.runs:
        path, _, column = spec.partition(":")
        parts.append((json.loads(Path(path).read_text()), column or "both"))
        names.append(f"{Path(path).name}:{column or 'both'}")
    first = parts[0][0]
    reports = next((d["cache_reports"] for d, _ in parts if d.get("cache_reports")), [])
    settings = ["rs", *(f"rs@{r}" for r in reports)]
    cells = cells_of(parts)
    out = {"what": "figs. 5.7-5.11: rs measured / told right / told 0 over the best fixed "
                   "algorithm per cell (score.score_cell)", "from": names,
           **score_all(cells, settings)}
    if a.plot_dir:
        from pvfs.bench.scheduling.plot import plot_told

        doc = {"disk": first["disk"], "cache_reports": reports,
               "results": [r for by in cells.values() for r in by.values()]}
        out["figures"] = plot_told(doc, a.plot_dir)
    text = json.dumps(out, indent=1)
    if a.out:
        Path(a.out).write_text(text + "\n")
    print(json.dumps(out["summary"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
