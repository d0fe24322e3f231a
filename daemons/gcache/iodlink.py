"""Small fetches from the I/O daemons in the daemon's trio thread, without a worker thread.

The native transfer (``transfer.py``) blocks, so it runs in a worker thread: the trio thread
hands it the job, the worker wakes, and when it is done it wakes the trio thread again. On a
miss of a block or two those two wake-ups cost about as much as the I/O daemons' answer
(s34, two cores: 0.37 ms of a 0.89 ms fetch, the transfer itself 0.52). A fetch of at most
:data:`SMALL_BYTES` is therefore sent from the trio thread over trio connections of its own
(one pool per I/O daemon, :class:`~pvfs.gcache.channel.WholeReplyChannel`: each reply
taken in one receive): the same requests
(``transfer._calls``), each daemon's stream put at the same places of the buffer, the same
end-of-file check. Larger fetches stay on the native transfer (no Python per piece, no copy).
"""

from __future__ import annotations

import contextlib

import trio

from pvfs.config import Config
from pvfs.gcache.channel import WholeReplyChannel
from pvfs.layout.stripe import Stripe, logical_size
from pvfs.protocol import auth
from pvfs.protocol.errors import ProtocolError

from .transfer import Extent, calls_for

__all__ = ["SMALL_BYTES", "IodLinks", "scatter"]

#: Fetches of at most this many bytes go through :class:`IodLinks` (16 blocks of 4 KiB): past
#: it the copy out of each reply and the per-piece Python outweigh a thread's two wake-ups.
SMALL_BYTES = 64 << 10


def scatter(data: bytes, buf, segs: bytes) -> None:
    """Put a daemon's reply stream ``data`` where ``segs`` says (``(buffer offset, length)``
    int64 pairs, in stream order), as the native transfer does: a reply without bytes leaves
    ``buf`` as it was, one of another length than the pieces' is a protocol error."""
    if not data:
        return
    with memoryview(segs) as raw, raw.cast("q") as pairs:
        if len(data) != sum(pairs[1::2]):
            raise ProtocolError(f"read reply of {len(data)} bytes for {sum(pairs[1::2])}")
        dst, src, pos = memoryview(buf), memoryview(data), 0
        for k in range(0, len(pairs), 2):
            off, n = pairs[k], pairs[k + 1]
            dst[off:off + n] = src[pos:pos + n]
            pos += n


class IodLinks:
    """Async reads of the I/O daemons for small fetches (see the module).

    Args:
        config: the file system (its I/O daemons, timeouts and key).
        channels: the connections, one channel per I/O daemon (default: made from
            ``config``, as the daemon's :class:`DataPath` connects: role ``client``).
    """

    def __init__(self, config: Config, channels: list | None = None) -> None:
        self.niods = config.niods
        if channels is None:
            key = auth.key_for(config)
            channels = [WholeReplyChannel(e.host, e.port, config.connect_timeout,
                                          config.request_timeout, max_idle=16,
                                          name=f"iod{i} ({e.address})", manager=False,
                                          key=key, role="client")
                        for i, e in enumerate(config.iods)]
        self.channels = channels

    async def read_extents(self, ino: int, stripe: Stripe,
                           groups: list[tuple[list[Extent], object]]) -> int | None:
        """``transfer.read_extents`` for each ``(extents, buf)`` of ``groups``, all requests
        at once: the file's size if some daemon's stripe file ended before a request did
        (the largest such), else None."""
        plans = [(calls_for(self.niods, "read", ino, stripe, ext, buf, 0))
                 for ext, buf in groups if ext]
        replies = await self._run([c for calls, _, _ in plans for c in calls])
        eof: int | None = None
        i = 0
        for calls, ranks, reach in plans:
            sizes = {rank: r["local_size"] for rank, r in zip(ranks, replies[i:i + len(calls)])}
            i += len(calls)
            if any(sizes[r] < reach[r] for r in ranks):
                size = await self.size(ino, stripe, sizes)
                eof = size if eof is None else max(eof, size)
        return eof

    async def size(self, ino: int, stripe: Stripe, known: dict[int, int]) -> int:
        """The file's size from its stripe files' (``DataPath.size``): ``known`` by rank,
        the others asked for."""
        known = dict(known)
        missing = [r for r in range(stripe.pcount) if r not in known]
        replies = await self._run([(stripe.iod_of_rank(r, self.niods), {"op": "size", "ino": ino},
                                    None, b"", 0) for r in missing])
        for r, reply in zip(missing, replies):
            known[r] = reply["local_size"]
        return logical_size(stripe, [known[r] for r in range(stripe.pcount)])

    async def _run(self, calls: list) -> list[dict]:
        """Each ``(iod, header, buf, segs, direction)`` request's reply (its bytes put in
        ``buf``), all at once; the first failure raised (the others' connections are closed
        by their cancelled calls, so none is left mid-request)."""
        replies: list[dict] = [{}] * len(calls)

        async def one(i: int, iod: int, header: dict, buf, segs: bytes) -> None:
            reply, data = await self.channels[iod].call_bulk(header)
            if buf is not None:
                scatter(data, buf, segs)
            replies[i] = reply

        if len(calls) == 1:  # the usual miss: no nursery to set up
            await one(0, *calls[0][:4])
            return replies
        async with _first_error(), trio.open_nursery() as nursery:
            for i, (iod, header, buf, segs, _) in enumerate(calls):
                nursery.start_soon(one, i, iod, header, buf, segs)
        return replies

    def close(self) -> None:
        for ch in self.channels:
            ch.close()


@contextlib.asynccontextmanager
async def _first_error():
    """The fetch's caller expects one ``OSError`` (as ``DataPath.run`` raises), not a group."""
    try:
        yield
    except BaseExceptionGroup as group:
        first: BaseException = group
        while isinstance(first, BaseExceptionGroup):
            first = first.exceptions[0]
        raise first from None
