"""The metadata manager: a trio server over the SQLite ``MetaStore``.

The manager takes no part in reads and writes (thesis §3.2.1). It answers name-space and
attribute calls, and talks to the I/O daemons only for what metadata needs of them: creating
and removing stripe files, the logical size and mtime of a file (implied by the sizes of its
stripe files), truncation, and statfs sums.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import time
from collections.abc import Awaitable, Callable

import trio

from pvfs import __version__
from pvfs.config import Config
from pvfs.layout.stripe import Stripe
from pvfs.metrics import Metrics, render
from pvfs.protocol.auth import key_for
from pvfs.protocol.schema import BY_PATH, MGR_SCHEMAS

from ..common import serve_tcp
from .ahead import CreatesAhead
from .group import GroupCommit
from .leases import LeaseTable
from .precreate import PrecreatePool
from .reaper import Reaper
from .refetch import SizeRefetcher
from .sizecache import SizeCache
from .store import Cred, MetaStore
from .stripefiles import StripeFiles
from .walks import PathWalks

log = logging.getLogger("pvfs.mgr")

#: Requests whose replies show nothing of the store: they need not wait for a commit.
_NO_STORE = frozenset({"ping", "sizes_changed", "metrics", "lease_register"})


class MgrServer:
    #: Requests that make their connection the caller's from then on (no op_ handler).
    CONNECTION_OPS = frozenset({"lease_register"})

    def __init__(self, config: Config) -> None:
        self.config = config
        os.makedirs(config.manager.data_dir, exist_ok=True)
        self.db_path = os.path.join(config.manager.data_dir, "meta.sqlite")
        self.key = key_for(config)  # before the store: a bad key file stops the start
        self.store = MetaStore(self.db_path, config.niods, config.stripe)
        # Group commit (group.py): the store's changes that arrive together share one
        # transaction; no reply leaves before the transaction it saw is committed.
        self.group = GroupCommit(self.store)
        # Sizes the I/O daemons promised to report changes of (sizecache.py).
        self.sizes = SizeCache(config.size_cache)
        # The channels to the I/O daemons and the calls for sizes, truncates (stripefiles.py).
        self.stripes = StripeFiles(config, self.key, self.sizes, self.group)
        # Files reported changed are asked again in the background (refetch.py).
        self.refetch = SizeRefetcher(self.store.getattr, self.stripes.with_sizes, self._lease_again,
                                     lambda: self.leases.now())
        # Stripe files made ahead of creates, a batch per daemon per request (precreate.py).
        self.pool = PrecreatePool(self.store, config.niods, self.stripes.each, config.precreate,
                                  watched=self.sizes.watch_pool if self.sizes.enabled else None,
                                  durable=self.group.durable)
        # Stripe files of deleted files go in the background, batched (reaper.py).
        self.reaper = Reaper(self.store, lambda a: [i for _, i in self.stripes.iods_of(a["stripe"])],
                             self.stripes.each, durable=self.group.durable)
        # Mounts' leases on attributes and directory entries, recalled before a change (leases.py).
        self.leases = LeaseTable(config.lease_term, config.lease_recall,
                                 timeout=min(2.0, config.request_timeout / 2))
        self.leases.on_undelegated = self.pool.hold  # never given out again (precreate.py)
        if self.sizes.enabled:  # a delegated write-back done: its writer gets the new size
            self.leases.on_written = self.refetch.add
        # Walks of request paths, recalling directories created in ahead first (walks.py).
        self.walks = PathWalks(self.store, self.leases)
        # Creates a leasing mount made ahead of the manager, sent in batches (ahead.py).
        self.ahead = CreatesAhead(self)
        self.started = time.time()
        self.address: tuple[str, int] | None = None
        self.metrics = Metrics("mgr")
        # The dispatch table: one coroutine op_<name>(fields, cred) per operation of the
        # schema, looked up once here, so a missing handler stops the start, not a request.
        self.ops: dict[str, Callable[[dict, Cred], Awaitable[dict]]] = {
            op: getattr(self, f"op_{op}") for op in MGR_SCHEMAS if op not in self.CONNECTION_OPS}

    async def serve(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self.address = await nursery.start(functools.partial(
                    serve_tcp, self.config.manager.host, self.config.manager.port,
                    MGR_SCHEMAS, self.dispatch, key=self.key))
                log.info("manager serving %s:%d, metadata in %s", *self.address[:2],
                         self.config.manager.data_dir)
                task_status.started(self.address)
                nursery.start_soon(self.group.run)
                self.store.admin.forget_making()
                nursery.start_soon(self.reaper.run)
                nursery.start_soon(self.checkpointer)
                nursery.start_soon(self.pool.run)
                if self.sizes.enabled:
                    nursery.start_soon(self.refetch.run)
                if self.config.manager.metrics_port:
                    from ..httpmetrics import serve_metrics

                    await nursery.start(serve_metrics, self.config.manager.host,
                                        self.config.manager.metrics_port,
                                        lambda: render(self.metrics_families()))
        finally:
            self.stripes.close()
            self.group.close()
            self.store.close()

    async def dispatch(self, op: str, f: dict, bulk_len: int, sock) -> dict | None:
        uid, gid, groups = f.pop("cred")
        if op == "lease_register":  # the connection is the lease holder's from now on
            await self.leases.serve_holder(f["client"], sock)
            return None
        self.leases.check(f.get("lease"))
        t0 = time.perf_counter()
        group = self.group
        failures = group.failures
        try:
            if op in BY_PATH:
                await self.walks.by_path(op, f, Cred(uid, gid, groups))
            reply = await self.ops[op](f, Cred(uid, gid, groups))
            if op not in _NO_STORE:
                await group.settled(failures)  # durable before the reply (group.py)
        except Exception:
            if op not in _NO_STORE:
                await group.settled(failures)  # an error may show uncommitted state too
            self.metrics.request(op, time.perf_counter() - t0, error=True)
            raise
        self.metrics.request(op, time.perf_counter() - t0)
        return reply

    def metrics_families(self) -> list[dict]:
        counts = self.store.admin.counts()
        return self.metrics.families({
            "pvfs_uptime_seconds": ("Seconds since the daemon started.",
                                    time.time() - self.started),
            "pvfs_inodes": ("Inodes in the metadata store (files, directories, symlinks).",
                            sum(v for v in counts.values() if isinstance(v, int))),
        })

    async def op_metrics(self, f, cred) -> dict:
        return {"families": self.metrics_families()}

    def _reap(self, attrs: dict | None) -> None:
        """An inode whose last name and handle are gone: its stripe files go in the
        background, its cached size at once."""
        if attrs is not None:
            self.sizes.forget([attrs["ino"]])
            self.leases.gone(attrs["ino"])
        self.reaper.add(attrs)

    async def checkpointer(self, interval: float = 1.0) -> None:
        """Checkpoint the metadata WAL every ``interval`` seconds in a worker thread, so the
        fsyncs of a checkpoint never stall the trio thread that serves requests."""
        while True:
            await trio.sleep(interval)
            await trio.to_thread.run_sync(self.store.txn.checkpoint)

    # ------------------------------------------------------------------ operations
    async def op_ping(self, f, cred) -> dict:
        return {"version": __version__, "uptime": time.time() - self.started}

    async def op_sync(self, f, cred) -> dict:
        """Make every metadata change so far durable (a client's fsync): fsync the WAL."""
        def fsync_wal() -> None:
            try:
                fd = os.open(self.db_path + "-wal", os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:  # checkpointed and truncated: already on disk
                return
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        await self.group.durable()  # what is in the open batch first
        await trio.to_thread.run_sync(fsync_wal)
        return {}

    async def op_status(self, f, cred) -> dict:
        return {"version": __version__, "role": "mgr", "pid": os.getpid(),
                "uptime": time.time() - self.started, **self.store.admin.counts(),
                "open_files": self.store.open_count() if hasattr(self.store, "open_count") else 0,
                "removals_pending": self.reaper.pending, "precreated": len(self.pool), "precreating": self.pool.refilling,
                "precreated_held": self.pool.held,
                "size_cache": {**self.sizes.status(), "refetched": self.refetch.fetched}, "group_commit": self.group.status(),
                "leases": self.leases.status(),
                "creates_ahead": self.ahead.status(),
                "niods": self.config.niods}

    async def op_sizes_changed(self, f, cred) -> dict:
        """An I/O daemon is about to change these stripe files (or, ``all``, restarted and
        forgot what it watched): drop their cached sizes before it goes on."""
        if f["all"]:
            self.sizes.forget_all()
            changed = list(self.leases.by_ino)
        else:
            self.sizes.forget(f["inos"], iod=f["iod"])
            changed = f["inos"]
        # A writer says it gave its lease up (``writing``) before its write left, so its
        # word is mostly here before this report; let the lease connections read what came
        # in with it, and the writer is not called back (either order is correct).
        await self.leases.settle()
        self.leases.note_reported(changed)
        # (report: a delegated file's write-back sends this; it waits for no write-back)
        async with self.leases.changing(changed, report=True):  # their holders first
            pass
        if self.sizes.enabled:
            # A delegated file its writer is writing back is fetched once the writer says
            # ``written`` (leases.on_written, also at its session's end): a fetch now would
            # be a second one, and would find the write still under way at the daemon.
            flushing = self.leases.flushing
            self.refetch.add([i for i in changed if i not in flushing])
        return {}

    async def op_resolve(self, f, cred) -> dict:
        attrs = await self.walks.walk(f["path"], cred, f["follow"], f["lease"])
        if self.leases.created_in([attrs["ino"]], f["lease"]):  # another writes it alone
            await self.leases.reading([attrs["ino"]], f["lease"])
            attrs = self.store.resolve(f["path"], cred, f["follow"])
        return await self.stripes.with_size(attrs)

    async def op_lookup(self, f, cred) -> dict:
        await self.leases.reading([f["parent"]], f["lease"])
        seen = self.leases.now()
        try:
            attrs = self.store.lookup(f["parent"], f["name"], cred)
            if self.leases.created_in([attrs["ino"]], f["lease"]):  # its size and times
                await self.leases.reading([attrs["ino"]], f["lease"])
                seen = self.leases.now()
                attrs = self.store.lookup(f["parent"], f["name"], cred)
        except OSError as exc:
            if exc.errno != errno.ENOENT or not f["missing"]:
                raise
            # "no such name", leased: the mount may answer it itself until a create recalls
            return {"ino": 0, "leased": self.leases.grant(f["lease"], [f["parent"]], seen)}
        self.store.mark_security([attrs])
        return self._leased(await self.stripes.with_size(attrs), f, seen, [f["parent"]])

    async def op_getattr(self, f, cred) -> dict:
        await self.leases.reading([f["ino"]], f["lease"])
        seen = self.leases.now()
        return self._leased(await self.stripes.with_size(self.store.getattr(f["ino"])), f, seen)

    async def _lease_again(self, files: list[dict], seen: int) -> None:
        """The refetched files whose sizes are cached again go back to the holders their
        reports recalled (leases.py)."""
        self.store.mark_security(files)
        await self.leases.push([a for a in files if self._grantable(a)], seen)

    def _grantable(self, attrs: dict) -> bool:
        """A file's attributes are leased only while its size is cached, that is while its
        I/O daemons report every change (sizecache.py): a report recalls the lease."""
        return attrs.get("type") != "file" or self.sizes.get(attrs["ino"]) is not None

    def _leased(self, reply: dict, f: dict, seen: int, also: list[int] = ()) -> dict:
        """Grant the requesting holder (if any) leases on the reply's inode and ``also``,
        as the store was at clock ``seen``; listed in the reply's ``leased``."""
        holder = f.get("lease")
        if holder is not None:
            inos = [*also, reply["ino"]] if self._grantable(reply) else list(also)
            reply["leased"] = self.leases.grant(holder, inos, seen)
        return reply

    async def _setattr(self, f, cred) -> dict:
        size = f["size"]
        attrs = self.store.setattr(f["ino"], cred, mode=f["mode"], uid=f["uid"], gid=f["gid"],
                                   atime_ns=f["atime_ns"], mtime_ns=f["mtime_ns"], size=size,
                                   now=f["now"], handle=f["handle"])
        if size is not None:
            if attrs["type"] != "file":
                raise OSError(errno.EISDIR if attrs["type"] == "dir" else errno.EINVAL,
                              "only regular files can be truncated")
            await self.stripes.truncate(attrs, size)
        if f["mtime_ns"] is not None and attrs["type"] == "file" and not (
                f["data_sets_mtime"] and self.leases.writes_alone(f.get("lease"), f["ino"])):
            # The reported mtime is the newest of the inode's and its stripe files' (data
            # written later must show), so an explicit mtime is set on the stripe files too
            # -- unless none holds data yet and their one writer sets it after its data.
            await self.stripes.set_mtime(attrs)
        return await self.stripes.with_size(attrs)

    async def _create(self, f, cred) -> dict:
        ino = self.pool.take()
        parent_now: list[dict] = []  # the parent's attributes as the create left them
        try:
            attrs, created = self.store.create(f["parent"], f["name"], f["mode"], cred,
                                               stripe=f["stripe"], exclusive=f["exclusive"],
                                               precreated=ino, parent_out=parent_now)
        except BaseException:
            if ino is not None:
                self.pool.give_back(ino)
            raise
        pooled = ino is not None and attrs["ino"] == ino
        if pooled and f["writing"]:
            # its writer's data come next: not counted empty, its size asked after its
            # close (op_close); its writes may drop the pool's promise unreported
            self.sizes.forget([ino], reported=False)
        elif pooled:
            self.sizes.created(ino, Stripe(*attrs["stripe"]).pcount)
        if ino is not None and not pooled:
            self.pool.give_back(ino)  # another layout, or the name existed
        # A new file's stripe files are made by its first writes (iod/storage.py): a create
        # asks no I/O daemon, and a new file is empty.
        if not created:
            attrs = await self.stripes.with_size(attrs)
        if f["flags"]:
            attrs = self.store.open(attrs["ino"], f["flags"], cred, created=created) | {
                "size": attrs["size"]}
            if f["flags"] & os.O_TRUNC and not created and attrs["size"]:
                await self.stripes.truncate(attrs, 0)
                attrs = self.store.stamp(attrs["ino"], atime=False)  # truncated: m+ctime
        attrs["created"] = created
        attrs["fresh"] = pooled and f["writing"]
        if created:
            attrs["secx"] = False  # a new inode has no extended attributes
        else:
            self.store.mark_security([attrs])
        # A pooled create made no await since the store's change: its parent is as it left it.
        return self._with_parent(attrs, f["parent"], parent_now[0] if pooled else None)

    def _with_parent(self, reply: dict, parent: int, known: dict | None = None) -> dict:
        """Add the parent directory's attributes after a change in it: the kernel asks for
        them again after every create or unlink in a directory (its permission check), and
        the mount can answer that from this reply (fuse/dirattrs.py). ``known``: them as the
        change left them, when nothing can have changed them since (no await between)."""
        if known is not None:
            reply["parent"] = known
            return reply
        try:
            reply["parent"] = self.store.getattr(parent)
        except OSError:
            pass  # removed meanwhile: the mount asks when it needs them
        return reply

    async def _open(self, f, cred) -> dict:
        attrs = self.store.open(f["ino"], f["flags"], cred)
        if attrs["type"] == "file" and f["flags"] & os.O_TRUNC and f["flags"] & os.O_ACCMODE:
            await self.stripes.truncate(attrs, 0)
            self.store.setattr(f["ino"], Cred(0, 0, ()), size=0)
        return await self.stripes.with_size(attrs)

    async def op_close(self, f, cred) -> dict:
        if f["fresh"] and self.sizes.enabled:
            self.refetch.add([f["ino"]])  # its writer is done: cache its size (refetch.py)
        try:
            attrs = self.store.close(f["ino"])
        except OSError as exc:
            if exc.errno != errno.EBADF:
                raise
            return {}  # a handle opened before a manager restart: open counts start afresh
        self._reap(attrs)
        return {}

    async def op_delegate(self, f, cred) -> dict:
        return await self.ahead.delegate(f, cred)

    async def op_ahead(self, f, cred) -> dict:
        return await self.ahead.apply(f, cred)

    async def op_opens(self, f, cred) -> dict:
        """Read-only handles a mount opened ahead of the manager, under a lease of each file
        (fuse/closes.py): counted; refused (gone meanwhile) listed."""
        refused = []
        for ino in f["inos"]:
            try:
                self.store.open(ino, os.O_RDONLY, Cred(0, 0, ()), created=True)
            except OSError:
                refused.append(ino)
        return {"refused": refused}

    async def op_closes(self, f, cred) -> dict:
        """Many handles closed (a mount sends its closes in batches: fuse/closes.py)."""
        for ino in f["inos"]:
            try:
                self._reap(self.store.close(ino))
            except OSError as exc:
                if exc.errno != errno.EBADF:
                    raise
        return {}

    async def _mkdir(self, f, cred) -> dict:
        parent_now: list[dict] = []
        attrs = self.store.mkdir(f["parent"], f["name"], f["mode"], cred, parent_out=parent_now)
        return self._with_parent(attrs, f["parent"], parent_now[0])

    async def _rmdir(self, f, cred) -> dict:
        self.store.rmdir(f["parent"], f["name"], cred)
        return {}

    async def _unlink(self, f, cred) -> dict:
        parent_now: list[dict] = []
        self._reap(self.store.unlink(f["parent"], f["name"], cred, parent_out=parent_now))
        return self._with_parent({}, f["parent"], parent_now[0])

    async def _rename(self, f, cred) -> dict:
        self._reap(self.store.rename(f["parent"], f["name"], f["new_parent"],
                                          f["new_name"], cred, f["flags"]))
        return {}

    async def _mknod(self, f, cred) -> dict:
        """A FIFO, socket or device node: an inode only, no stripe files."""
        return self.store.mknod(f["parent"], f["name"], f["mode"], f["rdev"], cred)

    async def _symlink(self, f, cred) -> dict:
        return self.store.symlink(f["parent"], f["name"], f["target"], cred)

    async def op_readlink(self, f, cred) -> dict:
        return {"target": self.store.readlink(f["ino"])}

    async def _link(self, f, cred) -> dict:
        return await self.stripes.with_size(self.store.link(f["ino"], f["new_parent"], f["new_name"], cred))

    async def op_readdir(self, f, cred) -> dict:
        await self.leases.reading([f["ino"]], f["lease"])
        seen = self.leases.now()
        rows = self.store.readdir(f["ino"], cred, f["cookie"], f["limit"])
        busy = self.leases.created_in([a["ino"] for _n, a, _c in rows], f["lease"])
        if busy:  # subdirectories another mount creates in: their attributes after that
            await self.leases.reading(busy, f["lease"])
            seen = self.leases.now()
            rows = self.store.readdir(f["ino"], cred, f["cookie"], f["limit"])
        entries = [[name, attrs, cookie] for name, attrs, cookie in rows]
        reply: dict = {"entries": entries}
        if f["attrs"]:
            await self.stripes.with_sizes([attrs for _name, attrs, _cookie in entries])
            self.store.mark_security([attrs for _name, attrs, _cookie in entries])
            if f["lease"] is not None:
                reply["leased"] = self.leases.grant(
                    f["lease"], [f["ino"]] + [a["ino"] for _n, a, _c in entries
                                              if self._grantable(a)], seen)
        return reply

    async def op_statfs(self, f, cred) -> dict:
        replies = await self.stripes.each([(i, {"op": "statfs"}) for i in range(self.config.niods)])
        bsize = 4096
        total = sum(r["blocks"] * r["bsize"] for r in replies)
        free = sum(r["bfree"] * r["bsize"] for r in replies)
        avail = sum(r["bavail"] * r["bsize"] for r in replies)
        counts = self.store.admin.counts()
        return {"bsize": bsize, "blocks": total // bsize, "bfree": free // bsize,
                "bavail": avail // bsize, "files": counts.get("inodes", 0) + 1_000_000,
                "ffree": 1_000_000, "namemax": 255, "iods": replies}

    async def op_access(self, f, cred) -> dict:
        self.store.access(f["ino"], f["mask"], cred)
        return {}

    async def op_getxattr(self, f, cred) -> dict:
        return {"value": self.store.getxattr(f["ino"], f["name"], cred)}

    async def _setxattr(self, f, cred) -> dict:
        self.store.setxattr(f["ino"], f["name"], f["value"], cred, f["flags"])
        return {}

    async def op_listxattr(self, f, cred) -> dict:
        return {"names": self.store.listxattr(f["ino"], cred)}

    async def _removexattr(self, f, cred) -> dict:
        self.store.removexattr(f["ino"], f["name"], cred)
        return {}

    async def op_getstripe(self, f, cred) -> dict:
        stripe = self.store.layouts.of(f["ino"])
        return {"stripe": stripe.to_wire() if stripe else None}

    async def _setstripe(self, f, cred) -> dict:
        attrs = self.store.getattr(f["ino"])
        if attrs["type"] == "dir":
            return self.store.layouts.set_dir(f["ino"], f["stripe"], cred)
        if attrs["type"] != "file" or f["stripe"] is None:
            raise OSError(errno.EINVAL, "a stripe is set on a directory or a new empty file")
        attrs = await self.stripes.with_size(attrs)
        old = attrs["stripe"]
        new = self.store.layouts.set_file(f["ino"], f["stripe"], cred, size_is_zero=attrs["size"] == 0)
        if new["stripe"] != old:
            # Move the (empty) stripe files to the new set of daemons; the inode stays.
            await self.group.durable()
            # (the new ones are made by the first writes)
            await self.stripes.each([(iod, {"op": "unlink", "ino": attrs["ino"]})
                              for _, iod in self.stripes.iods_of(old)])
        return new

    async def op_nfile(self, f, cred) -> dict:
        return {"nfile": self.store.nfile(f["ino"])}

    async def op_inodes(self, f, cred) -> dict:
        if cred.uid != 0:
            raise PermissionError(errno.EPERM, "listing every inode needs root")
        out = []
        for attrs in self.store.admin.file_inodes():
            if attrs["ino"] > f["after"]:
                out.append(attrs)
                if len(out) >= f["limit"]:
                    break
        return {"inodes": out}

    async def op_precreated(self, f, cred) -> dict:
        if cred.uid != 0:
            raise PermissionError(errno.EPERM, "listing the precreated inodes needs root")
        return {"inos": self.store.admin.pool(), "ready": self.store.admin.pool(ready=True),
                "held": self.pool.held_numbers()}

    # ------------------------------------------------------------------ changes, leased
    # Each change runs inside leases.changing(the inodes it changes, the holder making it):
    # every other holder of a lease on them is called back first (leases.py). A new inode
    # is leased to the holder that made it.
    def _changing(self, f: dict, *inos: int):
        return self.leases.changing(inos, f.get("lease"))

    def _lease_new(self, reply: dict, f: dict) -> dict:
        holder = f.get("lease")
        if holder is not None and reply.get("ino") and self._grantable(reply):
            reply["leased"] = self.leases.grant(holder, [reply["ino"]], self.leases.now())
        return reply

    async def op_setattr(self, f, cred) -> dict:
        async with self._changing(f, f["ino"]):
            return await self._setattr(f, cred)

    async def op_create(self, f, cred) -> dict:
        victim = self.store.child_ino(f["parent"], f["name"]) if f["flags"] & os.O_TRUNC else 0
        async with self._changing(f, f["parent"], victim):
            reply = await self._create(f, cred)
        return self._lease_new(reply, f) if reply.get("created") else reply

    async def op_open(self, f, cred) -> dict:
        if not f["flags"] & os.O_TRUNC:
            await self.leases.reading([f["ino"]], f.get("lease"))  # a writer's data first
            return await self._open(f, cred)
        async with self._changing(f, f["ino"]):
            return await self._open(f, cred)

    async def op_mkdir(self, f, cred) -> dict:
        async with self._changing(f, f["parent"]):
            reply = await self._mkdir(f, cred)
        return self._lease_new(reply, f)

    async def op_mknod(self, f, cred) -> dict:
        async with self._changing(f, f["parent"]):
            reply = await self._mknod(f, cred)
        return self._lease_new(reply, f)

    async def op_symlink(self, f, cred) -> dict:
        async with self._changing(f, f["parent"]):
            reply = await self._symlink(f, cred)
        return self._lease_new(reply, f)

    async def op_rmdir(self, f, cred) -> dict:
        async with self._changing(f, f["parent"], self.store.child_ino(f["parent"], f["name"])):
            return await self._rmdir(f, cred)

    async def op_unlink(self, f, cred) -> dict:
        async with self._changing(f, f["parent"], self.store.child_ino(f["parent"], f["name"])):
            return await self._unlink(f, cred)

    async def op_rename(self, f, cred) -> dict:
        child = self.store.child_ino
        async with self._changing(f, f["parent"], f["new_parent"], child(f["parent"], f["name"]),
                                  child(f["new_parent"], f["new_name"])):
            return await self._rename(f, cred)

    async def op_link(self, f, cred) -> dict:
        async with self._changing(f, f["new_parent"], f["ino"]):
            return await self._link(f, cred)

    async def op_setxattr(self, f, cred) -> dict:
        async with self._changing(f, f["ino"]):
            return await self._setxattr(f, cred)

    async def op_removexattr(self, f, cred) -> dict:
        async with self._changing(f, f["ino"]):
            return await self._removexattr(f, cred)

    async def op_setstripe(self, f, cred) -> dict:
        async with self._changing(f, f["ino"]):
            return await self._setstripe(f, cred)
