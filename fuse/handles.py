"""The open-file table: one :class:`Handle` per FUSE file handle, and per-inode state."""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field

from pvfs.layout.stripe import Stripe
from pvfs.protocol.cred import Cred

__all__ = ["WORKER_FH", "Handle", "HandleTable", "InodeInfo"]

SYNC_FLAGS = os.O_SYNC | os.O_DSYNC


@dataclass
class Handle:
    fh: int
    ino: int
    flags: int
    cred: Cred

    @property
    def sync(self) -> bool:
        """Opened O_SYNC/O_DSYNC: every write is a sync write."""
        return bool(self.flags & SYNC_FLAGS)

    @property
    def writable(self) -> bool:
        return (self.flags & os.O_ACCMODE) != os.O_RDONLY


@dataclass
class InodeInfo:
    """What the mount knows of a file between calls."""

    stripe: Stripe | None = None
    size: int = 0  # the manager's size when last seen
    size_stale: bool = False  # a callback said another node wrote: ask again before reading
    stamp: tuple[int, int] | None = None  # (size, mtime_ns) seen at the last open
    wrote: bool = False  # this node wrote the file since ``stamp``
    sync: bool = False  # user.pvfs.sync=1: every write is a sync write
    opens: int = 0


WORKER_FH = 1 << 48  # the first handle number of a file a C worker created (csrc/front)


@dataclass
class HandleTable:
    handles: dict[int, Handle] = field(default_factory=dict)
    inodes: dict[int, InodeInfo] = field(default_factory=dict)
    _ids: itertools.count = field(default_factory=lambda: itertools.count(1))

    def info(self, ino: int) -> InodeInfo:
        got = self.inodes.get(ino)
        if got is None:
            got = self.inodes[ino] = InodeInfo()
        return got

    def open(self, ino: int, flags: int, cred: Cred, fh: int | None = None) -> Handle:
        """A new handle of ``ino``; ``fh``: the number the C front end's workers gave a file
        they created (from :data:`WORKER_FH`, above any number counted here)."""
        h = Handle(next(self._ids) if fh is None else fh, ino, flags, cred)
        self.handles[h.fh] = h
        self.info(ino).opens += 1
        return h

    def get(self, fh: int) -> Handle:
        return self.handles[fh]

    def close(self, fh: int) -> Handle:
        h = self.handles.pop(fh)
        info = self.inodes.get(h.ino)
        if info is not None:
            info.opens -= 1
        return h

    def is_open(self, ino: int) -> bool:
        info = self.inodes.get(ino)
        return bool(info and info.opens > 0)
