"""The manager's pool of precreated inode numbers: the store's side and the refill loop."""

from __future__ import annotations

import errno
import sqlite3

import pytest
import trio
import trio.lowlevel
import trio.testing

from pvfs.daemons.mgr.migrations import SCHEMA_VERSION
from pvfs.daemons.mgr.precreate import PrecreatePool
from pvfs.daemons.mgr.store import ROOT_INO, Cred, MetaStore
from pvfs.layout.stripe import Stripe

ROOT = Cred(0, 0)


@pytest.fixture
def store(tmp_path):
    s = MetaStore(str(tmp_path / "meta.sqlite"), 4, Stripe(0, -1, 65536))
    yield s
    s.close()


def test_reserved_numbers_are_never_given_to_another_inode(store):
    a, _ = store.create(ROOT_INO, "a", 0o644, ROOT)
    pool = store.admin.pool_reserve(8)
    assert pool == list(range(a["ino"] + 1, a["ino"] + 9))
    b, _ = store.create(ROOT_INO, "b", 0o644, ROOT)  # not from the pool
    assert b["ino"] > pool[-1]
    assert store.admin.pool(ready=False) == pool and store.admin.pool(ready=True) == []


def test_a_create_takes_a_ready_number_only(store):
    pool = store.admin.pool_reserve(2)
    a, created = store.create(ROOT_INO, "a", 0o644, ROOT, precreated=pool[0])
    assert created and a["ino"] != pool[0]  # not ready yet: stripe files may be missing
    store.admin.pool_ready(pool)
    b, created = store.create(ROOT_INO, "b", 0o644, ROOT, precreated=pool[0])
    assert created and b["ino"] == pool[0]
    assert store.admin.pool() == [pool[1]]
    assert store.getattr(pool[0])["type"] == "file"
    # A number is used once: a second create with it gets a fresh one.
    c, _ = store.create(ROOT_INO, "c", 0o644, ROOT, precreated=pool[0])
    assert c["ino"] not in pool


def test_a_layout_on_fewer_daemons_leaves_the_number_pooled(store):
    pool = store.admin.pool_reserve(1)
    store.admin.pool_ready(pool)
    a, _ = store.create(ROOT_INO, "narrow", 0o644, ROOT, stripe=Stripe(1, 2, 65536),
                        precreated=pool[0])
    assert a["ino"] != pool[0] and store.admin.pool(ready=True) == pool
    # An existing name is returned as it is; the number stays pooled too.
    again, created = store.create(ROOT_INO, "narrow", 0o644, ROOT, precreated=pool[0])
    assert not created and again["ino"] == a["ino"] and store.admin.pool() == pool


def test_a_failed_create_leaves_the_number_pooled(store):
    pool = store.admin.pool_reserve(1)
    store.admin.pool_ready(pool)
    store.create(ROOT_INO, "x", 0o644, ROOT)
    with pytest.raises(OSError) as ei:
        store.create(ROOT_INO, "x", 0o644, ROOT, exclusive=True, precreated=pool[0])
    assert ei.value.errno == errno.EEXIST and store.admin.pool() == pool


def test_the_pool_survives_a_restart(tmp_path):
    path = str(tmp_path / "meta.sqlite")
    s = MetaStore(path, 2, Stripe(0, -1, 65536))
    ready, pending = s.admin.pool_reserve(3), s.admin.pool_reserve(2)
    s.admin.pool_ready(ready)
    s.close()
    s = MetaStore(path, 2, Stripe(0, -1, 65536))
    assert s.admin.pool(ready=True) == ready and s.admin.pool(ready=False) == pending
    f, _ = s.create(ROOT_INO, "f", 0o644, ROOT)
    assert f["ino"] > pending[-1]
    s.close()


def test_a_schema_2_store_gets_the_pool_table(tmp_path):
    path = str(tmp_path / "meta.sqlite")
    MetaStore(path, 2, Stripe(0, -1, 65536)).close()
    db = sqlite3.connect(path)
    db.execute("DROP TABLE precreated")
    db.execute("UPDATE meta SET value = 2 WHERE key = 'version'")
    db.commit()
    db.close()
    s = MetaStore(path, 2, Stripe(0, -1, 65536))
    assert s.admin.pool_reserve(1) and s.admin.pool()
    s.close()
    db = sqlite3.connect(path)
    assert db.execute("SELECT value FROM meta WHERE key = 'version'").fetchone() == (
        SCHEMA_VERSION,)
    db.close()


class FakeDaemons:
    """``MgrServer._each`` stand-in: records the numbers each daemon promised to watch (and
    the discards' removals); can be made to fail."""

    def __init__(self, niods: int) -> None:
        self.files: list[set[int]] = [set() for _ in range(niods)]
        self.down = False
        self.calls = 0

    async def each(self, calls):
        self.calls += 1
        await trio.lowlevel.checkpoint()
        if self.down:
            raise ConnectionRefusedError(errno.ECONNREFUSED, "iod down")
        for iod, header in calls:
            assert header["op"] in ("precreate", "unlinks")
            if header["op"] == "precreate":
                self.files[iod].update(header["inos"])
            else:
                self.files[iod].difference_update(header["inos"])
        return [{"made": 0, "watched": True} for _, h in calls]


def size_cache_on(inos: list[int]) -> None:
    """The size cache on: the pool asks the daemons to watch its numbers."""


async def _until(pred, limit: float = 5.0) -> None:
    with trio.fail_after(limit):
        while not pred():
            await trio.sleep(0.01)


def test_the_pool_fills_drains_and_refills_promised_by_every_daemon(store):
    daemons = FakeDaemons(4)
    pool = PrecreatePool(store, 4, daemons.each, batch=8, low=4,
                         watched=size_cache_on)

    async def main():
        async with trio.open_nursery() as n:
            n.start_soon(pool.run)
            await _until(lambda: len(pool) == 8)
            taken = [pool.take() for _ in range(5)]  # below low: a refill starts
            await _until(lambda: len(pool) == 11)
            assert all(i in daemons.files[d] for i in taken for d in range(4))
            assert set(store.admin.pool(ready=True)) >= set(pool._ready)
            n.cancel_scope.cancel()

    trio.run(main)
    assert daemons.calls == 2 and pool.made == 16


def test_a_daemon_down_leaves_the_pool_empty_and_the_numbers_are_asked_again(store):
    daemons = FakeDaemons(2)
    daemons.down = True
    pool = PrecreatePool(store, 2, daemons.each, batch=4, low=2,
                         watched=size_cache_on)

    async def main():
        async with trio.open_nursery() as n:
            n.start_soon(pool.run)
            await _until(lambda: daemons.calls >= 2)
            assert pool.take() is None  # creates take new numbers meanwhile
            assert len(store.admin.pool(ready=False)) == 4  # one batch, retried, not a new one
            daemons.down = False
            await _until(lambda: len(pool) == 4)
            n.cancel_scope.cancel()

    trio.run(main)
    assert store.admin.pool(ready=False) == [] and len(store.admin.pool(ready=True)) == 4


def test_numbers_a_crash_left_unready_are_made_first(store):
    left = store.admin.pool_reserve(3)  # reserved, then the manager died before the daemons answered
    daemons = FakeDaemons(2)
    pool = PrecreatePool(store, 2, daemons.each, batch=3, low=1,
                         watched=size_cache_on)

    async def main():
        async with trio.open_nursery() as n:
            n.start_soon(pool.run)
            await _until(lambda: len(pool) == 3)
            n.cancel_scope.cancel()

    trio.run(main)
    assert list(pool._ready) == left and daemons.files[0] == set(left)


def test_with_the_size_cache_off_no_daemon_is_asked(store):
    daemons = FakeDaemons(2)
    pool = PrecreatePool(store, 2, daemons.each, batch=4, low=2)  # watched=None

    async def main():
        async with trio.open_nursery() as n:
            n.start_soon(pool.run)
            await _until(lambda: len(pool) == 4)
            n.cancel_scope.cancel()

    trio.run(main)
    assert daemons.calls == 0 and len(store.admin.pool(ready=True)) == 4


def test_batch_zero_is_no_pool(store):
    pool = PrecreatePool(store, 2, FakeDaemons(2).each, batch=0)
    trio.run(pool.run)  # returns at once
    assert pool.take() is None and store.admin.pool() == []


def test_a_refill_asks_in_chunks_and_each_chunk_is_ready_at_once(store, monkeypatch):
    monkeypatch.setattr("pvfs.daemons.mgr.precreate.CHUNK", 3)
    daemons = FakeDaemons(2)
    sizes: list[int] = []
    seen_ready: list[int] = []
    pool = PrecreatePool(store, 2, daemons.each, batch=8, low=8,
                         watched=size_cache_on)
    each = daemons.each

    async def recording(calls):
        sizes.append(len(calls[0][1]["inos"]))
        seen_ready.append(len(pool))  # what earlier chunks of this refill made ready
        if len(sizes) == 2:
            daemons.down = True  # the second chunk fails: only it and the rest are asked again
        elif len(sizes) == 3:
            daemons.down = False
        return await each(calls)

    pool.each = recording

    async def main():
        async with trio.open_nursery() as n:
            n.start_soon(pool.run)
            await _until(lambda: len(pool) == 8)
            n.cancel_scope.cancel()

    trio.run(main)
    assert seen_ready[:2] == [0, 3]
    assert sizes == [3, 3, 3, 2]  # the failed chunk's 5 retried in chunks, no new numbers
    assert store.admin.pool(ready=False) == [] and len(store.admin.pool(ready=True)) == 8
    assert all(set(pool._ready) <= f for f in daemons.files)


def test_numbers_of_an_ended_session_are_held_claimable_never_given_out_then_discarded(store):
    daemons = FakeDaemons(2)
    pool = PrecreatePool(store, 2, daemons.each, batch=4, low=1, hold_for=10.0,
                         watched=size_cache_on)

    async def main():
        async with trio.open_nursery() as n:
            n.start_soon(pool.run)
            await _until(lambda: len(pool) == 4)
            delegated = [pool.take(), pool.take()]
            pool.hold(delegated)  # the session ended with them unused
            assert pool.held == 2
            rest = [pool.take() for _ in range(6)]
            assert not set(delegated) & set(rest)  # never given out again
            assert pool.claim(delegated[0])  # a create ahead may still land with it
            await trio.sleep(11)  # the other is discarded: stripe files gone, number gone
            assert pool.held == 0 and pool.discarded == 1
            assert delegated[1] not in store.admin.pool()
            assert all(delegated[1] not in f for f in daemons.files)
            assert not pool.claim(delegated[1])
            n.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_a_restart_holds_every_ready_number_it_finds(store):
    before = store.admin.pool_reserve(3)
    store.admin.pool_ready(before)  # (some may have been delegated before the restart)
    daemons = FakeDaemons(2)
    pool = PrecreatePool(store, 2, daemons.each, batch=3, low=1, hold_for=5.0,
                         watched=size_cache_on)

    async def main():
        async with trio.open_nursery() as n:
            n.start_soon(pool.run)
            await _until(lambda: len(pool) == 3)  # fresh numbers
            assert not set(pool._ready) & set(before) and pool.held == 3
            await trio.sleep(6)
            assert pool.held == 0 and pool.discarded == 3
            n.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert not set(store.admin.pool()) & set(before)


def test_a_crash_while_discarding_finishes_the_discard_at_the_next_start(store):
    left = store.admin.pool_reserve(2)
    store.admin.pool_ready(left)
    store.admin.pool_discard(left)  # marked, then the manager died before the daemons answered
    assert store.admin.pool() == left  # (still the pool's for fsck)
    daemons = FakeDaemons(2)
    for f in daemons.files:
        f.update(left)
    pool = PrecreatePool(store, 2, daemons.each, batch=2, low=1,
                         watched=size_cache_on)

    async def main():
        async with trio.open_nursery() as n:
            n.start_soon(pool.run)
            await _until(lambda: pool.discarded == 2)
            n.cancel_scope.cancel()

    trio.run(main)
    assert not set(store.admin.pool()) & set(left)
    assert all(not f & set(left) for f in daemons.files)
