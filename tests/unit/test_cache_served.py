"""The block cache's side of reads answered elsewhere (src/pvfs/cache/_served.py): blocks
from one arena, published on a read answered wholly from whole cached blocks, the file
dropped before anything of it changes, and reads answered there counted as uses."""

from __future__ import annotations

import pytest
import trio

from pvfs.cache import LRU, BlockCache, _served
from pvfs.cache._served import WARM_AHEAD
from pvfs.cache.testing import MemoryBackend

BS = 4096


class FakeServer:
    def __init__(self) -> None:
        self.published: list[tuple[int, int, int, int]] = []
        self.dropped: list[int] = []
        self.recent: list[int] = []
        self.refuse = False

    def serve_arena(self, buffer, block_size: int, max_read: int) -> None:
        self.arena = memoryview(buffer)

    def publish(self, ino: int, size: int, first: int, blocks: list) -> bool:
        self.published.append((ino, size, first, len(blocks)))
        return not self.refuse

    def serve_drop(self, ino: int) -> None:
        self.dropped.append(ino)

    def serve_recent(self) -> list[int]:
        out, self.recent = self.recent, []
        return out

    def warm(self, upto: int) -> None:
        self.warmed = upto


def make(capacity_blocks: int = 64) -> tuple[BlockCache, FakeServer, MemoryBackend]:
    be = MemoryBackend()
    cache = BlockCache(be, block_size=BS, capacity=capacity_blocks * BS, policy=LRU())
    server = FakeServer()
    cache.serve_reads(server, 64 << 10)
    return cache, server, be


def test_a_hit_publishes_a_miss_does_not_and_a_write_drops_first():
    cache, server, be = make()
    be.files[1] = bytearray(b"a" * (3 * BS + 100))

    async def main() -> None:
        assert await cache.read(1, 0, 3 * BS + 100, file_size=3 * BS + 100) == be.files[1]
        assert server.published == []  # fetched: not a hit
        await cache.read(1, 0, 2 * BS, file_size=3 * BS + 100)
        # the blocks read and the cached ones after them, to the end of file
        assert server.published == [(1, 3 * BS + 100, 0, 4)]
        await cache.write(1, 10, b"x")
        assert server.dropped == [1]  # before the write took effect
        await cache.write(1, 20, b"y")
        assert server.dropped == [1]  # not published since: nothing to drop

    trio.run(main)
    buf = cache.store.table[(1, 0)].buf
    assert isinstance(buf, memoryview) and len(buf) == BS  # a slice of the arena


def test_a_publication_reaches_ahead_to_the_first_block_not_cached():
    cache, server, be = make()
    be.files[1] = bytearray(b"a" * 10 * BS)

    async def main() -> None:
        await cache.read(1, 0, 3 * BS, file_size=10 * BS)  # fetched: blocks 0-2
        await cache.read(1, 5 * BS, BS, file_size=10 * BS)  # block 5
        await cache.read(1, 0, BS, file_size=10 * BS)  # a hit: 0-2 published, not 5
        await cache.read(1, 5 * BS, 10, file_size=10 * BS)  # 5 alone (6 not cached)

    trio.run(main)
    assert server.published == [(1, 10 * BS, 0, 3), (1, 10 * BS, 5, 1)]


def test_a_refused_publication_is_not_dropped_later():
    cache, server, be = make()
    be.files[1] = bytearray(b"a" * BS)
    server.refuse = True

    async def main() -> None:
        for _ in range(2):
            await cache.read(1, 0, BS, file_size=BS)
        await cache.write(1, 0, b"z")

    trio.run(main)
    assert len(server.published) == 1 and server.dropped == []


def test_reads_answered_there_count_as_uses_for_eviction(monkeypatch):
    monkeypatch.setattr(_served, "TOUCH_EVERY", 0.0)
    cache, server, be = make(capacity_blocks=4)
    be.files[1] = bytearray(b"a" * 2 * BS)
    be.files[2] = bytearray(b"b" * 2 * BS)
    be.files[3] = bytearray(b"c" * 2 * BS)

    async def main() -> None:
        for ino in (1, 2):  # file 1 first: the least recently used here
            for _ in range(2):
                await cache.read(ino, 0, 2 * BS, file_size=2 * BS)
        server.recent = [1]  # ... but the front end read it since
        await cache.read(3, 0, 2 * BS, file_size=2 * BS)  # two victims

    trio.run(main)
    cached = {ino for ino, _ in cache.store.table}
    assert 1 in cached and 2 not in cached


def test_the_arena_comes_before_any_block():
    cache, _, be = make()
    be.files[1] = bytearray(b"a" * BS)
    trio.run(lambda: cache.read(1, 0, BS, file_size=BS))
    other = BlockCache(be, block_size=BS, capacity=8 * BS)
    trio.run(lambda: other.read(1, 0, BS, file_size=BS))
    with pytest.raises(RuntimeError):
        other.serve_reads(FakeServer(), 1 << 16)


def test_a_stream_sized_read_of_cached_blocks_is_answered_from_them():
    """The kernel's read-ahead asks 128 KiB and more: of blocks all cached whole, such a
    read is answered (and published) here, not read anew by the stream path."""
    from pvfs.cache import StreamPolicy

    for served in (True, False):
        be = MemoryBackend()
        cache = BlockCache(be, block_size=BS, capacity=256 * BS,
                           stream=StreamPolicy(min_bytes=16 * BS))
        server = FakeServer()
        if served:
            cache.serve_reads(server, 1 << 20)
        be.files[1] = bytearray(random_bytes(64 * BS))

        async def main(cache=cache, be=be) -> list:
            got = [await cache.read(1, off, 8 * BS, file_size=64 * BS)  # block by block
                   for off in range(0, 64 * BS, 8 * BS)]
            reads = len(be.reads)
            got.append(await cache.read(1, 0, 32 * BS, file_size=64 * BS))  # stream-sized
            got.append(len(be.reads) - reads)
            return got

        *parts, backend_reads = trio.run(main)
        assert b"".join(parts[:-1]) == be.files[1] and parts[-1] == be.files[1][:32 * BS]
        if served:
            assert backend_reads == 0 and server.published[-1][2:] == (0, 64)
        else:
            assert backend_reads > 0  # the stream path, as before


def random_bytes(n: int) -> bytes:
    import random

    return random.Random(n).randbytes(n)


def test_the_arena_is_warmed_ahead_of_the_buffers_handed_out():
    cache, server, _ = make(capacity_blocks=64)

    async def main() -> None:
        await cache.write(1, 0, b"x")
        # the first buffer asks for WARM_AHEAD past it, and not again for the next ones
        assert server.warmed == BS + WARM_AHEAD
        server.warmed = None
        await cache.write(1, BS, b"y" * (3 * BS))
        assert server.warmed is None

    trio.run(main)
    # half of what was asked handed out: the next half is asked
    served = _served.ServedFiles(server, BS, 2 * WARM_AHEAD // BS, 64 << 10)
    served.buffer(0)
    assert server.warmed == BS + WARM_AHEAD
    served.buffer(WARM_AHEAD // 2 // BS)
    assert server.warmed == BS + WARM_AHEAD
    served.buffer(WARM_AHEAD // 2 // BS + 1)
    assert server.warmed == WARM_AHEAD // 2 + 2 * BS + WARM_AHEAD
