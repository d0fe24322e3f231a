"""The manager's handle counts, told of this mount's closes (and opens) in batches.

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

**Opens answered here** (``open_ahead``, with leases). An open of a file whose attributes
the mount leases -- read-only, or for writing without ``O_TRUNC`` (the manager's open of
such a file is the same check and count; an open that truncates changes the file there, and
goes to it) -- needs nothing of the manager but the count: the kernel
checked the permission bits against attributes the lease keeps current, and the size and
times are the lease's. So it is answered at once and its count queued (:meth:`opened`); a
close of the file while its open is still queued cancels both, and nothing reaches the
manager (``cat``, ``grep``, an import, mdtest's read phase: open, read, close). What the
count guards -- a file whose last name goes while it is open keeps its data -- needs it at
the manager before anything can remove the file: before this mount's own ``unlink`` or
``rename`` (``before_meta``), before a recall of the file's lease is answered (another node
about to unlink it: ``send_opens`` from ``LeaseCache.before_answer``), and before any close
is sent; else after :data:`OPEN_DELAY`. An open queued when the lease session ended is sent
at once. The window left: another node unlinking a file within :data:`OPEN_DELAY` of its
open here while the manager cannot call this mount back (then the file's data may go while
it is open here, as if this node had been partitioned off at its open).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable

import trio

from pvfs.client.aclient import AsyncClient

log = logging.getLogger("pvfs.fuse")

__all__ = ["DeferredCloses"]

DELAY = 0.005  # seconds a close waits for others to share its request
MOST = 4096  # handles per request (the schema's bound)
OPEN_DELAY = 0.5  # seconds an open answered here waits for its close


class DeferredCloses:
    """Queue of closed handles' inodes; :meth:`run` sends them (a task of the mount)."""

    def __init__(self, client: AsyncClient, timeout: float) -> None:
        self.client, self.timeout = client, timeout
        self._queue: list[int] = []
        self._work = trio.Event()
        self.sent = 0  # handles told to the manager (status)
        self.dropped = 0  # handles given up on after ``timeout``
        self._opens: Counter[int] = Counter()  # opens answered here, not yet told
        self._open_work = trio.Event()
        self._now = trio.Event()
        self._opens_lock = trio.Lock()
        self._opens_sender: trio.lowlevel.Task | None = None
        self.counters = dict.fromkeys(("opens_ahead", "opens_cancelled", "opens_sent",
                                       "opens_refused"), 0)

    @property
    def pending(self) -> int:
        return len(self._queue)

    def opened(self, ino: int) -> None:
        """An open of ``ino`` answered here (its caller made sure it may be)."""
        self._opens[ino] += 1
        self.counters["opens_ahead"] += 1
        self._open_work.set()

    def cancel_opens(self, ino: int) -> None:
        """``ino``'s opens answered here are not told: its create was refused."""
        self._opens.pop(ino, None)

    def add(self, ino: int) -> None:
        """One handle of ``ino`` closed here (cancelling an open of it not yet told)."""
        if self._opens[ino] > 0:
            self._opens[ino] -= 1
            if not self._opens[ino]:
                del self._opens[ino]
            self.counters["opens_cancelled"] += 1
            return
        self._queue.append(ino)
        self._work.set()

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._run_opens)
            task_status.started()
            while True:
                await self._work.wait()
                self._work = trio.Event()
                if len(self._queue) < MOST:
                    await trio.sleep(DELAY)
                await self.send()

    async def _run_opens(self) -> None:
        while True:
            await self._open_work.wait()
            self._open_work = trio.Event()
            with trio.move_on_after(OPEN_DELAY):
                await self._now.wait()  # (the lease session ended: at once)
            self._now = trio.Event()
            await self.send_opens()

    def session_ended(self) -> None:
        """The lease session ended: nobody calls this mount back now; tell the opens now."""
        if self._opens:
            self._now.set()
            self._open_work.set()

    async def send(self) -> None:
        """Send everything queued now (also at unmount), in requests of at most MOST: the
        opens not yet told first, so no close overtakes its open."""
        await self.send_opens()
        while self._queue:
            batch, self._queue = self._queue[:MOST], self._queue[MOST:]
            await self._send(batch)

    async def send_opens(self, only: Iterable[int] | None = None) -> None:
        """Tell the manager of the opens answered here (``only``: of these files), and wait
        for any such telling under way: nothing the count guards may overtake it."""
        if not self._opens or trio.lowlevel.current_task() is self._opens_sender:
            return  # (the request below passes through the client's before_meta)
        async with self._opens_lock:
            self._opens_sender = trio.lowlevel.current_task()
            try:
                if only is None:
                    batch, self._opens = self._opens, Counter()
                else:
                    batch = Counter({i: self._opens.pop(i) for i in only if i in self._opens})
                inos = list(batch.elements())
                for i in range(0, len(inos), MOST):
                    await self._send_opens(inos[i:i + MOST])
            finally:
                self._opens_sender = None

    async def _send_opens(self, inos: list[int]) -> None:
        refused = await self._tell(self.client.open_files, inos, "opens")
        if refused is None:
            self.counters["opens_refused"] += len(inos)
            log.warning("%d opens not told to the manager within %g s", len(inos),
                        self.timeout)
            return
        self.counters["opens_sent"] += len(inos)
        if refused:
            self.counters["opens_refused"] += len(refused)
            log.warning("opens answered here refused by the manager (%s): those files may "
                        "lose their data while open here", refused[:8])

    async def before_meta(self, op: str) -> None:
        """Before this mount's own request that may remove a file's last name."""
        if op in ("unlink", "rename"):
            await self.send_opens()

    def status(self) -> dict:
        return {**self.counters, "opens_pending": sum(self._opens.values()),
                "closes_pending": len(self._queue), "closes_sent": self.sent}

    async def _send(self, inos: list[int]) -> None:
        if await self._tell(self.client.close_files, inos, "closes") is None:
            self.dropped += len(inos)
            log.warning("%d closes not told to the manager within %g s: their files keep "
                        "their data until it restarts", len(inos), self.timeout)
            return
        self.sent += len(inos)

    async def _tell(self, call, inos: list[int], what: str):
        """``await call(inos)``, tried again with backoff while the manager cannot be
        reached, for at most ``timeout``; its answer (``[]`` for none), or None."""
        delay = 0.1
        with trio.move_on_after(self.timeout):
            while True:
                try:
                    return await call(inos) or []
                except OSError as exc:
                    log.info("telling the manager of %d %s: %s (again in %.1f s)",
                             len(inos), what, exc, delay)
                await trio.sleep(delay)
                delay = min(delay * 2, 2.0)
        return None
