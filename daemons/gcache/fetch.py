"""The global cache daemon's misses: admission and fetching from the I/O daemons.

A missing block gets a slab slot if the admission policy (``pvfs.models.bypass``) admits it,
evicting the victim the store's scan prefers; otherwise it is read into a scratch buffer that
serves the request and is dropped (:meth:`Fetcher.admit_missing`). :meth:`Fetcher.fetch` reads
both kinds from every I/O daemon of the file at once, through the C transfer in a worker
thread (``transfer.py``) or, for a fetch of a few blocks, from the trio thread (``iodlink.py``),
and registers the blocks as in flight (:class:`_Fetch`): a request that needs one of them
waits for that fetch (:meth:`Fetcher.wait_inflight`) and may take the bytes it read uncached
instead of reading the disks again.
"""

from __future__ import annotations

from collections.abc import Iterable

import trio

from pvfs.client.datapath import DataPath
from pvfs.layout.stripe import Stripe

from .iodlink import SMALL_BYTES, IodLinks
from .store import BlockStore, Slot
from .transfer import read_extents

Key = tuple[int, int]


def block_valid(eof: int | None, b: int, bs: int) -> int:
    """Bytes of block ``b`` that exist when the file ends at ``eof`` (None: not at its end)."""
    return bs if eof is None else max(0, min(bs, eof - b * bs))


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


class Fetcher:
    """The misses of one global cache daemon, and the blocks in flight.

    Its interface: :meth:`admit_missing` (a slot or a scratch offset for each missing block),
    :meth:`fetch` (read them from the I/O daemons), :meth:`wait_inflight` (wait until no
    other request brings in a block), :meth:`mark_inflight` / :meth:`unmark_inflight` (a
    write being received counts as in flight too), and ``inflight`` (block -> job) for the
    daemon's status. It needs nothing from the other parts.

    Args:
        store: the slab the admitted blocks go into.
        policy: the admission policy (the daemon replaces it at run time: ``policy``).
        sizes: bytes known to exist per file, shared with the other parts: a fetch raises it
            to what it found.
        data: the I/O daemons' data path.
        limiter: the threads the transfers run in.
        counters: the daemon's counters.
        segment_blocks: blocks per segment (the policy's unit).
        links: the I/O daemons' trio connections, for fetches of at most ``SMALL_BYTES``
            (``iodlink.py``); None: every fetch through the native transfer.
    """

    def __init__(self, store: BlockStore, policy, sizes: dict[int, int], data: DataPath,
                 limiter: trio.CapacityLimiter, counters: dict[str, int],
                 segment_blocks: int, links: IodLinks | None = None) -> None:
        self.store = store
        self.policy = policy
        self.sizes = sizes
        self.data = data
        self.limiter = limiter
        self.counters = counters
        self.bs = store.block_size
        self.sb = segment_blocks
        self.inflight: dict[Key, _Fetch] = {}
        self.links = links

    async def wait_inflight(self, ino: int,
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

    def mark_inflight(self, ino: int, blocks: Iterable[int], job: _Fetch) -> None:
        """Mark ``blocks`` of ``ino`` as being brought in by ``job`` (requests that need them
        wait for it: :meth:`wait_inflight`)."""
        for b in blocks:
            self.inflight[(ino, b)] = job

    def unmark_inflight(self, ino: int, blocks: Iterable[int], job: _Fetch) -> None:
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

    def admit_missing(self, ino: int, missing: list[int], before: dict[int, int],
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

    async def fetch(self, ino: int, stripe: Stripe, slots: dict[int, Slot],
                    scratch: dict[int, int], sbuf: bytearray | None) -> int | None:
        """Read blocks from the I/O daemons: ``slots`` (block -> pinned slot) into the slab,
        ``scratch`` (block -> offset in ``sbuf``) into a scratch buffer. Returns the file
        size if the fetch reached its end, else None. Requests waiting for these blocks
        meanwhile may take the scratch blocks' bytes afterwards (:class:`_Fetch`)."""
        bs = self.bs
        slab_ext = [(b * bs, bs, s.idx * bs) for b, s in sorted(slots.items())]
        scr_ext = [(b * bs, bs, o) for b, o in sorted(scratch.items())]
        blocks = [*slots, *scratch]
        if slots and scratch:
            self.counters["mixed_fetches"] += 1
        job = _Fetch()
        self.mark_inflight(ino, blocks, job)
        self.counters["fetches"] += 1
        self.counters["fetched_blocks"] += len(blocks)

        def work() -> int | None:
            sizes = [read_extents(self.data, ino, stripe, slab_ext, self.store.slab),
                     read_extents(self.data, ino, stripe, scr_ext, sbuf)]
            known = [s for s in sizes if s is not None]
            return max(known) if known else None

        try:
            if self.links is not None and len(blocks) * bs <= SMALL_BYTES:
                # A miss of a few blocks: no worker thread and its two wake-ups (iodlink.py).
                self.counters["small_fetches"] += 1
                eof = await self.links.read_extents(
                    ino, stripe, [(slab_ext, self.store.slab), (scr_ext, sbuf)])
            else:
                eof = await trio.to_thread.run_sync(work, limiter=self.limiter)
        finally:
            self.unmark_inflight(ino, blocks, job)
        reach = eof if eof is not None else max((b + 1) * bs for b in blocks)
        self.sizes[ino] = max(self.sizes.get(ino, 0), reach)
        for b, s in slots.items():
            s.valid = block_valid(eof, b, bs)
            if s.valid < bs:
                self.store.block_view(s, s.valid)[:] = bytes(bs - s.valid)
        if eof is not None and sbuf is not None:
            for b, o in scratch.items():
                valid = block_valid(eof, b, bs)
                if valid < bs:
                    sbuf[o + valid:o + bs] = bytes(bs - valid)
        # Only now (the waiters run after this task's next await): the bytes are complete.
        job.sbuf, job.scratch, job.eof, job.ok = sbuf, scratch, eof, True
        return eof
