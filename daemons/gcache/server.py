"""The global cache daemon (discretionary-caching paper §3.2 "Global Cache", §5; SPEC §6).

One user-level daemon per ``[gcache]`` address; files are spread over them by inode and every
node's local cache (and every application) shares them. A read fetches the blocks it misses
from all the file's I/O daemons at once (straight into slab slots, ``transfer.py``) and
answers with the bytes; a write lands in slots, is marked dirty and reaches the I/O daemons
through this daemon's own flusher; ``fsync`` writes the file's dirty blocks back and syncs the
I/O daemons before it answers.

Admission is a policy (``pvfs.models.bypass``): a missing block whose segment the policy
refuses is served without entering the cache, and the reply tells the client to bypass that
segment (``"bypass": [segments], "ttl": accesses``), as the paper's runtime bypass does in its
read response. A refused write is acknowledged once received and written through in the
background (reads, writes, write-back and truncation of its blocks wait for it), and no
client is told to bypass a segment this daemon holds dirty or in-flight written blocks of (its
direct writes would be overwritten by the older write). A request that waited for another's
fetch takes the bytes that fetch read uncached.

Truncation is fenced: ``truncate`` with ``fence`` drops the blocks past the new end and then
holds every read and write of the file until the client says the I/O daemons are truncated
too (``truncated``), or a timeout passes. A fetch in that window would read bytes the I/O
daemons are about to drop and cache them past the end, where a later truncation up would
expose them (fsx found this: a read-ahead that reached this daemon in the window).

``coherence=sync`` clients register here as at the I/O daemons (``cb_register``); a read that
names its client records it as holder of the blocks, and a write with ``invalidate`` calls back
every other holder before it answers (the directory is ``daemons/iod/coherence.py``'s).
"""

from __future__ import annotations

import errno
import functools
import logging
import secrets
import time

import trio

from pvfs import __version__
from pvfs.client.datapath import DataPath
from pvfs.config import Config
from pvfs.gcache.config import gcache_config
from pvfs.layout.stripe import Stripe
from pvfs.models.bypass import make_policy
from pvfs.protocol import aio, auth
from pvfs.protocol.framing import frame

from ..common import serve_tcp
from ..iod.coherence import HolderDirectory
from .schema import GCACHE_SCHEMAS
from .sockio import recv_views, send_views
from .store import BlockStore, Slot
from .transfer import read_extents, write_extents
from .writeback import DIRTY_HIGH, WriteBack

log = logging.getLogger("pvfs.gcache")

Key = tuple[int, int]

#: A truncation's fence lasts at most this many request timeouts (its client's call to the
#: manager has failed by then).
FENCE_TIMEOUTS = 2
#: Beyond any block of any file.
MAX_BLOCK = 1 << 62


COUNTERS = ("reads", "writes", "hits", "misses", "admissions", "bypasses", "bypassed_blocks",
            "evictions", "flushes", "flushed_blocks", "fetches", "fetched_blocks",
            "write_through_blocks", "flush_errors", "fsyncs", "invalidations",
            "inflight_waits", "refetched_blocks", "mixed_fetches", "shared_blocks")


class _Through:
    """A refused write on its way to the I/O daemons in the background: requests that touch
    its blocks (reads, writes, write-back, truncation) wait for ``done`` first."""

    __slots__ = ("blocks", "done")

    def __init__(self, blocks: set[int]) -> None:
        self.blocks = blocks
        self.done = trio.Event()


class _Fence:
    """A truncation of a file in progress (between ``truncate`` and ``truncated``): reads and
    writes of the file wait for ``done``, at most until ``deadline``."""

    __slots__ = ("count", "deadline", "done")

    def __init__(self, deadline: float) -> None:
        self.count = 1
        self.deadline = deadline
        self.done = trio.Event()


class _Fetch:
    """One fetch from the I/O daemons in progress: requests that need its blocks wait for
    ``done``; afterwards its refused blocks' bytes stay readable in ``sbuf`` (at
    ``scratch[block]``) for them, so a block refused for one request and wanted by another
    that waited is not read from the disks twice."""

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


class GcacheServer(WriteBack):
    """One global cache daemon of a file system.

    Args:
        config: the file system (its ``[gcache]`` table must list this daemon).
        index: this daemon's place in ``[gcache].addresses``.
    """

    def __init__(self, config: Config, index: int) -> None:
        g = gcache_config(config)
        if g is None or not 0 <= index < g.count:
            raise ValueError(f"the config has no global cache #{index}")
        self.config = config
        self.gconf = g
        self.index = index
        self.endpoint = g.endpoints[index]
        self.bs = g.block_size
        self.sb = g.segment_blocks
        self.store = BlockStore(g.capacity, g.block_size)
        self.data = DataPath(config)
        self.limiter = trio.CapacityLimiter(8)
        self.policy = make_policy(g.policy, g.threshold, self.store.nslots)
        self.directory = HolderDirectory(config.request_timeout)
        self.stripes: dict[int, Stripe] = {}
        # Bytes known to exist per file (fetches that met the end, writes, truncates): a block
        # short of a full one ends the file only if it reaches this far; before, its missing
        # tail is a hole (zeros: a slot's bytes past ``valid`` are always zero).
        self.sizes: dict[int, int] = {}
        self.inflight: dict[Key, _Fetch] = {}
        # Refused writes being written through in the background, and their errors (raised
        # by the file's next write-back, as a write-back error is).
        self.through: dict[int, list[_Through]] = {}
        self.through_errors: dict[int, OSError] = {}
        # Files being truncated: their I/O daemons may still hold the bytes past the new end.
        self.fences: dict[int, _Fence] = {}
        # Writes past their wait for a fence, per file (a truncation waits for them).
        self.writing: dict[int, list] = {}
        self._background: trio.Nursery | None = None
        self.file_locks: dict[int, trio.Lock] = {}
        self.counters = dict.fromkeys(COUNTERS, 0)
        self.started = time.time()
        # Told to clients with every write and flush: a new value means a restarted daemon
        # that lost whatever was dirty (clients then write their journal themselves).
        self.epoch = secrets.randbits(52)
        self.address: tuple[str, int] | None = None
        self.key = auth.key_for(config)  # None: authentication off
        self._kick = trio.Event()
        self._flushed = trio.Event()

    # ------------------------------------------------------------------ serving
    async def serve(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self.address = await nursery.start(functools.partial(
                serve_tcp, self.endpoint.host, self.endpoint.port, GCACHE_SCHEMAS,
                self.dispatch, key=self.key))
            nursery.start_soon(self._flusher)
            self._background = nursery
            log.info("global cache %d serving %s:%d: %d blocks of %d B, policy %s",
                     self.index, *self.address[:2], self.store.nslots, self.bs,
                     self.policy.name)
            task_status.started(self.address)
        self.data.close()

    async def dispatch(self, op: str, f: dict, bulk_len: int, sock) -> dict | None:
        if op == "read":
            return await self.op_read(f, sock)
        if op == "write":
            return await self.op_write(f, bulk_len, sock)
        if op == "read_list":
            return await self.op_read_list(f, sock)
        if op == "write_list":
            return await self.op_write_list(f, bulk_len, sock)
        if op == "cb_register":
            await self.directory.serve_client(f["client"], f["block_size"], sock)
            return None
        handler = getattr(self, f"op_{op}")
        return await handler(f)

    async def op_ping(self, f: dict) -> dict:
        return {"version": __version__, "index": self.index, "role": "gcache",
                "uptime": time.time() - self.started}

    async def op_status(self, f: dict) -> dict:
        return {"version": __version__, "index": self.index, "role": "gcache",
                "uptime": time.time() - self.started, "pid": _pid(),
                "open_files": len(self.store.files), "jobs": len(self.inflight),
                "scheduler": f"gcache/{self.policy.name}"}

    async def op_stats(self, f: dict) -> dict:
        out = self.stats()
        if f["reset"]:
            self.counters = dict.fromkeys(COUNTERS, 0)
        return out

    def stats(self) -> dict:
        out: dict = {"index": self.index, "role": "gcache"}
        out.update(self.counters)
        looked = self.counters["hits"] + self.counters["misses"]
        out["hit_rate"] = self.counters["hits"] / looked if looked else 0.0
        out.update(blocks_cached=len(self.store), capacity_blocks=self.store.nslots,
                   dirty_blocks=self.store.dirty_blocks, block_size=self.bs,
                   segment_blocks=self.sb, files=len(self.store.files))
        out.update(self.policy.stats())
        out["holders"] = len(self.directory.clients)
        return out

    # ------------------------------------------------------------------ helpers
    def _lock(self, ino: int) -> trio.Lock:
        lock = self.file_locks.get(ino)
        if lock is None:
            lock = self.file_locks[ino] = trio.Lock()
        return lock

    async def _wait_inflight(self, ino: int, first: int, last: int) -> dict[int, _Fetch]:
        """Wait until no block of ``first..last`` is being fetched by another request; the
        blocks waited for and the fetch each was part of."""
        waited: dict[int, _Fetch] = {}
        while True:
            busy = [(b, job) for (i, b), job in self.inflight.items()
                    if i == ino and first <= b <= last] if self.inflight else []
            if not busy:
                if waited:
                    self.counters["inflight_waits"] += 1
                return waited
            waited.update(busy)
            await busy[0][1].done.wait()

    async def _settle(self, ino: int, first: int, last: int) -> dict[int, _Fetch]:
        """Wait until blocks ``first..last`` of ``ino`` have no refused write on its way,
        no fetch in flight, and the file is not being truncated; the fetches waited for
        (none if a truncation was: what they read may be gone). Returns without yielding
        once all three hold, so the caller's next steps see that state."""
        waited: dict[int, _Fetch] = {}
        while True:
            await self._wait_through(ino, first, last)
            waited.update(await self._wait_inflight(ino, first, last))
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

    def _dirty_in(self, ino: int, seg: int) -> bool:
        """Whether a block of segment ``seg`` of ``ino`` is dirty here, or on its way to the
        I/O daemons as a refused write."""
        get = self.store.get
        blocks = range(seg * self.sb, (seg + 1) * self.sb)
        if any((s := get((ino, b))) is not None and s.dirty for b in blocks):
            return True
        return any(b in t.blocks for t in self.through.get(ino, ()) for b in blocks)

    async def _wait_through(self, ino: int, first: int = 0, last: int | None = None) -> None:
        """Wait until no refused write of blocks ``first..last`` (all: ``last`` None) is on
        its way to the I/O daemons: what follows must see (or come after) it."""
        while True:
            th = next((t for t in self.through.get(ino, ())
                       if any(first <= b and (last is None or b <= last) for b in t.blocks)),
                      None)
            if th is None:
                return
            await th.done.wait()

    async def _write_through(self, ino: int, stripe: Stripe, ext: list, sbuf: bytearray,
                             th: _Through) -> None:
        """A refused write's bytes to the I/O daemons (see ``_write``)."""
        try:
            await trio.to_thread.run_sync(write_extents, self.data, ino, stripe, ext, sbuf,
                                          limiter=self.limiter)
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

    def _unpin_all(self, slots: list[Slot]) -> None:
        for s in slots:
            self.store.unpin(s)

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

    def _hints(self, ino: int, refused: set[int]) -> list[int]:
        """The refused segments a client may be told to bypass: not those with a dirty block
        here. The client would send its next writes of such a segment straight to the I/O
        daemons, and this daemon's later write-back of the older dirty copy would land over
        them."""
        return sorted(s for s in refused if not self._dirty_in(ino, s))

    # ------------------------------------------------------------------ read
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
        waited = await self._settle(ino, first, last)
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
        borrowed: dict[int, _Fetch] = {}
        eof: int | None = None
        try:
            if missing:
                slots, scratch = self._admit_missing(ino, missing, before, bypass)
                pinned += slots.values()
                # Blocks another request fetched, uncached, while this one waited for it:
                # the same admission decision as any miss, but no second read of the disks.
                for b in [b for b in missing if b in waited]:
                    job = waited[b]
                    view = job.view(b, bs)
                    if view is None:
                        continue
                    self.counters["shared_blocks"] += 1
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
                        if s is not None and not s.dirty:
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
            header = {"n": sum(ns), "bypass": hints,
                      "ttl": self.policy.bypass_ttl if hints else 0, "epoch": self.epoch}
            if listed:
                header["ns"] = ns
            await send_views(sock, [memoryview(frame(header, header["n"])), *views])
        finally:
            self._unpin_all(pinned)

    # ------------------------------------------------------------------ write
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
        first, last = blocks[0], blocks[-1]
        received = False
        pinned: list[Slot] = []
        writing = None
        try:
            if self.store.dirty_blocks > DIRTY_HIGH * self.store.nslots:
                await self._flush_some()
            before = {s: self.policy.access(ino, s) for s in sorted({b // sb for b in blocks})}
            await self._settle(ino, first, last)
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
                th = _Through(set(scratch))
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

    # ------------------------------------------------------------------ file operations
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
        await self._wait_inflight(ino, 0, MAX_BLOCK)
        async with self._lock(ino):
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
        """Drop this cache's copies of a range (a client wrote it past the cache)."""
        ino, off, n = f["ino"], f["offset"], f["length"]
        if n:
            self.sizes[ino] = max(self.sizes.get(ino, 0), off + n)
        if ino in self.store.dirty or ino in self.through:
            await self.flush_file(ino)
        first, last = off // self.bs, (off + max(n, 1) - 1) // self.bs
        dropped = 0
        for b in self.store.blocks_of(ino):
            slot = self.store.get((ino, b))
            if first <= b <= last and slot is not None and not slot.dirty:
                self.store.remove((ino, b))
                dropped += 1
        return {"dropped": dropped}

    async def op_policy_set(self, f: dict) -> dict:
        """Switch the admission policy; with ``drop``, write back and empty the cache too
        (a cold start for a study run)."""
        self.policy = make_policy(f["policy"], f["threshold"], self.store.nslots)
        if f["drop"]:
            for ino in list(self.store.dirty):
                await self.flush_file(ino)
            for key in list(self.store.map):
                slot = self.store.get(key)
                if slot is not None and not slot.dirty:
                    self.store.remove(key)
            self.counters = dict.fromkeys(COUNTERS, 0)
        return self.policy.stats()

    # ------------------------------------------------------------------ holder directory
    async def op_cb_hold(self, f: dict) -> dict:
        self.directory.hold(f["client"], f["ino"], f["first"], f["count"])
        return {}

    async def op_cb_invalidate(self, f: dict) -> dict:
        return {"invalidated": await self.directory.invalidate(
            f["client"], f["ino"], f["offset"], f["length"])}


def _merge(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted, merged ``[lo, hi)`` ranges (overlapping and touching ones joined)."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _pid() -> int:
    import os

    return os.getpid()
