"""pvfs._native.Engine attached connections fed random byte streams (hypothesis): whatever
arrives, the engine reports the frames a model of the format finds, then ``closed``.
Split from test_native_conn.py, whose helpers it uses."""

from __future__ import annotations

import errno
import socket
import struct
import threading

from hypothesis import given, settings
from hypothesis import strategies as st

# tests/unit is on sys.path (rootdir-less layout)
from test_native_conn import MAX_HEADER, Events, frame, prefix
from test_native_engine import DISCARD, WRITE, acc

from pvfs import _native as nat

# -- hypothesis: random byte streams ---------------------------------------------------------

def model(stream: bytes) -> list[tuple]:
    """What the engine must report for stream followed by EOF, when every frame's job is a
    discard of its bulk (reply-less)."""
    out, pos = [], 0
    while True:
        rest = stream[pos:]
        if not rest:
            return out + [("closed", 0)]
        if rest[:4] != b"PV01"[:len(rest[:4])]:
            return out + [("closed", errno.EPROTO)]
        if len(rest) < 16:
            return out + [("closed", errno.ECONNRESET)]
        _, hlen, blen = struct.unpack("<4sIQ", rest[:16])
        if hlen == 0 or hlen > MAX_HEADER or blen > 1 << 32:
            return out + [("closed", errno.EPROTO)]
        if len(rest) < 16 + hlen:
            return out + [("closed", errno.ECONNRESET)]
        out.append(("frame", blen, rest[16:16 + hlen]))
        pos += 16 + hlen
        if len(stream) - pos < blen:
            return out + [("done", errno.ECONNRESET, len(stream) - pos),
                          ("closed", errno.ECONNRESET)]
        out.append(("done", 0, blen))
        pos += blen


def _parts():
    good = st.builds(lambda h, b, bulk: frame(h, b) + bulk[:b],
                     st.binary(min_size=1, max_size=300), st.integers(0, 500),
                     st.binary(max_size=500))
    bad_prefix = st.builds(prefix, st.sampled_from([0, 1, 5, MAX_HEADER, MAX_HEADER + 1,
                                                    2**32 - 1]),
                           st.sampled_from([0, 3, 1 << 32, (1 << 32) + 1, 2**64 - 1]))
    return st.lists(st.one_of(good, good, bad_prefix, st.binary(max_size=40)), max_size=6)


@settings(max_examples=150, deadline=None)
@given(parts=_parts(), chunk=st.integers(1, 64), cut=st.integers(0, 4000))
def test_random_streams_end_in_closed(parts, chunk, cut):
    stream = b"".join(parts)
    stream = stream[:cut] if cut < len(stream) else stream
    expect = model(stream)
    with nat.Engine() as eng:
        ev = Events(eng)
        srv, cli = socket.socketpair()
        with srv, cli:
            eng.attach(0, srv.fileno())

            def send():
                for i in range(0, len(stream), chunk):
                    cli.sendall(stream[i:i + chunk])
                cli.shutdown(socket.SHUT_WR)

            t = threading.Thread(target=send)
            t.start()
            got, job = [], 0
            while not got or got[-1][0] != "closed":
                e = ev.one()
                if e[0] == "frame":
                    got.append(("frame", e[2], e[3]))
                    job += 1
                    eng.submit(job, srv.fileno(), 0, WRITE, acc((DISCARD, 0, e[2])))
                elif e[0] == "done":
                    got.append(("done", e[2], e[3]))
                else:
                    got.append(("closed", e[2]))
            t.join()
    assert got == expect
