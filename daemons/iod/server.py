"""The I/O daemon server: Python parses requests and builds jobs, C moves every byte.

Client connections are *attached* to the engine (``pvfs._native.Engine``): between jobs the
engine's native thread reads each connection's next frame header itself and posts it as an
event. Python parses and validates the header and answers with a job (thesis fig. 3.7): the
request's I/O description intersected with this daemon's share of the file gives a list of
*accesses* (contiguous local transfers) in stream order; a read's reply frame is prepended
as the acknowledgement, a write's reply is appended once every byte is in place. Small
replies are jobs too (a prefix and no accesses). The engine picks the next job by the active
algorithm (opt1..opt4); completions, frames and closed connections all arrive through one
eventfd, so a request costs no trio task switch at all. Slow control calls (fsync, listing,
statistics that ask the manager) run as trio tasks and reply when done; a connection sends
its next request only after the reply, so order per connection is kept.

The trio thread makes no file system call in the request path. A read or write on a cached
stripe-file descriptor is submitted at once; the engine examines the descriptor on its own
thread as the job starts (unlinked behind the cache: the job ends before moving a byte and
the daemon reopens the file; a read's ``local_size`` and its clip at the stripe end come from
that fstat). A cache miss opens the file in a worker thread first; so do size, create and
utime, and the last descriptor of an unlinked file is closed there.
"""

from __future__ import annotations

import errno
import itertools
import logging
import operator
import os
import socket
import time
from array import array
from collections.abc import Awaitable, Callable
from typing import ClassVar

import trio

from pvfs import _native, schedulers
from pvfs.config import Config
from pvfs.layout.intersect import pieces_for_rank, stream_length
from pvfs.metrics import Metrics, render
from pvfs.protocol import auth, schema
from pvfs.protocol.errors import error_reply, from_exception
from pvfs.protocol.framing import MAGIC, PREFIX, FrameError, decode_header, encode_header, frame
from pvfs.protocol.rpc import Channel
from pvfs.protocol.schema import IOD_SCHEMAS

from ..holders import HolderDirectory
from .control import ControlRequests
from .rs import ReactiveSelector
from .sizewatch import SizeWatch
from .smallwrites import SmallWrites
from .stats import JobRecord, WorkloadStats
from .storage import PosixStorage, open_storage

log = logging.getLogger("pvfs.iod")

# A refused request's bulk is drained (keeping the connection) only up to this size.
MAX_DRAIN = 64 << 20
# How each request is served (IodServer.OPS, the daemon's one dispatch table):
STREAM = "stream"  # moves bulk or the connection itself: handler(cid, fields, bulk_len)
INLINE = "inline"  # quick, no file system call: handler(fields) -> reply, on the trio thread
TASK = "task"  # may block on the disk (run in a worker thread) or wait on other daemons:
#              async handler(fields) -> reply, as a trio task of its own


class _Job:
    """What the server remembers of a job until the engine reports it done."""

    __slots__ = ("cid", "ino", "mtime", "op", "pinned", "record", "retry", "then")

    def __init__(self, cid: int, ino: int = 0, op: str = "reply",
                 record: JobRecord | None = None, pinned: bool = False,
                 retry: tuple | None = None) -> None:
        self.cid, self.ino, self.op, self.record, self.pinned = cid, ino, op, record, pinned
        # (fields, bulk_len, pieces) of a job on a cached descriptor the engine checks.
        self.retry = retry
        # A write's (descriptor, mtime) to set once its bytes are in, before the reply.
        self.mtime: tuple[int, int] | None = None
        # A held job's continuation: ``then(err, answerable)`` once it is done (smallwrites).
        self.then: Callable[[int, bool], None] | None = None


class IodServer:
    """One I/O daemon: index ``index`` in the config's ordered list.

    Attributes:
        control: the requests that move no bulk (:class:`~.control.ControlRequests`).
    """

    #: Every operation of ``IOD_SCHEMAS``: how it is served and the method that serves it
    #: (``control.op_*``: a method of the ``control`` part).
    OPS: ClassVar[dict[str, tuple[str, str]]] = {
        "read": (STREAM, "start_read"),
        "write": (STREAM, "start_write"),
        "writes": (STREAM, "smallwrites.start"),
        "cb_register": (STREAM, "start_callbacks"),
        "ping": (INLINE, "control.op_ping"),
        "status": (INLINE, "control.op_status"),
        "sched_get": (INLINE, "control.op_sched_get"),
        "sched_set": (INLINE, "control.op_sched_set"),
        "model_set": (INLINE, "control.op_model_set"),
        "disk_drop": (TASK, "control.op_disk_drop"),  # waits for the model's write-back
        "cb_hold": (INLINE, "control.op_cb_hold"),
        "cb_status": (INLINE, "control.op_cb_status"),
        "metrics": (INLINE, "control.op_metrics"),
        "size": (TASK, "control.op_size"),
        "sizes": (TASK, "control.op_sizes"),
        "create": (TASK, "control.op_create"),
        "precreate": (INLINE, "control.op_precreate"),  # promises only (no file made)
        "utime": (TASK, "control.op_utime"),
        "truncate": (TASK, "control.op_truncate"),
        "unlink": (TASK, "control.op_unlink"),
        "unlinks": (TASK, "control.op_unlinks"),
        "statfs": (TASK, "control.op_statfs"),
        "fsync": (TASK, "control.op_fsync"),
        "list": (TASK, "control.op_list"),
        "stats": (TASK, "control.op_stats"),
        "cb_invalidate": (TASK, "control.op_cb_invalidate"),
        "drop_cache": (TASK, "control.op_drop_cache"),
    }

    def __init__(self, config: Config, index: int, storage: PosixStorage | None = None) -> None:
        self.config = config
        self.index = index
        self.endpoint = config.iods[index]
        self.key = auth.key_for(config)  # None: authentication off (protocol/auth.py)
        if storage is None:
            from pvfs.models.disk import storage_of

            kind, disk = storage_of(config, index)
            storage = open_storage(kind, self.endpoint.data_dir, disk)
        self.storage = storage
        # rs is no engine policy: the selector switches the engine among the fixed ones.
        self.engine = _native.Engine(
            algorithm=schedulers.DEFAULT if config.algorithm == schedulers.SELECTOR
            else config.algorithm,
            window=config.window, idle_timeout=config.request_timeout, disk=storage.disk,
            gather=config.gather)
        self.selector = ReactiveSelector(self)
        self.selector.active = config.algorithm == schedulers.SELECTOR
        self.stats = WorkloadStats()
        self.metrics = Metrics(f"iod{index}")
        self.holders = HolderDirectory(config.request_timeout)
        self.started = time.time()
        self.address: tuple[str, int] | None = None
        # N_file (open handles per file) is the manager's to count; asked when needed.
        self.mgr = Channel(config.manager.host, config.manager.port, config.connect_timeout,
                           config.request_timeout, max_idle=2, name="manager", key=self.key,
                           role=f"iod{index}")
        # Stripe files whose size the manager caches: it hears before they change.
        self.sizewatch = SizeWatch(self._sizes_changed)
        self.conns: dict[int, trio.socket.SocketType] = {}
        # Jobs that touch no file (replies, zeros, drains) still name a descriptor.
        self.null_fd = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
        self.jobs: dict[int, _Job] = {}
        self._ids = itertools.count(1)
        self._nursery: trio.Nursery | None = None
        self.smallwrites = SmallWrites(self)  # many small files' writes in one request
        self.control = ControlRequests(
            index=index, started=self.started, storage=storage, engine=self.engine,
            selector=self.selector, stats=self.stats, holders=self.holders,
            sizewatch=self.sizewatch, metrics=self.metrics, small_writes=self.smallwrites.status,
            connections=lambda: len(self.conns), nfile=self.nfile)
        self.ops: dict[str, tuple[str, Callable]] = {
            op: (kind, operator.attrgetter(method)(self))
            for op, (kind, method) in self.OPS.items()}

    # ------------------------------------------------------------------ lifecycle
    async def serve(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        family = socket.AF_INET6 if ":" in self.endpoint.host else socket.AF_INET
        listener = trio.socket.socket(family, socket.SOCK_STREAM)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            await listener.bind((self.endpoint.host, self.endpoint.port))
            listener.listen(512)
            self.address = listener.getsockname()
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._event_loop)
                nursery.start_soon(self.sizewatch.run)
                nursery.start_soon(self._accept_loop, listener)
                log.info("iod %d serving %s:%d, data in %s, scheduler %s (engine %s/%s)",
                         self.index, *self.address[:2], self.storage.root, self.engine.algorithm,
                         self.engine.info()["read_mode"], self.engine.info()["write_mode"])
                task_status.started(self.address)
                if self.endpoint.metrics_port:
                    from ..httpmetrics import serve_metrics

                    await nursery.start(serve_metrics, self.endpoint.host,
                                        self.endpoint.metrics_port,
                                        lambda: render(self.control.metrics_families()))
        finally:
            listener.close()
            self.mgr.close()
            self.engine.close()
            for sock in self.conns.values():
                sock.close()
            os.close(self.null_fd)
            self.storage.close()

    async def _accept_loop(self, listener) -> None:
        conn_ids = itertools.count(1)
        while True:
            sock, addr = await listener.accept()
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.key is None:
                self._attach(next(conn_ids), sock)
            else:
                # The handshake runs here in Python; only an authenticated connection is
                # handed to the engine, so no unauthenticated frame ever reaches a job.
                self._nursery.start_soon(self._authenticate, next(conn_ids), sock,
                                         f"{addr[0]}:{addr[1]}")

    def _attach(self, cid: int, sock) -> None:
        self.conns[cid] = sock
        self.engine.attach(cid, sock.fileno())

    async def _authenticate(self, cid: int, sock, peer: str) -> None:
        ok = False
        try:
            ok = await auth.server_handshake(sock, self.key, peer, log)
        finally:
            if ok:
                self._attach(cid, sock)
            else:
                sock.close()

    async def _event_loop(self) -> None:
        fd = self.engine.fileno()
        while True:
            await trio.lowlevel.wait_readable(fd)
            with self.selector.batch():   # rs decides after the batch's submissions
                for ev in self.engine.events():
                    kind = ev[0]
                    try:
                        if kind == "frame":
                            self.on_frame(ev[1], ev[2], ev[3])
                        elif kind == "done":
                            self.on_done(*ev[1:])
                        elif kind == "closed":
                            self.on_closed(ev[1], ev[2])
                    except Exception:  # a bug must not take the daemon down
                        log.exception("error handling engine event %s", kind)

    # ------------------------------------------------------------------ engine events
    def on_frame(self, cid: int, bulk_len: int, raw: bytes) -> None:
        sock = self.conns.get(cid)
        if sock is None:
            return
        try:
            op, f = schema.check(IOD_SCHEMAS, decode_header(raw))
        except (FrameError, ValueError) as exc:
            self.refuse(cid, bulk_len, error_reply(errno.EINVAL, str(exc)))
            return
        if bulk_len and op not in ("write", "writes"):
            log.info("closing connection %d: bulk data on %s", cid, op)
            self.drop(cid)
            return
        kind, handler = self.ops[op]
        try:
            if kind == STREAM:
                handler(cid, f, bulk_len)
            elif kind == TASK:
                self._nursery.start_soon(self._async_control, cid, op, handler, f)
            else:
                result = handler(f)
                self.metrics.request(op)
                self.reply(cid, result)
        except Exception as exc:  # noqa: BLE001 - _failed answers it and logs a bug
            self._failed(cid, op, bulk_len, exc)

    def on_done(self, job_id: int, err: int, nbytes: int, t_submit: int, t_start: int,
                t_done: int) -> None:
        job = self.jobs.pop(job_id, None)
        if job is None:
            return
        if job.then is not None:
            job.then(err, job.cid in self.conns and err not in CONNECTION_ERRORS)
            return
        if job.mtime is not None:
            self._set_mtime(job, err, nbytes)
        if job.op == "write":
            self.sizewatch.changed(job.ino)
        if job.pinned:
            self._close_later(self.storage.unpin(job.ino, defer=True))
        if err == _native.ERR_STALE and job.cid in self.conns:
            if job.record is not None:
                self.stats.withdraw(job_id, job.ino)
            if job.retry is not None:
                self._stale(job)
            else:
                self.reply(job.cid, error_reply(errno.EIO, "stripe file cannot be examined"))
            return
        if job.record is not None:
            self.stats.end(job_id, job.ino, err, nbytes, (t_start - t_submit) / 1e9,
                           (t_done - t_start) / 1e9)
            self.metrics.request(job.op, (t_done - t_submit) / 1e9, error=bool(err))
            if not err:
                self.metrics.add_bytes("read" if job.op == "read" else "written", nbytes)
        if err and job.op == "write" and job.cid in self.conns and err not in CONNECTION_ERRORS:
            # A storage error: the engine drained the bulk; the connection awaits our reply.
            self.reply(job.cid, error_reply(err, f"writing stripe file: {os.strerror(err)}"))

    def _set_mtime(self, job: _Job, err: int, nbytes: int) -> None:
        """A write carrying the file's explicit mtime (a mount's write delegation,
        fuse/delegations.py): set on the stripe file after its bytes, then the reply the
        engine did not send. (A metadata-only call on an open descriptor: not worth a worker
        thread.)"""
        if err or job.cid not in self.conns:
            return  # (an error is answered below, as for any write)
        fd, mtime = job.mtime
        try:
            os.utime(fd, ns=(os.fstat(fd).st_atime_ns, mtime))
        except OSError as exc:
            self.reply(job.cid, error_reply(exc.errno or errno.EIO,
                                            f"setting stripe file mtime: {exc}"))
            return
        self.reply(job.cid, {"nbytes": nbytes})

    def on_closed(self, cid: int, err: int) -> None:
        sock = self.conns.pop(cid, None)
        if sock is not None:
            if err:
                log.info("connection %d closed: %s", cid, os.strerror(err))
            sock.close()

    def drop(self, cid: int) -> None:
        sock = self.conns.pop(cid, None)
        if sock is not None:
            self.engine.detach(cid)
            sock.close()

    def _submit(self, cid: int, job: _Job, file_fd: int, op: int, accesses: bytes,
                prefix: bytes = b"", suffix: bytes = b"", size_at: int = -1,
                check: bool = False) -> int:
        job_id = next(self._ids)
        self.jobs[job_id] = job
        # (a write setting the mtime after its bytes holds the connection for its reply)
        self.engine.submit(job_id, self.conns[cid].fileno(), file_fd, op, accesses, prefix,
                           job.ino, suffix, size_at, check,
                           job.mtime is not None or job.then is not None)
        return job_id

    def submit_held(self, cid: int, op: str, file_fd: int, accesses: bytes,
                    then: Callable[[int, bool], None]) -> None:
        """A job whose reply is sent later: ``then(err, answerable)`` once it is done."""
        job = _Job(cid, op=op)
        job.then = then
        self._submit(cid, job, file_fd, _native.OP_WRITE, accesses)

    def spawn(self, fn: Callable[..., Awaitable], *args) -> None:
        self._nursery.start_soon(fn, *args)

    def reply(self, cid: int, header: dict) -> None:
        """Send a small reply frame (a job with a prefix and no accesses)."""
        if cid in self.conns:
            self._submit(cid, _Job(cid), self.null_fd, _native.OP_READ, b"", frame(header))

    def refuse(self, cid: int, bulk_len: int, header: dict) -> None:
        """Answer a refused request, draining its bulk first so the connection stays usable."""
        if not bulk_len:
            self.reply(cid, header)
        elif bulk_len > MAX_DRAIN:
            self.drop(cid)
        elif cid in self.conns:
            acc = array("q", (_native.ACC_DISCARD, 0, bulk_len)).tobytes()
            self._submit(cid, _Job(cid, op="drain"), self.null_fd, _native.OP_WRITE, acc, b"",
                         frame(header))

    # ------------------------------------------------------------------ data path
    def _rank(self, f: dict) -> int:
        stripe = f["stripe"]
        if stripe.pcount > self.config.niods or stripe.base >= self.config.niods:
            raise ValueError("stripe does not fit this file system's I/O daemons")
        rank = stripe.rank_of_iod(self.index, self.config.niods)
        if rank is None:
            raise ValueError(f"I/O daemon {self.index} holds no share of this file")
        return rank

    def _begin(self, job_id: int, ino: int, op: str, desc, nbytes: int) -> JobRecord:
        regions = desc.expand()
        lo = min((o for o, _ in regions), default=0)
        hi = max((o + n for o, n in regions), default=0)
        rec = JobRecord(ino, op, nbytes, len(regions), lo, hi, sum(n for _, n in regions))
        self.stats.begin(job_id, rec)
        return rec

    def start_read(self, cid: int, f: dict, bulk_len: int) -> None:
        pieces = pieces_for_rank(f["desc"], f["stripe"], self._rank(f))
        # Pinned from the start: a worker thread's call may evict cached descriptors.
        fd = self.storage.lookup(f["ino"])
        if fd is None:
            self._nursery.start_soon(self._open_then, self._submit_read, cid, f, bulk_len,
                                     pieces, False)
        else:
            self._submit_read(cid, f, bulk_len, pieces, fd, True)

    def start_write(self, cid: int, f: dict, bulk_len: int) -> None:
        pieces = pieces_for_rank(f["desc"], f["stripe"], self._rank(f))
        nbytes = stream_length(pieces)
        if nbytes != bulk_len:
            raise ValueError(f"write carries {bulk_len} bytes, description needs {nbytes}")
        if nbytes == 0:
            self.reply(cid, {"nbytes": 0})
            return
        fd = self.storage.lookup(f["ino"])
        if fd is None:
            self._nursery.start_soon(self._open_then, self._submit_write, cid, f, bulk_len,
                                     pieces, True)
        else:
            self._submit_write(cid, f, bulk_len, pieces, fd, True)

    async def _open_then(self, submit: Callable, cid: int, f: dict, bulk_len: int, pieces,
                         create: bool, again: bool = False) -> None:
        """A descriptor-cache miss (or, ``again``, a stale descriptor): open the stripe file
        in a worker thread, as every call that may wait for the disk is made, then submit
        the job."""
        op = "write" if create else "read"
        try:
            fd = await trio.to_thread.run_sync(self.storage.acquire, f["ino"], create)
        except Exception as exc:  # noqa: BLE001 - _failed answers it and logs a bug
            self._failed(cid, op, bulk_len, exc)
            return
        if cid not in self.conns:  # the connection went away meanwhile
            if fd is not None:
                self._close_later(self.storage.unpin(f["ino"], defer=True))
            return
        try:
            # No check: acquire just looked at the file (and serves a pinned, unlinked one
            # on purpose, as before).
            submit(cid, f, bulk_len, pieces, fd, False, again)
        except Exception as exc:  # noqa: BLE001 - _failed answers it and logs a bug
            self._failed(cid, op, bulk_len, exc)

    def _submit_read(self, cid: int, f: dict, bulk_len: int, pieces, fd: int | None,
                     check: bool, again: bool = False) -> None:
        """Submit a read on ``fd`` (pinned; the job takes the pin) or, with None, on no
        stripe file. The engine examines the descriptor as the job starts (check: unlinked
        behind the cache) and writes the stripe file's size into the ack; bytes past it
        (holes past the end) stream as zeros. ``again``: the request's first job found a
        stale descriptor; the reactive selector has seen the request already."""
        ino = f["ino"]
        nbytes = stream_length(pieces)
        try:
            prefix = _read_ack(nbytes, sized=fd is not None)
            if nbytes == 0 and fd is None:
                self._submit(cid, _Job(cid), self.null_fd, _native.OP_READ, b"", prefix)
                return
            acc = array("q")
            kind = _native.ACC_ZERO if fd is None else _native.ACC_FILE
            for _, local, n in pieces:
                acc.extend((kind, local, n))
            # rs: what of the request is cached, asked before the engine can serve it. Its
            # first step charges a miss to the (emulated) disk and makes the pages resident:
            # asked after the submission, 156 of 1064 requests of uncached study cells
            # looked more cached than they were (24 % of their bytes resident, not 15 %).
            resident = None
            if self.selector.active and nbytes and not again:
                resident = self.selector.resident(ino, pieces)
                self.selector.before_read(ino)  # a new operation starts under its last pick
            job = _Job(cid, ino, "read", pinned=fd is not None,
                       retry=(f, bulk_len, pieces) if check else None)
            job_id = self._submit(cid, job, self.null_fd if fd is None else fd,
                                  _native.OP_READ, acc.tobytes(), prefix,
                                  size_at=-1 if fd is None else len(prefix) - 8, check=check)
            fd = None  # the job holds the pin now; on_done releases it
        finally:
            if fd is not None:
                self._close_later(self.storage.unpin(ino, defer=True))
        if nbytes == 0:
            return
        job.record = self._begin(job_id, ino, "read", f["desc"], nbytes)
        if not again:
            # (the stripe's pcount as it is: _rank refused -1 and a pcount over niods)
            self.selector.on_read(ino, pieces, f["stripe"].pcount, f.get("hint"), job.record,
                                  resident)

    def _submit_write(self, cid: int, f: dict, bulk_len: int, pieces, fd: int,
                      check: bool, again: bool = False) -> None:
        """Submit a write on ``fd`` (pinned; the job takes the pin). A stripe file whose
        size the manager holds is first reported to it (sizewatch.py); the write is counted
        as a change in progress until its job is done."""
        ino = f["ino"]
        if f.get("fresh"):
            self.sizewatch.release_fresh(ino)
        if self.sizewatch.must_wait(ino):
            self._nursery.start_soon(self._report_then_write, cid, f, bulk_len, pieces, fd,
                                     check, again)
            return
        nbytes = stream_length(pieces)
        acc = array("q")
        for _, local, n in pieces:
            acc.extend((_native.ACC_FILE, local, n))
        # rs decides writes too when its model has a write part (issue 31): residency asked
        # before the engine can serve the request, as for reads
        resident = None
        if self.selector.active and nbytes and not again:
            resident = self.selector.resident(ino, pieces)
        self.sizewatch.changing[ino] += 1
        try:
            job = _Job(cid, ino, "write", pinned=True,
                       retry=(f, bulk_len, pieces) if check else None)
            if f.get("mtime_ns") is not None:  # the reply follows the mtime (_set_mtime)
                job.mtime = (fd, f["mtime_ns"])
            job_id = self._submit(cid, job, fd, _native.OP_WRITE, acc.tobytes(), b"",
                                  b"" if job.mtime else frame({"nbytes": nbytes}),
                                  check=check)
        except BaseException:
            self.sizewatch.changed(ino)
            self._close_later(self.storage.unpin(ino, defer=True))
            raise
        job.record = self._begin(job_id, ino, "write", f["desc"], nbytes)
        if nbytes and not again:
            self.selector.on_write(ino, pieces, f["stripe"].pcount, f.get("hint"), job.record,
                                   resident)

    async def _report_then_write(self, cid: int, f: dict, bulk_len: int, pieces, fd: int,
                                 check: bool, again: bool) -> None:
        """The manager holds the stripe file's size: tell it, then submit the write (its
        reply must not reach the client before the manager forgot the old size)."""
        try:
            await self.sizewatch.before_change(f["ino"])
        except BaseException:
            self._close_later(self.storage.unpin(f["ino"], defer=True))
            raise
        if cid not in self.conns:  # the connection went away meanwhile
            self._close_later(self.storage.unpin(f["ino"], defer=True))
            return
        try:
            self._submit_write(cid, f, bulk_len, pieces, fd, check, again)
        except Exception as exc:  # noqa: BLE001 - _failed answers it and logs a bug
            self._failed(cid, "write", bulk_len, exc)

    async def _sizes_changed(self, inos: list[int] | None) -> None:
        await self.mgr.call({"op": "sizes_changed", "inos": inos or [], "all": inos is None,
                             "iod": self.index, "cred": [0, 0, []]})

    def _stale(self, job: _Job) -> None:
        """The engine found the job's cached descriptor unlinked behind the cache (or not
        examinable) before moving a byte: reopen in a worker thread and submit again."""
        f, bulk_len, pieces = job.retry
        write = job.op == "write"
        self._nursery.start_soon(self._open_then,
                                 self._submit_write if write else self._submit_read,
                                 job.cid, f, bulk_len, pieces, write, True)

    def _failed(self, cid: int, op: str, bulk_len: int, exc: Exception) -> None:
        """Answer a request whose handler raised (counted, logged if it is a bug)."""
        self.metrics.request(op, error=True)
        if not isinstance(exc, (OSError, ValueError)):
            log.exception("error serving %s", op, exc_info=exc)
        if op in ("write", "writes"):
            self.refuse(cid, bulk_len, from_exception(exc))
        else:
            self.reply(cid, from_exception(exc))

    def _close_later(self, fd: int | None) -> None:
        """Close a descriptor the cache let go of in a worker thread (see storage.unpin)."""
        if fd is not None:
            self._nursery.start_soon(trio.to_thread.run_sync, os.close, fd)

    # ------------------------------------------------------------------ control calls
    async def nfile(self, inos: list[int]) -> dict[int, int]:
        """N_file of each inode from the manager (0 where it cannot be asked)."""
        out: dict[int, int] = {}
        for ino in inos:
            try:
                reply = await self.mgr.call({"op": "nfile", "ino": ino, "cred": [0, 0, []]})
                out[ino] = reply["nfile"]
            except OSError:
                out[ino] = 0
        return out

    def start_callbacks(self, cid: int, f: dict, bulk_len: int) -> None:
        """A callback connection leaves the engine for a trio task of its own."""
        sock = self.conns.pop(cid)
        self.engine.detach(cid)
        self._nursery.start_soon(self._callback_connection, f, sock)

    async def _async_control(self, cid: int, op: str,
                             handler: Callable[[dict], Awaitable[dict]], f: dict) -> None:
        t0 = time.perf_counter()
        try:
            result = await handler(f)
        except Exception as exc:
            if not isinstance(exc, (OSError, ValueError)):
                log.exception("error serving %s", op)
            result = from_exception(exc)
        self.metrics.request(op, time.perf_counter() - t0, error="err" in result)
        self.reply(cid, result)

    async def _callback_connection(self, f: dict, sock) -> None:
        with sock:
            await self.holders.serve_client(f["client"], f["block_size"], sock)


def _read_ack(nbytes: int, sized: bool) -> bytes:
    """A read's reply frame (sent ahead of its bulk). ``sized``: ``local_size`` is encoded
    as a msgpack uint64 in the frame's last 8 bytes, which the engine fills with the stripe
    file's size as the job starts (``size_at=len - 8``); else it is 0 (no stripe file)."""
    if not sized:
        return frame({"nbytes": nbytes, "local_size": 0}, nbytes)
    body = encode_header({"nbytes": nbytes, "local_size": 0})
    assert body.endswith(b"\x00")  # local_size, the map's last value, as a positive fixint
    body = body[:-1] + b"\xcf" + bytes(8)
    return PREFIX.pack(MAGIC, len(body), nbytes) + body


# Engine errors that mean the connection itself broke (as opposed to the local file).
CONNECTION_ERRORS = {errno.ECONNRESET, errno.EPIPE, errno.ETIMEDOUT, errno.ECANCELED,
                     errno.ENOTCONN, errno.EPROTO}
