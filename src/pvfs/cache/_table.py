"""Mechanism pieces of the block cache: entries, per-file state, key locks, the free list.

Nothing here awaits except :class:`KeyLocks`; everything else is plain data the cache changes
synchronously between awaits (the whole cache lives in one trio thread).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import trio

__all__ = ["Entry", "FileState", "FreeList", "KeyLocks", "gather", "groups", "merge_range",
           "runs_of"]

T = TypeVar("T")


class Entry:
    """One cached block: either *whole* (``known is None``) or *partial*.

    A whole block knows its leading ``valid`` bytes (the backend returned them or this node
    wrote them); past them it is zeros, so a hole or a region past the end of file reads as
    zeros without special cases. A partial block knows only the byte ranges in ``known``:
    what this node wrote into it (or wrote through, or queued as a stream write) without ever
    reading the rest. A write that covers part of a block holding bytes of the file starts a
    partial block instead of fetching the block first (no read-modify-write); a read that
    needs an unknown byte fetches the block and lays the known ranges over what it read
    (:meth:`BlockStore.fill`), which makes the block whole.

    Invariants: ``buf[valid:]`` is all zeros; in a partial block ``valid`` is the end of its
    last known range, ``buf`` is zeros outside the known ranges, and the dirty ``ranges``
    lie inside them.

    Attributes:
        buf: the block's bytes (``block_size`` long, owned by the cache, reused via the free list).
        valid: whole: how many leading bytes are known; partial: the end of the last known range.
        known: None for a whole block; for a partial one the sorted, merged ranges ``[lo, hi)``
            it knows.
        dirty: modified since last written back.
        dirty_since: trio clock when the block became dirty (for the flusher's age rule).
        version: bumped on every modification; a write-back marks the block clean only if the
            version did not move while the backend write was in flight.
        ranges: the byte ranges ``[lo, hi)`` this node wrote since the last write-back, sorted
            and merged. Write-back sends only these: the rest of the block may be zeros the
            cache filled in (it believed the file ended there) or bytes fetched earlier, and
            writing those back would destroy another client's writes to the same block (NFS
            keeps dirty ranges per page for the same reason).
    """

    __slots__ = ("buf", "dirty", "dirty_since", "known", "ranges", "valid", "version")

    def __init__(self, buf: bytearray, *, partial: bool = False) -> None:
        self.buf = buf
        self.valid = 0
        self.known: list[tuple[int, int]] | None = [] if partial else None
        self.dirty = False
        self.dirty_since = 0.0
        self.version = 0
        self.ranges: list[tuple[int, int]] = []

    def apply(self, lo: int, data: bytes | memoryview) -> None:
        hi = lo + len(data)
        self.buf[lo:hi] = data
        self.valid = max(self.valid, hi)
        self.version += 1
        if self.known is not None:
            self.learn(lo, hi)

    def learn(self, lo: int, hi: int) -> None:
        """A partial block now knows ``[lo, hi)`` too; knowing all of it makes it whole."""
        known = self.known = merge_range(self.known or [], lo, hi)
        if known[0] == (0, len(self.buf)):
            self.known = None

    def holds(self, a: int, b: int) -> bool:
        """Whether ``[a, b)`` (inside the block, ``a < b``) is known. A whole block: always
        (the caller decides, by ``valid`` and the file's size, whether it is current)."""
        known = self.known
        if known is None:
            return True
        for lo, hi in known:
            if lo <= a:
                if b <= hi:
                    return True
            else:
                return False
        return False

    def mark(self, lo: int, hi: int) -> None:
        """Add ``[lo, hi)`` to the dirty ranges (merging touching and overlapping ones)."""
        self.ranges = merge_range(self.ranges, lo, hi)

    def clip(self, size: int) -> None:
        """Forget dirty (and, in a partial block, known) ranges at or past ``size`` bytes into
        the block (truncation)."""
        self.ranges = [(a, min(b, size)) for a, b in self.ranges if a < size]
        if self.known is not None:
            self.known = [(a, min(b, size)) for a, b in self.known if a < size]


class FileState:
    """What the cache knows about one file (inode).

    Attributes:
        blocks: block numbers of this file currently cached.
        dirty: the dirty subset of ``blocks``.
        local_end: the highest byte offset written through this cache (or set by truncate); reads
            treat the file as at least this long, so write-behind data is visible before the
            manager has heard of it.
        error: the first write-back error not yet reported (errseq-style).
        gen: bumped whenever cached data is dropped or changed behind the cache (truncate,
            invalidate, write-through, stream write); a fetch started under an older generation
            does not insert its blocks.
        io_lock: serialises write-backs, write-throughs and truncates of this file, so an old
            snapshot can never land after newer data.
        stream: queued stream writes and read-ahead data (``_stream.StreamState``) or None.
        truncating: truncations in progress (``BlockCache.truncation``); while it is non-zero
            the servers may still hold bytes past the new end, so no fetch may start.
        settled: set when the last truncation in progress ends; fetches wait on it.
        writing: ``(lo, hi, done)`` of every write of the file in progress (received, not yet
            applied in full): a read that arrives meanwhile waits for the ones it overlaps.
        reading: ``(lo, hi, done)`` of every read of the file that awaits (a miss to fetch): a
            write that arrives meanwhile waits for the ones it overlaps, so the read's hits,
            taken before the await, and its fetched blocks are of the same moment.
    """

    __slots__ = ("blocks", "dirty", "error", "gen", "io_lock", "local_end", "reading", "settled",
                 "stream", "truncating", "writing")

    def __init__(self) -> None:
        self.blocks: set[int] = set()
        self.dirty: set[int] = set()
        self.local_end = 0
        self.error: OSError | None = None
        self.gen = 0
        self.io_lock = trio.Lock()
        self.stream: Any = None  # a _stream.StreamState once the file saw a stream request
        self.truncating = 0
        self.settled = trio.Event()
        self.settled.set()
        self.writing: list[tuple[int, int, trio.Event]] = []
        self.reading: list[tuple[int, int, trio.Event]] = []

    def idle(self) -> bool:
        return (not self.blocks and self.error is None and not self.io_lock.locked()
                and not self.truncating and not self.writing and not self.reading
                and (self.stream is None or not self.stream.pending))

    async def after_writes(self, lo: int, hi: int) -> None:
        """Wait until the writes in progress now that overlap ``[lo, hi)`` are applied."""
        await _after(self.writing, lo, hi)

    @contextmanager
    def read_in_progress(self, lo: int, hi: int) -> Iterator[None]:
        """A read of ``[lo, hi)`` that awaits: writes of its bytes arriving meanwhile wait for
        it (``reading``), so it answers the file of one moment."""
        op = (lo, hi, trio.Event())
        self.reading.append(op)
        try:
            yield
        finally:
            self.reading.remove(op)
            op[2].set()

    async def after_reads(self, lo: int, hi: int) -> None:
        """Wait until the reads in progress now that overlap ``[lo, hi)`` have their bytes."""
        await _after(self.reading, lo, hi)

    async def wait_settled(self) -> None:
        """Wait until no truncation of this file is in progress (see ``truncating``)."""
        while self.truncating:
            await self.settled.wait()


def overlapping(inflight: list[tuple[int, int, trio.Event]], lo: int, hi: int) -> bool:
    """Whether an operation of ``inflight`` (``(lo, hi, done)`` each) overlaps ``[lo, hi)``."""
    return any(op[0] < hi and op[1] > lo for op in inflight)


async def _after(inflight: list[tuple[int, int, trio.Event]], lo: int, hi: int) -> None:
    """Wait for the operations of ``inflight`` now that overlap ``[lo, hi)`` (not later ones)."""
    for op in [op for op in inflight if op[0] < hi and op[1] > lo]:
        await op[2].wait()


class _Slot:
    """One key's lock: whether a task holds it, how many tasks hold or wait for it, and the
    parking lot its waiters sleep in (made on the first contention only)."""

    __slots__ = ("held", "lot", "users")

    def __init__(self) -> None:
        self.held = False
        self.users = 0
        self.lot: trio.lowlevel.ParkingLot | None = None

    async def acquire(self) -> None:
        if not self.held:
            self.held = True  # uncontended: no checkpoint, so no other task runs in between
            return
        if self.lot is None:
            self.lot = trio.lowlevel.ParkingLot()
        await self.lot.park()  # the releaser hands the lock over (``held`` stays True)

    def release(self) -> None:
        if self.lot is not None and self.lot.unpark(count=1):
            return  # handed to the first waiter (FIFO, as trio.Lock)
        self.held = False


class _Held:
    """``async with`` for :meth:`KeyLocks.hold`: a plain class, not a generator (the cheaper
    of the two on every miss)."""

    __slots__ = ("_keys", "_locks", "_slots", "_taken")

    def __init__(self, locks: dict[Hashable, _Slot], keys: list[Hashable]) -> None:
        self._locks = locks
        self._keys = keys
        self._slots: list[_Slot] = []
        self._taken = 0

    async def __aenter__(self) -> None:
        locks, slots = self._locks, self._slots
        for k in self._keys:  # every key busy at once, then taken in order
            slot = locks.get(k)
            if slot is None:
                slot = locks[k] = _Slot()
            slot.users += 1
            slots.append(slot)
        try:
            for slot in slots:
                await slot.acquire()
                self._taken += 1
        except BaseException:
            self._release()
            raise

    async def __aexit__(self, *exc: object) -> None:
        self._release()

    def _release(self) -> None:
        locks = self._locks
        for i, (k, slot) in enumerate(zip(self._keys, self._slots)):
            if i < self._taken:
                slot.release()
            slot.users -= 1
            if slot.users == 0:
                del locks[k]


class KeyLocks:
    """A lock per key, created on demand and dropped when nobody holds or waits for it.

    ``busy(key)`` tells whether any task holds or waits for the key: the cache's fast paths
    (hits, in-place writes) only run when the key is not busy, otherwise they take the lock and
    re-check the state (S3QL's habit). Taking a lock nobody holds does not yield (a local
    miss's one lock took a scheduler round trip and a ``trio.Lock`` before); waiting for a held
    one parks until its holder hands it over, first come first served.
    """

    def __init__(self) -> None:
        self._locks: dict[Hashable, _Slot] = {}

    def busy(self, key: Hashable) -> bool:
        return key in self._locks

    def __len__(self) -> int:
        return len(self._locks)

    def hold(self, keys: Iterable[Hashable]) -> _Held:
        """Hold the locks of ``keys`` (``async with``), taken in sorted order (so holders
        never deadlock)."""
        ks = keys if type(keys) is list and len(keys) == 1 else sorted(set(keys))
        return _Held(self._locks, ks)


class FreeList:
    """Unused block buffers kept for reuse (the paper's free list); handed out zeroed."""

    def __init__(self, block_size: int) -> None:
        self._zero = bytes(block_size)
        self._bufs: list[bytearray] = []

    def __len__(self) -> int:
        return len(self._bufs)

    def put(self, buf: bytearray) -> None:
        buf[:] = self._zero
        self._bufs.append(buf)

    def get(self) -> bytearray | None:
        return self._bufs.pop() if self._bufs else None

    def shrink(self, keep: int) -> None:
        del self._bufs[keep:]


def merge_range(ranges: list[tuple[int, int]], lo: int, hi: int) -> list[tuple[int, int]]:
    """Sorted, merged byte ranges: ``ranges`` (sorted, merged) with ``[lo, hi)`` added; ranges
    that touch or overlap it become one. The dirty-range rule of the local cache and of the
    global cache daemon (only written bytes are written back)."""
    if not ranges:
        return [(lo, hi)]  # a block's first write since its last write-back
    out: list[tuple[int, int]] = []
    for a, b in ranges:
        if b < lo or a > hi:
            out.append((a, b))
        else:
            lo, hi = min(a, lo), max(b, hi)
    out.append((lo, hi))
    out.sort()
    return out


def runs_of(blocks: Iterable[int]) -> list[tuple[int, int]]:
    """Sorted ``(first, count)`` runs of consecutive block numbers (a repeated number starts a
    run of its own)."""
    if type(blocks) is list and len(blocks) == 1:
        return [(blocks[0], 1)]  # a one-block miss, the common case
    bl = sorted(blocks)
    if not bl:
        return []
    runs: list[tuple[int, int]] = []
    first = prev = bl[0]
    for b in bl[1:]:
        if b != prev + 1:
            runs.append((first, prev - first + 1))
            first = b
        prev = b
    runs.append((first, prev - first + 1))
    return runs


def groups(items: Iterable[T], size: Callable[[T], int], max_bytes: int,
           max_items: int) -> Iterator[list[T]]:
    """Cut ``items`` into consecutive groups of at most ``max_items`` items and ``max_bytes``
    bytes by ``size`` (an item larger than that forms its own group), as they are asked for:
    list-I/O calls, each under the policy's budget. A write-back takes only the first group
    of the runs it is cutting (``Flusher._first_batch``)."""
    group: list[T] = []
    total = 0
    for item in items:
        n = size(item)
        if group and (total + n > max_bytes or len(group) >= max_items):
            yield group
            group, total = [], 0
        group.append(item)
        total += n
    if group:
        yield group


def gather(sizes: Iterable[int], max_bytes: int, max_items: int) -> list[slice]:
    """:func:`groups` of a sequence of items given by their byte sizes, one ``slice`` per
    group."""
    return [slice(g[0][0], g[-1][0] + 1)
            for g in groups(enumerate(sizes), lambda item: item[1], max_bytes, max_items)]
