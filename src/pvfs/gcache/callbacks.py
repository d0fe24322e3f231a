"""The mount's callback connections to the global caches (``coherence=sync``, SPEC §6).

One connection per global cache daemon, registered with ``cb_register``; the daemon calls
back ``invalidate`` when another client's sync write hits blocks this client read through it,
and the connection is made again (with backoff) when it breaks, after which every clean block
is dropped because the daemon's holder directory forgot this client.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Awaitable, Callable

import trio

from pvfs.protocol import aio, auth

from .backend import GcacheBackend

log = logging.getLogger("pvfs.gcache")

__all__ = ["GlobalCallbacks"]


class GlobalCallbacks:
    """Callback connections to every global cache for ``coherence=sync`` (the daemon calls
    back ``invalidate`` when another client's sync write hits blocks this client read through
    it); the protocol is the I/O daemons' (``daemons/holders.py``)."""

    def __init__(self, backend: GcacheBackend,
                 on_invalidate: Callable[[int, int, int], Awaitable[None]]) -> None:
        self.backend = backend
        self.on_invalidate = on_invalidate
        self.received = 0

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            for i in range(len(self.backend.channels)):
                await nursery.start(self._listen, i)
            task_status.started()

    async def _listen(self, idx: int,
                      task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        ep = self.backend.gconf.endpoints[idx]
        cfg = self.backend.config
        started = False
        delay = 0.2
        while True:
            try:
                sock = await aio.connect(ep.host, ep.port, cfg.connect_timeout)
                with sock:
                    key = auth.key_for(cfg)
                    if key is not None:
                        await auth.client_handshake(sock, key, "client", ep.address,
                                                    cfg.connect_timeout)
                    await aio.send_frame(sock, {"op": "cb_register", "client": self.backend.name,
                                                "block_size": self.backend.block_size})
                    got = await aio.recv_frame(sock, cfg.request_timeout, cfg.request_timeout)
                    if got is None or got[0].get("err"):
                        raise OSError(errno.EPROTO, f"cb_register refused: {got}")
                    if started:
                        await self.on_invalidate(0, 0, 0)  # holdings were lost: drop clean blocks
                    delay = 0.2
                    if not started:
                        started = True
                        task_status.started()
                    while True:
                        got = await aio.recv_frame(sock, cfg.request_timeout)
                        if got is None:
                            raise ConnectionResetError(errno.ECONNRESET, "callback closed")
                        header, _ = got
                        if header.get("op") == "invalidate":
                            self.received += 1
                            await self.on_invalidate(int(header["ino"]), int(header["offset"]),
                                                     int(header["length"]))
                            await aio.send_frame(sock, {"seq": header.get("seq")})
            except (OSError, trio.TooSlowError, trio.BrokenResourceError, ValueError) as exc:
                log.info("gcache %d callback connection: %s", idx, exc)
            if not started:
                started = True
                task_status.started()
            await trio.sleep(delay)
            delay = min(delay * 2, 5.0)
