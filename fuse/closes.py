"""The manager's handle counts, told of this mount's closes in batches.

The manager counts the handles open on each file so that a file whose last name goes while
it is open keeps its data until its last close (``store.release``). Nothing else waits for a
close: the kernel sends ``release`` after the program's ``close`` returned, the data were
written back at ``flush``, and the count only decides when an unlinked file's stripe files
go. So a close need not be a round trip of its own: the handles closed within
:data:`DELAY` go to the manager as one ``closes`` request (the issue-29 profile: a create
was a lookup, a create and a close, three requests to the manager, and the close one of
them). An unlinked file's space comes back that much later.

A batch that cannot be sent (the manager is down) is tried again until the mount's
``timeout`` has passed since it was first tried, then dropped with a warning: its files keep
their data until the manager restarts (its counts start afresh), as a close lost in flight
always did. At unmount what is queued is sent first.
"""

from __future__ import annotations

import logging

import trio

from pvfs.client.aclient import AsyncClient

log = logging.getLogger("pvfs.fuse")

__all__ = ["DeferredCloses"]

DELAY = 0.005  # seconds a close waits for others to share its request
MOST = 4096  # handles per request (the schema's bound)


class DeferredCloses:
    """Queue of closed handles' inodes; :meth:`run` sends them (a task of the mount)."""

    def __init__(self, client: AsyncClient, timeout: float) -> None:
        self.client, self.timeout = client, timeout
        self._queue: list[int] = []
        self._work = trio.Event()
        self.sent = 0  # handles told to the manager (status)
        self.dropped = 0  # handles given up on after ``timeout``

    @property
    def pending(self) -> int:
        return len(self._queue)

    def add(self, ino: int) -> None:
        """One handle of ``ino`` closed here."""
        self._queue.append(ino)
        self._work.set()

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            await self._work.wait()
            self._work = trio.Event()
            if len(self._queue) < MOST:
                await trio.sleep(DELAY)
            await self.send()

    async def send(self) -> None:
        """Send everything queued now (also at unmount), in requests of at most MOST."""
        while self._queue:
            batch, self._queue = self._queue[:MOST], self._queue[MOST:]
            await self._send(batch)

    async def _send(self, inos: list[int]) -> None:
        delay = 0.1
        with trio.move_on_after(self.timeout) as scope:
            while True:
                try:
                    await self.client.close_files(inos)
                    self.sent += len(inos)
                    return
                except OSError as exc:
                    log.info("telling the manager of %d closes: %s (again in %.1f s)",
                             len(inos), exc, delay)
                await trio.sleep(delay)
                delay = min(delay * 2, 2.0)
        if scope.cancelled_caught:
            self.dropped += len(inos)
            log.warning("%d closes not told to the manager within %g s: their files keep "
                        "their data until it restarts", len(inos), self.timeout)
