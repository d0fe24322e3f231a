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
"""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from pvfs.collective._locks import READ, Batch, LockManager
from pvfs.collective._pages import UNCACHED, Meta

RANKS = 3
PAGES = 6
ranks = st.integers(0, RANKS - 1)
page_lists = st.lists(st.integers(0, PAGES - 1), min_size=1, max_size=3)
#: what a lock request carries: who, which pages, the mode, the wait for loads
ASK = {"rank": ranks, "pages": page_lists, "mode": st.sampled_from([False, True, READ]),
       "around": st.sampled_from([False, True, 0.0, 0.01, 0.05])}


class LockHome(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.m = LockManager(grace=3e-4, clock=lambda: self.now)
        #: per rank: page -> True (exclusive) / False (shared), as the answers said
        self.held: list[dict[int, bool]] = [{} for _ in range(RANKS)]
        #: per rank: the outstanding queued request (its items and around), or None
        self.waiting: list[tuple[list, object] | None] = [None] * RANKS

    # -- what a rank may ask for ------------------------------------------------------

    def _may_ask(self, rank: int, pages: list[int]) -> list[int]:
        """The pages ``rank`` may ask for now (none while it waits): increasing, above
        every page it holds (two-phase locking)."""
        if self.waiting[rank] is not None:
            return []
        low = max(self.held[rank], default=-1)
        return sorted({p for p in pages if p > low})

    def _answer(self, rank: int, items: list, results: list, around) -> None:
        assert len(results) == len(items), (rank, items, results)
        for (page, mode), meta in zip(items, results):
            if meta is None:
                assert around is not False, "read around without asking for it"
                continue
            self.held[rank][page] = (meta.owner < 0) if mode == READ else bool(mode)

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
        else:
            self._answer(rank, items, results, around)

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

    @rule(rank=ranks, pages=page_lists, lead=st.booleans())
    def claim(self, rank, pages, lead):
        if not (pages := self._may_ask(rank, pages)):
            return
        out = self.m.claim_batch(rank, rank, pages, lead)
        assert len(out) == len(pages)
        for page, flushed in zip(pages, out):
            if flushed is not None:
                self.held[rank][page] = True

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

    @rule(dt=st.sampled_from([1e-4, 5e-3, 0.02, 0.06]))
    def tick(self, dt):
        self.now += dt
        self._deliver(self.m.expire())

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
    def some_rank_can_go_on(self):
        assert any(self._idle(r) for r in range(RANKS)) or self.m.next_deadline() is not None


LockHome.TestCase.settings = settings(max_examples=300, stateful_step_count=60,
                                      deadline=None)
TestLockHome = LockHome.TestCase
