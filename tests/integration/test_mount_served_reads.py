"""Reads answered by the C front end's workers from the block cache's arena
(csrc/front/serve.c, src/pvfs/cache/_served.py): a read of blocks the cache published is
answered without Python, and never with bytes or a size older than a change this mount
made or learned before the read was sent."""

from __future__ import annotations

import mmap
import os
import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_mount_support import Mount, needs_fuse

sys.path.insert(0, str(Path(__file__).parent.parent))
from conftest import start_cluster

from pvfs.cluster.launch import down

pytestmark = [pytest.mark.fuse, needs_fuse,
              pytest.mark.skipif(not __import__("pvfs.fuse.cfront", fromlist=["available"])
                                 .available(), reason="the C front end is not built")]

BS = 4096


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = start_cluster(tmp_path_factory.mktemp("served"))
    try:
        yield c
    finally:
        down(c.config)


@pytest.fixture
def node(cluster, tmp_path):
    with Mount(cluster.config_path, tmp_path / "m", "frontend=c") as m:
        yield m


def _front(m: Mount) -> dict:
    return m.stats()["frontend"]


def _direct_read(path: Path, off: int, n: int) -> bytes:
    """pread with O_DIRECT: past the kernel's page cache, every time a request."""
    buf = mmap.mmap(-1, max(n, BS))
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:
        got = os.preadv(fd, [memoryview(buf)[:n]], off)
        return bytes(buf[:got])
    finally:
        os.close(fd)
        buf.close()


def test_a_read_of_cached_blocks_is_answered_by_the_workers(node):
    p = node.path / "f"
    data = random.Random(1).randbytes(256 << 10)
    p.write_bytes(data)
    before = _front(node)["reads_here"]
    for _ in range(3):
        for off in range(0, len(data), 64 << 10):
            assert _direct_read(p, off, 64 << 10) == data[off:off + (64 << 10)]
    st = _front(node)
    assert st["reads_here"] - before >= 4  # the first pass published, later ones served
    assert st["published"] >= 1


def test_a_write_a_truncation_and_a_growth_are_seen_by_the_next_read(node):
    p = node.path / "g"
    data = bytearray(random.Random(2).randbytes(64 << 10))
    p.write_bytes(data)
    for _ in range(2):
        assert _direct_read(p, 0, 32 << 10) == data[:32 << 10]
    served = _front(node)["reads_here"]
    with open(p, "r+b") as f:  # a write of published blocks
        f.seek(100)
        f.write(b"x" * 5000)
        data[100:5100] = b"x" * 5000
    assert _direct_read(p, 0, 32 << 10) == data[:32 << 10]
    os.truncate(p, 10_000)  # a truncation: the end moves in
    del data[10_000:]
    assert _direct_read(p, 0, 32 << 10) == data
    assert _direct_read(p, 8192, 4096) == data[8192:10_000]
    with open(p, "ab") as f:  # a growth past the published size
        f.write(b"y" * 3000)
        data += b"y" * 3000
    for _ in range(2):
        assert _direct_read(p, 8192, 8192) == data[8192:16384]
    assert _front(node)["reads_here"] >= served


def test_random_io_through_several_handles_reads_what_a_model_says(node):
    """Writes, truncations and reads (direct and buffered) in a random order through
    three handles, each read checked against a model of the file."""
    rng = random.Random(3)
    p = node.path / "model"
    model = bytearray()
    p.write_bytes(b"")
    fds = [os.open(p, os.O_RDWR) for _ in range(3)]
    try:
        for step in range(600):
            op = rng.random()
            fd = rng.choice(fds)
            if op < 0.35:
                off = rng.randrange(0, 96 << 10)
                piece = rng.randbytes(rng.randrange(1, 20_000))
                os.pwrite(fd, piece, off)
                if off > len(model):
                    model.extend(bytes(off - len(model)))
                model[off:off + len(piece)] = piece
            elif op < 0.42:
                size = rng.randrange(0, 100 << 10)
                os.ftruncate(fd, size)
                del model[size:]
                model.extend(bytes(size - len(model)))
            elif op < 0.75:
                off = rng.randrange(0, 100 << 10) // BS * BS
                n = rng.choice([4096, 8192, 16384, 65536])
                assert _direct_read(p, off, n) == bytes(model[off:off + n]), step
            else:
                off = rng.randrange(0, 100 << 10)
                n = rng.randrange(1, 40_000)
                assert os.pread(fd, n, off) == bytes(model[off:off + n]), step
    finally:
        for fd in fds:
            os.close(fd)
    assert _front(node)["reads_here"] > 0


def test_another_mounts_change_is_seen_after_a_reopen(cluster, tmp_path):
    """coherence=none: a reopen after another node's change drops what this node cached
    (fileops._file_info) -- and what its workers answered from it."""
    with Mount(cluster.config_path, tmp_path / "a", "frontend=c") as a, \
            Mount(cluster.config_path, tmp_path / "b", "frontend=c") as b:
        (a.path / "shared").write_bytes(b"1" * 20_000)
        for _ in range(3):
            assert _direct_read(a.path / "shared", 0, 16384) == b"1" * 16384
        assert _front(a)["reads_here"] > 0
        (b.path / "shared").write_bytes(b"2" * 30_000)
        assert _direct_read(a.path / "shared", 0, 16384) == b"2" * 16384
        assert _direct_read(a.path / "shared", 16384, 16384) == b"2" * 13_616


def test_serve_reads_0_sends_every_read_to_python(cluster, tmp_path):
    with Mount(cluster.config_path, tmp_path / "m0", "frontend=c,serve_reads=0") as m:
        p = m.path / "f"
        p.write_bytes(b"z" * 65536)
        for _ in range(3):
            assert _direct_read(p, 0, 65536) == b"z" * 65536
        st = _front(m)
        assert st["reads_here"] == 0 and st["published"] == 0


def test_blocks_evicted_and_reused_for_another_file_are_not_answered_for_the_first(
        cluster, tmp_path):
    """A 1 MiB cache: reading a second file takes the first one's buffers (the arena's
    blocks, published for the first): the first must then be read anew, not from them."""
    with Mount(cluster.config_path, tmp_path / "small", "frontend=c,cache_size=1M") as m:
        first, second = m.path / "first", m.path / "second"
        a = random.Random(4).randbytes(512 << 10)
        b = random.Random(5).randbytes(2 << 20)
        first.write_bytes(a)
        second.write_bytes(b)
        for rnd in range(3):  # each piece three times: fetched, published, served
            for path, data in ((first, a), (second, b)):
                for off in range(0, len(data), 64 << 10):
                    for _ in range(3):
                        got = _direct_read(path, off, 64 << 10)
                        assert got == data[off:off + (64 << 10)], (path.name, rnd, off)
        st = m.stats()
        assert st["frontend"]["reads_here"] > 0
        assert st["evictions"] > 0


def test_buffered_reads_the_kernel_reads_ahead_are_answered_by_the_workers(node):
    """Buffered reads: the kernel asks in read-ahead sizes (128 KiB and more), above
    ``stream_min``; cached, they are answered from the cache and then by the workers."""
    p = node.path / "ahead"
    data = random.Random(6).randbytes(4 << 20)
    fd = os.open(p, os.O_WRONLY | os.O_CREAT, 0o644)
    try:  # writes below stream_write_min, backwards (not joined): into the block cache
        for off in reversed(range(0, len(data), 30000)):
            os.pwrite(fd, data[off:off + 30000], off)
    finally:
        os.close(fd)
    before = _front(node)["reads_here"]
    for _ in range(3):
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # the kernel's pages go
            got = b"".join(os.pread(fd, 1 << 20, off) for off in range(0, len(data), 1 << 20))
        finally:
            os.close(fd)
        assert got == data
    st = _front(node)
    assert st["reads_here"] - before >= 8, {k: v for k, v in st.items() if "read" in k or "publ" in k}
