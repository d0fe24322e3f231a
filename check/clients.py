"""The clients the checker drives: the native API and plain directories (a pvfs mount, ext4,
a GlusterFS or MooseFS mount), behind one small interface.

Every call either returns or raises ``OSError`` with the errno the file system gave, so the
state machine compares outcomes the same way for every kind of client. Paths are names
relative to the client's root (one directory per example), so the same step means the same
file on every client.
"""

from __future__ import annotations

import errno
import os
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

STRIPE_XATTR = "user.pvfs.stripe"
SYNC_XATTR = "user.pvfs.sync"


@dataclass(frozen=True)
class Attrs:
    """The part of ``stat`` the model checks."""

    ino: int
    size: int
    mtime_ns: int
    nlink: int


class Handle(ABC):
    """An open file of one client."""

    @abstractmethod
    def pread(self, length: int, offset: int) -> bytes:
        """Up to ``length`` bytes at ``offset`` (short only at end of file)."""

    @abstractmethod
    def pwrite(self, data: bytes, offset: int) -> int:
        """Write all of ``data`` at ``offset``."""

    @abstractmethod
    def fsync(self) -> None:
        """Flush to stable storage."""

    @abstractmethod
    def close(self) -> None:
        """Close (on a mount: the kernel's flush, which writes back dirty blocks)."""

    @abstractmethod
    def ino(self) -> int:
        """Inode number of the open file (to learn which file an open reached)."""


class Client(ABC):
    """One node's view of the file system below a root directory."""

    label: str
    kind: str  # "native" or "path"
    #: how long the node may answer names and attributes from a cache (seconds)
    name_window: float = 0.0
    attr_window: float = 0.0
    #: mount coherence mode when known ("none"/"sync"), else None
    coherence: str | None = None
    block_size: int = 4096
    #: this client caches data (write-behind, may read stale blocks)
    caches: bool = False

    def __init__(self) -> None:
        self.root = ""

    def set_root(self, root: str) -> None:
        """Operate below ``root`` (a directory name relative to the file system's top)."""
        self.root = root

    @abstractmethod
    def open(self, name: str, flags: int, stripe: tuple[int, int, int] | None = None) -> Handle:
        """``open(2)`` with ``os.O_*`` flags (mode 0o644 on create)."""

    @abstractmethod
    def stat(self, name: str) -> Attrs:
        """``stat(2)``."""

    @abstractmethod
    def truncate(self, name: str, size: int) -> None:
        """``truncate(2)``."""

    @abstractmethod
    def unlink(self, name: str) -> None:
        """``unlink(2)``."""

    @abstractmethod
    def rename(self, src: str, dst: str) -> None:
        """``rename(2)``."""

    @abstractmethod
    def link(self, src: str, dst: str) -> None:
        """``link(2)``."""

    @abstractmethod
    def setxattr(self, name: str, key: str, value: bytes) -> None:
        """``setxattr(2)``."""

    @abstractmethod
    def getxattr(self, name: str, key: str) -> bytes:
        """``getxattr(2)``."""

    def supports_stripe(self) -> bool:
        """Whether this client can set a new file's striping."""
        return False

    def close(self) -> None:
        """Release connections."""


# ------------------------------------------------------------------------------ native API
class NativeHandle(Handle):
    def __init__(self, f: Any) -> None:
        self.f = f

    def pread(self, length: int, offset: int) -> bytes:
        return bytes(self.f.pread(length, offset))

    def pwrite(self, data: bytes, offset: int) -> int:
        return int(self.f.pwrite(data, offset))

    def fsync(self) -> None:
        self.f.fsync()

    def close(self) -> None:
        self.f.close()

    def ino(self) -> int:
        return int(self.f.ino)


class NativeClient(Client):
    """``pvfs.connect(config)``: no client cache, every call reaches the daemons -- but
    with ``ahead`` new files in a directory it creates in alone are created by the client
    and sent to the manager in batches (``pvfs.client.ahead``)."""

    kind = "native"

    def __init__(self, config_path: str, label: str, ahead: bool = False) -> None:
        super().__init__()
        import pvfs

        self.label = label
        self.fs = pvfs.connect(config_path, ahead=ahead)

    def path(self, name: str) -> str:
        return f"/{self.root}/{name}" if self.root else f"/{name}"

    def open(self, name: str, flags: int, stripe: tuple[int, int, int] | None = None) -> Handle:
        from pvfs import Stripe

        st = Stripe(*stripe) if stripe else None
        return NativeHandle(self.fs.open(self.path(name), flags, stripe=st, perm=0o644))

    def stat(self, name: str) -> Attrs:
        s = self.fs.stat(self.path(name))
        return Attrs(int(s.st_ino), int(s.st_size), int(s.st_mtime_ns), int(s.st_nlink))

    def truncate(self, name: str, size: int) -> None:
        self.fs.truncate(self.path(name), size)

    def unlink(self, name: str) -> None:
        self.fs.unlink(self.path(name))

    def rename(self, src: str, dst: str) -> None:
        self.fs.rename(self.path(src), self.path(dst))

    def link(self, src: str, dst: str) -> None:
        self.fs.link(self.path(src), self.path(dst))

    def setxattr(self, name: str, key: str, value: bytes) -> None:
        self.fs.setxattr(self.path(name), key, value)

    def getxattr(self, name: str, key: str) -> bytes:
        return bytes(self.fs.getxattr(self.path(name), key))

    def supports_stripe(self) -> bool:
        return True

    def close(self) -> None:
        self.fs.close()


# ------------------------------------------------------------------------- any directory
class PathHandle(Handle):
    def __init__(self, fd: int) -> None:
        self.fd = fd

    def pread(self, length: int, offset: int) -> bytes:
        # one call even for length 0: its errno (EBADF) is part of what is checked
        parts = [os.pread(self.fd, length, offset)]
        got = len(parts[0])
        while parts[-1] and got < length:
            parts.append(os.pread(self.fd, length - got, offset + got))
            got += len(parts[-1])
        return b"".join(parts)

    def pwrite(self, data: bytes, offset: int) -> int:
        view = memoryview(data)
        done = os.pwrite(self.fd, view, offset)
        while done < len(view):
            done += os.pwrite(self.fd, view[done:], offset + done)
        return done

    def fsync(self) -> None:
        os.fsync(self.fd)

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    def ino(self) -> int:
        return os.fstat(self.fd).st_ino


class PathClient(Client):
    """A directory reached through the kernel: a pvfs mount or any other file system."""

    kind = "path"

    def __init__(self, directory: str, label: str, *, pvfs_mount: dict | None = None) -> None:
        super().__init__()
        self.label = label
        self.directory = os.path.abspath(directory)
        self.pvfs = pvfs_mount is not None
        if pvfs_mount is not None:
            opts = pvfs_mount.get("options", {})
            self.coherence = str(opts.get("coherence", "none"))
            self.block_size = int(opts.get("block_size", 4096))
            self.caches = bool(opts.get("cache", True)) or not bool(opts.get("direct_io", False))
            # the kernel keeps names and attributes this long; one more second of slack for
            # the flusher and the scheduler on a loaded machine
            self.name_window = float(opts.get("entry_timeout", 1.0)) + 1.0
            self.attr_window = float(opts.get("attr_timeout", 1.0)) + 1.0
            self.leases = bool(opts.get("leases", False))

    def path(self, name: str) -> str:
        return os.path.join(self.directory, self.root, name)

    def open(self, name: str, flags: int, stripe: tuple[int, int, int] | None = None) -> Handle:
        fd = os.open(self.path(name), flags, 0o644)
        if stripe is not None:
            try:
                base, pcount, ssize = stripe
                os.setxattr(fd, STRIPE_XATTR, f"base={base},pcount={pcount},ssize={ssize}".encode())
            except OSError:
                os.close(fd)
                raise
        return PathHandle(fd)

    def stat(self, name: str) -> Attrs:
        s = os.stat(self.path(name))
        return Attrs(s.st_ino, s.st_size, s.st_mtime_ns, s.st_nlink)

    def truncate(self, name: str, size: int) -> None:
        os.truncate(self.path(name), size)

    def unlink(self, name: str) -> None:
        os.unlink(self.path(name))

    def rename(self, src: str, dst: str) -> None:
        os.rename(self.path(src), self.path(dst))

    def link(self, src: str, dst: str) -> None:
        os.link(self.path(src), self.path(dst))

    def setxattr(self, name: str, key: str, value: bytes) -> None:
        os.setxattr(self.path(name), key, value)

    def getxattr(self, name: str, key: str) -> bytes:
        return os.getxattr(self.path(name), key)

    def supports_stripe(self) -> bool:
        return self.pvfs


def pvfs_mount_info(directory: str) -> dict | None:
    """The status record of the pvfs mount at ``directory`` (None when it is not one)."""
    try:
        from pvfs.fuse.mount import list_mounts
    except ImportError:
        return None
    want = os.path.realpath(directory)
    for m in list_mounts():
        if os.path.realpath(str(m.get("mountpoint", ""))) == want:
            return m
    return None


def errno_name(code: int | None) -> str:
    """``ENOENT`` for 2; ``ok`` for None."""
    if code is None:
        return "ok"
    return errno.errorcode.get(code, str(code))
