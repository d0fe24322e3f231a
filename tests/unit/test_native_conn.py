"""pvfs._native.Engine attached connections: the engine reads frame headers between jobs.

Every test talks to the engine through real sockets. Nothing asserts on time: waits only
bound how long a test may hang, and "nothing happened" checks give the engine a moment
that a broken engine would use to misbehave.
"""

from __future__ import annotations

import errno
import os
import random
import select
import socket
import struct
import threading
import time

import pytest

# tests/unit is on sys.path (rootdir-less layout)
from test_native_engine import DISCARD, FILE, READ, WRITE, ZERO, acc, fill, recv_exact, tcp_pair

from pvfs import _native as nat

MAX_HEADER = 1 << 20


def prefix(hlen: int, blen: int, magic: bytes = b"PV01") -> bytes:
    return magic + struct.pack("<IQ", hlen, blen)


def frame(header: bytes, blen: int = 0) -> bytes:
    return prefix(len(header), blen) + header


class Events:
    """Collects events() of one engine; take() waits for what a test expects."""

    def __init__(self, eng: nat.Engine) -> None:
        self.eng = eng
        self.seen: list[tuple] = []

    def poll(self, timeout: float) -> None:
        select.select([self.eng.fileno()], [], [], timeout)
        self.seen += self.eng.events()

    def take(self, n: int, timeout: float = 20.0) -> list[tuple]:
        deadline = time.monotonic() + timeout
        while len(self.seen) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"only {len(self.seen)} of {n} events: {self.seen}")
            self.poll(left)
        out, self.seen = self.seen[:n], self.seen[n:]
        return out

    def one(self, timeout: float = 20.0) -> tuple:
        return self.take(1, timeout)[0]

    def none(self, wait: float = 0.2) -> None:
        self.poll(wait)
        assert self.seen == []


@pytest.fixture
def engine():
    engines = []

    def make(**kw):
        e = nat.Engine(**kw)
        engines.append(e)
        return e, Events(e)

    yield make
    for e in engines:
        e.close()


@pytest.fixture
def pair():
    socks = []

    def make(tcp: bool = False):
        s = tcp_pair() if tcp else socket.socketpair()
        socks.extend(s)
        return s

    yield make
    for s in socks:
        s.close()


@pytest.fixture
def stripe(tmp_path):
    path = tmp_path / "stripe"
    data = random.Random(5).randbytes(1 << 20)
    path.write_bytes(data)
    fd = os.open(path, os.O_RDWR)
    yield fd, data, path
    os.close(fd)


# -- frames ----------------------------------------------------------------------------------

def test_frames_arriving_in_pieces(engine, pair):
    eng, ev = engine()
    srv, cli = pair(tcp=True)
    cli.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    eng.attach(7, srv.fileno())
    header = bytes(range(256)) * 3
    data = frame(header, 12345)
    for i in range(len(data)):  # one byte per send; most arrive in a recv of their own
        cli.send(data[i:i + 1])
        if i < 40:
            time.sleep(0.002)
    assert ev.one() == ("frame", 7, 12345, header)
    info = eng.info()
    assert info["attached"] == 1 and info["frames"] == 1
    # Nothing more is read until a job runs on the socket.
    cli.sendall(frame(b"next"))
    ev.none()
    eng.submit(1, srv.fileno(), 0, READ, b"", prefix=b"ok")
    assert [e[0] for e in ev.take(2)] == ["done", "frame"]
    assert recv_exact(cli, 2) == b"ok"


@pytest.mark.parametrize("hlen", [1, 4096, MAX_HEADER])
def test_header_sizes_and_bulk_limit(engine, pair, hlen):
    eng, ev = engine()
    srv, cli = pair()
    eng.attach(1, srv.fileno())
    header = random.Random(hlen).randbytes(hlen)
    t = threading.Thread(target=cli.sendall, args=(frame(header, 1 << 32),))
    t.start()
    assert ev.one() == ("frame", 1, 1 << 32, header)  # 4 GiB is the largest bulk allowed
    t.join()


def test_pipelined_write_then_read(engine, pair, stripe):
    fd, _data, path = stripe
    eng, ev = engine()
    srv, cli = pair(tcp=True)
    eng.attach(3, srv.fileno())
    bulk = random.Random(9).randbytes(300_000)
    # A write's frame and bulk and a second frame, back to back in one send.
    threading.Thread(target=cli.sendall,
                     args=(frame(b"write", len(bulk)) + bulk + frame(b"read"),)).start()
    assert ev.one() == ("frame", 3, len(bulk), b"write")
    ev.none()  # the second header stays unread behind the bulk
    eng.submit(1, srv.fileno(), fd, WRITE, acc((FILE, 1000, len(bulk))), suffix=b"WOK")
    done, fr = ev.take(2)
    assert done[:4] == ("done", 1, 0, len(bulk))
    assert fr == ("frame", 3, 0, b"read")  # reported only after the write's job
    assert recv_exact(cli, 3) == b"WOK"
    assert path.read_bytes()[1000:1000 + len(bulk)] == bulk  # no byte eaten by the reader
    eng.submit(2, srv.fileno(), fd, READ, acc((FILE, 1000, 10)), prefix=b"R:")
    assert recv_exact(cli, 12) == b"R:" + bulk[:10]
    assert ev.one()[:4] == ("done", 2, 0, 10)


@pytest.mark.parametrize("mode", nat.READ_MODES)
def test_read_job_with_prefix_then_automatic_resume(engine, pair, stripe, mode):
    fd, data, _ = stripe
    eng, ev = engine(read_mode=mode)
    srv, cli = pair(tcp=True)
    eng.attach(1, srv.fileno())
    for k in range(5):
        cli.sendall(frame(b"read %d" % k))
        assert ev.one() == ("frame", 1, 0, b"read %d" % k)
        eng.submit(k, srv.fileno(), fd, READ, acc((FILE, k * 1000, 70_000), (ZERO, 0, 5)),
                   prefix=b"HDR%d" % k, inode=4)
        assert recv_exact(cli, 4 + 70_005) == b"HDR%d" % k + data[k * 1000:k * 1000 + 70_000] \
            + bytes(5)
        assert ev.one()[:4] == ("done", k, 0, 70_005)
    assert eng.info()["frames"] == 5


@pytest.mark.parametrize("mode", nat.WRITE_MODES)
def test_write_job_with_suffix(engine, pair, stripe, mode):
    fd, _, path = stripe
    eng, ev = engine(write_mode=mode)
    srv, cli = pair(tcp=True)
    eng.attach(2, srv.fileno())
    bulk = os.urandom(200_000)
    cli.sendall(frame(b"w", len(bulk)))
    assert ev.one() == ("frame", 2, len(bulk), b"w")
    eng.submit(9, srv.fileno(), fd, WRITE, acc((FILE, 0, 150_000), (FILE, 500_000, 50_000)),
               suffix=b"REPLY")
    cli.sendall(bulk)
    assert recv_exact(cli, 5) == b"REPLY"
    assert ev.one()[:4] == ("done", 9, 0, 200_000)
    got = path.read_bytes()
    assert got[:150_000] == bulk[:150_000] and got[500_000:550_000] == bulk[150_000:]


def test_a_write_that_holds_its_connection_waits_for_pythons_reply(engine, pair, stripe):
    """The I/O daemon sets a stripe file's mtime after a write that carries one, then
    replies itself: the connection waits for that reply before it reads the next frame."""
    fd, _, path = stripe
    eng, ev = engine()
    srv, cli = pair(tcp=True)
    eng.attach(3, srv.fileno())
    cli.sendall(frame(b"w", 1000) + b"m" * 1000 + frame(b"after"))
    assert ev.one() == ("frame", 3, 1000, b"w")
    eng.submit(1, srv.fileno(), fd, WRITE, acc((FILE, 0, 1000)), hold=True)
    assert ev.one()[:4] == ("done", 1, 0, 1000)
    ev.none()  # no "frame" yet: Python's reply comes first
    eng.submit(2, srv.fileno(), fd, READ, b"", prefix=b"WROTE")
    done, fr = ev.take(2)
    assert done[:3] == ("done", 2, 0) and fr == ("frame", 3, 0, b"after")
    assert recv_exact(cli, 5) == b"WROTE" and path.read_bytes()[:1000] == b"m" * 1000


def test_suffix_waits_for_a_peer_that_does_not_read(engine, pair, stripe):
    # A suffix bigger than the socket buffers: the write job must turn to EPOLLOUT.
    fd, _, _ = stripe
    eng, ev = engine()
    srv, cli = pair()
    eng.attach(2, srv.fileno())
    cli.sendall(frame(b"w", 10))
    ev.one()
    big = os.urandom(8 << 20)
    eng.submit(1, srv.fileno(), fd, WRITE, acc((FILE, 0, 10)), suffix=big)
    cli.sendall(b"0123456789")
    ev.none()
    assert recv_exact(cli, len(big)) == big
    assert ev.one()[:4] == ("done", 1, 0, 10)
    cli.sendall(frame(b"again"))
    assert ev.one() == ("frame", 2, 0, b"again")


def test_discard_then_suffix(engine, pair):
    eng, ev = engine()
    srv, cli = pair(tcp=True)
    eng.attach(4, srv.fileno())
    cli.sendall(frame(b"refused", 100_000) + b"x" * 100_000 + frame(b"next"))
    assert ev.one() == ("frame", 4, 100_000, b"refused")
    eng.submit(1, srv.fileno(), 0, WRITE, acc((DISCARD, 0, 100_000)), suffix=b"EINVAL")
    done, fr = ev.take(2)
    assert done[:4] == ("done", 1, 0, 100_000) and fr == ("frame", 4, 0, b"next")
    assert recv_exact(cli, 6) == b"EINVAL"


@pytest.mark.parametrize("mode", nat.WRITE_MODES)
def test_storage_error_keeps_the_connection_usable(engine, pair, tmp_path, mode):
    path = tmp_path / "ro"
    path.write_bytes(b"")
    ro = os.open(path, os.O_RDONLY)  # pwrite/splice fail with EBADF, as ENOSPC or EIO would
    try:
        eng, ev = engine(write_mode=mode)
        srv, cli = pair(tcp=True)
        eng.attach(5, srv.fileno())
        cli.sendall(frame(b"w", 50_000) + os.urandom(50_000) + frame(b"after"))
        ev.one()
        eng.submit(1, srv.fileno(), ro, WRITE, acc((FILE, 0, 50_000)), suffix=b"OK!")
        done = ev.one()
        assert done[:4] == ("done", 1, errno.EBADF, 50_000)
        ev.none()  # no "frame": the engine waits for Python's error reply
        eng.submit(2, srv.fileno(), ro, READ, b"", prefix=b"ERR")
        done, fr = ev.take(2)
        assert done[:3] == ("done", 2, 0) and fr == ("frame", 5, 0, b"after")
        assert recv_exact(cli, 3) == b"ERR"  # the suffix of the failed job was never sent
    finally:
        os.close(ro)


def test_opt4_waiting_on_a_job_still_reads_headers(engine, pair, stripe):
    fd, _, _ = stripe
    eng, ev = engine(algorithm="opt4")
    s1, c1 = pair()
    junk = fill(s1)
    eng.submit(1, s1.fileno(), fd, READ, acc((FILE, 0, 100_000)))  # blocked: c1 reads nothing
    s2, c2 = pair()
    eng.attach(2, s2.fileno())
    c2.sendall(frame(b"h"))
    assert ev.one() == ("frame", 2, 0, b"h")  # while opt4 waits for job 1
    recv_exact(c1, junk + 100_000)
    assert ev.one()[:3] == ("done", 1, 0)


# -- "closed" --------------------------------------------------------------------------------

@pytest.mark.parametrize("stream,err", [
    (b"", 0),
    (frame(b"one"), None),               # a frame, then a clean close: see below
    (b"X", errno.EPROTO),                # refused at the first wrong byte
    (b"PV0", errno.ECONNRESET),          # a begun prefix, then EOF
    (b"PV01\x05\x00", errno.ECONNRESET),
    (prefix(10, 0) + b"abc", errno.ECONNRESET),
    (b"PV02" + bytes(12), errno.EPROTO),
    (prefix(0, 0), errno.EPROTO),
    (prefix(MAX_HEADER + 1, 0), errno.EPROTO),
    (prefix(10, (1 << 32) + 1), errno.EPROTO),
    (prefix(10, 2**64 - 1), errno.EPROTO),
    (b"GET / HTTP/1.1\r\n\r\n", errno.EPROTO),
])
def test_closed_causes(engine, pair, stream, err):
    eng, ev = engine()
    srv, cli = pair()
    eng.attach(11, srv.fileno())
    cli.sendall(stream)
    cli.shutdown(socket.SHUT_WR)
    if err is None:
        assert ev.one() == ("frame", 11, 0, b"one")
        eng.submit(1, srv.fileno(), 0, READ, b"", prefix=b"r")
        assert ev.take(2)[1] == ("closed", 11, 0)
    else:
        assert ev.one() == ("closed", 11, err)
    assert eng.info()["attached"] == 0
    with pytest.raises(ValueError, match="not attached"):
        eng.detach(11)
    eng.attach(11, srv.fileno())  # the id is free again once its "closed" was seen


def test_reset_between_frames(engine, pair):
    eng, ev = engine()
    srv, cli = pair(tcp=True)
    eng.attach(1, srv.fileno())
    cli.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    cli.close()
    assert ev.one() == ("closed", 1, errno.ECONNRESET)


def test_timeout_only_once_a_header_began(engine, pair):
    eng, ev = engine(idle_timeout=0.2)
    idle_srv, idle_cli = pair()
    slow_srv, slow_cli = pair()
    eng.attach(1, idle_srv.fileno())
    eng.attach(2, slow_srv.fileno())
    slow_cli.sendall(prefix(100, 0) + b"only part of the header")
    assert ev.one() == ("closed", 2, errno.ETIMEDOUT)
    ev.none(0.4)  # the idle connection, attached as long, is still there
    idle_cli.sendall(frame(b"late but fine"))
    assert ev.one() == ("frame", 1, 0, b"late but fine")


def test_failed_job_closes_the_connection(engine, pair, stripe):
    fd, _, _ = stripe
    eng, ev = engine(idle_timeout=0.2)
    srv, cli = pair()
    eng.attach(1, srv.fileno())
    cli.sendall(frame(b"w", 1000) + b"partial")
    ev.one()
    eng.submit(5, srv.fileno(), fd, WRITE, acc((FILE, 0, 1000)), suffix=b"never")
    done, closed = ev.take(2)
    assert done[:4] == ("done", 5, errno.ETIMEDOUT, 7)
    assert closed == ("closed", 1, errno.ETIMEDOUT)

    srv2, cli2 = pair(tcp=True)
    eng.attach(2, srv2.fileno())
    cli2.sendall(frame(b"r"))
    ev.one()
    eng.submit(6, srv2.fileno(), fd, READ, acc((ZERO, 0, 64 << 20)), prefix=b"p")
    cli2.recv(1000)
    cli2.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    cli2.close()
    done, closed = ev.take(2)
    assert done[:3] == ("done", 6, closed[2]) and closed[:2] == ("closed", 2)
    assert closed[2] in (errno.EPIPE, errno.ECONNRESET)


def test_attach_refusals(engine, pair, stripe):
    fd, _, _ = stripe
    eng, ev = engine()
    srv, cli = pair()
    eng.attach(1, srv.fileno())
    with pytest.raises(ValueError, match="attached already"):
        eng.attach(1, srv.fileno())
    with pytest.raises(ValueError):
        eng.attach(2, -1)
    with pytest.raises(OSError) as exc:
        eng.attach(2, 10_000)
    assert exc.value.errno == errno.EBADF
    eng.attach(3, srv.fileno())  # the same socket twice: the second is refused by the loop
    assert ev.one() == ("closed", 3, errno.EEXIST)
    eng.attach(4, fd)  # not a socket
    assert ev.one() == ("closed", 4, errno.EPERM)
    s2, _c2 = pair()
    eng.submit(1, s2.fileno(), 0, READ, acc((ZERO, 0, 64 << 20)))  # a job holds the socket
    eng.attach(5, s2.fileno())
    assert ev.one() == ("closed", 5, errno.EEXIST)
    cli.sendall(frame(b"still fine"))
    assert ev.one() == ("frame", 1, 0, b"still fine")


def test_jobs_on_a_connection_that_is_reading(engine, pair):
    eng, ev = engine()
    srv, cli = pair()
    eng.attach(1, srv.fileno())
    eng.submit(1, srv.fileno(), 0, READ, b"", prefix=b"unasked")
    assert ev.one()[:3] == ("done", 1, errno.EBUSY)
    cli.sendall(frame(b"h"))
    assert ev.one() == ("frame", 1, 0, b"h")
    fill(srv)
    eng.submit(2, srv.fileno(), 0, READ, b"", prefix=b"blocked")
    eng.submit(3, srv.fileno(), 0, READ, b"", prefix=b"second")
    assert ev.one()[:3] == ("done", 3, errno.EEXIST)
    with pytest.raises(ValueError, match="in a job"):
        eng.detach(1)
    cli.setblocking(False)
    got = b""
    while not got.endswith(b"blocked"):
        select.select([cli], [], [], 5)
        got += cli.recv(1 << 20)
    assert ev.one()[:3] == ("done", 2, 0)


def test_close_cancels_attached_connections(pair, stripe):
    fd, _, _ = stripe
    eng = nat.Engine()
    ev = Events(eng)
    (s1, _c1), (s2, c2) = pair(), pair()
    eng.attach(1, s1.fileno())
    eng.attach(2, s2.fileno())
    c2.sendall(frame(b"h"))
    ev.one()
    eng.submit(9, s2.fileno(), fd, READ, acc((ZERO, 0, 64 << 20)))
    while eng.info()["active"] == 0:
        time.sleep(0.01)
    eng.close()
    got = ev.take(3)
    assert ("closed", 1, errno.ECANCELED) in got
    job = next(e for e in got if e[0] == "done")
    assert job[:3] == ("done", 9, errno.ECANCELED)
    assert got.index(job) < got.index(("closed", 2, errno.ECANCELED))
    with pytest.raises(ValueError, match="closed"):
        eng.attach(3, s1.fileno())
    with pytest.raises(ValueError, match="not attached"):  # its "closed" was taken above
        eng.detach(1)


# -- detach ----------------------------------------------------------------------------------

def available(sock: socket.socket) -> bytes:
    sock.setblocking(False)
    try:
        return sock.recv(1 << 20)
    except BlockingIOError:
        return b""
    finally:
        sock.setblocking(True)


def test_detach(engine, pair):
    eng, ev = engine()
    srv, cli = pair()
    eng.attach(1, srv.fileno())
    cli.sendall(b"PV01\x03")  # a header begun; whatever of it the engine read is dropped
    ev.none(0.1)
    eng.detach(1)
    assert eng.info()["attached"] == 0
    cli.sendall(frame(b"mine"))
    ev.none()
    assert available(srv) in (frame(b"mine"), b"PV01\x03" + frame(b"mine"))
    with pytest.raises(ValueError, match="not attached"):
        eng.detach(1)
    eng.attach(1, srv.fileno())  # re-attached at a frame boundary, same id
    cli.sendall(frame(b"back"))
    assert ev.one() == ("frame", 1, 0, b"back")
    eng.detach(1)  # after a frame, before a job: e.g. the socket goes to another task
    cli.sendall(b"raw bytes")
    ev.none(0.1)
    assert available(srv) == b"raw bytes"


def test_detach_of_a_connection_the_engine_closed(engine, pair):
    eng, ev = engine()
    srv, cli = pair()
    eng.attach(1, srv.fileno())
    cli.close()
    assert select.select([eng.fileno()], [], [], 20)[0]  # posted, not taken yet
    eng.detach(1)  # the "closed" event is queued: nothing to do
    assert ev.one() == ("closed", 1, 0)


def test_detached_socket_is_never_read(engine, pair):
    # Once detach() returned, bytes sent later are the caller's, even if the engine was just
    # reading that socket (a frame cut in two sends races the detach).
    eng, ev = engine()
    for k in range(200):
        srv, cli = pair()
        eng.attach(k, srv.fileno())
        cli.sendall(b"PV01")
        eng.detach(k)
        cli.sendall(b"rest")
        select.select([srv], [], [], 5)
        assert available(srv) in (b"PV01rest", b"rest")
    ev.none(0.1)


# -- scale, mixing with completions() --------------------------------------------------------

def test_thousand_idle_connections(engine, pair):
    eng, ev = engine(idle_timeout=0.3)
    conns = [pair() for _ in range(1000)]
    for k, (srv, _) in enumerate(conns):
        eng.attach(k, srv.fileno())
    talkers = range(0, 1000, 7)
    for k in talkers:
        conns[k][1].sendall(frame(b"%d" % k, k))
    got = ev.take(len(talkers))
    assert sorted(got) == sorted(("frame", k, k, b"%d" % k) for k in talkers)
    ev.none(0.5)  # idle ones never time out
    assert eng.info()["attached"] == 1000
    for k in talkers:  # a reply each: those connections read headers again
        eng.submit(k, conns[k][0].fileno(), 0, READ, b"", prefix=b"k")
    done = ev.take(len(talkers))
    assert sorted(d[1] for d in done) == list(talkers)
    assert all(d[0] == "done" and d[2] == 0 for d in done)
    for k in talkers:
        assert conns[k][1].recv(1) == b"k"  # unread data would make the close a reset
    for _, cli in conns:
        cli.close()
    got = ev.take(1000)
    assert sorted(got) == sorted(("closed", k, 0) for k in range(1000))
    assert eng.info()["attached"] == 0


def test_completions_leaves_frames_for_events(engine, pair, stripe):
    fd, _, _ = stripe
    eng, ev = engine()
    srv, cli = pair()
    a, b = pair()
    eng.attach(1, srv.fileno())
    cli.sendall(frame(b"f"))
    eng.submit(1, a.fileno(), fd, READ, acc((FILE, 0, 10)))
    recv_exact(b, 10)
    deadline = time.monotonic() + 20
    jobs = []
    while not jobs:
        assert time.monotonic() < deadline
        select.select([eng.fileno()], [], [], 1)
        jobs = eng.completions()
    assert jobs[0][:3] == (1, 0, 10)
    r, _, _ = select.select([eng.fileno()], [], [], 5)  # the frame keeps fileno() readable
    assert r
    assert ev.one() == ("frame", 1, 0, b"f")
