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
read response.

This module holds the server's state, the connection dispatch, status and statistics, the
policy switch and the holder directory's requests; the work is in one mixin per job:

* ``reads.py`` (:class:`ReadPath`): ``read``, ``read_list``;
* ``writes.py`` (:class:`WritePath`): ``write``, ``write_list``, the background write-through
  of refused writes and the bypass hints;
* ``fileops.py`` (:class:`FileOps`): ``fsync``, ``flush``, ``truncate`` and its fence,
  ``truncated``, ``forget``, ``invalidate``, and the wait before every read and write;
* ``fetch.py`` (:class:`Fetching`): admission of missing blocks and fetches from the I/O
  daemons (in flight, shared with the requests that wait for them);
* ``writeback.py`` (:class:`WriteBack`): the flusher.

``coherence=sync`` clients register here as at the I/O daemons (``cb_register``); a read that
names its client records it as holder of the blocks, and a write with ``invalidate`` calls back
every other holder before it answers (the directory is ``daemons/holders.py``'s).
"""

from __future__ import annotations

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
from pvfs.protocol import auth

from ..common import serve_tcp
from ..holders import HolderDirectory
from .fetch import Fetching, _Fetch
from .fileops import FileOps, _Fence
from .reads import ReadPath
from .schema import GCACHE_SCHEMAS
from .store import BlockStore
from .writeback import WriteBack
from .writes import WritePath, _Through

log = logging.getLogger("pvfs.gcache")

Key = tuple[int, int]

#: Seconds a stopping daemon spends writing its dirty blocks back (``down`` waits 10 s
#: before SIGKILL).
STOP_FLUSH_S = 8.0

COUNTERS = ("reads", "writes", "hits", "misses", "admissions", "bypasses", "bypassed_blocks",
            "evictions", "flushes", "flushed_blocks", "fetches", "fetched_blocks",
            "write_through_blocks", "flush_errors", "fsyncs", "invalidations",
            "inflight_waits", "refetched_blocks", "mixed_fetches", "shared_blocks",
            "through_waits", "through_wait_ms", "through_blocks")


class GcacheServer(ReadPath, WritePath, FileOps, Fetching, WriteBack):
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
        try:
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
        finally:
            self._background = None
            with trio.move_on_after(STOP_FLUSH_S, shield=True):
                await self._write_back_all()
            self.data.close()

    async def _write_back_all(self) -> None:
        """On the way out (``pvfs-admin down``): every dirty block to the I/O daemons. Clients
        were answered when the bytes reached this daemon; stopping it must not drop them."""
        dirty = list(self.store.dirty)
        for ino in dirty:
            try:
                await self.flush_file(ino)
            except OSError as exc:
                log.error("write-back of inode %d at stop failed: %s", ino, exc)
        if dirty:
            log.info("wrote back %d files' dirty blocks at stop", len(dirty))

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

    # ------------------------------------------------------------------ policy
    async def op_policy_set(self, f: dict) -> dict:
        """Switch the admission policy; with ``drop``, write back and empty the cache too
        (a cold start for a study run)."""
        self.policy = make_policy(f["policy"], f["threshold"], self.store.nslots)
        if f["drop"]:
            for ino in list(self.store.dirty):
                await self.flush_file(ino)
            for key in list(self.store.map):
                slot = self.store.get(key)
                if slot is not None and not slot.dirty and not slot.pins:
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


def _pid() -> int:
    import os

    return os.getpid()
