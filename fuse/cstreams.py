"""Stream reads the C front end's workers answer from the I/O daemons (issue 30, step 5).

The block cache marks a file whose stream-sized reads would be the servers' bytes alone
(``pvfs.cache._served.ServedFiles.mark_stream``); this marker hands the front end what it
needs to read such a file itself -- the stripe, the daemon of each share rank, a read's
header up to its I/O description (``client/datapath.py``, ``stream_read_head``) -- and keeps
it supplied with connections: opened and authenticated here, as the client's own
(``SocketPool``), then detached and given to the workers (``csrc/front/streams.c``), which
close the ones whose exchange failed. A read a worker cannot answer (no connection free, a
failed exchange, an error reply) comes to Python as before, which has the retry rules.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

import trio

from pvfs.client.datapath import stream_read_head

if TYPE_CHECKING:
    from pvfs.client.aclient import AsyncClient

    from .handles import HandleTable

log = logging.getLogger("pvfs.fuse")

__all__ = ["CONNS_PER_DAEMON", "StreamReads"]

# Idle connections the workers keep to each daemon: the reads in flight at once. The loop
# runs few workers (cfront.WORKER_THREADS) and the kernel keeps about one read-ahead request
# of a sequential reader out (docs/benchmarks.md).
CONNS_PER_DAEMON = 4


class StreamReads:
    """The front end's stream reads: its setup, the files marked, its connections.

    Args:
        session: the C front end's Session.
        client: the mount's client (its data path opens the connections).
        table: the mount's handles (the files' stripes).
        min_read: reads this large at least are answered from the daemons (the cache's
            ``StreamPolicy.min_bytes``).
        timeout: seconds one read's exchange may take (the mount's ``timeout``).
    """

    def __init__(self, session: Any, client: AsyncClient, table: HandleTable, min_read: int,
                 timeout: float) -> None:
        self.session = session
        self.client = client
        self.table = table
        self.niods = len(client.config.iods)
        self.nursery: trio.Nursery | None = None  # set when the mount serves
        self._filling = False
        session.stream_setup(self.niods, min_read, timeout)

    def mark(self, ino: int, size: int) -> bool:
        """Mark ``ino`` (``size`` bytes long): False if its stripe is not known here or the
        front end refused (a change of it in flight)."""
        info = self.table.inodes.get(ino)
        stripe = info.stripe if info is not None else None
        if stripe is None:
            return False
        iods = [stripe.iod_of_rank(r, self.niods) for r in range(stripe.pcount)]
        head = stream_read_head(ino, stripe)
        self.refill()
        return bool(self.session.stream_mark(ino, size, stripe.ssize, iods, head))

    def refill(self) -> None:
        """Open connections for the daemons short of ``CONNS_PER_DAEMON``, in the background
        (a connect may wait for a dead daemon: never on the mount's thread)."""
        if self._filling or self.nursery is None:
            return
        short = [iod for iod in range(self.niods)
                 if self.session.stream_conns(iod) < CONNS_PER_DAEMON]
        if short:
            self._filling = True
            self.nursery.start_soon(self._fill, short)

    async def _fill(self, iods: list[int]) -> None:
        try:
            for iod in iods:
                for _ in range(CONNS_PER_DAEMON - self.session.stream_conns(iod)):
                    try:
                        fd = await trio.to_thread.run_sync(self.client.data.give_away, iod)
                    except OSError as exc:
                        log.debug("stream reads: no connection to iod%d: %s", iod, exc)
                        break  # its reads go to Python (which reports the daemon's state)
                    try:
                        self.session.stream_give(iod, fd)
                    except BaseException:
                        os.close(fd)
                        raise
        finally:
            self._filling = False
