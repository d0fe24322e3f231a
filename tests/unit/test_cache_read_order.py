"""Block cache: a read that arrives while a write of its bytes is in progress sees that write.

The CI run that found this (issue 9's racing-reader fsx test, 1 run in ~10 under load): a
partial-block write was waiting for its read-modify-write fetch when the kernel, which had
dropped its pages (an mtime change seen by ``getattr``, the racer's ``fadvise``), sent a READ
of the same page. The stream read took the servers' old bytes, the kernel cached them, and a
later mapped read returned zeros the write had replaced. The kernel sent the WRITE first, so
the cache must answer the READ with it applied.

A partial-block write no longer fetches (the block is cached partial); a write still waits
while a fetch of its block holds the block's lock, and that is the in-progress write these
tests hold.
"""

from __future__ import annotations

import pytest
import trio

from pvfs.cache import BlockCache, StreamPolicy
from pvfs.cache.testing import MemoryBackend, PlainBackend

pytestmark = pytest.mark.trio

BS = 64
BIG = 4 * BS  # requests of 4 blocks or more are streams


class GatedBackend(MemoryBackend):
    """Reads of one ``(offset, length)`` wait for ``gate``; ``gated`` is set when one starts."""

    def __init__(self, offset: int, length: int) -> None:
        super().__init__()
        self.held = (offset, length)
        self.gate = trio.Event()
        self.gated = trio.Event()

    async def read(self, ino: int, offset: int, length: int) -> bytes:
        if (offset, length) == self.held:
            self.gated.set()
            await self.gate.wait()
        return await super().read(ino, offset, length)


def make(be: MemoryBackend | PlainBackend) -> BlockCache:
    return BlockCache(be, block_size=BS, capacity=64 * BS,
                      stream=StreamPolicy(min_bytes=BIG, readahead=0))


def old_file(n: int) -> bytearray:
    return bytearray(b"o" * n)


async def hold_block(cache: BlockCache, be: GatedBackend, nursery: trio.Nursery,
                     blk: int) -> None:
    """A reader of block ``blk`` that stays in its fetch (holding the block's lock) until
    ``be.gate`` is set: a write to the block waits for the lock meanwhile (a partial-block
    write no longer fetches, so this is how a write stays in progress)."""
    nursery.start_soon(lambda: cache.read(1, blk * BS, 1, file_size=8 * BS))
    await be.gated.wait()


async def test_stream_read_waits_for_a_partial_write_waiting_for_a_fetch() -> None:
    be = GatedBackend(3 * BS, BS)  # a fetch of block 3
    be.files[1] = old_file(8 * BS)
    cache = make(be)
    got: list[bytes] = []

    async def writer() -> None:
        await cache.write(1, 3 * BS + 10, b"N" * 20, file_size=8 * BS)

    async def reader() -> None:
        got.append(await cache.read(1, 0, 8 * BS, file_size=8 * BS))  # a stream read

    async with trio.open_nursery() as n:
        await hold_block(cache, be, n, 3)
        n.start_soon(writer)
        await trio.testing.wait_all_tasks_blocked()
        n.start_soon(reader)
        await trio.testing.wait_all_tasks_blocked()
        assert not got  # it waits for the write...
        be.gate.set()
    want = bytearray(old_file(8 * BS))
    want[3 * BS + 10:3 * BS + 30] = b"N" * 20
    assert got == [bytes(want)]  # ...and sees it


async def test_block_read_of_a_later_block_waits_for_the_whole_write() -> None:
    # blocks 2..3: block 2 waits for its lock, block 3 (whole) is applied only after it
    be = GatedBackend(2 * BS, BS)
    be.files[1] = old_file(8 * BS)
    cache = make(be)
    got: list[bytes] = []

    async def writer() -> None:
        await cache.write(1, 2 * BS + 1, b"N" * (2 * BS - 1), file_size=8 * BS)

    async def reader() -> None:
        got.append(await cache.read(1, 3 * BS, BS, file_size=8 * BS))  # block path

    async with trio.open_nursery() as n:
        await hold_block(cache, be, n, 2)
        n.start_soon(writer)
        await trio.testing.wait_all_tasks_blocked()
        n.start_soon(reader)
        await trio.testing.wait_all_tasks_blocked()
        assert not got
        be.gate.set()
    assert got == [b"N" * BS]


async def test_read_elsewhere_does_not_wait() -> None:
    be = GatedBackend(2 * BS, BS)
    be.files[1] = old_file(8 * BS)
    cache = make(be)
    got: list[bytes] = []

    async def writer() -> None:
        await cache.write(1, 2 * BS + 1, b"N", file_size=8 * BS)

    async with trio.open_nursery() as n:
        await hold_block(cache, be, n, 2)
        n.start_soon(writer)
        await trio.testing.wait_all_tasks_blocked()
        got.append(await cache.read(1, 5 * BS, BS, file_size=8 * BS))  # the write is stuck
        be.gate.set()
    assert got == [b"o" * BS]
    assert await cache.read(1, 2 * BS, 2, file_size=8 * BS) == b"oN"


async def test_read_during_a_write_through_sees_it() -> None:
    be = MemoryBackend(delay=0.05)
    be.files[1] = old_file(8 * BS)
    cache = make(be)
    got: list[bytes] = []
    started = trio.Event()
    backend_write = be.write

    async def write(*args: object) -> None:
        started.set()
        await backend_write(*args)  # type: ignore[arg-type]

    be.write = write  # type: ignore[method-assign]

    async def reader() -> None:
        got.append(await cache.read(1, 0, 8 * BS, file_size=8 * BS))

    async with trio.open_nursery() as n:
        n.start_soon(lambda: cache.write(1, 4 * BS, b"S" * BS, sync=True))
        await started.wait()
        n.start_soon(reader)
    assert got[0][4 * BS:5 * BS] == b"S" * BS  # the backend had not finished the write


async def test_write_registration_is_removed_on_error() -> None:
    be = MemoryBackend()
    be.files[1] = old_file(8 * BS)
    cache = make(be)
    be.fail_writes = 5
    with pytest.raises(OSError):
        await cache.write(1, BS + 1, b"x", file_size=8 * BS, sync=True)  # written through
    assert cache.store.file(1).writing == []
    be.fail_writes = None
    assert await cache.read(1, BS, 2, file_size=8 * BS) == b"oo"


# ----------------------------------------------------------- and a write after a read

async def test_a_read_of_a_hit_and_a_miss_is_not_torn_by_a_write_meanwhile() -> None:
    # The cache model found it: blocks 3..5 read, block 4 a hit (copied at once), blocks 3
    # and 5 missing and fetched one run at a time (no list I/O). A write of blocks 4..5 and
    # its write-back landed during the fetch of block 3; block 5, fetched after, was new, so
    # the read answered block 4 old and block 5 new. The write now waits for the read.
    be = GatedBackend(3 * BS, BS)
    be.files[1] = old_file(8 * BS)
    cache = make(PlainBackend(be))
    assert await cache.read(1, 4 * BS, 1, file_size=8 * BS) == b"o"  # block 4 cached
    got: list[bytes] = []
    wrote = trio.Event()

    async def reader() -> None:
        got.append(await cache.read(1, 3 * BS, 3 * BS, file_size=8 * BS))

    async def writer() -> None:
        await cache.write(1, 4 * BS + 10, b"N" * BS, file_size=8 * BS)
        await cache.flush(1)
        wrote.set()

    async with trio.open_nursery() as n:
        n.start_soon(reader)
        await be.gated.wait()  # the read has its hit and waits in the fetch of block 3
        n.start_soon(writer)
        await trio.testing.wait_all_tasks_blocked()
        assert not wrote.is_set()  # the write waits for the read...
        assert cache.store.file(1).writing
        be.gate.set()
    assert got == [b"o" * 3 * BS]  # ...which answers the file of one moment
    want = old_file(8 * BS)
    want[4 * BS + 10:5 * BS + 10] = b"N" * BS
    assert await cache.read(1, 3 * BS, 3 * BS, file_size=8 * BS) == bytes(want[3 * BS:6 * BS])
    assert be.files[1] == want


async def test_a_write_elsewhere_does_not_wait_for_a_read() -> None:
    be = GatedBackend(5 * BS, BS)
    be.files[1] = old_file(8 * BS)
    cache = make(be)
    async with trio.open_nursery() as n:
        n.start_soon(lambda: cache.read(1, 5 * BS, BS, file_size=8 * BS))
        await be.gated.wait()
        with trio.fail_after(1):  # a write of other bytes goes on (real time: no mock clock)
            await cache.write(1, 6 * BS, b"N" * BS, file_size=8 * BS)
        be.gate.set()
    assert await cache.read(1, 6 * BS, BS, file_size=8 * BS) == b"N" * BS


async def test_read_registration_is_removed_on_error() -> None:
    be = MemoryBackend()
    be.files[1] = old_file(8 * BS)
    cache = make(be)
    be.fail_reads = 5
    with pytest.raises(OSError):
        await cache.read(1, BS, 2, file_size=8 * BS)
    assert cache.store.file(1).reading == []
    be.fail_reads = None
    with trio.fail_after(1):
        await cache.write(1, BS, b"N", file_size=8 * BS)
    assert await cache.read(1, BS, 2, file_size=8 * BS) == b"No"
