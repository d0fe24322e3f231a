"""pvfs._native.stripe_transfer: one request split over fake daemons, against the Python
reference split (layout/intersect.py) -- odd alignments, many regions, a daemon failing or
silent while the others finish, the arguments checked before any I/O (issue 30)."""

from __future__ import annotations

import errno
import random
import socket
import struct
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_native_engine import recv_exact  # tests/unit is on sys.path

from pvfs import _native as nat
from pvfs.client.datapath import pack_regions, touched_ranks
from pvfs.layout.intersect import split
from pvfs.layout.stripe import Stripe
from pvfs.protocol.framing import decode_header, encode_header, frame, parse_prefix


def packed(regions: list[tuple[int, int]]) -> bytes:
    return b"".join(struct.pack("<qq", o, n) for o, n in regions)


class FakeDaemon(threading.Thread):
    """One share's daemon: reads the request frame (and a write's bulk); answers a read with
    the bytes `content` holds at the pieces' local offsets, a write with its byte count.
    `fail`: "close" shuts the connection after the request, "silent" never answers,
    "half" sends half of a read's bulk and closes."""

    def __init__(self, sock: socket.socket, rank: int, content: bytes = b"",
                 fail: str | None = None):
        super().__init__(daemon=True)
        self.sock, self.rank, self.content, self.fail = sock, rank, content, fail
        self.header: dict | None = None
        self.prefix_bulk = self.bulk = None
        self.start()

    def run(self) -> None:
        try:
            hlen, self.prefix_bulk = parse_prefix(recv_exact(self.sock, 16))
            self.header = decode_header(recv_exact(self.sock, hlen))
            self.bulk = recv_exact(self.sock, self.prefix_bulk)
            if self.fail == "close":
                self.sock.close()
                return
            if self.fail == "silent":
                time.sleep(3)
                return
            if self.header["op"] == "write":
                self.sock.sendall(frame({"nbytes": len(self.bulk)}))
                return
            out = self.read_bulk()
            if self.fail == "half":
                self.sock.sendall(frame({"local_size": 0}, len(out)) + out[:len(out) // 2])
                self.sock.close()
                return
            self.sock.sendall(frame({"local_size": len(self.content)}, len(out)) + out)
        except OSError:
            pass

    def read_bulk(self) -> bytes:
        stripe = Stripe(*self.header["stripe"])
        regions = self.header["desc"][1]
        pairs = list(zip(regions[::2], regions[1::2]))
        return b"".join(self.content[local:local + n].ljust(n, b"\0")
                        for _, local, n in split(pairs, stripe)[self.rank])


def run_split(regions: list[tuple[int, int]], stripe: Stripe, direction: int, buf,
              contents: dict[int, bytes] | None = None, fail: dict[int, str] | None = None,
              timeout: float = 5.0):
    """stripe_transfer against one fake daemon per touched rank; (results, daemons)."""
    ref = split(regions, stripe)
    pairs, daemons = {}, {}
    for rank, pieces in enumerate(ref):
        if pieces:
            pairs[rank] = socket.socketpair()
    try:
        for rank, (_, srv) in pairs.items():
            daemons[rank] = FakeDaemon(srv, rank, (contents or {}).get(rank, b""),
                                       (fail or {}).get(rank))
        socks = [pairs[r][0].fileno() if r in pairs else -1 for r in range(stripe.pcount)]
        flat = [x for pair in regions for x in pair]
        body = encode_header({"op": "write" if direction else "read", "ino": 7,
                              "stripe": stripe.to_wire(), "desc": ["r", flat]})
        t0 = time.monotonic()
        results = nat.stripe_transfer(socks, body, buf, packed(regions), stripe.ssize,
                                      direction, timeout)
        run_split.elapsed = time.monotonic() - t0
        for d in daemons.values():
            d.join(5)
    finally:
        for a, b in pairs.values():
            a.close()
            b.close()
    return results, daemons


def gather(buf: bytes, pieces) -> bytes:
    return b"".join(buf[b:b + n] for b, _, n in pieces)


def model_read(regions, stripe: Stripe, contents: dict[int, bytes]) -> bytes:
    """The bytes a read of `regions` returns: each share's content at the local offsets,
    zeros past its end (holes and short shares)."""
    out = bytearray()
    ss, pc = stripe.ssize, stripe.pcount
    for off, n in regions:
        for pos in range(off, off + n):
            unit, within = divmod(pos, ss)
            local = (unit // pc) * ss + within
            c = contents.get(unit % pc, b"")
            out.append(c[local] if local < len(c) else 0)
    return bytes(out)


def reach(pieces) -> int:
    return max(local + n for _, local, n in pieces)


regions_st = st.lists(st.tuples(st.integers(0, 5000), st.integers(0, 700)), min_size=1,
                      max_size=6)
stripe_st = st.builds(Stripe, st.just(0), st.integers(1, 5), st.sampled_from([1, 7, 512, 1000]))


@settings(max_examples=60, deadline=None)
@given(regions=regions_st, stripe=stripe_st, seed=st.integers(0, 1 << 30))
def test_write_sends_each_rank_its_stream(regions, stripe, seed):
    total = sum(n for _, n in regions)
    data = random.Random(seed).randbytes(total)
    results, daemons = run_split(regions, stripe, 1, data)
    ref = split(regions, stripe)
    for rank in range(stripe.pcount):
        if not ref[rank]:
            assert results[rank] is None and rank not in daemons
            continue
        err, raw, r = results[rank]
        stream = gather(data, ref[rank])
        assert (err, decode_header(raw), r) == (0, {"nbytes": len(stream)}, reach(ref[rank]))
        assert daemons[rank].prefix_bulk == len(stream) and daemons[rank].bulk == stream


@settings(max_examples=60, deadline=None)
@given(regions=regions_st, stripe=stripe_st, seed=st.integers(0, 1 << 30))
def test_read_scatters_each_rank_into_place(regions, stripe, seed):
    """Shares of random lengths: a read past a share's end gets its zeros from the daemon
    (holes, short reads at EOF are the daemon's part; the placement is ours)."""
    rng = random.Random(seed)
    contents = {r: rng.randbytes(rng.randrange(0, 3000)) for r in range(stripe.pcount)}
    total = sum(n for _, n in regions)
    buf = bytearray(b"\xee" * (total + 3))
    results, daemons = run_split(regions, stripe, 0, buf, contents)
    assert bytes(buf[:total]) == model_read(regions, stripe, contents)
    assert buf[total:] == b"\xee" * 3  # past the regions: untouched
    ref = split(regions, stripe)
    for rank in range(stripe.pcount):
        if ref[rank]:
            assert results[rank][0] == 0 and results[rank][2] == reach(ref[rank])
            assert daemons[rank].prefix_bulk == 0 and daemons[rank].bulk == b""


def test_large_request_over_four_ranks_odd_alignment():
    stripe = Stripe(0, 4, 65536)
    regions = [(65536 * 3 + 17, (16 << 20) + 3)]
    data = random.Random(5).randbytes(regions[0][1])
    results, daemons = run_split(regions, stripe, 1, memoryview(data))
    ref = split(regions, stripe)
    for rank in range(4):
        assert daemons[rank].bulk == gather(data, ref[rank])
        assert results[rank][0] == 0


@pytest.mark.parametrize("fail", ["close", "half"])
def test_one_daemon_failing_leaves_the_others_done(fail):
    stripe = Stripe(0, 4, 4096)
    regions = [(100, 4 * 4096 * 3)]
    rng = random.Random(9)
    contents = {r: rng.randbytes(5 * 4096) for r in range(4)}
    buf = bytearray(regions[0][1])
    results, _ = run_split(regions, stripe, 0, buf, contents, fail={2: fail})
    assert results[2][0] == errno.ECONNRESET and results[2][1] is None
    want = model_read(regions, stripe, contents)
    for rank, pieces in enumerate(split(regions, stripe)):
        if rank != 2:
            assert results[rank][0] == 0
            assert gather(buf, pieces) == gather(want, pieces)


def test_silent_daemon_times_out_the_others_finish():
    stripe = Stripe(0, 3, 512)
    regions = [(0, 512 * 9)]
    data = bytes(range(256)) * 18
    results, _ = run_split(regions, stripe, 1, data, fail={1: "silent"}, timeout=0.5)
    assert run_split.elapsed < 2.5  # the deadline ended the call, not the daemon
    assert results[1][0] == errno.ETIMEDOUT
    assert results[0][0] == 0 and results[2][0] == 0


def test_untouched_ranks_need_no_socket():
    a, b = socket.socketpair()
    with a, b:
        d = FakeDaemon(b, 1)
        res = nat.stripe_transfer([None, a.fileno(), -1, -1], encode_header(
            {"op": "write", "ino": 1, "stripe": [0, 4, 512], "desc": ["r", [512, 10]]}),
            b"x" * 10, packed([(512, 10)]), 512, 1, 5.0)
        d.join(5)
    assert res[0] is None and res[2] is None and res[3] is None
    assert res[1][0] == 0 and d.bulk == b"x" * 10 and res[1][2] == 10


def test_argument_validation():
    a, b = socket.socketpair()
    with a, b:
        fd = a.fileno()
        head = encode_header({"op": "read"})
        one = packed([(0, 100)])
        cases = [
            (([fd, -1], head, bytearray(100), packed([(0, 1024)]), 512, 0), ValueError),  # short
            (([-1], head, bytearray(100), one, 512, 0), ValueError),       # no socket
            (([fd, fd], head, bytearray(1024), packed([(0, 1024)]), 512, 0), ValueError),
            (([], head, bytearray(100), one, 512, 0), ValueError),         # no ranks
            (([fd], head, bytearray(100), one, 0, 0), ValueError),         # ssize 0
            (([fd], head, bytearray(100), one, 512, 2), ValueError),       # direction
            (([fd], b"", bytearray(100), one, 512, 0), ValueError),        # empty header
            (([fd], head, bytearray(100), one[:-1], 512, 0), ValueError),  # not pairs
            (([fd], head, bytearray(100), packed([(-1, 100)]), 512, 0), ValueError),
            (([fd], head, bytearray(100), packed([(1 << 62, 1)]), 512, 0), ValueError),
            (([fd], head, bytes(100), one, 512, 0), TypeError),            # read-only buf
            (([fd], head, 5, one, 512, 1), TypeError),
            (([fd], head, bytes(100), one, 512, 1, -1.0), ValueError),     # timeout
            ((["x"], head, bytes(100), one, 512, 1), TypeError),
        ]
        for args, exc in cases:
            if len(args) == 6:
                args = (*args, 1.0)
            with pytest.raises(exc):
                nat.stripe_transfer(*args)
        a.setblocking(False)
        with pytest.raises(BlockingIOError):
            a.recv(1)  # nothing was sent by any failed call


@settings(max_examples=300, deadline=None)
@given(regions=st.lists(st.tuples(st.integers(0, 1 << 40), st.integers(0, 5000)), max_size=6),
       stripe=stripe_st)
def test_touched_ranks_are_the_ranks_with_pieces(regions, stripe):
    """DataPath takes a connection for exactly the ranks stripe_transfer needs one for."""
    assert touched_ranks(regions, stripe) == [r for r, p in enumerate(split(regions, stripe)) if p]
    assert pack_regions(regions) == packed(regions)
