"""The mount's global cache wiring: mount option ``gcache=on|off`` (docs/caching.md).

With a ``[gcache]`` table in the config and ``gcache`` on (the default), the mount's local
cache talks to a :class:`pvfs.gcache.backend.GcacheBackend` instead of straight to the I/O
daemons; with ``coherence=sync`` it also keeps callback connections to the global caches so
their holder directories can invalidate this node's copies.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from pvfs.config import Config
from pvfs.gcache.backend import GcacheBackend
from pvfs.gcache.callbacks import GlobalCallbacks
from pvfs.gcache.config import gcache_config
from pvfs.layout.stripe import Stripe

__all__ = ["global_callbacks", "make_gcache_backend"]


def make_gcache_backend(direct, config: Config, stripe_of: Callable[[int], Awaitable[Stripe]],
                        bits, options) -> GcacheBackend | None:
    """The global cache backend over ``direct`` (None: no global caches, or ``gcache=off``)."""
    g = gcache_config(config)
    if g is None or not options.gcache:
        return None
    return GcacheBackend(direct, config, g, stripe_of, bypass=bits,
                         block_size=options.block_size, sync=options.coherence == "sync",
                         retry_after=max(1.0, options.timeout))


def global_callbacks(ops) -> GlobalCallbacks:
    """Callback connections of a ``coherence=sync`` mount to every global cache."""

    async def invalidated(ino: int, offset: int, length: int) -> None:
        await ops.view.invalidated(ino, offset, length)

    return GlobalCallbacks(ops.gbackend, invalidated)
