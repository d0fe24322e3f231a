"""The pyfuse3 ``Operations`` of a pvfs mount: every handler of the name space and the data path.

Errors: every handler is wrapped in ``guard.guard``, which turns what it raises into an errno.
The handlers of open files (open, create, read, write, flush, fsync, release) take the
request's credentials here and delegate to the ``files`` part (``fileops.py``); what the
kernel is told -- entries, invalidations -- goes through the ``view`` part (``kernelview.py``).

Credentials: the request's uid/gid and the caller's groups (``/proc/<pid>/status``, cached 1 s).
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import time
from typing import Any

import pyfuse3
from pyfuse3 import EntryAttributes, FileInfo, FUSEError, RequestContext

from pvfs.cache import BlockCache, StreamPolicy, WritebackPolicy
from pvfs.client.aclient import AsyncClient
from pvfs.layout.stripe import Stripe
from pvfs.protocol.cred import Cred

from .cachewire import ClientBackend, Coherence, Controls, MountBypass
from .creates import CreatesAhead
from .delegations import WriteDelegations
from .dirattrs import DirAttrs
from .fileops import FileOperations
from .gcachewire import make_gcache_backend
from .guard import guard
from .handles import HandleTable
from .kernelview import KernelView, statvfs
from .leases import MISSING, LeaseCache
from .listings import Listings
from .options import MountOptions
from .removals import Removals
from .writehooks import WriteHooks
from .xattrs import ACL_XATTRS, PROBED_XATTRS, ProbedCache, VirtualXattrs

log = logging.getLogger("pvfs.fuse")

__all__ = ["Operations"]

_GROUPS_TTL = 1.0
_NAME_MAX = 255  # bytes of one name (the manager refuses longer ones)


class Operations(pyfuse3.Operations):
    """All handlers; one instance per mount (``files``: the side of open files)."""

    supports_dot_lookup = True
    enable_writeback_cache = False
    enable_acl = False

    def __init__(self, client: AsyncClient, options: MountOptions) -> None:
        super().__init__()
        self.client = client
        self.opts = options
        self.table = HandleTable()
        self.backend = ClientBackend(client, self.table, self._stripe_of,
                                     gathers=options.gather_writes)
        bits = MountBypass(everything=not options.cache)
        # The global caches (docs/caching.md): between the local cache and the I/O daemons.
        self.gbackend = make_gcache_backend(self.backend, client.config, self._stripe_of, bits,
                                            options)
        self.cache = BlockCache(self.gbackend or self.backend, block_size=options.block_size,
                                capacity=options.cache_size, bypass=bits,
                                writeback=WritebackPolicy(max_age=options.dirty_age,
                                                          interval=options.flush_interval),
                                stream=StreamPolicy(min_bytes=options.stream_min,
                                                    write_min_bytes=options.stream_write_min,
                                                    readahead=options.cache_readahead))
        self.counters = dict.fromkeys(("backend_errors", "internal_errors", "opens",
                                       "kernel_invalidations", "reopen_invalidations",
                                       "capability_hits", "fuse_writes", "writes_joined",
                                       "unlinked_mismatch"), 0)
        # What the kernel is told: entries from attributes, invalidations, through the front
        # end (kernelview.py; mount.py sets the C front end's kernel when -o frontend=c).
        self.view = KernelView(options, self.cache, self.table, self.counters, self._learn)
        self.coherence: Coherence | None = None
        if options.coherence == "sync":
            self.coherence = Coherence(client, self.cache, self.view.invalidated)
            self.backend.coherence = self.coherence
        self.files = FileOperations(
            client=client, table=self.table, cache=self.cache, opts=options,
            counters=self.counters, gbackend=self.gbackend, coherence=self.coherence,
            learn=self._learn, entry=self.view.entry, stripe_of=self._stripe_of,
            kernel_invalidate=self.view.invalidate)
        self.controls = Controls(self.cache, self.table, vars(options), self._extra_stats)
        self._groups: dict[int, tuple[float, tuple[int, ...]]] = {}
        self.probed = ProbedCache(options.attr_timeout, self.counters)
        # A directory's attributes from the replies to this mount's creates and unlinks in
        # it, for the kernel's getattr that follows each of them (dirattrs.py).
        self.dirattrs = DirAttrs(options.attr_timeout)
        self.virtual = VirtualXattrs(client, self.controls, self.table, self._learn,
                                     self.view.invalidate)
        # -o leases: what the manager leased this mount is answered here (leases.py); the
        # session runs as a task of the mount (mount.py). fh -> (tick, every page leased) of
        # a listing from its start, to learn that a directory is complete.
        self.leases = LeaseCache(client, self.view.lease_recalled) if options.leases else None
        if self.leases is not None:
            self._wire_leases(self.leases)
        # Creates in a directory this mount leases alone, answered here (creates.py).
        self.ahead = CreatesAhead(client, self.leases, options.timeout, options.ahead_delay,
                                  self.cache.changing) \
            if self.leases is not None and options.create_ahead else None
        self.files.ahead = self.ahead
        # Files created ahead here whose data stay past close until written back
        # (delegations.py): not through the global caches, nor without a cache.
        self.delegations = WriteDelegations(self.cache, self.leases, self._data_mtime) \
            if self.ahead is not None and options.write_delegations and options.cache and \
            self.gbackend is None else None
        if self.delegations is not None:
            self._wire_delegations(self.delegations)
        # Unlinks and renames over files: the caches' side of a last name going (removals.py).
        self.removals = Removals(client=client, table=self.table, cache=self.cache,
                                 files=self.files, gbackend=self.gbackend, leases=self.leases,
                                 ahead=self.ahead, delegations=self.delegations)
        if self.leases is not None and options.open_ahead:  # read-only opens (closes.py)
            closes = self.files.closes
            self.files.leases = self.leases
            client.before_meta.append(closes.before_meta)
            self.leases.before_answer.append(closes.send_opens)
            self.leases.on_session_end.append(closes.session_ended)
            if self.ahead is not None and self.gbackend is None:
                self.ahead.opens = closes  # creates' opens too (creates.py)
        self.listings = Listings(client=client, table=self.table, leases=self.leases,
                                 view=self.view, probed=self.probed, named=self._entry_named,
                                 tick=self._tick)
        # Read by pyfuse3.init: the kernel keeps written pages and writes them back itself
        # (flush/fsync/memory pressure). Handles whose writes must reach the I/O daemons at
        # once (O_SYNC/O_DSYNC, user.pvfs.sync=1) are opened direct_io instead
        # (``FileOperations._file_info``).
        self.enable_writeback_cache = options.writeback_cache

    # ------------------------------------------------------------------ helpers
    def _wire_delegations(self, dels: WriteDelegations) -> None:
        """The parts that ask the write delegations (delegations.py)."""
        self.ahead.delegations = self.files.delegations = dels
        self.view.local_mtime = dels.mtime
        self.virtual.before_setstripe = dels.end
        self.backend.data_mtime = dels.mtime_with_data
        self.backend.after_writes = dels.after_writes
        self.backend.carries_times = dels.carries_times

    def _extra_stats(self) -> dict:
        out = dict(self.counters)
        out["open_handles"] = len(self.table.handles)
        if self.ahead is not None:
            out["creates_ahead"] = self.ahead.status()
        if self.delegations is not None:
            out["write_delegations"] = self.delegations.status()
        out["handle_counts"] = self.files.closes.status()
        out["dir_attr_hits"] = self.dirattrs.hits
        out["coherence"] = self.opts.coherence
        out["frontend"] = self.view.kernel.stats()
        if self.coherence is not None:
            out.update(self.coherence.counters)
        if self.gbackend is not None:
            out["gcache"] = self.gbackend.stats()
        if self.leases is not None:
            out["leases"] = self.leases.status()
        return out

    def cred(self, ctx: RequestContext) -> Cred:
        now = time.monotonic()
        got = self._groups.get(ctx.pid)
        if got is None or got[0] < now:
            try:
                groups = tuple(sorted(pyfuse3.get_sup_groups(ctx.pid)))[:64]
            except (OSError, ValueError):
                groups = ()
            if len(self._groups) > 4096:
                self._groups.clear()
            self._groups[ctx.pid] = got = (now + _GROUPS_TTL, groups)
        return Cred(ctx.uid, ctx.gid, got[1])

    def _wire_leases(self, leases: LeaseCache) -> None:
        """What a recall drops first: the kernel's attributes, and what this mount's own
        changes taught it of those directories."""
        self.view.leases = leases
        leases.before_answer.append(self.view.lease_attrs_recalled)
        leases.before_answer.append(self._dirattrs_recalled)
        leases.kernel_attrs_gone = self.view.lease_attrs_recalled
        hooks = WriteHooks(self)  # (reads ahead and delegations as they are then)
        self.backend.before_write = hooks.before_write
        self.backend.before_writes = hooks.before_writes

    async def _dirattrs_recalled(self, inos: list[int]) -> None:
        """Another client is about to change these: what this mount's own changes taught it
        of them (dirattrs.py) is no longer true either."""
        self.dirattrs.forget(*inos)

    def _learn(self, a: dict) -> dict:
        if a.get("type") == "file":
            info = self.table.info(a["ino"])
            if a.get("stripe"):
                info.stripe = Stripe(*a["stripe"])
            if a["size"] != info.size:
                self.cache.changing(a["ino"])  # reads answered in C had the old size
            info.size = a["size"]
            info.size_stale = False
        return a

    def _entry_named(self, parent: int, name: str, a: dict) -> EntryAttributes:
        """The kernel's entry for ``name`` in ``parent`` (its timeouts: kernelview.py)."""
        return self.view.named(self.view.entry(self._named(parent, name, a)), parent, name)

    def _named(self, parent: int, name: str, a: dict) -> dict:
        if a.get("type") == "file":
            self.removals.named(parent, name, a["ino"])
            if self.ahead is not None:
                self.ahead.alive(a["ino"])
        return a

    async def _data_mtime(self, ino: int, size: int, mtime_ns: int) -> None:
        await self.client.data_mtime(ino, await self._stripe_of(ino), size, mtime_ns)

    async def _stripe_of(self, ino: int) -> Stripe:
        info = self.table.info(ino)
        if info.stripe is None:
            self._learn(await self.client.getattr(ino))
        if info.stripe is None:
            raise FUSEError(errno.EINVAL)
        return info.stripe

    def _tick(self, *changed: int) -> int:
        """With leases: a request's tick (``changed``: the inodes it changes)."""
        if self.leases is None:
            return 0
        return self.leases.changing(*changed) if changed else self.leases.tick()

    # ------------------------------------------------------------------ name space
    @guard
    async def lookup(self, parent_inode: int, name: bytes, ctx: RequestContext) -> EntryAttributes:
        n = os.fsdecode(name)
        leases = self.leases
        if leases is not None and len(name) <= _NAME_MAX:  # longer: the manager's ENAMETOOLONG
            held = leases.lookup(parent_inode, n)
            if held is MISSING:
                return self.view.missing(parent_inode, n)
            if held is not None:
                return self._entry_named(parent_inode, n, held)
        gen = self.probed.gen
        t = self._tick()
        if leases is None:
            a = await self.client.lookup(parent_inode, n, self.cred(ctx))
        else:
            a = await self.client.lookup(parent_inode, n, self.cred(ctx), missing=True)
            leases.learn(a, t, parent_inode, n)
            if not a["ino"]:
                return self.view.missing(parent_inode, n)
        self.probed.learn(a, gen)
        return self._entry_named(parent_inode, n, a)

    @guard
    async def getattr(self, inode: int, ctx: RequestContext) -> EntryAttributes:
        leases = self.leases
        if leases is not None:
            a = leases.getattr(inode)
            if a is not None:
                return self.view.entry(a)
        held = self.dirattrs.get(inode)
        if held is not None:
            e = self.view.entry(held[0])
            e.attr_timeout = min(e.attr_timeout, held[1])
            return e
        t = self._tick()
        a = await self.client.getattr(inode, self.cred(ctx))
        if leases is not None:
            leases.learn(a, t)
        return self.view.entry(a)

    @guard
    async def setattr(self, inode: int, attr: EntryAttributes, fields: pyfuse3.SetattrFields,
                      fh: int | None, ctx: RequestContext) -> EntryAttributes:
        t = self._tick(inode)
        a = await self._setattr(inode, attr, fields, fh, ctx)
        if self.leases is not None:
            self.leases.attrs_now(inode, a, t)
        return self.view.entry(a)

    async def _setattr(self, inode: int, attr: EntryAttributes, fields: pyfuse3.SetattrFields,
                       fh: int | None, ctx: RequestContext) -> dict:
        cred = self.cred(ctx)
        self.dirattrs.forget(inode)
        kw = self._setattr_fields(attr, fields)
        if not fields.update_size and self.ahead is not None and \
                (a := self.ahead.setattr(inode, kw, cred)) is not None:
            return a  # (a file created ahead, none of its data left: creates.py)
        if "mtime_ns" in kw and not fields.update_size and self.delegations is not None and \
                self.delegations.holds(inode):
            # None of its data left yet: they carry the times (delegations.py).
            before = self.delegations.held.get(inode)
            a = await self.client.setattr(inode, cred, **kw, data_sets_mtime=True)
            size = max(self.table.info(inode).size, self.cache.size_hint(inode))
            if self.delegations.times_later(inode, before, kw["mtime_ns"], size):
                return a
        if self.delegations is not None and (fields.update_size or fields.update_mtime):
            # A file whose data this mount holds alone goes first: the manager's truncation
            # reports its size, and a write-back after a new mtime would move it on.
            await self.delegations.end(inode)
        if fields.update_mtime and self.cache.has_dirty(inode):
            # Unwritten data of any file go before an explicit mtime, or their arrival would
            # move it on (tar x sets a large file's times through its handle, before close).
            await self.cache.flush(inode)
        if fields.update_size:
            info = self.table.info(inode)
            if info.stripe is None:
                self._learn(await self.client.getattr(inode, cred))
            await self.client.access(inode, os.W_OK, cred) if fh is None else None
            kw["size"] = attr.st_size
            # ftruncate through a handle opened for writing: access was checked at open
            kw["handle"] = fh is not None and self.table.get(fh).writable
            info.wrote = True
            # the cache is cut only once the servers are: see BlockCache.truncation
            async with self.cache.truncation(inode, attr.st_size), \
                    self.files.global_truncation(inode, attr.st_size):
                return await self.client.setattr(inode, cred, **kw)
        return await self.client.setattr(inode, cred, **kw)

    @staticmethod
    def _setattr_fields(attr: EntryAttributes, fields: pyfuse3.SetattrFields) -> dict:
        """The manager's setattr arguments for mode, owner and times (``now``: both times
        set to the current time, utimensat(NULL), whose permission rule differs)."""
        kw: dict[str, Any] = {}
        if fields.update_mode:
            kw["mode"] = stat.S_IMODE(attr.st_mode)
        if fields.update_uid:
            kw["uid"] = attr.st_uid
        if fields.update_gid:
            kw["gid"] = attr.st_gid
        if fields.update_atime or fields.update_mtime:
            now = time.time_ns()
            near = [abs(t - now) < 1_000_000_000 for t, u in
                    ((attr.st_atime_ns, fields.update_atime),
                     (attr.st_mtime_ns, fields.update_mtime)) if u]
            if fields.update_atime and fields.update_mtime and all(near):
                kw["now"] = True  # utimensat(NULL): the "now" permission rule applies
            else:
                if fields.update_atime:
                    kw["atime_ns"] = attr.st_atime_ns
                if fields.update_mtime:
                    kw["mtime_ns"] = attr.st_mtime_ns
        return kw

    @guard
    async def readlink(self, inode: int, ctx: RequestContext) -> bytes:
        return os.fsencode(await self.client.readlink(inode, self.cred(ctx)))

    @guard
    async def mknod(self, parent_inode: int, name: bytes, mode: int, rdev: int,
                    ctx: RequestContext) -> EntryAttributes:
        n = os.fsdecode(name)
        t = self._tick(parent_inode)
        if not stat.S_ISREG(mode):
            # FIFOs, sockets (bind), devices: inodes at the manager; the kernel serves them
            self.dirattrs.forget(parent_inode)
            a = await self.client.mknod(parent_inode, n, mode, rdev, self.cred(ctx))
        else:
            a = await self.client.create(parent_inode, n, stat.S_IMODE(mode), self.cred(ctx),
                                         exclusive=True)
        if self.leases is not None:  # (before dirattrs, which takes the parent's out)
            self.leases.made(parent_inode, n, a, t)
        if stat.S_ISREG(mode):
            self.dirattrs.learn(parent_inode, a)
        return self.view.named(self.view.entry(a), parent_inode, n)

    @guard
    async def mkdir(self, parent_inode: int, name: bytes, mode: int,
                    ctx: RequestContext) -> EntryAttributes:
        n = os.fsdecode(name)
        if self.ahead is not None and len(name) <= _NAME_MAX:
            a = await self.ahead.mkdir(parent_inode, n, stat.S_IMODE(mode), self.cred(ctx))
            if a is not None:
                self.dirattrs.learn(parent_inode, a)
                return self.view.named(self.view.entry(a), parent_inode, n)
        t = self._tick(parent_inode)
        a = await self.client.mkdir(parent_inode, n, stat.S_IMODE(mode), self.cred(ctx))
        if self.leases is not None:  # (before dirattrs, which takes the parent's out)
            self.leases.made(parent_inode, n, a, t, is_dir=True)
        self.dirattrs.learn(parent_inode, a)
        return self.view.named(self.view.entry(a), parent_inode, n)

    @guard
    async def unlink(self, parent_inode: int, name: bytes, ctx: RequestContext) -> None:
        n = os.fsdecode(name)
        t = self._tick(parent_inode)
        reply = await self.removals.unlink(parent_inode, n, self.cred(ctx))
        if self.leases is not None:  # (before dirattrs, which takes the parent's out)
            self.leases.removed(parent_inode, n, t, reply)
        self.dirattrs.learn(parent_inode, reply)

    @guard
    async def rmdir(self, parent_inode: int, name: bytes, ctx: RequestContext) -> None:
        n = os.fsdecode(name)
        self.dirattrs.forget(parent_inode)
        t = self._tick(parent_inode)
        cred = self.cred(ctx)
        reply = await self.ahead.rmdir(parent_inode, n, cred) if self.ahead is not None \
            else None
        if reply is None:
            await self.client.rmdir(parent_inode, n, cred)
        if self.leases is not None:
            self.leases.removed(parent_inode, n, t, reply)

    @guard
    async def symlink(self, parent_inode: int, name: bytes, target: bytes,
                      ctx: RequestContext) -> EntryAttributes:
        n = os.fsdecode(name)
        self.dirattrs.forget(parent_inode)
        t = self._tick(parent_inode)
        a = await self.client.symlink(parent_inode, n, os.fsdecode(target), self.cred(ctx))
        if self.leases is not None:
            self.leases.made(parent_inode, n, a, t)
        return self.view.named(self.view.entry(a), parent_inode, n)

    @guard
    async def rename(self, parent_inode_old: int, name_old: bytes, parent_inode_new: int,
                     name_new: bytes, flags: int, ctx: RequestContext) -> None:
        old, new = (parent_inode_old, os.fsdecode(name_old)), (parent_inode_new, os.fsdecode(name_new))
        t = self._tick(parent_inode_old, parent_inode_new)
        self.dirattrs.forget_all()  # a moved directory's ctime and ".." change too
        try:
            await self.removals.rename(old, new, flags, self.cred(ctx))
        except BaseException:
            if self.leases is not None:
                self.leases.renamed(old, new, t, flags)
            raise
        if self.leases is not None:
            self.leases.renamed(old, new, t, flags, done=True)

    @guard
    async def link(self, inode: int, new_parent_inode: int, new_name: bytes,
                   ctx: RequestContext) -> EntryAttributes:
        n = os.fsdecode(new_name)
        self.dirattrs.forget(new_parent_inode)
        t = self._tick(new_parent_inode, inode)
        a = await self.client.link(inode, new_parent_inode, n, self.cred(ctx))
        if self.leases is not None:
            self.leases.made(new_parent_inode, n, a, t)
            self.leases.attrs_now(inode, a, t)
        return self._entry_named(new_parent_inode, n, a)

    @guard
    async def opendir(self, inode: int, ctx: RequestContext) -> int:
        cred = self.cred(ctx)
        if self.leases is None or self.leases.getattr(inode) is None:
            # With leases (and so default_permissions) the kernel checked read permission
            # on the directory's leased, current attributes before asking.
            await self.client.access(inode, os.R_OK, cred)
        return self.table.open(inode, os.O_RDONLY | os.O_DIRECTORY, cred).fh

    @guard
    async def readdir(self, fh: int, start_id: int, token: Any) -> None:
        await self.listings.readdir(fh, start_id, token)

    @guard
    async def releasedir(self, fh: int) -> None:
        self.listings.closed(fh)
        self.table.close(fh)

    @guard
    async def fsyncdir(self, fh: int, datasync: bool) -> None:
        if self.ahead is not None:  # the creates made ahead: the manager's commit is durable
            await self.ahead.send_pending()

    @guard
    async def statfs(self, ctx: RequestContext) -> pyfuse3.StatvfsData:
        return statvfs(await self.client.statfs(self.cred(ctx)))

    @guard
    async def access(self, inode: int, mode: int, ctx: RequestContext) -> bool:
        await self.client.access(inode, mode, self.cred(ctx))
        return True

    def forget(self, inode_list: list[tuple[int, int]]) -> None:
        for ino, _ in inode_list:
            if not self.table.is_open(ino) and not self.cache.has_dirty(ino):
                info = self.table.inodes.get(ino)
                if info is not None and not info.sync and info.stamp is None:
                    self.table.inodes.pop(ino, None)

    # ------------------------------------------------------------------ open files
    @guard
    async def open(self, inode: int, flags: int, ctx: RequestContext) -> FileInfo:
        if self.leases is not None and flags & os.O_TRUNC:
            self._tick(inode)
            try:
                return await self.files.open(inode, flags, self.cred(ctx))
            finally:
                self.leases.forget(inode)
        return await self.files.open(inode, flags, self.cred(ctx))

    @guard
    async def create(self, parent_inode: int, name: bytes, mode: int, flags: int,
                     ctx: RequestContext) -> tuple[FileInfo, EntryAttributes]:
        cred = self.cred(ctx)
        n = os.fsdecode(name)
        if self.ahead is not None and len(name) <= _NAME_MAX:
            a = await self.ahead.create(parent_inode, n, stat.S_IMODE(mode), cred)
            if a is not None:
                self._named(parent_inode, n, a)
                self.probed.learn(a, self.probed.gen)
                self.dirattrs.learn(parent_inode, a)
                return await self._opened_named(parent_inode, n, a, flags, cred)
        gen = self.probed.gen
        t = self._tick(parent_inode)
        a = self._named(parent_inode, n, await self.client.create(
            parent_inode, n, stat.S_IMODE(mode), cred, exclusive=bool(flags & os.O_EXCL),
            flags=flags | os.O_CREAT))
        if self.leases is not None:
            self.leases.made(parent_inode, n, a, t)
            if not a.get("created"):
                self.leases.forget(a["ino"])  # opened, maybe truncated: asked again
        self.probed.learn(a, gen)
        self.dirattrs.learn(parent_inode, a)
        return await self._opened_named(parent_inode, n, a, flags, cred)

    async def _opened_named(self, parent: int, name: str, a: dict, flags: int,
                            cred: Cred) -> tuple[FileInfo, EntryAttributes]:
        fi, e = await self.files.create(a, flags, cred)
        return fi, self.view.named(e, parent, name)

    @guard
    async def read(self, fh: int, off: int, size: int) -> bytes:
        return await self.files.read(fh, off, size)

    @guard
    async def write(self, fh: int, off: int, buf: bytes) -> int:
        try:
            return await self.files.write(fh, off, buf)
        finally:
            if self.leases is not None:  # (its size and mtime here moved: cfront's copy goes)
                self.leases.changed_here(self.table.get(fh).ino)

    @guard
    async def flush(self, fh: int) -> None:
        await self.files.flush(fh)

    @guard
    async def fsync(self, fh: int, datasync: bool) -> None:
        await self.files.fsync(fh, datasync)

    @guard
    async def release(self, fh: int) -> None:
        await self.files.release(fh)

    # ------------------------------------------------------------------ xattrs
    @guard
    async def getxattr(self, inode: int, name: bytes, ctx: RequestContext) -> bytes:
        n = os.fsdecode(name)
        cred = self.cred(ctx)
        value = await self.virtual.get(inode, n, cred)
        if value is not None:
            return value
        if n in PROBED_XATTRS:
            return await self.probed.get(inode, n,
                                         lambda: self.client.getxattr(inode, n, cred))
        if n in ACL_XATTRS:
            raise FUSEError(errno.ENODATA)
        return await self.client.getxattr(inode, n, cred)

    @guard
    async def setxattr(self, inode: int, name: bytes, value: bytes, ctx: RequestContext) -> None:
        n = os.fsdecode(name)
        cred = self.cred(ctx)
        if not await self.virtual.set(inode, n, value, cred):
            await self._xattr_change(inode, self.client.setxattr(inode, n, value, cred))

    @guard
    async def listxattr(self, inode: int, ctx: RequestContext) -> list[bytes]:
        return [os.fsencode(n) for n in await self.client.listxattr(inode, self.cred(ctx))]

    @guard
    async def removexattr(self, inode: int, name: bytes, ctx: RequestContext) -> None:
        n = os.fsdecode(name)
        if not self.virtual.remove(inode, n):
            await self._xattr_change(inode, self.client.removexattr(inode, n, self.cred(ctx)))

    async def _xattr_change(self, inode: int, change) -> None:
        """Run a stored attribute's change (a coroutine): the inode's cached attributes,
        probed names and lease go before and after (its ctime moves)."""
        self.dirattrs.forget(inode)
        self.probed.changed(inode)
        self._tick(inode)
        try:
            await change
        finally:
            self.probed.changed(inode)
            if self.leases is not None:
                self.leases.forget(inode)
