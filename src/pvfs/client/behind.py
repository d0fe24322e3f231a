"""Small writes of files created ahead, sent behind the program (``connect(ahead=True)``).

A file created ahead (``ahead.py``) is new, and nobody else can reach it while this client
holds its directory's lease: another client's lookup, listing or change there recalls the
lease first, and the recall is answered only after what is queued here has been sent. So a
small write of such a file need not wait for its I/O daemon either: it is copied into the
queue of the daemon holding its bytes and answered at once, and the queued writes go out
with the creates (every :data:`~pvfs.client.ahead.DELAY`), one ``writes`` request per
daemon (``daemons/iod/smallwrites.py``) instead of a request per file.

What keeps it correct, beside the recall:

- **Only while the directory is delegated**, checked under the creates' lock, which the
  recall takes to forget the directory before it sends the queue: a write either is queued
  before the recall sends, or finds the directory gone and is sent at once.
- **This client sees its own writes**: a read, a size, an ``fsync`` or a write that cannot
  wait (large, or across a stripe unit) of a file with queued writes sends the queue first
  (:meth:`WritesBehind.settle`), and so does every manager request of the client.
- **Errors are not lost**: a write the daemon refuses fails its file as a refused create
  does -- ``EIO`` from its later calls and ``fsync``, counted by ``FileSystem.sync``.

A write queued here is lost with the process (``kill -9``), as an unflushed page of a
mount's write-back cache is; ``fsync`` sends it first.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from pvfs.client.datapath import DataPath
from pvfs.client.smallwrites import SMALL, Write, by_daemon, item, send, unit_daemon
from pvfs.layout.stripe import Stripe

__all__ = ["SMALL", "WritesBehind"]

WAKE = 1 << 20           # queued bytes that wake the sender before its time
MOST = 8 << 20           # queued bytes past which the writer sends them itself


class WritesBehind:
    """The queued writes of one client, by I/O daemon."""

    def __init__(self, data: DataPath, niods: int, failed: dict[int, int],
                 wake: Callable[[], None]) -> None:
        self.data, self.niods = data, niods
        self.failed = failed            # ino -> errno, shared with the creates' refusals
        self.wake = wake
        self.enabled = True             # False once a daemon cannot take them (emulated disk)
        self._queues: dict[int, list[Write]] = {}
        self._queued: dict[int, int] = {}   # ino -> writes queued
        self.nbytes = 0
        self._send_lock = threading.Lock()  # one round at a time: a file's writes in order
        self.counters = dict.fromkeys(("queued", "sent", "requests", "refused"), 0)

    def __bool__(self) -> bool:
        return bool(self._queued)

    def place(self, stripe: Stripe, off: int, n: int) -> int | None:
        """The I/O daemon holding bytes ``[off, off + n)`` if they lie in one stripe unit
        and are few enough to wait, else None."""
        return unit_daemon(stripe, off, n, self.niods) if self.enabled else None

    def queue(self, iod: int, ino: int, stripe: Stripe, off: int, data: bytes) -> None:
        """Queue one write (the caller holds the creates' lock and checked ``place``)."""
        self._queues.setdefault(iod, []).append(item(ino, stripe, off, data, fresh=True))
        self._queued[ino] = self._queued.get(ino, 0) + 1
        self.nbytes += len(data)
        self.counters["queued"] += 1
        if self.nbytes >= WAKE:
            self.wake()

    def holds(self, ino: int) -> bool:
        return ino in self._queued

    # ------------------------------------------------------------------ sending
    def flush(self, lock: threading.Lock) -> None:
        """Send everything queued (taken under the creates' ``lock``): every daemon's writes
        at once, in requests of a bounded size (``smallwrites.by_daemon``); return when
        all are answered. One flush at a time, so a file's writes reach its daemon in the
        order they were made."""
        with self._send_lock:
            with lock:
                taken, self._queues, self.nbytes = self._queues, {}, 0
            rounds = by_daemon(taken)
            sent = send(self.data, rounds)
            self.counters["requests"] += sent.requests
            if sent.unsupported:
                self.enabled = False  # (an emulated disk: its timing is per write)
            self._forget(rounds, sent.refused, lock)

    def _forget(self, rounds: list, refused: dict[int, int], lock: threading.Lock) -> None:
        with lock:
            for _iod, writes in rounds:
                for it, _data in writes:
                    ino = it["ino"]
                    left = self._queued.get(ino, 1) - 1
                    if left:
                        self._queued[ino] = left
                    else:
                        self._queued.pop(ino, None)
            for ino, err in refused.items():
                self.failed.setdefault(ino, err)
            self.counters["sent"] += sum(len(w) for _i, w in rounds)
            self.counters["refused"] += len(refused)
