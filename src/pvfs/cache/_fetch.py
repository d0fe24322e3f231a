"""Fetching missing blocks: the block path's reads from the backend.

:class:`Fetcher` is the part of :class:`pvfs.cache.BlockCache` that fills the store on misses.
A fetch holds the locks of the blocks it fetches, waits while a truncation of the file is in
progress, re-checks the blocks, writes queued stream data of their ranges back first, and
inserts what it read only if the file's generation did not move meanwhile. A partial block
(one that knows only the ranges this node wrote) is fetched like a missing one, and its known
ranges are laid over what the backend returned (``BlockStore.fill``). Scattered missing
runs of one request go to the backend as one list-I/O call (``read_list``) when it has one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._store import piece_of
from ._table import FileState, gather, runs_of

if TYPE_CHECKING:
    from ._policy import Backend, WritebackPolicy
    from ._store import BackendCaps, BlockStore
    from ._stream import Streamer

__all__ = ["Fetcher"]


class Fetcher:
    """Misses of one cache: whole runs, list-I/O batches and bypassed reads.

    Args:
        store: the blocks fetched data goes into.
        backend: where it comes from.
        caps: whether the backend has ``read_list``.
        limits: the list-I/O budget per call (``max_list_bytes``, ``max_regions``).
        streamer: queued stream writes of a range are written back before it is read.
    """

    def __init__(self, store: BlockStore, backend: Backend, caps: BackendCaps,
                 limits: WritebackPolicy, streamer: Streamer) -> None:
        self.store = store
        self.backend = backend
        self.caps = caps
        self.limits = limits
        self.streamer = streamer

    async def fetch_read(self, ino: int, missing: list[int], bypassed: list[int], offset: int,
                         end: int, eff: int, pieces: dict[int, bytes]) -> None:
        """A read's missing blocks fetched (one list-I/O call for several runs when the
        backend has one, else a call per run) and its bypassed blocks read, into ``pieces``."""
        runs = runs_of(missing)
        if len(runs) > 1 and self.caps.read_list is not None:
            await self.fetch(ino, missing, offset, end, eff, pieces)
        else:
            for start, n in runs:
                await self.fetch(ino, list(range(start, start + n)), offset, end, eff, pieces,
                                 single=True)
        if bypassed:
            await self.read_bypassed(ino, bypassed, offset, end, pieces)

    async def fetch(
        self, ino: int, blocks: list[int], offset: int, end: int, eff: int,
        pieces: dict[int, bytes], *, single: bool = False,
    ) -> None:
        """Fetch missing ``blocks`` (sorted) under all their locks into ``pieces`` (each block's
        part of ``[offset, end)``): each run still missing after the locks are held is read
        whole; with ``single`` (or a backend without list I/O) one backend read per run, else
        the runs gathered into ``read_list`` calls."""
        store = self.store
        async with store.locks.hold([(ino, blk) for blk in blocks]):
            fs = store.file(ino)
            if fs.truncating:  # servers may still hold truncated bytes
                await fs.wait_settled()
                fs = store.file(ino)
            gen = fs.gen
            still = self._recheck(ino, blocks, offset, end, eff, pieces)
            if not still:
                return
            runs = runs_of(still)
            read_list = None if single else self.caps.read_list
            if read_list is not None:
                for s, m in runs:  # queued stream data of these ranges first, for every call
                    await self._drain(ino, s, m)
                lim = self.limits
                bs = store.block_size
                groups = gather([m * bs for _, m in runs], lim.max_list_bytes, lim.max_regions)
            else:
                groups = [slice(i, i + 1) for i in range(len(runs))]
            for g in groups:
                await self._read_batch(ino, fs, gen, runs[g], read_list, offset, end, pieces)

    def _recheck(self, ino: int, blocks: list[int], offset: int, end: int, eff: int,
                 pieces: dict[int, bytes]) -> list[int]:
        """With the locks held: blocks another task fetched meanwhile are hits (their pieces
        taken); the others are returned, still to fetch."""
        store = self.store
        table = store.table
        still: list[int] = []
        for blk in blocks:
            e = table.get((ino, blk))
            a, b = store.span(blk, offset, end)
            if e is not None and store.covers(e, blk, eff, a, b):
                pieces[blk] = piece_of(e.buf, a, b)
                store.policy.touched((ino, blk))
                store.counters["hits"] += 1
            else:
                still.append(blk)
        return still

    async def _drain(self, ino: int, s: int, m: int) -> None:
        """Queued stream writes over blocks ``s..s+m-1`` go to the backend first (the
        streamer's own first check, made here: a miss usually has none to drain)."""
        fs = self.store.files.get(ino)
        if fs is not None and fs.stream is not None and fs.stream.pending:
            bs = self.store.block_size
            await self.streamer.drain_overlap(ino, s * bs, (s + m) * bs)

    async def _read_batch(self, ino: int, fs: FileState, gen: int, batch: list[tuple[int, int]],
                          read_list, offset: int, end: int, pieces: dict[int, bytes]) -> None:
        """One backend call for ``batch`` (runs); their pieces taken, their blocks installed
        if the file's generation is still ``gen`` (the fetch's, taken before its first await)."""
        store = self.store
        bs = store.block_size
        c = store.counters
        if len(batch) == 1:
            s, m = batch[0]
            if read_list is None:
                await self._drain(ino, s, m)
            datas = [await self.backend.read(ino, s * bs, m * bs)]
        else:
            assert read_list is not None
            datas = await read_list(ino, [(s * bs, m * bs) for s, m in batch])
            c["list_reads"] += 1
        c["backend_reads"] += 1
        keep = store.files.get(ino) is fs and fs.gen == gen
        for (s, m), data in zip(batch, datas):
            c["misses"] += m
            for i in range(m):
                blk = s + i
                chunk = store.fill(ino, fs, blk, data[i * bs:(i + 1) * bs], keep)
                a, b = store.span(blk, offset, end)
                pieces[blk] = piece_of(chunk, a, b)

    async def read_bypassed(self, ino: int, blocks: list[int], offset: int, end: int,
                            pieces: dict[int, bytes]) -> None:
        """Read ``blocks`` (read bypass) straight from the backend into ``pieces``, a dirty
        partial block's known bytes laid over them (read-your-writes)."""
        store = self.store
        bs = store.block_size
        for start, n in runs_of(blocks):
            data = await self.bypassed(ino, start, n)
            for i in range(n):
                a, b = store.span(start + i, offset, end)
                chunk = data[i * bs:(i + 1) * bs]
                e = store.table.get((ino, start + i))
                if e is not None and e.dirty:
                    chunk = store.fill(ino, store.file(ino), start + i, chunk, False)
                pieces[start + i] = piece_of(chunk, a, b)

    async def bypassed(self, ino: int, start: int, n: int) -> bytes:
        """Blocks ``start..start+n-1`` straight from the backend (read bypass): not cached."""
        bs = self.store.block_size
        await self.streamer.drain_overlap(ino, start * bs, (start + n) * bs)
        data = await self.backend.read(ino, start * bs, n * bs)
        c = self.store.counters
        c["backend_reads"] += 1
        c["bypassed_reads"] += n
        return data
