"""Bypass plans: which segments go through the caches in each phase of a program (SPEC §6).

The discretionary-caching paper (§4) had a compiler count, per loop nest, how often each block
of each array-file is used, and route only the most used segments through the global cache.
Traces have no loop nests, but they have *phases* (the operations between barriers) and every
access: :func:`make_plan` is that analysis on a replay profile. Per phase it counts the
requests touching each ``(file, segment)``; segments used at least ``min_uses`` times are ranked
by use and the most used ones that fit in the global cache go through the caches, every other
segment of the phase bypasses the global cache (``rg,wg``). ``coarse`` is the paper's first
strategy: whole files, program-wide — the most used files that fit go through, the others
bypass in every phase.

A plan is JSON::

    {"format": "pvfs-bypass-plan", "version": 1, "trace": "lu", "coarse": false,
     "block_size": 4096, "segment_blocks": 4, "global_bytes": 4194304,
     "phases": [{"phase": 0, "name": "setup", "files": {"lu/matrix": "*:rg,wg;0-15:none"}}]}

Each phase maps file names to ``user.pvfs.bypass`` values, applied (replacing the file's bits)
when the phase starts: by ``pvfs-admin replay --plan`` through the xattr, by the study through
the cache stack's bit table.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

from pvfs.cache import Bypass, format_bypass
from pvfs.traces.format import Op, Trace

__all__ = ["PLAN_FORMAT", "load_plan", "make_plan", "phase_bits", "phase_records", "save_plan"]

PLAN_FORMAT = "pvfs-bypass-plan"
BYPASS_GLOBAL = Bypass.READ_GLOBAL | Bypass.WRITE_GLOBAL


def phase_records(trace: Trace) -> Iterator[tuple[int, list]]:
    """``(phase, records)`` in phase order: a rank's k-th barrier ends its phase k."""
    phases: dict[int, list] = {}
    seen: Counter[int] = Counter()
    for rec in trace.records:
        if rec.op == Op.BARRIER:
            seen[rec.rank] += 1
            continue
        phases.setdefault(seen[rec.rank], []).append(rec)
    yield from sorted(phases.items())


def _segments(rec, seg_bytes: int) -> set[int]:
    out: set[int] = set()
    for off, n in rec.extents():
        if n > 0:
            out.update(range(off // seg_bytes, (off + n - 1) // seg_bytes + 1))
    return out


def _runs(segs: list[int]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    for s in sorted(segs):
        if runs and runs[-1][1] == s - 1:
            runs[-1] = (runs[-1][0], s)
        else:
            runs.append((s, s))
    return runs


def make_plan(trace: Trace, *, global_bytes: int = 4 << 20, block_size: int = 4096,
              segment_blocks: int = 4, coarse: bool = False, min_uses: int = 2) -> dict[str, Any]:
    """Derive a bypass plan from a trace (see the module docstring).

    Args:
        trace: the profile: every access of the program, with barriers between phases.
        global_bytes: the global cache's size (what may go through it at once).
        block_size: the caches' block size.
        segment_blocks: blocks per segment.
        coarse: file-level, program-wide selection instead of segments per phase.
        min_uses: a segment (or file) used fewer times than this in its phase (the program)
            has no reuse to exploit and always bypasses.

    Raises:
        ValueError: on a non-positive size.
    """
    if global_bytes <= 0 or block_size <= 0 or segment_blocks <= 0:
        raise ValueError("sizes must be positive")
    seg_bytes = block_size * segment_blocks
    budget = max(1, global_bytes // seg_bytes)  # segments the global cache holds
    names = {f.id: f.name for f in trace.files}
    phases_out: list[dict[str, Any]] = []
    plan_phases = list(phase_records(trace))
    if coarse:
        uses: Counter[int] = Counter()
        footprint: dict[int, set[int]] = {}
        for _, recs in plan_phases:
            for rec in recs:
                segs = _segments(rec, seg_bytes)
                if segs:
                    uses[rec.file] += 1
                    footprint.setdefault(rec.file, set()).update(segs)
        chosen: set[int] = set()
        room = budget
        for fid, count in uses.most_common():
            if count >= min_uses and len(footprint[fid]) <= room:
                chosen.add(fid)
                room -= len(footprint[fid])
        files = {names[fid]: ("" if fid in chosen else format_bypass(BYPASS_GLOBAL, []))
                 for fid in uses}
        for k, _ in plan_phases:
            phases_out.append({"phase": k, "name": _phase_name(trace, k), "files": files})
    else:
        for k, recs in plan_phases:
            uses2: Counter[tuple[int, int]] = Counter()
            for rec in recs:
                for seg in _segments(rec, seg_bytes):
                    uses2[(rec.file, seg)] += 1
            chosen_segs: dict[int, list[int]] = {}
            for (fid, seg), count in uses2.most_common(budget):
                if count >= min_uses:
                    chosen_segs.setdefault(fid, []).append(seg)
            files = {}
            for fid in sorted({f for f, _ in uses2}):
                runs = [(a, b, Bypass.NONE) for a, b in _runs(chosen_segs.get(fid, []))]
                files[names[fid]] = format_bypass(BYPASS_GLOBAL, runs)
            phases_out.append({"phase": k, "name": _phase_name(trace, k), "files": files})
    generator = (trace.generator or {}).get("name")
    return {"format": PLAN_FORMAT, "version": 1, "trace": generator, "coarse": coarse,
            "block_size": block_size, "segment_blocks": segment_blocks,
            "global_bytes": global_bytes, "phases": phases_out}


def _phase_name(trace: Trace, k: int) -> str:
    phases = getattr(trace, "phases", None) or []
    return phases[k] if k < len(phases) else f"phase {k}"


def save_plan(plan: dict[str, Any], path: str) -> None:
    with open(path, "w") as fh:
        json.dump(plan, fh, indent=1, sort_keys=True)
        fh.write("\n")


def load_plan(path: str) -> dict[str, Any]:
    """Read a plan file.

    Raises:
        ValueError: if it is not a plan (wrong format marker, missing phases).
        OSError: if it cannot be read.
    """
    with open(path) as fh:
        try:
            plan = json.load(fh)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: not JSON: {exc}") from None
    if not isinstance(plan, dict) or plan.get("format") != PLAN_FORMAT or \
            not isinstance(plan.get("phases"), list):
        raise ValueError(f"{path}: not a {PLAN_FORMAT} file")
    return plan


def phase_bits(plan: dict[str, Any], phase: int) -> dict[str, str]:
    """The ``user.pvfs.bypass`` values of ``phase`` by file name (empty past the plan)."""
    for entry in plan["phases"]:
        if entry.get("phase") == phase:
            return dict(entry.get("files") or {})
    return {}

