"""The client's runtime hints from the global cache (``pvfs.gcache.backend``): a reply's hint
for a segment of which this client had a write through the global cache unanswered when the
request was sent, or sent one since, is not taken. The daemon may have judged the segment
before the write reached it, the write ended the hint, and the I/O daemons hold the old
bytes until the daemon has written the new ones back (fsx found the race: zeros read where
a refused write had extended the file)."""

from __future__ import annotations

import trio
import trio.testing

from pvfs.config import Config, Endpoint
from pvfs.gcache.backend import GcacheBackend
from pvfs.gcache.config import GcacheConfig
from pvfs.layout.stripe import Stripe

BS = 4096
SEG = 4 * BS


class FakeDaemon:
    """A global cache daemon's channel: reads of ``held`` offsets wait for ``release``, writes
    of ``held_writes`` offsets for ``release_writes``; every read reply hints
    ``hint_segments``; writes are answered without hints."""

    def __init__(self) -> None:
        self.release = trio.Event()
        self.release_writes = trio.Event()
        self.held: set[int] = set()
        self.held_writes: set[int] = set()
        self.hint_segments: list[int] = []
        self.seen: list[tuple[str, int]] = []

    async def call_bulk(self, header: dict):
        self.seen.append((header["op"], header["offset"]))
        if header["offset"] in self.held:
            await self.release.wait()
        return {"bypass": self.hint_segments, "ttl": 0, "epoch": 1}, bytes(header["length"])

    async def call(self, header: dict, blob: bytes = b"") -> dict:
        self.seen.append((header["op"], header["offset"]))
        if header["offset"] in self.held_writes:
            await self.release_writes.wait()
        return {"bypass": [], "ttl": 0, "epoch": 1}

    def close(self) -> None:
        pass


class FakeDirect:
    def __init__(self) -> None:
        self.reads: list[int] = []

    async def read(self, ino: int, offset: int, length: int) -> bytes:
        self.reads.append(offset)
        return bytes(length)

    async def write(self, ino: int, offset: int, data) -> None:
        pass


def _backend(stripe_gates: list[trio.Event] | None = None
             ) -> tuple[GcacheBackend, FakeDaemon, FakeDirect]:
    """A backend over fakes; while ``stripe_gates`` holds an event, finding a stripe waits
    for it (the client's awaits between choosing a write's route and sending it)."""
    cfg = Config("t", Endpoint("127.0.0.1", 1, ""), (Endpoint("127.0.0.1", 2, ""),), auth=False)
    gconf = GcacheConfig(endpoints=(Endpoint("127.0.0.1", 3, ""),), segment_blocks=4)

    async def stripe_of(ino: int) -> Stripe:
        if stripe_gates:
            await stripe_gates[0].wait()
        return Stripe(0, 1, 65536)

    direct = FakeDirect()
    b = GcacheBackend(direct, cfg, gconf, stripe_of, block_size=BS)
    daemon = FakeDaemon()
    b.channels = [daemon]  # type: ignore[list-item]
    return b, daemon, direct


async def _with_a_read_out(b: GcacheBackend, daemon: FakeDaemon, during) -> None:
    """A read of block 0 out at the daemon, which judges segment 0 "bypass it", while
    ``during()`` runs; its reply, with that hint, comes after."""
    daemon.held = {0}
    daemon.hint_segments = [0]
    async with trio.open_nursery() as n:
        n.start_soon(b.read, 7, 0, BS)
        await trio.testing.wait_all_tasks_blocked()
        await during()
        daemon.release.set()


def test_a_hint_sent_before_the_clients_write_of_the_segment_is_not_taken():
    b, daemon, direct = _backend()

    async def main():
        await _with_a_read_out(b, daemon, lambda: b.write(7, 0, b"x" * BS))
        daemon.hint_segments = []
        await b.read(7, 0, BS)                  # through the global cache, not the disks

    trio.run(main)
    assert direct.reads == []
    assert daemon.seen[-1] == ("read", 0)
    assert b.counters["stale_hints"] == 1 and b.stats()["hinted_segments"] == 0


def test_a_hint_sent_while_the_clients_write_of_the_segment_is_unanswered_is_not_taken():
    """The read goes out after the write, on another connection, and the daemon judges the
    segment before it has taken the write in."""
    b, daemon, direct = _backend()
    daemon.held_writes = {BS}
    daemon.hint_segments = [0]

    async def main():
        async with trio.open_nursery() as n:
            n.start_soon(b.write, 7, BS, b"x" * BS)
            await trio.testing.wait_all_tasks_blocked()
            await b.read(7, 0, BS)              # judged before the write: "bypass segment 0"
            daemon.release_writes.set()
        daemon.hint_segments = []
        await b.read(7, 2 * BS, BS)

    trio.run(main)
    assert direct.reads == [] and b.counters["stale_hints"] == 1


def test_a_hint_arriving_before_the_write_is_sent_is_not_taken():
    """The write has chosen its route (ending the segment's hint) and awaits something
    before its request goes out; an earlier read's reply with the hint arrives meanwhile."""
    gates: list[trio.Event] = []
    b, daemon, direct = _backend(gates)
    daemon.held = {0}
    daemon.hint_segments = [0]

    async def main():
        async with trio.open_nursery() as n:
            n.start_soon(b.read, 7, 0, BS)      # out, the daemon judging segment 0
            await trio.testing.wait_all_tasks_blocked()
            gates.append(trio.Event())
            n.start_soon(b.write, 7, BS, b"x" * BS)  # route chosen, stripe awaited
            await trio.testing.wait_all_tasks_blocked()
            daemon.release.set()                # the read's hint comes back
            await trio.testing.wait_all_tasks_blocked()
            gates.pop().set()                   # and the write goes out
        daemon.hint_segments = []
        await b.read(7, 2 * BS, BS)

    trio.run(main)
    assert direct.reads == [] and b.counters["stale_hints"] == 1


def test_a_hint_sent_after_the_write_was_answered_is_taken():
    b, daemon, direct = _backend()
    daemon.hint_segments = [0]

    async def main():
        await b.write(7, BS, b"x" * BS)
        await b.read(7, 0, BS)                  # judged after the write: the hint holds
        daemon.hint_segments = []
        await b.read(7, 2 * BS, BS)

    trio.run(main)
    assert direct.reads == [2 * BS] and b.counters["stale_hints"] == 0


def test_a_hint_for_a_segment_not_written_meanwhile_is_taken():
    b, daemon, direct = _backend()

    async def main():
        await _with_a_read_out(b, daemon, lambda: b.write(7, SEG, b"x" * BS))  # segment 1
        await b.read(7, 0, BS)                  # the hint holds: to the I/O daemons

    trio.run(main)
    assert direct.reads == [0]
    assert b.counters["stale_hints"] == 0 and b.counters["hints"] == 1


def test_the_write_record_is_bounded_and_then_counts_for_every_segment():
    from pvfs.gcache import hints as mod

    b, daemon, _ = _backend()

    async def many_writes():
        for seg in range(1, mod.WRITTEN_MAX + 2):   # never segment 0
            b.runtime._tick({(7, seg)})
        assert len(b.runtime._written) <= mod.WRITTEN_MAX

    trio.run(_with_a_read_out, b, daemon, many_writes)
    assert b.counters["stale_hints"] == 1                # conservative: not taken
    assert b.runtime._written == {} and b.runtime._written_all == 0      # nothing out: forgotten
