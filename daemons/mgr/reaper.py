"""Removing the data of deleted files in the background, in batches.

When a file's last name and last handle are gone, its stripe files must go from every I/O
daemon that holds a share. The unlink (or close, or rename over it) used to wait for that:
one request per daemon per file on the critical path. Now it ends with the metadata
transaction, which leaves the inode in the store with ``nlink`` 0 (the two-phase removal of
``store.py``), and the reaper removes the stripe files of every such file it has gathered
with one ``unlinks`` request per daemon, then the inodes in one transaction. Like Lustre's
and Ceph's asynchronous object destruction, the space comes back shortly after the unlink
returns; ``pvfs-admin status`` shows the removals still pending.

A daemon that does not answer is retried with backoff; a crash loses nothing, since the
next start finds the inodes with ``nlink`` 0 (``store.admin.orphans``) and removes them first.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import trio

log = logging.getLogger("pvfs.mgr")

__all__ = ["Reaper"]


class Reaper:
    """``iods_of(attrs)`` names the daemons of a file's shares; ``each`` runs one call per
    daemon concurrently (``StripeFiles.each``); ``batch`` bounds the files per round;
    ``durable()`` waits until the store's changes so far are committed (group commit,
    ``group.py``): no stripe file goes before the unlink that freed it is durable.
    ``gather``: seconds a round waits for more removals before it starts, unless ``batch``
    are queued -- an ``rm`` of many files (one unlink per file, one after the other) then
    costs one request per daemon per round, not per file: 2,000 serial unlinks took 0.6 ms
    each with a round per file, a fifth of the manager's time in the reaper's requests."""

    def __init__(self, store, iods_of: Callable[[dict], list[int]],
                 each: Callable[[list], Awaitable[list]], batch: int = 1024,
                 durable: Callable[[], Awaitable[None]] | None = None,
                 gather: float = 0.02) -> None:
        self.store, self.iods_of, self.each, self.batch = store, iods_of, each, batch
        self.durable, self.gather = durable, gather
        self._queue: dict[int, dict] = {}  # ino -> attrs, in order of arrival
        self._work = trio.Event()
        self._idle = trio.Event()
        self._idle.set()
        self.removed = 0
        for attrs in store.admin.orphans():  # what a crash or a dead daemon left behind
            self.add(attrs)

    @property
    def pending(self) -> int:
        return len(self._queue)

    def add(self, attrs: dict | None) -> None:
        """Queue the data removal of a file the store said is gone (None: nothing to do)."""
        if not attrs or attrs.get("type") != "file":
            return
        self._queue[attrs["ino"]] = attrs
        self._idle = trio.Event() if self._idle.is_set() else self._idle
        self._work.set()

    async def idle(self) -> None:
        """Wait until every queued removal is done (tests, orderly shutdown)."""
        await self._idle.wait()

    async def run(self) -> None:
        delay = 0.5
        while True:
            if not self._queue:
                self._idle.set()
                self._work = trio.Event()
                await self._work.wait()
                continue
            if len(self._queue) < self.batch and self.gather > 0:
                await trio.sleep(self.gather)
            taken = list(self._queue.values())[: self.batch]
            try:
                await self._remove(taken)
            except OSError as exc:
                log.warning("removing the stripe files of %d deleted files: %s (retrying in "
                            "%.1f s)", len(taken), exc, delay)
                await trio.sleep(delay)
                delay = min(delay * 2, 30.0)
                continue
            delay = 0.5
            for attrs in taken:
                self._queue.pop(attrs["ino"], None)

    async def _remove(self, taken: list[dict]) -> None:
        if self.durable is not None:
            await self.durable()
        # A file reopened by inode since it was queued keeps its data until its last close
        # (which queues it again).
        gone = [a for a in taken if self.store.admin.removable(a["ino"])]
        per_iod: dict[int, list[int]] = {}
        for a in gone:
            for iod in self.iods_of(a):
                per_iod.setdefault(iod, []).append(a["ino"])
        await self.each([(iod, {"op": "unlinks", "inos": inos})
                         for iod, inos in sorted(per_iod.items())])
        self.store.admin.remove_inodes([a["ino"] for a in gone])
        self.removed += len(gone)
