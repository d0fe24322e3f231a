"""The block path of a write: each block's piece applied in the cache (``BlockCache._write``
decides which writes come here: not sync, not bypassing, not a stream).

:class:`BlockWriter` is the part of :class:`pvfs.cache.BlockCache` that puts a write's bytes
into cached blocks -- whole or partial (no read-modify-write: ``docs/cache.md``, "Writes"),
waiting for a fetch that holds a block's lock or for a truncation in progress, taking buffers
from the store (``None``: no buffer, the caller writes through). ``write_blocks`` is the loop
of a whole write with the common cases inline, since IOR hard's 47,008-byte writes spend the
mount's Python time there (``docs/benchmarks.md``, forty-fourth session).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from ._table import Entry, FileState, merge_range

if TYPE_CHECKING:
    from ._policy import PlainCheck
    from ._store import BlockStore
    from ._stream import Streamer

__all__ = ["BlockWriter"]


class BlockWriter:
    """Applies writes to the blocks of one :class:`BlockStore`.

    Args:
        store: the cache's store.
        streamer: its streamer (queued stream data older than a block write goes first).
        plain: the cache's :class:`pvfs.cache._policy.PlainCheck` (whether a bypass bit of
            the file appeared meanwhile).
    """

    def __init__(self, store: BlockStore, streamer: Streamer,
                 plain: PlainCheck) -> None:
        self.store = store
        self.streamer = streamer
        self.plain = plain

    async def write_blocks(self, ino: int, offset: int, end: int, mv: memoryview,
                            known: int | None, through: list[int]) -> int:
        """The block loop of a write that neither bypasses nor writes through (no bypass bit
        of the file, not sync): each block's piece applied as :meth:`_apply` would, with the
        common cases -- a whole block cached, a new block the write makes whole or that holds
        no byte of the file yet, nobody holding its lock -- done inline. IOR hard's
        47,008-byte writes spend their time in this loop (``docs/benchmarks.md``, forty-fourth
        session). Blocks no buffer was found for go to ``through`` (written through).
        Returns the first block left to the general loop of ``BlockCache._write``: past the
        last, unless a bypass bit of the file appeared during an await."""
        store = self.store
        bs = self.store.block_size
        table, locks, policy, dirty_list = store.table, store.locks, store.policy, store.dirty
        fs = store.file(ino)
        store.changing(ino)  # (again after every await below: a read may publish meanwhile)
        now = trio.current_time()
        last = (end - 1) // bs
        for blk in range(offset // bs, last + 1):
            base = blk * bs
            a = offset - base if offset > base else 0
            b = end - base if end < base + bs else bs
            piece = mv[base + a - offset:base + b - offset]
            st = fs.stream
            if st is not None and st.pending and st.overlaps(base + a, base + b):
                await self.streamer.drain(ino, fs)  # queued data is older
                if not self.plain(ino, blk, last, True):
                    return blk
                fs, now = self._resumed(ino)
            key = (ino, blk)
            e = table.get(key)
            if locks.busy(key) or (e is not None and e.known is not None) or \
                    (e is None and self._partial(blk, a, b, known)):
                # a fetch in flight, or a partial block: the general path
                done = self.buffer_now(ino, blk, a, piece, known)
                if done is None:
                    done = await self.buffer_block(ino, blk, a, piece, known)
                    fs, now = self._resumed(ino)
                if not done:
                    through.append(blk)
                fs.local_end = max(fs.local_end, base + b)
                if not self.plain(ino, blk + 1, last, True):
                    return blk + 1
                continue
            if e is None:  # a new whole block (Entry, insert of _apply)
                e = self._new_whole(key, fs)
                if e is None:
                    through.append(blk)
                    fs.local_end = max(fs.local_end, base + b)
                    continue
            # BlockStore.modify with Entry.apply and Entry.mark, for a whole block
            e.buf[a:b] = piece
            e.valid = max(e.valid, b)
            e.version += 1
            e.ranges = merge_range(e.ranges, a, b) if e.ranges else [(a, b)]
            policy.touched(key)
            if not e.dirty:
                e.dirty = True
                e.dirty_since = now
                dirty_list[key] = None
                fs.dirty.add(blk)
            fs.local_end = max(fs.local_end, base + b)
        return last + 1

    def _resumed(self, ino: int) -> tuple[FileState, float]:
        """After an await of :meth:`write_blocks`: the file's state, told changing again."""
        self.store.changing(ino)
        return self.store.file(ino), trio.current_time()

    def _new_whole(self, key: tuple[int, int], fs: FileState) -> Entry | None:
        """A new block in the table (no byte of it known to the file), or None: no buffer."""
        store = self.store
        buf = store.alloc()
        if buf is None:
            return None
        e = Entry(buf)
        store.insert(key, fs, e)
        return e

    def _partial(self, blk: int, lo: int, hi: int, known: int | None) -> bool:
        """Whether writing ``[lo, hi)`` of uncached block ``blk`` leaves bytes of the file in
        it unknown (the block is then cached partial, not fetched): only if the block has
        existing bytes (by ``known``, the file's size, when given) the write does not cover."""
        bs = self.store.block_size
        existing = bs if known is None else max(0, min(bs, known - blk * bs))
        return existing > 0 and not (lo == 0 and hi >= existing)

    def buffer_now(
        self, ino: int, blk: int, lo: int, piece: memoryview, known: int | None,
    ) -> bool | None:
        """The no-await fast path of :meth:`buffer_block`: nobody holds the block's lock.
        None when the slow path is needed."""
        if self.store.locks.busy((ino, blk)):
            return None
        return self._apply(ino, blk, lo, piece, known)

    def _apply(
        self, ino: int, blk: int, lo: int, piece: memoryview, known: int | None,
    ) -> bool | None:
        """Write ``piece`` at ``lo`` into block ``blk``, cached whole or partial (a new block
        is partial when :meth:`_partial` says so: no fetch). False when no buffer is free;
        None when a new partial block would be made while a truncation of the file is in
        progress (the caller waits for it, as a fetch for this write once did)."""
        store = self.store
        key = (ino, blk)
        e = store.table.get(key)
        if e is None:
            fs = store.file(ino)
            partial = self._partial(blk, lo, lo + len(piece), known)
            if partial and fs.truncating:
                return None
            buf = store.alloc()
            if buf is None:
                return False
            e = Entry(buf, partial=partial)
            store.insert(key, fs, e)
            if partial:
                store.counters["partial_writes"] += 1
        store.modify(key, e, lo, piece)
        if e.known is not None and known is not None:
            # whole once it knows every byte the file has in it (the rest are holes we made)
            k = e.known[0]
            if k[0] == 0 and k[1] >= known - blk * self.store.block_size:
                e.known = None
        return True

    async def buffer_block(
        self, ino: int, blk: int, lo: int, piece: memoryview, known: int | None,
    ) -> bool:
        """Apply ``piece`` at ``lo`` in block ``blk`` in the cache; False if no buffer. Waits
        for the block's lock (a fetch of it in flight) and applies under it, or for a
        truncation of the file in progress."""
        store = self.store
        key = (ino, blk)
        while True:
            done = self.buffer_now(ino, blk, lo, piece, known)
            if done is not None:
                return done
            if store.locks.busy(key):
                async with store.locks.hold([key]):
                    done = self._apply(ino, blk, lo, piece, known)
                if done is not None:
                    return done
            await store.file(ino).wait_settled()
