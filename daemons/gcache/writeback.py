"""The global cache daemon's write-back (the paper's flusher, §3.2): dirty blocks go to the
I/O daemons every ``flush_interval`` seconds, on ``fsync``/``flush``, when too many slots
are dirty, and when the daemon stops; each file's dirty ranges in one coalesced list request,
straight from the slab.
"""

from __future__ import annotations

import logging

import trio

from pvfs.client.datapath import DataPath
from pvfs.layout.stripe import Stripe

from .store import BlockStore, Slot
from .through import WriteThrough
from .transfer import write_extents

log = logging.getLogger("pvfs.gcache")

#: Above this fraction of slots dirty, writers wait for a write-back pass first.
DIRTY_HIGH = 0.5


class Flusher:
    """Write-back of one global cache daemon's dirty blocks, and the lock per file that
    write-back, truncation and removal of the file hold.

    Its interface: :meth:`flush_file` (one file's dirty blocks to the I/O daemons),
    :meth:`flush_some` (files until the dirty blocks are below half the high mark),
    :meth:`write_back_all` (at stop), :meth:`run` (the periodic flusher task), :meth:`lock`
    and :meth:`drop_lock` (the file's lock). It needs from the write-through part
    (``through``) its ``wait`` and ``take_error``: a file's refused writes on their way go
    first, and a failed one's error is the write-back's.

    Args:
        store: the slab whose dirty blocks go back.
        stripes: the stripe of each file, shared with the other parts (read here).
        through: the refused writes on their way.
        data: the I/O daemons' data path.
        limiter: the threads the transfers run in.
        counters: the daemon's counters.
        flush_interval: seconds between the flusher's passes.
    """

    def __init__(self, store: BlockStore, stripes: dict[int, Stripe], through: WriteThrough,
                 data: DataPath, limiter: trio.CapacityLimiter, counters: dict[str, int],
                 flush_interval: float) -> None:
        self.store = store
        self.stripes = stripes
        self.through = through
        self.data = data
        self.limiter = limiter
        self.counters = counters
        self.flush_interval = flush_interval
        self._locks: dict[int, trio.Lock] = {}

    def lock(self, ino: int) -> trio.Lock:
        lock = self._locks.get(ino)
        if lock is None:
            lock = self._locks[ino] = trio.Lock()
        return lock

    def drop_lock(self, ino: int) -> None:
        """The file is gone (``forget``)."""
        self._locks.pop(ino, None)

    async def flush_file(self, ino: int) -> None:
        """Write every dirty block of ``ino`` back to the I/O daemons (coalesced, zero-copy),
        after the refused writes of it on their way there (their error, if one failed)."""
        await self.through.wait(ino)
        err = self.through.take_error(ino)
        if err is not None:
            raise err
        async with self.lock(ino):
            blocks = sorted(self.store.dirty.get(ino, ()))
            if not blocks:
                return
            stripe = self.stripes[ino]
            bs = self.store.block_size
            work: list[tuple[int, Slot, int, list[tuple[int, int]]]] = []
            for b in blocks:
                slot = self.store.get((ino, b))
                if slot is None or not slot.dirty:
                    continue
                slot.pins += 1
                work.append((b, slot, slot.version, list(slot.ranges)))
            # Only the written ranges go back, never the whole block: its other bytes came
            # from the I/O daemons before another client may have written them there.
            ext = _coalesce([(b * bs + lo, hi - lo, s.idx * bs + lo)
                             for b, s, _, ranges in work for lo, hi in ranges if hi > lo])
            try:
                await trio.to_thread.run_sync(write_extents, self.data, ino, stripe, ext,
                                              self.store.slab, limiter=self.limiter)
            finally:
                self.store.unpin_all([s for _, s, _, _ in work])
            self.counters["flushes"] += 1
            log.debug("write-back ino %d: %s", ino, [(o, n) for o, n, _ in ext])
            for b, s, version, ranges in work:
                if self.store.mark_clean((ino, b), s, version, ranges):
                    self.counters["flushed_blocks"] += 1

    async def _flush_logged(self, ino: int) -> None:
        """:meth:`flush_file`, its failure counted and logged (a background pass)."""
        try:
            await self.flush_file(ino)
        except OSError as exc:
            self.counters["flush_errors"] += 1
            log.warning("write-back of inode %d failed: %s", ino, exc)

    async def flush_some(self) -> None:
        """Write files back until the dirty blocks are below half of ``DIRTY_HIGH``."""
        for ino in list(self.store.dirty):
            await self._flush_logged(ino)
            if self.store.dirty_blocks <= DIRTY_HIGH * self.store.nslots / 2:
                return

    async def run(self) -> None:
        """Write dirty blocks back every ``flush_interval`` seconds (the paper's flusher)."""
        while True:
            await trio.sleep(self.flush_interval)
            for ino in list(self.store.dirty):
                await self._flush_logged(ino)

    async def write_back_all(self) -> None:
        """On the way out (``pvfs-admin down``): every dirty block to the I/O daemons. Clients
        were answered when the bytes reached this daemon; stopping it must not drop them."""
        dirty = list(self.store.dirty)
        for ino in dirty:
            try:
                await self.flush_file(ino)
            except OSError as exc:
                log.error("write-back of inode %d at stop failed: %s", ino, exc)
        if dirty:
            log.info("wrote back %d files' dirty blocks at stop", len(dirty))


def _coalesce(ext: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """Join extents ``(file offset, length, slab offset)`` that continue each other in the
    file and in the slab (whole dirty blocks in adjacent slots): fewer pieces per request."""
    out: list[tuple[int, int, int]] = []
    for off, n, buf in ext:
        if out and out[-1][0] + out[-1][1] == off and out[-1][2] + out[-1][1] == buf:
            out[-1] = (out[-1][0], out[-1][1] + n, out[-1][2])
        else:
            out.append((off, n, buf))
    return out
