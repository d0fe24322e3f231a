"""ROMIO-style two-phase collective write, the baseline the caching paper compares with.

All ranks agree on the aggregate access range, cut it into ``n`` equal byte ranges (file
domains, not aligned to stripes — ROMIO's default, the paper's point in §5.1), send every
piece to the aggregator of its domain (the communication phase) and each aggregator writes
its domain's contiguous runs (the I/O phase), at most ``cb_buffer`` bytes per write. Where
ROMIO would read-modify-write a domain with holes (data sieving) this writes each run
separately, which only lowers its count of file-system writes.
"""

from __future__ import annotations

from typing import Any

from pvfs.collective._fsio import CountingFile
from pvfs.collective._pages import merge_runs
from pvfs.collective._wait import barrier

CB_BUFFER = 16 << 20  # ROMIO's cb_buffer_size default


def write_all(comm: Any, fs: CountingFile, regions: list[tuple[int, int]],
              data: memoryview, cb_buffer: int = CB_BUFFER) -> None:
    """Collective write of ``data`` to ``regions`` (every rank calls it)."""
    from mpi4py import MPI

    n = comm.Get_size()
    barrier(comm, "two-phase write")  # the slowest rank arrives without the others spinning
    mine = [(o, ln) for o, ln in regions if ln > 0]
    lo = min((o for o, _ in mine), default=1 << 62)
    hi = max((o + ln for o, ln in mine), default=0)
    lo = comm.allreduce(lo, op=MPI.MIN)
    hi = comm.allreduce(hi, op=MPI.MAX)
    if hi <= lo:
        return
    domain = -(-(hi - lo) // n)
    outgoing: list[list[tuple[int, bytes]]] = [[] for _ in range(n)]
    pos = 0
    for off, length in regions:
        while length > 0:
            agg = (off - lo) // domain
            cut = min(length, lo + (agg + 1) * domain - off)
            outgoing[agg].append((off, bytes(data[pos:pos + cut])))
            off += cut
            pos += cut
            length -= cut
    incoming = comm.alltoall(outgoing)
    for off, blob in merge_runs(r for part in incoming for r in part):
        view = memoryview(blob)
        for start in range(0, len(view), cb_buffer):
            fs.pwrite(view[start:start + cb_buffer], off + start)
