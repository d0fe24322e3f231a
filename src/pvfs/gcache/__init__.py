"""The client side of the global cache (discretionary-caching paper §3.2, SPEC §6).

``config`` reads the ``[gcache]`` table; ``backend`` is :class:`GcacheBackend`, the local
cache's backend that routes each segment through a global cache daemon or straight to the I/O
daemons; ``stack`` assembles async client + local cache + backend for the native API, the
study and the tests. The daemon itself is ``pvfs.daemons.gcache``.
"""

from .config import GcacheConfig as GcacheConfig
from .config import gcache_config as gcache_config

__all__ = ["GcacheConfig", "gcache_config"]
