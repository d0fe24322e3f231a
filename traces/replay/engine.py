"""The replay engine: one worker per trace rank, barriers where the trace has them.

:func:`run_rank` is the whole of what a worker does, whatever starts it: the local runner
below (``multiprocessing``, one process per rank) or :mod:`pvfs.traces.replay.mpi` (one MPI
rank per trace rank). Both hand it a ``barrier`` callable, a target and the rank's records, and
both feed the per-rank results to :func:`pvfs.traces.metrics.summarize`, so the numbers of a
local and an MPI run mean the same thing.

Timing (the thesis' definitions, ch. 4): all ranks leave a start barrier together; a rank's
*task service time* runs from there to the end of its last operation, and within a phase
(the operations between two barriers) from leaving the barrier to the end of its last
operation in the phase. Waiting at barriers is not service time; think time, when honoured,
is (it is part of what the rank did).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue as queue_mod
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pvfs.traces.format import Flag, Op, Record, Trace
from pvfs.traces.replay.data import file_key, pattern, pattern_list
from pvfs.traces.replay.targets import Handle, Target, open_target

PROGRESS_EVERY = 64


@dataclass
class ReplayOptions:
    """How to replay.

    Attributes:
        think: honour the records' think times (sleep before each operation) instead of
            replaying as fast as possible.
        think_scale: multiply think times by this.
        verify: compare every read with the deterministic content and count mismatches.
        digest: hash every file of the trace after the run (for byte-identical comparisons).
        progress: show a progress bar (local runner, on a terminal).
        drop_caches: before the start and at every barrier, rank 0 syncs and drops the
            kernel's page cache (root only) so every phase reads cold data, as the thesis'
            uncached runs did; time spent there is not service time.
    """

    think: bool = False
    think_scale: float = 1.0
    verify: bool = False
    digest: bool = True
    progress: bool = False
    drop_caches: bool = False


DROP_CACHES = "/proc/sys/vm/drop_caches"


def can_drop_caches() -> bool:
    """True when this process may write ``/proc/sys/vm/drop_caches``."""
    return os.access(DROP_CACHES, os.W_OK)


def drop_caches() -> None:
    """Write back dirty pages and drop the page cache, dentries and inodes."""
    os.sync()
    with open(DROP_CACHES, "w") as f:
        f.write("3\n")


def _kind(rec: Record) -> str:
    if rec.op == Op.LISTIO:
        return "listio_write" if rec.flags & Flag.WR else "listio_read"
    return rec.op.label


def run_rank(rank: int, records: Sequence[Record], names: Sequence[str], target: Target,
             barrier: Callable[[], None], opts: ReplayOptions,
             progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Replay one rank's records on ``target``; the per-rank result dict.

    After the first failure the rank stops doing I/O but still passes its barriers, so the
    other ranks finish instead of hanging; the error is reported in the result.
    """
    keys = [file_key(n) for n in names]
    handles: dict[int, Handle] = {}
    nphases = 1 + sum(1 for r in records if r.op == Op.BARRIER)
    phase_time: list[float | None] = [None] * nphases
    phase_bytes = [0] * nphases
    latencies: dict[str, list[float]] = {}
    ops: dict[str, int] = {}
    stats = {"bytes_read": 0, "bytes_written": 0, "verify_errors": 0, "short_reads": 0}
    errors: list[str] = []
    phase = 0

    def sync_point() -> None:
        barrier()
        if opts.drop_caches:
            if rank == 0:
                drop_caches()
            barrier()

    sync_point()
    start = phase_start = last_end = time.perf_counter()

    def handle(fid: int, flags: int = Flag.RD | Flag.WR | Flag.CREAT) -> Handle:
        h = handles.get(fid)
        if h is None:  # imported traces may use files they never opened
            h = handles[fid] = target.open(names[fid], flags)
        return h

    for n, rec in enumerate(records):
        if progress is not None and n % PROGRESS_EVERY == 0:
            progress(n)
        if rec.op == Op.BARRIER:
            t0 = time.perf_counter()
            sync_point()
            phase_start = time.perf_counter()
            latencies.setdefault("barrier", []).append(phase_start - t0)
            phase += 1
            continue
        if errors:
            continue
        if opts.think and rec.think > 0:
            time.sleep(rec.think * opts.think_scale)
        kind = _kind(rec)
        try:
            t0 = time.perf_counter()
            moved = _execute(rec, handles, handle, keys, stats, opts)
            t1 = time.perf_counter()
        except Exception as exc:  # noqa: BLE001 - reported, not hidden
            errors.append(f"rank {rank} record {n} ({kind} {names[rec.file]}): {exc!r}")
            continue
        latencies.setdefault(kind, []).append(t1 - t0)
        ops[kind] = ops.get(kind, 0) + 1
        phase_time[phase] = t1 - phase_start
        phase_bytes[phase] += moved
        last_end = t1
    for fid, h in list(handles.items()):
        try:
            h.close()
        except OSError as exc:
            errors.append(f"rank {rank}: closing {names[fid]}: {exc!r}")
    if progress is not None:
        progress(len(records))
    return {
        "rank": rank,
        "service_time": last_end - start,
        "phase_times": phase_time,
        "phase_bytes": phase_bytes,
        "latencies": latencies,
        "ops": ops,
        "errors": errors,
        **stats,
    }


def _execute(rec: Record, handles: dict[int, Handle], handle: Callable[..., Handle],
             keys: list[int], stats: dict[str, int], opts: ReplayOptions) -> int:
    """Do one record; the number of data bytes it moved."""
    op = rec.op
    if op == Op.OPEN:
        old = handles.pop(rec.file, None)
        if old is not None:
            old.close()
        handle(rec.file, rec.flags or Flag.RD)
        return 0
    if op == Op.CLOSE:
        h = handles.pop(rec.file, None)
        if h is not None:
            h.close()
        return 0
    if op == Op.WRITE:
        handle(rec.file).pwrite(pattern(keys[rec.file], rec.offset, rec.length), rec.offset)
        stats["bytes_written"] += rec.length
        return rec.length
    if op == Op.READ:
        data = handle(rec.file).pread(rec.length, rec.offset)
        stats["bytes_read"] += len(data)
        if len(data) < rec.length:
            stats["short_reads"] += 1
        if opts.verify and data != pattern(keys[rec.file], rec.offset, len(data)):
            stats["verify_errors"] += 1
        return len(data)
    if op == Op.LISTIO:
        regions = list(rec.regions or ())
        if rec.flags & Flag.WR:
            handle(rec.file).write_list(regions, pattern_list(keys[rec.file], regions))
            stats["bytes_written"] += rec.length
        else:
            data = handle(rec.file).read_list(regions)
            stats["bytes_read"] += len(data)
            if opts.verify and data != pattern_list(keys[rec.file], regions):
                stats["verify_errors"] += 1
        return rec.length
    if op == Op.FSYNC:
        handle(rec.file).fsync()
        return 0
    return 0  # SEEK: offsets are explicit, nothing to do


def file_digests(target: Target, names: Sequence[str]) -> dict[str, str | None]:
    """SHA-256 of every named file on ``target``."""
    return {name: target.digest(name) for name in names}


# ------------------------------------------------------------------------- local processes
def _worker(rank: int, records: Sequence[Record], names: Sequence[str], spec: str,
            barrier: Any, queue: Any, counters: Any, opts: ReplayOptions) -> None:
    def wait() -> None:
        barrier.wait()

    def progress(n: int) -> None:
        counters[rank] = n

    try:
        target = open_target(spec)
    except Exception as exc:  # noqa: BLE001 - the parent reports it
        barrier.abort()
        queue.put({"rank": rank, "fatal": f"rank {rank}: opening {spec}: {exc!r}"})
        return
    try:
        result = run_rank(rank, records, names, target, wait, opts, progress)
    except Exception:  # noqa: BLE001 - e.g. a broken barrier after another rank died
        barrier.abort()
        result = {"rank": rank, "fatal": traceback.format_exc(limit=3)}
    finally:
        target.close()
    queue.put(result)


def run_local(trace: Trace, spec: str, opts: ReplayOptions | None = None) -> dict[str, Any]:
    """Replay ``trace`` with one local process per rank; the summarised result.

    Raises:
        RuntimeError: when a worker could not run at all (its message is included).
    """
    from pvfs.traces.metrics import summarize

    opts = opts or ReplayOptions()
    names = [f.name for f in trace.files]
    with open_target(spec) as target:
        target.prepare(trace.files)
        before = target.counters()
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(trace.nprocs)
    queue = ctx.Queue()
    counters = ctx.Array("q", trace.nprocs, lock=False)
    per_rank = trace.by_rank()
    workers = [ctx.Process(target=_worker, name=f"replay-{r}", daemon=True,
                           args=(r, per_rank[r], names, spec, barrier, queue, counters, opts))
               for r in range(trace.nprocs)]
    bar = _progress_bar(len(trace.records), opts.progress)
    t0 = time.perf_counter()
    for w in workers:
        w.start()
    results: list[dict[str, Any]] = []
    try:
        while len(results) < len(workers):
            try:
                results.append(queue.get(timeout=0.1))
            except queue_mod.Empty:
                if bar is not None:
                    bar.n = sum(counters)
                    bar.refresh()
                dead = [w for w in workers if w.exitcode not in (None, 0)]
                if dead:  # a worker died without reporting: release the others
                    barrier.abort()
                    if len(results) + len(dead) >= len(workers):
                        break
    finally:
        wall = time.perf_counter() - t0
        if bar is not None:
            bar.n = sum(counters)
            bar.close()
        for w in workers:
            w.join(timeout=5)
            if w.is_alive():
                w.kill()
    fatal = [r["fatal"] for r in results if "fatal" in r]
    if fatal or len(results) < len(workers):
        raise RuntimeError("replay failed: " + ("; ".join(fatal) or "a worker died"))
    results.sort(key=lambda r: r["rank"])
    with open_target(spec) as target:
        after = target.counters()
        digests = file_digests(target, names) if opts.digest else {}
    return summarize(trace, results, spec=spec, wall_time=wall, runner="local",
                     counters_before=before, counters_after=after, digests=digests)


def _progress_bar(total: int, wanted: bool) -> Any:
    if not wanted or not os.isatty(2):
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, unit="op", desc="replay", leave=False)
