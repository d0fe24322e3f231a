"""The local block cache (discretionary-caching paper §3.2, SPEC §5): the mechanism.

One :class:`BlockCache` lives in the mount daemon and is shared by every process on the node.
It holds fixed-size blocks keyed by ``(ino, block)`` in a hash table, with a dirty list (in
dirtying order), a free list of buffers, a lock per key for fetches, a flusher task that writes
dirty blocks back coalesced into large stripe-aligned runs (gathered into list-I/O calls when
the backend has ``write_list``), and a harvester task that frees
clean blocks between the water marks. What to evict, when to harvest and flush and what to
bypass are policy objects (``_policy.py``).

Concurrency model: everything runs in one trio thread. State changes happen between awaits and
are therefore atomic; the only awaits are backend calls and lock waits, and every path re-checks
the state after one (S3QL's habit). A fetch records its file's generation and does not insert
its blocks if the generation moved meanwhile (truncate, invalidate or a write-through), and no
fetch starts while a truncation of its file is in progress (``truncation``).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio

from ._bypass import BypassTable
from ._fetch import FetchMixin, _piece
from ._policy import (
    Backend,
    BypassPolicy,
    ReplacementPolicy,
    SecondChanceLRU,
    StreamPolicy,
    WaterMarks,
    WritebackPolicy,
)
from ._stream import StreamMixin
from ._table import Entry, FileState, FreeList, KeyLocks, runs_of
from ._writeback import WritebackMixin

__all__ = ["BlockCache"]

Key = tuple[int, int]


class BlockCache(FetchMixin, StreamMixin, WritebackMixin):
    """A write-behind block cache in front of an async backend.

    Args:
        backend: ``read(ino, offset, length)`` / ``write(ino, offset, data)``; optionally
            ``stripe_size(ino)`` for stripe-aligned write-back (see :class:`StripedBackend`)
            and ``write_list``/``read_list`` for list I/O (see :class:`ListBackend`).
        block_size: bytes per block (4 KiB as in the paper).
        capacity: bytes of block buffers at most (64 MiB default).
        low_water: the harvester frees blocks down to this fraction of the capacity...
        high_water: ...once the blocks in use reach this fraction.
        policy: replacement policy (default :class:`SecondChanceLRU`).
        bypass: per-segment bypass decisions (default: a fresh :class:`BypassTable`).
        segment_blocks: blocks per bypass segment (4 as in the paper).
        watermarks: a :class:`WaterMarks` object overriding ``low_water``/``high_water``.
        writeback: the flusher's :class:`WritebackPolicy`.
        stream: which requests are large enough to move as one slice, and how streams are
            written back and read ahead (:class:`StreamPolicy`).

    Raises:
        ValueError: on a non-positive block size or segment size or a capacity below one block.
    """

    def __init__(
        self,
        backend: Backend,
        *,
        block_size: int = 4096,
        capacity: int = 64 << 20,
        low_water: float = 0.85,
        high_water: float = 0.95,
        policy: ReplacementPolicy | None = None,
        bypass: BypassPolicy | None = None,
        segment_blocks: int = 4,
        watermarks: WaterMarks | None = None,
        writeback: WritebackPolicy | None = None,
        stream: StreamPolicy | None = None,
    ) -> None:
        if block_size <= 0 or segment_blocks <= 0:
            raise ValueError("block_size and segment_blocks must be positive")
        if capacity < block_size:
            raise ValueError(f"capacity {capacity} is less than one block ({block_size})")
        self.backend = backend
        self.block_size = block_size
        self.segment_blocks = segment_blocks
        self.capacity_blocks = capacity // block_size
        self.watermarks = watermarks or WaterMarks(low_water, high_water)
        self.writeback = writeback or WritebackPolicy()
        self.stream = stream or StreamPolicy()
        self.policy: ReplacementPolicy = policy if policy is not None else SecondChanceLRU()
        self.bypass: BypassPolicy = bypass if bypass is not None else BypassTable()
        self._table: dict[Key, Entry] = {}
        self._files: dict[int, FileState] = {}
        self._dirty: OrderedDict[Key, None] = OrderedDict()
        self._free = FreeList(block_size)
        self._allocated = 0
        self._locks = KeyLocks()
        self._flush_wanted = trio.Event()
        self._harvest_wanted = trio.Event()
        self._workers: trio.CancelScope | None = None
        self._nursery: trio.Nursery | None = None
        self._pending_total = 0
        self._ra_files: OrderedDict[int, None] = OrderedDict()
        self._counters: dict[str, int] = dict.fromkeys(
            (
                "hits", "misses", "evictions", "flushed_bytes", "bypassed_reads",
                "bypassed_writes", "sync_writes", "rmw_reads", "backend_reads",
                "backend_writes", "write_errors", "harvests", "flushes", "stream_reads",
                "stream_writes", "stream_throttles", "readahead_hits", "readahead_bytes",
                "list_writes", "list_reads", "list_regions",
            ),
            0,
        )

    # ----------------------------------------------------------------- reads

    async def read(self, ino: int, offset: int, length: int, *, file_size: int) -> bytes:
        """Read ``length`` bytes at ``offset`` of file ``ino``.

        Cached blocks are hits; the missing blocks are fetched under their locks, so concurrent
        readers of a missing block fetch it once: each contiguous run read whole, several runs
        in one ``read_list`` call when the backend has list I/O. The file is taken to be ``max(file_size, bytes written through this cache)``
        long; nothing past that is returned, holes read as zeros.

        Args:
            ino: the file's inode number.
            offset: byte offset (>= 0).
            length: bytes wanted (>= 0).
            file_size: the file's size as the caller knows it (from the manager).

        Raises:
            ValueError: on a negative offset or length.
            OSError: from the backend.
        """
        if offset < 0 or length < 0:
            raise ValueError("negative offset or length")
        fs = self._files.get(ino)
        eff = max(file_size, fs.local_end if fs is not None else 0)
        end = min(offset + length, eff)
        if end <= offset:
            return b""
        bs = self.block_size
        first, last = offset // bs, (end - 1) // bs
        if self.stream.is_stream(end - offset) and self._plain(ino, first, last, False):
            return await self._stream_read(ino, fs, offset, end, eff)
        pieces: dict[int, bytes] = {}
        views: dict[int, memoryview] = {}
        missing: list[int] = []
        bypassed: list[int] = []
        c = self._counters
        for blk in range(first, last + 1):
            key = (ino, blk)
            a, b = self._span(blk, offset, end)
            e = self._table.get(key)
            if self.bypass.bypass_read(ino, blk // self.segment_blocks):
                if e is not None and e.dirty:
                    pieces[blk] = _piece(e.buf, a, b)
                else:
                    bypassed.append(blk)
            elif e is not None and not self._locks.busy(key) and self._covers(e, blk, eff):
                # a view, copied once by the join below if no await comes first (else by
                # bytes() just before it): a covering entry always has b - a bytes there
                views[blk] = memoryview(e.buf)[a:b]
                self.policy.touched(key)
                c["hits"] += 1
            else:
                missing.append(blk)
        if not missing and not bypassed:
            return b"".join([views[blk] if blk in views else pieces[blk]
                             for blk in range(first, last + 1)])
        for blk, view in views.items():
            pieces[blk] = bytes(view)
        runs = runs_of(missing)
        if len(runs) > 1 and getattr(self.backend, "read_list", None) is not None:
            await self._fetch_list(ino, missing, offset, end, eff, pieces)
        else:
            for start, n in runs:
                await self._fetch_list(ino, list(range(start, start + n)), offset, end, eff,
                                       pieces, single=True)
        for start, n in runs_of(bypassed):
            await self._drain_overlap(ino, start * bs, (start + n) * bs)
            data = await self.backend.read(ino, start * bs, n * bs)
            c["backend_reads"] += 1
            c["bypassed_reads"] += n
            for i in range(n):
                a, b = self._span(start + i, offset, end)
                pieces[start + i] = _piece(data, i * bs + a, i * bs + b)
        return b"".join(pieces[blk] for blk in range(first, last + 1))

    def _plain(self, ino: int, first: int, last: int, write: bool) -> bool:
        """Whether no segment of blocks ``first..last`` bypasses the local cache."""
        has_bits = getattr(self.bypass, "has_bits", None)
        if has_bits is not None:
            return not has_bits(ino)
        check = self.bypass.bypass_write if write else self.bypass.bypass_read
        sb = self.segment_blocks
        return not any(check(ino, s) for s in range(first // sb, last // sb + 1))

    def _span(self, blk: int, start: int, end: int) -> tuple[int, int]:
        """The part of ``[start, end)`` inside block ``blk``, as offsets within the block."""
        base = blk * self.block_size
        return max(start, base) - base, min(end, base + self.block_size) - base

    def _covers(self, e: Entry, blk: int, eff: int) -> bool:
        """Whether entry ``e`` can answer for block ``blk`` of a file ``eff`` bytes long.

        A dirty block always can (its zeros past ``valid`` are holes we made). A clean block
        fetched short at the old end of file cannot if the file has grown since: refetch it.
        """
        return e.dirty or e.valid >= min(self.block_size, eff - blk * self.block_size)

    # ---------------------------------------------------------------- writes

    async def write(
        self, ino: int, offset: int, data: bytes | bytearray | memoryview, *,
        sync: bool = False, file_size: int | None = None,
    ) -> int:
        """Write ``data`` at ``offset`` of file ``ino``; returns ``len(data)``.

        Normally write-behind: the blocks are updated in the cache, marked dirty and written
        back later by the flusher or :meth:`flush`. A partial block that is not cached is first
        fetched (read-modify-write) unless the write covers all of its existing bytes. Blocks
        whose segment bypasses the local cache for writes, blocks for which no buffer is free
        (everything dirty: the writer is throttled to the backend's speed) and every block of a
        ``sync`` write go straight to the backend before this returns; cached copies of them are
        updated, and a sync write also caches the whole blocks it wrote.

        Args:
            ino: the file's inode number.
            offset: byte offset (>= 0).
            data: the bytes.
            sync: write through (O_SYNC/O_DSYNC, the paper's sync_write).
            file_size: the file's size if the caller knows it; blocks wholly past it need no
                read-modify-write fetch.

        Raises:
            ValueError: on a negative offset.
            OSError: from the backend (read-modify-write fetch or write-through).
        """
        if offset < 0:
            raise ValueError("negative offset")
        mv = memoryview(data).cast("B")
        n = len(mv)
        if n == 0:
            return 0
        bs = self.block_size
        end = offset + n
        fs = self._file(ino)
        if fs.stream is not None:
            fs.stream.drop_readahead()
        if not sync and self.stream.is_stream(n) and \
                self._plain(ino, offset // bs, (end - 1) // bs, True):
            await self._stream_write(ino, fs, offset, data if type(data) is bytes else mv)
            return n
        known = None if file_size is None else max(file_size, fs.local_end)
        through: list[int] = []
        bypassed: set[int] = set()
        for blk in range(offset // bs, (end - 1) // bs + 1):
            a, b = self._span(blk, offset, end)
            if self.bypass.bypass_write(ino, blk // self.segment_blocks):
                through.append(blk)
                bypassed.add(blk)
                continue
            if sync:
                through.append(blk)
                continue
            piece = mv[blk * bs + a - offset:blk * bs + b - offset]
            st = self._file(ino).stream
            if st is not None and st.pending and st.overlaps(blk * bs + a, blk * bs + b):
                await self._drain(ino, self._file(ino))  # queued data is older than ours
            done = self._buffer_now(ino, blk, a, piece, known)
            if done is None:
                done = await self._buffer_block(ino, blk, a, piece, known)
            if not done:
                through.append(blk)
            fs = self._file(ino)
            fs.local_end = max(fs.local_end, blk * bs + b)
        for start, cnt in runs_of(through):
            lo = max(offset, start * bs)
            hi = min(end, (start + cnt) * bs)
            await self._write_through(ino, lo, mv[lo - offset:hi - offset],
                                      cache_full=sync and start not in bypassed)
        if len(self._dirty) >= self.writeback.dirty_high * self.capacity_blocks:
            self._flush_wanted.set()
        return n

    def _needs_fetch(self, blk: int, lo: int, hi: int, known: int | None) -> bool:
        """Whether writing ``[lo, hi)`` of uncached block ``blk`` must read the old block first:
        only if the block has existing bytes the write does not cover."""
        bs = self.block_size
        existing = bs if known is None else max(0, min(bs, known - blk * bs))
        return existing > 0 and not (lo == 0 and hi >= existing)

    def _buffer_now(
        self, ino: int, blk: int, lo: int, piece: memoryview, known: int | None,
    ) -> bool | None:
        """The no-await fast path of :meth:`_buffer_block`: the block is cached, or needs no
        fetch, and nobody holds its lock. None when the slow path is needed."""
        key = (ino, blk)
        if self._locks.busy(key):
            return None
        e = self._table.get(key)
        if e is None:
            if self._needs_fetch(blk, lo, lo + len(piece), known):
                return None
            buf = self._alloc()
            if buf is None:
                return False
            e = Entry(buf)
            self._insert(key, self._file(ino), e)
        self._modify(key, e, lo, piece)
        return True

    async def _buffer_block(
        self, ino: int, blk: int, lo: int, piece: memoryview, known: int | None,
    ) -> bool:
        """Apply ``piece`` at ``lo`` in block ``blk`` in the cache; False if no buffer."""
        key = (ino, blk)
        bs = self.block_size
        while True:
            done = self._buffer_now(ino, blk, lo, piece, known)
            if done is not None:
                return done
            async with self._locks.hold([key]):
                fs = self._file(ino)
                e = self._table.get(key)
                if e is not None:
                    self._modify(key, e, lo, piece)
                    return True
                buf = self._alloc()
                if buf is None:
                    return False
                e = Entry(buf)
                if self._needs_fetch(blk, lo, lo + len(piece), known):
                    if fs.truncating:
                        self._free.put(buf)
                        await fs.wait_settled()
                        continue
                    await self._drain_overlap(ino, blk * bs, (blk + 1) * bs)
                    gen = fs.gen
                    try:
                        old = await self.backend.read(ino, blk * bs, bs)
                    except BaseException:
                        self._free.put(buf)
                        raise
                    self._counters["rmw_reads"] += 1
                    self._counters["backend_reads"] += 1
                    if self._files.get(ino) is not fs or fs.gen != gen:
                        self._free.put(buf)
                        continue
                    buf[: len(old)] = old
                    e.valid = len(old)
                self._insert(key, fs, e)
                self._modify(key, e, lo, piece)
                return True

    def _modify(self, key: Key, e: Entry, lo: int, piece: memoryview | bytes) -> None:
        e.apply(lo, piece)
        self.policy.touched(key)
        if not e.dirty:
            e.dirty = True
            e.dirty_since = trio.current_time()
            self._dirty[key] = None
            self._files[key[0]].dirty.add(key[1])

    # ------------------------------------------------------- table mechanics

    def _file(self, ino: int) -> FileState:
        fs = self._files.get(ino)
        if fs is None:
            fs = self._files[ino] = FileState()
        return fs

    def _alloc(self) -> bytearray | None:
        """A zeroed buffer: from the free list, a new one under the capacity, or by evicting one
        clean block right here (direct reclaim). None when every block is dirty or busy."""
        buf = self._free.get()
        if buf is None:
            if self._allocated < self.capacity_blocks:
                self._allocated += 1
                buf = bytearray(self.block_size)
            elif len(self._dirty) < len(self._table) and self._evict(1):
                buf = self._free.get()
        if buf is None:
            self._flush_wanted.set()
            return None
        if self.watermarks.should_harvest(self.blocks_in_use + 1, self.capacity_blocks):
            self._harvest_wanted.set()
        return buf

    def _insert(self, key: Key, fs: FileState, e: Entry) -> None:
        self._table[key] = e
        fs.blocks.add(key[1])
        self.policy.inserted(key)

    def _evictable(self, key: Any) -> bool:
        e = self._table.get(key)
        return e is not None and not e.dirty and not self._locks.busy(key)

    def _evict(self, n: int) -> int:
        victims = self.policy.select_victims(n, self._evictable)
        for key in victims:
            self._drop(key, tell_policy=False)
        self._counters["evictions"] += len(victims)
        return len(victims)

    def _drop(self, key: Key, *, tell_policy: bool = True) -> None:
        e = self._table.pop(key)
        ino, blk = key
        fs = self._files.get(ino)
        if fs is not None:
            fs.blocks.discard(blk)
            fs.dirty.discard(blk)
            if fs.idle() and fs.local_end == 0 and not tell_policy:
                del self._files[ino]
        self._dirty.pop(key, None)
        if tell_policy:
            self.policy.removed(key)
        self._free.put(e.buf)

    def harvest(self) -> int:
        """Free clean blocks down to the low water mark (what the harvester task runs).

        Returns:
            The number of blocks evicted. If dirty blocks keep the cache above the mark, the
            flusher is woken.
        """
        excess = self.blocks_in_use - self.watermarks.low_blocks(self.capacity_blocks)
        if excess <= 0:
            return 0
        self._counters["harvests"] += 1
        freed = self._evict(excess)
        if freed < excess:
            self._flush_wanted.set()
        return freed

    # ------------------------------------------------ invalidation and size

    def invalidate(self, ino: int, offset: int = 0, length: int | None = None) -> int:
        """Drop the clean cached blocks of ``ino`` overlapping ``[offset, offset+length)``.

        Dirty blocks are kept (they hold data the backend has not seen; dropping them would
        lose writes): to drop everything, ``await flush(ino)`` first. In-flight fetches of the
        file do not insert their blocks. Returns the number of blocks dropped.
        """
        fs = self._files.get(ino)
        if fs is None:
            return 0
        fs.gen += 1
        if fs.stream is not None:
            fs.stream.drop_readahead()
        bs = self.block_size
        first = offset // bs
        last = math.inf if length is None else (offset + length - 1) // bs
        victims = [b for b in fs.blocks if first <= b <= last and b not in fs.dirty]
        for blk in victims:
            self._drop((ino, blk))
        return len(victims)

    @asynccontextmanager
    async def truncation(self, ino: int, size: int) -> AsyncIterator[None]:
        """Bracket the servers' truncation of ``ino`` to ``size`` bytes (use this, not
        :meth:`truncate`, when the caller truncates the servers itself).

        Inside the block the caller truncates the servers (``setattr``, an ``O_TRUNC`` open).
        For its whole duration no fetch of the file starts (fetches wait), fetches and
        read-ahead already in flight do not insert what they read, and the file is not written
        back; when the block ends normally the cache is cut to ``size``. A fetch in the window
        would read bytes the servers are about to drop and cache them as clean; a later partial
        write would then dirty that block and write the dropped bytes back (the fsx
        truncate race). If the block raises (the servers refused), nothing is cut.

        Raises:
            ValueError: on a negative size.
        """
        if size < 0:
            raise ValueError("negative size")
        fs = self._file(ino)
        fs.truncating += 1
        if fs.settled.is_set():
            fs.settled = trio.Event()
        self._unsettle(fs)
        try:
            async with fs.io_lock:
                yield
                self._cut(ino, fs, size)
        finally:
            fs.truncating -= 1
            self._unsettle(fs)
            if not fs.truncating:
                fs.settled.set()

    async def truncate(self, ino: int, size: int) -> None:
        """The file ``ino`` is now ``size`` bytes long: drop blocks past it, cut the last one.

        Only the cache's side, for a backend whose truncation is not a separate await (tests,
        the model): a caller that truncates servers over the network wraps that call in
        :meth:`truncation` instead. Waits for a write-back of the file in progress.

        Raises:
            ValueError: on a negative size.
        """
        async with self.truncation(ino, size):
            pass

    @staticmethod
    def _unsettle(fs: FileState) -> None:
        """Make fetches and read-ahead in flight of ``fs`` discard what they read."""
        fs.gen += 1
        if fs.stream is not None:
            fs.stream.drop_readahead()

    def _cut(self, ino: int, fs: FileState, size: int) -> None:
        """Drop cached and queued bytes of ``ino`` past ``size``; the caller holds its io_lock."""
        if self._files.get(ino) is not fs:
            return  # forgotten meanwhile (unlinked): nothing of it is cached any more
        bs = self.block_size
        self._trim_pending(fs, size)
        keep = -(-size // bs)
        for blk in [b for b in fs.blocks if b >= keep]:
            self._drop((ino, blk))
        if size % bs:
            e = self._table.get((ino, size // bs))
            cut = size % bs
            if e is not None and e.valid > cut:
                e.buf[cut:e.valid] = bytes(e.valid - cut)
                e.valid = cut
                e.version += 1
        fs.local_end = size

    def forget(self, ino: int) -> None:
        """Forget file ``ino`` entirely (it was deleted): blocks, dirty data, error, bits."""
        fs = self._files.pop(ino, None)
        if fs is not None:
            fs.gen += 1
            if fs.stream is not None:
                self._pending_total -= fs.stream.pending_bytes()
                fs.stream.pending.clear()
                fs.stream.drop_readahead()
            for blk in list(fs.blocks):
                key = (ino, blk)
                e = self._table.pop(key)
                self._dirty.pop(key, None)
                self.policy.removed(key)
                self._free.put(e.buf)
        clear = getattr(self.bypass, "clear", None)
        if callable(clear):
            clear(ino)

    def size_hint(self, ino: int) -> int:
        """Bytes of ``ino`` known through this cache (writes, truncate); 0 if none.

        The FUSE layer reports ``max(manager size, size_hint)`` as the file size, so write-behind
        data is visible to ``stat`` before it reaches the servers.
        """
        fs = self._files.get(ino)
        return fs.local_end if fs is not None else 0

    def has_dirty(self, ino: int) -> bool:
        fs = self._files.get(ino)
        return bool(fs is not None and (fs.dirty or (fs.stream is not None
                                                      and fs.stream.pending)))

    # ----------------------------------------------------------------- stats

    @property
    def blocks_in_use(self) -> int:
        return self._allocated - len(self._free)

    def stats(self) -> dict[str, int]:
        """Counters and gauges (all ints), e.g. for ``pvfs-admin stats`` and a virtual xattr."""
        out = dict(self._counters)
        out["dirty_blocks"] = len(self._dirty)
        out["dirty_bytes"] = sum(self._table[k].valid for k in self._dirty) + self._pending_total
        out["pending_stream_bytes"] = self._pending_total
        out["blocks_cached"] = len(self._table)
        out["blocks_in_use"] = self.blocks_in_use
        out["free_blocks"] = len(self._free)
        out["capacity_blocks"] = self.capacity_blocks
        out["block_size"] = self.block_size
        out["files"] = len(self._files)
        return out
