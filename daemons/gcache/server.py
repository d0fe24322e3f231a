"""The global cache daemon (discretionary-caching paper §3.2 "Global Cache", §5; SPEC §6).

One user-level daemon per ``[gcache]`` address; files are spread over them by inode and every
node's local cache (and every application) shares them. A read fetches the blocks it misses
from all the file's I/O daemons at once (into slab slots: ``transfer.py``, ``iodlink.py``) and
answers with the bytes; a write lands in slots, is marked dirty and reaches the I/O daemons
through this daemon's own flusher; ``fsync`` writes the file's dirty blocks back and syncs the
I/O daemons before it answers.

Admission is a policy (``pvfs.models.bypass``): a missing block whose segment the policy
refuses is served without entering the cache, and the reply tells the client to bypass that
segment (``"bypass": [segments], "ttl": accesses``), as the paper's runtime bypass does in its
read response.

This module holds the server: its shared state, the parts that do the work, the dispatch of
requests to them, status and statistics, the policy switch and the holder directory's
requests. The parts (as the local cache's, ``pvfs.cache``), each with its own state and a
small interface documented on its class, built in dependency order and handed the parts they
need:

* ``fetch.py`` (:class:`Fetcher`, ``fetcher``): admission of missing blocks and fetches from
  the I/O daemons (in flight, shared with the requests that wait for them);
* ``through.py`` (:class:`WriteThrough`, ``through``): the background write-through of
  refused writes, and the bypass hints they hold back;
* ``writeback.py`` (:class:`Flusher`, ``flusher``): write-back of dirty blocks, the flusher
  task, the lock per file;
* ``fileops.py`` (:class:`FileOps`, ``files``): ``fsync``, ``flush``, ``truncate`` and its
  fence, ``truncated``, ``forget``, ``invalidate``, and the wait before every read and write;
* ``reads.py`` (:class:`ReadPath`, ``reads``): ``read``, ``read_list``;
* ``writes.py`` (:class:`WritePath`, ``writes``): ``write``, ``write_list``.

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
from .fetch import Fetcher
from .fileops import FileOps
from .iodlink import IodLinks
from .reads import ReadPath
from .schema import GCACHE_SCHEMAS
from .store import BlockStore
from .through import WriteThrough
from .writeback import Flusher
from .writes import WritePath

log = logging.getLogger("pvfs.gcache")

#: Seconds a stopping daemon spends writing its dirty blocks back (``down`` waits 10 s
#: before SIGKILL).
STOP_FLUSH_S = 8.0

COUNTERS = ("reads", "writes", "hits", "misses", "admissions", "bypasses", "bypassed_blocks",
            "evictions", "flushes", "flushed_blocks", "fetches", "fetched_blocks",
            "write_through_blocks", "flush_errors", "fsyncs", "invalidations",
            "inflight_waits", "refetched_blocks", "mixed_fetches", "shared_blocks",
            "through_waits", "through_wait_ms", "through_blocks", "small_fetches")

class GcacheServer:
    """One global cache daemon of a file system.

    Args:
        config: the file system (its ``[gcache]`` table must list this daemon).
        index: this daemon's place in ``[gcache].addresses``.

    Attributes:
        store: the slab (:class:`BlockStore`).
        policy: the admission policy (replaceable: the parts follow).
        stripes, sizes: per file, the stripe and the bytes known to exist, shared by the parts.
        counters: the statistics, shared by the parts (reset in place).
        fetcher, through, flusher, files, reads, writes: the parts.
        ops: the handler of each request that moves no bulk, by its name on the wire.
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
        self.links = IodLinks(config)  # small fetches, from the trio thread (iodlink.py)
        self.limiter = trio.CapacityLimiter(8)
        self.directory = HolderDirectory(config.request_timeout)
        self.stripes: dict[int, Stripe] = {}
        # Bytes known to exist per file (fetches that met the end, writes, truncates): a block
        # short of a full one ends the file only if it reaches this far; before, its missing
        # tail is a hole (zeros: a slot's bytes past ``valid`` are always zero).
        self.sizes: dict[int, int] = {}
        self.counters = dict.fromkeys(COUNTERS, 0)
        self.started = time.time()
        # Told to clients with every write and flush: a new value means a restarted daemon
        # that lost whatever was dirty (clients then write their journal themselves).
        self.epoch = secrets.randbits(52)
        self.address: tuple[str, int] | None = None
        self.key = auth.key_for(config)  # None: authentication off
        self._build_parts(make_policy(g.policy, g.threshold, self.store.nslots))
        self.ops = {
            "ping": self.op_ping, "status": self.op_status, "stats": self.op_stats,
            "fsync": self.files.fsync, "flush": self.files.flush,
            "truncate": self.files.truncate, "truncated": self.files.truncated,
            "forget": self.files.forget, "invalidate": self.files.invalidate,
            "policy_set": self.op_policy_set,
            "cb_hold": self.op_cb_hold, "cb_invalidate": self.op_cb_invalidate,
        }

    def _build_parts(self, policy) -> None:
        """The parts, each handed the ones it needs (see their classes)."""
        store, counters, sb = self.store, self.counters, self.sb
        self.fetcher = Fetcher(store, policy, self.sizes, self.data, self.limiter, counters, sb,
                               self.links)
        self.through = WriteThrough(store, self.data, self.limiter, counters, sb)
        self.flusher = Flusher(store, self.stripes, self.through, self.data, self.limiter,
                               counters, self.gconf.flush_interval)
        self.files = FileOps(store=store, policy=policy, fetcher=self.fetcher,
                             through=self.through, flusher=self.flusher, stripes=self.stripes,
                             sizes=self.sizes, data=self.data, limiter=self.limiter,
                             counters=counters, timeout=self.config.request_timeout,
                             epoch=self.epoch)
        self.reads = ReadPath(store=store, policy=policy, files=self.files,
                              fetcher=self.fetcher, through=self.through,
                              directory=self.directory, stripes=self.stripes, sizes=self.sizes,
                              counters=counters, epoch=self.epoch, segment_blocks=sb)
        self.writes = WritePath(store=store, policy=policy, files=self.files,
                                fetcher=self.fetcher, through=self.through, flusher=self.flusher,
                                directory=self.directory, stripes=self.stripes,
                                sizes=self.sizes, counters=counters,
                                timeout=self.config.request_timeout, epoch=self.epoch,
                                segment_blocks=sb)
        self._policy = policy

    @property
    def policy(self):
        """The admission policy (``pvfs.models.bypass``)."""
        return self._policy

    @policy.setter
    def policy(self, policy) -> None:
        self._policy = self.fetcher.policy = self.files.policy = self.reads.policy = \
            self.writes.policy = policy

    # ------------------------------------------------------------------ serving
    async def serve(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self.address = await nursery.start(functools.partial(
                    serve_tcp, self.endpoint.host, self.endpoint.port, GCACHE_SCHEMAS,
                    self.dispatch, key=self.key))
                nursery.start_soon(self.flusher.run)
                self.through.background = nursery
                log.info("global cache %d serving %s:%d: %d blocks of %d B, policy %s",
                         self.index, *self.address[:2], self.store.nslots, self.bs,
                         self.policy.name)
                task_status.started(self.address)
        finally:
            self.through.background = None
            with trio.move_on_after(STOP_FLUSH_S, shield=True):
                await self.flusher.write_back_all()
            self.data.close()
            self.links.close()

    async def dispatch(self, op: str, f: dict, bulk_len: int, sock) -> dict | None:
        if op == "read":
            return await self.reads.read(f, sock)
        if op == "write":
            return await self.writes.write(f, bulk_len, sock)
        if op == "read_list":
            return await self.reads.read_list(f, sock)
        if op == "write_list":
            return await self.writes.write_list(f, bulk_len, sock)
        if op == "cb_register":
            await self.directory.serve_client(f["client"], f["block_size"], sock)
            return None
        return await self.ops[op](f)

    async def op_ping(self, f: dict) -> dict:
        return {"version": __version__, "index": self.index, "role": "gcache",
                "uptime": time.time() - self.started}

    async def op_status(self, f: dict) -> dict:
        return {"version": __version__, "index": self.index, "role": "gcache",
                "uptime": time.time() - self.started, "pid": _pid(),
                "open_files": len(self.store.files), "jobs": len(self.fetcher.inflight),
                "scheduler": f"gcache/{self.policy.name}"}

    async def op_stats(self, f: dict) -> dict:
        out = self.stats()
        if f["reset"]:
            self._reset_counters()
        return out

    def _reset_counters(self) -> None:
        """In place: the parts hold this dict."""
        self.counters.update(dict.fromkeys(COUNTERS, 0))

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

    # ------------------------------------------------------------------ policy
    async def op_policy_set(self, f: dict) -> dict:
        """Switch the admission policy; with ``drop``, write back and empty the cache too
        (a cold start for a study run)."""
        self.policy = make_policy(f["policy"], f["threshold"], self.store.nslots)
        if f["drop"]:
            for ino in list(self.store.dirty):
                await self.flusher.flush_file(ino)
            for key in list(self.store.map):
                slot = self.store.get(key)
                if slot is not None and not slot.dirty and not slot.pins:
                    self.store.remove(key)
            self._reset_counters()
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
