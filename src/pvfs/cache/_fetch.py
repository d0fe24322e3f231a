"""Fetching missing blocks of the block cache (the block path's reads from the backend).

Kept apart from ``_cache.py`` only for size (like ``_writeback.py``); :class:`FetchMixin` is
mixed into :class:`pvfs.cache.BlockCache`. A fetch holds the locks of the blocks it fetches,
re-checks them, writes queued stream data of their ranges back first, and inserts what it read
only if the file's generation did not move meanwhile. Scattered missing runs of one request
go to the backend as one list-I/O call (``read_list``) when it has one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from ._table import Entry, FileState, KeyLocks, gather, runs_of

if TYPE_CHECKING:
    from ._policy import Backend, ListBackend, ReplacementPolicy, WritebackPolicy

__all__ = ["FetchMixin"]


def _piece(chunk: bytes | bytearray | memoryview, a: int, b: int) -> bytes:
    """``chunk[a:b]`` padded with zeros to ``b - a`` bytes (holes and short reads)."""
    out = bytes(chunk[a:b])
    return out if len(out) == b - a else out.ljust(b - a, b"\0")


class FetchMixin:
    backend: Backend
    block_size: int
    writeback: WritebackPolicy
    policy: ReplacementPolicy
    _table: dict[tuple[int, int], Entry]
    _files: dict[int, FileState]
    _counters: dict[str, int]
    _locks: KeyLocks

    if TYPE_CHECKING:  # provided by BlockCache and StreamMixin
        def _file(self, ino: int) -> FileState: ...

        def _covers(self, e: Entry, blk: int, eff: int) -> bool: ...

        def _span(self, blk: int, start: int, end: int) -> tuple[int, int]: ...

        def _alloc(self) -> bytearray | None: ...

        def _insert(self, key: tuple[int, int], fs: FileState, e: Entry) -> None: ...

        async def _drain_overlap(self, ino: int, lo: int, hi: int) -> None: ...

    async def _fetch_list(
        self, ino: int, blocks: list[int], offset: int, end: int, eff: int,
        pieces: dict[int, bytes], *, single: bool = False,
    ) -> None:
        """Fetch missing ``blocks`` (sorted) under all their locks: each run still missing
        after the locks are held is read whole; with ``single`` (or a backend without list
        I/O) one backend read per run, else the runs gathered into ``read_list`` calls."""
        bs = self.block_size
        c = self._counters
        async with self._locks.hold([(ino, blk) for blk in blocks]):
            fs = self._file(ino)
            await fs.wait_settled()  # the servers may still hold bytes a truncate dropped
            fs = self._file(ino)
            gen = fs.gen
            still: list[int] = []
            for blk in blocks:
                e = self._table.get((ino, blk))
                if e is not None and self._covers(e, blk, eff):
                    a, b = self._span(blk, offset, end)
                    pieces[blk] = _piece(e.buf, a, b)
                    self.policy.touched((ino, blk))
                    c["hits"] += 1
                else:
                    still.append(blk)
            runs = runs_of(still)
            listed = not single and getattr(self.backend, "read_list", None) is not None
            if listed:
                for s, m in runs:  # queued stream data of these ranges first, for every call
                    await self._drain_overlap(ino, s * bs, (s + m) * bs)
                wb = self.writeback
                groups = gather([m * bs for _, m in runs], wb.max_list_bytes, wb.max_regions)
            else:
                groups = [slice(i, i + 1) for i in range(len(runs))]
            for g in groups:
                batch = runs[g]
                if len(batch) == 1:
                    s, m = batch[0]
                    if not listed:
                        await self._drain_overlap(ino, s * bs, (s + m) * bs)
                    datas = [await self.backend.read(ino, s * bs, m * bs)]
                else:
                    datas = await cast("ListBackend", self.backend).read_list(
                        ino, [(s * bs, m * bs) for s, m in batch])
                    c["list_reads"] += 1
                c["backend_reads"] += 1
                keep = self._files.get(ino) is fs and fs.gen == gen
                for (s, m), data in zip(batch, datas):
                    c["misses"] += m
                    for i in range(m):
                        blk = s + i
                        chunk = data[i * bs:(i + 1) * bs]
                        a, b = self._span(blk, offset, end)
                        pieces[blk] = _piece(chunk, a, b)
                        if keep:
                            self._install(ino, fs, blk, chunk)

    def _install(self, ino: int, fs: FileState, blk: int, chunk: bytes) -> None:
        """Put fetched clean data for ``blk`` into the cache (if a buffer is to be had)."""
        key = (ino, blk)
        e = self._table.get(key)
        if e is not None:
            if e.dirty:
                return
            e.buf[: len(chunk)] = chunk
            e.buf[len(chunk):] = bytes(self.block_size - len(chunk))
            e.valid = len(chunk)
            e.version += 1
            return
        buf = self._alloc()
        if buf is None:
            return
        buf[: len(chunk)] = chunk
        e = Entry(buf)
        e.valid = len(chunk)
        self._insert(key, fs, e)
