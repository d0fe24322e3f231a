"""Channels whose replies are taken with one receive when they arrive whole.

:class:`~pvfs.protocol.rpc.Channel` reads a reply exactly: the 16-byte prefix, then the
header, then the bulk, three receives. In trio a receive that finds its bytes there still
passes through the scheduler, and every other runnable task runs first: in a client, the
other nodes' cache work, inside this read's time. A global cache's reply to a read of a
block or two (and an I/O daemon's to the global cache's fetch) is sent in one ``sendmsg`` and
is there whole when the reader wakes: :class:`WholeReplyChannel` takes it with one receive
of up to :data:`RECV_SIZE` bytes, and only what is missing (a larger reply) with more.

A connection of a channel carries one request at a time, and a daemon sends nothing on it
but the reply, so the receive cannot take bytes of anything after it.
"""

from __future__ import annotations

import errno

import trio

from pvfs.protocol import aio
from pvfs.protocol.errors import ProtocolError, raise_for
from pvfs.protocol.framing import PREFIX_SIZE, FrameError, decode_header, parse_prefix
from pvfs.protocol.rpc import Channel

__all__ = ["RECV_SIZE", "WholeReplyChannel", "recv_reply"]

#: The first receive of a reply asks for this many bytes (a read of 16 blocks and its header).
RECV_SIZE = 65536 + 4096


async def recv_reply(sock, name: str) -> tuple[dict, bytes]:
    """One reply frame, its header and its bulk, from a connection that carries nothing else
    (FrameError if it held more than the frame, ConnectionResetError if it closed)."""
    got = await sock.recv(RECV_SIZE)
    if not got:
        raise ConnectionResetError(errno.ECONNRESET, f"{name} closed the connection")
    if len(got) < PREFIX_SIZE:
        got += await aio.recv_exactly(sock, PREFIX_SIZE - len(got))
    hlen, blen = parse_prefix(got[:PREFIX_SIZE])
    end = PREFIX_SIZE + hlen
    if len(got) < end:
        got += await aio.recv_exactly(sock, end - len(got))
    reply = decode_header(got[PREFIX_SIZE:end])
    if len(got) > end + blen:
        raise FrameError(f"{len(got) - end - blen} bytes past the reply")
    if len(got) == end + blen:
        return reply, got[end:]
    # A larger reply: the rest received into one buffer, one copy as recv_exactly makes.
    buf = bytearray(blen)
    have = len(got) - end
    buf[:have] = memoryview(got)[end:]
    await aio.recv_into_exactly(sock, memoryview(buf)[have:])
    return reply, bytes(buf)


class WholeReplyChannel(Channel):
    """A :class:`Channel` receiving each reply with :func:`recv_reply`; the rest (the pool,
    timeouts, the errors raised, the resend of a request on a broken pooled connection) is
    the channel's, and this exchange is ``Channel._call_once``'s with only the receive
    changed."""

    async def _call_once(self, header: dict, bulk: bytes, timeout: float | None, check: bool,
                         want_bulk: bool) -> tuple[dict, bytes]:
        sock = await self._take()
        ok = False
        limit = timeout or self.request_timeout
        try:
            with trio.fail_after(limit):
                await aio.send_frame(sock, header, bulk)
                reply, data = await recv_reply(sock, self.name)
                if data and not want_bulk:
                    raise ProtocolError(f"{self.name}: unexpected bulk data in reply")
            ok = True
        except trio.TooSlowError:
            raise TimeoutError(errno.ETIMEDOUT,
                               f"{self.name}: no reply within {limit:g} s") from None
        except FrameError as exc:
            raise ProtocolError(f"{self.name}: {exc}") from None
        except OSError as exc:
            if isinstance(exc, (TimeoutError, ProtocolError)):
                raise
            raise OSError(exc.errno or errno.EIO, f"{self.name}: {exc.strerror or exc}") from None
        finally:
            if ok:
                self._give_back(sock)
            else:
                sock.close()
        return (raise_for(reply) if check else reply), data
