"""Write-back of many small files in one gathered backend call (``FilesBackend``)."""

from __future__ import annotations

import errno

import pytest
import trio

from pvfs.cache import BlockCache, FilesBackend, WritebackPolicy
from pvfs.cache.testing import GatheringBackend, MemoryBackend

pytestmark = pytest.mark.trio

BS = 64


def make(**kw: object) -> tuple[BlockCache, GatheringBackend]:
    be = GatheringBackend(small=2 * BS)
    return BlockCache(be, block_size=BS, capacity=64 * BS, **kw), be  # type: ignore[arg-type]


async def small_files(cache: BlockCache, inos: range, n: int = 40) -> dict[int, bytes]:
    out = {}
    for ino in inos:
        out[ino] = bytes([ino % 251]) * n
        await cache.write(ino, 0, out[ino])
    return out


async def test_the_protocol_needs_both_methods() -> None:
    assert isinstance(GatheringBackend(), FilesBackend)
    assert not isinstance(MemoryBackend(), FilesBackend)


async def test_a_flusher_pass_sends_small_files_in_one_call() -> None:
    cache, be = make(writeback=WritebackPolicy(max_age=0))
    data = await small_files(cache, range(10, 15))
    await cache.write(20, 10, b"y" * 100)  # one run over two blocks: still small
    await cache.flush_pass()
    assert be.file_writes == [[(10, 0, 40), (11, 0, 40), (12, 0, 40), (13, 0, 40),
                               (14, 0, 40), (20, 10, 100)]]
    assert be.writes == []
    assert {ino: bytes(be.files[ino]) for ino in data} == data
    assert bytes(be.files[20]) == bytes(10) + b"y" * 100
    s = cache.stats()
    assert s["dirty_blocks"] == 0 and s["files_writes"] == 1 and s["files_gathered"] == 6
    assert s["flushed_bytes"] == 300 and s["flushes"] == 6


async def test_files_the_backend_does_not_take_go_one_by_one() -> None:
    cache, be = make()
    await small_files(cache, range(1, 4))
    await cache.write(7, 0, b"a" * 10)
    await cache.write(7, 5 * BS, b"b" * 10)    # two runs
    await cache.write(8, 0, b"c" * 3 * BS)     # one run, too large
    await cache.flush_all()
    assert be.file_writes == [[(1, 0, 40), (2, 0, 40), (3, 0, 40)]]
    assert sorted(be.list_writes) == [(7, [(0, 10), (5 * BS, 10)])]
    assert (8, 0, 3 * BS) in be.writes
    assert cache.stats()["dirty_blocks"] == 0


async def test_one_file_alone_is_not_gathered() -> None:
    cache, be = make()
    await small_files(cache, range(1, 2))
    await cache.flush_all()
    assert be.file_writes == [] and be.writes == [(1, 0, 40)]


async def test_a_failed_file_keeps_its_error_and_the_others_are_written() -> None:
    cache, be = make()
    data = await small_files(cache, range(1, 5))
    be.fail_files = {2}
    errors = await cache.flush_many([1, 2, 3, 4])
    assert list(errors) == [2] and errors[2].errno == errno.EIO
    assert {i: bytes(be.files[i]) for i in (1, 3, 4)} == {i: data[i] for i in (1, 3, 4)}
    assert 2 not in be.files
    s = cache.stats()
    assert s["write_errors"] == 1 and s["dirty_blocks"] == 0 and s["files_gathered"] == 3
    await cache.flush(2)  # reported once


async def test_a_write_during_the_call_stays_dirty_for_the_next() -> None:
    cache, be = make()
    await small_files(cache, range(1, 4))

    async def write_again() -> None:
        await cache.write(2, 0, b"z" * 8)

    be.during = write_again
    await cache.flush_many([1, 2, 3])  # (a write waits for no write-back)
    assert be.file_writes == [[(1, 0, 40), (2, 0, 40), (3, 0, 40)]]
    assert be.writes == [(2, 0, 40)]  # the block moved on: written again, alone
    assert bytes(be.files[2]) == b"z" * 8 + bytes([2]) * 32
    assert cache.stats()["dirty_blocks"] == 0


async def test_a_file_whose_lock_is_held_is_left_to_the_rest() -> None:
    cache, be = make()
    await small_files(cache, range(1, 4))
    fs = cache.store.files[2]
    released = trio.Event()

    async def hold() -> None:
        async with fs.io_lock:
            await released.wait()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(hold)
        await trio.testing.wait_all_tasks_blocked()
        rest = await cache.flusher.write_back_many([1, 2, 3])
        assert rest == [2] and be.file_writes == [[(1, 0, 40), (3, 0, 40)]]
        released.set()
    await cache.flush(2)
    assert bytes(be.files[2]) == bytes([2]) * 40


async def test_a_file_dropped_during_the_call_is_not_marked() -> None:
    cache, be = make()
    await small_files(cache, range(1, 4))

    async def drop() -> None:
        cache.invalidate(3)

    be.during = drop
    await cache.flush_many([1, 2, 3])
    assert 3 not in cache.store.files or not cache.store.files[3].dirty
    assert cache.stats()["dirty_blocks"] == 0
