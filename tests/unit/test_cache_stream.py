"""Block cache, large requests: queued stream writes, stream reads, read-ahead."""

from __future__ import annotations

import errno

import pytest
import trio
import trio.testing

from pvfs.cache import BlockCache, StreamPolicy
from pvfs.cache._stream import frozen
from pvfs.cache.testing import MemoryBackend

pytestmark = pytest.mark.trio

BS = 64
BIG = 4 * BS  # requests of 4 blocks or more are streams


def make(*, stripe: int | None = None, **kw: int) -> tuple[BlockCache, MemoryBackend]:
    be = MemoryBackend(stripe=stripe)
    policy = StreamPolicy(min_bytes=BIG, max_write=kw.pop("max_write", 16 * BS),
                          max_pending=kw.pop("max_pending", 64 * BS),
                          readahead=kw.pop("readahead", 8 * BS))
    return BlockCache(be, block_size=BS, capacity=64 * BS, stream=policy), be


def pattern(n: int, seed: int = 1) -> bytes:
    return bytes((i * 7 + seed) % 251 for i in range(n))


async def test_policy_validation() -> None:
    assert StreamPolicy().is_stream(1 << 20) and not StreamPolicy().is_stream(4096)
    assert not StreamPolicy(min_bytes=0).is_stream(1 << 30)
    with pytest.raises(ValueError):
        StreamPolicy(max_write=0)


async def test_stream_writes_queue_then_coalesce_on_flush() -> None:
    cache, be = make()
    data = pattern(12 * BS)
    for i in range(3):
        await cache.write(1, i * BIG, data[i * BIG:(i + 1) * BIG], file_size=i * BIG)
    assert be.writes == []  # write-behind
    s = cache.stats()
    assert s["stream_writes"] == 3 and s["dirty_bytes"] == 12 * BS and cache.has_dirty(1)
    assert s["blocks_cached"] == 0  # no per-block objects
    assert cache.size_hint(1) == 12 * BS
    await cache.flush(1)
    assert be.writes == [(1, 0, 12 * BS)]
    assert bytes(be.files[1]) == data and not cache.has_dirty(1)
    assert cache.stats()["dirty_bytes"] == 0


def write_block(data: bytes) -> memoryview:
    """A write's bytes as the C front end hands them over (a view of its WriteData)."""
    from pvfs import _fusefront as ff
    s = ff.Session()
    s._inject(ff.OP_WRITE, ino=1, data=data)
    (req,), _ = s.drain()
    ff.reply_write(req, len(data))
    return req.args[2]


async def test_frozen_keeps_only_bytes_nobody_can_change() -> None:
    b = b"abc"
    assert frozen(b) is b
    v = memoryview(b)
    assert frozen(v) is v
    block = write_block(b"from the kernel")
    assert frozen(block) is block
    ba = bytearray(b"abc")
    for mutable in (memoryview(ba), memoryview(ba).toreadonly()):
        out = frozen(mutable)
        assert type(out) is bytes and out == b"abc"
        ba[0] = ord("X")  # the caller changes its buffer: the copy does not change
        assert out == b"abc"
        ba[0] = ord("a")


async def test_a_front_end_write_is_queued_without_a_copy() -> None:
    cache, be = make()
    block = write_block(pattern(BIG))
    await cache.write(1, 0, block, file_size=0)
    queued = cache.store.files[1].stream.pending[0][1]
    assert type(queued) is memoryview and queued.obj is block.obj
    await cache.flush(1)
    assert bytes(be.files[1]) == pattern(BIG)


async def test_stream_writeback_cut_at_stripe_windows() -> None:
    cache, be = make(stripe=3 * BS, max_write=7 * BS)  # window: 6 blocks
    data = pattern(16 * BS)
    await cache.write(1, BS, data[BS:9 * BS])
    await cache.write(1, 9 * BS, data[9 * BS:16 * BS])
    await cache.flush(1)
    assert be.writes == [(1, BS, 5 * BS), (1, 6 * BS, 6 * BS), (1, 12 * BS, 4 * BS)]
    assert bytes(be.files[1])[BS:] == data[BS:]


async def test_read_your_stream_writes_and_block_writes_after_them() -> None:
    cache, be = make()
    be.files[1] = bytearray(pattern(8 * BS, seed=3))
    big = pattern(6 * BS, seed=5)
    await cache.write(1, BS, big)  # queued
    # a small read of a missing block the queue covers writes the queue back first
    assert await cache.read(1, 2 * BS, 10, file_size=8 * BS) == big[BS:BS + 10]
    assert be.writes == [(1, BS, 6 * BS)]
    await cache.write(1, 0, big)  # queued again, over cached block 2
    assert await cache.read(1, 2 * BS, 10, file_size=8 * BS) == big[2 * BS:2 * BS + 10]
    await cache.write(1, 3 * BS + 5, b"xyz")  # block write overlapping the queue: drains it
    assert be.writes[-1] == (1, 0, 6 * BS)
    await cache.flush(1)
    want = bytearray(pattern(8 * BS, seed=3))
    want[BS:7 * BS] = big
    want[0:6 * BS] = big
    want[3 * BS + 5:3 * BS + 8] = b"xyz"
    assert bytes(be.files[1]) == bytes(want)


async def test_stream_write_updates_cached_blocks_in_place() -> None:
    cache, be = make()
    be.files[1] = bytearray(pattern(8 * BS))
    assert await cache.read(1, 0, 2 * BS, file_size=8 * BS) == pattern(8 * BS)[:2 * BS]
    await cache.write(1, 3 * BS, b"d" * 10)  # dirty block 3
    big = b"S" * (5 * BS)
    await cache.write(1, BS // 2, big)  # over clean blocks 0-1 and dirty block 3
    assert await cache.read(1, 0, 3 * BS, file_size=8 * BS) == \
        pattern(BS)[:BS // 2] + big[:3 * BS - BS // 2]
    await cache.flush(1)
    want = bytearray(pattern(8 * BS))
    want[3 * BS:3 * BS + 10] = b"d" * 10
    want[BS // 2:BS // 2 + 5 * BS] = big
    assert bytes(be.files[1]) == bytes(want)


async def test_stream_read_is_one_backend_read_with_dirty_overlay() -> None:
    cache, be = make()
    data = pattern(10 * BS)
    be.files[1] = bytearray(data)
    await cache.write(1, 2 * BS + 1, b"ab")  # dirty block 2 (read-modify-write)
    be.reads.clear()
    got = await cache.read(1, BS, 8 * BS, file_size=len(data))
    assert be.reads == [(1, BS, 8 * BS)]
    assert got == data[BS:2 * BS + 1] + b"ab" + data[2 * BS + 3:9 * BS]
    s = cache.stats()
    assert s["stream_reads"] == 1 and s["blocks_cached"] == 1  # streams insert nothing


async def test_stream_read_past_server_eof_reads_local_data() -> None:
    cache, be = make()
    be.files[1] = bytearray(pattern(BS))
    await cache.write(1, 6 * BS, b"tail")  # dirty block past the servers' end
    got = await cache.read(1, 0, 100 * BS, file_size=BS)
    assert got == pattern(BS) + bytes(5 * BS) + b"tail"


async def test_bypass_bits_keep_the_block_path() -> None:
    cache, be = make()
    be.files[1] = bytearray(pattern(8 * BS))
    cache.bypass.set_xattr(1, "*:rl,wl")  # type: ignore[attr-defined]
    assert await cache.read(1, 0, 8 * BS, file_size=8 * BS) == pattern(8 * BS)
    await cache.write(1, 0, b"w" * BIG)
    s = cache.stats()
    assert s["stream_reads"] == 0 and s["stream_writes"] == 0
    assert s["bypassed_reads"] == 8 and s["bypassed_writes"] == 1


async def test_sync_large_write_goes_through_at_once() -> None:
    cache, be = make()
    await cache.write(1, 0, b"s" * BIG, sync=True)
    assert be.writes == [(1, 0, BIG)] and cache.stats()["stream_writes"] == 0


async def test_stream_write_error_parked_until_flush_once() -> None:
    cache, be = make()
    be.files[1] = bytearray(pattern(8 * BS))
    assert await cache.read(1, 0, BS, file_size=8 * BS) == pattern(BS)  # block 0 cached
    await cache.write(1, 0, b"e" * BIG)
    be.fail_writes = errno.ENOSPC
    with pytest.raises(OSError) as info:
        await cache.flush(1)
    assert info.value.errno == errno.ENOSPC
    be.fail_writes = None
    await cache.flush(1)  # reported once
    assert cache.stats()["write_errors"] == 1
    # the data is lost: the cached copy it updated was dropped, reads show the servers
    assert await cache.read(1, 0, BS, file_size=8 * BS) == pattern(BS)


async def test_truncate_trims_and_forget_drops_the_queue() -> None:
    cache, be = make()
    await cache.write(1, 0, pattern(8 * BS))
    await cache.truncate(1, 3 * BS + 7)
    be.truncate(1, 3 * BS + 7)
    assert cache.stats()["pending_stream_bytes"] == 3 * BS + 7
    await cache.flush(1)
    assert bytes(be.files[1]) == pattern(8 * BS)[:3 * BS + 7]
    await cache.write(2, 0, pattern(8 * BS))
    cache.forget(2)
    assert not cache.has_dirty(2) and cache.stats()["pending_stream_bytes"] == 0
    await cache.flush_all()
    assert 2 not in be.files


async def test_writer_throttled_past_max_pending() -> None:
    cache, be = make(max_pending=6 * BS)
    await cache.write(1, 0, pattern(4 * BS))
    assert be.writes == []
    await cache.write(1, 4 * BS, pattern(4 * BS, seed=2))  # 8 blocks queued > 6: drains
    assert be.writes == [(1, 0, 8 * BS)] and cache.stats()["stream_throttles"] == 1


async def test_streamer_and_readahead_with_workers() -> None:
    cache, be = make(readahead=8 * BS)
    data = pattern(40 * BS)
    async with trio.open_nursery() as nursery:
        await cache.start(nursery)
        for off in range(0, len(data), BIG):
            await cache.write(1, off, data[off:off + BIG])
        await trio.testing.wait_all_tasks_blocked()
        assert not cache.has_dirty(1) and bytes(be.files[1]) == data  # the streamer wrote it
        be.reads.clear()
        for off in range(0, len(data), BIG):
            assert await cache.read(1, off, BIG, file_size=len(data)) == data[off:off + BIG]
            await trio.testing.wait_all_tasks_blocked()
        s = cache.stats()
        assert s["readahead_hits"] >= 6 and s["readahead_bytes"] >= 24 * BS
        assert len(be.reads) < 10  # not one read per request
        # a write drops read-ahead data: the next read sees it
        await cache.read(1, 0, BIG, file_size=len(data))
        await cache.read(1, BIG, BIG, file_size=len(data))
        await trio.testing.wait_all_tasks_blocked()
        await cache.write(1, 2 * BIG, b"n" * 3)
        got = await cache.read(1, 2 * BIG, BIG, file_size=len(data))
        assert got == b"nnn" + data[2 * BIG + 3:3 * BIG]
        # so does invalidate (another node's sync write): the servers' bytes come back
        await cache.flush(1)
        await cache.read(1, 3 * BIG, BIG, file_size=len(data))
        await trio.testing.wait_all_tasks_blocked()
        be.files[1][4 * BIG:4 * BIG + 2] = b"zz"
        cache.invalidate(1, 4 * BIG, 2)
        assert (await cache.read(1, 4 * BIG, BIG, file_size=len(data)))[:2] == b"zz"
        await cache.aclose()


async def test_readahead_resumes_after_the_reader_starts_the_file_again() -> None:
    # fio's time-based sequential read loops over its file: the chunks read ahead at the end
    # of one pass sat past the next pass's reads, so it never read ahead again (one backend
    # read per request for every pass after the first). A jump away drops them.
    cache, be = make(readahead=8 * BS)
    data = pattern(64 * BS)  # 16 requests of 4 blocks; read-ahead chunks of 8 blocks
    be.files[1] = bytearray(data)  # written elsewhere: no state here before the first read
    async with trio.open_nursery() as nursery:
        await cache.start(nursery)
        for _ in range(3):
            be.reads.clear()
            for off in range(0, len(data), BIG):
                assert await cache.read(1, off, BIG, file_size=len(data)) == data[off:off + BIG]
                await trio.testing.wait_all_tasks_blocked()
            # the first two requests, then a chunk per two requests
            assert [n for _, _, n in be.reads] == [BIG, BIG] + [8 * BS] * 7, be.reads
        await cache.aclose()


async def test_aclose_with_streamer_in_flight_loses_nothing() -> None:
    be = MemoryBackend(delay=0.01)
    cache = BlockCache(be, block_size=BS, capacity=64 * BS,
                       stream=StreamPolicy(min_bytes=BIG, max_write=4 * BS))
    data = pattern(32 * BS)
    async with trio.open_nursery() as nursery:
        await cache.start(nursery)
        for off in range(0, len(data), BIG):
            await cache.write(1, off, data[off:off + BIG])
        await trio.sleep(0.015)  # a write-back in flight
        await cache.aclose()
    assert bytes(be.files[1]) == data


async def test_stream_read_racing_a_write_back_keeps_the_new_bytes() -> None:
    """A stream read's backend read took its snapshot before a write-back of a dirty block in
    its range landed; the write-back then marked the block clean, the overlay skipped it and
    the read returned the old bytes (fsx under cache_readahead=0). Stream reads now hold the
    file's io_lock, so the write-back waits."""
    be = MemoryBackend()
    be.files[1] = bytearray(b"o" * (8 * BS))
    cache = BlockCache(be, block_size=BS, capacity=16 * BS,
                       stream=StreamPolicy(min_bytes=2 * BS, readahead=0))
    await cache.write(1, 3 * BS + 5, b"NEW", file_size=8 * BS)  # a dirty block
    reading = trio.Event()

    async def snapshot_then_wait(ino: int, offset: int, length: int) -> bytes:
        data = bytes(be.files[ino][offset:offset + length])  # what the servers hold now
        reading.set()
        await trio.sleep(0.2)
        return data

    be.read = snapshot_then_wait  # type: ignore[method-assign]
    got: list[bytes] = []

    async def reader() -> None:
        got.append(await cache.read(1, 0, 8 * BS, file_size=8 * BS))

    async with trio.open_nursery() as n:
        n.start_soon(reader)
        await reading.wait()
        await cache.flush(1)  # the write-back of the dirty block
    assert got[0][3 * BS + 5:3 * BS + 8] == b"NEW"
