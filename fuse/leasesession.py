"""The mount's lease session with the manager: the connection that keeps ``LeaseCache``
(leases.py) true.

A part the cache holds as ``leases.session``. It registers a lease connection with the
manager under a name of its own (``lease_register``) and names the mount in its requests
while the session runs. The session must be renewed (every ``term / 4``); if it is not
answered in ``term`` the mount forgets everything and asks the manager again (the manager
waits that long before it changes an inode an unanswering holder leased: the mount always
gives up first). On the same connection the manager recalls leases -- dropped from the cache
and the kernel, then answered -- and pushes files leased again after a write; the mount
gives back leases it forgot and tells the manager of its writes (``tell``).
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import time
import uuid
from typing import TYPE_CHECKING

import trio

from pvfs.protocol import aio, auth

if TYPE_CHECKING:
    from .leases import LeaseCache

log = logging.getLogger("pvfs.fuse")

__all__ = ["LeaseSession"]

_RELEASE_MAX = 4096   # leases given back in one frame
_NAMES_WAIT = 0.2     # s a recall's answer waits for the kernel to drop the names (2 s: fenced)


class LeaseSession:
    """The lease connection of a mount and the tasks that serve it.

    Args:
        cache: the leases the session keeps: its end (``until``), what a recall drops
            (``drop_recalled``, ``before_answer``, ``on_recall``), what a push keeps
            (``pushed``), the leases to give back (``lost``, ``released``).
    """

    def __init__(self, cache: LeaseCache) -> None:
        self.cache = cache
        self.client = cache.client
        self.name = f"{socket.gethostname()[:24]}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.term = 0.0
        self._renew_sent = 0.0
        # The lease connection while a session runs and the mount is not fenced (``tell``;
        # the cache's ``drop_all`` clears it).
        self.sock = None
        self._send_lock = trio.Lock()

    async def tell(self, op: str, inos: list[int]) -> bool:
        """Send ``{"op": op, "inos": inos}`` over the lease connection (not answered);
        whether it went (nothing goes without a session: it took all with it)."""
        sock, lock = self.sock, self._send_lock
        if sock is None:
            return False
        try:
            async with lock:
                await aio.send_frame(sock, {"op": op, "inos": inos})
            return True
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
            return False  # the session ends: the report's recall finds it gone, or is answered

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Keep a lease session with the manager, registering again with back-off; started
        once the first session runs or failed (the mount then works without leases)."""
        pending = [task_status]  # reported started once, by whichever comes first
        delay = 0.2
        while True:
            try:
                await self._session(pending)
                delay = 0.2
            except* (OSError, trio.TooSlowError, trio.BrokenResourceError,
                     trio.ClosedResourceError, ValueError) as group:
                log.warning("leases: session with the manager: %s", group.exceptions[0])
            self.cache.drop_all()
            self.client.lease_name = None
            if pending:
                pending.pop().started()
            await trio.sleep(delay)
            delay = min(delay * 2, 5.0)

    async def _session(self, pending: list) -> None:
        cache = self.cache
        cfg = self.client.config
        m = cfg.manager
        sock = await aio.connect(m.host, m.port, cfg.connect_timeout)
        with sock:
            if self.client.key is not None:
                await auth.client_handshake(sock, self.client.key, "mount-leases", "manager",
                                            cfg.connect_timeout)
            sent = time.monotonic()
            await aio.send_frame(sock, {"op": "lease_register", "client": self.name})
            got = await aio.recv_frame(sock, cfg.request_timeout, cfg.request_timeout)
            if got is None or got[0].get("err") or not got[0].get("term"):
                raise OSError(errno.EPROTO, f"lease_register refused: {got and got[0]}")
            self.term = float(got[0]["term"])
            cache.until = sent + self.term
            self.client.lease_name = self.name
            cache.counters["sessions"] += 1
            log.info("leases: session %s with the manager (term %.1f s)", self.name, self.term)
            if pending:
                pending.pop().started()
            send_lock = trio.Lock()
            self.sock, self._send_lock = sock, send_lock
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._renew, sock, send_lock)
                while True:
                    got = await aio.recv_frame(sock, self.term)
                    if got is None:
                        raise ConnectionResetError(errno.ECONNRESET, "lease connection closed")
                    header, _ = got
                    if header.get("op") == "recall":
                        await self._recalled(sock, send_lock, header, nursery)
                    elif header.get("op") == "grant":
                        cache.pushed(header.get("attrs") or [])
                    elif header.get("op") == "renewed":
                        cache.until = self._renew_sent + self.term

    async def _renew(self, sock, send_lock: trio.Lock) -> None:
        cache = self.cache
        while True:
            await trio.sleep(self.term / 4)
            if cache.lost:  # the kernel's copies first: then the manager stops recalling them
                lost, cache.lost = cache.lost, {}
                for hook in cache.before_answer:
                    await hook(list(lost))
                await cache.on_recall(list(lost),
                                      [(i, n) for i, ns in lost.items() for n in ns])
                cache.released += lost
            self._renew_sent = time.monotonic()
            async with send_lock:
                while cache.released:
                    batch = cache.released[:_RELEASE_MAX]
                    del cache.released[:_RELEASE_MAX]
                    await aio.send_frame(sock, {"op": "release", "inos": batch})
                await aio.send_frame(sock, {"op": "renew"})

    async def _recalled(self, sock, send_lock: trio.Lock, header: dict, nursery) -> None:
        cache = self.cache
        inos = [int(i) for i in header.get("inos", ())]
        names = cache.drop_recalled(inos)
        for hook in cache.before_answer:
            await hook(inos)
        # The kernel's names go before the answer too, so a change that returns on another
        # node is seen here at once -- unless dropping them waits: it takes each directory's
        # lock, which a process of this node may hold while its own request waits on the
        # manager, perhaps behind the very change recalled. Then the answer goes after
        # _NAMES_WAIT and the names when the lock is free.
        dropped = trio.Event()

        async def drop_names() -> None:
            try:
                await cache.on_recall(inos, names)
            finally:
                dropped.set()

        nursery.start_soon(drop_names)
        with trio.move_on_after(_NAMES_WAIT):
            await dropped.wait()
        async with send_lock:
            await aio.send_frame(sock, {"seq": header.get("seq")})
