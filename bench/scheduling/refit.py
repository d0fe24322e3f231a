"""Refit the reactive-scheduling model to the fixed-algorithm runs of an earlier study.

``pvfs-admin study scheduling`` fits the model to its own opt1..opt4 runs (appendix B). When
the fit changes after such a run, this fits again from the same runs, without running them
again, and writes a document ``study scheduling --model`` takes::

    python bench/scheduling/refit.py bench/results/study-scheduling-ide-2000-quick-fit.json \\
        bench/results/study-scheduling-ide-2000-quick-model.json

Several studies (same disk, tasks and daemons) are pooled: each cell's time under each
algorithm is the mean over all their runs, weighted by each study's repetitions -- more runs,
less of the noise in the small cells that decide the small-request rule::

    python bench/scheduling/refit.py A.json B.json C.json model.json

Where a study has rs rows, the columns of table 5.3 the daemons saw each cell's requests in
(their decisions, ``rs.decisions``: "kind/column->pick" counts) are pooled too and handed to
the fit (``fit.fit(columns=...)``), so the small-request rule is fitted by the column the
daemons will look up, not the study's cached/uncached label.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from pvfs.models import fit, rs


def refit(*studies: dict) -> tuple[rs.Params, list[dict]]:
    first = studies[0]
    for s in studies[1:]:
        for k in ("disk", "clients", "iods"):
            if s.get(k) != first.get(k):
                raise ValueError(f"studies differ in {k}: {s.get(k)} and {first.get(k)}")
    pooled: dict[tuple, list[float]] = {}
    for s in studies:
        for x in s["results"]:
            if (x["algorithm"] in rs.ALGORITHMS and x["workload"] in fit.PIECES
                    and x.get("operation", "read") == "read"):   # a read model
                key = (x["workload"], x["request_bytes"], x["cached"], x["algorithm"])
                n = len(x.get("runs") or ()) or s.get("reps", 1)
                tot = pooled.setdefault(key, [0.0, 0])
                tot[0] += x["mean_task_service_s"] * n
                tot[1] += n
    obs = [fit.Obs(*key, t / n) for key, (t, n) in pooled.items()]
    return fit.fit(obs, first["clients"], first["iods"], s_cache=first["model"]["S_cache"],
                   columns=seen_columns(studies))


def seen_columns(studies) -> dict[tuple, dict[int, float]]:
    """Per cell, the share of rs' decisions made in each column of table 5.3."""
    counts: dict[tuple, dict[int, int]] = {}
    for s in studies:
        for x in s["results"]:
            if (x["algorithm"] != "rs" or x["workload"] not in fit.PIECES
                    or x.get("operation", "read") != "read"):
                continue
            cell = counts.setdefault((x["workload"], x["request_bytes"], x["cached"]), {})
            for what, n in (x.get("rs") or {}).get("decisions", {}).items():
                kind, column = what.split("->")[0].split("/")
                col = rs.CLASSES.index(kind) + (3 if column == "cached" else 0)
                cell[col] = cell.get(col, 0) + n
    return {k: {c: n / sum(v.values()) for c, n in v.items()}
            for k, v in counts.items() if sum(v.values())}


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    *srcs, dst = argv
    params, residuals = refit(*(json.loads(Path(s).read_text()) for s in srcs))
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=False).stdout.strip()
    doc = {"model": params.to_wire(), "residuals": residuals, "fitted_from": srcs,
           "git": head, "command": " ".join(["python", "bench/scheduling/refit.py",
                                             *argv])}
    Path(dst).write_text(json.dumps(doc, indent=1) + "\n")
    cols = " ".join(f"{z:.3g}" for z in params.zero_cols) or "-"
    print(f"zero_s {params.zero_s:.4g} s (per column {cols}), small_alg {params.small_alg}, "
          f"per column {' '.join(params.small_algs) or '-'}; wrote {dst}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
