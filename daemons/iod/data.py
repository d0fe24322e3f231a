"""The requests that move a file's bytes: ``read`` and ``write``, each one engine job.

A request's I/O description intersected with this daemon's share of the file gives the
*accesses* (contiguous local transfers) in stream order (thesis fig. 3.7); a read's reply frame
is prepended as the acknowledgement, a write's appended once every byte is in place. A read or
write on a cached stripe-file descriptor is submitted at once and the engine examines the
descriptor on its own thread as the job starts (unlinked behind the cache: the job ends before
moving a byte and is submitted again on a descriptor opened anew, :meth:`DataRequests.stale`);
a cache miss opens the file in a worker thread first. A write to a stripe file whose size the
manager keeps is reported to it first (``sizewatch.py``); one carrying the file's mtime holds
its reply until the mtime is set (:meth:`DataRequests.set_mtime`).

The engine serves the common request itself (csrc/fast.c): a read or write of a region list
on a stripe file granted to it, with nothing unusual in the header. Python grants a file once
it has served a request on its cached descriptor (:meth:`DataRequests.grant`; writes only while
no size promise is kept, ``sizewatch.py`` blocks them before it makes one) and takes the jobs'
records into its statistics later (:meth:`DataRequests.fast_served`); every other request, and
every miss, stale descriptor and error, still comes here.
"""

from __future__ import annotations

import errno
import os
from array import array
from collections.abc import Callable

import trio

from pvfs import _native
from pvfs.layout.intersect import pieces_for_rank, stream_length
from pvfs.protocol.errors import error_reply
from pvfs.protocol.framing import MAGIC, PREFIX, encode_header, frame

from .stats import JobRecord

__all__ = ["DataRequests", "Job"]


class Job:
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


class DataRequests:
    """``read`` and ``write`` of one I/O daemon (a part of ``IodServer``, ``server.data``):
    the STREAM handlers ``start_read``/``start_write``, and what the server's engine events
    ask of their jobs (``stale``, ``set_mtime``)."""

    def __init__(self, server) -> None:
        self.server = server

    # ------------------------------------------------------------------ the fast path
    def grant(self, ino: int, fd: int) -> None:
        """Let the engine serve ``ino``'s next requests on (a dup of) its cached descriptor
        ``fd``, writes too while the manager holds no size of it (``watch`` blocks them
        before it promises). A no-op while the fast path is off (rs decides per request)."""
        s = self.server
        if s.fast_path:
            s.engine.fast_grant(ino, fd, not s.sizewatch.must_wait(ino))

    def fast_served(self) -> None:
        """The engine's own jobs done since the last call, into the workload statistics and
        the metrics, as ``on_done`` records Python's."""
        s = self.server
        for (ino, op, err, nbytes, want, regions, lo, hi, logical, t_submit, t_start,
             t_done) in s.engine.fast_records():
            s.stats.served(JobRecord(ino, op, want, regions, lo, hi, logical), err, nbytes,
                           (t_start - t_submit) / 1e9, (t_done - t_start) / 1e9)
            s.metrics.request(op, (t_done - t_submit) / 1e9, error=bool(err))
            if not err:
                s.metrics.add_bytes("read" if op == "read" else "written", nbytes)

    def _rank(self, f: dict) -> int:
        stripe, s = f["stripe"], self.server
        if stripe.pcount > s.config.niods or stripe.base >= s.config.niods:
            raise ValueError("stripe does not fit this file system's I/O daemons")
        rank = stripe.rank_of_iod(s.index, s.config.niods)
        if rank is None:
            raise ValueError(f"I/O daemon {s.index} holds no share of this file")
        return rank

    def _begin(self, job_id: int, ino: int, op: str, desc, nbytes: int) -> JobRecord:
        regions = desc.expand()
        lo = min((o for o, _ in regions), default=0)
        hi = max((o + n for o, n in regions), default=0)
        rec = JobRecord(ino, op, nbytes, len(regions), lo, hi, sum(n for _, n in regions))
        self.server.stats.begin(job_id, rec)
        return rec

    def start_read(self, cid: int, f: dict, bulk_len: int) -> None:
        pieces = pieces_for_rank(f["desc"], f["stripe"], self._rank(f))
        # Pinned from the start: a worker thread's call may evict cached descriptors.
        fd = self.server.storage.lookup(f["ino"])
        if fd is None:
            self.server.spawn(self._open_then, self._submit_read, cid, f, bulk_len, pieces,
                              False)
        else:
            self._submit_read(cid, f, bulk_len, pieces, fd, True)

    def start_write(self, cid: int, f: dict, bulk_len: int) -> None:
        pieces = pieces_for_rank(f["desc"], f["stripe"], self._rank(f))
        nbytes = stream_length(pieces)
        if nbytes != bulk_len:
            raise ValueError(f"write carries {bulk_len} bytes, description needs {nbytes}")
        if nbytes == 0:
            self.server.reply(cid, {"nbytes": 0})
            return
        fd = self.server.storage.lookup(f["ino"])
        if fd is None:
            self.server.spawn(self._open_then, self._submit_write, cid, f, bulk_len, pieces,
                              True)
        else:
            self._submit_write(cid, f, bulk_len, pieces, fd, True)

    async def _open_then(self, submit: Callable, cid: int, f: dict, bulk_len: int, pieces,
                         create: bool, again: bool = False) -> None:
        """A descriptor-cache miss (or, ``again``, a stale descriptor): open the stripe file
        in a worker thread, as every call that may wait for the disk is made, then submit
        the job."""
        s = self.server
        op = "write" if create else "read"
        try:
            fd = await trio.to_thread.run_sync(s.storage.acquire, f["ino"], create)
        except Exception as exc:  # noqa: BLE001 - failed answers it and logs a bug
            s.failed(cid, op, bulk_len, exc)
            return
        if cid not in s.conns:  # the connection went away meanwhile
            if fd is not None:
                s.close_later(s.storage.unpin(f["ino"], defer=True))
            return
        try:
            # No check: acquire just looked at the file (and serves a pinned, unlinked one
            # on purpose, as before).
            submit(cid, f, bulk_len, pieces, fd, False, again)
        except Exception as exc:  # noqa: BLE001 - failed answers it and logs a bug
            s.failed(cid, op, bulk_len, exc)

    def _submit_read(self, cid: int, f: dict, bulk_len: int, pieces, fd: int | None,
                     check: bool, again: bool = False) -> None:
        """Submit a read on ``fd`` (pinned; the job takes the pin) or, with None, on no
        stripe file. The engine examines the descriptor as the job starts (check: unlinked
        behind the cache) and writes the stripe file's size into the ack; bytes past it
        (holes past the end) stream as zeros. ``again``: the request's first job found a
        stale descriptor; the reactive selector has seen the request already."""
        s = self.server
        ino = f["ino"]
        nbytes = stream_length(pieces)
        try:
            prefix = _read_ack(nbytes, sized=fd is not None)
            if nbytes == 0 and fd is None:
                s.submit(cid, Job(cid), s.null_fd, _native.OP_READ, b"", prefix)
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
            if s.selector.active and nbytes and not again:
                resident = s.selector.resident(ino, pieces)
                s.selector.before_read(ino)  # a new operation starts under its last pick
            job = Job(cid, ino, "read", pinned=fd is not None,
                      retry=(f, bulk_len, pieces) if check else None)
            job_id = s.submit(cid, job, s.null_fd if fd is None else fd,
                              _native.OP_READ, acc.tobytes(), prefix,
                              size_at=-1 if fd is None else len(prefix) - 8, check=check)
            if fd is not None:
                self.grant(ino, fd)
            fd = None  # the job holds the pin now; on_done releases it
        finally:
            if fd is not None:
                s.close_later(s.storage.unpin(ino, defer=True))
        if nbytes == 0:
            return
        job.record = self._begin(job_id, ino, "read", f["desc"], nbytes)
        if not again:
            # (the stripe's pcount as it is: _rank refused -1 and a pcount over niods)
            s.selector.on_read(ino, pieces, f["stripe"].pcount, f.get("hint"), job.record,
                               resident)

    def _submit_write(self, cid: int, f: dict, bulk_len: int, pieces, fd: int,
                      check: bool, again: bool = False) -> None:
        """Submit a write on ``fd`` (pinned; the job takes the pin). A stripe file whose
        size the manager holds is first reported to it (sizewatch.py); the write is counted
        as a change in progress until its job is done."""
        s = self.server
        ino = f["ino"]
        if f.get("fresh"):
            s.sizewatch.release_fresh(ino)
        if s.sizewatch.must_wait(ino):
            s.spawn(self._report_then_write, cid, f, bulk_len, pieces, fd, check, again)
            return
        nbytes = stream_length(pieces)
        acc = array("q")
        for _, local, n in pieces:
            acc.extend((_native.ACC_FILE, local, n))
        # rs decides writes too when its model has a write part (issue 31): residency asked
        # before the engine can serve the request, as for reads
        resident = None
        if s.selector.active and nbytes and not again:
            resident = s.selector.resident(ino, pieces)
        s.sizewatch.changing[ino] += 1
        try:
            job = Job(cid, ino, "write", pinned=True,
                      retry=(f, bulk_len, pieces) if check else None)
            if f.get("mtime_ns") is not None:  # the reply follows the mtime (set_mtime)
                job.mtime = (fd, f["mtime_ns"])
            job_id = s.submit(cid, job, fd, _native.OP_WRITE, acc.tobytes(), b"",
                              b"" if job.mtime else frame({"nbytes": nbytes}),
                              check=check)
            self.grant(ino, fd)
        except BaseException:
            s.sizewatch.changed(ino)
            s.close_later(s.storage.unpin(ino, defer=True))
            raise
        job.record = self._begin(job_id, ino, "write", f["desc"], nbytes)
        if nbytes and not again:
            s.selector.on_write(ino, pieces, f["stripe"].pcount, f.get("hint"), job.record,
                                resident)

    async def _report_then_write(self, cid: int, f: dict, bulk_len: int, pieces, fd: int,
                                 check: bool, again: bool) -> None:
        """The manager holds the stripe file's size: tell it, then submit the write (its
        reply must not reach the client before the manager forgot the old size)."""
        s = self.server
        try:
            await s.sizewatch.before_change(f["ino"])
        except BaseException:
            s.close_later(s.storage.unpin(f["ino"], defer=True))
            raise
        if cid not in s.conns:  # the connection went away meanwhile
            s.close_later(s.storage.unpin(f["ino"], defer=True))
            return
        try:
            self._submit_write(cid, f, bulk_len, pieces, fd, check, again)
        except Exception as exc:  # noqa: BLE001 - failed answers it and logs a bug
            s.failed(cid, "write", bulk_len, exc)

    # ------------------------------------------------------------------ the server's events
    def stale(self, job: Job) -> None:
        """The engine found the job's cached descriptor unlinked behind the cache (or not
        examinable) before moving a byte: reopen in a worker thread and submit again."""
        f, bulk_len, pieces = job.retry
        write = job.op == "write"
        self.server.spawn(self._open_then, self._submit_write if write else self._submit_read,
                          job.cid, f, bulk_len, pieces, write, True)

    def set_mtime(self, job: Job, err: int, nbytes: int) -> None:
        """A write carrying the file's explicit mtime (a mount's write delegation,
        fuse/delegations.py): set on the stripe file after its bytes, then the reply the
        engine did not send. (A metadata-only call on an open descriptor: not worth a worker
        thread.)"""
        s = self.server
        if err or job.cid not in s.conns:
            return  # (an error is answered by on_done, as for any write)
        fd, mtime = job.mtime
        try:
            os.utime(fd, ns=(os.fstat(fd).st_atime_ns, mtime))
        except OSError as exc:
            s.reply(job.cid, error_reply(exc.errno or errno.EIO,
                                         f"setting stripe file mtime: {exc}"))
            return
        s.reply(job.cid, {"nbytes": nbytes})

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
