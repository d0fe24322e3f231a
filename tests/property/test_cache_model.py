"""The block cache + backend against a plain bytearray per file.

Reads must always return the latest writes; after a flush the backend must equal the model.
The cache is tiny (8 blocks of 16 bytes) so eviction, direct reclaim, write-through when full,
read-modify-write and the second-chance scan all happen within a few steps.

With ``served``, the cache's blocks live in an arena and it publishes them to a model of the
C front end's reads (csrc/front/serve.c): after every step, whatever that front end would
answer from what is published must be the file's bytes as the model has them; and for a
file the cache marked for stream reads from the servers (csrc/front/streams.c), the
backend's bytes up to the size marked must be the file's bytes too.
"""

from __future__ import annotations

import errno
from collections.abc import Awaitable, Callable
from typing import Any

import trio
import trio.testing
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from pvfs.cache import LRU, BlockCache, Bypass, SecondChanceLRU, StreamPolicy, WritebackPolicy
from pvfs.cache.testing import MemoryBackend, PlainBackend

BS = 16
INOS = st.integers(1, 2)
OFFSETS = st.integers(0, 10 * BS)
SIZES = st.integers(0, 5 * BS)


class ServedModel:
    """What the C front end keeps of the cache's publications (serve.c) and would answer:
    blocks by file, each file's size; a publication adds blocks and sets the size, a drop
    forgets the file (and its stream mark: ``mark`` as fuse/cstreams.py's)."""

    def __init__(self) -> None:
        self.files: dict[int, tuple[int, dict[int, memoryview]]] = {}
        self.marks: dict[int, int] = {}  # ino -> size: stream reads answered from the backend
        self.arena: Any = None

    def mark(self, ino: int, size: int) -> bool:
        self.marks[ino] = size
        return True

    def refill(self) -> None:
        pass

    def serve_arena(self, buffer: Any, block_size: int, max_read: int) -> None:
        self.arena = buffer

    def publish(self, ino: int, size: int, first: int, blocks: list[memoryview]) -> bool:
        old = self.files.get(ino, (0, {}))[1]
        self.files[ino] = (size, {**old, **{first + i: b for i, b in enumerate(blocks)}})
        return True

    def serve_drop(self, ino: int) -> None:
        self.files.pop(ino, None)
        self.marks.pop(ino, None)

    def serve_recent(self) -> list[int]:
        return list(self.files)

    def warm(self, upto: int) -> None:
        pass

    def answers(self) -> list[tuple[int, int, int, bytes]]:
        """(ino, size, offset, bytes) of each published block, as a read of it would get."""
        out = []
        for ino, (size, blocks) in self.files.items():
            for blk, buf in blocks.items():
                lo, hi = blk * BS, min((blk + 1) * BS, size)
                if lo < hi:
                    out.append((ino, size, lo, bytes(buf[:hi - lo])))
        return out


class CacheModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = trio.testing.MockClock()
        self.be = MemoryBackend()
        self.cache: BlockCache | None = None
        self.model: dict[int, bytearray] = {}
        self.served: ServedModel | None = None

    def run(self, fn: Callable[[], Awaitable[Any]]) -> Any:
        return trio.run(fn, clock=self.clock)

    @precondition(lambda self: self.cache is None)
    @rule(stripe=st.sampled_from([None, BS, 3 * BS]), lru=st.booleans(),
          max_write=st.sampled_from([2 * BS, 1 << 20]), stream=st.booleans(),
          listio=st.booleans(), budget=st.sampled_from([(3 * BS, 2), (8 << 20, 4096)]),
          served=st.booleans())
    def setup(self, stripe: int | None, lru: bool, max_write: int, stream: bool,
              listio: bool, budget: tuple[int, int], served: bool) -> None:
        self.be.stripe = stripe
        # listio=False: a backend without write_list/read_list (one call per run); budget:
        # list-I/O calls cut at (bytes, regions)
        # stream=True: requests of 2 blocks or more take the stream path (queued writes,
        # coalesced and cut at 3 blocks -- or, with the large max_write, at 8, so that queued
        # writes out of order are gathered into one call --, writers throttled past 5
        # blocks queued)
        self.cache = BlockCache(
            self.be if listio else PlainBackend(self.be), block_size=BS, capacity=8 * BS, segment_blocks=2,
            low_water=0.5, high_water=0.75, policy=LRU() if lru else SecondChanceLRU(),
            writeback=WritebackPolicy(max_age=1.0, max_write=max_write,
                                      max_list_bytes=budget[0], max_regions=budget[1]),
            stream=StreamPolicy(min_bytes=2 * BS if stream else 0,
                                max_write=3 * BS if max_write == 2 * BS else 8 * BS,
                                max_pending=5 * BS),
        )
        if served:
            self.served = ServedModel()
            self.cache.serve_reads(self.served, 2 * BS - 1).streams = self.served

    def size(self, ino: int) -> int:
        return len(self.be.files.get(ino, b""))

    def expect(self, ino: int) -> bytearray:
        return self.model.setdefault(ino, bytearray())

    @precondition(lambda self: self.cache is not None)
    @rule(ino=INOS, offset=OFFSETS, data=st.binary(min_size=0, max_size=4 * BS),
          sync=st.booleans(), hint=st.booleans())
    def write(self, ino: int, offset: int, data: bytes, sync: bool, hint: bool) -> None:
        assert self.cache is not None
        m = self.expect(ino)
        file_size = len(m) if hint else None
        n = self.run(lambda: self.cache.write(ino, offset, data, sync=sync, file_size=file_size))
        assert n == len(data)
        if data:
            if len(m) < offset:
                m.extend(bytes(offset - len(m)))
            m[offset:offset + len(data)] = data

    @precondition(lambda self: self.cache is not None)
    @rule(ino=INOS, base=OFFSETS, length=st.integers(2 * BS, 3 * BS),
          order=st.permutations(range(3)), overlap=st.sampled_from([0, 1, BS // 2]),
          seed=st.integers(0, 255))
    def writes_in_turns(self, ino: int, base: int, length: int, order: list[int],
                        overlap: int, seed: int) -> None:
        """Three transfers of writers taking turns (IOR hard's ranks), in a scrambled order,
        each overlapping the next by ``overlap`` bytes: queued out of the file's order,
        written back gathered (``Streamer._gather``), the newer bytes last."""
        assert self.cache is not None
        step = length - overlap
        todo = [(base + k * step, bytes([(seed + 17 * k + j) % 256 for j in range(length)]))
                for k in order]

        async def go() -> None:
            for off, data in todo:
                await self.cache.write(ino, off, data)

        self.run(go)
        m = self.expect(ino)
        for off, data in todo:
            if len(m) < off:
                m.extend(bytes(off - len(m)))
            m[off:off + len(data)] = data

    @precondition(lambda self: self.cache is not None)
    @rule(ino=INOS, offset=OFFSETS, length=SIZES)
    def read(self, ino: int, offset: int, length: int) -> None:
        assert self.cache is not None
        got = self.run(lambda: self.cache.read(ino, offset, length, file_size=self.size(ino)))
        assert got == bytes(self.expect(ino)[offset:offset + length])

    @precondition(lambda self: self.cache is not None)
    @rule(ino=INOS, offset=OFFSETS, length=SIZES)
    def read_twice(self, ino: int, offset: int, length: int) -> None:
        """The second read of what the first fetched hits (and, served, publishes)."""
        for _ in range(2):
            self.read(ino, offset, length)

    @precondition(lambda self: self.cache is not None)
    @rule(ino=INOS, offset=OFFSETS, length=SIZES, readers=st.integers(2, 4))
    def concurrent_reads_and_flush(self, ino: int, offset: int, length: int,
                                   readers: int) -> None:
        cache = self.cache
        assert cache is not None
        results: list[bytes] = []
        size = self.size(ino)

        async def reader() -> None:
            results.append(await cache.read(ino, offset, length, file_size=size))

        async def main() -> None:
            async with trio.open_nursery() as n:
                for _ in range(readers):
                    n.start_soon(reader)
                n.start_soon(cache.flush, ino)

        self.run(main)
        assert results == [bytes(self.expect(ino)[offset:offset + length])] * readers

    @precondition(lambda self: self.cache is not None)
    @rule(ino=INOS, offset=OFFSETS, data=st.binary(min_size=1, max_size=2 * BS),
          roff=OFFSETS, length=SIZES)
    def concurrent_write_read_flush(self, ino: int, offset: int, data: bytes, roff: int,
                                    length: int) -> None:
        """A write (partial blocks: no fetch), a read and a write-back of the file at once:
        the read sees the file before or after the write, never a mix of fetched and
        written bytes."""
        cache = self.cache
        assert cache is not None
        m = self.expect(ino)
        before = bytes(m)
        after = bytearray(m)
        if len(after) < offset:
            after.extend(bytes(offset - len(after)))
        after[offset:offset + len(data)] = data
        size = self.size(ino)
        got: list[bytes] = []

        async def reader() -> None:
            got.append(await cache.read(ino, roff, length, file_size=size))

        async def main() -> None:
            async with trio.open_nursery() as n:
                n.start_soon(lambda: cache.write(ino, offset, data, file_size=len(before)))
                n.start_soon(reader)
                n.start_soon(cache.flush, ino)

        self.run(main)
        # before, after -- or after's bytes within before's end: a read that starts first
        # takes the end of file before the write moves it, then may see the write's bytes
        # (as on a local file system, where a write copies its data before it moves i_size)
        assert got[0] in (before[roff:roff + length], bytes(after[roff:roff + length]),
                          bytes(after[roff:min(roff + length, len(before))]))
        self.model[ino] = after

    @precondition(lambda self: self.cache is not None)
    @rule(ino=INOS)
    def flush(self, ino: int) -> None:
        assert self.cache is not None
        self.run(lambda: self.cache.flush(ino))
        assert bytes(self.be.files.get(ino, b"")) == bytes(self.expect(ino))

    @precondition(lambda self: self.cache is not None)
    @rule(ino=INOS, size=st.integers(0, 10 * BS))
    def truncate(self, ino: int, size: int) -> None:
        assert self.cache is not None
        self.run(lambda: self.cache.truncate(ino, size))
        self.be.truncate(ino, size)
        m = self.expect(ino)
        if size < len(m):
            del m[size:]
        else:
            m.extend(bytes(size - len(m)))

    @precondition(lambda self: self.cache is not None)
    @rule(ino=INOS, offset=OFFSETS, length=st.none() | SIZES)
    def invalidate(self, ino: int, offset: int, length: int | None) -> None:
        assert self.cache is not None
        self.cache.invalidate(ino, offset, length)

    @precondition(lambda self: self.cache is not None)
    @rule(ino=INOS)
    def delete(self, ino: int) -> None:
        assert self.cache is not None
        self.cache.forget(ino)
        self.be.files.pop(ino, None)
        self.model[ino] = bytearray()

    @precondition(lambda self: self.cache is not None)
    @rule(ino=INOS, seg=st.integers(0, 6), flags=st.sampled_from(list(Bypass)))
    def set_bypass(self, ino: int, seg: int, flags: Bypass) -> None:
        assert self.cache is not None
        table = self.cache.bypass
        table.set_range(ino, seg, seg, flags)  # type: ignore[attr-defined]

    @precondition(lambda self: self.cache is not None)
    @rule(seconds=st.sampled_from([0.0, 0.5, 2.0]))
    def flusher_pass(self, seconds: float) -> None:
        assert self.cache is not None
        self.clock.jump(seconds)
        self.run(self.cache.flush_pass)

    @precondition(lambda self: self.cache is not None)
    @rule()
    def harvest(self) -> None:
        assert self.cache is not None
        self.cache.harvest()

    @precondition(lambda self: self.cache is not None)
    @rule(ino=INOS, offset=OFFSETS, length=SIZES)
    def read_fails(self, ino: int, offset: int, length: int) -> None:
        """An injected backend read failure: the read raises (a miss) or is served from the
        cache (a hit) and then must be right; either way nothing wrong is cached."""
        assert self.cache is not None
        self.be.fail_reads = errno.EIO
        try:
            got = self.run(lambda: self.cache.read(ino, offset, length,
                                                   file_size=self.size(ino)))
        except OSError as exc:
            assert exc.errno == errno.EIO
            got = None
        finally:
            self.be.fail_reads = None
        if got is not None:
            assert got == bytes(self.expect(ino)[offset:offset + length])

    @precondition(lambda self: self.cache is not None)
    @rule(ino=INOS)
    def flush_fails(self, ino: int) -> None:
        """An injected write-back failure: flush raises ENOSPC (once) if anything was to be
        written, the unwritten data is gone (the kernel's rule), and what the backend holds is
        untouched. The application then starts over from the servers' copy (forget)."""
        assert self.cache is not None
        dirty = self.cache.has_dirty(ino) or self.cache.pending_error(ino) is not None
        before = bytes(self.be.files.get(ino, b""))
        self.be.fail_writes = errno.ENOSPC
        try:
            self.run(lambda: self.cache.flush(ino))
            failed = False
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
            failed = True
        finally:
            self.be.fail_writes = None
        assert failed == dirty
        assert bytes(self.be.files.get(ino, b"")) == before
        assert not self.cache.has_dirty(ino)
        if failed:
            self.cache.forget(ino)
            self.model[ino] = bytearray(before)
        else:
            assert before == bytes(self.expect(ino))

    @invariant()
    def accounting(self) -> None:
        cache = self.cache
        if cache is None:
            return
        s = cache.stats()
        assert s["blocks_in_use"] <= s["capacity_blocks"]
        assert s["blocks_cached"] == s["blocks_in_use"]
        assert s["blocks_cached"] == len(cache.policy)
        assert s["dirty_blocks"] == sum(len(f.dirty) for f in cache.store.files.values())
        for (ino, blk), e in cache.store.table.items():
            assert blk in cache.store.files[ino].blocks
            assert not any(e.buf[e.valid:])
            if e.known is not None:  # a partial block: zeros outside what it knows
                assert e.valid == (e.known[-1][1] if e.known else 0)
                assert all(any(a <= lo and hi <= b for a, b in e.known) for lo, hi in e.ranges)
                gaps = zip([0] + [b for _, b in e.known], [a for a, _ in e.known] + [BS])
                assert not any(any(e.buf[g0:g1]) for g0, g1 in gaps)

    @invariant()
    def served_reads_are_the_files_bytes(self) -> None:
        if self.served is None:
            return
        for ino, size, off, got in self.served.answers():
            m = self.expect(ino)
            assert size <= len(m), (ino, size, len(m))
            assert got == bytes(m[off:off + len(got)]), (ino, off)
        for ino, size in self.served.marks.items():
            m = self.expect(ino)
            assert size <= len(m), (ino, size, len(m))
            servers = bytes(self.be.files.get(ino, b""))[:size].ljust(size, b"\0")
            assert servers == bytes(m[:size]), ino

    def teardown(self) -> None:
        if self.cache is not None:
            self.run(self.cache.flush_all)
            for ino, m in self.model.items():
                assert bytes(self.be.files.get(ino, b"")) == bytes(m)


class ServedCacheModel(CacheModel):
    """Always served, reads twice as often: publications, then changes, then the check."""

    @precondition(lambda self: self.cache is None)
    @rule(stripe=st.sampled_from([None, BS, 3 * BS]), lru=st.booleans(),
          max_write=st.sampled_from([2 * BS, 1 << 20]), stream=st.booleans(),
          listio=st.booleans(), budget=st.sampled_from([(3 * BS, 2), (8 << 20, 4096)]))
    def setup(self, stripe: int | None, lru: bool, max_write: int, stream: bool,
              listio: bool, budget: tuple[int, int]) -> None:
        super().setup(stripe, lru, max_write, stream, listio, budget, True)

    @precondition(lambda self: self.cache is not None)
    @rule(ino=INOS, offset=OFFSETS, length=SIZES)
    def read_twice_more(self, ino: int, offset: int, length: int) -> None:
        self.read_twice(ino, offset, length)


CacheModel.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestCacheModel = CacheModel.TestCase
ServedCacheModel.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestServedCacheModel = ServedCacheModel.TestCase
