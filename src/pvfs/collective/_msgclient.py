"""The client side of the message back ends: page locks at homes reached with messages
(:class:`MsgLocks`, ``servers`` and ``thread``) and page data at the owners' I/O threads
(:class:`MsgData`, ``thread``). The homes' loop is :mod:`._service`; the protocol is
described there.
"""

from __future__ import annotations

import os
import time
from typing import Any

from pvfs.collective._locks import BUSY, LOAN, READ
from pvfs.collective._pages import Dirty, Meta
from pvfs.collective._service import REPLY, Caller, LocalPages, Service, release_all

_now = time.monotonic  # (the clock of a read's wait for loads; tests replace it)
#: ``PVFS_COLLECTIVE_CLAIM_LEAD_FIRST=0``: read-ahead claims go to every home at once, the
#: first page's home not first (the A/B of s16b)
LEAD_FIRST_ENV = "PVFS_COLLECTIVE_CLAIM_LEAD_FIRST"


class MsgLocks:
    """Page locks and metadata held by homes reached with messages.

    ``local``: this rank's own :class:`Service` (``thread`` coordination), whose lock table
    the main thread uses directly for the pages this rank is home for.
    """

    def __init__(self, caller: Caller, homes: list[int], local: Service | None = None) -> None:
        self.caller = caller
        self.homes = homes
        self.local = local
        self.me = caller.rank
        self.lock_calls = 0  # pages asked for (a page asked again after a busy try counts twice)
        self.retries = 0  # pages asked again in order after a try round found a busy page
        self.lock_rounds = 0  # waits for lock replies (a parallel round counts once)
        self.direct = 0  # lock and unlock batches served without a message (own home)
        # thread coordination: page -> bytes that came with this lock set's replies
        self.carried: dict[int, list[bytes]] = {}
        self.carried_pages = 0
        #: read-ahead: ask the first page's home (where the lead rule is decided) first
        self.lead_first = os.environ.get(LEAD_FIRST_ENV, "1") != "0"
        self.lead_refusals = 0  # ranges another stream led, refused by the first home
        #: read-ahead ranges refused because they would evict while others have room
        self.room_refusals = 0
        #: issue 32's victim cache: page -> bytes a home handed over with an exclusive grant
        #: (the page's copy kept when some rank evicted it); taken by :meth:`take_victims`
        self.victims: dict[int, bytes] = {}
        #: page -> bytes of victim copies read-ahead claims took (s30): the prefetcher
        #: caches them instead of reading the file (taken by ``Prefetcher._issue``)
        self.claim_copies: dict[int, bytes] = {}
        #: issue 32's loan slots: page -> ``(rank, slot)`` a home lent with an exclusive
        #: grant (the page is to be loaded there); taken by :meth:`take_loans`
        self.loans: dict[int, tuple[int, int]] = {}

    def home(self, page: int) -> int:
        return self.homes[page % len(self.homes)]

    # -------------------------------------------------------------- batches to homes
    def _ask(self, home: int, items: list[tuple[int, Any]], around: bool | float,
             try_only: bool,
             wants: Any = None, held: Any = None) -> list[Any] | None:
        """Send one batch; its results if answered at once (own home), else None."""
        if self.local is not None and home == self.me:
            self.direct += 1
            with self.local.mutex:
                if try_only:
                    got = self.local.locks.try_batch(self.me, items, around)
                else:
                    got = self.local.locks.request_batch(self.me, items, around)
                    if got is None:
                        self.local._wants[self.me] = (items, None, None)
                        return got  # (handed victims come with the I/O thread's answer)
                self.victims.update(self.local.locks.handed.pop(self.me, {}))
                self.loans.update(self.local.locks.lent.pop(self.me, {}))
                return got
            # (queued at our own home: the I/O thread answers when a release grants it)
        if self.local is None:
            wants = held = None  # lock servers hold no pages
        self.caller.send(home, ("lock", items, around, try_only, wants, held))
        return None

    def _round(self, asks: dict[int, list[tuple[int, Any]]], around: bool | float,
               try_only: bool, wants: dict[int, Any] | None = None,
               held: Any = None) -> dict[int, list[Any]]:
        """One batch to each home at once (this rank's own home first, so the pages it
        grants can ask for their bytes in the other homes' messages); every home's results.

        ``wants``: page -> pieces a read will take; ``held(home)``: pages already held
        whose bytes that home can send with its reply."""
        out: dict[int, list[Any]] = {}
        waiting = []
        for home in sorted(asks, key=lambda h: h != self.me):
            items = asks[home]
            mine = None if wants is None else \
                {p: wants[p] for p, _ in items if p in wants} or None
            got = self._ask(home, items, around, try_only, mine,
                            held(home, out) if held is not None else None)
            if got is None:
                waiting.append(home)
            else:
                out[home] = got
        if waiting:
            self.lock_rounds += 1
            for home, reply in self.caller.replies(waiting, "lock grants").items():
                out[home] = reply[0]
                self.carried.update(reply[1])
                if len(reply) > 2:
                    self.victims.update(reply[2])
                if len(reply) > 3:
                    self.loans.update(reply[3])
        return out

    def _release(self, back: dict[int, list[tuple[Any, ...]]]) -> None:
        for home, pairs in back.items():
            if self.local is not None and home == self.me:
                self.direct += 1
                with self.local.mutex:
                    grants = release_all(self.local.locks, self.me, pairs)
                    payloads = [(who, self.local.grant_payload(who, res))
                                for who, res in grants]
                for who, payload in payloads:
                    self.caller.send(who, payload, tag=REPLY)
            else:
                self.caller.send(home, ("unlock", pairs))

    def lock_set(self, pages: list[int], write: bool, around: bool | float,
                 wants: dict[int, list[tuple[int, int]]] | None = None,
                 loan: bool = False) -> list[tuple[Meta | None, bool]]:
        """Lock ``pages`` (increasing) for a write (exclusive) or a read (the read mode:
        exclusive while the page is cached nowhere, the reader caches it); per page
        ``(metadata, exclusive)``, ``(None, False)`` for a page to read around.

        Pages of several homes: first one ``try`` batch to every home at once. Pages
        below the first busy one are kept, the ones above it released, and the rest are
        asked for in order, one queued batch per run of consecutive pages of one home
        (a waiter holds only pages below the one it waits for).

        ``wants`` (reads, ``thread``): page -> ``(offset, length)`` pieces to read. A home
        that grants a page cached on its own rank sends those bytes with the grant, and
        pages already held whose copy is on a home asked later are read in the same
        message; what came is in :attr:`carried` (no data round trip for those).

        ``loan`` (a read by a rank short of free slots): the read mode :data:`LOAN`, so a
        page granted exclusively may come with a loan slot (:attr:`loans`)."""
        mode: Any = True if write else LOAN if loan else READ
        items = [(p, mode) for p in pages]
        homes = [self.home(p) for p in pages]
        self.lock_calls += len(pages)
        self.carried = {}
        results: list[Any] = [BUSY] * len(pages)
        start = 0
        if len(set(homes)) > 1:
            start = self._try_every_home(pages, items, homes, results, around, wants)
        self._ask_in_order(pages, items, homes, results, start, write, around, wants)
        self.carried_pages += len(self.carried)
        out: list[tuple[Meta | None, bool]] = []
        for r in results:
            if r is None:
                out.append((None, False))
            else:
                meta = Meta(*r)
                out.append((meta, True if write else meta.owner < 0))
        return out

    def _try_every_home(self, pages: list[int], items: list[tuple[int, Any]],
                        homes: list[int], results: list[Any], around: bool | float,
                        wants: dict[int, list[tuple[int, int]]] | None) -> int:
        """:meth:`lock_set`'s first round: one ``try`` batch to every home at once, its
        results into ``results``; the pages above the first busy one released again (to
        be asked for again in order). The first busy page's index (``len(pages)``: none)."""
        where: dict[int, list[int]] = {}
        for i, h in enumerate(homes):
            where.setdefault(h, []).append(i)
        asks_now = {h: [items[i] for i in ix] for h, ix in where.items()}
        got = self._round(asks_now, around, try_only=True, wants=wants,
                          held=lambda home, done: self._held_on(home, done, asks_now, pages,
                                                                results, wants))
        for h, ix in where.items():
            for i, r in zip(ix, got[h], strict=False):
                results[i] = r
        start = next((i for i, r in enumerate(results) if r is BUSY), len(pages))
        back: dict[int, list[tuple[int, tuple | None]]] = {}
        for i in range(start + 1, len(pages)):
            if results[i] is not BUSY and results[i] is not None:
                # (a victim handed with this grant goes back with the release, unused)
                victim = self.victims.pop(pages[i], None)
                self.loans.pop(pages[i], None)  # (a loan goes back with the release)
                back.setdefault(homes[i], []).append(
                    (pages[i], None) if victim is None else (pages[i], None, (victim, None)))
            results[i] = BUSY
            self.carried.pop(pages[i], None)
        self._release(back)
        self.retries += len(pages) - start
        self.lock_calls += len(pages) - start
        return start

    def _ask_in_order(self, pages: list[int], items: list[tuple[int, Any]],
                      homes: list[int], results: list[Any], start: int, write: bool,
                      around: bool | float,
                      wants: dict[int, list[tuple[int, int]]] | None) -> None:
        """:meth:`lock_set`'s queued rounds: from ``start`` on, one batch per run of
        consecutive pages of one home, in order; their results into ``results``."""
        i = start
        # The reader's wait for loads is one budget for the whole set: each queued batch
        # carries what is left of it (a home starts a batch's clock at its first wait).
        wait_end = _now() + around \
            if isinstance(around, float) and not write else None
        while i < len(pages):
            j = i + 1
            while j < len(pages) and homes[j] == homes[i]:
                j += 1
            left = around if wait_end is None else max(0.0, wait_end - _now())
            results[i:j] = self._round({homes[i]: items[i:j]}, left, try_only=False,
                                       wants=wants,
                                       held=lambda home, done: self._held_on(
                                           home, done, {}, pages, results, wants))[homes[i]]
            i = j

    def _held_on(self, home: int, got: dict[int, list[Any]],
                 asks_now: dict[int, list[tuple[int, Any]]], pages: list[int],
                 results: list[Any], wants: dict[int, list[tuple[int, int]]] | None,
                 ) -> list[Any] | None:
        """``held`` of :meth:`_round` for a lock set: pages already granted (shared: cached
        somewhere) whose copy is on ``home``, in this round (``got`` of ``asks_now``) or an
        earlier one (``results``), with the pieces a read wants of them."""
        if wants is None or self.local is None:
            return None
        out = []
        for h, res in got.items():
            for (p, _), r in zip(asks_now[h], res, strict=False):
                if r is not BUSY and r is not None and r[0] == home and p in wants \
                        and p not in self.carried:
                    out.append((p, r[1], wants[p]))
        for i, r in enumerate(results):
            p = pages[i]
            if r is not BUSY and r is not None and r[0] == home and wants and \
                    p in wants and p not in self.carried:
                out.append((p, r[1], wants[p]))
        return out or None

    def unlock_set(self, held: list[tuple[int, bool, Meta | None]],
                   victims: dict[int, tuple[bytes, tuple[int, int] | None]] | None = None,
                   ) -> None:
        """Release pages; one message per home (none for this rank's own home).
        ``victims``: page -> ``(bytes, room)`` for the home's victim cache (an eviction's
        copy with ``room``, or a handed victim given back unused with None)."""
        back: dict[int, list[tuple[Any, ...]]] = {}
        for page, _, meta in held:
            pair: tuple[Any, ...] = (page, None if meta is None else tuple(meta))
            if victims and page in victims:
                pair = (*pair, victims[page])
            back.setdefault(self.home(page), []).append(pair)
        self._release(back)

    def lend(self, rank: int, slots: list[int]) -> None:
        """Lend ``slots`` of ``rank`` to the homes' loan pools (issue 32's loan slots:
        :meth:`LockManager.lend`), spread evenly over the homes; sent before this rank's
        first lock request, so each home has them before it can grant this rank a page."""
        homes = sorted(set(self.homes))
        share: dict[int, list[int]] = {}
        for i, slot in enumerate(slots):
            share.setdefault(homes[(rank + i) % len(homes)], []).append(slot)
        for home, mine in share.items():
            if self.local is not None and home == self.me:
                with self.local.mutex:
                    self.local.locks.lend(rank, mine)
            else:
                self.caller.send(home, ("lend", rank, mine))

    def take_loans(self) -> dict[int, tuple[int, int]]:
        """The loan slots lent with this rank's grants since the last call."""
        out, self.loans = self.loans, {}
        return out

    def take_victims(self) -> dict[int, bytes]:
        """The victims handed over with this rank's grants since the last call."""
        out, self.victims = self.victims, {}
        return out

    def release_victim(self, page: int, meta: Meta, data: bytes, slots: int) -> None:
        """An eviction's release of ``page`` (held exclusively, now cached nowhere) with
        the page's bytes for its home's victim cache; ``slots``: the group's slots (the
        home keeps victims only in the room the group leaves free)."""
        self.unlock_set([(page, True, meta)], {page: (data, (len(self.homes), slots))})

    # -------------------------------------------------------------- read-ahead claims
    def claim_pages(self, pages: list[int], owner: int, lead: bool = False,
                    room: tuple[int, int] | None = None) -> list[bool | None]:
        """Read-ahead claims (:meth:`LockManager.claim_batch`): one message per home (this
        rank's own home directly); per page its flushed bit, or None when it is locked or
        cached somewhere.

        ``lead`` is decided at the first page's home, so that home is asked alone first
        and the others only when it claims the first page: a range another stream leads
        costs one message, not a claim and a release at every home (s16: up to 138 claims
        given back per run with ``thread`` at 4 ranks). Without ``lead`` (or with
        ``PVFS_COLLECTIVE_CLAIM_LEAD_FIRST=0``, the A/B) every home is asked at once; then
        the caller must release (:meth:`release_claims`) what other homes claimed when
        the first page was not claimed.

        ``room``: the claimer has no free slot; the group's slots and its own. A home
        that estimates other ranks have room for the pages claims none (the range is left
        to a stream with free slots; :meth:`LockManager.claim_batch`). Asked where the
        lead is decided (every home without a lead)."""
        asks: dict[int, list[int]] = {}
        spare = None if room is None else (len(self.homes), *room)
        for page in pages:
            asks.setdefault(self.home(page), []).append(page)
        first = self.home(pages[0])
        self.lock_calls += len(pages)
        if lead and len(asks) > 1 and self.lead_first:
            got = self._claim({first: asks[first]}, owner, first, spare)
            if got[first] is None:
                self.room_refusals += 1
                return [None] * len(pages)
            if got[first][0] is None:
                self.lead_refusals += 1
                return [None] * len(pages)
            got.update(self._claim({h: p for h, p in asks.items() if h != first}, owner,
                                   None, None))
        else:
            got = self._claim(asks, owner, first if lead else None, spare)
            if any(g is None for g in got.values()):
                self.room_refusals += 1
        flushed = {p: f for home, mine in asks.items()
                   for p, f in zip(mine, got[home] or [None] * len(mine), strict=True)}
        return [flushed[p] for p in pages]

    def _claim(self, asks: dict[int, list[int]], owner: int, lead_home: int | None,
               room: tuple[int, int, int] | None) -> dict[int, list[bool | None] | None]:
        """One ``claim`` batch to each home of ``asks``, all sent before any reply is
        awaited (the own home's in its table); ``lead`` goes to ``lead_home`` only; a
        home's None: it refused them all for ``room``."""
        got: dict[int, list[bool | None] | None] = {}
        waiting = []
        for home, mine in asks.items():
            if self.local is not None and home == self.me:
                self.direct += 1
                with self.local.mutex:
                    got[home] = self.local.locks.claim_batch(self.me, owner, mine,
                                                             home == lead_home, room)
                    self.claim_copies.update(self.local.locks.claim_copies.pop(self.me, {}))
            else:
                self.caller.send(home, ("claim", mine, owner, home == lead_home, room))
                waiting.append(home)
        if waiting:
            self.lock_rounds += 1
            for home, reply in self.caller.replies(waiting, "read-ahead claims").items():
                if isinstance(reply, tuple):  # (claimed, victim copies the claims took)
                    got[home] = reply[0]
                    self.claim_copies.update(reply[1])
                else:
                    got[home] = reply
        return got

    def release_claims(self, pairs: list[tuple[int, Meta]]) -> None:
        """Drop claims, publishing each page's ``Meta`` (the filled slot, or uncached
        again): one unlock message per home, no reply. Safe from the read-ahead thread
        (the caller's sends are locked; the own home's table is under its mutex)."""
        self.unlock_set([(page, True, meta) for page, meta in pairs])

    # -------------------------------------------------------------- single pages
    def lock(self, page: int, excl: bool, around: bool = False) -> Meta | None:
        self.lock_calls += 1
        self.carried = {}
        got = self._round({self.home(page): [(page, excl)]}, around, try_only=False)
        r = got[self.home(page)][0]
        return None if r is None else Meta(*r)

    def lock_read(self, page: int, around: bool | float) -> tuple[Meta | None, bool]:
        """A read's lock in one round trip: the home grants it exclusive when, at the time
        of the grant, the page is cached nowhere (the reader will cache it), else shared."""
        return self.lock_set([page], False, around)[0]

    def try_lock(self, page: int) -> Meta | None:
        self.lock_calls += 1
        got = self._round({self.home(page): [(page, True)]}, False, try_only=True)
        r = got[self.home(page)][0]
        return None if r is BUSY or r is None else Meta(*r)

    def unlock(self, page: int, excl: bool, meta: Meta | None) -> None:
        self.unlock_set([(page, excl, meta)])

    def close(self) -> None:
        self.caller.drain()


class MsgData:
    """Page data reached through the owners' I/O threads (the ``thread`` coordination)."""

    def __init__(self, caller: Caller, rank: int, pages: LocalPages) -> None:
        self.caller = caller
        self.rank = rank
        self.pages = pages
        self.remote_gets = self.remote_puts = 0
        self.data_rounds = 0

    def view(self, slot: int) -> memoryview:
        return self.pages.slot(slot)

    def transfer(self, write: bool,
                 by_owner: dict[int, list[tuple[int, list[tuple[int, memoryview]]]]]) -> None:
        """Pieces of remote slots, ``{owner: [(slot, [(offset, buffer)])]}``: one message to
        each owner's I/O thread, all sent before any reply is awaited (a put is answered once
        its bytes and dirty marks are in place, before the caller unlocks)."""
        for owner, slots in by_owner.items():
            n = sum(len(parts) for _, parts in slots)
            if write:
                self.remote_puts += n
                msg: tuple = ("put", [(slot, [(off, bytes(d)) for off, d in parts])
                                      for slot, parts in slots])
            else:
                self.remote_gets += n
                msg = ("get", [(slot, [(off, len(out)) for off, out in parts])
                               for slot, parts in slots])
            self.caller.send(owner, msg)
        self.data_rounds += 1
        replies = self.caller.replies(list(by_owner), "page data")
        if not write:
            for owner, slots in by_owner.items():
                for (_, parts), blobs in zip(slots, replies[owner], strict=True):
                    for (_, out), blob in zip(parts, blobs, strict=True):
                        out[:] = blob

    def get_many(self, owner: int, slot: int, parts: list[tuple[int, memoryview]]) -> None:
        """Pieces of a slot at its owner's I/O thread: one request for all of them."""
        self.transfer(False, {owner: [(slot, parts)]})

    def put_many(self, owner: int, slot: int, parts: list[tuple[int, memoryview]]) -> None:
        self.transfer(True, {owner: [(slot, parts)]})

    def dirty(self, slot: int) -> Dirty:
        return self.pages.dirty_marks[slot]

    def mark(self, slot: int, lo: int, hi: int) -> None:
        self.pages.dirty_marks[slot].add(lo, hi)

    def clean(self, slot: int) -> None:
        self.pages.dirty_marks[slot].clear()

    def close(self) -> None:
        self.caller.drain()
