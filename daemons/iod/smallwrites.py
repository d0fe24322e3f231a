"""Many small writes of new files in one request (``writes``), for the native API's files
created ahead of the manager (``pvfs.client.behind``).

A program that keeps many small files writes each once, a few KiB at offset 0, right after
creating it. One ``write`` request per file costs this daemon a frame, a schema check, an
engine job, its accounting and a reply each: most of what a small file costs here. A client
that creates ahead (``pvfs.client.ahead``) instead queues such writes and sends those bound
for one daemon together: the items (file, layout, file offset, length, ``fresh``) in the
header, their bytes one after the other in the bulk.

The engine receives the bulk into a memory file (one job, the connection held for the
reply); a worker thread then writes each item into its stripe file, in order, and the reply
lists the bytes each item wrote. Each item is one stripe unit's piece of a file (the client
splits nothing); the size promises of ``sizewatch.py`` are kept as a ``write``'s are (a
fresh item drops the pool's promise unreported, a watched file is reported first). Served
only over plain POSIX storage: an emulated disk's timing is the engine's, per job, so there
the request is refused (``EOPNOTSUPP``) and the client sends its writes one by one.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from array import array

import trio

from pvfs import _native
from pvfs.protocol.errors import error_reply, from_exception

from .storage import PosixStorage

log = logging.getLogger("pvfs.iod")

__all__ = ["MAX_BULK", "MAX_ITEM", "MAX_ITEMS", "SmallWrites"]

MAX_ITEMS = 1024          # items per request (the schema's bound)
MAX_ITEM = 1 << 20        # bytes per item: one stripe unit's piece of a small write
MAX_BULK = 8 << 20        # bytes per request


class SmallWrites:
    """The ``writes`` request of one I/O daemon (a part of ``IodServer``)."""

    def __init__(self, server) -> None:
        self.server = server
        self.served = 0   # requests
        self.items = 0    # files written through them

    # ------------------------------------------------------------------ the request
    def start(self, cid: int, f: dict, bulk_len: int) -> None:
        """STREAM handler: check every item, then receive the bulk into a memory file."""
        s = self.server
        if type(s.storage) is not PosixStorage:
            raise OSError(errno.EOPNOTSUPP, "batched small writes need plain POSIX storage")
        plan = [self._place(item) for item in f["items"]]
        if sum(n for _ino, _local, n, _fresh in plan) != bulk_len:
            raise ValueError("writes: the items' lengths do not add up to the bulk")
        if bulk_len > MAX_BULK:
            raise ValueError(f"writes: more than {MAX_BULK} bytes in one request")
        memfd = os.memfd_create("pvfs-writes", os.MFD_CLOEXEC)
        acc = array("q", (_native.ACC_FILE, 0, bulk_len)).tobytes()
        try:
            s.submit_held(cid, "writes", memfd, acc,
                          lambda err, answerable: self.received(cid, memfd, plan, err,
                                                                answerable))
        except BaseException:
            os.close(memfd)
            raise

    def _place(self, item: dict) -> tuple[int, int, int, bool]:
        """(ino, offset in this daemon's stripe file, length, fresh) of one item, which must
        lie in one stripe unit held here."""
        s = self.server
        stripe, off, n = item["stripe"], item["off"], item["len"]
        if stripe.pcount > s.config.niods or stripe.base >= s.config.niods:
            raise ValueError("stripe does not fit this file system's I/O daemons")
        unit, within = divmod(off, stripe.ssize)
        if within + n > stripe.ssize:
            raise ValueError("writes: an item crosses a stripe unit")
        pcount = stripe.pcount if stripe.pcount != -1 else s.config.niods
        if stripe.iod_of_rank(unit % pcount, s.config.niods) != s.index:
            raise ValueError(f"writes: I/O daemon {s.index} holds no share of item "
                             f"{item['ino']} at {off}")
        return item["ino"], (unit // pcount) * stripe.ssize + within, n, item["fresh"]

    def received(self, cid: int, memfd: int, plan: list, err: int, answerable: bool) -> None:
        """The engine has the bulk (or failed): write the items in a task of their own.
        (``answerable``: the connection awaits a reply, as after a storage error.)"""
        if err:
            os.close(memfd)
            if answerable:
                self.server.reply(cid, error_reply(err, f"receiving writes: {os.strerror(err)}"))
            return
        self.server.spawn(self._apply, cid, memfd, plan)

    async def _apply(self, cid: int, memfd: int, plan: list) -> None:
        s, watch = self.server, self.server.sizewatch
        t0 = time.perf_counter()
        counted: list[int] = []
        try:
            for ino, _local, _n, fresh in plan:
                if fresh:
                    watch.release_fresh(ino)
            await watch.before_changes([ino for ino, _l, _n, _f in plan])  # (one report)
            for ino, _local, _n, _fresh in plan:
                watch.changing[ino] += 1   # (before the next await: sizewatch.py)
                counted.append(ino)
            written = await trio.to_thread.run_sync(self._write_all, memfd, plan)
            reply: dict = {"nbytes": written}
        except Exception as exc:
            if not isinstance(exc, OSError):
                log.exception("error serving writes")
            reply = from_exception(exc)
        finally:
            for ino in counted:
                watch.changed(ino)
            await trio.to_thread.run_sync(os.close, memfd)
        self.served += 1
        self.items += len(plan)
        s.metrics.request("writes", time.perf_counter() - t0, error="err" in reply)
        if "err" not in reply:
            s.metrics.add_bytes("written", sum(reply["nbytes"]))
        s.reply(cid, reply)

    def _write_all(self, memfd: int, plan: list) -> list[int]:
        """(In a worker thread.) Each item's bytes into its stripe file, in order."""
        storage = self.server.storage
        total = sum(n for _i, _l, n, _f in plan)
        data = memoryview(os.pread(memfd, total, 0))
        written, at = [], 0
        for ino, local, n, _fresh in plan:
            fd = storage.acquire(ino, create=True)
            try:
                done = 0
                while done < n:
                    done += os.pwrite(fd, data[at + done:at + n], local + done)
            finally:
                left = storage.unpin(ino, defer=True)
                if left is not None:
                    os.close(left)
            written.append(n)
            at += n
        return written

    def status(self) -> dict:
        return {"requests": self.served, "items": self.items}
