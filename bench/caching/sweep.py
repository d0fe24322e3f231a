"""The paper's fig. 9: runtime bypass's sensitivity to its threshold and its segment size.

``pvfs-admin study caching --sweep threshold=5,10,25,50 --sweep segment=1,4,16`` runs, on each
trace, runtime bypass at every (threshold, segment size) of the grid beside ``both`` (cache
everything, the normaliser: ``time_norm``) and ``none`` (the floor a too-high threshold falls
to: the paper's "without defaulting to the No Caching strategy"). A sweep of thresholds
alone uses the paper's 4-block segments; a sweep of segment sizes alone uses threshold
:data:`SEGMENT_SWEEP_THRESHOLD`, chosen before any sweep ran: the paper picks 20-50 after
fig. 9(a) and 25 is the study's higher fixed threshold (``runtime25``). Each row also carries
``time_seg4``: its time ÷ the same threshold's at 4-block segments, as fig. 9(b) normalises.

Under ``--model paper`` (:mod:`pvfs.bench.caching.sim`) every cell is one deterministic run.
Measured, the segment size is the global cache daemon's ``segment_blocks``, fixed when it
starts: each segment size runs on a study cluster of its own, with its own ``both`` (so
``time_norm`` pairs rounds as in the study); ``none`` runs on the first one; ``time_seg4``
is then a ratio of medians of two clusters' runs, given without an interval.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pvfs.bench.caching.setups import POLICIES, Setup
from pvfs.models.bypass import RuntimeBypass

__all__ = ["PAPER_SEGMENT", "SEGMENT_SWEEP_THRESHOLD", "grid", "parse_sweep", "run_sweep",
           "setup_name"]

PAPER_SEGMENT = 4
SEGMENT_SWEEP_THRESHOLD = 25
_KEYS = ("threshold", "segment")


def parse_sweep(items: list[str]) -> dict[str, list[int]]:
    """``["threshold=5,10", "segment=1,4"]`` -> ``{"threshold": [5, 10], "segment": [1, 4]}``.

    Raises:
        ValueError: an unknown parameter, a repeated one, or values that are not positive
            integers (thresholds may be 0).
    """
    out: dict[str, list[int]] = {}
    for item in items:
        key, sep, values = item.partition("=")
        key = key.strip()
        if not sep or key not in _KEYS:
            raise ValueError(f"--sweep {item!r}: threshold=N,N,... or segment=N,N,...")
        if key in out:
            raise ValueError(f"--sweep {key} given twice")
        try:
            vals = [int(v) for v in values.split(",") if v.strip()]
        except ValueError:
            raise ValueError(f"--sweep {item!r}: integers expected") from None
        low = 0 if key == "threshold" else 1
        if not vals or min(vals) < low:
            raise ValueError(f"--sweep {key}: values of at least {low} expected")
        out[key] = list(dict.fromkeys(vals))
    return out


def grid(sweep: dict[str, list[int]]) -> tuple[list[int], list[int]]:
    """The thresholds and the segment sizes a sweep runs (see the module's docstring)."""
    return (sweep.get("threshold", [SEGMENT_SWEEP_THRESHOLD]),
            sweep.get("segment", [PAPER_SEGMENT]))


def setup_name(threshold: int, segment: int) -> str:
    return f"runtime t={threshold} seg={segment}"


def _setups(thresholds: list[int], with_none: bool) -> dict[str, Setup]:
    """Baselines and one runtime-bypass setup per threshold (segment size aside)."""
    out = {"none": POLICIES["none"]} if with_none else {}
    out["both"] = POLICIES["both"]
    for t in thresholds:
        out[f"t={t}"] = Setup(True, True, RuntimeBypass.name, t)
    return out


def _label(rows: list[dict[str, Any]], segment: int) -> list[dict[str, Any]]:
    """Name a cluster's (or model pass's) rows by threshold and segment size."""
    for r in rows:
        pol = r["policy"]
        if pol.startswith("t="):
            r["threshold"] = int(pol[2:])
            r["policy"] = setup_name(r["threshold"], segment)
        else:
            r["threshold"] = None
        r["segment_blocks"] = segment
    return rows


def _seg4(rows: list[dict[str, Any]]) -> None:
    """``time_seg4``: each runtime row's time ÷ the same trace and threshold at 4 blocks."""
    ref = {(r["trace"], r["threshold"]): r["time_s"] for r in rows
           if r["threshold"] is not None and r["segment_blocks"] == PAPER_SEGMENT}
    for r in rows:
        base = ref.get((r["trace"], r["threshold"])) if r["threshold"] is not None else None
        r["time_seg4"] = r["time_s"] / base if base else None


def model_sweep(traces: list[str], sweep: dict[str, list[int]], *,
                quick: bool) -> list[dict[str, Any]]:
    """The grid in the model at the paper's latencies (deterministic)."""
    from pvfs.bench.caching import study as cs
    from pvfs.bench.caching.sim import simulate
    from pvfs.traces.format import Op
    from pvfs.traces.generators import generate

    thresholds, segments = grid(sweep)
    rows: list[dict[str, Any]] = []
    for name in traces:
        trace = generate(name, cs.NPROCS, cs.TRACES[name][0 if quick else 1], seed=1)
        ops = sum(1 for r in trace.records if r.op != Op.BARRIER)
        for i, seg in enumerate(segments):
            cells = []
            for pol, setup in _setups(thresholds, i == 0).items():
                row = simulate(trace, setup, None, local_bytes=cs.LOCAL_BYTES,
                               global_bytes=cs.GLOBAL_BYTES, nodes=cs.NODES,
                               segment_blocks=seg)
                row.update(trace=name, policy=pol, ops=ops, runs_s=[row["time_s"]])
                cells.append(row)
            base = next(r["time_s"] for r in cells if r["policy"] == "both")
            for r in cells:
                r.update(time_norm=r["time_s"] / base, time_norm_lo=r["time_s"] / base,
                         time_norm_hi=r["time_s"] / base, time_norm_level=None)
            rows.extend(_label(cells, seg))
    _seg4(rows)
    return rows


def run_sweep(traces: list[str], sweep: dict[str, list[int]], *, quick: bool,
              model: str | None, iods: int, storage: str, iod_cache: int | None,
              repeat: int, progress: Callable[[str], None] | None = None
              ) -> list[dict[str, Any]]:
    """The grid, modelled (``model="paper"``) or measured on one study cluster per segment
    size."""
    if model:
        return model_sweep(traces, sweep, quick=quick)
    from pvfs.bench.caching import study as cs

    thresholds, segments = grid(sweep)
    rows: list[dict[str, Any]] = []
    for i, seg in enumerate(segments):
        setups = _setups(thresholds, i == 0)
        with cs.study_cluster(iods, storage, iod_cache, segment_blocks=seg) as cfg:
            got = cs.replay_all(cfg, traces, list(setups), quick=quick, repeat=repeat,
                                progress=progress, setups=setups)
        rows.extend(_label(got, seg))
    _seg4(rows)
    return rows
