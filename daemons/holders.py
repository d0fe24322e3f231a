"""The holder directory for ``coherence=sync`` mounts, shared by the I/O daemon and the global
cache daemon (discretionary-caching paper §3.2).

Each mount in ``sync`` mode opens one *callback connection* to every I/O daemon
(``cb_register``) and, before it fetches blocks of a file into its local cache, tells the
file's directory daemon (the I/O daemon of the file's rank 0) which blocks it is about to hold
(``cb_hold``). A sync write ends with ``cb_invalidate``: the daemon sends an ``invalidate``
frame to every *other* client holding a block of the range over its callback connection, waits
for each acknowledgement (bounded by the request timeout; a client that does not answer is
dropped from the directory and its connection closed), forgets those holdings and replies.

Holdings are a superset: clients never un-register single blocks (the kernel page cache above
the mount may still hold a page the local cache evicted); a client's entries go when its
callback connection closes.

Callback frames (daemon -> client): ``{"op": "invalidate", "seq": n, "ino", "offset",
"length"}``; the client answers ``{"seq": n}``.
"""

from __future__ import annotations

import logging

import trio

from pvfs.protocol import aio

log = logging.getLogger("pvfs.iod")


class _Client:
    def __init__(self, name: str, sock, block_size: int) -> None:
        self.name = name
        self.sock = sock
        self.block_size = block_size
        self.send_lock = trio.Lock()
        self.waiting: dict[int, trio.Event] = {}
        self.seq = 0
        self.dead = False


class HolderDirectory:
    """Who holds which blocks of which file, and the callback connections to them."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.clients: dict[str, _Client] = {}
        # ino -> client name -> block numbers (in that client's block size)
        self.holders: dict[int, dict[str, set[int]]] = {}
        self.callbacks_sent = 0

    async def serve_client(self, name: str, block_size: int, sock) -> None:
        """Own a registered callback connection until it closes (runs in the request task)."""
        old = self.clients.pop(name, None)
        if old is not None:
            self._drop(old)
        client = _Client(name, sock, block_size)
        self.clients[name] = client
        log.info("coherence: client %s registered (block %d)", name, block_size)
        try:
            await aio.send_frame(sock, {"ok": True})
            while True:
                got = await aio.recv_frame(sock, self.timeout)
                if got is None:
                    break
                header, _ = got
                ev = client.waiting.pop(header.get("seq", -1), None)
                if ev is not None:
                    ev.set()
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError,
                ValueError) as exc:
            log.info("coherence: client %s dropped: %s", name, exc)
        finally:
            if self.clients.get(name) is client:
                del self.clients[name]
            self._drop(client)

    def _drop(self, client: _Client) -> None:
        client.dead = True
        for ev in client.waiting.values():
            ev.set()
        client.waiting.clear()
        for per_ino in self.holders.values():
            per_ino.pop(client.name, None)
        for ino in [i for i, p in self.holders.items() if not p]:
            del self.holders[ino]

    def hold(self, name: str, ino: int, first: int, count: int) -> None:
        if name not in self.clients:
            raise OSError(107, f"client {name} has no callback connection")  # ENOTCONN
        self.holders.setdefault(ino, {}).setdefault(name, set()).update(
            range(first, first + count))

    async def invalidate(self, writer: str, ino: int, offset: int, length: int) -> int:
        """Call back every other holder of ``[offset, offset+length)``; returns how many."""
        per_ino = self.holders.get(ino, {})
        targets = []
        for name, blocks in list(per_ino.items()):
            client = self.clients.get(name)
            if name == writer or client is None:
                continue
            bs = client.block_size
            wanted = set(range(offset // bs, (offset + max(length, 1) - 1) // bs + 1)) \
                if length else set(blocks)
            if blocks & wanted:
                blocks -= wanted
                targets.append(client)
        async with trio.open_nursery() as nursery:
            for client in targets:
                nursery.start_soon(self._callback, client, ino, offset, length)
        return len(targets)

    async def _callback(self, client: _Client, ino: int, offset: int, length: int) -> None:
        client.seq += 1
        seq = client.seq
        ev = trio.Event()
        client.waiting[seq] = ev
        self.callbacks_sent += 1
        try:
            with trio.fail_after(self.timeout):
                async with client.send_lock:
                    await aio.send_frame(client.sock, {"op": "invalidate", "seq": seq, "ino": ino,
                                                       "offset": offset, "length": length})
                await ev.wait()
        except (OSError, trio.BrokenResourceError, trio.TooSlowError) as exc:
            log.warning("coherence: client %s did not acknowledge: %s; dropping it",
                        client.name, exc)
            client.waiting.pop(seq, None)
            if self.clients.get(client.name) is client:
                del self.clients[client.name]
            self._drop(client)
            client.sock.close()

    def status(self) -> dict:
        return {"clients": len(self.clients), "files": len(self.holders),
                "callbacks_sent": self.callbacks_sent}
