"""The global cache daemon's write-back (the paper's flusher, §3.2): dirty blocks go to the
I/O daemons every ``flush_interval`` seconds, on ``fsync``/``flush``, and when too many slots
are dirty; each file's dirty ranges in one coalesced list request, straight from the slab.

``WriteBack`` is a mixin of :class:`~.server.GcacheServer`: it uses the server's ``store``,
``stripes``, ``bs``, ``data``, ``limiter``, ``gconf``, ``counters``, ``_lock`` and
``_unpin_all``.
"""

from __future__ import annotations

import logging

import trio

from .store import Slot
from .transfer import write_extents

log = logging.getLogger("pvfs.gcache")

#: Above this fraction of slots dirty, writers wait for a write-back pass first.
DIRTY_HIGH = 0.5


class WriteBack:
    async def flush_file(self, ino: int) -> None:
        """Write every dirty block of ``ino`` back to the I/O daemons (coalesced, zero-copy),
        after the refused writes of it on their way there (their error, if one failed)."""
        await self._wait_through(ino)
        err = self.through_errors.pop(ino, None)
        if err is not None:
            raise err
        async with self._lock(ino):
            blocks = sorted(self.store.dirty.get(ino, ()))
            if not blocks:
                return
            stripe = self.stripes[ino]
            bs = self.bs
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
                self._unpin_all([s for _, s, _, _ in work])
            self.counters["flushes"] += 1
            log.debug("write-back ino %d: %s", ino, [(o, n) for o, n, _ in ext])
            for b, s, version, ranges in work:
                if self.store.mark_clean((ino, b), s, version, ranges):
                    self.counters["flushed_blocks"] += 1

    async def _flush_some(self) -> None:
        for ino in list(self.store.dirty):
            try:
                await self.flush_file(ino)
            except OSError as exc:
                self.counters["flush_errors"] += 1
                log.warning("write-back of inode %d failed: %s", ino, exc)
            if self.store.dirty_blocks <= DIRTY_HIGH * self.store.nslots / 2:
                return

    async def _flusher(self) -> None:
        """Write dirty blocks back every ``flush_interval`` seconds (the paper's flusher)."""
        while True:
            await trio.sleep(self.gconf.flush_interval)
            for ino in list(self.store.dirty):
                try:
                    await self.flush_file(ino)
                except OSError as exc:
                    self.counters["flush_errors"] += 1
                    log.warning("write-back of inode %d failed: %s", ino, exc)


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
