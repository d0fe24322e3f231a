"""Paired ratios of any two methods of a netns window run (issue 32), within a repeat.

``netns.py``'s own ``paired`` and ``variant_pairs`` compare with ``independent`` and with the
``servers`` job of the same k; ``thread`` and ``rma`` (no lock servers) and a ``servers``
variant against another back end need this. For every client count and pair ``A/B`` given,
per repeat where both ran: A's value over B's of MiB/s, CPU per GiB and the run-delay share;
median, min, max and how many are below 1. Also each method's medians and ranges (MiB/s,
CPU s/GiB, run-delay share, lock and remote phase per access in µs) and its pages read per
repeat against pages touched (read once: ≤ 1.1×).

    python -m pvfs.bench.collective.pairs RUN.json --pairs "servers+ra-rget/servers,thread/servers" \\
        [-o OUT.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

KEYS = ("mib_s", "cpu_s_per_gib", "run_delay_share")


def _stats(xs: list[float]) -> dict[str, Any]:
    return {"median": round(statistics.median(xs), 4), "min": round(min(xs), 4),
            "max": round(max(xs), 4), "values": [round(x, 4) for x in xs]}


def by_job(data: dict[str, Any]) -> dict[tuple[int, str], dict[int, dict[str, Any]]]:
    """``{(clients, method): {repeat: run}}``."""
    out: dict[tuple[int, str], dict[int, dict[str, Any]]] = {}
    for r in data["runs"]:
        out.setdefault((r["ranks"], r["method"]), {})[r["repeat"]] = r
    return out


def methods(jobs: dict[tuple[int, str], dict[int, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Each job's medians and ranges over its repeats, and its reads of the file."""
    rows = []
    for (n, m), reps in sorted(jobs.items()):
        rs = [reps[k] for k in sorted(reps)]
        row: dict[str, Any] = {"ranks": n, "method": m, "repeats": sorted(reps)}
        for key in KEYS:
            xs = [r[key] for r in rs if r.get(key) is not None]
            if xs:
                row[key] = _stats(xs)
        for phase in ("lock", "remote"):
            xs = [r[f"phase_{phase}_us"] / r["accesses"] for r in rs if r.get("accesses")]
            if xs:
                row[f"{phase}_us_per_access"] = _stats(xs)
        row["fs_read_pages"] = [r["fs_read_pages"] for r in rs]
        row["pages_touched"] = rs[0]["pages_touched"]
        row["read_once"] = sum(r["fs_read_pages"] <= 1.1 * r["pages_touched"] for r in rs)
        row["load_before"] = [r.get("load_before") for r in rs]
        rows.append(row)
    return rows


def pairs(jobs: dict[tuple[int, str], dict[int, dict[str, Any]]],
          wanted: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """A over B within each repeat, at every client count where both ran."""
    out = []
    for n in sorted({n for n, _ in jobs}):
        for a, b in wanted:
            ra, rb = jobs.get((n, a)), jobs.get((n, b))
            if not ra or not rb:
                continue
            reps = [k for k in sorted(ra) if k in rb]
            row: dict[str, Any] = {"ranks": n, "pair": f"{a} / {b}", "repeats": reps}
            for key in KEYS:
                xs = [ra[k][key] / rb[k][key] for k in reps if ra[k].get(key) and rb[k].get(key)]
                if xs:
                    row[key] = _stats(xs) | {"below_1": sum(x < 1 for x in xs)}
            out.append(row)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="netns JSON files")
    ap.add_argument("--pairs", required=True, help="A/B,C/D: methods as in the runs")
    ap.add_argument("-o", "--output", default=None)
    args = ap.parse_args(argv)
    jobs: dict[tuple[int, str], dict[int, dict[str, Any]]] = {}
    for path in args.runs:
        for key, reps in by_job(json.loads(Path(path).read_text())).items():
            jobs.setdefault(key, {}).update(reps)
    wanted = [tuple(p.split("/", 1)) for p in args.pairs.split(",") if p]
    data = {"sources": args.runs, "methods": methods(jobs),
            "pairs": pairs(jobs, wanted)}  # type: ignore[arg-type]
    text = json.dumps(data, indent=1) + "\n"
    if args.output:
        Path(args.output).write_text(text)
    for row in data["pairs"]:
        print(row["ranks"], row["pair"],
              {k: (row[k]["median"], row[k]["min"], row[k]["max"], row[k]["below_1"])
               for k in KEYS if k in row})
    return 0


if __name__ == "__main__":
    sys.exit(main())
