"""The most global-cache hits any admission policy could get on a trace: an offline bound.

Every policy of the study (``all``, ``runtime``, ``adaptive``, ``sketch``) decides online,
block by block, whether a missed block enters the global cache and which block leaves. The
best any of them could do is what an oracle that knows the future does: Belady's MIN with
bypass. On a miss into a full cache it evicts the cached block whose next use is farthest
away, unless the missed block's own next use is farther still, in which case it does not
admit it at all (a refusal, as runtime bypass does). No online policy gets more hits on the
same sequence of lookups.

The sequence is the one the global cache sees under ``all`` (``cachesim`` at the study's
sizes): every local miss and local write-back. A refusing policy's sequence is a subset of
it, since the local caches behave the same under every global policy and a refusal only
sends later reads around the global cache, so the bound holds for those policies too.

Used to tell "the policy is as good as the other" from "nothing could be better": on a trace
where the measured hits already reach the bound, the policies can only tie.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Sequence
from typing import Any

from pvfs.traces.format import Trace

__all__ = ["global_hit_bound", "min_hits"]

_NEVER = float("inf")


def min_hits(stream: Sequence[Hashable], capacity: int) -> int:
    """Hits of Belady's MIN with bypass on ``stream`` with ``capacity`` slots."""
    if capacity <= 0:
        return 0
    next_use: list[float] = [_NEVER] * len(stream)
    last: dict[Hashable, int] = {}
    for i in range(len(stream) - 1, -1, -1):
        next_use[i] = last.get(stream[i], _NEVER)
        last[stream[i]] = i
    cached: dict[Hashable, float] = {}  # key -> position of its next use
    far: list[tuple[float, Hashable]] = []  # max-heap of (-next use, key), stale entries skipped
    hits = 0
    for i, key in enumerate(stream):
        nxt = next_use[i]
        if key in cached:
            hits += 1
        elif len(cached) >= capacity:
            while -far[0][0] != cached.get(far[0][1]):
                heapq.heappop(far)  # stale: the key's next use moved on, or it left
            if nxt >= -far[0][0]:
                continue  # used later than everything held (or never): refuse it
            del cached[heapq.heappop(far)[1]]
        if nxt == _NEVER:
            cached.pop(key, None)  # never used again: its slot is free from now on
            continue
        cached[key] = nxt
        heapq.heappush(far, (-nxt, key))
    return hits


def global_hit_bound(trace: Trace, *, local_bytes: int, global_bytes: int,
                     nodes: int) -> dict[str, Any]:
    """The global cache's lookups on ``trace`` (cache everything, the study's sizes) and the
    most hits any policy could have among them."""
    from pvfs.bench.caching.sim import BLOCK, simulate
    from pvfs.bench.caching.study import POLICIES

    stream: list[tuple[int, int]] = []
    row = simulate(trace, POLICIES["both"], None, local_bytes=local_bytes,
                   global_bytes=global_bytes, nodes=nodes, stream=stream)
    return {"lookups": len(stream), "distinct_blocks": len(set(stream)),
            "capacity_blocks": global_bytes // BLOCK,
            "lru_hits": row["global"]["hits"],
            "max_hits": min_hits(stream, global_bytes // BLOCK)}
