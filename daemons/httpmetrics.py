"""A tiny HTTP/1.0 server for one thing: ``GET /metrics`` in the Prometheus text format.

A daemon with ``metrics_port`` in its config table runs this beside its own service. It reads
one request head (bounded in size and time), answers, and closes; anything else gets 404/405.
It serves only counters (no file data), so it does not authenticate; bind it to a management
network or firewall the port (docs/operations.md, docs/security.md).
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable

import trio

from pvfs.metrics import CONTENT_TYPE

log = logging.getLogger("pvfs.metrics")

MAX_HEAD = 8192
HEAD_TIMEOUT = 5.0


async def serve_metrics(host: str, port: int, render: Callable[[], str],
                        task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Listen on host:port and answer ``GET /metrics`` with ``render()``."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = trio.socket.socket(family, socket.SOCK_STREAM)
    with listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        await listener.bind((host, port))
        listener.listen(64)
        log.info("metrics on http://%s:%d/metrics", host, port)
        task_status.started(listener.getsockname())
        async with trio.open_nursery() as nursery:
            while True:
                sock, _ = await listener.accept()
                nursery.start_soon(_answer, sock, render)


async def _answer(sock, render: Callable[[], str]) -> None:
    with sock:
        try:
            head = b""
            with trio.fail_after(HEAD_TIMEOUT):
                while b"\r\n\r\n" not in head and b"\n\n" not in head:
                    chunk = await sock.recv(1024)
                    if not chunk:
                        break
                    head += chunk
                    if len(head) > MAX_HEAD:
                        break
            parts = head.split(b"\r\n", 1)[0].split()
            if len(parts) < 2:
                status, body, ctype = "400 Bad Request", b"bad request\n", "text/plain"
            elif parts[0] not in (b"GET", b"HEAD"):
                status, body, ctype = "405 Method Not Allowed", b"GET only\n", "text/plain"
            elif parts[1].split(b"?", 1)[0] not in (b"/metrics", b"/"):
                status, body, ctype = "404 Not Found", b"try /metrics\n", "text/plain"
            else:
                status, body, ctype = "200 OK", render().encode(), CONTENT_TYPE
            reply = (f"HTTP/1.0 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}"
                     "\r\nConnection: close\r\n\r\n").encode()
            if parts[:1] != [b"HEAD"]:
                reply += body
            with trio.fail_after(HEAD_TIMEOUT):
                view = memoryview(reply)
                while view:
                    view = view[await sock.send(view):]
        except (OSError, trio.TooSlowError):
            return
        except Exception:  # a bug must not take the daemon down
            log.exception("serving metrics")
