"""Queued stream writes written back gathered (``Streamer._gather``): writers taking turns on
one file queue entries out of the file's order; their write-back goes in list-I/O calls of
the entries sorted and joined, and an entry overlapping an earlier one waits for the next
call, so the newer bytes land last."""

from __future__ import annotations

import errno

import pytest

from pvfs.cache import BlockCache, StreamPolicy
from pvfs.cache.testing import MemoryBackend, PlainBackend

pytestmark = pytest.mark.trio

BS = 64
T = 3 * BS + 5  # a transfer not a multiple of the block (IOR hard's 47,008 bytes, scaled)


def make(be=None, **kw) -> tuple[BlockCache, MemoryBackend]:
    be = be if be is not None else MemoryBackend()
    policy = StreamPolicy(min_bytes=8 * BS, write_min_bytes=kw.pop("write_min", 2 * BS),
                          max_write=kw.pop("max_write", 64 * BS), max_pending=1 << 20,
                          readahead=0)
    return BlockCache(be, block_size=BS, capacity=64 * BS, stream=policy), be


def fill(seg: int, rank: int) -> bytes:
    return bytes([(seg * 7 + rank * 31) % 251]) * T


async def turns(cache: BlockCache, segs: int, ranks: int, order: list[tuple[int, int]]) -> bytes:
    """Each (seg, rank) of ``order`` writes its transfer at ``(seg * ranks + rank) * T``;
    returns the file's expected bytes."""
    want = bytearray(segs * ranks * T)
    for seg, rank in order:
        off = (seg * ranks + rank) * T
        await cache.write(1, off, fill(seg, rank))
        want[off:off + T] = fill(seg, rank)
    return bytes(want)


async def test_policy_write_threshold_of_its_own() -> None:
    p = StreamPolicy(min_bytes=128 << 10, write_min_bytes=32 << 10)
    assert p.is_stream_write(47008) and not p.is_stream(47008)
    assert not p.is_stream_write(4096)
    assert StreamPolicy().is_stream_write(128 << 10) and not StreamPolicy().is_stream_write(
        (128 << 10) - 1)  # None: the reads' threshold
    assert not StreamPolicy(min_bytes=0, write_min_bytes=1).is_stream_write(1 << 20)
    assert not StreamPolicy(write_min_bytes=0).is_stream_write(1 << 30)
    with pytest.raises(ValueError):
        StreamPolicy(write_min_bytes=-1)


async def test_interleaved_writers_go_out_in_one_list_write() -> None:
    cache, be = make()
    # two ranks drifting apart: rank 1 a few transfers behind rank 0
    order = [(s, 0) for s in range(3)] + [(0, 1), (3, 0), (1, 1), (2, 1), (3, 1)]
    want = await turns(cache, 4, 2, order)
    s = cache.stats()
    assert s["stream_writes"] == 8 and s["blocks_cached"] == 0 and be.writes == []
    await cache.flush(1)
    assert bytes(be.files[1]) == want
    assert be.writes == [(1, 0, 8 * T)]  # one call; joined into one region: a plain write
    assert be.list_writes == []
    assert cache.stats()["dirty_bytes"] == 0 and not cache.has_dirty(1)


async def test_gaps_stay_separate_regions() -> None:
    cache, be = make()
    await turns(cache, 4, 2, [(2, 0), (0, 0), (3, 0), (1, 0)])  # rank 1 never wrote
    await cache.flush(1)
    assert be.list_writes == [(1, [(0, T), (2 * T, T), (4 * T, T), (6 * T, T)])]
    for seg in range(4):
        assert bytes(be.files[1][2 * seg * T:(2 * seg + 1) * T]) == fill(seg, 0)
        assert not any(be.files[1][(2 * seg + 1) * T:(2 * seg + 2) * T])


async def test_an_overlapping_entry_waits_so_the_newer_bytes_win() -> None:
    cache, be = make()
    await cache.write(1, 4 * T, b"a" * T)
    await cache.write(1, 0, b"b" * T)
    await cache.write(1, 4 * T + 7, b"N" * T)  # newer, over the first
    await cache.write(1, 9 * T, b"c" * T)
    await cache.flush(1)
    assert be.list_writes[0] == (1, [(0, T), (4 * T, T)])  # the first call stops before it
    data = bytes(be.files[1])
    assert data[4 * T:4 * T + 7] == b"a" * 7 and data[4 * T + 7:5 * T + 7] == b"N" * T
    assert data[:T] == b"b" * T and data[9 * T:] == b"c" * T


async def test_a_call_carries_at_most_max_write_bytes() -> None:
    cache, be = make(max_write=3 * T)
    want = await turns(cache, 4, 2, [(s, r) for r in (1, 0) for s in range(4)])
    await cache.flush(1)
    plain = list(be.writes)  # (write_list logs its regions there too)
    for ino, regions in be.list_writes:
        for off, n in regions:
            plain.remove((ino, off, n))
    sizes = [sum(n for _, n in regions) for _, regions in be.list_writes] + \
        [n for _, _, n in plain]
    assert max(sizes) <= 3 * T and sum(sizes) == 8 * T
    assert len(sizes) == cache.stats()["backend_writes"] < 8
    assert bytes(be.files[1]) == want


async def test_a_failed_gathered_write_is_parked_and_drops_its_cached_blocks() -> None:
    cache, be = make()
    be.files[1] = bytearray(b"o" * 8 * T)
    assert await cache.read(1, 0, BS, file_size=8 * T) == b"o" * BS  # block 0 cached clean
    await turns(cache, 2, 2, [(1, 0), (0, 0)])
    be.fail_writes = errno.EIO
    with pytest.raises(OSError) as info:
        await cache.flush(1)
    assert info.value.errno == errno.EIO
    be.fail_writes = None
    await cache.flush(1)  # said once
    assert cache.stats()["write_errors"] == 1 and cache.stats()["pending_stream_bytes"] == 0
    assert await cache.read(1, 0, BS, file_size=8 * T) == b"o" * BS  # the servers' bytes


async def test_without_list_io_entries_go_one_by_one() -> None:
    inner = MemoryBackend()
    cache, _ = make(PlainBackend(inner))
    want = await turns(cache, 2, 2, [(1, 0), (0, 0), (1, 1), (0, 1)])
    await cache.flush(1)
    assert bytes(inner.files[1]) == want and inner.list_writes == []


async def test_the_mounts_write_threshold_option() -> None:
    from pvfs.fuse.options import MountOptions, parse_options
    assert MountOptions().stream_write_min == 32 << 10 < MountOptions().stream_min
    assert parse_options("stream_write_min=64k").stream_write_min == 64 << 10
    assert parse_options("stream_write_min=0").stream_write_min == 0


async def test_a_head_cut_at_a_stripe_window_goes_alone_and_aligned() -> None:
    cache, be = make(MemoryBackend(stripe=4 * BS))  # window: 64 blocks (max_write)
    await cache.write(1, 60 * BS, b"h" * 8 * BS)  # crosses the window at block 64
    await cache.write(1, 200 * BS, b"f" * T)
    await cache.flush(1)
    assert be.writes[0] == (1, 60 * BS, 4 * BS)  # the cut piece alone, ending on the window
    assert be.list_writes == [(1, [(64 * BS, 4 * BS), (200 * BS, T)])]
    assert bytes(be.files[1][60 * BS:68 * BS]) == b"h" * 8 * BS
