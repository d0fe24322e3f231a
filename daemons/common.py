"""What the daemons share: a trio request loop (the manager's), process plumbing.

A daemon supplies ``dispatch(op, fields, bulk_len, sock) -> reply``; ``serve_tcp`` reads
frames, validates them against the daemon's schemas, sends replies, and turns every failure
into an error reply or a closed connection — never a crash (SPEC §10). (The I/O daemon's
data connections are served by its C engine instead; see daemons/iod/server.py.)
"""

from __future__ import annotations

import argparse
import logging
import signal
import socket
import sys
import time
from collections.abc import Awaitable, Callable

import trio

from pvfs.procs import PidfileBusy, claim_pidfile, release_pidfile
from pvfs.protocol import aio, auth, schema
from pvfs.protocol.errors import error_reply, from_exception
from pvfs.protocol.framing import FrameError

log = logging.getLogger("pvfs")

Dispatch = Callable[[str, dict, int, trio.socket.SocketType], Awaitable[dict | None]]

# A frame whose first byte has arrived must be complete within this many seconds.
FRAME_TIMEOUT = 30.0


#: Requests that may carry bulk data after their header (the global cache's list write too).
BULK_OPS = frozenset({"write", "write_list"})

async def serve_connection(sock: trio.socket.SocketType, schemas: dict, dispatch: Dispatch,
                           peer: str, key: bytes | None = None) -> None:
    """Serve one client connection until it closes or breaks the protocol; with a ``key``,
    only after the peer proved it holds the key (protocol/auth.py)."""
    with sock:
        if key is not None and not await auth.server_handshake(sock, key, peer, log):
            return
        while True:
            try:
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
                with trio.fail_after(FRAME_TIMEOUT):
                    await aio.send_frame(sock, reply)
            except (OSError, trio.TooSlowError):
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
