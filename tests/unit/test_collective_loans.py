"""Issue 32, s31: loan slots — a rank with no free slot loads a page it reads into a slot
another rank lent to the homes' pool, instead of evicting a page ranks behind it have not
read yet while their slots stand empty (the extra file reads left over the netns harness at
16 and 32 clients with the default code, docs/collective.md "Where s30 leaves issue 32").

Several page caches share real message homes (:class:`Service` and :class:`MsgLocks`,
messages in process, as in ``test_collective_victims``); the data plane puts whole pages
into another rank's slots as the ``servers`` back end's RMA window does. With one home the
set-up is the harness' (``--servers 1``: one lock server for every page).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from test_collective_parts import _Net
from test_collective_victims import PS, _Data, _File

from pvfs.collective._locks import LOAN, READ, LockManager, loans_on
from pvfs.collective._pages import UNCACHED, Meta


class _LoanData(_Data):
    """The fake data plane with ``put_pages`` (the ``servers`` back end's RMA puts)."""

    def put_pages(self, pages):
        for owner, slot, data in pages:
            self.group[owner].view(slot)[:] = data


def _group(n: int, nslots: int, pages: int, loans: bool = True, homes: int = 1):
    """``n`` caches of ``nslots`` slots over ``homes`` message homes (ranks 0..homes-1)."""
    from pvfs.collective._cache import PageCache
    from pvfs.collective._msgclient import MsgLocks
    from pvfs.collective._service import Caller

    net = _Net(n)
    f = _File(pages)
    datas: dict[int, _LoanData] = {}
    caches = []
    for r in range(n):
        datas[r] = _LoanData(nslots, datas)  # type: ignore[assignment]
        locks = MsgLocks(Caller(net.Comm(net, r)), list(range(homes)))
        caches.append(PageCache(r, n, f, locks, datas[r],  # type: ignore[arg-type]
                                nslots, PS, size_at_open=len(f.data), atomic=False,
                                loans=loans))
    return net, f, caches


def _read(cache, f, page: int, n: int = 1) -> None:
    got = cache.read([(page * PS, n * PS)])
    assert bytes(got) == bytes(f.data[page * PS:(page + n) * PS])


def test_loans_are_on_by_default(monkeypatch):
    monkeypatch.delenv("PVFS_COLLECTIVE_LOANS", raising=False)
    assert loans_on()
    monkeypatch.setenv("PVFS_COLLECTIVE_LOANS", "0")
    assert not loans_on()


def test_a_quarter_of_each_rank_s_slots_goes_to_the_pool():
    net, _, caches = _group(3, 16, 20)
    assert all(c.loan_slots == 4 and len(c.free) == 12 for c in caches)
    assert net.services[0].locks.loan_free == {r: [12, 13, 14, 15] for r in range(3)}
    _, _, off = _group(3, 16, 20, loans=False)
    assert all(c.loan_slots == 0 and len(c.free) == 16 for c in off)


def test_a_rank_that_ran_ahead_loads_into_loan_slots_and_each_page_is_read_once():
    """Rank 0 reads 20 pages with 12 slots of its own (it ran ahead), then rank 1 reads
    them all (a rank behind). Rank 0 evicts nothing: pages 12-19 go to loan slots."""
    net, f, caches = _group(3, 16, 20)
    for p in range(20):
        _read(caches[0], f, p)
    assert caches[0].evictions == 0 and caches[0].loaned == 8
    for p in range(20):
        _read(caches[1], f, p)
    assert f.page_reads == {p: 1 for p in range(20)}
    m = net.services[0].locks
    assert len(m.loaned) == 8 and m.loans_recycled == 0 and m.cached == 20
    # one copy in the group: each page in one slot, own (LRU) or lent
    owned = [p for c in caches for p, _ in c.lru.items()]
    assert sorted(owned + list(m.loaned)) == list(range(20))


def test_without_loans_the_rank_ahead_evicts_and_pages_are_read_again():
    """The same reads with loans off (the code before s31): 16 slots, 20 pages, rank 0
    evicts 4 pages that rank 1 then reads from the file a second time."""
    _, f, caches = _group(3, 16, 20, loans=False)
    for p in range(20):
        _read(caches[0], f, p)
    for p in range(20):
        _read(caches[1], f, p)
    assert caches[0].evictions == 4 and sum(f.page_reads.values()) == 24


def test_several_pages_of_one_access_mix_own_and_loan_slots_in_one_file_read():
    net, f, caches = _group(2, 8, 16)
    _read(caches[0], f, 0, 4)  # 4 pages: 6 own slots
    _read(caches[0], f, 4, 4)  # 2 own, 2 lent
    assert caches[0].loaned == 2 and caches[0].evictions == 0
    # (all 4 pages asked in LOAN mode: the 2 loans not needed went back to the pool)
    m = net.services[0].locks
    assert m.loans_returned == 2 and len(m.loaned) == 2
    assert sum(map(len, m.loan_free.values())) == 2
    assert f.page_reads == {p: 1 for p in range(8)}
    _read(caches[1], f, 0, 8)
    assert f.page_reads == {p: 1 for p in range(8)}


def test_an_empty_pool_takes_back_the_oldest_loaned_page_and_bytes_stay_right():
    """2 ranks of 4 slots (3 own, 1 lent each): rank 0 reads 8 pages, then 8 more. Once
    the 2 pool slots hold pages the home takes back the oldest: that page is uncached and
    read again (what a full cache pays); every read returns the file's bytes."""
    net, f, caches = _group(2, 4, 12)
    for p in range(8):
        _read(caches[0], f, p)
    m = net.services[0].locks
    assert m.loans_recycled > 0 and len(m.loaned) == 2
    for p in range(8):
        _read(caches[1], f, p)
    assert m.cached <= 8
    for c in caches:
        for p in range(12):
            _read(c, f, p)


def _sequences(draw_pages):
    return st.lists(st.tuples(st.integers(0, 2), st.integers(0, draw_pages - 1),
                              st.integers(1, 3)), min_size=1, max_size=60)


@settings(max_examples=80, deadline=None)
@given(_sequences(20))
def test_any_interleaving_reads_every_page_once_while_the_group_has_room(steps):
    """3 ranks of 16 slots (12 own, 4 lent: 12 in the pool), 20 pages, one lock server:
    whatever order the ranks read in, no page is read from the file twice (a rank loads
    at most 8 pages past its own 12 slots) and every read is right."""
    net, f, caches = _group(3, 16, 20)
    for rank, page, n in steps:
        _read(caches[rank], f, page, min(n, 20 - page))
    assert set(f.page_reads.values()) <= {1}
    assert all(c.evictions == 0 for c in caches)
    assert sum(s.locks.loans_recycled for s in net.services) == 0


def test_two_homes_share_the_pool_and_try_rounds_give_unused_loans_back():
    """Two homes (each page's lock at ``page % 2``): accesses of 3 pages span both, so
    locks go in a try round first; rank 2 holds page 13 so rank 0's try round stops
    there and gives the loans of the pages above it back. Still each page read once."""
    net, f, caches = _group(3, 16, 20, homes=2)
    for p in range(0, 12, 3):
        _read(caches[0], f, p, 3)
    _read(caches[2], f, 13)  # (rank 2 caches page 13 in its own slot)
    held = caches[2].locks.lock_set([13], write=True, around=False)
    net.on_wait.append(lambda: caches[2].locks.unlock_set([(13, True, held[0][0])]))
    _read(caches[0], f, 12, 3)
    for p in range(15, 20):
        _read(caches[0], f, p)
    for p in range(20):
        _read(caches[1], f, p)
    assert f.page_reads == {p: 1 for p in range(20)}
    assert caches[0].evictions == 0 and caches[0].loaned == 7
    assert sum(s.locks.loans_returned for s in net.services[:2]) >= 1


# ---------------------------------------------------------------- the home's pool
def test_a_loan_read_granted_exclusively_gets_a_pool_slot_and_keeps_it_when_published():
    m = LockManager()
    m.lend(1, [6, 7])
    assert m.request_batch(0, [(5, LOAN)]) == [UNCACHED]
    assert m.lent.pop(0) == {5: (1, 7)} and m.loan_pending == {5: (1, 7)}
    m.release(5, 0, Meta(1, 7, False))
    assert m.loaned == {5: (1, 7)} and m.loan_free == {1: [6]} and m.cached == 1
    # a shared grant of a cached page lends nothing; READ never does
    assert m.request_batch(2, [(5, LOAN)]) == [Meta(1, 7, False)] and not m.lent
    assert m.request_batch(2, [(8, READ)]) == [UNCACHED] and not m.lent


def test_a_loan_released_unused_goes_back_to_the_pool():
    m = LockManager()
    m.lend(1, [6])
    assert m.try_batch(0, [(5, LOAN)]) == [UNCACHED] and m.lent.pop(0) == {5: (1, 6)}
    m.release(5, 0, None)  # (a try round's page above the first busy one)
    assert m.loan_free == {1: [6]} and not m.loaned and m.loans_returned == 1


def test_the_pool_empty_the_oldest_unheld_loaned_page_is_taken_back():
    m = LockManager()
    m.lend(1, [6, 7])
    for page, slot in ((3, 7), (4, 6)):
        m.request_batch(0, [(page, LOAN)])
        assert m.lent.pop(0) == {page: (1, slot)}
        m.release(page, 0, Meta(1, slot, False))
    assert m.request_batch(2, [(3, READ)]) == [Meta(1, 7, False)]  # page 3 held shared
    m.request_batch(0, [(9, LOAN)])
    assert m.lent.pop(0) == {9: (1, 6)}  # page 4's slot: page 3 is in use
    assert m.request_batch(2, [(4, READ)]) == [UNCACHED]  # page 4 is cached nowhere now
    assert m.loans_recycled == 1 and list(m.loaned) == [3]
