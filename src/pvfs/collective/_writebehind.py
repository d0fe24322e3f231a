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

import sys
import threading
import time
from collections import OrderedDict
from typing import Any

from pvfs.collective._fsio import CountingFile
from pvfs.collective._pages import split
from pvfs.collective._wait import Backoff, until

TAG = 21
SWITCH_INTERVAL = 5e-4  # seconds; Python's default is 5e-3


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
        ext.append([off, end])
        if len(ext) > 1 and ext[-2][1] >= off and ext[-2][0] <= off:
            ext.pop()
            ext[-1][1] = max(ext[-1][1], end)
            return
        ext.sort()
        merged: list[list[int]] = []
        for lo, hi in ext:
            if merged and lo <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        self.extents = merged


class WriteBehind:
    """One rank's side of the two-stage buffering (construct collectively)."""

    def __init__(self, comm: Any, fs: CountingFile, page_size: int, cache_bytes: int,
                 sub_bytes: int = 64 << 10, flush_bytes: int = 16 << 20) -> None:
        self.comm = comm  # a private duplicate: only this object's messages travel on it
        self.n, self.rank = comm.Get_size(), comm.Get_rank()
        self.fs = fs
        self.ps = page_size
        self.max_pages = max(1, cache_bytes // page_size)
        self.sub_bytes = sub_bytes
        self.flush_bytes = flush_bytes
        self._fill: dict[int, tuple[list[tuple[int, int]], bytearray]] = {}
        self._inflight: dict[int, Any] = {}
        self.pages: OrderedDict[int, _Page] = OrderedDict()
        self._plock = threading.Lock()
        self.sent_buffers = self.received_buffers = 0
        self.evicted_pages = 0
        self.wait_s = self.drain_s = self.flush_s = 0.0
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._switch = sys.getswitchinterval()
        if self.n > 1:
            # The receiver must get the GIL soon after a message arrives, not after the
            # main thread's default 5 ms slice; restored at close.
            sys.setswitchinterval(min(self._switch, SWITCH_INTERVAL))
            self._thread = threading.Thread(target=self._receive, name="pvfs-write-behind",
                                            daemon=True)
            self._thread.start()

    # ------------------------------------------------------------------ stage one
    def write(self, regions: list[tuple[int, int]], data: memoryview) -> None:
        ps = self.ps
        if len(regions) == 1 and regions[0][0] // ps == (sum(regions[0]) - 1) // ps:
            pieces = [(regions[0][0], regions[0][1], 0)]  # the common case: inside one page
        else:
            pieces = [(p.page * ps + p.off, p.length, p.buf) for p in split(regions, ps)]
        for off, length, pos in pieces:
            dest = (off // ps) % self.n
            if dest == self.rank:
                self._apply([(off, length)], bytes(data[pos:pos + length]))
                continue
            entry = self._fill.get(dest)
            if entry is None:
                entry = self._fill[dest] = ([], bytearray())
            entry[0].append((off, length))
            entry[1].extend(data[pos:pos + length])
            if len(entry[1]) >= self.sub_bytes:
                self._ship(dest)

    def _ship(self, dest: int) -> None:
        entry = self._fill.pop(dest, None)
        if entry is None:
            return
        regs, blob = entry
        prev = self._inflight.get(dest)
        if prev is not None:
            # Double buffering: the other buffer must be on its way out before this one goes.
            t0 = time.perf_counter()
            until(prev.Test, f"write-behind buffer to rank {dest}", cap=2e-4)
            self.wait_s += time.perf_counter() - t0
        self._inflight[dest] = self.comm.isend((regs, bytes(blob)), dest=dest, tag=TAG)
        self.sent_buffers += 1

    # ------------------------------------------------------------------ stage two
    def _apply(self, regs: list[tuple[int, int]], blob: bytes) -> None:
        view = memoryview(blob)
        pos = 0
        evict: list[tuple[int, _Page]] = []
        with self._plock:
            for off, length in regs:
                page, within = divmod(off, self.ps)
                entry = self.pages.get(page)
                if entry is None:
                    entry = self.pages[page] = _Page(self.ps)
                entry.add(within, view[pos:pos + length])
                pos += length
            while len(self.pages) > self.max_pages:
                evict.append(self.pages.popitem(last=False))
        for page, entry in evict:
            self.evicted_pages += 1
            self._write_page(page, entry)

    def _write_page(self, page: int, entry: _Page) -> None:
        view = memoryview(entry.data)
        for lo, hi in entry.extents:
            self.fs.pwrite(view[lo:hi], page * self.ps + lo)

    def _write_all(self) -> None:
        """Every page held here, aligned regions, ``flush_bytes`` per list-I/O call (one
        request per I/O daemon instead of one per page)."""
        regions: list[tuple[int, int]] = []
        parts: list[memoryview] = []
        size = 0
        for page in sorted(self.pages):
            entry = self.pages[page]
            view = memoryview(entry.data)
            for lo, hi in entry.extents:
                regions.append((page * self.ps + lo, hi - lo))
                parts.append(view[lo:hi])
                size += hi - lo
            if size >= self.flush_bytes:
                self.fs.write_list(regions, b"".join(parts))
                regions, parts, size = [], [], 0
        self.fs.write_list(regions, b"".join(parts))

    def _receive(self) -> None:
        from mpi4py import MPI

        status = MPI.Status()
        ended = 0
        backoff = Backoff(cap=5e-4)
        try:
            while ended < self.n - 1:
                if not self.comm.iprobe(source=MPI.ANY_SOURCE, tag=TAG, status=status):
                    backoff.pause()
                    continue
                backoff.reset()
                msg = self.comm.recv(source=status.Get_source(), tag=TAG)
                if msg is None:
                    ended += 1
                    continue
                self.received_buffers += 1
                self._apply(*msg)
        except BaseException as exc:  # noqa: BLE001 - re-raised by close()
            self._error = exc

    # ------------------------------------------------------------------ close
    def close(self) -> None:
        """Ship every buffer, collect everyone's, write the pages (collective)."""
        t_close = time.perf_counter()
        for dest in list(self._fill):
            self._ship(dest)
        until(lambda: all(r.Test() for r in self._inflight.values()), "write-behind sends")
        ends = [self.comm.isend(None, dest=d, tag=TAG) for d in range(self.n) if d != self.rank]
        until(lambda: all(r.Test() for r in ends), "write-behind end markers")
        if self._thread is not None:
            until(lambda: not self._thread.is_alive(), "write-behind receiver")
            sys.setswitchinterval(self._switch)
            if self._error is not None:
                raise RuntimeError(f"write-behind receiver failed: {self._error!r}")
        t0 = time.perf_counter()
        self.drain_s = t0 - t_close
        self._write_all()
        self.pages.clear()
        self.flush_s = time.perf_counter() - t0

    def counters(self) -> dict[str, int]:
        return {"wb_sent_buffers": self.sent_buffers,
                "wb_received_buffers": self.received_buffers,
                "wb_evicted_pages": self.evicted_pages, "wb_wait_ms": int(self.wait_s * 1e3),
                "wb_drain_ms": int(self.drain_s * 1e3), "wb_flush_ms": int(self.flush_s * 1e3)}
