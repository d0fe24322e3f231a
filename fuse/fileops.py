"""The mount's handlers of open files: open, create, read, write, flush, fsync, release.

Reads and writes go through the node's block cache (``self.cache``: ``pvfs.cache``), which
fetches from and writes back to the I/O daemons or the global caches; ``coherence=sync``
holds and invalidates other nodes' copies around a sync write. ``keep_cache`` is decided at
open from the file's (size, mtime) at the manager (``_file_info``).

``FileOperations`` is a mixin of :class:`~.operations.Operations`: it uses its ``client``,
``cache``, ``gbackend``, ``coherence``, ``table``, ``dirattrs``, ``opts``, ``counters``,
``cred``, ``entry``, ``_learn``, ``_named``, ``_stripe_of``, ``_known_size`` and, for a file
removed while open, ``_removed_open``, ``_removing`` and ``_removed``.
"""

from __future__ import annotations

import logging
import os
import stat
from contextlib import AbstractAsyncContextManager, nullcontext

from pyfuse3 import EntryAttributes, FileInfo, RequestContext

from .guard import guard

log = logging.getLogger("pvfs.fuse")


class FileOperations:
    def _global_truncation(self, ino: int, size: int) -> AbstractAsyncContextManager:
        """The global cache's side of a truncation of the servers (nothing without one):
        see ``GcacheBackend.truncation``."""
        if self.gbackend is None:
            return nullcontext()
        return self.gbackend.truncation(ino, size)

    async def _file_info(self, fh: int, ino: int, a: dict) -> FileInfo:
        """Decide keep_cache: the kernel and local caches survive a reopen only if the file's
        (size, mtime) at the manager is what this node saw at its last open (or the change
        was this node's own write). After another node's change the kernel's attributes go
        too: it reads no further than the size it holds (for ``attr_timeout``), so a read
        past it must ask again, or the other node's sync write that grew the file would not
        be seen after this open (hypothesis, two coherence=sync mounts, 2026-11-27)."""
        info = self.table.info(ino)
        stamp = (a["size"], a["mtime_ns"])
        keep = info.stamp is None or info.stamp == stamp or info.wrote
        if not keep:
            await self._kernel_invalidate(ino, attr_only=True)
            if info.opens <= 1 and not self.cache.has_dirty(ino):
                self.counters["reopen_invalidations"] += 1
                self.cache.invalidate(ino)
        info.stamp = stamp
        info.wrote = False
        direct = self.opts.direct_io or (self.opts.writeback_cache and (
            self.table.get(fh).sync or info.sync))
        return FileInfo(fh=fh, direct_io=direct, keep_cache=keep and not direct)

    @guard
    async def open(self, inode: int, flags: int, ctx: RequestContext) -> FileInfo:
        cred = self.cred(ctx)
        if flags & os.O_TRUNC and flags & os.O_ACCMODE:
            # the manager truncates the servers inside open; a refused open cuts nothing
            async with self.cache.truncation(inode, 0), self._global_truncation(inode, 0):
                a = self._learn(await self.client.open(inode, flags, cred))
            self.table.info(inode).wrote = True
        else:
            a = self._learn(await self.client.open(inode, flags, cred))
        h = self.table.open(inode, flags, cred)
        self.counters["opens"] += 1
        return await self._file_info(h.fh, inode, a)

    @guard
    async def create(self, parent_inode: int, name: bytes, mode: int, flags: int,
                     ctx: RequestContext) -> tuple[FileInfo, EntryAttributes]:
        cred = self.cred(ctx)
        n = os.fsdecode(name)
        gen = self.probed.gen
        a = self._named(parent_inode, n, await self.client.create(
            parent_inode, n, stat.S_IMODE(mode), cred, exclusive=bool(flags & os.O_EXCL),
            flags=flags | os.O_CREAT))
        self.probed.learn(a, gen)
        self.dirattrs.learn(parent_inode, a)
        if a.get("created", True):
            self.cache.forget(a["ino"])  # a new inode: nothing cached for it can be valid
        elif flags & os.O_TRUNC and flags & os.O_ACCMODE:
            # an existing file the manager truncated: its inode was not known before the call,
            # so the cache is cut after the servers (a fetch racing this is discarded)
            await self.cache.truncate(a["ino"], 0)
            if self.gbackend is not None:
                await self.gbackend.truncate(a["ino"], 0)
        e = self.entry(a)
        h = self.table.open(a["ino"], flags, cred)
        self.counters["opens"] += 1
        return await self._file_info(h.fh, a["ino"], a), e

    @guard
    async def read(self, fh: int, off: int, size: int) -> bytes:
        h = self.table.get(fh)
        known = await self._known_size(h.ino)
        return await self.cache.read(h.ino, off, size, file_size=known)

    @guard
    async def write(self, fh: int, off: int, buf: bytes) -> int:
        self.counters["fuse_writes"] += 1  # write requests from the kernel (not write(2) calls)
        h = self.table.get(fh)
        info = self.table.info(h.ino)
        sync = h.sync or info.sync
        known = max(info.size, self.cache.size_hint(h.ino))
        info.wrote = True
        if sync and self.coherence is not None:
            stripe = await self._stripe_of(h.ino)
            await self.coherence.hold(h.ino, stripe, off, len(buf))
        n = await self.cache.write(h.ino, off, buf, sync=sync, file_size=known)
        if h.sync:
            if self.gbackend is not None:
                await self.gbackend.flush(h.ino)
            await self.client.fsync(h.ino, await self._stripe_of(h.ino),
                                    data_only=(h.flags & os.O_SYNC) != os.O_SYNC)
        if sync and self.coherence is not None:
            await self.coherence.invalidate(h.ino, await self._stripe_of(h.ino), off, len(buf))
        return n

    @guard
    async def flush(self, fh: int) -> None:
        ino = self.table.get(fh).ino
        if self.opts.testing_lose_close_writes:  # a broken client, on purpose (options.py)
            self.cache.forget(ino)
            return
        await self.cache.flush(ino)

    @guard
    async def fsync(self, fh: int, datasync: bool) -> None:
        h = self.table.get(fh)
        await self.cache.flush(h.ino)
        if self.gbackend is not None:
            await self.gbackend.flush(h.ino)  # the global cache's write-back, then the disks
        await self.client.fsync(h.ino, await self._stripe_of(h.ino), data_only=datasync)

    @guard
    async def release(self, fh: int) -> None:
        h = self.table.close(fh)
        removed = h.ino in self._removed_open and not self.table.is_open(h.ino)
        try:
            await self.cache.flush(h.ino)
            if removed:  # the manager removes it at this close: write back first
                await self._removing(h.ino)
        except OSError as exc:
            log.warning("write-back of inode %d at close: %s", h.ino, exc)
        finally:
            await self.client.close_file(h.ino, h.cred)
        if removed:
            await self._removed(h.ino)
