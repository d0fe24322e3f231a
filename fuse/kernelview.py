"""What a mount tells the kernel: entries made from attributes, and invalidations.

A part of the mount's ``Operations`` (``ops.view``). Every reply that carries attributes
goes through :meth:`KernelView.entry` (the timeouts the kernel caches them for, with leases
until the session's end; the size this node's cache knows beyond the manager's). The
notifications -- a callback's or a recall's invalidation of an inode's attributes and pages
or of a name -- go through the front end's :class:`~.kernel.Kernel` (``kernel``: pyfuse3's,
or the C front end's, set by mount.py), and only once the session runs (``ready``).
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable

import pyfuse3
import trio
from pyfuse3 import EntryAttributes

from pvfs.cache import BlockCache

from .handles import HandleTable
from .kernel import Kernel, Pyfuse3Front
from .leases import LeaseCache
from .options import MountOptions

log = logging.getLogger("pvfs.fuse")

__all__ = ["KernelView", "statvfs"]


def _blocks(a: dict, size: int) -> int:
    """st_blocks: a file's from the space its stripe files use (the manager sums the I/O
    daemons' st_blocks), plus what this node's cache holds beyond the size they know;
    others from the size (FIFOs, sockets, devices: none)."""
    if a.get("type") in ("fifo", "socket", "chr", "blk"):
        return 0
    used = a.get("blocks")
    if used is None:
        return (size + 511) // 512
    return used + (max(size - a["size"], 0) + 511) // 512


def statvfs(r: dict) -> pyfuse3.StatvfsData:
    """The kernel's statfs reply from the manager's."""
    s = pyfuse3.StatvfsData()
    s.f_bsize = s.f_frsize = r["bsize"]
    s.f_blocks, s.f_bfree, s.f_bavail = r["blocks"], r["bfree"], r["bavail"]
    s.f_files, s.f_ffree, s.f_favail = r["files"], r["ffree"], r["ffree"]
    s.f_namemax = r["namemax"]
    return s


class KernelView:
    """Entries and notifications for the kernel.

    Args:
        opts: the mount's options (entry and attribute timeouts).
        cache: the block cache (sizes beyond the manager's; pages to drop).
        table: open handles and inode info (every inode a callback names).
        counters: the mount's counters (``kernel_invalidations``).
        learn: records a reply's attributes in the inode info; returns them.
    """

    def __init__(self, opts: MountOptions, cache: BlockCache, table: HandleTable,
                 counters: dict, learn: Callable[[dict], dict]) -> None:
        self.opts, self.cache, self.table, self.counters = opts, cache, table, counters
        self._learn = learn
        self.leases: LeaseCache | None = None  # -o leases: set by Operations
        # A file's mtime as shown here, from the manager's: its last write here or the
        # times set on it while this mount holds its data alone (delegations.py).
        self.local_mtime: Callable[[int, int], int] | None = None
        self.kernel: Kernel = Pyfuse3Front.kernel
        self.ready = False  # invalidate_inode only once the session runs

    def entry(self, a: dict) -> EntryAttributes:
        """The kernel's entry for attributes ``a``. With leases, leased attributes are
        cached by the kernel until the session's end (``LeaseCache.kernel_timeout``);
        ``attr_timeout=0`` stays 0."""
        self._learn(a)
        e = EntryAttributes()
        e.st_ino = a["ino"]
        e.generation = 0
        e.entry_timeout = self.opts.entry_timeout
        e.attr_timeout = self.opts.attr_timeout
        if self.leases is not None and e.attr_timeout:
            e.attr_timeout = self.leases.kernel_timeout(a["ino"], e.attr_timeout)
        e.st_mode = a["mode"]
        e.st_nlink = a["nlink"]
        e.st_uid = a["uid"]
        e.st_gid = a["gid"]
        e.st_rdev = a.get("rdev", 0)
        size = a["size"]
        if a.get("type") == "file":
            size = max(size, self.cache.size_hint(a["ino"]))
        e.st_size = size
        e.st_blksize = 1 << 20  # cp and friends size their buffers from this
        e.st_blocks = _blocks(a, size)
        e.st_atime_ns = a["atime_ns"]
        e.st_mtime_ns = a["mtime_ns"]
        e.st_ctime_ns = a["ctime_ns"]
        if self.local_mtime is not None and a.get("type") == "file":
            m = self.local_mtime(a["ino"], e.st_mtime_ns)
            if m != e.st_mtime_ns:  # written here, not yet written back (delegations.py)
                e.st_mtime_ns = m
                e.st_ctime_ns = max(e.st_ctime_ns, m)
        return e

    def named(self, e: EntryAttributes, parent: int, name: str) -> EntryAttributes:
        """``e`` as the answer for ``name`` in ``parent``: with leases the kernel caches a
        name of a leased directory this mount knows until the session's end
        (``LeaseCache.name_timeout``)."""
        if self.leases is not None:
            e.entry_timeout = self.leases.name_timeout(parent, name, e.st_ino, e.entry_timeout)
        return e

    def missing(self, parent: int, name: str) -> EntryAttributes:
        """"No such name" for the kernel to cache while a lease covers it (a negative entry),
        or ``FUSEError(ENOENT)`` raised when nothing does."""
        left = 0.0
        if self.leases is not None:
            left = self.leases.name_timeout(parent, name, 0, self.opts.entry_timeout)
        if not left or left <= self.opts.entry_timeout:
            raise pyfuse3.FUSEError(errno.ENOENT)
        e = EntryAttributes()
        e.st_ino, e.generation, e.entry_timeout, e.attr_timeout = 0, 0, left, 0
        return e

    async def invalidated(self, ino: int, offset: int, length: int) -> None:
        """A callback from an I/O daemon: another node's sync write (ino 0: everything)."""
        inos = [ino] if ino else list(self.table.inodes)
        for i in inos:
            self.cache.invalidate(i, offset, length or None)
            self.table.info(i).size_stale = True
            await self.invalidate(i)

    async def lease_attrs_recalled(self, inos: list[int]) -> None:
        """The manager recalls leases: the kernel's cached attributes go before the answer
        (no lock is taken), so no stat after the change finds them."""
        if not self.ready:
            return
        for ino in inos:
            await self.invalidate(ino, attr_only=True)

    async def lease_recalled(self, inos: list[int], names: list[tuple[int, str]]) -> None:
        """The manager recalls leases: the kernel's names of them go (in a thread: each
        takes its directory's lock; ``LeaseSession`` answers after at most ``_NAMES_WAIT``)."""
        if self.ready and names:
            await trio.to_thread.run_sync(self._drop_names, names)

    def _drop_names(self, names: list[tuple[int, str]]) -> None:
        for parent, name in names:
            try:
                self.kernel.invalidate_entry(parent, os.fsencode(name))
            except OSError as exc:
                if exc.errno != errno.ENOENT:
                    log.info("invalidate_entry(%d, %r): %s", parent, name, exc)

    async def invalidate(self, ino: int, attr_only: bool = False) -> None:
        """Drop the kernel's cached attributes of ``ino`` and, unless ``attr_only``, its
        pages (in a thread: with the kernel's write-back cache it may wait for writes)."""
        if not self.ready:
            return
        self.counters["kernel_invalidations"] += 1
        try:
            await trio.to_thread.run_sync(self.kernel.invalidate_inode, ino, attr_only)
        except OSError as exc:
            if exc.errno != errno.ENOENT:
                log.info("invalidate_inode(%d): %s", ino, exc)

    def unsized_entry(self, a: dict) -> EntryAttributes:
        """A directory entry whose size is unknown: not learned, not cached by the kernel."""
        e = EntryAttributes()
        e.st_ino, e.generation, e.entry_timeout, e.attr_timeout = a["ino"], 0, 0, 0
        e.st_mode, e.st_nlink, e.st_uid, e.st_gid = a["mode"], a["nlink"], a["uid"], a["gid"]
        e.st_rdev = a.get("rdev", 0)
        e.st_size = self.cache.size_hint(a["ino"]) if a.get("type") == "file" else a["size"]
        e.st_blksize = 1 << 20
        e.st_atime_ns, e.st_mtime_ns, e.st_ctime_ns = a["atime_ns"], a["mtime_ns"], a["ctime_ns"]
        return e
