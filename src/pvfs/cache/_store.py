"""The block store every part of the cache works on: the table, the lists and the buffers.

:class:`BlockStore` owns the state the paper's cache is made of (§3.2): blocks by
``(ino, block)`` in a hash table, the per-file state, the dirty list in dirtying order, the free
list, a lock per key, the replacement policy's view, and the counters. Its methods change that
state synchronously (never across an ``await``), so the parts that await — the fetcher, the
streamer, the flusher — each re-check it after their awaits. :class:`BackendCaps` is what the
backend can do, decided once when the cache is built.

The parts are shaped for a second owner (the global cache daemon keeps its own store and
reuses the same fetcher and flusher over it).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

import trio

from ._table import Entry, FileState, FreeList, KeyLocks

if TYPE_CHECKING:
    from ._policy import Backend, ReplacementPolicy, WaterMarks
    from ._served import ServedFiles

__all__ = ["COUNTERS", "BackendCaps", "BlockStore", "Key", "piece_of"]

Key = tuple[int, int]

# Every counter the cache keeps, zero at start (``BlockCache.stats``).
COUNTERS = (
    "hits", "misses", "evictions", "flushed_bytes", "bypassed_reads", "bypassed_writes",
    "sync_writes", "partial_writes", "partial_fills", "backend_reads", "backend_writes", "write_errors", "harvests",
    "flushes", "stream_reads", "stream_writes", "stream_throttles", "readahead_hits",
    "readahead_bytes", "list_writes", "list_reads", "list_regions", "files_writes",
    "files_gathered",
)


def piece_of(chunk: bytes | bytearray | memoryview, a: int, b: int) -> bytes:
    """``chunk[a:b]`` padded with zeros to ``b - a`` bytes (holes and short reads)."""
    out = bytes(chunk[a:b])
    return out if len(out) == b - a else out.ljust(b - a, b"\0")


class BackendCaps:
    """The optional abilities of a backend (``pvfs.cache.ListBackend``,
    ``pvfs.cache.StripedBackend``), looked up once instead of probed at every call.

    Attributes:
        read_list: the backend's ``read_list`` or None.
        write_list: the backend's ``write_list`` or None.
        write_files: the backend's ``write_files`` or None (without ``takes``, None too).
        takes: the backend's ``takes`` (``pvfs.cache.FilesBackend``) or None.
    """

    def __init__(self, backend: Backend, block_size: int) -> None:
        self.read_list = _method(backend, "read_list")
        self.write_list = _method(backend, "write_list")
        self.takes = _method(backend, "takes")
        self.write_files = _method(backend, "write_files") if self.takes else None
        self._stripe_size = _method(backend, "stripe_size")
        self._block_size = block_size

    def window(self, ino: int, limit: int) -> int:
        """Write-back never crosses a multiple of this many bytes of file ``ino``: the largest
        multiple of its stripe size not above ``limit`` (block multiples if unknown)."""
        bs = self._block_size
        ss = self._stripe_size(ino) if self._stripe_size is not None else None
        if not ss or ss <= 0:
            return max(bs, limit // bs * bs)
        return max(ss, limit // ss * ss)


def _method(obj: Any, name: str) -> Any:
    m = getattr(obj, name, None)
    return m if callable(m) else None


class BlockStore:
    """Blocks, per-file state and the lists of one cache (all synchronous).

    Args:
        block_size: bytes per block.
        capacity_blocks: block buffers at most.
        policy: the replacement policy (told of inserts, touches and removals).
        watermarks: when allocation wakes the harvester.
    """

    def __init__(self, block_size: int, capacity_blocks: int, policy: ReplacementPolicy,
                 watermarks: WaterMarks) -> None:
        self.block_size = block_size
        self.capacity_blocks = capacity_blocks
        self.policy = policy
        self.watermarks = watermarks
        self.table: dict[Key, Entry] = {}
        self.files: dict[int, FileState] = {}
        self.dirty: OrderedDict[Key, None] = OrderedDict()
        self.free = FreeList(block_size)
        self.allocated = 0
        self.locks = KeyLocks()
        self.counters: dict[str, int] = dict.fromkeys(COUNTERS, 0)
        # set when dirty data or a shortage of buffers wants the flusher / harvester now
        self.flush_wanted = trio.Event()
        self.harvest_wanted = trio.Event()
        # a front end answering reads from these buffers (_served.py), or None
        self.served: ServedFiles | None = None

    def changing(self, ino: int) -> None:
        """``ino``'s cached bytes, the blocks holding them or its size are about to change:
        a front end answering reads from them stops first (every change below calls this
        before it takes effect; _served.py says why)."""
        served = self.served
        if served is not None and ino in served.files:
            served.drop(ino)

    # -------------------------------------------------------------- geometry

    def span(self, blk: int, start: int, end: int) -> tuple[int, int]:
        """The part of ``[start, end)`` inside block ``blk``, as offsets within the block."""
        base = blk * self.block_size
        return max(start, base) - base, min(end, base + self.block_size) - base

    def covers(self, e: Entry, blk: int, eff: int, a: int, b: int) -> bool:
        """Whether entry ``e`` can answer for bytes ``[a, b)`` of block ``blk`` of a file
        ``eff`` bytes long.

        A partial block can if it knows all of ``[a, b)``. A whole dirty block always can (its
        zeros past ``valid`` are holes we made). A whole clean block fetched short at the old
        end of file cannot if the file has grown since: refetch it.
        """
        if e.known is not None:
            return e.holds(a, b)
        return e.dirty or e.valid >= min(self.block_size, eff - blk * self.block_size)

    def all_whole(self, ino: int, first: int, last: int, eff: int) -> bool:
        """Whether blocks ``first..last`` of ``ino`` are all cached and each can answer for
        all of itself in a file ``eff`` bytes long (:meth:`covers`): a stream-sized read of
        them is then answered from them (and published for the front end: the kernel's
        read-ahead asks in such sizes) rather than read anew."""
        table, bs = self.table, self.block_size
        for blk in range(first, last + 1):
            e = table.get((ino, blk))
            if e is None or not self.covers(e, blk, eff, 0, bs):
                return False
        return True

    @property
    def blocks_in_use(self) -> int:
        return self.allocated - len(self.free)

    # ---------------------------------------------------------------- entries

    def file(self, ino: int) -> FileState:
        fs = self.files.get(ino)
        if fs is None:
            fs = self.files[ino] = FileState()
        return fs

    def alloc(self) -> bytearray | None:
        """A zeroed buffer: from the free list, a new one under the capacity, or by evicting one
        clean block right here (direct reclaim). None when every block is dirty or busy."""
        buf = self.free.get()
        if buf is None:
            if self.allocated < self.capacity_blocks:
                self.allocated += 1
                buf = bytearray(self.block_size) if self.served is None \
                    else self.served.buffer(self.allocated - 1)
            elif len(self.dirty) < len(self.table) and self.evict(1):
                buf = self.free.get()
        if buf is None:
            self.flush_wanted.set()
            return None
        if self.watermarks.should_harvest(self.blocks_in_use + 1, self.capacity_blocks):
            self.harvest_wanted.set()
        return buf

    def insert(self, key: Key, fs: FileState, e: Entry) -> None:
        self.table[key] = e
        fs.blocks.add(key[1])
        self.policy.inserted(key)

    def install(self, ino: int, fs: FileState, blk: int, chunk: bytes) -> None:
        """Put fetched clean data for ``blk`` into the table (if a buffer is to be had)."""
        key = (ino, blk)
        e = self.table.get(key)
        if e is not None:
            if e.dirty:
                return
            self.changing(ino)
            e.buf[: len(chunk)] = chunk
            e.buf[len(chunk):] = bytes(self.block_size - len(chunk))
            e.valid = len(chunk)
            e.version += 1
            return
        buf = self.alloc()
        if buf is None:
            return
        buf[: len(chunk)] = chunk
        e = Entry(buf)
        e.valid = len(chunk)
        self.insert(key, fs, e)

    def fill(self, ino: int, fs: FileState, blk: int, chunk: bytes, keep: bool,
             ) -> bytes | bytearray:
        """A fetch of block ``blk`` returned ``chunk`` (short at the end of file): the block's
        bytes as this cache answers for them, and, if ``keep`` (the file's generation did not
        move during the fetch), the block installed.

        A partial block's known ranges are laid over ``chunk`` — this node's writes are newer
        than what the servers returned, even if they were written back while the fetch was in
        flight — and, when kept, the block becomes whole with the same dirty ranges and the
        same ``version`` (the bytes a write-back in flight copied did not change). Otherwise
        ``chunk`` is installed as a clean block (:meth:`install`)."""
        e = self.table.get((ino, blk))
        if e is None or e.known is None:
            if keep:
                self.install(ino, fs, blk, chunk)
            return chunk
        merged = bytearray(self.block_size)
        merged[: len(chunk)] = chunk
        buf = e.buf
        for lo, hi in e.known:
            merged[lo:hi] = buf[lo:hi]
        if keep:
            self.changing(ino)
            buf[:] = merged
            e.valid = max(len(chunk), e.valid)
            e.known = None
            self.counters["partial_fills"] += 1
        return merged

    def modify(self, key: Key, e: Entry, lo: int, piece: memoryview | bytes) -> None:
        """Write ``piece`` into entry ``e`` at ``lo`` and put it on the dirty list."""
        self.changing(key[0])
        e.apply(lo, piece)
        e.mark(lo, lo + len(piece))
        self.policy.touched(key)
        if not e.dirty:
            e.dirty = True
            e.dirty_since = trio.current_time()
            self.dirty[key] = None
            self.files[key[0]].dirty.add(key[1])

    def mark_written(self, key: Key, e: Entry, version: int,
                     ranges: list[tuple[int, int]]) -> bool:
        """``ranges`` of ``e`` reached the backend as of ``version``: forget them, and mark the
        block clean when none is left. Nothing changes if the block was modified (or replaced)
        meanwhile. Returns whether dirty ranges that were not written remain."""
        if self.table.get(key) is not e or e.version != version or not e.dirty:
            return False
        if e.ranges == ranges:  # all of them (the common case)
            self._clean(key, e)
            return False
        e.ranges = [r for r in e.ranges if r not in ranges]
        if e.ranges:
            return True
        self._clean(key, e)
        return False

    def _clean(self, key: Key, e: Entry) -> None:
        e.dirty = False
        e.ranges = []
        self.files[key[0]].dirty.discard(key[1])
        self.dirty.pop(key, None)

    def drop(self, key: Key, *, tell_policy: bool = True) -> None:
        ino, blk = key
        self.changing(ino)
        e = self.table.pop(key)
        fs = self.files.get(ino)
        if fs is not None:
            fs.blocks.discard(blk)
            fs.dirty.discard(blk)
            if fs.idle() and fs.local_end == 0 and not tell_policy:
                del self.files[ino]
        self.dirty.pop(key, None)
        if tell_policy:
            self.policy.removed(key)
        self.free.put(e.buf)

    # --------------------------------------------------------------- eviction

    def _evictable(self, key: Any) -> bool:
        e = self.table.get(key)
        return e is not None and not e.dirty and not self.locks.busy(key)

    def evict(self, n: int) -> int:
        if self.served is not None:
            self.served.touch_recent(self.policy)  # reads answered there count as uses
        victims = self.policy.select_victims(n, self._evictable)
        for key in victims:
            self.drop(key, tell_policy=False)
        self.counters["evictions"] += len(victims)
        return len(victims)

    def harvest(self) -> int:
        """Free clean blocks down to the low water mark (what the harvester task runs).

        Returns:
            The number of blocks evicted. If dirty blocks keep the cache above the mark, the
            flusher is woken.
        """
        excess = self.blocks_in_use - self.watermarks.low_blocks(self.capacity_blocks)
        if excess <= 0:
            return 0
        self.counters["harvests"] += 1
        freed = self.evict(excess)
        if freed < excess:
            self.flush_wanted.set()
        return freed

    # ----------------------------------------------------------- invalidation

    def lost_writes(self, ino: int, fs: FileState) -> None:
        """A write-back of ``ino`` failed and its data was dropped: the file's end as this
        node knows it is no longer the end of those writes but of what is still to be
        written (dirty ranges, queued stream writes); the servers' size tells the rest.
        Without this ``stat`` kept the lost bytes' size and reads returned zeros for them,
        while every other node saw the servers' size (a write cut off from an I/O daemon's
        host, issue 33)."""
        self.changing(ino)
        end = 0
        for blk in fs.dirty:
            e = self.table.get((ino, blk))
            if e is not None and e.ranges:
                end = max(end, blk * self.block_size + max(hi for _, hi in e.ranges))
        if fs.stream is not None:
            end = max([end, *(off + len(data) for off, data, _ in fs.stream.pending)])
        fs.local_end = min(fs.local_end, end)

    def invalidate(self, ino: int, offset: int = 0, length: int | None = None) -> int:
        """Drop the clean blocks of ``ino`` overlapping ``[offset, offset+length)``; fetches and
        read-ahead in flight keep nothing. Returns the number of blocks dropped."""
        self.changing(ino)
        fs = self.files.get(ino)
        if fs is None:
            return 0
        fs.gen += 1
        if fs.stream is not None:
            fs.stream.drop_readahead()
        bs = self.block_size
        first = offset // bs
        last = math.inf if length is None else (offset + length - 1) // bs
        victims = [b for b in fs.blocks if first <= b <= last and b not in fs.dirty]
        for blk in victims:
            self.drop((ino, blk))
        return len(victims)

    def cut(self, ino: int, fs: FileState, size: int) -> None:
        """Drop the blocks of ``ino`` past ``size`` and zero the tail of the last one."""
        self.changing(ino)
        if self.files.get(ino) is not fs:
            return  # forgotten meanwhile (unlinked): nothing of it is cached any more
        bs = self.block_size
        keep = -(-size // bs)
        for blk in [b for b in fs.blocks if b >= keep]:
            self.drop((ino, blk))
        if size % bs:
            e = self.table.get((ino, size // bs))
            cut = size % bs
            if e is not None:
                if e.valid > cut:
                    e.buf[cut:e.valid] = bytes(e.valid - cut)
                    e.valid = cut
                    e.version += 1
                e.clip(cut)
                if e.known is not None:  # a partial block knows only what is left of its ranges
                    e.valid = e.known[-1][1] if e.known else 0
                if e.dirty and not e.ranges:
                    self._clean((ino, size // bs), e)  # all it wrote was cut away
        fs.local_end = size

    def forget(self, ino: int) -> FileState | None:
        """Remove file ``ino`` and all its blocks; returns its state (for the streamer)."""
        self.changing(ino)
        fs = self.files.pop(ino, None)
        if fs is None:
            return None
        fs.gen += 1
        for blk in list(fs.blocks):
            key = (ino, blk)
            e = self.table.pop(key)
            self.dirty.pop(key, None)
            self.policy.removed(key)
            self.free.put(e.buf)
        return fs

    def overlay_dirty(self, ino: int, fs: FileState, offset: int, end: int,
                      data: bytes) -> bytes:
        """``data`` (bytes ``[offset, end)``) with the file's dirty blocks laid over it."""
        bs = self.block_size
        first, last = offset // bs, (end - 1) // bs
        if len(fs.dirty) < last - first + 1:
            hit = [b for b in fs.dirty if first <= b <= last]
        else:
            hit = [b for b in range(first, last + 1) if b in fs.dirty]
        if not hit:
            return data
        out = bytearray(data)
        for blk in hit:
            a, b = self.span(blk, offset, end)
            base = blk * bs - offset
            e = self.table[(ino, blk)]
            for lo, hi in e.ranges:  # only what this node wrote: the rest came from the servers
                lo, hi = max(lo, a), min(hi, b)
                if lo < hi:
                    out[base + lo:base + hi] = e.buf[lo:hi]
        return bytes(out)

    def update_cached(self, ino: int, fs: FileState, offset: int, data: bytes) -> None:
        """Copy the part of ``data`` over every cached block it overlaps (dirty stay dirty)."""
        self.changing(ino)
        if not fs.blocks:
            return
        bs = self.block_size
        end = offset + len(data)
        first, last = offset // bs, (end - 1) // bs
        if len(fs.blocks) < last - first + 1:
            hit = sorted(b for b in fs.blocks if first <= b <= last)
        else:
            hit = [b for b in range(first, last + 1) if b in fs.blocks]
        mv = memoryview(data)
        for blk in hit:
            a, b = self.span(blk, offset, end)
            self.table[(ino, blk)].apply(a, mv[blk * bs + a - offset:blk * bs + b - offset])
