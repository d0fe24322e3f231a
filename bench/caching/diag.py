"""Where in each phase a trace's global hits fall: a diagnostic replay of the caching study.

On Mining the thresholds and the sketch get the same hits but not the same time (docs/caching.md,
session s15): the sketch caches the head of each rank's scan, the thresholds its tail, and
with a barrier between passes that decides whether the disks stand idle while the ranks take
their hits. This replays a trace under each policy on a study cluster (emulated disks, as the
study) and records every read's start and end per rank; :func:`overlap` then says, per phase,
how long all ranks were in their first ``k`` requests at once (disks idle if those hit) and
how long the last rank spent in its last ``k``.

    python -m pvfs.bench.caching.diag mining runtime25,sketch 2 16

:func:`refused_hits` (``python -m pvfs.bench.caching.diag --refused cholesky runtime10``)
asks the model how many of cache-everything's global hits fall on the segments a policy
refuses: on Cholesky, where the thresholds lose to ``both``, that is the hits they give up.
"""

from __future__ import annotations

import contextlib
import itertools
import sys
import time
from typing import Any

import trio

from pvfs.bench.caching import study as cs
from pvfs.cache import StreamPolicy
from pvfs.gcache.config import gcache_config
from pvfs.gcache.stack import CacheStack
from pvfs.traces.generators import generate
from pvfs.traces.replay import cached as rc

Req = tuple[int, int, float, float]  # (ino, offset, start, end), seconds from the run's start


def overlap(reqs: list[Req], phase_s: list[float], k: int) -> list[tuple[float, float]]:
    """Per phase from the second on (``phase_s[0]`` is the time before the first barrier,
    ``phase_s[1]`` the first phase; phases where no rank makes more than ``k`` reads are
    left out): (seconds from the phase's start until the first rank starts its request k+1 in offset
    order, seconds from the last rank's start of its last k requests until the phase ends).
    A rank is a file (each rank of the study's traces reads its own)."""
    marks = [0.0]
    for p in phase_s:
        marks.append(marks[-1] + p)
    out = []
    inos = sorted({q[0] for q in reqs})
    for a, b in itertools.pairwise(marks[2:]):
        per = [sorted((q for q in reqs if q[0] == ino and a - 1e-4 <= q[2] < b),
                      key=lambda q: q[1]) for ino in inos]
        per = [qs for qs in per if len(qs) > k]
        if not per:
            continue
        out.append((min(qs[k][2] for qs in per) - a, b - max(qs[-k][2] for qs in per)))
    return out


async def _replay(cfg, trace, files, policy: str) -> dict[str, Any]:
    setup = cs.POLICIES[policy]
    gep = gcache_config(cfg).endpoints[0]
    cs._call(gep, {"op": "policy_set", "policy": setup.policy, "threshold": setup.threshold,
                   "drop": True})
    for ep in cfg.iods:
        cs._call(ep, {"op": "disk_drop"})
    sizes = {f.ino: e.size for e, f in ((e, files[e.id]) for e in trace.files)}
    reqs: list[Req] = []
    t0 = time.perf_counter()
    real = CacheStack.read

    async def read(self, f, off, n, *a, **kw):  # every read's start and end
        t = time.perf_counter()
        r = await real(self, f, off, n, *a, **kw)
        reqs.append((f.ino, off, t - t0, time.perf_counter() - t0))
        return r

    CacheStack.read = read  # type: ignore[method-assign]
    try:
        async with contextlib.AsyncExitStack() as stack:
            nodes = [await stack.enter_async_context(CacheStack.open(
                cfg, local=setup.local, local_size=cs.LOCAL_BYTES, gcache=setup.gcache,
                sizes=sizes, stream=StreamPolicy(min_bytes=0, readahead=0)))
                for _ in range(cs.NODES)]
            t0 = time.perf_counter()
            res = await rc.replay_cached(trace, nodes, files, None)
    finally:
        CacheStack.read = real  # type: ignore[method-assign]
    return {"policy": policy, "time_s": res.time_s, "phase_s": res.phase_s, "reqs": reqs}


def run(trace_name: str, policies: list[str], reps: int) -> list[dict[str, Any]]:
    """``reps`` rounds of every policy, interleaved, on a study cluster of its own."""
    out: list[dict[str, Any]] = []
    with cs.study_cluster(2, cs.STORAGE, cs.IOD_CACHE) as cfg:
        async def main() -> None:
            trace = generate(trace_name, cs.NPROCS, cs.TRACES[trace_name][1], seed=1)
            async with CacheStack.open(cfg, local=False, gcache=False) as prep:
                files = await rc.prepare_files(trace, prep, f"/diag-{trace_name}")
            for _ in range(reps):
                for pol in policies:
                    out.append(await _replay(cfg, trace, files, pol))
        trio.run(main)
    return out


def refused_hits(trace_name: str, policy: str, *, quick: bool = True) -> dict[str, int]:
    """In the model (:mod:`pvfs.bench.caching.sim`): the segments ``policy`` refuses on a
    trace, and how many of cache-everything's global hits fall on them, i.e. the hits a
    refusal can cost (a segment once refused is never admitted again)."""
    from pvfs.bench.caching import sim

    trace = generate(trace_name, cs.NPROCS, cs.TRACES[trace_name][0 if quick else 1], seed=1)
    refused: set[tuple[int, int]] = set()
    hits = {"both_hits": 0, "both_hits_on_refused": 0}

    class Refusals(sim._Global):
        def access(self, ino, blocks):
            missed, ref = super().access(ino, blocks)
            refused.update((ino, s) for s in ref)
            return missed, ref

    class Hits(sim._Global):
        def access(self, ino, blocks):
            held = [b for b in blocks if (ino, b) in self.lru]
            hits["both_hits"] += len(held)
            hits["both_hits_on_refused"] += sum((ino, b // self.segment) in refused
                                                for b in held)
            return super().access(ino, blocks)

    real = sim._Global
    try:
        for glob, setup in ((Refusals, cs.POLICIES[policy]), (Hits, cs.POLICIES["both"])):
            sim._Global = glob  # type: ignore[misc]
            run = sim._Run(trace, setup, None, local_bytes=cs.LOCAL_BYTES,
                           global_bytes=cs.GLOBAL_BYTES, nodes=cs.NODES, stream=None)
            run.run()
    finally:
        sim._Global = real  # type: ignore[misc]
    return {"refused_segments": len(refused), **hits}


def main(argv: list[str]) -> None:
    if argv and argv[0] == "--refused":  # ... --refused TRACE POLICY [full]
        print(refused_hits(argv[1], argv[2], quick=argv[3:] != ["full"]))
        return
    trace, policies, reps, k = argv[0], argv[1].split(","), int(argv[2]), int(argv[3])
    for r in run(trace, policies, reps):
        cells = "  ".join(f"all-in-head {h:.3f} last-in-tail {t:.3f}"
                          for h, t in overlap(r["reqs"], r["phase_s"], k))
        print(f"{r['policy']:10s} {r['time_s']:.3f} s  {cells}")


if __name__ == "__main__":
    main(sys.argv[1:])
