"""MPI-3 passive-target RMA back end: locks, metadata and page data in windows.

What DAChe wanted and could not have (§4, §7): every rank exposes one window
(:class:`RmaSpace`), created once at open and accessed inside one ``Lock_all`` epoch until
close, so no rank takes part in another's lock or data transfer. One window, not one per
part, because creating and freeing a window is a collective with barriers inside MPICH that
poll a core; with more ranks than cores each one costs scheduler slices. The window holds:

- *meta*: one int64 word per page it is home for (page ``p`` on rank ``p mod n``, index
  ``p // n``) holding both the page's reader/writer lock and its encoded :class:`Meta`
  (:func:`pack`), changed only with ``Compare_and_swap`` / ``Fetch_and_op``. One word means
  one atomic per lock and one per unlock: a shared lock's ``Fetch_and_op(+1)`` returns the
  metadata with it, an exclusive lock is one ``Compare_and_swap`` from the word last seen,
  and an exclusive unlock publishes the new metadata and drops the writer bit with a single
  ``Fetch_and_op(SUM)`` (a sum, not a replace, so a reader's transient +1/-1 on a
  write-locked word is never lost);
- *data*: its cache slots, ``page_size`` bytes each, read with ``Get`` and written with ``Put``;
- *dirty*: the ``[lo, hi)`` high-water marks of each slot, raised by writers with
  ``Accumulate(MIN/MAX)``.

A waiting lock retries with a growing sleep (no queue: the simple test-and-set DAChe's §7
expects before Mellor-Crummey queues). Windows come from ``MPI_Win_allocate``: within a node
MPICH maps them into shared memory, so atomics and puts complete even when the target rank
is busy elsewhere; across nodes MPICH needs ``MPIR_CVAR_ASYNC_PROGRESS=1`` for that.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from pvfs.collective import _prof
from pvfs.collective._loadwaits import AROUND_AFTER, around_wait
from pvfs.collective._pages import Dirty, Meta
from pvfs.collective._wait import DEADLINE, Backoff, CollectiveTimeout, host_key, until

_NEVER = 1 << 62
_now = time.monotonic  # (the clock of a read's wait for loads; tests replace it)

# The page word: readers in bits 0-18, the loading bit, the writer bit, then the metadata
# (flushed, slot, owner + 1). Reader counts only ever reach the number of ranks (plus
# transient +1s). LOADING is set with WRITER by a read-ahead claim: the page is published
# as cached by the claimer while its helper thread still reads it from the file, so a
# reader treats it as a load (waits for it up to its bound, then reads around; issue 32).
READERS = (1 << 19) - 1
LOADING = 1 << 19
WRITER = 1 << 20
_FLUSHED = 1 << 21
_SLOT_SHIFT, _SLOT_BITS = 22, 24
_OWNER_SHIFT, _OWNER_BITS = 46, 17
LOCK_BITS = READERS | LOADING | WRITER
MAX_SLOTS = 1 << _SLOT_BITS
MAX_RANKS = (1 << _OWNER_BITS) - 1


#: ``PVFS_COLLECTIVE_RGET``'s value when unset (see :func:`rget_wanted`)
RGET_DEFAULT = "auto"


def rget_wanted(comm: Any = None) -> bool:
    """Gets waited for by testing their requests between sleeps (``MPI_Rget``) instead of a
    blocking ``Flush`` (issue 32; read at each open). ``PVFS_COLLECTIVE_RGET``: ``1`` on,
    ``0`` off, ``auto`` on only when the ranks of ``comm`` are on more than one host or
    network namespace (collective then: the host keys are gathered); unset:
    :data:`RGET_DEFAULT`. Over TCP a get completes only when the owner's MPI makes progress,
    and MPICH's ``Flush`` polls a core meanwhile: profiled over the netns harness (8
    clients, ``servers``), a get's origin was runnable without a core for 78 % of the get
    and running — polling — for the other 22 %, taking the cores the owners needed. Within
    one host the windows are shared memory and a flush returns at once."""
    value = os.environ.get("PVFS_COLLECTIVE_RGET", RGET_DEFAULT)
    if value == "auto" and comm is not None:
        return len(set(comm.allgather(host_key()))) > 1
    return value == "1"


def pack(meta: Meta) -> int:
    """The metadata part of a page word (lock bits zero)."""
    if meta.owner < 0:
        return _FLUSHED if meta.flushed else 0
    return ((meta.owner + 1) << _OWNER_SHIFT) | (meta.slot << _SLOT_SHIFT) | \
        (_FLUSHED if meta.flushed else 0)


def unpack(word: int) -> Meta:
    """The :class:`Meta` in a page word (its lock bits ignored)."""
    owner = ((word >> _OWNER_SHIFT) & ((1 << _OWNER_BITS) - 1)) - 1
    slot = (word >> _SLOT_SHIFT) & ((1 << _SLOT_BITS) - 1) if owner >= 0 else -1
    return Meta(owner, slot, bool(word & _FLUSHED))


def _mpi() -> Any:
    from mpi4py import MPI

    return MPI


class RmaSpace:
    """This rank's window: ``meta_words`` page words, then ``nslots`` dirty-mark pairs, then
    ``nslots`` page slots (byte displacements; construct collectively)."""

    def __init__(self, comm: Any, meta_words: int, nslots: int, page_size: int) -> None:
        MPI = _mpi()
        self.dirty_base = meta_words * 8
        self.data_base = self.dirty_base + nslots * 16
        size = self.data_base + nslots * page_size
        self.win = MPI.Win.Allocate(max(8, size), 1, comm=comm)
        mem = self.win.tomemory()
        self.meta = np.frombuffer(mem, dtype=np.int64, count=meta_words)
        self.dirty = np.frombuffer(mem, dtype=np.int64, count=2 * nslots,
                                   offset=self.dirty_base)
        self.data = np.frombuffer(mem, dtype=np.uint8, count=nslots * page_size,
                                  offset=self.data_base)
        self.meta[:] = 0
        self.dirty[0::2] = _NEVER
        self.dirty[1::2] = 0
        self.win.Lock_all()

    def close(self) -> None:
        self.win.Unlock_all()
        self.win.Free()


def meta_words(comm: Any, max_pages: int) -> int:
    """Page words each rank holds for ``max_pages`` pages."""
    return -(-max_pages // comm.Get_size())


def _left(around: bool | float, until: float | None) -> bool | float:
    """What is left of a read's wait for loads at ``until`` (``around`` unchanged when it
    never reads around); 0.0: read around at once."""
    if until is None:
        return around
    return max(0.0, until - _now())


class RmaLocks:
    """Page locks and metadata in the window's page words (the ``rma`` coordination)."""

    def __init__(self, comm: Any, space: RmaSpace) -> None:
        MPI = _mpi()
        self.MPI = MPI
        self.comm = comm
        self.n = comm.Get_size()
        if self.n > MAX_RANKS:
            raise ValueError(f"the rma coordination supports at most {MAX_RANKS} ranks")
        self.per_rank = len(space.meta)
        self.win = space.win
        self._one = np.zeros(1, np.int64)
        self._res = np.zeros(1, np.int64)
        self._cmp = np.zeros(1, np.int64)
        self._seen: dict[int, int] = {}  # page -> metadata bits last seen (CAS guesses)
        self._held: dict[int, int] = {}  # page -> metadata bits under our exclusive lock
        self.lock_calls = 0
        self.retries = 0
        #: issue 32: the lock word's fetch-and-ops waited for as requests
        #: (``PVFS_COLLECTIVE_RMA_LOCK_REQ=1``, off by default; compare-and-swap has no
        #: request form and still flushes)
        self.rlock = os.environ.get("PVFS_COLLECTIVE_RMA_LOCK_REQ", "0") == "1"
        from mpi4py.util.dtlib import from_numpy_dtype

        self._int64 = from_numpy_dtype(self._one.dtype)

    def _where(self, page: int) -> tuple[int, int]:
        home, index = page % self.n, page // self.n
        if index >= self.per_rank:
            raise ValueError(f"page {page} beyond max_bytes given at open")
        return home, 8 * index

    def _fop(self, value: int, home: int, disp: int, op: Any) -> int:
        self._one[0] = value
        if self.rlock:
            # (issue 32: the fetch-and-op as a request, tested between sleeps: a blocking
            # flush polls a core until the home's MPI answers; same datatype, still atomic)
            req = self.win.Rget_accumulate(self._one, self._res, home,
                                           target=(disp, 1, self._int64), op=op)
            until(req.Test, f"RMA lock word at rank {home}")
            return int(self._res[0])
        self.win.Fetch_and_op(self._one, self._res, home, disp, op)
        self.win.Flush(home)
        return int(self._res[0])

    def _cas(self, new: int, expect: int, home: int, disp: int) -> int:
        self._one[0], self._cmp[0] = new, expect
        self.win.Compare_and_swap(self._one, self._cmp, self._res, home, disp)
        self.win.Flush(home)
        return int(self._res[0])

    def _try_shared(self, home: int, disp: int) -> tuple[bool, int]:
        word = self._fop(1, home, disp, self.MPI.SUM)
        if word & WRITER:
            self._fop(-1, home, disp, self.MPI.SUM)
            return False, word
        return True, word

    def _try_excl(self, page: int, home: int, disp: int) -> tuple[bool, int]:
        """One CAS from the word last seen; a miss that finds the page unlocked (only the
        metadata changed) retries at once with the word it found."""
        guess = self._seen.get(page, 0)
        for _ in range(3):
            word = self._cas(guess | WRITER, guess, home, disp)
            if word == guess:
                self._held[page] = guess
                return True, guess
            guess = word & ~LOCK_BITS
            self._seen[page] = guess
            if word & LOCK_BITS:
                return False, word
        return False, guess

    def lock(self, page: int, excl: bool, around: bool | float = False) -> Meta | None:
        """Wait for the lock; with ``around``, None instead of waiting longer than its
        seconds (True: :data:`AROUND_AFTER`) while the page is locked and cached nowhere
        (being loaded: the file is what to read)."""
        self.lock_calls += 1
        home, disp = self._where(page)
        backoff = Backoff()
        wait = around_wait(around, AROUND_AFTER)
        began = time.monotonic()
        limit = began + DEADLINE
        while True:
            if excl:
                ok, word = self._try_excl(page, home, disp)
            else:
                ok, word = self._try_shared(home, disp)
            if ok:
                self._seen[page] = word & ~LOCK_BITS
                return unpack(word)
            if wait is not None and (unpack(word).owner < 0 or word & LOADING) and \
                    time.monotonic() - began >= wait:
                return None  # a load (or a claim being read ahead) outlasted the wait
            self.retries += 1
            if time.monotonic() > limit:
                raise CollectiveTimeout(f"lock of page {page}")
            backoff.pause()

    def lock_read(self, page: int, around: bool | float) -> tuple[Meta | None, bool]:
        """A read's lock: shared, or exclusive when the page is cached nowhere (the reader
        will cache it) — traded up in place when this rank is its only reader, else released
        and asked for again (still before any higher page, so the order stays increasing).
        ``(None, False)``: read around (see :meth:`lock`)."""
        wait = around_wait(around, AROUND_AFTER)
        until = None if wait is None else _now() + wait
        meta = self.lock(page, False, around)
        if meta is None or meta.owner >= 0:
            return meta, False
        up = self.upgrade(page)
        if up is None:
            self.unlock(page, False, None)
            up = self.lock(page, True, _left(around, until))
        return up, True

    def upgrade(self, page: int) -> Meta | None:
        """Shared to exclusive in one CAS when this rank is the page's only reader; None
        (the shared lock still held) otherwise."""
        self.lock_calls += 1
        home, disp = self._where(page)
        meta = self._seen.get(page, 0)
        if self._cas(meta | WRITER, meta | 1, home, disp) == meta | 1:
            self._held[page] = meta
            return unpack(meta)
        return None

    def lock_set(self, pages: list[int], write: bool, around: bool | float,
                 wants: Any = None) -> list[tuple[Meta | None, bool]]:
        """Every page in increasing order, one after the other (see :meth:`lock` and
        :meth:`lock_read`); per page ``(metadata, exclusive)``, ``(None, False)`` to read
        around. (``wants`` is for message homes; page data here moves with ``Get``.)

        The wait for loads is one budget for the whole set, not one per page: a chunk of
        ``k`` pages that another rank is loading is read around after the wait, not ``k``
        waits (the pages of one load finish together)."""
        out: list[tuple[Meta | None, bool]] = []
        wait = None if write else around_wait(around, AROUND_AFTER)
        until = None if wait is None else _now() + wait
        for page in pages:
            if write:
                out.append((self.lock(page, True), True))
            else:
                out.append(self.lock_read(page, _left(around, until)))
        return out

    def unlock_set(self, held: list[tuple[int, bool, Meta | None]]) -> None:
        for page, excl, meta in held:
            self.unlock(page, excl, meta)

    def try_lock(self, page: int) -> Meta | None:
        home, disp = self._where(page)
        self.lock_calls += 1
        ok, word = self._try_excl(page, home, disp)
        return unpack(word) if ok else None

    def unlock(self, page: int, excl: bool, meta: Meta | None) -> None:
        home, disp = self._where(page)
        if not excl:
            self._fop(-1, home, disp, self.MPI.SUM)
            return
        old = self._held.pop(page)
        new = old if meta is None else pack(meta)
        self._seen[page] = new
        self._fop(new - old - WRITER, home, disp, self.MPI.SUM)

    def claim(self, page: int, owner: int) -> bool | None:
        """Read-ahead: lock ``page`` exclusively only if it is unlocked and cached nowhere,
        publishing ``owner`` as its cache under the lock and marking it LOADING (readers
        then wait for the lock as for a load, up to their bound: the page is being loaded
        into ``owner``'s slot, which
        :meth:`release_claim` fills in). Never waits. The page's flushed bit, or None
        when it is locked or cached (one CAS when the guess is right)."""
        home, disp = self._where(page)
        self.lock_calls += 1
        guess = self._seen.get(page, 0)
        for _ in range(3):
            meta = unpack(guess)
            if meta.owner >= 0:
                return None
            claimed = pack(Meta(owner, 0, meta.flushed))
            word = self._cas(claimed | WRITER | LOADING, guess, home, disp)
            if word == guess:
                self._held[page] = claimed
                return meta.flushed
            guess = word & ~LOCK_BITS
            self._seen[page] = guess
            if word & LOCK_BITS:
                return None
        return None

    def claim_pages(self, pages: list[int], owner: int, lead: bool = False,
                    room: tuple[int, int] | None = None) -> list[bool | None]:
        """:meth:`claim` of each page in order (one CAS each); with ``lead`` none after a
        first page that cannot be claimed. ``room`` is ignored: no RMA home counts the
        group's cached pages (the message homes do, :meth:`LockManager.claim_batch`)."""
        out: list[bool | None] = []
        for page in pages:
            out.append(self.claim(page, owner))
            if lead and out[0] is None:
                return [None] * len(pages)
        return out

    def release_claims(self, pairs: list[tuple[int, Meta]]) -> None:
        for page, meta in pairs:
            self.release_claim(page, meta)

    def release_claim(self, page: int, meta: Meta) -> None:
        """Drop a :meth:`claim`, publishing ``meta`` (the filled slot, or uncached again).
        Safe from a second thread (MPI_THREAD_MULTIPLE): its own buffers, and the page's
        entries are not touched by the main thread while it is claimed."""
        home, disp = self._where(page)
        old = self._held.pop(page)
        new = pack(meta)
        self._seen[page] = new
        one, res = np.array([new - old - WRITER - LOADING], np.int64), np.zeros(1, np.int64)
        self.win.Sync()  # the slot's bytes before the word that publishes them
        self.win.Fetch_and_op(one, res, home, disp, self.MPI.SUM)
        self.win.Flush(home)

    def close(self) -> None:
        pass  # the window is the RmaSpace's


class RmaData:
    """Cache slots and their dirty marks in the window (``rma`` and ``servers``)."""

    def __init__(self, comm: Any, space: RmaSpace, page_size: int,
                 wake: Callable[[int], None] | None = None) -> None:
        MPI = _mpi()
        self.MPI = MPI
        self.rank = comm.Get_rank()
        self.page_size = page_size
        self.space = space
        self.win = space.win
        self.mem = space.data
        self.dmem = space.dirty
        self._v = np.zeros(1, np.int64)
        self.remote_gets = self.remote_puts = 0
        #: rings the owner's doorbell after its operations are issued, before the flush
        #: (issue 32, ``servers`` over TCP: an owner asleep on its bell makes no MPI
        #: progress, and without it a get waits for the owner's next wake)
        self.wake = wake
        self.rget = rget_wanted(comm)  # (issue 32: wait for gets without polling a core)

    def _gets_done(self, owner: int, reqs: list[Any]) -> None:
        """Wait for ``owner``'s ``Rget`` requests: tested between sleeps (``until``), not
        a ``Flush`` that polls a core until the owner's MPI answers."""
        if self.wake is not None and owner != self.rank:
            self.wake(owner)
        test = self.MPI.Request.Testall
        until(lambda: test(reqs), f"RMA gets from rank {owner}")

    def _flush(self, owner: int) -> None:
        if self.wake is not None and owner != self.rank:
            self.wake(owner)
        self.win.Flush(owner)

    def view(self, slot: int) -> memoryview:
        self.win.Sync()
        base = slot * self.page_size
        return memoryview(self.mem[base:base + self.page_size])

    def get_many(self, owner: int, slot: int, parts: list[tuple[int, memoryview]]) -> None:
        """Read pieces of a remote slot: one ``Get`` each, one ``Flush`` for all."""
        if self.rget:
            self._rgets({owner: [(slot, parts)]})
            return
        base = self.space.data_base + slot * self.page_size
        began = _prof.mark()
        for off, out in parts:
            self.remote_gets += 1
            buf = np.frombuffer(out, dtype=np.uint8)
            self.win.Get(buf, owner, target=(base + off, len(buf), self.MPI.BYTE))
        self._flush(owner)
        _prof.record("get", began, owner, sum(len(out) for _, out in parts))

    def _rgets(self, by_owner: dict[int, list[tuple[int, list[tuple[int, memoryview]]]]]
               ) -> None:
        """Reads of remote slots with ``Rget``: every owner's requests issued first, then
        each owner's waited for in turn (:meth:`_gets_done`)."""
        began = _prof.mark()
        reqs: dict[int, list[Any]] = {}
        for owner, slots in by_owner.items():
            mine = reqs[owner] = []
            for slot, parts in slots:
                base = self.space.data_base + slot * self.page_size
                for off, out in parts:
                    self.remote_gets += 1
                    buf = np.frombuffer(out, dtype=np.uint8)
                    mine.append(self.win.Rget(buf, owner,
                                              target=(base + off, len(buf), self.MPI.BYTE)))
        for owner, slots in by_owner.items():
            self._gets_done(owner, reqs[owner])
            _prof.record("get", began, owner, sum(len(b) for _, ps in slots for _, b in ps))

    def transfer(self, write: bool,
                 by_owner: dict[int, list[tuple[int, list[tuple[int, memoryview]]]]]) -> None:
        """Pieces of remote slots, ``{owner: [(slot, [(offset, buffer)])]}``: every ``Get``
        or ``Put`` (and dirty-mark ``Accumulate``) issued, then one ``Flush`` per owner
        (reads with :func:`rget_wanted`: every ``Rget`` issued, then waited for)."""
        if self.rget and not write:
            self._rgets(by_owner)
            return
        MPI = self.MPI
        keep = []  # origin buffers of the accumulates, alive until their flush
        for owner, slots in by_owner.items():
            began = _prof.mark()  # (issue 32's get profile)
            for slot, parts in slots:
                base = self.space.data_base + slot * self.page_size
                lo, hi = 1 << 62, 0
                for off, buf in parts:
                    arr = np.frombuffer(buf, dtype=np.uint8)
                    if write:
                        self.remote_puts += 1
                        self.win.Put(arr, owner, target=(base + off, len(arr), MPI.BYTE))
                        lo, hi = min(lo, off), max(hi, off + len(arr))
                    else:
                        self.remote_gets += 1
                        self.win.Get(arr, owner, target=(base + off, len(arr), MPI.BYTE))
                if write:
                    mark = self.space.dirty_base + 16 * slot
                    v = np.array([lo, hi], dtype=np.int64)
                    keep.append(v)
                    self.win.Accumulate([v[0:1], 1, MPI.INT64_T], owner,
                                        target=(mark, 1, MPI.INT64_T), op=MPI.MIN)
                    self.win.Accumulate([v[1:2], 1, MPI.INT64_T], owner,
                                        target=(mark + 8, 1, MPI.INT64_T), op=MPI.MAX)
            # Bytes and marks complete before the caller's unlock: whoever locks the page
            # next sees both.
            self._flush(owner)
            _prof.record("put" if write else "get", began, owner,
                         sum(len(b) for _, ps in slots for _, b in ps))

    def put_many(self, owner: int, slot: int, parts: list[tuple[int, memoryview]]) -> None:
        """Write pieces of a remote slot and raise its dirty marks (one ``Flush``)."""
        MPI = self.MPI
        base = self.space.data_base + slot * self.page_size
        lo, hi = 1 << 62, 0
        for off, data in parts:
            self.remote_puts += 1
            buf = np.frombuffer(data, dtype=np.uint8)
            self.win.Put(buf, owner, target=(base + off, len(buf), MPI.BYTE))
            lo, hi = min(lo, off), max(hi, off + len(buf))
        # The marks are raised in the same epoch after the puts; one flush completes both
        # before the caller's unlock, so whoever locks the page next sees bytes and marks.
        mark = self.space.dirty_base + 16 * slot
        self._v[0] = lo
        self.win.Accumulate([self._v, 1, MPI.INT64_T], owner, target=(mark, 1, MPI.INT64_T),
                            op=MPI.MIN)
        self.win.Flush_local(owner)  # the origin buffer is reused right below
        self._v[0] = hi
        self.win.Accumulate([self._v, 1, MPI.INT64_T], owner,
                            target=(mark + 8, 1, MPI.INT64_T), op=MPI.MAX)
        self._flush(owner)

    def put_pages(self, pages: list[tuple[int, int, bytes]]) -> None:
        """Whole pages into slots, ``(owner, slot, bytes)``, leaving their dirty marks
        alone (issue 32's loan slots: clean pages loaded from the file into a slot another
        rank lent): every ``Put`` issued, then one ``Flush`` per owner, so the bytes are
        there before the caller's unlock publishes them."""
        keep = []
        owners: set[int] = set()
        for owner, slot, data in pages:
            if owner == self.rank:
                self.view(slot)[:] = data
                continue
            arr = np.frombuffer(data, dtype=np.uint8)
            keep.append(arr)
            self.remote_puts += 1
            self.win.Put(arr, owner, target=(self.space.data_base + slot * self.page_size,
                                             len(arr), self.MPI.BYTE))
            owners.add(owner)
        for owner in sorted(owners):
            self._flush(owner)

    def dirty(self, slot: int) -> Dirty:
        self.win.Sync()
        d = Dirty()
        d.lo, d.hi = int(self.dmem[2 * slot]), int(self.dmem[2 * slot + 1])
        return d

    def mark(self, slot: int, lo: int, hi: int) -> None:
        self.dmem[2 * slot] = min(int(self.dmem[2 * slot]), lo)
        self.dmem[2 * slot + 1] = max(int(self.dmem[2 * slot + 1]), hi)

    def clean(self, slot: int) -> None:
        self.dmem[2 * slot], self.dmem[2 * slot + 1] = _NEVER, 0
        self.win.Sync()

    def close(self) -> None:
        pass  # the window is the RmaSpace's
