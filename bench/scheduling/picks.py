"""The model's picks scored offline on a study's held-out runs (issue 31): today's fit
against the spread fit (``fit.fit(spread=True)``), as decided in docs/scheduling.md
("Decided before the next runs") before any of its numbers were seen.

For each study: the model is fitted again on the study's fitting pass only (its
``fit_results``, the runs in ``model_fit_on``), with and without ``spread``. For every scored
cell (not mixed-phase), the model's pick for the cell's nominal workload (``fit.workload_of``
on the cell's inputs, ``rs.select`` as the I/O daemon calls it, the write part for writes) is
scored on the cell's **scored** fixed runs by the study's rule (``score.score_cell``'s
verdicts) with the picked algorithm in rs' place: its median over the least fixed median, the
best chosen again in each bootstrap resample. These are picks, not runs of rs: no verdict on the targets.

The spread fit is an improvement when, over all the studies given together, fewer cells'
picks are decided over +5 % than under today's fit, and no cell is decided over +10 % under
it that is not under today's fit.

    python -m pvfs.bench.scheduling.picks STUDY.json [STUDY.json ...] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from statistics import median

from pvfs.bench.scheduling import score
from pvfs.bench.scheduling.study import fit_model
from pvfs.config import GATHER_S
from pvfs.models import fit, rs

FITS = {"today": False, "spread": True}


def _cells(results: list[dict]) -> dict[tuple, dict[str, dict]]:
    cells: dict[tuple, dict[str, dict]] = {}
    for x in results:
        if x["workload"] in fit.PIECES and x["algorithm"] in score.ALGOS:
            cells.setdefault(score._cell_key(x), {})[x["algorithm"]] = x
    return {k: v for k, v in cells.items() if all(a in v for a in score.ALGOS)}


def pick_of(params: rs.Params, key: tuple, clients: int, iods: int) -> str:
    """The model's pick for the cell's nominal workload (as the I/O daemon selects, opt4's
    gather added to its prediction)."""
    wl, size, cached, op = key
    w, _ = fit.workload_of(fit.Obs(wl, size, cached, "opt2", 0.0), clients, iods)
    p = params.write if op == "write" and params.write is not None else params
    return rs.select(p, w, fixed={"opt4": GATHER_S})[0]


#: The cache size the selector is told (thesis §5.6, figs. 5.7-5.11): the resident fraction
#: the daemon measures (ours: cachestat(2) or the emulated disk's cache; the cell's state),
#: no measurement and the cache size reported right (the thesis' rule S_req < S_cache), or
#: no measurement and 0 reported (every request uncached).
REPORTS = ("measured", "right", "zero")


def report_pick(params: rs.Params, key: tuple, clients: int, iods: int, report: str) -> str:
    """The model's pick for the cell's nominal workload with the cache ``report``ed so."""
    from dataclasses import replace

    wl, size, cached, op = key
    w, _ = fit.workload_of(fit.Obs(wl, size, cached, "opt2", 0.0), clients, iods)
    p = params.write if op == "write" and params.write is not None else params
    if report != "measured":
        w = replace(w, cached=None)
        p = p if report == "right" else replace(p, S_cache=0.0)
    return rs.select(p, w, fixed={"opt4": GATHER_S})[0]


def cache_reports(doc: dict, label: str) -> dict:
    """Figs. 5.7-5.11 in picks: the study's model (fitted on its fitting pass) picking with
    the cache reported three ways (``REPORTS``), each pick scored on the cell's scored fixed
    runs (``score_pick``). Picks, not runs of rs: the daemon has no switch to ignore what it
    measures (no verdict)."""
    clients, iods = doc["clients"], doc["iods"]
    p = rs.Params.from_wire(doc["model"])
    rows = []
    for key, by in sorted(_cells(doc["results"]).items(), key=lambda kv: str(kv[0])):
        row = {"workload": key[0], "request_bytes": key[1], "cached": key[2],
               "operation": key[3]}
        for rep in REPORTS:
            pick = report_pick(p, key, clients, iods, rep)
            sc = score_pick(by, pick, f"{label}/{'/'.join(map(str, key))}/pick")
            row[rep] = {"pick": pick, "best": sc["best"], "over_best": sc["rs_over_best"],
                        "ci95": sc["ci95"], "within_5pct": sc["within_5pct"],
                        "over_10pct": sc["over_10pct"]}
        rows.append(row)
    summ = {}
    for rep in REPORTS:
        for cached in (False, True):
            mine = [r[rep] for r in rows if r["cached"] == cached]
            summ[f"{rep}/{'cached' if cached else 'uncached'}"] = {
                "cells": len(mine),
                "within_5pct": sum(x["within_5pct"] == "met" for x in mine),
                "over_5pct": sum(x["within_5pct"] == "missed" for x in mine),
                "over_10pct": sum(x["over_10pct"] == "met" for x in mine),
                "median_over_best": sorted(x["over_best"] for x in mine)[len(mine) // 2]
                if mine else None}
    return {"study": label, "cells": rows, "summary": summ}


def score_pick(by: dict[str, dict], pick: str, name: str) -> dict:
    """``pick``'s median over the least fixed median, on the cell's fixed runs, and its 95 %
    interval by the study's bootstrap (every algorithm's runs resampled on their own, the
    best chosen again in each resample; the pick's runs are its own algorithm's, resampled
    once), with the study's verdicts (``score.score_cell``'s rule)."""
    runs = {a: score.run_values(by[a]) for a in score.ALGOS}

    def excess(med: dict[str, float]) -> float:
        return med[pick] / min(med.values()) - 1

    med = {a: median(v) for a, v in runs.items()}
    ci = score.bootstrap(runs, excess, name)
    return {"best": min(score.ALGOS, key=lambda a: med[a]), "rs_over_best": excess(med),
            "ci95": ci, "within_5pct": score.verdict(ci, score.WITHIN),
            "over_10pct": {"met": "missed", "missed": "met", "undecided": "undecided"}[
                score.verdict(ci, score.NEVER_OVER)]}


def evaluate(doc: dict, label: str) -> dict:
    clients, iods = doc["clients"], doc["iods"]
    cache = rs.Params.from_wire(doc["model"]).S_cache
    writes = any(x.get("operation") == "write" for x in doc["fit_results"])
    models = {f: fit_model(doc["fit_results"], clients, iods, cache, writes, s)[0]
              for f, s in FITS.items()}
    assert models["today"].to_wire() == doc["model"], "refit differs from the study's model"
    rows = []
    for key, by in sorted(_cells(doc["results"]).items(), key=lambda kv: str(kv[0])):
        row = {"workload": key[0], "request_bytes": key[1], "cached": key[2],
               "operation": key[3]}
        for f, p in models.items():
            pick = pick_of(p, key, clients, iods)
            s = score_pick(by, pick, f"{label}/{'/'.join(map(str, key))}/pick")
            row[f] = {"pick": pick, "best": s["best"], "over_best": s["rs_over_best"],
                      "ci95": s["ci95"], "within_5pct": s["within_5pct"],
                      "over_10pct": s["over_10pct"]}
        rows.append(row)
    return {"study": label, "load_before": doc.get("load_before"),
            "model_fit_on": doc["model_fit_on"]["source"],
            "fit_runs": len(doc["model_fit_on"]["runs"]), "cells": rows,
            "summary": summary(rows)}


def summary(rows: list[dict]) -> dict:
    out = {}
    for f in FITS:
        out[f] = {"cells": len(rows),
                  "within_5pct": sum(r[f]["within_5pct"] == "met" for r in rows),
                  "over_5pct": sum(r[f]["within_5pct"] == "missed" for r in rows),
                  "undecided": sum(r[f]["within_5pct"] == "undecided" for r in rows),
                  "over_10pct": sum(r[f]["over_10pct"] == "met" for r in rows),
                  "picks_differ": sum(r["today"]["pick"] != r["spread"]["pick"]
                                      for r in rows)}
    return out


def decide(rows: list[dict]) -> dict:
    """The rule decided beforehand, over all the studies' cells together."""
    s = summary(rows)
    new10 = [r for r in rows if r["spread"]["over_10pct"] == "met"
             and r["today"]["over_10pct"] != "met"]
    better = s["spread"]["over_5pct"] < s["today"]["over_5pct"] and not new10
    return {"improvement": better, **s,
            "new_over_10pct": [f"{r['operation']} {r['workload']} {r['request_bytes']} "
                               f"{'cached' if r['cached'] else 'uncached'}" for r in new10]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pvfs.bench.scheduling.picks",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("studies", nargs="+", help="study JSON documents (with a fitting pass)")
    ap.add_argument("--out", default=None, help="write the JSON here too")
    ap.add_argument("--cache-reports", action="store_true",
                    help="instead: the study's model picking with the cache measured, "
                         "reported right and reported as 0 (figs. 5.7-5.11, in picks)")
    a = ap.parse_args(argv)
    docs = [(json.loads(Path(p).read_text()), Path(p).name) for p in a.studies]
    if a.cache_reports:
        doc = {"what": "the study's model picking with the cache measured / reported "
                       "right / reported as 0, scored on the held-out fixed runs (picks)",
               "studies": [cache_reports(d, n) for d, n in docs]}
    else:
        per = [evaluate(d, n) for d, n in docs]
        doc = {"what": "the model's picks on held-out runs: today's fit vs the spread fit "
                       "(docs/scheduling.md, decided before the runs)",
               "studies": per, "decision": decide([r for s in per for r in s["cells"]])}
    text = json.dumps(doc, indent=1)
    if a.out:
        Path(a.out).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
