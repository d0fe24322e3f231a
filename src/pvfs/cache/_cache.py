"""The local block cache (discretionary-caching paper §3.2, SPEC §5): the owner of its parts.

One :class:`BlockCache` lives in the mount daemon and is shared by every process on the node.
It is composed of small parts, each with one job, over one :class:`BlockStore` (the table, the
dirty list, the free list, a lock per key): a :class:`Fetcher` fills misses, a
:class:`Streamer` moves large requests as single slices and reads ahead, a :class:`Flusher`
writes dirty blocks back coalesced into large stripe-aligned runs (gathered into list-I/O calls
when the backend has ``write_list``) and runs the flusher and harvester tasks. What to evict,
when to harvest and flush and what to bypass are policy objects (``_policy.py``). This class
keeps the public API: the read and write paths, truncation, invalidation and statistics.

Concurrency model: everything runs in one trio thread. State changes happen between awaits and
are therefore atomic; the only awaits are backend calls and lock waits, and every path re-checks
the state after one (S3QL's habit). A fetch records its file's generation and does not insert
its blocks if the generation moved meanwhile (truncate, invalidate or a write-through), no
fetch starts while a truncation of its file is in progress (``truncation``), and a read waits
for the writes of its bytes already in progress (``FileState.writing``); a write waits for the
reads of its bytes that await a fetch (``FileState.reading``), so no read mixes old and new.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from ._blockwrite import BlockWriter
from ._bypass import BypassTable
from ._fetch import Fetcher
from ._policy import (
    Backend,
    BypassPolicy,
    PlainCheck,
    ReplacementPolicy,
    SecondChanceLRU,
    StreamPolicy,
    WaterMarks,
    WritebackPolicy,
)
from ._served import BlockServer, ServedFiles
from ._store import BackendCaps, BlockStore, piece_of
from ._stream import Streamer
from ._table import FileState, overlapping, runs_of
from ._writeback import Flusher

__all__ = ["BlockCache"]


class BlockCache:
    """A write-behind block cache in front of an async backend.

    Args:
        backend: ``read(ino, offset, length)`` / ``write(ino, offset, data)``; optionally
            ``stripe_size(ino)`` for stripe-aligned write-back (see :class:`StripedBackend`)
            and ``write_list``/``read_list`` for list I/O (see :class:`ListBackend`); which of
            these it has is decided once, here.
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

    Attributes:
        store: the blocks (:class:`BlockStore`).
        fetcher, streamer, flusher: the parts (:class:`Fetcher`, :class:`Streamer`,
            :class:`Flusher`).

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
        self._writeback = writeback or WritebackPolicy()
        self._stream = stream or StreamPolicy()
        self.policy: ReplacementPolicy = policy if policy is not None else SecondChanceLRU()
        self.bypass: BypassPolicy = bypass if bypass is not None else BypassTable()
        caps = BackendCaps(backend, block_size)
        self.store = BlockStore(block_size, self.capacity_blocks, self.policy, self.watermarks)
        self.streamer = Streamer(self.store, backend, caps, self._stream)
        self.fetcher = Fetcher(self.store, backend, caps, self._writeback, self.streamer)
        self.flusher = Flusher(self.store, backend, caps, self._writeback, self.streamer)
        self._plain = PlainCheck(self.bypass, segment_blocks)
        self.writer = BlockWriter(self.store, self.streamer, self._plain)
        self._workers: trio.CancelScope | None = None
        self._has_bits = self._plain.has_bits
        self._clear_bits = getattr(self.bypass, "clear", None)

    @property
    def writeback(self) -> WritebackPolicy:
        """The write-back policy (replaceable at run time: the parts follow)."""
        return self._writeback

    @writeback.setter
    def writeback(self, policy: WritebackPolicy) -> None:
        self._writeback = self.flusher.policy = self.fetcher.limits = policy

    @property
    def stream(self) -> StreamPolicy:
        """The stream policy (replaceable at run time: the streamer follows)."""
        return self._stream

    @stream.setter
    def stream(self, policy: StreamPolicy) -> None:
        self._stream = self.streamer.policy = policy

    def serve_reads(self, server: BlockServer, max_read: int) -> ServedFiles:
        """Let ``server`` (the C front end) answer reads of up to ``max_read`` bytes from
        this cache's blocks (_served.py). Before any block is allocated: the blocks then
        live in the arena ``server`` reads from."""
        if self.store.allocated:
            raise RuntimeError("serve_reads: blocks are allocated already")
        self.store.served = ServedFiles(server, self.block_size, self.capacity_blocks, max_read)
        return self.store.served

    def changing(self, ino: int) -> None:
        """What this cache answers of ``ino`` is about to change outside it (the size the
        caller passes, its bypass bits): reads of it answered elsewhere stop first."""
        self.store.changing(ino)

    # ----------------------------------------------------------------- reads

    async def read(self, ino: int, offset: int, length: int, *, file_size: int) -> bytes:
        """Read ``length`` bytes at ``offset`` of file ``ino``.

        Cached blocks are hits; the missing blocks are fetched under their locks, so concurrent
        readers of a missing block fetch it once: each contiguous run read whole, several runs
        in one ``read_list`` call when the backend has list I/O. The file is taken to be
        ``max(file_size, bytes written through this cache)`` long; nothing past that is
        returned, holes read as zeros.

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
        store = self.store
        fs = store.files.get(ino)
        while fs is not None and fs.writing and overlapping(fs.writing, offset, offset + length):
            # Writes of these bytes in progress here came first: the kernel sent this read
            # after it dropped its pages (a changed mtime, the racing fadvise of fsx), and it
            # caches what we answer, so the answer must hold them. (Writes that arrive while
            # it waits come first too; once none is left, later ones wait for this read.)
            await fs.after_writes(offset, offset + length)
            fs = store.files.get(ino)
        eff = max(file_size, fs.local_end if fs is not None else 0)
        end = min(offset + length, eff)
        if end <= offset:
            return b""
        bs = self.block_size
        first, last = offset // bs, (end - 1) // bs
        if self.stream.is_stream(end - offset) and self._plain(ino, first, last, False) \
                and not (store.served is not None and store.all_whole(ino, first, last, eff)):
            if store.served is not None and self._has_bits is not None:
                store.served.mark_stream(ino, fs, eff)  # later ones: in C, from the servers
            with store.file(ino).read_in_progress(offset, end):
                return await self.streamer.read(ino, fs, offset, end, eff)
        pieces: dict[int, bytes] = {}
        views: dict[int, memoryview] = {}
        missing: list[int] = []
        bypassed: list[int] = []
        c = store.counters
        table, locks, span = store.table, store.locks, store.span
        for blk in range(first, last + 1):
            key = (ino, blk)
            a, b = span(blk, offset, end)
            e = table.get(key)
            if self.bypass.bypass_read(ino, blk // self.segment_blocks):
                if e is not None and e.dirty and e.holds(a, b):
                    pieces[blk] = piece_of(e.buf, a, b)
                else:
                    bypassed.append(blk)  # (a partial dirty block's ranges laid over below)
            elif e is not None and not locks.busy(key) and store.covers(e, blk, eff, a, b):
                # a view, copied once by the join below if no await comes first (else by
                # bytes() just before it): a covering entry always has b - a bytes there
                views[blk] = memoryview(e.buf)[a:b]
                store.policy.touched(key)
                c["hits"] += 1
            else:
                missing.append(blk)
        if not missing and not bypassed:
            if store.served is not None and not pieces and self._has_bits is not None \
                    and not self._has_bits(ino):
                store.served.publish(store, ino, fs, first, last, eff)  # later reads: in C
            return b"".join([views[blk] if blk in views else pieces[blk]
                             for blk in range(first, last + 1)])
        for blk, view in views.items():
            pieces[blk] = bytes(view)
        with store.file(ino).read_in_progress(offset, end):  # writes of these bytes wait
            await self.fetcher.fetch_read(ino, missing, bypassed, offset, end, eff, pieces)
        return b"".join(pieces[blk] for blk in range(first, last + 1))

    # ---------------------------------------------------------------- writes

    async def write(
        self, ino: int, offset: int, data: bytes | bytearray | memoryview, *,
        sync: bool = False, file_size: int | None = None,
    ) -> int:
        """Write ``data`` at ``offset`` of file ``ino``; returns ``len(data)``.

        Normally write-behind: the blocks are updated in the cache, marked dirty and written
        back later by the flusher or :meth:`flush`. A block that is not cached and that the
        write covers only partly, when it holds bytes of the file the write does not cover, is
        not fetched: it is cached as a partial block that knows only the bytes written (a
        read of the rest fetches it then and lays the written bytes over it). Blocks
        whose segment bypasses the local cache for writes, blocks for which no buffer is free
        (everything dirty: the writer is throttled to the backend's speed) and every block of a
        ``sync`` write go straight to the backend before this returns; cached copies of them are
        updated, and a sync write also caches the whole blocks it wrote.

        Args:
            ino: the file's inode number.
            offset: byte offset (>= 0).
            data: the bytes.
            sync: write through (O_SYNC/O_DSYNC, the paper's sync_write).
            file_size: the file's size if the caller knows it; a block the write covers up to
                it (or wholly past it) is cached whole, not partial.

        Raises:
            ValueError: on a negative offset.
            OSError: from the backend (write-through).
        """
        if offset < 0:
            raise ValueError("negative offset")
        mv = memoryview(data).cast("B")
        n = len(mv)
        if n == 0:
            return 0
        fs = self.store.file(ino)
        inflight = (offset, offset + n, trio.Event())
        fs.writing.append(inflight)  # reads of these bytes arriving meanwhile wait
        try:
            if fs.reading:
                await fs.after_reads(offset, offset + n)  # reads that came first answer first
            await self._write(ino, offset, data, mv, sync, file_size)
        finally:
            fs.writing.remove(inflight)
            inflight[2].set()
        return n

    async def _write(self, ino: int, offset: int, data: bytes | bytearray | memoryview,
                     mv: memoryview, sync: bool, file_size: int | None) -> None:
        store = self.store
        bs = self.block_size
        n = len(mv)
        end = offset + n
        fs = store.file(ino)
        if fs.stream is not None:
            fs.stream.drop_readahead()
        if not sync and self.stream.is_stream_write(n) and \
                self._plain(ino, offset // bs, (end - 1) // bs, True):
            await self.streamer.write(ino, fs, offset, data if type(data) is bytes else mv)
            return
        known = None if file_size is None else max(file_size, fs.local_end)
        through: list[int] = []
        bypassed: set[int] = set()
        first = offset // bs
        if not sync and self._plain(ino, first, (end - 1) // bs, True):
            first = await self.writer.write_blocks(ino, offset, end, mv, known, through)
        for blk in range(first, (end - 1) // bs + 1):
            a, b = store.span(blk, offset, end)
            if self.bypass.bypass_write(ino, blk // self.segment_blocks):
                through.append(blk)
                bypassed.add(blk)
                continue
            if sync:
                through.append(blk)
                continue
            piece = mv[blk * bs + a - offset:blk * bs + b - offset]
            st = store.file(ino).stream
            if st is not None and st.pending and st.overlaps(blk * bs + a, blk * bs + b):
                await self.streamer.drain(ino, store.file(ino))  # queued data is older
            done = self.writer.buffer_now(ino, blk, a, piece, known)
            if done is None:
                done = await self.writer.buffer_block(ino, blk, a, piece, known)
            if not done:
                through.append(blk)
            fs = store.file(ino)
            fs.local_end = max(fs.local_end, blk * bs + b)
        for start, cnt in runs_of(through):
            lo = max(offset, start * bs)
            hi = min(end, (start + cnt) * bs)
            await self.flusher.write_through(ino, lo, mv[lo - offset:hi - offset],
                                             cache_full=sync and start not in bypassed)
        if len(store.dirty) >= self.writeback.dirty_high * self.capacity_blocks:
            store.flush_wanted.set()

    # ------------------------------------------------------------- flushing

    async def flush(self, ino: int) -> None:
        """Write back every dirty block of ``ino`` (fsync, flush on close).

        Raises:
            OSError: the first write-back error of this file since the last flush, whether it
                happened now or earlier in the flusher. It is reported once.
        """
        await self.flusher.flush(ino)

    async def flush_all(self) -> None:
        """Flush every file (unmount, ``syncfs``); raises the first error after trying all."""
        await self.flusher.flush_all()

    async def flush_many(self, inos: list[int]) -> dict[int, OSError]:
        """Flush these files at once: those with one small dirty run in one gathered backend
        call (``pvfs.cache.FilesBackend``), the others side by side; each file's error, as
        :meth:`flush` raises it."""
        await self.flusher.write_back_many(list(inos))
        errors: dict[int, OSError] = {}

        async def one(ino: int) -> None:
            try:
                await self.flusher.flush(ino)
            except OSError as exc:
                errors[ino] = exc

        async with trio.open_nursery() as nursery:
            for ino in inos:
                nursery.start_soon(one, ino)
        return errors

    async def flush_pass(self) -> int:
        """One pass of the flusher task (see :meth:`Flusher.flush_pass`); bytes written."""
        return await self.flusher.flush_pass()

    def harvest(self) -> int:
        """Free clean blocks down to the low water mark (what the harvester task runs)."""
        return self.store.harvest()

    def park_error(self, ino: int, exc: OSError) -> None:
        """Report ``exc`` as a write-back error of ``ino``: raised once by its next
        :meth:`flush` (unless an earlier one is parked already)."""
        fs = self.store.file(ino)
        if fs.error is None:
            fs.error = exc

    def pending_error(self, ino: int) -> OSError | None:
        """The parked write-back error of ``ino`` without clearing it."""
        fs = self.store.files.get(ino)
        return fs.error if fs is not None else None

    # ------------------------------------------------ invalidation and size

    def invalidate(self, ino: int, offset: int = 0, length: int | None = None) -> int:
        """Drop the clean cached blocks of ``ino`` overlapping ``[offset, offset+length)``.

        Dirty blocks are kept (they hold data the backend has not seen; dropping them would
        lose writes): to drop everything, ``await flush(ino)`` first. In-flight fetches of the
        file do not insert their blocks. Returns the number of blocks dropped.
        """
        return self.store.invalidate(ino, offset, length)

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
        fs = self.store.file(ino)
        fs.truncating += 1
        if fs.settled.is_set():
            fs.settled = trio.Event()
        self._unsettle(fs)
        try:
            async with fs.io_lock:
                yield
                self.streamer.trim(fs, size)
                self.store.cut(ino, fs, size)
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

    def forget(self, ino: int) -> None:
        """Forget file ``ino`` entirely (it was deleted): blocks, dirty data, error, bits."""
        fs = self.store.forget(ino)
        if fs is not None:
            self.streamer.forget(fs)
        if callable(self._clear_bits):
            self._clear_bits(ino)

    def size_hint(self, ino: int) -> int:
        """Bytes of ``ino`` known through this cache (writes, truncate); 0 if none.

        The FUSE layer reports ``max(manager size, size_hint)`` as the file size, so write-behind
        data is visible to ``stat`` before it reaches the servers.
        """
        fs = self.store.files.get(ino)
        return fs.local_end if fs is not None else 0

    def writing_back(self, ino: int) -> bool:
        """Whether a write-back (or truncation) of ``ino`` is under way."""
        fs = self.store.files.get(ino)
        return fs is not None and fs.io_lock.locked()

    def has_dirty(self, ino: int) -> bool:
        fs = self.store.files.get(ino)
        return bool(fs is not None and (fs.dirty or (fs.stream is not None
                                                      and fs.stream.pending)))

    def cached_inodes(self) -> list[int]:
        """The files the cache holds anything of (blocks, queued writes, errors)."""
        return list(self.store.files)

    # --------------------------------------------------------------- workers

    async def _run_workers(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
                           ) -> None:
        with trio.CancelScope() as scope:
            self._workers = scope
            async with trio.open_nursery() as nursery:
                await nursery.start(self.flusher.run_flusher)
                await nursery.start(self.flusher.run_harvester)
                self.streamer.nursery = nursery  # streamers and read-ahead fetches run here
                task_status.started()
        self._workers = None
        self.streamer.nursery = None

    async def start(self, nursery: trio.Nursery) -> None:
        """Start the flusher and harvester in ``nursery``.

        Raises:
            RuntimeError: if they are already running.
        """
        if self._workers is not None:
            raise RuntimeError("block cache workers already running")
        await nursery.start(self._run_workers)

    async def aclose(self) -> None:
        """Stop the workers and write back everything (unmount). Raises the first error."""
        if self._workers is not None:
            self._workers.cancel()
            self._workers = None
        self.streamer.nursery = None
        await self.flush_all()

    # ----------------------------------------------------------------- stats

    @property
    def blocks_in_use(self) -> int:
        return self.store.blocks_in_use

    def stats(self) -> dict[str, int]:
        """Counters and gauges (all ints), e.g. for ``pvfs-admin stats`` and a virtual xattr."""
        store = self.store
        out = dict(store.counters)
        pending = self.streamer.pending_total
        out["dirty_blocks"] = len(store.dirty)
        table = store.table
        out["dirty_bytes"] = sum(hi - lo for k in store.dirty for lo, hi in table[k].ranges) \
            + pending  # the bytes a write-back would send
        out["partial_blocks"] = sum(1 for e in table.values() if e.known is not None)
        out["pending_stream_bytes"] = pending
        out["blocks_cached"] = len(store.table)
        out["blocks_in_use"] = store.blocks_in_use
        out["free_blocks"] = len(store.free)
        out["capacity_blocks"] = self.capacity_blocks
        out["block_size"] = self.block_size
        out["files"] = len(store.files)
        return out
