"""Per-run view of ``pvfs-admin study caching`` results: every run ÷ the median of `both`.

The study's rows carry the median of their runs (``time_s``) and the median paired ratio to
``both`` with its order-statistic interval (``time_norm``, ``_lo``/``_hi``; files made
before 2026-11-28 kept the best run instead). This reads one or more study JSON files (e.g.
one per trace, as the s11 runs were made, so that ``both``'s runs may come from another
file and cannot be paired), prints per trace and policy the median, min and max of the runs
divided by the median of `both`'s runs and the decisions behind them, and optionally draws
them (bars: medians; whiskers: the order-statistic interval of the median, see
:mod:`pvfs.bench.caching.stats`) and writes the files merged into one document.

    python bench/caching/runs.py bench/results/gcache-study-caching-s11-*.json \
        --plot docs/caching/study-caching-s11.png --merge merged.json
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
from typing import Any


def load(paths: list[str]) -> dict[str, Any]:
    """The files' ``results`` in one document (the later file wins a repeated cell)."""
    cells: dict[tuple[str, str], dict[str, Any]] = {}
    sources = []
    for p in paths:
        with open(p) as f:
            d = json.load(f)
        sources.append({"file": p, "command": d.get("command"), "elapsed_s": d.get("elapsed_s"),
                        "machine": d.get("machine")})
        for r in d["results"]:
            cells[(r["trace"], r["policy"])] = r
    return {"results": list(cells.values()), "sources": sources}


def spread(doc: dict[str, Any]) -> dict[tuple[str, str], tuple[float, float, float, int]]:
    """(trace, policy) -> (median, min, max, runs), each run ÷ the median of `both`."""
    return _per_cell(doc, lambda xs: (statistics.median(xs), min(xs), max(xs)))


def intervals(doc: dict[str, Any]) -> dict[tuple[str, str], tuple[float, float, float, int]]:
    """(trace, policy) -> (median, lo, hi, runs) of each run ÷ the median of `both`, with the
    order-statistic interval of the median."""
    from pvfs.bench.caching.stats import median_interval

    return _per_cell(doc, lambda xs: median_interval(xs)[:3])


def _per_cell(doc: dict[str, Any], stat) -> dict[tuple[str, str], tuple[float, float, float, int]]:
    by: dict[str, dict[str, dict[str, Any]]] = {}
    for r in doc["results"]:
        by.setdefault(r["trace"], {})[r["policy"]] = r
    out = {}
    for t, pols in by.items():
        if "both" not in pols:
            continue
        base = statistics.median(pols["both"]["runs_s"])
        for p, r in pols.items():
            xs = [x / base for x in r["runs_s"]]
            out[(t, p)] = (*stat(xs), len(xs))
    return out


def decisions(r: dict[str, Any]) -> str:
    """The distinct decisions of a cell's runs: admissions/segments refused/evictions."""
    seen = sorted({(g["admissions"], g["bypasses"], g["evictions"])
                   for g in (run["global"] for run in r.get("runs", []))})
    return "; ".join(f"{a}/{b}/{e}" for a, b, e in seen)


def against(xs: list[float], ys: list[float], *, rounds: int = 10000,
            seed: int = 1) -> tuple[float, float, float, float]:
    """median(xs) / median(ys), its 95 % bootstrap interval (each side resampled), and the
    two-sided permutation p of the difference of the medians."""
    rng = random.Random(seed)
    med = statistics.median
    ratio = med(xs) / med(ys)
    boot = sorted(med(rng.choices(xs, k=len(xs))) / med(rng.choices(ys, k=len(ys)))
                  for _ in range(rounds))
    lo, hi = boot[int(0.025 * rounds)], boot[int(0.975 * rounds) - 1]
    seen = abs(med(xs) - med(ys))
    pool, n, more = xs + ys, len(xs), 0
    for _ in range(rounds):
        rng.shuffle(pool)
        more += abs(med(pool[:n]) - med(pool[n:])) >= seen - 1e-12
    return ratio, lo, hi, more / rounds


def paths(r: dict[str, Any]) -> str:
    """Medians over a cell's runs of the requests sent through the global cache and straight
    to the I/O daemons, the disks' accesses, and the time the busiest disk stood idle."""
    runs = r.get("runs", [])
    if not runs or "client" not in runs[0]:
        return ""
    med = statistics.median
    g = med(x["client"].get("global_reads", 0) for x in runs)
    d = med(x["client"].get("direct_reads", 0) for x in runs)
    acc = med(sum(k["accesses"] for k in x["disks"]) for x in runs) if runs[0]["disks"] else 0
    idle = (med(x["time_s"] - max(k["busy_s"] for k in x["disks"]) for x in runs)
            if runs[0]["disks"] else 0.0)
    return f"reads via gcache {g:g} direct {d:g}  disk accesses {acc:g}  idle {idle:.3f} s"


def plot(doc: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = intervals(doc)
    traces = list(dict.fromkeys(t for t, _ in s))
    policies = list(dict.fromkeys(p for _, p in s))
    width = 0.8 / max(1, len(policies))
    fig, ax = plt.subplots(figsize=(10, 4.5))
    for j, pol in enumerate(policies):
        xs, med, lo, hi = [], [], [], []
        for i, t in enumerate(traces):
            if (t, pol) in s:
                m, a, b, _ = s[(t, pol)]
                xs.append(i + (j - len(policies) / 2) * width + width / 2)
                med.append(m)
                lo.append(m - a)
                hi.append(b - m)
        ax.bar(xs, med, width, yerr=[lo, hi], capsize=2, label=pol)
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_ylabel("run time ÷ median of cache everything")
    ax.set_title("study caching: median of the runs, whiskers: interval of the median\n"
                 "traces generated by pvfs.traces.generators (this project's), not the "
                 "paper's traces [37]", fontsize=9)
    ax.set_xticks(range(len(traces)), traces)
    ax.legend(ncol=5, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--plot", metavar="PNG")
    ap.add_argument("--merge", metavar="JSON", help="write the files' results as one document")
    ap.add_argument("--against", metavar="POLICY",
                    help="each policy's run times against this one's: ratio of the medians, "
                         "95 %% bootstrap interval, permutation p")
    args = ap.parse_args()
    doc = load(args.files)
    s = spread(doc)
    cell = {(r["trace"], r["policy"]): r for r in doc["results"]}
    for (t, p), (m, a, b, n) in s.items():
        print(f"{t:9s} {p:10s} {m:.3f} ({a:.2f}-{b:.2f}) x{n}   decisions {decisions(cell[(t, p)])}")
        print(f"{'':20s} {paths(cell[(t, p)])}")
        ref = cell.get((t, args.against)) if args.against else None
        if ref is not None and p != args.against:
            ratio, lo, hi, pv = against(cell[(t, p)]["runs_s"], ref["runs_s"])
            print(f"{'':20s} / {args.against} = {ratio:.3f} [{lo:.3f}, {hi:.3f}], p = {pv:.3f}")
    if args.plot:
        plot(doc, args.plot)
    if args.merge:
        with open(args.merge, "w") as f:
            json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
