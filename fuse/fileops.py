"""The mount's side of open files: open, create, read, write, flush, fsync, release.

Reads and writes go through the node's block cache (``pvfs.cache``), which fetches from and
writes back to the I/O daemons or the global caches; ``coherence=sync`` holds and invalidates
other nodes' copies around a sync write. ``keep_cache`` is decided at open from the file's
(size, mtime) at the manager (``_file_info``). A file whose last name goes while it is open
here keeps what the caches hold of it until its last close (``removing``, ``removed``).

``FileOperations`` is a part of :class:`~.operations.Operations` (``ops.files``): the pyfuse3
handlers there take the request's credentials and call these methods, and their ``guard``
turns what these raise into an errno.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager, nullcontext
from typing import TYPE_CHECKING

from pyfuse3 import EntryAttributes, FileInfo

from pvfs.layout.stripe import Stripe
from pvfs.protocol.cred import Cred

from .closes import DeferredCloses
from .creates import CreatesAhead
from .delegations import WriteDelegations
from .handles import HandleTable
from .leases import LeaseCache

if TYPE_CHECKING:
    from pvfs.cache import BlockCache
    from pvfs.client.aclient import AsyncClient
    from pvfs.gcache.backend import GcacheBackend

    from .cachewire import Coherence
    from .options import MountOptions

log = logging.getLogger("pvfs.fuse")

__all__ = ["FileOperations"]


class FileOperations:
    """The handlers of open files, without the kernel's request context.

    Args:
        client: the mount's client (``open``, ``getattr``, ``fsync``).
        table: the open-file table, shared with the name space.
        cache: the node's block cache.
        opts: the mount options (``direct_io``, ``writeback_cache``,
            ``testing_lose_close_writes``).
        counters: the mount's counters, shared (``opens``, ``fuse_writes``,
            ``reopen_invalidations``).
        gbackend: the global caches' backend (``flush``, ``truncate``, ``truncation``,
            ``forget``), or None.
        coherence: the ``coherence=sync`` side (``hold``, ``invalidate``), or None.
        learn: take a file's attributes from a reply into ``table``; returns them.
        entry: the kernel's entry of a reply's attributes (learning them too).
        stripe_of: a file's layout, asked of the manager when not yet known.
        kernel_invalidate: drop the kernel's attributes (``attr_only``) or also its pages
            of an inode.

    Attributes:
        removed_open: files whose last name went while this mount held them open: at their
            last close the global cache's copy is written back before the manager removes
            them, then dropped.
        closes: the closes not yet told to the manager (:class:`~.closes.DeferredCloses`).
    """

    def __init__(self, *, client: AsyncClient, table: HandleTable, cache: BlockCache,
                 opts: MountOptions, counters: dict[str, int], gbackend: GcacheBackend | None,
                 coherence: Coherence | None, learn: Callable[[dict], dict],
                 entry: Callable[[dict], EntryAttributes],
                 stripe_of: Callable[[int], Awaitable[Stripe]],
                 kernel_invalidate: Callable[..., Awaitable[None]]) -> None:
        self.client, self.table, self.cache, self.opts = client, table, cache, opts
        self.counters, self.gbackend, self.coherence = counters, gbackend, coherence
        self._learn, self._entry = learn, entry
        self._stripe_of, self._kernel_invalidate = stripe_of, kernel_invalidate
        self.removed_open: set[int] = set()
        # The manager hears of closes in batches (closes.py); a task of the mount sends them.
        self.closes = DeferredCloses(client, opts.timeout)
        self.ahead: CreatesAhead | None = None  # creates made ahead (set by Operations)
        self.leases: LeaseCache | None = None  # with open_ahead (set by Operations)
        self.delegations: WriteDelegations | None = None  # files written alone (delegations.py)

    def global_truncation(self, ino: int, size: int) -> AbstractAsyncContextManager:
        """The global cache's side of a truncation of the servers (nothing without one):
        see ``GcacheBackend.truncation``."""
        if self.gbackend is None:
            return nullcontext()
        return self.gbackend.truncation(ino, size)

    async def _known_size(self, ino: int) -> int:
        info = self.table.info(ino)
        if info.size_stale:
            self._learn(await self.client.getattr(ino))
        return max(info.size, self.cache.size_hint(ino))

    async def _file_info(self, fh: int, ino: int, a: dict) -> FileInfo:
        """Decide keep_cache: the kernel and local caches survive a reopen only if the file's
        (size, mtime) at the manager is what this node saw at its last open (or the change
        was this node's own write). After another node's change the kernel's attributes go
        too: it reads no further than the size it holds (for ``attr_timeout``), so a read
        past it must ask again, or the other node's sync write that grew the file would not
        be seen after this open (hypothesis, two coherence=sync mounts, 2026-11-27)."""
        info = self.table.info(ino)
        stamp = (a["size"], a["mtime_ns"])
        # This node's own writes excuse a new stamp only if they explain its size (the end of
        # its writes or truncation, or the size it saw grown to that end): a file another
        # node cut or grew since is not this node's doing (issue 33).
        end = self.cache.size_hint(ino)
        own = info.wrote and info.stamp is not None \
            and a["size"] in (end, max(info.stamp[0], end))
        keep = info.stamp is None or info.stamp == stamp or own
        if not keep:
            await self._kernel_invalidate(ino, attr_only=True)
            if info.opens <= 1 and not self.cache.has_dirty(ino):
                self.counters["reopen_invalidations"] += 1
                self.cache.invalidate(ino)
                # Nothing of this node's is unwritten: the servers' size is the file's. The
                # end of this node's old writes is not (another node may have cut the file:
                # reads would return zeros past its end, an O_APPEND write would leave a
                # hole of zeros; two coherence=sync mounts, issue 33).
                await self.cache.truncate(ino, a["size"])
        info.stamp = stamp
        info.wrote = False
        direct = self.opts.direct_io or (self.opts.writeback_cache and (
            self.table.get(fh).sync or info.sync))
        return FileInfo(fh=fh, direct_io=direct, keep_cache=keep and not direct)

    def _open_here(self, inode: int) -> dict | None:
        """An open answered here, its count told later (closes.py), or None: ask the
        manager. Only under a lease of the file's attributes (the kernel checked the
        permission bits against them), and not with global caches. The caller sends an
        open that truncates to the manager (it changes the file there)."""
        if self.leases is None or self.gbackend is not None:
            return None
        a = self.leases.getattr(inode)
        if a is None or a.get("type") != "file" or not a.get("stripe"):
            return None
        self.closes.opened(inode)
        return self._learn(a)

    async def open(self, inode: int, flags: int, cred: Cred) -> FileInfo:
        if flags & os.O_TRUNC and flags & os.O_ACCMODE:
            if self.delegations is not None:  # the manager's truncation reports the size
                await self.delegations.end(inode)
            # the manager truncates the servers inside open; a refused open cuts nothing
            async with self.cache.truncation(inode, 0), self.global_truncation(inode, 0):
                a = self._learn(await self.client.open(inode, flags, cred))
            self.table.info(inode).wrote = True
        else:
            a = self._open_here(inode)
            if a is None:
                a = self._learn(await self.client.open(inode, flags, cred))
        h = self.table.open(inode, flags, cred)
        self.counters["opens"] += 1
        return await self._file_info(h.fh, inode, a)

    async def create(self, a: dict, flags: int, cred: Cred) -> tuple[FileInfo, EntryAttributes]:
        """Open the file the manager's create answered ``a`` for (made, or found without
        ``O_EXCL``)."""
        if a.get("created", True):
            self.cache.forget(a["ino"])  # a new inode: nothing cached for it can be valid
        elif flags & os.O_TRUNC and flags & os.O_ACCMODE:
            # an existing file the manager truncated: its inode was not known before the call,
            # so the cache is cut after the servers (a fetch racing this is discarded)
            await self.cache.truncate(a["ino"], 0)
            if self.gbackend is not None:
                await self.gbackend.truncate(a["ino"], 0)
        e = self._entry(a)
        h = self.table.open(a["ino"], flags, cred)
        self.counters["opens"] += 1
        return await self._file_info(h.fh, a["ino"], a), e

    def made(self, a: dict, flags: int, cred: Cred, fh: int) -> EntryAttributes:
        """Open, as :meth:`create` does, a file a C worker created and already answered with
        handle ``fh`` (csrc/front/creates.c): a new inode, its handle kept (``keep_cache``),
        never ``direct_io`` (the workers make no O_SYNC file, nor any with ``-o direct_io``).
        Returns the entry Python would have answered, for the tests to compare."""
        ino = a["ino"]
        self.cache.forget(ino)
        e = self._entry(a)
        self.table.open(ino, flags, cred, fh=fh)
        self.counters["opens"] += 1
        info = self.table.info(ino)
        info.stamp, info.wrote = (a["size"], a["mtime_ns"]), False
        return e

    async def read(self, fh: int, off: int, size: int) -> bytes:
        h = self.table.get(fh)
        if self.ahead is not None:
            self.ahead.check(h.ino)
        known = await self._known_size(h.ino)
        return await self.cache.read(h.ino, off, size, file_size=known)

    async def write(self, fh: int, off: int, buf: bytes) -> int:
        self.counters["fuse_writes"] += 1  # write requests from the kernel (not write(2) calls)
        h = self.table.get(fh)
        dels = self.delegations
        if self.ahead is not None:
            if dels is not None and dels.holds(h.ino):
                self.ahead.check(h.ino)  # its create goes before its data leave (_before_write)
            else:  # the file's create before its data (creates.py)
                await self.ahead.before_io(h.ino)
        info = self.table.info(h.ino)
        sync = h.sync or info.sync
        known = max(info.size, self.cache.size_hint(h.ino))
        info.wrote = True
        if sync and self.coherence is not None:
            stripe = await self._stripe_of(h.ino)
            await self.coherence.hold(h.ino, stripe, off, len(buf))
        n = await self.cache.write(h.ino, off, buf, sync=sync, file_size=known)
        if dels is not None:
            dels.wrote(h.ino)
        if h.sync:
            if self.gbackend is not None:
                await self.gbackend.flush(h.ino)
            await self.client.fsync(h.ino, await self._stripe_of(h.ino),
                                    data_only=(h.flags & os.O_SYNC) != os.O_SYNC)
        if sync and self.coherence is not None:
            await self.coherence.invalidate(h.ino, await self._stripe_of(h.ino), off, len(buf))
        return n

    def behind_ok(self, fh: int) -> bool:
        """Whether the C front end may answer this handle's writes before they are applied
        (fuse/cfront.py): when they are write-behind here already, so that a write(2) could
        report nothing a later fsync or close does not -- a writable handle, not O_SYNC/
        O_DSYNC nor of a ``user.pvfs.sync`` file, with ``coherence=none``, the local cache on,
        no global caches, not ``direct_io``/``writeback_cache``/``testing_lose_close_writes``."""
        if not self.behind_new_ok():
            return False
        h = self.table.get(fh)
        return h.writable and not h.sync and not self.table.info(h.ino).sync

    def behind_new_ok(self) -> bool:
        """The mount's part of :meth:`behind_ok`: whether a writable handle of a new file
        (not O_SYNC/O_DSYNC, no ``user.pvfs.sync`` yet) may have its writes answered early."""
        opts = self.opts
        return not (opts.coherence != "none" or not opts.cache or opts.direct_io or
                    opts.writeback_cache or opts.testing_lose_close_writes or
                    self.gbackend is not None or self.coherence is not None)

    def serve_ok(self) -> bool:
        """Whether the C front end may answer reads of cached blocks itself (fuse/cfront.py,
        ``serve_reads``): with the local cache on, ``coherence=none`` and no global caches
        -- where a read served here is answered from those blocks alone, whatever the
        handle (the cache drops what it published before any change, _served.py)."""
        opts = self.opts
        return bool(opts.serve_reads and opts.cache and opts.coherence == "none" and
                    self.gbackend is None and self.coherence is None)

    def park_write_error(self, fh: int, exc: OSError) -> None:
        """A write answered before it was applied failed: its file's next fsync or close
        reports it, as a write-back error of the block cache."""
        self.cache.park_error(self.table.get(fh).ino, exc)

    async def flush(self, fh: int) -> None:
        h = self.table.get(fh)
        ino = h.ino
        if self.opts.testing_lose_close_writes:  # a broken client, on purpose (options.py)
            self.cache.forget(ino)
            return
        if not h.writable:
            # Nothing was written through it: what other handles left unwritten goes at
            # their close or fsync, or with the flusher -- a reader's close must not wait
            # for a write-back under way (as the C front end answers it: docs/mount.md).
            return
        if self.delegations is not None and self.delegations.keeps(ino, count=False):
            return  # written back later: nobody else sees the file before (delegations.py)
        await self.cache.flush(ino)

    async def fsync(self, fh: int, datasync: bool) -> None:
        h = self.table.get(fh)
        if self.ahead is not None:  # its create, durable at the manager
            await self.ahead.send_pending()
            self.ahead.check(h.ino)
        await self.cache.flush(h.ino)
        if self.delegations is not None:  # explicit times its data carry, set on them
            await self.delegations.settle(h.ino)
        if self.gbackend is not None:
            await self.gbackend.flush(h.ino)  # the global cache's write-back, then the disks
        await self.client.fsync(h.ino, await self._stripe_of(h.ino), data_only=datasync)

    async def release(self, fh: int) -> None:
        h = self.table.close(fh)
        removed = h.ino in self.removed_open and not self.table.is_open(h.ino)
        dels = self.delegations
        try:
            if removed and dels is not None and dels.holds(h.ino):
                # written alone, its last name gone: its data go unwritten (nothing of it
                # may land after the manager removes it at this close)
                await self.cache.truncate(h.ino, 0)
                dels.dropped(h.ino)
            elif h.writable and (dels is None or not dels.keeps(h.ino)):
                await self.cache.flush(h.ino)
            if removed:  # the manager removes it at this close: write back first
                await self.removing(h.ino)
        except OSError as exc:
            log.warning("write-back of inode %d at close: %s", h.ino, exc)
        finally:
            # a file created ahead and closed before its create was sent: sent unopened
            if not (self.ahead is not None and not self.table.is_open(h.ino)
                    and self.ahead.closed(h.ino)):
                self.closes.add(h.ino)
        if removed:
            await self.removed(h.ino)

    # ------------------------------------------------------------------ removal
    async def removing(self, ino: int) -> None:
        """The last name of file ``ino`` is about to go. Unless it is open here, the manager
        removes its stripe files at once: the global cache's write-back of what this mount
        wrote must come first, or it lands on the I/O daemons after the removal and makes
        the stripe files again (orphans ``fsck`` found after pjdfstest with global caches)."""
        if self.gbackend is not None and not self.table.is_open(ino):
            await self.gbackend.flush(ino)

    async def removed(self, ino: int) -> None:
        """The last name of file ``ino`` is gone: drop what the caches hold of it, or, while
        it is open here, do so at its last close (``release``)."""
        if self.table.is_open(ino):
            if self.gbackend is not None or (self.delegations is not None and
                                             self.delegations.holds(ino)):
                self.removed_open.add(ino)
            return
        self.removed_open.discard(ino)
        self.cache.forget(ino)
        self.table.inodes.pop(ino, None)
        if self.gbackend is not None:
            await self.gbackend.forget(ino)
