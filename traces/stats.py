"""What is in a trace (``pvfs-admin trace stats``): operations, bytes, request sizes,
sequentiality and reuse.

Definitions (those of the CHARISMA workload studies the thesis builds on, ch. 2):

- a request is *consecutive* when it starts exactly where the same rank's previous request to
  the same file ended, *sequential* when it starts at or after that point (so consecutive
  requests are also sequential); fractions are over requests that have a predecessor;
- the *reuse distance* of a block access is the number of distinct other blocks accessed
  (by any rank, in trace order) since the previous access to the same block — the LRU stack
  distance, so an LRU cache of C blocks hits exactly the accesses with distance < C. First
  touches have no distance and are counted as ``cold``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from pvfs.traces.format import Flag, Op, Trace
from pvfs.traces.metrics import percentile


class _Fenwick:
    """Prefix sums over positions 1..n (Fenwick tree)."""

    def __init__(self, n: int) -> None:
        self.tree = [0] * (n + 1)

    def add(self, i: int, delta: int) -> None:
        while i < len(self.tree):
            self.tree[i] += delta
            i += i & -i

    def prefix(self, i: int) -> int:
        total = 0
        while i > 0:
            total += self.tree[i]
            i -= i & -i
        return total


def _bucket(n: int) -> str:
    """Power-of-two bucket label of a size: ``4K`` holds sizes in (2K, 4K]."""
    if n <= 0:
        return "0"
    p = 1
    while p < n:
        p <<= 1
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if p >= scale:
            return f"{p // scale}{unit}"
    return str(p)


def reuse_distances(accesses: list[tuple[int, int]]) -> tuple[list[int], int]:
    """LRU stack distances of a sequence of block ids; ``(distances, cold misses)``."""
    last: dict[tuple[int, int], int] = {}
    fen = _Fenwick(len(accesses))
    out: list[int] = []
    cold = 0
    for t, block in enumerate(accesses, start=1):
        prev = last.get(block)
        if prev is None:
            cold += 1
        else:
            out.append(fen.prefix(t - 1) - fen.prefix(prev))
            fen.add(prev, -1)
        fen.add(t, 1)
        last[block] = t
    return out, cold


def trace_stats(trace: Trace, block: int = 4096, max_block_accesses: int = 2_000_000
                ) -> dict[str, Any]:
    """Summary statistics of a trace (see the module docstring for the definitions).

    Reuse distances are computed at ``block`` granularity for at most ``max_block_accesses``
    block accesses (the rest of the trace is left out of that one statistic).
    """
    t = _tally(trace, block, max_block_accesses)
    data_ops = sum(t.sizes.values())
    return {
        "records": len(trace.records),
        "nprocs": trace.nprocs,
        "files": len(trace.files),
        "phases": len(trace.phases),
        "generator": trace.generator,
        "ops": dict(sorted(t.ops.items())),
        "bytes_read": t.bytes_read,
        "bytes_written": t.bytes_written,
        "data_requests": data_ops,
        "regions": t.regions,
        "mean_request": (t.bytes_read + t.bytes_written) / data_ops if data_ops else 0.0,
        "request_size_histogram": _by_bucket(t.sizes),
        "sequential_fraction": t.seq / t.with_prev if t.with_prev else 0.0,
        "consecutive_fraction": t.consec / t.with_prev if t.with_prev else 0.0,
        "reuse": _reuse(t.blocks, t.truncated, block),
    }


@dataclass
class _Tally:
    """What one pass over a trace's records counts."""

    ops: Counter[str] = field(default_factory=Counter)
    sizes: Counter[str] = field(default_factory=Counter)  # data requests by size bucket
    bytes_read: int = 0
    bytes_written: int = 0
    regions: int = 0
    seq: int = 0  # requests that are sequential ...
    consec: int = 0  # ... consecutive ...
    with_prev: int = 0  # ... and that have a predecessor
    blocks: list[tuple[int, int]] = field(default_factory=list)  # (file, block) accessed
    truncated: bool = False  # blocks stopped at the limit


def _tally(trace: Trace, block: int, max_block_accesses: int) -> _Tally:
    """Operations, request sizes and bytes, sequentiality and the first
    ``max_block_accesses`` block accesses of ``trace``, in one pass."""
    t = _Tally()
    prev_end: dict[tuple[int, int], int] = {}
    for rec in trace.records:
        kind = rec.op.label
        if rec.op == Op.LISTIO:
            kind = "listio_write" if rec.flags & Flag.WR else "listio_read"
        t.ops[kind] += 1
        ext = rec.extents()
        if not ext:
            continue
        t.sizes[_bucket(rec.length)] += 1
        t.regions += len(ext)
        if rec.is_write:
            t.bytes_written += rec.length
        else:
            t.bytes_read += rec.length
        key = (rec.rank, rec.file)
        start, end = ext[0][0], ext[-1][0] + ext[-1][1]
        if key in prev_end:
            t.with_prev += 1
            if start >= prev_end[key]:
                t.seq += 1
            if start == prev_end[key]:
                t.consec += 1
        prev_end[key] = end
        if not t.truncated:
            for off, n in ext:
                if n <= 0:
                    continue
                for b in range(off // block, (off + n - 1) // block + 1):
                    t.blocks.append((rec.file, b))
            if len(t.blocks) > max_block_accesses:
                t.blocks = t.blocks[:max_block_accesses]
                t.truncated = True
    return t


def _reuse(blocks: list[tuple[int, int]], truncated: bool, block: int) -> dict[str, Any]:
    """The ``reuse`` part of :func:`trace_stats`: reuse distances of the block accesses."""
    dists, cold = reuse_distances(blocks)
    dists.sort()
    reuse_hist: Counter[str] = Counter(_bucket(d + 1) for d in dists)
    return {
        "block": block,
        "accesses": len(blocks),
        "cold": cold,
        "reuses": len(dists),
        "truncated": truncated,
        "p50": percentile(dists, 50),
        "p90": percentile(dists, 90),
        "max": dists[-1] if dists else 0,
        "histogram": _by_bucket(reuse_hist),
    }


def _by_bucket(counts: Counter[str]) -> dict[str, int]:
    """A histogram by :func:`_bucket` label, smallest bucket first."""
    return dict(sorted(counts.items(), key=lambda kv: _parse_bucket(kv[0])))


def _parse_bucket(label: str) -> int:
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(label[-1:], 1)
    return int(label.rstrip("KMG") or 0) * scale


def format_stats(st: dict[str, Any]) -> str:
    """The ``trace stats`` table for people."""
    gen = st["generator"].get("name", "-") if st["generator"] else "-"
    lines = [
        (f"records {st['records']}  ranks {st['nprocs']}  files {st['files']}  "
        f"phases {st['phases']}  generator {gen}"),
        "ops: " + ", ".join(f"{k} {v}" for k, v in st["ops"].items()),
        (f"bytes read {st['bytes_read']}  written {st['bytes_written']}  "
        f"requests {st['data_requests']}  regions {st['regions']}  "
        f"mean request {st['mean_request']:.0f} B"),
        (f"sequential {st['sequential_fraction']:.1%}  consecutive "
        f"{st['consecutive_fraction']:.1%}"),
        "request sizes (<=):",
    ]
    for label, count in st["request_size_histogram"].items():
        lines.append(f"  {label:>6}  {count}")
    r = st["reuse"]
    lines.append(f"reuse distance ({r['block']} B blocks): accesses {r['accesses']}  "
                 f"cold {r['cold']}  reuses {r['reuses']}  p50 {r['p50']:.0f}  "
                 f"p90 {r['p90']:.0f}  max {r['max']}" + ("  (truncated)" if r["truncated"] else ""))
    for label, count in r["histogram"].items():
        lines.append(f"  <{label:>6}  {count}")
    return "\n".join(lines)
