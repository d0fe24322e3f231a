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
When it can write many files at once (``write_files``), a write-back of several files sends
those whose dirty bytes are one small run together, each file's lock held
(:meth:`Flusher.write_back_many`): many small files cost one request per I/O daemon.
Only the byte ranges this node wrote go back (``Entry.ranges``), never a whole block: the
rest of a block may hold zeros or old bytes where another client has written since.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

from ._table import Entry, FileState, groups

if TYPE_CHECKING:
    from ._policy import Backend, WritebackPolicy
    from ._store import BackendCaps, BlockStore
    from ._stream import Streamer

__all__ = ["Flusher"]

# A run of dirty bytes contiguous in the file: its offset and its pieces (block, lo, hi).
Run = tuple[int, list[tuple[int, int, int]]]


def _run_bytes(run: Run) -> int:
    return sum(hi - lo for _, lo, hi in run[1])


@dataclass
class _Gathered:
    """One file's run in a gathered write-back: its bytes and the blocks' state they came
    from."""

    ino: int
    fs: FileState
    start: int
    data: bytes
    pieces: list[tuple[int, int, int]]
    snap: list[tuple[int, Entry]]
    versions: list[int]


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
        await self.write_back_many(list(self.store.files))
        for ino in list(self.store.files):
            try:
                await self.flush(ino)
            except OSError as exc:
                first = first or exc
        if first is not None:
            raise first

    def _runs(self, ino: int, blocks: Iterable[int]) -> Iterator[Run]:
        """Cut the dirty ranges of sorted ``blocks`` into runs for single backend writes, as
        they are asked for (a write-back plans one call at a time: cutting all of a file's
        blocks for each call made a large file's write-back quadratic).

        A run is contiguous in the file: it continues into the next block only if the block's
        last dirty range ends at the block's end and the next one's first starts at 0. It also
        ends where the next piece would start in a new stripe window, or at ``max_write`` bytes.
        """
        table = self.store.table
        bs = self.store.block_size
        window = self.caps.window(ino, self.policy.max_write)
        limit = max(bs, self.policy.max_write, window)
        start = end = -1
        pieces: list[tuple[int, int, int]] = []
        for blk in blocks:
            for lo, hi in table[(ino, blk)].ranges:
                a, b = blk * bs + lo, blk * bs + hi
                if pieces and (a != end or a // window != start // window
                               or b - start > limit):
                    yield start, pieces
                    pieces = []
                if not pieces:
                    start = a
                pieces.append((blk, lo, hi))
                end = b
        if pieces:
            yield start, pieces

    def _first_batch(self, runs: Iterator[Run]) -> list[Run]:
        """The runs of the next backend call, taken from ``runs``: one run unless the backend
        has list I/O (``write_list``), else the first of their :func:`groups` under
        ``max_list_bytes`` and ``max_regions``."""
        if self.caps.write_list is None:
            return list(itertools.islice(runs, 1))
        p = self.policy
        return next(groups(runs, _run_bytes, p.max_list_bytes, p.max_regions), [])

    def _snapshot(self, ino: int, batch: list[Run]) -> tuple[
            list[tuple[int, Entry]], list[int], list[list[tuple[int, int]]],
            list[tuple[int, int]], bytes]:
        """What one backend call of :meth:`write_back` carries: each block of ``batch`` once,
        in block order (runs come in order and a block's pieces are consecutive), with its
        version and the ranges sent; the call's regions; its bytes, joined at once."""
        table = self.store.table
        snap: list[tuple[int, Entry]] = []
        versions: list[int] = []
        sent: list[list[tuple[int, int]]] = []
        regions: list[tuple[int, int]] = []
        parts: list[bytearray | memoryview] = []
        last = -1
        for start, pieces in batch:
            n = 0
            for blk, lo, hi in pieces:
                if blk != last:
                    e = table[(ino, blk)]
                    snap.append((blk, e))
                    versions.append(e.version)
                    sent.append([(lo, hi)])
                    last = blk
                else:
                    sent[-1].append((lo, hi))
                buf = e.buf  # a whole block as it is: no view to make
                parts.append(buf if lo == 0 and hi == len(buf) else memoryview(buf)[lo:hi])
                n += hi - lo
            regions.append((start, n))
        return snap, versions, sent, regions, b"".join(parts)

    async def write_back(self, ino: int, fs: FileState) -> int:
        """Write back the dirty ranges of one file's blocks, coalesced into runs and the runs
        gathered into list-I/O calls when the backend has them. Returns bytes written.

        Each call is planned from the blocks' state right before it (writers may add ranges
        during an earlier call's await); the blocks dirty when the write-back began are
        written once each, so a steady writer cannot keep it going forever."""
        store = self.store
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
            todo = set(fs.dirty)
            order = sorted(todo)
            first = 0  # order[:first] are done
            while store.files.get(ino) is fs:
                while first < len(order) and order[first] not in todo:
                    first += 1
                dirty = fs.dirty
                blocks = (order[i] for i in range(first, len(order))
                          if order[i] in todo and order[i] in dirty)
                batch = self._first_batch(self._runs(ino, blocks))
                if not batch:
                    break
                snap, versions, sent, regions, data = self._snapshot(ino, batch)
                try:
                    if len(regions) == 1:
                        await self.backend.write(ino, regions[0][0], data)
                    else:
                        assert self.caps.write_list is not None
                        await self.caps.write_list(ino, regions, data)
                except OSError as exc:
                    self._failed(ino, fs, exc, snap)
                    todo.difference_update(blk for blk, _ in snap)
                    continue
                c["backend_writes"] += 1
                if len(regions) > 1:
                    c["list_writes"] += 1
                    c["list_regions"] += len(regions)
                c["flushed_bytes"] += len(data)
                written += len(data)
                if fs.stream is not None:
                    fs.stream.drop_readahead()  # fetched before these bytes reached the servers
                for (blk, e), v, rs in zip(snap, versions, sent):
                    # a block written in part (its other ranges are in a later call) stays to
                    # do; one modified meanwhile stays dirty for the next write-back
                    if store.mark_written((ino, blk), e, v, rs):
                        continue
                    todo.discard(blk)
        return written

    async def write_back_many(self, inos: list[int]) -> list[int]:
        """Write back, in one gathered backend call (``FilesBackend``), the files of ``inos``
        whose dirty bytes are one run the backend takes, when there are two or more; return
        the rest, in order, for :meth:`write_back` one by one.

        A file whose ``io_lock`` is held (a write-back or truncate of it under way) is left
        to the rest: waiting for one lock while holding others could wait forever."""
        if self.caps.write_files is None or len(inos) < 2:
            return inos
        picked: list[_Gathered] = []
        rest: list[int] = []
        for ino in inos:
            g = self._gather(ino)
            if g is None:
                rest.append(ino)
            else:
                picked.append(g)
        if len(picked) < 2:
            for g in picked:
                g.fs.io_lock.release()
            return [g.ino for g in picked] + rest if picked else rest
        try:
            await self._write_gathered(picked)
        finally:
            for g in picked:
                g.fs.io_lock.release()
        return rest

    def _gather(self, ino: int) -> _Gathered | None:
        """Take ``ino``'s lock and snapshot its one dirty run, if it goes in a gathered
        write (no await: nothing changes between the checks and the lock)."""
        store = self.store
        fs = store.files.get(ino)
        if fs is None or not fs.dirty or fs.io_lock.locked() or \
                (fs.stream is not None and fs.stream.pending):
            return None
        runs = list(itertools.islice(self._runs(ino, sorted(fs.dirty)), 2))
        if len(runs) != 1:
            return None
        start, pieces = runs[0]
        length = sum(hi - lo for _, lo, hi in pieces)
        if not self.caps.takes(ino, start, length):
            return None
        fs.io_lock.acquire_nowait()
        snap = [(blk, store.table[(ino, blk)]) for blk in sorted({b for b, _, _ in pieces})]
        data = b"".join(store.table[(ino, blk)].buf[lo:hi] for blk, lo, hi in pieces)
        return _Gathered(ino, fs, start, data, pieces, snap, [e.version for _, e in snap])

    async def _write_gathered(self, picked: list[_Gathered]) -> None:
        """One ``write_files`` call for ``picked`` (their locks held), then each file's
        blocks marked written, or its failure handled as :meth:`write_back` does."""
        store = self.store
        c = store.counters
        c["flushes"] += len(picked)
        try:
            failed = await self.caps.write_files([(g.ino, g.start, g.data) for g in picked])
        except OSError as exc:
            failed = {g.ino: exc for g in picked}
        c["files_writes"] += 1
        c["files_gathered"] += len(picked) - len(failed)
        for g in picked:
            if store.files.get(g.ino) is not g.fs:
                continue  # (dropped meanwhile: invalidated, truncated away, forgotten)
            exc = failed.get(g.ino)
            if exc is not None:
                self._failed(g.ino, g.fs, exc, g.snap)
                continue
            c["backend_writes"] += 1
            c["flushed_bytes"] += len(g.data)
            if g.fs.stream is not None:
                g.fs.stream.drop_readahead()
            sent: dict[int, list[tuple[int, int]]] = {}
            for blk, lo, hi in g.pieces:
                sent.setdefault(blk, []).append((lo, hi))
            for (blk, e), v in zip(g.snap, g.versions):
                store.mark_written((g.ino, blk), e, v, sent[blk])

    def _failed(self, ino: int, fs: FileState, exc: OSError,
                snap: list[tuple[int, Entry]]) -> None:
        """A write-back of ``ino`` carrying ``snap`` failed: its blocks are dropped (the data
        is lost, as the kernel loses it) and the error parked for the next flush."""
        store = self.store
        store.counters["write_errors"] += 1
        if fs.error is None:
            fs.error = exc
        fs.gen += 1
        for blk, e in snap:
            if store.table.get((ino, blk)) is e:
                store.drop((ino, blk))
        store.lost_writes(ino, fs)

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
        for ino in await self.write_back_many(order):
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
            store.changing(ino)
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
