"""pvfs._native.Engine: the I/O daemon's service loop, against real sockets and temp files.

Ordering tests control readiness instead of timing: a socket whose send buffer is full of
junk is not ready until the test drains it, so which jobs the engine may serve is decided
by the test, and the service order is read off t_start (strictly increasing per engine).
"""

from __future__ import annotations

import errno
import fcntl
import os
import random
import select
import socket
import struct
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pvfs import _native as nat

READ, WRITE = nat.OP_READ, nat.OP_WRITE
FILE, ZERO, DISCARD = nat.ACC_FILE, nat.ACC_ZERO, nat.ACC_DISCARD
INODE = 7
JOB = 4096


def acc(*triples: tuple[int, int, int]) -> bytes:
    return b"".join(struct.pack("<qqq", *t) for t in triples)


def wait_done(eng: nat.Engine, n: int, timeout: float = 20.0) -> dict[int, tuple]:
    """Collect n completions, keyed by job id."""
    got: dict[int, tuple] = {}
    deadline = time.monotonic() + timeout
    while len(got) < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"only {len(got)} of {n} completions: {got}")
        select.select([eng.fileno()], [], [], left)
        for c in eng.completions():
            got[c[0]] = c
    return got


def recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks, left = [], n
    while left:
        b = sock.recv(min(left, 1 << 20))
        if not b:
            raise AssertionError(f"EOF with {left} of {n} bytes missing")
        chunks.append(b)
        left -= len(b)
    return b"".join(chunks)


def tcp_pair() -> tuple[socket.socket, socket.socket]:
    """(server side, client side) of a loopback TCP connection."""
    with socket.create_server(("127.0.0.1", 0)) as lst:
        cli = socket.create_connection(lst.getsockname())
        srv, _ = lst.accept()
    return srv, cli


def fill(sock: socket.socket) -> int:
    """Fill sock's send buffer until it would block; returns the junk byte count."""
    sock.setblocking(False)
    n = 0
    try:
        while True:
            n += sock.send(b"j" * 65536)
    except BlockingIOError:
        pass
    sock.setblocking(True)
    return n


@pytest.fixture
def data_file(tmp_path):
    rnd = random.Random(1)
    data = rnd.randbytes(2 << 20)
    path = tmp_path / "stripe"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDWR)
    yield fd, data, path
    os.close(fd)


@pytest.fixture
def engine():
    engines = []

    def make(**kw):
        e = nat.Engine(**kw)
        engines.append(e)
        return e

    yield make
    for e in engines:
        e.close()


def expected_read(data: bytes, accesses) -> bytes:
    out = bytearray()
    for kind, off, n in accesses:
        if kind == FILE:
            chunk = data[off:off + n]
            out += chunk + bytes(n - len(chunk))
        else:
            out += bytes(n)
    return bytes(out)


# -- reads -----------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", nat.READ_MODES)
@pytest.mark.parametrize("mmap_window", [4096, 128 << 10])
def test_read_file_and_zero_accesses(engine, data_file, mode, mmap_window):
    fd, data, _ = data_file
    eng = engine(read_mode=mode, mmap_window=mmap_window)
    accs = [(FILE, 100, 5000), (ZERO, 0, 3000), (FILE, 500_001, 300_000), (FILE, 7, 0),
            (ZERO, 9, 1), (FILE, (2 << 20) - 10, 10)]
    srv, cli = tcp_pair()
    with srv, cli:
        eng.submit(1, srv.fileno(), fd, READ, acc(*accs), prefix=b"PREFIX", inode=INODE)
        body = recv_exact(cli, 6 + sum(a[2] for a in accs))
        (jid, err, nbytes, t0, t1, t2), = wait_done(eng, 1).values()
    assert body == b"PREFIX" + expected_read(data, accs)
    assert (jid, err, nbytes) == (1, 0, sum(a[2] for a in accs))
    assert 0 < t0 <= t1 <= t2
    info = eng.info()
    assert info["bytes_read"] == nbytes and info["completed"] == 1
    assert info["read_mode"] == mode


@pytest.mark.parametrize("mode", nat.READ_MODES)
def test_read_past_eof_pads_with_zeros(engine, tmp_path, mode):
    path = tmp_path / "short"
    path.write_bytes(b"x" * 10_000)
    fd = os.open(path, os.O_RDONLY)
    eng = engine(read_mode=mode)
    a, b = socket.socketpair()
    try:
        eng.submit(5, a.fileno(), fd, READ, acc((FILE, 5000, 20_000), (FILE, 50_000, 100)))
        body = recv_exact(b, 20_100)
        c = wait_done(eng, 1)[5]
    finally:
        a.close(), b.close(), os.close(fd)
    assert body == b"x" * 5000 + bytes(15_100)
    assert c[1:3] == (0, 20_100)


@pytest.mark.parametrize("mode", nat.READ_MODES)
def test_read_size_slot_and_clip_from_the_engines_fstat(engine, tmp_path, mode):
    # The engine examines the file as the job starts: its size lands in the prefix's slot
    # and file bytes past it are zeros (the daemon's trio thread no longer fstat()s).
    path = tmp_path / "sized"
    path.write_bytes(b"y" * 3000)
    fd = os.open(path, os.O_RDONLY)
    eng = engine(read_mode=mode)
    a, b = socket.socketpair()
    try:
        eng.submit(6, a.fileno(), fd, READ, acc((FILE, 1000, 4000), (FILE, 0, 10)),
                   prefix=b"HDR" + bytes(8), size_at=3, check=True)
        body = recv_exact(b, 11 + 4010)
        c = wait_done(eng, 1)[6]
    finally:
        a.close(), b.close(), os.close(fd)
    assert body == b"HDR" + struct.pack(">Q", 3000) + b"y" * 2000 + bytes(2000) + b"y" * 10
    assert c[1:3] == (0, 4010)


@pytest.mark.parametrize("op", [READ, WRITE])
def test_check_ends_a_job_on_an_unlinked_file_before_moving_a_byte(engine, tmp_path, op):
    path = tmp_path / "gone"
    path.write_bytes(b"z" * 100)
    fd = os.open(path, os.O_RDWR)
    os.unlink(path)
    eng = engine()
    a, b = socket.socketpair()
    try:
        if op == WRITE:
            b.sendall(b"w" * 50)
        eng.submit(7, a.fileno(), fd, op, acc((FILE, 0, 50)),
                   prefix=b"P" * 8 if op == READ else b"", check=True)
        c = wait_done(eng, 1)[7]
        b.setblocking(False)
        with pytest.raises(BlockingIOError):
            b.recv(1)  # nothing was sent
        if op == WRITE:
            assert a.recv(100) == b"w" * 50  # nothing was received
    finally:
        a.close(), b.close(), os.close(fd)
    assert c[1:3] == (nat.ERR_STALE, 0)


def test_size_at_must_name_a_reads_prefix_slot(engine, data_file):
    fd, _, _ = data_file
    eng = engine()
    with pytest.raises(ValueError):
        eng.submit(8, fd, fd, READ, acc((FILE, 0, 1)), prefix=b"short", size_at=0)
    with pytest.raises(ValueError):
        eng.submit(9, fd, fd, WRITE, acc((FILE, 0, 1)), size_at=0)


def test_read_peer_closes_mid_job(engine, data_file):
    fd, _, _ = data_file
    eng = engine()
    srv, cli = tcp_pair()
    with srv:
        eng.submit(2, srv.fileno(), fd, READ, acc((ZERO, 0, 64 << 20)))
        cli.recv(1000)
        cli.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        cli.close()  # RST
        c = wait_done(eng, 1)[2]
    assert c[1] in (errno.EPIPE, errno.ECONNRESET)
    assert 0 < c[2] < 64 << 20


# -- writes ----------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", nat.WRITE_MODES)
@pytest.mark.parametrize("pair", [tcp_pair, socket.socketpair])
def test_write_lands_at_offsets(engine, tmp_path, mode, pair):
    path = tmp_path / "w"
    path.write_bytes(bytes(1 << 20))
    fd = os.open(path, os.O_RDWR)
    eng = engine(write_mode=mode)
    rnd = random.Random(2)
    accs = [(FILE, 1000, 70_000), (DISCARD, 0, 5000), (FILE, 500_000, 200_000),
            (FILE, 0, 0), (FILE, (1 << 20) + 10, 30)]
    payload = [rnd.randbytes(n) for _, _, n in accs]
    srv, cli = pair()
    try:
        eng.submit(3, srv.fileno(), fd, WRITE, acc(*accs), inode=1)
        cli.sendall(b"".join(payload) + b"NEXT")
        c = wait_done(eng, 1)[3]
        assert srv.recv(4) == b"NEXT"  # the engine read exactly the job's bytes
    finally:
        srv.close(), cli.close(), os.close(fd)
    assert c[1:3] == (0, sum(n for _, _, n in accs))
    got = path.read_bytes()
    expect = bytearray((1 << 20) + 40)  # the last access extends the file past a hole
    for (kind, off, n), p in zip(accs, payload):
        if kind == FILE:
            expect[off:off + n] = p
    assert got == bytes(expect)
    assert eng.info()["bytes_written"] == c[2]


@pytest.mark.parametrize("mode", nat.WRITE_MODES)
def test_write_storage_error_reported_and_stream_drained(engine, tmp_path, mode):
    path = tmp_path / "ro"
    path.write_bytes(b"")
    fd = os.open(path, os.O_RDONLY)  # pwrite/splice fail with EBADF, like ENOSPC or EIO would
    eng = engine(write_mode=mode)
    srv, cli = tcp_pair()
    try:
        eng.submit(4, srv.fileno(), fd, WRITE,
                   acc((FILE, 0, 300_000), (DISCARD, 0, 10), (FILE, 1 << 20, 50_000)))
        cli.sendall(os.urandom(350_010) + b"NEXT")
        c = wait_done(eng, 1)[4]
        assert srv.recv(4) == b"NEXT"
    finally:
        srv.close(), cli.close(), os.close(fd)
    assert c[1:3] == (errno.EBADF, 350_010)
    assert path.stat().st_size == 0


def test_write_peer_closes_mid_job(engine, data_file):
    fd, _, _ = data_file
    eng = engine()
    srv, cli = tcp_pair()
    with srv:
        eng.submit(6, srv.fileno(), fd, WRITE, acc((FILE, 0, 100_000)))
        cli.sendall(b"y" * 1000)
        cli.close()
        c = wait_done(eng, 1)[6]
    assert c[1:3] == (errno.ECONNRESET, 1000)


# -- timeouts, close, fds --------------------------------------------------------------------

def test_idle_timeout(engine, data_file):
    fd, _, _ = data_file
    eng = engine(idle_timeout=0.2)
    (s1, c1), (s2, c2) = socket.socketpair(), socket.socketpair()
    try:
        eng.submit(1, s1.fileno(), fd, WRITE, acc((FILE, 0, 10)))   # the peer sends nothing
        eng.submit(2, s2.fileno(), fd, READ, acc((ZERO, 0, 64 << 20)))  # the peer never reads
        got = wait_done(eng, 2)
    finally:
        for s in (s1, c1, s2, c2):
            s.close()
    assert got[1][1] == errno.ETIMEDOUT and got[2][1] == errno.ETIMEDOUT
    assert got[2][2] > 0


def test_close_cancels_unfinished_jobs(data_file):
    fd, _, _ = data_file
    eng = nat.Engine()
    a, b = socket.socketpair()
    with a, b:
        eng.submit(9, a.fileno(), fd, READ, acc((ZERO, 0, 64 << 20)))
        while eng.info()["active"] == 0:
            time.sleep(0.01)
        eng.close()
        eng.close()  # idempotent
        c = wait_done(eng, 1)[9]
        assert c[1] == errno.ECANCELED
        info = eng.info()
        assert info["closed"] and info["completed"] == 1
        with pytest.raises(ValueError, match="closed"):
            eng.submit(10, a.fileno(), fd, READ, acc((ZERO, 0, 1)))
        with pytest.raises(ValueError, match="closed"):
            eng.algorithm = "opt2"


def test_fds_left_open_and_blocking_mode_restored(engine, data_file):
    fd, data, _ = data_file
    eng = engine()
    a, b = socket.socketpair()
    with a, b:
        assert a.getblocking()
        eng.submit(1, a.fileno(), fd, READ, acc((FILE, 0, 1000)))
        assert recv_exact(b, 1000) == data[:1000]
        wait_done(eng, 1)
        assert not fcntl.fcntl(a.fileno(), fcntl.F_GETFL) & os.O_NONBLOCK
        os.fstat(fd)
        a.sendall(b"still open")
        assert b.recv(10) == b"still open"


def test_job_errors_for_bad_fds(engine, data_file):
    fd, _, _ = data_file
    eng = engine()
    eng.submit(1, fd, fd, READ, acc((ZERO, 0, 10)))        # a regular file: epoll says EPERM
    eng.submit(2, 10_000, fd, READ, acc((ZERO, 0, 10)))    # no such fd
    a, b = socket.socketpair()
    with a, b:
        eng.submit(3, a.fileno(), fd, READ, acc())         # nothing to move: done at once
        got = wait_done(eng, 3)
    assert got[1][1] == errno.EPERM
    assert got[2][1] == errno.EBADF
    assert got[3][1:3] == (0, 0)


# -- validation ------------------------------------------------------------------------------

def test_argument_validation(engine, data_file):
    fd, _, _ = data_file
    eng = engine()
    bad = [
        {"accesses": b"x" * 23},
        {"accesses": acc((FILE, -1, 10))},
        {"accesses": acc((FILE, 0, -10))},
        {"accesses": acc((FILE, 2**63 - 5, 10))},
        {"accesses": acc((FILE, 0, 2**62), (FILE, 0, 2**62), (FILE, 0, 2**62))},
        {"accesses": acc((DISCARD, 0, 10))},
        {"accesses": acc((3, 0, 10))},
        {"accesses": acc((ZERO, 0, 10)), "op": WRITE},
        {"accesses": acc((FILE, 0, 10)), "op": WRITE, "prefix": b"no"},
        {"accesses": acc((FILE, 0, 10)), "op": 2},
        {"accesses": acc((FILE, 0, 10)), "inode": -1},
        {"accesses": acc((FILE, 0, 10)), "sock_fd": -1},
    ]
    for kw in bad:
        args = {"job_id": 1, "sock_fd": 0, "file_fd": fd, "op": READ, "accesses": b""}
        args.update(kw)
        with pytest.raises(ValueError):
            eng.submit(**args)
    for name in ("opt5", "OPT1", "rs", ""):
        with pytest.raises(ValueError):
            eng.algorithm = name
    with pytest.raises(ValueError):
        eng.algorithm = 1
    for w in (0, -5):
        with pytest.raises(ValueError):
            eng.window = w
    eng.window = 1 << 20
    assert eng.window == 1 << 20 and eng.info()["window"] == 1 << 20
    with pytest.raises(ValueError):
        nat.Engine(algorithm="opt9")
    with pytest.raises(ValueError):
        nat.Engine(read_mode="splice")
    with pytest.raises(ValueError):
        nat.Engine(idle_timeout=0)
    with pytest.raises(ValueError):
        nat.Engine(window=0)
    assert eng.info()["queued"] == 0


def _valid(raw: bytes, op: int) -> bool:
    if len(raw) % 24:
        return False
    total = 0
    for kind, off, n in struct.iter_unpack("<qqq", raw):
        if kind not in ((FILE, ZERO) if op == READ else (FILE, DISCARD)):
            return False
        if off < 0 or n < 0 or off + n >= 2**63 or total + n >= 2**63:
            return False
        total += n
    return True


_closed = nat.Engine()
_closed.close()


@settings(max_examples=400, deadline=None)
@given(raw=st.one_of(
    st.binary(max_size=200),
    st.lists(st.tuples(st.integers(-1, 3), st.integers(-2**63, 2**63 - 1),
                       st.integers(-2**63, 2**63 - 1)), max_size=6)
      .map(lambda ts: acc(*ts)),
    st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2**63 - 1), st.integers(0, 2**62)),
             max_size=4).map(lambda ts: acc(*ts)),
), op=st.sampled_from([READ, WRITE]))
def test_accesses_validation_never_crashes(raw, op):
    # On a closed engine a well-formed job is refused only because the engine is closed.
    with pytest.raises(ValueError) as exc:
        _closed.submit(1, 0, 0, op, raw)
    assert ("closed" in str(exc.value)) == _valid(raw, op)
