"""Pipelined writes of one stream: ``fs.open(path, "wb", pipeline=True)`` (issue 30).

A plain ``pwrite`` is one round trip: its request goes to every daemon it touches and the
call returns after the last reply, so the daemons idle while the client prepares the next
request and the client idles while they write. A handle opened with ``pipeline=True`` keeps
connections of its own and sends each write without waiting for its replies
(``_native.stripe_send``): ``pwrite`` returns once the bytes have left (the caller's buffer is
free again), and the replies each connection owes are read while the next write is sent, in
the same poll loop -- one write in flight per daemon, as a TCP stream (iperf3) has.

What a caller sees (``docs/api.md``, "Pipelined writes"):

- **Errors come one call late.** A write the daemons refuse is reported by the handle's next
  call -- the write that read its replies, a read, ``size``, ``fsync`` or ``close`` -- as the
  daemons' ``OSError``, naming the failed write's offset and length; once.
- **Its own writes first.** Reads, sizes, ``fsync`` and ``close`` of the file (any handle of
  the same ``FileSystem``), a plain write of it, and every manager request of that
  ``FileSystem`` first read the replies owed (:meth:`WritePipe.settle`). Another client sees
  a write once the writer's next call returned, as with any write-behind.
- **A broken connection.** A write whose connection broke while it was sent is sent again
  the plain way (writes are idempotent) if every reply owed before it arrived; if an owed
  reply was lost, whether that earlier write reached its daemon is unknown: ``EIO``.
"""

from __future__ import annotations

import errno
import os
import socket
import threading
from typing import Any

from pvfs import _native
from pvfs.client.datapath import DataPath
from pvfs.layout.describe import Description
from pvfs.layout.stripe import Stripe
from pvfs.protocol.errors import make_oserror
from pvfs.protocol.framing import FrameError, decode_header

__all__ = ["Pipes", "WritePipe"]


class WritePipe:
    """The pipelined writes of one handle: its connections, the replies they owe, the
    first error not yet reported. Thread-safe: the handle's writes go out one at a time."""

    def __init__(self, data: DataPath, ino: int, stripe: Stripe, path: str,
                 fresh: bool = False) -> None:
        self.data = data
        self.fresh = fresh  # made from the manager's pool for this handle (``DataPath.write``)
        self.ino = ino
        self.stripe = stripe
        self.path = path
        self.iods = data.iods_of(stripe)
        n = stripe.pcount
        self._socks: list[socket.socket | None] = [None] * n
        self._owed: list[tuple[int, int] | None] = [None] * n  # the write each reply is for
        self._error: OSError | None = None
        self._lock = threading.Lock()

    @property
    def owing(self) -> bool:
        return any(w is not None for w in self._owed)

    def write(self, desc: Description, buf) -> int:
        """Send a write of ``buf`` (``len = desc.total()``) to ``desc``'s regions; the replies
        owed from the previous write are read meanwhile. Returns ``len(buf)``; raises the
        first error not reported yet (this write's own, if it went the plain way)."""
        with self._lock:
            self.report()
            plan = self.data.plan("write", self.ino, self.stripe, desc, fresh=self.fresh)
            if plan is None:
                return 0
            body, ranks, keys, packed = plan
            what = _span(desc)
            self._take(ranks, keys)
            sent, replies = _native.stripe_send(
                [s.fileno() if s is not None else -1 for s in self._socks], body, buf, packed,
                self.stripe.ssize, [w is not None for w in self._owed],
                self.data.config.request_timeout)
            lost = self._replies(replies)
            failed = [r for r in ranks if sent[r][0] != 0]
            for r in ranks:
                if sent[r][0] == 0:
                    self._owed[r] = what
            if failed:
                self._broken(failed, lost, desc, buf, what)
            self.report()
            return len(buf)

    def settle(self) -> None:
        """Read every reply owed; an error in them is kept for the handle's next call."""
        with self._lock:
            self._read_owed()

    def report(self) -> None:
        """Raise the first error not reported yet (and forget it)."""
        exc, self._error = self._error, None
        if exc is not None:
            raise exc

    def close(self) -> None:
        """Settle, give the connections back to the pool, raise an error not reported."""
        self.settle()
        with self._lock:
            healthy = [(self.iods[r], s) for r, s in enumerate(self._socks) if s is not None]
            self._socks = [None] * len(self._socks)
            self.data.pool.give_all(healthy)
            self.report()

    # ------------------------------------------------------------------ inside the lock
    def _take(self, ranks: list[int], keys: list[int]) -> None:
        """A connection of this pipe for each of ``ranks`` (from the pool when missing)."""
        missing = [(r, k) for r, k in zip(ranks, keys) if self._socks[r] is None]
        if missing:
            socks = self.data.pool.take_all([k for _, k in missing])
            for (r, _), sock in zip(missing, socks):
                self._socks[r] = sock

    def _read_owed(self) -> bool:
        """Read every reply owed (no write sent); True if one was lost."""
        if not self.owing:
            return False
        _, replies = _native.stripe_send(
            [s.fileno() if s is not None else -1 for s in self._socks], b"\0", b"", b"",
            self.stripe.ssize, [w is not None for w in self._owed],
            self.data.config.request_timeout)
        return self._replies(replies)

    def _replies(self, replies: list) -> bool:
        """Take the owed replies read; True if one was lost (its connection broke)."""
        lost = False
        for r, got in enumerate(replies):
            if got is None:
                continue
            off, length = self._owed[r]  # type: ignore[misc]
            self._owed[r] = None
            err, raw = got
            reply: dict = {}
            if not err:
                try:
                    reply = decode_header(raw)
                except FrameError:
                    err = errno.EPROTO
            if err:
                lost = True
                self._drop(r)
                self._fail(errno.EIO, f"{self.data.pool.name(self.iods[r])}: the reply to the "
                           f"write of {length} bytes at {off} was lost ({os.strerror(err)}); "
                           "whether it was written is unknown")
            elif reply.get("err"):
                msg = reply.get("msg")
                self._fail(reply["err"], f"the write of {length} bytes at {off} failed: "
                           f"{msg if isinstance(msg, str) else os.strerror(reply['err'])}")
        return lost

    def _broken(self, failed: list[int], lost: bool, desc: Description, buf,
                what: tuple[int, int]) -> None:
        """Some of this write's sends failed: read what the others owe, and send the write
        again the plain way -- unless an earlier write's fate is unknown (``lost``)."""
        for r in failed:
            self._drop(r)
        lost = self._read_owed() or lost
        if lost:
            self._fail(errno.EIO, f"the write of {what[1]} bytes at {what[0]} was cut off "
                       "after an earlier write's reply was lost")
            return
        try:
            self.data.write(self.ino, self.stripe, desc, buf, fresh=self.fresh)
        except OSError as exc:
            self._fail(exc.errno or errno.EIO, str(exc))

    def _drop(self, rank: int) -> None:
        sock = self._socks[rank]
        if sock is not None:
            sock.close()
        self._socks[rank] = None
        self._owed[rank] = None

    def _fail(self, code: int, message: str) -> None:
        if self._error is None:
            self._error = make_oserror(code, message, self.path)


def _span(desc: Description) -> tuple[int, int]:
    """(first offset, total length) of a write, for its error message."""
    regions = desc.expand()
    return (regions[0][0] if regions else 0), desc.total()


class Pipes:
    """The open pipes of one ``FileSystem``, per file: what ``settle`` reads first -- each
    handle's pipelined writes (:class:`WritePipe`) and read-ahead
    (:class:`pvfs.client.readahead.ReadAhead`, whose settle drops it)."""

    def __init__(self) -> None:
        self._by_ino: dict[int, list[Any]] = {}
        self._lock = threading.Lock()

    def __bool__(self) -> bool:
        return bool(self._by_ino)

    def add(self, pipe: Any) -> None:
        with self._lock:
            self._by_ino.setdefault(pipe.ino, []).append(pipe)

    def remove(self, pipe: Any) -> None:
        with self._lock:
            pipes = self._by_ino.get(pipe.ino, [])
            if pipe in pipes:
                pipes.remove(pipe)
            if not pipes:
                self._by_ino.pop(pipe.ino, None)

    def settle(self, ino: int | None = None, keep: Any = None) -> None:
        """Read the replies the pipes of ``ino`` (None: of every file) owe, but ``keep``'s."""
        with self._lock:
            pipes = [p for i, ps in self._by_ino.items() if ino is None or i == ino
                     for p in ps if p is not keep]
        for pipe in pipes:
            if pipe.owing:
                pipe.settle()
