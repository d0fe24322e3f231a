"""The global cache daemon's read path: ``read`` and ``read_list``.

A read counts its segments with the policy, waits until its blocks are settled (no fetch in
flight, no truncation in progress, no refused write on its way that covers one of them only
partly: ``fileops.py``), pins the blocks it hits, fetches the ones it misses (admitted ones
into slots, refused ones into a scratch buffer, ``fetch.py``; blocks another request fetched
uncached while this one waited are taken from that fetch, and blocks a refused write on its
way to the I/O daemons covers whole from that write's buffer), and answers with the bytes straight from the slots and buffers
(``sendmsg``). A refused segment's reply carries the bypass hint (``"bypass"``, ``"ttl"``)
unless this daemon holds dirty blocks of it; a read that names its client records it as a
holder of the blocks (``coherence=sync``).

``ReadPath`` is a mixin of :class:`~.server.GcacheServer`: it uses the server's ``store``,
``policy``, ``stripes``, ``sizes``, ``directory``, ``epoch``, ``bs``, ``sb``, ``counters``,
and the other mixins' ``_settle`` (``fileops.py``), ``_admit_missing``, ``_fetch``,
``_unpin_all`` (``fetch.py``) and ``_hints`` (``writes.py``).
"""

from __future__ import annotations

import logging

from pvfs.layout.stripe import Stripe
from pvfs.protocol import aio
from pvfs.protocol.framing import frame

from .fetch import _Fetch
from .sockio import send_views
from .store import Slot
from .writes import _Through

log = logging.getLogger("pvfs.gcache")


class ReadPath:
    async def op_read(self, f: dict, sock) -> None:
        await self._read(f["ino"], f["stripe"], [(f["offset"], f["length"])], f["client"],
                         sock, listed=False)

    async def op_read_list(self, f: dict, sock) -> None:
        """List I/O: many regions of one file in one request and one reply (``ns``: the
        bytes of each region, short only at the end of the file), the misses of all of
        them fetched from the I/O daemons in one request per daemon."""
        await self._read(f["ino"], f["stripe"], f["regions"], f["client"], sock, listed=True)

    async def _read(self, ino: int, stripe: Stripe, regions: list[tuple[int, int]],
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
        first, last = blocks[0], blocks[-1]
        before = {s: self.policy.access(ino, s) for s in sorted({b // sb for b in blocks})}
        wanted = set(blocks)
        while True:
            waited = await self._settle(ino, wanted, read=True)
            # Blocks a refused write on its way covers whole: answered from its buffer (a
            # block it covers partly makes the next round wait for it).
            passing = self._through_sources(ino, blocks)
            if passing is not None:
                break
        pinned: list[Slot] = []
        src: dict[int, Slot] = {}
        missing: list[int] = []
        for b in blocks:
            slot = self.store.get((ino, b))
            if slot is None:
                missing.append(b)
                continue
            slot.pins += 1
            slot.hits += 1
            pinned.append(slot)
            src[b] = slot
            self.store.touch((ino, b))
            self.policy.hit(ino, b // sb)
        self.counters["hits"] += len(src)
        self.counters["misses"] += len(missing)
        bypass: set[int] = set()
        sbuf: bytearray | None = None
        scratch: dict[int, int] = {}
        borrowed: dict[int, _Fetch | _Through] = {}
        eof: int | None = None
        try:
            if missing:
                slots, scratch = self._admit_missing(ino, missing, before, bypass)
                pinned += slots.values()
                # Blocks another request fetched, uncached, while this one waited for it, and
                # blocks a refused write on its way to the I/O daemons covers whole: the same
                # admission decision as any miss, but no read of the disks.
                sources: dict[int, _Fetch | _Through] = {b: waited[b] for b in missing
                                                         if b in waited}
                sources.update((b, passing[b]) for b in missing if b in passing)
                for b, job in sources.items():
                    view = job.view(b, bs)
                    if view is None:
                        continue
                    self.counters["through_blocks" if isinstance(job, _Through)
                                  else "shared_blocks"] += 1
                    slot = slots.pop(b, None)
                    if slot is None:
                        del scratch[b]
                        borrowed[b] = job
                        continue
                    valid = bs if job.eof is None else max(0, min(bs, job.eof - b * bs))
                    self.store.block_view(slot)[:] = view
                    slot.valid = valid
                    src[b] = slot
                    if valid == 0:
                        self.store.remove((ino, b))
                if borrowed:
                    scratch = {b: i * bs for i, b in enumerate(sorted(scratch))}
                self.counters["refetched_blocks"] += sum(1 for b in (*slots, *scratch)
                                                         if b in waited)
                sbuf = bytearray(len(scratch) * bs) if scratch else None
                try:
                    if slots or scratch:
                        eof = await self._fetch(ino, stripe, slots, scratch, sbuf)
                except BaseException:
                    for b in slots:
                        self.store.remove((ino, b))
                    raise
                for b, s in slots.items():
                    src[b] = s
                    if s.valid == 0:  # past the end of the file: nothing to keep
                        self.store.remove((ino, b))
            if bypass:
                self.counters["bypasses"] += len(bypass)
                for seg in bypass:  # the client reads these directly from now on
                    for b in range(seg * sb, (seg + 1) * sb):
                        s = self.store.get((ino, b))
                        # Not a pinned one: a write may be receiving into it, not dirty yet
                        # (until 2026-11-26 its bytes then went into a freed slot and never
                        # reached the I/O daemons: fsx lost a write's first segment).
                        if s is not None and not s.dirty and not s.pins:
                            self.store.remove((ino, b))
            if client is not None and client in self.directory.clients:
                self.directory.hold(client, ino, first, last - first + 1)
            views: list[memoryview] = []
            ns: list[int] = []
            sview = memoryview(sbuf) if sbuf is not None else None
            size = self.sizes.get(ino, 0)
            for off, n in regions:
                got = 0
                for b in range(off // bs, (off + n - 1) // bs + 1) if n else ():
                    lo = off - b * bs if b * bs < off else 0
                    hi = min(bs, off + n - b * bs)
                    slot = src.get(b)
                    job = borrowed.get(b)
                    if slot is not None:
                        valid = max(slot.valid, min(bs, size - b * bs))
                        view = self.store.block_view(slot, lo, max(lo, min(hi, valid)))
                    elif job is not None:
                        valid = bs if job.eof is None else max(0, min(bs, job.eof - b * bs))
                        view = job.view(b, bs)[lo:max(lo, min(hi, valid))]  # type: ignore[index]
                    else:
                        o = scratch[b]
                        valid = bs if eof is None else max(0, min(bs, eof - b * bs))
                        view = sview[o + lo:o + max(lo, min(hi, valid))]  # type: ignore[index]
                    views.append(view)
                    got += len(view)
                    if valid < bs:
                        break
                ns.append(got)
            hints = self._hints(ino, bypass)
            if hints:
                log.debug("hint ino %d: %s", ino, hints)
            header = {"n": sum(ns), "bypass": hints,
                      "ttl": self.policy.bypass_ttl if hints else 0, "epoch": self.epoch}
            if listed:
                header["ns"] = ns
            await send_views(sock, [memoryview(frame(header, header["n"])), *views])
        finally:
            self._unpin_all(pinned)
