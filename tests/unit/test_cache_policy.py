"""Block cache policies and workers: second chance, water marks, harvester, flusher."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from pvfs.cache import LRU, BlockCache, SecondChanceLRU, WaterMarks, WritebackPolicy
from pvfs.cache.testing import MemoryBackend

BS = 64


def test_second_chance_order() -> None:
    p = SecondChanceLRU()
    for k in "abcd":
        p.inserted(k)
    p.touched("a")
    p.touched("c")
    assert p.referenced("a") and not p.referenced("b")
    # a (referenced) gets its second chance, b is the victim; then d after c's second chance
    assert p.select_victims(1, lambda k: True) == ["b"]
    assert not p.referenced("a")
    assert p.select_victims(1, lambda k: True) == ["d"]
    assert p.select_victims(5, lambda k: True) == ["a", "c"]
    assert len(p) == 0


def test_second_chance_skips_ineligible_and_terminates() -> None:
    p = SecondChanceLRU()
    for k in range(5):
        p.inserted(k)
        p.touched(k)
    assert p.select_victims(3, lambda k: False) == []
    assert len(p) == 5
    assert p.select_victims(2, lambda k: k % 2 == 1) == [1, 3]
    p.removed(0)
    p.removed(99)
    assert len(p) == 2


def test_lru_order() -> None:
    p = LRU()
    for k in "abc":
        p.inserted(k)
    p.touched("a")
    assert p.select_victims(2, lambda k: True) == ["b", "c"]
    assert len(p) == 1


def test_watermarks() -> None:
    wm = WaterMarks(0.5, 0.75)
    assert wm.high_blocks(100) == 75 and wm.low_blocks(100) == 50
    assert wm.should_harvest(75, 100) and not wm.should_harvest(74, 100)
    with pytest.raises(ValueError):
        WaterMarks(0.9, 0.5)
    with pytest.raises(ValueError):
        WaterMarks(0.0, 0.5)
    with pytest.raises(ValueError):
        WritebackPolicy(dirty_low=0.6, dirty_high=0.5)


@pytest.mark.trio
async def test_harvest_down_to_low_water_in_second_chance_order() -> None:
    be = MemoryBackend()
    be.files[1] = bytearray(20 * BS)
    cache = BlockCache(be, block_size=BS, capacity=20 * BS, low_water=0.5, high_water=0.9)
    for blk in range(18):
        await cache.read(1, blk * BS, BS, file_size=20 * BS)
    await cache.read(1, 0, BS, file_size=20 * BS)  # block 0 referenced: second chance
    assert cache.harvest() == 8
    s = cache.stats()
    assert s["blocks_cached"] == 10 and s["evictions"] == 8 and s["free_blocks"] == 8
    be.reads.clear()
    await cache.read(1, 0, BS, file_size=20 * BS)
    assert be.reads == []  # block 0 survived
    await cache.read(1, BS, BS, file_size=20 * BS)
    assert be.reads == [(1, BS, BS)]  # block 1 was the first victim


@pytest.mark.trio
async def test_capacity_never_exceeded_and_buffers_reused() -> None:
    be = MemoryBackend()
    be.files[1] = bytearray(100 * BS)
    cache = BlockCache(be, block_size=BS, capacity=10 * BS)
    for blk in range(100):
        await cache.read(1, blk * BS, BS, file_size=100 * BS)
        assert cache.blocks_in_use <= 10
    s = cache.stats()
    assert s["capacity_blocks"] == 10 and s["evictions"] == 90


@pytest.mark.trio
async def test_full_of_dirty_blocks_writes_through() -> None:
    be = MemoryBackend()
    cache = BlockCache(be, block_size=BS, capacity=4 * BS)
    await cache.write(1, 0, b"a" * (4 * BS))
    assert be.writes == []
    await cache.write(1, 4 * BS, b"b" * BS)  # no clean block to evict: straight through
    assert be.writes == [(1, 4 * BS, BS)]
    assert cache.stats()["bypassed_writes"] == 1
    assert await cache.read(1, 0, 5 * BS, file_size=0) == b"a" * (4 * BS) + b"b" * BS


@pytest.mark.trio
async def test_workers_harvest_and_flush(autojump_clock: trio.testing.MockClock) -> None:
    be = MemoryBackend()
    be.files[1] = bytearray(40 * BS)
    cache = BlockCache(be, block_size=BS, capacity=20 * BS, low_water=0.5, high_water=0.9,
                       writeback=WritebackPolicy(max_age=2.0, interval=1.0))
    async with trio.open_nursery() as nursery:
        await cache.start(nursery)
        with pytest.raises(RuntimeError):
            await cache.start(nursery)
        for blk in range(19):
            await cache.read(1, blk * BS, BS, file_size=40 * BS)
        await trio.sleep(0.1)
        s = cache.stats()
        # the harvester woke at the high mark (18) and freed down to the low mark (10); reads
        # that ran before it got the CPU added a couple more
        assert s["harvests"] >= 1 and 10 <= s["blocks_cached"] < 18
        await cache.write(2, 0, b"x" * 100)
        await trio.sleep(0.5)
        assert be.writes == []  # younger than max_age
        await trio.sleep(3.0)
        assert be.writes == [(2, 0, 100)]  # the age rule wrote it back
        await cache.write(3, 0, b"y")
        await cache.aclose()
        assert be.files[3] == bytearray(b"y")
        nursery.cancel_scope.cancel()


@pytest.mark.trio
async def test_flusher_dirty_threshold(autojump_clock: trio.testing.MockClock) -> None:
    be = MemoryBackend()
    cache = BlockCache(be, block_size=BS, capacity=20 * BS,
                       writeback=WritebackPolicy(dirty_high=0.5, dirty_low=0.2, max_age=1000,
                                                 interval=1000))
    async with trio.open_nursery() as nursery:
        await cache.start(nursery)
        for ino in range(1, 6):  # 5 files x 2 blocks = 10 dirty blocks = the high mark
            await cache.write(ino, 0, b"z" * (2 * BS))
            await trio.sleep(0.01)
        await trio.sleep(0.1)
        # oldest files written back until at most 4 (the low mark) stay dirty
        assert cache.stats()["dirty_blocks"] <= 4
        assert [w[0] for w in be.writes] == [1, 2, 3]
        nursery.cancel_scope.cancel()
