"""The global cache daemon's file operations: ``fsync``, ``flush``, ``truncate`` with its
fence, ``truncated``, ``forget`` and ``invalidate``; and ``_settle``, the wait every read and
write does before it looks at its blocks.

Truncation is fenced: ``truncate`` with ``fence`` drops the blocks past the new end and then
holds every read and write of the file until the client says the I/O daemons are truncated
too (``truncated``), or a timeout passes. A fetch in that window would read bytes the I/O
daemons are about to drop and cache them past the end, where a later truncation up would
expose them (fsx found this: a read-ahead that reached this daemon in the window). Writes
count themselves in ``writing`` once past their wait, and a fenced truncation waits for those
that came before it, so their bytes past the end go too.

``FileOps`` is a mixin of :class:`~.server.GcacheServer`: it uses the server's ``store``,
``policy``, ``stripes``, ``sizes``, ``fences``, ``writing``, ``through``, ``through_errors``,
``file_locks``, ``config``, ``data``, ``limiter``, ``bs``, ``counters``, ``_lock``, and the
other mixins' ``_wait_through`` (``writes.py``), ``_wait_inflight`` (``fetch.py``) and
``flush_file`` (``writeback.py``).
"""

from __future__ import annotations

import logging

import trio

from .fetch import _Fetch

log = logging.getLogger("pvfs.gcache")

#: A truncation's fence lasts at most this many request timeouts (its client's call to the
#: manager has failed by then).
FENCE_TIMEOUTS = 2


class _Fence:
    """A truncation of a file in progress (between ``truncate`` and ``truncated``): reads and
    writes of the file wait for ``done``, at most until ``deadline``."""

    __slots__ = ("count", "deadline", "done")

    def __init__(self, deadline: float) -> None:
        self.count = 1
        self.deadline = deadline
        self.done = trio.Event()


class FileOps:
    async def _settle(self, ino: int, blocks: set[int], *,
                      read: bool = False) -> dict[int, _Fetch]:
        """Wait until ``blocks`` of ``ino`` have no refused write on its way, no fetch in
        flight, and the file is not being truncated; the fetches waited for (none if a
        truncation was: what they read may be gone). Returns without yielding once all three
        hold, so the caller's next steps see that state. A ``read`` need not wait for
        refused writes that cover its blocks whole (``_wait_through``). Only the request's
        own blocks count: a list request's gaps may be written or fetched meanwhile (until
        2026-11-26 the span from its first to its last block did, and LU's write-back of two
        slabs waited seconds for the write-through of the slab between them)."""
        waited: dict[int, _Fetch] = {}
        while True:
            await self._wait_through(ino, blocks, read=read)
            waited.update(await self._wait_inflight(ino, blocks))
            if not await self._wait_fence(ino):
                return waited
            waited.clear()

    async def _wait_fence(self, ino: int) -> bool:
        """Wait while ``ino`` is being truncated (see ``op_truncate``); whether it was."""
        fence = self.fences.get(ino)
        if fence is None:
            return False
        with trio.move_on_at(fence.deadline):
            await fence.done.wait()
        if self.fences.get(ino) is fence and not fence.done.is_set():
            log.warning("truncation of inode %d not finished within %g s: serving it again",
                        ino, self.config.request_timeout * FENCE_TIMEOUTS)
            self._end_fence(ino, fence, all_=True)
        return True

    def _end_fence(self, ino: int, fence: _Fence, all_: bool = False) -> None:
        fence.count = 0 if all_ else fence.count - 1
        if fence.count <= 0:
            fence.done.set()
            if self.fences.get(ino) is fence:
                del self.fences[ino]

    def _writing(self, ino: int) -> list:
        """Count a write of ``ino`` in progress: ``[count, event set when none is]``."""
        w = self.writing.get(ino)
        if w is None:
            w = self.writing[ino] = [0, trio.Event()]
        w[0] += 1
        return w

    def _written(self, ino: int, w: list) -> None:
        w[0] -= 1
        if w[0] == 0:
            w[1].set()
            if self.writing.get(ino) is w:
                del self.writing[ino]

    async def op_fsync(self, f: dict) -> dict:
        ino = f["ino"]
        self.stripes[ino] = f["stripe"]
        await self.flush_file(ino)
        await trio.to_thread.run_sync(self.data.fsync, ino, f["stripe"], f["data_only"],
                                      limiter=self.limiter)
        self.counters["fsyncs"] += 1
        return {}

    async def op_flush(self, f: dict) -> dict:
        for ino in ([f["ino"]] if f["ino"] else list({*self.store.dirty, *self.through})):
            await self.flush_file(ino)
        return {"dirty_blocks": self.store.dirty_blocks, "epoch": self.epoch}

    async def op_truncate(self, f: dict) -> dict:
        """Drop blocks past the new end (dirty ones too) and cut the last one: call before the
        file is truncated at the I/O daemons, so no write-back lands past the end later.

        With ``fence``, reads and writes of the file then wait until ``truncated`` (the I/O
        daemons are truncated too) or ``FENCE_TIMEOUTS`` request timeouts: a block fetched
        meanwhile could hold bytes the I/O daemons are about to drop. Fetches already in
        flight finish first; what they read is not kept past the new end."""
        ino, size = f["ino"], f["size"]
        bs = self.bs
        if f["fence"]:
            fence = self.fences.get(ino)
            if fence is None:
                self.fences[ino] = _Fence(trio.current_time()
                                          + self.config.request_timeout * FENCE_TIMEOUTS)
            else:
                fence.count += 1
        w = self.writing.get(ino)
        if w is not None and f["fence"]:
            await w[1].wait()  # writes that came before: their bytes past the end go too
        await self._wait_through(ino)
        await self._wait_inflight(ino)
        async with self._lock(ino):
            log.debug("truncate ino %d to %d", ino, size)
            self.sizes[ino] = size
            keep = -(-size // bs)
            for b in self.store.blocks_of(ino):
                if b >= keep:
                    self.store.remove((ino, b))
            slot = self.store.get((ino, size // bs)) if size % bs else None
            if slot is not None and slot.valid > size % bs:
                cut = size % bs
                self.store.block_view(slot, cut, slot.valid)[:] = bytes(slot.valid - cut)
                slot.valid = cut
                slot.version += 1
            if slot is not None:
                self.store.clip(slot, size % bs)
                if not slot.ranges and slot.dirty:
                    self.store.mark_clean((ino, size // bs), slot, slot.version, [])
        return {}

    async def op_truncated(self, f: dict) -> dict:
        """The I/O daemons are truncated (or refused): end a fence ``truncate`` set."""
        fence = self.fences.get(f["ino"])
        if fence is not None:
            self._end_fence(f["ino"], fence)
        return {}

    async def op_forget(self, f: dict) -> dict:
        ino = f["ino"]
        await self._wait_through(ino)
        self.through_errors.pop(ino, None)
        async with self._lock(ino):
            for b in self.store.blocks_of(ino):
                self.store.remove((ino, b))
            self.policy.forget(ino)
            self.stripes.pop(ino, None)
            self.sizes.pop(ino, None)
        self.file_locks.pop(ino, None)
        return {}

    async def op_invalidate(self, f: dict) -> dict:
        """Drop this cache's copies of a range a client has just written past it, to the I/O
        daemons. The client wrote back its own dirty bytes of the range first (``flush``), so
        any still dirty here are another client's, as new as the direct write: they go to the
        I/O daemons first, then the block goes too, so that this cache and the disks agree.
        Fetches and writes of the range in flight finish first: a fetch that read the disks
        before the direct write would otherwise keep the old bytes after it."""
        ino, off, n = f["ino"], f["offset"], f["length"]
        if n:
            self.sizes[ino] = max(self.sizes.get(ino, 0), off + n)
        first, last = off // self.bs, (off + max(n, 1) - 1) // self.bs
        blocks = {b for b in self.store.blocks_of(ino) if first <= b <= last}
        if any((s := self.store.get((ino, b))) is not None and s.dirty for b in blocks) \
                or ino in self.through:
            await self.flush_file(ino)
        await self._settle(ino, set(range(first, last + 1)))
        dropped = 0
        for b in self.store.blocks_of(ino):
            slot = self.store.get((ino, b))
            if first <= b <= last and slot is not None and not slot.dirty:
                self.store.remove((ino, b))  # a pinned one (being sent) is freed at its unpin
                dropped += 1
        return {"dropped": dropped}
