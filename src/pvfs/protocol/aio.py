"""Frame I/O over trio sockets, shared by the daemons and the async client.

Reads are exact (``recv(n)`` never returns more than asked), so after a header has been read
the socket holds nothing but the frame's bulk — which the I/O daemon can then hand to C.
"""

from __future__ import annotations

import errno
import math

import trio

from pvfs.protocol.framing import PREFIX_SIZE, decode_header, frame, parse_prefix


async def recv_exactly(sock: trio.socket.SocketType, n: int) -> bytes:
    """Exactly ``n`` bytes; ConnectionResetError if the peer closes first."""
    if n == 0:
        return b""
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = await sock.recv_into(view[got:])
        if k == 0:
            raise ConnectionResetError(errno.ECONNRESET, "peer closed the connection")
        got += k
    return bytes(buf)


async def recv_into_exactly(sock: trio.socket.SocketType, view: memoryview) -> None:
    got, n = 0, len(view)
    while got < n:
        k = await sock.recv_into(view[got:])
        if k == 0:
            raise ConnectionResetError(errno.ECONNRESET, "peer closed the connection")
        got += k


async def sendall(sock: trio.socket.SocketType, data) -> None:
    view = memoryview(data)
    while view:
        sent = await sock.send(view)
        view = view[sent:]


async def recv_frame(sock: trio.socket.SocketType, timeout: float,
                     idle_timeout: float = math.inf) -> tuple[dict, int] | None:
    """Next (header, bulk_len); None on a clean EOF between frames.

    ``idle_timeout`` bounds the wait for the first byte; ``timeout`` the rest of the frame.
    Raises FrameError on a malformed frame and trio.TooSlowError on a timeout.
    """
    if idle_timeout == math.inf:  # the common server case: no cancel scope to set up
        first = await sock.recv(PREFIX_SIZE)
    else:
        with trio.fail_after(idle_timeout):
            first = await sock.recv(PREFIX_SIZE)
    if not first:
        return None
    with trio.fail_after(timeout):
        if len(first) < PREFIX_SIZE:
            first += await recv_exactly(sock, PREFIX_SIZE - len(first))
        hlen, blen = parse_prefix(first)
        header = decode_header(await recv_exactly(sock, hlen))
    return header, blen


async def send_frame(sock: trio.socket.SocketType, header: dict, bulk: bytes = b"") -> None:
    head = frame(header, len(bulk))
    if bulk and len(bulk) < 65536:
        await sendall(sock, head + bulk)
        return
    await sendall(sock, head)
    if bulk:
        await sendall(sock, bulk)


async def drain(sock: trio.socket.SocketType, n: int) -> None:
    """Read and drop ``n`` bulk bytes (keeps a connection in sync after a refused request)."""
    scratch = bytearray(min(n, 1 << 20) or 1)
    view = memoryview(scratch)
    while n > 0:
        k = await sock.recv_into(view[: min(n, len(view))])
        if k == 0:
            raise ConnectionResetError(errno.ECONNRESET, "peer closed the connection")
        n -= k


async def connect(host: str, port: int, timeout: float) -> trio.socket.SocketType:
    """A connected TCP socket with TCP_NODELAY; OSError(ETIMEDOUT) after ``timeout``."""
    import socket as _socket

    sock = trio.socket.socket(_socket.AF_INET6 if ":" in host else _socket.AF_INET,
                              _socket.SOCK_STREAM)
    try:
        sock.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
        with trio.move_on_after(timeout) as scope:
            await sock.connect((host, port))
        if scope.cancelled_caught:
            raise TimeoutError(errno.ETIMEDOUT, f"connecting to {host}:{port} timed out")
    except BaseException:
        sock.close()
        raise
    return sock
