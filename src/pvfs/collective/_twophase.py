"""ROMIO-style two-phase collective write, the baseline the caching paper compares with.

All ranks agree on the aggregate access range, cut it into ``n`` equal byte ranges (file
domains, not aligned to stripes — ROMIO's default, the paper's point in §5.1), send every
piece to the aggregator of its domain (the communication phase) and each aggregator writes
its domain's contiguous runs (the I/O phase), at most ``cb_buffer`` bytes per write. Where
ROMIO would read-modify-write a domain with holes (data sieving) this writes each run
separately, which only lowers its count of file-system writes — unless ``sieve`` (ROMIO's
``romio_cb_write``/``romio_ds_write`` enabled, issue 32's baseline): then each aggregator
covers its domain's extent ``cb_buffer`` bytes at a time, and a window with holes is read
first (one read), the runs laid over it and written back with one write. An aggregator
owns its domain within the collective, so no file lock is needed (ROMIO takes one against
other programs' writes).
"""

from __future__ import annotations

from typing import Any

from pvfs.collective._fsio import CountingFile
from pvfs.collective._pages import merge_runs
from pvfs.collective._wait import barrier

CB_BUFFER = 16 << 20  # ROMIO's cb_buffer_size default


def write_all(comm: Any, fs: CountingFile, regions: list[tuple[int, int]],
              data: memoryview, cb_buffer: int = CB_BUFFER, sieve: bool = False) -> None:
    """Collective write of ``data`` to ``regions`` (every rank calls it); ``sieve``: the
    I/O phase with data sieving (:func:`sieved_write`)."""
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
    runs = merge_runs(r for part in incoming for r in part)
    if sieve:
        sieved_write(fs, runs, cb_buffer)
        return
    for off, blob in runs:
        view = memoryview(blob)
        for start in range(0, len(view), cb_buffer):
            fs.pwrite(view[start:start + cb_buffer], off + start)


def sieved_write(fs: CountingFile, runs: list[tuple[int, bytes]], cb_buffer: int) -> None:
    """Data sieving over sorted, disjoint ``runs``: windows of at most ``cb_buffer`` bytes
    from the first byte of a run to the last byte of a run in them; a window the runs cover
    whole is written, one with holes is read, overlaid and written (one call each)."""
    j = 0
    while j < len(runs):
        start = runs[j][0]
        limit = start + cb_buffer
        k = j
        while k < len(runs) and runs[k][0] < limit:
            k += 1
        end = min(limit, max(off + len(blob) for off, blob in runs[j:k]))
        window = bytearray(end - start)
        inside = [(max(off, start), min(off + len(blob), end), off, blob)
                  for off, blob in runs[j:k]]
        if sum(b - a for a, b, _, _ in inside) < end - start:  # holes: read them first
            fs.preadinto(memoryview(window), start)
        for a, b, off, blob in inside:
            window[a - start:b - start] = blob[a - off:b - off]
        fs.pwrite(memoryview(window), start)
        last_off, last_blob = runs[k - 1]
        if last_off + len(last_blob) > end:  # the last run goes on in the next window
            runs = runs[:k - 1] + [(end, last_blob[end - last_off:])] + runs[k:]
            j = k - 1
        else:
            j = k
