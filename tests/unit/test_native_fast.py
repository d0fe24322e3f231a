"""The engine's fast path (csrc/fast.c): read/write headers served without Python.

Two tiers. ``fast_plan`` (the parse and the intersection, serving nothing) is held against
Python's own reading of the same bytes -- ``decode_header``, ``schema.check`` and
``pieces_for_rank`` -- on generated and on fuzzed headers: whatever C accepts, Python must
accept with the same meaning, and no input may crash it. Then real engines over real sockets:
a granted request is served by the engine alone (no frame posted, a record left), and every
case the fast path must leave to Python is posted as a frame as before.
"""

from __future__ import annotations

import os
import struct
from types import SimpleNamespace

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_native_conn import Events, frame
from test_native_engine import recv_exact, tcp_pair

from pvfs import _native as nat
from pvfs.layout.intersect import pieces_for_rank, stream_length
from pvfs.protocol import schema
from pvfs.protocol.framing import FrameError, decode_header
from pvfs.protocol.schema import IOD_SCHEMAS

NIODS = 4


def python_plan(raw: bytes, bulk_len: int, index: int, niods: int):
    """What the Python path (server.on_frame, data.start_*) makes of the header: the same
    shape as fast_plan's, or None where it would not serve it as a plain read or write."""
    try:
        op, f = schema.check(IOD_SCHEMAS, decode_header(raw))
    except (FrameError, ValueError):
        return None
    if op not in ("read", "write") or f.get("hint") is not None or f.get("mtime_ns") is not None:
        return None
    stripe = f["stripe"]
    if stripe.pcount > niods or stripe.base >= niods:
        return None
    rank = stripe.rank_of_iod(index, niods)
    if rank is None:
        return None
    pieces = pieces_for_rank(f["desc"], stripe, rank)
    nbytes = stream_length(pieces)
    if nbytes == 0 or (op == "write" and nbytes != bulk_len) or (op == "read" and bulk_len):
        return None
    return {"op": op, "ino": f["ino"], "stripe": (stripe.base, stripe.pcount, stripe.ssize),
            "regions": [tuple(r) for r in f["desc"].expand()], "pieces": pieces,
            "nbytes": nbytes}


def header(op="read", ino=7, stripe=(0, 4, 65536), regions=((0, 1 << 20),), **extra) -> bytes:
    flat = [x for r in regions for x in r]
    return msgpack.packb({"op": op, "ino": ino, "stripe": list(stripe),
                          "desc": ["r", flat], **extra}, use_bin_type=True)


# ---------------------------------------------------------------------------- fast_plan
def test_plan_matches_python_on_a_plain_read():
    raw = header()
    for index in range(NIODS):
        got = nat.fast_plan(raw, 0, index, NIODS)
        assert got == python_plan(raw, 0, index, NIODS)
        assert got["nbytes"] == 256 * 1024 and len(got["pieces"]) == 4


@pytest.mark.parametrize("raw, bulk", [
    (header(hint={"size": 1, "requests": 1, "regions": 1, "range": 1}), 0),  # rs' hint
    (header("write", mtime_ns=5), 262144),            # a write that sets the mtime
    (header("write"), 1000),                          # bulk is not the stream
    (header("read"), 5),                              # bulk on a read
    (header("read", fresh=True), 0),                  # fresh is a write's
    (header(regions=((0, 0),)), 0),                   # nothing to move
    (header(stripe=(0, 2, 65536)), 0),                # (index 3 holds no share)
    (header(stripe=(0, 8, 65536)), 0),                # pcount over niods
    (header(stripe=(0, 4, 100)), 0),                  # ssize under 512
    (header(ino=0), 0),
    (header(regions=((-1, 5),)), 0),
    (header(regions=((1 << 62, 1),)), 0),             # past the largest offset
    (header(op="size"), 0),
    (msgpack.packb({"op": "read", "ino": 7, "stripe": [0, 4, 65536],
                    "desc": ["s", 0, 10, 20, 3]}), 0),   # strided: Python's
    (header() + b"\x00", 0),                          # trailing bytes
    (header()[:-3], 0),                               # truncated
    (header(cred=[0, 0, list(range(65))]), 0),        # too many groups
    (header(extra_field=1), 0),
])
def test_plan_declines_what_python_must_answer(raw, bulk):
    assert nat.fast_plan(raw, bulk, 3, NIODS) is None


def test_plan_takes_fresh_and_cred_of_a_write():
    raw = header("write", fresh=True, cred=[1000, 1000, [4, 27]])
    got = nat.fast_plan(raw, 262144, 1, NIODS)
    assert got is not None and got == python_plan(raw, 262144, 1, NIODS)


def test_plan_declines_a_repeated_key():
    # {"op": "read", "op": "write", ...}: msgpack lets a map repeat a key; Python keeps the
    # last. C declines rather than guess.
    body = header()
    dup = bytes([body[0] + 1]) + b"\xa2op\xa5write" + body[1:]
    assert nat.fast_plan(dup, 0, 0, NIODS) is None


ints = st.one_of(st.integers(0, 1 << 20), st.integers(0, 1 << 63), st.integers(-5, 5),
                 st.sampled_from([1 << 62, (1 << 62) - 1, (1 << 63) - 1, 1 << 32]))
stripes = st.tuples(st.integers(-1, 5), st.integers(-1, 6),
                    st.sampled_from([511, 512, 4096, 65536, 1 << 20, 1 << 30, (1 << 30) + 1]))
region_lists = st.lists(st.tuples(st.integers(0, 1 << 24), st.integers(0, 1 << 20)),
                        max_size=6)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(op=st.sampled_from(["read", "write", "size"]), ino=ints, stripe=stripes,
       regions=region_lists, index=st.integers(0, NIODS - 1),
       fresh=st.sampled_from([None, True, False, 1]),
       cred=st.sampled_from([None, [0, 0, []], [1, 2, [3]], [-1, 0, []], "x"]),
       bulk=st.sampled_from(["exact", 0, 17]))
def test_plan_agrees_with_python(op, ino, stripe, regions, index, fresh, cred, bulk):
    extra = {}
    if fresh is not None:
        extra["fresh"] = fresh
    if cred is not None:
        extra["cred"] = cred
    raw = header(op, ino, stripe, regions, **extra)
    want = python_plan(raw, 0, index, NIODS)
    if bulk == "exact":
        bulk = want["nbytes"] if want else 0
    assert nat.fast_plan(raw, bulk, index, NIODS) == python_plan(raw, bulk, index, NIODS)


@settings(max_examples=1500, deadline=None)
@given(st.data())
def test_fuzzed_headers_never_crash_and_never_disagree(data):
    """Bytes mutated from a valid header, or random: C either declines or reads them as
    Python does."""
    base = bytearray(header(regions=((0, 70000), (200000, 5)), cred=[0, 0, []]))
    raw = data.draw(st.one_of(
        st.binary(max_size=64),
        st.builds(lambda i, b: bytes(base[:i % len(base)] + bytes([b]) + base[i % len(base) + 1:]),
                  st.integers(0, 1000), st.integers(0, 255)),
        st.builds(lambda i: bytes(base[:i % (len(base) + 1)]), st.integers(0, 1000)),
    ))
    got = nat.fast_plan(raw, 0, 1, NIODS)
    if got is not None:
        assert got == python_plan(raw, 0, 1, NIODS)


def test_plan_declines_an_intersection_too_long_for_it():
    # 2**17 pieces at index 0: too many for the engine's turn (Python's, as before)
    raw = header(stripe=(0, 4, 512), regions=((0, 512 * 4 * (1 << 17)),))
    assert nat.fast_plan(raw, 0, 0, NIODS) is None


# ---------------------------------------------------------------------------- the engine
@pytest.fixture
def fast_engine(tmp_path):
    eng = nat.Engine()
    eng.fast_setup(True, 1, NIODS)
    path = tmp_path / "stripe"
    data = os.urandom(1 << 20)
    path.write_bytes(data)
    fd = os.open(path, os.O_RDWR)
    client, server = tcp_pair()
    eng.attach(1, server.fileno())
    yield SimpleNamespace(eng=eng, events=Events(eng), fd=fd, client=client, data=data,
                          path=path)
    eng.close()
    client.close()
    server.close()
    os.close(fd)


def read_reply(sock) -> tuple[dict, bytes]:
    magic, hlen, blen = struct.unpack("<4sIQ", recv_exact(sock, 16))
    assert magic == b"PV01"
    hdr = msgpack.unpackb(recv_exact(sock, hlen))
    return hdr, recv_exact(sock, blen)


def test_a_granted_read_is_served_by_the_engine_alone(fast_engine):
    t = fast_engine
    eng, events, fd, client, data = t.eng, t.events, t.fd, t.client, t.data
    assert eng.fast_grant(7, fd, True)
    client.sendall(frame(header(regions=((0, 1 << 20),))))
    hdr, bulk = read_reply(client)
    # rank 1's share of 1 MiB in 64 KiB units: local bytes 0..256 KiB of the stripe file
    assert hdr == {"nbytes": 262144, "local_size": 1 << 20}
    assert bulk == data[:262144]
    events.none()                     # no frame, no done: Python saw nothing
    recs = eng.fast_records()
    assert [r[:9] for r in recs] == [(7, "read", 0, 262144, 262144, 1, 0, 1 << 20, 1 << 20)]
    assert eng.fast_info()["jobs"] == 1


def test_a_granted_write_lands_and_is_answered(fast_engine):
    t = fast_engine
    eng, events, fd, client, path = t.eng, t.events, t.fd, t.client, t.path
    eng.fast_grant(7, fd, True)
    new = os.urandom(65536)
    # logical unit 5 lives on rank 1 at local 64 KiB
    client.sendall(frame(header("write", regions=((5 * 65536, 65536),)), 65536) + new)
    hdr, bulk = read_reply(client)
    assert hdr == {"nbytes": 65536} and bulk == b""
    assert path.read_bytes()[65536:131072] == new
    events.none()
    assert eng.fast_records()[0][:4] == (7, "write", 0, 65536)


def test_the_connection_goes_on_after_a_fast_job(fast_engine):
    t = fast_engine
    eng, events, fd, client, data = t.eng, t.events, t.fd, t.client, t.data
    eng.fast_grant(7, fd, False)
    for _ in range(3):
        client.sendall(frame(header(regions=((65536, 100),))))
        _, bulk = read_reply(client)
        assert bulk == data[:100]
    client.sendall(frame(msgpack.packb({"op": "ping"})))
    kind, cid, blen, raw = events.one()
    assert (kind, cid, blen) == ("frame", 1, 0) and msgpack.unpackb(raw) == {"op": "ping"}


def test_no_grant_is_python_frame(fast_engine):
    t = fast_engine
    eng, events, client = t.eng, t.events, t.client
    raw = header()
    client.sendall(frame(raw))
    assert events.one() == ("frame", 1, 0, raw)
    assert eng.fast_records() == []


def test_a_write_without_its_grant_of_writes_is_python_frame(fast_engine):
    t = fast_engine
    eng, events, fd, client = t.eng, t.events, t.fd, t.client
    eng.fast_grant(7, fd, False)          # reads only: a size promise is kept
    raw = header("write", regions=((5 * 65536, 10),))
    client.sendall(frame(raw, 10) + b"x" * 10)
    assert events.one() == ("frame", 1, 10, raw)


def test_blocked_writes_count_those_in_flight_and_go_to_python(fast_engine):
    t = fast_engine
    eng, events, fd, client = t.eng, t.events, t.fd, t.client
    eng.fast_grant(7, fd, True)
    raw = header("write", regions=((5 * 65536, 10),))
    client.sendall(frame(raw, 10) + b"y" * 5)     # the job waits for the rest of its bulk
    assert _wait(lambda: eng.fast_info()["jobs"] == 1)
    assert eng.fast_block_writes(7) == 1          # a change in progress: no promise now
    client.sendall(b"y" * 5)
    assert read_reply(client)[0] == {"nbytes": 10}
    assert _wait(lambda: eng.fast_block_writes(7) == 0)
    client.sendall(frame(raw, 10) + b"y" * 10)   # blocked: Python's (it reports first)
    assert events.one() == ("frame", 1, 10, raw)


def test_disabled_engine_posts_every_frame(fast_engine):
    t = fast_engine
    eng, events, fd, client = t.eng, t.events, t.fd, t.client
    eng.fast_grant(7, fd, True)
    eng.fast_setup(False, 1, NIODS)
    raw = header()
    client.sendall(frame(raw))
    assert events.one() == ("frame", 1, 0, raw)


def test_a_stale_descriptor_goes_to_python_and_loses_its_grant(fast_engine):
    t = fast_engine
    eng, events, fd, client, path = t.eng, t.events, t.fd, t.client, t.path
    eng.fast_grant(7, fd, True)
    os.unlink(path)                       # behind the cache: the engine's fstat sees it
    raw = header()
    client.sendall(frame(raw))
    assert events.one() == ("frame", 1, 0, raw)
    assert eng.fast_info()["grants"] == 0 and eng.fast_records() == []


def test_a_revoked_grant_serves_nothing(fast_engine):
    t = fast_engine
    eng, events, fd, client = t.eng, t.events, t.fd, t.client
    eng.fast_grant(7, fd, True)
    eng.fast_revoke(7)
    raw = header()
    client.sendall(frame(raw))
    assert events.one() == ("frame", 1, 0, raw)


def test_a_failed_fast_write_is_answered_with_its_errno(fast_engine, tmp_path):
    t = fast_engine
    eng, events, client = t.eng, t.events, t.client
    ro = os.open(tmp_path / "stripe", os.O_RDONLY)   # writing it fails EBADF
    try:
        eng.fast_grant(7, ro, True)
        client.sendall(frame(header("write", regions=((5 * 65536, 100),)), 100) + b"z" * 100)
        hdr, _ = read_reply(client)
        assert hdr == {"err": 9, "msg": "writing stripe file: " + os.strerror(9)}
        assert eng.fast_records()[0][2] == 9
        # the stream stayed in step: the next request is read
        client.sendall(frame(msgpack.packb({"op": "ping"})))
        assert events.one()[0] == "frame"
    finally:
        os.close(ro)


def _wait(cond, limit: float = 20.0) -> bool:
    import time

    deadline = time.monotonic() + limit
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True
