"""The policy side of the block cache: what to evict, when to harvest and flush, what to bypass.

The mechanism (:class:`pvfs.cache.BlockCache`) owns the block table, the lists, the locks and
the two workers; it asks these objects for decisions. Every policy here is a small class behind
a ``typing.Protocol`` so the global cache and the runtime bypass can bring their own.

Locking: the cache runs in one trio thread and calls policy methods synchronously (never across
an ``await``), so policies need no locks of their own.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = [
    "LRU",
    "Backend",
    "BypassPolicy",
    "ListBackend",
    "PlainCheck",
    "ReplacementPolicy",
    "SecondChanceLRU",
    "StreamPolicy",
    "StripedBackend",
    "WaterMarks",
    "WritebackPolicy",
]


class Backend(Protocol):
    """Where the cache's blocks come from and go to (the native client, or the global cache).

    Errors are ``OSError`` subclasses with an errno, as everywhere in the client.
    """

    async def read(self, ino: int, offset: int, length: int) -> bytes:
        """Up to ``length`` bytes at ``offset``; shorter only at end of file."""
        ...

    async def write(self, ino: int, offset: int, data: bytes) -> None:
        """Write all of ``data`` at ``offset`` (extending the file as needed)."""
        ...


@runtime_checkable
class ListBackend(Protocol):
    """Optional: a backend that moves many regions of a file in one request (list I/O,
    SPEC §2 I/O descriptions; the native client sends one request per I/O daemon).

    When the backend has them, write-back gathers a file's scattered dirty runs into
    ``write_list`` calls and a read's scattered missing runs into ``read_list`` calls (up to
    :class:`WritebackPolicy`'s ``max_list_bytes``/``max_regions`` per call). Without them the
    cache sends one ``write``/``read`` per run.
    """

    async def write_list(self, ino: int, regions: list[tuple[int, int]], data: bytes) -> None:
        """Write ``data`` (the regions' bytes concatenated, in order) to ``(offset, length)``
        regions, which are sorted and do not overlap."""
        ...

    async def read_list(self, ino: int, regions: list[tuple[int, int]]) -> list[bytes]:
        """Each region's bytes, in order; a region is short (or empty) only at end of file."""
        ...


@runtime_checkable
class FilesBackend(Protocol):
    """Optional: a backend that writes one small run of each of many files in one go (the
    mount's client: one ``writes`` request per I/O daemon for them all).

    When the backend has both, a write-back of several files (a flusher pass,
    :meth:`BlockCache.flush_many`, :meth:`BlockCache.flush_all`) gathers those whose dirty
    bytes are one run ``takes`` accepts into one ``write_files`` call; the others go one by
    one as before.
    """

    def takes(self, ino: int, offset: int, length: int) -> bool:
        """Whether the run ``[offset, offset + length)`` of ``ino`` may go in a gathered
        write."""
        ...

    async def write_files(self, writes: list[tuple[int, int, bytes]]) -> dict[int, OSError]:
        """Write each ``(ino, offset, data)``; the files whose write failed, with why (an
        exception raised fails them all)."""
        ...


@runtime_checkable
class StripedBackend(Protocol):
    """Optional: a backend that knows a file's stripe size.

    When the backend has ``stripe_size``, write-back chunks start and end on multiples of the
    stripe size (each chunk then maps onto whole stripe units of the I/O daemons).
    """

    def stripe_size(self, ino: int) -> int | None:
        """The file's stripe unit in bytes, or None if unknown."""
        ...


class ReplacementPolicy(Protocol):
    """Chooses victims among cached blocks. Keys are ``(ino, block)`` tuples.

    Mandatory ops, all called synchronously by the cache:

    * ``inserted(key)`` — a block entered the cache;
    * ``touched(key)`` — a cached block was read or written (a hit);
    * ``removed(key)`` — the cache dropped a block for its own reasons (truncate, forget,
      invalidate, write error); never called for keys returned by ``select_victims``;
    * ``select_victims(n, eligible)`` — up to ``n`` keys for which ``eligible(key)`` is true, in
      eviction order; the policy forgets them and the cache evicts them before it next awaits.
    """

    def inserted(self, key: Hashable) -> None: ...

    def touched(self, key: Hashable) -> None: ...

    def removed(self, key: Hashable) -> None: ...

    def select_victims(self, n: int, eligible: Callable[[Hashable], bool]) -> list[Hashable]: ...

    def __len__(self) -> int: ...


class SecondChanceLRU:
    """Second-chance ("clock") replacement, as in the paper's local cache.

    Blocks sit in a queue in insertion order with a *referenced* bit. A hit only sets the bit
    (no list surgery on the hot path). The victim scan looks at the head: a referenced block
    has its bit cleared and goes to the tail (its second chance); an unreferenced, eligible block
    is a victim; an ineligible one (dirty or busy) goes to the tail with its bit untouched. The
    scan stops after two full turns, so it ends even if nothing is eligible.
    """

    def __init__(self) -> None:
        self._queue: OrderedDict[Hashable, bool] = OrderedDict()

    def __len__(self) -> int:
        return len(self._queue)

    def inserted(self, key: Hashable) -> None:
        q = self._queue
        if key in q:
            q.move_to_end(key)  # re-inserted: to the tail (a new key lands there anyway)
        q[key] = False

    def touched(self, key: Hashable) -> None:
        if key in self._queue:
            self._queue[key] = True

    def removed(self, key: Hashable) -> None:
        self._queue.pop(key, None)

    def referenced(self, key: Hashable) -> bool:
        """The referenced bit of ``key`` (for tests and stats)."""
        return self._queue.get(key, False)

    def select_victims(self, n: int, eligible: Callable[[Hashable], bool]) -> list[Hashable]:
        victims: list[Hashable] = []
        budget = 2 * len(self._queue)
        q = self._queue
        while q and len(victims) < n and budget > 0:
            budget -= 1
            key, ref = next(iter(q.items()))
            if ref:
                q[key] = False
                q.move_to_end(key)
            elif not eligible(key):
                q.move_to_end(key)
            else:
                del q[key]
                victims.append(key)
        return victims


class LRU:
    """Exact LRU: every hit moves the block to the tail. A second policy for comparison."""

    def __init__(self) -> None:
        self._queue: OrderedDict[Hashable, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._queue)

    def inserted(self, key: Hashable) -> None:
        self._queue[key] = None
        self._queue.move_to_end(key)

    def touched(self, key: Hashable) -> None:
        if key in self._queue:
            self._queue.move_to_end(key)

    def removed(self, key: Hashable) -> None:
        self._queue.pop(key, None)

    def select_victims(self, n: int, eligible: Callable[[Hashable], bool]) -> list[Hashable]:
        victims = [k for k in self._queue if eligible(k)][:n]
        for k in victims:
            del self._queue[k]
        return victims


@dataclass(frozen=True, slots=True)
class WaterMarks:
    """When the harvester runs and how far it goes, as fractions of the capacity in blocks.

    The harvester wakes when the blocks in use reach ``high`` and frees clean blocks until
    ``low`` remain (the paper states the same rule in terms of the free list: harvest when free
    blocks fall below a low mark, stop above a high one).
    """

    low: float = 0.85
    high: float = 0.95

    def __post_init__(self) -> None:
        if not (0.0 < self.low <= self.high <= 1.0):
            raise ValueError(f"need 0 < low <= high <= 1, got low={self.low} high={self.high}")

    def high_blocks(self, capacity: int) -> int:
        return max(1, int(capacity * self.high))

    def low_blocks(self, capacity: int) -> int:
        return min(self.high_blocks(capacity), max(0, int(capacity * self.low)))

    def should_harvest(self, in_use: int, capacity: int) -> bool:
        # high_blocks inlined: asked on every block the cache allocates
        return in_use >= max(1, int(capacity * self.high))


@dataclass(frozen=True, slots=True)
class WritebackPolicy:
    """When the flusher writes dirty blocks back.

    Args:
        dirty_high: fraction of the capacity; above it the flusher writes files back (oldest
            dirty first) until the dirty blocks are below ``dirty_low``.
        dirty_low: see ``dirty_high``.
        max_age: seconds a block may stay dirty; older ones are written back on the next pass.
        interval: seconds between the flusher's periodic passes.
        max_write: largest single region the flusher writes (bytes); runs of dirty blocks are
            cut into chunks no longer than this, on stripe boundaries when known.
        max_list_bytes: with a :class:`ListBackend`, chunks of one file are gathered into one
            list-I/O call of up to this many bytes (a single chunk may be longer)...
        max_regions: ...and up to this many regions. The same bounds apply to list reads of
            a request's scattered missing runs.
    """

    dirty_high: float = 0.5
    dirty_low: float = 0.25
    max_age: float = 5.0
    interval: float = 1.0
    max_write: int = 1 << 20
    max_list_bytes: int = 8 << 20
    max_regions: int = 4096

    def __post_init__(self) -> None:
        if not (0.0 <= self.dirty_low <= self.dirty_high <= 1.0):
            raise ValueError("need 0 <= dirty_low <= dirty_high <= 1")
        if self.max_age < 0 or self.interval <= 0 or self.max_write <= 0:
            raise ValueError("max_age must be >= 0, interval and max_write > 0")
        if self.max_list_bytes <= 0 or self.max_regions <= 0:
            raise ValueError("max_list_bytes and max_regions must be > 0")


@dataclass(frozen=True, slots=True)
class StreamPolicy:
    """Which requests skip the per-block machinery, and how streams are written and read ahead.

    A read of at least ``min_bytes``, or a write of at least ``write_min_bytes``, is a
    *stream* request: it moves as one slice instead of block by block (see
    ``docs/cache.md``, "Large requests"). Bypass bits, sync writes and ``min_bytes=0`` keep
    requests on the block path.

    Args:
        min_bytes: requests this large (bytes) take the stream path; 0 turns it off.
        write_min_bytes: writes this large take it (while ``min_bytes`` is not 0); 0: no
            stream writes; None: ``min_bytes``. The mount's is 32 KiB (``stream_write_min``),
            below its reads' 128 KiB: a queued write costs one entry however long, and its
            write-back gathers the queue (``Streamer._gather``), where blocks cost Python
            per 4 KiB (IOR hard's 47,008-byte transfers); reads of that size stay cached
            in blocks the C workers answer from.
        max_write: largest coalesced backend write of queued stream data; cut at the largest
            multiple of the file's stripe size not above it.
        max_pending: queued stream bytes (all files) above which a writer writes its own
            file's queue before returning (throttling it to the backend's speed).
        readahead: bytes fetched ahead of a sequential stream reader in one backend read
            (0: no read-ahead).
        max_streams: files that may hold read-ahead data at once (least recent dropped).
    """

    min_bytes: int = 128 << 10
    write_min_bytes: int | None = None
    max_write: int = 4 << 20
    max_pending: int = 16 << 20
    readahead: int = 4 << 20
    max_streams: int = 16

    def __post_init__(self) -> None:
        if min(self.min_bytes, self.write_min_bytes or 0, self.readahead) < 0 or \
                min(self.max_write, self.max_pending, self.max_streams) <= 0:
            raise ValueError("min_bytes, write_min_bytes, readahead must be >= 0; max_write, "
                             "max_pending, max_streams > 0")

    def is_stream(self, length: int) -> bool:
        """Whether a read of ``length`` bytes takes the stream path."""
        return 0 < self.min_bytes <= length

    def is_stream_write(self, length: int) -> bool:
        """Whether a write of ``length`` bytes takes the stream path."""
        w = self.min_bytes if self.write_min_bytes is None else self.write_min_bytes
        return self.min_bytes > 0 and 0 < w <= length


class BypassPolicy(Protocol):
    """Admission seam: does an operation on a segment skip the local cache?

    :class:`pvfs.cache.BypassTable` answers from the per-segment bits; the runtime bypass of
    SPEC §6 can answer from counters instead.
    """

    def bypass_read(self, ino: int, segment: int) -> bool: ...

    def bypass_write(self, ino: int, segment: int) -> bool: ...


class PlainCheck:
    """``check(ino, first, last, write)``: whether no segment of blocks ``first..last`` of
    file ``ino`` bypasses the local cache (for writes or for reads), asked of a
    :class:`BypassPolicy`. One with ``has_bits`` (:class:`pvfs.cache.BypassTable`) answers for
    the whole file at once: no bits, no bypass. (An object of its own, not a method of the
    cache, so the cache's parts can hold it without a reference cycle back to the cache.)
    """

    def __init__(self, bypass: BypassPolicy, segment_blocks: int) -> None:
        self.bypass = bypass
        self.segment_blocks = segment_blocks
        self.has_bits = getattr(bypass, "has_bits", None)

    def __call__(self, ino: int, first: int, last: int, write: bool) -> bool:
        if self.has_bits is not None:
            return not self.has_bits(ino)
        check = self.bypass.bypass_write if write else self.bypass.bypass_read
        sb = self.segment_blocks
        return not any(check(ino, s) for s in range(first // sb, last // sb + 1))
