"""Block cache: partial blocks — a write into part of a block never fetches the block first.

A block the write covers only in part, when the file has bytes there the write does not
cover, is cached *partial*: it knows only the ranges written (``Entry.known``). A read of
those ranges is a hit; a read of the unknown rest fetches the block and lays the known ranges
over what the servers returned; write-back sends the dirty ranges (as for any block);
truncation cuts the known ranges. IOR hard write (47,008-byte transfers into one shared file)
did a read-modify-write fetch for about every second transfer before (docs/benchmarks.md).
"""

from __future__ import annotations

import pytest
import trio
import trio.testing

from pvfs.cache import BlockCache, Bypass
from pvfs.cache.testing import MemoryBackend, PlainBackend

pytestmark = pytest.mark.trio

BS = 64
OLD = bytes((i * 7 + 1) % 251 for i in range(8 * BS))  # the servers' bytes of file 1


def make(be: MemoryBackend | PlainBackend | None = None) -> tuple[BlockCache, MemoryBackend]:
    mem = MemoryBackend() if be is None else be if isinstance(be, MemoryBackend) else be.inner
    mem.files[1] = bytearray(OLD)
    return BlockCache(be if be is not None else mem, block_size=BS, capacity=64 * BS), mem


def put(buf: bytes | bytearray, off: int, data: bytes) -> bytes:
    out = bytearray(buf)
    out[off:off + len(data)] = data
    return bytes(out)


async def test_a_partial_write_does_not_fetch() -> None:
    cache, be = make()
    await cache.write(1, 10, b"A" * 20, file_size=len(OLD))            # inside block 0
    await cache.write(1, 2 * BS - 5, b"B" * 10, file_size=len(OLD))    # across blocks 1|2
    await cache.write(1, 5 * BS + 7, b"C", file_size=len(OLD))         # one byte of block 5
    assert be.reads == []
    s = cache.stats()
    assert s["partial_writes"] == 4 and s["partial_blocks"] == 4 and s["dirty_bytes"] == 31
    # what was written reads back without a fetch
    assert await cache.read(1, 12, 10, file_size=len(OLD)) == b"A" * 10
    assert await cache.read(1, 2 * BS - 5, 10, file_size=len(OLD)) == b"B" * 10
    assert be.reads == []
    await cache.flush(1)
    assert be.reads == []
    assert sorted(be.writes) == [(1, 10, 20), (1, 2 * BS - 5, 10), (1, 5 * BS + 7, 1)]
    want = put(put(put(OLD, 10, b"A" * 20), 2 * BS - 5, b"B" * 10), 5 * BS + 7, b"C")
    assert bytes(be.files[1]) == want


async def test_shared_file_transfers_of_another_size_than_a_block() -> None:
    """IOR hard's shape: ranks write transfers of 47 bytes (not a multiple of the block) side
    by side into one file whose size is already past them; no fetch at all, and every block
    two transfers share is whole once both are in."""
    cache, be = make()
    n, t = 8, 47
    size = n * t + BS
    be.files[1] = bytearray(b"o" * size)
    for i in (1, 0, 3, 2, 5, 4, 7, 6):  # out of order, as ranks' writes arrive
        await cache.write(1, i * t, bytes([65 + i]) * t, file_size=size)
    assert be.reads == []
    assert cache.stats()["partial_blocks"] == 1  # only the last block still has unknown bytes
    want = b"".join(bytes([65 + i]) * t for i in range(n)) + b"o" * (size - n * t)
    assert await cache.read(1, 0, n * t, file_size=size) == want[:n * t]
    assert be.reads == []  # the whole blocks were hits
    await cache.flush(1)
    assert bytes(be.files[1]) == want


@pytest.mark.parametrize("listio", [True, False])
async def test_a_read_of_the_unknown_rest_fetches_and_lays_the_writes_over(listio: bool,
                                                                           ) -> None:
    mem = MemoryBackend()
    cache, be = make(mem if listio else PlainBackend(mem))
    await cache.write(1, 10, b"A" * 5, file_size=len(OLD))
    await cache.write(1, 40, b"B" * 5, file_size=len(OLD))
    await cache.write(1, 3 * BS + 60, b"C" * 8, file_size=len(OLD))  # blocks 3 and 4
    assert be.reads == []
    want = put(put(put(OLD, 10, b"A" * 5), 40, b"B" * 5), 3 * BS + 60, b"C" * 8)
    # blocks 0..5: 0, 3, 4 partial, 1, 2, 5 missing: the fetch reads them all, once
    assert await cache.read(1, 0, 6 * BS, file_size=len(OLD)) == want[:6 * BS]
    assert sorted(be.reads) == [(1, 0, 6 * BS)]
    s = cache.stats()
    assert s["partial_fills"] == 3 and s["partial_blocks"] == 0
    assert await cache.read(1, 0, 6 * BS, file_size=len(OLD)) == want[:6 * BS]
    assert len(be.reads) == 1  # whole now: hits
    await cache.flush(1)  # still only the written ranges go back
    assert sorted(be.writes) == [(1, 10, 5), (1, 40, 5), (1, 3 * BS + 60, 8)]
    assert bytes(be.files[1]) == want


async def test_another_clients_bytes_in_the_rest_of_the_block_are_read() -> None:
    """The unknown rest is read when it is needed, not when the write came: a client that
    wrote there in between is seen (before, the read-modify-write had cached its old bytes)."""
    cache, be = make()
    await cache.write(1, 10, b"A" * 5, file_size=len(OLD))
    be.files[1][30:35] = b"Z" * 5  # another client, same block
    got = await cache.read(1, 0, BS, file_size=len(OLD))
    assert got == put(put(OLD, 10, b"A" * 5), 30, b"Z" * 5)[:BS]


async def test_write_back_of_a_partial_block_and_reads_after_it() -> None:
    cache, be = make()
    await cache.write(1, BS + 10, b"A" * 10, file_size=len(OLD))
    await cache.flush(1)
    assert be.writes == [(1, BS + 10, 10)] and be.reads == []
    s = cache.stats()
    assert s["dirty_blocks"] == 0 and s["partial_blocks"] == 1  # clean, still partial
    be.files[1][BS + 40:BS + 45] = b"Z" * 5  # another client, after our write-back
    assert await cache.read(1, BS + 12, 5, file_size=len(OLD)) == b"A" * 5  # a hit
    assert be.reads == []
    got = await cache.read(1, BS, BS, file_size=len(OLD))  # the rest: fetched now
    assert got == put(put(OLD, BS + 10, b"A" * 10), BS + 40, b"Z" * 5)[BS:2 * BS]
    assert be.reads == [(1, BS, BS)]
    # a clean partial block is evictable and invalidated like any clean block
    await cache.write(1, 3 * BS + 1, b"q", file_size=len(OLD))
    await cache.flush(1)
    assert cache.invalidate(1, 3 * BS, BS) == 1


async def test_truncation_cuts_what_a_partial_block_knows() -> None:
    cache, be = make()
    await cache.write(1, BS + 10, b"A" * 20, file_size=len(OLD))   # [10, 30) of block 1
    await cache.write(1, BS + 40, b"B" * 10, file_size=len(OLD))   # [40, 50) of block 1
    await cache.truncate(1, BS + 20)
    be.truncate(1, BS + 20)
    assert be.reads == []
    assert await cache.read(1, 0, 4 * BS, file_size=BS + 20) == OLD[:BS + 10] + b"A" * 10
    await cache.flush(1)
    assert be.writes == [(1, BS + 10, 10)]  # only what is left of the ranges
    assert bytes(be.files[1]) == OLD[:BS + 10] + b"A" * 10
    # cut below everything a partial block knows: it knows nothing, and bytes another client
    # writes there after the file grows again are read from the servers
    await cache.write(1, 2 * BS + 40, b"C" * 10, file_size=len(OLD))
    await cache.write(1, 2 * BS + 5, b"D" * 5, file_size=len(OLD))
    await cache.truncate(1, 2 * BS + 20)
    be.truncate(1, 2 * BS + 20)
    await cache.flush(1)
    assert be.writes[-1] == (1, 2 * BS + 5, 5)
    be.truncate(1, 3 * BS)
    be.files[1][2 * BS + 40:2 * BS + 50] = b"E" * 10  # another client grew it and wrote
    got = await cache.read(1, 2 * BS, BS, file_size=3 * BS)
    assert got[40:50] == b"E" * 10 and got[5:10] == b"D" * 5


async def test_a_partial_write_during_a_truncation_lands_after_it() -> None:
    """The truncation fence (docs/cache.md): a partial-block write that arrives while the
    servers' truncate is in flight is applied after the cut, as it was when it fetched."""
    cache, be = make()
    inside = trio.Event()
    go = trio.Event()

    async def truncator() -> None:
        async with cache.truncation(1, 0):
            inside.set()
            await go.wait()
            be.truncate(1, 0)

    async with trio.open_nursery() as n:
        n.start_soon(truncator)
        await inside.wait()
        n.start_soon(lambda: cache.write(1, 10, b"x", file_size=len(OLD)))  # the old size
        await trio.testing.wait_all_tasks_blocked()
        go.set()
    assert be.reads == []  # the write did not fetch
    assert await cache.read(1, 0, BS, file_size=0) == bytes(10) + b"x"
    await cache.flush(1)
    assert be.writes == [(1, 10, 1)]


async def test_a_bypassed_read_lays_dirty_partial_ranges_over_the_servers() -> None:
    cache, be = make()
    await cache.write(1, 10, b"A" * 5, file_size=len(OLD))
    cache.bypass.set_range(1, 0, 0, Bypass.READ_LOCAL)  # type: ignore[attr-defined]
    assert await cache.read(1, 0, BS, file_size=len(OLD)) == put(OLD, 10, b"A" * 5)[:BS]
    assert await cache.read(1, 11, 3, file_size=len(OLD)) == b"AAA"
    assert be.reads == [(1, 0, BS)]
    assert cache.stats()["partial_blocks"] == 1  # a bypassed read inserts nothing


class GatedOld(MemoryBackend):
    """Reads of ``(offset, length)`` take the servers' bytes first, then wait for ``gate``
    once ``armed``: a fetch that read before a write-back landed and returns after it."""

    def __init__(self, offset: int, length: int) -> None:
        super().__init__()
        self.held = (offset, length)
        self.armed = False
        self.gate = trio.Event()
        self.gated = trio.Event()

    async def read(self, ino: int, offset: int, length: int) -> bytes:
        data = await super().read(ino, offset, length)
        if self.armed and (offset, length) == self.held:
            self.gated.set()
            await self.gate.wait()
        return data


async def test_a_fetch_of_a_partial_block_never_overwrites_written_bytes() -> None:
    """A read fetches the rest of a partial block; while the fetch is in flight (holding the
    servers' old bytes) the block is written back, and another write to it waits for the
    fetch. The read, and every read after it, see this node's bytes; the later write is kept
    and written back."""
    be = GatedOld(0, BS)
    cache, _ = make(be)
    await cache.write(1, 10, b"A" * 10, file_size=len(OLD))
    assert be.reads == []
    be.armed = True
    got: list[bytes] = []

    async def reader() -> None:
        got.append(await cache.read(1, 0, BS, file_size=len(OLD)))

    async with trio.open_nursery() as n:
        n.start_soon(reader)
        await be.gated.wait()  # the fetch has the servers' old bytes of block 0
        await cache.flush(1)  # our bytes reach the servers; the block is clean
        assert not cache.has_dirty(1)
        n.start_soon(lambda: cache.write(1, 30, b"B" * 5, file_size=len(OLD)))
        await trio.testing.wait_all_tasks_blocked()
        assert cache.store.file(1).writing  # the write waits for the block's lock
        be.gate.set()
    assert got == [put(OLD, 10, b"A" * 10)[:BS]]
    want = put(put(OLD, 10, b"A" * 10), 30, b"B" * 5)
    assert await cache.read(1, 0, BS, file_size=len(OLD)) == want[:BS]
    assert len(be.reads) == 1
    await cache.flush(1)
    assert bytes(be.files[1]) == want


async def test_concurrent_readers_of_a_partial_block_fetch_it_once() -> None:
    be = MemoryBackend(delay=0.01)
    cache, _ = make(be)
    await cache.write(1, 10, b"A" * 10, file_size=len(OLD))
    assert be.reads == []  # partial: not fetched
    want = put(OLD, 10, b"A" * 10)
    got: list[bytes] = []

    async def reader(off: int, n: int) -> None:
        got.append(await cache.read(1, off, n, file_size=len(OLD)))

    async with trio.open_nursery() as n:
        n.start_soon(reader, 0, BS)    # needs the rest: fetches
        n.start_soon(reader, 5, 20)    # needs the rest too: waits for that fetch
        n.start_soon(reader, 12, 4)    # known bytes, but the block is busy: waits, then a hit
    assert sorted(got) == sorted([want[:BS], want[5:25], want[12:16]])
    assert be.reads == [(1, 0, BS)]
