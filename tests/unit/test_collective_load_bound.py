"""Issue 32: one file-system read per page. A read that finds a page being loaded (or read
ahead) waits for the loader's copy up to a bound and reads around only past it; the
counters and bench fields that show it (``load_stalls``, ``pages_touched``,
``fs_read_pages``, ``fs_writes_straddling``, ``cpu_s_per_gib``). No MPI."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

import pvfs.collective._loadwaits as locks_mod
from pvfs.collective._fsio import CountingFile, straddles
from pvfs.collective._loadwaits import LoadTimes
from pvfs.collective._locks import READ, LockManager
from pvfs.collective._pages import UNCACHED, Meta


# ------------------------------------------------------------------ the rule
def test_default_wait_is_the_bound_whatever_loads_took(monkeypatch):
    monkeypatch.setattr(locks_mod, "_AROUND_US", None)
    monkeypatch.delenv(locks_mod.LOAD_WAIT_ENV, raising=False)
    monkeypatch.delenv(locks_mod.PROBE_ENV, raising=False)
    t = LoadTimes.from_env()
    assert t.bound == locks_mod.LOAD_BOUND and t.wait() == locks_mod.LOAD_BOUND
    for _ in range(5):
        t.add(0.001)
        t.add_around(0.0001)  # a read around would be cheap: still wait for the copy
    assert t.wait() == locks_mod.LOAD_BOUND
    monkeypatch.setenv(locks_mod.LOAD_WAIT_ENV, "adaptive")
    old = LoadTimes.from_env()
    assert old.bound is None and old.wait() == pytest.approx(locks_mod.AROUND_AFTER)
    monkeypatch.delenv(locks_mod.LOAD_WAIT_ENV)
    monkeypatch.setattr(locks_mod, "_AROUND_US", "300")  # a fixed wait still fixes it
    assert LoadTimes.from_env().wait() == pytest.approx(locks_mod.AROUND_AFTER)


def test_home_waits_for_the_copy_within_the_bound_and_reads_around_past_it():
    now = [0.0]
    m = LockManager(clock=lambda: now[0])
    assert m.request(1, 7, True)[0] == "granted"  # rank 7 loads page 1
    assert m.request_batch(0, [(1, READ)], around=1.0) is None
    now[0] = 0.9  # a slow load (0.9 s) is still waited for: no second read of the page
    assert m.expire() == []
    assert m.release(1, 7, Meta(7, 2, False)) == [(0, [Meta(7, 2, False)])]
    assert m.load_timeouts == 0
    # A loader that stalls past the bound: the reader reads around and goes on.
    assert m.request(4, 7, True)[0] == "granted"
    assert m.request_batch(2, [(4, READ), (5, READ)], around=1.0) is None
    now[0] = 2.0
    assert m.expire() == [(2, [None, UNCACHED])] and m.load_timeouts == 1


class _Window:
    """Page words of one home in memory, with the atomics RmaLocks uses."""

    def __init__(self, pages: int) -> None:
        self.words = [0] * pages

    def fop(self, value, home, disp, op):
        old = self.words[disp // 8]
        self.words[disp // 8] = old + value
        return old

    def cas(self, new, expect, home, disp):
        old = self.words[disp // 8]
        if old == expect:
            self.words[disp // 8] = new
        return old


def _rma_locks(window: _Window):
    import pvfs.collective._rma as rma

    locks = object.__new__(rma.RmaLocks)
    locks.MPI = SimpleNamespace(SUM="sum")
    locks.n, locks.per_rank = 1, len(window.words)
    locks._seen, locks._held = {}, {}
    locks.lock_calls = locks.retries = 0
    locks._fop, locks._cas = window.fop, window.cas  # type: ignore[method-assign]
    return locks


def test_rma_reader_waits_for_a_claim_up_to_its_bound_then_reads_around(monkeypatch):
    import pvfs.collective._rma as rma

    monkeypatch.setattr(rma, "DEADLINE", 0.5)  # (a wait past the bound fails, not hangs)
    w = _Window(4)
    loader, reader = _rma_locks(w), _rma_locks(w)
    assert loader.claim(2, 0) is False  # read-ahead claims page 2 for rank 0
    assert w.words[2] & rma.LOADING and w.words[2] & rma.WRITER
    assert rma.unpack(w.words[2]).owner == 0  # published as cached under the claim
    began = time.monotonic()
    assert reader.lock(2, False, around=0.05) is None  # the claimer stalled: read around
    assert time.monotonic() - began >= 0.05
    # The claim's release (release_claim needs a window: its one sum, by hand).
    w.words[2] += rma.pack(Meta(0, 5, False)) - loader._held.pop(2) - rma.WRITER - rma.LOADING
    assert w.words[2] & rma.LOCK_BITS == 0
    assert reader.lock(2, False, around=0.05) == Meta(0, 5, False)  # the filled copy
    # A page cached and write-locked (its copy may be dirty) is never read around: the
    # reader waits for the lock (here until the deadline that turns a hang into an error).
    assert loader.lock(3, True) == UNCACHED
    loader.unlock(3, True, Meta(0, 1, False))
    assert loader.lock(3, True) == Meta(0, 1, False)
    with pytest.raises(rma.CollectiveTimeout):
        reader.lock(3, False, around=0.01)


# ------------------------------------------------------------------ the counters
def test_page_cache_counts_reads_around_past_the_bound_as_stalls():
    from test_collective_load_waits import _AroundLocks, _page_cache, _SlowFile

    locks = _AroundLocks()
    cache = _page_cache(_SlowFile([0.0]), locks)
    cache.load_times = LoadTimes(bound=1.0)
    cache.read([(0, 32)])  # page 0's loader outlasted the bound: read around, counted
    assert locks.arounds[-1] == 1.0
    assert cache.read_around == 1 and cache.counters()["load_stalls"] == 1
    cache.load_times = LoadTimes()  # the adaptive rule: a read around is no stall
    cache.read([(0, 32)])
    assert cache.read_around == 2 and cache.load_stalls == 1


def test_straddles_counts_writes_that_cover_a_stripe_unit_in_part_across_a_boundary():
    u = 65536
    assert not straddles(0, u, u) and not straddles(u, 4 * u, u)  # whole units
    assert not straddles(100, 720, u) and not straddles(u - 720, 720, u)  # inside one
    assert straddles(u - 100, 720, u) and straddles(0, u + 1, u)  # across, in part
    assert straddles(100, 2 * u - 100, u) and not straddles(5, 0, u)
    assert not straddles(u - 100, 720, 0)  # unknown unit: nothing counted


class _Native:
    stripe = SimpleNamespace(ssize=1024)

    def pwrite(self, data, offset):
        pass

    def write_list(self, regions, data):
        pass


def test_counting_file_counts_straddling_regions_of_pwrite_and_list_calls():
    f = CountingFile(_Native())
    assert f.unit == 1024
    f.pwrite(b"x" * 100, 1000)  # 1000-1100: across 1024
    f.pwrite(b"x" * 1024, 2048)  # a whole unit
    f.write_list([(0, 1024), (1500, 600), (3000, 10)], b"x" * 1634)  # one of three
    c = f.counters()
    assert c["fs_writes"] == 3 and c["fs_write_regions"] == 5
    assert c["fs_writes_straddling"] == 2
    assert CountingFile(object()).unit == 0  # (a file without a stripe: none counted)


def test_window_pages_and_the_read_once_target():
    from pvfs.bench.collective.drive import read_once
    from pvfs.bench.collective.mpi import per_gib, window_pages

    # 2 clients, 3 loops, 64 KiB chunks of two 32 KiB pages: 12 pages, every rank all.
    assert window_pages(0, 2, 65536, 32768, 3) == set(range(12))
    assert window_pages(2, 2, 65536, 32768, 3) == set()  # a lock server reads nothing
    assert per_gib(2.0, 2**29) == 4.0 and per_gib(1.0, 0) == 0.0
    row = {"benchmark": "sliding_window", "method": "rma", "pages_touched": 640,
           "fs_reads": 48, "fs_read_pages": 640.0}
    assert read_once(row) == {"calls_met": True, "pages_met": True}
    row["fs_read_pages"] = 900.0  # pages read around: one read per page missed
    assert read_once(row) == {"calls_met": True, "pages_met": False}
    assert read_once({**row, "method": "independent"}) is None
    assert read_once({"benchmark": "btio", "method": "rma"}) is None


def test_a_read_queued_at_a_cached_page_that_becomes_a_load_waits_only_its_bound():
    # Found by the lock home's state machine (issue 32): a read queued behind a writer at
    # a cached page; the owner evicts it, the writer is granted the page cached nowhere
    # (it loads it, or writes it to the file) and the read waited for it without a bound.
    now = [0.0]
    m = LockManager(clock=lambda: now[0])
    assert m.request_batch(0, [(1, True)]) == [UNCACHED]  # rank 0 caches page 1
    assert m.release(1, 0, Meta(0, 3, False)) == []
    assert m.request_batch(0, [(1, True)]) == [Meta(0, 3, False)]  # rank 0 evicts it
    assert m.request_batch(1, [(1, True)]) is None  # a writer queues
    assert m.request_batch(2, [(1, READ)], around=1.0) is None  # a read behind it
    assert m.release(1, 0, UNCACHED) == [(1, [UNCACHED])]  # the writer has it, uncached
    now[0] = 0.9
    assert m.expire() == []  # within the bound: wait for the writer's copy
    now[0] = 1.0
    assert m.expire() == [(2, [None])]  # past it: read around
    assert m.holders(1) == (1, set())
