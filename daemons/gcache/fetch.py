"""The global cache daemon's misses: admission and fetching from the I/O daemons.

A missing block gets a slab slot if the admission policy (``pvfs.models.bypass``) admits it,
evicting the victim the store's scan prefers; otherwise it is read into a scratch buffer that
serves the request and is dropped (``_admit_missing``). ``_fetch`` reads both kinds from every
I/O daemon of the file at once through the C transfer (``transfer.py``), and registers the
blocks as in flight (:class:`_Fetch`): a request that needs one of them waits for that fetch
(``_wait_inflight``) and may take the bytes it read uncached instead of reading the disks
again.

``Fetching`` is a mixin of :class:`~.server.GcacheServer`: it uses the server's ``store``,
``policy``, ``inflight``, ``sizes``, ``bs``, ``sb``, ``data``, ``limiter`` and ``counters``.
"""

from __future__ import annotations

import trio

from pvfs.layout.stripe import Stripe

from .store import Slot
from .transfer import read_extents

Key = tuple[int, int]


class _Fetch:
    """One fetch from the I/O daemons in progress (or one write being received: then it has
    no bytes to share): requests that need its blocks wait for ``done``; afterwards a fetch's
    refused blocks' bytes stay readable in ``sbuf`` (at ``scratch[block]``) for them, so a
    block refused for one request and wanted by another that waited is not read from the
    disks twice."""

    __slots__ = ("done", "eof", "ok", "sbuf", "scratch")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.ok = False
        self.sbuf: bytearray | None = None
        self.scratch: dict[int, int] = {}
        self.eof: int | None = None

    def view(self, b: int, bs: int) -> memoryview | None:
        """Block ``b``'s bytes (zeros past the end of the file) if this fetch read it into
        its scratch buffer, else None."""
        o = self.scratch.get(b)
        if not self.ok or o is None or self.sbuf is None:
            return None
        return memoryview(self.sbuf)[o:o + bs]


class Fetching:
    async def _wait_inflight(self, ino: int,
                             blocks: set[int] | None = None) -> dict[int, _Fetch]:
        """Wait until none of ``blocks`` (None: no block of the file) is being fetched by
        another request; the blocks waited for and the fetch each was part of."""
        waited: dict[int, _Fetch] = {}
        while True:
            busy = [(b, job) for (i, b), job in self.inflight.items()
                    if i == ino and (blocks is None or b in blocks)] if self.inflight else []
            if not busy:
                if waited:
                    self.counters["inflight_waits"] += 1
                return waited
            waited.update(busy)
            await busy[0][1].done.wait()

    def _mark_inflight(self, ino: int, blocks, job: _Fetch) -> None:
        """Mark ``blocks`` of ``ino`` as being brought in by ``job`` (requests that need them
        wait for it: ``_wait_inflight``)."""
        for b in blocks:
            self.inflight[(ino, b)] = job

    def _unmark_inflight(self, ino: int, blocks, job: _Fetch) -> None:
        """``job`` is over: its blocks are no longer in flight (unless another job took them)."""
        for b in blocks:
            if self.inflight.get((ino, b)) is job:
                del self.inflight[(ino, b)]
        job.done.set()

    def _prefer(self, key: Key) -> bool:
        return self.policy.good_victim(key[0], key[1] // self.sb)

    def _place(self, key: Key, before: int) -> tuple[Slot | None, bool]:
        """A pinned slot for missing block ``key`` if the policy admits it (evicting one block
        if needed); else ``(None, refused)`` — refused by the policy, or no clean block to
        evict (then the block is served uncached this once, without a bypass hint)."""
        victim = None if self.store.has_room() else self.store.victim(self._prefer)
        if not self.store.has_room() and victim is None:
            return None, False
        vseg = None if victim is None else (victim[0], victim[1] // self.sb)
        if not self.policy.admit(key[0], key[1] // self.sb, before, vseg):
            return None, True
        if victim is not None:
            old = self.store.remove(victim)
            if old is not None:
                self.policy.evicted(victim[0], victim[1] // self.sb, old.hits)
            self.counters["evictions"] += 1
        self.counters["admissions"] += 1
        return self.store.insert(key), False

    def _admit_missing(self, ino: int, missing: list[int], before: dict[int, int],
                       bypass: set[int]) -> tuple[dict[int, Slot], dict[int, int]]:
        """Slots for the admitted missing blocks, scratch offsets for the others (whose
        segments go into ``bypass`` when the policy refused them)."""
        slots: dict[int, Slot] = {}
        scratch: dict[int, int] = {}
        for b in missing:
            seg = b // self.sb
            slot, refused = (None, True) if seg in bypass else \
                self._place((ino, b), before.get(seg, 0))
            if slot is None:
                if refused:
                    bypass.add(seg)
                scratch[b] = len(scratch) * self.bs
            else:
                slots[b] = slot
        self.counters["bypassed_blocks"] += len(scratch)
        return slots, scratch

    async def _fetch(self, ino: int, stripe: Stripe, slots: dict[int, Slot],
                     scratch: dict[int, int], sbuf: bytearray | None) -> int | None:
        """Read blocks from the I/O daemons: ``slots`` (block -> pinned slot) into the slab,
        ``scratch`` (block -> offset in ``sbuf``) into a scratch buffer. Returns the file
        size if the fetch reached its end, else None. Requests waiting for these blocks
        meanwhile may take the scratch blocks' bytes afterwards (:class:`_Fetch`)."""
        bs = self.bs
        slab_ext = [(b * bs, bs, s.idx * bs) for b, s in sorted(slots.items())]
        scr_ext = [(b * bs, bs, o) for b, o in sorted(scratch.items())]
        keys = [(ino, b) for b in (*slots, *scratch)]
        if slots and scratch:
            self.counters["mixed_fetches"] += 1
        job = _Fetch()
        for k in keys:
            self.inflight[k] = job
        self.counters["fetches"] += 1
        self.counters["fetched_blocks"] += len(keys)

        def work() -> int | None:
            sizes = [read_extents(self.data, ino, stripe, slab_ext, self.store.slab),
                     read_extents(self.data, ino, stripe, scr_ext, sbuf)]
            known = [s for s in sizes if s is not None]
            return max(known) if known else None

        try:
            eof = await trio.to_thread.run_sync(work, limiter=self.limiter)
        finally:
            for k in keys:
                if self.inflight.get(k) is job:
                    del self.inflight[k]
            job.done.set()
        if eof is not None:
            self.sizes[ino] = max(self.sizes.get(ino, 0), eof)
        else:
            reach = max((b + 1) * bs for b in (*slots, *scratch))
            self.sizes[ino] = max(self.sizes.get(ino, 0), reach)
        for b, s in slots.items():
            s.valid = bs if eof is None else max(0, min(bs, eof - b * bs))
            if s.valid < bs:
                self.store.block_view(s, s.valid)[:] = bytes(bs - s.valid)
        if eof is not None and sbuf is not None:
            for b, o in scratch.items():
                valid = max(0, min(bs, eof - b * bs))
                if valid < bs:
                    sbuf[o + valid:o + bs] = bytes(bs - valid)
        # Only now (the waiters run after this task's next await): the bytes are complete.
        job.sbuf, job.scratch, job.eof, job.ok = sbuf, scratch, eof, True
        return eof

    def _unpin_all(self, slots: list[Slot]) -> None:
        for s in slots:
            self.store.unpin(s)
