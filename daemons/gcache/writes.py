"""The global cache daemon's write path: ``write`` and ``write_list``, and the write-through
of refused writes.

A write lands in slab slots (a partial block that is not cached is read first), is marked
dirty with the byte ranges it wrote (its blocks count as in flight until then: requests for
them wait, ``fetch.py``) and reaches the I/O daemons through the flusher
(``writeback.py``). A block the admission policy refuses is received into a scratch buffer,
the client is answered at once, and the bytes are written through to the I/O daemons in the
background (:class:`_Through`): writes, write-back, truncation and removal of those blocks
wait for it (``_wait_through``), reads too unless the write covers the block whole (then its
buffer answers them: ``_through_sources``), and its error comes with the file's next flush. No
client is told to bypass a segment this daemon holds dirty or in-flight written blocks of
(``_hints``): its direct writes would be overwritten by the older write.

``WritePath`` is a mixin of :class:`~.server.GcacheServer`: it uses the server's ``store``,
``policy``, ``stripes``, ``sizes``, ``through``, ``through_errors``, ``directory``,
``_background``, ``config``, ``data``, ``limiter``, ``epoch``, ``bs``, ``sb``, ``counters``,
and the other mixins' ``_settle``, ``_writing``/``_written`` (``fileops.py``),
``_admit_missing``, ``_fetch``, ``_unpin_all`` (``fetch.py``), ``_flush_some`` and
``flush_file`` (``writeback.py``).
"""

from __future__ import annotations

import errno
import logging

import trio

from pvfs.layout.stripe import Stripe
from pvfs.protocol import aio

from .fetch import _Fetch
from .sockio import recv_views
from .store import Slot
from .transfer import write_extents
from .writeback import DIRTY_HIGH

log = logging.getLogger("pvfs.gcache")


class _Through:
    """A refused write on its way to the I/O daemons in the background: requests that touch
    its blocks (writes, write-back, truncation, removal, and reads of blocks it covers only
    partly) wait for ``done`` first. A read of a block it writes whole takes the bytes from
    its buffer instead (``view``): they are what the I/O daemons will hold."""

    __slots__ = ("blocks", "done", "eof", "sbuf", "scratch", "whole")

    def __init__(self, blocks: set[int], sbuf: bytearray | None = None,
                 scratch: dict[int, int] | None = None, whole: set[int] | None = None) -> None:
        self.blocks = blocks
        self.done = trio.Event()
        self.sbuf = sbuf
        self.scratch = scratch or {}  # block -> its offset in sbuf
        self.whole = whole or set()  # the blocks this write covers from byte 0 to the end
        self.eof = None  # (read like a fetch's: whole blocks, never the end of the file)

    def view(self, b: int, bs: int) -> memoryview | None:
        """Block ``b``'s bytes if this write covers it whole, else None."""
        o = self.scratch.get(b)
        if b not in self.whole or o is None or self.sbuf is None:
            return None
        return memoryview(self.sbuf)[o:o + bs]


class WritePath:
    async def op_write(self, f: dict, n: int, sock) -> dict:
        return await self._write(f, [(f["offset"], n)], n, sock)

    async def op_write_list(self, f: dict, n: int, sock) -> dict:
        """List I/O: the bulk is the regions' bytes one after the other."""
        if sum(length for _, length in f["regions"]) != n:
            with trio.move_on_after(self.config.request_timeout):
                await aio.drain(sock, n)
            raise OSError(errno.EINVAL, "write_list: region lengths do not add up to the data")
        return await self._write(f, f["regions"], n, sock)

    async def _write(self, f: dict, regions: list[tuple[int, int]], n: int, sock) -> dict:
        ino, stripe = f["ino"], f["stripe"]
        self.stripes[ino] = stripe
        self.counters["writes"] += 1
        regions = [(off, length) for off, length in regions if length]
        if not regions:
            return {"n": 0, "bypass": [], "ttl": 0, "epoch": self.epoch}
        bs, sb = self.bs, self.sb
        # block -> the byte ranges of it the request writes, in request order
        ranges: dict[int, list[tuple[int, int]]] = {}
        for off, length in regions:
            for b in range(off // bs, (off + length - 1) // bs + 1):
                ranges.setdefault(b, []).append((max(off - b * bs, 0),
                                                 min(bs, off + length - b * bs)))
        blocks = sorted(ranges)
        received = False
        pinned: list[Slot] = []
        writing = None
        job: _Fetch | None = None
        try:
            if self.store.dirty_blocks > DIRTY_HIGH * self.store.nslots:
                await self._flush_some()
            before = {s: self.policy.access(ino, s) for s in sorted({b // sb for b in blocks})}
            await self._settle(ino, set(blocks))
            writing = self._writing(ino)
            dest: dict[int, Slot] = {}
            missing: list[int] = []
            for b in blocks:
                slot = self.store.get((ino, b))
                if slot is None:
                    missing.append(b)
                else:
                    slot.pins += 1
                    pinned.append(slot)
                    dest[b] = slot
                    self.store.touch((ino, b))
            self.counters["hits"] += len(dest)
            self.counters["misses"] += len(missing)
            bypass: set[int] = set()
            slots, scratch = self._admit_missing(ino, missing, before, bypass) \
                if missing else ({}, {})
            pinned += slots.values()
            # The write's blocks are in flight until its bytes are in their slots (or on their
            # way through): a read meanwhile would send a slot still being received, or fetch
            # a refused block's old bytes from the disks and, if its own admission decision
            # let it in, keep them after this write went through.
            job = _Fetch()
            self._mark_inflight(ino, blocks, job)
            # Read-modify-write: a new slot the write covers only partly needs the old bytes
            # (for reads: only the written ranges go back, see flush_file).
            partial = {b: s for b, s in slots.items() if _merge(ranges[b]) != [(0, bs)]}
            if partial:
                try:
                    await self._fetch(ino, stripe, partial, {}, None)
                except BaseException:
                    for b in slots:
                        self.store.remove((ino, b))
                    raise
                self._mark_inflight(ino, partial, job)  # the fetch's own mark is gone
            for b, s in slots.items():
                if b not in partial:
                    s.valid = 0
                dest[b] = s
            sbuf = bytearray(len(scratch) * bs) if scratch else None
            sview = memoryview(sbuf) if sbuf is not None else None
            views: list[memoryview] = []
            for off, length in regions:  # the bulk's order
                for b in range(off // bs, (off + length - 1) // bs + 1):
                    lo, hi = max(off - b * bs, 0), min(bs, off + length - b * bs)
                    slot = dest.get(b)
                    if slot is not None:
                        views.append(self.store.block_view(slot, lo, hi))
                    else:
                        o = scratch[b]
                        views.append(sview[o + lo:o + hi])  # type: ignore[index]
            with trio.fail_after(self.config.request_timeout):
                await recv_views(sock, views)
            received = True
            self.sizes[ino] = max(self.sizes.get(ino, 0), max(o + k for o, k in regions))
            log.debug("write ino %d %s: slots %s, through %s", ino, regions, sorted(dest),
                      sorted(scratch))
            for b, slot in dest.items():
                for lo, hi in _merge(ranges[b]):
                    if lo > slot.valid:  # a hole inside the block reads as zeros
                        self.store.block_view(slot, slot.valid, lo)[:] = bytes(lo - slot.valid)
                    slot.valid = max(slot.valid, hi)
                    self.store.mark_dirty((ino, b), slot, lo, hi)
            if scratch:
                # Refused blocks go through to the I/O daemons, in the background: the client
                # is answered now, as for a buffered write (it keeps the bytes in its journal
                # until a flush says they are written). Waiting here made every write-back of
                # a refused segment wait for the disks (LU under runtime10: ~1 s per list
                # write, while the local caches' written slabs stayed dirty and their fetched
                # blocks found no buffer, so each node read its temporary slabs twice).
                ext = [(b * bs + lo, hi - lo, scratch[b] + lo)
                       for b in sorted(scratch) for lo, hi in _merge(ranges[b])]
                self.counters["write_through_blocks"] += len(scratch)
                th = _Through(set(scratch), sbuf, scratch,
                              {b for b in scratch if _merge(ranges[b]) == [(0, bs)]})
                if self._background is None:
                    self.through.setdefault(ino, []).append(th)
                    await self._write_through(ino, stripe, ext, sbuf, th)  # type: ignore[arg-type]
                else:
                    self.through.setdefault(ino, []).append(th)
                    self._background.start_soon(self._write_through, ino, stripe, ext, sbuf,
                                                th)
            if bypass:
                self.counters["bypasses"] += len(bypass)
        except BaseException:
            if not received:
                # Keep the connection in sync: the bulk must be consumed before an error reply.
                with trio.move_on_after(self.config.request_timeout):
                    await aio.drain(sock, n)
            raise
        finally:
            if job is not None:
                self._unmark_inflight(ino, blocks, job)
            self._unpin_all(pinned)
            if writing is not None:
                self._written(ino, writing)
        if f["sync"]:
            await self.flush_file(ino)
        if f["invalidate"] and f["client"] is not None:
            for off, length in regions:
                self.counters["invalidations"] += await self.directory.invalidate(
                    f["client"], ino, off, length)
        # Refused writes are on their way to the I/O daemons: no hint for their segments yet
        # (see _hints); a later read miss may refuse and hint them.
        hints = self._hints(ino, bypass)
        return {"n": n, "bypass": hints, "ttl": self.policy.bypass_ttl if hints else 0,
                "epoch": self.epoch}

    async def _wait_through(self, ino: int, blocks: set[int] | None = None, *,
                            read: bool = False) -> None:
        """Wait until no refused write of ``blocks`` (None: of any block of the file) is on
        its way to the I/O daemons: what follows must see (or come after) it. For a
        ``read``, only for writes that cover one of its blocks partly: the others' bytes are
        in their buffers (see ``_through_sources``)."""
        t0 = None
        while True:
            th = next((t for t in self.through.get(ino, ())
                       if any((blocks is None or b in blocks)
                              and not (read and b in t.whole) for b in t.blocks)),
                      None)
            if th is None:
                if t0 is not None:
                    self.counters["through_waits"] += 1
                    self.counters["through_wait_ms"] += round((trio.current_time() - t0) * 1e3)
                return
            if t0 is None:
                t0 = trio.current_time()
            await th.done.wait()

    async def _write_through(self, ino: int, stripe: Stripe, ext: list, sbuf: bytearray,
                             th: _Through) -> None:
        """A refused write's bytes to the I/O daemons (see ``_write``)."""
        try:
            await trio.to_thread.run_sync(write_extents, self.data, ino, stripe, ext, sbuf,
                                          limiter=self.limiter)
            log.debug("write-through ino %d done: %s", ino, [(o, n) for o, n, _ in ext])
        except Exception as exc:  # noqa: BLE001 - not into the daemon's nursery: the next flush raises it
            self.counters["flush_errors"] += 1
            log.warning("write-through of inode %d failed: %s", ino, exc)
            self.through_errors.setdefault(
                ino, exc if isinstance(exc, OSError) else OSError(errno.EIO, str(exc)))
        finally:
            pending = self.through.get(ino, [])
            if th in pending:
                pending.remove(th)
            if not pending:
                self.through.pop(ino, None)
            th.done.set()

    def _through_sources(self, ino: int, blocks: list[int]) -> dict[int, _Through] | None:
        """For each of ``blocks`` a refused write on its way holds, that write, if it covers
        the block whole; None if one of them is covered only partly (wait for it first). At
        most one such write holds a block: a write waits for the one before it."""
        pending = self.through.get(ino)
        if not pending:
            return {}
        out: dict[int, _Through] = {}
        wanted = set(blocks)
        for t in pending:
            for b in t.blocks & wanted:
                if b not in t.whole:
                    return None
                out[b] = t
        return out

    def _dirty_in(self, ino: int, seg: int) -> bool:
        """Whether a block of segment ``seg`` of ``ino`` is dirty here, or on its way to the
        I/O daemons as a refused write."""
        get = self.store.get
        blocks = range(seg * self.sb, (seg + 1) * self.sb)
        if any((s := get((ino, b))) is not None and s.dirty for b in blocks):
            return True
        return any(b in t.blocks for t in self.through.get(ino, ()) for b in blocks)

    def _hints(self, ino: int, refused: set[int]) -> list[int]:
        """The refused segments a client may be told to bypass: not those with a dirty block
        here. The client would send its next writes of such a segment straight to the I/O
        daemons, and this daemon's later write-back of the older dirty copy would land over
        them."""
        return sorted(s for s in refused if not self._dirty_in(ino, s))


def _merge(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted, merged ``[lo, hi)`` ranges (overlapping and touching ones joined)."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out
