"""The global cache daemon's write path: ``write`` and ``write_list``.

A write lands in slab slots (a partial block that is not cached is read first), is marked
dirty with the byte ranges it wrote (its blocks count as in flight until then: requests for
them wait, ``fetch.py``) and reaches the I/O daemons through the flusher
(``writeback.py``). A block the admission policy refuses is received into a scratch buffer,
the client is answered at once, and the bytes are written through to the I/O daemons in the
background (``through.py``). No client is told to bypass a segment this daemon holds dirty or
in-flight written blocks of (``WriteThrough.hints``): its direct writes would be overwritten
by the older write.
"""

from __future__ import annotations

import errno
import logging

import trio

from pvfs.layout.stripe import Stripe
from pvfs.protocol import aio

from ..holders import HolderDirectory
from .fetch import Fetcher, _Fetch
from .fileops import FileOps
from .sockio import recv_views
from .store import BlockStore, Slot
from .through import WriteThrough, _Through
from .writeback import DIRTY_HIGH, Flusher

log = logging.getLogger("pvfs.gcache")


class _Write:
    """One write's state between its steps: where each block's bytes go."""

    __slots__ = ("bypass", "dest", "job", "pinned", "ranges", "received", "sbuf", "scratch",
                 "writing")

    def __init__(self, ranges: dict[int, list[tuple[int, int]]]) -> None:
        self.ranges = ranges  # block -> the byte ranges of it the write covers
        self.pinned: list[Slot] = []  # unpinned when the write is over
        self.dest: dict[int, Slot] = {}  # block -> the slot its bytes go into
        self.scratch: dict[int, int] = {}  # block -> its offset in sbuf (refused)
        self.sbuf: bytearray | None = None
        self.bypass: set[int] = set()  # the segments the policy refused
        self.job: _Fetch | None = None  # the blocks in flight until the write is in
        self.writing: list | None = None  # counted in progress (``FileOps.writing``)
        self.received = False  # the bulk is consumed


class WritePath:
    """The writes of one global cache daemon.

    Its interface: :meth:`write` and :meth:`write_list`, the handlers of those requests
    (they receive the bulk from the socket themselves). It needs from the other parts:
    ``settle``, ``writing`` and ``written`` (``files``); ``admit_missing``, ``fetch``,
    ``mark_inflight`` and ``unmark_inflight`` (``fetcher``); ``send`` and ``hints``
    (``through``); ``flush_some`` and ``flush_file`` (``flusher``).

    Args:
        store: the slab.
        policy: the admission policy (the daemon replaces it at run time: ``policy``).
        files, fetcher, through, flusher: the parts it waits for, fetches, writes through
            and flushes through.
        directory: the holder directory (``coherence=sync``: a write with ``invalidate``
            calls back the other holders).
        stripes, sizes: per file, shared with the other parts (a write sets both).
        counters: the daemon's counters.
        timeout: the config's request timeout (receiving the bulk, draining it).
        epoch: told with every reply.
        segment_blocks: blocks per segment.
    """

    def __init__(self, *, store: BlockStore, policy, files: FileOps, fetcher: Fetcher,
                 through: WriteThrough, flusher: Flusher, directory: HolderDirectory,
                 stripes: dict[int, Stripe], sizes: dict[int, int], counters: dict[str, int],
                 timeout: float, epoch: int, segment_blocks: int) -> None:
        self.store = store
        self.policy = policy
        self.files = files
        self.fetcher = fetcher
        self.through = through
        self.flusher = flusher
        self.directory = directory
        self.stripes = stripes
        self.sizes = sizes
        self.counters = counters
        self.timeout = timeout
        self.epoch = epoch
        self.bs = store.block_size
        self.sb = segment_blocks

    async def write(self, f: dict, n: int, sock) -> dict:
        return await self._serve(f, [(f["offset"], n)], n, sock)

    async def write_list(self, f: dict, n: int, sock) -> dict:
        """List I/O: the bulk is the regions' bytes one after the other."""
        if sum(length for _, length in f["regions"]) != n:
            with trio.move_on_after(self.timeout):
                await aio.drain(sock, n)
            raise OSError(errno.EINVAL, "write_list: region lengths do not add up to the data")
        return await self._serve(f, f["regions"], n, sock)

    async def _serve(self, f: dict, regions: list[tuple[int, int]], n: int, sock) -> dict:
        ino, stripe = f["ino"], f["stripe"]
        self.stripes[ino] = stripe
        self.counters["writes"] += 1
        regions = [(off, length) for off, length in regions if length]
        if not regions:
            return {"n": 0, "bypass": [], "ttl": 0, "epoch": self.epoch}
        req = _Write(_block_ranges(regions, self.bs))
        try:
            await self._place(ino, stripe, req)
            await self._receive(regions, sock, req)
            self._land(ino, regions, req)
            if req.scratch:
                await self._pass_through(ino, stripe, req)
            if req.bypass:
                self.counters["bypasses"] += len(req.bypass)
        except BaseException:
            if not req.received:
                # Keep the connection in sync: the bulk must be consumed before an error reply.
                with trio.move_on_after(self.timeout):
                    await aio.drain(sock, n)
            raise
        finally:
            self._release(ino, req)
        if f["sync"]:
            await self.flusher.flush_file(ino)
        if f["invalidate"] and f["client"] is not None:
            for off, length in regions:
                self.counters["invalidations"] += await self.directory.invalidate(
                    f["client"], ino, off, length)
        # Refused writes are on their way to the I/O daemons: no hint for their segments yet
        # (see WriteThrough.hints); a later read miss may refuse and hint them.
        hints = self.through.hints(ino, req.bypass)
        return {"n": n, "bypass": hints, "ttl": self.policy.bypass_ttl if hints else 0,
                "epoch": self.epoch}

    async def _place(self, ino: int, stripe: Stripe, req: _Write) -> None:
        """Give each block of the write its place, once its blocks are settled: its cached
        slot, a new slot if the policy admits it, else an offset in a scratch buffer (a
        refused block, written through). The blocks are in flight from here on."""
        sb = self.sb
        blocks = sorted(req.ranges)
        if self.store.dirty_blocks > DIRTY_HIGH * self.store.nslots:
            await self.flusher.flush_some()
        before = {s: self.policy.access(ino, s) for s in sorted({b // sb for b in blocks})}
        await self.files.settle(ino, set(blocks))
        req.writing = self.files.writing(ino)
        missing: list[int] = []
        for b in blocks:
            slot = self.store.get((ino, b))
            if slot is None:
                missing.append(b)
            else:
                slot.pins += 1
                req.pinned.append(slot)
                req.dest[b] = slot
                self.store.touch((ino, b))
        self.counters["hits"] += len(req.dest)
        self.counters["misses"] += len(missing)
        slots, req.scratch = self.fetcher.admit_missing(ino, missing, before, req.bypass) \
            if missing else ({}, {})
        req.pinned += slots.values()
        # The write's blocks are in flight until its bytes are in their slots (or on their
        # way through): a read meanwhile would send a slot still being received, or fetch
        # a refused block's old bytes from the disks and, if its own admission decision
        # let it in, keep them after this write went through.
        req.job = _Fetch()
        self.fetcher.mark_inflight(ino, blocks, req.job)
        await self._fill_partial(ino, stripe, slots, req)

    async def _fill_partial(self, ino: int, stripe: Stripe, slots: dict[int, Slot],
                            req: _Write) -> None:
        """Read-modify-write: a new slot the write covers only partly needs the old bytes
        (for reads: only the written ranges go back, see ``Flusher.flush_file``)."""
        partial = {b: s for b, s in slots.items() if _merge(req.ranges[b]) != [(0, self.bs)]}
        if partial:
            try:
                await self.fetcher.fetch(ino, stripe, partial, {}, None)
            except BaseException:
                for b in slots:
                    self.store.remove((ino, b))
                raise
            self.fetcher.mark_inflight(ino, partial, req.job)  # the fetch's own mark is gone
        for b, s in slots.items():
            if b not in partial:
                s.valid = 0
            req.dest[b] = s

    async def _receive(self, regions: list[tuple[int, int]], sock, req: _Write) -> None:
        """Receive the bulk straight into the blocks' slots and the scratch buffer."""
        bs = self.bs
        req.sbuf = bytearray(len(req.scratch) * bs) if req.scratch else None
        sview = memoryview(req.sbuf) if req.sbuf is not None else None
        views: list[memoryview] = []
        for off, length in regions:  # the bulk's order
            for b in range(off // bs, (off + length - 1) // bs + 1):
                lo, hi = max(off - b * bs, 0), min(bs, off + length - b * bs)
                slot = req.dest.get(b)
                if slot is not None:
                    views.append(self.store.block_view(slot, lo, hi))
                else:
                    o = req.scratch[b]
                    views.append(sview[o + lo:o + hi])  # type: ignore[index]
        with trio.fail_after(self.timeout):
            await recv_views(sock, views)
        req.received = True

    def _land(self, ino: int, regions: list[tuple[int, int]], req: _Write) -> None:
        """The bytes are in: the file's known size grows, the slots' written ranges are
        dirty."""
        self.sizes[ino] = max(self.sizes.get(ino, 0), max(o + k for o, k in regions))
        log.debug("write ino %d %s: slots %s, through %s", ino, regions, sorted(req.dest),
                  sorted(req.scratch))
        for b, slot in req.dest.items():
            for lo, hi in _merge(req.ranges[b]):
                if lo > slot.valid:  # a hole inside the block reads as zeros
                    self.store.block_view(slot, slot.valid, lo)[:] = bytes(lo - slot.valid)
                slot.valid = max(slot.valid, hi)
                self.store.mark_dirty((ino, b), slot, lo, hi)

    async def _pass_through(self, ino: int, stripe: Stripe, req: _Write) -> None:
        """Refused blocks go through to the I/O daemons, in the background: the client is
        answered now, as for a buffered write (it keeps the bytes in its journal until a
        flush says they are written). Waiting here made every write-back of a refused
        segment wait for the disks (LU under runtime10: ~1 s per list write, while the local
        caches' written slabs stayed dirty and their fetched blocks found no buffer, so each
        node read its temporary slabs twice)."""
        bs, scratch = self.bs, req.scratch
        ext = [(b * bs + lo, hi - lo, scratch[b] + lo)
               for b in sorted(scratch) for lo, hi in _merge(req.ranges[b])]
        self.counters["write_through_blocks"] += len(scratch)
        th = _Through(set(scratch), req.sbuf, scratch,
                      {b for b in scratch if _merge(req.ranges[b]) == [(0, bs)]})
        await self.through.send(ino, stripe, ext, req.sbuf, th)  # type: ignore[arg-type]

    def _release(self, ino: int, req: _Write) -> None:
        """The write is over (done or failed): its blocks are no longer in flight, its slots
        unpinned, and it no longer counts as in progress."""
        if req.job is not None:
            self.fetcher.unmark_inflight(ino, req.ranges, req.job)
        self.store.unpin_all(req.pinned)
        if req.writing is not None:
            self.files.written(ino, req.writing)


def _block_ranges(regions: list[tuple[int, int]], bs: int) -> dict[int, list[tuple[int, int]]]:
    """Block -> the byte ranges of it the regions cover, in the regions' order."""
    ranges: dict[int, list[tuple[int, int]]] = {}
    for off, length in regions:
        for b in range(off // bs, (off + length - 1) // bs + 1):
            ranges.setdefault(b, []).append((max(off - b * bs, 0),
                                             min(bs, off + length - b * bs)))
    return ranges


def _merge(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted, merged ``[lo, hi)`` ranges (overlapping and touching ones joined)."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out
