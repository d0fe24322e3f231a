"""Precreated inodes: numbers a create takes without a round trip to anyone.

A create once waited for every I/O daemon of the new file to make its stripe file; then,
like OrangeFS's precreate pools, for a pool of numbers whose stripe files the daemons had
made ahead. Stripe files are now made by their first writes (iod/storage.py), so a pool
number needs no file: what the daemons give it is a *promise* -- they watch its empty
shares (``precreate`` with ``watch``, iod/sizewatch.py), so the size cache knows a new
file's size without asking (sizecache.py). The manager keeps a pool of such numbers,
promised in batches of ``batch`` per request; with the size cache off, nobody is asked. A
create whose layout spans every daemon takes the next number; other layouts, and creates
while the pool is empty, take a new number from the store and their size is asked.

The numbers are reserved in the store before the daemons are asked
(``store.admin.pool_reserve``), and marked ready only after every daemon answered
(``pool_ready``): a crash in between leaves unready numbers, asked for again at the next
start. ``pvfs-admin fsck`` asks for the pool and does not count a stripe file of its numbers
as an orphan (a mount creating ahead may write to a number before its create arrives).

**Numbers a mount may still hold are never given out again.** A number handed to a mount
that creates ahead of the manager (ahead.py) may name a file in that mount's kernel before
its create arrives. When the mount's lease session ends with numbers unused, and at a start
(the numbers delegated before a restart are not known), those numbers are *held*: a create
ahead may still claim one (the mount's queued creates land), but no other file gets it --
were its create refused, the first mount's kernel could alias the other's file under it.
After ``hold_for`` seconds a held number is discarded: marked (``pool_discard``), any stripe
files written to it removed from every daemon, then forgotten (a crash in between finishes it
at the next start).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable, Callable

import trio

log = logging.getLogger("pvfs.mgr")

__all__ = ["PrecreatePool"]

# Numbers per daemon request of a refill (when daemons made the pool's stripe files, 1,024
# at once held a size report ~40 ms); in chunks the first numbers are ready sooner too.
CHUNK = 128


class PrecreatePool:
    """The manager's pool of ready inode numbers, refilled in the background.

    ``each`` runs one call per I/O daemon concurrently (``StripeFiles.each``); ``low`` is the
    level below which a refill of ``batch`` numbers starts (default ``batch``; ``batch`` 0:
    no pool);
    ``watched(inos)`` hears of numbers whose empty shares every daemon promised to report
    changes of (the size cache, sizecache.py; None: no daemon is asked); ``durable()`` waits
    until the store's changes so far are committed (group commit, ``group.py``): no number
    is given out whose reservation a crash could still undo."""

    def __init__(self, store, niods: int, each: Callable[[list], Awaitable[list]],
                 batch: int = 256, low: int | None = None,
                 watched: Callable[[list[int]], None] | None = None,
                 durable: Callable[[], Awaitable[None]] | None = None,
                 hold_for: float = 120.0) -> None:
        self.store, self.niods, self.each = store, niods, each
        self.watched, self.durable = watched, durable
        # A refill starts while a whole batch is left (``low`` = ``batch``): one client's
        # serial creates (1,300/s) emptied a pool refilled at 64 left before the daemons
        # answered the next batch, and 6 % of its creates went without (10 ms each, then).
        self.batch, self.low = batch, batch if low is None else min(low, batch)
        self._ready: deque[int] = deque()
        # ino -> when it is discarded (None: from the start's time); the ready numbers a
        # restart found may have been delegated before it
        self.hold_for = hold_for
        self._held: dict[int, float | None] = dict.fromkeys(store.admin.pool(ready=True)) \
            if batch else {}
        self._wanted = trio.Event()
        self.made = 0  # numbers made ready since the start (for tests and metrics)
        self.discarded = 0  # held numbers discarded since the start
        self.refilling = False  # a refill is asking the daemons (status; tests wait it out)

    def __len__(self) -> int:
        return len(self._ready)

    def take(self) -> int | None:
        """The next ready number, or None (the pool is empty: create as before)."""
        ino = self._ready.popleft() if self._ready else None
        if len(self._ready) < self.low:
            self._wanted.set()
        return ino

    @property
    def held(self) -> int:
        return len(self._held)

    def held_numbers(self) -> list[int]:
        return sorted(self._held)

    def hold(self, inos: set[int] | list[int]) -> None:
        """Numbers delegated to a lease session that ended unused: claimable by a create
        ahead for ``hold_for`` seconds, never given out again, then discarded."""
        until = trio.current_time() + self.hold_for
        for ino in inos:
            self._held[ino] = until

    def claim(self, ino: int) -> bool:
        """Take ``ino`` out of the pool if it is there, ready or held (a create ahead of the
        manager whose number was delegated to a session that ended: mgr/ahead.py)."""
        if ino in self._held:
            del self._held[ino]
            return True
        try:
            self._ready.remove(ino)
        except ValueError:
            return False
        if len(self._ready) < self.low:
            self._wanted.set()
        return True

    def give_back(self, ino: int) -> None:
        """A number ``take`` gave out that the create did not use (another layout, an
        existing name): it is still pooled in the store, so it is ready again."""
        self._ready.appendleft(ino)

    async def run(self) -> None:
        """Keep the pool above ``low``: first finish what a crash left unready, then refill
        whenever creates drained it. A daemon that does not answer is retried with backoff
        (creates meanwhile take new numbers, as without a pool)."""
        if not self.batch:
            return
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._discard_held)
            await self._refill()

    async def _refill(self) -> None:
        pending = self.store.admin.pool(ready=False)
        delay = 0.5
        while True:
            if not pending and len(self._ready) >= self.low:
                self._wanted = trio.Event()
                await self._wanted.wait()
                continue
            inos = pending or self.store.admin.pool_reserve(self.batch)
            self.refilling = True
            try:
                if self.durable is not None:
                    await self.durable()
                for at in range(0, len(inos), CHUNK):
                    await self._make(inos[at:at + CHUNK])
            except OSError as exc:
                pending = self.store.admin.pool(ready=False)
                log.warning("promising %d pool numbers: %s (retrying in %.1f s)",
                            len(pending), exc, delay)
                await trio.sleep(delay)
                delay = min(delay * 2, 30.0)
                continue
            finally:
                self.refilling = False
            pending, delay = [], 0.5

    async def _discard_held(self) -> None:
        """Discard held numbers past their time (and what a crash left half discarded)."""
        start = trio.current_time() + self.hold_for
        for ino, until in self._held.items():
            if until is None:
                self._held[ino] = start
        delay = 0.5
        while True:
            now = trio.current_time()
            due = [i for i, until in self._held.items() if until <= now]
            if due:
                self.store.admin.pool_discard(due)
                for ino in due:
                    del self._held[ino]
            gone = self.store.admin.pool_discarding()
            if gone:
                try:
                    if self.durable is not None:
                        await self.durable()
                    await self.each([(iod, {"op": "unlinks", "inos": gone})
                                     for iod in range(self.niods)])
                except OSError as exc:
                    log.warning("removing the stripe files of %d discarded pool numbers: %s "
                                "(retrying in %.1f s)", len(gone), exc, delay)
                    await trio.sleep(delay)
                    delay = min(delay * 2, 30.0)
                    continue
                self.store.admin.pool_forget(gone)
                self.discarded += len(gone)
                delay = 0.5
            nxt = min(self._held.values(), default=None)
            await trio.sleep(max(0.05, (nxt if nxt is not None else now + self.hold_for) - now))

    async def _make(self, inos: list[int]) -> None:
        """Have every daemon promise to watch the empty shares of ``inos`` (with the size
        cache on); then they are ready."""
        replies = [] if self.watched is None else await self.each(
            [(iod, {"op": "precreate", "inos": inos, "watch": True})
             for iod in range(self.niods)])
        self.store.admin.pool_ready(inos)
        if self.watched is not None and all(r.get("watched") for r in replies):
            self.watched(inos)
        self._ready.extend(inos)
        self.made += len(inos)
