"""MPI-3 passive-target RMA back end: locks, metadata and page data in windows.

What DAChe wanted and could not have (§4, §7): every rank exposes three windows, created
once at open and accessed inside one ``Lock_all`` epoch until close, so no rank takes part in
another's lock or data transfer:

- *meta*: two int64 words per page it is home for (page ``p`` on rank ``p mod n``, index
  ``p // n``): a reader/writer lock word (``WRITER`` bit | reader count) changed only with
  ``Compare_and_swap`` / ``Fetch_and_op``, and the encoded :class:`Meta`;
- *data*: its cache slots, ``page_size`` bytes each, read with ``Get`` and written with ``Put``;
- *dirty*: the ``[lo, hi)`` high-water marks of each slot, raised by writers with
  ``Accumulate(MIN/MAX)``.

A waiting lock retries with a growing sleep (no queue: the simple test-and-set DAChe's §7
expects before Mellor-Crummey queues). Windows come from ``MPI_Win_allocate``: within a node
MPICH maps them into shared memory, so atomics and puts complete even when the target rank
is busy elsewhere; across nodes MPICH needs ``MPIR_CVAR_ASYNC_PROGRESS=1`` for that.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pvfs.collective._pages import Dirty, Meta
from pvfs.collective._wait import DEADLINE, Backoff, CollectiveTimeout

WRITER = 1 << 40
_NEVER = 1 << 62


def _mpi() -> Any:
    from mpi4py import MPI

    return MPI


class RmaLocks:
    """Page locks and metadata in a window (the ``rma`` coordination)."""

    def __init__(self, comm: Any, max_pages: int) -> None:
        MPI = _mpi()
        self.MPI = MPI
        self.comm = comm
        self.n = comm.Get_size()
        per_rank = -(-max_pages // self.n)
        self.per_rank = per_rank
        self.win = MPI.Win.Allocate(per_rank * 2 * 8, 8, comm=comm)
        mem = np.frombuffer(self.win.tomemory(), dtype=np.int64)
        mem[:] = 0
        self.win.Lock_all()
        self._one = np.zeros(1, np.int64)
        self._res = np.zeros(1, np.int64)
        self._cmp = np.zeros(1, np.int64)
        self.lock_calls = 0
        self.retries = 0

    def _where(self, page: int) -> tuple[int, int]:
        home, index = page % self.n, page // self.n
        if index >= self.per_rank:
            raise ValueError(f"page {page} beyond max_bytes given at open")
        return home, 2 * index

    def _fop(self, value: int, home: int, disp: int, op: Any) -> int:
        self._one[0] = value
        self.win.Fetch_and_op(self._one, self._res, home, disp, op)
        self.win.Flush(home)
        return int(self._res[0])

    def _cas(self, new: int, expect: int, home: int, disp: int) -> int:
        self._one[0], self._cmp[0] = new, expect
        self.win.Compare_and_swap(self._one, self._cmp, self._res, home, disp)
        self.win.Flush(home)
        return int(self._res[0])

    def _try(self, home: int, disp: int, excl: bool) -> bool:
        MPI = self.MPI
        if excl:
            return self._cas(WRITER, 0, home, disp) == 0
        if self._fop(1, home, disp, MPI.SUM) & WRITER:
            self._fop(-1, home, disp, MPI.SUM)
            return False
        return True

    def _meta(self, home: int, disp: int) -> Meta:
        return Meta.decode(self._fop(0, home, disp + 1, self.MPI.NO_OP))

    def lock(self, page: int, excl: bool) -> Meta:
        import time

        self.lock_calls += 1
        home, disp = self._where(page)
        backoff = Backoff()
        limit = time.monotonic() + DEADLINE
        while not self._try(home, disp, excl):
            self.retries += 1
            if time.monotonic() > limit:
                raise CollectiveTimeout(f"lock of page {page}")
            backoff.pause()
        return self._meta(home, disp)

    def try_lock(self, page: int) -> Meta | None:
        home, disp = self._where(page)
        self.lock_calls += 1
        return self._meta(home, disp) if self._try(home, disp, True) else None

    def unlock(self, page: int, excl: bool, meta: Meta | None) -> None:
        MPI = self.MPI
        home, disp = self._where(page)
        if meta is not None:
            self._fop(meta.encode(), home, disp + 1, MPI.REPLACE)
        self._fop(-WRITER if excl else -1, home, disp, MPI.SUM)

    def close(self) -> None:
        self.win.Unlock_all()
        self.win.Free()


class RmaData:
    """Cache slots and their dirty marks in windows (``rma`` and ``servers`` coordination)."""

    def __init__(self, comm: Any, nslots: int, page_size: int) -> None:
        MPI = _mpi()
        self.MPI = MPI
        self.rank = comm.Get_rank()
        self.page_size = page_size
        self.win = MPI.Win.Allocate(max(1, nslots * page_size), 1, comm=comm)
        self.mem = np.frombuffer(self.win.tomemory(), dtype=np.uint8)
        self.dwin = MPI.Win.Allocate(max(1, nslots) * 16, 8, comm=comm)
        self.dmem = np.frombuffer(self.dwin.tomemory(), dtype=np.int64)
        self.dmem[0::2] = _NEVER
        self.dmem[1::2] = 0
        self.win.Lock_all()
        self.dwin.Lock_all()
        self._v = np.zeros(1, np.int64)
        self.remote_gets = self.remote_puts = 0

    def view(self, slot: int) -> memoryview:
        self.win.Sync()
        base = slot * self.page_size
        return memoryview(self.mem[base:base + self.page_size])

    def get_many(self, owner: int, slot: int, parts: list[tuple[int, memoryview]]) -> None:
        """Read pieces of a remote slot: one ``Get`` each, one ``Flush`` for all."""
        base = slot * self.page_size
        for off, out in parts:
            self.remote_gets += 1
            buf = np.frombuffer(out, dtype=np.uint8)
            self.win.Get(buf, owner, target=(base + off, len(buf), self.MPI.BYTE))
        self.win.Flush(owner)

    def put_many(self, owner: int, slot: int, parts: list[tuple[int, memoryview]]) -> None:
        """Write pieces of a remote slot and raise its dirty marks (one ``Flush`` each)."""
        MPI = self.MPI
        base = slot * self.page_size
        lo, hi = 1 << 62, 0
        for off, data in parts:
            self.remote_puts += 1
            buf = np.frombuffer(data, dtype=np.uint8)
            self.win.Put(buf, owner, target=(base + off, len(buf), MPI.BYTE))
            lo, hi = min(lo, off), max(hi, off + len(buf))
        self.win.Flush(owner)
        self._v[0] = lo
        self.dwin.Accumulate([self._v, 1, MPI.INT64_T], owner, target=(2 * slot, 1, MPI.INT64_T),
                             op=MPI.MIN)
        self._v[0] = hi
        self.dwin.Accumulate([self._v, 1, MPI.INT64_T], owner,
                             target=(2 * slot + 1, 1, MPI.INT64_T), op=MPI.MAX)
        self.dwin.Flush(owner)

    def dirty(self, slot: int) -> Dirty:
        self.dwin.Sync()
        d = Dirty()
        d.lo, d.hi = int(self.dmem[2 * slot]), int(self.dmem[2 * slot + 1])
        return d

    def mark(self, slot: int, lo: int, hi: int) -> None:
        self.dmem[2 * slot] = min(int(self.dmem[2 * slot]), lo)
        self.dmem[2 * slot + 1] = max(int(self.dmem[2 * slot + 1]), hi)

    def clean(self, slot: int) -> None:
        self.dmem[2 * slot], self.dmem[2 * slot + 1] = _NEVER, 0
        self.dwin.Sync()

    def close(self) -> None:
        for w in (self.win, self.dwin):
            w.Unlock_all()
            w.Free()
