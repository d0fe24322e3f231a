"""The workload study of Ross' thesis (ch. 4): single block, strided, random 16 and random 32.

All four share the thesis' set-up (§4.3): one shared file, N tasks that synchronise before
each access (a barrier starts every phase), the time of each task to complete its access is
its *task service time*, the largest of them the *application service time*. The x axis of
the thesis' figures 4.2–4.17 is the total data accessed on a single I/O node; the ``sizes``
parameter uses the same unit (bytes per I/O node, with ``iods`` I/O nodes: the thesis used 2),
so a task accesses ``size * iods / nprocs`` bytes. ``sweep=thesis`` reproduces appendix B's
range: 128 KiB to 256 MiB per I/O node in fifty log-spaced points.

Phase labels are ``workload:op:size`` (size in bytes per I/O node), which the metrics and
plot code parse to draw one curve per workload.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from pvfs.traces.format import Trace
from pvfs.traces.generators._build import TraceBuilder, resolve_params

THESIS_WORKLOADS = ("single", "strided", "random16", "random32")
STRIDED_REGIONS = 16

DEFAULTS: dict[str, Any] = {
    "sizes": [128 << 10, 512 << 10, 2 << 20],
    "iods": 2,
    "ops": ["write", "read"],
    "sweep": "",
}


def thesis_sweep(points: int = 50, low: int = 128 << 10, high: int = 256 << 20) -> list[int]:
    """Appendix B's sizes: ``points`` log-spaced values from ``low`` to ``high`` (4 KiB units)."""
    out = []
    for i in range(points):
        value = low * (high / low) ** (i / (points - 1))
        out.append(max(4096, round(value / 4096) * 4096))
    return sorted(set(out))


def _per_task(size: int, iods: int, nprocs: int, units: int) -> int:
    """Bytes per task for ``size`` bytes per I/O node, a multiple of ``units``."""
    per = size * iods // nprocs
    return max(units, per // units * units)


def _single(b: TraceBuilder, fid: int, per_task: int, write: bool, rng: random.Random) -> None:
    """Single block: task i accesses the contiguous block i with one request."""
    for rank in range(b.nprocs):
        (b.write if write else b.read)(rank, fid, rank * per_task, per_task)


def _strided(b: TraceBuilder, fid: int, per_task: int, write: bool, rng: random.Random) -> None:
    """Strided: one request of 16 disjoint regions; region j of task i is ``j*N + i``."""
    region = per_task // STRIDED_REGIONS
    n = b.nprocs
    for rank in range(n):
        regions = [((j * n + rank) * region, region) for j in range(STRIDED_REGIONS)]
        b.listio(rank, fid, regions, write)


def _random(nblocks: int) -> Callable[[TraceBuilder, int, int, bool, random.Random], None]:
    def gen(b: TraceBuilder, fid: int, per_task: int, write: bool, rng: random.Random) -> None:
        """Random blocks: N*nblocks blocks dealt at random, each task in random order."""
        block = per_task // nblocks
        perm = list(range(b.nprocs * nblocks))
        rng.shuffle(perm)
        for rank in range(b.nprocs):
            for blk in perm[rank * nblocks:(rank + 1) * nblocks]:
                (b.write if write else b.read)(rank, fid, blk * block, block)
    return gen


_PATTERNS = {
    "single": (_single, 1),
    "strided": (_strided, STRIDED_REGIONS),
    "random16": (_random(16), 16),
    "random32": (_random(32), 32),
}


def generate_study(workloads: tuple[str, ...] | list[str], nprocs: int,
                   params: dict[str, Any] | None, seed: int, name: str) -> Trace:
    """The phases of the given thesis workloads, one file each, sizes and ops swept.

    Raises:
        ValueError: for an unknown workload or op.
    """
    p = resolve_params(DEFAULTS, params)
    sizes = thesis_sweep() if p["sweep"] == "thesis" else list(p["sizes"])
    if p["sweep"] not in ("", "thesis"):
        raise ValueError(f"unknown sweep {p['sweep']!r} (thesis)")
    ops = list(p["ops"])
    if not ops or set(ops) - {"read", "write"}:
        raise ValueError("ops must be a list of read and write")
    rng = random.Random(seed)
    b = TraceBuilder(nprocs, name, p, seed)
    fids = {}
    for wl in workloads:
        if wl not in _PATTERNS:
            raise ValueError(f"unknown thesis workload {wl!r}")
        _, units = _PATTERNS[wl]
        extent = max(_per_task(s, p["iods"], nprocs, units) for s in sizes) * nprocs
        fids[wl] = b.file(f"thesis/{wl}.dat", 0 if "write" in ops else extent)
        b.open_all(fids[wl])
    for wl in workloads:
        pattern, units = _PATTERNS[wl]
        for size in sizes:
            per_task = _per_task(size, p["iods"], nprocs, units)
            for op in ops:
                b.barrier(f"{wl}:{op}:{size}")
                pattern(b, fids[wl], per_task, op == "write", rng)
    b.barrier("teardown")
    for wl in workloads:
        b.close_all(fids[wl])
    return b.build()


def thesis(nprocs: int, params: dict[str, Any] | None = None, seed: int = 0) -> Trace:
    """All four workloads of the thesis' study (ch. 4, fig. 4.1), one after the other.

    Models: single block, strided (16 regions per request) and random block (16 and 32 blocks
    per task) access by N synchronised tasks to one shared file each, sizes swept as in fig.
    4.2–4.17 (Ross, *Reactive Scheduling for Parallel I/O Systems*, 2000).
    """
    return generate_study(THESIS_WORKLOADS, nprocs, params, seed, "thesis")


def single(nprocs: int, params: dict[str, Any] | None = None, seed: int = 0) -> Trace:
    """Single block access (thesis §4.4): task i reads or writes contiguous block i at once.

    Models dense matrices accessed by blocks, checkpoints, some out-of-core codes (Ross 2000).
    """
    return generate_study(("single",), nprocs, params, seed, "single")


def strided(nprocs: int, params: dict[str, Any] | None = None, seed: int = 0) -> Trace:
    """Strided access (thesis §4.5): 16 disjoint regions per request, interleaved by task.

    Models row-cyclic distributions and access to parts of fixed-size records (Ross 2000).
    """
    return generate_study(("strided",), nprocs, params, seed, "strided")


def random16(nprocs: int, params: dict[str, Any] | None = None, seed: int = 0) -> Trace:
    """Random block access with 16 blocks per task (thesis §4.6), one request per block.

    Models irregular access: pieces of a multidimensional data set, database records (Ross).
    """
    return generate_study(("random16",), nprocs, params, seed, "random16")


def random32(nprocs: int, params: dict[str, Any] | None = None, seed: int = 0) -> Trace:
    """Random block access with 32 blocks per task (thesis §4.6, fig. 4.14–4.17).

    Models the same irregular access as random16 with twice as many, half as large,
    requests (Ross 2000).
    """
    return generate_study(("random32",), nprocs, params, seed, "random32")
