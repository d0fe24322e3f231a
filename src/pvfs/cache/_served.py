"""Reads a front end answers from the cache's own buffers, without this Python (issue 30).

The mount's C front end (``fuse/cfront.py``, ``csrc/front/serve.c``) can answer a read
itself when every block it needs is cached: the blocks then live in one arena (an anonymous
``mmap`` the front end holds), and the cache *publishes* the blocks of each read it answered
wholly from them, with the file's size as it answered. The front end serves later reads of
those blocks that end within that size, until the cache *drops* the file.

The rule that keeps those answers the cache's own (docs/cache.md, "The data plane in C"):
the store calls :meth:`ServedFiles.drop` BEFORE any change of a published file's cached
bytes, of the blocks that hold them, or of its size takes effect (``BlockStore.changing``),
and ``drop`` returns only when no reply from those blocks is still being sent. A file is
published only in a state that holds every write answered before (no write of it in
progress here, none queued or answered in C and not yet applied: the front end refuses the
publication then), and only its whole blocks that know every byte up to the size.

Under the same rule the front end answers *stream-sized* reads of a file the cache *marks*
from the I/O daemons itself (``csrc/front/streams.c``): the cache marks a file when it
reads it as a stream in a state where its answer would be the servers' bytes alone -- no
dirty block, no queued stream data, no write or truncation of it in progress -- with the
size it answers with (:meth:`ServedFiles.mark_stream`); every change drops the mark with
the file's publications.

What the front end reads does not touch the replacement policy; :meth:`touch_recent` tells
it, before each eviction, which published files were read there since.

The arena's pages are faulted in by the front end's own thread ahead of the buffers the
store hands out (``warm``, csrc/front/warm.c): each first write into a page of a fresh
arena otherwise cost this thread a fault and the page's zeroing.
"""

from __future__ import annotations

import mmap
import time
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ._policy import ReplacementPolicy
    from ._store import BlockStore
    from ._table import FileState

__all__ = ["AHEAD_BYTES", "TOUCH_EVERY", "WARM_AHEAD", "BlockServer", "ServedFiles",
           "StreamMarker"]

TOUCH_EVERY = 0.05  # seconds between two passes telling the policy what the front end read
AHEAD_BYTES = 64 << 20  # a read answered here publishes this much of the file past it too
WARM_AHEAD = 64 << 20  # the arena's pages faulted in this far past the last buffer handed out


class BlockServer(Protocol):
    """What answers reads from published blocks (the C front end's Session)."""

    def serve_arena(self, buffer: mmap.mmap, block_size: int, max_read: int) -> None: ...

    def publish(self, ino: int, size: int, first: int, blocks: list[memoryview]) -> bool: ...

    def serve_drop(self, ino: int) -> None: ...

    def serve_recent(self) -> list[int]: ...

    def warm(self, upto: int) -> None: ...


class StreamMarker(Protocol):
    """What lets the front end answer a file's stream reads from the servers (the mount's
    ``fuse/cstreams.py``: it knows the file's stripe and the daemons' connections)."""

    def mark(self, ino: int, size: int) -> bool: ...

    def refill(self) -> None: ...


class ServedFiles:
    """The arena the cache's buffers come from, and the files published to ``server``.

    Args:
        server: the front end.
        block_size: the cache's block size.
        capacity_blocks: the cache's blocks at most (the arena's size).
        max_read: reads this large at most are answered there (a stream-sized read of
            blocks all cached whole is answered from them here too: ``BlockCache._cached``).
    """

    def __init__(self, server: BlockServer, block_size: int, capacity_blocks: int,
                 max_read: int) -> None:
        self.server = server
        self.block_size = block_size
        # pages are only touched as blocks are used, as the bytearrays they replace
        self._map = mmap.mmap(-1, max(1, capacity_blocks) * block_size,
                              flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self._arena = memoryview(self._map)
        server.serve_arena(self._map, block_size, max_read)
        # ino -> the blocks published (the front end keeps where they are)
        self.files: dict[int, set[int]] = {}
        self.counters = {"publications": 0, "refused": 0, "drops": 0, "stream_marks": 0}
        # the front end answers stream reads from the servers through this (None: it does not)
        self.streams: StreamMarker | None = None
        self.streaming: set[int] = set()  # files marked (a subset of ``files``' keys)
        self._touched_at = -TOUCH_EVERY
        self._warm_asked = 0

    def buffer(self, index: int) -> memoryview:
        """Block buffer ``index`` of the arena (each index handed out once, by the store, in
        order); the front end is asked to fault in ``WARM_AHEAD`` past it, half of that at
        a time."""
        bs = self.block_size
        end = (index + 1) * bs
        if end > self._warm_asked - WARM_AHEAD // 2:
            self._warm_asked = end + WARM_AHEAD
            self.server.warm(self._warm_asked)
        return self._arena[index * bs:end]

    def publish(self, store: BlockStore, ino: int, fs: FileState, first: int, last: int,
                size: int) -> None:
        """A read of blocks ``first..last`` of ``ino`` was answered from them, the file
        ``size`` bytes long: publish the run of blocks from ``first`` on -- up to
        ``AHEAD_BYTES`` past ``last``, so that the next reads of a sequential reader (and
        the kernel's read-ahead, which asks before the last answer is out) find theirs
        published too -- that are cached whole and know every byte up to it. Blocks
        published already are not sent again (a change of the file drops them all)."""
        if fs.writing or fs.truncating or (fs.stream is not None and fs.stream.pending):
            return
        bs = self.block_size
        table = store.table
        known = self.files.get(ino, ())
        runs: list[tuple[int, list[memoryview]]] = []
        end = min(last + max(1, AHEAD_BYTES // bs), (size - 1) // bs)
        for blk in range(first, end + 1):
            if blk in known:
                continue
            e = table.get((ino, blk))
            if e is None or store.locks.busy((ino, blk)) or not store.covers(e, blk, size, 0, bs):
                break
            if runs and runs[-1][0] + len(runs[-1][1]) == blk:
                runs[-1][1].append(e.buf)
            else:
                runs.append((blk, [e.buf]))
        for start, bufs in runs:
            if not self.server.publish(ino, size, start, bufs):
                self.counters["refused"] += 1
                return
            self.files.setdefault(ino, set()).update(range(start, start + len(bufs)))
            self.counters["publications"] += 1

    def mark_stream(self, ino: int, fs: FileState | None, size: int) -> None:
        """A stream read of ``ino`` (``size`` bytes long) is answered here: the front end
        answers the next ones from the servers if nothing here is newer than their bytes
        -- no dirty block, no queued stream data, no write or truncation in progress. A
        file marked already, whose read still came here, found no connection free: the
        marker opens more."""
        if self.streams is None:
            return
        if ino in self.streaming:
            self.streams.refill()
            return
        if fs is not None and (fs.dirty or fs.writing or fs.truncating or
                               (fs.stream is not None and fs.stream.pending)):
            return
        if self.streams.mark(ino, size):
            self.files.setdefault(ino, set())
            self.streaming.add(ino)
            self.counters["stream_marks"] += 1

    def drop(self, ino: int) -> None:
        """``ino`` is about to change here: the front end stops answering from it first."""
        self.streaming.discard(ino)
        if self.files.pop(ino, None) is not None:
            self.counters["drops"] += 1
            self.server.serve_drop(ino)

    def touch_recent(self, policy: ReplacementPolicy) -> None:
        """Count the published blocks of files read in the front end as used -- at most
        every ``TOUCH_EVERY`` seconds: a direct reclaim evicts one block per allocation,
        and touching every block of a large file each time would cost more than the
        recency is worth."""
        now = time.monotonic()
        if now - self._touched_at < TOUCH_EVERY:
            return
        self._touched_at = now
        for ino in self.server.serve_recent():
            for blk in self.files.get(ino, ()):
                policy.touched((ino, blk))
