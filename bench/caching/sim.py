"""A trace-driven model of the caching study at the paper's latency levels.

``pvfs-admin study caching --model paper`` replays the same traces, with the same nodes (rank
``r`` on node ``r mod 2``), cache sizes (2 MiB local per node, 4 MiB global), segments (4
blocks), plans and *the same admission policy objects* (:mod:`pvfs.models.bypass`, as the
global cache daemon runs them, with its victim scan), but charges every request what it cost
on the paper's cluster — table 1 (reads) and table 2 (writes), 2 I/O daemons — instead of
timing this machine. It answers what the measured study cannot on a shared 2-core machine
(single runs vary by 20-50 %): does the paper's rule, implemented as we implement it, give
the paper's gains when a global miss costs what it cost there (about twice a direct read, a
global hit about half)?

Cost of one request of ``S`` bytes (ms, each level's table row interpolated in the size):

* every block a local hit: ``local_hit(S)``;
* else the local misses take their routes and the request costs their sum (both routes end
  at the client's one network interface, on the paper's cluster a 100 Mbit/s hub: moving
  pieces at once gains no bandwidth): the direct pieces ``local_miss(D)`` (``pvfs(D)``
  without a local cache), the global pieces ``global_hit(G)`` plus, if any block missed
  there, ``global_miss(Gm) - global_hit(Gm)`` for the ``Gm`` missing bytes; the local hits
  add their copy cost;
* writes: ``caching(S)`` of table 2 with a local cache (write-behind); without one, a direct
  write costs the direct read of its size, a write through the global cache its transfer
  there (``global_hit``) plus a fetch only for the blocks it covers partly that the global
  cache misses (read-modify-write): the daemon answers a write once it has the bytes, a
  block its policy refuses too (written through to the I/O daemons in the background). The
  written blocks enter the local cache and, when written back, the global cache's admission
  as reads do (write-back itself runs in the background, as in the paper). A write never
  brings a bypass hint (the daemon gives none for a segment it holds dirty or in-flight
  written blocks of; since 2026-11-26 writes carry none at all).

Ranks advance in simulated time (the one with the smallest clock goes next), a barrier waits
for the last rank; think times are ignored, as in the measured replay. Not modelled: network
and disk contention between concurrent requests, coherence traffic, dirty blocks pinned in
the global cache, reads answered from a refused write still on its way (the daemon's
``through_blocks``), and the hints a read refusal withholds for a segment with dirty blocks.
"""

from __future__ import annotations

import bisect
import heapq
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from pvfs.cache import Bypass, BypassTable
from pvfs.gcache.backend import via_global
from pvfs.models.bypass import make_policy
from pvfs.traces.format import Op, Trace
from pvfs.traces.plan import phase_bits

__all__ = ["PAPER", "simulate"]

BLOCK = 4096
SEGMENT_BLOCKS = 4
#: Blocks the global cache's victim scan looks at (``daemons/gcache/store.py`` SCAN).
SCAN = 16

_SIZES = [4 << 10, 8 << 10, 16 << 10, 32 << 10, 64 << 10, 128 << 10, 256 << 10]
#: The paper's tables 1 and 2, |IOD| = 2 (ms by request size): the trace study's.
PAPER: dict[str, list[float]] = {
    "pvfs": [1.12, 1.99, 3.82, 7.84, 14.16, 24.09, 47.79],
    "local_hit": [0.74, 0.83, 1.03, 1.38, 2.43, 4.34, 8.56],
    "local_miss": [1.32, 2.08, 4.36, 8.07, 18.59, 36.49, 52.92],
    "global_hit": [1.51, 1.85, 2.62, 5.01, 8.32, 17.77, 39.92],
    "global_miss": [2.05, 3.31, 5.93, 11.91, 24.78, 49.06, 109.36],
    "write_pvfs": [0.68, 1.27, 1.90, 3.77, 9.86, 15.44, 29.61],
    "write_caching": [0.60, 0.67, 0.84, 1.43, 2.04, 3.70, 7.19],
}
#: Tables 1 and 2 by I/O daemon count (figs. 3-4 run on 1 and 3).
PAPER_BY_IODS: dict[int, dict[str, list[float]]] = {
    1: {"pvfs": [1.09, 2.27, 4.31, 9.48, 19.04, 38.52, 54.04],
        "local_hit": [0.67, 0.68, 0.72, 0.80, 0.97, 1.59, 2.85],
        "local_miss": [1.25, 2.28, 4.61, 9.54, 20.77, 44.23, 67.54],
        "global_hit": [1.43, 1.71, 2.44, 4.26, 8.14, 15.28, 25.91],
        "global_miss": [2.00, 2.85, 5.86, 11.49, 23.85, 50.42, 94.38],
        "write_pvfs": [0.68, 1.03, 1.97, 3.95, 7.83, 15.94, 31.09],
        "write_caching": [0.55, 0.56, 0.60, 0.96, 1.05, 1.76, 3.15]},
    2: PAPER,
    3: {"pvfs": [1.08, 1.83, 3.52, 6.17, 12.00, 20.04, 36.86],
        "local_hit": [0.75, 0.84, 1.01, 1.41, 2.42, 4.50, 8.67],
        "local_miss": [1.31, 2.35, 4.48, 8.19, 18.96, 26.90, 40.63],
        "global_hit": [1.23, 1.66, 2.45, 4.80, 8.67, 19.26, 39.38],
        "global_miss": [1.87, 3.36, 6.30, 12.06, 30.71, 54.14, 100.34],
        "write_pvfs": [0.68, 1.04, 1.85, 3.62, 8.23, 15.74, 29.40],
        "write_caching": [0.59, 0.68, 0.87, 1.37, 2.08, 4.01, 7.79]},
}


def cost(level: str, nbytes: int, table: dict[str, list[float]] | None = None) -> float:
    """Milliseconds of ``level`` for a request of ``nbytes``: the table row (of ``table``,
    default :data:`PAPER`) interpolated linearly in the size, extended by its last (first)
    slope past 256 KiB (under 4 KiB)."""
    if nbytes <= 0:
        return 0.0
    row = (table or PAPER)[level]
    i = min(max(bisect.bisect_left(_SIZES, nbytes), 1), len(_SIZES) - 1)
    x0, x1, y0, y1 = _SIZES[i - 1], _SIZES[i], row[i - 1], row[i]
    return max(0.0, y0 + (y1 - y0) * (nbytes - x0) / (x1 - x0))


class _Global:
    """The global cache daemon's bookkeeping: LRU slots, victim scan, policy, hints."""

    def __init__(self, blocks: int, policy: str, threshold: int,
                 segment: int = SEGMENT_BLOCKS) -> None:
        self.blocks = blocks
        self.segment = segment
        self.policy = make_policy(policy, threshold, blocks)
        self.lru: OrderedDict[tuple[int, int], int] = OrderedDict()  # key -> hits
        self.hits = self.misses = self.admissions = self.bypasses = self.evictions = 0
        self.hints = 0  # segments clients were told to bypass
        self.stream: list[tuple[int, int]] | None = None  # every block looked up, if asked

    def _victim(self) -> tuple[int, int]:
        first = None
        for seen, key in enumerate(self.lru):
            if first is None:
                first = key
            if self.policy.good_victim(key[0], key[1] // self.segment):
                return key
            if seen + 1 >= SCAN:
                break
        assert first is not None
        return first

    def access(self, ino: int, blocks: list[int]) -> tuple[list[int], set[int]]:
        """Look ``blocks`` up (one request): the blocks missed, and the segments refused."""
        before = {s: self.policy.access(ino, s) for s in sorted({b // self.segment
                                                                  for b in blocks})}
        missed: list[int] = []
        refused: set[int] = set()
        if self.stream is not None:
            self.stream.extend((ino, b) for b in blocks)
        for b in blocks:
            key = (ino, b)
            seg = b // self.segment
            if key in self.lru:
                self.lru[key] += 1
                self.lru.move_to_end(key)
                self.hits += 1
                self.policy.hit(ino, seg)
                continue
            self.misses += 1
            missed.append(b)
            if seg in refused:
                continue
            victim = self._victim() if len(self.lru) >= self.blocks else None
            vseg = None if victim is None else (victim[0], victim[1] // self.segment)
            if not self.policy.admit(ino, seg, before[seg], vseg):
                refused.add(seg)
                continue
            if victim is not None:
                self.policy.evicted(victim[0], vseg[1], self.lru.pop(victim))  # type: ignore[index]
                self.evictions += 1
            self.lru[key] = 0
            self.admissions += 1
        for seg in refused:  # the server drops the segment's clean copies
            for b in range(seg * self.segment, (seg + 1) * self.segment):
                self.lru.pop((ino, b), None)
        self.bypasses += len(refused)
        return missed, refused


@dataclass
class _Node:
    local: bool
    blocks: int
    lru: OrderedDict = field(default_factory=OrderedDict)
    hints: dict[tuple[int, int], int] = field(default_factory=dict)  # -1: for ever
    hits: int = 0
    misses: int = 0

    def lookup(self, ino: int, b: int) -> bool:
        if not self.local:
            return False
        key = (ino, b)
        if key in self.lru:
            self.lru.move_to_end(key)
            self.hits += 1
            return True
        self.misses += 1
        return False

    def insert(self, ino: int, b: int) -> None:
        if not self.local:
            return
        self.lru[(ino, b)] = None
        self.lru.move_to_end((ino, b))
        while len(self.lru) > self.blocks:
            self.lru.popitem(last=False)

    def via_global(self, ino: int, seg: int, bits: BypassTable, bit: int) -> bool:
        return via_global(int(bits.flags(ino, seg)) & bit, self.hints, (ino, seg),
                          write=bit == int(Bypass.WRITE_GLOBAL))


def _blocks(off: int, n: int) -> list[int]:
    return list(range(off // BLOCK, (off + n - 1) // BLOCK + 1)) if n > 0 else []


class _Run:
    """One policy over one trace: the nodes' local caches, the global cache, the bypass bits
    of the current phase, and what each request costs."""

    def __init__(self, trace: Trace, setup: Any, plan: dict[str, Any] | None, *,
                 local_bytes: int, global_bytes: int, nodes: int,
                 stream: list[tuple[int, int]] | None, segment: int = SEGMENT_BLOCKS,
                 iods: int = 2) -> None:
        self.trace, self.setup, self.plan, self.nodes = trace, setup, plan, nodes
        self.segment, self.table = segment, PAPER_BY_IODS[iods]
        self.spent = {"read_ms": 0.0, "write_ms": 0.0, "reads": 0, "writes": 0}
        self.g = (_Global(global_bytes // BLOCK, setup.policy, setup.threshold, segment)
                  if setup.gcache else None)
        if self.g is not None:
            self.g.stream = stream
        self.ns = [_Node(setup.local, local_bytes // BLOCK) for _ in range(nodes)]
        self.bits = BypassTable()
        self.ids = {e.name: e.id for e in trace.files}

    def apply_phase(self, phase: int) -> None:
        if self.plan is None or not self.setup.plan:
            return
        for name, text in phase_bits(self.plan, phase).items():
            if name in self.ids:
                self.bits.set_xattr(self.ids[name], text or "")

    def _cost(self, level: str, nbytes: int) -> float:
        return cost(level, nbytes, self.table)

    def request(self, node: _Node, ino: int, off: int, n: int, write: bool) -> float:
        """The modelled time (ms) of one request of ``node``, added to the run's reads' or
        writes' total."""
        t = self._request(node, ino, off, n, write)
        kind = "write" if write else "read"
        self.spent[f"{kind}_ms"] += t
        self.spent[f"{kind}s"] += 1
        return t

    def _request(self, node: _Node, ino: int, off: int, n: int, write: bool) -> float:
        blocks = _blocks(off, n)
        if not blocks:
            return 0.0
        if write:
            for b in blocks:
                node.insert(ino, b)
        local_hit = [b for b in blocks if not write and node.lookup(ino, b)]
        hitset = set(local_hit)
        miss = [b for b in blocks if b not in hitset]
        if write and self.setup.local:
            return self._write_into_local(node, ino, blocks, n)
        if not miss:
            return self._cost("local_hit", n)
        gblocks, dblocks = self._route(node, ino, miss, write)
        t_direct = 0.0
        if dblocks:
            t_direct = self._cost("local_miss" if self.setup.local else "pvfs",
                                  len(dblocks) * BLOCK)
        t_global = self._through_global(node, ino, gblocks, off, n, write) if gblocks else 0.0
        if not write:
            for b in miss:
                node.insert(ino, b)
        copy = self._cost("local_hit", len(local_hit) * BLOCK) - self._cost("local_hit", 1) \
            if local_hit else 0.0
        return t_direct + t_global + max(copy, 0.0)

    def _write_into_local(self, node: _Node, ino: int, blocks: list[int], n: int) -> float:
        """A write the local cache takes: the write-back later passes the global cache's
        admission as a read would, at no cost now."""
        if self.g is not None:
            segs = {b // self.segment for b in blocks}
            gsegs = {s for s in segs
                     if node.via_global(ino, s, self.bits, int(Bypass.WRITE_GLOBAL))}
            self.g.access(ino, [b for b in blocks if b // self.segment in gsegs])  # no hints
        return self._cost("write_caching", n)

    def _route(self, node: _Node, ino: int, miss: list[int],
               write: bool) -> tuple[list[int], list[int]]:
        """The missed blocks split into those through the global cache and those direct."""
        if self.g is None:
            return [], miss
        bit = int(Bypass.WRITE_GLOBAL if write else Bypass.READ_GLOBAL)
        route = {s: node.via_global(ino, s, self.bits, bit)
                 for s in sorted({b // self.segment for b in miss})}
        gblocks: list[int] = []
        dblocks: list[int] = []
        for b in miss:
            (gblocks if route[b // self.segment] else dblocks).append(b)
        return gblocks, dblocks

    def _through_global(self, node: _Node, ino: int, gblocks: list[int], off: int, n: int,
                        write: bool) -> float:
        g = self.g
        assert g is not None
        missed, refused = g.access(ino, gblocks)
        if write:  # only the partly written blocks it misses are fetched first
            missed = [b for b in missed if b * BLOCK < off or (b + 1) * BLOCK > off + n]
        else:
            for s in refused:
                node.hints[(ino, s)] = g.policy.bypass_ttl or -1
            g.hints += len(refused)
        t = self._cost("global_hit", len(gblocks) * BLOCK)
        if missed:
            t += (self._cost("global_miss", len(missed) * BLOCK)
                  - self._cost("global_hit", len(missed) * BLOCK))
        return t

    def run(self) -> list[float]:
        """Every rank's records in time order (a heap of the ranks' clocks), barriers ending
        phases; the ranks' clocks at the end (s)."""
        trace = self.trace
        by_rank: list[list] = [[] for _ in range(trace.nprocs)]
        for rec in trace.records:
            by_rank[rec.rank].append(rec)
        pos = [0] * trace.nprocs
        clock = [0.0] * trace.nprocs
        waiting: list[int] = []
        phase = 0
        self.apply_phase(0)
        heap = [(0.0, r) for r in range(trace.nprocs)]
        heapq.heapify(heap)
        while heap:
            _, r = heapq.heappop(heap)
            if pos[r] >= len(by_rank[r]):
                continue
            rec = by_rank[r][pos[r]]
            pos[r] += 1
            node = self.ns[r % self.nodes]
            if rec.op == Op.BARRIER:
                waiting.append(r)
                if len(waiting) == trace.nprocs:
                    t = max(clock)
                    phase += 1
                    self.apply_phase(phase)
                    for w in waiting:
                        clock[w] = t
                        heapq.heappush(heap, (t, w))
                    waiting = []
                continue
            if rec.op in (Op.READ, Op.WRITE, Op.LISTIO):
                for off, n in rec.extents():
                    clock[r] += self.request(node, rec.file, off, n, rec.is_write) / 1000
            heapq.heappush(heap, (clock[r], r))
        return clock

    def row(self, clock: list[float]) -> dict[str, Any]:
        g = self.g
        lh = sum(x.hits for x in self.ns)
        lm = sum(x.misses for x in self.ns)
        gl = (g.hits + g.misses) if g is not None else 0
        return {"time_s": max(clock), "segment_blocks": self.segment,
                "read_s": self.spent["read_ms"] / 1000, "write_s": self.spent["write_ms"] / 1000,
                "reads": self.spent["reads"], "writes": self.spent["writes"],
                "local_hit_rate": lh / (lh + lm) if lh + lm else 0.0,
                "global_hit_rate": g.hits / gl if g is not None and gl else 0.0,
                "global": {"hits": g.hits if g else 0, "misses": g.misses if g else 0,
                           "admissions": g.admissions if g else 0,
                           "bypasses": g.bypasses if g else 0,
                           "evictions": g.evictions if g else 0,
                           "hints": g.hints if g else 0,
                           "threshold": getattr(g.policy, "threshold", 0) if g else 0}}


def simulate(trace: Trace, setup: Any, plan: dict[str, Any] | None, *,
             local_bytes: int, global_bytes: int, nodes: int,
             stream: list[tuple[int, int]] | None = None, segment_blocks: int = SEGMENT_BLOCKS,
             iods: int = 2) -> dict[str, Any]:
    """One policy (``setup``: a :class:`pvfs.bench.caching.study.Setup`) over ``trace``; a row
    like the measured study's (``time_s`` modelled). ``stream``, if given, receives every
    ``(file, block)`` the global cache looks up, in order. ``segment_blocks``: blocks per
    bypass segment (the paper's fig. 9(b) varies it); ``iods``: which I/O daemon count's
    table 1-2 rows price the requests (1, 2 or 3)."""
    run = _Run(trace, setup, plan, local_bytes=local_bytes, global_bytes=global_bytes,
               nodes=nodes, stream=stream, segment=segment_blocks, iods=iods)
    return run.row(run.run())
