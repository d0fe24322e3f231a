"""Mount options (``-o a=b,c``): parsing, defaults and the FUSE options they imply.

See ``docs/mount.md`` for the user-facing list.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field, fields

from pvfs.client.modes import COHERENCE_MODES
from pvfs.units import parse_size

FRONTENDS = ("pyfuse3", "c")  # the mount's front ends (kernel.py)

__all__ = ["COHERENCE_MODES", "MountOptions", "default_cache_size", "parse_options"]

# The default local cache: a share of the machine's memory, at least CACHE_MIN, at most
# CACHE_MAX -- so the working set of a typical job (fio's 64 MiB file, a source tree) is
# served from memory without tuning (the harvester keeps it below 95 % full, so the floor is
# twice 64 MiB), while a small VM keeps most of its RAM.
CACHE_MIN = 128 << 20
CACHE_MAX = 1 << 30
CACHE_SHARE = 16  # one sixteenth of MemTotal


def mem_total(meminfo: str = "/proc/meminfo") -> int | None:
    """Bytes of RAM (``MemTotal``), None if unknown."""
    try:
        with open(meminfo) as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def default_cache_size(total: int | None = None) -> int:
    """``cache_size`` when ``-o`` does not set it: RAM / CACHE_SHARE within [CACHE_MIN,
    CACHE_MAX], rounded down to MiB (CACHE_MIN if the RAM is unknown). Buffers are
    allocated as blocks are used, so an idle mount costs nothing for it."""
    total = mem_total() if total is None else total
    if not total:
        return CACHE_MIN
    return min(CACHE_MAX, max(CACHE_MIN, total // CACHE_SHARE >> 20 << 20))


def _flag(text: str) -> bool:
    if text.lower() in ("", "1", "yes", "true", "on"):
        return True
    if text.lower() in ("0", "no", "false", "off"):
        return False
    raise ValueError(f"bad boolean {text!r}")


@dataclass
class MountOptions:
    """Everything ``-o`` can set; field names are the option names."""

    coherence: str = "none"  # one of COHERENCE_MODES
    block_size: int = 4096
    cache_size: int = field(default_factory=default_cache_size)
    cache: bool = True  # cache=0: every block bypasses the local cache
    gcache: bool = True  # gcache=off: never use the config's global caches
    direct_io: bool = False
    # The kernel's write-back page cache (FUSE writeback_cache): coherence=none only; see
    # docs/mount.md for what it changes.
    writeback_cache: bool = False
    # Leases from the manager (fuse/leases.py): lookup, negative lookups and getattr of what
    # the mount holds are answered here until the manager recalls them. On by default, off
    # by itself with default_permissions=0 (a leased lookup skips the manager's check).
    leases: bool = True
    # With leases: creates in a directory this mount holds alone are answered here and sent
    # to the manager in batches (fuse/creates.py). create_ahead=0: every create waits for it.
    create_ahead: bool = True
    ahead_delay: float = 0.005  # seconds a create made ahead waits for others to share a request
    # With leases: opens of leased files (not truncating) answered here, counted at the manager
    # later or never (a close first cancels both; fuse/closes.py). open_ahead=0: they wait.
    open_ahead: bool = True
    # with create_ahead: a file created ahead is written by this mount alone until it writes
    # it back; its close need not wait (fuse/delegations.py). write_delegations=0: it waits.
    write_delegations: bool = True
    # Write-back of many small files (one stripe unit's piece each) in one request per I/O
    # daemon (fuse/cachewire.py, pvfs.cache.FilesBackend). gather_writes=0: one by one.
    gather_writes: bool = True
    # With create_ahead and the C front end: its worker threads answer those creates
    # themselves, each handed to Python afterwards (fuse/workercreates.py). 0: Python does.
    worker_creates: bool = True
    # With the C front end and coherence=none: reads of blocks the local cache holds are
    # answered by its worker threads from the cache's own buffers, without a trip through
    # Python (src/pvfs/cache/_served.py, csrc/front/serve.c). 0: every read goes to Python.
    serve_reads: bool = True
    # Where reads are served in C: stream-sized ones (at least stream_min) of files with
    # nothing newer here than the servers' bytes are answered by the workers from the I/O
    # daemons themselves (fuse/cstreams.py, csrc/front/streams.c). 0: those go to Python.
    stream_reads: bool = True
    read_ahead_kb: int = 1024
    attr_timeout: float = 1.0
    entry_timeout: float = 1.0
    timeout: float = 10.0  # bound on any single network wait (dead daemon -> EIO/ETIMEDOUT)
    flush_interval: float = 1.0  # the flusher's period (seconds)
    dirty_age: float = 5.0  # dirty blocks older than this are written back
    stream_min: int = 128 << 10  # requests this large move as one slice (0: block by block)
    # Writes this large move as one slice (while stream_min is not 0; 0: none do): queued,
    # and written back gathered in list I/O (docs/cache.md, "Large requests").
    stream_write_min: int = 32 << 10
    # The client's own read-ahead of sequential stream reads (0: off). Off by default: the
    # kernel reads ahead in front of it, and a 4 MiB fetch that requests wait for cost
    # 15-30 % of sequential read throughput (docs/benchmarks.md, forty-first session).
    cache_readahead: int = 0
    allow_other: bool = True
    # The kernel checks mode bits too, so a name it has cached (entry_timeout) never skips a
    # permission check; the manager still checks every request (issue 9).
    default_permissions: bool = True
    fsname: str = "pvfs"
    max_tasks: int = 64
    # The front end (fuse/kernel.py): "c" (libfuse3's low-level loop on C threads,
    # pvfs._fusefront; docs/mount.md, "C front end"), or "pyfuse3" (the reference; the
    # default where the extension is not built).
    frontend: str = "c"
    log: str = ""
    debug: bool = False
    # TESTING ONLY: close (FUSE flush) throws the file's dirty blocks away instead of writing
    # them back -- a deliberately broken client, so that `pvfs-admin check` can show it
    # catches lost writes (tests/integration/test_check.py). Never use it for data.
    testing_lose_close_writes: bool = False
    extra_fuse: list[str] = field(default_factory=list)

    def fuse_options(self) -> set[str]:
        """Options for ``pyfuse3.init``.

        ``default_permissions`` (on unless ``default_permissions=0``): the manager checks
        every request it sees, but a lookup the kernel answers from its name cache never
        reaches it -- after ``chmod 0644 DIR`` another user could still open ``DIR/FILE``
        for up to ``entry_timeout``. With the kernel checking the mode bits of every
        component as well, a cached name is checked like any other."""
        opts = {f"fsname={self.fsname}", "subtype=pvfs", "noatime"}
        if self.allow_other:
            opts.add("allow_other")
        if self.default_permissions:
            opts.add("default_permissions")
        if self.debug:
            opts.add("debug")
        opts.update(self.extra_fuse)
        return opts


_NUMERIC = {"block_size": parse_size, "cache_size": parse_size, "read_ahead_kb": int,
            "attr_timeout": float, "entry_timeout": float, "timeout": float,
            "flush_interval": float, "dirty_age": float, "max_tasks": int,
            "ahead_delay": float,
            "stream_min": parse_size, "stream_write_min": parse_size,
            "cache_readahead": parse_size}
_BOOL = {"cache", "gcache", "direct_io", "writeback_cache", "leases", "create_ahead",
         "open_ahead", "write_delegations", "gather_writes", "worker_creates", "serve_reads",
         "stream_reads", "allow_other", "default_permissions", "debug",
         "testing_lose_close_writes"}
_ALIASES = {"bs": "block_size", "cachesize": "cache_size", "readahead": "read_ahead_kb",
            "directio": "direct_io"}
# Standard mount(8) words that make sense to pass through or to ignore.
_PASS = {"ro", "rw", "nosuid", "nodev", "noexec", "suid", "dev", "exec", "sync", "dirsync"}
_IGNORE = {"defaults", "auto", "noauto", "user", "nouser", "_netdev"}


def parse_options(text: str | list[str] | None, base: MountOptions | None = None) -> MountOptions:
    """Parse ``-o`` text (comma separated; may be given several times).

    Raises:
        ValueError: an unknown option or a bad value.
    """
    opts = base or MountOptions()
    items: list[str] = []
    for part in [text] if isinstance(text, str) else (text or []):
        items += [p.strip() for p in part.split(",") if p.strip()]
    names = {f.name for f in fields(MountOptions)}
    given: set[str] = set()
    for item in items:
        key, eq, value = item.partition("=")
        key = _ALIASES.get(key.replace("-", "_"), key.replace("-", "_"))
        if key in _IGNORE:
            continue
        if key in _PASS:
            opts.extra_fuse.append(item)
            continue
        if key not in names or key == "extra_fuse":
            raise ValueError(f"unknown mount option {item!r}")
        given.add(key)
        try:
            if key in _BOOL:
                setattr(opts, key, _flag(value) if eq else True)
            elif key in _NUMERIC:
                setattr(opts, key, _NUMERIC[key](value))
            else:
                setattr(opts, key, value)
        except ValueError as exc:
            raise ValueError(f"mount option {key}: {exc}") from None
    if opts.coherence not in COHERENCE_MODES:
        raise ValueError(f"coherence must be one of {', '.join(COHERENCE_MODES)}")
    if opts.writeback_cache and opts.coherence != "none":
        raise ValueError("writeback_cache needs coherence=none (sync mode writes through)")
    if opts.block_size < 512 or opts.block_size & (opts.block_size - 1):
        raise ValueError("block_size must be a power of two >= 512")
    if opts.cache_size < opts.block_size:
        raise ValueError("cache_size must hold at least one block")
    if opts.leases and not opts.default_permissions:
        # a lookup answered from a lease skips the manager's check of search permission
        if "leases" in given:
            raise ValueError("leases need default_permissions (the kernel's permission checks)")
        opts.leases = False
    if opts.timeout <= 0:
        raise ValueError("timeout must be positive")
    if opts.frontend not in FRONTENDS:
        raise ValueError(f"frontend must be one of {', '.join(FRONTENDS)}")
    if opts.frontend == "c" and importlib.util.find_spec("pvfs._fusefront") is None:
        if "frontend" in given:
            raise ValueError("frontend=c: pvfs._fusefront is not built here "
                             "(needs libfuse3-dev)")
        opts.frontend = "pyfuse3"  # (the default where the extension is not built)
    return opts
