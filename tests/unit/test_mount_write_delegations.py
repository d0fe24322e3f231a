"""The mount's write delegations (fuse/delegations.py) over a fake cache and lease session:
which closes may keep their data, the order of ``writing``/``written`` around a write-back,
what a recall waits for, a session's end."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from pvfs.fuse import delegations as dmod
from pvfs.fuse.delegations import FILE_BYTES_MAX, WriteDelegations

pytestmark = pytest.mark.trio


class FakeCache:
    def __init__(self) -> None:
        self.sizes: dict[int, int] = {}
        self.dirty: set[int] = set()
        self.flushed: list[int] = []
        self.log: list = []  # frames and flushes, in order
        self.gate = trio.Event()
        self.gate.set()

    def size_hint(self, ino: int) -> int:
        return self.sizes.get(ino, 0)

    def has_dirty(self, ino: int) -> bool:
        return ino in self.dirty

    async def flush(self, ino: int) -> None:
        await self.gate.wait()
        if ino in self.dirty:
            self.before_write(ino)
            self.dirty.discard(ino)
            self.log.append(("data", ino))
        self.flushed.append(ino)

    async def flush_many(self, inos: list[int]) -> dict[int, OSError]:
        for ino in inos:
            await self.flush(ino)
        return {}


def _told(log: list, op: str, ino: int) -> int:
    """Where in ``log`` the manager was told ``op`` of ``ino`` (alone or with others)."""
    return next(i for i, e in enumerate(log) if e[0] == op and ino in e[1])


class FakeLeases:
    def __init__(self, log: list) -> None:
        self.before_answer: list = []
        self.on_session_end: list = []
        self.log = log
        self.up = True

    def valid(self) -> bool:
        return self.up

    async def tell(self, op: str, inos: list[int]) -> bool:
        self.log.append((op, tuple(inos)))
        return True

    def written_here(self, ino: int) -> None:
        self.here = ino


def _made():
    cache = FakeCache()
    leases = FakeLeases(cache.log)
    async def data_mtime(ino: int, size: int, mtime: int) -> None:
        cache.log.append(("mtime", ino, size, mtime))

    d = WriteDelegations(cache, leases, data_mtime)
    cache.before_write = d.before_write  # the backend's hook (operations.py)
    return d, cache, leases


def _write(d: WriteDelegations, cache: FakeCache, ino: int, size: int = 3901) -> None:
    d.start(ino)
    d.landed(ino, True)
    cache.sizes[ino] = size
    cache.dirty.add(ino)
    d.wrote(ino)


async def test_a_small_file_written_alone_is_kept_past_its_close():
    d, cache, _ = _made()
    _write(d, cache, 5)
    assert d.keeps(5)
    _write(d, cache, 6, FILE_BYTES_MAX + 1)
    assert not d.keeps(6)  # a large one is written back at its close
    assert not d.keeps(7)  # one not created here
    assert d.status()["kept_closes"] == 1 and d.status()["closes_written"] == 1


async def test_a_file_not_delegated_after_all_is_written_back_at_once():
    d, cache, _ = _made()
    async with trio.open_nursery() as nursery:
        await nursery.start(d.run)
        d.start(8)
        cache.dirty.add(8)
        d.landed(8, False)  # the manager did not make this mount its writer
        await trio.testing.wait_all_tasks_blocked()
        assert cache.flushed == [8] and not d.holds(8)
        nursery.cancel_scope.cancel()


async def test_past_files_max_the_oldest_written_go_in_the_background(monkeypatch):
    monkeypatch.setattr(dmod, "FILES_MAX", 3)
    d, cache, _ = _made()
    async with trio.open_nursery() as nursery:
        await nursery.start(d.run)
        for ino in range(10, 15):
            d.start(100 + ino)  # never written: they do not count
            _write(d, cache, ino)
            assert d.keeps(ino)
        await trio.testing.wait_all_tasks_blocked()
        assert sorted(cache.flushed) == [10, 11] and d.status()["written"] == 3
        # the manager hears writing before the data leave, written after
        for ino in (10, 11):
            assert _told(cache.log, "writing", ino) < cache.log.index(("data", ino)) \
                < _told(cache.log, "written", ino)
        nursery.cancel_scope.cancel()


async def test_past_files_max_a_quarter_of_the_oldest_go_together(monkeypatch):
    monkeypatch.setattr(dmod, "FILES_MAX", 8)
    d, cache, _ = _made()
    async with trio.open_nursery() as nursery:
        await nursery.start(d.run)
        for ino in range(10, 19):
            _write(d, cache, ino)
            assert d.keeps(ino)
        await trio.testing.wait_all_tasks_blocked()
        assert sorted(cache.flushed) == [10, 11] and d.status()["written"] == 7
        tells = [e for e in cache.log if e[0] in ("writing", "written")]
        assert tells == [("writing", (10, 11)), ("written", (10, 11))]  # one word each
        nursery.cancel_scope.cancel()


async def test_a_recall_writes_kept_files_back_before_its_answer():
    d, cache, leases = _made()
    _write(d, cache, 20)
    await leases.before_answer[0]([20, 21])
    assert cache.log == [("writing", (20,)), ("data", 20), ("written", (20,))]
    assert leases.here == 20  # its attributes here go (the manager has the blocks)
    assert not d.holds(20) and d.status()["recalled"] == 1


async def test_a_recall_of_a_file_being_written_back_tells_writing_and_does_not_wait():
    """Waiting for a write-back under way could wait for the recall's own answer (the
    daemons' size report); the manager holds the other until ``written`` instead."""
    d, cache, leases = _made()
    _write(d, cache, 30)
    cache.gate = trio.Event()  # the write-back is stuck on its way
    async with trio.open_nursery() as nursery:
        await nursery.start(d.run)
        assert d.before_write(30)  # the flusher starts it
        with trio.fail_after(1):
            await leases.before_answer[0]([30])  # answered without it
        assert ("writing", (30,)) in cache.log and ("written", (30,)) not in cache.log
        cache.gate.set()
        await trio.testing.wait_all_tasks_blocked()
        assert cache.log[-1] == ("written", (30,))
        nursery.cancel_scope.cancel()


async def test_a_session_that_ends_takes_the_delegations_and_writes_everything_back():
    d, cache, leases = _made()
    async with trio.open_nursery() as nursery:
        await nursery.start(d.run)
        _write(d, cache, 50)
        d.start(51)
        leases.up = False
        for hook in leases.on_session_end:
            hook()
        assert not d.keeps(50)
        await trio.testing.wait_all_tasks_blocked()
        assert sorted(cache.flushed) == [50, 51] and d.status()["lost"] == 2
        nursery.cancel_scope.cancel()


async def test_explicit_times_of_a_file_held_here_go_with_its_data():
    d, cache, leases = _made()
    _write(d, cache, 30)
    before = d.held[30]
    assert d.times_later(30, before, 10**18, 3901)
    assert d.mtime(30, 5 * 10**18) == 10**18  # shown here, whatever the manager pushes
    await leases.before_answer[0]([30])  # a recall: data, then their mtime, then written
    assert cache.log == [("writing", (30,)), ("data", 30), ("mtime", 30, 3901, 10**18),
                         ("written", (30,))]
    assert d.mtime(30, 7) == 7  # the lease went: the manager's from now on
    assert d.status()["times_later"] == 1 and d.status()["times_pending"] == 0


async def test_explicit_times_are_not_carried_once_data_left_or_a_write_came():
    d, cache, _ = _made()
    _write(d, cache, 31)
    before = d.held[31]
    d.wrote(31)  # written meanwhile (while the manager took the times)
    assert not d.times_later(31, before, 10**18, 3901)
    _write(d, cache, 32)
    before = d.held[32]
    await d.end(32)  # its data left (a write-back began meanwhile)
    assert not d.times_later(32, before, 10**18, 3901)
    assert ("mtime", 31, 3901, 10**18) not in cache.log and not d.times


async def test_a_write_after_explicit_times_moves_the_mtime_on_and_fsync_sets_them():
    d, cache, _ = _made()
    _write(d, cache, 33)
    assert d.times_later(33, d.held[33], 10**18, 3901)
    d.wrote(33)  # a later write: the data's own mtime counts again
    assert d.mtime(33, 10**18) > 10**18 and not d.times
    _write(d, cache, 34)
    assert d.times_later(34, d.held[34], 10**18, 100)
    await cache.flush(34)  # fsync: the write-back, then the times before it returns
    await d.settle(34)
    assert ("mtime", 34, 100, 10**18) in cache.log and not d.times


async def test_explicit_times_carried_by_the_data_are_not_set_again():
    d, cache, leases = _made()
    _write(d, cache, 35)
    assert d.times_later(35, d.held[35], 10**18, 3901)
    assert d.mtime_with_data(35) == 10**18  # the backend's write carries it
    assert d.mtime_with_data(36) is None    # (a file without explicit times)
    await leases.before_answer[0]([35])
    assert ("mtime", 35, 3901, 10**18) not in cache.log  # no utime round trip after
    assert cache.log[-1] == ("written", (35,)) and not d.times and not d.carried


# ---------------------------------------------------------------- the C front end's mark
class FakeMirror:
    """The C front end's set of files whose flush it answers (cmirrors.KeptFiles)."""

    def __init__(self, log: list) -> None:
        self.kept: set[int] = set()
        self.log = log

    def keep(self, ino: int) -> None:
        self.kept.add(ino)

    def drop(self, ino: int) -> None:
        if ino in self.kept:
            self.log.append(("unmarked", ino))
        self.kept.discard(ino)

    def drop_all(self) -> None:
        self.log.append(("unmarked all",))
        self.kept.clear()


def _mirrored():
    d, cache, leases = _made()
    d.mirror = FakeMirror(cache.log)
    return d, cache, leases, d.mirror


def _agrees(d: WriteDelegations, mirror: FakeMirror, inos) -> None:
    """A marked file is one whose flush Python would return from at once."""
    for ino in inos:
        assert ino not in mirror.kept or d.keeps(ino, count=False), ino


async def test_a_file_is_marked_after_a_write_only_while_its_close_is_kept():
    d, cache, _, mirror = _mirrored()
    d.start(60)
    assert 60 not in mirror.kept  # not written yet (the quiet handles cover it)
    _write(d, cache, 60)
    _write(d, cache, 61, FILE_BYTES_MAX + 1)  # too large: written back at its close
    assert mirror.kept == {60}
    cache.sizes[60] = FILE_BYTES_MAX + 1
    mirror.drop(60)  # (the C side's op_write did this before the write reached Python)
    d.wrote(60)
    assert 60 not in mirror.kept
    _write(d, cache, 62)
    d.dropped(62)  # its last name went here
    _write(d, cache, 63)
    d.forget(63)  # (its create refused)
    assert not mirror.kept
    _agrees(d, mirror, range(60, 64))


async def test_every_write_back_takes_the_mark_away_before_the_data_leave():
    d, cache, _, mirror = _mirrored()
    async with trio.open_nursery() as nursery:
        await nursery.start(d.run)
        _write(d, cache, 70)   # the flusher's (before_write)
        _write(d, cache, 71)   # a gathered write-back (before_writes)
        _write(d, cache, 72)   # end(): a truncate, O_TRUNC, a rename over it here
        assert mirror.kept == {70, 71, 72}
        d.before_write(70)
        d.before_writes([71])
        await d.end(72)
        await trio.testing.wait_all_tasks_blocked()
        assert not mirror.kept
        assert cache.log.index(("unmarked", 72)) < _told(cache.log, "writing", 72) \
            < cache.log.index(("data", 72))
        nursery.cancel_scope.cancel()


async def test_a_recall_takes_the_mark_away_before_the_data_leave_and_its_answer():
    d, cache, leases, mirror = _mirrored()
    _write(d, cache, 80)
    _write(d, cache, 81)
    await leases.before_answer[0]([80])
    assert mirror.kept == {81}
    assert cache.log.index(("unmarked", 80)) < _told(cache.log, "writing", 80)
    _agrees(d, mirror, [80, 81])


async def test_a_session_end_and_the_files_bound_take_every_mark_away(monkeypatch):
    d, cache, leases, mirror = _mirrored()
    _write(d, cache, 90)
    leases.up = False  # (the C side checks the session's deadline itself)
    for hook in leases.on_session_end:
        hook()
    assert not mirror.kept and cache.log[0] == ("unmarked all",)
    monkeypatch.setattr(dmod, "FILES_MAX", 2)
    d, cache, leases, mirror = _mirrored()
    for ino in (91, 92, 93):
        _write(d, cache, ino)
    assert mirror.kept == {91, 92, 93}
    _write(d, cache, 94)  # 2 * FILES_MAX written here: no close is kept any more
    assert not mirror.kept and not d.keeps(94, count=False)
