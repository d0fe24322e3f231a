"""Out-of-core dense LU factorisation (left-looking, block-column slabs).

The LU trace of the discretionary-caching paper (Vilayannur et al., §5) comes from an
out-of-core dense LU decomposition with synchronous reads and writes. Its I/O follows the
left-looking slab algorithm of Dongarra, Hammarling and Walker (*Key concepts for parallel
out-of-core LU factorization*, 1996): the n×n matrix is stored column-major in one file and cut
into K block-column slabs. To factor slab i, the slab is read (the *active* slab), every
already factored slab j < i is read in turn (the *temporary* slab) to apply its updates, and
the factored slab is written back. Slab i is therefore read K−1−i times as a temporary and once
as the active slab, and written exactly once.

Parallel form: slabs are dealt cyclically to the processes (slab i on rank i mod P) and
factored P at a time. Within such a round a rank first reads its active slab and every slab of
earlier rounds; then the round's slabs are finished in order, a barrier after each, and every
rank whose slab comes later reads the newly finished one.
"""

from __future__ import annotations

from typing import Any

from pvfs.traces.format import Trace
from pvfs.traces.generators._build import TraceBuilder, chunked, resolve_params, split_even

DEFAULTS: dict[str, Any] = {
    "n": 512,  # matrix order
    "slabs": 8,  # K
    "elem": 8,  # bytes per element (double)
    "req": 0,  # request size (0: a whole slab per request)
    "think": 0.0,  # seconds of computation per slab update
}


def slab_extents(n: int, slabs: int, elem: int) -> list[tuple[int, int]]:
    """``(offset, length)`` in bytes of each slab of a column-major n×n matrix."""
    return [(first * n * elem, cols * n * elem) for first, cols in split_even(n, slabs)]


def lu(nprocs: int, params: dict[str, Any] | None = None, seed: int = 0) -> Trace:
    """Left-looking out-of-core LU over K block-column slabs (Dongarra, Hammarling, Walker).

    Models the LU trace of Vilayannur et al. (discretionary caching, §5): each slab written
    once, read K−1−i times as the temporary and once as the active slab; slabs dealt
    cyclically to the processes.

    Raises:
        ValueError: when there are more slabs than columns.
    """
    p = resolve_params(DEFAULTS, params)
    n, k, elem = p["n"], p["slabs"], p["elem"]
    if not 1 <= k <= n:
        raise ValueError("need 1 <= slabs <= n")
    ext = slab_extents(n, k, elem)
    b = TraceBuilder(nprocs, "lu", p, seed)
    fid = b.file("lu/matrix", n * n * elem)
    b.open_all(fid)

    def rd(rank: int, slab: int, think: float = 0.0) -> None:
        off, length = ext[slab]
        for i, (o, ln) in enumerate(chunked(off, length, p["req"])):
            b.read(rank, fid, o, ln, think if i == 0 else 0.0)

    def wr(rank: int, slab: int) -> None:
        off, length = ext[slab]
        for o, ln in chunked(off, length, p["req"]):
            b.write(rank, fid, o, ln)

    for round_no, first in enumerate(range(0, k, nprocs)):
        members = list(range(first, min(first + nprocs, k)))
        b.barrier(f"lu round {round_no}")
        for slab in members:
            rank = slab % nprocs
            rd(rank, slab)
            for temp in range(first):
                rd(rank, temp, p["think"])
        for done in members:
            wr(done % nprocs, done)
            b.barrier(f"lu slab {done} done")
            for slab in members:
                if slab > done:
                    rd(slab % nprocs, done, p["think"])
    b.barrier("teardown")
    b.close_all(fid)
    return b.build()
