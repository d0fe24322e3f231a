"""The global cache daemon's small fetches (daemons/gcache/iodlink.py) against fake I/O
daemons: each daemon's stream lands where the native transfer would put it, the end of the
file is found the same way, and a failure is one OSError."""

from __future__ import annotations

import errno
from array import array
from types import SimpleNamespace

import pytest
import trio

from pvfs.daemons.gcache.iodlink import IodLinks, scatter
from pvfs.layout.describe import from_wire
from pvfs.layout.intersect import split_description
from pvfs.layout.stripe import Stripe, local_size, logical_size
from pvfs.protocol.errors import ProtocolError

BS = 4096
STRIPE = Stripe(0, 3, 8192)


class FakeIod:
    """One I/O daemon of a file whose logical bytes are ``data``: a read answers with its
    share of the request's stream (in stream order) and its stripe file's size."""

    def __init__(self, rank: int, data: bytes, local_size: int, fail: int = 0) -> None:
        self.rank, self.data, self.local_size, self.fail = rank, data, local_size, fail
        self.ops: list[str] = []

    async def call_bulk(self, header: dict) -> tuple[dict, bytes]:
        self.ops.append(header["op"])
        await trio.lowlevel.checkpoint()
        if self.fail:
            raise OSError(self.fail, f"iod{self.rank}: broken")
        if header["op"] == "size":
            return {"local_size": self.local_size}, b""
        desc = from_wire(header["desc"])
        stream = b"".join(self.data[o:o + n].ljust(n, b"\0") for o, n in desc.expand())
        pieces = split_description(desc, STRIPE)[self.rank]
        return {"local_size": self.local_size}, b"".join(stream[c:c + n] for c, _, n in pieces)


def _links(data: bytes, sizes: list[int], fail: int = 0) -> tuple[IodLinks, list[FakeIod]]:
    iods = [FakeIod(r, data, sizes[r], fail if r == 1 else 0) for r in range(3)]
    return IodLinks(SimpleNamespace(niods=3), channels=iods), iods


def test_scatter_puts_each_piece_at_its_place_and_checks_the_length() -> None:
    buf = bytearray(b"." * 12)
    segs = array("q", [8, 2, 0, 3]).tobytes()
    scatter(b"abcde", buf, segs)
    assert buf == b"cde.....ab.."
    scatter(b"", buf, segs)  # a reply without bytes leaves the buffer as it was
    assert buf == b"cde.....ab.."
    with pytest.raises(ProtocolError) as err:
        scatter(b"abcd", buf, segs)
    assert err.value.errno == errno.EPROTO


@pytest.mark.parametrize("blocks", [[0], [1, 2], [0, 5, 6, 11], [2, 3, 4, 5, 6, 7]])
def test_blocks_land_in_their_slots_in_one_request_per_daemon(blocks) -> None:
    data = bytes(range(256)) * (12 * BS // 256)
    links, iods = _links(data, [1 << 30] * 3)
    slots = {b: i for i, b in enumerate(reversed(blocks))}  # scattered, out of order
    ext = [(b * BS, BS, slots[b] * BS) for b in sorted(blocks)]
    buf = bytearray(len(blocks) * BS)
    assert trio.run(links.read_extents, 7, STRIPE, [(ext, buf), ([], None)]) is None
    for b in blocks:
        assert buf[slots[b] * BS:(slots[b] + 1) * BS] == data[b * BS:(b + 1) * BS]
    assert all(ops.count("read") <= 1 for ops in (i.ops for i in iods))


def test_two_buffers_and_the_end_of_the_file() -> None:
    size = 5 * BS + 100  # ends in block 5: a slab block before it and one in it, and a
    local = [local_size(STRIPE, r, size) for r in range(3)]  # scratch block past it
    assert logical_size(STRIPE, local) == size
    data = bytes(range(251)) * (size // 251) + bytes(size % 251)
    links, _ = _links(data, local)
    slab, scratch = bytearray(b"\xee" * 2 * BS), bytearray(b"\xee" * 2 * BS)
    eof = trio.run(links.read_extents, 7, STRIPE,
                   [([(0, BS, BS), (5 * BS, BS, 0)], slab), ([(6 * BS, BS, 0)], scratch)])
    assert eof == size
    assert slab[BS:] == data[:BS]
    assert slab[:100] == data[5 * BS:5 * BS + 100]
    # past the end the fake, as a daemon, sends zeros: what the caller does with the tail
    assert slab[100:BS] == bytes(BS - 100) and scratch[:BS] == bytes(BS)


def test_a_failing_daemon_is_one_oserror() -> None:
    links, _ = _links(bytes(12 * BS), [1 << 30] * 3, fail=errno.ECONNRESET)
    buf = bytearray(6 * BS)
    ext = [(b * BS, BS, b * BS) for b in range(6)]  # every daemon
    with pytest.raises(OSError) as err:
        trio.run(links.read_extents, 7, STRIPE, [(ext, buf)])
    assert err.value.errno == errno.ECONNRESET
