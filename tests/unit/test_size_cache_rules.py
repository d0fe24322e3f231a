"""The size cache's rules without daemons: the manager keeps only answers nothing changed
since (daemons/mgr/sizecache.py), and an I/O daemon reports a watched stripe file before
any change to it, the changes that arrive while a report is on its way together in the next,
with no promise made while a change is in progress (daemons/iod/sizewatch.py)."""

from __future__ import annotations

import trio
import trio.testing

from pvfs.daemons.iod.sizewatch import SizeWatch
from pvfs.daemons.mgr.sizecache import SizeCache


def test_an_answer_overtaken_by_a_change_is_not_kept():
    c = SizeCache()
    token = c.begin(7)
    c.forget([7])                       # a daemon reported a change while we asked
    c.install(7, token, [(10, 1, 8)], watched=True)
    assert c.get(7) is None
    token = c.begin(7)
    c.install(7, token, [(10, 1, 8)], watched=True)
    assert c.get(7) == [(10, 1, 8)]


def test_an_unwatched_answer_and_an_older_fetch_are_not_kept():
    c = SizeCache()
    c.install(1, c.begin(1), [(1, 1, 1)], watched=False)
    assert c.get(1) is None
    old, new = c.begin(2), c.begin(2)
    c.install(2, old, [(1, 1, 1)], watched=True)
    assert c.get(2) is None
    c.install(2, new, [(2, 2, 2)], watched=True)
    assert c.get(2) == [(2, 2, 2)]


def test_pooled_creates_and_forget_all():
    c = SizeCache()
    c.watch_pool([5, 6])
    assert c.created(5, 4) and c.get(5) == [(0, 0, 0)] * 4
    assert not c.created(9, 4)
    c.forget_all()
    assert c.get(5) is None and not c.created(6, 4)


def test_a_file_that_just_changed_is_not_watched(monkeypatch):
    from pvfs.daemons.mgr import sizecache

    now = [100.0]
    monkeypatch.setattr(sizecache.time, "monotonic", lambda: now[0])
    c = SizeCache()
    assert c.wants_watch(3)
    c.forget([3])
    assert c.wants_watch(3)            # one report: written once (tar x), still watched
    now[0] += sizecache.HOT_S / 2
    c.forget([3])                      # another daemon's report of the same write
    assert c.wants_watch(3)
    c.install(3, c.begin(3), [(1, 1, 1)], watched=True)
    c.forget([3])
    assert not c.wants_watch(3) and c.wants_watch(4)   # changed again after a fetch: hot
    now[0] += sizecache.HOT_S
    assert c.wants_watch(3)
    c.install(3, c.begin(3), [(1, 1, 1)], watched=True)
    c.forget([3])                      # reports HOT_S apart do not add up
    assert c.wants_watch(3)
    c.install(3, c.begin(3), [(1, 1, 1)], watched=True)
    c.forget([3], reported=False)      # nor do the manager's own changes
    assert c.wants_watch(3)
    assert not SizeCache(0).wants_watch(5)


def test_a_daemons_late_report_of_the_same_write_is_not_a_second_change(monkeypatch):
    from pvfs.daemons.mgr import sizecache

    now = [100.0]
    monkeypatch.setattr(sizecache.time, "monotonic", lambda: now[0])
    c = SizeCache()
    c.forget([3], iod=0)
    c.forget([3], iod=1)
    c.install(3, c.begin(3), [(1, 1, 1)] * 3, watched=True)  # daemon 2 had not reported yet
    c.forget([3], iod=2)               # ... its report of the same write comes now
    assert c.wants_watch(3)
    c.install(3, c.begin(3), [(1, 1, 1)] * 3, watched=True)
    c.forget([3], iod=2)               # daemon 2 again, after a fetch watched it anew: hot
    assert not c.wants_watch(3)
    now[0] += sizecache.HOT_S
    c.forget([3], iod=1)
    c.install(3, c.begin(3), [(1, 1, 1)] * 3, watched=True)
    c.forget([3])                      # an unnamed report counts as every daemon's
    assert not c.wants_watch(3)


def test_the_cache_is_bounded():
    c = SizeCache(capacity=3)
    for i in range(5):
        c.install(i, c.begin(i), [(i, 0, 0)], watched=True)
    assert len(c) == 3 and c.get(0) is None and c.get(4) == [(4, 0, 0)]


async def _started(w: SizeWatch) -> None:
    """Run the watch's loop in the background until its start report is acknowledged."""
    trio.lowlevel.spawn_system_task(w.run)
    await w._ready.wait()


def test_a_change_of_a_watched_file_waits_for_the_managers_acknowledgement():
    told: list = []
    log: list[str] = []

    async def notify(inos):
        told.append(inos)
        await trio.sleep(0.05)
        log.append("acknowledged")

    async def main():
        w = SizeWatch(notify)
        assert not w.watch(3)                   # nothing promised before the start
        await _started(w)
        assert told == [None]
        assert w.watch(3)

        async def change(name):
            async with w.change(3):
                log.append(name)
                assert not w.watch(3)           # no promise while a change is in progress
                await trio.sleep(0.01)

        async with trio.open_nursery() as n:
            n.start_soon(change, "first")
            n.start_soon(change, "second")
        assert told == [None, [3]]              # one report for both changes
        assert log.index("acknowledged") < log.index("first")
        assert log.index("acknowledged") < log.index("second")
        assert w.changing[3] == 0 and w.watch(3)
        async with w.change(4):                 # not watched: no report
            pass
        assert told == [None, [3]]

    trio.run(main)


def test_changes_of_many_files_share_reports_each_waiting_for_its_own():
    """A group commit: the files whose changes arrive while a report is on its way go in
    the next one, and no change starts before the report naming its file is acknowledged."""
    told: list = []
    acked: set[int] = set()

    async def notify(inos):
        told.append(inos)
        await trio.sleep(0.02)
        acked.update(inos or ())

    async def main():
        w = SizeWatch(notify)
        await _started(w)
        for ino in range(1, 21):
            assert w.watch(ino)

        async def change(ino):
            async with w.change(ino):
                assert ino in acked  # its report was acknowledged first

        async with trio.open_nursery() as n:
            for ino in range(1, 21):
                n.start_soon(change, ino)
                await trio.sleep(0.001)
        reports = told[1:]
        assert sorted(i for r in reports for i in r) == list(range(1, 21))
        assert len(reports) <= 3, reports  # not one per file

    # (virtual time: the changes arrive 1 ms apart while a report takes 20 ms, whatever the
    # machine's load -- with real sleeps a loaded machine made more reports)
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_the_files_of_one_batch_of_writes_go_in_one_report():
    """``writes`` (daemons/iod/smallwrites.py) reports every watched file of its batch at
    once and waits once, including files another change is reporting already and a
    promise renewed while it waited."""
    told: list = []

    async def notify(inos):
        told.append(inos)
        await trio.sleep(0.02)

    async def main():
        w = SizeWatch(notify)
        await _started(w)
        for ino in range(1, 101):
            assert w.watch(ino)

        async def other():  # another change of file 7, under way
            async with w.change(7):
                await trio.sleep(0.05)

        async with trio.open_nursery() as n:
            n.start_soon(other)
            await trio.testing.wait_all_tasks_blocked()
            batch = list(range(1, 101)) + [500]   # (500: not watched, no report)
            await w.before_changes(batch)
            assert not any(w.must_wait(i) for i in batch)
        assert told[1] == [7]
        assert sorted(told[2]) == [i for i in range(1, 101) if i != 7] and len(told) == 3

        w.watch(3)
        renewed = False

        async def renew(inos):  # a size request renews 3's promise during the report
            nonlocal renewed
            told.append(inos)
            if not renewed:
                renewed = True
                assert w.watch(3) is False  # (being unwatched: refused) ...
                w.watched.add(3)            # ... a late one slips in
            await trio.sleep(0.01)

        w._notify = renew
        await w.before_changes([3, 4])
        assert not w.must_wait(3) and told[-2:] == [[3], [3]]

    trio.run(main)


def test_an_unreachable_manager_does_not_block_changes():
    import errno

    async def refused(inos):
        raise OSError(errno.ECONNREFUSED, "refused")

    async def main():
        w = SizeWatch(refused)
        await _started(w)
        assert w.watch(1)
        async with w.change(1):
            pass
        assert 1 not in w.watched

    trio.run(main)


def test_a_report_that_timed_out_is_sent_again_until_acknowledged():
    import errno

    from trio.testing import MockClock

    told: list = []

    async def flaky(inos):
        told.append(inos)
        if len(told) in (2, 3):             # the first report of inode 8, and its retry
            raise TimeoutError(errno.ETIMEDOUT, "no reply")

    async def main():
        w = SizeWatch(flaky)
        await _started(w)
        assert w.watch(8)
        async with w.change(8):             # not blocked beyond the timeout
            pass
        await trio.sleep(5)
        assert told == [None, [8], [8], [8]]

    trio.run(main, clock=MockClock(autojump_threshold=0))


def test_a_file_a_daemon_declined_to_watch_is_asked_again_a_few_times():
    from pvfs.daemons.mgr import refetch

    asked: list[list[int]] = []
    declining = {5: 10, 6: 1}  # ino -> fetches a daemon declines (a write in progress)

    async def fill(files):
        asked.append([a["ino"] for a in files])
        out = {a["ino"] for a in files if declining.get(a["ino"], 0) > 0}
        for ino in out:
            declining[ino] -= 1
        return out

    async def done(files, seen):
        pass

    r = refetch.SizeRefetcher(lambda ino: {"ino": ino, "type": "file", "stripe": [0, 4, 4096]},
                              fill, done, lambda: 0)

    async def main():
        async with trio.open_nursery() as n:
            n.start_soon(r.run)
            r.add([5, 6, 7])
            await trio.sleep(refetch.DELAY * (2 ** refetch.RETRIES + refetch.RETRIES + 2))
            n.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert asked[0] == [5, 6, 7]
    assert [5 in a for a in asked].count(True) == refetch.RETRIES   # then given up
    assert [6 in a for a in asked].count(True) == 2                 # watched the second time
    assert [7 in a for a in asked].count(True) == 1
    assert not r._tries and not r._later


def test_an_empty_stripe_files_mtime_does_not_count():
    """An explicit mtime need not be set on stripe files holding no data (a write
    delegation's times go with its data, fuse/delegations.py): theirs is ignored."""
    from pvfs.daemons.mgr.stripefiles import _fill
    from pvfs.layout.stripe import Stripe

    attrs = {"mtime_ns": 100}
    _fill(attrs, Stripe(0, 4, 65536), [(3901, 100, 8), (0, 900, 0), (0, 900, 0), (0, 900, 0)])
    assert (attrs["size"], attrs["mtime_ns"]) == (3901, 100)
    _fill(attrs, Stripe(0, 4, 65536), [(65536, 100, 8), (1, 700, 8), (0, 900, 0), (0, 900, 0)])
    assert (attrs["size"], attrs["mtime_ns"]) == (65537, 700)  # data written later count


def test_a_fresh_write_drops_only_a_promise_still_the_pools():
    """A native client that created a file from the pool to write it (mgr ``create`` with
    ``writing``: the manager did not count it empty) says so in its writes: the pool's
    promise goes without a report. A promise renewed by a ``size``/``sizes`` since -- a stat
    meanwhile, a manager that restarted -- is reported as always, fresh or not."""
    told: list = []

    async def notify(inos):
        told.append(inos)

    async def main():
        w = SizeWatch(notify)
        assert not w.release_fresh(5)           # before the start: nothing is released
        await _started(w)
        assert w.watch(5, pool=True) and w.watch(6, pool=True)
        assert w.watch(6)                       # someone asked 6's size since the pool
        assert w.release_fresh(5) and not w.must_wait(5)
        assert not w.release_fresh(6) and w.must_wait(6)
        async with w.change(6):
            pass
        assert told == [None, [6]]              # 6 reported, 5 not
        assert w.watch(5, pool=True)
        async with w.change(5):                 # a write that does not say fresh reports
            pass
        assert told == [None, [6], [5]]
        assert not w.release_fresh(5)           # nothing left to release
        assert w.released == 1 and w.status()["released_fresh"] == 1

    trio.run(main)
