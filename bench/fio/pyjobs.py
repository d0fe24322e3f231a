"""Run the fio job set through a Python callable — the hook for pvfs's native API.

The interface is one callable, an :data:`Opener`::

    opener(name: str, mode: str) -> FileHandle

``name`` is a bare file name (``"fio.0.0"``, …; the opener decides where it lives) and
``mode`` is ``"wb"`` (create/truncate, used once to lay the file out), ``"rb"`` (reads) or
``"r+b"`` (writes into the existing file). The handle needs only four methods,
``pread(length, offset) -> bytes``, ``pwrite(data, offset) -> int``, ``fsync()`` and
``close()`` — exactly what ``pvfs.File`` offers, so for pvfs the opener is::

    fs = pvfs.connect(config)
    opener = lambda name, mode: fs.open(f"/bench/{name}", mode)

Each of a job's ``numjobs`` workers is a thread with its own handle on its own file, issuing
``bs``-sized requests back to back (sequential with wrap-around, or uniformly random aligned
offsets) for ``runtime`` seconds; writes end with ``fsync``. Cached jobs pre-read the files
through the same opener first. :class:`PyTarget` pairs an opener with a name for
``bench/fio/run.py``; ``--target NAME=py:MODULE:FUNC`` loads ``FUNC(workdir)``, a context
manager yielding an opener (see :func:`local_opener` for the shape).
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

from pvfs.bench.fio.jobs import JobResult, JobSpec, MiB, file_name


class FileHandle(Protocol):
    """The four calls the runner makes on an open file."""

    def pread(self, length: int, offset: int) -> bytes: ...

    def pwrite(self, data: bytes, offset: int) -> int: ...

    def fsync(self) -> None: ...

    def close(self) -> None: ...


Opener = Callable[[str, str], FileHandle]


@dataclass
class PyTarget:
    """A benchmark target reached through an :data:`Opener` instead of a directory."""

    name: str
    opener: Opener


class LocalFile:
    """:class:`FileHandle` over a local file with ``os.pread``/``os.pwrite``."""

    _FLAGS: ClassVar[dict[str, int]] = {"rb": os.O_RDONLY, "r+b": os.O_RDWR,
                                         "wb": os.O_RDWR | os.O_CREAT | os.O_TRUNC}

    def __init__(self, path: str, mode: str) -> None:
        if mode not in self._FLAGS:
            raise ValueError(f"unsupported mode {mode!r}")
        self._fd = os.open(path, self._FLAGS[mode] | os.O_CLOEXEC, 0o644)

    def pread(self, length: int, offset: int) -> bytes:
        return os.pread(self._fd, length, offset)

    def pwrite(self, data: bytes, offset: int) -> int:
        return os.pwrite(self._fd, data, offset)

    def fsync(self) -> None:
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


@contextlib.contextmanager
def local_opener(workdir: str) -> Iterator[Opener]:
    """The shape a ``py:MODULE:FUNC`` factory has: files under ``workdir/pyfiles``."""
    base = os.path.join(workdir, "pyfiles")
    os.makedirs(base, exist_ok=True)
    yield lambda name, mode: LocalFile(os.path.join(base, name), mode)


def layout(opener: Opener, size: int, numjobs: int) -> None:
    """Write the files the workers use (untimed setup)."""
    chunk = os.urandom(MiB)
    for j in range(numjobs):
        f = opener(file_name(j), "wb")
        try:
            off = 0
            while off < size:
                n = min(MiB, size - off)
                f.pwrite(chunk[:n], off)
                off += n
            f.fsync()
        finally:
            f.close()


def preread(opener: Opener, size: int, numjobs: int) -> None:
    """Read every file once so a cached job finds it in the cache."""
    for j in range(numjobs):
        f = opener(file_name(j), "rb")
        try:
            off = 0
            while off < size:
                off += max(len(f.pread(min(MiB, size - off), off)), 1)
        finally:
            f.close()


@dataclass
class _WorkerStats:
    ops: int = 0
    nbytes: int = 0
    lat_ns: list[int] = field(default_factory=list)
    error: BaseException | None = None


def _worker(opener: Opener, job: JobSpec, jobnum: int, size: int, clock_box: list[float],
            start: threading.Barrier, stats: _WorkerStats) -> None:
    """One fio-like worker; it reads its deadline from ``clock_box`` once released."""
    try:
        f = opener(file_name(jobnum), "rb" if job.is_read else "r+b")
    except BaseException as e:  # noqa: BLE001 - re-raised by run_job
        stats.error = e
        start.abort()
        return
    try:
        blocks = max(size // job.bs, 1)
        rng = random.Random(jobnum * 7919 + job.bs)
        data = os.urandom(job.bs)
        lat = stats.lat_ns
        pos = 0
        start.wait(timeout=120)
        clock = time.perf_counter_ns
        limit = int(clock_box[0] * 1e9)
        while True:
            t0 = clock()
            if t0 >= limit:
                break
            if job.is_random:
                off = rng.randrange(blocks) * job.bs
            else:
                off = pos * job.bs
                pos = (pos + 1) % blocks
            if job.is_read:
                n = len(f.pread(job.bs, off))
            else:
                n = f.pwrite(data, off)
            lat.append(clock() - t0)
            stats.ops += 1
            stats.nbytes += n
        if not job.is_read:
            f.fsync()
    except threading.BrokenBarrierError:
        pass
    except BaseException as e:  # noqa: BLE001 - re-raised by run_job
        stats.error = e
    finally:
        f.close()


def percentile(sorted_values: list[int], q: float) -> float | None:
    """Nearest-rank percentile of an ascending list (``q`` in 0..100)."""
    if not sorted_values:
        return None
    k = max(0, min(len(sorted_values) - 1, math.ceil(q / 100.0 * len(sorted_values)) - 1))
    return float(sorted_values[k])


def run_job(opener: Opener, job: JobSpec, size: int, runtime: float) -> JobResult:
    """Run ``job`` through ``opener`` like fio would; the files must be laid out already.

    Raises:
        The first exception a worker raised.
    """
    if job.cached:
        preread(opener, size, job.numjobs)
    stats = [_WorkerStats() for _ in range(job.numjobs)]
    clock_box = [0.0]
    started = [0.0]

    def start_clock() -> None:
        # Runs once every worker has opened its file, before any is released.
        started[0] = time.perf_counter()
        clock_box[0] = started[0] + runtime

    barrier = threading.Barrier(job.numjobs + 1, action=start_clock)
    threads = [threading.Thread(target=_worker, daemon=True,
                                args=(opener, job, j, size, clock_box, barrier, stats[j]))
               for j in range(job.numjobs)]
    for t in threads:
        t.start()
    with contextlib.suppress(threading.BrokenBarrierError):
        barrier.wait(timeout=120)
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started[0]
    for s in stats:
        if s.error is not None:
            raise s.error
    lat = sorted(x for s in stats for x in s.lat_ns)
    ops = sum(s.ops for s in stats)
    nbytes = sum(s.nbytes for s in stats)
    p99 = percentile(lat, 99.0)
    return JobResult(
        bw_bytes=nbytes / elapsed if elapsed > 0 else 0.0,
        iops=ops / elapsed if elapsed > 0 else 0.0,
        lat_mean_us=(sum(lat) / len(lat) / 1000.0) if lat else None,
        lat_p99_us=None if p99 is None else p99 / 1000.0,
        io_bytes=nbytes,
        runtime_s=elapsed,
    )
