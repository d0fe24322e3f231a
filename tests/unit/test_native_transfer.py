"""pvfs._native.transfer: the client's concurrent scatter/gather against small fake servers."""

from __future__ import annotations

import errno
import fcntl
import itertools
import os
import random
import socket
import struct
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_native_engine import recv_exact, tcp_pair  # tests/unit is on sys.path

from pvfs import _native as nat
from pvfs.protocol.framing import PREFIX, decode_header, encode_header, frame, parse_prefix


def segs(*pairs: tuple[int, int]) -> bytes:
    return b"".join(struct.pack("<qq", o, n) for o, n in pairs)


class FakeServer(threading.Thread):
    """Answers one request on sock: reads the frame (and its bulk), sends `reply` back."""

    def __init__(self, sock, reply: bytes | None, close_after: int | None = None):
        super().__init__(daemon=True)
        self.sock, self.reply, self.close_after = sock, reply, close_after
        self.header = self.bulk = None
        self.start()

    def run(self):
        try:
            hlen, blen = parse_prefix(recv_exact(self.sock, 16))
            self.header = decode_header(recv_exact(self.sock, hlen))
            self.bulk = recv_exact(self.sock, blen)
            if self.reply is not None:
                data = self.reply if self.close_after is None else self.reply[:self.close_after]
                self.sock.sendall(data)
                if self.close_after is not None:
                    self.sock.close()
        except OSError:
            pass


def read_reply(hdr: dict, bulk: bytes) -> bytes:
    return frame(hdr, len(bulk)) + bulk


def test_read_scatters_into_buffer():
    buf = bytearray(100_000)
    sg = [(50_000, 10_000), (0, 1000), (20_000, 25_000), (99_999, 1), (5, 0)]
    bulk = random.Random(1).randbytes(sum(n for _, n in sg))
    a, b = socket.socketpair()
    with a, b:
        srv = FakeServer(b, read_reply({"ok": 1}, bulk))
        res = nat.transfer([(a.fileno(), frame({"op": "read"}), buf, segs(*sg), 0)], 5.0)
        srv.join()
    assert res == [(0, encode_header({"ok": 1}))]
    assert srv.header == {"op": "read"} and srv.bulk == b""
    expect, pos = bytearray(100_000), 0
    for off, n in sg:
        expect[off:off + n] = bulk[pos:pos + n]
        pos += n
    assert buf == expect


def test_write_gathers_from_buffer():
    data = random.Random(2).randbytes(1 << 20)
    sg = [(1000, 300_000), (0, 10), (700_000, 300_000)]
    total = sum(n for _, n in sg)
    srv_s, cli = tcp_pair()
    with srv_s, cli:
        srv = FakeServer(srv_s, frame({"written": total}))
        res = nat.transfer([(cli.fileno(), frame({"op": "write"}, total), memoryview(data),
                             segs(*sg), 1)], 5.0)
        srv.join()
    assert res == [(0, encode_header({"written": total}))]
    assert srv.bulk == b"".join(data[o:o + n] for o, n in sg)


def test_concurrent_reads_and_writes():
    rnd = random.Random(3)
    reqs, servers, checks, socks = [], [], [], []
    for i in range(8):
        s, c = tcp_pair()
        socks += [s, c]
        size = rnd.randrange(1, 4 << 20)
        if i % 2 == 0:
            buf = bytearray(size + 100)
            bulk = rnd.randbytes(size)
            servers.append(FakeServer(s, read_reply({"i": i}, bulk)))
            reqs.append((c.fileno(), frame({"i": i}), buf, segs((100, size)), 0))
            checks.append((buf, bulk))
        else:
            data = rnd.randbytes(size)
            servers.append(FakeServer(s, frame({"i": i})))
            reqs.append((c.fileno(), frame({"i": i}, size), data, segs((0, size)), 1))
            checks.append((None, data))
    try:
        res = nat.transfer(reqs, 30.0)
        for srv in servers:
            srv.join()
    finally:
        for s in socks:
            s.close()
    assert res == [(0, encode_header({"i": i})) for i in range(8)]
    for srv, (buf, want) in zip(servers, checks):
        if buf is None:
            assert srv.bulk == want
        else:
            assert buf[100:] == want


def test_timeout_does_not_stop_the_others():
    (a, b), (c, d) = socket.socketpair(), socket.socketpair()
    with a, b, c, d:
        silent = FakeServer(b, None)
        ok = FakeServer(d, frame({"ok": 1}))
        res = nat.transfer([(a.fileno(), frame({"x": 1}), None, b"", 0),
                            (c.fileno(), frame({"x": 2}), None, b"", 0)], 0.3)
        silent.join(), ok.join()
    assert res == [(errno.ETIMEDOUT, None), (0, encode_header({"ok": 1}))]


HDR = encode_header({"ok": 1})


@pytest.mark.parametrize("reply,direction,nseg", [
    (PREFIX.pack(b"PV02", len(HDR), 0) + HDR, 0, 10),        # bad magic
    (PREFIX.pack(b"PV01", 0, 0), 0, 10),                      # empty header
    (PREFIX.pack(b"PV01", (1 << 20) + 1, 0), 0, 10),          # header too long
    (PREFIX.pack(b"PV01", len(HDR), 9) + HDR + bytes(9), 0, 10),    # short bulk
    (PREFIX.pack(b"PV01", len(HDR), 11) + HDR + bytes(11), 0, 10),  # oversized bulk
    (PREFIX.pack(b"PV01", len(HDR), 3) + HDR + bytes(3), 1, 10),    # bulk in a write reply
    (PREFIX.pack(b"PV01", len(HDR), 3) + HDR + bytes(3), 0, 0),     # bulk, no segments
])
def test_bad_reply_frames_are_eproto(reply, direction, nseg):
    buf = bytearray(10)
    a, b = socket.socketpair()
    with a, b:
        srv = FakeServer(b, reply)
        head = frame({"x": 1}, nseg if direction == 1 else 0)
        res = nat.transfer([(a.fileno(), head, buf, segs((0, nseg)), direction)], 5.0)
        srv.join()
    assert res == [(errno.EPROTO, None)]


def test_error_reply_without_bulk_leaves_buffer():
    buf = bytearray(b"u" * 50)
    a, b = socket.socketpair()
    with a, b:
        srv = FakeServer(b, frame({"err": errno.ENOENT, "msg": "gone"}))
        res = nat.transfer([(a.fileno(), frame({}), buf, segs((0, 50)), 0)], 5.0)
        srv.join()
    assert res == [(0, encode_header({"err": errno.ENOENT, "msg": "gone"}))]
    assert buf == b"u" * 50


def test_peer_closes_mid_reply():
    a, b = socket.socketpair()
    with a:
        srv = FakeServer(b, read_reply({"ok": 1}, bytes(1000)), close_after=16 + len(HDR) + 10)
        res = nat.transfer([(a.fileno(), frame({}), bytearray(1000), segs((0, 1000)), 0)], 5.0)
        srv.join()
    assert res == [(errno.ECONNRESET, None)]


def test_peer_gone_before_request():
    a, b = socket.socketpair()
    b.close()
    with a:
        res = nat.transfer([(a.fileno(), frame({}, 1 << 20), bytes(1 << 20),
                             segs((0, 1 << 20)), 1)], 5.0)
    assert res[0][0] in (errno.EPIPE, errno.ECONNRESET)


@pytest.mark.parametrize("blocking", [True, False])
def test_socket_mode_restored(blocking):
    a, b = socket.socketpair()
    with a, b:
        a.setblocking(blocking)
        srv = FakeServer(b, frame({"ok": 1}))
        assert nat.transfer([(a.fileno(), frame({}), None, b"", 0)], 5.0)[0][0] == 0
        srv.join()
        nonblock = bool(fcntl.fcntl(a.fileno(), fcntl.F_GETFL) & os.O_NONBLOCK)
        assert nonblock is not blocking


def test_socket_mode_left_alone_during_the_call():
    # Every socket call of the exchange says MSG_DONTWAIT: a blocking socket is not made
    # non-blocking while the call runs (no fcntl(2) round per socket and call), so nothing
    # else holding the socket sees its mode change.
    a, b = socket.socketpair()
    seen = []

    class Checking(FakeServer):
        def run(self):
            hlen, blen = parse_prefix(recv_exact(self.sock, 16))
            recv_exact(self.sock, hlen + blen)
            # The client has sent everything and waits for this reply.
            seen.append(bool(fcntl.fcntl(a.fileno(), fcntl.F_GETFL) & os.O_NONBLOCK))
            self.sock.sendall(self.reply)

    with a, b:
        a.setblocking(True)
        srv = Checking(b, frame({"ok": 1}))
        assert nat.transfer([(a.fileno(), frame({}, 10), bytes(10), segs((0, 10)), 1)],
                            5.0) == [(0, HDR)]
        srv.join()
    assert seen == [False]


@pytest.mark.parametrize("hdr_fields", [1, 100])   # a header within the first recv, one past it
@pytest.mark.parametrize("size", [1, 7, 150, 239, 240, 241, 5000])
def test_header_and_first_bulk_bytes_in_one_recv(hdr_fields, size):
    # The reply's first recv takes the header and the bulk's first bytes together; those
    # are copied into their places across the segments.
    hdr = {f"k{i}": i for i in range(hdr_fields)}
    bulk = random.Random(size).randbytes(size)
    cuts = sorted({0, size, *random.Random(size + 1).sample(range(size + 1), min(size, 4))})
    sg = [(3 * o + 1, e - o) for o, e in itertools.pairwise(cuts)]   # gaps between segments
    buf = bytearray(3 * size + 8)
    a, b = socket.socketpair()
    with a, b:
        srv = FakeServer(b, read_reply(hdr, bulk))
        res = nat.transfer([(a.fileno(), frame({}), buf, segs(*sg), 0)], 5.0)
        srv.join()
    assert res == [(0, encode_header(hdr))]
    expect, pos = bytearray(len(buf)), 0
    for off, n in sg:
        expect[off:off + n] = bulk[pos:pos + n]
        pos += n
    assert buf == expect


@pytest.mark.parametrize("direction,bulk", [(1, b""), (0, b"abc")])
def test_bytes_past_the_reply_are_eproto(direction, bulk):
    # One request is in flight on a connection: bytes after its reply mean the stream is out
    # of step, reported now rather than left for the next request on the pooled connection.
    a, b = socket.socketpair()
    with a, b:
        srv = FakeServer(b, read_reply({"ok": 1}, bulk) + b"extra")
        res = nat.transfer([(a.fileno(), frame({}, 0 if not direction else 3), bytearray(3),
                             segs((0, 3)), direction)], 5.0)
        srv.join()
    assert res == [(errno.EPROTO, None)]


def test_argument_validation():
    a, b = socket.socketpair()
    fd = a.fileno()
    with a, b:
        cases = [
            (ValueError, [(fd, b"", bytearray(10), segs((5, 6)), 0)]),    # past the end
            (ValueError, [(fd, b"", bytearray(10), segs((-1, 2)), 0)]),
            (ValueError, [(fd, b"", bytearray(10), segs((2, -1)), 0)]),
            (ValueError, [(fd, b"", bytearray(10), segs((2**63 - 1, 2)), 0)]),
            (ValueError, [(fd, b"", bytearray(10), b"\0" * 15, 0)]),
            (ValueError, [(fd, b"", None, segs((0, 1)), 0)]),
            (ValueError, [(fd, b"", None, b"", 2)]),
            (ValueError, [(-1, b"", None, b"", 0)]),
            (ValueError, [(fd, b"", None, b"", 0), (fd, b"", None, b"", 1)]),
            (TypeError, [(fd, b"", b"read-only", segs((0, 1)), 0)]),
            (TypeError, [(fd, b"", memoryview(bytearray(10))[::2], b"", 0)]),
            (TypeError, [(fd, "head", None, b"", 0)]),
            (TypeError, [(fd, b"", None, b"")]),
            (TypeError, [[fd, b"", None, b"", 0]]),
            (TypeError, [None]),
        ]
        for exc, reqs in cases:
            with pytest.raises(exc):
                nat.transfer(reqs, 1.0)
        with pytest.raises(ValueError):
            nat.transfer([], -1.0)
        with pytest.raises(TypeError):
            nat.transfer(5, 1.0)
        assert nat.transfer([], 1.0) == []
        # Nothing was sent by the refused calls.
        b.setblocking(False)
        with pytest.raises(BlockingIOError):
            b.recv(1)


def _valid(raw: bytes, size: int) -> bool:
    if len(raw) % 16:
        return False
    return all(o >= 0 and n >= 0 and o + n <= size for o, n in struct.iter_unpack("<qq", raw))


_pair = socket.socketpair()


@settings(max_examples=300, deadline=None)
@given(raw=st.one_of(
    st.binary(max_size=80),
    st.lists(st.tuples(st.integers(-2**63, 2**63 - 1), st.integers(-2**63, 2**63 - 1)),
             max_size=4).map(lambda ps: segs(*ps)),
    st.lists(st.tuples(st.integers(0, 70), st.integers(0, 70)), max_size=5)
      .map(lambda ps: segs(*ps)),
), direction=st.sampled_from([0, 1]))
def test_segment_validation_never_crashes(raw, direction):
    # A valid request with an empty head and timeout 0 sends at most its bulk and times out
    # waiting for the reply.
    req = (_pair[0].fileno(), b"", bytearray(64), raw, direction)
    if _valid(raw, 64):
        assert nat.transfer([req], 0.0) == [(errno.ETIMEDOUT, None)]
        _pair[1].setblocking(False)
        try:
            while _pair[1].recv(65536):
                pass
        except BlockingIOError:
            pass
    else:
        with pytest.raises(ValueError):
            nat.transfer([req], 0.0)
