"""Issue 32: the victim cache at the lock homes — a page a rank evicts is kept (its bytes)
at the page's home, within the room the group's slots leave free, and handed to the next
rank granted the page exclusively, in place of a second file read.

Over the netns harness at 16-32 clients the extra file reads left after the read-ahead
placement rule all followed evictions by ordinary (demand) reads: a rank that runs ahead
is the first to read each page, caches it in its own slots, fills them and evicts pages
the slower ranks have not read yet, while their slots stand empty. Here several page
caches share real message homes (the ``servers`` homes: :class:`Service` and
:class:`MsgLocks`, messages in process; with ``local`` the ``thread`` back end's own-home
path) and one data plane; their accesses are interleaved by hand, so every run is
deterministic.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_collective_parts import _Net

from pvfs.collective._locks import READ, LockManager
from pvfs.collective._pages import UNCACHED, Dirty, Meta

PS = 64


class _File:
    """The file: counts the file reads of every page; writable."""

    def __init__(self, pages: int) -> None:
        self.data = bytearray((i * 7) % 251 for i in range(pages * PS))
        self.page_reads: dict[int, int] = {}

    def preadinto(self, buf, offset):
        if len(buf):
            for p in range(offset // PS, (offset + len(buf) - 1) // PS + 1):
                self.page_reads[p] = self.page_reads.get(p, 0) + 1
        part = self.data[offset:offset + len(buf)]
        buf[:len(part)] = part
        return len(part)

    def pwrite(self, buf, offset):
        end = offset + len(buf)
        if end > len(self.data):
            self.data.extend(bytes(end - len(self.data)))
        self.data[offset:end] = buf
        return len(buf)


class _Data:
    """One rank's slots and dirty marks; remote pieces are read from / written to the
    owner's slots (marking them dirty there), as the ``thread`` back end's I/O threads."""

    remote_gets = remote_puts = 0

    def __init__(self, nslots: int, group: dict[int, _Data]) -> None:
        self.mem = bytearray(nslots * PS)
        self.marks = [Dirty() for _ in range(nslots)]
        self.group = group

    def view(self, slot):
        return memoryview(self.mem)[slot * PS:(slot + 1) * PS]

    def dirty(self, slot):
        return self.marks[slot]

    def mark(self, slot, lo, hi):
        self.marks[slot].add(lo, hi)

    def clean(self, slot):
        self.marks[slot].clear()

    def transfer(self, write, by_owner):
        for owner, slots in by_owner.items():
            other = self.group[owner]
            for slot, parts in slots:
                view = other.view(slot)
                for off, buf in parts:
                    if write:
                        self.remote_puts += 1
                        view[off:off + len(buf)] = buf
                        other.marks[slot].add(off, off + len(buf))
                    else:
                        self.remote_gets += 1
                        buf[:] = view[off:off + len(buf)]


def _group(n: int, nslots: int, pages: int, victims: bool = True, readahead: bool = False,
           local: bool = False):
    from pvfs.collective._cache import PageCache

    net = _Net(n)
    f = _File(pages)
    datas: dict[int, _Data] = {}
    caches = []
    for r in range(n):
        datas[r] = _Data(nslots, datas)
        c = PageCache(r, n, f, net.locks(r, local=local), datas[r],  # type: ignore[arg-type]
                      nslots, PS, size_at_open=len(f.data), atomic=False,
                      readahead=nslots // 4 * PS if readahead else 0)
        assert not c.victims  # off by default (the default set by the run, s26)
        c.victims = victims
        caches.append(c)
    return net, f, caches


def _read(cache, f, page: int, n: int = 1) -> None:
    got = cache.read([(page * PS, n * PS)])
    assert bytes(got) == bytes(f.data[page * PS:(page + n) * PS])
    if cache.ra is not None:
        cache.ra.drain()


def _ahead_then_behind(victims: bool, local: bool = False):
    """Rank 0 reads 20 pages into its 8 slots (a rank that ran ahead: it evicts 12), then
    rank 1 reads them all (a rank behind); rank 2 reads nothing. The group has 24 slots."""
    net, f, caches = _group(3, 8, 20, victims, local=local)
    for p in range(20):
        _read(caches[0], f, p)
    for p in range(20):
        _read(caches[1], f, p)
    return net, f, caches


@pytest.mark.parametrize("local", [False, True], ids=["servers", "thread-own-home"])
def test_pages_a_rank_ran_ahead_and_evicted_are_read_from_the_file_once(local):
    net, f, caches = _ahead_then_behind(victims=True, local=local)
    assert caches[0].evictions == 12 and caches[0].victims_sent == 12
    assert f.page_reads == {p: 1 for p in range(20)}  # every page read once
    assert caches[1].victim_hits == 12  # the evicted ones came from their homes
    # one copy in the group: each page cached by exactly one rank or kept at its home
    # (rank 1's 8 slots took 12 victims and 8 pages of its own: it evicted 4 in turn)
    owners = [p for c in caches for p, _ in c.lru.items()]
    kept = [p for s in net.services for p in s.locks.victims]
    assert caches[1].evictions == 4 and len(kept) == 4
    assert sorted(owners + kept) == list(range(20))


def test_before_the_victim_cache_a_rank_behind_read_the_evicted_pages_again():
    """The old behaviour (``PVFS_COLLECTIVE_VICTIMS=0``): what rank 0 evicted is read from
    the file a second time by rank 1 — pages read 32 for 20 touched (1.6x)."""
    _, f, caches = _ahead_then_behind(victims=False)
    assert caches[0].evictions == 12 and caches[0].victims_sent == 0
    assert sum(f.page_reads.values()) == 32
    assert {p for p, k in f.page_reads.items() if k == 2} == set(range(12))


def test_victims_on_from_the_environment(monkeypatch):
    from pvfs.collective._cache import PageCache

    monkeypatch.setenv("PVFS_COLLECTIVE_VICTIMS", "1")
    c = PageCache(0, 1, _File(4), _Net(1).locks(0), _Data(4, {}), 4, PS,  # type: ignore
                  size_at_open=4 * PS, atomic=False)
    assert c.victims
    monkeypatch.setenv("PVFS_COLLECTIVE_VICTIMS", "0")
    c = PageCache(0, 1, _File(4), _Net(1).locks(0), _Data(4, {}), 4, PS,  # type: ignore
                  size_at_open=4 * PS, atomic=False)
    assert not c.victims


def test_the_home_keeps_victims_only_in_the_room_the_group_leaves():
    """Two ranks of 4 slots, one home each: a home keeps at most 4 - (pages it knows
    cached) victims, dropping its oldest for newer ones (LRU), so cached pages and victims
    together never pass the group's 8 slots."""
    net, f, caches = _group(2, 4, 24, victims=True)
    for p in range(24):
        _read(caches[0], f, p)
        for s in net.services:
            m = s.locks
            assert len(m.victims) <= max(0, 8 // 2 - m.cached)
        cached = sum(s.locks.cached for s in net.services)
        kept = sum(len(s.locks.victims) for s in net.services)
        assert cached + kept <= 8
    m0, m1 = net.services[0].locks, net.services[1].locks
    assert m0.victims_dropped + m1.victims_dropped > 0
    # The newest evictions are the ones kept: pages 16-19 (evicted last by rank 0)
    assert sorted(set(m0.victims) | set(m1.victims)) == [16, 17, 18, 19]


def test_a_write_takes_the_victim_and_the_copy_stays_coherent():
    """A victim is handed with any exclusive grant: a partial write caches the page from
    it (no file read) and a later reader sees the write; no stale copy remains."""
    net, f, caches = _group(2, 2, 8, victims=True)
    for p in range(4):
        _read(caches[0], f, p)  # pages 0, 1 evicted to their homes
    assert 0 in net.services[0].locks.victims
    reads = dict(f.page_reads)
    caches[1].write([(0 * PS + 3, 5)], memoryview(b"HELLO"))
    assert f.page_reads == reads  # the page came with the grant
    assert caches[1].victim_hits == 1 and 0 not in net.services[0].locks.victims
    got = caches[0].read([(0, PS)])
    want = bytearray(f.data[:PS])
    want[3:8] = b"HELLO"
    assert bytes(got) == bytes(want)


def test_a_full_page_write_ignores_the_victim_and_a_direct_read_gives_it_back():
    m = LockManager()
    assert m.request(5, 0, True)[0] == "granted"
    m.release(5, 0, UNCACHED, (b"x" * PS, (1, 10)))
    assert m.victims_kept == 1 and 5 in m.victims
    # a shared request does not take it (the page is cached nowhere: READ is exclusive)
    assert m.request(5, 1, READ) == ("granted", UNCACHED)
    assert m.handed == {1: {5: b"x" * PS}} and 5 not in m.victims
    m.handed.clear()
    m.release(5, 1, None, (b"x" * PS, None))  # given back unused (no slot to cache it)
    assert m.victims[5] == b"x" * PS and m.victims_kept == 1  # (kept as before)
    # a page cached somewhere keeps no victim
    assert m.request(6, 0, True)[0] == "granted"
    m.release(6, 0, Meta(0, 1, False), (b"y" * PS, (1, 10)))
    assert 6 not in m.victims


def test_a_read_ahead_claim_takes_the_copy_its_home_keeps():
    """s30: a claim of a page whose victim copy the home keeps claims it and hands the copy
    to the claimer (before, the claim skipped the page — and with ``lead`` a kept first
    page left the whole range unread ahead: the victim cache cut the pages read ahead at
    32 clients over the harness from 1,519-1,898 to 428-1,164 a run)."""
    m = LockManager()
    assert m.request(3, 0, True)[0] == "granted"
    m.release(3, 0, UNCACHED, (b"z" * PS, (1, 10)))
    assert m.claim_batch(1, 1, [2, 3, 4]) == [False, False, False]
    assert 3 not in m.victims and m.cached == 3
    assert m.claim_copies.pop(1) == {3: b"z" * PS}
    assert m.victims_handed == m.victims_claimed == 1
    # a kept first page no longer loses the range to the lead rule
    assert m.request(7, 0, True)[0] == "granted"
    m.release(7, 0, UNCACHED, (b"w" * PS, (1, 10)))
    assert m.claim_batch(2, 2, [7, 8], lead=True) == [False, False]
    assert m.claim_copies.pop(2) == {7: b"w" * PS}


def test_claims_skip_kept_pages_with_the_switch_off(monkeypatch):
    """``PVFS_COLLECTIVE_VICTIM_CLAIMS=0`` (the A/B of s30): claims skip a kept page, as
    s26-s29 did, and a kept first page loses the range to the lead rule."""
    monkeypatch.setenv("PVFS_COLLECTIVE_VICTIM_CLAIMS", "0")
    m = LockManager()
    assert m.request(3, 0, True)[0] == "granted"
    m.release(3, 0, UNCACHED, (b"z" * PS, (1, 10)))
    assert m.claim_batch(1, 1, [2, 3, 4]) == [False, None, False]
    assert 3 in m.victims and m.cached == 2 and not m.claim_copies
    assert m.claim_batch(2, 2, [3, 5], lead=True) == [None, None]


@pytest.mark.parametrize("local", [False, True], ids=["servers", "thread-own-home"])
def test_read_ahead_caches_the_victim_copies_instead_of_reading_the_file(local):
    """Rank 0 reads 24 pages into its 8 slots and evicts 16 (their copies kept at the
    homes); rank 1, with read-ahead, then reads them in order: its reads ahead claim the
    kept pages and cache the copies that come with the claims — every page is read from
    the file once, and the pages rank 1 reads ahead include kept ones."""
    net, f, caches = _group(3, 8, 24, victims=True)
    for p in range(24):
        _read(caches[0], f, p)
    assert caches[0].victims_sent == 16
    behind = caches[1]
    from pvfs.collective._readahead import Prefetcher

    behind.ra = Prefetcher(behind, 4)
    for p in range(24):
        _read(behind, f, p)
    behind.close()
    assert f.page_reads == {p: 1 for p in range(24)}
    assert behind.ra.copies > 0  # read ahead from the kept copies (no file read)
    assert behind.ra.copies + behind.victim_hits >= 8  # rank 1 re-cached what it could
    homes = [s.locks for s in net.services]
    assert sum(h.victims_claimed for h in homes) == behind.ra.copies
    # one copy in the group still
    owners = [p for c in caches for p, _ in c.lru.items()]
    kept = [p for h in homes for p in h.victims]
    assert len(owners) + len(kept) == len(set(owners + kept))


def test_a_read_ahead_claim_given_back_returns_its_victim_copy():
    """A claim that will not be read (no slot: every slot pinned) gives its victim copy
    back to the home with the release, so the next reader still gets it."""
    net, f, caches = _group(3, 4, 12, victims=True)
    home = net.services[5 % 3].locks
    assert home.request(5, 2, True)[0] == "granted"
    home.release(5, 2, UNCACHED, (bytes(f.data[5 * PS:6 * PS]), (3, 12)))
    c = caches[0]
    from pvfs.collective._readahead import Prefetcher

    c.ra = Prefetcher(c, 1)
    c.ra.balance = False  # (claim whatever the group's room)
    c.free.clear()  # no free slot and nothing cached: _alloc_slot finds nothing
    c.ra._issue(5, 6)
    assert c.ra.unclaimed == 1 and c.ra.copies == 0
    assert 5 in home.victims  # the copy went back
    reads = dict(f.page_reads)
    c.free.append(0)
    c.ra = None
    _read(caches[1], f, 5)
    assert f.page_reads.get(5, 0) == reads.get(5, 0)  # from the copy, not the file


def test_a_victim_handed_in_a_try_round_and_released_goes_back():
    """A lock set over several homes first asks every home at once; pages above the first
    busy one are released again — a victim handed with one of them goes back with it, and
    comes with its grant when the set asks for it in order."""
    net, f, caches = _group(3, 4, 12, victims=True)
    home2 = net.services[2].locks
    assert home2.request(5, 2, True)[0] == "granted"
    home2.release(5, 2, UNCACHED, (bytes(f.data[5 * PS:6 * PS]), (3, 12)))
    other = net.locks(1)
    assert other.lock_set([4], write=True, around=False) == [(UNCACHED, True)]
    seen = []

    def other_unlocks():
        seen.append(5 in home2.victims)  # back at its home while rank 0 waits for page 4
        other.unlock_set([(4, True, None)])

    net.on_wait.append(other_unlocks)
    reads = dict(f.page_reads)
    _read(caches[0], f, 3, n=3)  # pages 3, 4 (busy), 5 (a victim)
    assert seen == [True]
    assert caches[0].victim_hits == 1 and 5 not in home2.victims
    assert f.page_reads.get(5, 0) == reads.get(5, 0)  # not read from the file


@settings(max_examples=60, deadline=None)
@given(order=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 9)), min_size=1,
                      max_size=60),
       readahead=st.booleans(), local=st.booleans())
def test_with_room_in_the_group_every_page_is_read_from_the_file_once(order, readahead,
                                                                       local):
    """Any interleaving of three ranks' reads of 10 pages, with 4 slots each (each home's
    3-4 pages fit its share of the group's 12 slots): with the victim cache no page is
    read from the file twice, whatever evicts it (demand reads or read-ahead). (Without
    it, hypothesis finds a rank that read five pages and another that reads the first.)"""
    net, f, caches = _group(3, 4, 10, victims=True, readahead=readahead, local=local)
    for rank, page in order:
        _read(caches[rank], f, page)
    for c in caches:
        c.close()
    assert max(f.page_reads.values()) == 1, f.page_reads
    for s in net.services:
        assert len(s.locks.victims) + s.locks.cached <= 4


@settings(max_examples=80, deadline=None)
@given(ops=st.lists(st.tuples(st.integers(0, 2), st.booleans(), st.integers(0, 11 * PS),
                              st.integers(1, 2 * PS)), min_size=1, max_size=60),
       victims=st.booleans())
def test_reads_see_every_write_with_victims_kept_and_handed(ops, victims):
    """Random reads and writes of three ranks with 3 slots each over 12 pages (evicting
    all the time, dirty pages too): every read returns the bytes of the last writes, and
    after every rank's sync the file holds them — victims never serve a stale copy."""
    _, f, caches = _group(3, 3, 12, victims=victims)
    model = bytearray(f.data)
    for i, (rank, write, off, n) in enumerate(ops):
        n = min(n, 12 * PS - off)
        if n <= 0:
            continue
        if write:
            blob = bytes((i * 13 + k) % 256 for k in range(n))
            caches[rank].write([(off, n)], memoryview(blob))
            model[off:off + n] = blob
        else:
            assert bytes(caches[rank].read([(off, n)])) == bytes(model[off:off + n])
    for c in caches:
        c.sync()
    assert bytes(f.data[:12 * PS]) == bytes(model)


def test_claims_other_homes_granted_are_given_back_when_one_home_refuses_for_room():
    """A range read ahead without the lead rule (its first page cached here already) asks
    every home at once with ``room``; when one home refuses the range for room, the pages
    the other homes claimed are given back (s30: before, they stayed claimed — locked and
    published as cached here — for good)."""
    from pvfs.collective._readahead import Prefetcher

    net, _, caches = _group(3, 4, 12, victims=True)
    c = caches[0]
    c.ra = Prefetcher(c, 4)
    c.free.clear()
    c.lru.add(5, 0)  # the range's first page is cached here: no lead
    homes = [s.locks for s in net.services]
    homes[1].cached = homes[2].cached = 5  # these homes see the group full: they claim
    assert homes[0].request(9, 1, True)[0] == "granted"  # rank 1 reads at home 0 ...
    homes[0].release(9, 1, None)  # ... so home 0 leaves the range to others: refuses
    c.ra._issue(5, 9)  # pages 6 (home 0), 7 (home 1), 8 (home 2)
    assert c.ra.pages == 0
    assert homes[1].holders(7) == (None, set()) and homes[2].holders(8) == (None, set())
    assert homes[1].cached == homes[2].cached == 5  # uncached again
