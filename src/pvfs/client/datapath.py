"""The client's data path: blocking sockets to every daemon and the C scatter/gather loop.

A read or write of an I/O description is split into one stream per I/O daemon holding part
of it (``layout.intersect``); ``_native.transfer`` then runs every stream at once with the GIL
released, receiving each daemon's bytes straight into the caller's buffer at their places
(and sending writes straight from it) — no per-region Python copies. Metadata calls use the
same loop with a single request, so the sync client needs no event loop at all.
"""

from __future__ import annotations

import errno
import os
import socket
import threading
from dataclasses import dataclass

from pvfs import _native
from pvfs.config import Config
from pvfs.layout.describe import Description
from pvfs.layout.intersect import pack_segments, split_description
from pvfs.layout.stripe import Stripe, logical_size
from pvfs.protocol import auth
from pvfs.protocol.errors import ProtocolError, raise_for
from pvfs.protocol.framing import FrameError, decode_header, frame
from pvfs.protocol.retry import BROKEN, may_resend

MGR = -1  # pool key of the manager; I/O daemons are 0..niods-1


@dataclass(frozen=True)
class ReadResult:
    local_sizes: dict[int, int]  # rank -> stripe-file size reported by its daemon
    needs_eof_check: bool  # some daemon held less than the request reached


class SocketPool:
    """Idle blocking connections per daemon, shared by every thread of a client."""

    def __init__(self, config: Config, max_idle: int = 16, role: str = "client") -> None:
        self.config = config
        self.max_idle = max_idle
        self.key = auth.key_for(config)  # None: authentication off
        self.role = role
        self._idle: dict[int, list[socket.socket]] = {}
        self._lock = threading.Lock()
        self.closed = False

    def name(self, key: int) -> str:
        ep = self.config.manager if key == MGR else self.config.iods[key]
        return ("manager" if key == MGR else f"iod{key}") + f" ({ep.address})"

    def take(self, key: int) -> socket.socket:
        with self._lock:
            if self.closed:
                raise OSError(errno.EBADF, "file system connection is closed")
            idle = self._idle.get(key)
            if idle:
                return idle.pop()
        ep = self.config.manager if key == MGR else self.config.iods[key]
        try:
            sock = socket.create_connection((ep.host, ep.port), timeout=self.config.connect_timeout)
        except TimeoutError:
            raise TimeoutError(errno.ETIMEDOUT, f"{self.name(key)}: no connection within "
                               f"{self.config.connect_timeout:g} s") from None
        except OSError as exc:
            raise OSError(exc.errno or errno.EHOSTUNREACH,
                          f"{self.name(key)}: cannot connect: {exc.strerror or exc}") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.key is not None:
            try:
                auth.client_handshake_sync(sock, self.key, self.role, self.name(key),
                                           self.config.connect_timeout)
            except BaseException:
                sock.close()
                raise
        sock.settimeout(None)
        return sock

    def idle(self, key: int) -> int:
        with self._lock:
            return len(self._idle.get(key, ()))

    def discard(self, key: int) -> None:
        """Close every idle connection to a daemon that broke one (it may have restarted)."""
        with self._lock:
            socks = self._idle.pop(key, [])
        for s in socks:
            s.close()

    def give(self, key: int, sock: socket.socket) -> None:
        with self._lock:
            idle = self._idle.setdefault(key, [])
            if not self.closed and len(idle) < self.max_idle:
                idle.append(sock)
                return
        sock.close()

    def close(self) -> None:
        with self._lock:
            self.closed = True
            socks = [s for idle in self._idle.values() for s in idle]
            self._idle.clear()
        for s in socks:
            s.close()


class DataPath:
    """Requests to the daemons through ``_native.transfer``; thread-safe."""

    def __init__(self, config: Config, role: str = "client") -> None:
        self.config = config
        self.pool = SocketPool(config, role=role)

    def close(self) -> None:
        self.pool.close()

    # ------------------------------------------------------------------ generic
    def run(self, calls: list[tuple[int, dict, object, bytes, int]]) -> list[dict]:
        """Run (key, header, buf, segs, direction) requests concurrently; reply headers.

        Every reply is decoded; the first error (connection or daemon) is raised after all
        requests have ended, so no connection is left mid-request. A request whose pooled
        connection turned out dead is resent once on a fresh one when that is safe
        (protocol/retry.py).
        """
        pooled = {key for key, *_ in calls if self.pool.idle(key)}
        try:
            return self._run_once(calls)
        except OSError as exc:
            broken = getattr(exc, "pvfs_broken_keys", None)
            if not broken:
                raise
            for key in broken:
                self.pool.discard(key)
            if broken <= pooled and all(
                    may_resend(header["op"], exc.errno, key == MGR) for key, header, *_ in calls):
                return self._run_once(calls)
            raise

    def _run_once(self, calls: list[tuple[int, dict, object, bytes, int]]) -> list[dict]:
        socks = []
        try:
            for key, *_ in calls:
                socks.append(self.pool.take(key))
        except OSError:
            for s in socks:
                s.close()
            raise
        requests = []
        for sock, (key, header, buf, segs, direction) in zip(socks, calls):
            bulk = 0
            if direction == 1 and segs:
                with memoryview(segs) as raw, raw.cast("q") as pairs:
                    bulk = sum(pairs[1::2])
            requests.append((sock.fileno(), frame(header, bulk), buf, segs, direction))
        results = _native.transfer(requests, self.config.request_timeout)
        replies: list[dict] = []
        failure: OSError | None = None
        broken: set[int] = set()
        for sock, (key, header, *_), (err, raw) in zip(socks, calls, results):
            if err:
                sock.close()
                if err in BROKEN:
                    broken.add(key)
                if failure is None:
                    what = (f"no reply within {self.config.request_timeout:g} s"
                            if err == errno.ETIMEDOUT else os.strerror(err))
                    failure = OSError(err, f"{self.pool.name(key)}: {header['op']}: {what}")
                replies.append({})
                continue
            try:
                reply = decode_header(raw)
            except FrameError as exc:
                sock.close()
                failure = failure or ProtocolError(f"{self.pool.name(key)}: {exc}")
                replies.append({})
                continue
            self.pool.give(key, sock)
            if reply.get("err") and failure is None:
                try:
                    raise_for(reply)
                except OSError as exc:
                    failure = exc
            replies.append(reply)
        if failure is not None:
            failure.pvfs_broken_keys = broken  # type: ignore[attr-defined]
            try:
                raise failure
            finally:
                # A local naming the exception raised from this frame is a cycle (exception
                # -> traceback -> frame -> exception) that only the cycle collector frees;
                # until then the frame keeps ``calls``, i.e. views of the caller's buffers,
                # and the caller cannot resize them (BufferError after a resend).
                del failure, calls, requests
        return replies

    def call(self, key: int, header: dict) -> dict:
        return self.run([(key, header, None, b"", 0)])[0]

    # ------------------------------------------------------------------ data
    def read(self, ino: int, stripe: Stripe, desc: Description, buf,
             hint: dict[str, int] | None = None) -> ReadResult:
        """Fill ``buf`` (len = desc.total()) with the description's bytes, in order.
        ``hint``: the collective operation the read belongs to (``AccessHint.to_wire()``),
        sent to every daemon in the read's header."""
        calls, ranks, reach = [], [], {}
        wire = desc.to_wire()
        for rank, pieces in enumerate(split_description(desc, stripe)):
            if not pieces:
                continue
            iod = stripe.iod_of_rank(rank, self.config.niods)
            header = {"op": "read", "ino": ino, "stripe": stripe.to_wire(), "desc": wire}
            if hint is not None:
                header["hint"] = hint
            calls.append((iod, header, buf, pack_segments(pieces), 0))
            ranks.append(rank)
            reach[rank] = max(local + n for _, local, n in pieces)
        replies = self.run(calls)
        sizes = {rank: r["local_size"] for rank, r in zip(ranks, replies)}
        short = any(sizes[r] < reach[r] for r in ranks)
        return ReadResult(sizes, short)

    def write(self, ino: int, stripe: Stripe, desc: Description, buf) -> int:
        """Write ``buf`` (len = desc.total()) to the description's regions; bytes written."""
        calls = []
        wire = desc.to_wire()
        for rank, pieces in enumerate(split_description(desc, stripe)):
            if pieces:
                iod = stripe.iod_of_rank(rank, self.config.niods)
                calls.append((iod, {"op": "write", "ino": ino, "stripe": stripe.to_wire(),
                                    "desc": wire}, buf, pack_segments(pieces), 1))
        return sum(r["nbytes"] for r in self.run(calls))

    def size(self, ino: int, stripe: Stripe, known: dict[int, int] | None = None) -> int:
        """Logical file size from every share's stripe-file size."""
        known = dict(known or {})
        missing = [r for r in range(stripe.pcount) if r not in known]
        replies = self.run([(stripe.iod_of_rank(r, self.config.niods),
                             {"op": "size", "ino": ino}, None, b"", 0) for r in missing])
        for r, reply in zip(missing, replies):
            known[r] = reply["local_size"]
        return logical_size(stripe, [known[r] for r in range(stripe.pcount)])

    def fsync(self, ino: int, stripe: Stripe, data_only: bool = False) -> None:
        self.run([(stripe.iod_of_rank(r, self.config.niods),
                   {"op": "fsync", "ino": ino, "data_only": data_only}, None, b"", 0)
                  for r in range(stripe.pcount)])
