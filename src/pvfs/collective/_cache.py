"""The single-copy collective page cache (DAChe §5, MPI-IO caching §3).

Every rank keeps up to ``nslots`` pages in its slots; the metadata of page ``p`` (where it is
cached, if anywhere) lives with its home, and at most one rank caches a page, so every access
to it — local copy or remote ``get``/``put`` — is coherent. An access:

1. cuts its regions into per-page pieces and takes the page locks in increasing page order,
   shared for a read and exclusive for a write, all before any byte moves and released after
   the last (two-phase locking). With ``atomic`` the lock set is the whole request, so a
   non-contiguous request is all-or-nothing for every other request; without it
   consecutive regions share a lock set of up to ``LOCKSET_PAGES`` pages;
2. a read that finds the page uncached holds it exclusively instead (``Locks.lock_read``;
   before asking for the next page, so the order stays increasing) and caches it itself:
   takes a free slot or evicts its least recently used page, reading the page from the file
   unless a write covers it whole or the page lies past the size at open and was never
   flushed — or unless the page's home kept a copy when some rank evicted it (message back
   ends, issue 32's victim cache: the eviction's release carries the page's bytes, the
   home keeps them in the room the group's slots leave free and hands them over with the
   next exclusive grant; see ``LockManager.keep_victim``; on with
   ``PVFS_COLLECTIVE_VICTIMS=1``);
   (consecutive pages the request loads come from the file in one read); a rank short of
   free slots in a read-only ``servers`` open asks in LOAN mode and loads the page into a
   slot another rank lent to the homes' pool instead of evicting (issue 32's loan slots,
   s31: see ``LockManager.lend``);
3. copies the bytes locally, or remotely at the owner; the lock it holds is the pin that
   keeps the owner from evicting the page meanwhile (eviction only ``try``-locks, and skips a
   pinned page).

A non-atomic read that finds a page locked while it is cached nowhere (another rank is
loading it, or writing it straight to the file) waits for the loader's copy, up to a bound
(:data:`~pvfs.collective._loadwaits.LOAD_BOUND`, issue 32: one file read per page while the
loader is alive); past it — the loader died or stalled — it reads that page from the file
("read around", counted as ``load_stalls``): every completed write to such a page is in
the file, so this is what independent I/O would return. (Sessions s13-s17 read around
after about two load times instead; ``PVFS_COLLECTIVE_LOAD_WAIT=adaptive``.)

Dirty bytes of a slot are a high-water range ``[lo, hi)``. ``sync`` writes each rank's own
dirty pages; ``close`` does the two-phase flush: dirty pages are shuffled so that the pages of
one flush group (by default a stripe row: ``pcount`` pages of one stripe unit) end on one
rank, which writes each contiguous run with one aligned write.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

from pvfs.collective._fsio import CountingFile
from pvfs.collective._loadwaits import LoadTimes
from pvfs.collective._locks import victims_on
from pvfs.collective._pages import Dirty, Lru, Meta, Piece, by_page, merge_runs, split
from pvfs.collective._readahead import Prefetcher

#: Pages one lock set may span outside atomic mode (regions are never split between sets).
LOCKSET_PAGES = 16


class Locks(Protocol):
    lock_calls: int
    retries: int

    def lock(self, page: int, excl: bool, around: bool | float = False) -> Meta | None: ...
    def lock_read(self, page: int, around: bool | float) -> tuple[Meta | None, bool]: ...
    def lock_set(self, pages: list[int], write: bool, around: bool | float,
                 wants: dict[int, list[tuple[int, int]]] | None = None,
                 ) -> list[tuple[Meta | None, bool]]: ...
    def try_lock(self, page: int) -> Meta | None: ...
    def unlock(self, page: int, excl: bool, meta: Meta | None) -> None: ...
    def unlock_set(self, held: list[tuple[int, bool, Meta | None]]) -> None: ...
    def close(self) -> None: ...


class Data(Protocol):
    remote_gets: int
    remote_puts: int

    def view(self, slot: int) -> memoryview: ...
    def get_many(self, owner: int, slot: int, parts: list[tuple[int, memoryview]]) -> None: ...
    def put_many(self, owner: int, slot: int, parts: list[tuple[int, memoryview]]) -> None: ...
    def transfer(self, write: bool,
                 by_owner: dict[int, list[tuple[int, list[tuple[int, memoryview]]]]]) -> None: ...
    def dirty(self, slot: int) -> Dirty: ...
    def mark(self, slot: int, lo: int, hi: int) -> None: ...
    def clean(self, slot: int) -> None: ...
    def close(self) -> None: ...


@dataclass
class _Held:
    excl: bool
    meta: Meta
    new: Meta | None = None  # metadata to publish at unlock


def _covers(pieces: list[Piece], page_size: int) -> bool:
    end = 0
    for p in sorted(pieces, key=lambda p: p.off):
        if p.off > end:
            return False
        end = max(end, p.off + p.length)
    return end >= page_size


class PageCache:
    """One rank's part of the group cache."""

    def __init__(self, rank: int, nranks: int, fs: CountingFile, locks: Locks, data: Data,
                 nslots: int, page_size: int, size_at_open: int, atomic: bool,
                 readahead: int = 0, align: int = 1, loans: bool = False) -> None:
        self.rank, self.n = rank, nranks
        self.fs, self.locks, self.data = fs, locks, data
        self.ps = page_size
        self.size_at_open = size_at_open
        self.atomic = atomic
        self.nslots = nslots
        #: issue 32's loan slots (read-only opens, ``servers``): the top quarter of this
        #: rank's slots is lent to the homes' pools and leaves its free list; a read short
        #: of free slots asks in LOAN mode and loads a page into the slot lent with its
        #: grant (possibly another rank's) instead of evicting
        lend = nslots // 4 if loans and hasattr(locks, "lend") and \
            hasattr(data, "put_pages") else 0
        self.loan_slots = lend
        self.free = list(range(nslots - lend - 1, -1, -1))
        self.loaned = 0  # pages this rank loaded into a loan slot
        self._loaded: dict[int, bytes] = {}  # this access' loaned pages' bytes
        if lend:
            locks.lend(rank, list(range(nslots - lend, nslots)))  # type: ignore[attr-defined]
        self.lru = Lru()
        self.held: dict[int, _Held] = {}
        self.around: set[int] = set()  # pages this access reads from the file, unlocked
        self.read_around = 0
        #: pages read around after waiting the whole bound for their loader (copy rule)
        self.load_stalls = 0
        #: this rank's load durations: how long its reads wait for other ranks' loads
        self.load_times = LoadTimes.from_env()
        self.hits = self.remote_hits = self.misses = self.direct = 0
        self.evictions = self.evict_pinned = 0
        self.remote_carried = 0  # remote pages read from bytes that came with the lock
        #: issue 32's victim cache (message back ends: ``release_victim`` on the lock
        #: table): an eviction sends the page's bytes to its home, which hands them to the
        #: next rank granted the page exclusively, in place of a file read
        self.victims = victims_on() and hasattr(locks, "release_victim")
        self.victims_sent = 0  # evictions that sent their page to the home
        self.victim_hits = 0  # pages cached from a victim copy instead of the file
        self._handed: dict[int, bytes] = {}  # this access' victims (take_victims)
        self._unused: dict[int, bytes] = {}  # ... not cached here (no slot): given back
        self._loans: dict[int, tuple[int, int]] = {}  # this access' loan slots (lend)
        #: one record per locked access when a list (tracing, see :meth:`_record`)
        self.trace: list[dict[str, Any]] | None = None
        #: ``(time, page)`` of every eviction when a list (tracing)
        self.evict_log: list[tuple[float, int]] | None = None
        #: read-ahead (``readahead``: the largest window in bytes; at most a quarter of the
        #: slots, so reading ahead never flushes the whole cache); None when off
        pages = min(readahead // page_size, nslots // 4)
        self.ra: Prefetcher | None = Prefetcher(self, pages, align) if pages > 0 else None

    # ------------------------------------------------------------------ access
    def read(self, regions: list[tuple[int, int]]) -> bytearray:
        buf = bytearray(sum(n for _, n in regions))
        self._access(regions, memoryview(buf), write=False)
        return buf

    def write(self, regions: list[tuple[int, int]], data: memoryview) -> None:
        self._access(regions, data, write=True)

    def _access(self, regions: list[tuple[int, int]], buf: memoryview, write: bool) -> None:
        pieces = split(regions, self.ps)
        if self.ra is not None:
            # Prefetches that finished are evictable now; the ones this request needs are
            # waited for before any lock is taken (their locks are the helper thread's).
            self.ra.collect()
            if self.ra.inflight:
                self.ra.wait_for([p.page for p in pieces])
        self._pieces(regions, pieces, buf, write)
        if self.ra is not None and not write and pieces:
            self.ra.after_read(min(p.page for p in pieces), max(p.page for p in pieces))

    def _pieces(self, regions: list[tuple[int, int]], pieces: list[Piece], buf: memoryview,
                write: bool) -> None:
        # Atomic: the whole request is one lock set. Otherwise consecutive regions share a
        # lock set until it spans LOCKSET_PAGES pages (never splitting a region), so a list
        # request may be seen part-done, as MPI allows without atomic mode, while a long list
        # of small regions does not pay a lock round per region.
        if self.atomic:
            self._locked_access(pieces, buf, write)
            return
        start = 0
        pages: set[int] = set()
        i = 0
        for off, n in regions:
            first, last = off // self.ps, (off + n - 1) // self.ps
            span = {p for p in range(first, last + 1)} if n > 0 else set()
            if pages and len(pages | span) > LOCKSET_PAGES:
                self._locked_access(pieces[start:i], buf, write)
                start, pages = i, set()
            pages |= span
            i += len(span)
        if start < len(pieces):
            self._locked_access(pieces[start:], buf, write)

    def _locked_access(self, pieces: list[Piece], buf: memoryview, write: bool) -> None:
        """Two-phase locking: every page in increasing order, then the bytes, then unlock."""
        groups = by_page(pieces)
        marks = [time.monotonic()] if self.trace is not None else None
        if marks is not None:
            before = (self.load_times.wait(), self.locks.retries)
        try:
            self._acquire(groups, write)
            if marks is not None:
                marks.append(time.monotonic())
                loads = {page for page, _ in groups if page in self.held
                         and self.held[page].meta.owner < 0}
            self._install(groups, write)
            if marks is not None:
                marks.append(time.monotonic())
            if self.around:
                began = time.monotonic()
                self._read_around([p for page, mine in groups if page in self.around
                                   for p in mine], buf)
                # what reading around costs caps how long to wait for a load
                self.load_times.add_around(time.monotonic() - began)
            remote: dict[int, list[tuple[int, list[tuple[int, memoryview]]]]] = {}
            carried = getattr(self.locks, "carried", None) or {}
            for page, mine in groups:
                if page in self.around:
                    continue
                meta = self.held[page].meta
                if page in carried and not write and meta.owner != self.rank:
                    # the bytes came with the lock's grant (thread coordination)
                    for p, blob in zip(mine, carried[page], strict=True):
                        buf[p.buf:p.buf + p.length] = blob
                    self.remote_carried += 1
                elif page in self._loaded and not write:
                    blob = self._loaded[page]  # loaded into a loan slot by this access
                    for p in mine:
                        buf[p.buf:p.buf + p.length] = blob[p.off:p.off + p.length]
                elif meta.owner >= 0 and meta.owner != self.rank:
                    # Remote pieces move together: one message (or one flush) per owner.
                    remote.setdefault(meta.owner, []).append(
                        (meta.slot, [(p.off, buf[p.buf:p.buf + p.length]) for p in mine]))
                else:
                    self._move(page, mine, buf, write)
            if marks is not None:
                marks.append(time.monotonic())
            if remote:
                self.data.transfer(write, remote)
            if marks is not None:
                marks.append(time.monotonic())
                self._record(marks, groups, loads, remote, *before)
        finally:
            self.around.clear()
            self._loaded.clear()
            self._loans = {}  # (one not used goes back to the pool with its release)
            held = sorted(self.held.items(), reverse=True)
            self.held.clear()
            # A victim handed over that this read did not cache (no slot: read from it;
            # or an error before) goes back unused; a write's is stale, dropped.
            back = {} if write else \
                {page: (data, None) for page, data in {**self._handed, **self._unused}.items()
                 if any(page == p for p, _ in held)}
            self._handed, self._unused = {}, {}
            if back:
                self.locks.unlock_set([(page, h.excl, h.new) for page, h in held], back)
            else:
                self.locks.unlock_set([(page, h.excl, h.new) for page, h in held])
            if marks is not None and self.trace:
                self.trace[-1]["t"].append(time.monotonic())

    def _record(self, marks: list[float], groups: list[tuple[int, list[Piece]]],
                loads: set[int], remote: dict[int, Any], wait: float, retries: int) -> None:
        """One access of the trace: ``t`` = start, locks held, pages loaded, read around
        done, remote bytes moved, unlocked; the pages, those this rank loaded (``load``),
        read around (``around``), the owners of remote ones, the wait for a load the access
        had and the lock retries it took."""
        assert self.trace is not None
        self.trace.append({"t": marks, "pages": [page for page, _ in groups],
                           "load": sorted(loads), "around": sorted(self.around),
                           "remote": sorted(remote), "wait": wait,
                           "retries": self.locks.retries - retries})

    def _acquire(self, groups: list[tuple[int, list[Piece]]], write: bool) -> None:
        """Lock the pages of ``groups`` (increasing) in the two-phase order: exclusive for a
        write; for a read shared, or exclusive when the page is cached nowhere (the reader
        caches it: RMA trades up in place, message homes decide at the grant). A read tells
        the lock table which pieces it will take (message homes may send them along)."""
        # A non-atomic read waits for another rank's load of the page up to a bound
        # (LoadTimes.wait: LOAD_BOUND under the copy rule) and then goes to the file: while
        # a page is locked and cached nowhere the file holds every completed write to it
        # (a cached copy is published before its writer unlocks, and an evicted one is
        # written before), so that read returns what independent I/O would, and a loader
        # that died or stalled holds nobody up past the bound. Atomic reads always wait.
        around: bool | float = False if write or self.atomic else self.load_times.wait()
        pages = [page for page, _ in groups]
        wants = {page: [(p.off, p.length) for p in mine] for page, mine in groups}
        if write:
            got = self.locks.lock_set(pages, write, around)
        elif self.loan_slots and len(self.free) < len(pages):
            got = self.locks.lock_set(pages, write, around, wants,
                                      loan=True)  # type: ignore[call-arg]
        else:
            got = self.locks.lock_set(pages, write, around, wants)
        if self.victims:
            self._handed = self.locks.take_victims()  # type: ignore[attr-defined]
        if self.loan_slots:
            self._loans = self.locks.take_loans()  # type: ignore[attr-defined]
        for page, (meta, excl) in zip(pages, got, strict=True):
            if meta is None:
                self.around.add(page)
                self.read_around += 1
                if self.load_times.bound is not None:
                    self.load_stalls += 1
                continue
            self.held[page] = _Held(excl, meta)
            if meta.owner == self.rank:
                self.hits += 1
            elif meta.owner >= 0:
                self.remote_hits += 1

    def _install(self, groups: list[tuple[int, list[Piece]]], write: bool) -> None:
        """Cache every uncached page of the request here; consecutive pages that must come
        from the file are read with one call."""
        # (page, slot or loan slot) to read from the file
        load: list[tuple[int, int | tuple[int, int]]] = []
        puts: list[tuple[int, int, bytes]] = []  # (rank, slot, bytes) into loan slots
        for page, pieces in groups:
            held = self.held.get(page)
            if held is None or held.meta.owner >= 0:
                continue  # read around, or cached already
            self.misses += 1
            kept = self._handed.pop(page, None)  # the page's victim copy, if its home had one
            loan = self._loans.pop(page, None)
            if loan is not None and not write and not self.free:
                # a slot of the loan pool (issue 32): the page goes there, nothing evicted
                # (with a free slot of its own the rank uses that: the loan goes back to
                # the pool with the release, which publishes the page elsewhere)
                self.loaned += 1
                if kept is not None:
                    self.victim_hits += 1
                    puts.append((*loan, kept))
                    self._loaded[page] = kept
                elif held.meta.flushed or page * self.ps < self.size_at_open:
                    load.append((page, loan))
                else:
                    puts.append((*loan, bytes(self.ps)))
                    self._loaded[page] = bytes(self.ps)
                held.new = held.meta = Meta(loan[0], loan[1], held.meta.flushed)
                continue
            slot = self._alloc_slot()
            if slot is None:
                self.direct += 1
                if kept is not None and not write:
                    self._unused[page] = kept  # read from it (_move), then given back
                continue  # no room: this page goes straight to the file, under its lock
            view = self.data.view(slot)
            if write and _covers(pieces, self.ps):
                pass
            elif kept is not None:
                view[:] = kept  # the copy an eviction left at the home: no file read
                self.victim_hits += 1
            elif held.meta.flushed or page * self.ps < self.size_at_open:
                load.append((page, slot))
            else:
                view[:] = bytes(self.ps)
            self.data.clean(slot)
            self.lru.add(page, slot)
            held.new = held.meta = Meta(self.rank, slot, held.meta.flushed)
        began = time.monotonic()
        i = 0
        while i < len(load):
            j = i + 1
            while j < len(load) and load[j][0] == load[j - 1][0] + 1:
                j += 1
            run = bytearray((j - i) * self.ps)
            got = self.fs.preadinto(memoryview(run), load[i][0] * self.ps)
            run[got:] = bytes(len(run) - got)  # zeros past the end of the file
            for k in range(i, j):
                page, where = load[k]
                part = run[(k - i) * self.ps:(k - i + 1) * self.ps]
                if isinstance(where, tuple):
                    self._loaded[page] = blob = bytes(part)
                    puts.append((*where, blob))
                else:
                    self.data.view(where)[:] = part
            i = j
        if puts:  # complete before the unlock publishes the pages there
            self.data.put_pages(puts)  # type: ignore[attr-defined]
        if load:  # (the time these pages stay locked and cached nowhere, near enough)
            self.load_times.add(time.monotonic() - began)

    def _read_around(self, pieces: list[Piece], buf: memoryview) -> None:
        """Read pieces from the file; pieces next to each other in both the file and the
        caller's buffer (one region over consecutive pages) are one read."""
        runs: list[list[int]] = []  # [file offset, buffer offset, length]
        for p in sorted(pieces, key=lambda p: p.buf):
            off = p.page * self.ps + p.off
            if runs and runs[-1][0] + runs[-1][2] == off and runs[-1][1] + runs[-1][2] == p.buf:
                runs[-1][2] += p.length
            else:
                runs.append([off, p.buf, p.length])
        for off, pos, length in runs:
            out = buf[pos:pos + length]
            n = self.fs.preadinto(out, off)
            out[n:] = bytes(length - n)

    def _move(self, page: int, pieces: list[Piece], buf: memoryview, write: bool) -> None:
        base = page * self.ps
        meta = self.held[page].meta
        if meta.owner == self.rank:
            view = self.data.view(meta.slot)
            for p in pieces:
                if write:
                    view[p.off:p.off + p.length] = buf[p.buf:p.buf + p.length]
                    self.data.mark(meta.slot, p.off, p.off + p.length)
                else:
                    buf[p.buf:p.buf + p.length] = view[p.off:p.off + p.length]
            self.lru.touch(page)
        elif meta.owner < 0:
            kept = None if write else self._unused.get(page)
            for p in pieces:
                if kept is not None:
                    buf[p.buf:p.buf + p.length] = kept[p.off:p.off + p.length]
                    continue
                if write:
                    self.fs.pwrite(buf[p.buf:p.buf + p.length], base + p.off)
                else:
                    out = buf[p.buf:p.buf + p.length]
                    n = self.fs.preadinto(out, base + p.off)
                    out[n:] = bytes(len(out) - n)
            if write:
                self.held[page].new = Meta(-1, -1, True)
        else:
            parts = [(p.off, buf[p.buf:p.buf + p.length]) for p in pieces]
            self.data.transfer(write, {meta.owner: [(meta.slot, parts)]})

    # ------------------------------------------------------------------ eviction, flushing
    def _alloc_slot(self) -> int | None:
        if self.free:
            return self.free.pop()
        for victim in self.lru.oldest():
            if victim in self.held:
                continue
            meta = self.locks.try_lock(victim)
            if meta is None:
                self.evict_pinned += 1  # someone is reading or writing it right now
                continue
            slot = self.lru.remove(victim)
            flushed = self._flush_slot(victim, slot) or meta.flushed
            if self.victims:
                # the page's bytes (clean now) to its home's victim cache, with the release
                self.locks.release_victim(  # type: ignore[attr-defined]
                    victim, Meta(-1, -1, flushed), bytes(self.data.view(slot)),
                    self.n * self.nslots)
                self.victims_sent += 1
            else:
                self.locks.unlock(victim, True, Meta(-1, -1, flushed))
            self.evictions += 1
            if self.evict_log is not None:
                self.evict_log.append((time.monotonic(), victim))
            return slot
        return None

    def _flush_slot(self, page: int, slot: int) -> bool:
        d = self.data.dirty(slot)
        if not d:
            return False
        view = self.data.view(slot)
        self.fs.pwrite(view[d.lo:d.hi], page * self.ps + d.lo)
        self.data.clean(slot)
        return True

    def sync(self) -> None:
        """Write this rank's dirty pages (each under its exclusive lock)."""
        if self.ra is not None:
            self.ra.drain()  # (a page read ahead is in the LRU list once finished)
        for page, slot in sorted(self.lru.items()):
            meta = self.locks.lock(page, True)
            flushed = self._flush_slot(page, slot)
            self.locks.unlock(page, True, Meta(meta.owner, meta.slot, meta.flushed or flushed)
                              if flushed else None)

    def dirty_pages(self) -> list[tuple[int, int, bytes]]:
        """``(page, lo, bytes)`` of every dirty local page (for the close shuffle)."""
        if self.ra is not None:
            self.ra.drain()
        out = []
        for page, slot in self.lru.items():
            d = self.data.dirty(slot)
            if d:
                out.append((page, d.lo, bytes(self.data.view(slot)[d.lo:d.hi])))
        return out

    def counters(self) -> dict[str, int]:
        return {"locks": self.locks.lock_calls, "lock_retries": self.locks.retries,
                "lock_rounds": getattr(self.locks, "lock_rounds", self.locks.lock_calls),
                "lock_direct": getattr(self.locks, "direct", 0),
                "hits": self.hits, "remote_hits": self.remote_hits, "misses": self.misses,
                "direct": self.direct, "evictions": self.evictions,
                "evict_pinned": self.evict_pinned, "read_around": self.read_around,
                "load_stalls": self.load_stalls,
                "victims_sent": self.victims_sent, "victim_hits": self.victim_hits,
                "loaned": self.loaned, "loan_slots": self.loan_slots,
                "remote_gets": self.data.remote_gets, "remote_carried": self.remote_carried,
                "remote_puts": self.data.remote_puts,
                "around_wait_us": round(self.load_times.wait() * 1e6),
                "around_read_us": round((self.load_times.around_mean or 0) * 1e6),
                **(self.ra.counters() if self.ra is not None else {})}

    def close(self) -> None:
        """Stop read-ahead (every prefetch finished and released); before the windows go."""
        if self.ra is not None:
            self.ra.close()


def shuffle_flush(comm: Any, fs: CountingFile, dirty: list[tuple[int, int, bytes]],
                  page_size: int, group: int) -> None:
    """Two-phase flush at close: move dirty pages so each flush group is on one rank, then
    write every contiguous run with one write (collective over ``comm``)."""
    n = comm.Get_size()
    outgoing: list[list[tuple[int, bytes]]] = [[] for _ in range(n)]
    for page, lo, data in dirty:
        outgoing[(page // group) % n].append((page * page_size + lo, data))
    incoming = comm.alltoall(outgoing)
    runs = merge_runs(run for part in incoming for run in part)
    for off, data in runs:
        # A run may join several groups' pages only if they are all ours; cut at groups so
        # a write never crosses a flush-group (stripe-row) boundary it does not start at.
        view = memoryview(data)
        pos = 0
        span = group * page_size
        while pos < len(view):
            start = off + pos
            n_bytes = min(len(view) - pos, span - start % span)
            fs.pwrite(view[pos:pos + n_bytes], start)
            pos += n_bytes
