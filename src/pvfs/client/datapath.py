"""The client's data path: blocking sockets to every daemon and the C scatter/gather loop.

A read or write of an I/O description is one ``_native.stripe_transfer`` call: C splits the
description over the stripe's share ranks, frames one request per daemon around a shared
header, and runs every stream at once with the GIL released, receiving each daemon's bytes
straight into the caller's buffer at their places (and sending writes straight from it) — no
per-daemon or per-region Python work, no copies (issue 30). Other calls (metadata, sizes,
fsync, the global cache's extents) use ``_native.transfer`` with ready-made frames, so the sync
client needs no event loop at all.
"""

from __future__ import annotations

import errno
import logging
import os
import select
import socket
import struct
import threading
from array import array
from collections.abc import Callable
from dataclasses import dataclass

from pvfs import _native
from pvfs.config import Config
from pvfs.layout.describe import Description
from pvfs.layout.stripe import Stripe, local_size, logical_size
from pvfs.protocol import auth
from pvfs.protocol.errors import ProtocolError, raise_for
from pvfs.protocol.framing import (
    MAX_HEADER,
    PREFIX_SIZE,
    FrameError,
    decode_header,
    encode_header,
    frame,
    parse_prefix,
)
from pvfs.protocol.retry import BROKEN, may_resend

log = logging.getLogger("pvfs.client")

MGR = -1  # pool key of the manager; I/O daemons are 0..niods-1
_ONE_REGION = struct.Struct("<qq")


@dataclass(frozen=True)
class ReadResult:
    local_sizes: dict[int, int]  # rank -> stripe-file size reported by its daemon
    needs_eof_check: bool  # some daemon held less than the request reached


class SocketPool:
    """Idle blocking connections per daemon, shared by every thread of a client.

    A connection may also *owe* a reply: a request was sent on it that nobody waits for
    (``DataPath.send``, a file's close). It is taken again after the idle ones, its reply
    read first -- by then long arrived -- so the request costs its sender no round trip.
    """

    def __init__(self, config: Config, max_idle: int = 16, role: str = "client") -> None:
        self.config = config
        self.max_idle = max_idle
        self.key = auth.key_for(config)  # None: authentication off
        self.role = role
        self._idle: dict[int, list[socket.socket]] = {}
        self._owing: dict[int, list[socket.socket]] = {}
        self._lock = threading.Lock()
        self.closed = False
        self.late_errors = 0  # replies read late that reported an error (logged)

    def name(self, key: int) -> str:
        ep = self.config.manager if key == MGR else self.config.iods[key]
        return ("manager" if key == MGR else f"iod{key}") + f" ({ep.address})"

    def take(self, key: int) -> socket.socket:
        while True:
            with self._lock:
                if self.closed:
                    raise OSError(errno.EBADF, "file system connection is closed")
                idle = self._idle.get(key)
                sock = idle.pop() if idle else None
            if sock is None:
                break
            if _open_at_peer(sock):
                return sock
            sock.close()
        while (sock := self._owed(key)) is not None:
            try:
                self._read_owed(key, sock)
            except (OSError, FrameError):
                sock.close()  # broken: its request did leave; try the next or a new one
                continue
            if _open_at_peer(sock):
                return sock
            sock.close()
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

    def _owed(self, key: int) -> socket.socket | None:
        with self._lock:
            owing = self._owing.get(key)
            return owing.pop(0) if owing else None

    def owe(self, key: int, sock: socket.socket) -> None:
        """``sock`` carries a request whose reply is read when it is next taken."""
        with self._lock:
            if not self.closed:
                self._owing.setdefault(key, []).append(sock)
                return
        sock.close()

    def _read_owed(self, key: int, sock: socket.socket) -> None:
        """Read (and drop) the reply ``sock`` owes; an error in it is logged, not raised:
        its sender has moved on (a close the manager refused is one it already forgot)."""
        sock.settimeout(self.config.request_timeout)
        try:
            hlen, blen = parse_prefix(recv_exactly(sock, PREFIX_SIZE))
            reply = decode_header(recv_exactly(sock, hlen))
            if blen:
                raise FrameError(f"{self.name(key)}: bulk data in a late reply")
        finally:
            sock.settimeout(None)
        if reply.get("err"):
            self.late_errors += 1
            log.warning("%s: a request not waited for failed: %s", self.name(key),
                        reply.get("msg") or reply.get("err"))

    def take_all(self, keys: list[int], check: bool = True) -> list[socket.socket]:
        """A connection to each of ``keys`` (distinct): idle ones under one lock, then new ones;
        if one cannot be had, none is kept. ``check``: first ask (one poll for all) whether the
        daemon closed an idle one; a caller whose request may be resent on a fresh connection
        when a pooled one turns out dead (``DataPath._resending``: reads, writes) needs no
        such question before every request."""
        socks: list[socket.socket | None] = [None] * len(keys)
        with self._lock:
            if self.closed:
                raise OSError(errno.EBADF, "file system connection is closed")
            for i, key in enumerate(keys):
                idle = self._idle.get(key)
                if idle:
                    socks[i] = idle.pop()
        for i in _closed_at_peer(socks) if check else ():
            socks[i].close()  # type: ignore[union-attr]
            socks[i] = None
        try:
            for i, key in enumerate(keys):
                if socks[i] is None:
                    socks[i] = self.take(key)
        except BaseException:
            for s in socks:
                if s is not None:
                    s.close()
            raise
        return socks  # type: ignore[return-value]

    def idle(self, key: int) -> int:
        with self._lock:
            return len(self._idle.get(key, ()))

    def idle_keys(self, keys: list[int]) -> set[int]:
        """Those of ``keys`` with a pooled connection (idle, or owing a reply): one that may
        have gone stale, so a request that broke on it may be resent on a new one."""
        with self._lock:
            return {key for key in keys if self._idle.get(key) or self._owing.get(key)}

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

    def give_all(self, pairs: list[tuple[int, socket.socket]]) -> None:
        """``give`` of every (key, connection) under one lock."""
        extra = []
        with self._lock:
            for key, sock in pairs:
                idle = self._idle.setdefault(key, [])
                if not self.closed and len(idle) < self.max_idle:
                    idle.append(sock)
                else:
                    extra.append(sock)
        for sock in extra:
            sock.close()

    def close(self) -> None:
        with self._lock:
            self.closed = True
            socks = [s for group in (*self._idle.values(), *self._owing.values())
                     for s in group]
            self._idle.clear()
            self._owing.clear()
        for s in socks:
            s.close()


def _open_at_peer(sock: socket.socket) -> bool:
    """Whether an idle connection is still open at the daemon: one it closed (it stopped or
    restarted) is readable (EOF) before anything is asked. Checked before each reuse, so a
    request that cannot be sent twice (a create) is not lost to a connection that was dead
    before it was sent."""
    p = select.poll()
    p.register(sock, select.POLLIN | select.POLLERR | select.POLLHUP)
    try:
        return not p.poll(0)
    except OSError:
        return False


def _closed_at_peer(socks: list[socket.socket | None]) -> list[int]:
    """The indexes of the pooled connections (None: none taken) that ``_open_at_peer`` would
    find closed, asked in one poll(2) for all of them instead of one per connection."""
    p = select.poll()
    where: dict[int, int] = {}
    for i, sock in enumerate(socks):
        if sock is not None:
            fd = sock.fileno()
            where[fd] = i
            p.register(fd, select.POLLIN | select.POLLERR | select.POLLHUP)
    if not where:
        return []
    try:
        return [where[fd] for fd, _ in p.poll(0)]
    except OSError:
        return list(where.values())


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:])
        if not k:
            raise ConnectionResetError(errno.ECONNRESET, "connection closed mid-reply")
        got += k
    return bytes(buf)


class DataPath:
    """Requests to the daemons through ``_native.transfer``; thread-safe."""

    def __init__(self, config: Config, role: str = "client") -> None:
        self.config = config
        self.pool = SocketPool(config, role=role)
        # Per stripe: its wire form and the daemon of each share rank (the per-request
        # work of a read or write is kept small: issue 30, thirty-eighth session).
        self._stripes: dict[Stripe, tuple[list, list[int]]] = {}

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
        keys = [key for key, *_ in calls]
        ops = [header["op"] for _, header, *_ in calls]
        return self._resending(keys, ops, lambda: self._run_once(calls))

    def _resending(self, keys: list[int], ops: list[str], attempt: Callable[[], list]) -> list:
        """``attempt()``, again once if it broke only pooled connections and may be resent."""
        pooled = self.pool.idle_keys(keys)
        try:
            return attempt()
        except OSError as exc:
            broken = getattr(exc, "pvfs_broken_keys", None)
            if not broken:
                raise
            for key in broken:
                self.pool.discard(key)
            if broken <= pooled and all(
                    may_resend(op, exc.errno, key == MGR) for key, op in zip(keys, ops)):
                return attempt()
            raise

    def _run_once(self, calls: list[tuple[int, dict, object, bytes, int]]) -> list[dict]:
        socks = self.pool.take_all([key for key, *_ in calls])
        requests = []
        for sock, (key, header, buf, segs, direction) in zip(socks, calls):
            bulk = 0
            if direction == 1 and segs:
                with memoryview(segs) as raw, raw.cast("q") as pairs:
                    bulk = sum(pairs[1::2])
            requests.append((sock.fileno(), frame(header, bulk), buf, segs, direction))
        results = _native.transfer(requests, self.config.request_timeout)
        del requests  # views of the caller's buffers: not kept by a traceback (buffers.py)
        return self._collect(socks, [key for key, *_ in calls],
                             [header["op"] for _, header, *_ in calls], results)

    def _collect(self, socks: list[socket.socket], keys: list[int], ops: list[str],
                 results: list[tuple[int, bytes | None]]) -> list[dict]:
        """Decode the replies, give healthy connections back, raise the first error."""
        replies: list[dict] = []
        healthy: list[tuple[int, socket.socket]] = []
        failure: OSError | None = None
        broken: set[int] = set()
        for sock, key, op, (err, raw) in zip(socks, keys, ops, results):
            if err:
                sock.close()
                if err in BROKEN:
                    broken.add(key)
                if failure is None:
                    what = (f"no reply within {self.config.request_timeout:g} s"
                            if err == errno.ETIMEDOUT else os.strerror(err))
                    failure = OSError(err, f"{self.pool.name(key)}: {op}: {what}")
                replies.append({})
                continue
            try:
                reply = decode_header(raw)
            except FrameError as exc:
                sock.close()
                failure = failure or ProtocolError(f"{self.pool.name(key)}: {exc}")
                replies.append({})
                continue
            healthy.append((key, sock))
            if reply.get("err") and failure is None:
                try:
                    raise_for(reply)
                except OSError as exc:
                    failure = exc
            replies.append(reply)
        self.pool.give_all(healthy)
        if failure is not None:
            failure.pvfs_broken_keys = broken  # type: ignore[attr-defined]
            try:
                raise failure
            finally:
                # A local naming the exception raised from this frame is a cycle (exception
                # -> traceback -> frame -> exception) that only the cycle collector frees;
                # until then the frames keep views of the caller's buffers, and the caller
                # cannot resize them (BufferError after a resend).
                del failure
        return replies

    def call(self, key: int, header: dict) -> dict:
        return self.run([(key, header, None, b"", 0)])[0]

    def send(self, key: int, header: dict) -> None:
        """Send a request and go on: its reply is read when its connection is next used
        (``SocketPool.owe``), an error in it logged. For requests whose outcome the caller
        cannot act on (a close). It is on its way when this returns: a later request on any
        connection may still be served before it."""
        data = frame(header)
        for attempt in (0, 1):
            fresh = attempt or not self.pool.idle_keys([key])
            sock = self.pool.take(key)
            try:
                sock.sendall(data)
            except OSError:
                sock.close()
                if fresh:
                    raise
                self.pool.discard(key)  # a pooled connection broke: the daemon restarted?
                continue
            self.pool.owe(key, sock)
            return

    def give_away(self, key: int) -> int:
        """An open (authenticated) connection to daemon ``key``, detached: the caller owns
        its descriptor (the C front end's workers read on it, csrc/front/streams.c)."""
        return self.pool.take(key).detach()

    # ------------------------------------------------------------------ data
    def read(self, ino: int, stripe: Stripe, desc: Description, buf,
             hint: dict[str, int] | None = None) -> ReadResult:
        """Fill ``buf`` (len = desc.total()) with the description's bytes, in order.
        ``hint``: the collective operation the read belongs to (``AccessHint.to_wire()``),
        sent to every daemon in the read's header."""
        done = self._striped("read", ino, stripe, desc, buf, 0, hint)
        sizes = {rank: reply["local_size"] for rank, reply, _ in done}
        short = any(sizes[rank] < reach for rank, _, reach in done)
        return ReadResult(sizes, short)

    def write(self, ino: int, stripe: Stripe, desc: Description, buf,
              mtime_ns: int | None = None, fresh: bool = False) -> int:
        """Write ``buf`` (len = desc.total()) to the description's regions; bytes written.
        ``mtime_ns``: each stripe file written gets this mtime after the bytes. ``fresh``:
        the caller created the file from the manager's pool to write it itself (the
        manager's create said ``fresh``): the daemons need not report this write to it."""
        return sum(reply["nbytes"] for _, reply, _ in
                   self._striped("write", ino, stripe, desc, buf, 1, None, mtime_ns, fresh))

    def _striped(self, op: str, ino: int, stripe: Stripe, desc: Description, buf,
                 direction: int, hint: dict[str, int] | None,
                 mtime_ns: int | None = None, fresh: bool = False
                 ) -> list[tuple[int, dict, int]]:
        """One read or write through ``_native.stripe_transfer``: (rank, reply, reach) of
        every share rank it touched (reach: the end of its last byte in the stripe file)."""
        plan = self.plan(op, ino, stripe, desc, hint, mtime_ns, fresh)
        if plan is None:
            return []
        body, ranks, keys, packed = plan
        return self._resending(keys, [op] * len(keys), lambda: self._striped_once(
            stripe, ranks, keys, body, buf, packed, direction, op))

    def plan(self, op: str, ino: int, stripe: Stripe, desc: Description,
             hint: dict[str, int] | None = None, mtime_ns: int | None = None,
             fresh: bool = False) -> tuple[bytes, list[int], list[int], bytes] | None:
        """A read's or write's request: (the header every daemon gets, the share ranks it
        touches, their daemons, the packed regions); None if it touches none."""
        known = self._stripes.get(stripe)
        if known is None:
            niods = self.config.niods
            known = (stripe.to_wire(), [stripe.iod_of_rank(r, niods) for r in range(stripe.pcount)])
            if len(self._stripes) < 4096:
                self._stripes[stripe] = known
        wire, iods = known
        header = {"op": op, "ino": ino, "stripe": wire, "desc": desc.to_wire()}
        if hint is not None:
            header["hint"] = hint
        if mtime_ns is not None:
            header["mtime_ns"] = mtime_ns
        if fresh:
            header["fresh"] = True
        body = encode_header(header)
        if len(body) > MAX_HEADER:
            raise FrameError(f"header of {len(body)} bytes exceeds {MAX_HEADER}")
        regions = desc.expand()
        ranks = touched_ranks(regions, stripe)
        if not ranks:
            return None
        keys = iods if len(ranks) == len(iods) else [iods[rank] for rank in ranks]
        return body, ranks, keys, pack_regions(regions)

    def iods_of(self, stripe: Stripe) -> list[int]:
        """The daemon of each share rank of ``stripe``."""
        return [stripe.iod_of_rank(r, self.config.niods) for r in range(stripe.pcount)]

    def _striped_once(self, stripe: Stripe, ranks: list[int], keys: list[int], body: bytes,
                      buf, packed: bytes, direction: int,
                      op: str) -> list[tuple[int, dict, int]]:
        socks = self.pool.take_all(keys, check=False)  # resent if a pooled one was dead
        if len(ranks) == stripe.pcount:
            fds = [sock.fileno() for sock in socks]
        else:
            fds = [-1] * stripe.pcount
            for rank, sock in zip(ranks, socks):
                fds[rank] = sock.fileno()
        results = _native.stripe_transfer(fds, body, buf, packed, stripe.ssize, direction,
                                          self.config.request_timeout)
        del buf  # the caller's buffer: not kept by a traceback (buffers.py)
        mine = [results[rank] for rank in ranks]
        replies = self._replies_ok(socks, keys, mine)
        if replies is None:
            replies = self._collect(socks, keys, [op] * len(keys),
                                    [(e, raw) for e, raw, _ in mine])
        return [(rank, reply, reach) for rank, reply, (_, _, reach) in zip(ranks, replies, mine)]

    def _replies_ok(self, socks: list[socket.socket], keys: list[int],
                    results: list[tuple[int, bytes | None, int]]) -> list[dict] | None:
        """The common case of ``_collect`` in short: every exchange ended and no reply
        reports an error; the connections go back to the pool. None otherwise, with nothing
        done (``_collect`` then decides)."""
        try:
            replies = [decode_header(raw) for err, raw, _ in results if not err]
        except FrameError:
            return None
        if len(replies) != len(results) or any("err" in r for r in replies):
            return None
        self.pool.give_all(list(zip(keys, socks)))
        return replies

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

    def data_mtime(self, ino: int, stripe: Stripe, size: int, mtime_ns: int) -> None:
        """Set the mtime of the stripe files holding a file's ``size`` bytes (the others'
        does not count: daemons/mgr/stripefiles.py)."""
        self.run([(stripe.iod_of_rank(r, self.config.niods),
                   {"op": "utime", "ino": ino, "mtime_ns": mtime_ns}, None, b"", 0)
                  for r in range(stripe.pcount) if local_size(stripe, r, size)])


def stream_read_head(ino: int, stripe: Stripe) -> bytes:
    """A contiguous read's msgpack header up to its ``desc`` value: the C front end's workers
    finish it with each read's description (``csrc/front/streams.c``, ``put_desc``), so a
    read they send is the one :meth:`DataPath.read` sends."""
    body = encode_header({"op": "read", "ino": ino, "stripe": stripe.to_wire()})
    if body[0] != 0x83:  # a fixmap of the three fields
        raise ValueError("unexpected msgpack map header")
    return b"\x84" + body[1:] + encode_header("desc")


def touched_ranks(regions: list[tuple[int, int]], stripe: Stripe) -> list[int]:
    """The share ranks holding some byte of ``regions`` (ascending): whose daemons a request
    needs a connection to."""
    ss, pc = stripe.ssize, stripe.pcount
    seen = bytearray(pc)
    count = 0
    for off, length in regions:
        if length <= 0:
            continue
        first, last = off // ss, (off + length - 1) // ss
        if last - first + 1 >= pc:
            return list(range(pc))
        for unit in range(first, last + 1):
            rank = unit % pc
            if not seen[rank]:
                seen[rank] = 1
                count += 1
        if count == pc:
            return list(range(pc))
    return [rank for rank in range(pc) if seen[rank]]


def pack_regions(regions: list[tuple[int, int]]) -> bytes:
    """``(file offset, length)`` pairs as packed little-endian int64 (``stripe_transfer``)."""
    if len(regions) == 1:
        return _ONE_REGION.pack(*regions[0])
    flat = array("q")
    for off, length in regions:
        flat.append(off)
        flat.append(length)
    return flat.tobytes()
