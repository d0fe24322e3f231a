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
    ops: Counter[str] = Counter()
    sizes: Counter[str] = Counter()
    bytes_read = bytes_written = 0
    regions = 0
    prev_end: dict[tuple[int, int], int] = {}
    seq = consec = with_prev = 0
    blocks: list[tuple[int, int]] = []
    truncated = False
    for rec in trace.records:
        kind = rec.op.label
        if rec.op == Op.LISTIO:
            kind = "listio_write" if rec.flags & Flag.WR else "listio_read"
        ops[kind] += 1
        ext = rec.extents()
        if not ext:
            continue
        sizes[_bucket(rec.length)] += 1
        regions += len(ext)
        if rec.is_write:
            bytes_written += rec.length
        else:
            bytes_read += rec.length
        key = (rec.rank, rec.file)
        start, end = ext[0][0], ext[-1][0] + ext[-1][1]
        if key in prev_end:
            with_prev += 1
            if start >= prev_end[key]:
                seq += 1
            if start == prev_end[key]:
                consec += 1
        prev_end[key] = end
        if not truncated:
            for off, n in ext:
                if n <= 0:
                    continue
                for b in range(off // block, (off + n - 1) // block + 1):
                    blocks.append((rec.file, b))
            if len(blocks) > max_block_accesses:
                blocks = blocks[:max_block_accesses]
                truncated = True
    dists, cold = reuse_distances(blocks)
    dists.sort()
    reuse_hist: Counter[str] = Counter(_bucket(d + 1) for d in dists)
    data_ops = sum(sizes.values())

    def order(label: str) -> int:
        return _parse_bucket(label)

    return {
        "records": len(trace.records),
        "nprocs": trace.nprocs,
        "files": len(trace.files),
        "phases": len(trace.phases),
        "generator": trace.generator,
        "ops": dict(sorted(ops.items())),
        "bytes_read": bytes_read,
        "bytes_written": bytes_written,
        "data_requests": data_ops,
        "regions": regions,
        "mean_request": (bytes_read + bytes_written) / data_ops if data_ops else 0.0,
        "request_size_histogram": dict(sorted(sizes.items(), key=lambda kv: order(kv[0]))),
        "sequential_fraction": seq / with_prev if with_prev else 0.0,
        "consecutive_fraction": consec / with_prev if with_prev else 0.0,
        "reuse": {
            "block": block,
            "accesses": len(blocks),
            "cold": cold,
            "reuses": len(dists),
            "truncated": truncated,
            "p50": percentile(dists, 50),
            "p90": percentile(dists, 90),
            "max": dists[-1] if dists else 0,
            "histogram": dict(sorted(reuse_hist.items(), key=lambda kv: order(kv[0]))),
        },
    }


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
