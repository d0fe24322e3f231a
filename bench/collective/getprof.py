"""Where a remote page's time goes: issue 32's get profile from a traced window job.

A window job run with ``PVFS_COLLECTIVE_TRACE=DIR`` leaves one timeline per client rank
(``DIR/<method>[-k<servers>]-n<clients>-r<rank>.json``) holding the rank's file-system calls
and, from :mod:`pvfs.collective._prof`, every RMA get to an owner and every sleep of a wait,
each with the thread's run delay (runnable, waiting for a core) and CPU over it. For every
get this lays the *owner's* main thread beside it and sums, over all gets:

- ``get_s``: the gets' time (first ``Get`` issued to the ``Flush``'s return);
- ``origin_cpu_s``: CPU the origin used during them (a blocking ``Flush`` polls MPI);
- ``origin_run_delay_s``: time the origin was runnable but had no core;
- ``owner_asleep_s``: the owner's main thread asleep in a wait (``time.sleep`` or a
  doorbell) — it makes no MPI progress then;
- ``owner_wake_delay_s``: after such a sleep ended, the owner waiting for a core;
- ``owner_fs_s``: the owner's main thread in a file-system call (no MPI progress);
- ``owner_get_s``: the owner in a get of its own (its ``Flush`` progresses MPI);
- ``owner_other_s``: the rest (the owner running Python, polling, or preempted).

The owner categories are disjoint by construction (a point in time counts for the first of
asleep, wake delay, fs call, own get that covers it); the origin's CPU and run delay are
separate columns over the same time. ``python -m pvfs.bench.collective.getprof DIR
[--json OUT]`` prints one row per job found in DIR.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path
from typing import Any

_NAME = re.compile(r"^(?P<job>.+)-r(?P<rank>\d+)\.json$")
CATEGORIES = ("owner_asleep", "owner_wake_delay", "owner_fs", "owner_get")


def intervals(timeline: dict[str, Any]) -> dict[str, list[tuple[float, float]]]:
    """The owner-side intervals of one rank's main thread, by category, sorted."""
    main = timeline.get("main_thread")
    out: dict[str, list[tuple[float, float]]] = {c: [] for c in CATEGORIES}
    for ev in timeline.get("prof") or []:
        kind, tid, t0, t1, delay = ev[0], ev[1], ev[2], ev[3], ev[4]
        if tid != main:
            continue
        if kind in ("sleep", "bell"):
            woke = max(t0, t1 - delay / 1e9)
            out["owner_asleep"].append((t0, woke))
            out["owner_wake_delay"].append((woke, t1))
        elif kind in ("get", "put"):
            out["owner_get"].append((t0, t1))
    for rec in timeline.get("fs") or []:
        if rec[4] != "ra":  # the main thread's calls ("ra": the read-ahead helper's)
            out["owner_fs"].append((rec[0], rec[1]))
    for ivs in out.values():
        ivs.sort()
    return out


def _covered(ivs: list[tuple[float, float]], lo: float, hi: float) -> list[tuple[float, float]]:
    """The parts of ``[lo, hi)`` covered by ``ivs`` (sorted), merged."""
    got: list[tuple[float, float]] = []
    for a, b in ivs:
        if b <= lo:
            continue
        if a >= hi:
            break
        a, b = max(a, lo), min(b, hi)
        if got and a <= got[-1][1]:
            got[-1] = (got[-1][0], max(got[-1][1], b))
        else:
            got.append((a, b))
    return got


def _minus(parts: list[tuple[float, float]], taken: list[tuple[float, float]]) -> float:
    """Length of ``parts`` not in ``taken`` (both merged and sorted); ``taken`` grows."""
    total = 0.0
    for a, b in parts:
        x = a
        for c, d in taken:
            if d <= x or c >= b:
                continue
            if c > x:
                total += c - x
            x = max(x, d)
        if x < b:
            total += b - x
    return total


def split_get(lo: float, hi: float, owner: dict[str, list[tuple[float, float]]]) -> dict[str, float]:
    """One get ``[lo, hi)``: seconds of it in each owner category (disjoint, in order)."""
    taken: list[tuple[float, float]] = []
    out = {}
    for c in CATEGORIES:
        parts = _covered(owner.get(c, []), lo, hi)
        out[c] = _minus(parts, taken)
        taken = sorted(taken + parts)
        merged: list[tuple[float, float]] = []
        for a, b in taken:
            if merged and a <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], b))
            else:
                merged.append((a, b))
        taken = merged
    out["owner_other"] = max(0.0, (hi - lo) - sum(out[c] for c in CATEGORIES))
    return out


def job(files: list[Path]) -> dict[str, Any]:
    """One job's timelines (a file per client rank): the gets' sums and their spread."""
    lines = {int(_NAME.match(f.name)["rank"]): json.loads(f.read_text()) for f in files}
    owners = {r: intervals(t) for r, t in lines.items()}
    sums = dict.fromkeys(("get_s", "origin_cpu_s", "origin_run_delay_s",
                          *(f"{c}_s" for c in CATEGORIES), "owner_other_s"), 0.0)
    durations = []
    sleeps = {"n": 0, "s": 0.0, "wake_delay_s": 0.0}
    for t in lines.values():
        for ev in t.get("prof") or []:
            if ev[0] in ("sleep", "bell") and ev[1] == t.get("main_thread"):
                sleeps["n"] += 1
                sleeps["s"] += ev[3] - ev[2]
                sleeps["wake_delay_s"] += ev[4] / 1e9
            if ev[0] != "get":
                continue
            lo, hi, peer = ev[2], ev[3], ev[5]
            durations.append(hi - lo)
            sums["get_s"] += hi - lo
            sums["origin_run_delay_s"] += ev[4] / 1e9
            sums["origin_cpu_s"] += (ev[7] if len(ev) > 7 else 0) / 1e9
            if peer in owners:
                for c, v in split_get(lo, hi, owners[peer]).items():
                    sums[f"{c}_s"] += v
    total = sums["get_s"] or 1.0
    return {"ranks": len(lines), "gets": len(durations),
            **{k: round(v, 4) for k, v in sums.items()},
            "shares": {k[:-2]: round(v / total, 4) for k, v in sums.items() if k != "get_s"},
            "get_ms": {"median": round(statistics.median(durations) * 1e3, 3),
                       "p90": round(sorted(durations)[int(0.9 * (len(durations) - 1))] * 1e3, 3),
                       "max": round(max(durations) * 1e3, 3)} if durations else None,
            "main_sleeps": {k: round(v, 4) for k, v in sleeps.items()}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--json", default=None, help="also write the rows here")
    args = ap.parse_args(argv)
    groups: dict[str, list[Path]] = {}
    for f in sorted(Path(args.dir).glob("*-r*.json")):
        m = _NAME.match(f.name)
        if m:
            groups.setdefault(m["job"], []).append(f)
    rows = {name: job(files) for name, files in sorted(groups.items())}
    for name, row in rows.items():
        print(name, json.dumps(row))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
