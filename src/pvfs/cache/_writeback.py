"""Write-back half of the block cache: flush, coalescing, the flusher and harvester tasks.

Kept apart from ``_cache.py`` only for size; :class:`WritebackMixin` is mixed into
:class:`pvfs.cache.BlockCache` and uses its table. Write-through (sync writes, write bypass,
no free buffer) lives here too: it is the other way blocks reach the backend.

Write-back of one file runs under the file's ``io_lock`` (so snapshots reach the backend in
order), copies the dirty blocks' bytes (writers never wait for the backend), and marks a block
clean only if its version did not move during the write. A failed write drops the blocks it
carried (as the kernel does: the data is lost, the cache then shows what the servers hold) and
parks the error on the file until the next :meth:`flush` raises it once. When the backend has
list I/O (``write_list``), the dirty runs of a file go out gathered into a few calls (up to the
policy's ``max_list_bytes``/``max_regions`` each) instead of one call per run.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, cast

import trio

from ._table import Entry, FileState, KeyLocks, gather

if TYPE_CHECKING:
    from ._policy import Backend, ListBackend, WritebackPolicy

__all__ = ["WritebackMixin"]


class WritebackMixin:
    backend: Backend
    block_size: int
    capacity_blocks: int
    writeback: WritebackPolicy
    _table: dict[tuple[int, int], Entry]
    _files: dict[int, FileState]
    _dirty: OrderedDict[tuple[int, int], None]
    _counters: dict[str, int]
    _flush_wanted: trio.Event
    _harvest_wanted: trio.Event
    _workers: trio.CancelScope | None
    _nursery: trio.Nursery | None
    _locks: KeyLocks

    if TYPE_CHECKING:  # provided by BlockCache and StreamMixin
        def _drop(self, key: tuple[int, int], *, tell_policy: bool = True) -> None: ...

        def harvest(self) -> int: ...

        async def _drain_locked(self, ino: int, fs: FileState, *, upto: int | None = None,
                                batches: int | None = None) -> int: ...

        def _file(self, ino: int) -> FileState: ...

        def _span(self, blk: int, start: int, end: int) -> tuple[int, int]: ...

        def _alloc(self) -> bytearray | None: ...

        def _insert(self, key: tuple[int, int], fs: FileState, e: Entry) -> None: ...

    # ------------------------------------------------------------- flushing

    async def flush(self, ino: int) -> None:
        """Write back every dirty block of ``ino`` (fsync, flush on close).

        Raises:
            OSError: the first write-back error of this file since the last flush, whether it
                happened now or earlier in the flusher. It is reported once.
        """
        fs = self._files.get(ino)
        if fs is None:
            return
        await self._write_back(ino, fs)
        if fs.error is not None:
            err, fs.error = fs.error, None
            raise err

    async def flush_all(self) -> None:
        """Flush every file (unmount, ``syncfs``); raises the first error after trying all."""
        first: OSError | None = None
        for ino in list(self._files):
            try:
                await self.flush(ino)
            except OSError as exc:
                first = first or exc
        if first is not None:
            raise first

    def pending_error(self, ino: int) -> OSError | None:
        """The parked write-back error of ``ino`` without clearing it."""
        fs = self._files.get(ino)
        return fs.error if fs is not None else None

    def _stripe_window(self, ino: int, max_write: int | None = None) -> int:
        """Write-back chunks never cross a multiple of this many bytes (file offsets): the
        largest multiple of the stripe size not above ``max_write`` (default: the
        write-back policy's)."""
        bs = self.block_size
        limit = self.writeback.max_write if max_write is None else max_write
        stripe_size = getattr(self.backend, "stripe_size", None)
        ss = stripe_size(ino) if callable(stripe_size) else None
        if not ss or ss <= 0:
            return max(bs, limit // bs * bs)
        return max(ss, limit // ss * ss)

    def _chunks(self, ino: int, blocks: list[int]) -> list[list[int]]:
        """Cut sorted dirty ``blocks`` into contiguous chunks for single backend writes.

        A chunk ends at a gap, after a short block (its bytes past ``valid`` are unknown), where
        the next block would start in a new stripe window, or at ``max_write`` bytes.
        """
        bs = self.block_size
        window = self._stripe_window(ino)
        limit = max(bs, self.writeback.max_write, window)
        chunks: list[list[int]] = []
        cur: list[int] = []
        for blk in blocks:
            if cur and (
                blk != cur[-1] + 1
                or self._table[(ino, cur[-1])].valid < bs
                or (blk * bs) // window != (cur[0] * bs) // window
                or (len(cur) + 1) * bs > limit
            ):
                chunks.append(cur)
                cur = []
            cur.append(blk)
        if cur:
            chunks.append(cur)
        return chunks

    def _batches(self, chunks: list[list[int]]) -> list[list[list[int]]]:
        """Group chunks into backend calls: one chunk per call unless the backend has list
        I/O (``write_list``), else as many as fit in ``max_list_bytes`` and ``max_regions``."""
        if getattr(self.backend, "write_list", None) is None:
            return [[chunk] for chunk in chunks]
        wb = self.writeback
        bs = self.block_size
        return [chunks[g] for g in gather([len(ch) * bs for ch in chunks], wb.max_list_bytes,
                                          wb.max_regions)]

    async def _write_back(self, ino: int, fs: FileState) -> int:
        """Write back the dirty blocks of one file, coalesced into runs and the runs gathered
        into list-I/O calls when the backend has them. Returns bytes written."""
        bs = self.block_size
        c = self._counters
        written = 0
        async with fs.io_lock:
            if self._files.get(ino) is not fs:
                return 0
            if fs.stream is not None and fs.stream.pending:
                written += await self._drain_locked(ino, fs)
            if self._files.get(ino) is not fs or not fs.dirty:
                return written
            c["flushes"] += 1
            for batch in self._batches(self._chunks(ino, sorted(fs.dirty))):
                if self._files.get(ino) is not fs:
                    break
                snap = [(blk, self._table[(ino, blk)]) for chunk in batch for blk in chunk
                        if (ino, blk) in self._table]
                if len(snap) != sum(len(chunk) for chunk in batch):
                    break
                versions = [e.version for _, e in snap]
                regions: list[tuple[int, int]] = []
                parts: list[bytearray] = []
                i = 0
                for chunk in batch:
                    n = 0
                    for _ in chunk:
                        e = snap[i][1]
                        parts.append(e.buf[: e.valid])
                        n += e.valid
                        i += 1
                    regions.append((chunk[0] * bs, n))
                data = b"".join(parts)
                try:
                    if len(regions) == 1:
                        await self.backend.write(ino, regions[0][0], data)
                    else:
                        await cast("ListBackend", self.backend).write_list(ino, regions, data)
                except OSError as exc:
                    c["write_errors"] += 1
                    if fs.error is None:
                        fs.error = exc
                    fs.gen += 1
                    for blk, e in snap:
                        if self._table.get((ino, blk)) is e:
                            self._drop((ino, blk))
                    continue
                c["backend_writes"] += 1
                if len(regions) > 1:
                    c["list_writes"] += 1
                    c["list_regions"] += len(regions)
                c["flushed_bytes"] += len(data)
                written += len(data)
                if fs.stream is not None:
                    fs.stream.drop_readahead()  # fetched before these bytes reached the servers
                for (blk, e), v in zip(snap, versions):
                    key = (ino, blk)
                    if self._table.get(key) is e and e.version == v and e.dirty:
                        e.dirty = False
                        fs.dirty.discard(blk)
                        self._dirty.pop(key, None)
        return written

    async def flush_pass(self) -> int:
        """One flusher pass: write back aged files, and oldest-first files while over the
        dirty high mark until under the low mark. Returns bytes written."""
        wb = self.writeback
        now = trio.current_time()
        high = wb.dirty_high * self.capacity_blocks
        low = wb.dirty_low * self.capacity_blocks
        order: list[int] = []
        chosen: set[int] = set()
        remaining = len(self._dirty)
        over = remaining >= high and remaining > 0
        for key in self._dirty:
            ino = key[0]
            e = self._table[key]
            aged = e.dirty_since + wb.max_age <= now
            if not aged and not (over and remaining > low):
                break
            if ino not in chosen:
                chosen.add(ino)
                order.append(ino)
                remaining -= len(self._files[ino].dirty)
        for ino, fs in self._files.items():  # queued stream writes never wait
            if fs.stream is not None and fs.stream.pending and ino not in chosen:
                order.append(ino)
        written = 0
        for ino in order:
            fs = self._files.get(ino)
            if fs is not None and (fs.dirty or (fs.stream is not None and fs.stream.pending)):
                written += await self._write_back(ino, fs)
        return written

    # --------------------------------------------------------- write-through

    async def _write_through(
        self, ino: int, offset: int, data: memoryview, *, cache_full: bool,
    ) -> None:
        """Write ``data`` to the backend now, then bring cached copies up to date."""
        bs = self.block_size
        fs = self._file(ino)
        async with fs.io_lock:
            if fs.stream is not None and fs.stream.pending:
                await self._drain_locked(ino, fs)  # queued stream data is older than this
            await self.backend.write(ino, offset, bytes(data))
            c = self._counters
            c["backend_writes"] += 1
            c["sync_writes" if cache_full else "bypassed_writes"] += 1
            fs.gen += 1
            end = offset + len(data)
            fs.local_end = max(fs.local_end, end)
            if self._files.get(ino) is not fs:
                return
            for blk in range(offset // bs, (end - 1) // bs + 1):
                a, b = self._span(blk, offset, end)
                piece = data[blk * bs + a - offset:blk * bs + b - offset]
                key = (ino, blk)
                e = self._table.get(key)
                if e is not None:
                    e.apply(a, piece)
                elif cache_full and b - a == bs and not self._locks.busy(key):
                    buf = self._alloc()
                    if buf is not None:
                        e = Entry(buf)
                        e.apply(0, piece)
                        self._insert(key, fs, e)

    # --------------------------------------------------------------- workers

    async def _flusher(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
                       ) -> None:
        task_status.started()
        while True:
            with trio.move_on_after(self.writeback.interval):
                await self._flush_wanted.wait()
            if self._flush_wanted.is_set():
                self._flush_wanted = trio.Event()
            await self.flush_pass()

    async def _harvester(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
                         ) -> None:
        task_status.started()
        while True:
            await self._harvest_wanted.wait()
            self._harvest_wanted = trio.Event()
            self.harvest()

    async def _run_workers(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
                           ) -> None:
        with trio.CancelScope() as scope:
            self._workers = scope
            async with trio.open_nursery() as nursery:
                await nursery.start(self._flusher)
                await nursery.start(self._harvester)
                self._nursery = nursery  # streamers and read-ahead fetches run here
                task_status.started()
        self._workers = None
        self._nursery = None

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
        self._nursery = None
        await self.flush_all()
