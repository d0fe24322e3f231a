"""KeyLocks: the block cache's lock per (inode, block), with its no-yield fast path."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from pvfs.cache._table import KeyLocks

pytestmark = pytest.mark.trio


async def test_uncontended_hold_takes_the_lock_without_a_checkpoint():
    locks = KeyLocks()
    ran: list[str] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: _note(ran, "other"))
        async with locks.hold([(1, 0), (1, 1)]):
            assert locks.busy((1, 0)) and locks.busy((1, 1)) and len(locks) == 2
            assert ran == []  # no other task ran in between
    assert ran == ["other"] and len(locks) == 0 and not locks.busy((1, 0))


async def _note(ran: list[str], what: str) -> None:
    ran.append(what)


async def test_waiters_get_the_lock_in_arrival_order():
    locks = KeyLocks()
    order: list[str] = []
    release = trio.Event()

    async def holder() -> None:
        async with locks.hold([(1, 5)]):
            order.append("a")
            await release.wait()

    async def waiter(name: str) -> None:
        async with locks.hold([(1, 5)]):
            order.append(name)
            await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(holder)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(waiter, "b")
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(waiter, "c")
        await trio.testing.wait_all_tasks_blocked()
        assert order == ["a"] and locks.busy((1, 5))
        release.set()
    assert order == ["a", "b", "c"] and len(locks) == 0


async def test_a_cancelled_waiter_leaves_no_trace():
    locks = KeyLocks()
    release = trio.Event()

    async def holder() -> None:
        async with locks.hold([(2, 0)]):
            await release.wait()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(holder)
        await trio.testing.wait_all_tasks_blocked()
        with trio.move_on_after(0.01) as scope:
            async with locks.hold([(2, 0), (2, 1)]):
                pytest.fail("got a lock that is held")
        assert scope.cancelled_caught
        assert locks.busy((2, 0)) and not locks.busy((2, 1)) and len(locks) == 1
        release.set()
    assert len(locks) == 0
    async with locks.hold([(2, 0)]):  # free again, at once
        pass


async def test_overlapping_key_sets_do_not_deadlock_and_exceptions_release():
    locks = KeyLocks()
    inside = 0

    async def user(keys: list[tuple[int, int]]) -> None:
        nonlocal inside
        for _ in range(20):
            async with locks.hold(keys):
                inside += 1
                assert inside == 1  # the sets share (3, 1): never both inside
                await trio.lowlevel.checkpoint()
                inside -= 1

    async with trio.open_nursery() as nursery:
        nursery.start_soon(user, [(3, 0), (3, 1)])
        nursery.start_soon(user, [(3, 1), (3, 0), (3, 2)])
        nursery.start_soon(user, [(3, 2), (3, 1)])
    with pytest.raises(ValueError):
        async with locks.hold([(3, 0)]):
            raise ValueError
    assert len(locks) == 0
