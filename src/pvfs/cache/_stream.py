"""Large requests of the block cache: stream writes, stream reads and read-ahead.

:class:`Streamer` is the part of :class:`pvfs.cache.BlockCache` that moves them, over the
cache's :class:`BlockStore`. Which requests come here is the :class:`StreamPolicy`'s call.

A *stream write* goes into the file's FIFO queue of pending writes -- as it is when nobody can
change its bytes (:func:`frozen`), else copied once -- and the call returns; cached blocks it overlaps are updated in place. A per-file streamer task
(or ``flush``, the flusher, or a throttled writer) writes the queue back under the file's
``io_lock``, coalescing contiguous entries into stripe-aligned writes of up to
``StreamPolicy.max_write``. Entries leave the queue only once their write finished, so a
cancelled write-back loses nothing.

Ordering rule that keeps this safe next to the block path: a pending entry is newer than every
block modified before it was queued (those blocks were updated in place), and anything that
would read the servers' copy of its range, or make a block or the servers newer than it there,
first writes it back (``_drain``): block fetches, read-modify-write, write-through, block
writes and stream reads overlapping it. Truncate trims the queue instead.

A *stream read* is one backend read of the whole range (minus what read-ahead already holds),
with the file's dirty blocks laid over it; it inserts nothing into the block table (streams do
not wash out the cache's small blocks). When reads of a file are sequential, a task fetches the
next ``StreamPolicy.readahead`` bytes in one backend read. Read-ahead data is dropped by every
write to the file, a completed block write-back, ``invalidate``, ``truncate`` and ``forget``.
"""

from __future__ import annotations

import bisect
from collections import OrderedDict, deque
from typing import TYPE_CHECKING

import trio

from ._table import FileState

if TYPE_CHECKING:
    from ._policy import Backend, StreamPolicy
    from ._store import BackendCaps, BlockStore

__all__ = ["StreamState", "Streamer"]

# Most entries one gathered write of queued stream data carries (``Streamer._gather``).
GATHER_REGIONS = 1024


def frozen(data: bytes | memoryview) -> bytes | memoryview:
    """``data`` itself when nobody can change its bytes -- ``bytes``, or a read-only view of
    ``bytes`` or of a buffer whose type says ``frozen`` (the C front end's ``WriteData``, a
    write's block handed over by the worker that received it) --, else a copy."""
    if type(data) is bytes:
        return data
    if type(data) is memoryview and data.readonly:
        obj = data.obj
        if type(obj) is bytes or getattr(obj, "frozen", False) is True:
            return data
    return bytes(data)


class StreamState:
    """Stream data of one file.

    Attributes:
        pending: queued writes ``[offset, data, seq]``, oldest first.
        seq: number of the last write queued.
        streaming: a streamer task is writing the queue back.
        ra: read-ahead chunks ``(offset, data)``, contiguous, ascending.
        ra_gen: bumped whenever read-ahead data is dropped; a fetch that finishes under a newer
            value keeps nothing.
        ra_inflight: ``(start, stop, event)`` of the read-ahead fetch in flight, or None.
        next_off: end of the latest stream read (sequential detection).
    """

    __slots__ = ("next_off", "pending", "ra", "ra_gen", "ra_inflight", "seq", "streaming")

    def __init__(self) -> None:
        self.pending: deque[list] = deque()
        self.seq = 0
        self.streaming = False
        self.ra: deque[tuple[int, bytes]] = deque()
        self.ra_gen = 0
        self.ra_inflight: tuple[int, int, trio.Event] | None = None
        self.next_off = -1

    def pending_bytes(self) -> int:
        return sum(len(p[1]) for p in self.pending)

    def overlaps(self, lo: int, hi: int) -> bool:
        """Whether a pending write touches ``[lo, hi)``."""
        return any(p[0] < hi and p[0] + len(p[1]) > lo for p in self.pending)

    def drop_readahead(self) -> None:
        self.ra.clear()
        self.ra_gen += 1
        self.ra_inflight = None


class Streamer:
    """Stream writes, stream reads and read-ahead of one cache.

    Args:
        store: the cache's blocks (stream writes update cached blocks in place; stream reads
            lay dirty blocks over what they read).
        backend: where the bytes go.
        caps: the backend's abilities (stripe windows).
        policy: thresholds, write size, read-ahead window.

    Attributes:
        nursery: where streamer and read-ahead tasks run (the cache's workers' nursery), or
            None before ``BlockCache.start``: then writes are drained by flushes only and no
            read-ahead happens.
        pending_total: bytes queued in all files.
    """

    def __init__(self, store: BlockStore, backend: Backend, caps: BackendCaps,
                 policy: StreamPolicy) -> None:
        self.store = store
        self.backend = backend
        self.caps = caps
        self.policy = policy
        self.nursery: trio.Nursery | None = None
        self.pending_total = 0
        self._ra_files: OrderedDict[int, None] = OrderedDict()

    # ---------------------------------------------------------------- writes

    async def write(self, ino: int, fs: FileState, offset: int,
                    data: bytes | memoryview) -> None:
        """Queue ``data`` at ``offset`` (write-behind as one slice); update cached blocks.

        Bytes nobody can change are kept as they are (``frozen``: the C front end's blocks,
        ``bytes``); other buffers are copied once."""
        buf = frozen(data)
        end = offset + len(buf)
        self.store.update_cached(ino, fs, offset, buf)
        fs.gen += 1  # a fetch in flight read the servers' older bytes: it must not insert
        st = fs.stream
        if st is None:
            st = fs.stream = StreamState()
        st.drop_readahead()
        st.seq += 1
        st.pending.append([offset, buf, st.seq])
        self.pending_total += len(buf)
        fs.local_end = max(fs.local_end, end)
        self.store.counters["stream_writes"] += 1
        if self.nursery is not None and not st.streaming:
            st.streaming = True
            self.nursery.start_soon(self._streamer, ino, fs, st)
        if self.pending_total > self.policy.max_pending:
            self.store.counters["stream_throttles"] += 1
            await self.drain(ino, fs, upto=st.seq)

    async def _streamer(self, ino: int, fs: FileState, st: StreamState) -> None:
        """Write the file's queue back, one coalesced write at a time, until it is empty."""
        files = self.store.files
        try:
            while st.pending and files.get(ino) is fs and fs.stream is st:
                async with fs.io_lock:
                    await self.drain_locked(ino, fs, batches=1)
        finally:
            st.streaming = False

    async def drain_overlap(self, ino: int, lo: int, hi: int) -> None:
        """Write back pending stream writes of ``ino`` if any touches ``[lo, hi)``."""
        fs = self.store.files.get(ino)
        if fs is not None and fs.stream is not None and fs.stream.pending \
                and fs.stream.overlaps(lo, hi):
            await self.drain(ino, fs)

    async def drain(self, ino: int, fs: FileState, *, upto: int | None = None) -> None:
        async with fs.io_lock:
            await self.drain_locked(ino, fs, upto=upto)

    async def drain_locked(self, ino: int, fs: FileState, *, upto: int | None = None,
                           batches: int | None = None) -> int:
        """Write queued entries (up to number ``upto``); the caller holds ``fs.io_lock``.

        A failed write is handled like a failed block write-back: its entries are dropped,
        the error parked on the file, clean cached blocks of the range dropped.
        Returns bytes written.
        """
        st = fs.stream
        c = self.store.counters
        files = self.store.files
        written = 0
        while st is not None and st.pending and files.get(ino) is fs and fs.stream is st:
            if upto is not None and st.pending[0][2] > upto:
                break
            if batches is not None:
                if batches <= 0:
                    break
                batches -= 1
            offset, count = self._batch(ino, st)
            regions: list[tuple[int, int]] | None = None
            if count == 1 and self.caps.write_list is not None and self._scattered(st):
                count, regions, parts = self._gather(st)
                if len(regions) == 1:
                    offset, regions = regions[0][0], None
            else:
                parts = [st.pending[i][1] for i in range(count)]
            data = parts[0] if len(parts) == 1 else b"".join(parts)
            try:
                if regions is None:
                    await self.backend.write(ino, offset, data)
                else:
                    await self.caps.write_list(ino, regions, data)
            except OSError as exc:
                self._pop(st, count)
                c["write_errors"] += 1
                if fs.error is None:
                    fs.error = exc
                for o, n in regions or [(offset, len(data))]:
                    self.store.invalidate(ino, o, n)
                self.store.lost_writes(ino, fs)
                continue
            self._pop(st, count)
            c["backend_writes"] += 1
            if regions is not None:
                c["list_writes"] += 1
                c["list_regions"] += len(regions)
            c["flushed_bytes"] += len(data)
            written += len(data)
        return written

    @staticmethod
    def _scattered(st: StreamState) -> bool:
        """Whether the queue's second entry does not continue its first (``_batch`` cut
        the first at a stripe window: that write stays alone and aligned)."""
        q = st.pending
        return len(q) > 1 and q[1][0] != q[0][0] + len(q[0][1])

    def _gather(self, st: StreamState) -> tuple[int, list[tuple[int, int]], list]:
        """The leading queue entries that overlap none before them, as one list write:
        ``(count, regions, parts)`` -- the entries sorted by offset, contiguous ones joined
        into one region, ``parts`` the bytes in region order. Writers taking turns on one
        file (IOR hard's ranks) queue entries that are not contiguous in the queue's order
        but are in the file's: written one by one they were one request each. Entries that
        overlap none of the others can go in any order; the first that overlaps an earlier
        one ends the batch, so a newer write of the same bytes still lands after it."""
        q = st.pending
        limit = self.policy.max_write
        spans: list[tuple[int, int, int]] = []  # (start, end, index), sorted
        total = 0
        count = 0
        for ent in q:
            lo, n = ent[0], len(ent[1])
            if count and (total + n > limit or count >= GATHER_REGIONS):
                break
            i = bisect.bisect_left(spans, (lo, lo + n, count))
            if (i > 0 and spans[i - 1][1] > lo) or (i < len(spans) and spans[i][0] < lo + n):
                break
            spans.insert(i, (lo, lo + n, count))
            total += n
            count += 1
        regions: list[tuple[int, int]] = []
        parts = []
        for lo, hi, idx in spans:
            if regions and regions[-1][0] + regions[-1][1] == lo:
                regions[-1] = (regions[-1][0], regions[-1][1] + hi - lo)
            else:
                regions.append((lo, hi - lo))
            parts.append(q[idx][1])
        return count, regions, parts

    def _pop(self, st: StreamState, count: int) -> None:
        for _ in range(count):
            self.pending_total -= len(st.pending.popleft()[1])

    def _batch(self, ino: int, st: StreamState) -> tuple[int, int]:
        """How many leading queue entries go into the next write, splitting entries in place
        so the write ends on a stripe window boundary. Returns ``(offset, count)``."""
        window = self.caps.window(ino, self.policy.max_write)
        q = st.pending
        offset = q[0][0]
        limit = (offset // window + 1) * window
        end = offset
        count = 0
        while count < len(q) and q[count][0] == end and end < limit:
            ent = q[count]
            if ent[0] + len(ent[1]) > limit:
                cut = limit - ent[0]
                q.insert(count + 1, [limit, ent[1][cut:], ent[2]])
                ent[1] = ent[1][:cut]
            end = ent[0] + len(ent[1])
            count += 1
        return offset, max(count, 1)

    def trim(self, fs: FileState, size: int) -> None:
        """Truncate to ``size``: drop queued bytes past it (they never existed)."""
        st = fs.stream
        if st is None:
            return
        st.drop_readahead()
        keep: deque[list] = deque()
        for ent in st.pending:
            if ent[0] >= size:
                self.pending_total -= len(ent[1])
                continue
            if ent[0] + len(ent[1]) > size:
                self.pending_total -= ent[0] + len(ent[1]) - size
                ent[1] = ent[1][:size - ent[0]]
            keep.append(ent)
        st.pending = keep

    def forget(self, fs: FileState) -> None:
        """The file is gone: drop its queue and read-ahead."""
        if fs.stream is not None:
            self.pending_total -= fs.stream.pending_bytes()
            fs.stream.pending.clear()
            fs.stream.drop_readahead()

    # ----------------------------------------------------------------- reads

    async def read(self, ino: int, fs: FileState | None, offset: int, end: int,
                   eff: int) -> bytes:
        """``[offset, end)`` (inside the file's ``eff`` bytes) in one piece."""
        c = self.store.counters
        c["stream_reads"] += 1
        if fs is None:
            if self.policy.readahead <= 0:
                return await self.read_direct(ino, offset, end - offset)
            fs = self.store.file(ino)  # a file read before any write here reads ahead too
        # Under the file's io_lock: no write-back of it can complete while the servers' bytes
        # are read, so every block dirty when the read began is still dirty (or newer) when
        # its ranges are laid over them. Without it a write-back finishing mid-read marked a
        # block clean, the overlay skipped it and the read returned the servers' old bytes.
        async with fs.io_lock:
            return await self._read_locked(ino, fs, offset, end, eff)

    async def _read_locked(self, ino: int, fs: FileState, offset: int, end: int,
                           eff: int) -> bytes:
        c = self.store.counters
        st = fs.stream
        if st is not None and st.pending and st.overlaps(offset, end):
            await self.drain_locked(ino, fs)
        if fs.stream is None:
            fs.stream = StreamState()
        st = fs.stream
        inflight = st.ra_inflight
        if inflight is not None and inflight[0] <= offset < inflight[1]:
            await inflight[2].wait()
        parts: list[bytes] = []
        pos = offset
        for o, d in st.ra:
            if o <= pos < o + len(d):
                take = min(end, o + len(d))
                parts.append(d[pos - o:take - o])
                pos = take
                if pos >= end:
                    break
        if pos > offset:
            c["readahead_hits"] += 1
        if pos < end:
            parts.append(await self.read_direct(ino, pos, end - pos))
        out = parts[0] if len(parts) == 1 else b"".join(parts)
        if fs.dirty:
            out = self.store.overlay_dirty(ino, fs, offset, end, out)
        self._readahead(ino, fs, st, offset, end, eff)
        return out

    async def read_direct(self, ino: int, offset: int, length: int) -> bytes:
        """One backend read; zeros past its end (holes, data only this node has)."""
        data = await self.backend.read(ino, offset, length)
        self.store.counters["backend_reads"] += 1
        return data if len(data) == length else bytes(data).ljust(length, b"\0")

    def _readahead(self, ino: int, fs: FileState, st: StreamState, offset: int, end: int,
                   eff: int) -> None:
        """After a stream read: drop consumed chunks; if sequential, keep a window ahead."""
        window = self.policy.readahead
        near = st.next_off >= 0 and st.next_off - window <= offset <= st.next_off + window
        st.next_off = max(end, st.next_off) if near else end
        if not near and st.ra:
            st.drop_readahead()  # a jump (a loop back to the start): its chunks are elsewhere
        while st.ra and st.ra[0][0] + len(st.ra[0][1]) <= offset:
            st.ra.popleft()
        if not near or window <= 0 or self.nursery is None or st.ra_inflight is not None:
            return
        ahead = max(end, st.ra[-1][0] + len(st.ra[-1][1])) if st.ra else end
        if ahead - end > window // 2 or ahead >= eff:
            return
        stop = min(eff, ahead + window)
        if st.pending and st.overlaps(ahead, stop):
            return
        self._ra_files[ino] = None
        self._ra_files.move_to_end(ino)
        while len(self._ra_files) > self.policy.max_streams:
            old, _ = self._ra_files.popitem(last=False)
            ofs = self.store.files.get(old)
            if ofs is not None and ofs.stream is not None:
                ofs.stream.drop_readahead()
        ev = trio.Event()
        st.ra_inflight = (ahead, stop, ev)
        self.nursery.start_soon(self._prefetch, ino, fs, st, ahead, stop, ev, st.ra_gen)

    async def _prefetch(self, ino: int, fs: FileState, st: StreamState, start: int, stop: int,
                        ev: trio.Event, gen: int) -> None:
        try:
            data = await self.backend.read(ino, start, stop - start)
        except OSError:
            return  # the reader that needs these bytes will get the error itself
        finally:
            if st.ra_inflight is not None and st.ra_inflight[2] is ev:
                st.ra_inflight = None
            ev.set()
        c = self.store.counters
        c["backend_reads"] += 1
        if st.ra_gen != gen or fs.stream is not st or self.store.files.get(ino) is not fs or \
                not data or (st.ra and st.ra[-1][0] + len(st.ra[-1][1]) != start):
            return
        st.ra.append((start, data))
        c["readahead_bytes"] += len(data)
