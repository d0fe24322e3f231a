"""The ``[gcache]`` table of the file-system config: where the global cache daemons are.

It rides in :attr:`pvfs.config.Config.extra` (so the config module needs no changes)::

    [gcache]
    addresses = "127.0.0.1:7410,127.0.0.1:7411"   # one daemon each; files spread by inode
    capacity = 67108864                           # bytes of blocks per daemon
    block_size = 4096                             # the local cache's block size
    segment_blocks = 4                            # blocks per bypass segment
    policy = "all"                                # all | runtime | adaptive | sketch
    threshold = 25                                # runtime / adaptive threshold
    flush_interval = 0.5                          # seconds between write-back passes

No ``[gcache]`` table (or an empty ``addresses``): the file system has no global cache.
"""

from __future__ import annotations

from dataclasses import dataclass

from pvfs.config import Config, ConfigError, Endpoint, parse_address
from pvfs.models.bypass import DEFAULT_POLICY, POLICIES

__all__ = ["GcacheConfig", "gcache_config", "gcache_index", "gcache_table"]


@dataclass(frozen=True)
class GcacheConfig:
    endpoints: tuple[Endpoint, ...]
    capacity: int = 64 << 20
    block_size: int = 4096
    segment_blocks: int = 4
    policy: str = DEFAULT_POLICY
    threshold: int = 25
    flush_interval: float = 0.5

    @property
    def count(self) -> int:
        return len(self.endpoints)


def _get(table: dict, key: str, default, kind):
    value = table.get(key, default)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ConfigError(f"[gcache].{key}: expected {kind.__name__}, got {value!r}")
    return value


def gcache_config(cfg: Config) -> GcacheConfig | None:
    """The global caches of ``cfg`` (None when it has none).

    Raises:
        ConfigError: on a malformed ``[gcache]`` table.
    """
    table = cfg.extra.get("gcache")
    if table is None:
        return None
    if not isinstance(table, dict):
        raise ConfigError("[gcache]: must be a table")
    text = _get(table, "addresses", "", str)
    eps = []
    for i, addr in enumerate(a.strip() for a in text.split(",") if a.strip()):
        host, port = parse_address(addr, f"[gcache].addresses #{i}")
        eps.append(Endpoint(host, port, ""))
    if not eps:
        return None
    out = GcacheConfig(
        endpoints=tuple(eps),
        capacity=_get(table, "capacity", 64 << 20, int),
        block_size=_get(table, "block_size", 4096, int),
        segment_blocks=_get(table, "segment_blocks", 4, int),
        policy=_get(table, "policy", DEFAULT_POLICY, str),
        threshold=_get(table, "threshold", 25, int),
        flush_interval=_get(table, "flush_interval", 0.5, float),
    )
    if out.block_size < 512 or out.block_size & (out.block_size - 1):
        raise ConfigError("[gcache].block_size: must be a power of two >= 512")
    if out.capacity < 16 * out.block_size:
        raise ConfigError("[gcache].capacity: must hold at least 16 blocks")
    if out.segment_blocks < 1 or out.threshold < 0 or out.flush_interval <= 0:
        raise ConfigError("[gcache]: segment_blocks >= 1, threshold >= 0, flush_interval > 0")
    if out.policy not in POLICIES:
        raise ConfigError(f"[gcache].policy: one of {', '.join(POLICIES)}")
    return out


def gcache_table(addresses: list[str], **values) -> dict:
    """A ``[gcache]`` table for :attr:`Config.extra` (what ``pvfs-admin init --gcaches``
    writes)."""
    table: dict = {"addresses": ",".join(addresses)}
    table.update(values)
    return table


def gcache_index(ino: int, count: int) -> int:
    """Which global cache serves file ``ino``: files are spread over the daemons by inode."""
    return ino % count
