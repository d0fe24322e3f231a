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

The trio thread makes no file system call in the request path. A read or write (``data.py``,
the part ``data``) on a cached stripe-file descriptor is submitted at once; the engine examines the descriptor on its own
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
from pvfs.metrics import Metrics, render
from pvfs.protocol import auth, schema
from pvfs.protocol.errors import error_reply, from_exception
from pvfs.protocol.framing import FrameError, decode_header, frame
from pvfs.protocol.rpc import Channel
from pvfs.protocol.schema import IOD_SCHEMAS

from ..holders import HolderDirectory
from .control import ControlRequests
from .data import DataRequests, Job
from .rs import ReactiveSelector
from .sizewatch import SizeWatch
from .smallwrites import SmallWrites
from .stats import WorkloadStats
from .storage import PosixStorage, open_storage

log = logging.getLogger("pvfs.iod")

# A refused request's bulk is drained (keeping the connection) only up to this size.
MAX_DRAIN = 64 << 20
# How each request is served (IodServer.OPS, the daemon's one dispatch table):
STREAM = "stream"  # moves bulk or the connection itself: handler(cid, fields, bulk_len)
INLINE = "inline"  # quick, no file system call: handler(fields) -> reply, on the trio thread
TASK = "task"  # may block on the disk (run in a worker thread) or wait on other daemons:
#              async handler(fields) -> reply, as a trio task of its own


class IodServer:
    """One I/O daemon: index ``index`` in the config's ordered list.

    Attributes:
        control: the requests that move no bulk (:class:`~.control.ControlRequests`).
    """

    #: Every operation of ``IOD_SCHEMAS``: how it is served and the method that serves it
    #: (``control.op_*``: a method of the ``control`` part).
    OPS: ClassVar[dict[str, tuple[str, str]]] = {
        "read": (STREAM, "data.start_read"),
        "write": (STREAM, "data.start_write"),
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
        # The engine serves granted reads and writes itself (csrc/fast.c, data.py), except
        # while rs decides per request: it must see each one (the selector's ``active``).
        self.fast_path = False
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
        self.sizewatch.block_writes = self.engine.fast_block_writes
        storage.on_forget = self.engine.fast_revoke
        self.conns: dict[int, trio.socket.SocketType] = {}
        # Jobs that touch no file (replies, zeros, drains) still name a descriptor.
        self.null_fd = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
        self.jobs: dict[int, Job] = {}
        self._ids = itertools.count(1)
        self._nursery: trio.Nursery | None = None
        self.data = DataRequests(self)  # read and write: each one engine job
        self.smallwrites = SmallWrites(self)  # many small files' writes in one request
        self.control = ControlRequests(
            index=index, started=self.started, storage=storage, engine=self.engine,
            selector=self.selector, stats=self.stats, holders=self.holders,
            sizewatch=self.sizewatch, metrics=self.metrics, small_writes=self.smallwrites.status,
            connections=lambda: len(self.conns), nfile=self.nfile,
            fast_served=self.data.fast_served)
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
                nursery.start_soon(self._fast_records)
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

    def set_fast_path(self, on: bool) -> None:
        self.fast_path = on
        self.engine.fast_setup(on, self.index, self.config.niods)

    async def _fast_records(self) -> None:
        """The engine's own jobs into the statistics now and then (the engine also wakes
        the event loop when its ring is half full; reports take them first)."""
        while True:
            await trio.sleep(FAST_RECORDS_S)
            self.data.fast_served()

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
            self.data.fast_served()

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
        except Exception as exc:  # noqa: BLE001 - failed answers it and logs a bug
            self.failed(cid, op, bulk_len, exc)

    def on_done(self, job_id: int, err: int, nbytes: int, t_submit: int, t_start: int,
                t_done: int) -> None:
        job = self.jobs.pop(job_id, None)
        if job is None:
            return
        if job.then is not None:
            job.then(err, job.cid in self.conns and err not in CONNECTION_ERRORS)
            return
        if job.mtime is not None:
            self.data.set_mtime(job, err, nbytes)
        if job.op == "write":
            self.sizewatch.changed(job.ino)
        if job.pinned:
            self.close_later(self.storage.unpin(job.ino, defer=True))
        if err == _native.ERR_STALE and job.cid in self.conns:
            if job.record is not None:
                self.stats.withdraw(job_id, job.ino)
            if job.retry is not None:
                self.data.stale(job)
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

    def submit(self, cid: int, job: Job, file_fd: int, op: int, accesses: bytes,
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
        job = Job(cid, op=op)
        job.then = then
        self.submit(cid, job, file_fd, _native.OP_WRITE, accesses)

    def spawn(self, fn: Callable[..., Awaitable], *args) -> None:
        self._nursery.start_soon(fn, *args)

    def reply(self, cid: int, header: dict) -> None:
        """Send a small reply frame (a job with a prefix and no accesses)."""
        if cid in self.conns:
            self.submit(cid, Job(cid), self.null_fd, _native.OP_READ, b"", frame(header))

    def refuse(self, cid: int, bulk_len: int, header: dict) -> None:
        """Answer a refused request, draining its bulk first so the connection stays usable."""
        if not bulk_len:
            self.reply(cid, header)
        elif bulk_len > MAX_DRAIN:
            self.drop(cid)
        elif cid in self.conns:
            acc = array("q", (_native.ACC_DISCARD, 0, bulk_len)).tobytes()
            self.submit(cid, Job(cid, op="drain"), self.null_fd, _native.OP_WRITE, acc, b"",
                         frame(header))

    async def _sizes_changed(self, inos: list[int] | None) -> None:
        await self.mgr.call({"op": "sizes_changed", "inos": inos or [], "all": inos is None,
                             "iod": self.index, "cred": [0, 0, []]})

    def failed(self, cid: int, op: str, bulk_len: int, exc: Exception) -> None:
        """Answer a request whose handler raised (counted, logged if it is a bug)."""
        self.metrics.request(op, error=True)
        if not isinstance(exc, (OSError, ValueError)):
            log.exception("error serving %s", op, exc_info=exc)
        if op in ("write", "writes"):
            self.refuse(cid, bulk_len, from_exception(exc))
        else:
            self.reply(cid, from_exception(exc))

    def close_later(self, fd: int | None) -> None:
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


FAST_RECORDS_S = 0.2  # how often the engine's own jobs are taken into the statistics

# Engine errors that mean the connection itself broke (as opposed to the local file).
CONNECTION_ERRORS = {errno.ECONNRESET, errno.EPIPE, errno.ETIMEDOUT, errno.ECANCELED,
                     errno.ENOTCONN, errno.EPROTO}
