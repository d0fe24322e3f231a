"""The mount's closes, told to the manager in batches (fuse/closes.py)."""

from __future__ import annotations

import errno

import pytest
import trio
import trio.testing

from pvfs.fuse.closes import MOST, DeferredCloses

pytestmark = pytest.mark.trio


class FakeClient:
    def __init__(self, failures: int = 0) -> None:
        self.calls: list[list[int]] = []
        self.failures = failures
        self.opens: list[list[int]] = []
        self.order: list[str] = []

    async def open_files(self, inos: list[int]) -> list[int]:
        self.opens.append(list(inos))
        self.order.append("opens")
        return []

    async def close_files(self, inos: list[int]) -> None:
        if self.failures:
            self.failures -= 1
            raise OSError(errno.ECONNREFUSED, "manager down")
        self.calls.append(list(inos))
        self.order.append("closes")


async def test_closes_within_the_delay_share_one_request():
    client = FakeClient()
    closes = DeferredCloses(client, timeout=10)
    async with trio.open_nursery() as nursery:
        await nursery.start(closes.run)
        for ino in (5, 6, 5, 7):
            closes.add(ino)
        assert client.calls == []  # nothing sent before the delay
        await trio.sleep(0.05)
        nursery.cancel_scope.cancel()
    assert client.calls == [[5, 6, 5, 7]]  # every handle, a file's twice if closed twice
    assert closes.sent == 4 and closes.pending == 0


async def test_many_closes_go_in_requests_of_at_most_most():
    client = FakeClient()
    closes = DeferredCloses(client, timeout=10)
    for ino in range(1, MOST + 11):
        closes.add(ino)
    await closes.send()
    assert [len(c) for c in client.calls] == [MOST, 10]
    assert [i for c in client.calls for i in c] == list(range(1, MOST + 11))


async def test_a_manager_down_is_tried_again(autojump_clock):
    client = FakeClient(failures=3)
    closes = DeferredCloses(client, timeout=10)
    closes.add(9)
    await closes.send()
    assert client.calls == [[9]] and closes.dropped == 0


async def test_closes_the_manager_never_takes_are_dropped_after_the_timeout(autojump_clock, caplog):
    client = FakeClient(failures=10**6)
    closes = DeferredCloses(client, timeout=5)
    closes.add(9)
    start = trio.current_time()
    await closes.send()
    assert trio.current_time() - start == pytest.approx(5, abs=0.01)
    assert client.calls == [] and closes.dropped == 1 and closes.pending == 0
    assert "not told to the manager" in caplog.text


async def test_a_read_only_open_answered_here_and_closed_soon_reaches_the_manager_never():
    client = FakeClient()
    closes = DeferredCloses(client, timeout=10)
    closes.opened(5)
    closes.opened(5)
    closes.add(5)
    closes.add(5)
    await closes.send()
    await closes.send_opens()
    assert client.opens == [] and client.calls == []
    assert closes.counters["opens_cancelled"] == 2


async def test_an_open_still_held_is_told_before_any_close_and_its_close_goes_as_ever():
    client = FakeClient()
    closes = DeferredCloses(client, timeout=10)
    closes.add(3)  # a handle the manager opened
    closes.opened(4)  # held open here
    await closes.send()
    assert client.order == ["opens", "closes"] and client.opens == [[4]]
    closes.add(4)  # told already: its close is a close
    await closes.send()
    assert client.calls == [[3], [4]]


async def test_opens_are_told_before_an_unlink_or_rename_and_after_the_delay(autojump_clock):
    client = FakeClient()
    closes = DeferredCloses(client, timeout=10)
    closes.opened(7)
    await closes.before_meta("lookup")  # nothing an open guards
    assert client.opens == []
    await closes.before_meta("unlink")
    assert client.opens == [[7]]
    async with trio.open_nursery() as nursery:
        await nursery.start(closes.run)
        closes.opened(8)
        await trio.sleep(0.1)
        assert client.opens == [[7]]  # still within OPEN_DELAY: a close may cancel it
        await trio.sleep(1.0)
        assert client.opens == [[7], [8]]
        nursery.cancel_scope.cancel()


async def test_a_recall_tells_only_the_recalled_files_opens():
    client = FakeClient()
    closes = DeferredCloses(client, timeout=10)
    for ino in (1, 2, 2):
        closes.opened(ino)
    await closes.send_opens([2, 9])
    assert client.opens == [[2, 2]]
    assert closes.status()["opens_pending"] == 1
