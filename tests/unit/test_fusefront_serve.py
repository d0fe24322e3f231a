"""Reads the C front end's workers answer from the block cache's arena (csrc/front/serve.c),
without a kernel: only published blocks, only within the published size, never while a
write or size change of the file is queued or answered in C and not applied, and never
again once Python drops the file. The arena's pages faulted in ahead (warm.c) keep their
bytes."""

from __future__ import annotations

import ctypes
import errno
import mmap
import time

import pytest

ff = pytest.importorskip("pvfs._fusefront")

BS = 4096


@pytest.fixture
def served():
    s = ff.Session()
    arena = mmap.mmap(-1, 16 * BS)
    view = memoryview(arena)
    s.serve_arena(arena, BS, 128 << 10)
    blocks = [view[i * BS:(i + 1) * BS] for i in range(16)]
    for i, b in enumerate(blocks):
        b[:] = bytes([ord("a") + i]) * BS
    yield s, blocks
    s.close()


def test_a_read_of_published_blocks_is_answered_from_them(served):
    s, blocks = served
    assert s._read_here(7, 0, 100) is None  # nothing published
    assert s.publish(7, 3 * BS + 10, 0, [blocks[2], blocks[5], blocks[6], blocks[9]])
    assert s._read_here(7, 0, 100) == b"c" * 100
    # across blocks, adjacent in the arena or not
    assert s._read_here(7, BS - 10, 30) == b"c" * 10 + b"f" * 20
    assert s._read_here(7, 2 * BS - 5, 10) == b"f" * 5 + b"g" * 5
    assert s._read_here(7, 3 * BS, 10) == b"j" * 10  # ends at the size
    assert s._read_here(7, 3 * BS, 11) is None  # past it: Python decides the end
    assert s._read_here(8, 0, 10) is None  # another file
    assert s.stats()["reads_here"] == 4 and s.stats()["files_served"] == 1


def test_a_block_not_published_and_a_read_too_large_go_to_python(served):
    s, blocks = served
    assert s.publish(7, 10 * BS, 0, blocks[:2])
    assert s.publish(7, 10 * BS, 3, blocks[3:4])
    assert s._read_here(7, BS, 2 * BS) is None  # block 2 missing
    assert s._read_here(7, 3 * BS, 10) == b"d" * 10
    s2 = ff.Session()
    arena = mmap.mmap(-1, 64 * BS)
    view = memoryview(arena)
    s2.serve_arena(arena, BS, 8192)
    assert s2.publish(1, 64 * BS, 0, [view[i * BS:(i + 1) * BS] for i in range(4)])
    assert s2._read_here(1, 0, 8192) is not None
    assert s2._read_here(1, 0, 8193) is None  # over max_read (a stream request's size)
    s2.close()


def test_a_change_queued_stops_reads_until_python_publishes_again(served):
    s, blocks = served
    assert s.publish(7, 4 * BS, 0, blocks[:4])
    s._queued(7, True)  # a write of it queued for Python
    assert s._read_here(7, 0, 10) is None
    assert not s.publish(7, 4 * BS, 0, blocks[:4])  # refused while it is in flight
    s._queued(7, True)  # a second one
    s._queued(7, False)
    assert not s.publish(7, 4 * BS, 0, blocks[:4])
    s._queued(7, False)  # both answered
    assert s._read_here(7, 0, 10) is None  # still stopped: nothing published since
    assert s.publish(7, BS, 0, blocks[5:6])
    assert s._read_here(7, 0, 10) == b"f" * 10
    assert s._read_here(7, BS, 10) is None  # the older publication went with the stop
    assert s.stats()["publish_refused"] == 2


def test_a_write_answered_in_c_and_not_applied_keeps_the_file_out(served):
    s, blocks = served
    s.behind_limit(1 << 20)
    s.behind(3)
    assert s.publish(7, 4 * BS, 0, blocks[:4])
    assert s._wrote(3, 7, 100)  # answered in C, not applied by Python yet
    assert s._read_here(7, 0, 10) is None
    assert not s.publish(7, 4 * BS, 0, blocks[:4])
    s.behind_applied(100)
    assert s.publish(7, 4 * BS, 0, blocks[:4])
    assert s._read_here(7, 0, 10) == b"a" * 10


def test_a_dropped_file_is_not_answered_and_recent_reads_are_told_once(served):
    s, blocks = served
    assert s.publish(7, 4 * BS, 0, blocks[:4])
    assert s.publish(9, 4 * BS, 0, blocks[4:8])
    s._read_here(7, 0, 10)
    s._read_here(9, 0, 10)
    assert sorted(s.serve_recent()) == [7, 9]
    assert s.serve_recent() == []
    s.serve_drop(7)
    assert s._read_here(7, 0, 10) is None
    assert s._read_here(9, 0, 10) == b"e" * 10
    s.serve_drop(7)  # twice: nothing
    assert s.stats()["files_served"] == 1


def test_only_whole_blocks_of_the_arena_are_published():
    s = ff.Session()
    arena = mmap.mmap(-1, 4 * BS)
    view = memoryview(arena)
    with pytest.raises(ValueError):
        s.publish(1, BS, 0, [view[:BS]])  # no arena yet
    s.serve_arena(arena, BS, 1 << 20)
    with pytest.raises(ValueError):
        s.serve_arena(arena, BS, 1 << 20)  # one arena per session
    with pytest.raises(ValueError):
        s.publish(1, BS, 0, [bytearray(BS)])  # not the arena's
    with pytest.raises(ValueError):
        s.publish(1, BS, 0, [view[1:BS + 1]])  # not a block's start
    with pytest.raises(ValueError):
        s.publish(1, BS, 0, [view[:BS // 2]])  # not a whole block
    with pytest.raises(TypeError):
        s.publish(1, BS, 0, [object()])
    assert s._read_here(1, 0, 10) is None
    s.close()
    with pytest.raises(ValueError):
        ff.Session().serve_arena(mmap.mmap(-1, 3 * 1000), 1000, 100)  # not a power of two


def _resident(arena: mmap.mmap) -> list[bool]:
    """Which pages of ``arena`` are in memory (mincore(2))."""
    libc = ctypes.CDLL(None, use_errno=True)
    page = mmap.PAGESIZE
    n = (len(arena) + page - 1) // page
    vec = (ctypes.c_ubyte * n)()
    addr = ctypes.addressof(ctypes.c_char.from_buffer(arena))
    assert libc.mincore(ctypes.c_void_p(addr), ctypes.c_size_t(len(arena)), vec) == 0
    return [bool(v & 1) for v in vec]


def test_warm_faults_the_arena_in_ahead_and_changes_no_byte():
    s = ff.Session()
    size = 8 << 20
    arena = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    s.serve_arena(arena, BS, 1 << 20)
    view = memoryview(arena)
    view[BS:2 * BS] = b"w" * BS  # a block the cache wrote already
    assert sum(_resident(arena)) == 1
    s.warm(5 << 20)
    deadline = time.monotonic() + 30
    while s.stats()["warmed"] < 5 << 20 and time.monotonic() < deadline:
        time.sleep(0.01)
    st = s.stats()
    if st["warm_failed"] == errno.EINVAL:
        s.close()
        pytest.skip("no MADV_POPULATE_WRITE in this kernel")
    assert st["warmed"] == 5 << 20 and st["warm_failed"] == 0
    resident = _resident(arena)
    pages = (5 << 20) // mmap.PAGESIZE
    assert all(resident[:pages])
    assert bytes(view[BS:2 * BS]) == b"w" * BS and bytes(view[:BS]) == bytes(BS)
    assert bytes(view[2 * BS:5 << 20]) == bytes((5 << 20) - 2 * BS)
    s.warm(1 << 40)  # past the end: the whole arena, no more
    deadline = time.monotonic() + 30
    while s.stats()["warmed"] < size and time.monotonic() < deadline:
        time.sleep(0.01)
    assert s.stats()["warmed"] == size
    s.close()  # the thread ends before the arena is let go
    del view
    arena.close()
