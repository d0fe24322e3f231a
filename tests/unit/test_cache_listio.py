"""Block cache with a list-I/O backend: write-back and scattered reads in few calls."""

from __future__ import annotations

import errno

import pytest
import trio

from pvfs.cache import BlockCache, ListBackend, StreamPolicy, WritebackPolicy
from pvfs.cache.testing import MemoryBackend, PlainBackend

pytestmark = pytest.mark.trio

BS = 64


def make(capacity_blocks: int = 64, *, stripe: int | None = None, delay: float = 0.0,
         **kw: object) -> tuple[BlockCache, MemoryBackend]:
    be = MemoryBackend(stripe=stripe, delay=delay)
    cache = BlockCache(be, block_size=BS, capacity=capacity_blocks * BS, **kw)  # type: ignore[arg-type]
    return cache, be


def pattern(n: int, seed: int = 1) -> bytes:
    return bytes((i * 7 + seed) % 251 for i in range(n))


async def scatter(cache: BlockCache, blocks: list[int], seed: int = 1) -> dict[int, bytes]:
    """Write one whole block at each of ``blocks`` (file 1); returns block -> data."""
    out = {}
    for blk in blocks:
        out[blk] = pattern(BS, seed + blk)
        await cache.write(1, blk * BS, out[blk])
    return out


def expected(blocks: dict[int, bytes]) -> bytes:
    buf = bytearray((max(blocks) + 1) * BS)
    for blk, data in blocks.items():
        buf[blk * BS:(blk + 1) * BS] = data
    return bytes(buf)


async def test_memory_backend_is_a_list_backend() -> None:
    assert isinstance(MemoryBackend(), ListBackend)
    assert not isinstance(PlainBackend(MemoryBackend()), ListBackend)


async def test_scattered_dirty_runs_in_one_list_write() -> None:
    cache, be = make()
    blocks = await scatter(cache, [9, 1, 5, 6, 20, 3])
    await cache.flush(1)
    assert be.list_writes == [(1, [(BS, BS), (3 * BS, BS), (5 * BS, 2 * BS), (9 * BS, BS),
                                   (20 * BS, BS)])]
    assert bytes(be.files[1]) == expected(blocks)
    s = cache.stats()
    assert s["backend_writes"] == 1 and s["list_writes"] == 1 and s["list_regions"] == 5
    assert s["flushed_bytes"] == 6 * BS and s["dirty_blocks"] == 0 and s["flushes"] == 1


async def test_contiguous_dirty_run_stays_a_plain_write() -> None:
    cache, be = make()
    await scatter(cache, [2, 3, 4])
    await cache.flush(1)
    assert be.list_writes == [] and be.writes == [(1, 2 * BS, 3 * BS)]
    assert cache.stats()["list_writes"] == 0


async def test_list_writes_cut_at_region_and_byte_budget() -> None:
    cache, be = make(writeback=WritebackPolicy(max_regions=2))
    blocks = await scatter(cache, [0, 2, 4, 6, 8])
    await cache.flush(1)
    assert [len(r) for _, r in be.list_writes] == [2, 2]
    assert be.writes[-1] == (1, 8 * BS, BS)  # the last lone region: a plain write
    assert bytes(be.files[1]) == expected(blocks)
    cache2, be2 = make(writeback=WritebackPolicy(max_list_bytes=3 * BS))
    await scatter(cache2, [0, 2, 3, 5, 7, 9, 10, 11])
    await cache2.flush(1)
    # runs 1+2+1+1+3 blocks: at most 3 blocks per call, a longer run alone
    assert [r for _, r in be2.list_writes] == [
        [(0, BS), (2 * BS, 2 * BS)], [(5 * BS, BS), (7 * BS, BS)]]
    assert be2.writes[-1] == (1, 9 * BS, 3 * BS)


async def test_regions_still_cut_at_stripe_windows_and_short_blocks() -> None:
    cache, be = make(stripe=2 * BS, writeback=WritebackPolicy(max_write=2 * BS))
    await cache.write(1, BS, pattern(5 * BS))
    await cache.write(1, 10 * BS, b"short")
    await cache.flush(1)
    assert be.list_writes == [(1, [(BS, BS), (2 * BS, 2 * BS), (4 * BS, 2 * BS),
                                   (10 * BS, 5)])]


async def test_fallback_without_list_io_one_write_per_run() -> None:
    be = MemoryBackend()
    cache = BlockCache(PlainBackend(be), block_size=BS, capacity=64 * BS)
    blocks = await scatter(cache, [1, 3, 4, 8])
    await cache.flush(1)
    assert be.list_writes == []
    assert be.writes == [(1, BS, BS), (1, 3 * BS, 2 * BS), (1, 8 * BS, BS)]
    assert bytes(be.files[1]) == expected(blocks)
    assert cache.stats()["backend_writes"] == 3


async def test_failed_list_write_drops_its_blocks_and_parks_error_once() -> None:
    cache, be = make(writeback=WritebackPolicy(max_regions=2))
    be.files[1] = bytearray(b"o" * 8 * BS)
    await scatter(cache, [0, 2, 4, 6])
    be.fail_writes = errno.EIO
    with pytest.raises(OSError) as info:
        await cache.flush(1)
    assert info.value.errno == errno.EIO
    await cache.flush(1)  # reported once
    s = cache.stats()
    assert s["write_errors"] == 2 and s["dirty_blocks"] == 0 and s["blocks_cached"] == 0
    be.fail_writes = None
    assert await cache.read(1, 0, 8 * BS, file_size=8 * BS) == b"o" * 8 * BS


async def test_block_rewritten_during_list_write_stays_dirty() -> None:
    cache, be = make(delay=0.01)
    await scatter(cache, [0, 2])
    async with trio.open_nursery() as nursery:
        nursery.start_soon(cache.flush, 1)
        await trio.sleep(0.005)  # the list write is in flight
        await cache.write(1, 2 * BS, b"N" * BS)
    assert cache.has_dirty(1) and cache.stats()["dirty_blocks"] == 1
    await cache.flush(1)
    assert be.list_writes[0][1] == [(0, BS), (2 * BS, BS)]
    assert be.writes[-1] == (1, 2 * BS, BS)
    assert bytes(be.files[1][2 * BS:]) == b"N" * BS


async def test_queued_stream_write_reaches_backend_before_block_list_write() -> None:
    cache, be = make(stream=StreamPolicy(min_bytes=4 * BS))
    await cache.write(1, 0, b"S" * 8 * BS)  # queued stream write
    await cache.write(1, 2 * BS, b"a" * BS)  # blocks updated in place and newer
    await cache.write(1, 5 * BS, b"b" * BS)
    await cache.flush(1)
    assert be.writes[0] == (1, 0, 8 * BS)
    assert be.list_writes == [(1, [(2 * BS, BS), (5 * BS, BS)])]
    assert bytes(be.files[1]) == b"S" * 2 * BS + b"a" * BS + b"S" * 2 * BS + b"b" * BS \
        + b"S" * 2 * BS


async def test_flusher_uses_list_writes() -> None:
    cache, be = make(writeback=WritebackPolicy(max_age=0.0, interval=0.01))
    async with trio.open_nursery() as nursery:
        await cache.start(nursery)
        blocks = await scatter(cache, [7, 0, 3])
        while cache.has_dirty(1):
            await trio.sleep(0.01)
        await cache.aclose()
        nursery.cancel_scope.cancel()
    assert be.list_writes and bytes(be.files[1]) == expected(blocks)


async def test_scattered_missing_runs_in_one_list_read() -> None:
    cache, be = make()
    data = pattern(10 * BS + 20)
    be.files[1] = bytearray(data)
    await cache.read(1, 2 * BS, 1, file_size=len(data))  # block 2 cached
    await cache.read(1, 6 * BS, 1, file_size=len(data))  # block 6 cached
    be.reads.clear()
    got = await cache.read(1, 0, 12 * BS, file_size=len(data))
    assert got == data
    # runs 0-1, 3-5, 7-10 (block 10 short at end of file)
    assert be.list_reads == [(1, [(0, 2 * BS), (3 * BS, 3 * BS), (7 * BS, 4 * BS)])]
    s = cache.stats()
    assert s["list_reads"] == 1 and s["hits"] == 2 and s["misses"] == 11
    be.reads.clear()
    assert await cache.read(1, 0, 12 * BS, file_size=len(data)) == data
    assert be.reads == []  # all cached now, the short last block included
    assert cache.store.table[(1, 10)].valid == 20


async def test_list_read_cut_at_budget_and_fallback() -> None:
    cache, be = make(writeback=WritebackPolicy(max_regions=2))
    data = pattern(9 * BS)
    be.files[1] = bytearray(data)
    await cache.write(1, 2 * BS, data[2 * BS:3 * BS])
    await cache.write(1, 5 * BS, data[5 * BS:6 * BS])
    await cache.write(1, 7 * BS, data[7 * BS:8 * BS])
    assert await cache.read(1, 0, 9 * BS, file_size=9 * BS) == data
    assert [r for _, r in be.list_reads] == [[(0, 2 * BS), (3 * BS, 2 * BS)],
                                             [(6 * BS, BS), (8 * BS, BS)]]
    be2 = MemoryBackend()
    be2.files[1] = bytearray(data)
    cache2 = BlockCache(PlainBackend(be2), block_size=BS, capacity=64 * BS)
    await cache2.write(1, 2 * BS, data[2 * BS:3 * BS])
    assert await cache2.read(1, 0, 9 * BS, file_size=9 * BS) == data
    assert be2.list_reads == [] and be2.reads == [(1, 0, 2 * BS), (1, 3 * BS, 6 * BS)]


async def test_concurrent_scattered_readers_fetch_once() -> None:
    cache, be = make(delay=0.01)
    data = pattern(6 * BS)
    be.files[1] = bytearray(data)
    await cache.write(1, 2 * BS, data[2 * BS:3 * BS])
    results: list[bytes] = []

    async def reader() -> None:
        results.append(await cache.read(1, 0, 6 * BS, file_size=6 * BS))

    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(reader)
    assert results == [data] * 3
    assert len(be.list_reads) == 1


async def test_list_read_error_raised_and_nothing_inserted() -> None:
    cache, be = make()
    be.files[1] = bytearray(pattern(6 * BS))
    await cache.write(1, 2 * BS, b"d" * BS)
    be.fail_reads = errno.EIO
    with pytest.raises(OSError):
        await cache.read(1, 0, 6 * BS, file_size=6 * BS)
    assert cache.stats()["blocks_cached"] == 1
