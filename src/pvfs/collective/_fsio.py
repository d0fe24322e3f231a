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


class CountingFile:
    """Contiguous reads and writes on a native ``File``, counted."""

    def __init__(self, file: Any) -> None:
        self.file = file
        self.writes = self.reads = 0
        self.regions = 0  # contiguous regions written (a list call writes several)
        self.bytes_written = self.bytes_read = 0
        self._lock = threading.Lock()
        #: ``(start, end, offset, length, "r"|"w")`` of every call when a list (tracing)
        self.trace: list[tuple[float, float, int, int, str]] | None = None

    def pwrite(self, data: memoryview | bytes, offset: int) -> None:
        n = len(data)
        if not n:
            return
        with self._lock:
            self.writes += 1
            self.regions += 1
            self.bytes_written += n
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
        self.file.write_list(regions, data)

    def preadinto(self, buf: memoryview, offset: int) -> int:
        with self._lock:
            self.reads += 1
            self.bytes_read += len(buf)
        if self.trace is None:
            return self.file.preadinto(buf, offset)
        began = time.monotonic()
        got = self.file.preadinto(buf, offset)
        self.trace.append((began, time.monotonic(), offset, len(buf), "r"))
        return got

    def pread(self, length: int, offset: int) -> bytes:
        buf = bytearray(length)
        self.preadinto(memoryview(buf), offset)
        return bytes(buf)

    def counters(self) -> dict[str, int]:
        return {"fs_writes": self.writes, "fs_write_regions": self.regions,
                "fs_reads": self.reads,
                "fs_bytes_written": self.bytes_written, "fs_bytes_read": self.bytes_read}
