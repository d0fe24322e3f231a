"""The client side of ``writes``: small writes of many files, one request per I/O daemon.

``daemons/iod/smallwrites.py`` serves it. Two clients send it: the native API's writes of
files created ahead (``behind.py``), and the mount's write-back of many small files at once
(``fuse/cachewire.py``: the flusher, a recall, the unmount). Each write is one stripe unit's
piece of one file, so it goes to one daemon whole; the items (file, layout, offset, length,
``fresh``) travel in the header and their bytes one after the other in the bulk.

A daemon over an emulated disk refuses the request (``EOPNOTSUPP``: its timing is per
job); the writes are then sent one by one and the caller stops gathering them.
"""

from __future__ import annotations

import errno
import logging
from dataclasses import dataclass, field

from pvfs.client.datapath import DataPath, pack_regions
from pvfs.layout.describe import Regions
from pvfs.layout.stripe import Stripe

log = logging.getLogger("pvfs.client")

__all__ = ["ITEMS", "REQUEST", "SMALL", "Sent", "Write", "by_daemon", "item", "send",
           "unit_daemon"]

SMALL = 64 * 1024        # a write this small (and within one stripe unit) may be gathered
ITEMS = 1024             # writes per request (the daemon's bound)
REQUEST = 4 << 20        # bytes per request (the daemon takes at most 8 MiB)

Write = tuple[dict, bytes]   # one item and its bytes


@dataclass
class Sent:
    """What sending a round of writes did."""

    refused: dict[int, int] = field(default_factory=dict)  # ino -> errno
    requests: int = 0
    unsupported: bool = False   # a daemon cannot take them (the rest went one by one)


def unit_daemon(stripe: Stripe, off: int, n: int, niods: int) -> int | None:
    """The I/O daemon holding bytes ``[off, off + n)`` of a file if they lie in one stripe
    unit and are at most :data:`SMALL`, else None."""
    if not 0 < n <= SMALL:
        return None
    unit, within = divmod(off, stripe.ssize)
    if within + n > stripe.ssize:
        return None
    pcount = stripe.pcount if stripe.pcount != -1 else niods
    return stripe.iod_of_rank(unit % pcount, niods)


def item(ino: int, stripe: Stripe, off: int, data: bytes, fresh: bool) -> Write:
    """One write. ``fresh``: the file was created ahead with ``writing`` (the manager does
    not count it empty, daemons/iod/sizewatch.py)."""
    return ({"ino": ino, "stripe": stripe.to_wire(), "off": off, "len": len(data),
             "fresh": fresh}, data)


def by_daemon(writes: dict[int, list[Write]]) -> list[tuple[int, list[Write]]]:
    """Each daemon's writes cut into requests of at most :data:`ITEMS` writes and
    :data:`REQUEST` bytes: ``(daemon, writes)`` rounds, a file's writes in their order."""
    rounds = []
    for iod, queued in writes.items():
        chunk: list[Write] = []
        size = 0
        for w in queued:
            if chunk and (len(chunk) == ITEMS or size + len(w[1]) > REQUEST):
                rounds.append((iod, chunk))
                chunk, size = [], 0
            chunk.append(w)
            size += len(w[1])
        if chunk:
            rounds.append((iod, chunk))
    return rounds


def send(data: DataPath, rounds: list[tuple[int, list[Write]]]) -> Sent:
    """Send every round at once (blocking: call it from a thread of the caller's own).
    A round that fails is sent again alone (a write of the same bytes is idempotent), so
    only the files of the round that failed are refused."""
    out = Sent()
    if not rounds:
        return out
    try:
        data.run([_request(iod, writes) for iod, writes in rounds])
        out.requests = len(rounds)
        return out
    except OSError:
        pass  # which one? each again, alone
    for iod, writes in rounds:
        try:
            data.run([_request(iod, writes)])
            out.requests += 1
        except OSError as exc:
            if exc.errno == errno.EOPNOTSUPP:
                out.unsupported = True
                out.refused.update(_one_by_one(data, writes))
                continue
            log.error("writes of %d files were refused by I/O daemon %d: %s",
                      len(writes), iod, exc)
            out.refused.update((it["ino"], exc.errno or errno.EIO) for it, _ in writes)
    return out


def _one_by_one(data: DataPath, writes: list[Write]) -> dict[int, int]:
    refused: dict[int, int] = {}
    for it, chunk in writes:
        try:
            data.write(it["ino"], Stripe(*it["stripe"]), Regions(((it["off"], it["len"]),)),
                       chunk, fresh=it["fresh"])
        except OSError as exc:
            refused[it["ino"]] = exc.errno or errno.EIO
    return refused


def _request(iod: int, writes: list[Write]) -> tuple:
    bulk = b"".join(chunk for _it, chunk in writes)
    return (iod, {"op": "writes", "items": [it for it, _chunk in writes]}, bulk,
            pack_regions([(0, len(bulk))]), 1)
