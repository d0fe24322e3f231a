"""An fsx-like operation runner (after xfstests' ``ltp/fsx``), for the truncate-race tests.

fsx keeps the file's expected contents in memory and checks every read against it; mapped
reads and writes go through ``mmap`` so the kernel's page cache and read-ahead take part. This
is the subset the mount's truncate race needed (issue 9): ``write``, ``mapwrite``, ``read``,
``mapread``, ``truncate``, ``copy_range``, in fsx's ``--replay-ops`` line format
(``op arg0 arg1 arg2 [*]``), plus a seeded generator of such lines.
"""

from __future__ import annotations

import mmap
import os
import random
import threading
from dataclasses import dataclass, field

PAGE = mmap.PAGESIZE


class BadData(AssertionError):
    """A read returned bytes the model says the file does not hold."""


@dataclass
class FsxFile:
    """One open file and the model of what it holds."""

    fd: int
    model: bytearray = field(default_factory=bytearray)
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    ops: int = 0

    def run(self, line: str) -> None:
        """Apply one replay line (``op a b c``); ``*`` markers are ignored as fsx does."""
        words = [w for w in line.split() if w != "*"]
        if not words or words[0].startswith("#"):
            return
        op, args = words[0], [int(w, 0) for w in words[1:]]
        self.ops += 1
        getattr(self, "op_" + op)(*args)

    # ------------------------------------------------------------------ writes

    def _data(self, n: int) -> bytes:
        return self.rng.randbytes(n)

    def _put(self, off: int, data: bytes) -> None:
        if off > len(self.model):
            self.model.extend(bytes(off - len(self.model)))
        self.model[off:off + len(data)] = data

    def op_write(self, off: int, size: int, _fsize: int = 0) -> None:
        data = self._data(size)
        os.pwrite(self.fd, data, off)
        self._put(off, data)

    def op_mapwrite(self, off: int, size: int, _fsize: int = 0) -> None:
        if size == 0:
            return
        data = self._data(size)
        if off + size > len(self.model):
            os.ftruncate(self.fd, off + size)
            self.model.extend(bytes(off + size - len(self.model)))
        pg = off - off % PAGE
        with mmap.mmap(self.fd, off + size - pg, mmap.MAP_SHARED,
                       mmap.PROT_READ | mmap.PROT_WRITE, offset=pg) as m:
            m[off - pg:off - pg + size] = data
            m.flush()
        self._put(off, data)

    def op_truncate(self, _zero: int, size: int, _fsize: int = 0) -> None:
        os.ftruncate(self.fd, size)
        if size < len(self.model):
            del self.model[size:]
        else:
            self.model.extend(bytes(size - len(self.model)))

    def op_copy_range(self, src: int, size: int, dst: int, _fsize: int = 0) -> None:
        if size == 0 or src >= len(self.model):
            return
        done = 0
        while done < size:
            n = os.copy_file_range(self.fd, self.fd, size - done, src + done, dst + done)
            if n == 0:
                break
            done += n
        self._put(dst, bytes(self.model[src:src + done]))

    # ------------------------------------------------------------------- reads

    def _check(self, what: str, off: int, got: bytes) -> None:
        want = bytes(self.model[off:off + len(got)])
        if got != want:
            bad = next(i for i in range(len(got)) if got[i] != want[i])
            raise BadData(f"op {self.ops} {what} at {off:#x}: first bad byte at {off + bad:#x} "
                          f"(good {want[bad]:#04x}, bad {got[bad]:#04x}), file size "
                          f"{len(self.model):#x}")

    def op_read(self, off: int, size: int, _fsize: int = 0) -> None:
        if size == 0 or off + size > len(self.model):
            return  # fsx skips reads past the end of file
        self._check("read", off, os.pread(self.fd, size, off))

    def op_mapread(self, off: int, size: int, _fsize: int = 0) -> None:
        if size == 0 or off + size > len(self.model):
            return
        pg = off - off % PAGE
        with mmap.mmap(self.fd, off + size - pg, mmap.MAP_SHARED, mmap.PROT_READ,
                       offset=pg) as m:
            got = bytes(m[off - pg:off - pg + size])
        self._check("mapread", off, got)

    def check_all(self) -> None:
        """Read the whole file back with pread and compare; the size too."""
        size = os.fstat(self.fd).st_size
        if size != len(self.model):
            raise BadData(f"size {size:#x}, model {len(self.model):#x}")
        self._check("final read", 0, os.pread(self.fd, size, 0))


def random_ops(rng: random.Random, count: int, max_len: int = 0x40000,
               max_op: int = 0x10000) -> list[str]:
    """``count`` fsx-style lines over a file of at most ``max_len`` bytes, weighted towards the
    mix that races truncation: mapped reads, truncates down and up, partial-block writes."""
    size = 0
    out: list[str] = []
    for _ in range(count):
        op = rng.choices(["write", "mapwrite", "read", "mapread", "truncate", "copy_range"],
                         [3, 2, 2, 3, 2, 1])[0]
        n = rng.randrange(1, max_op)
        off = rng.randrange(0, max_len - n)
        if op == "truncate":
            new = rng.randrange(0, max_len)
            out.append(f"truncate 0x0 {new:#x} {size:#x}")
            size = new
        elif op == "copy_range":
            if size < 2:
                continue
            src = rng.randrange(0, size - 1)
            n = min(n, size - src)
            dst = rng.randrange(0, max_len - n)
            if abs(dst - src) < n:
                continue  # fsx never copies overlapping ranges
            out.append(f"copy_range {src:#x} {n:#x} {dst:#x} {size:#x}")
            size = max(size, dst + n)
        elif op in ("read", "mapread"):
            if size == 0:
                continue
            off = rng.randrange(0, size)
            n = min(n, size - off)
            out.append(f"{op} {off:#x} {n:#x} {size:#x}")
        else:
            out.append(f"{op} {off:#x} {n:#x} {size:#x}")
            size = max(size, off + n)
    return out


class Racer(threading.Thread):
    """Keeps kernel reads of a file in flight: drops its page cache and asks for read-ahead of
    all of it, over and over, on its own descriptor (results unchecked: the main sequence and
    the final comparison judge). This is what widens a truncate race window from luck to a
    certainty: some READ is always in flight when a truncate comes."""

    def __init__(self, path: os.PathLike | str) -> None:
        super().__init__(daemon=True)
        self.fd = os.open(path, os.O_RDONLY)
        self.done = threading.Event()
        self.reads = 0

    def run(self) -> None:
        try:
            while not self.done.is_set():
                size = os.fstat(self.fd).st_size
                os.posix_fadvise(self.fd, 0, 0, os.POSIX_FADV_DONTNEED)
                os.posix_fadvise(self.fd, 0, size, os.POSIX_FADV_WILLNEED)
                os.pread(self.fd, 4096, random.randrange(0, max(size, 1)))
                self.reads += 1
        finally:
            os.close(self.fd)

    def stop(self) -> None:
        self.done.set()
        self.join(10)
