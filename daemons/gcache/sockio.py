"""Scatter/gather socket I/O of the global cache daemon: a read's reply is sent straight from
slab slots (``sendmsg``), a write's bulk received straight into them (``recvmsg_into``); no
intermediate buffer and no Python loop over bytes."""

from __future__ import annotations

import errno

#: Most buffers handed to one sendmsg/recvmsg_into (IOV_MAX is 1024 on Linux).
IOV_BATCH = 512

async def send_views(sock, views: list[memoryview]) -> None:
    """Send every view in order with as few ``sendmsg`` calls as the socket allows."""
    i = 0
    views = [v for v in views if len(v)]
    while i < len(views):
        sent = await sock.sendmsg(views[i:i + IOV_BATCH])
        while sent and i < len(views):
            n = len(views[i])
            if sent >= n:
                sent -= n
                i += 1
            else:
                views[i] = views[i][sent:]
                sent = 0


async def recv_views(sock, views: list[memoryview]) -> None:
    """Fill every view in order from the socket (``recvmsg_into``, no intermediate buffer)."""
    i = 0
    views = [v for v in views if len(v)]
    while i < len(views):
        got = (await sock.recvmsg_into(views[i:i + IOV_BATCH]))[0]
        if got == 0:
            raise ConnectionResetError(errno.ECONNRESET, "peer closed the connection")
        while got and i < len(views):
            n = len(views[i])
            if got >= n:
                got -= n
                i += 1
            else:
                views[i] = views[i][got:]
                got = 0
