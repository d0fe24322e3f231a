"""The C front end's Python side (``-o frontend=c``): requests from ``pvfs._fusefront`` run
on today's :class:`~.operations.Operations` handlers, replies go back through C.

libfuse3's low-level loop runs on a C worker thread (``csrc/front/``); a request C does not
answer itself is queued and an eventfd wakes a pool of trio tasks (at most ``max_tasks``, as
pyfuse3's workers; :meth:`CFront.main`), which run each request on the same handler with the
same arguments pyfuse3 would and answer with ``_fusefront.reply_*``. C answers forgets (their
(inode, count) pairs arrive with the next drain for ``Operations.forget``), the flushes of
handles marked quiet here (:meth:`CFront._mark_quiet`) and those of files whose close a write
delegation keeps (:class:`KeptFiles`), and the creates and unlinks in directories the mount
creates ahead in (workercreates.py): those arrive as records (``OP_CREATED``,
``OP_UNLINKED``) that are applied as they are drained, before any request drained with or
after them is served; each release served here tells C whether the file is left closed and
clean (an unlink of it may then be a worker's). Writes of handles marked ``behind``
(:meth:`CFront._mark_behind`) are answered by C once queued and arrive as records
(``OP_WROTE``) that one task applies in order (:meth:`CFront._apply_wrote`); a request
drained after one waits until it is applied. The request object is also the handlers'
request context (``uid``, ``gid``, ``pid``, ``umask``).
"""

from __future__ import annotations

import collections
import errno
import inspect
import logging
import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import trio
from pyfuse3 import EntryAttributes, FUSEError

from .cmirrors import DirMirror, KeptFiles
from .csession import CKernel, SetattrFields
from .cstreams import StreamReads
from .handles import WORKER_FH
from .workercreates import WorkerCreates, apply_made, apply_unlinked
from .writerecords import joined

if TYPE_CHECKING:
    from .operations import Operations

log = logging.getLogger("pvfs.fuse")

__all__ = ["CFront", "DirMirror", "SetattrFields", "available"]

# The loop's worker threads. While C answers only forgets and quiet flushes, a worker only
# copies a request for Python and reads the next, and one keeps up; in trial runs on this
# 2-core node with a do-nothing file system four threads, handing requests between the
# CPUs, were slower than one (commit 1a87778; bench/results/frontend_null_ab.json has one
# thread at 0.95x pyfuse3). More pay off once C answers reads and lookups itself.
WORKER_THREADS = 1
MAX_WRITE = 1 << 20   # 1 MiB requests (the kernel's max_pages follows)
# Bytes of writes C may answer ahead of Python applying them (csrc/front/writes.c): past
# this a write waits for Python as before, throttling the writer to Python's pace.
BEHIND_BYTES = 16 << 20
EXIT_TIMEOUT = 30.0  # seconds to apply the writes left at the end (each bounded by timeout)
_XATTR_CREATE, _XATTR_REPLACE = os.XATTR_CREATE, os.XATTR_REPLACE


def available() -> bool:
    """Whether ``pvfs._fusefront`` is built here (it needs libfuse3's development files)."""
    try:
        import pvfs._fusefront  # noqa: F401
    except ImportError:
        return False
    return True


async def _awaited(aw: Awaitable[Any]) -> None:
    await aw


class CFront:
    """The libfuse3 low-level front end (``kernel.Front``)."""

    def __init__(self) -> None:
        import pvfs._fusefront as ff

        self.ff = ff
        self.ops: Operations | None = None
        self.session: Any = None
        self.kernel: Any = None
        self._scope: trio.CancelScope | None = None
        self._terminated = False
        self._handlers: dict[int, Callable[..., Awaitable[None]]] = {}
        self._nursery: trio.Nursery | None = None
        self.workers: WorkerCreates | None = None
        self._behind = False  # writes answered in C (init(): when the extension has them)
        self.served: Any = None  # reads answered in C (init(): cache.serve_reads)
        self.streams: StreamReads | None = None  # stream reads answered in C (cstreams.py)
        self._wrote: collections.deque = collections.deque()  # OP_WROTE, not yet applied
        self._wrote_in = self._wrote_done = 0   # OP_WROTE records drained, applied
        self._applying = False
        self._applied = trio.lowlevel.ParkingLot()  # requests waiting for writes before them

    # ------------------------------------------------------------------ life cycle
    def init(self, ops: Operations, mountpoint: str, options: set[str]) -> None:
        self.ops = ops
        self.session = self.ff.Session(
            mountpoint, sorted(options), writeback_cache=bool(ops.enable_writeback_cache),
            export_support=bool(ops.supports_dot_lookup), posix_acl=bool(ops.enable_acl),
            max_threads=WORKER_THREADS, max_write=MAX_WRITE)
        self.kernel = CKernel(self.session, self.ff)
        self._handlers = self._table()
        self.session.mount(mountpoint)
        if getattr(ops, "leases", None) is not None:
            # (the entry timeout first: names found in the mirror are answered with it)
            self.session.create_settings(float(ops.opts.entry_timeout), WORKER_FH)
            ops.leases.mirror_to(DirMirror(self.session, ops))
        dels, opts = getattr(ops, "delegations", None), getattr(ops, "opts", None)
        # Not with testing_lose_close_writes, whose flush throws the file's data away; nor
        # with an extension built before the kept set (its flushes all go to Python).
        if dels is not None and not (opts is not None and opts.testing_lose_close_writes) \
                and hasattr(self.session, "keep_file"):
            dels.mirror = KeptFiles(self.session)
        files = getattr(ops, "files", None)
        self._behind = hasattr(self.session, "behind") and hasattr(files, "behind_ok") and \
            hasattr(self.ff, "OP_WROTE")
        if self._behind:
            self.session.behind_limit(BEHIND_BYTES)
        cache = getattr(ops, "cache", None)
        if cache is not None and hasattr(files, "serve_ok") and files.serve_ok() and \
                hasattr(self.session, "serve_arena"):
            # reads of cached blocks answered by the workers (src/pvfs/cache/_served.py),
            # up to the largest the kernel sends (its read-ahead asks 128 KiB and more)
            self.served = cache.serve_reads(self.session, MAX_WRITE)
            self._stream_reads(ops, cache)
        probed = getattr(ops, "probed", None)
        if probed is not None and hasattr(self.session, "caps_none"):
            probed.mirror = self.session  # capability probes answered in C (xattrs.py)
        self._lend_creates(ops)

    def _stream_reads(self, ops: Operations, cache: Any) -> None:
        """Stream-sized reads answered by the workers from the I/O daemons (cstreams.py) --
        not with ``-o stream_reads=0``, the stream path off (``stream_min=0``) or the
        cache's own read-ahead on (``cache_readahead``: its reads are Python's)."""
        opts = getattr(ops, "opts", None)
        if opts is None or not opts.stream_reads or not hasattr(self.session, "stream_setup") \
                or cache.stream.min_bytes <= 0 or cache.stream.readahead > 0:
            return
        self.streams = StreamReads(self.session, ops.client, ops.table, cache.stream.min_bytes,
                                   float(opts.timeout))
        self.served.streams = self.streams

    def _lend_creates(self, ops: Operations) -> None:
        """The workers answer creates in directories the mount creates ahead in
        (workercreates.py) -- not with ``-o worker_creates=0``, ``direct_io`` (its handles
        are opened so) or ``testing_lose_close_writes`` (whose flushes go to Python)."""
        ahead, opts = getattr(ops, "ahead", None), getattr(ops, "opts", None)
        if ahead is None or opts is None or not opts.worker_creates or opts.direct_io or \
                opts.testing_lose_close_writes:
            return
        # A file a worker makes has no security.capability: the kernel's capability probe
        # before its first write(2) is answered in C as ProbedCache.learn would; and its
        # writable handles are write-behind when FileOperations.behind_new_ok says the
        # mount's are (the rest of behind_ok holds for a new file made so: not O_SYNC, no
        # user.pvfs.sync).
        probed = getattr(ops, "probed", None)
        caps_ttl = float(probed.ttl) if probed is not None and probed.mirror is self.session \
            else 0.0
        behind = self._behind and ops.files.behind_new_ok()
        self.session.create_settings(float(opts.entry_timeout), WORKER_FH, caps_ttl, behind)
        self.workers = WorkerCreates(self.session, self.catch_up)
        ahead.workers = self.workers
        ops.leases.stop_creates = self.workers.dirs_off

    async def main(self, max_tasks: int) -> None:
        """Serve with a pool of worker tasks, as pyfuse3 does: one of them at a time waits
        for the eventfd and drains the queue, wakes (or starts, up to ``max_tasks``) as many
        others as there are further requests plus one to wait next, and runs the first
        request itself -- so a request is answered in the task that woke for it, without a
        task started per request (which costs a turn of trio's loop on every request)."""
        assert self.session is not None and self.ops is not None, "init() first"
        self._max = max(1, max_tasks)
        self._pending: collections.deque = collections.deque()
        self._lot = trio.lowlevel.ParkingLot()
        self._reading = False
        self._ended = False
        self._workers = 0
        async with trio.open_nursery() as nursery:
            self._scope = nursery.cancel_scope
            self._nursery = nursery
            if self.streams is not None:
                self.streams.nursery = nursery
            if self._terminated:
                nursery.cancel_scope.cancel()
            self._spawn()
        await self._apply_left()

    async def _apply_left(self) -> None:
        """After serving ended (unmount, or terminate()): the writes C answered that are not
        applied yet -- queued, or drained and not reached -- are applied before the mount
        writes its cache back (no write the kernel was told is done may be lost)."""
        if not self._behind or self.session is None:
            return
        with trio.CancelScope(shield=True), trio.move_on_after(EXIT_TIMEOUT):
            self.session.behind_limit(0)
            await trio.sleep(0.01)  # (a worker past its check queues its record first)
            try:
                reqs, _ = self.session.drain()
            except ValueError:  # closed
                reqs = []
            wrote = getattr(self.ff, "OP_WROTE", -1)
            self._wrote.extend(r for r in reqs if r.op == wrote)
            if self._wrote and not self._applying:
                self._applying = True
                await self._apply_wrote()
    def _spawn(self) -> None:
        self._workers += 1
        self._nursery.start_soon(self._worker)

    async def _worker(self) -> None:
        try:
            while True:
                if self._pending:
                    await self._serve(*self._pending.popleft())
                elif self._ended:
                    return
                elif not self._reading:
                    await self._read()
                else:
                    await self._lot.park()
        finally:
            self._workers -= 1

    async def _read(self) -> None:
        """Wait for the eventfd, drain the queue, hand the requests out."""
        session = self.session
        self._reading = True
        try:
            await trio.lowlevel.wait_readable(session.fileno())
        finally:
            self._reading = False
        self.catch_up()

    def catch_up(self) -> None:
        """Drain the queue: apply the workers' creates, hand the other requests out."""
        session, ops = self.session, self.ops
        if self._nursery is None:  # (not serving yet: nothing was made)
            return
        reqs, forgets = session.drain()
        if session.ended:  # nothing is queued after the loop's end: take what came since
            more, later = session.drain()
            reqs, forgets = reqs + more, forgets + later
        if forgets:
            done = ops.forget(forgets)
            if inspect.isawaitable(done):  # pyfuse3 lets forget be async too
                self._nursery.start_soon(_awaited, done)
        made, unlinked = self.ff.OP_CREATED, getattr(self.ff, "OP_UNLINKED", -1)
        wrote = getattr(self.ff, "OP_WROTE", -1)
        for req in reqs:
            if req.op == made:
                self._apply_made(req)
            elif req.op == unlinked:
                self._apply_unlinked(req)
            elif req.op == wrote:
                self._wrote.append(req)
                self._wrote_in += 1
            else:  # served once every write drained before it is applied
                self._pending.append((req, self._wrote_in))
        if self._wrote and not self._applying:
            self._applying = True
            self._nursery.start_soon(self._apply_wrote)
        if session.ended:  # unmounted: the requests in hand finish (their replies fail)
            self._ended = True
            self._lot.unpark_all()
            return
        # this task takes one request; the others and the next wait need a task each
        want = len(self._pending)
        want -= len(self._lot.unpark(count=want))
        while want > 0 and self._workers < self._max:
            self._spawn()
            want -= 1

    def terminate(self) -> None:
        self._terminated = True
        if self.session is not None and getattr(self, "_behind", False):
            self.session.behind_limit(0)  # writes from now on wait (and fail at the unmount)
        if self._scope is not None:
            self._scope.cancel()

    def close(self) -> None:
        if self.workers is not None:
            self.workers.close()
        if self.session is not None:
            if getattr(getattr(self.ops, "probed", None), "mirror", None) is self.session:
                self.ops.probed.mirror = None
            if getattr(self.ops, "delegations", None) is not None:
                self.ops.delegations.mirror = None
            if getattr(self.ops, "leases", None) is not None:
                self.ops.leases.mirror_to(None)
            self.session.close()

    # ------------------------------------------------------------------ requests
    async def _serve(self, req: Any, after: int = 0) -> None:
        try:
            while self._wrote_done < after:  # writes answered in C before it: applied first
                await self._applied.park()
            await self._handlers[req.op](req, *req.args)
        except FUSEError as exc:
            self._fail(req, exc.errno)
        except Exception:  # a reply that could not be made: EIO, logged
            log.exception("C front end: op %d", req.op)
            self._fail(req, errno.EIO)

    async def _apply_wrote(self) -> None:
        """Apply the writes C answered (``OP_WROTE``) in their order, each as the write
        handler would; an error parks on the file as a write-back error (its next fsync or
        close reports it, as for the block cache's write-back).

        Records that continue one another -- the same handle, each starting where the one
        before ended, as the kernel cuts one write(2) at a page it must not mark up to date
        (IOR hard's every transfer: two records) -- are applied as one write of their bytes
        joined (``writerecords.joined``), at most ``JOIN_BYTES``: one trip through the handler
        instead of one per record. What a reader can see is the same: nothing drained after
        a record is served before it is applied. One shield for the whole run (answered:
        never dropped half-way), not one per record."""
        ops = self.ops
        counters = getattr(getattr(ops, "files", None), "counters", None)
        try:
            with trio.CancelScope(shield=True):
                while self._wrote:
                    reqs = joined(self._wrote)
                    fh, off, data = reqs[0].args
                    if len(reqs) > 1:
                        data = b"".join(r.args[2] for r in reqs)
                        if counters is not None:  # (each record is a write request)
                            counters["fuse_writes"] += len(reqs) - 1
                            counters["writes_joined"] += len(reqs) - 1
                    try:
                        await ops.write(fh, off, data)
                    except FUSEError as exc:
                        ops.files.park_write_error(fh, OSError(exc.errno,
                                                               os.strerror(exc.errno)))
                    except Exception:  # (as _serve: logged; the file's next fsync says EIO)
                        log.exception("C front end: applying a write answered in C")
                        ops.files.park_write_error(fh, OSError(errno.EIO,
                                                               "write answered in C"))
                    finally:
                        for r in reqs:
                            self.session.behind_applied(len(r.args[2]))
                        self._wrote_done += len(reqs)
                        if len(self._applied):
                            self._applied.unpark_all()
        finally:
            self._applying = False
            self._applied.unpark_all()

    def _mark_behind(self, fi: Any) -> None:
        """A handle whose writes C may answer once queued (before the reply that gives it
        to the kernel; C drops the mark at release): when ``FileOperations.behind_ok`` says
        its writes are write-behind already -- nothing a write(2) of it could report that a
        later fsync or close does not."""
        if self._behind and not fi.direct_io and self.ops.files.behind_ok(fi.fh):
            self.session.behind(fi.fh)

    def _apply_made(self, req: Any) -> None:
        """A create a worker made: Python's now (``workercreates.apply_made``). Then, with
        the last of the directory's still to apply, its attributes are Python's again."""
        parent = req.args[0]
        try:
            apply_made(self.ops, req, *req.args)
        except Exception:  # (the kernel has the file: it is sent or refused by the manager)
            log.exception("C front end: applying a create made by a worker")
        finally:
            leases = self.ops.leases
            a = leases.attrs.get(parent) if leases is not None else None
            self.session.created_done(parent, None if a is None else self.ops.view.entry(a))

    def _apply_unlinked(self, req: Any) -> None:
        """An unlink a worker made: Python's now (``workercreates.apply_unlinked``), the
        directory's attributes handed back as after a create."""
        parent = req.args[0]
        try:
            late = apply_unlinked(self.ops, req, *req.args)
            if late is not None:
                self._nursery.start_soon(_awaited, late)
        except Exception:  # (the kernel has its reply: the manager keeps the name then)
            log.exception("C front end: applying an unlink made by a worker")
        finally:
            leases = self.ops.leases
            a = leases.attrs.get(parent) if leases is not None else None
            self.session.created_done(parent, None if a is None else self.ops.view.entry(a))

    def _released(self, ino: int | None) -> None:
        """A release of ``ino`` was served: tell C whether the file is closed and clean
        (csrc/front/unlinks.c), which it needs after every release it passed on."""
        if ino is None:
            return
        removals = getattr(self.ops, "removals", None)
        ok = self.workers is not None and removals is not None and removals.closed_clean(ino)
        self.session.release_done(ino, ok)

    def _mark_quiet(self, fi: Any, flags: int) -> None:
        """A handle whose flush needs nothing is answered in C at close (before the reply that
        gives it to the kernel, so its first flush finds the mark; C drops it at release).

        A read-only handle: nothing is written through it (the kernel writes dirty pages
        back through handles open for writing only), so its close has nothing of its own to
        write back. Under pyfuse3 such a close also writes back what other handles of the
        file left dirty; here those go at their own close or fsync, or by the flusher
        (``dirty_age``) -- close-to-open holds for the handles that wrote. A writable handle
        while no write or truncation of its inode has passed the C workers since the kernel
        learned it (csrc/front/writes.c; by inode, since the kernel's write-back of mmap'ed
        pages may go through any writable handle): then nothing of the file is dirty here
        either (``touch``, ``open(O_CREAT)`` + ``close``, mdtest's empty creates). Not with
        ``testing_lose_close_writes``, whose flush throws the file's dirty blocks away."""
        opts = getattr(self.ops, "opts", None)
        if opts is not None and opts.testing_lose_close_writes:
            return
        self.session.quiet(fi.fh, flags & os.O_ACCMODE != os.O_RDONLY)

    def _fail(self, req: Any, code: int) -> None:
        if not req.answered:
            self.ff.reply_err(req, code)

    def _table(self) -> dict[int, Callable[..., Awaitable[None]]]:
        """The adapter of each FUSE operation: call the handler, reply through C.

        Long because a table: one short adapter per operation (about 35), each next to the
        reply it makes, read top-down like the ops table of a libfuse file system."""
        ff, ops = self.ff, self.ops
        assert ops is not None

        async def lookup(req: Any, parent: int, name: bytes) -> None:
            ff.reply_entry(req, await ops.lookup(parent, name, req))

        async def getattr_(req: Any, ino: int, fh: int | None) -> None:
            ff.reply_attr(req, await ops.getattr(ino, req))

        async def setattr(req: Any, ino: int, fh: int | None, bits: int, mode: int, uid: int,
                          gid: int, size: int, atime_ns: int, mtime_ns: int) -> None:
            attr = EntryAttributes()
            attr.st_mode, attr.st_uid, attr.st_gid, attr.st_size = mode, uid, gid, size
            attr.st_atime_ns, attr.st_mtime_ns = atime_ns, mtime_ns
            ff.reply_attr(req, await ops.setattr(ino, attr, SetattrFields(bits, ff), fh, req))

        async def readlink(req: Any, ino: int) -> None:
            ff.reply_readlink(req, await ops.readlink(ino, req))

        async def mknod(req: Any, parent: int, name: bytes, mode: int, rdev: int) -> None:
            ff.reply_entry(req, await ops.mknod(parent, name, mode, rdev, req))

        async def mkdir(req: Any, parent: int, name: bytes, mode: int) -> None:
            ff.reply_entry(req, await ops.mkdir(parent, name, mode, req))

        async def unlink(req: Any, parent: int, name: bytes) -> None:
            await ops.unlink(parent, name, req)
            ff.reply_err(req, 0)

        async def rmdir(req: Any, parent: int, name: bytes) -> None:
            await ops.rmdir(parent, name, req)
            ff.reply_err(req, 0)

        async def symlink(req: Any, parent: int, name: bytes, target: bytes) -> None:
            ff.reply_entry(req, await ops.symlink(parent, name, target, req))

        async def rename(req: Any, parent: int, name: bytes, newparent: int, newname: bytes,
                         flags: int) -> None:
            await ops.rename(parent, name, newparent, newname, flags, req)
            ff.reply_err(req, 0)

        async def link(req: Any, ino: int, newparent: int, newname: bytes) -> None:
            ff.reply_entry(req, await ops.link(ino, newparent, newname, req))

        async def open_(req: Any, ino: int, flags: int) -> None:
            fi = await ops.open(ino, flags, req)
            self._mark_quiet(fi, flags)
            self._mark_behind(fi)
            ff.reply_open(req, fi)

        async def read(req: Any, fh: int, off: int, size: int) -> None:
            ff.reply_data(req, await ops.read(fh, off, size))

        async def write(req: Any, fh: int, off: int, data: bytes) -> None:
            ff.reply_write(req, await ops.write(fh, off, data))

        async def flush(req: Any, fh: int) -> None:
            await ops.flush(fh)
            ff.reply_err(req, 0)

        async def release(req: Any, fh: int) -> None:
            h = ops.table.handles.get(fh) if hasattr(ops, "table") else None
            try:
                await ops.release(fh)
                ff.reply_err(req, 0)
            finally:
                self._released(h.ino if h is not None else None)

        async def fsync(req: Any, fh: int, datasync: bool) -> None:
            await ops.fsync(fh, datasync)
            ff.reply_err(req, 0)

        async def opendir(req: Any, ino: int, flags: int) -> None:
            ff.reply_open(req, await ops.opendir(ino, req))

        async def readdirplus(req: Any, fh: int, off: int, token: Any) -> None:
            await ops.readdir(fh, off, token)
            ff.reply_dir(req, token)

        async def releasedir(req: Any, fh: int) -> None:
            await ops.releasedir(fh)
            ff.reply_err(req, 0)

        async def fsyncdir(req: Any, fh: int, datasync: bool) -> None:
            await ops.fsyncdir(fh, datasync)
            ff.reply_err(req, 0)

        async def statfs(req: Any, ino: int) -> None:
            ff.reply_statfs(req, await ops.statfs(req))

        async def setxattr(req: Any, ino: int, name: bytes, value: bytes, flags: int) -> None:
            # as pyfuse3: XATTR_CREATE / XATTR_REPLACE checked with a getxattr first
            if flags & ~(_XATTR_CREATE | _XATTR_REPLACE):
                raise FUSEError(errno.EINVAL)
            if flags & _XATTR_CREATE:
                try:
                    await ops.getxattr(ino, name, req)
                except FUSEError as exc:
                    if exc.errno != errno.ENODATA:
                        raise
                else:
                    raise FUSEError(errno.EEXIST)
            elif flags & _XATTR_REPLACE:
                await ops.getxattr(ino, name, req)
            await ops.setxattr(ino, name, value, req)
            ff.reply_err(req, 0)

        def sized(req: Any, value: bytes, size: int) -> None:
            if size == 0:
                ff.reply_xattr(req, len(value))
            elif len(value) <= size:
                ff.reply_data(req, value)
            else:
                ff.reply_err(req, errno.ERANGE)

        async def getxattr(req: Any, ino: int, name: bytes, size: int) -> None:
            sized(req, await ops.getxattr(ino, name, req), size)

        async def listxattr(req: Any, ino: int, size: int) -> None:
            names = await ops.listxattr(ino, req)
            sized(req, b"".join(n + b"\0" for n in names), size)

        async def removexattr(req: Any, ino: int, name: bytes) -> None:
            await ops.removexattr(ino, name, req)
            ff.reply_err(req, 0)

        async def access(req: Any, ino: int, mask: int) -> None:
            allowed = await ops.access(ino, mask, req)
            ff.reply_err(req, 0 if allowed else errno.EACCES)

        async def create(req: Any, parent: int, name: bytes, mode: int, flags: int) -> None:
            fi, entry = await ops.create(parent, name, mode, flags, req)
            self._mark_quiet(fi, flags)
            self._mark_behind(fi)
            ff.reply_create(req, entry, fi)

        return {
            ff.OP_LOOKUP: lookup, ff.OP_GETATTR: getattr_, ff.OP_SETATTR: setattr,
            ff.OP_READLINK: readlink, ff.OP_MKNOD: mknod, ff.OP_MKDIR: mkdir,
            ff.OP_UNLINK: unlink, ff.OP_RMDIR: rmdir, ff.OP_SYMLINK: symlink,
            ff.OP_RENAME: rename, ff.OP_LINK: link, ff.OP_OPEN: open_, ff.OP_READ: read,
            ff.OP_WRITE: write, ff.OP_FLUSH: flush, ff.OP_RELEASE: release, ff.OP_FSYNC: fsync,
            ff.OP_OPENDIR: opendir, ff.OP_READDIRPLUS: readdirplus,
            ff.OP_RELEASEDIR: releasedir, ff.OP_FSYNCDIR: fsyncdir, ff.OP_STATFS: statfs,
            ff.OP_SETXATTR: setxattr, ff.OP_GETXATTR: getxattr, ff.OP_LISTXATTR: listxattr,
            ff.OP_REMOVEXATTR: removexattr, ff.OP_ACCESS: access, ff.OP_CREATE: create,
        }
