"""Replay a trace through the cache stacks of the native async API (SPEC §6 study).

Where :mod:`pvfs.traces.replay.engine` runs one process per rank against a target, this runs
every rank as a trio task of one process against a set of :class:`pvfs.gcache.CacheStack`
*nodes* (rank ``r`` on node ``r mod nodes``): each node's local cache is shared by its ranks,
the global caches by every node, as in the discretionary-caching paper's cluster. Barriers are
trio barriers; a bypass plan's bits are applied to every node as each phase starts.

The result is the application time (start barrier to the last rank's end, the write-behind
data of every node flushed as the program's closes would), the time of each phase and the
nodes' local cache counters.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from dataclasses import dataclass, field
from typing import Any

import trio

from pvfs.gcache.stack import CacheStack, StackFile
from pvfs.traces.format import Op, Trace
from pvfs.traces.plan import phase_bits

__all__ = ["CachedResult", "prepare_files", "replay_cached", "replay_with_plan"]

_ZEROS = memoryview(bytes(16 << 20))


def _data(n: int) -> memoryview | bytes:
    return _ZEROS[:n] if n <= len(_ZEROS) else bytes(n)


class _Barrier:
    """N parties; the last to arrive runs ``on_release`` (the next phase's plan) first."""

    def __init__(self, parties: int, on_release) -> None:
        self.parties = parties
        self.on_release = on_release
        self.count = 0
        self.generation = 0
        self.event = trio.Event()

    async def wait(self) -> None:
        self.count += 1
        if self.count == self.parties:
            self.generation += 1
            self.on_release(self.generation)
            self.count = 0
            ev, self.event = self.event, trio.Event()
            ev.set()
            return
        await self.event.wait()


@dataclass
class CachedResult:
    time_s: float
    phase_s: list[float] = field(default_factory=list)
    local: dict[str, int] = field(default_factory=dict)
    ops: int = 0
    bytes: int = 0


async def prepare_files(trace: Trace, stack: CacheStack, root: str,
                        stripe=None) -> dict[int, StackFile]:
    """Create the trace's files under ``root`` (existing ones first removed) and write the
    ones that exist before the program starts, past every cache (``stack.client``)."""
    client = stack.client
    try:
        await client.mkdir(1, root.strip("/"), 0o755)
    except FileExistsError:
        pass
    files: dict[int, StackFile] = {}
    for entry in trace.files:
        path = f"{root}/{entry.name.replace('/', '_')}"
        parent = (await client.resolve(root))["ino"]
        name = path.rsplit("/", 1)[1]
        try:
            await client.unlink(parent, name)
        except FileNotFoundError:
            pass
        f = await stack.open_file(path, create=True, stripe=stripe)
        st = await stack.direct.stripe_of(f.ino)
        chunk = 1 << 20
        for off in range(0, entry.size, chunk):
            n = min(chunk, entry.size - off)
            await client.write(f.ino, st, off, _data(n))
        stack.sizes[f.ino] = entry.size
        files[entry.id] = f
    return files


async def replay_cached(trace: Trace, nodes: list[CacheStack], files: dict[int, StackFile],
                        plan: dict[str, Any] | None = None) -> CachedResult:
    """Run every rank of ``trace`` as a task on its node; returns the timings and counters."""
    by_rank: list[list] = [[] for _ in range(trace.nprocs)]
    for rec in trace.records:
        by_rank[rec.rank].append(rec)
    names = {fid: f for fid, f in files.items()}
    ino_of_name = {e.name: files[e.id] for e in trace.files}
    phase_ends: list[float] = []
    result = CachedResult(0.0)

    def apply_phase(phase: int) -> None:
        phase_ends.append(time.perf_counter())
        if plan is None:
            return
        for name, bits in phase_bits(plan, phase).items():
            f = ino_of_name.get(name)
            if f is not None:
                for node in nodes:
                    node.set_bypass(f, bits)

    barrier = _Barrier(trace.nprocs, apply_phase)
    apply_phase(0)
    phase_ends.clear()

    async def rank_task(rank: int) -> None:
        node = nodes[rank % len(nodes)]
        for rec in by_rank[rank]:
            op = rec.op
            if op == Op.BARRIER:
                await barrier.wait()
            elif op == Op.READ:
                await node.read(names[rec.file], rec.offset, rec.length)
            elif op == Op.WRITE:
                await node.write(names[rec.file], rec.offset, _data(rec.length))
            elif op == Op.LISTIO:
                f = names[rec.file]
                for off, n in rec.regions or ():
                    if rec.is_write:
                        await node.write(f, off, _data(n))
                    else:
                        await node.read(f, off, n)
            elif op == Op.FSYNC:
                await node.fsync(names[rec.file])
            else:
                continue
            result.ops += 1
            result.bytes += sum(n for _, n in rec.extents())

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for rank in range(trace.nprocs):
            nursery.start_soon(rank_task, rank)
    for node in nodes:  # the program's closes: write-behind data leaves the node
        for f in files.values():
            await node.cache.flush(f.ino)
    end = time.perf_counter()
    result.time_s = end - start
    marks = [start, *phase_ends, end]
    result.phase_s = [b - a for a, b in itertools.pairwise(marks)]
    for node in nodes:
        for k, v in node.cache.stats().items():
            if isinstance(v, int):
                result.local[k] = result.local.get(k, 0) + v
    return result


def replay_with_plan(trace: Trace, target: str, plan: dict[str, Any] | None,
                     nodes: int = 1, local_size: int = 64 << 20) -> dict[str, Any]:
    """``pvfs-admin replay --plan``: the trace through ``nodes`` cache stacks of the pvfs
    file system ``target`` (``pvfs://CONFIG``), the plan's bits applied at each phase."""
    from pvfs.traces.replay.targets import parse_spec

    kind, location, options = parse_spec(target)
    if kind != "pvfs":
        raise ValueError("--plan needs a pvfs://CONFIG target (the caches are the client's)")
    root = options.get("root", "/").rstrip("/") + "/plan-replay"

    async def main() -> CachedResult:
        async with CacheStack.open(location, local=False, gcache=False) as prep:
            files = await prepare_files(trace, prep, root)
        sizes = {files[e.id].ino: e.size for e in trace.files}
        async with contextlib.AsyncExitStack() as stack:
            ns = [await stack.enter_async_context(
                CacheStack.open(location, local_size=local_size, sizes=sizes))
                for _ in range(nodes)]
            res = await replay_cached(trace, ns, files, plan)
            res.local["gcache_client"] = ns[0].gbackend is not None
            return res

    res = trio.run(main)
    return {"target": target, "plan": bool(plan), "nodes": nodes, "time_s": res.time_s,
            "phase_s": res.phase_s, "ops": res.ops, "bytes": res.bytes, "local": res.local}
