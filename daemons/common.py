"""What the daemons share: a trio request loop (the manager's), process plumbing.

A daemon supplies ``dispatch(op, fields, bulk_len, sock) -> reply``; ``serve_tcp`` reads
frames, validates them against the daemon's schemas, sends replies, and turns every failure
into an error reply or a closed connection — never a crash (SPEC §10). (The I/O daemon's
data connections are served by its C engine instead; see daemons/iod/server.py.)
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Awaitable, Callable

import trio
import trio.lowlevel

from pvfs.procs import PidfileBusy, claim_pidfile, release_pidfile
from pvfs.protocol import aio, auth, schema
from pvfs.protocol.errors import error_reply, from_exception
from pvfs.protocol.framing import PREFIX_SIZE, FrameError, decode_header, frame, parse_prefix

log = logging.getLogger("pvfs")

Dispatch = Callable[[str, dict, int, trio.socket.SocketType], Awaitable[dict | None]]

# A frame whose first byte has arrived must be complete within this many seconds.
FRAME_TIMEOUT = 30.0


#: Requests that may carry bulk data after their header (the global cache's list write too).
BULK_OPS = frozenset({"write", "write_list"})

#: What one ``recv`` of a buffered connection asks for (a request's frame is far smaller).
RECV_SIZE = 65536


class FrameReader:
    """Request frames of a connection whose requests carry no bulk (the manager's): one
    ``recv`` of up to :data:`RECV_SIZE` bytes per request that arrives whole, instead of an
    exact read of the prefix and then of the header, and no timeout scope unless a frame
    arrives in parts (the rest of it must come within ``timeout``). The wire is unchanged;
    bytes of a frame's bulk already read are consumed by :meth:`drain`."""

    __slots__ = ("buf", "sock")

    def __init__(self, sock: trio.socket.SocketType) -> None:
        self.sock = sock
        self.buf = bytearray()

    async def _more(self) -> None:
        chunk = await self.sock.recv(RECV_SIZE)
        if not chunk:
            raise ConnectionResetError(errno.ECONNRESET, "peer closed the connection")
        self.buf += chunk

    async def next(self, timeout: float) -> tuple[dict, int] | None:
        """The next (header, bulk_len); None on a clean EOF between frames. Raises
        FrameError, trio.TooSlowError, OSError like :func:`aio.recv_frame`."""
        buf = self.buf
        if not buf:
            chunk = await self.sock.recv(RECV_SIZE)
            if not chunk:
                return None
            buf += chunk
        else:  # pipelined: let the other connections run first, as a recv would
            await trio.lowlevel.checkpoint()
        if len(buf) < PREFIX_SIZE:
            with trio.fail_after(timeout):
                while len(buf) < PREFIX_SIZE:
                    await self._more()
        hlen, blen = parse_prefix(bytes(buf[:PREFIX_SIZE]))
        end = PREFIX_SIZE + hlen
        if len(buf) < end:
            with trio.fail_after(timeout):
                while len(buf) < end:
                    await self._more()
        header = decode_header(bytes(buf[PREFIX_SIZE:end]))
        del buf[:end]
        return header, blen

    async def drain(self, n: int) -> None:
        """Drop ``n`` bytes of bulk: first what the buffer holds, then from the socket."""
        k = min(n, len(self.buf))
        del self.buf[:k]
        if n - k:
            await aio.drain(self.sock, n - k)


async def send_reply(sock: trio.socket.SocketType, reply: dict) -> None:
    """Send a reply frame: straight to the socket when it takes it whole (the usual case: a
    reply is small and the peer waits for it), else the rest through trio within
    :data:`FRAME_TIMEOUT`."""
    data = frame(reply)
    try:
        sent = os.write(sock.fileno(), data)
    except (BlockingIOError, InterruptedError):
        sent = 0
    if sent < len(data):
        with trio.fail_after(FRAME_TIMEOUT):
            await aio.sendall(sock, memoryview(data)[sent:])


async def serve_connection(sock: trio.socket.SocketType, schemas: dict, dispatch: Dispatch,
                           peer: str, key: bytes | None = None) -> None:
    """Serve one client connection until it closes or breaks the protocol; with a ``key``,
    only after the peer proved it holds the key (protocol/auth.py). A daemon without bulk
    requests (the manager) reads through a :class:`FrameReader` and replies with
    :func:`send_reply`; one with them reads exactly (its handlers read the bulk)."""
    buffered = not (BULK_OPS & schemas.keys())
    with sock:
        if key is not None and not await auth.server_handshake(sock, key, peer, log):
            return
        reader = FrameReader(sock) if buffered else None
        while True:
            try:
                if reader is not None:
                    got = await reader.next(FRAME_TIMEOUT)
                else:
                    got = await aio.recv_frame(sock, FRAME_TIMEOUT)
            except (FrameError, trio.TooSlowError, OSError) as exc:
                log.info("dropping %s: %s", peer, exc)
                return
            if got is None:
                return
            header, bulk_len = got
            try:
                op, fields = schema.check(schemas, header)
            except ValueError as exc:
                reply = error_reply(schema.reply_errno(exc), str(exc))
                if bulk_len:
                    # Refused with bulk pending: skip it if small, else drop the peer.
                    if bulk_len > (64 << 20):
                        return
                    try:
                        with trio.fail_after(FRAME_TIMEOUT):
                            if reader is not None:
                                await reader.drain(bulk_len)
                            else:
                                await aio.drain(sock, bulk_len)
                    except (OSError, trio.TooSlowError):
                        return
            else:
                if bulk_len and op not in BULK_OPS:
                    log.info("dropping %s: bulk data on %s", peer, op)
                    return
                try:
                    reply = await dispatch(op, fields, bulk_len, sock)
                except (ConnectionError, trio.BrokenResourceError, trio.TooSlowError) as exc:
                    log.info("dropping %s during %s: %s", peer, op, exc)
                    return
                except Exception as exc:  # a bug must not take the daemon down
                    if not isinstance(exc, (OSError, ValueError)):
                        log.exception("error serving %s from %s", op, peer)
                    reply = from_exception(exc)
                if reply is None:  # the handler answered (and streamed bulk) itself
                    continue
            try:
                if reader is not None:
                    await send_reply(sock, reply)
                else:
                    with trio.fail_after(FRAME_TIMEOUT):
                        await aio.send_frame(sock, reply)
            except (OSError, trio.TooSlowError, FrameError):
                return


async def serve_tcp(host: str, port: int, schemas: dict, dispatch: Dispatch,
                    task_status=trio.TASK_STATUS_IGNORED, key: bytes | None = None) -> None:
    """Listen on host:port and serve every connection in its own task."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = trio.socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    await listener.bind((host, port))
    listener.listen(512)
    task_status.started(listener.getsockname())
    async with trio.open_nursery() as nursery:
        with listener:
            while True:
                sock, addr = await listener.accept()
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                nursery.start_soon(serve_connection, sock, schemas, dispatch,
                                   f"{addr[0]}:{addr[1]}", key)


# ---------------------------------------------------------------------------- process plumbing

def base_arguments(prog: str, what: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=what)
    p.add_argument("--config", help="file-system config (default: $PVFS_CONFIG)")
    p.add_argument("--pidfile", help="write the pid here; refuse to start if it names a live daemon")
    p.add_argument("--log-file", help="log here instead of stderr")
    p.add_argument("--verbose", "-v", action="store_true", help="debug logging")
    return p


def setup_logging(name: str, log_file: str | None, verbose: bool) -> None:
    handler = logging.FileHandler(log_file) if log_file else logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(
        f"%(asctime)s {name}[%(process)d] %(levelname)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else logging.INFO)


def run_daemon(prog: str, log_name: str, args: argparse.Namespace,
               make_server: Callable[[], object]) -> int:
    """Log, claim the pidfile, serve until SIGTERM/SIGINT, release the pidfile; exit code."""
    setup_logging(log_name, args.log_file, args.verbose)
    if args.pidfile:
        try:
            claim_pidfile(args.pidfile)
        except PidfileBusy as exc:
            sys.exit(str(exc))
    try:
        server = make_server()
        trio.run(run_until_signal, server.serve)
    except OSError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 1
    finally:
        release_pidfile(args.pidfile)
    return 0


async def run_until_signal(main: Callable[..., Awaitable[None]], *args) -> None:
    """Run ``main`` until SIGTERM/SIGINT, then cancel it cleanly."""
    async with trio.open_nursery() as nursery:
        async def watch_signals() -> None:
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for signum in signals:
                    log.info("received %s, stopping", signal.Signals(signum).name)
                    nursery.cancel_scope.cancel()
                    return
        nursery.start_soon(watch_signals)
        await main(*args)
        nursery.cancel_scope.cancel()


START_TIME = time.time()
