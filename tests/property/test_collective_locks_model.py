"""The collective cache's page-lock state machine (``LockManager``, the message back ends'
home) against a model of its clients, with hypothesis.

Ranks behave as the clients of ``_msgclient`` do: one request at a time, batches in
increasing page order above every page the rank holds (two-phase locking), releases only
while not waiting, reads that wait for a page being loaded (``around``), ``try`` batches,
read-ahead claims, and a clock that moves so that waits for loads expire. Checked after
every step: the home's holders are the ones its answers told the ranks of, a page is held
exclusively or shared, never both; a queued request is never already answered and a queue's
head is never one that could be granted (no lost wake-up, so with two-phase locking no
deadlock: some rank is always able to go on); every answer covers the whole request.
CI stop 26's failure (a batch answered by an expired wait and then granted again) is the
kind of bug this finds.

Issue 32's rule (a read waits for a page being loaded — cached nowhere, or claimed by a
read-ahead — up to its bound, then reads it around) adds, with the home polled after every
step as a service polls (``expire``): no rank holds a page it did not ask for; a read is
answered "read around" for a page only once its bound has passed since its first wait for
a load (so a page is read from the file once while its loader is alive); and no read that
may read around is still queued at a page being loaded past its bound (a loader that
stalls or dies holds nobody up longer), whichever way the page came to be loading.
"""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from pvfs.collective._locks import READ, Batch, LockManager, around_wait
from pvfs.collective._pages import UNCACHED, Meta

RANKS = 3
PAGES = 6
ranks = st.integers(0, RANKS - 1)
page_lists = st.lists(st.integers(0, PAGES - 1), min_size=1, max_size=3)
#: what a lock request carries: who, which pages, the mode, the wait for loads
ASK = {"rank": ranks, "pages": page_lists, "mode": st.sampled_from([False, True, READ]),
       "around": st.sampled_from([False, True, 0.0, 0.01, 0.05, 1.0])}
GRACE = 3e-4  # the home's wait for a bare True
EPS = 1e-9


class LockHome(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.m = LockManager(grace=GRACE, clock=lambda: self.now)
        #: per rank: page -> True (exclusive) / False (shared), as the answers said
        self.held: list[dict[int, bool]] = [{} for _ in range(RANKS)]
        #: per rank: the outstanding queued request (its items and around), or None
        self.waiting: list[tuple[list, object] | None] = [None] * RANKS
        #: per rank: when its outstanding request first waited at a page being loaded
        self.began: list[float | None] = [None] * RANKS

    # -- the home, polled after every step --------------------------------------------

    def _queued_at(self, rank: int) -> int | None:
        """The page where ``rank``'s outstanding batch is queued (None: not queued)."""
        for page, entry in self.m._pages.items():
            if any(src == rank for src, _, _ in entry.queue):
                return page
        return None

    def _poll(self) -> None:
        """What a service does as it polls: answer the waits for loads that are due; then
        note when each waiting read began to wait for a load."""
        self._deliver(self.m.expire())
        for rank in range(RANKS):
            if self.waiting[rank] is None or self.began[rank] is not None:
                continue
            page = self._queued_at(rank)
            if page is not None and self.m._pages[page].loading():
                self.began[rank] = self.now

    # -- what a rank may ask for ------------------------------------------------------

    def _may_ask(self, rank: int, pages: list[int]) -> list[int]:
        """The pages ``rank`` may ask for now (none while it waits): increasing, above
        every page it holds (two-phase locking)."""
        if self.waiting[rank] is not None:
            return []
        low = max(self.held[rank], default=-1)
        return sorted({p for p in pages if p > low})

    def _around_allowed(self, rank: int, around) -> None:
        """A page is read around only once the read's bound has passed since it first
        waited for a load (at once only for a wait of 0): never while the loader may
        still deliver its copy within the bound."""
        wait = around_wait(around, GRACE)
        assert wait is not None, "read around without asking for it"
        if wait > 0:
            began = self.began[rank]
            assert began is not None, f"rank {rank} read around without waiting {wait}s"
            assert self.now >= began + wait - EPS, \
                f"rank {rank} read around after {self.now - began}s of its {wait}s"

    def _answer(self, rank: int, items: list, results: list, around) -> None:
        assert len(results) == len(items), (rank, items, results)
        for (page, mode), meta in zip(items, results):
            if meta is None:
                self._around_allowed(rank, around)
                continue
            self.held[rank][page] = (meta.owner < 0) if mode == READ else bool(mode)
        self.began[rank] = None

    def _deliver(self, grants: list) -> None:
        for rank, results in grants:
            assert self.waiting[rank] is not None, f"rank {rank} answered while not asking"
            items, around = self.waiting[rank]
            self.waiting[rank] = None
            self._answer(rank, items, results, around)

    def _idle(self, rank: int) -> bool:
        return self.waiting[rank] is None

    @rule(**ASK)
    def lock(self, rank, pages, mode, around):
        if not (pages := self._may_ask(rank, pages)):
            return
        items = [(p, mode) for p in pages]
        results = self.m.request_batch(rank, items, around)
        if results is None:
            self.waiting[rank] = (items, around)
            self.began[rank] = None
        else:
            self._answer(rank, items, results, around)
        self._poll()

    @rule(**ASK)
    def try_lock(self, rank, pages, mode, around):
        if not (pages := self._may_ask(rank, pages)):
            return
        out = self.m.try_batch(rank, [(p, mode) for p in pages], around)
        assert 1 <= len(out) <= len(pages)
        for i, (page, res) in enumerate(zip(pages, out)):
            if res is False:  # BUSY: the list ends there
                assert i == len(out) - 1
                break
            if res is not None:
                self.held[rank][page] = (res.owner < 0) if mode == READ else bool(mode)
            else:
                self._around_allowed(rank, around)  # (a try never waits: only a 0 wait)
        self._poll()

    @rule(rank=ranks, pages=page_lists, lead=st.booleans(),
          room=st.sampled_from([None, None, (1, 2, 4), (2, 5, 1), (1, PAGES, 30)]))
    def claim(self, rank, pages, lead, room):
        if not (pages := self._may_ask(rank, pages)):
            return
        fits = self.m.has_room(room, len(pages), rank)
        out = self.m.claim_batch(rank, rank, pages, lead, room)
        if fits:  # (issue 32) it would evict while the group has room: nothing claimed
            assert out is None
            self._poll()
            return
        assert out is not None and len(out) == len(pages)
        for page, flushed in zip(pages, out):
            if flushed is not None:
                self.held[rank][page] = True
        self._poll()

    @rule(rank=ranks, pick=st.integers(0, PAGES - 1),
          publish=st.sampled_from(["cached", "uncached", "unchanged"]))
    def release(self, rank, pick, publish):
        if not self._idle(rank) or not self.held[rank]:
            return
        pages = sorted(self.held[rank])
        page = pages[pick % len(pages)]
        excl = self.held[rank].pop(page)
        meta = None
        if excl and publish == "cached":
            meta = Meta(rank, page, False)
        elif excl and publish == "uncached":
            meta = UNCACHED
        self._deliver(self.m.release(page, rank, meta))
        self._poll()

    @rule(dt=st.sampled_from([1e-4, 5e-3, 0.02, 0.06, 0.5]))
    def tick(self, dt):
        self.now += dt
        self._poll()

    # -- what must hold after every step --------------------------------------------

    def _queued_batches(self) -> dict[int, Batch]:
        found: dict[int, Batch] = {}
        for entry in self.m._pages.values():
            for src, _mode, batch in entry.queue:
                assert batch is not None  # (the ranks here only send batches)
                assert not batch.done, f"rank {src}'s answered batch still queued"
                assert src not in found or found[src] is batch, f"rank {src} queued twice"
                found[src] = batch
        return found

    @invariant()
    def queues_hold_the_waiting_ranks_only_and_none_is_answered(self):
        queued = self._queued_batches()
        assert set(queued) == {r for r in range(RANKS) if not self._idle(r)}

    @invariant()
    def holders_are_what_the_answers_said(self):
        queued = self._queued_batches()
        held = [dict(h) for h in self.held]
        for rank, batch in queued.items():  # the pages of a batch granted so far
            for (page, mode), meta in zip(batch.items, batch.results):
                if meta is not None:
                    held[rank][page] = None  # (its mode: whatever the home decided)
        for page in range(PAGES):
            writer, readers = self.m.holders(page)
            mine = {r: h[page] for r, h in enumerate(held) if page in h}
            assert set(mine) == ({writer} if writer is not None else set()) | readers, page
            assert writer is None or not readers, f"page {page}: writer and readers"
            for r, excl in mine.items():
                if excl is not None:
                    assert excl == (r == writer), (page, r)

    @invariant()
    def no_queue_head_could_be_granted(self):
        for page, entry in self.m._pages.items():
            if entry.queue:
                assert not self.m._free_for(entry, entry.queue[0][1]), page

    @invariant()
    def no_rank_holds_a_page_it_did_not_ask_for(self):
        for page in range(PAGES):
            writer, readers = self.m.holders(page)
            for rank in ({writer} if writer is not None else set()) | readers:
                asked = set(self.held[rank])
                if self.waiting[rank] is not None:
                    asked |= {p for p, _ in self.waiting[rank][0]}
                assert page in asked, f"rank {rank} holds page {page} it never asked for"

    @invariant()
    def no_read_waits_for_a_load_past_its_bound(self):
        for rank in range(RANKS):
            if self.waiting[rank] is None:
                continue
            wait = around_wait(self.waiting[rank][1], GRACE)
            page = self._queued_at(rank)
            if wait is None or page is None or not self.m._pages[page].loading():
                continue  # never reads around, or waits for a cached (maybe dirty) copy
            began = self.began[rank]
            # (EPS on the side of the wait: the home compares its own float deadline, which
            # a sum of ticks may reach a rounding error short of began + wait)
            assert began is not None and self.now < began + wait + EPS, \
                (f"rank {rank} still waits at page {page} being loaded, "
                 f"{self.now - (began or 0)}s after it began, bound {wait}s")

    @invariant()
    def the_home_counts_the_pages_it_knows_cached(self):
        assert self.m.cached == sum(1 for e in self.m._pages.values() if e.meta.owner >= 0)

    @invariant()
    def some_rank_can_go_on(self):
        assert any(self._idle(r) for r in range(RANKS)) or self.m.next_deadline() is not None


LockHome.TestCase.settings = settings(max_examples=300, stateful_step_count=60,
                                      deadline=None)
TestLockHome = LockHome.TestCase
