"""Two-stage write-behind for write-only, non-atomic opens (MPI-IO caching paper §4).

Stage one: a write is cut into per-page pieces; each piece goes into the local sub-buffer of
the rank that holds its page in stage two (page ``p`` on rank ``p mod n``), ``sub_bytes``
(64 KiB) per destination. A full sub-buffer is sent with a nonblocking send and a second
buffer takes over (double buffering); the first must be delivered before it is reused.

Stage two: a receiver thread on every rank (it must answer while the main thread computes or
waits in the application's own MPI calls) drops incoming pieces into the global pages it
holds. When the pages pass ``cache_bytes`` the oldest are written; at close every rank sends
what is left plus an end marker to every other rank, waits for everyone's end markers, and
writes its pages: aligned, page-sized (stripe-unit) regions, up to ``flush_bytes`` of them in
one pvfs list-I/O call (one request per I/O daemon rather than one per page).

No locks, no metadata: a write-only file with non-overlapping writes needs no coherence
(the paper's argument); overlapping writes from different ranks land in arrival order.
"""

from __future__ import annotations

import bisect
import threading
import time
from array import array
from collections import OrderedDict, deque
from typing import Any

from pvfs.collective._fsio import CountingFile
from pvfs.collective._wait import (
    Backoff,
    lower_switch_interval,
    restore_switch_interval,
    until,
)

TAG = 21


class _Page:
    """A stage-two page: its bytes and the written extents (merged, sorted)."""

    __slots__ = ("data", "extents")

    def __init__(self, size: int) -> None:
        self.data = bytearray(size)
        self.extents: list[list[int]] = []

    def add(self, off: int, chunk: bytes | memoryview) -> None:
        end = off + len(chunk)
        self.data[off:end] = chunk
        ext = self.extents
        if not ext or off > ext[-1][1]:
            ext.append([off, end])  # the common case: appending in file order
            return
        i = bisect.bisect_left(ext, [off, -1])
        if i > 0 and ext[i - 1][1] >= off:
            i -= 1
        lo, hi, j = min(off, ext[i][0]) if i < len(ext) else off, end, i
        while j < len(ext) and ext[j][0] <= hi:
            lo, hi = min(lo, ext[j][0]), max(hi, ext[j][1])
            j += 1
        ext[i:j] = [[lo, hi]]

    def full(self, size: int) -> bool:
        return len(self.extents) == 1 and self.extents[0][0] == 0 and self.extents[0][1] == size


class WriteBehind:
    """One rank's side of the two-stage buffering (construct collectively)."""

    def __init__(self, comm: Any, fs: CountingFile, page_size: int, cache_bytes: int,
                 sub_bytes: int = 64 << 10, flush_bytes: int = 16 << 20,
                 sub_buffers: int = 2, early_bytes: int = 1 << 20) -> None:
        self.comm = comm  # a private duplicate: only this object's messages travel on it
        self.n, self.rank = comm.Get_size(), comm.Get_rank()
        self.fs = fs
        self.ps = page_size
        self.max_pages = max(1, cache_bytes // page_size)
        self.sub_bytes = sub_bytes
        self.flush_bytes = flush_bytes
        self.sub_buffers = max(2, sub_buffers)
        self._max_pairs = max(1, sub_bytes // 16)
        self.max_message = 8 + 16 * self._max_pairs + sub_bytes
        self._fill: dict[int, tuple[array, bytearray]] = {}
        self._inflight: dict[int, list[tuple[Any, bytearray]]] = {}
        from mpi4py import MPI

        self._byte = MPI.BYTE
        self.pages: OrderedDict[int, _Page] = OrderedDict()
        # Full pages wait here for the receiver thread to write them, early_bytes at a time,
        # while the program goes on (the paper's "global buffers full: written").
        # (at most a quarter of stage two, so a small cache_bytes writes early too)
        self.early_bytes = max(page_size, min(early_bytes, cache_bytes // 4))
        self._ready: dict[int, _Page] = {}
        self._plock = threading.Lock()  # pages and _ready
        # Held from taking pages out of ``pages``/``_ready`` until they are written, so two
        # writes of one page (a rewrite after an early write) reach pvfs in order.
        self._flock = threading.Lock()
        self.early_pages = self.early_writes = 0
        self.sent_buffers = self.received_buffers = 0
        self.evicted_pages = 0
        self.wait_s = self.drain_s = self.flush_s = 0.0
        self.stage1_cpu = self.stage2_cpu = 0.0  # CPU seconds of the cutting / applying
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        if self.n > 1:
            # The receiver must get the GIL soon after a message arrives, not after the
            # main thread's default 5 ms slice; restored at close.
            lower_switch_interval()
            self._thread = threading.Thread(target=self._receive, name="pvfs-write-behind",
                                            daemon=True)
            self._thread.start()

    # ------------------------------------------------------------------ stage one
    def write(self, regions: list[tuple[int, int]], data: memoryview) -> None:
        t0 = time.thread_time()
        try:
            self._cut(regions, data)
        finally:
            self.stage1_cpu += time.thread_time() - t0

    def _cut(self, regions: list[tuple[int, int]], data: memoryview) -> None:
        ps, n, me, fill = self.ps, self.n, self.rank, self._fill
        pos = 0
        for off, length in regions:
            while length > 0:
                page = off // ps
                cut = min(length, (page + 1) * ps - off)
                dest = page % n
                if dest == me:
                    self._apply([(off, cut)], data[pos:pos + cut])
                else:
                    entry = fill.get(dest)
                    if entry is None:
                        entry = fill[dest] = (array("q"), bytearray())
                    regs, buf = entry
                    # A message never passes sub_bytes of data nor sub_bytes of offset
                    # pairs, so the receiver's pre-posted buffers always fit it.
                    cut = min(cut, self.sub_bytes - len(buf))
                    regs.append(off)
                    regs.append(cut)
                    buf += data[pos:pos + cut]
                    if len(buf) >= self.sub_bytes or len(regs) >= self._max_pairs * 2:
                        self._ship(dest)
                off += cut
                pos += cut
                length -= cut

    def _ship(self, dest: int) -> None:
        entry = self._fill.pop(dest, None)
        if entry is None:
            return
        regs, blob = entry
        flying = self._inflight.setdefault(dest, [])
        while flying and flying[0][0].Test():
            flying.pop(0)
        if len(flying) >= self.sub_buffers - 1:
            # Double buffering (sub_buffers=2): the buffer sent before must be delivered
            # before another one goes out to the same rank.
            t0 = time.perf_counter()
            until(flying[0][0].Test, f"write-behind buffer to rank {dest}", cap=2e-4)
            flying.pop(0)
            self.wait_s += time.perf_counter() - t0
        # One raw message, no pickling: [count][offset, length]*count, then the bytes.
        msg = bytearray(array("q", [len(regs) // 2]).tobytes())
        msg += regs.tobytes()
        msg += blob
        flying.append((self.comm.Isend([msg, self._byte], dest=dest, tag=TAG), msg))
        self.sent_buffers += 1

    # ------------------------------------------------------------------ stage two
    def _apply(self, regs: list[tuple[int, int]], blob: bytes | memoryview) -> None:
        view = memoryview(blob)
        pos = 0
        ps = self.ps
        with self._plock:
            for off, length in regs:
                page, within = divmod(off, ps)
                entry = self.pages.get(page)
                if entry is None:
                    entry = self._ready.pop(page, None)  # rewritten before its early write
                    if entry is None:
                        entry = _Page(ps)
                    self.pages[page] = entry
                entry.add(within, view[pos:pos + length])
                pos += length
                if entry.full(ps):
                    self._ready[page] = self.pages.pop(page)
            over = len(self.pages) + len(self._ready) > self.max_pages
        if over:
            self._evict()

    def _evict(self) -> None:
        """Stage two is over ``cache_bytes``: write every full page, then the oldest."""
        with self._flock:
            with self._plock:
                out = sorted(self._ready.items())
                self._ready.clear()
                full = len(out)
                while self.pages and len(self.pages) + len(out) > self.max_pages:
                    out.append(self.pages.popitem(last=False))
            self.early_pages += full
            self.evicted_pages += len(out) - full
            self._write_pages(out)

    def _write_early(self) -> None:
        """Write the full pages gathered so far (receiver thread; the GIL is released while
        the daemons are written, so the program and MPI progress go on)."""
        with self._flock:
            with self._plock:
                out = sorted(self._ready.items())
                self._ready.clear()
            self.early_pages += len(out)
            self.early_writes += 1
            self._write_pages(out)

    def _ready_bytes(self) -> int:
        return len(self._ready) * self.ps

    def _write_pages(self, pages: list[tuple[int, _Page]]) -> None:
        """Pages in page order, aligned regions, ``flush_bytes`` per list-I/O call (one
        request per I/O daemon instead of one per page)."""
        regions: list[tuple[int, int]] = []
        parts: list[memoryview] = []
        size = 0
        for page, entry in sorted(pages, key=lambda pe: pe[0]):
            view = memoryview(entry.data)
            for lo, hi in entry.extents:
                regions.append((page * self.ps + lo, hi - lo))
                parts.append(view[lo:hi])
                size += hi - lo
            if size >= self.flush_bytes:
                self.fs.write_list(regions, b"".join(parts))
                regions, parts, size = [], [], 0
        if regions:
            self.fs.write_list(regions, b"".join(parts))

    def _write_all(self) -> None:
        """Every page still held here (at close, after the receiver thread ended)."""
        with self._flock, self._plock:
            out = list(self._ready.items()) + list(self.pages.items())
            self._ready.clear()
            self.pages.clear()
        self._write_pages(out)

    def _receive(self) -> None:
        """Stage two's receiver: ``sub_buffers`` receives per sending rank are posted ahead
        (any source), so a sub-buffer is delivered as soon as either thread of this rank
        enters MPI — the main thread's own sends and tests move it — and the sender's
        double buffer frees without waiting for this thread to be scheduled; the thread
        only drops delivered buffers into pages and posts their receives again."""
        from mpi4py import MPI

        status = MPI.Status()
        ended = 0
        backoff = Backoff(cap=5e-4)
        # Receives posted with the same source and tag match arriving messages in the order
        # they were posted, so taking them from the head of this queue applies each
        # sender's buffers (and its end marker last) in the order it sent them.
        posted: deque[tuple[Any, bytearray]] = deque()
        for _ in range((self.n - 1) * self.sub_buffers):
            buf = bytearray(self.max_message)
            posted.append((self.comm.Irecv([buf, MPI.BYTE], source=MPI.ANY_SOURCE, tag=TAG),
                           buf))
        try:
            while ended < self.n - 1:
                req, buf = posted[0]
                if not req.Test(status):
                    backoff.pause()
                    continue
                backoff.reset()
                posted.popleft()
                msg = memoryview(buf)[:status.Get_count(MPI.BYTE)]
                count = array("q", bytes(msg[:8]))[0]
                if count < 0:
                    ended += 1
                else:
                    self.received_buffers += 1
                    t0 = time.thread_time()
                    flat = array("q")
                    flat.frombytes(msg[8:8 + 16 * count])
                    regs = list(zip(flat[0::2], flat[1::2], strict=True))
                    self._apply(regs, msg[8 + 16 * count:])
                    self.stage2_cpu += time.thread_time() - t0
                    if self._ready_bytes() >= self.early_bytes:
                        self._write_early()
                del msg
                posted.append((self.comm.Irecv([buf, MPI.BYTE], source=MPI.ANY_SOURCE,
                                               tag=TAG), buf))
            for req, _ in posted:  # nothing more can come: every sender's end marker is in
                req.Cancel()
            MPI.Request.Waitall([req for req, _ in posted])
        except BaseException as exc:  # noqa: BLE001 - re-raised by close()
            self._error = exc

    # ------------------------------------------------------------------ close
    def close(self) -> None:
        """Ship every buffer, collect everyone's, write the pages (collective)."""
        t_close = time.perf_counter()
        for dest in list(self._fill):
            self._ship(dest)
        until(lambda: all(r.Test() for rs in self._inflight.values() for r, _ in rs),
              "write-behind sends")
        end = array("q", [-1]).tobytes()
        ends = [self.comm.Isend([end, self._byte], dest=d, tag=TAG)
                for d in range(self.n) if d != self.rank]
        until(lambda: all(r.Test() for r in ends), "write-behind end markers")
        if self._thread is not None:
            until(lambda: not self._thread.is_alive(), "write-behind receiver")
            restore_switch_interval()
            if self._error is not None:
                raise RuntimeError(f"write-behind receiver failed: {self._error!r}")
        t0 = time.perf_counter()
        self.drain_s = t0 - t_close
        self._write_all()
        self.flush_s = time.perf_counter() - t0

    def counters(self) -> dict[str, int]:
        return {"wb_sent_buffers": self.sent_buffers,
                "wb_received_buffers": self.received_buffers,
                "wb_evicted_pages": self.evicted_pages, "wb_early_pages": self.early_pages,
                "wb_early_writes": self.early_writes, "wb_wait_ms": int(self.wait_s * 1e3),
                "wb_drain_ms": int(self.drain_s * 1e3), "wb_flush_ms": int(self.flush_s * 1e3),
                "wb_stage1_cpu_ms": int(self.stage1_cpu * 1e3),
                "wb_stage2_cpu_ms": int(self.stage2_cpu * 1e3)}
