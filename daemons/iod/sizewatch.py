"""Which stripe files' sizes the manager holds, and telling it before they change.

The manager caches a file's size, mtime and blocks (``daemons/mgr/sizecache.py``) only from
answers this daemon marked ``watched``. A watched stripe file is a promise: before any change
to it (write, truncate, utime, create) is made, the manager hears of it and acknowledges, so
no client can be told of the change while the manager still answers the old size.

- ``watch`` (a ``size``/``sizes``/``precreate`` from the manager): promise, unless a change
  of that file is in progress (``changing``) -- its answer could be stale the moment it is
  sent, so it is marked not watched and the manager does not keep it.
- ``before_change`` (every change, from the trio thread): if the file is watched, or being
  unwatched by another change, wait until the manager acknowledged; the caller then counts
  its change in ``changing`` without yielding, so no ``watch`` slips in between.
- At start nothing is known of what an earlier process promised: until the manager
  acknowledged ``forget all`` every change waits, and nothing is promised.
- A *fresh* write (``release_fresh``) comes from the client that created the file from the
  manager's pool and asked the manager not to count it empty (``create`` with ``writing``):
  the pool's promise is then one the manager relies on for nothing, and is dropped without a
  report -- unless a ``size``/``sizes``/``utime`` renewed it since (someone asked the size
  meanwhile, or a manager that restarted did), when the write reports as any other. A small
  file written through the native API then costs one round trip to this daemon, not two.
- Reports go as a group commit: the files whose changes arrive while one report is on its
  way go together in the next (a write-back of many small files -- ``tar x``, mdtest, a
  mount's delegated files -- costs the manager one report per round trip, not per file).

A manager that cannot be reached (refused: it is not running, and a manager that starts has
nothing cached) or does not answer within the request timeout does not block the change
beyond that. A report that timed out is sent again every ``RETRY_S`` until acknowledged: a
manager that was stopped, not dead, serves the old size from its resumption until that
report arrives (logged; the one window this design leaves open).
"""

from __future__ import annotations

import errno
import logging
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import trio

log = logging.getLogger("pvfs.iod")

__all__ = ["SizeWatch"]

WATCH_MAX = 1 << 20   # promises kept; beyond it the manager is told to forget them all
RETRY_S = 1.0         # how often a report that timed out is sent again
REPORT_MAX = 4096     # files per report (a request's limit, protocol/schema.py)


class SizeWatch:
    def __init__(self, notify: Callable[[list[int] | None], Awaitable[None]]) -> None:
        """``notify(inos)`` tells the manager these stripe files change (None: all)."""
        self._notify = notify
        self.watched: set[int] = set()
        self.pool_only: set[int] = set()            # watched since precreate, asked by none
        self.changing: Counter[int] = Counter()      # ino -> changes in progress
        self._unwatching: dict[int, trio.Event] = {}
        self._ready = trio.Event()                   # the start's "forget all" acknowledged
        self._unreported: set[int] | None = set()   # reports that timed out (None: all)
        self._next: dict[int, None] = {}             # files for the next report
        self._next_done = trio.Event()               # set once that report is acknowledged
        self._wake = trio.Event()
        self.notices = 0
        self.released = 0                            # pool promises a fresh write dropped
        # The engine's fast path (csrc/fast.c): ``block_writes(ino)`` stops its writes of
        # ``ino`` (0: of every file) and answers how many are in flight, changes in progress
        # as ``changing`` counts Python's.
        self.block_writes: Callable[[int], int] = lambda ino: 0

    async def run(self) -> None:
        """Tell the manager to forget what an earlier process of this daemon promised, then
        send the reports as changes come, and again, every ``RETRY_S``, those that timed
        out."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._reporter)
            await self._tell(None)
            self._ready.set()
            while True:
                await trio.sleep(RETRY_S)
                again, self._unreported = self._unreported, set()
                if again is None:
                    await self._tell(None)
                    continue
                batch = sorted(again)
                for i in range(0, len(batch), REPORT_MAX):
                    await self._tell(batch[i:i + REPORT_MAX])

    async def _report(self, *inos: int) -> None:
        """Have ``inos`` in the next report; return once the manager acknowledged it."""
        self._next.update(dict.fromkeys(inos))
        done = self._next_done
        self._wake.set()
        await done.wait()

    async def _reporter(self) -> None:
        """Send the files gathered while the last report was on its way, together."""
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            while self._next:
                inos, done = list(self._next), self._next_done
                self._next, self._next_done = {}, trio.Event()
                try:
                    for i in range(0, len(inos), REPORT_MAX):
                        await self._tell(inos[i:i + REPORT_MAX])
                finally:
                    done.set()

    def watch(self, ino: int, pool: bool = False) -> bool:
        """Promise to report the next change of ``ino`` (False: cannot now, don't cache).
        ``pool``: the promise of a precreated stripe file (see ``release_fresh``)."""
        if not self._ready.is_set() or self.changing[ino] or ino in self._unwatching:
            return False
        # From here on the engine's writes of ino wait for Python, which reports them; one
        # already under way is a change in progress.
        if self.block_writes(ino):
            return False
        self.watched.add(ino)
        if pool:
            self.pool_only.add(ino)
        else:
            self.pool_only.discard(ino)
        return True

    def release_fresh(self, ino: int) -> bool:
        """A fresh write of ``ino``: drop the promise without a report if it is still the
        pool's (True), else leave it to ``before_change``."""
        if not self._ready.is_set() or ino not in self.pool_only or ino in self._unwatching:
            return False
        self.pool_only.discard(ino)
        self.watched.discard(ino)
        self.released += 1
        return True

    def must_wait(self, ino: int) -> bool:
        return not self._ready.is_set() or ino in self.watched or ino in self._unwatching

    async def before_change(self, ino: int) -> None:
        """Return once the manager no longer holds ``ino``'s size. The caller must count its
        change (``changing[ino] += 1``) before its next await."""
        while self.must_wait(ino):
            if not self._ready.is_set():
                await self._ready.wait()
            elif ino in self._unwatching:
                await self._unwatching[ino].wait()
            else:
                self.watched.discard(ino)
                self.pool_only.discard(ino)
                done = self._unwatching[ino] = trio.Event()
                try:
                    await self._report(ino)
                finally:
                    del self._unwatching[ino]
                    done.set()

    async def before_changes(self, inos: list[int]) -> None:
        """:meth:`before_change` of many files at once (``writes``): the watched ones go
        in one report, not one report after another. Returns when none of them must wait
        (a promise renewed during an await is reported in the next pass); the caller then
        counts each change (``changing[ino] += 1``) before its next await."""
        while True:
            if not self._ready.is_set():
                await self._ready.wait()
                continue
            waiting = [i for i in dict.fromkeys(inos) if self.must_wait(i)]
            if not waiting:
                return
            mine = [i for i in waiting if i not in self._unwatching]
            for ino in mine:
                self.watched.discard(ino)
                self.pool_only.discard(ino)
                self._unwatching[ino] = trio.Event()
            try:
                if mine:
                    await self._report(*mine)
            finally:
                for ino in mine:
                    self._unwatching.pop(ino).set()
            for ino in waiting:  # (another change's report of these, under way)
                event = self._unwatching.get(ino)
                if event is not None:
                    await event.wait()

    @asynccontextmanager
    async def change(self, ino: int) -> AsyncIterator[None]:
        """``async with`` around a change of ``ino``'s stripe file made in a worker thread."""
        await self.before_change(ino)
        self.changing[ino] += 1
        try:
            yield
        finally:
            self.changed(ino)

    def changed(self, ino: int) -> None:
        """A change counted in ``changing`` is complete (its bytes are in place)."""
        n = self.changing[ino] - 1
        if n > 0:
            self.changing[ino] = n
        else:
            del self.changing[ino]

    def drop(self, ino: int) -> None:
        """The manager changes the file itself and forgot its size: no report needed."""
        self.watched.discard(ino)
        self.pool_only.discard(ino)

    def gone(self, ino: int) -> None:
        """The stripe file was removed (the manager dropped the inode itself)."""
        self.watched.discard(ino)
        self.pool_only.discard(ino)

    async def trim(self) -> None:
        """Too many promises kept: have the manager forget them all, then start afresh."""
        if len(self.watched) > WATCH_MAX and self._ready.is_set():
            self._ready = trio.Event()
            self.block_writes(0)    # every write waits for the ready, as Python's do
            try:
                await self._tell(None)
                self.watched.clear()
                self.pool_only.clear()
            finally:
                self._ready.set()

    def status(self) -> dict:
        return {"watched": len(self.watched), "changing": sum(self.changing.values()),
                "notices": self.notices, "released_fresh": self.released}

    async def _tell(self, inos: list[int] | None) -> None:
        self.notices += 1
        try:
            await self._notify(inos)
        except OSError as exc:
            if exc.errno == errno.ECONNREFUSED:
                return  # no manager running; one that starts has nothing cached
            log.warning("telling the manager that %s changed: %s (going on; sent again "
                        "every %g s)", "every stripe file" if inos is None
                        else f"{len(inos)} stripe file(s)", exc, RETRY_S)
            if inos is None:
                self._unreported = None
            elif self._unreported is not None:
                self._unreported.update(inos)
