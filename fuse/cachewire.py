"""The block cache wired to the file system: backend, coherence callbacks, shell controls.

* :class:`ClientBackend` is the :class:`pvfs.cache.BlockCache` backend over the async client
  (reads and writes run the C scatter/gather path in worker threads); it has list I/O
  (``read_list``/``write_list``: many regions in one request per I/O daemon).
* :class:`Coherence` is the mount's side of ``coherence=sync``: one callback connection per
  I/O daemon (``cb_register``), ``hold`` before blocks are fetched, ``invalidate`` after a sync
  write; the frames are :mod:`pvfs.client.coherence`'s (``daemons/holders.py`` is the
  daemon side).
* :class:`Controls` implements the ``user.pvfs.*`` extended attributes.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable

import trio

from pvfs.cache import BlockCache, BypassTable
from pvfs.client.aclient import AsyncClient
from pvfs.client.coherence import CoherenceClient
from pvfs.client.smallwrites import unit_daemon
from pvfs.layout.stripe import Stripe

from .handles import HandleTable

log = logging.getLogger("pvfs.fuse")

__all__ = ["STRIPE_XATTR", "VIRTUAL_XATTRS", "ClientBackend", "Coherence", "Controls",
           "MountBypass"]

STRIPE_XATTR = "user.pvfs.stripe"
BYPASS_XATTR = "user.pvfs.bypass"
SYNC_XATTR = "user.pvfs.sync"
STATS_XATTR = "user.pvfs.stats"
DROP_XATTR = "user.pvfs.drop_cache"  # set (root only): write back and drop the node's cache
VIRTUAL_XATTRS = (STRIPE_XATTR, BYPASS_XATTR, SYNC_XATTR, STATS_XATTR, DROP_XATTR)
# Regions per list request: the description travels in the request header (at most 1 MiB,
# 2**18 array items), so longer lists are sent as several requests, in order.
MAX_LIST_REGIONS = 16384


class MountBypass(BypassTable):
    """The segment bits of ``user.pvfs.bypass``; ``everything`` (mount option ``cache=0``)
    sends every read and write past the local cache."""

    def __init__(self, everything: bool = False) -> None:
        super().__init__()
        self.everything = everything

    def bypass_read(self, ino: int, segment: int) -> bool:
        return self.everything or super().bypass_read(ino, segment)

    def bypass_write(self, ino: int, segment: int) -> bool:
        return self.everything or super().bypass_write(ino, segment)

    def has_bits(self, ino: int) -> bool:
        return self.everything or super().has_bits(ino)


class ClientBackend:
    """Blocks come from and go to the I/O daemons through :class:`AsyncClient`."""

    def __init__(self, client: AsyncClient, table: HandleTable,
                 stripe_of: Callable[[int], Awaitable[Stripe]], gathers: bool = True) -> None:
        self.client = client
        self.table = table
        self.stripe_of = stripe_of
        self.coherence: Coherence | None = None
        # Awaited before a file's data leave for the I/O daemons (with leases: the mount
        # gives up its lease of the file's attributes itself, LeaseCache.writing).
        self.before_write: Callable[[int], Awaitable[None]] | None = None
        # The explicit mtime a file's data carry to its stripe files (write delegations).
        self.data_mtime: Callable[[int], int | None] | None = None
        # Gathered write-back (``-o gather_writes``; pvfs.cache.FilesBackend): many small
        # files in one ``writes`` request per I/O daemon. Off once a daemon refused it.
        self.gathers = gathers
        # Awaited before many files' data leave at once: those that may not leave (their
        # create was refused), with why. ``after_writes``: once they are on the daemons.
        self.before_writes: Callable[[list[int]], Awaitable[dict[int, OSError]]] | None = None
        self.after_writes: Callable[[list[int]], Awaitable[None]] | None = None
        # Whether a file's data carry explicit times (those go one by one, with their mtime).
        self.carries_times: Callable[[int], bool] | None = None

    def stripe_size(self, ino: int) -> int | None:
        info = self.table.inodes.get(ino)
        return info.stripe.ssize if info is not None and info.stripe is not None else None

    async def read(self, ino: int, offset: int, length: int) -> bytes:
        stripe = await self.stripe_of(ino)
        if self.coherence is not None:
            # Register first, then read: a sync write racing with this fetch calls us back.
            await self.coherence.hold(ino, stripe, offset, length)
        return await self.client.read(ino, stripe, offset, length)

    async def write(self, ino: int, offset: int, data: bytes) -> None:
        stripe = await self.stripe_of(ino)
        self.table.info(ino).wrote = True
        if self.coherence is not None:
            # The written blocks stay cached as clean copies: hold them like fetched ones, so
            # a later sync write of another node calls us back (docs/check.md, finding 1).
            await self.coherence.hold(ino, stripe, offset, len(data))
        if self.before_write is not None:
            await self.before_write(ino)
        await self.client.write(ino, stripe, offset, data, self._mtime_with_data(ino))


    def takes(self, ino: int, offset: int, length: int) -> bool:
        """Whether this run of ``ino`` may go in a gathered write-back: one stripe unit's
        piece of a file whose layout is known, no callbacks to register (``coherence=sync``)
        and no explicit times to carry."""
        if not self.gathers or self.coherence is not None:
            return False
        info = self.table.inodes.get(ino)
        if info is None or info.stripe is None or \
                (self.carries_times is not None and self.carries_times(ino)):
            return False
        return unit_daemon(info.stripe, offset, length, len(self.client.config.iods)) \
            is not None

    async def write_files(self, writes: list[tuple[int, int, bytes]]) -> dict[int, OSError]:
        """The gathered write-back: one ``writes`` request per I/O daemon for every file's
        run (the ``before_writes``/``after_writes`` hooks around them all at once)."""
        inos = [ino for ino, _, _ in writes]
        failed: dict[int, OSError] = {}
        try:
            if self.before_writes is not None:
                failed.update(await self.before_writes(inos))
            go = [(ino, self.table.info(ino), off, data) for ino, off, data in writes
                  if ino not in failed]
            for _, info, _, _ in go:
                info.wrote = True
            sent = await self.client.write_files([(ino, info.stripe, off, data)
                                                  for ino, info, off, data in go])
            if sent.unsupported:
                self.gathers = False  # (an emulated disk: it went one by one)
            failed.update((ino, OSError(err, f"write-back of inode {ino}: {os.strerror(err)}"))
                          for ino, err in sent.refused.items())
        finally:
            if self.after_writes is not None:
                await self.after_writes(inos)
        return failed

    def _mtime_with_data(self, ino: int) -> int | None:
        """The explicit mtime a file's written data carry (delegations.py), if any."""
        return None if self.data_mtime is None else self.data_mtime(ino)

    async def read_list(self, ino: int, regions: list[tuple[int, int]]) -> list[bytes]:
        """List I/O: every region in one request per I/O daemon."""
        stripe = await self.stripe_of(ino)
        if self.coherence is not None:
            # One registration covering them all: holdings may be a superset.
            lo = regions[0][0]
            await self.coherence.hold(ino, stripe, lo, max(o + n for o, n in regions) - lo)
        out: list[bytes] = []
        for i in range(0, len(regions), MAX_LIST_REGIONS):
            out += await self.client.read_regions(ino, stripe, regions[i:i + MAX_LIST_REGIONS])
        return out

    async def write_list(self, ino: int, regions: list[tuple[int, int]], data: bytes) -> None:
        """List I/O: write-back of scattered runs in one request per I/O daemon."""
        stripe = await self.stripe_of(ino)
        self.table.info(ino).wrote = True
        if self.coherence is not None:  # as in write(): one registration covering them all
            lo = regions[0][0]
            await self.coherence.hold(ino, stripe, lo, max(o + n for o, n in regions) - lo)
        if self.before_write is not None:
            await self.before_write(ino)
        mtime = self._mtime_with_data(ino)
        pos = 0
        with memoryview(data) as mv:  # released on every path (pvfs/client/buffers.py)
            for i in range(0, len(regions), MAX_LIST_REGIONS):
                part = regions[i:i + MAX_LIST_REGIONS]
                n = sum(length for _, length in part)
                with mv[pos:pos + n] as piece:
                    await self.client.write_regions(ino, stripe, part, piece, mtime)
                pos += n


class Coherence:
    """Client side of ``coherence=sync`` (one per mount): which blocks to hold, the call-back
    connections kept open (reconnecting with back-off), counters; the frames themselves are
    :class:`pvfs.client.coherence.CoherenceClient`'s."""

    def __init__(self, client: AsyncClient, cache: BlockCache,
                 on_invalidate: Callable[[int, int, int], Awaitable[None]]) -> None:
        self.client = client
        self.cache = cache
        self.on_invalidate = on_invalidate
        self.name = f"{socket.gethostname()[:30]}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.wire = CoherenceClient(client.config, client.key, self.name, cache.block_size)
        n = len(client.config.iods)
        self.connected = [False] * n
        # Per I/O daemon: registrations so far, an event set (and replaced) at each, the
        # listener's wake-up and the cancel scope of its live connection.
        self._registrations = [0] * n
        self._registered = [trio.Event() for _ in range(n)]
        self._wake = [trio.Event() for _ in range(n)]
        self._live: list[trio.CancelScope | None] = [None] * n
        self.counters = {"callbacks_received": 0, "invalidations_sent": 0,
                         "copies_invalidated": 0, "holds": 0, "registered_again": 0}

    async def hold(self, ino: int, stripe: Stripe, offset: int, length: int) -> None:
        bs = self.cache.block_size
        first, last = offset // bs, (offset + max(length, 1) - 1) // bs
        self.counters["holds"] += 1
        try:
            await self.wire.hold(ino, stripe, first, last - first + 1)
        except OSError as exc:
            if exc.errno != errno.ENOTCONN:
                raise
            # The home daemon does not know this node: it restarted (its holder directory
            # is empty) and the listener has not registered again yet -- it may be waiting
            # out its back-off, or not have seen the old connection die. Register now and
            # hold once more, rather than fail every read until then (issue 33).
            await self.register_again(self.wire.home(stripe))
            await self.wire.hold(ino, stripe, first, last - first + 1)

    async def register_again(self, index: int) -> None:
        """Have the callback connection to I/O daemon ``index`` made and registered anew,
        now, and wait for it (at most the connect and request timeouts).

        Raises:
            OSError: ENOTCONN if it is not registered in that time.
        """
        seen = self._registrations[index]
        live = self._live[index]
        if live is not None:
            live.cancel()  # the daemon forgot this node: that connection is no use
        self._wake[index].set()
        cfg = self.client.config
        limit = cfg.connect_timeout + cfg.request_timeout
        with trio.move_on_after(limit):
            while self._registrations[index] == seen:
                await self._registered[index].wait()
        if self._registrations[index] == seen:
            raise OSError(errno.ENOTCONN, f"iod{index}: callback connection not registered "
                          f"again within {limit:g} s")
        self.counters["registered_again"] += 1

    async def invalidate(self, ino: int, stripe: Stripe, offset: int, length: int) -> None:
        """Invalidate every other node's copy of the range (after a sync write)."""
        dropped = await self.wire.invalidate(ino, stripe, offset, length)
        self.counters["invalidations_sent"] += 1
        self.counters["copies_invalidated"] += dropped

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Keep a callback connection to every I/O daemon; started once all are up."""
        async with trio.open_nursery() as nursery:
            for i in range(len(self.connected)):
                await nursery.start(self._listen, i)
            task_status.started()

    async def _listen(self, index: int,
                      task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        started = False
        delay = 0.2
        while True:
            self._wake[index] = trio.Event()
            try:
                with trio.CancelScope() as live:
                    self._live[index] = live
                    async with self.wire.registered(index) as sock:
                        if started:
                            # Holdings were lost with the old connection: nothing we hold is
                            # known to the directory any more, so drop every clean block.
                            await self.on_invalidate(0, 0, 0)
                        self.connected[index] = True
                        self._registrations[index] += 1
                        done, self._registered[index] = self._registered[index], trio.Event()
                        done.set()
                        delay = 0.2
                        if not started:
                            started = True
                            task_status.started()
                        await self.wire.serve(sock, self._called_back)
                if live.cancelled_caught:
                    log.warning("coherence: callback connection to iod%d: the daemon forgot "
                                "this node; registering again", index)
            except (OSError, trio.TooSlowError, trio.BrokenResourceError, ValueError) as exc:
                log.warning("coherence: callback connection to iod%d: %s", index, exc)
            self._live[index] = None
            self.connected[index] = False
            if not started:
                started = True
                task_status.started()
            if not self._wake[index].is_set():  # no one waits for it: back off
                with trio.move_on_after(delay):
                    await self._wake[index].wait()
                delay = min(delay * 2, 5.0)

    async def _called_back(self, ino: int, offset: int, length: int) -> None:
        self.counters["callbacks_received"] += 1
        await self.on_invalidate(ino, offset, length)

    def close(self) -> None:
        self.wire.close()


def format_stripe(stripe: Stripe | None) -> str:
    if stripe is None:
        return ""
    return f"base={stripe.base},pcount={stripe.pcount},ssize={stripe.ssize}"


def parse_stripe(text: str, default: Stripe) -> Stripe:
    """``base=1,pcount=2,ssize=65536`` (any subset; others from ``default``; sizes as 64k)."""
    from .options import parse_size

    vals = {"base": default.base, "pcount": default.pcount, "ssize": default.ssize}
    for item in text.replace(";", ",").split(","):
        if not item.strip():
            continue
        key, eq, value = item.strip().partition("=")
        if not eq or key not in vals:
            raise ValueError(f"bad stripe item {item!r} (want base=, pcount=, ssize=)")
        vals[key] = parse_size(value) if key == "ssize" else int(value)
    return Stripe(vals["base"], vals["pcount"], vals["ssize"])


class Controls:
    """The ``user.pvfs.*`` attributes; values are ASCII text."""

    def __init__(self, cache: BlockCache, table: HandleTable, options: dict,
                 extra_stats: Callable[[], dict]) -> None:
        self.cache = cache
        self.table = table
        self.options = options
        self.extra_stats = extra_stats
        self.started = time.time()
        self.drops = 0  # pvfs-admin cache drop requests served

    def stats(self) -> dict:
        out: dict = {"uptime": round(time.time() - self.started, 1)}
        out.update(self.cache.stats())
        out.update(self.extra_stats())
        out["cache_drops"] = self.drops
        return out

    def stats_text(self) -> bytes:
        return json.dumps(self.stats(), sort_keys=True).encode()

    async def drop_cache(self, kernel_invalidate: Callable[[int], Awaitable[None]],
                         skip: int) -> int:
        """``pvfs-admin cache drop``: write every dirty block back, then drop every block and
        the kernel's pages of each cached file (but ``skip``, the inode whose setxattr asked:
        invalidating it from inside its own request could deadlock). Blocks dropped."""
        inos = self.cache.cached_inodes()
        try:
            await self.cache.flush_all()
        finally:
            dropped = sum(self.cache.invalidate(ino) for ino in inos)
        for ino in inos:
            if ino != skip:
                await kernel_invalidate(ino)
        self.drops += 1
        return dropped

    def get_bypass(self, ino: int) -> bytes:
        return self.cache.bypass.get_xattr(ino).encode()  # type: ignore[attr-defined]

    def set_bypass(self, ino: int, value: bytes) -> None:
        self.cache.changing(ino)  # reads answered in C follow no bits
        self.cache.bypass.set_xattr(ino, value.decode("ascii"))  # type: ignore[attr-defined]

    def get_sync(self, ino: int) -> bytes:
        return b"1" if self.table.info(ino).sync else b"0"

    def set_sync(self, ino: int, value: bytes) -> None:
        text = value.decode("ascii").strip()
        if text not in ("0", "1"):
            raise ValueError("user.pvfs.sync is 0 or 1")
        self.table.info(ino).sync = text == "1"
