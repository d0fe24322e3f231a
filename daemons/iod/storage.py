"""The storage layer of an I/O daemon: a replaceable module (thesis §3.4, SPEC §2).

``PosixStorage`` keeps one stripe file per inode on a local file system, named by inode
number under ``<data_dir>/stripes/<ino % 256 as 2 hex digits>/<ino as 16 hex digits>``. Names
are built from validated integers only, so no request can name a path outside the data
directory. Open descriptors are cached (the engine streams from them with sendfile).

A stripe file is made by the first change that puts bytes or a size in it (a write, a
truncate to a length), never ahead: a share with no bytes on this daemon is no file, and
reads as a hole (size 0, zeros). An empty create so costs the daemons nothing, and a small
file has a stripe file on the one daemon its bytes went to, not on every daemon of its
layout (as RADOS objects of CephFS are made by their first write).

``EmulatedStorage`` is the same files plus an emulated disk (``pvfs._native.Disk``, presets in
``pvfs.models.disk``) that the engine charges every access to: the thesis' disk-bound regime
on a machine whose files sit in RAM. Both answer ``cached()`` -- how much of a byte range sits
in the page cache, the reactive selector's input (SPEC §3): the kernel's own count through
``cachestat(2)`` for posix, the model's cache for emulated -- and ``drop_cache()`` for cold
runs.
"""

from __future__ import annotations

import ctypes
import errno
import itertools
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol


class Storage(Protocol):
    """What the I/O daemon needs from a storage layer."""

    def open(self, ino: int, create: bool) -> int | None: ...
    def lookup(self, ino: int) -> int | None: ...
    def acquire(self, ino: int, create: bool) -> int | None: ...
    def pin(self, ino: int) -> None: ...
    def unpin(self, ino: int, defer: bool = False) -> int | None: ...
    def size(self, ino: int) -> tuple[int, int]: ...
    def usage(self, ino: int) -> tuple[int, int, int]: ...
    def truncate(self, ino: int, length: int) -> None: ...
    def create(self, ino: int) -> None: ...
    def unlink(self, ino: int) -> bool: ...
    def fsync(self, ino: int, data_only: bool) -> None: ...
    def statfs(self) -> dict: ...
    def inodes(self, after: int, limit: int) -> list[int]: ...
    def close(self) -> None: ...


_SYS_CACHESTAT = 451  # x86_64, aarch64 and the other generic-table architectures (Linux 6.5)


class _CacheStatRange(ctypes.Structure):
    _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]


class _CacheStat(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in
                ("nr_cache", "nr_dirty", "nr_writeback", "nr_evicted", "nr_recently_evicted")]


_libc = ctypes.CDLL(None, use_errno=True)
_PAGE = os.sysconf("SC_PAGESIZE")


def cachestat(fd: int, off: int, length: int) -> int | None:
    """Bytes of [off, off+length) of the file in the page cache (whole pages), or None when
    the kernel has no cachestat(2)."""
    if length <= 0:
        return 0
    rng, out = _CacheStatRange(off, length), _CacheStat()
    if _libc.syscall(_SYS_CACHESTAT, fd, ctypes.byref(rng), ctypes.byref(out), 0) < 0:
        err = ctypes.get_errno()
        if err in (errno.ENOSYS, errno.EOPNOTSUPP):
            return None
        raise OSError(err, os.strerror(err))
    return min(length, out.nr_cache * _PAGE)


class PosixStorage:
    """Stripe files on a POSIX file system."""

    kind = "posix"
    disk = None  # no emulated disk: the engine streams plain files

    def __init__(self, data_dir: str, max_open: int = 1024) -> None:
        self.root = os.path.join(os.path.abspath(data_dir), "stripes")
        os.makedirs(self.root, exist_ok=True)
        self.max_open = max_open
        self._fds: OrderedDict[int, int] = OrderedDict()
        # Descriptors the engine is using right now are pinned: never closed under it.
        self._pins: dict[int, int] = {}
        self._doomed: set[int] = set()
        # The descriptor cache is shared by the daemon's trio thread and the worker threads
        # that run the slow calls (truncate, unlink, fsync, stat of many files); the lock
        # covers the cache only, never a syscall that may block on the disk.
        self._lock = threading.RLock()
        # Told of every descriptor the cache forgets (the engine's fast path drops its
        # grant: IodServer sets it).
        self.on_forget: Callable[[int], None] | None = None

    def path(self, ino: int) -> str:
        if type(ino) is not int or ino <= 0:
            raise ValueError("inode must be a positive integer")
        return os.path.join(self.root, f"{ino & 0xFF:02x}", f"{ino:016x}")

    def open(self, ino: int, create: bool) -> int | None:
        """A cached read-write descriptor, or None if the file does not exist and not create."""
        with self._lock:
            return self._open(ino, create)

    def _open(self, ino: int, create: bool) -> int | None:
        fd = self._fds.get(ino)
        if fd is not None:
            # A stripe file removed behind our back (fsck, an operator) must not live on
            # through the cached descriptor.
            if os.fstat(fd).st_nlink > 0:
                self._fds.move_to_end(ino)
                return fd
            self.forget(ino)
            if ino in self._fds:  # pinned by a running job: serve it from the old file
                return fd
        path = self.path(ino)
        flags = os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW
        try:
            fd = os.open(path, flags)
        except FileNotFoundError:
            if not create:
                return None
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd = os.open(path, flags | os.O_CREAT, 0o600)
        self._fds[ino] = fd
        if len(self._fds) > self.max_open:
            # Never the descriptor being returned, nor one a job or a thread holds.
            # (oldest first, and only as many as go: not a walk of the whole cache per open)
            idle = itertools.islice((i for i in self._fds if i not in self._pins and i != ino),
                                    len(self._fds) - self.max_open)
            for old in list(idle):
                os.close(self._fds.pop(old))
        return fd

    def pin(self, ino: int) -> None:
        with self._lock:
            self._pins[ino] = self._pins.get(ino, 0) + 1

    def unpin(self, ino: int, defer: bool = False) -> int | None:
        """Release one pin. A descriptor forgotten while pinned is closed now, or with
        ``defer`` returned for the caller to close: closing the last descriptor of an
        unlinked file frees its blocks, which the daemon's trio thread must not wait for."""
        with self._lock:
            left = self._pins.get(ino, 0) - 1
            if left > 0:
                self._pins[ino] = left
                return None
            self._pins.pop(ino, None)
            if ino in self._doomed:
                self._doomed.discard(ino)
                return self.forget(ino, defer)
            return None

    def forget(self, ino: int, defer: bool = False) -> int | None:
        """Close the cached descriptor (later, if a job still uses it); with ``defer`` the
        descriptor is returned unclosed instead (see ``unpin``)."""
        with self._lock:
            if self.on_forget is not None:
                self.on_forget(ino)
            if ino in self._pins:
                self._doomed.add(ino)
                return None
            fd = self._fds.pop(ino, None)
            if fd is not None and not defer:
                os.close(fd)
                return None
            return fd

    def lookup(self, ino: int) -> int | None:
        """The cached descriptor of ``ino``, pinned, or None: no system call at all, for the
        daemon's trio thread. Whether the file was unlinked behind the cache is the engine's
        to check as the job starts (``Engine.submit(check=True)``); a miss is ``acquire``'s,
        in a worker thread."""
        with self._lock:
            fd = self._fds.get(ino)
            if fd is not None:
                self._fds.move_to_end(ino)
                self._pins[ino] = self._pins.get(ino, 0) + 1
            return fd

    def acquire(self, ino: int, create: bool) -> int | None:
        """``open`` and ``pin`` in one step (no other thread can evict the descriptor in
        between); the caller unpins. None, unpinned, if there is no file and not ``create``."""
        with self._lock:
            fd = self._open(ino, create)
            if fd is not None:
                self.pin(ino)
            return fd

    @contextmanager
    def _held(self, ino: int, create: bool) -> Iterator[int | None]:
        """The descriptor of ``ino``, pinned (not closed by another thread) while in use."""
        fd = self.acquire(ino, create)
        try:
            yield fd
        finally:
            if fd is not None:
                self.unpin(ino)

    def size(self, ino: int) -> tuple[int, int]:
        """(local size, mtime_ns) of the stripe file; (0, 0) if it does not exist."""
        return self.usage(ino)[:2]

    def usage(self, ino: int) -> tuple[int, int, int]:
        """(local size, mtime_ns, st_blocks in 512-byte units) of the stripe file from one
        fstat: the blocks are the space really used (holes are free), for ``du``."""
        with self._lock:
            fd = self._fds.get(ino)
            if fd is not None:
                self.pin(ino)
        try:
            st = os.fstat(fd) if fd is not None else os.stat(self.path(ino))
        except FileNotFoundError:
            return 0, 0, 0
        finally:
            if fd is not None:
                self.unpin(ino)
        return st.st_size, st.st_mtime_ns, st.st_blocks

    def exists(self, ino: int) -> bool:
        return ino in self._fds or os.path.exists(self.path(ino))

    def truncate(self, ino: int, length: int) -> None:
        """Set the stripe file's length; a missing one is made only for a length above 0
        (to 0 it is empty already)."""
        with self._held(ino, create=length > 0) as fd:
            if fd is not None:
                os.ftruncate(fd, length)

    def create(self, ino: int) -> None:
        self.open(ino, create=True)

    def utime(self, ino: int, mtime_ns: int) -> None:
        """Set the stripe file's mtime (an explicit utimens on the file; atime untouched). A
        missing one is not made: holding no bytes, its mtime would not count (the manager
        takes a file's mtime from the stripe files that hold data)."""
        with self._held(ino, create=False) as fd:
            if fd is None:
                return
            st = os.fstat(fd)
            os.utime(fd, ns=(st.st_atime_ns, mtime_ns))

    def unlink(self, ino: int) -> bool:
        self.forget(ino)
        try:
            os.unlink(self.path(ino))
        except FileNotFoundError:
            return False
        return True

    def fsync(self, ino: int, data_only: bool) -> None:
        with self._held(ino, create=False) as fd:
            if fd is not None:
                (os.fdatasync if data_only else os.fsync)(fd)

    def statfs(self) -> dict:
        st = os.statvfs(self.root)
        return {"bsize": st.f_frsize, "blocks": st.f_blocks, "bfree": st.f_bfree,
                "bavail": st.f_bavail, "files": st.f_files, "ffree": st.f_ffree}

    def inodes(self, after: int = 0, limit: int = 4096) -> list[int]:
        """Inode numbers of the stripe files present, ascending, greater than ``after``."""
        found = sorted(i for i in self._scan() if i > after)
        return found[:limit]

    def _scan(self) -> Iterator[int]:
        for sub in os.listdir(self.root):
            d = os.path.join(self.root, sub)
            if not os.path.isdir(d):
                continue
            for name in os.listdir(d):
                try:
                    yield int(name, 16)
                except ValueError:
                    continue

    def cached(self, ino: int, off: int, length: int) -> int | None:
        """Bytes of the range in the page cache; None when the kernel cannot tell.

        Asked on the trio thread for a read whose job holds the descriptor pinned, so the
        cache has it whenever the file exists: no open here; cachestat(2) only counts pages
        and never waits for the disk."""
        fd = self.lookup(ino)
        if fd is None:
            return length  # no stripe file: a hole, reading it costs no disk
        try:
            return cachestat(fd, off, length)
        finally:
            self.unpin(ino)

    def drop_cache(self) -> None:
        """Evict every stripe file's pages (cold-cache runs): fsync, then DONTNEED."""
        for ino in self._scan():
            fd = self.open(ino, create=False)
            if fd is not None:
                os.fdatasync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)

    def close(self) -> None:
        with self._lock:
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()


class EmulatedStorage(PosixStorage):
    """Stripe files plus an emulated disk the engine's data path is charged to."""

    kind = "emulated"

    def __init__(self, data_dir: str, params, max_open: int = 1024) -> None:
        super().__init__(data_dir, max_open)
        self.params = params
        self.disk = params.build()

    def cached(self, ino: int, off: int, length: int) -> int:
        return self.disk.cached(ino, off, length)

    def fsync(self, ino: int, data_only: bool) -> None:
        """The real fsync, then the model's: the caller waits until the file's dirty pages
        are on the modelled disk (the model's clock is time.monotonic())."""
        super().fsync(ino, data_only)
        _sleep_until(self.disk.sync(ino))

    def unlink(self, ino: int) -> bool:
        self.disk.forget(ino)  # a removed file's dirty pages are never written back
        return super().unlink(ino)

    def drop_cache(self) -> float:
        """Write the dirty pages back (charged to the disk), then empty the cache; returns
        when the write-back is done (``time.monotonic()`` seconds) without waiting for it."""
        return self.disk.drop()


def _sleep_until(t: float) -> None:
    wait = t - time.monotonic()
    if wait > 0:
        time.sleep(wait)


def open_storage(kind: str, data_dir: str, disk=None) -> PosixStorage:
    """The storage layer ``kind``: ``posix``, or ``emulated`` with ``disk`` (a
    ``pvfs.models.disk.DiskParams`` or a preset name; default the ide-2000 preset)."""
    if kind == "posix":
        return PosixStorage(data_dir)
    if kind == "emulated":
        from pvfs.models.disk import DEFAULT_PRESET
        from pvfs.models.disk import preset as disk_preset

        if disk is None or isinstance(disk, str):
            disk = disk_preset(disk or DEFAULT_PRESET)
        return EmulatedStorage(data_dir, disk)
    raise OSError(errno.EINVAL, f"unknown storage layer {kind!r} (known: posix, emulated)")
