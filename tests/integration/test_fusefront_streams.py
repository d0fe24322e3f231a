"""Stream reads the C front end's workers answer from the I/O daemons (csrc/front/streams.c),
on real daemons without a kernel: the bytes a worker would answer are the client's read's
(zeros in holes and short stripe files, cut at the size it was marked with), only for a
marked file and a stream-sized read, never after the mark was dropped or while a change is
queued; connections go back after a whole reply, and one whose exchange failed is closed
while the read goes to Python."""

from __future__ import annotations

import mmap
import random
import socket

import msgpack
import pytest

from pvfs import Stripe
from pvfs.client.datapath import stream_read_head

ff = pytest.importorskip("pvfs._fusefront")

MIN = 128 << 10


@pytest.fixture
def session(pvfs_cluster, fs):
    s = ff.Session()
    arena = mmap.mmap(-1, 16 * 4096)
    s.serve_arena(arena, 4096, 1 << 20)
    s.stream_setup(len(pvfs_cluster.config.iods), MIN, 5.0)
    for iod in range(len(pvfs_cluster.config.iods)):
        for _ in range(2):
            s.stream_give(iod, fs.data.give_away(iod))
    yield s
    s.close()


def _mark(s, f, size: int, niods: int = 4) -> bool:
    st = f.stripe
    return s.stream_mark(f.ino, size, st.ssize, [st.iod_of_rank(r, niods)
                                                 for r in range(st.pcount)],
                         stream_read_head(f.ino, st))


def test_the_header_a_worker_finishes_is_the_clients_read():
    head = stream_read_head(7, Stripe(1, 3, 65536))
    # what streams.c's put_desc appends: ["r", [off, len]] as uint64s
    desc = b"\x92\xa1r\x92\xcf" + (5).to_bytes(8, "big") + b"\xcf" + (9).to_bytes(8, "big")
    assert msgpack.unpackb(head + desc) == {"op": "read", "ino": 7, "stripe": [1, 3, 65536],
                                            "desc": ["r", [5, 9]]}


@pytest.mark.parametrize("stripe", [Stripe(0, 4, 65536), Stripe(2, 3, 4096), Stripe(1, 1, 1 << 20)])
def test_a_worker_answers_the_servers_bytes_within_the_marked_size(session, fs, stripe):
    rng = random.Random(stripe.pcount)
    data = bytearray(rng.randbytes(3 << 20))
    data[1 << 20:(1 << 20) + 300_000] = bytes(300_000)  # a hole
    path = f"/s-{stripe.base}-{stripe.pcount}-{stripe.ssize}"
    with fs.open(path, "w+b", stripe=stripe) as f:
        f.write(data[:1 << 20])
        f.seek((1 << 20) + 300_000)
        f.write(data[(1 << 20) + 300_000:])
        f.fsync()
        size = len(data) + 5000  # past the servers' end: zeros up to the size marked
        data += bytes(5000)
        assert session._stream_here(f.ino, 0, MIN) is None  # not marked
        assert _mark(session, f, size)
        for _ in range(12):
            off = rng.randrange(0, size - 1)
            n = rng.randrange(MIN, (1 << 20) + 1)
            assert session._stream_here(f.ino, off, n) == bytes(data[off:off + n]), (off, n)
        assert session._stream_here(f.ino, size - 1000, MIN) == bytes(1000)  # cut at the size
        assert session._stream_here(f.ino, size, MIN) is None  # at the end: Python's
        assert session._stream_here(f.ino, 0, MIN - 1) is None  # too small
        assert session._stream_here(f.ino, 0, (1 << 20) + 4096) is None  # too large
    st = session.stats()
    assert st["streams_here"] >= 13 and st["stream_failed"] == 0
    assert all(session.stream_conns(iod) == 2 for iod in range(4))  # all back


def test_a_dropped_mark_or_a_queued_change_sends_reads_to_python(session, fs):
    with fs.open("/d", "w+b") as f:
        f.write(b"a" * (1 << 20))
        f.fsync()
        assert _mark(session, f, 1 << 20)
        assert session._stream_here(f.ino, 0, MIN) == b"a" * MIN
        session._queued(f.ino, True)  # a worker queued a write of it
        assert session._stream_here(f.ino, 0, MIN) is None
        assert not _mark(session, f, 1 << 20)  # refused while the write is in flight
        session._queued(f.ino, False)
        assert _mark(session, f, 1 << 20)
        assert session._stream_here(f.ino, 0, MIN) == b"a" * MIN
        session.serve_drop(f.ino)
        assert session._stream_here(f.ino, 0, MIN) is None


def test_a_failed_exchange_closes_its_connection_and_goes_to_python(session, fs):
    with fs.open("/x", "w+b", stripe=Stripe(0, 4, 65536)) as f:
        f.write(b"b" * (1 << 20))
        f.fsync()
        assert _mark(session, f, 1 << 20)
        mine, peer = socket.socketpair()
        peer.close()  # the daemon is gone: the request's reply never comes
        session.stream_give(0, mine.detach())  # taken first (the idle list is a stack)
        assert session.stream_conns(0) == 3
        assert session._stream_here(f.ino, 0, 1 << 20) is None
        st = session.stats()
        assert st["stream_failed"] == 1
        assert session.stream_conns(0) == 2  # the broken one closed, the others back
        assert all(session.stream_conns(iod) == 2 for iod in range(1, 4))
        assert session._stream_here(f.ino, 0, 1 << 20) == b"b" * (1 << 20)


def test_no_free_connection_sends_the_read_to_python(pvfs_cluster, fs):
    s = ff.Session()
    arena = mmap.mmap(-1, 4096)
    s.serve_arena(arena, 4096, 1 << 20)
    s.stream_setup(4, MIN, 5.0)
    try:
        with fs.open("/n", "w+b", stripe=Stripe(0, 4, 65536)) as f:
            f.write(b"c" * MIN)
            f.fsync()
            assert _mark(s, f, MIN)
            assert s._stream_here(f.ino, 0, MIN) is None
            assert s.stats()["stream_no_conn"] == 1
            for iod in (0, 1):  # a 128 KiB read touches ranks 0 and 1 only
                s.stream_give(iod, fs.data.give_away(iod))
            assert s._stream_here(f.ino, 0, MIN) == b"c" * MIN
        with pytest.raises(ValueError):
            s.stream_give(4, 0)  # no such daemon
        with pytest.raises(ValueError):
            s.stream_setup(4, MIN, 5.0)  # once
    finally:
        s.close()
