"""The local cache's backend when the file system has global caches (SPEC §6).

:class:`GcacheBackend` sits between the local block cache and the I/O daemons. Each request is
cut into *segments* (``segment_blocks`` blocks, 4 by default); a segment goes through the file's
global cache daemon unless its global bypass bit is set for the operation (``rg`` for reads,
``wg`` for writes: by the API, the ``user.pvfs.bypass`` xattr or a plan) or the daemon told
this client to bypass it for reads (runtime bypass: the hint lasts ``ttl`` of this client's
reads of the segment, or for ever when ``ttl`` is 0; a write of the segment goes through the
global cache and ends the hint, see :func:`via_global`); other segments go to ``direct`` (the
I/O daemons).

Failure: a global cache that does not answer within the config's timeouts (or refuses the
connection) is marked down for ``retry_after`` seconds and every request meanwhile goes direct.
Writes sent through a global cache are kept in a *journal* until the daemon has written them
back (``flush``/``fsync``); when the daemon fails, the journal is written to the I/O daemons
directly, so nothing this client wrote — fsync'd or not — is lost with the daemon. Every reply
of a daemon carries its *epoch* (random per process start): a daemon that was restarted
between a write and the flush answers the flush with another epoch, and the writes it never
saw are written directly too. All of that is the backend's :class:`~.failover.Failover` part
(``failover``): every request to a global cache runs under its ``guard``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import uuid
from collections.abc import Awaitable, Callable

import trio

from pvfs.cache import Bypass, BypassTable
from pvfs.config import Config, ConfigError
from pvfs.layout.stripe import Stripe
from pvfs.protocol import auth
from pvfs.protocol.errors import ProtocolError

from .channel import WholeReplyChannel
from .config import GcacheConfig, gcache_index
from .failover import Entry, Failover, daemon_said
from .hints import RuntimeHints, via_global

log = logging.getLogger("pvfs.gcache")

__all__ = ["GcacheBackend", "via_global"]

#: Largest read sent to a global cache in one request (its schema's bound).
MAX_READ = 64 << 20
#: Most regions in one list request (the daemon's schema's bound).
MAX_LIST_REGIONS = 16384
_RG, _WG = int(Bypass.READ_GLOBAL), int(Bypass.WRITE_GLOBAL)

#: What the other daemons call themselves in a ``status`` reply (``identify``).
_ROLES = {"iod": "an I/O daemon", "mgr": "the manager"}
#: ``(offset, length)`` regions of a request on each route (True: via the global cache).
Routes = dict[bool, list[tuple[int, int]]]


class GcacheBackend:
    """Local cache backend routing each segment through a global cache or straight through.

    Args:
        direct: the backend of the I/O daemons (``read``/``write``, optionally
            ``stripe_size``).
        config: the file system.
        gconf: its ``[gcache]`` table.
        stripe_of: the stripe of an inode.
        bypass: the segment bits (``rg``/``wg`` are read here); default: a fresh table.
        block_size: bytes per block (the local cache's).
        segment_blocks: blocks per segment.
        enabled: False sends everything direct (mount option ``gcache=off``).
        sync: coherence=sync: every write through a global cache is written through to the
            I/O daemons and invalidates other holders there; reads register this client as a
            holder; direct writes drop the global cache's copies.
        name: this client's name in the holder directories.
        retry_after: seconds a failed global cache is left alone.
        journal_limit: bytes of written-but-not-written-back data kept for the failure case;
            beyond, the largest file is flushed at its global cache first.

    Attributes:
        failover: the failure handling and the journal (:class:`~.failover.Failover`).
        runtime: the runtime hints (:class:`~.hints.RuntimeHints`).
        channels: one per global cache.
    """

    def __init__(self, direct, config: Config, gconf: GcacheConfig,
                 stripe_of: Callable[[int], Awaitable[Stripe]], *,
                 bypass: BypassTable | None = None, block_size: int = 4096,
                 segment_blocks: int | None = None, enabled: bool = True, sync: bool = False,
                 name: str | None = None, retry_after: float = 5.0,
                 journal_limit: int = 64 << 20) -> None:
        self.direct = direct
        self.config = config
        self.gconf = gconf
        self.stripe_of = stripe_of
        self.bypass = bypass if bypass is not None else BypassTable()
        self.block_size = block_size
        self.segment_blocks = segment_blocks or gconf.segment_blocks
        self.sync = sync
        self.name = name or f"{socket.gethostname()[:30]}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.journal_limit = journal_limit
        key = auth.key_for(config)
        # Replies taken whole in one receive (channel.py): a miss's reply is one block or two.
        self.channels = [WholeReplyChannel(e.host, e.port, config.connect_timeout,
                                           config.request_timeout, max_idle=16,
                                           name=f"gcache{i} ({e.address})", manager=False,
                                           key=key, role="client")
                         for i, e in enumerate(gconf.endpoints)]
        self.runtime = RuntimeHints(self.segment_blocks * block_size)
        self.hints = self.runtime.hints  # (ino, seg) -> accesses left, -1: for ever
        self.counters = dict.fromkeys(
            ("global_reads", "global_writes", "direct_reads", "direct_writes", "hints",
             "failovers", "journal_replays", "global_read_bytes", "direct_read_bytes",
             "stale_hints"), 0)
        self.failover = Failover(len(self.channels), self._call, direct, self._index,
                                 self.counters, enabled=enabled, retry_after=retry_after)

    @property
    def journal(self) -> dict[int, list[Entry]]:
        """ino -> its writes through a global cache not yet written back (the failover's)."""
        return self.failover.journal

    # ------------------------------------------------------------------ routing
    def stripe_size(self, ino: int) -> int | None:
        fn = getattr(self.direct, "stripe_size", None)
        return fn(ino) if fn is not None else None

    def _index(self, ino: int) -> int:
        return gcache_index(ino, len(self.channels))

    async def _call(self, idx: int, header: dict) -> dict:
        """A request without bulk to global cache ``idx``."""
        return await self.channels[idx].call(header)

    def _global(self, ino: int, seg: int, bit: int) -> bool:
        """Whether an access of segment ``seg`` goes through the global cache (and count the
        access against a runtime hint)."""
        return via_global(int(self.bypass.flags(ino, seg)) & bit, self.hints, (ino, seg),
                          write=bit == _WG)

    def _pieces(self, ino: int, offset: int, length: int, bit: int) -> list[tuple[int, int, bool]]:
        """``(offset, length, via_global)`` runs of the request, cut at segment boundaries
        where the route changes."""
        if not self.failover.up(self._index(ino)):
            return [(offset, length, False)]
        seg_bytes = self.segment_blocks * self.block_size
        if not self.hints and not self.bypass.has_bits(ino):
            return [(offset, length, True)]
        out: list[tuple[int, int, bool]] = []
        pos, end = offset, offset + length
        while pos < end:
            seg = pos // seg_bytes
            stop = min(end, (seg + 1) * seg_bytes)
            via = self._global(ino, seg, bit)
            if out and out[-1][2] == via and out[-1][0] + out[-1][1] == pos:
                out[-1] = (out[-1][0], out[-1][1] + stop - pos, via)
            else:
                out.append((pos, stop - pos, via))
            pos = stop
        return out

    def _take_hints(self, ino: int, reply: dict, sent: int) -> None:
        """A reply's runtime hints, sent at write clock ``sent`` (``RuntimeHints.take``)."""
        taken, stale = self.runtime.take(ino, reply, sent)
        self.counters["hints"] += taken
        self.counters["stale_hints"] += stale

    # ------------------------------------------------------------------ reads
    async def read(self, ino: int, offset: int, length: int) -> bytes:
        if length <= 0:
            return b""
        await self.failover.ensure(self._index(ino))
        pieces = self._pieces(ino, offset, length, _RG)
        if len(pieces) == 1:
            off, n, via = pieces[0]
            return await (self._gread(ino, off, n) if via else self._dread(ino, off, n))
        # Segments on both routes: one list request per route, both at once (a request costs
        # its slowest route, and the bypassed pieces stay one request to the I/O daemons, as
        # the paper's local cache sends its list of bypassed blocks, not one per segment).
        return (await self._read_plan(ino, [pieces]))[0]

    async def _dread(self, ino: int, offset: int, length: int) -> bytes:
        self.counters["direct_reads"] += 1
        log.debug("direct read ino %d %d+%d", ino, offset, length)
        data = await self.direct.read(ino, offset, length)
        self.counters["direct_read_bytes"] += len(data)
        return data

    async def _gread(self, ino: int, offset: int, length: int) -> bytes:
        idx = self._index(ino)
        stripe = await self.stripe_of(ino)
        parts: list[bytes] = []
        pos, end = offset, offset + length
        async with self.failover.guard(idx) as attempt:
            while pos < end:
                n = min(MAX_READ, end - pos)
                with self.runtime.asking() as sent:
                    reply, data = await self.channels[idx].call_bulk(
                        {"op": "read", "ino": ino, "stripe": stripe.to_wire(), "offset": pos,
                         "length": n, "client": self.name if self.sync else None})
                    if await self.failover.check_epoch(idx, reply.get("epoch")):
                        # It restarted and lost writes of ours: they are on the I/O daemons.
                        return await self._dread(ino, offset, length)
                    self._take_hints(ino, reply, sent)
                parts.append(data)
                pos += n
                if len(data) < n:
                    break
        if attempt.failed:
            return await self._dread(ino, offset, length)
        self.counters["global_reads"] += 1
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        self.counters["global_read_bytes"] += len(data)
        return data

    # ------------------------------------------------------------------ writes
    async def write(self, ino: int, offset: int, data) -> None:
        mv = memoryview(data).cast("B")
        if not len(mv):
            return
        with self.runtime.writing(ino, [(offset, len(mv))]):
            await self.failover.ensure(self._index(ino))
            pieces = self._pieces(ino, offset, len(mv), _WG)
            if len(pieces) == 1:
                off, _, via = pieces[0]
                await (self._gwrite if via else self._dwrite)(ino, off, mv)
                return
            # Segments on both routes: one list request per route, both at once.
            await self._write_routes(ino, *_by_route([(offset, len(mv))], [pieces], mv))

    async def _dwrite(self, ino: int, offset: int, data) -> None:
        self.counters["direct_writes"] += 1
        await self._before_direct(ino, [(offset, len(data))])
        await self.direct.write(ino, offset, data)
        self.failover.wrote_direct(ino, [(offset, data)])
        await self._after_direct(ino, offset, offset + len(data))

    async def _before_direct(self, ino: int, regions: list[tuple[int, int]]) -> None:
        """Before a write past the global cache: if this client wrote any of ``regions``
        through it and the daemon may not have written that back yet (its journal), have it
        written back now. Else the daemon's later write-back would land over the new bytes."""
        entries = self.journal.get(ino)
        if entries and any(off < eoff + len(blob) and eoff < off + n
                           for off, n in regions for eoff, blob, _ in entries):
            await self.flush(ino)

    async def _after_direct(self, ino: int, lo: int, hi: int) -> None:
        """After a write of ``[lo, hi)`` past the global cache: have it drop its copies, which
        hold the old bytes (a read through it, this client's too, would get them). One call
        for a list write's whole span: it may drop a few more clean copies. An error it
        answers with is not the write's."""
        idx = self._index(ino)
        if not self.failover.up(idx):
            return
        with contextlib.suppress(OSError):
            async with self.failover.guard(idx, replay=False):
                await self._call(idx, {"op": "invalidate", "ino": ino, "offset": lo,
                                       "length": hi - lo})

    async def _gwrite(self, ino: int, offset: int, data) -> None:
        stripe = await self.stripe_of(ino)
        blob = bytes(data)
        log.debug("global write ino %d %d+%d", ino, offset, len(blob))

        async def send(idx: int, entries: list[Entry]) -> list[dict]:
            reply = await self.channels[idx].call(
                {"op": "write", "ino": ino, "stripe": stripe.to_wire(), "offset": offset,
                 "sync": self.sync, "invalidate": self.sync,
                 "client": self.name if self.sync else None}, blob)
            entries[0][2] = reply.get("epoch")
            return [reply]

        await self._send_journalled(ino, [(offset, blob)], send)

    async def _send_journalled(
            self, ino: int, writes: list[tuple[int, bytes]],
            send: Callable[[int, list[Entry]], Awaitable[list[dict]]]) -> None:
        """Journal ``writes`` of ``ino`` and send them to its global cache (``send(idx,
        entries)``: the replies, each entry's epoch set from the reply that took it); then
        what the replies' epochs and hints call for, and the journal's limit."""
        idx = self._index(ino)
        failover = self.failover
        entries = failover.add(ino, writes)
        with self.runtime.asking() as sent:  # one for all requests, as if one
            async with failover.guard(idx, refused=lambda: failover.refused(ino, entries)) \
                    as attempt:
                replies = await send(idx, entries)
            if attempt.failed:
                return  # the journal, these writes too, went to the I/O daemons
            self.counters["global_writes"] += 1
            for reply in replies:
                if await failover.check_epoch(idx, reply.get("epoch")):
                    return  # these writes went to the I/O daemons with the rest of the journal
                self._take_hints(ino, reply, sent)
        if self.sync:
            failover.drop(ino)  # written through already
        elif failover.journal_bytes > self.journal_limit:
            # Have the global cache write back the file with the most journalled bytes.
            await self.flush(failover.largest())

    # ------------------------------------------------------------------ list I/O
    async def read_list(self, ino: int, regions: list[tuple[int, int]]) -> list[bytes]:
        """List I/O (the local cache's ``read_list``): every region's bytes, short or empty
        only at the end of the file. The regions' global pieces go to the file's global cache
        in one ``read_list`` request, the bypassed ones to the I/O daemons in one list request
        (when the direct backend has list I/O), both at once."""
        await self.failover.ensure(self._index(ino))
        return await self._read_plan(
            ino, [self._pieces(ino, off, n, _RG) if n > 0 else [] for off, n in regions])

    async def _read_plan(self, ino: int,
                         plan: list[list[tuple[int, int, bool]]]) -> list[bytes]:
        """Each region's bytes from its pieces ``(offset, length, via_global)``: the global
        ones in one list request to the global cache, the direct ones in one to the I/O
        daemons, at once."""
        routes: Routes = {True: [], False: []}
        for pieces in plan:
            for off, n, via in pieces:
                routes[via].append((off, n))
        got: dict[bool, list[bytes]] = {True: [], False: []}

        async def one(via: bool) -> None:
            if routes[via]:
                got[via] = await (self._gread_list(ino, routes[via]) if via
                                  else self._dread_list(ino, routes[via]))

        async with _first_error(), trio.open_nursery() as nursery:
            nursery.start_soon(one, True)
            nursery.start_soon(one, False)
        it = {True: iter(got[True]), False: iter(got[False])}
        out: list[bytes] = []
        for pieces in plan:
            parts: list[bytes] = []
            short = False
            for _, n, via in pieces:
                data = next(it[via])
                if not short:
                    parts.append(data)
                    short = len(data) < n  # end of file: the rest of the region is past it
            out.append(b"".join(parts))
        return out

    async def _dread_list(self, ino: int, regions: list[tuple[int, int]]) -> list[bytes]:
        self.counters["direct_reads"] += 1
        log.debug("direct read ino %d %s", ino, regions)
        fn = getattr(self.direct, "read_list", None)
        if fn is not None:
            out = list(await fn(ino, regions))
        else:
            out = [await self.direct.read(ino, off, n) for off, n in regions]
        self.counters["direct_read_bytes"] += sum(len(b) for b in out)
        return out

    async def _gread_list(self, ino: int, regions: list[tuple[int, int]]) -> list[bytes]:
        idx = self._index(ino)
        stripe = (await self.stripe_of(ino)).to_wire()
        out: list[bytes] = []
        async with self.failover.guard(idx) as attempt:
            for group in _groups(regions, MAX_READ):
                with self.runtime.asking() as sent:
                    reply, data = await self.channels[idx].call_bulk(
                        {"op": "read_list", "ino": ino, "stripe": stripe,
                         "regions": [list(r) for r in group],
                         "client": self.name if self.sync else None})
                    if await self.failover.check_epoch(idx, reply.get("epoch")):
                        return await self._dread_list(ino, regions)
                    self._take_hints(ino, reply, sent)
                pos = 0
                for k in reply["ns"]:
                    out.append(bytes(data[pos:pos + k]))
                    pos += k
        if attempt.failed:
            return await self._dread_list(ino, regions)
        self.counters["global_reads"] += 1
        self.counters["global_read_bytes"] += sum(len(b) for b in out)
        return out

    async def write_list(self, ino: int, regions: list[tuple[int, int]], data) -> None:
        """List I/O (the local cache's write-back of scattered runs): the global pieces in
        one ``write_list`` request to the file's global cache, the bypassed ones in one list
        request to the I/O daemons, both at once."""
        mv = memoryview(data).cast("B")
        with self.runtime.writing(ino, regions):
            await self.failover.ensure(self._index(ino))
            plan = [self._pieces(ino, off, n, _WG) if n > 0 else [] for off, n in regions]
            await self._write_routes(ino, *_by_route(regions, plan, mv))

    async def _write_routes(self, ino: int, routes: Routes,
                            blobs: dict[bool, list[bytes]]) -> None:
        async with _first_error(), trio.open_nursery() as nursery:
            if routes[True]:
                nursery.start_soon(self._gwrite_list, ino, routes[True], blobs[True])
            if routes[False]:
                nursery.start_soon(self._dwrite_list, ino, routes[False], blobs[False])

    async def _dwrite_list(self, ino: int, regions: list[tuple[int, int]],
                           blobs: list[bytes]) -> None:
        self.counters["direct_writes"] += 1
        await self._before_direct(ino, regions)
        fn = getattr(self.direct, "write_list", None)
        if fn is not None:
            await fn(ino, regions, b"".join(blobs))
        else:
            for (off, _), blob in zip(regions, blobs):
                await self.direct.write(ino, off, blob)
        self.failover.wrote_direct(ino, [(off, blob) for (off, _), blob in zip(regions, blobs)])
        await self._after_direct(ino, regions[0][0], max(off + n for off, n in regions))

    async def _gwrite_list(self, ino: int, regions: list[tuple[int, int]],
                           blobs: list[bytes]) -> None:
        stripe = (await self.stripe_of(ino)).to_wire()
        log.debug("global write ino %d %s", ino, regions)

        async def send(idx: int, entries: list[Entry]) -> list[dict]:
            replies = []
            done = 0
            for group in _groups(regions, None):
                part = blobs[done:done + len(group)]
                replies.append(await self.channels[idx].call(
                    {"op": "write_list", "ino": ino, "stripe": stripe,
                     "regions": [list(r) for r in group], "sync": self.sync,
                     "invalidate": self.sync, "client": self.name if self.sync else None},
                    b"".join(part)))
                for e in entries[done:done + len(group)]:
                    e[2] = replies[-1].get("epoch")
                done += len(group)
            return replies

        await self._send_journalled(
            ino, [(off, blob) for (off, _), blob in zip(regions, blobs)], send)

    # ------------------------------------------------------------------ file operations
    async def flush(self, ino: int) -> None:
        """The file's writes through its global cache are on the I/O daemons when this returns
        (written back by the daemon, or from the journal if it failed)."""
        await self.failover.ensure(self._index(ino))
        if ino not in self.journal:
            return
        idx = self._index(ino)
        if not self.failover.up(idx):
            await self.failover.replay(idx)
            return
        entries = list(self.journal[ino])
        async with self.failover.guard(idx) as attempt:
            reply = await self._call(idx, {"op": "flush", "ino": ino})
        if not attempt.failed:
            await self.failover.written_back(idx, ino, entries, reply.get("epoch"))

    @contextlib.asynccontextmanager
    async def truncation(self, ino: int, size: int):
        """Bracket the servers' truncation of ``ino`` to ``size`` bytes (inside the local
        cache's ``truncation``): write back, cut the global cache's copy (so no write-back
        lands past the new end later) and have it hold reads and writes of the file until
        the block ends. Otherwise a read reaching it meanwhile (a read-ahead sent before
        the truncation) would fetch bytes the servers are about to drop and keep them past
        the end, where a later truncation up would show them (fsx, gcache=on)."""
        await self.flush(ino)
        await self._control(ino, {"op": "truncate", "ino": ino, "size": size,
                                  "fence": True})
        try:
            yield
        finally:
            with trio.CancelScope(shield=True):
                try:
                    await self._control(ino, {"op": "truncated", "ino": ino})
                except OSError as exc:  # the fence times out by itself
                    log.warning("global cache: end of truncation of inode %d: %s", ino, exc)

    async def truncate(self, ino: int, size: int) -> None:
        """The file was truncated at the servers already (an ``O_TRUNC`` create of an
        existing file): write back what is left, then cut the global cache's copy."""
        await self.flush(ino)
        await self._control(ino, {"op": "truncate", "ino": ino, "size": size})

    async def forget(self, ino: int) -> None:
        """The file was removed: drop its journal, hints and global copies."""
        self.failover.drop(ino)
        self.runtime.forget(ino)
        await self._control(ino, {"op": "forget", "ino": ino})

    async def _control(self, ino: int, header: dict) -> None:
        idx = self._index(ino)
        if not self.failover.up(idx):
            return
        async with self.failover.guard(idx):
            await self._call(idx, header)

    # ------------------------------------------------------------------ the daemons
    async def identify(self) -> None:
        """Ask every global cache what it is (``status``), all at once, before the first use.

        An address of ``[gcache]`` that names another daemon (an I/O daemon's port, say)
        would answer every request it does not know with EINVAL -- creates failing, and only
        "unknown operation 'flush'" in the log. A daemon that does not answer is left to the
        failover, as at any later request (it may start after this client).

        Raises:
            ConfigError: a peer answered, and it is no global cache daemon.
        """
        wrong: dict[int, str] = {}

        async def one(idx: int) -> None:
            try:
                reply = await self._call(idx, {"op": "status"})
            except (OSError, trio.TooSlowError) as exc:
                if isinstance(exc, ProtocolError) or (daemon_said(exc) and
                                                       not isinstance(exc, PermissionError)):
                    wrong[idx] = f"it answered: {exc}"
                else:
                    log.warning("global cache %d (%s) does not answer yet: %s", idx,
                                self.gconf.endpoints[idx].address, exc)
                return
            role = reply.get("role")
            if role != "gcache":
                wrong[idx] = f"it answered as {_ROLES.get(role, repr(role))}"

        async with trio.open_nursery() as nursery:
            for idx in range(len(self.channels)):
                nursery.start_soon(one, idx)
        if wrong:
            idx, said = min(wrong.items())
            raise ConfigError(f"{self.gconf.endpoints[idx].address} is not a pvfs global cache "
                              f"daemon ({said}); see [gcache] addresses in {self.config.path}")

    def stats(self) -> dict:
        out = dict(self.counters)
        out["journal_bytes"] = self.failover.journal_bytes
        out["hinted_segments"] = len(self.hints)
        out["gcache_up"] = sum(self.failover.up(i) for i in range(len(self.channels)))
        return out

    def close(self) -> None:
        for ch in self.channels:
            ch.close()


def _by_route(regions: list[tuple[int, int]], plan: list[list[tuple[int, int, bool]]],
              mv: memoryview) -> tuple[Routes, dict[bool, list[bytes]]]:
    """The pieces of ``regions`` (``plan``: each region's ``(offset, length, via_global)``;
    ``mv``: the regions' bytes one after the other) on each route, and their bytes."""
    routes: Routes = {True: [], False: []}
    blobs: dict[bool, list[bytes]] = {True: [], False: []}
    pos = 0
    for (off, n), pieces in zip(regions, plan):
        for poff, pn, via in pieces:
            routes[via].append((poff, pn))
            blobs[via].append(bytes(mv[pos + poff - off:pos + poff - off + pn]))
        pos += n
    return routes, blobs


@contextlib.asynccontextmanager
async def _first_error():
    """Callers of a backend expect one ``OSError``, not the group a nursery raises."""
    try:
        yield
    except BaseExceptionGroup as group:
        first: BaseException = group
        while isinstance(first, BaseExceptionGroup):
            first = first.exceptions[0]
        raise first from None


def _groups(regions: list[tuple[int, int]],
            max_bytes: int | None) -> list[list[tuple[int, int]]]:
    """Consecutive groups of at most ``MAX_LIST_REGIONS`` regions (and ``max_bytes`` bytes,
    if given; a longer region is a group of its own, split by the daemon's caller)."""
    out: list[list[tuple[int, int]]] = []
    size = 0
    for r in regions:
        if (not out or len(out[-1]) >= MAX_LIST_REGIONS
                or (max_bytes is not None and size + r[1] > max_bytes)):
            out.append([])
            size = 0
        out[-1].append(r)
        size += r[1]
    return out
