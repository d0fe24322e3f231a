"""Block cache: reads, writes, flush, truncate, invalidate, errors, concurrency."""

from __future__ import annotations

import errno

import pytest
import trio

import pvfs.cache
from pvfs.cache import BlockCache, WritebackPolicy
from pvfs.cache.testing import MemoryBackend

pytestmark = pytest.mark.trio

BS = 64


def make(capacity_blocks: int = 64, **kw: object) -> tuple[BlockCache, MemoryBackend]:
    be = MemoryBackend(stripe=kw.pop("stripe", None))  # type: ignore[arg-type]
    cache = BlockCache(be, block_size=BS, capacity=capacity_blocks * BS, **kw)  # type: ignore[arg-type]
    return cache, be

def fetch_started(be: MemoryBackend) -> trio.Event:
    """An event set when ``be`` starts its next read (a fixed sleep raced the fetch when the
    machine was loaded: trio may wake two expired sleepers in either order)."""
    started = trio.Event()
    backend_read = be.read

    async def read(*args: int) -> bytes:
        started.set()
        return await backend_read(*args)

    be.read = read  # type: ignore[method-assign]
    return started



def pattern(n: int, seed: int = 1) -> bytes:
    return bytes((i * 7 + seed) % 251 for i in range(n))


async def test_public_names_exported() -> None:
    for name in pvfs.cache.__all__:
        assert getattr(pvfs.cache, name) is not None


async def test_miss_then_hit() -> None:
    cache, be = make()
    be.files[1] = bytearray(pattern(300))
    assert await cache.read(1, 10, 100, file_size=300) == pattern(300)[10:110]
    assert be.reads == [(1, 0, 2 * BS)]
    assert cache.stats()["misses"] == 2
    assert await cache.read(1, 0, 128, file_size=300) == pattern(300)[:128]
    assert len(be.reads) == 1
    assert cache.stats()["hits"] == 2


async def test_one_backend_read_per_missing_run() -> None:
    cache, be = make()
    data = pattern(10 * BS)
    be.files[1] = bytearray(data)
    await cache.read(1, 2 * BS, BS, file_size=len(data))  # block 2 cached
    await cache.read(1, 6 * BS, BS, file_size=len(data))  # block 6 cached
    be.reads.clear()
    assert await cache.read(1, 0, 10 * BS, file_size=len(data)) == data
    assert be.reads == [(1, 0, 2 * BS), (1, 3 * BS, 3 * BS), (1, 7 * BS, 3 * BS)]


async def test_eof_respected() -> None:
    cache, be = make()
    be.files[1] = bytearray(pattern(100))
    assert await cache.read(1, 0, 1000, file_size=100) == pattern(100)
    assert await cache.read(1, 100, 10, file_size=100) == b""
    assert await cache.read(1, 500, 10, file_size=100) == b""
    # the caller's size wins over extra bytes the backend holds (other node grew it)
    assert await cache.read(1, 0, 1000, file_size=50) == pattern(100)[:50]


async def test_grown_file_refetches_short_block() -> None:
    cache, be = make()
    be.files[1] = bytearray(pattern(10))
    assert await cache.read(1, 0, 64, file_size=10) == pattern(10)
    be.files[1] = bytearray(pattern(40))
    assert await cache.read(1, 0, 64, file_size=40) == pattern(40)
    assert len(be.reads) == 2


async def test_write_behind_and_read_back() -> None:
    cache, be = make()
    await cache.write(5, 0, b"hello world")
    assert be.writes == []
    assert await cache.read(5, 0, 100, file_size=0) == b"hello world"
    assert cache.size_hint(5) == 11
    assert cache.has_dirty(5)
    assert cache.stats()["dirty_bytes"] == 11
    await cache.flush(5)
    assert bytes(be.files[5]) == b"hello world"
    assert not cache.has_dirty(5)
    assert cache.stats()["flushed_bytes"] == 11


async def test_dirty_blocks_coalesced_into_one_write() -> None:
    cache, be = make()
    data = pattern(8 * BS)
    for i in range(8):  # written out of order, block by block
        blk = (i * 3) % 8
        await cache.write(1, blk * BS, data[blk * BS:(blk + 1) * BS])
    await cache.flush(1)
    assert be.writes == [(1, 0, 8 * BS)]
    assert bytes(be.files[1]) == data


async def test_coalescing_splits_at_gaps_and_stripes() -> None:
    cache, be = make(stripe=2 * BS)
    data = pattern(8 * BS)
    await cache.write(1, 0, data[: 3 * BS])
    await cache.write(1, 5 * BS, data[5 * BS:])
    await cache.flush(1)
    # max_write (1 MiB) rounded to the 128-byte stripe: one window; gap splits 0-2 from 5-7
    assert be.writes == [(1, 0, 3 * BS), (1, 5 * BS, 3 * BS)]
    cache2, be2 = make(stripe=2 * BS, writeback=WritebackPolicy(max_write=2 * BS))
    await cache2.write(1, BS, data[BS:7 * BS])
    await cache2.flush(1)
    assert be2.writes == [(1, BS, BS), (1, 2 * BS, 2 * BS), (1, 4 * BS, 2 * BS), (1, 6 * BS, BS)]


async def test_partial_write_never_fetches() -> None:
    cache, be = make()
    be.files[1] = bytearray(pattern(4 * BS))
    await cache.write(1, 10, b"xx")  # partial, not cached: a partial block, no fetch
    await cache.write(1, 20, b"yy")  # the same partial block
    await cache.write(1, BS, bytes(BS))  # full block
    await cache.write(1, 4 * BS, b"tail", file_size=4 * BS)  # past known EOF: whole
    be.files[2] = bytearray(b"q" * (BS + 2))
    await cache.write(2, BS, b"zz", file_size=BS + 2)  # covers all existing bytes of block 1
    assert be.reads == []
    s = cache.stats()
    assert s["partial_writes"] == 1 and s["partial_blocks"] == 1
    assert await cache.read(2, 0, 3 * BS, file_size=BS + 2) == b"q" * BS + b"zz"
    assert be.reads == [(2, 0, BS)]  # block 0 of file 2; block 1 is whole
    be.reads.clear()
    expect = bytearray(pattern(4 * BS))
    expect[10:12] = b"xx"
    expect[20:22] = b"yy"
    expect[BS:2 * BS] = bytes(BS)
    expect += b"tail"
    assert await cache.read(1, 0, 10 * BS, file_size=4 * BS) == bytes(expect)
    assert (1, 0, BS) in be.reads  # the partial block, fetched for the read
    assert cache.stats()["partial_fills"] == 1 and cache.stats()["partial_blocks"] == 0
    await cache.flush(1)
    assert be.files[1] == expect


async def test_sync_write_goes_through() -> None:
    cache, be = make()
    await cache.write(1, 0, pattern(2 * BS + 5), sync=True)
    assert be.writes == [(1, 0, 2 * BS + 5)]
    assert not cache.has_dirty(1)
    s = cache.stats()
    assert s["sync_writes"] == 1 and s["blocks_cached"] == 2  # whole blocks kept, clean
    assert await cache.read(1, 0, 3 * BS, file_size=2 * BS + 5) == pattern(2 * BS + 5)
    assert len(be.reads) == 1  # only the partial third block was missing


async def test_sync_write_updates_dirty_block_in_place() -> None:
    cache, be = make()
    await cache.write(1, 0, b"a" * BS)
    await cache.write(1, 4, b"SS", sync=True)
    assert be.writes == [(1, 4, 2)]
    assert cache.has_dirty(1)
    await cache.flush(1)
    assert bytes(be.files[1]) == b"aaaaSS" + b"a" * (BS - 6)


async def test_write_error_surfaces_at_next_flush_once() -> None:
    cache, be = make()
    await cache.write(1, 0, b"data")
    be.fail_writes = errno.EIO
    with pytest.raises(OSError) as info:
        await cache.flush(1)
    assert info.value.errno == errno.EIO
    assert cache.stats()["write_errors"] == 1
    be.fail_writes = None
    await cache.flush(1)  # reported once, like errseq
    assert not cache.has_dirty(1)


async def test_flusher_error_parked_until_flush() -> None:
    cache, be = make()
    await cache.write(1, 0, b"data")
    be.fail_writes = errno.ENOSPC
    cache.writeback = WritebackPolicy(max_age=0.0)
    await cache.flush_pass()
    assert cache.pending_error(1) is not None
    be.fail_writes = None
    with pytest.raises(OSError) as info:
        await cache.flush(1)
    assert info.value.errno == errno.ENOSPC


async def test_truncate_drops_and_cuts() -> None:
    cache, be = make()
    await cache.write(1, 0, pattern(4 * BS))
    await cache.truncate(1, BS + 10)
    be.truncate(1, BS + 10)
    assert await cache.read(1, 0, 10 * BS, file_size=BS + 10) == pattern(BS + 10)
    await cache.truncate(1, 3 * BS)  # grow: zeros past the old end
    be.truncate(1, 3 * BS)
    got = await cache.read(1, 0, 10 * BS, file_size=3 * BS)
    assert got == pattern(BS + 10) + bytes(2 * BS - 10)
    await cache.flush(1)
    assert bytes(be.files[1]) == got
    assert all(off + n <= BS + 10 for _, off, n in be.writes)


async def test_invalidate_keeps_dirty() -> None:
    cache, be = make()
    be.files[1] = bytearray(pattern(4 * BS))
    await cache.read(1, 0, 4 * BS, file_size=4 * BS)
    await cache.write(1, BS, b"D")
    assert cache.invalidate(1, 0, 2 * BS) == 1  # block 0 dropped, dirty block 1 kept
    assert cache.stats()["blocks_cached"] == 3
    assert cache.invalidate(1) == 2
    got = await cache.read(1, 0, 4 * BS, file_size=4 * BS)
    assert got[BS:BS + 1] == b"D"


async def test_forget_drops_everything() -> None:
    cache, be = make()
    await cache.write(1, 0, pattern(3 * BS))
    cache.bypass.set_xattr(1, "*:rl")  # type: ignore[attr-defined]
    cache.forget(1)
    assert cache.stats()["blocks_cached"] == 0 and not cache.has_dirty(1)
    assert cache.bypass.get_xattr(1) == ""  # type: ignore[attr-defined]
    await cache.flush(1)
    assert be.writes == []
    assert cache.stats()["free_blocks"] == 3


async def test_two_readers_one_fetch() -> None:
    be = MemoryBackend(delay=0.01)
    cache = BlockCache(be, block_size=BS, capacity=16 * BS)
    be.files[1] = bytearray(pattern(BS))
    results: list[bytes] = []

    async def reader() -> None:
        results.append(await cache.read(1, 0, BS, file_size=BS))

    async with trio.open_nursery() as n:
        for _ in range(5):
            n.start_soon(reader)
    assert results == [pattern(BS)] * 5
    assert be.reads == [(1, 0, BS)]
    s = cache.stats()
    assert s["misses"] == 1 and s["hits"] == 4


async def test_writer_waits_for_fetch_of_same_block() -> None:
    be = MemoryBackend(delay=0.2)
    cache = BlockCache(be, block_size=BS, capacity=16 * BS)
    be.files[1] = bytearray(pattern(BS))
    got: list[bytes] = []

    async def reader() -> None:
        got.append(await cache.read(1, 0, BS, file_size=BS))

    fetching = fetch_started(be)

    async with trio.open_nursery() as n:
        n.start_soon(reader)
        await fetching.wait()
        await cache.write(1, 0, b"W")
    assert await cache.read(1, 0, 2, file_size=BS) == b"W" + pattern(BS)[1:2]
    assert be.reads == [(1, 0, BS)]


async def test_truncate_during_fetch_does_not_insert_stale() -> None:
    be = MemoryBackend(delay=0.2)
    cache = BlockCache(be, block_size=BS, capacity=16 * BS)
    be.files[1] = bytearray(pattern(2 * BS))

    async def reader() -> None:
        await cache.read(1, 0, 2 * BS, file_size=2 * BS)

    fetching = fetch_started(be)

    async with trio.open_nursery() as n:
        n.start_soon(reader)
        await fetching.wait()
        await cache.truncate(1, 0)
        be.truncate(1, 0)
    assert cache.stats()["blocks_cached"] == 0
    assert await cache.read(1, 0, 2 * BS, file_size=0) == b""


async def test_read_error_propagates_and_caches_nothing() -> None:
    cache, be = make()
    be.files[1] = bytearray(pattern(BS))
    be.fail_reads = errno.ETIMEDOUT
    with pytest.raises(OSError):
        await cache.read(1, 0, BS, file_size=BS)
    assert cache.stats()["blocks_cached"] == 0
    await cache.write(1, 3, b"x")  # partial: no fetch, so no error
    with pytest.raises(OSError):
        await cache.read(1, 0, BS, file_size=BS)  # the unknown rest is fetched
    assert cache.stats()["partial_blocks"] == 1  # still only what was written
    be.fail_reads = None
    assert await cache.read(1, 0, BS, file_size=BS) == pattern(BS)[:3] + b"x" + pattern(BS)[4:]


async def test_bad_arguments() -> None:
    cache, _ = make()
    with pytest.raises(ValueError):
        await cache.read(1, -1, 3, file_size=10)
    with pytest.raises(ValueError):
        await cache.write(1, -1, b"x")
    with pytest.raises(ValueError):
        await cache.truncate(1, -1)
    with pytest.raises(ValueError):
        BlockCache(MemoryBackend(), block_size=4096, capacity=100)
    assert await cache.write(1, 0, b"") == 0


async def test_truncate_during_fetch_of_a_partial_block() -> None:
    be = MemoryBackend(delay=0.2)  # long, so the truncate surely lands while it is in flight
    cache = BlockCache(be, block_size=BS, capacity=16 * BS)
    be.files[1] = bytearray(b"o" * BS)
    await cache.write(1, 10, b"x")  # a partial block
    fetching = fetch_started(be)

    async def reader() -> None:
        await cache.read(1, 0, BS, file_size=BS)  # fetches the rest of it

    async with trio.open_nursery() as n:
        n.start_soon(reader)
        await fetching.wait()
        await cache.truncate(1, 0)
        be.truncate(1, 0)
    assert cache.stats()["blocks_cached"] == 0  # the fetch did not put the old bytes back
    await cache.write(1, 10, b"y", file_size=0)
    assert await cache.read(1, 0, BS, file_size=0) == bytes(10) + b"y"
    assert be.reads == [(1, 0, BS)]


async def test_write_back_keeps_another_clients_bytes_in_the_same_block() -> None:
    """The checker's counterexample (docs/check.md): this node thinks the file is 1 byte long,
    another client wrote 3 bytes at 16384; our write at 18970 (same block, no overlap) must not
    turn them into zeros when it is written back."""
    cache, be = make()
    be.files[1] = bytearray(b"a")
    be.files[1][1:] = bytes(16384 - 1) + b"xyz"  # the other client's write, unseen by us
    await cache.write(1, 18970, b"w" * 192, file_size=1)
    await cache.flush(1)
    assert bytes(be.files[1][16384:16387]) == b"xyz"
    assert bytes(be.files[1][18970:18970 + 192]) == b"w" * 192


async def test_write_back_sends_only_the_ranges_written() -> None:
    cache, be = make()
    be.files[1] = bytearray(pattern(2 * BS))
    await cache.write(1, 0, b"A" * 10, file_size=0)  # the cache believes the file is empty
    await cache.write(1, 100, b"B" * 10, file_size=0)
    await cache.write(1, BS - 5, b"C" * 10, file_size=0)  # across the block boundary
    be.files[1][50:60] = b"O" * 10  # another client, between our two ranges
    await cache.flush(1)
    want = bytearray(pattern(2 * BS))
    want[0:10], want[50:60], want[100:110] = b"A" * 10, b"O" * 10, b"B" * 10
    want[BS - 5:BS + 5] = b"C" * 10
    assert bytes(be.files[1]) == bytes(want)
    assert not cache.has_dirty(1)


async def test_truncate_cuts_dirty_ranges() -> None:
    cache, be = make()
    await cache.write(1, 0, b"x" * 100)
    await cache.write(1, 200, b"y" * 100)
    await cache.truncate(1, 150)
    be.truncate(1, 150)
    await cache.flush(1)
    assert bytes(be.files[1]) == b"x" * 100 + bytes(50)
    await cache.truncate(1, 50)
    be.truncate(1, 50)
    await cache.flush(1)
    assert bytes(be.files[1]) == b"x" * 50
