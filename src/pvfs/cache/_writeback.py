"""Write-back: flush, coalescing, write-through, and the flusher and harvester tasks.

:class:`Flusher` is the part of :class:`pvfs.cache.BlockCache` through which blocks reach the
backend: write-back of dirty blocks (flush, the flusher task) and write-through (sync writes,
write bypass, no free buffer).

Write-back of one file runs under the file's ``io_lock`` (so snapshots reach the backend in
order), copies the dirty blocks' bytes (writers never wait for the backend), and marks a block
clean only if its version did not move during the write. A failed write drops the blocks it
carried (as the kernel does: the data is lost, the cache then shows what the servers hold) and
parks the error on the file until the next :meth:`Flusher.flush` raises it once. When the
backend has list I/O (``write_list``), the dirty runs of a file go out gathered into a few calls
(up to the policy's ``max_list_bytes``/``max_regions`` each) instead of one call per run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from ._table import Entry, FileState, gather

if TYPE_CHECKING:
    from ._policy import Backend, WritebackPolicy
    from ._store import BackendCaps, BlockStore
    from ._stream import Streamer

__all__ = ["Flusher"]


class Flusher:
    """Write-back and write-through of one cache, and its two worker loops.

    Args:
        store: the blocks written back.
        backend: where they go.
        caps: the backend's abilities (``write_list``, stripe windows).
        policy: when and how much to write back.
        streamer: a file's queued stream writes go out before its blocks.
    """

    def __init__(self, store: BlockStore, backend: Backend, caps: BackendCaps,
                 policy: WritebackPolicy, streamer: Streamer) -> None:
        self.store = store
        self.backend = backend
        self.caps = caps
        self.policy = policy
        self.streamer = streamer

    # ------------------------------------------------------------- flushing

    async def flush(self, ino: int) -> None:
        """Write back every dirty block of ``ino`` (fsync, flush on close).

        Raises:
            OSError: the first write-back error of this file since the last flush, whether it
                happened now or earlier in the flusher. It is reported once.
        """
        fs = self.store.files.get(ino)
        if fs is None:
            return
        await self.write_back(ino, fs)
        if fs.error is not None:
            err, fs.error = fs.error, None
            raise err

    async def flush_all(self) -> None:
        """Flush every file (unmount, ``syncfs``); raises the first error after trying all."""
        first: OSError | None = None
        for ino in list(self.store.files):
            try:
                await self.flush(ino)
            except OSError as exc:
                first = first or exc
        if first is not None:
            raise first

    def _chunks(self, ino: int, blocks: list[int]) -> list[list[int]]:
        """Cut sorted dirty ``blocks`` into contiguous chunks for single backend writes.

        A chunk ends at a gap, after a short block (its bytes past ``valid`` are unknown), where
        the next block would start in a new stripe window, or at ``max_write`` bytes.
        """
        table = self.store.table
        bs = self.store.block_size
        window = self.caps.window(ino, self.policy.max_write)
        limit = max(bs, self.policy.max_write, window)
        chunks: list[list[int]] = []
        cur: list[int] = []
        for blk in blocks:
            if cur and (
                blk != cur[-1] + 1
                or table[(ino, cur[-1])].valid < bs
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
        if self.caps.write_list is None:
            return [[chunk] for chunk in chunks]
        p = self.policy
        bs = self.store.block_size
        return [chunks[g] for g in gather([len(ch) * bs for ch in chunks], p.max_list_bytes,
                                          p.max_regions)]

    async def write_back(self, ino: int, fs: FileState) -> int:
        """Write back the dirty blocks of one file, coalesced into runs and the runs gathered
        into list-I/O calls when the backend has them. Returns bytes written."""
        store = self.store
        bs = store.block_size
        c = store.counters
        written = 0
        async with fs.io_lock:
            if store.files.get(ino) is not fs:
                return 0
            if fs.stream is not None and fs.stream.pending:
                written += await self.streamer.drain_locked(ino, fs)
            if store.files.get(ino) is not fs or not fs.dirty:
                return written
            c["flushes"] += 1
            for batch in self._batches(self._chunks(ino, sorted(fs.dirty))):
                if store.files.get(ino) is not fs:
                    break
                snap = [(blk, store.table[(ino, blk)]) for chunk in batch for blk in chunk
                        if (ino, blk) in store.table]
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
                        assert self.caps.write_list is not None
                        await self.caps.write_list(ino, regions, data)
                except OSError as exc:
                    c["write_errors"] += 1
                    if fs.error is None:
                        fs.error = exc
                    fs.gen += 1
                    for blk, e in snap:
                        if store.table.get((ino, blk)) is e:
                            store.drop((ino, blk))
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
                    store.mark_clean((ino, blk), e, v)
        return written

    async def flush_pass(self) -> int:
        """One flusher pass: write back aged files, and oldest-first files while over the
        dirty high mark until under the low mark. Returns bytes written."""
        store = self.store
        p = self.policy
        now = trio.current_time()
        high = p.dirty_high * store.capacity_blocks
        low = p.dirty_low * store.capacity_blocks
        order: list[int] = []
        chosen: set[int] = set()
        remaining = len(store.dirty)
        over = remaining >= high and remaining > 0
        for key in store.dirty:
            ino = key[0]
            e = store.table[key]
            aged = e.dirty_since + p.max_age <= now
            if not aged and not (over and remaining > low):
                break
            if ino not in chosen:
                chosen.add(ino)
                order.append(ino)
                remaining -= len(store.files[ino].dirty)
        for ino, fs in store.files.items():  # queued stream writes never wait
            if fs.stream is not None and fs.stream.pending and ino not in chosen:
                order.append(ino)
        written = 0
        for ino in order:
            fs = store.files.get(ino)
            if fs is not None and (fs.dirty or (fs.stream is not None and fs.stream.pending)):
                written += await self.write_back(ino, fs)
        return written

    # --------------------------------------------------------- write-through

    async def write_through(
        self, ino: int, offset: int, data: memoryview, *, cache_full: bool,
    ) -> None:
        """Write ``data`` to the backend now, then bring cached copies up to date."""
        store = self.store
        bs = store.block_size
        fs = store.file(ino)
        async with fs.io_lock:
            if fs.stream is not None and fs.stream.pending:
                await self.streamer.drain_locked(ino, fs)  # queued stream data is older
            await self.backend.write(ino, offset, bytes(data))
            c = store.counters
            c["backend_writes"] += 1
            c["sync_writes" if cache_full else "bypassed_writes"] += 1
            fs.gen += 1
            end = offset + len(data)
            fs.local_end = max(fs.local_end, end)
            if store.files.get(ino) is not fs:
                return
            for blk in range(offset // bs, (end - 1) // bs + 1):
                a, b = store.span(blk, offset, end)
                piece = data[blk * bs + a - offset:blk * bs + b - offset]
                key = (ino, blk)
                e = store.table.get(key)
                if e is not None:
                    e.apply(a, piece)
                elif cache_full and b - a == bs and not store.locks.busy(key):
                    buf = store.alloc()
                    if buf is not None:
                        e = Entry(buf)
                        e.apply(0, piece)
                        store.insert(key, fs, e)

    # --------------------------------------------------------------- workers

    async def run_flusher(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
                          ) -> None:
        """Flush passes every ``policy.interval`` seconds, or at once when woken."""
        task_status.started()
        while True:
            with trio.move_on_after(self.policy.interval):
                await self.store.flush_wanted.wait()
            if self.store.flush_wanted.is_set():
                self.store.flush_wanted = trio.Event()
            await self.flush_pass()

    async def run_harvester(self, *,
                            task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
                            ) -> None:
        """Harvest whenever allocation crosses the high water mark."""
        task_status.started()
        while True:
            await self.store.harvest_wanted.wait()
            self.store.harvest_wanted = trio.Event()
            self.store.harvest()
