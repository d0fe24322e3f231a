"""An open pvfs file: POSIX-like calls plus list I/O, strided I/O and partitions (SPEC §4).

``set_partition(offset, gsize, stride)`` gives the thesis' partitioned file interface (fig.
3.4): afterwards ``read``/``write``/``seek`` see only the partition — ``gsize`` bytes every
``stride`` bytes from ``offset`` — and one call moves many regions in one request per daemon.
"""

from __future__ import annotations

import errno
import os
import threading
from typing import Any, Protocol, Self

from pvfs.client.buffers import byte_view, nbytes
from pvfs.client.datapath import MGR, DataPath
from pvfs.client.hints import AccessHint
from pvfs.client.modes import readable, writable
from pvfs.client.pipeline import WritePipe
from pvfs.client.readahead import ReadAhead
from pvfs.layout.describe import MAX_OFFSET, Regions, Strided, validate
from pvfs.layout.stripe import Stripe


class Opener(Protocol):
    """What a :class:`File` needs from the file system that opened it (``FileSystem`` is
    one): the manager for close/sync/truncate, the data path for the bytes. Naming only this
    keeps ``file.py`` free of ``fs.py``, which imports it."""

    data: DataPath
    cred: Any

    def meta(self, op: str, **fields: Any) -> dict: ...

    def closing(self, ino: int) -> bool: ...

    def failure(self, ino: int) -> int | None: ...

    def behind(self, ino: int, stripe: Stripe, off: int, data) -> bool: ...

    def settle(self, ino: int, keep: WritePipe | ReadAhead | None = None) -> None: ...

    def unpipe(self, pipe: WritePipe | ReadAhead) -> None: ...


class File:
    """Returned by ``FileSystem.open``; use as a context manager or call ``close``."""

    def __init__(self, fs: Opener, path: str, attrs: dict, flags: int,
                 pipe: WritePipe | None = None, ahead: ReadAhead | None = None) -> None:
        self.fs = fs
        self.path = path
        self.ino: int = attrs["ino"]
        self.stripe = Stripe(*attrs["stripe"])
        self.flags = flags
        self.closed = False
        self._pos = attrs["size"] if flags & os.O_APPEND else 0
        self._partition: Strided | None = None
        self._hint: dict[str, int] | None = None
        self._lock = threading.Lock()
        # Made from the manager's pool for this handle to write (its create's ``fresh``):
        # its writes say so, and its close has the manager ask the size afterwards.
        self._fresh = bool(attrs.get("fresh"))
        self._writes = 0  # writes of a fresh handle in flight (its close waits for them)
        self._inflight = threading.Condition()
        self._pipe = pipe  # pipelined writes (``open(..., pipeline=True)``, pipeline.py)
        self._ahead = ahead  # and reads (readahead.py)

    # ------------------------------------------------------------------ state
    def _check(self, want_read: bool = False, want_write: bool = False) -> None:
        if self.closed:
            raise ValueError("I/O operation on closed pvfs file")
        if want_read and not readable(self.flags):
            raise OSError(errno.EBADF, "file not open for reading", self.path)
        if want_write and not writable(self.flags):
            raise OSError(errno.EBADF, "file not open for writing", self.path)
        self._check_made()
        if self._pipe is not None:
            self._pipe.report()  # a pipelined write's error comes one call late

    def _settle(self, keep: ReadAhead | None = None) -> None:
        """The file's writes sent behind or pipelined answered first (and read-aheads
        dropped, but ``keep``); a pipelined write's error raised here."""
        if keep is None:
            self.fs.settle(self.ino)
        else:
            self.fs.settle(self.ino, keep=keep)
        if self._pipe is not None:
            self._pipe.report()

    def _check_made(self) -> None:
        """EIO once the manager refused this file's create made ahead (client/ahead.py)."""
        code = self.fs.failure(self.ino)
        if code is not None:
            raise OSError(errno.EIO, f"the file's create was refused: {os.strerror(code)}",
                          self.path)

    def size(self) -> int:
        """The file's current logical size (asks every daemon holding a share)."""
        self._settle()
        return self.fs.data.size(self.ino, self.stripe)

    def fileno(self) -> int:
        return self.ino

    def close(self) -> None:
        """Close the handle. The manager is told without waiting for its answer (nothing
        about a close can fail that the caller could act on); the writes of this handle
        have all been answered before it is sent (a pipelined write's error is raised
        after it)."""
        with self._inflight:
            if self.closed:
                return
            self.closed = True
            while self._writes:
                self._inflight.wait()
        if self.fs.closing(self.ino):
            return  # its create made ahead goes unopened (client/ahead.py)
        self.fs.settle(self.ino)  # (the manager asks the size of a fresh file closed)
        error = self._close_pipe()
        close = {"op": "close", "cred": self.fs.cred, "ino": self.ino}
        if self._fresh:
            close["fresh"] = True
        self.fs.data.send(MGR, close)
        if error is not None:
            try:
                raise error
            finally:
                del error

    def _close_pipe(self) -> OSError | None:
        """Close the pipelined writes' and reads' connections; the error the writes had not
        reported."""
        if self._ahead is not None:
            self._ahead.close()
            self.fs.unpipe(self._ahead)
        if self._pipe is None:
            return None
        try:
            self._pipe.close()
        except OSError as exc:
            return exc
        finally:
            self.fs.unpipe(self._pipe)
        return None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ raw description I/O
    def _read_desc(self, desc, buf) -> dict[int, int] | None:
        """Fill buf; returns the daemons' local sizes when the read reached past some EOF."""
        validate(desc)
        if desc.total() == 0:
            return None
        self._settle(keep=self._ahead)  # its own writes sent behind or pipelined come first
        if self._ahead is not None and self._hint is None and type(desc) is Regions \
                and len(desc.regions) == 1:
            result = self._ahead.read(desc.regions[0][0], buf)
        elif self._hint is None:
            result = self.fs.data.read(self.ino, self.stripe, desc, buf)
        else:
            result = self.fs.data.read(self.ino, self.stripe, desc, buf, hint=self._hint)
        return result.local_sizes if result.needs_eof_check else None

    def _write_desc(self, desc, data) -> int:
        validate(desc)
        with byte_view(data) as view:
            if len(view) != desc.total():
                raise ValueError(f"data is {len(view)} bytes, the regions need {desc.total()}")
            if not len(view):
                return 0
            if self._pipe is not None:  # (its close settles it before the manager's)
                self.fs.settle(self.ino, keep=self._pipe)  # other handles' writes first
                return self._pipe.write(desc, view)
            if not self._fresh:
                self.fs.settle(self.ino)  # (another handle's writes may wait: behind.py)
                return self.fs.data.write(self.ino, self.stripe, desc, view)
            if type(desc) is Regions and len(desc.regions) == 1 and \
                    self.fs.behind(self.ino, self.stripe, desc.regions[0][0], view):
                return len(view)  # queued, sent with the creates (client/behind.py)
            self.fs.settle(self.ino)  # not overtaking the writes queued before it
            # A fresh write must reach the daemons before the close tells the manager to
            # ask the size again (a later one would leave the size it caches stale).
            with self._inflight:
                self._check()
                self._writes += 1
            try:
                return self.fs.data.write(self.ino, self.stripe, desc, view, fresh=True)
            finally:
                with self._inflight:
                    self._writes -= 1
                    if not self._writes:
                        self._inflight.notify_all()

    # ------------------------------------------------------------------ contiguous
    def pread(self, length: int, offset: int) -> bytes:
        """Up to ``length`` bytes at ``offset`` (short at end of file)."""
        buf = bytearray(length)
        n = self.preadinto(buf, offset)
        del buf[n:]
        return bytes(buf)

    def preadinto(self, buf, offset: int) -> int:
        """Read into ``buf`` (any writable buffer) at ``offset``; returns bytes read."""
        self._check(want_read=True)
        with byte_view(buf) as view:  # released here, so ``pread`` can shrink its buffer
            length = len(view)
            if offset < 0 or offset + length > MAX_OFFSET:
                raise OSError(errno.EINVAL, "offset out of range", self.path)
            known = self._read_desc(Regions(((offset, length),)), view)
        if known is None:
            return length
        end = self.fs.data.size(self.ino, self.stripe, known)
        return max(0, min(length, end - offset))

    def pwrite(self, data, offset: int) -> int:
        self._check(want_write=True)
        if offset < 0:
            raise OSError(errno.EINVAL, "negative offset", self.path)
        return self._write_desc(Regions(((offset, nbytes(data)),)), data)

    def read(self, size: int = -1) -> bytes:
        """Read from the file pointer (or the partition view, after ``set_partition``)."""
        self._check(want_read=True)
        with self._lock:
            if self._partition is not None:
                return self._read_partition(size)
            if size is None or size < 0:
                size = max(0, self.size() - self._pos)
            data = self.pread(size, self._pos)
            self._pos += len(data)
            return data

    def write(self, data) -> int:
        self._check(want_write=True)
        with self._lock:
            if self._partition is not None:
                return self._write_partition(data)
            if self.flags & os.O_APPEND:
                self._pos = self.size()
            n = self.pwrite(data, self._pos)
            self._pos += n
            return n

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        self._check()
        with self._lock:
            if whence == os.SEEK_SET:
                pos = offset
            elif whence == os.SEEK_CUR:
                pos = self._pos + offset
            elif whence == os.SEEK_END:
                end = self.size() if self._partition is None else self._view_size(self.size())
                pos = end + offset
            else:
                raise ValueError(f"invalid whence {whence}")
            if pos < 0:
                raise OSError(errno.EINVAL, "seek to a negative position", self.path)
            self._pos = pos
            return pos

    def tell(self) -> int:
        return self._pos

    def fsync(self) -> None:
        """Data on every daemon of the file, and the metadata (its name, size changes)."""
        self._check()
        self._settle()
        self.fs.data.fsync(self.ino, self.stripe)
        self.fs.meta("sync")  # (after the creates made ahead: client/ahead.py)
        self._check_made()

    def fdatasync(self) -> None:
        self._check()
        self._settle()
        self.fs.data.fsync(self.ino, self.stripe, data_only=True)

    def truncate(self, size: int | None = None) -> int:
        self._check(want_write=True)
        size = self._pos if size is None else size
        # through this writable handle: access was checked when it was opened
        self.fs.meta("setattr", ino=self.ino, size=size, handle=True)
        return size

    # ------------------------------------------------------------------ list and strided I/O
    def read_list(self, regions: list[tuple[int, int]]) -> bytes:
        """The regions' bytes concatenated in order (zeros where the file has none)."""
        self._check(want_read=True)
        desc = Regions(regions)
        buf = bytearray(desc.total())
        self._read_desc(desc, buf)
        return bytes(buf)

    def write_list(self, regions: list[tuple[int, int]], data) -> int:
        """Write ``data`` (the regions' bytes concatenated) to the regions; one call."""
        self._check(want_write=True)
        return self._write_desc(Regions(regions), data)

    def read_strided(self, offset: int, gsize: int, stride: int, count: int) -> bytes:
        """``count`` blocks of ``gsize`` bytes ``stride`` apart from ``offset`` (thesis fig. 3.4)."""
        self._check(want_read=True)
        desc = Strided(offset, gsize, stride, count)
        buf = bytearray(desc.total())
        self._read_desc(desc, buf)
        return bytes(buf)

    def write_strided(self, offset: int, gsize: int, stride: int, count: int, data) -> int:
        self._check(want_write=True)
        return self._write_desc(Strided(offset, gsize, stride, count), data)

    def read_desc(self, desc) -> bytes:
        """Read any description (``Regions``, ``Strided``, ``Nested``)."""
        self._check(want_read=True)
        buf = bytearray(desc.total())
        self._read_desc(desc, buf)
        return bytes(buf)

    def write_desc(self, desc, data) -> int:
        self._check(want_write=True)
        return self._write_desc(desc, data)

    # ------------------------------------------------------------------ access hints
    def set_hint(self, hint: AccessHint | None) -> None:
        """Send ``hint`` (the collective operation these reads belong to, all tasks together)
        with every read of this handle until ``set_hint(None)``; see ``pvfs.AccessHint``.
        An I/O daemon running reactive scheduling (``rs``) then models that operation instead
        of estimating it from the requests it has seen so far."""
        self._check()
        if hint is not None and not isinstance(hint, AccessHint):
            raise TypeError(f"hint must be an AccessHint or None, not {type(hint).__name__}")
        self._hint = None if hint is None else hint.to_wire()

    # ------------------------------------------------------------------ partitions
    def set_partition(self, offset: int, gsize: int, stride: int) -> None:
        """Make read/write/seek see only ``gsize`` bytes every ``stride`` from ``offset``.

        ``set_partition(0, 0, 0)`` (or ``clear_partition``) goes back to the whole file. The
        file pointer is reset to the start of the view.
        """
        self._check()
        if (offset, gsize, stride) == (0, 0, 0):
            self._partition = None
        else:
            if offset < 0 or gsize <= 0 or stride < gsize:
                raise ValueError("partition needs offset >= 0 and 0 < gsize <= stride")
            self._partition = Strided(offset, gsize, stride, 0)
        self._pos = 0

    def clear_partition(self) -> None:
        self.set_partition(0, 0, 0)

    def _view_size(self, file_size: int) -> int:
        p = self._partition
        if p is None:
            return file_size
        if file_size <= p.offset:
            return 0
        full, rem = divmod(file_size - p.offset, p.stride)
        return full * p.gsize + min(rem, p.gsize)

    def _view_regions(self, pos: int, length: int) -> list[tuple[int, int]]:
        """File regions behind view bytes [pos, pos+length)."""
        p = self._partition
        assert p is not None
        out = []
        while length > 0:
            block, within = divmod(pos, p.gsize)
            n = min(p.gsize - within, length)
            out.append((p.offset + block * p.stride + within, n))
            pos += n
            length -= n
        return out

    def _read_partition(self, size: int) -> bytes:
        limit = self._view_size(self.size()) - self._pos
        size = limit if size is None or size < 0 else min(size, limit)
        if size <= 0:
            return b""
        desc = Regions(self._view_regions(self._pos, size))
        buf = bytearray(size)
        self._read_desc(desc, buf)
        self._pos += size
        return bytes(buf)

    def _write_partition(self, data) -> int:
        n = nbytes(data)
        written = self._write_desc(Regions(self._view_regions(self._pos, n)), data)
        self._pos += written
        return written
