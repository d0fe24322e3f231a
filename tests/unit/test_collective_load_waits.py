"""The collective cache's wait for pages another rank is loading (``LoadTimes``, the lock
manager's and the page cache's read-around waits, the opt-in probe), with fake locks, data
planes and files: no MPI."""

from __future__ import annotations

import pytest

from pvfs.collective._loadwaits import LoadTimes
from pvfs.collective._locks import BUSY, READ, LockManager
from pvfs.collective._pages import UNCACHED, Meta


def test_lock_manager_read_waits_for_a_load_then_reads_around_at_the_deadline():
    now = [10.0]
    m = LockManager(grace=3e-4, clock=lambda: now[0])
    assert m.request(1, 7, True)[0] == "granted"  # rank 7 loads page 1 (cached nowhere)
    # A try batch does not read around a load any more: it stops there (asked in order).
    assert m.try_batch(0, [(1, READ), (2, READ)], around=True) == [BUSY]
    # A queued read batch waits for the load ...
    assert m.request_batch(0, [(1, READ), (2, READ)], around=True) is None
    assert m.next_deadline() == pytest.approx(10.0003)
    now[0] += 1e-4
    assert m.expire() == []  # not yet
    cached = Meta(7, 3, False)
    # ... and gets the copy when the loader publishes it: shared, no file read.
    assert m.release(1, 7, cached) == [(0, [cached, UNCACHED])]
    assert m.holders(1) == (None, {0}) and m.holders(2) == (0, set())  # 2: 0 will load it
    assert m.next_deadline() is None and m.load_waits == 1
    # A loader that takes too long: the reader reads around it and goes on with page 6.
    assert m.request(5, 7, True)[0] == "granted"
    assert m.request_batch(1, [(5, READ), (6, READ)], around=True) is None
    now[0] += 5e-4
    assert m.expire() == [(1, [None, UNCACHED])]
    assert m.holders(5) == (7, set()) and m.holders(6) == (1, set())
    assert m.load_timeouts == 1 and not m._get(5).queue


def test_lock_manager_waiter_for_a_load_keeps_waiting_once_the_page_is_cached():
    now = [0.0]
    m = LockManager(grace=3e-4, clock=lambda: now[0])
    assert m.request(3, 7, True)[0] == "granted"  # loading
    assert m.request(3, 8, True) == ("queued", None)  # a writer waits first
    assert m.request_batch(0, [(3, READ)], around=True) is None  # then a reader
    cached = Meta(7, 1, False)
    assert m.release(3, 7, cached) == [(8, cached)]  # the writer has the cached page
    now[0] += 1.0
    # Cached now (the copy may be dirty): no reading around, the reader keeps its place.
    assert m.expire() == []
    assert m.release(3, 8, None) == [(0, [cached])]
    # Without a grace (the default) a read batch reads around a load at once, as before.
    m2 = LockManager()
    assert m2.request(1, 7, True)[0] == "granted"
    assert m2.request_batch(0, [(1, READ)], around=True) == [None]


def test_load_times_wait_grows_after_slow_loads_and_shrinks_after_fast_ones():
    t = LoadTimes(floor=3e-4, cap=0.5, factor=2.0, alpha=0.25)
    assert t.wait() == pytest.approx(3e-4)  # nothing measured: the floor
    for _ in range(3):
        t.add(0.030)  # a slow disk: ~30 ms per load
    assert t.wait() == pytest.approx(0.060)
    t.add(0.070)  # a load queued behind another: the wait rises at once
    assert 0.060 < t.wait() < 0.140
    for _ in range(40):
        t.add(1e-4)  # fast storage again
    assert t.wait() == pytest.approx(3e-4)  # back to the floor, never below
    t.add(5.0)
    assert t.wait() == pytest.approx(0.5)  # a stuck loader: capped
    # PVFS_COLLECTIVE_AROUND_US fixes the wait whatever was measured.
    fixed = LoadTimes(fixed=0.04)
    fixed.add(1e-4)
    assert fixed.wait() == 0.04


def test_lock_manager_waits_for_a_load_as_long_as_the_reader_asks():
    now = [0.0]
    m = LockManager(grace=3e-4, clock=lambda: now[0])
    assert m.request(1, 7, True)[0] == "granted"  # rank 7 loads page 1
    assert m.request_batch(0, [(1, READ)], around=0.05) is None  # the reader's wait: 50 ms
    assert m.next_deadline() == pytest.approx(0.05)
    now[0] = 0.01
    assert m.expire() == []  # past the home's grace, within the reader's wait
    cached = Meta(7, 2, False)
    assert m.release(1, 7, cached) == [(0, [cached])]
    # A wait of 0 reads around at once (PVFS_COLLECTIVE_AROUND_US=0); False never does.
    assert m.request(4, 7, True)[0] == "granted"
    assert m.request_batch(1, [(4, READ)], around=0.0) == [None]
    assert m.try_batch(1, [(4, READ)], around=0.0) == [None]
    assert m.request_batch(2, [(4, READ)], around=False) is None
    assert m.next_deadline() is None


class _FakeLocks:
    lock_calls = retries = 0

    def __init__(self) -> None:
        self.arounds: list[object] = []

    def lock_set(self, pages, write, around, wants=None):
        self.arounds.append(around)
        return [(UNCACHED, True) for _ in pages]  # cached nowhere: this rank loads them

    def unlock_set(self, held) -> None:
        pass

    def try_lock(self, page):
        return None


class _FakeData:
    remote_gets = remote_puts = 0

    def __init__(self, nslots: int, ps: int) -> None:
        self.mem = bytearray(nslots * ps)
        self.ps = ps

    def view(self, slot):
        return memoryview(self.mem)[slot * self.ps:(slot + 1) * self.ps]

    def dirty(self, slot):
        from pvfs.collective._pages import Dirty

        return Dirty()

    def clean(self, slot) -> None:
        pass

    def mark(self, slot, lo, hi) -> None:
        pass


@pytest.fixture
def clock(monkeypatch):
    """The page cache's clock (``time.monotonic`` in pvfs.collective._cache), frozen: only
    the fake files' reads move it on, so the load and read-around times it measures are
    exactly the fake disk's."""
    from pvfs.collective import _cache

    now = [100.0]
    monkeypatch.setattr(_cache.time, "monotonic", lambda: now[0])
    return now


class _SlowFile:
    reads = 0

    def __init__(self, clock: list[float]) -> None:
        self.clock = clock

    def took(self, offset: int) -> float:
        return 0.02  # a slow disk

    def preadinto(self, buf, offset):
        self.reads += 1
        self.clock[0] += self.took(offset)
        buf[:] = bytes(len(buf))
        return len(buf)


def _page_cache(file, locks):
    """Rank 0 of 2, eight 64-byte slots, over a fake file and lock table."""
    from pvfs.collective._cache import PageCache

    return PageCache(0, 2, file, locks, _FakeData(8, 64), 8, 64,  # type: ignore[arg-type]
                     size_at_open=1 << 20, atomic=False)


def test_page_cache_waits_for_loads_as_long_as_its_own_loads_take(clock):
    locks = _FakeLocks()
    cache = _page_cache(_SlowFile(clock), locks)
    cache.load_times = LoadTimes(floor=3e-4, cap=0.5)
    cache.read([(0, 128)])  # loads pages 0-1 in one 20 ms read
    cache.read([(256, 64)])
    assert locks.arounds[0] == pytest.approx(3e-4)  # nothing measured yet
    assert locks.arounds[1] == pytest.approx(0.04)  # twice the 20 ms load
    cache.write([(512, 64)], memoryview(bytes(64)))
    assert locks.arounds[2] is False  # writes never read around


def test_load_times_wait_is_capped_at_what_reading_around_costs():
    t = LoadTimes(floor=3e-4, cap=0.5, factor=2.0, alpha=0.25)
    for _ in range(3):
        t.add(0.030)  # the loader's disk read: ~30 ms
    assert t.wait() == pytest.approx(0.060)  # no read-around measured: the load-based wait
    t.add_around(0.002)  # reading it ourselves: a 2 ms hit in the servers' disk cache
    assert t.wait() == pytest.approx(0.004)  # never wait longer than 2 read-arounds
    for _ in range(40):
        t.add_around(0.200)  # reading around got slow (no server cache): the cap lifts
    assert t.wait() == pytest.approx(0.060)  # the load-based wait again
    fresh = LoadTimes(floor=3e-4)
    fresh.add_around(1e-3)
    assert fresh.wait() == pytest.approx(3e-4)  # never above the load-based wait
    fixed = LoadTimes(fixed=0.04)
    fixed.add(0.03)
    fixed.add_around(1e-5)
    assert fixed.wait() == 0.04  # PVFS_COLLECTIVE_AROUND_US still fixes it


class _AroundLocks(_FakeLocks):
    """Page 0 is being loaded by another rank (read around); the others load here."""

    def lock_set(self, pages, write, around, wants=None):
        self.arounds.append(around)
        return [(None, False) if p == 0 and not write else (UNCACHED, True) for p in pages]


class _FastFile(_SlowFile):
    def took(self, offset: int) -> float:
        return 0.02 if offset >= 64 else 0.001  # page 0: a cheap server-cache hit


def test_page_cache_caps_its_wait_at_its_own_read_arounds(clock):
    locks = _AroundLocks()
    cache = _page_cache(_FastFile(clock), locks)
    cache.load_times = LoadTimes(floor=3e-4, cap=0.5)
    cache.read([(128, 64)])  # loads page 2 in a 20 ms read
    cache.read([(256, 64)])
    assert locks.arounds[-1] == pytest.approx(0.04)  # load-based: no read-around measured yet
    cache.read([(0, 32)])  # page 0 read around in 1 ms
    assert cache.read_around == 1
    cache.read([(384, 64)])
    assert locks.arounds[-1] == pytest.approx(0.002)  # capped at 2 read-arounds, not 2 loads


def test_lock_manager_one_wait_for_all_the_pages_of_a_batch_being_loaded():
    # A 64 KiB chunk is two 32 KiB pages loaded by one read: a reader that waited its 50 ms
    # for the first reads both around then, not after a second 50 ms for the second.
    now = [0.0]
    m = LockManager(grace=3e-4, clock=lambda: now[0])
    for page in (4, 5):
        assert m.request(page, 7, True)[0] == "granted"  # rank 7 loads the chunk
    assert m.request_batch(0, [(4, READ), (5, READ)], around=0.05) is None
    assert m.next_deadline() == pytest.approx(0.05)
    now[0] = 0.05
    assert m.expire() == [(0, [None, None])]
    assert m.next_deadline() is None and m.load_timeouts == 1
    # A page granted within the wait leaves only the rest of it for the next one.
    assert m.request_batch(1, [(4, READ), (5, READ)], around=0.05) is None
    now[0] = 0.08
    cached = Meta(7, 1, False)
    assert m.release(4, 7, cached) == []  # page 4 granted; page 5 still being loaded
    assert m.next_deadline() == pytest.approx(0.10)


def test_rma_lock_set_waits_once_for_a_set_of_pages_being_loaded(monkeypatch):
    import pvfs.collective._rma as rma

    now = [0.0]
    monkeypatch.setattr(rma, "_now", lambda: now[0])
    asked: list[object] = []

    def lock_read(page, around):
        asked.append(around)
        if around:
            now[0] += around  # the page is being loaded: wait all of it, then read around
        return None, False

    locks = object.__new__(rma.RmaLocks)
    locks.lock_read = lock_read  # type: ignore[method-assign]
    assert locks.lock_set([4, 5, 6], False, 0.05) == [(None, False)] * 3
    assert asked == [pytest.approx(0.05), 0.0, 0.0]  # one budget, not one per page
    asked.clear()
    locks.lock_set([4, 5], False, True)  # True: the default wait per set
    assert asked[0] == pytest.approx(rma.AROUND_AFTER) and asked[1] == 0.0
    asked.clear()
    locks.lock_set([4, 5], False, False)
    assert asked == [False, False]  # never reading around: unchanged


def test_load_times_probe_waits_all_or_nothing_by_what_reading_around_costs():
    t = LoadTimes(floor=3e-4, cap=0.5, factor=2.0, alpha=0.25, probe=True)
    assert t.wait() == pytest.approx(3e-4)  # nothing measured: the floor
    for _ in range(3):
        t.add(0.030)  # the loader's disk reads: ~30 ms
    assert t.wait() == 0.0  # never read around: read around the next load met, to learn
    t.add_around(0.002)  # a 2 ms hit in the servers' disk cache: under half a load
    assert t.wait() == pytest.approx(3e-4)  # waiting cannot pay: only the floor
    for _ in range(40):
        t.add_around(0.045)  # no server cache: a second disk read, queued
    assert t.wait() == pytest.approx(0.060)  # over half a load: the load-based wait
    posix = LoadTimes(floor=3e-4, probe=True)
    for _ in range(10):
        posix.add(0.001)
        posix.add_around(0.0008)  # on posix a read around costs about a load
    assert posix.wait() == pytest.approx(0.0016)  # 2 loads, capped at 2 read-arounds
    fixed = LoadTimes(fixed=0.04, probe=True)
    fixed.add(0.03)
    assert fixed.wait() == 0.04  # PVFS_COLLECTIVE_AROUND_US still fixes it


def test_page_cache_reads_around_the_first_load_it_meets_with_the_probe(monkeypatch, clock):
    # A rank that never read around does not know what it costs; by default it waits twice
    # its own loads for every other rank's load (s14: ~70 ms on the emulated disk, where a
    # read around was a 2 ms hit in the servers' cache). With the probe it reads around.
    import pvfs.collective._loadwaits as locks_mod
    monkeypatch.setattr(locks_mod, "_AROUND_US", None)
    monkeypatch.setenv(locks_mod.PROBE_ENV, "1")
    locks = _FakeLocks()
    cache = _page_cache(_SlowFile(clock), locks)
    cache.read([(0, 128)])  # loads pages 0-1 in one 20 ms read
    cache.read([(256, 64)])
    assert locks.arounds[1] == 0.0  # read around the next load met (a probe)


def test_lock_manager_a_stale_wait_on_a_granted_page_does_not_end_the_wait_on_the_next():
    # CI stop 26 (8 ranks, lock stress): a batch waited for page 4's load, was granted it
    # (released cached nowhere) and queued for page 5 with the same deadline (one budget
    # per batch). The timed entry left from page 4 passed for the wait on page 5: at the
    # deadline page 5 was read around while the batch still queued for it, and page 5's
    # release then granted a complete batch (IndexError in the lock server).
    now = [0.0]
    m = LockManager(grace=3e-4, clock=lambda: now[0])
    for page in (4, 5):
        assert m.request(page, 7, True)[0] == "granted"  # rank 7 loads both
    assert m.request_batch(1, [(4, READ), (5, READ)], around=0.05) is None
    now[0] = 0.02
    assert m.release(4, 7, None) == []  # page 4 granted (still cached nowhere); 5 waits
    assert m.holders(4) == (1, set())
    now[0] = 0.05
    # Page 5 is read around once, and the batch leaves page 5's queue.
    assert m.expire() == [(1, [UNCACHED, None])]
    assert m.next_deadline() is None and not m._get(5).queue
    assert m.release(5, 7, None) == []  # nobody waits for page 5 any more
    assert m.holders(5) == (None, set())


def test_lock_manager_ends_the_shortest_wait_first_whatever_the_order_of_the_requests():
    now = [0.0]
    m = LockManager(grace=3e-4, clock=lambda: now[0])
    for page in (1, 2):
        assert m.request(page, 7, True)[0] == "granted"
    assert m.request_batch(0, [(1, READ)], around=0.5) is None  # a long wait first
    assert m.request_batch(3, [(2, READ)], around=0.01) is None  # then a short one
    assert m.next_deadline() == pytest.approx(0.01)
    now[0] = 0.01
    assert m.expire() == [(3, [None])]
    assert m.next_deadline() == pytest.approx(0.5)
