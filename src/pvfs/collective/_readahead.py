"""Read-ahead for the group cache: load the next pages of a sequential stream early.

Session s14 found the sliding window on a slow disk losing to independent reads at 8 ranks
because the cache never asks the disks for a page before some rank needs it: one rank per
daemon issues each miss and issues the next only after the window's other reads, so the
disks idled 30 % of the run. Read-ahead keeps them fed: a rank whose reads run forward
loads the pages ahead of them into its own slots, asynchronously, while it goes on.

Two parts:

* :class:`ReadWindow` — sequential-stream detection and the window size, per rank and
  file, after Linux's on-demand read-ahead (``mm/readahead.c``): no read-ahead for a
  stream's first read or a random one; a read that moves the stream's front forward (it
  starts at or behind the front, or inside what was read ahead) is a sequential hit and
  doubles the window from a small start up to a maximum; a read that jumps past
  everything read or read ahead, or far behind the front, resets it. A read that stays
  behind the front (a re-read, as the sliding window's circular shift does) changes
  nothing. The window is topped up in halves, so the pages go out in few, large reads.
* :class:`Prefetcher` — the loads. For each page to read ahead the main thread *claims*
  it: the page is locked exclusively only if it is unlocked (with no waiter) and cached
  nowhere, and this rank is published as its owner under that lock (a page that is
  locked or cached anywhere is skipped: one copy in the group; a page whose evicted copy
  its home keeps — the victim cache — is claimed with that copy, cached without a file
  read, s30; when the first page of the
  range is taken, another rank's stream leads and the whole range is left to it, so each
  part of the file is read ahead by one rank in few reads). Consecutive claimed pages
  are read with one file read by a helper thread, which then *releases* them itself (the
  lock's writer bit dropped, or the page marked uncached again if the read failed): a
  prefetch lock never waits on this rank's main thread, so it cannot deadlock with what
  the main thread waits for, whatever the application does meanwhile. Readers that meet
  a claimed page wait for it as for any load (a page being read ahead is as good as
  loaded): up to their bound, past which they read it around (issue 32: a stalled helper
  thread holds nobody up; the home knows the claim, the ``rma`` word has a LOADING bit). A claimed
  page lies past every write that completed before the claim (it was cached nowhere, so
  those writes are in the file); writes after it wait for the lock and go to the copy:
  a prefetched page is never stale. The main thread moves finished pages into its LRU
  list (evictable from then on) at the start of its next access, and waits for the
  prefetches a request needs before locking (no lock held: deadlock-free).

  *Where the pages go* (issue 32): a rank reads ahead into its free slots; with none
  left it asks the homes with ``room``, and a home that estimates the rest of the group
  has room for the range while other ranks read the file claims nothing — the range is
  left to a stream whose rank has free slots (message back ends; the ``rma`` words keep
  no count, so there it evicts as before). Without it the fastest rank led nearly every
  range over the netns harness, read ahead 800 pages into its 128 slots and evicted
  pages slower ranks then read from the file again (pages read 1.6-3.6x touched at
  16-32 clients).

Every coordination's lock table offers the two calls (``claim_pages``, ``release_claims``):
``rma`` claims with one compare-and-swap a page and releases with one ``Fetch_and_op``
(:mod:`._rma`); the message back ends send one ``claim`` batch per home (the first page's
home first, where the lead rule is decided, then the others at once) and release with one ``unlock`` message per home, which the helper thread sends itself
(:mod:`._msgclient`, :meth:`~pvfs.collective._locks.LockManager.claim_batch`): a claim is
answered at once and never queues, a release needs no reply, so the helper thread never
waits for another process either. The helper thread needs MPI_THREAD_MULTIPLE.
"""

from __future__ import annotations

import os
import queue
import threading
from dataclasses import dataclass, field
from typing import Any

from pvfs.collective._pages import Meta

#: ``PVFS_COLLECTIVE_READAHEAD``: the largest read-ahead window in bytes (0: off), unless
#: ``open(readahead=...)`` says otherwise.
READAHEAD_ENV = "PVFS_COLLECTIVE_READAHEAD"
#: ``PVFS_COLLECTIVE_READAHEAD_BALANCE=0``: read-ahead evicts for its pages whenever it has
#: no free slot (before issue 32's fix; the A/B)
BALANCE_ENV = "PVFS_COLLECTIVE_READAHEAD_BALANCE"
#: ``PVFS_COLLECTIVE_READAHEAD_ALIGN=0``: reads ahead not aligned to stripe rows (A/B).
ALIGN_ENV = "PVFS_COLLECTIVE_READAHEAD_ALIGN"
#: The default largest window (bytes): Linux's default is 128 KiB of 4 KiB pages (32
#: pages); 32 cache pages here.
DEFAULT_BYTES = 1 << 20
#: The coordinations with read-ahead on by default: all three. It is what keeps slow disks
#: fed (docs/collective.md: the sliding window on emulated ide-2000 disks with their cache,
#: s15-s16: ``rma`` 1.3-1.7x of independent reads with it, 1.0-1.1x without; ``servers``
#: 1.2-1.4x against 0.6-0.9x; ``thread`` 1.03-1.11x against 0.70-0.73x). Where the I/O
#: daemons' page cache holds the whole file (posix, s17, quiet) it costs the message back
#: ends at most ~4 % (``thread`` at 8 ranks) and gains up to ~29 % (2 ranks).
DEFAULT_ON: tuple[str, ...] = ("rma", "servers", "thread")


def configured(readahead: int | None, coordination: str = "rma") -> int:
    """The largest read-ahead window in bytes from ``open``'s ``readahead`` (None: the
    environment, else the default of ``coordination``); 0 means off.

    Raises:
        ValueError: a negative size, or an environment value that is not a number.
    """
    if readahead is None:
        env = os.environ.get(READAHEAD_ENV)
        if env is None:
            return DEFAULT_BYTES if coordination in DEFAULT_ON else 0
        try:
            readahead = int(float(env))
        except ValueError:
            raise ValueError(f"{READAHEAD_ENV}={env!r} is not a number of bytes") from None
    if readahead < 0:
        raise ValueError("readahead must be a size in bytes >= 0")
    return int(readahead)


class ReadWindow:
    """One rank's read stream over one file and its read-ahead window, in pages.

    ``on_read(first, last)`` after every read returns the pages to read ahead,
    ``(start, end)``, or None.
    """

    def __init__(self, max_pages: int, init_pages: int = 4, align: int = 1) -> None:
        self.max = max(0, max_pages)
        #: a read ahead ends at a multiple of this many pages (a stripe row), so the next
        #: one starts there and no stripe unit is split between two reads ahead (none
        #: when a row is more than the largest window: the window bounds what is read)
        self.align = align if 1 <= align <= self.max else 1
        self.init = max(1, min(self.max, init_pages)) if self.max else 0
        self.front: int | None = None  # one past the furthest page read (None: no stream)
        self.size = 0  # the window; 0: no sequential stream (yet)
        self.end = 0  # one past the last page read ahead (asked for) in this stream
        self.resets = 0

    def _restart(self, last: int) -> None:
        self.front = self.end = last + 1
        self.size = 0

    def on_read(self, first: int, last: int) -> tuple[int, int] | None:
        if not self.max or last < first:
            return None
        if self.front is None:
            self._restart(last)  # a stream's first read: nothing is known yet
            return None
        ahead = max(self.front, self.end)
        if first > ahead or first < self.front - self.max:
            self.resets += 1  # random: past everything read or read ahead, or far behind
            self._restart(last)
            return None
        if last < self.front:
            return None  # a re-read behind the front: the stream neither grows nor resets
        self.front = last + 1
        self.size = min(self.max, max(self.init, 2 * (last - first + 1))) if not self.size \
            else min(self.max, 2 * self.size)
        start, target = max(self.end, self.front), self.front + self.size
        if target - start < max(1, self.size // 2):
            return None  # topped up in halves of the window: fewer, larger reads
        target = -(-target // self.align) * self.align
        self.end = target
        return start, target


@dataclass
class _Job:
    """Consecutive claimed pages, read with one file read."""

    first: int
    slots: list[int]
    flushed: list[bool]
    done: threading.Event = field(default_factory=threading.Event)
    ok: bool = False
    #: one page's bytes from its home's victim copy (s30): cached without a file read
    copy: bytes | None = None


class Prefetcher:
    """Claims, reads and releases read-ahead pages for one :class:`PageCache` (see the
    module docstring). ``cache`` gives ``rank``, ``ps``, ``size_at_open``, ``fs``,
    ``locks`` (with ``claim_pages`` and ``release_claims``), ``data``, ``lru``, ``free``,
    ``load_times`` and ``_alloc_slot``."""

    def __init__(self, cache: Any, max_pages: int, align: int = 1) -> None:
        self.cache = cache
        if os.environ.get(ALIGN_ENV) == "0":
            align = 1
        self.window = ReadWindow(max_pages, align=align)
        self.inflight: dict[int, _Job] = {}
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._done: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self.pages = self.reads = self.skipped = self.waits = self.failed = 0
        self.unclaimed = 0  # pages claimed, then given back unread (lead rule, no slot)
        self.evictions = 0  # pages this rank evicted to read ahead (of the cache's evictions)
        self.lead_lost = 0  # ranges left to another stream (their first page was taken)
        self.copies = 0  # pages read ahead from a victim copy the claim took (no file read)
        self.error: BaseException | None = None
        #: issue 32: read ahead only into free slots while the rest of the group has room
        #: (``PVFS_COLLECTIVE_READAHEAD_BALANCE=0``: evict for it whenever, as before)
        self.balance = os.environ.get(BALANCE_ENV, "1") != "0"
        #: a release that failed: its pages stay locked, so the main thread raises it
        self.fatal: BaseException | None = None

    # ------------------------------------------------------------------ main thread
    def after_read(self, first: int, last: int) -> None:
        """A read of pages ``first..last`` finished (its locks released): maybe read ahead."""
        want = self.window.on_read(first, last)
        if want is not None:
            self._issue(*want)

    def _issue(self, start: int, end: int) -> None:
        c = self.cache
        limit = -(-c.size_at_open // c.ps)  # pages past the size at open are zeros
        pages = []
        for page in range(start, min(end, limit)):
            if page in self.inflight or page in c.lru:
                self.skipped += 1
            else:
                pages.append(page)
        if not pages:
            return
        room = None
        if self.balance and len(c.free) < len(pages):
            if c.free:
                pages = pages[:len(c.free)]  # what fits without evicting
            else:
                # Reading ahead would evict (issue 32): the homes that can tell leave the
                # range to a rank with free slots while the group has room for it.
                room = (c.n * c.nslots, c.nslots)  # (the group's slots, this rank's)
        # Claim first (one CAS a page, or one message per home; slots filled in at the
        # release): a page locked or cached somewhere is skipped before a slot is freed.
        lead = pages[0] == start
        refused = 0
        if room is None:
            claims = c.locks.claim_pages(pages, c.rank, lead)
        else:
            refused = getattr(c.locks, "room_refusals", 0)
            claims = c.locks.claim_pages(pages, c.rank, lead, room)
        # Victim copies the claims took (message homes, s30): cached from them, no read.
        kept = getattr(c.locks, "claim_copies", None)
        copies = {p: kept.pop(p) for p in pages if p in kept} if kept else {}
        if room is not None and getattr(c.locks, "room_refusals", 0) > refused:
            # Left to a rank with room. Without the lead rule every home was asked at
            # once and decided alone: what the others claimed goes back (s30: it stayed
            # claimed — locked, published as cached here — for good).
            self._unclaim(pages, claims, copies)
            return
        if lead and claims[0] is None:
            # Another stream got here first and leads: leave the range to it. Streams
            # that shared ranges split them into small reads that reached a daemon out of
            # order (s15: 88 disk accesses instead of 80 at 4 ranks on the emulated disk
            # with its cache, 80 this way). (Message homes ask the first page's home
            # first; a lock table that asked others meanwhile has them given back.)
            self.skipped += 1
            self.lead_lost += 1
            self._unclaim(pages, claims, copies)
            return
        run: _Job | None = None
        for i, (page, flushed) in enumerate(zip(pages, claims, strict=True)):
            if flushed is None:  # locked or cached somewhere: one copy in the group
                self.skipped += 1
                continue
            evicted = c.evictions
            slot = c._alloc_slot()
            self.evictions += c.evictions - evicted
            if slot is None:  # every slot pinned: no room to read ahead
                self._unclaim(pages[i:], claims[i:], copies)
                break
            c.data.clean(slot)
            if page in copies:  # the home's victim copy came with the claim: no file read
                self._submit(run)
                run = None
                job = _Job(page, [slot], [flushed], copy=copies.pop(page))
                self.inflight[page] = job
                self.pages += 1
                self.copies += 1
                self._submit(job)
                continue
            if run is not None and run.first + len(run.slots) == page:
                run.slots.append(slot)
                run.flushed.append(flushed)
            else:
                self._submit(run)
                run = _Job(page, [slot], [flushed])
            self.inflight[page] = run
            self.pages += 1
        self._submit(run)

    def _unclaim(self, pages: list[int], claims: list[bool | None],
                 copies: dict[int, bytes] | None = None) -> None:
        """Give back claims that will not be read (uncached again, as they were); a
        victim copy a claim took goes back to its home with the release."""
        back = [(p, Meta(-1, -1, f)) for p, f in zip(pages, claims, strict=True)
                if f is not None]
        if back:
            self.unclaimed += len(back)
            given = {p: (copies.pop(p), None) for p, _ in back if copies and p in copies}
            if given:
                self.cache.locks.unlock_set([(p, True, m) for p, m in back], given)
            else:
                self.cache.locks.release_claims(back)

    def _submit(self, job: _Job | None) -> None:
        if job is None:
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="pvfs-readahead",
                                            daemon=True)
            self._thread.start()
        self.reads += 1
        self._jobs.put(job)

    def collect(self) -> None:
        """Finished prefetches: their pages into the LRU list (evictable), or their slots
        back to the free list when the read failed."""
        if self.fatal is not None:
            raise RuntimeError(f"read-ahead release failed: {self.fatal!r}") from self.fatal
        while True:
            try:
                job = self._done.get_nowait()
            except queue.Empty:
                return
            for k, slot in enumerate(job.slots):
                page = job.first + k
                if self.inflight.get(page) is job:
                    del self.inflight[page]
                if job.ok:
                    self.cache.lru.add(page, slot)
                else:
                    self.cache.free.append(slot)

    def wait_for(self, pages: list[int]) -> None:
        """Wait for this rank's prefetches of ``pages`` (call with no page lock held)."""
        jobs = {id(j): j for p in pages if (j := self.inflight.get(p)) is not None}
        for job in jobs.values():
            if not job.done.is_set():
                self.waits += 1
            job.done.wait()
        self.collect()

    def drain(self) -> None:
        """Wait for every prefetch of this rank (before sync, flushes and close)."""
        self.wait_for(list(self.inflight))

    def close(self) -> None:
        self.drain()
        if self._thread is not None:
            self._jobs.put(None)
            self._thread.join()
            self._thread = None

    def counters(self) -> dict[str, int]:
        return {"ra_pages": self.pages, "ra_reads": self.reads, "ra_skipped": self.skipped,
                "ra_waits": self.waits, "ra_failed": self.failed,
                "ra_unclaimed": self.unclaimed, "ra_lead_lost": self.lead_lost,
                "ra_resets": self.window.resets,
                "ra_room_refused": getattr(self.cache.locks, "room_refusals", 0),
                "ra_evictions": self.evictions, "ra_copies": self.copies}

    # ------------------------------------------------------------------ helper thread
    def _run(self) -> None:
        c = self.cache
        while (job := self._jobs.get()) is not None:
            try:
                n = len(job.slots)
                if job.copy is not None:
                    buf = bytearray(job.copy)  # (the home's victim copy: no file read)
                else:
                    buf = bytearray(n * c.ps)
                    got = c.fs.preadinto(memoryview(buf), job.first * c.ps)
                    buf[got:] = bytes(len(buf) - got)  # zeros past the end of the file
                for k, slot in enumerate(job.slots):
                    c.data.view(slot)[:] = buf[k * c.ps:(k + 1) * c.ps]
                job.ok = True
            except BaseException as exc:  # noqa: BLE001 - a failed prefetch only uncaches
                self.error = exc
                self.failed += 1
            try:
                # One release per page (rma) or one message per home (message back ends).
                c.locks.release_claims(
                    [(job.first + k, Meta(c.rank, slot, job.flushed[k]) if job.ok else
                      Meta(-1, -1, job.flushed[k])) for k, slot in enumerate(job.slots)])
            except BaseException as exc:  # noqa: BLE001 - raised in the main thread
                self.fatal = exc
            job.done.set()
            self._done.put(job)
