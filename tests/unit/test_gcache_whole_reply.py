"""Replies taken in one receive (src/pvfs/gcache/channel.py): whole, in pieces, larger than
the first receive; and the channel's outcome (reply, errors, connection kept or closed) the
same as :class:`pvfs.protocol.rpc.Channel`'s for every case."""

from __future__ import annotations

import errno
import os

import pytest
import trio

from pvfs.gcache.channel import RECV_SIZE, WholeReplyChannel, recv_reply
from pvfs.protocol import aio
from pvfs.protocol.framing import FrameError, frame
from pvfs.protocol.rpc import Channel


def _reply(header: dict, bulk: bytes = b"") -> bytes:
    return frame(header, len(bulk)) + bulk


async def _serve(sock, chunks: list[bytes]) -> None:
    """Read one request, answer with ``chunks``, each sent on its own after a pause."""
    await aio.recv_frame(sock, 5.0)
    for c in chunks:
        await trio.sleep(0.01)
        await aio.sendall(sock, c)


async def _exchange(cls, chunks: list[bytes], *, want_bulk: bool = True, close: bool = False,
                    timeout: float = 2.0):
    """``cls``'s call over a socket pair whose other end answers with ``chunks``: what it
    returned or raised, and whether it kept the connection."""
    a, b = trio.socket.socketpair()
    ch = cls("test", 0, 1.0, timeout, name="fake")

    async def take():
        return a

    ch._take = take
    out: object
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_serve, b, chunks)
        if close:
            nursery.start_soon(_close_after, b)
        try:
            out = await ch.call_bulk({"op": "read"}, want_bulk=want_bulk)
        except OSError as exc:
            out = (type(exc), exc.errno)
        nursery.cancel_scope.cancel()
    kept = a in ch._idle
    b.close()
    a.close()
    return out, kept


async def _close_after(sock) -> None:
    await trio.sleep(0.1)
    sock.close()


BULK = os.urandom(8192)
BIG = os.urandom(3 * RECV_SIZE + 5)
WHOLE = _reply({"n": len(BULK)}, BULK)
CASES = {
    "whole": ([WHOLE], {}),
    "in pieces": ([WHOLE[:7], WHOLE[7:20], WHOLE[20:100], WHOLE[100:]], {}),
    "no bulk": ([_reply({"ok": 1})], {}),
    "larger than a receive": ([_reply({"n": len(BIG)}, BIG)], {}),
    "an error reply": ([_reply({"err": errno.ENOENT, "msg": "gone"})], {}),
    "bulk not wanted": ([WHOLE], {"want_bulk": False}),
    "closed mid-reply": ([WHOLE[:30]], {"close": True}),
    "no reply in time": ([], {"timeout": 0.2}),
    "a bad prefix": ([b"XXXX" + WHOLE[4:]], {}),
}


@pytest.mark.parametrize("case", CASES)
def test_the_channel_answers_as_the_exact_one(case) -> None:
    chunks, kw = CASES[case]
    whole = trio.run(lambda: _exchange(WholeReplyChannel, chunks, **kw))
    exact = trio.run(lambda: _exchange(Channel, chunks, **kw))
    assert whole == exact
    if case in ("whole", "in pieces", "larger than a receive"):
        assert whole[0][1] in (BULK, BIG) and whole[1]  # the bytes, and the connection kept


def test_bytes_past_the_reply_are_a_broken_frame() -> None:
    async def main():
        a, b = trio.socket.socketpair()
        with a, b:
            await aio.sendall(b, WHOLE + b"more")
            with pytest.raises(FrameError):
                await recv_reply(a, "fake")

    trio.run(main)


def test_a_reply_arriving_whole_is_one_receive() -> None:
    class Counting:
        def __init__(self, sock) -> None:
            self.sock, self.recvs = sock, 0

        async def recv(self, n):
            self.recvs += 1
            return await self.sock.recv(n)

        async def recv_into(self, view):
            self.recvs += 1
            return await self.sock.recv_into(view)

    async def main():
        a, b = trio.socket.socketpair()
        with a, b:
            await aio.sendall(b, WHOLE)
            counting = Counting(a)
            reply, data = await recv_reply(counting, "fake")
            return reply, data, counting.recvs

    reply, data, recvs = trio.run(main)
    assert reply == {"n": len(BULK)} and data == BULK and recvs == 1

