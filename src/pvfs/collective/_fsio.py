"""The file-system side of a collective file: a pvfs ``File`` that counts its calls.

The MPI-IO caching paper's table 1 counts the ``write()`` calls that reach the file system;
:class:`CountingFile` counts the same thing at the native API (one contiguous ``pwrite`` = one
file-system write), so every method — independent, two-phase, caching, write-behind — is
measured with one ruler; a list-I/O call counts as one write of several regions. Shared by the main thread and the write-behind thread.
"""

from __future__ import annotations

import threading
import time
from typing import Any


def straddles(offset: int, length: int, unit: int) -> bool:
    """Whether the write ``[offset, offset + length)`` straddles a stripe unit: it crosses
    a unit boundary and covers at least one of the units it touches only in part (a write
    of whole units, or one inside a unit, does not). Liao et al. align write-behind's
    writes to these boundaries so no two writers share a unit's lock or daemon request."""
    if unit <= 0 or length <= 0:
        return False
    end = offset + length
    return (end - 1) // unit > offset // unit and bool(offset % unit or end % unit)


class CountingFile:
    """Contiguous reads and writes on a native ``File``, counted; ``unit``: the file's
    stripe unit, to count the writes that straddle one (0: the native file's, if known)."""

    def __init__(self, file: Any, unit: int = 0) -> None:
        self.file = file
        ssize = getattr(getattr(file, "stripe", None), "ssize", 0)
        self.unit = unit or (ssize if isinstance(ssize, int) else 0)
        self.writes = self.reads = 0
        self.regions = 0  # contiguous regions written (a list call writes several)
        self.straddling = 0  # contiguous regions written that straddle a stripe unit
        self.bytes_written = self.bytes_read = 0
        self._lock = threading.Lock()
        #: ``(start, end, offset, length, "r"|"ra"|"w")`` of every call when a list (tracing;
        #: "ra": read by the read-ahead helper thread)
        self.trace: list[tuple[float, float, int, int, str]] | None = None

    def pwrite(self, data: memoryview | bytes, offset: int) -> None:
        n = len(data)
        if not n:
            return
        with self._lock:
            self.writes += 1
            self.regions += 1
            self.bytes_written += n
            self.straddling += straddles(offset, n, self.unit)
        began = time.monotonic()
        self.file.pwrite(data, offset)
        if self.trace is not None:
            self.trace.append((began, time.monotonic(), offset, n, "w"))

    def write_list(self, regions: list[tuple[int, int]], data: memoryview | bytes) -> None:
        """One list-I/O call (one request per I/O daemon it touches) for many regions."""
        if not regions:
            return
        with self._lock:
            self.writes += 1
            self.regions += len(regions)
            self.bytes_written += len(data)
            self.straddling += sum(straddles(o, n, self.unit) for o, n in regions)
        self.file.write_list(regions, data)

    def preadinto(self, buf: memoryview, offset: int) -> int:
        with self._lock:
            self.reads += 1
            self.bytes_read += len(buf)
        if self.trace is None:
            return self.file.preadinto(buf, offset)
        began = time.monotonic()
        got = self.file.preadinto(buf, offset)
        # "ra": the read-ahead helper thread's read (tracing which reads read a page again)
        kind = "ra" if threading.current_thread().name == "pvfs-readahead" else "r"
        self.trace.append((began, time.monotonic(), offset, len(buf), kind))
        return got

    def pread(self, length: int, offset: int) -> bytes:
        buf = bytearray(length)
        self.preadinto(memoryview(buf), offset)
        return bytes(buf)

    def counters(self) -> dict[str, int]:
        return {"fs_writes": self.writes, "fs_write_regions": self.regions,
                "fs_writes_straddling": self.straddling,
                "fs_reads": self.reads,
                "fs_bytes_written": self.bytes_written, "fs_bytes_read": self.bytes_read}
