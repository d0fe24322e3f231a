"""The model's write part fitted again on an earlier study's write runs and scored on fresh
runs it was not fitted to (issue 31; the rule in docs/scheduling.md, "Decided before this
session's runs", twenty-ninth session).

``refit``: the study's model with its read part unchanged and its write part fitted again
(``fit.with_writes``) on every write run the study kept, its fitting pass and its scored
cells alike; a cell run in both has its runs pooled, and is fitted on their median::

    python -m pvfs.bench.scheduling.writes refit STUDY.json --out W.json

``score``: on a fresh study's fixed write runs (opt1..opt4), each model's |ln(predicted /
observed median)| per cell and algorithm; the difference of the two models' medians with a
95 % interval over paired resamples of the cell-algorithm pairs; each model's pick per cell
scored on those runs (``picks.score_pick``); rs' cells as the study scored them::

    python -m pvfs.bench.scheduling.writes score FRESH.json --old OLD.json --new W.json
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from dataclasses import replace
from pathlib import Path
from statistics import median

from pvfs.bench.scheduling import score
from pvfs.bench.scheduling.picks import _cells, pick_of, score_pick
from pvfs.bench.scheduling.study import observations
from pvfs.models import fit, rs


def write_rows(study: dict) -> list[dict]:
    """The study's fixed write rows (fitting pass and scored), one per cell and algorithm,
    the runs of a cell run in both concatenated and its median taken again."""
    rows: dict[tuple, dict] = {}
    for x in [*(study.get("fit_results") or []), *study["results"]]:
        if x.get("operation", "read") != "write" or x["algorithm"] not in score.ALGOS:
            continue
        key = (*score._cell_key(x), x["algorithm"])
        runs = list(x.get("runs") or [])
        if key in rows:
            rows[key]["runs"] += runs
        else:
            rows[key] = {**x, "runs": runs}
    for r in rows.values():
        if r["runs"]:
            r["median_mean_task_service_s"] = median(score.run_values(r))
    return list(rows.values())


def refit(study: dict, spread: bool = True) -> tuple[rs.Params, list[dict]]:
    """The study's model, its write part fitted again on all the study's write runs."""
    p = rs.Params.from_wire(study["model"])
    reads = replace(p, write=None)
    new, res = fit.with_writes(reads, observations(write_rows(study), "write"),
                               study["clients"], study["iods"], s_cache=p.S_cache,
                               spread=spread)
    if new.write is None:
        raise ValueError("not enough write runs to fit a write model")
    return new, res


def errors(params: rs.Params, doc: dict) -> dict[tuple, dict]:
    """Per fresh fixed write cell and algorithm: the write part's prediction, the observed
    median and |ln(predicted / observed)|."""
    obs = observations([x for x in doc["results"] if x.get("runs")], "write")
    out = {}
    for r in fit.residuals(params.write, obs, doc["clients"], doc["iods"]):
        key = (r["workload"], r["request_bytes"], r["cached"], r["algorithm"])
        out[key] = {"predicted_s": r["predicted_s"], "observed_s": r["observed_s"],
                    "abs_ln": abs(math.log(r["predicted_s"] / r["observed_s"]))}
    return out


def compare(old: dict[tuple, dict], new: dict[tuple, dict], n: int = score.BOOT) -> dict:
    """median |ln| under ``old`` minus under ``new``, its 95 % interval over paired
    resamples of the pairs, and the verdict: "better" (the interval above 0), "worse"
    (below) or "undecided"."""
    keys = sorted(set(old) & set(new), key=str)
    if len(keys) < 2:
        return {"pairs": len(keys), "verdict": "undecided"}
    a = [old[k]["abs_ln"] for k in keys]
    b = [new[k]["abs_ln"] for k in keys]
    rng = random.Random("writes/compare")
    diffs = []
    for _ in range(n):
        idx = rng.choices(range(len(keys)), k=len(keys))
        diffs.append(median(a[i] for i in idx) - median(b[i] for i in idx))
    ci = score._interval(diffs)
    verdict = "better" if ci[0] > 0 else "worse" if ci[1] < 0 else "undecided"
    return {"pairs": len(keys), "old_median_abs_ln": median(a),
            "new_median_abs_ln": median(b), "difference": median(a) - median(b),
            "ci95": ci, "verdict": verdict}


def picks(models: dict[str, rs.Params], doc: dict) -> list[dict]:
    """Each model's pick per fresh write cell, scored on the cell's fixed runs."""
    rows = []
    for key, by in sorted(_cells(doc["results"]).items(), key=lambda kv: str(kv[0])):
        if key[3] != "write":
            continue
        row = {"workload": key[0], "request_bytes": key[1], "cached": key[2]}
        for name, p in models.items():
            pick = pick_of(p, key, doc["clients"], doc["iods"])
            s = score_pick(by, pick, f"writes/{'/'.join(map(str, key))}/pick")
            row[name] = {"pick": pick, "best": s["best"], "over_best": s["rs_over_best"],
                         "ci95": s["ci95"], "within_5pct": s["within_5pct"]}
        rows.append(row)
    return rows


def score_fresh(doc: dict, old: rs.Params, new: rs.Params) -> dict:
    eo, en = errors(old, doc), errors(new, doc)
    cells = [{"workload": k[0], "request_bytes": k[1], "cached": k[2], "algorithm": k[3],
              "observed_s": eo[k]["observed_s"], "old_predicted_s": eo[k]["predicted_s"],
              "new_predicted_s": en[k]["predicted_s"], "old_abs_ln": eo[k]["abs_ln"],
              "new_abs_ln": en[k]["abs_ln"]} for k in sorted(set(eo) & set(en), key=str)]
    rs_cells = [c for c in doc["targets"]["rs_within_5pct_of_best"]["cells"]
                if c.get("operation") == "write"]
    return {"accuracy": compare(eo, en), "cells": cells,
            "picks": picks({"old": old, "new": new}, doc), "rs": rs_cells}


def _model(path: str) -> rs.Params:
    return rs.Params.from_wire(json.loads(Path(path).read_text())["model"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pvfs.bench.scheduling.writes",
                                 description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("refit", help="fit the write part again on a study's write runs")
    r.add_argument("study")
    s = sub.add_parser("score", help="both models scored on a fresh study's write runs")
    s.add_argument("study")
    s.add_argument("--old", required=True, help="a document with the model before")
    s.add_argument("--new", required=True, help="a document with the refitted model")
    for p in (r, s):
        p.add_argument("--out", default=None, help="write the JSON here too")
    a = ap.parse_args(argv)
    doc = json.loads(Path(a.study).read_text())
    if a.cmd == "refit":
        params, res = refit(doc)
        out = {"model": params.to_wire(), "residuals_fit": res,
               "fitted_from": {"source": Path(a.study).name, "write_runs": "every write run "
                               "of its fitting pass and scored cells, pooled per cell"},
               "command": " ".join(["python -m pvfs.bench.scheduling.writes", *sys.argv[1:]])
               if argv is None else None}
    else:
        out = {"fresh": Path(a.study).name, "old": a.old, "new": a.new,
               **score_fresh(doc, _model(a.old), _model(a.new))}
    text = json.dumps(out, indent=1)
    if a.out:
        Path(a.out).write_text(text + "\n")
    print(text[:2000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
