"""The native async API with both cache levels: async client + local cache + global cache.

One :class:`CacheStack` is one node: its local block cache (shared by every task using the
stack) in front of a :class:`~pvfs.gcache.backend.GcacheBackend` when the file system has
global caches (and ``gcache`` is on), else in front of the I/O daemons directly. It is what
``pvfs-admin study caching`` and ``bench latency`` replay through, and what programs use to get
the mount's caching without a mount::

    async with CacheStack.open(cfg, local_size=2 << 20) as node:
        f = await node.open("/data/x", create=True)
        await node.write(f, 0, b"abc")
        await node.fsync(f)
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, nullcontext
from dataclasses import dataclass

import trio

from pvfs import config as cfgmod
from pvfs.cache import BlockCache, BypassTable, StreamPolicy
from pvfs.client.aclient import AsyncClient
from pvfs.layout.stripe import Stripe

from .backend import GcacheBackend
from .callbacks import GlobalCallbacks
from .config import gcache_config

__all__ = ["CacheStack", "DirectBackend", "StackFile"]

#: Regions per list request (the request header's bound, as ``fuse.cachewire``'s).
MAX_LIST_REGIONS = 16384


class _Bits(BypassTable):
    """Segment bits, plus "everything bypasses the local cache" when the node has none."""

    def __init__(self, local: bool) -> None:
        super().__init__()
        self.local = local

    def bypass_read(self, ino: int, segment: int) -> bool:
        return not self.local or super().bypass_read(ino, segment)

    def bypass_write(self, ino: int, segment: int) -> bool:
        return not self.local or super().bypass_write(ino, segment)

    def has_bits(self, ino: int) -> bool:
        return not self.local or super().has_bits(ino)


class DirectBackend:
    """Blocks straight from and to the I/O daemons (through :class:`AsyncClient`)."""

    def __init__(self, client: AsyncClient, stripes: dict[int, Stripe]) -> None:
        self.client = client
        self.stripes = stripes

    def stripe_size(self, ino: int) -> int | None:
        st = self.stripes.get(ino)
        return st.ssize if st is not None else None

    async def stripe_of(self, ino: int) -> Stripe:
        st = self.stripes.get(ino)
        if st is None:
            st = await self.client.getstripe(ino)
            if st is None:
                raise OSError(22, f"inode {ino} has no stripe")
            self.stripes[ino] = st
        return st

    async def read(self, ino: int, offset: int, length: int) -> bytes:
        return await self.client.read(ino, await self.stripe_of(ino), offset, length)

    async def write(self, ino: int, offset: int, data) -> None:
        await self.client.write(ino, await self.stripe_of(ino), offset, data)

    async def read_list(self, ino: int, regions: list[tuple[int, int]]) -> list[bytes]:
        """List I/O: the regions (sorted, disjoint) in one request per I/O daemon."""
        stripe = await self.stripe_of(ino)
        out: list[bytes] = []
        for i in range(0, len(regions), MAX_LIST_REGIONS):
            out += await self.client.read_regions(ino, stripe, regions[i:i + MAX_LIST_REGIONS])
        return out

    async def write_list(self, ino: int, regions: list[tuple[int, int]], data) -> None:
        """List I/O: ``data`` is the regions' bytes one after the other."""
        stripe = await self.stripe_of(ino)
        mv = memoryview(data).cast("B")
        pos = 0
        for i in range(0, len(regions), MAX_LIST_REGIONS):
            part = regions[i:i + MAX_LIST_REGIONS]
            n = sum(length for _, length in part)
            await self.client.write_regions(ino, stripe, part, mv[pos:pos + n])
            pos += n


@dataclass
class StackFile:
    ino: int
    path: str


class CacheStack:
    """One node's caches over a file system (see the module docstring).

    Args:
        client: a connected :class:`AsyncClient`.
        local: use the local cache (False: every block bypasses it).
        local_size: bytes of local cache.
        gcache: use the global caches (None: when the config has them).
        sync: coherence=sync between stacks (write-through and invalidation callbacks at the
            global caches).
        sizes: file sizes shared between the stacks of one process (the study's nodes), so a
            node reads what another wrote before the servers have it.
        stream: the local cache's large-request policy (``StreamPolicy(min_bytes=0)``: every
            request block by block, as in the paper's cache).
    """

    def __init__(self, client: AsyncClient, *, local: bool = True, local_size: int = 64 << 20,
                 gcache: bool | None = None, sync: bool = False, block_size: int = 4096,
                 segment_blocks: int | None = None, sizes: dict[int, int] | None = None,
                 stream: StreamPolicy | None = None) -> None:
        self.client = client
        self.stripes: dict[int, Stripe] = {}
        self.sizes = sizes if sizes is not None else {}
        self.direct = DirectBackend(client, self.stripes)
        g = gcache_config(client.config)
        self.bits = _Bits(local)
        seg = segment_blocks or (g.segment_blocks if g is not None else 4)
        self.gbackend: GcacheBackend | None = None
        if g is not None and gcache is not False:
            self.gbackend = GcacheBackend(self.direct, client.config, g, self.direct.stripe_of,
                                          bypass=self.bits, block_size=block_size,
                                          segment_blocks=seg, sync=sync)
        elif gcache:
            raise ValueError("gcache=on but the config has no [gcache] table")
        self.cache = BlockCache(self.gbackend or self.direct, block_size=block_size,
                                capacity=max(local_size, 16 * block_size), bypass=self.bits,
                                segment_blocks=seg, stream=stream)
        self.sync = sync
        self.callbacks: GlobalCallbacks | None = None

    @classmethod
    @asynccontextmanager
    async def open(cls, config: str | os.PathLike | cfgmod.Config | None = None,
                   **kw) -> AsyncIterator[CacheStack]:
        """Connect, start the cache's workers (and callbacks in sync mode), and on exit write
        everything back and disconnect."""
        client = await AsyncClient.connect(config)
        try:
            stack = cls(client, **kw)
            async with trio.open_nursery() as nursery:
                await stack.cache.start(nursery)
                if stack.sync and stack.gbackend is not None:
                    stack.callbacks = GlobalCallbacks(stack.gbackend, stack._invalidated)
                    await nursery.start(stack.callbacks.run)
                try:
                    yield stack
                finally:
                    with trio.CancelScope(shield=True):
                        await stack.cache.aclose()
                        if stack.gbackend is not None:
                            for ino in list(stack.gbackend.journal):
                                await stack.gbackend.flush(ino)
                    nursery.cancel_scope.cancel()
        finally:
            if 'stack' in locals() and stack.gbackend is not None:
                stack.gbackend.close()
            client.close()

    async def _invalidated(self, ino: int, offset: int, length: int) -> None:
        if ino == 0:
            for i in list(self.sizes):
                self.cache.invalidate(i)
        else:
            self.cache.invalidate(ino, offset, length or None)

    # ------------------------------------------------------------------ files
    async def open_file(self, path: str, *, create: bool = False,
                        stripe: Stripe | None = None) -> StackFile:
        """Resolve (or create) ``path``; its stripe and size become known to the stack."""
        parent, _, name = path.rstrip("/").rpartition("/")
        if create:
            pino = (await self.client.resolve(parent or "/"))["ino"]
            attrs = await self.client.create(pino, name, 0o644, stripe=stripe)
        else:
            attrs = await self.client.resolve(path)
        ino = attrs["ino"]
        st = await self.client.getstripe(ino)
        if st is not None:
            self.stripes[ino] = st
        self.sizes[ino] = max(self.sizes.get(ino, 0), attrs.get("size", 0))
        return StackFile(ino, path)

    async def refresh(self, f: StackFile) -> int:
        """Ask the manager for the file's size (another node may have extended it)."""
        size = (await self.client.getattr(f.ino))["size"]
        self.sizes[f.ino] = max(self.sizes.get(f.ino, 0), size)
        return self.sizes[f.ino]

    async def read(self, f: StackFile, offset: int, length: int) -> bytes:
        size = max(self.sizes.get(f.ino, 0), self.cache.size_hint(f.ino))
        return await self.cache.read(f.ino, offset, length, file_size=size)

    async def write(self, f: StackFile, offset: int, data, *, sync: bool = False) -> int:
        n = await self.cache.write(f.ino, offset, data, sync=sync,
                                   file_size=self.sizes.get(f.ino))
        self.sizes[f.ino] = max(self.sizes.get(f.ino, 0), offset + n)
        return n

    async def fsync(self, f: StackFile) -> None:
        """Local dirty blocks to the global cache, the global cache's to the I/O daemons, and
        the I/O daemons' to disk."""
        await self.cache.flush(f.ino)
        if self.gbackend is not None:
            await self.gbackend.flush(f.ino)
        await self.client.fsync(f.ino, await self.direct.stripe_of(f.ino), data_only=True)

    async def truncate(self, f: StackFile, size: int) -> None:
        async with self.cache.truncation(f.ino, size), (
                nullcontext() if self.gbackend is None
                else self.gbackend.truncation(f.ino, size)):
            await self.client.setattr(f.ino, size=size)
        self.sizes[f.ino] = size

    def set_bypass(self, f: StackFile, text: str) -> None:
        """Set the file's segment bits (``user.pvfs.bypass`` syntax, e.g. ``0-7:rg,wg``)."""
        self.bits.set_xattr(f.ino, text)

    def stats(self) -> dict:
        out = {"local": self.cache.stats()}
        if self.gbackend is not None:
            out["global_client"] = self.gbackend.stats()
        return out

