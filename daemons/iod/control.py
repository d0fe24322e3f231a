"""The I/O daemon's requests that move no bulk data (``IodServer.OPS``: INLINE and TASK).

Stripe files' metadata (size, truncate, create, unlink, ...; each a worker-thread call, the
trio thread makes no file system call), the scheduler and the reactive selector (``sched``,
``model_set``, the emulated disk), statistics, the coherence callbacks of ``coherence=sync``
mounts, and metrics. ``ControlRequests`` is a part of :class:`~.server.IodServer`
(``server.control``); the server's dispatch table names its methods ``control.op_*``.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import trio

from pvfs import __version__
from pvfs.config import ALGORITHMS

from .dropcache import drop_page_cache

if TYPE_CHECKING:
    from pvfs import _native
    from pvfs.metrics import Metrics

    from ..holders import HolderDirectory
    from .rs import ReactiveSelector
    from .sizewatch import SizeWatch
    from .stats import WorkloadStats
    from .storage import PosixStorage

log = logging.getLogger("pvfs.iod")

__all__ = ["ControlRequests"]


class ControlRequests:
    """One handler per request that moves no bulk: ``op_<name>(fields) -> reply``.

    Args:
        index: the daemon's index in the config's ordered list.
        started: when the daemon started (``time.time()``).
        storage: the storage layer (stripe files' metadata, statfs, fsync, listing; the
            emulated disk).
        engine: the C engine (its algorithm, window and gather are set here).
        selector: the reactive selector.
        stats: the workload statistics.
        holders: the holder directory of ``coherence=sync`` mounts.
        sizewatch: the stripe files whose size the manager keeps.
        metrics: the daemon's request and byte counters.
        connections: how many client connections are attached to the engine now.
        nfile: N_file of some inodes, from the manager (``IodServer.nfile``).
        small_writes: the ``writes`` requests' counters (``SmallWrites.status``).
        fast_served: take the engine's own jobs into the statistics (before a report).
    """

    def __init__(self, *, index: int, started: float, storage: PosixStorage,
                 engine: _native.Engine, selector: ReactiveSelector, stats: WorkloadStats,
                 holders: HolderDirectory, sizewatch: SizeWatch, metrics: Metrics,
                 connections: Callable[[], int],
                 nfile: Callable[[list[int]], Awaitable[dict[int, int]]],
                 small_writes: Callable[[], dict] = dict,
                 fast_served: Callable[[], None] = lambda: None) -> None:
        self.index, self.started = index, started
        self.storage, self.engine, self.selector = storage, engine, selector
        self.stats, self.holders, self.sizewatch = stats, holders, sizewatch
        self.metrics, self.connections, self.nfile = metrics, connections, nfile
        self.small_writes = small_writes
        self.fast_served = fast_served

    def op_ping(self, f: dict) -> dict:
        return {"version": __version__, "index": self.index, "uptime": time.time() - self.started}

    def op_status(self, f: dict) -> dict:
        self.fast_served()
        info = self.engine.info()
        info["fast"] = self.engine.fast_info()
        return {"version": __version__, "index": self.index, "role": "iod",
                "uptime": time.time() - self.started, "pid": os.getpid(),
                "open_files": len(self.storage._fds), "queued_jobs": self.stats.in_service(),
                "connections": self.connections(), "scheduler": info.get("algorithm"),
                "size_watch": self.sizewatch.status(),
                "small_writes": self.small_writes(),
                "engine": info}

    async def op_size(self, f: dict) -> dict:
        # The promise (sizewatch.py) is made before measuring: a change after it is reported.
        watched = f["watch"] and self.sizewatch.watch(f["ino"])
        size, mtime, blocks = await trio.to_thread.run_sync(self.storage.usage, f["ino"])
        return {"local_size": size, "mtime_ns": mtime, "blocks": blocks, "watched": watched}

    async def op_sizes(self, f: dict) -> dict:
        """[local size, mtime_ns, st_blocks] per inode (the manager's getattr of many)."""
        watched = [f["watch"] and self.sizewatch.watch(i) for i in f["inos"]]
        return {"sizes": await trio.to_thread.run_sync(
            lambda: [list(self.storage.usage(i)) for i in f["inos"]]), "watched": watched}

    async def op_truncate(self, f: dict) -> dict:
        # Freeing the blocks of a large file can take the disk a long time.
        if f["unwatch"]:
            self.sizewatch.drop(f["ino"])
        async with self.sizewatch.change(f["ino"]):
            await trio.to_thread.run_sync(self.storage.truncate, f["ino"], f["local_size"])
        return {}

    async def op_create(self, f: dict) -> dict:
        """Make the empty stripe file now (the manager never asks: a stripe file is made by
        its first write; for tools that want the file to exist)."""
        async with self.sizewatch.change(f["ino"]):
            await trio.to_thread.run_sync(self.storage.create, f["ino"])
        return {}

    def op_precreate(self, f: dict) -> dict:
        """Numbers of the manager's pool: no file is made (their stripe files are made by
        their first writes, storage.py), but their empty shares are watched from now, so a
        create from the pool knows its size without asking."""
        watched = [f["watch"] and self.sizewatch.watch(i, pool=True) for i in f["inos"]]
        return {"made": 0, "watched": all(watched)}

    async def op_utime(self, f: dict) -> dict:
        if f["unwatch"]:
            self.sizewatch.drop(f["ino"])
        async with self.sizewatch.change(f["ino"]):
            await trio.to_thread.run_sync(self.storage.utime, f["ino"], f["mtime_ns"])
        if not f["watch"]:
            return {}
        # The manager's utime wants the result (its size cache): answered as op_size does,
        # the promise made (after the change) before measuring.
        return await self.op_size({"ino": f["ino"], "watch": True})

    async def op_unlink(self, f: dict) -> dict:
        self.stats.forget(f["ino"])
        self.sizewatch.gone(f["ino"])
        return {"removed": await trio.to_thread.run_sync(self.storage.unlink, f["ino"])}

    async def op_unlinks(self, f: dict) -> dict:
        """The manager's batched removal of deleted files (daemons/mgr/reaper.py)."""
        for ino in f["inos"]:
            self.stats.forget(ino)
            self.sizewatch.gone(ino)
        return {"removed": await trio.to_thread.run_sync(
            lambda: sum(self.storage.unlink(i) for i in f["inos"]))}

    async def op_statfs(self, f: dict) -> dict:
        return await trio.to_thread.run_sync(self.storage.statfs)

    def op_sched_get(self, f: dict) -> dict:
        return {"algorithm": "rs" if self.selector.active else self.engine.algorithm,
                "engine": self.engine.algorithm, "window": self.engine.window,
                "gather": self.engine.gather,
                "available": list(ALGORITHMS), "storage": self.storage.kind,
                "disk": self.storage.disk.info() if self.storage.disk else None,
                "rs": self.selector.status()}

    def op_sched_set(self, f: dict) -> dict:
        if f["algorithm"] not in ALGORITHMS:
            raise ValueError(f"unknown algorithm {f['algorithm']!r}; one of {', '.join(ALGORITHMS)}")
        self.selector.active = f["algorithm"] == "rs"    # (the fast path off while rs)
        if not self.selector.active:
            self.engine.algorithm = f["algorithm"]
        if f["window"] is not None:
            self.engine.window = f["window"]
        if f["gather"] is not None:
            self.engine.gather = f["gather"]
        if f["decide"] is not None:
            self.selector.decide_s = f["decide"]
        log.info("scheduler set to %s (window %d, gather %g s)", f["algorithm"],
                 self.engine.window, self.engine.gather)
        return self.op_sched_get(f)

    def op_model_set(self, f: dict) -> dict:
        """Replace the reactive selector's model parameters (pvfs-admin calibrate)."""
        from pvfs.models.rs import Params

        self.selector.params = Params.from_wire(f["params"])
        return self.selector.status()

    async def op_disk_drop(self, f: dict) -> dict:
        """Empty the emulated disk's page cache (cold runs); posix storage: nothing to do.

        The dirty pages are written back first and the reply waits for that (``sync; echo 3
        > drop_caches``), so a run measured after it does not queue behind the write-back."""
        if self.storage.disk is not None:
            done = self.storage.disk.drop()
            await trio.sleep(max(0.0, done - time.monotonic()))
        return {"storage": self.storage.kind}

    async def op_fsync(self, f: dict) -> dict:
        await trio.to_thread.run_sync(self.storage.fsync, f["ino"], f["data_only"])
        return {}

    async def op_list(self, f: dict) -> dict:
        inos = await trio.to_thread.run_sync(self.storage.inodes, f["after"], f["limit"])
        return {"inodes": inos}

    async def op_stats(self, f: dict) -> dict:
        self.fast_served()
        snap = self.stats.snapshot(await self.nfile(list(self.stats.files)))
        snap["engine"] = self.engine.info()
        snap["coherence"] = self.holders.status()
        if f["reset"]:
            self.stats.reset()
        return snap

    # ------------------------------------------------------------------ coherence (sync mounts)
    def op_cb_hold(self, f: dict) -> dict:
        self.holders.hold(f["client"], f["ino"], f["first"], f["count"])
        return {}

    async def op_cb_invalidate(self, f: dict) -> dict:
        n = await self.holders.invalidate(f["client"], f["ino"], f["offset"], f["length"])
        return {"invalidated": n}

    def op_cb_status(self, f: dict) -> dict:
        return self.holders.status()

    # ------------------------------------------------------------------ operations
    def metrics_families(self) -> list[dict]:
        self.fast_served()
        holders = self.holders.status()
        return self.metrics.families({
            "pvfs_uptime_seconds": ("Seconds since the daemon started.",
                                    time.time() - self.started),
            "pvfs_connections": ("Client connections attached to the engine.", self.connections()),
            "pvfs_jobs_in_service": ("Read and write jobs queued or running.",
                                     self.stats.in_service()),
            "pvfs_open_stripe_files": ("Stripe-file descriptors in the daemon's open-file cache.",
                                       len(self.storage._fds)),
            "pvfs_coherence_clients": ("Mounts holding a callback connection (coherence=sync).",
                                       holders.get("clients", 0)),
            "pvfs_coherence_callbacks_total": ("Invalidation callbacks sent to mounts.",
                                               holders.get("callbacks_sent", 0)),
        })

    def op_metrics(self, f: dict) -> dict:
        return {"families": self.metrics_families()}

    async def op_drop_cache(self, f: dict) -> dict:
        """Write back and evict the page cache of every stripe file (pvfs-admin cache drop)."""
        return await trio.to_thread.run_sync(drop_page_cache, self.storage.root)
