"""The collective cache's read-ahead: the window logic, and the prefetcher against a lock
table and a file in memory (one rank; the group's rules under mpiexec are in
tests/integration/test_collective.py)."""

from __future__ import annotations

import threading

import pytest
from test_collective_load_waits import _FakeData

from pvfs.collective._pages import UNCACHED, Meta
from pvfs.collective._readahead import READAHEAD_ENV, ReadWindow, configured


def test_window_needs_a_sequential_hit_then_doubles_up_to_the_max():
    w = ReadWindow(max_pages=32, init_pages=4)
    assert w.on_read(0, 1) is None  # a stream's first read: nothing known yet
    assert w.on_read(2, 3) == (4, 8)  # sequential: the first window, past the front
    assert w.size == 4
    assert w.on_read(4, 5) == (8, 14)  # doubled to 8: topped up to front + 8
    assert w.on_read(6, 7) == (14, 24)  # 16
    assert w.on_read(8, 9) == (24, 42)  # 32, the max
    assert w.on_read(10, 11) is None  # less than half a window to top up: wait
    assert w.on_read(12, 13) is None
    assert w.on_read(14, 25) == (42, 58)  # 16 pages missing: one large read
    assert w.size == 32


def test_window_resets_on_a_random_read_and_ignores_rereads_behind_the_front():
    w = ReadWindow(max_pages=16, init_pages=4)
    w.on_read(0, 1)
    w.on_read(2, 3)
    w.on_read(4, 5)
    assert (w.front, w.size, w.end) == (6, 8, 14)
    assert w.on_read(0, 3) is None  # a re-read behind the front: nothing changes
    assert (w.front, w.size, w.end) == (6, 8, 14)
    assert w.on_read(10, 11) is not None  # inside what was read ahead: still sequential
    assert w.on_read(100, 101) is None  # past everything read or read ahead: random
    assert (w.front, w.size, w.resets) == (102, 0, 1)
    assert w.on_read(102, 103) == (104, 108)  # a new stream starts small again
    assert w.on_read(40, 41) is None  # far behind the front: random too
    assert (w.front, w.size, w.resets) == (42, 0, 2)


def test_window_ends_reads_ahead_at_stripe_rows():
    w = ReadWindow(max_pages=32, init_pages=4, align=8)
    w.on_read(0, 1)
    assert w.on_read(2, 3) == (4, 8)
    assert w.on_read(4, 5) == (8, 16)  # front 6 + 8 = 14, to the row's end
    assert w.on_read(6, 7) == (16, 24)
    for first in range(8, 40, 2):
        got = w.on_read(first, first + 1)
        assert got is None or (got[0] % 8 == 0 and got[1] % 8 == 0)
    assert ReadWindow(max_pages=8, align=256).align == 1  # a row over the largest window


def test_window_off_and_request_sized_first_window():
    off = ReadWindow(max_pages=0)
    assert off.on_read(0, 1) is None and off.on_read(2, 3) is None
    w = ReadWindow(max_pages=64, init_pages=4)
    w.on_read(0, 7)
    assert w.on_read(8, 15) == (16, 32)  # twice the request, not the small start


def test_window_in_the_sliding_window_streams_hold_except_the_last_ranks():
    """DAChe's sliding window (2 pages a chunk, n chunks a window, rank r starting at its
    own chunk and shifting circularly): once warm the streams of ranks 0..n-2 hold — their
    jumps to the next window land inside what was read ahead, the wraps are re-reads. The
    last rank jumps 2n-2 pages past its front every window with nothing read ahead there:
    random by Linux's rule, so it resets each window and never reads ahead."""
    n = 4
    for r in range(n):
        w = ReadWindow(max_pages=32)
        for win in range(12):
            for j in range(n):
                c = win * n + (r + j) % n
                w.on_read(2 * c, 2 * c + 1)
            if win == 2:
                resets = w.resets
        if r < n - 1:
            assert w.resets == resets and w.size == 32, r
            assert w.end >= 2 * n * 12  # the next window was asked for
        else:
            assert w.resets == resets + 9 and w.size == 0


def test_configured_reads_the_keyword_then_the_environment(monkeypatch):
    monkeypatch.delenv(READAHEAD_ENV, raising=False)
    assert configured(4096) == 4096 and configured(0) == 0
    # on by default for every coordination (the message back ends since s17)
    assert configured(None) > 0 and configured(None, "rma") > 0
    assert configured(None, "thread") > 0 and configured(None, "servers") > 0  # since s17
    assert configured(4096, "servers") == 4096
    monkeypatch.setenv(READAHEAD_ENV, "65536")
    assert configured(None) == 65536 and configured(None, "thread") == 65536
    assert configured(0) == 0  # the keyword wins
    monkeypatch.setenv(READAHEAD_ENV, "lots")
    with pytest.raises(ValueError):
        configured(None)
    with pytest.raises(ValueError):
        configured(-1)


# --------------------------------------------------------------------------- the prefetcher
class _Table:
    """One rank's view of a lock table: page -> [writer held, metadata]."""

    lock_calls = retries = 0

    def __init__(self) -> None:
        self.pages: dict[int, list] = {}
        self.claims: list[int] = []
        self.released: list[tuple[int, Meta, str]] = []

    def _entry(self, page: int) -> list:
        return self.pages.setdefault(page, [False, UNCACHED])

    def claim(self, page, owner):
        e = self._entry(page)
        if e[0] or e[1].owner >= 0:
            return None
        e[0], e[1] = True, Meta(owner, 0, e[1].flushed)
        self.claims.append(page)
        return e[1].flushed

    def claim_pages(self, pages, owner, lead=False, room=None):
        out = []
        for page in pages:
            out.append(self.claim(page, owner))
            if lead and out[0] is None:
                return [None] * len(pages)
        return out

    def release_claims(self, pairs):
        for page, meta in pairs:
            e = self._entry(page)
            assert e[0], "released a page that was not claimed"
            e[0], e[1] = False, meta
            self.released.append((page, meta, threading.current_thread().name))

    def lock_set(self, pages, write, around, wants=None):
        out = []
        for p in pages:
            e = self._entry(p)
            assert not e[0], f"page {p} locked: the cache should have waited for it"
            out.append((e[1], True if write else e[1].owner < 0))
        return out

    def unlock_set(self, held):
        for page, _, meta in held:
            if meta is not None:
                self._entry(page)[1] = meta

    def try_lock(self, page):
        e = self._entry(page)
        return None if e[0] else e[1]

    def unlock(self, page, excl, meta):
        if meta is not None:
            self._entry(page)[1] = meta


class _File:
    def __init__(self, data: bytes, fail: bool = False) -> None:
        self.data = data
        self.reads: list[tuple[int, int, str]] = []
        self.fail = fail
        self.gate = threading.Event()
        self.gate.set()

    def preadinto(self, buf, offset):
        if threading.current_thread().name == "pvfs-readahead":
            self.gate.wait(5)  # (the gate holds reads ahead only)
        self.reads.append((offset, len(buf), threading.current_thread().name))
        if self.fail and threading.current_thread().name == "pvfs-readahead":
            raise OSError(5, "disk on fire")
        part = self.data[offset:offset + len(buf)]
        buf[:len(part)] = part
        return len(part)


PS = 64


def _cache(table, file, nslots=16, readahead=8 * PS, size=None):
    from pvfs.collective._cache import PageCache

    return PageCache(0, 1, file, table, _FakeData(nslots, PS), nslots, PS,  # type: ignore[arg-type]
                     size_at_open=len(file.data) if size is None else size, atomic=False,
                     readahead=readahead)


def _blob(pages: int) -> bytes:
    return bytes((i * 7) % 251 for i in range(pages * PS))


def test_sequential_reads_are_served_from_pages_read_ahead_by_the_helper_thread():
    blob = _blob(24)
    table, f = _Table(), _File(blob)
    cache = _cache(table, f, nslots=32, readahead=8 * PS)
    for p in range(0, 20, 2):
        assert bytes(cache.read([(p * PS, 2 * PS)])) == blob[p * PS:(p + 2) * PS]
    ra = cache.ra
    assert ra is not None and ra.pages > 0
    # The main thread loaded only the first pages; the rest came from reads ahead, in
    # reads of several consecutive pages, released by the helper thread.
    mine = [r for r in f.reads if r[2] != "pvfs-readahead"]
    ahead = [r for r in f.reads if r[2] == "pvfs-readahead"]
    assert len(mine) == 2 and ahead and max(n for _, n, _ in ahead) >= 2 * PS
    assert all(who == "pvfs-readahead" for _, _, who in table.released)
    assert all(meta.owner == 0 and meta.slot >= 0 for _, meta, _ in table.released)
    cache.close()
    assert not ra.inflight and all(not e[0] for e in table.pages.values())  # all released


def test_read_ahead_skips_pages_locked_or_cached_elsewhere_and_stops_at_the_size():
    blob = _blob(12)
    table, f = _Table(), _File(blob)
    table.pages[5] = [True, UNCACHED]  # another rank is loading page 5
    table.pages[6] = [False, Meta(3, 7, False)]  # page 6 is cached on rank 3
    cache = _cache(table, f, nslots=32, readahead=8 * PS)
    cache.read([(0, PS)])
    cache.read([(PS, PS)])  # sequential: read ahead pages 2-5
    cache.read([(2 * PS, PS)])  # and then 6-10
    cache.ra.drain()
    assert 5 not in table.claims and 6 not in table.claims
    assert set(table.claims) <= set(range(12)) and 4 in table.claims
    assert all(p < 12 for p in table.claims)  # nothing past the size at open
    assert cache.ra.skipped >= 2
    cache.close()


def test_a_range_whose_first_page_another_stream_took_is_left_to_it():
    blob = _blob(40)
    table, f = _Table(), _File(blob)
    cache = _cache(table, f, nslots=64, readahead=8 * PS)
    table.pages[6] = [True, Meta(2, 0, False)]  # rank 2's stream claimed page 6 ...
    table.pages[9] = [False, Meta(2, 3, False)]  # ... and has page 9 cached
    cache.read([(0, PS)])
    cache.read([(PS, PS)])  # reads ahead 2-5: all free, all claimed here
    cache.read([(2 * PS, PS)])  # tops up 6-10: page 6 is taken, the range is rank 2's
    cache.ra.drain()
    assert sorted(table.claims) == [2, 3, 4, 5]
    for p in (3, 4, 5, 7):  # (page 6 is rank 2's; 7 was left to it but never read ahead)
        cache.read([(p * PS, PS)])  # the last tops up 11-15: free, claimed here
    cache.ra.drain()
    assert sorted(table.claims) == [2, 3, 4, 5, 11, 12, 13, 14, 15]
    cache.close()


def test_pages_read_ahead_are_evictable_once_finished():
    blob = _blob(40)
    table, f = _Table(), _File(blob)
    cache = _cache(table, f, nslots=8, readahead=2 * PS)  # 8 slots, windows of 2 pages
    for p in range(40):
        assert bytes(cache.read([(p * PS, PS)])) == blob[p * PS:(p + 1) * PS]
    assert cache.ra.pages > 10 and cache.evictions > 0  # read-ahead pages went out again
    cache.close()
    cached = [p for p, e in table.pages.items() if e[1].owner == 0]
    assert len(cached) <= 8 and not any(e[0] for e in table.pages.values())


def test_a_read_waits_for_its_own_prefetch_without_locking():
    blob = _blob(16)
    table, f = _Table(), _File(blob)
    cache = _cache(table, f, nslots=32, readahead=4 * PS)
    cache.read([(0, PS)])
    f.gate.clear()  # the next read ahead hangs in the file until the gate opens
    cache.read([(PS, PS)])
    assert cache.ra.inflight
    page = min(cache.ra.inflight)
    threading.Timer(0.05, f.gate.set).start()
    # _Table.lock_set asserts that no locked page is asked for: the read waits for the
    # helper thread's release first.
    assert bytes(cache.read([(page * PS, PS)])) == blob[page * PS:(page + 1) * PS]
    assert cache.ra.waits >= 1
    cache.close()


def test_a_failed_read_ahead_uncaches_its_pages_and_frees_their_slots():
    blob = _blob(16)
    table, f = _Table(), _File(blob, fail=True)
    cache = _cache(table, f, nslots=16, readahead=4 * PS)
    free_before = len(cache.free)
    cache.read([(0, PS)])
    cache.read([(PS, PS)])
    cache.ra.drain()
    assert cache.ra.failed >= 1 and isinstance(cache.ra.error, OSError)
    assert all(meta.owner < 0 for _, meta, _ in table.released)
    assert len(cache.free) == free_before - 2  # only the two pages read by the main thread
    # and the pages are still readable (loaded by the main thread, which sees no error)
    f.fail = False
    assert bytes(cache.read([(2 * PS, 2 * PS)])) == blob[2 * PS:4 * PS]
    cache.close()


def test_writes_and_random_reads_do_not_read_ahead():
    blob = _blob(64)
    table, f = _Table(), _File(blob)
    cache = _cache(table, f, nslots=32, readahead=8 * PS)
    for p in (0, 1, 2, 3):
        cache.write([(p * PS, PS)], memoryview(bytes(PS)))
    for p in (40, 5, 30, 12, 55):
        cache.read([(p * PS, PS)])
    assert cache.ra.pages == 0 and not table.claims
    cache.close()


# ------------------------------------------------- message homes: claims in batches per home
def test_lock_manager_claims_only_free_uncached_pages_and_readers_queue_for_them():
    from pvfs.collective._locks import READ, LockManager

    m = LockManager(grace=3e-4)
    m.request(2, 5, True)  # rank 5 loads page 2 on demand
    m._get(3).meta = Meta(4, 1, False)  # page 3 is cached on rank 4
    m._get(4).meta = Meta(-1, -1, True)  # page 4 was flushed and is cached nowhere
    assert m.claim_batch(0, 0, [1, 2, 3, 4]) == [False, None, None, True]
    assert m.holders(1) == (0, set()) and m._get(1).meta == Meta(0, 0, False)
    assert m._get(4).meta == Meta(0, 0, True)  # published as cached here, under the lock
    # The lead rule: when the first page is taken, nothing of the batch is claimed.
    assert m.claim_batch(1, 1, [2, 5, 6], lead=True) == [None, None, None]
    assert m.holders(5) == (None, set()) and m.holders(6) == (None, set())
    # A page with a waiter is not claimed either (the waiter would be overtaken).
    m.request(7, 5, True)
    m.request(7, 6, False)
    assert m.claim_batch(0, 0, [7]) == [None]
    # A reader waits for a page being read ahead as for any load (issue 32): it gets the
    # filled copy shared when the claimer releases it within the reader's bound ...
    assert m.request_batch(3, [(1, READ)], around=0.5) is None
    assert m.expire(now=m.clock() + 0.4) == []
    assert m.release(1, 0, Meta(0, 6, False)) == [(3, [Meta(0, 6, False)])]
    assert m.holders(1) == (None, {3})
    # ... and reads it around when the claimer stalls past the bound (page 4, rank 0's);
    # a filled copy of a page nobody claims any more is waited for (it may be dirty).
    assert m.request_batch(5, [(4, READ)], around=0.5) is None
    assert m.expire(now=m.clock() + 0.6) == [(5, [None])]
    assert m.request_batch(5, [(1, True)], around=0.5) is None  # (rank 3 reads page 1)
    assert m.expire(now=m.clock() + 5.0) == []


def _msg_cache(net, file, nslots=64, readahead=8 * PS):
    """Rank 0's cache over the message back end's real lock services (``thread``-like:
    its own home's table directly, the other home by messages)."""
    from pvfs.collective._cache import PageCache

    return PageCache(0, 2, file, net.locks(0, local=True), _FakeData(nslots, PS),  # type: ignore[arg-type]
                     nslots, PS, size_at_open=len(file.data), atomic=False,
                     readahead=readahead)


def _record_senders(net, monkeypatch):
    """Which thread sent each message of ``net`` (the helper sends the releases)."""
    seen = []
    comm_type = type(net.services[0].comm)
    orig = comm_type.isend

    def isend(comm, obj, dest, tag):
        seen.append((dest, obj[0] if isinstance(obj, tuple) else "reply",
                     threading.current_thread().name))
        return orig(comm, obj, dest, tag)

    monkeypatch.setattr(comm_type, "isend", isend)
    return seen


def test_message_homes_read_ahead_claims_per_home_and_releases_from_the_helper(monkeypatch):
    from test_collective_parts import _Net

    blob = _blob(40)
    net = _Net(2, slots=64)
    seen = _record_senders(net, monkeypatch)
    f = _File(blob)
    cache = _msg_cache(net, f)
    for p in range(0, 30, 2):
        assert bytes(cache.read([(p * PS, 2 * PS)])) == blob[p * PS:(p + 2) * PS]
    ra = cache.ra
    ra.drain()
    assert ra.pages > 10 and ra.reads >= 2 and ra.unclaimed == 0
    # Claims: one message to the other home per read ahead (the own home's pages in its
    # table directly), sent by the main thread; releases: unlock messages sent by the
    # helper thread itself (it waits for no reply).
    claims = [s for s in seen if s[1] == "claim"]
    assert claims and all(s == (1, "claim", "MainThread") for s in claims)
    assert len(claims) < ra.pages / 2  # batched: not one message per page
    assert (1, "unlock", "pvfs-readahead") in seen
    # Only the first pages were loaded by the main thread; the rest came in reads ahead.
    assert len([r for r in f.reads if r[2] != "pvfs-readahead"]) == 2
    cache.close()
    for svc in net.services:  # every claim released; the pages cached on rank 0 only
        for page, e in svc.locks._pages.items():
            assert e.writer is None and not e.readers, page
            assert e.meta.owner in (-1, 0)


def test_message_homes_lead_rule_asks_no_other_home_when_the_first_refuses():
    from test_collective_parts import _Net

    blob = _blob(40)
    net = _Net(2, slots=64)
    f = _File(blob)
    cache = _msg_cache(net, f)
    # Rank 1's stream took page 6 (home 0) first: rank 0's range from 6 is rank 1's.
    assert net.services[0].locks.claim_batch(1, 1, [6]) == [False]
    cache.read([(0, PS)])
    cache.read([(PS, PS)])  # reads ahead 2-5 (both homes)
    before = len(net.sent)
    cache.read([(2 * PS, PS)])  # tops up from 6: taken at the own home, so left whole
    cache.ra.drain()
    ra = cache.ra
    # Home 1 was not asked for page 7 (s16: it was claimed, then given back).
    assert [s for s in net.sent[before:] if s[2] == "claim"] == []
    assert ra.unclaimed == 0 and ra.lead_lost == 1 and ra.pages == 4
    for p in (7, 9):
        e = net.services[p % 2].locks._pages.get(p)
        assert e is None or (e.writer is None and e.meta.owner < 0)
    net.services[0].locks.release(6, 1, Meta(-1, -1, False))
    cache.close()


def test_message_claims_ask_the_first_pages_home_alone_then_the_others(monkeypatch):
    """Three homes, rank 0 its own (``thread``): a lead claim goes to the first page's
    home alone; when it refuses, neither the other remote home nor the own table is
    asked; when it grants, the others are asked in one more round. Without the lead
    (or with the A/B switch off) every home is asked at once, as in s16."""
    from test_collective_parts import _Net

    from pvfs.collective._msgclient import LEAD_FIRST_ENV

    net = _Net(3)
    assert net.services[1].locks.claim_batch(1, 1, [4]) == [False]  # rank 1 leads from 4
    locks = net.locks(0, local=True)
    assert locks.claim_pages([4, 5, 6, 7], 0, lead=True) == [None] * 4  # homes 1, 2, 0, 1
    assert net.sent == [(0, 1, "claim")] and locks.lock_rounds == 1
    assert net.services[2].locks.holders(5) == (None, set())
    assert net.services[0].locks.holders(6) == (None, set())
    assert locks.lead_refusals == 1
    net.sent.clear()
    assert locks.claim_pages([8, 9, 10, 11], 0, lead=True) == [False] * 4  # homes 2, 0, 1, 2
    assert net.sent == [(0, 2, "claim"), (0, 1, "claim")] and locks.lock_rounds == 3
    assert net.services[0].locks.holders(9) == (0, set())
    assert net.services[2].locks.claim_batch(0, 0, [11]) == [None]  # claimed in round one
    net.sent.clear()
    assert locks.claim_pages([13, 14], 0) == [False, False]  # no lead: both at once
    assert sorted(net.sent) == [(0, 1, "claim"), (0, 2, "claim")] and locks.lock_rounds == 4
    monkeypatch.setenv(LEAD_FIRST_ENV, "0")
    old = net.locks(0, local=True)
    net.sent.clear()
    # s16's way: the other homes claim 5 and 6, which the caller must give back.
    assert old.claim_pages([4, 5, 6, 7], 0, lead=True) == [None, False, False, None]
    assert sorted(net.sent) == [(0, 1, "claim"), (0, 2, "claim")]
    assert net.services[2].locks.holders(5) == (0, set())


def test_a_remote_reader_of_a_page_being_read_ahead_waits_and_gets_the_copy():
    """Rank 1 asks for a page rank 0's helper thread is reading ahead: the home queues the
    read (no read around within the reader's bound, no grant while claimed) and the
    helper's release grants it
    shared with the filled slot (rank 0 is the page's home: the release and its grant go
    from the helper thread, without a message to a home)."""
    from test_collective_parts import _Net

    blob = _blob(16)
    net = _Net(2, slots=32)
    f = _File(blob)
    cache = _msg_cache(net, f, nslots=32, readahead=4 * PS)
    cache.read([(0, PS)])
    f.gate.clear()  # reads ahead hang in the file until the gate opens
    cache.read([(PS, PS)])  # claims pages 2-5 (homes 0 and 1)
    assert 4 in cache.ra.inflight
    reader = net.locks(1)
    reader.caller.send(0, ("lock", [(4, "read")], 30.0, False, None, None))
    assert not net.boxes.get((0, 1))  # queued behind the claim, not read around
    f.gate.set()
    cache.ra.drain()
    (results, *_), = net.boxes[(0, 1)]
    assert results[0].owner == 0 and results[0].slot >= 0  # the filled copy, shared
    assert net.services[0].locks.holders(4) == (None, {1})
    net.services[0].locks.release(4, 1, None)
    cache.close()
