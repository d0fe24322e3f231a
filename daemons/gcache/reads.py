"""The global cache daemon's read path: ``read`` and ``read_list``.

A read counts its segments with the policy, waits until its blocks are settled (no fetch in
flight, no truncation in progress, no refused write on its way that covers one of them only
partly: ``fileops.py``), pins the blocks it hits, fetches the ones it misses (admitted ones
into slots, refused ones into a scratch buffer, ``fetch.py``; blocks another request fetched
uncached while this one waited are taken from that fetch, and blocks a refused write on its
way to the I/O daemons covers whole from that write's buffer, ``through.py``), and answers
with the bytes straight from the slots and buffers (``sendmsg``). A refused segment's reply
carries the bypass hint (``"bypass"``, ``"ttl"``) unless this daemon holds dirty blocks of
it; a read that names its client records it as a holder of the blocks (``coherence=sync``).
"""

from __future__ import annotations

import logging

from pvfs.layout.stripe import Stripe
from pvfs.protocol import aio
from pvfs.protocol.framing import frame

from ..holders import HolderDirectory
from .fetch import Fetcher, _Fetch, block_valid
from .fileops import FileOps
from .sockio import send_views
from .store import BlockStore, Slot
from .through import WriteThrough, _Through

log = logging.getLogger("pvfs.gcache")


class _Read:
    """One read's state between its steps: where each block's bytes are."""

    __slots__ = ("borrowed", "bypass", "eof", "pinned", "sbuf", "scratch", "src")

    def __init__(self) -> None:
        self.pinned: list[Slot] = []  # unpinned when the read is over
        self.src: dict[int, Slot] = {}  # block -> the slot with its bytes
        self.scratch: dict[int, int] = {}  # block -> its offset in sbuf (fetched uncached)
        self.sbuf: bytearray | None = None
        self.borrowed: dict[int, _Fetch | _Through] = {}  # block -> another job's buffer
        self.eof: int | None = None  # the file's size, if this read's fetch met its end
        self.bypass: set[int] = set()  # the segments the policy refused


class ReadPath:
    """The reads of one global cache daemon.

    Its interface: :meth:`read` and :meth:`read_list`, the handlers of those requests (they
    answer on the socket themselves). It needs from the other parts: ``settle`` (``files``),
    ``admit_missing`` and ``fetch`` (``fetcher``), ``sources`` and ``hints`` (``through``).

    Args:
        store: the slab.
        policy: the admission policy (the daemon replaces it at run time: ``policy``).
        files, fetcher, through: the parts it waits for and fetches through.
        directory: the holder directory (``coherence=sync``).
        stripes, sizes: per file, shared with the other parts (a read sets its file's stripe).
        counters: the daemon's counters.
        epoch: told with every reply.
        segment_blocks: blocks per segment.
    """

    def __init__(self, *, store: BlockStore, policy, files: FileOps, fetcher: Fetcher,
                 through: WriteThrough, directory: HolderDirectory, stripes: dict[int, Stripe],
                 sizes: dict[int, int], counters: dict[str, int], epoch: int,
                 segment_blocks: int) -> None:
        self.store = store
        self.policy = policy
        self.files = files
        self.fetcher = fetcher
        self.through = through
        self.directory = directory
        self.stripes = stripes
        self.sizes = sizes
        self.counters = counters
        self.epoch = epoch
        self.bs = store.block_size
        self.sb = segment_blocks

    async def read(self, f: dict, sock) -> None:
        await self._serve(f["ino"], f["stripe"], [(f["offset"], f["length"])], f["client"],
                          sock, listed=False)

    async def read_list(self, f: dict, sock) -> None:
        """List I/O: many regions of one file in one request and one reply (``ns``: the
        bytes of each region, short only at the end of the file), the misses of all of
        them fetched from the I/O daemons in one request per daemon."""
        await self._serve(f["ino"], f["stripe"], f["regions"], f["client"], sock, listed=True)

    async def _serve(self, ino: int, stripe: Stripe, regions: list[tuple[int, int]],
                     client: str | None, sock, *, listed: bool) -> None:
        self.stripes[ino] = stripe
        self.counters["reads"] += 1
        bs, sb = self.bs, self.sb
        blocks = sorted({b for off, n in regions if n
                         for b in range(off // bs, (off + n - 1) // bs + 1)})
        if not blocks:
            await aio.send_frame(sock, {"n": 0, "ns": [0] * len(regions), "bypass": [],
                                        "ttl": 0, "epoch": self.epoch})
            return
        before = {s: self.policy.access(ino, s) for s in sorted({b // sb for b in blocks})}
        waited, passing = await self._settle(ino, blocks)
        req = _Read()
        try:
            missing = self._pin_hits(ino, blocks, req)
            if missing:
                await self._fill_misses(ino, stripe, missing, before, waited, passing, req)
            if req.bypass:
                self._drop_bypassed(ino, req.bypass)
            if client is not None and client in self.directory.clients:
                self.directory.hold(client, ino, blocks[0], blocks[-1] - blocks[0] + 1)
            await self._reply(ino, regions, req, sock, listed)
        finally:
            self.store.unpin_all(req.pinned)

    async def _settle(self, ino: int, blocks: list[int]
                      ) -> tuple[dict[int, _Fetch], dict[int, _Through]]:
        """Wait until the read's blocks are settled (``FileOps.settle``) and none is covered
        only partly by a refused write on its way; the fetches waited for, and the refused
        writes that cover blocks of the read whole."""
        wanted = set(blocks)
        while True:
            waited = await self.files.settle(ino, wanted, read=True)
            # Blocks a refused write on its way covers whole: answered from its buffer (a
            # block it covers partly makes the next round wait for it).
            passing = self.through.sources(ino, blocks)
            if passing is not None:
                return waited, passing

    def _pin_hits(self, ino: int, blocks: list[int], req: _Read) -> list[int]:
        """Pin the cached blocks (the hits) as their sources; the missing blocks."""
        missing: list[int] = []
        for b in blocks:
            slot = self.store.get((ino, b))
            if slot is None:
                missing.append(b)
                continue
            slot.pins += 1
            slot.hits += 1
            req.pinned.append(slot)
            req.src[b] = slot
            self.store.touch((ino, b))
            self.policy.hit(ino, b // self.sb)
        self.counters["hits"] += len(req.src)
        self.counters["misses"] += len(missing)
        return missing

    async def _fill_misses(self, ino: int, stripe: Stripe, missing: list[int],
                           before: dict[int, int], waited: dict[int, _Fetch],
                           passing: dict[int, _Through], req: _Read) -> None:
        """The missing blocks: admitted ones into new slots, the others into a scratch
        buffer; from another job's bytes where one has them, else from the I/O daemons."""
        bs = self.bs
        slots, req.scratch = self.fetcher.admit_missing(ino, missing, before, req.bypass)
        req.pinned += slots.values()
        # Blocks another request fetched, uncached, while this one waited for it, and
        # blocks a refused write on its way to the I/O daemons covers whole: the same
        # admission decision as any miss, but no read of the disks.
        sources: dict[int, _Fetch | _Through] = {b: waited[b] for b in missing if b in waited}
        sources.update((b, passing[b]) for b in missing if b in passing)
        self._borrow(ino, sources, slots, req)
        if req.borrowed:
            req.scratch = {b: i * bs for i, b in enumerate(sorted(req.scratch))}
        self.counters["refetched_blocks"] += sum(1 for b in (*slots, *req.scratch)
                                                 if b in waited)
        req.sbuf = bytearray(len(req.scratch) * bs) if req.scratch else None
        try:
            if slots or req.scratch:
                req.eof = await self.fetcher.fetch(ino, stripe, slots, req.scratch, req.sbuf)
        except BaseException:
            for b in slots:
                self.store.remove((ino, b))
            raise
        for b, s in slots.items():
            req.src[b] = s
            if s.valid == 0:  # past the end of the file: nothing to keep
                self.store.remove((ino, b))

    def _borrow(self, ino: int, sources: dict[int, _Fetch | _Through],
                slots: dict[int, Slot], req: _Read) -> None:
        """Take the blocks ``sources`` hold the bytes of: into the block's new slot (taken
        out of ``slots``, not to be fetched), or, for a block not admitted, straight from the
        job's buffer (``req.borrowed``, out of ``req.scratch``)."""
        bs = self.bs
        for b, job in sources.items():
            view = job.view(b, bs)
            if view is None:
                continue
            self.counters["through_blocks" if isinstance(job, _Through)
                          else "shared_blocks"] += 1
            slot = slots.pop(b, None)
            if slot is None:
                del req.scratch[b]
                req.borrowed[b] = job
                continue
            valid = block_valid(job.eof, b, bs)
            self.store.block_view(slot)[:] = view
            slot.valid = valid
            req.src[b] = slot
            if valid == 0:
                self.store.remove((ino, b))

    def _drop_bypassed(self, ino: int, bypass: set[int]) -> None:
        """The client reads the refused segments directly from now on: drop their clean,
        unpinned blocks."""
        self.counters["bypasses"] += len(bypass)
        for seg in bypass:
            for b in range(seg * self.sb, (seg + 1) * self.sb):
                s = self.store.get((ino, b))
                # Not a pinned one: a write may be receiving into it, not dirty yet
                # (until 2026-11-26 its bytes then went into a freed slot and never
                # reached the I/O daemons: fsx lost a write's first segment).
                if s is not None and not s.dirty and not s.pins:
                    self.store.remove((ino, b))

    def _views(self, ino: int, regions: list[tuple[int, int]],
               req: _Read) -> tuple[list[memoryview], list[int]]:
        """The reply's bytes, as views of the slots and buffers, each region's up to the end
        of the file; and each region's length."""
        bs = self.bs
        views: list[memoryview] = []
        ns: list[int] = []
        sview = memoryview(req.sbuf) if req.sbuf is not None else None
        size = self.sizes.get(ino, 0)
        for off, n in regions:
            got = 0
            for b in range(off // bs, (off + n - 1) // bs + 1) if n else ():
                lo = off - b * bs if b * bs < off else 0
                hi = min(bs, off + n - b * bs)
                slot = req.src.get(b)
                job = req.borrowed.get(b)
                if slot is not None:
                    valid = max(slot.valid, min(bs, size - b * bs))
                    view = self.store.block_view(slot, lo, max(lo, min(hi, valid)))
                elif job is not None:
                    valid = block_valid(job.eof, b, bs)
                    view = job.view(b, bs)[lo:max(lo, min(hi, valid))]  # type: ignore[index]
                else:
                    o = req.scratch[b]
                    valid = block_valid(req.eof, b, bs)
                    view = sview[o + lo:o + max(lo, min(hi, valid))]  # type: ignore[index]
                views.append(view)
                got += len(view)
                if valid < bs:
                    break
            ns.append(got)
        return views, ns

    async def _reply(self, ino: int, regions: list[tuple[int, int]], req: _Read, sock,
                     listed: bool) -> None:
        """Send the header (length, bypass hints, epoch; ``ns`` for a list read) and the
        bytes straight from the slots and buffers."""
        views, ns = self._views(ino, regions, req)
        hints = self.through.hints(ino, req.bypass)
        if hints:
            log.debug("hint ino %d: %s", ino, hints)
        header = {"n": sum(ns), "bypass": hints,
                  "ttl": self.policy.bypass_ttl if hints else 0, "epoch": self.epoch}
        if listed:
            header["ns"] = ns
        await send_views(sock, [memoryview(frame(header, header["n"])), *views])
