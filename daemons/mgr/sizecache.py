"""Stripe-file sizes the manager may answer without asking the I/O daemons.

A file's size, mtime and blocks live in its stripe files (SPEC §1): every ``lookup``,
``getattr`` and ``readdir`` of a file used to ask each of its I/O daemons (four round trips
for a ``stat``, most of a metadata operation's time). The daemons now tell the manager when
a stripe file it may have cached changes, *before* the change is acknowledged to anyone
(``daemons/iod/sizewatch.py``), so what the manager cached stays true until it is told.

The rules that make a cached answer exact:

- An answer is cached only if every daemon of the file said ``watched`` (it will report the
  next change of that stripe file and had no change in progress when it measured).
- A change reported while an answer is on its way invalidates that answer: ``begin`` hands
  out a token, ``forget`` takes it back, ``install`` keeps only an answer whose token is
  still current.
- A precreated number's shares are empty (no stripe file is made before a first write) and
  watched from the pool's refill (``watch_pool``): a create from the pool caches zeros
  without asking anyone.
- A daemon that restarted has forgotten what it watched: its first act is ``forget_all``.

A promise costs the daemon a round trip to the manager before the next change. For a file
being written while someone stats it (``tail -f``, a progress bar, fsx) that is one extra
round trip per write, and the cached answer is gone by the next stat anyway: a file whose
daemons reported a second change within ``HOT_S`` of the one before is *hot* and not watched
until ``HOT_S`` has passed (asked each time, as without the cache). A second change is a
daemon's report that follows a watched fetch made after *that daemon's* previous report: one
write striped over three daemons sends three reports, but it is one change (a file created
from the pool and written once, ``cp``, must stay cacheable), also when one daemon's report
comes after a fetch that the others' started (a daemon busy with other work).
A report that names no daemon counts as every daemon's. One change does not make a file hot: a file written once
and then given its owner, mode and times (``tar x``, ``cp -p``) is watched again from its
first ``setattr``.

The manager's own changes of stripe files (truncate, utime) are not reports: it drops the
entry before and after them (``forget(..., reported=False)``; a fetch begun in between is
not kept) and the daemons drop their promise without reporting back.
"""

from __future__ import annotations

import time
from collections import OrderedDict

__all__ = ["Share", "SizeCache"]

Share = tuple[int, int, "int | None"]   # (local size, mtime_ns, st_blocks) of one stripe file

HOT_S = 1.0        # two reported changes this close: the file is hot, not watched for HOT_S
HOT_MAX = 1 << 16  # changed files remembered for that


class SizeCache:
    """``capacity`` files' shares, least recently used out first (0: none; the manager
    then does not ask the daemons to watch)."""

    def __init__(self, capacity: int = 1 << 18) -> None:
        self.capacity = capacity
        self.enabled = capacity > 0
        self._shares: OrderedDict[int, list[Share]] = OrderedDict()  # ino -> per rank, LRU
        self._pending: dict[int, object] = {}   # ino -> token of the newest fetch on its way
        self._pool: set[int] = set()            # precreated inodes every daemon watches
        # ino -> [time of the last report, changes in a row each within HOT_S, the daemons
        # (-1: unnamed) whose last report came before a watched fetch (their next report is
        # a new change), those whose last report came after it]
        self._changed: OrderedDict[int, list] = OrderedDict()
        self.hits = self.misses = self.invalidations = 0

    def __len__(self) -> int:
        return len(self._shares)

    def wants_watch(self, ino: int) -> bool:
        """Whether to ask the daemons for a promise on ``ino`` (not while it is hot)."""
        if not self.enabled:
            return False
        got = self._changed.get(ino)
        return got is None or got[1] < 2 or time.monotonic() - got[0] >= HOT_S

    def get(self, ino: int) -> list[Share] | None:
        shares = self._shares.get(ino)
        if shares is None:
            self.misses += 1
            return None
        self._shares.move_to_end(ino)
        self.hits += 1
        return shares

    def begin(self, ino: int) -> object:
        """A fetch of ``ino``'s shares starts; ``install`` with this token when it ends."""
        token = self._pending[ino] = object()
        return token

    def current(self, ino: int, token: object) -> bool:
        """Whether ``token`` is still the newest fetch of ``ino`` (no change reported since,
        no other fetch begun)."""
        return self._pending.get(ino) is token

    def install(self, ino: int, token: object, shares: list[Share], watched: bool) -> None:
        """Keep the fetched shares if every daemon watches them and nothing changed since
        ``begin`` (a change reported meanwhile took the token back)."""
        if self._pending.get(ino) is not token:
            return
        del self._pending[ino]
        if watched and ino in self._changed:
            got = self._changed[ino]
            got[2] |= got[3]
            got[3] = set()
        if watched and self.enabled:
            self._put(ino, shares)

    def watch_pool(self, inos: list[int]) -> None:
        if self.enabled:
            self._pool.update(inos)

    def created(self, ino: int, pcount: int) -> bool:
        """A create took precreated ``ino``: cache its empty shares if they are watched."""
        if ino not in self._pool:
            return False
        self._pool.discard(ino)
        self._put(ino, [(0, 0, 0)] * pcount)
        return True

    def forget(self, inos, reported: bool = True, iod: int = -1) -> None:
        """Stripe files of these inodes changed (or are gone): ask the daemons next time.
        ``reported``: a daemon's report (counts towards hot), not the manager's own change;
        ``iod``: the reporting daemon (-1: not named)."""
        now = time.monotonic()
        for ino in inos:
            self.invalidations += 1
            self._shares.pop(ino, None)
            self._pending.pop(ino, None)
            self._pool.discard(ino)
            if not reported:
                continue
            last, streak, fetched, since = self._changed.pop(ino, (-HOT_S, 0, set(), set()))
            if now - last >= HOT_S:
                streak, fetched, since = 1, set(), set()
            elif iod in fetched or (-1 in fetched) or (iod == -1 and fetched):
                # changed again after a fetch had watched it anew
                streak, fetched, since = streak + 1, set(), set()
            since.add(iod)
            self._changed[ino] = [now, streak, fetched, since]
        while len(self._changed) > HOT_MAX:
            self._changed.popitem(last=False)

    def forget_all(self) -> None:
        """A daemon restarted (or gave up watching): nothing cached can be trusted."""
        self.invalidations += len(self._shares)
        self._shares.clear()
        self._pending.clear()
        self._pool.clear()

    def status(self) -> dict:
        return {"entries": len(self._shares), "hits": self.hits, "misses": self.misses,
                "invalidations": self.invalidations, "pool_watched": len(self._pool),
                "changed_recently": len(self._changed)}

    def _put(self, ino: int, shares: list[Share]) -> None:
        self._shares[ino] = shares
        self._shares.move_to_end(ino)
        if len(self._shares) > self.capacity:
            self._shares.popitem(last=False)
