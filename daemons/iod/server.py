"""The I/O daemon server: Python parses requests and builds jobs, C streams the bytes.

A read or write request becomes a *job* (thesis fig. 3.7): the request's I/O description is
intersected with this daemon's share of the file, giving a list of *accesses* (contiguous
local transfers) in stream order. For a read the reply frame is prepended as the job's
acknowledgement; for a write the reply is sent once the engine has received every byte into
place. The engine (``pvfs._native.Engine``) runs on its own native thread and picks the next
job by the active algorithm (opt1..opt4); completions arrive through its eventfd.
"""

from __future__ import annotations

import errno
import itertools
import logging
import os
import time
from array import array

import trio

from pvfs import __version__, _native
from pvfs.client.rpc import Channel
from pvfs.config import ALGORITHMS, Config
from pvfs.layout.intersect import pieces_for_rank, stream_length
from pvfs.protocol import aio
from pvfs.protocol.framing import frame
from pvfs.protocol.schema import IOD_SCHEMAS

from ..common import Refused, serve_tcp
from .coherence import HolderDirectory
from .stats import JobRecord, WorkloadStats
from .storage import PosixStorage

log = logging.getLogger("pvfs.iod")

# Engine errors that mean the connection itself broke (as opposed to the local file).
CONNECTION_ERRORS = {errno.ECONNRESET, errno.EPIPE, errno.ETIMEDOUT, errno.ECANCELED,
                     errno.ENOTCONN, errno.EPROTO}


class EngineBridge:
    """Hands jobs to the native engine and wakes the waiting trio task on completion."""

    def __init__(self, engine: "_native.Engine") -> None:
        self.engine = engine
        self._waiting: dict[int, list] = {}
        self._ids = itertools.count(1)

    async def run(self) -> None:
        fd = self.engine.fileno()
        while True:
            await trio.lowlevel.wait_readable(fd)
            for done in self.engine.completions():
                slot = self._waiting.pop(done[0], None)
                if slot is not None:
                    slot[1] = done
                    slot[0].set()

    async def execute(self, sock_fd: int, file_fd: int, op: int, accesses: bytes,
                      prefix: bytes, ino: int, on_start=None) -> tuple:
        job_id = next(self._ids)
        slot: list = [trio.Event(), None]
        self._waiting[job_id] = slot
        self.engine.submit(job_id, sock_fd, file_fd, op, accesses, prefix, ino)
        if on_start is not None:
            on_start(job_id)
        # The engine owns the socket until the job completes; it enforces its own idle
        # timeout, so this wait is bounded and must not be cancelled half-way.
        with trio.CancelScope(shield=True):
            await slot[0].wait()
        return slot[1]


class IodServer:
    """One I/O daemon: index ``index`` in the config's ordered list."""

    def __init__(self, config: Config, index: int, storage: PosixStorage | None = None) -> None:
        self.config = config
        self.index = index
        self.endpoint = config.iods[index]
        self.storage = storage or PosixStorage(self.endpoint.data_dir)
        self.engine = _native.Engine(algorithm=config.algorithm, window=config.window,
                                     idle_timeout=config.request_timeout)
        self.bridge = EngineBridge(self.engine)
        self.stats = WorkloadStats()
        self.holders = HolderDirectory(config.request_timeout)
        self.started = time.time()
        self.address: tuple[str, int] | None = None
        # N_file (open handles per file) is the manager's to count; asked when needed.
        self.mgr = Channel(config.manager.host, config.manager.port, config.connect_timeout,
                           config.request_timeout, max_idle=2, name="manager")

    # ------------------------------------------------------------------ lifecycle
    async def serve(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self.bridge.run)
                self.address = await nursery.start(
                    serve_tcp, self.endpoint.host, self.endpoint.port, IOD_SCHEMAS, self.dispatch)
                log.info("iod %d serving %s:%d, data in %s, scheduler %s", self.index,
                         *self.address[:2], self.storage.root, self.engine.algorithm)
                task_status.started(self.address)
        finally:
            self.mgr.close()
            self.engine.close()
            self.storage.close()

    async def dispatch(self, op: str, f: dict, bulk_len: int, sock) -> dict | None:
        handler = getattr(self, f"op_{op}")
        if op == "write":
            return await handler(f, bulk_len, sock)
        if op in ("read", "cb_register"):
            return await handler(f, sock)
        return await handler(f)

    # ------------------------------------------------------------------ data path
    def _rank(self, f: dict) -> int:
        stripe = f["stripe"]
        if stripe.pcount > self.config.niods or stripe.base >= self.config.niods:
            raise ValueError("stripe does not fit this file system's I/O daemons")
        rank = stripe.rank_of_iod(self.index, self.config.niods)
        if rank is None:
            raise ValueError(f"I/O daemon {self.index} holds no share of this file")
        return rank

    def _record(self, ino: int, op: str, desc, nbytes: int) -> JobRecord:
        regions = desc.expand()
        lo = min((o for o, n in regions), default=0)
        hi = max((o + n for o, n in regions), default=0)
        return JobRecord(ino, op, nbytes, len(regions), lo, hi)

    async def op_read(self, f: dict, sock) -> None:
        ino = f["ino"]
        pieces = pieces_for_rank(f["desc"], f["stripe"], self._rank(f))
        nbytes = stream_length(pieces)
        fd = self.storage.open(ino, create=False)
        local_size = os.fstat(fd).st_size if fd is not None else 0
        acc = array("q")
        for _, local, n in pieces:
            # Bytes the stripe file does not hold (holes past its end) stream as zeros.
            inside = 0 if fd is None else max(0, min(n, local_size - local))
            if inside:
                acc.extend((_native.ACC_FILE, local, inside))
            if n - inside:
                acc.extend((_native.ACC_ZERO, local + inside, n - inside))
        prefix = frame({"nbytes": nbytes, "local_size": local_size}, nbytes)
        if nbytes == 0:
            await aio.sendall(sock, prefix)
            return None
        await self._run_job(ino, "read", f["desc"], nbytes, sock, -1 if fd is None else fd,
                            _native.OP_READ, acc.tobytes(), prefix)
        return None

    async def op_write(self, f: dict, bulk_len: int, sock) -> dict:
        ino = f["ino"]
        try:
            pieces = pieces_for_rank(f["desc"], f["stripe"], self._rank(f))
        except ValueError as exc:
            await self._drain(sock, bulk_len)
            raise Refused({"err": errno.EINVAL, "msg": str(exc)}) from None
        nbytes = stream_length(pieces)
        if nbytes != bulk_len:
            await self._drain(sock, bulk_len)
            raise Refused({"err": errno.EINVAL,
                           "msg": f"write carries {bulk_len} bytes, description needs {nbytes}"})
        if nbytes:
            fd = self.storage.open(ino, create=True)
            acc = array("q")
            for _, local, n in pieces:
                acc.extend((_native.ACC_FILE, local, n))
            err = await self._run_job(ino, "write", f["desc"], nbytes, sock, fd,
                                      _native.OP_WRITE, acc.tobytes(), b"")
            if err:
                raise OSError(err, f"writing stripe file: {os.strerror(err)}")
        size, _ = self.storage.size(ino)
        return {"nbytes": nbytes, "local_size": size}

    async def _drain(self, sock, n: int) -> None:
        with trio.fail_after(self.config.request_timeout):
            await aio.drain(sock, n)

    async def _run_job(self, ino: int, op: str, desc, nbytes: int, sock, fd: int, kind: int,
                       accesses: bytes, prefix: bytes) -> int:
        rec = self._record(ino, op, desc, nbytes)
        job_ids: list[int] = []
        self.storage.pin(ino)
        try:
            done = await self.bridge.execute(
                sock.fileno(), fd, kind, accesses, prefix, ino,
                on_start=lambda jid: (job_ids.append(jid), self.stats.begin(jid, rec)))
        finally:
            self.storage.unpin(ino)
        job_id, err, sent, t_submit, t_start, t_done = done
        self.stats.end(job_id, ino, err, sent, (t_start - t_submit) / 1e9,
                       (t_done - t_start) / 1e9)
        if err in CONNECTION_ERRORS or (err and op == "read"):
            raise ConnectionResetError(err, f"{op} job failed: {os.strerror(err)}")
        return err

    # ------------------------------------------------------------------ control calls
    async def op_ping(self, f: dict) -> dict:
        return {"version": __version__, "index": self.index, "uptime": time.time() - self.started}

    async def op_status(self, f: dict) -> dict:
        info = self.engine.info()
        return {"version": __version__, "index": self.index, "role": "iod",
                "uptime": time.time() - self.started, "pid": os.getpid(),
                "open_files": len(self.storage._fds), "queued_jobs": self.stats.in_service(),
                "scheduler": info.get("algorithm"), "engine": info}

    async def op_size(self, f: dict) -> dict:
        size, mtime = self.storage.size(f["ino"])
        return {"local_size": size, "mtime_ns": mtime}

    async def op_sizes(self, f: dict) -> dict:
        return {"sizes": [list(self.storage.size(i)) for i in f["inos"]]}

    async def op_truncate(self, f: dict) -> dict:
        self.storage.truncate(f["ino"], f["local_size"])
        return {}

    async def op_create(self, f: dict) -> dict:
        self.storage.create(f["ino"])
        return {}

    async def op_utime(self, f: dict) -> dict:
        self.storage.utime(f["ino"], f["mtime_ns"])
        return {}

    async def op_unlink(self, f: dict) -> dict:
        self.stats.forget(f["ino"])
        return {"removed": self.storage.unlink(f["ino"])}

    async def op_fsync(self, f: dict) -> dict:
        await trio.to_thread.run_sync(self.storage.fsync, f["ino"], f["data_only"])
        return {}

    async def op_statfs(self, f: dict) -> dict:
        return self.storage.statfs()

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

    async def op_stats(self, f: dict) -> dict:
        snap = self.stats.snapshot(await self.nfile(list(self.stats.files)))
        snap["engine"] = self.engine.info()
        if f["reset"]:
            self.stats.reset()
        return snap

    async def op_sched_get(self, f: dict) -> dict:
        return {"algorithm": self.engine.algorithm, "window": self.engine.window,
                "available": list(ALGORITHMS)}

    async def op_sched_set(self, f: dict) -> dict:
        if f["algorithm"] not in ALGORITHMS:
            raise ValueError(f"unknown algorithm {f['algorithm']!r}; one of {', '.join(ALGORITHMS)}")
        self.engine.algorithm = f["algorithm"]
        if f["window"] is not None:
            self.engine.window = f["window"]
        log.info("scheduler set to %s (window %d)", self.engine.algorithm, self.engine.window)
        return await self.op_sched_get(f)

    # ------------------------------------------------------------------ coherence (sync mounts)
    async def op_cb_register(self, f: dict, sock) -> None:
        await self.holders.serve_client(f["client"], f["block_size"], sock)

    async def op_cb_hold(self, f: dict) -> dict:
        self.holders.hold(f["client"], f["ino"], f["first"], f["count"])
        return {}

    async def op_cb_invalidate(self, f: dict) -> dict:
        n = await self.holders.invalidate(f["client"], f["ino"], f["offset"], f["length"])
        return {"invalidated": n}

    async def op_cb_status(self, f: dict) -> dict:
        return self.holders.status()

    async def op_list(self, f: dict) -> dict:
        inos = await trio.to_thread.run_sync(self.storage.inodes, f["after"], f["limit"])
        return {"inodes": inos}
