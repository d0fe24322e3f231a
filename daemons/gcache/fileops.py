"""The global cache daemon's file operations: ``fsync``, ``flush``, ``truncate`` with its
fence, ``truncated``, ``forget`` and ``invalidate``; and :meth:`FileOps.settle`, the wait every
read and write does before it looks at its blocks.

Truncation is fenced: ``truncate`` with ``fence`` drops the blocks past the new end and then
holds every read and write of the file until the client says the I/O daemons are truncated
too (``truncated``), or a timeout passes. A fetch in that window would read bytes the I/O
daemons are about to drop and cache them past the end, where a later truncation up would
expose them (fsx found this: a read-ahead that reached this daemon in the window). Writes
count themselves in progress once past their wait (:meth:`FileOps.writing`), and a fenced
truncation waits for those that came before it, so their bytes past the end go too.
"""

from __future__ import annotations

import logging

import trio

from pvfs.client.datapath import DataPath
from pvfs.layout.stripe import Stripe

from .fetch import Fetcher, _Fetch
from .store import BlockStore
from .through import WriteThrough
from .writeback import Flusher

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
    """The file operations of one global cache daemon, and the truncation fences and writes
    in progress they keep.

    Its interface: the handlers of the requests ``fsync``, ``flush``, ``truncate``,
    ``truncated``, ``forget`` and ``invalidate`` (one method each, by the same name, taking
    the request's fields); :meth:`settle` (the wait before a read or write looks at its
    blocks); :meth:`writing` / :meth:`written` (a write past that wait, which a fenced
    truncation waits for). It needs from the other parts: ``wait_inflight`` (``fetcher``),
    ``wait``, ``busy``, ``files`` and ``take_error`` (``through``), ``flush_file``, ``lock``
    and ``drop_lock`` (``flusher``).

    Args:
        store: the slab.
        policy: the admission policy (``forget`` clears its file; the daemon replaces it at
            run time: ``policy``).
        fetcher, through, flusher: the parts it waits for and flushes through.
        stripes, sizes: per file, shared with the other parts.
        data: the I/O daemons' data path (``fsync``).
        limiter: the threads the transfers run in.
        counters: the daemon's counters.
        timeout: the config's request timeout (a fence lasts ``FENCE_TIMEOUTS`` of them).
        epoch: told with every ``flush`` reply.
    """

    def __init__(self, *, store: BlockStore, policy, fetcher: Fetcher, through: WriteThrough,
                 flusher: Flusher, stripes: dict[int, Stripe], sizes: dict[int, int],
                 data: DataPath, limiter: trio.CapacityLimiter, counters: dict[str, int],
                 timeout: float, epoch: int) -> None:
        self.store = store
        self.policy = policy
        self.fetcher = fetcher
        self.through = through
        self.flusher = flusher
        self.stripes = stripes
        self.sizes = sizes
        self.data = data
        self.limiter = limiter
        self.counters = counters
        self.timeout = timeout
        self.epoch = epoch
        self.bs = store.block_size
        # Files being truncated: their I/O daemons may still hold the bytes past the new end.
        self._fences: dict[int, _Fence] = {}
        # Writes past their wait for a fence, per file (a truncation waits for them).
        self._writing: dict[int, list] = {}

    # ------------------------------------------------------------------ the wait
    async def settle(self, ino: int, blocks: set[int], *,
                     read: bool = False) -> dict[int, _Fetch]:
        """Wait until ``blocks`` of ``ino`` have no refused write on its way, no fetch in
        flight, and the file is not being truncated; the fetches waited for (none if a
        truncation was: what they read may be gone). Returns without yielding once all three
        hold, so the caller's next steps see that state. A ``read`` need not wait for
        refused writes that cover its blocks whole (``WriteThrough.wait``). Only the request's
        own blocks count: a list request's gaps may be written or fetched meanwhile (until
        2026-11-26 the span from its first to its last block did, and LU's write-back of two
        slabs waited seconds for the write-through of the slab between them)."""
        waited: dict[int, _Fetch] = {}
        while True:
            await self.through.wait(ino, blocks, read=read)
            waited.update(await self.fetcher.wait_inflight(ino, blocks))
            if not await self._wait_fence(ino):
                return waited
            waited.clear()

    async def _wait_fence(self, ino: int) -> bool:
        """Wait while ``ino`` is being truncated (see :meth:`truncate`); whether it was."""
        fence = self._fences.get(ino)
        if fence is None:
            return False
        with trio.move_on_at(fence.deadline):
            await fence.done.wait()
        if self._fences.get(ino) is fence and not fence.done.is_set():
            log.warning("truncation of inode %d not finished within %g s: serving it again",
                        ino, self.timeout * FENCE_TIMEOUTS)
            self._end_fence(ino, fence, all_=True)
        return True

    def _end_fence(self, ino: int, fence: _Fence, all_: bool = False) -> None:
        fence.count = 0 if all_ else fence.count - 1
        if fence.count <= 0:
            fence.done.set()
            if self._fences.get(ino) is fence:
                del self._fences[ino]

    def writing(self, ino: int) -> list:
        """Count a write of ``ino`` in progress: ``[count, event set when none is]`` (hand
        it back to :meth:`written`)."""
        w = self._writing.get(ino)
        if w is None:
            w = self._writing[ino] = [0, trio.Event()]
        w[0] += 1
        return w

    def written(self, ino: int, w: list) -> None:
        w[0] -= 1
        if w[0] == 0:
            w[1].set()
            if self._writing.get(ino) is w:
                del self._writing[ino]

    # ------------------------------------------------------------------ requests
    async def fsync(self, f: dict) -> dict:
        ino = f["ino"]
        self.stripes[ino] = f["stripe"]
        await self.flusher.flush_file(ino)
        await trio.to_thread.run_sync(self.data.fsync, ino, f["stripe"], f["data_only"],
                                      limiter=self.limiter)
        self.counters["fsyncs"] += 1
        return {}

    async def flush(self, f: dict) -> dict:
        for ino in ([f["ino"]] if f["ino"] else list({*self.store.dirty,
                                                       *self.through.files()})):
            await self.flusher.flush_file(ino)
        return {"dirty_blocks": self.store.dirty_blocks, "epoch": self.epoch}

    async def truncate(self, f: dict) -> dict:
        """Drop blocks past the new end (dirty ones too) and cut the last one: call before the
        file is truncated at the I/O daemons, so no write-back lands past the end later.

        With ``fence``, reads and writes of the file then wait until ``truncated`` (the I/O
        daemons are truncated too) or ``FENCE_TIMEOUTS`` request timeouts: a block fetched
        meanwhile could hold bytes the I/O daemons are about to drop. Fetches already in
        flight finish first; what they read is not kept past the new end."""
        ino, size = f["ino"], f["size"]
        if f["fence"]:
            fence = self._fences.get(ino)
            if fence is None:
                self._fences[ino] = _Fence(trio.current_time()
                                           + self.timeout * FENCE_TIMEOUTS)
            else:
                fence.count += 1
        w = self._writing.get(ino)
        if w is not None and f["fence"]:
            await w[1].wait()  # writes that came before: their bytes past the end go too
        await self.through.wait(ino)
        await self.fetcher.wait_inflight(ino)
        async with self.flusher.lock(ino):
            log.debug("truncate ino %d to %d", ino, size)
            self.sizes[ino] = size
            self._cut(ino, size)
        return {}

    def _cut(self, ino: int, size: int) -> None:
        """Drop the blocks of ``ino`` past ``size`` bytes and cut the last one there."""
        bs = self.bs
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

    async def truncated(self, f: dict) -> dict:
        """The I/O daemons are truncated (or refused): end a fence ``truncate`` set."""
        fence = self._fences.get(f["ino"])
        if fence is not None:
            self._end_fence(f["ino"], fence)
        return {}

    async def forget(self, f: dict) -> dict:
        ino = f["ino"]
        await self.through.wait(ino)
        self.through.take_error(ino)
        async with self.flusher.lock(ino):
            for b in self.store.blocks_of(ino):
                self.store.remove((ino, b))
            self.policy.forget(ino)
            self.stripes.pop(ino, None)
            self.sizes.pop(ino, None)
        self.flusher.drop_lock(ino)
        return {}

    async def invalidate(self, f: dict) -> dict:
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
                or self.through.busy(ino):
            await self.flusher.flush_file(ino)
        await self.settle(ino, set(range(first, last + 1)))
        dropped = 0
        for b in self.store.blocks_of(ino):
            slot = self.store.get((ino, b))
            if first <= b <= last and slot is not None and not slot.dirty:
                self.store.remove((ino, b))  # a pinned one (being sent) is freed at its unpin
                dropped += 1
        return {"dropped": dropped}
