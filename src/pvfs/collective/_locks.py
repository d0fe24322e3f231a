"""The page-lock state machine run by lock servers and I/O threads (message back ends).

A home (a dedicated lock server, or a rank's I/O thread) keeps, for every page it is home
for, the page's :class:`~pvfs.collective._pages.Meta` and a shared/exclusive lock with a FIFO
queue of waiters (DAChe §5.2: "the mutex servers service locks in the order they come,
queuing requests"). Requests are served in arrival order; a release hands the lock to the
longest waiter (and to every shared waiter right behind it). ``try`` requests (eviction
asks whether a page is pinned) never queue.

*Batches* carry several pages of one request in increasing page order, in one message:

- :meth:`LockManager.request_batch` grants them in order, as if each page were asked for
  after the one before it was granted: at the first page it cannot grant it queues the
  rest of the batch behind that page, and the release that grants it continues with the
  next page. The requester is answered once, when every page is granted (or read around).
  The client sends such a batch only for pages that are consecutive in its lock order (no
  page of another home between them), so a waiter still holds only lower pages than the one
  it waits for: two-phase locking in increasing order, deadlock-free.
- :meth:`LockManager.try_batch` never queues: it grants pages in order while they are free
  and stops at the first one that is not. A client asks every home of a request at once
  this way (one parallel round instead of one round trip per page); if some page was busy,
  it keeps the pages below the first busy one, releases the others, and takes the rest in
  order with queued batches.

*Waiting for a load*: a non-atomic read batch that finds a page locked while it is being
loaded (cached nowhere — another rank is loading it from the file — or claimed by a
read-ahead whose helper thread has not filled it yet) waits for it, in the page's queue, up
to the seconds its ``around`` carries (the reader's :class:`~pvfs.collective._loadwaits.LoadTimes`: since issue 32 the
bound :data:`~pvfs.collective._loadwaits.LOAD_BOUND`, so the page is read once while its loader is alive; ``True``: the
home's ``grace``); if the page is still being loaded then, the read goes around it (the
page's result is None) and the batch goes on with its next page, so a loader that died or
stalled holds nobody up past the bound. A read queued at a page that *becomes* a load
while it waits (a writer ahead of it was granted the page after its copy was evicted) gets
its deadline then (:meth:`LockManager._arm`). A ``try`` batch stops at such a page (:data:`BUSY`) so that the
client asks for it in order, with a queued batch that may wait. Deadlines are checked by
:meth:`LockManager.expire`, which the home calls as it polls.
"""

from __future__ import annotations

import heapq
import os
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from pvfs.collective._loadwaits import around_wait
from pvfs.collective._pages import UNCACHED, Meta

#: A lock mode besides shared (False) and exclusive (True): a read that caches the page if
#: nobody does — exclusive when granted while the page is cached nowhere, else shared.
READ = "read"
#: The read mode of a rank with no free slot (issue 32's loan slots): as :data:`READ`, and
#: when granted exclusively (the page cached nowhere) the grant lends the loader a slot of
#: the group's loan pool, ``(rank, slot)``, to load the page into instead of evicting
#: (:meth:`LockManager.lend`).
LOAN = "loan"

Mode = bool | str

#: ``PVFS_COLLECTIVE_VICTIMS=1``: an evicting rank sends a copy of the page to its home
#: (issue 32's victim cache, :meth:`LockManager.keep_victim`). Off by default: over the
#: netns harness it read each page once at 16 and 32 clients, but its bandwidth was 0.94x
#: of the code without it at 32 clients, under the 0.95 set before the run for the default
#: (docs/collective.md, issue 32, s26; s29 0.938x); with read-ahead claims taking the kept
#: copies (s30) 1.033x at 32 clients but 0.895x at 16 (4 of 4 repeats below 1).
VICTIMS_ENV = "PVFS_COLLECTIVE_VICTIMS"
#: ``PVFS_COLLECTIVE_VICTIM_CLAIMS=0``: a read-ahead claim skips a page whose victim copy
#: its home keeps (s26-s29) instead of taking the copy (s30, the default; bench suffix
#: ``-skipkept`` for the A/B).
VICTIM_CLAIMS_ENV = "PVFS_COLLECTIVE_VICTIM_CLAIMS"


#: ``PVFS_COLLECTIVE_LOANS=0``: no loan slots (issue 32, s31; on by default for read-only
#: opens with ``servers`` coordination: see :meth:`LockManager.lend`; bench suffix
#: ``-noloan`` for the A/B).
LOANS_ENV = "PVFS_COLLECTIVE_LOANS"


def loans_on() -> bool:
    """Whether read-only ``servers`` opens lend a quarter of each rank's slots to the
    homes' loan pools (on unless ``PVFS_COLLECTIVE_LOANS=0``)."""
    return os.environ.get(LOANS_ENV, "1") != "0"


def victims_on() -> bool:
    """Whether evictions send the page's bytes to its home (off unless asked for)."""
    return os.environ.get(VICTIMS_ENV, "0") == "1"


@dataclass
class Batch:
    """A queued batch: ``src`` asks for ``items`` (``(page, mode)``, increasing pages);
    ``results`` holds each granted page's metadata (None: read around) so far."""

    src: int
    items: list[tuple[int, Mode]]
    around: bool | float = False  # (see around_wait)
    results: list[Meta | None] = field(default_factory=list)
    #: when waiting for a page being loaded: ``(time to read around it instead, page)``.
    #: The page is part of it because every page of a batch shares one deadline
    #: (``until``): a timed entry left from a page granted meanwhile must not pass for
    #: the wait on the next page (it would read that page around while the batch still
    #: queues for it, and the later grant would find the batch complete).
    waiting: tuple[float, int] | None = None
    #: the end of the batch's wait for loads, set at its first: one budget for all its
    #: pages (a chunk's pages being loaded together are read around after one wait)
    until: float | None = None

    @property
    def done(self) -> bool:
        return len(self.results) == len(self.items)


#: What :meth:`LockManager.try_batch` puts where it stopped: the page is busy.
BUSY = False


@dataclass
class _PageLock:
    readers: set[int] = field(default_factory=set)
    writer: int | None = None
    queue: deque[tuple[int, Mode, Batch | None]] = field(default_factory=deque)
    meta: Meta = UNCACHED
    #: locked by a read-ahead claim: published as cached by the claimer, whose helper
    #: thread is still reading it from the file (issue 32: a load like any other, so a
    #: reader waits for it only up to its bound)
    claimed: bool = False

    def loading(self) -> bool:
        """Whether the page is cached nowhere yet: nobody caches it, or its claimer is
        still reading it (a reader may read it around: the file holds every completed
        write to it, and writes wait for the lock)."""
        return self.meta.owner < 0 or self.claimed

    def exclusive(self, mode: Mode) -> bool:
        """Whether ``mode`` asks for the page exclusively, decided now (at the grant)."""
        return self.meta.owner < 0 if mode in (READ, LOAN) else bool(mode)


class LockManager:
    """Locks and metadata for the pages one home serves; pure logic, no MPI."""

    def __init__(self, grace: float = 0.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._pages: dict[int, _PageLock] = {}
        self.requests = 0
        self.queued = 0
        self.grace = grace
        self.clock = clock
        #: batches waiting for a load: a heap of (deadline, sequence, page, batch); a heap
        #: because readers ask for different waits (each its own LoadTimes)
        self.timed: list[tuple[float, int, int, Batch]] = []
        self._timed_seq = 0
        self.load_waits = 0  # batches that waited for a load ...
        self.load_timeouts = 0  # ... and of those, the ones that read around after all
        #: pages this home knows cached somewhere (or claimed for a read-ahead): with the
        #: number of homes, the group's cached pages estimated (issue 32, see claim_batch)
        self.cached = 0
        self.room_refusals = 0  # read-ahead claims refused: they would evict, others have room
        #: rank -> ``requests`` at its last lock request (who reads the file, see has_room)
        self._last_lock: dict[int, int] = {}
        #: the victim cache (issue 32): page -> its bytes, of pages evicted by some rank and
        #: cached nowhere since, oldest first (see keep_victim); one copy in the group still
        #: (a page is in here only while no rank caches it)
        self.victims: OrderedDict[int, bytes] = OrderedDict()
        #: rank -> {page: bytes} of victims handed over with exclusive grants, to go with
        #: the next answer to that rank (the grant's reply)
        self.handed: dict[int, dict[int, bytes]] = {}
        self.victims_kept = 0  # victims stored
        self.victims_handed = 0  # ... handed to a rank with a grant (a file read saved)
        self.victims_dropped = 0  # ... dropped, oldest first, for a newer one
        self.victims_refused = 0  # ... not stored: the group had no room left
        #: rank -> {page: bytes} of victims a read-ahead claim took (s30: the claim's
        #: reply carries them, the claimer caches the copy instead of reading the file)
        self.claim_copies: dict[int, dict[int, bytes]] = {}
        self.victims_claimed = 0  # victims handed to read-ahead claims (of victims_handed)
        #: claims take kept copies (s30); off: they skip kept pages (s26-s29, the A/B)
        self.claim_victims = os.environ.get(VICTIM_CLAIMS_ENV, "1") != "0"
        #: ``(homes, slots)`` of the last eviction (the group's room: see keep_victim)
        self.victim_room: tuple[int, int] | None = None
        #: issue 32's loan slots (see :meth:`lend`): rank -> its free slots lent to this
        #: home's pool
        self.loan_free: dict[int, list[int]] = {}
        #: rank -> {page: (rank, slot)} of loans made with grants, to go with the reply
        self.lent: dict[int, dict[int, tuple[int, int]]] = {}
        #: page -> (rank, slot) lent with its exclusive grant, until the loader releases it
        self.loan_pending: dict[int, tuple[int, int]] = {}
        #: page -> (rank, slot) of pages cached in a loan slot, oldest first
        self.loaned: OrderedDict[int, tuple[int, int]] = OrderedDict()
        self.loans_granted = 0  # loans made with grants
        self.loans_recycled = 0  # ... of them, the slot of an older loaned page taken back
        self.loans_returned = 0  # loans given back unused (a try round, a failed access)

    def _get(self, page: int) -> _PageLock:
        entry = self._pages.get(page)
        if entry is None:
            entry = self._pages[page] = _PageLock()
        return entry

    @staticmethod
    def _free_for(entry: _PageLock, mode: Mode) -> bool:
        if entry.writer is not None:
            return False
        return not entry.readers if entry.exclusive(mode) else True

    def acquire(self, page: int, src: int, excl: Mode, try_only: bool = False,
                around: bool | float = False) -> tuple[bool, Meta | None]:
        """``(granted, meta)``; not granted means queued, or refused for ``try_only`` and,
        with ``around``, when the page is locked but cached nowhere (see :meth:`request`)."""
        status, meta = self.request(page, src, excl, try_only, around)
        return status == "granted", meta

    def request(self, page: int, src: int, excl: Mode, try_only: bool = False,
                around: bool | float = False) -> tuple[str, Meta | None]:
        """``("granted", meta)``, ``("queued", None)`` or ``("refused", None)``.

        ``around``: a non-atomic reader that would rather read the file than wait while
        the page is loaded (locked, cached nowhere) is refused instead of queued.
        """
        self.requests += 1
        self._last_lock[src] = self.requests
        entry = self._get(page)
        # FIFO fairness: a new shared request does not overtake a queued exclusive one.
        if not entry.queue and self._free_for(entry, excl):
            self._grant(page, entry, src, excl)
            return "granted", entry.meta
        if try_only or (around_wait(around, self.grace) is not None
                        and entry.loading()):
            return "refused", None
        entry.queue.append((src, excl, None))
        self.queued += 1
        return "queued", None

    def request_batch(self, src: int, items: list[tuple[int, Mode]],
                      around: bool | float = False) -> list[Meta | None] | None:
        """Grant ``items`` in order; their results (metadata, None for a page read around)
        when all are granted now, else None: the batch waits in the queue of the first page
        it could not have, and the release that grants that page goes on with the rest
        (:meth:`release` returns ``(src, results)`` when the batch is complete)."""
        batch = Batch(src, list(items), around)
        self._last_lock[src] = self.requests + 1
        return batch.results if self._advance(batch) else None

    def _advance(self, batch: Batch) -> bool:
        while not batch.done:
            page, mode = batch.items[len(batch.results)]
            self.requests += 1
            entry = self._get(page)
            if not entry.queue and self._free_for(entry, mode):
                self._grant(page, entry, batch.src, mode)
                batch.results.append(entry.meta)
            elif (wait := self._wait_left(batch)) is not None \
                    and entry.loading() and wait <= 0:
                batch.results.append(None)  # locked, cached nowhere: read the file
            else:
                if wait is not None and entry.loading():
                    # being loaded: wait for the copy, but not longer than the reader's wait
                    # (what is left of it: one wait for all the batch's pages)
                    if batch.until is None:
                        batch.until = self.clock() + wait
                    batch.waiting = (batch.until, page)
                    self._timed_seq += 1
                    heapq.heappush(self.timed, (batch.until, self._timed_seq, page, batch))
                    self.load_waits += 1
                entry.queue.append((batch.src, mode, batch))
                self.queued += 1
                return False
        return True

    def _wait_left(self, batch: Batch) -> float | None:
        """Seconds ``batch`` may still wait for a load (None: it never reads around)."""
        wait = around_wait(batch.around, self.grace)
        if wait is None or batch.until is None:
            return wait
        return batch.until - self.clock()

    def next_deadline(self) -> float | None:
        """The earliest time :meth:`expire` has something to do (None: nothing timed)."""
        while self.timed and self.timed[0][3].waiting != (self.timed[0][0], self.timed[0][2]):
            heapq.heappop(self.timed)  # granted, or waiting on a later page, meanwhile
        return self.timed[0][0] if self.timed else None

    def expire(self, now: float | None = None) -> list[tuple[int, list[Meta | None]]]:
        """Batches whose wait for a load has passed its deadline read that page around
        (if it is still cached nowhere; else they keep their place) and go on with their
        next pages; ``(src, results)`` of those now complete, as :meth:`release`."""
        now = self.clock() if now is None else now
        granted: list[tuple[int, list[Meta | None]]] = []
        while (first := self.next_deadline()) is not None and first <= now:
            _, _, page, batch = heapq.heappop(self.timed)
            batch.waiting = None
            entry = self._pages.get(page)
            if entry is None or not entry.loading():
                continue  # cached now: the copy may be dirty, wait for it
            for i, (_, _, b) in enumerate(entry.queue):
                if b is batch:
                    del entry.queue[i]
                    break
            self.load_timeouts += 1
            batch.results.append(None)
            if self._advance(batch):
                granted.append((batch.src, batch.results))
            granted.extend(self._grant_waiters(page, entry))  # (if it headed the queue)
        return granted

    def try_batch(self, src: int, items: list[tuple[int, Mode]],
                  around: bool | float = False) -> list[Meta | None | bool]:
        """Grant ``items`` in order while they are free, never queueing: each page's
        metadata, None for a page read around (``around``, locked and cached nowhere), and
        :data:`BUSY` for the first page that is neither (the list ends there)."""
        out: list[Meta | None | bool] = []
        self._last_lock[src] = self.requests + 1
        for page, mode in items:
            self.requests += 1
            entry = self._get(page)
            if not entry.queue and self._free_for(entry, mode):
                self._grant(page, entry, src, mode)
                out.append(entry.meta)
            elif entry.loading() and \
                    (wait := around_wait(around, self.grace)) is not None and wait <= 0:
                out.append(None)
            else:
                out.append(BUSY)
                break
        return out

    def has_room(self, room: tuple[int, int, int] | None, pages: int,
                 src: int | None = None) -> bool:
        """Whether other ranks should read ``pages`` ahead instead of ``src``, whose slots
        are all taken: ``room`` is ``(homes, slots, own)`` — how many homes share the pages
        (round robin, so each sees about its share of the cached ones), the slots of the
        whole group and the claimer's. Yes when the group's estimated cached pages plus
        these fit its slots (the free ones are other ranks') *and* another rank asked this
        home for a lock within its last ``own`` requests (others read the file and may
        take the range; a rank reading alone keeps its read-ahead, evicting). None:
        unknown (never)."""
        if room is None:
            return False
        homes, slots, own = room
        if self.cached * homes + pages > slots:
            return False
        return any(r != src and self.requests - seen <= own
                   for r, seen in self._last_lock.items())

    def claim_batch(self, src: int, owner: int, pages: list[int],
                    lead: bool = False,
                    room: tuple[int, int, int] | None = None) -> list[bool | None] | None:
        """Read-ahead claims, never queued: each page that is unlocked, has no waiter and
        is cached nowhere is locked exclusively by ``src`` and published as cached by
        ``owner`` (its slot comes with the release), so readers queue for it instead of
        reading around it; per page its flushed bit, or None when it is locked or cached
        somewhere (one copy in the group). ``lead``: when the first page cannot be
        claimed none is (the range belongs to the stream that took it). A page whose
        victim copy the home keeps is claimed too, and the copy goes to the claimer
        (``claim_copies[src]``, sent with the claim's reply; s30).

        ``room`` (issue 32): the claimer has no free slot, so reading these pages ahead
        would evict pages it caches — pages other ranks may not have read yet (at 16-32
        ranks over shaped links the fastest rank led nearly every range, read 800 pages
        ahead into its 128 slots and evicted what slower ranks then read from the file
        again, while their slots stood empty). While the rest of the group has room for
        them (:meth:`has_room`) nothing is claimed and None is returned: the range is left
        to a stream whose rank has free slots. When the group is full, evicting is what
        any cache must do, and the claim goes on as without ``room``."""
        if self.has_room(room, len(pages), src):
            self.room_refusals += 1
            return None
        out: list[bool | None] = []
        for page in pages:
            self.requests += 1
            entry = self._get(page)
            if entry.queue or entry.writer is not None or entry.readers \
                    or entry.meta.owner >= 0 \
                    or (not self.claim_victims and page in self.victims):
                if lead and not out:
                    return [None] * len(pages)
                out.append(None)
                continue
            entry.writer = src
            entry.claimed = True
            out.append(entry.meta.flushed)
            entry.meta = Meta(owner, 0, entry.meta.flushed)
            self.cached += 1
            if self.victims and page in self.victims:
                # A kept copy goes to the claimer with the claim's reply: it caches it in
                # place of the file read (s30; before, a claim skipped a kept page, and a
                # range whose first page was kept was not read ahead at all — over the
                # harness the victim cache cut the pages read ahead from 1,519-1,898 to
                # 428-1,164 a run at 32 clients, 9 of 9 pairs, so they became demand loads)
                self.claim_copies.setdefault(src, {})[page] = self.victims.pop(page)
                self.victims_handed += 1
                self.victims_claimed += 1
        self._trim()
        return out

    def _grant(self, page: int, entry: _PageLock, src: int, mode: Mode) -> None:
        if entry.exclusive(mode):
            entry.writer = src
            if mode == LOAN and (loan := self._take_loan()) is not None:
                self.lent.setdefault(src, {})[page] = loan
                self.loan_pending[page] = loan
            if self.victims and page in self.victims:
                # The page's only copy goes to the rank that now holds it exclusively (it
                # caches the page, or writes it): with the grant, in place of a file read.
                self.handed.setdefault(src, {})[page] = self.victims.pop(page)
                self.victims_handed += 1
        else:
            entry.readers.add(src)

    def lend(self, rank: int, slots: list[int]) -> None:
        """``rank`` lends ``slots`` (taken out of its own free list) to this home's loan
        pool (issue 32's loan slots). Over the netns harness at 16-32 clients the extra
        file reads were demand loads by a rank with no free slot: it evicted pages that
        ranks behind it had not read yet while their slots stood empty. A read by such a
        rank asks in :data:`LOAN` mode; when its grant is exclusive (the page cached
        nowhere) the home lends it a pool slot ``(r, s)``, the loader reads the page from
        the file, puts it in ``r``'s slot ``s`` (one RMA put) and publishes ``Meta(r, s)``
        at its unlock: no eviction, no copy through the home. Loaned pages are clean (the
        pool is used by read-only opens only) and never evicted by ``r``, which does not
        know them; when the pool is empty the home takes back the slot of its oldest
        loaned page that nobody holds or waits for (published uncached: a second read of
        that page is what any full cache pays)."""
        self.loan_free.setdefault(rank, []).extend(slots)

    def _take_loan(self) -> tuple[int, int] | None:
        """A free pool slot (of the rank with the most free ones), else the slot of the
        oldest loaned page nobody holds or waits for (taken back), else None."""
        if self.loan_free:
            rank = max(self.loan_free, key=lambda r: (len(self.loan_free[r]), -r))
            if self.loan_free[rank]:
                self.loans_granted += 1
                return rank, self.loan_free[rank].pop()
        for page, loan in self.loaned.items():
            entry = self._pages.get(page)
            if entry is not None and (entry.writer is not None or entry.readers
                                      or entry.queue):
                continue  # in use: its slot may be read right now
            del self.loaned[page]
            if entry is not None:
                entry.meta = Meta(-1, -1, entry.meta.flushed)
                self.cached -= 1
                if entry.meta == UNCACHED:
                    del self._pages[page]
            self.loans_granted += 1
            self.loans_recycled += 1
            return loan
        return None

    def _settle_loan(self, page: int, loan: tuple[int, int] | None, entry: _PageLock) -> None:
        """After ``page``'s release: a loan made with its grant is recorded as the page's
        slot if the loader published the page there, else it goes back to the pool; a
        loaned page published elsewhere (or uncached) gives its slot back."""
        where = (entry.meta.owner, entry.meta.slot)
        if loan is not None:
            if where == loan:
                self.loaned[page] = loan
                return
            self.loans_returned += 1
            self.loan_free.setdefault(loan[0], []).append(loan[1])
        if page in self.loaned and self.loaned[page] != where:
            r, s = self.loaned.pop(page)
            self.loan_free.setdefault(r, []).append(s)

    def keep_victim(self, page: int, data: bytes,
                    room: tuple[int, int] | None) -> None:
        """Keep the bytes of ``page``, just evicted and now cached nowhere (issue 32's
        victim cache). A rank that runs ahead of the others fills its slots with pages
        they have not read yet and evicts them while their slots stand empty (over the
        netns harness at 32 clients, with the read-ahead placement rule, read-ahead
        evicted nothing and pages were read 2.8-3.3x touched). The home sees every eviction (the evictor holds the page's
        lock and releases it here), so the bytes ride on that release and on the next
        exclusive grant of the page (:meth:`_grant`), in place of a second file read.

        ``room`` is ``(homes, slots)``: how many homes share the pages and the group's
        slots. The home keeps at most ``slots // homes - cached`` victims — its share of
        the slots the group leaves free — dropping its oldest ones for newer (LRU, as
        a victim cache), so the group's cached pages and victims together stay within
        its slots: no more memory than the caches were given, the part other ranks do
        not use. None (bytes given back unused by a rank that held the page): kept as
        before the grant."""
        if room is not None:
            self.victim_room = room
            if self._victim_cap() <= 0:
                self.victims_refused += 1
                self._trim()
                return
            self.victims_kept += 1
        self.victims[page] = data
        self.victims.move_to_end(page)
        self._trim()

    def _victim_cap(self) -> int:
        if self.victim_room is None:
            return len(self.victims)
        homes, slots = self.victim_room
        return max(0, slots // max(1, homes) - self.cached)

    def _trim(self) -> None:
        """Drop the oldest victims past the room left (pages cached here since count)."""
        if self.victims:
            cap = self._victim_cap()
            while len(self.victims) > cap:
                self.victims.popitem(last=False)
                self.victims_dropped += 1

    def release(self, page: int, src: int, meta: Meta | None,
                victim: tuple[bytes, tuple[int, int] | None] | None = None,
                ) -> list[tuple[int, Meta | list[Meta | None]]]:
        """Drop ``src``'s lock (recording ``meta`` if given); the waiters to answer now:
        ``(rank, metadata)`` for a single request, ``(rank, results)`` for a batch whose
        last page was granted (a batch that must wait again for a later page is not listed).

        Raises:
            RuntimeError: when ``src`` does not hold the page (a protocol bug).
        """
        entry = self._get(page)
        loan = None
        if entry.writer == src:
            entry.writer = None
            entry.claimed = False
            loan = self.loan_pending.pop(page, None)
        elif src in entry.readers:
            entry.readers.discard(src)
        else:
            raise RuntimeError(f"rank {src} released page {page} it does not hold")
        if meta is not None:
            self.cached += (meta.owner >= 0) - (entry.meta.owner >= 0)
            entry.meta = meta
        if loan is not None or (meta is not None and page in self.loaned):
            self._settle_loan(page, loan, entry)
        if victim is not None and entry.meta.owner < 0 and entry.writer is None:
            # (before the waiters are granted: a reader queued behind the eviction gets it)
            self.keep_victim(page, *victim)
        elif self.victims and meta is not None and meta.owner >= 0:
            self._trim()  # (one more page cached here: less room for victims)
        return self._grant_waiters(page, entry)

    def _grant_waiters(self, page: int,
                       entry: _PageLock) -> list[tuple[int, Meta | list[Meta | None]]]:
        granted: list[tuple[int, Meta | list[Meta | None]]] = []
        while entry.queue and self._free_for(entry, entry.queue[0][1]):
            who, mode, batch = entry.queue.popleft()
            excl = entry.exclusive(mode)
            self._grant(page, entry, who, mode)
            if batch is None:
                granted.append((who, entry.meta))
            else:
                batch.waiting = None  # (no longer waiting for a load)
                batch.results.append(entry.meta)
                if self._advance(batch):  # its other pages are other entries
                    granted.append((who, batch.results))
            if excl:
                break
        if entry.writer is None and not entry.readers and not entry.queue \
                and entry.meta == UNCACHED:
            del self._pages[page]
        elif entry.queue:
            self._arm(page, entry)
        return granted

    def _arm(self, page: int, entry: _PageLock) -> None:
        """Queued reads that may read around start (or go on with) their wait for a load
        when the page they queue at has become one being loaded meanwhile (a writer ahead
        of them was granted it after its copy was evicted): that loader, too, holds them
        no longer than their bound (issue 32; found by the lock home's state machine)."""
        if not entry.loading():
            return
        for _, _, batch in entry.queue:
            if batch is None or batch.waiting is not None \
                    or (wait := self._wait_left(batch)) is None:
                continue
            if batch.until is None:
                batch.until = self.clock() + wait
            batch.waiting = (batch.until, page)
            self._timed_seq += 1
            heapq.heappush(self.timed, (batch.until, self._timed_seq, page, batch))
            self.load_waits += 1

    def holders(self, page: int) -> tuple[int | None, set[int]]:
        entry = self._get(page)
        return entry.writer, set(entry.readers)
