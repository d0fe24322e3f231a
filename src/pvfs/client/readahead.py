"""Pipelined reads of one stream: the read-ahead of a handle opened with ``pipeline=True``
(issue 30).

A plain ``preadinto`` is one round trip, and a program reading a file in order waits for
every one. Once a handle has read two pieces back to back, :class:`ReadAhead` sends the
request for the next piece of the same length (up to :data:`MAX_AHEAD`) as soon as a read
returns, on connections of
its own; the daemons serve it while the program works on what it got, and their replies wait
in the sockets. When the program asks for exactly that piece, the replies are received
straight into its buffer (``_native.stripe_transfer(..., sent=True)``: no extra copy);
any other read first drains them (into a scratch buffer, dropped) and goes the plain way.

What a caller sees (``README.md``, the native API):

- the bytes a read returns were read at most one request earlier, when the read before it
  returned;
- every write, truncation or manager call of the same ``FileSystem`` drops a read-ahead of
  the file first (``Pipes.settle``), so this client always reads its own writes;
- a read-ahead that fails for any reason is dropped and the read goes the plain way (reads
  are idempotent): no error comes from it.
"""

from __future__ import annotations

import socket
import threading

from pvfs import _native
from pvfs.client.datapath import DataPath, ReadResult
from pvfs.layout.describe import Regions
from pvfs.layout.stripe import Stripe
from pvfs.protocol.framing import MAGIC, PREFIX, FrameError, decode_header

__all__ = ["MAX_AHEAD", "ReadAhead"]

# Pieces read ahead at most this long. Measured (docs/benchmarks.md, forty-fifth session):
# 1 MiB reads even with plain ones, 16 MiB reads 0.85x -- each daemon's 4 MiB share of a
# read ahead outgrows the socket's buffer and waits, window by window, for the read that
# takes it.
MAX_AHEAD = 1 << 20


class ReadAhead:
    """A handle's read-ahead: at most one read in flight, one connection per share rank."""

    def __init__(self, data: DataPath, ino: int, stripe: Stripe) -> None:
        self.data = data
        self.ino = ino
        self.stripe = stripe
        self.iods = data.iods_of(stripe)
        self._socks: list[socket.socket | None] = [None] * stripe.pcount
        # the read whose replies the connections owe: (offset, length, ranks, body, regions)
        self._owed: tuple[int, int, list[int], bytes, bytes] | None = None
        self._next = -1  # where the last read ended: a read starting there is in order
        self._lock = threading.Lock()
        self.hits = self.dropped = 0  # read-aheads used; drained unused or failed

    @property
    def owing(self) -> bool:
        return self._owed is not None

    def read(self, offset: int, buf) -> ReadResult:
        """Fill ``buf`` with the bytes at ``offset``: from the read-ahead when it asked for
        exactly these, else the plain way; then ask for the next piece if reading in order."""
        with self._lock:
            n = len(buf)
            result = None
            if self._owed is not None and self._owed[:2] == (offset, n):
                result = self._take(buf)
                if result is None:
                    self.dropped += 1
                else:
                    self.hits += 1
            else:
                self._drop()
            if result is None:
                result = self.data.read(self.ino, self.stripe, Regions(((offset, n),)), buf)
                in_order = offset == self._next
            else:
                in_order = True
            self._next = offset + n
            if in_order and n <= MAX_AHEAD and not result.needs_eof_check:
                self._ask(offset + n, n)
            return result

    def settle(self) -> None:
        """Drop the read-ahead (a write of the file, or a manager call, comes next)."""
        with self._lock:
            self._drop()

    def close(self) -> None:
        with self._lock:
            self._drop()
            healthy = [(self.iods[r], s) for r, s in enumerate(self._socks) if s is not None]
            self._socks = [None] * len(self._socks)
            self.data.pool.give_all(healthy)

    # ------------------------------------------------------------------ inside the lock
    def _ask(self, offset: int, n: int) -> None:
        """Send the read of ``[offset, offset + n)``; its replies are owed. Nothing on failure."""
        plan = self.data.plan("read", self.ino, self.stripe, Regions(((offset, n),)))
        if plan is None:
            return
        body, ranks, keys, packed = plan
        head = PREFIX.pack(MAGIC, len(body), 0) + body
        try:
            missing = [(r, k) for r, k in zip(ranks, keys) if self._socks[r] is None]
            if missing:
                for (r, _), sock in zip(missing, self.data.pool.take_all([k for _, k in missing])):
                    self._socks[r] = sock
            for r in ranks:
                self._socks[r].sendall(head)  # type: ignore[union-attr]
        except OSError:
            self._close_all()
            return
        self._owed = (offset, n, ranks, body, packed)

    def _take(self, buf) -> ReadResult | None:
        """The owed replies received into ``buf``; None (connections closed) on any error."""
        _, _, ranks, body, packed = self._owed  # type: ignore[misc]
        self._owed = None
        fds = [s.fileno() if s is not None else -1 for s in self._socks]
        results = _native.stripe_transfer(fds, body, buf, packed, self.stripe.ssize, 0,
                                          self.data.config.request_timeout, sent=True)
        try:
            replies = [(r, decode_header(results[r][1]), results[r][2]) for r in ranks
                       if not results[r][0]]
        except FrameError:
            replies = []
        if len(replies) != len(ranks) or any("err" in reply for _, reply, _ in replies):
            self._close_all()
            return None
        sizes = {r: reply["local_size"] for r, reply, _ in replies}
        return ReadResult(sizes, any(sizes[r] < reach for r, _, reach in replies))

    def _drop(self) -> None:
        """Receive and drop the owed replies (a scratch buffer), if any."""
        if self._owed is None:
            return
        self.dropped += 1
        self._take(bytearray(self._owed[1]))

    def _close_all(self) -> None:
        for r, sock in enumerate(self._socks):
            if sock is not None:
                sock.close()
            self._socks[r] = None
        self._owed = None
