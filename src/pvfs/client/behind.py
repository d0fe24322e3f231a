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

import errno
import logging
import threading
from collections.abc import Callable

from pvfs.client.datapath import DataPath, pack_regions
from pvfs.layout.describe import Regions
from pvfs.layout.stripe import Stripe

log = logging.getLogger("pvfs.client")

__all__ = ["SMALL", "WritesBehind"]

SMALL = 64 * 1024        # a write this small (and within one stripe unit) may wait
ITEMS = 1024             # writes per request (the daemon's bound)
REQUEST = 4 << 20        # bytes per request (the daemon takes at most 8 MiB)
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
        self._queues: dict[int, list[tuple[dict, bytes]]] = {}
        self._queued: dict[int, int] = {}   # ino -> writes queued
        self.nbytes = 0
        self._send_lock = threading.Lock()  # one round at a time: a file's writes in order
        self.counters = dict.fromkeys(("queued", "sent", "requests", "refused"), 0)

    def __bool__(self) -> bool:
        return bool(self._queued)

    def place(self, stripe: Stripe, off: int, n: int) -> int | None:
        """The I/O daemon holding bytes ``[off, off + n)`` if they lie in one stripe unit
        and are few enough to wait, else None."""
        if not self.enabled or not 0 < n <= SMALL:
            return None
        unit, within = divmod(off, stripe.ssize)
        if within + n > stripe.ssize:
            return None
        pcount = stripe.pcount if stripe.pcount != -1 else self.niods
        return stripe.iod_of_rank(unit % pcount, self.niods)

    def queue(self, iod: int, ino: int, stripe: Stripe, off: int, data: bytes) -> None:
        """Queue one write (the caller holds the creates' lock and checked ``place``)."""
        item = {"ino": ino, "stripe": stripe.to_wire(), "off": off, "len": len(data),
                "fresh": True}
        self._queues.setdefault(iod, []).append((item, data))
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
        at once, in requests of at most :data:`ITEMS` and :data:`REQUEST` bytes; return
        when all are answered. One
        flush at a time, so a file's writes reach its daemon in the order they were made."""
        with self._send_lock:
            with lock:
                taken, self._queues, self.nbytes = self._queues, {}, 0
            rounds = [(iod, chunk) for iod, writes in taken.items()
                      for chunk in _requests(writes)]
            refused = self._send_all(rounds)
            self._forget(rounds, refused, lock)

    def _forget(self, rounds: list, refused: dict[int, int], lock: threading.Lock) -> None:
        with lock:
            for _iod, writes in rounds:
                for item, _data in writes:
                    ino = item["ino"]
                    left = self._queued.get(ino, 1) - 1
                    if left:
                        self._queued[ino] = left
                    else:
                        self._queued.pop(ino, None)
            for ino, err in refused.items():
                self.failed.setdefault(ino, err)
            self.counters["sent"] += sum(len(w) for _i, w in rounds)
            self.counters["refused"] += len(refused)

    def _send_all(self, rounds: list) -> dict[int, int]:
        """ino -> errno of the writes refused."""
        if not rounds:
            return {}
        try:
            self.data.run([_request(iod, writes) for iod, writes in rounds])
            self.counters["requests"] += len(rounds)
            return {}
        except OSError:
            pass  # which one? each again, alone (a write of the same bytes is idempotent)
        refused: dict[int, int] = {}
        for iod, writes in rounds:
            try:
                self.data.run([_request(iod, writes)])
                self.counters["requests"] += 1
            except OSError as exc:
                if exc.errno == errno.EOPNOTSUPP:
                    self.enabled = False  # (an emulated disk: its timing is per write)
                    refused.update(self._one_by_one(writes))
                    continue
                log.error("writes of %d files made ahead were refused by I/O daemon %d: %s",
                          len(writes), iod, exc)
                refused.update((item["ino"], exc.errno or errno.EIO) for item, _ in writes)
        return refused

    def _one_by_one(self, writes: list[tuple[dict, bytes]]) -> dict[int, int]:
        refused: dict[int, int] = {}
        for item, data in writes:
            try:
                self.data.write(item["ino"], Stripe(*item["stripe"]),
                                Regions(((item["off"], item["len"]),)), data, fresh=True)
            except OSError as exc:
                refused[item["ino"]] = exc.errno or errno.EIO
        return refused


def _requests(writes: list[tuple[dict, bytes]]) -> list[list[tuple[dict, bytes]]]:
    """One daemon's writes cut into requests of at most ITEMS writes and REQUEST bytes."""
    out: list[list[tuple[dict, bytes]]] = [[]]
    size = 0
    for w in writes:
        if out[-1] and (len(out[-1]) == ITEMS or size + len(w[1]) > REQUEST):
            out.append([])
            size = 0
        out[-1].append(w)
        size += len(w[1])
    return out if out[0] else []


def _request(iod: int, writes: list[tuple[dict, bytes]]) -> tuple:
    bulk = b"".join(data for _item, data in writes)
    return (iod, {"op": "writes", "items": [item for item, _data in writes]}, bulk,
            pack_regions([(0, len(bulk))]), 1)
