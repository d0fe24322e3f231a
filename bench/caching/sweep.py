"""The paper's fig. 9: runtime bypass's sensitivity to its threshold and its segment size.

``pvfs-admin study caching --sweep threshold=5,10,25,50 --sweep segment=1,4,16`` runs, on each
trace, runtime bypass at every (threshold, segment size) of the grid beside ``both`` (cache
everything, the normaliser: ``time_norm``) and ``none`` (the floor a too-high threshold falls
to: the paper's "without defaulting to the No Caching strategy"). A sweep of thresholds
alone uses the paper's 4-block segments; a sweep of segment sizes alone uses threshold
:data:`SEGMENT_SWEEP_THRESHOLD`, chosen before any sweep ran: the paper picks 20-50 after
fig. 9(a) and 25 is the study's higher fixed threshold (``runtime25``). Each row also carries
``time_seg4``: its time ÷ the same threshold's at 4-block segments, as fig. 9(b) normalises.

``--sweep fig9`` (:data:`FIG9`) is the paper's figure as drawn, two panels rather than the
whole grid: (a) the thresholds :data:`FIG9_THRESHOLDS` at 4-block segments, (b) the segment
sizes :data:`FIG9_SEGMENTS` ("from 2 blocks to 64 blocks", powers of two) at threshold
:data:`SEGMENT_SWEEP_THRESHOLD`. Both counts are the paper's own, unscaled: blocks are 4 KiB
here as there, and the study keeps the paper's cache sizes (2 MiB local, 4 MiB global) and
its fig. 12 thresholds (10, 25); what the study scales down is the traces (their footprint is
2-3 times the global cache, see :mod:`pvfs.bench.caching.setups`).

Under ``--model paper`` (:mod:`pvfs.bench.caching.sim`) every cell is one deterministic run.
Measured, the segment size is the global cache daemon's ``segment_blocks``, fixed when it
starts: each segment size runs on a study cluster of its own, with its own ``both`` (so
``time_norm`` pairs rounds as in the study); ``none`` runs on the 4-block one (else the
first). ``time_seg4`` is then a ratio of medians of two clusters' runs; ``time_seg4_norm`` is
the ratio of the two cells' ``time_norm`` (each cluster's drift taken out by its own
``both``), with ``time_seg4_lo``/``_hi`` the bounds the two cells' intervals give
(``lo ÷ hi`` and ``hi ÷ lo``: conservative; both intervals hold together with probability
at least ``level_k + level_4 - 1``, which at 3 runs is 50 %).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pvfs.bench.caching.setups import POLICIES, Setup
from pvfs.models.bypass import RuntimeBypass

__all__ = ["FIG9", "FIG9_SEGMENTS", "FIG9_THRESHOLDS", "PAPER_SEGMENT",
           "SEGMENT_SWEEP_THRESHOLD", "cells", "grid", "parse_sweep", "run_sweep",
           "setup_name", "sweep_doc"]

PAPER_SEGMENT = 4
SEGMENT_SWEEP_THRESHOLD = 25
#: Fig. 9(a)'s thresholds: fig. 8's low (3), the study's two (10, 25: fig. 12's "between 10
#: and 25"), the top of the paper's best range (50) and one above it (100), towards the
#: paper's "No Caching" end. Fixed before the sweep ran (docs/caching.md, issue 32).
FIG9_THRESHOLDS = [3, 10, 25, 50, 100]
#: Fig. 9(b)'s segment sizes in blocks: the paper's "from 2 blocks to 64 blocks".
FIG9_SEGMENTS = [2, 4, 8, 16, 32, 64]
#: ``--sweep fig9``: the two panels (not the 30-cell grid).
FIG9: dict[str, Any] = {"threshold": FIG9_THRESHOLDS, "segment": FIG9_SEGMENTS,
                        "layout": "panels"}
_KEYS = ("threshold", "segment")


def parse_sweep(items: list[str]) -> dict[str, Any]:
    """``["threshold=5,10", "segment=1,4"]`` -> ``{"threshold": [5, 10], "segment": [1, 4]}``
    (every cell of the grid); ``["fig9"]`` -> :data:`FIG9` (the paper's two panels).

    Raises:
        ValueError: an unknown parameter, a repeated one, ``fig9`` beside anything else, or
            values that are not positive integers (thresholds may be 0).
    """
    if "fig9" in (i.strip() for i in items):
        if len(items) != 1:
            raise ValueError("--sweep fig9 is the whole sweep: give it alone")
        return {k: list(v) if isinstance(v, list) else v for k, v in FIG9.items()}
    out: dict[str, Any] = {}
    for item in items:
        key, sep, values = item.partition("=")
        key = key.strip()
        if not sep or key not in _KEYS:
            raise ValueError(f"--sweep {item!r}: fig9, threshold=N,N,... or segment=N,N,...")
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


def grid(sweep: dict[str, Any]) -> tuple[list[int], list[int]]:
    """The thresholds and the segment sizes a sweep runs (see the module's docstring)."""
    return (sweep.get("threshold", [SEGMENT_SWEEP_THRESHOLD]),
            sweep.get("segment", [PAPER_SEGMENT]))


def panel_axes(sweep: dict[str, Any]) -> tuple[int, int]:
    """The segment size of panel (a) (4 if swept, else the first) and the threshold of panel
    (b) (25 if swept, else the first)."""
    th, seg = grid(sweep)
    return (PAPER_SEGMENT if PAPER_SEGMENT in seg else seg[0],
            SEGMENT_SWEEP_THRESHOLD if SEGMENT_SWEEP_THRESHOLD in th else th[0])


def cells(sweep: dict[str, Any]) -> dict[int, list[int]]:
    """``{segment size: [thresholds run at it]}`` in the order the clusters run: the whole
    grid, or for ``layout="panels"`` panel (a)'s thresholds at its segment size and panel
    (b)'s threshold at every other size. Panel (a)'s segment size runs first."""
    thresholds, segments = grid(sweep)
    seg_a, th_b = panel_axes(sweep)
    panels = sweep.get("layout", "grid") == "panels"
    order = [seg_a] + [s for s in segments if s != seg_a]
    return {s: list(thresholds) if not panels or s == seg_a else [th_b] for s in order}


def sweep_doc(sweep: dict[str, Any]) -> dict[str, Any]:
    """What the JSON says of the sweep: its axes, layout and every (threshold, segment) run."""
    thresholds, segments = grid(sweep)
    return {"threshold": thresholds, "segment": segments,
            "layout": sweep.get("layout", "grid"),
            "cells": [[t, s] for s, ts in cells(sweep).items() for t in ts]}


def setup_name(threshold: int, segment: int) -> str:
    return f"runtime t={threshold} seg={segment}"


def _setups(thresholds: list[int], with_none: bool) -> dict[str, Setup]:
    """Baselines and one runtime-bypass setup per threshold (segment size aside)."""
    out = {"none": POLICIES["none"]} if with_none else {}
    out["both"] = POLICIES["both"]
    for t in thresholds:
        out[f"t={t}"] = Setup(True, True, RuntimeBypass.name, t)
    return out


def _label(rows: list[dict[str, Any]], segment: int,
           axes: tuple[int, int]) -> list[dict[str, Any]]:
    """Name a cluster's (or model pass's) rows by threshold and segment size, and say which
    of fig. 9's panels each runtime row belongs to (``axes``: :func:`panel_axes`)."""
    seg_a, th_b = axes
    for r in rows:
        pol = r["policy"]
        if pol.startswith("t="):
            r["threshold"] = int(pol[2:])
            r["policy"] = setup_name(r["threshold"], segment)
        else:
            r["threshold"] = None
        r["segment_blocks"] = segment
        r["panels"] = ([] if r["threshold"] is None else
                       ["a"] * (segment == seg_a) + ["b"] * (r["threshold"] == th_b))
    return rows


def _seg4(rows: list[dict[str, Any]]) -> None:
    """Each runtime row against the same trace and threshold at 4 blocks: ``time_seg4`` (the
    ratio of the medians) and ``time_seg4_norm`` (of the ``time_norm`` medians) with
    ``time_seg4_lo``/``_hi`` (the two intervals' extreme ratios); None without a 4-block
    cell."""
    ref = {(r["trace"], r["threshold"]): r for r in rows
           if r["threshold"] is not None and r["segment_blocks"] == PAPER_SEGMENT}
    for r in rows:
        base = ref.get((r["trace"], r["threshold"])) if r["threshold"] is not None else None
        if base is None or not base["time_s"] or not base.get("time_norm"):
            r.update(time_seg4=None, time_seg4_norm=None, time_seg4_lo=None,
                     time_seg4_hi=None)
            continue
        r.update(time_seg4=r["time_s"] / base["time_s"],
                 time_seg4_norm=r["time_norm"] / base["time_norm"],
                 time_seg4_lo=r["time_norm_lo"] / base["time_norm_hi"],
                 time_seg4_hi=r["time_norm_hi"] / base["time_norm_lo"])


def model_sweep(traces: list[str], sweep: dict[str, Any], *,
                quick: bool) -> list[dict[str, Any]]:
    """The sweep's cells in the model at the paper's latencies (deterministic)."""
    from pvfs.bench.caching import study as cs
    from pvfs.bench.caching.sim import simulate
    from pvfs.traces.format import Op
    from pvfs.traces.generators import generate

    plan, axes = cells(sweep), panel_axes(sweep)
    rows: list[dict[str, Any]] = []
    for name in traces:
        trace = generate(name, cs.NPROCS, cs.TRACES[name][0 if quick else 1], seed=1)
        ops = sum(1 for r in trace.records if r.op != Op.BARRIER)
        for i, (seg, thresholds) in enumerate(plan.items()):
            got = []
            for pol, setup in _setups(thresholds, i == 0).items():
                row = simulate(trace, setup, None, local_bytes=cs.LOCAL_BYTES,
                               global_bytes=cs.GLOBAL_BYTES, nodes=cs.NODES,
                               segment_blocks=seg)
                row.update(trace=name, policy=pol, ops=ops, runs_s=[row["time_s"]])
                got.append(row)
            base = next(r["time_s"] for r in got if r["policy"] == "both")
            for r in got:
                r.update(time_norm=r["time_s"] / base, time_norm_lo=r["time_s"] / base,
                         time_norm_hi=r["time_s"] / base, time_norm_level=None)
            rows.extend(_label(got, seg, axes))
    _seg4(rows)
    return rows


def run_sweep(traces: list[str], sweep: dict[str, Any], *, quick: bool,
              model: str | None, iods: int, storage: str, iod_cache: int | None,
              repeat: int, progress: Callable[[str], None] | None = None
              ) -> list[dict[str, Any]]:
    """The sweep's cells, modelled (``model="paper"``) or measured on one study cluster per
    segment size (``none`` on the first, panel (a)'s)."""
    if model:
        return model_sweep(traces, sweep, quick=quick)
    from pvfs.bench.caching import study as cs

    axes = panel_axes(sweep)
    rows: list[dict[str, Any]] = []
    for i, (seg, thresholds) in enumerate(cells(sweep).items()):
        setups = _setups(thresholds, i == 0)
        if progress:
            progress(f"segment {seg} blocks: {', '.join(setups)}")
        with cs.study_cluster(iods, storage, iod_cache, segment_blocks=seg) as cfg:
            got = cs.replay_all(cfg, traces, list(setups), quick=quick, repeat=repeat,
                                progress=progress, setups=setups)
        rows.extend(_label(got, seg, axes))
    _seg4(rows)
    return rows
