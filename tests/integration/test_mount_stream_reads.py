"""Stream-sized reads answered by the C front end's workers from the I/O daemons
(csrc/front/streams.c, fuse/cstreams.py): a sequential reader of a file with nothing newer
on this node than the servers' bytes is answered without Python, and no read returns bytes
or a size older than a change this mount made (a write, small or stream-sized, still dirty
or written back; a truncation; a growth) or learned on a reopen."""

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

MIB = 1 << 20


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = start_cluster(tmp_path_factory.mktemp("streams"))
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
    """pread with O_DIRECT: a request of exactly this range, every time."""
    buf = mmap.mmap(-1, n)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:
        got = os.preadv(fd, [buf], off)
        return bytes(buf[:got])
    finally:
        os.close(fd)
        buf.close()


def test_a_sequential_reader_is_answered_by_the_workers(node):
    p = node.path / "seq"
    data = random.Random(1).randbytes(8 * MIB + 12345)
    p.write_bytes(data)
    before = _front(node)["streams_here"]
    for _ in range(2):
        for off in range(0, len(data), MIB):
            assert _direct_read(p, off, MIB) == data[off:off + MIB]
    with open(p, "rb") as f:  # buffered: the kernel's read-ahead asks
        assert f.read() == data
    st = _front(node)
    assert st["streams_here"] - before >= 10  # the first read marked it, the rest in C
    assert st["stream_failed"] == 0


def test_changes_are_seen_by_the_next_stream_read(node):
    p = node.path / "chg"
    data = bytearray(random.Random(2).randbytes(4 * MIB))
    p.write_bytes(data)
    for _ in range(2):
        assert _direct_read(p, 0, MIB) == data[:MIB]
    served = _front(node)["streams_here"]
    with open(p, "r+b") as f:  # a small write, dirty here: laid over the servers' bytes
        f.seek(5000)
        f.write(b"x" * 100)
        data[5000:5100] = b"x" * 100
    assert _direct_read(p, 0, MIB) == data[:MIB]
    with open(p, "r+b") as f:  # a stream write, queued here
        f.seek(MIB // 2)
        f.write(b"y" * MIB)
        data[MIB // 2:MIB // 2 + MIB] = b"y" * MIB
    assert _direct_read(p, 0, 2 * MIB) == data[:2 * MIB]
    os.truncate(p, 3 * MIB + 7)  # the end moves in
    del data[3 * MIB + 7:]
    assert _direct_read(p, 2 * MIB, MIB) == data[2 * MIB:3 * MIB]
    assert _direct_read(p, 3 * MIB, MIB) == data[3 * MIB:]
    with open(p, "ab") as f:  # and out again
        f.write(b"z" * 300_000)
        data += b"z" * 300_000
    for _ in range(2):
        assert _direct_read(p, 2 * MIB, 2 * MIB) == data[2 * MIB:]
    assert _front(node)["streams_here"] > served


def test_random_stream_io_through_several_handles_reads_what_a_model_says(node):
    """Writes (small and stream-sized), truncations, fsyncs and stream-sized reads (direct
    and buffered) in a random order through three handles, each read checked against a
    model of the file."""
    rng = random.Random(3)
    p = node.path / "model"
    model = bytearray()
    p.write_bytes(b"")
    fds = [os.open(p, os.O_RDWR) for _ in range(3)]
    try:
        for step in range(400):
            op = rng.random()
            fd = rng.choice(fds)
            if op < 0.3:
                off = rng.randrange(0, 6 * MIB)
                piece = rng.randbytes(rng.choice([rng.randrange(1, 9000),
                                                  rng.randrange(128 << 10, 2 * MIB)]))
                os.pwrite(fd, piece, off)
                if off > len(model):
                    model.extend(bytes(off - len(model)))
                model[off:off + len(piece)] = piece
            elif op < 0.36:
                size = rng.randrange(0, 7 * MIB)
                os.ftruncate(fd, size)
                del model[size:]
                model.extend(bytes(size - len(model)))
            elif op < 0.42:
                os.fsync(fd)
            elif op < 0.75:
                off = rng.randrange(0, 7 * MIB) // 4096 * 4096
                n = rng.choice([128 << 10, 256 << 10, 512 << 10, MIB])
                assert _direct_read(p, off, n) == bytes(model[off:off + n]), step
            else:
                off = rng.randrange(0, 7 * MIB)
                n = rng.randrange(128 << 10, 2 * MIB)
                assert os.pread(fd, n, off) == bytes(model[off:off + n]), step
    finally:
        for fd in fds:
            os.close(fd)
    assert _front(node)["streams_here"] > 0


def test_another_mounts_truncation_is_seen_after_a_reopen(cluster, tmp_path):
    """coherence=none: a reopen after another node's change drops this node's view of the
    file (fileops._file_info) -- and the size its workers read within."""
    with Mount(cluster.config_path, tmp_path / "a", "frontend=c") as a, \
            Mount(cluster.config_path, tmp_path / "b", "frontend=c") as b:
        (a.path / "shared").write_bytes(b"1" * (2 * MIB))
        pb = b.path / "shared"
        for _ in range(6):  # (the first marks it; the workers' connections open meanwhile)
            assert _direct_read(pb, 0, 2 * MIB) == b"1" * (2 * MIB)
        assert _front(b)["streams_here"] > 0
        os.truncate(a.path / "shared", MIB + 5)
        assert _direct_read(pb, 0, 2 * MIB) == b"1" * (MIB + 5)  # not the marked size


def test_stream_reads_off_sends_every_read_to_python(cluster, tmp_path):
    with Mount(cluster.config_path, tmp_path / "o", "frontend=c,stream_reads=0") as m:
        p = m.path / "off"
        data = random.Random(4).randbytes(2 * MIB)
        p.write_bytes(data)
        for _ in range(3):
            assert _direct_read(p, 0, MIB) == data[:MIB]
        assert _front(m)["streams_here"] == 0
