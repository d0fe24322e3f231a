"""The client's side of the ``coherence=sync`` wire protocol (the daemon's side is
``daemons/holders.py``).

A node that caches blocks of a file tells the file's *home* I/O daemon (the one holding
share rank 0) which blocks it holds (``cb_hold``); a node that wrote with ``coherence=sync``
asks the home daemon to call back every other holder (``cb_invalidate``) before its write
returns. The call-backs arrive on one connection per I/O daemon that the node opened and
registered (``cb_register``); each ``invalidate`` frame is answered with its ``seq``.

This module only speaks that protocol; what to hold, when to reconnect and what an
invalidation does to a cache is the owner's (the mount's ``fuse/cachewire.py``; the global
cache daemon can own one the same way).
"""

from __future__ import annotations

import errno
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import trio

from pvfs.config import Config
from pvfs.layout.stripe import Stripe
from pvfs.protocol import aio, auth
from pvfs.protocol.rpc import Channel

__all__ = ["CoherenceClient"]

#: ``on_invalidate(ino, offset, length)``; ``(0, 0, 0)`` means "everything".
InvalidateHandler = Callable[[int, int, int], Awaitable[None]]


class CoherenceClient:
    """Calls to the home I/O daemons of files and their call-back connections to this node.

    Args:
        config: the file system (its I/O daemons and timeouts).
        key: the shared key when authentication is on (``protocol/auth.py``), else None.
        name: this node's unique holder name in the daemons' directories.
        block_size: the holder's block size, registered with every daemon.
    """

    def __init__(self, config: Config, key: bytes | None, name: str, block_size: int) -> None:
        self.config = config
        self.key = key
        self.name = name
        self.block_size = block_size
        self.channels = [Channel(e.host, e.port, config.connect_timeout, config.request_timeout,
                                 max_idle=4, name=f"iod{i} ({e.address})", manager=False,
                                 key=key, role="mount")
                         for i, e in enumerate(config.iods)]

    def home(self, stripe: Stripe) -> int:
        """The I/O daemon keeping the file's holder directory: the one with share rank 0."""
        return stripe.iod_of_rank(0, self.config.niods)

    async def hold(self, ino: int, stripe: Stripe, first: int, count: int) -> None:
        """Record at the home daemon that this node caches blocks ``first..first+count-1``."""
        await self.channels[self.home(stripe)].call(
            {"op": "cb_hold", "client": self.name, "ino": ino, "first": first, "count": count})

    async def invalidate(self, ino: int, stripe: Stripe, offset: int, length: int) -> int:
        """Have every other holder of the byte range dropped; the number of copies dropped."""
        reply = await self.channels[self.home(stripe)].call(
            {"op": "cb_invalidate", "client": self.name, "ino": ino, "offset": offset,
             "length": length})
        return int(reply.get("invalidated", 0))

    @asynccontextmanager
    async def registered(self, index: int) -> AsyncIterator[trio.socket.SocketType]:
        """A call-back connection to I/O daemon ``index``, registered for this node.

        Raises:
            OSError: cannot connect, authentication failed, or the daemon refused.
        """
        ep = self.config.iods[index]
        sock = await aio.connect(ep.host, ep.port, self.config.connect_timeout)
        with sock:
            if self.key is not None:
                await auth.client_handshake(sock, self.key, "mount-callback",
                                            f"iod{index} ({ep.address})",
                                            self.config.connect_timeout)
            await aio.send_frame(sock, {"op": "cb_register", "client": self.name,
                                        "block_size": self.block_size})
            got = await aio.recv_frame(sock, self.config.request_timeout,
                                       self.config.request_timeout)
            if got is None or got[0].get("err"):
                raise OSError(errno.EPROTO, f"cb_register refused: {got}")
            yield sock

    async def serve(self, sock: trio.socket.SocketType, on_invalidate: InvalidateHandler) -> None:
        """Answer the daemon's call-backs on ``sock`` until it closes.

        Raises:
            ConnectionResetError: the daemon closed the connection.
        """
        while True:
            got = await aio.recv_frame(sock, self.config.request_timeout)
            if got is None:
                raise ConnectionResetError(errno.ECONNRESET, "callback connection closed")
            header, _ = got
            if header.get("op") == "invalidate":
                await on_invalidate(int(header["ino"]), int(header["offset"]),
                                    int(header["length"]))
                await aio.send_frame(sock, {"seq": header.get("seq")})

    def close(self) -> None:
        for ch in self.channels:
            ch.close()
