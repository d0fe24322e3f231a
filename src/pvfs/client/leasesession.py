"""A native client's lease session with the manager, in a thread of its own.

The manager lets a holder answer from what it leased until it calls the holder back
(``daemons/mgr/leases.py``; the mount's side is ``fuse/leases.py``). The native API holds
leases only to create ahead of the manager (``ahead.py``), and keeps its session here: a
connection registered under a name of its own (``lease_register``), renewed every
``term / 4``, on which the manager sends its recalls. A recall is answered after
``on_recall`` returned (the creates made ahead in those directories are at the manager by
then). The client counts its session valid until ``term`` after the last renewal it *sent*
that was answered, so it always gives up before the manager does.
"""

from __future__ import annotations

import logging
import os
import select
import socket
import threading
import time
import uuid
from collections.abc import Callable

from pvfs.client.datapath import recv_exactly
from pvfs.config import Config
from pvfs.protocol import auth
from pvfs.protocol.framing import PREFIX_SIZE, decode_header, frame, parse_prefix

log = logging.getLogger("pvfs.client")

__all__ = ["LeaseSession"]


class LeaseSession:
    """The lease connection and the thread that serves it.

    Args:
        config: the file system's configuration (the manager's address, the key).
        on_recall: called with the inodes recalled, in the session's thread; the recall
            is answered when it returns.
        on_end: called once the session is over (closed, refused, broken).
    """

    def __init__(self, config: Config, on_recall: Callable[[list[int]], None],
                 on_end: Callable[[], None]) -> None:
        self.config = config
        self.on_recall, self.on_end = on_recall, on_end
        self.name = f"native-{socket.gethostname()[:16]}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.term = 0.0
        self.until = 0.0  # monotonic end of the session as this client counts it
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._closing = False
        self.counters = {"recalls": 0, "renewals": 0}

    def start(self) -> bool:
        """Register with the manager; False if it grants no leases (``term`` 0) or refuses."""
        m = self.config.manager
        sock = socket.create_connection((m.host, m.port), timeout=self.config.connect_timeout)
        try:
            key = auth.key_for(self.config)
            if key is not None:
                auth.client_handshake_sync(sock, key, "native-leases", "manager",
                                           self.config.connect_timeout)
            sent = time.monotonic()
            sock.sendall(frame({"op": "lease_register", "client": self.name}))
            sock.settimeout(self.config.request_timeout)
            reply = _recv_frame(sock)
            if reply.get("err") or not reply.get("term"):
                sock.close()
                return False
        except BaseException:
            sock.close()
            raise
        self.term = float(reply["term"])
        self.until = sent + self.term
        self._sock = sock
        self._thread = threading.Thread(target=self._serve, name="pvfs-lease-session",
                                        daemon=True)
        self._thread.start()
        return True

    def valid(self, margin: float = 0.0) -> bool:
        """Whether the session runs, with ``margin`` seconds of it left."""
        return time.monotonic() + margin < self.until

    def close(self) -> None:
        """End the session (the manager ends it at once when the connection closes)."""
        self._closing = True
        sock = self._sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(self.config.request_timeout)

    # ------------------------------------------------------------------ the thread
    def _serve(self) -> None:
        sock = self._sock
        assert sock is not None
        renew_sent = 0.0
        next_renew = time.monotonic() + self.term / 4
        poller = select.poll()
        poller.register(sock, select.POLLIN | select.POLLERR | select.POLLHUP)
        try:
            while not self._closing:
                wait = max(0.0, next_renew - time.monotonic())
                if not poller.poll(wait * 1000):
                    renew_sent = time.monotonic()
                    sock.sendall(frame({"op": "renew"}))
                    next_renew = renew_sent + self.term / 4
                    continue
                header = _recv_frame(sock)
                op = header.get("op")
                if op == "recall":
                    self.counters["recalls"] += 1
                    self.on_recall([int(i) for i in header.get("inos", ())])
                    sock.sendall(frame({"seq": header.get("seq")}))
                elif op == "renewed":
                    self.counters["renewals"] += 1
                    self.until = renew_sent + self.term
                # (a ``grant`` pushes attributes again after a write: not kept here)
        except (OSError, ValueError) as exc:
            if not self._closing:
                log.warning("lease session %s with the manager ended: %s", self.name, exc)
        finally:
            self.until = 0.0
            sock.close()
            self.on_end()


def _recv_frame(sock: socket.socket) -> dict:
    """One header-only frame from a blocking socket (the lease frames carry no bulk)."""
    hlen, blen = parse_prefix(recv_exactly(sock, PREFIX_SIZE))
    header = decode_header(recv_exactly(sock, hlen))
    if blen:
        raise ValueError("bulk data on the lease connection")
    return header
