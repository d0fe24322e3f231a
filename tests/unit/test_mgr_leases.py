"""The manager's lease table (daemons/mgr/leases.py) over socket pairs: grants, the clock
that refuses overtaken answers, recalls answered, recalls unanswered (fenced), sessions."""

from __future__ import annotations

import errno

import pytest
import trio
import trio.testing

from pvfs.daemons.mgr.leases import LeaseTable
from pvfs.protocol import aio

pytestmark = pytest.mark.trio


async def _holder(nursery, table: LeaseTable, name: str, answer: bool = True):
    """A registered holder whose side answers recalls (or not); returns the recalls seen."""
    ours, theirs = trio.socket.socketpair()
    seen: list[list[int]] = []
    nursery.start_soon(table.serve_holder, name, theirs)
    got = await aio.recv_frame(ours, 5)
    assert got is not None and got[0]["ok"]

    async def side() -> None:
        while True:
            got = await aio.recv_frame(ours, 60)
            if got is None:
                return
            header, _ = got
            if header.get("op") == "recall":
                seen.append(header["inos"])
                if answer:
                    await aio.send_frame(ours, {"seq": header["seq"]})

    nursery.start_soon(side)
    await trio.testing.wait_all_tasks_blocked()
    return seen


async def test_grant_then_a_change_recalls_the_other_holders_but_not_the_actor():
    table = LeaseTable(term=10.0)
    async with trio.open_nursery() as nursery:
        seen_a = await _holder(nursery, table, "a")
        seen_b = await _holder(nursery, table, "b")
        assert table.grant("a", [5, 6], table.now()) == [5, 6]
        assert table.grant("b", [5], table.now()) == [5]
        async with table.changing([5], actor="a"):
            assert seen_b == [[5]] and seen_a == []
            assert table.grant("b", [5], table.now()) == []  # none while it runs
        assert table.by_ino[5] == {"a"}
        assert table.grant("b", [5], table.now()) == [5]
        nursery.cancel_scope.cancel()


async def test_an_answer_overtaken_by_a_change_is_not_leased():
    table = LeaseTable(term=10.0)
    async with trio.open_nursery() as nursery:
        await _holder(nursery, table, "a")
        seen = table.now()  # the answer is read here ...
        async with table.changing([7]):
            pass            # ... a change comes and goes ...
        assert table.grant("a", [7, 8], seen) == [8]  # ... so 7's answer is stale
        nursery.cancel_scope.cancel()


async def test_no_grant_without_a_session_or_with_leases_off():
    assert LeaseTable(term=10.0).grant("nobody", [1], 0) == []
    assert LeaseTable(term=0.0).grant("a", [1], 0) == []


async def test_an_unanswering_holder_is_fenced_after_its_session_ends(autojump_clock):
    table = LeaseTable(term=1.0, timeout=0.2)
    async with trio.open_nursery() as nursery:
        await _holder(nursery, table, "mute", answer=False)
        table.grant("mute", [9], table.now())
        t0 = trio.current_time()
        async with table.changing([9], actor="other"):
            waited = trio.current_time() - t0
        assert 0.2 <= waited <= 1.5  # the recall timeout, then the rest of the session
        assert "mute" not in table.holders and 9 not in table.by_ino
        with pytest.raises(OSError) as got:
            table.check("mute")
        assert got.value.errno == errno.ESTALE
        assert table.counters["fenced"] == 1
        nursery.cancel_scope.cancel()


async def test_a_closed_lease_connection_ends_the_session_at_once():
    table = LeaseTable(term=30.0)
    async with trio.open_nursery() as nursery:
        ours, theirs = trio.socket.socketpair()
        nursery.start_soon(table.serve_holder, "gone", theirs)
        await aio.recv_frame(ours, 5)
        table.grant("gone", [3], table.now())
        ours.close()
        await trio.testing.wait_all_tasks_blocked()
        assert "gone" not in table.holders and 3 not in table.by_ino
        with trio.fail_after(1):
            async with table.changing([3]):
                pass
        nursery.cancel_scope.cancel()


async def test_without_recalls_a_change_calls_no_one():
    table = LeaseTable(term=10.0, recall=False)
    async with trio.open_nursery() as nursery:
        seen = await _holder(nursery, table, "a")
        table.grant("a", [4], table.now())
        async with table.changing([4], actor="b"):
            pass
        assert seen == []
        nursery.cancel_scope.cancel()


async def test_leases_given_back_are_no_longer_recalled():
    table = LeaseTable(term=10.0)
    async with trio.open_nursery() as nursery:
        ours, theirs = trio.socket.socketpair()
        nursery.start_soon(table.serve_holder, "m", theirs)
        await aio.recv_frame(ours, 5)
        assert table.grant("m", [11, 12], table.now()) == [11, 12]
        await aio.send_frame(ours, {"op": "release", "inos": [11]})
        await trio.testing.wait_all_tasks_blocked()
        assert 11 not in table.by_ino and table.by_ino[12] == {"m"}
        nursery.cancel_scope.cancel()


async def test_a_directory_is_created_in_ahead_only_by_its_one_holder():
    table = LeaseTable(term=10.0)
    async with trio.open_nursery() as nursery:
        await _holder(nursery, table, "a")
        seen_b = await _holder(nursery, table, "b")
        table.grant("a", [20, 21], table.now())
        table.grant("b", [21], table.now())
        assert table.delegate("a", 20) and table.exclusive == {20: "a"}
        assert not table.delegate("a", 21)  # b holds it too
        assert not table.delegate("nobody", 20)
        assert table.grant("b", [20], table.now()) == []  # no one else leases it meanwhile
        assert table.created_in([20, 21], "a") == [] and table.created_in([20, 21], "b") == [20]
        assert seen_b == []
        nursery.cancel_scope.cancel()


async def test_a_read_by_another_recalls_the_creator_and_ends_its_delegation():
    table = LeaseTable(term=10.0)
    async with trio.open_nursery() as nursery:
        seen_a = await _holder(nursery, table, "a")
        table.grant("a", [30], table.now())
        assert table.delegate("a", 30)
        await table.reading([30], "a")  # its own reads recall nothing
        assert seen_a == []
        await table.reading([30], None)  # a native client's lookup in it
        assert seen_a == [[30]] and table.exclusive == {}
        assert table.grant("b", [30], table.now()) == []  # (b has no session)
        nursery.cancel_scope.cancel()


async def test_a_path_walk_recalls_every_creator():
    table = LeaseTable(term=10.0)
    async with trio.open_nursery() as nursery:
        seen_a = await _holder(nursery, table, "a")
        table.grant("a", [40, 41], table.now())
        assert table.delegate("a", 40) and table.delegate("a", 41)
        await table.reading_all()
        assert sorted(i for r in seen_a for i in r) == [40, 41] and table.exclusive == {}
        nursery.cancel_scope.cancel()


async def test_the_numbers_of_a_session_that_ends_go_back():
    table = LeaseTable(term=10.0)
    back: list[int] = []
    table.on_undelegated = lambda inos: back.extend(sorted(inos))
    ours, theirs = trio.socket.socketpair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(table.serve_holder, "a", theirs)
        assert (await aio.recv_frame(ours, 5))[0]["ok"]
        table.holder("a").delegated.update({101, 102})
        table.grant("a", [50], table.now())
        assert table.delegate("a", 50)
        ours.close()  # the mount ends
        await trio.testing.wait_all_tasks_blocked()
    assert back == [101, 102] and table.exclusive == {} and table.holder("a") is None


async def test_a_writer_that_gave_its_lease_up_is_not_called_back_but_gets_it_pushed():
    table = LeaseTable(term=10.0)
    async with trio.open_nursery() as nursery:
        ours, theirs = trio.socket.socketpair()
        nursery.start_soon(table.serve_holder, "w", theirs)
        await aio.recv_frame(ours, 5)
        seen_r = await _holder(nursery, table, "r")
        assert table.grant("w", [21, 22], table.now()) == [21, 22]
        assert table.grant("r", [21], table.now()) == [21]
        await aio.send_frame(ours, {"op": "writing", "inos": [21]})
        await table.settle()  # (what the size report does first)
        table.note_reported([21])
        async with table.changing([21]):  # the report: the reader only is called back
            pass
        assert seen_r == [[21]] and 21 not in table.by_ino
        assert table.by_ino[22] == {"w"} and table.counters["writing"] == 1
        await table.push([{"ino": 21, "size": 3901}], table.now())  # the new size, to both
        got = await aio.recv_frame(ours, 5)
        assert got[0] == {"op": "grant", "attrs": [{"ino": 21, "size": 3901}]}
        assert table.by_ino[21] == {"w", "r"}
        nursery.cancel_scope.cancel()


async def test_a_delegated_writer_is_recalled_before_anyone_else_sees_the_file():
    table = LeaseTable(term=10.0)
    async with trio.open_nursery() as nursery:
        seen_w = await _holder(nursery, table, "w")
        assert table.write_delegate("w", 60) is False  # only a file it leases alone
        table.grant("w", [60], table.now())
        assert table.write_delegate("w", 60)
        assert table.grant("r", [60], table.now()) == []  # no one else leases it meanwhile
        assert table.created_in([60], "w") == [] and table.created_in([60], None) == [60]
        await table.reading([60], "w")  # the writer's own reads recall nothing
        assert seen_w == []
        async with table.changing([60], report=True):  # its own write-back's size report
            pass
        assert seen_w == [] and table.writers == {60: "w"}
        await table.reading([60], None)  # a native client's getattr
        assert seen_w == [[60]] and table.writers == {} and 60 not in table.by_ino
        nursery.cancel_scope.cancel()


async def test_others_wait_for_a_delegated_write_back_until_the_writer_says_written():
    table = LeaseTable(term=10.0)
    async with trio.open_nursery() as nursery:
        ours, theirs = trio.socket.socketpair()
        nursery.start_soon(table.serve_holder, "w", theirs)
        await aio.recv_frame(ours, 5)
        table.grant("w", [61], table.now())
        assert table.write_delegate("w", 61)
        await aio.send_frame(ours, {"op": "writing", "inos": [61]})  # the flusher starts
        await trio.testing.wait_all_tasks_blocked()
        assert 61 in table.flushing and table.writers == {}
        assert table.by_ino[61] == {"w"}  # it keeps its lease: what it shows is its own
        done = trio.Event()

        async def read() -> None:
            await table.reading([61], None)
            done.set()

        nursery.start_soon(read)
        await trio.testing.wait_all_tasks_blocked()
        assert not done.is_set()  # its data are on their way: the reader waits
        async with table.changing([61], report=True):  # the daemons' report does not,
            pass                                        # nor does it call the writer back
        await aio.send_frame(ours, {"op": "written", "inos": [61]})
        with trio.fail_after(5):
            await done.wait()
        assert table.flushing == {} and table.counters["flush_waits"] == 1
        nursery.cancel_scope.cancel()


async def test_every_file_written_back_is_fetched_again_even_one_whose_lease_went():
    """The daemons' reports of a delegated write-back leave the size fetch to ``written``
    (server.op_sizes_changed), so ``written`` asks for every file written back -- also one
    whose lease the writer gave up meanwhile (pushed to no one: it has no lease)."""
    table = LeaseTable(term=10.0)
    asked: list[list[int]] = []
    table.on_written = asked.append
    async with trio.open_nursery() as nursery:
        ours, theirs = trio.socket.socketpair()
        nursery.start_soon(table.serve_holder, "w", theirs)
        await aio.recv_frame(ours, 5)
        table.grant("w", [71, 72], table.now())
        assert table.write_delegate("w", 71) and table.write_delegate("w", 72)
        await aio.send_frame(ours, {"op": "writing", "inos": [71, 72]})
        await aio.send_frame(ours, {"op": "release", "inos": [72]})  # (its lease forgotten)
        await aio.send_frame(ours, {"op": "written", "inos": [71, 72]})
        with trio.fail_after(5):
            while table.flushing:  # (the three frames read in their order)
                await trio.sleep(0.01)
        assert asked == [[71, 72]]
        nursery.cancel_scope.cancel()


async def test_a_writer_whose_session_ends_holds_no_one_up():
    table = LeaseTable(term=10.0)
    ours, theirs = trio.socket.socketpair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(table.serve_holder, "w", theirs)
        await aio.recv_frame(ours, 5)
        table.grant("w", [62, 63], table.now())
        assert table.write_delegate("w", 62) and table.write_delegate("w", 63)
        await aio.send_frame(ours, {"op": "writing", "inos": [62]})
        await trio.testing.wait_all_tasks_blocked()
        ours.close()  # the mount ends mid write-back
        await trio.testing.wait_all_tasks_blocked()
        with trio.fail_after(5):
            await table.reading([62, 63], None)
        assert table.writers == {} and table.flushing == {}
        nursery.cancel_scope.cancel()


async def test_a_removed_file_has_no_writer():
    table = LeaseTable(term=10.0)
    async with trio.open_nursery() as nursery:
        await _holder(nursery, table, "w")
        table.grant("w", [64], table.now())
        assert table.write_delegate("w", 64)
        table.gone(64)
        assert table.writers == {} and 64 not in table.holder("w").exclusive
        nursery.cancel_scope.cancel()
