"""The manager's inode record: one row of the inode table and the attributes it answers with.

Kept apart from the permission rules (``perms.py``) that are applied to it and the path walk
(``paths.py``) that finds it, so each reads top-down with one job.
"""

from __future__ import annotations

import stat
from typing import NamedTuple

from pvfs.layout.stripe import Stripe
from pvfs.protocol.inodes import DIR_BLOCK, dir_size

__all__ = ["COLUMNS", "DIR_BLOCK", "ROOT_INO", "SELECT_INODE", "SPECIAL", "TYPES", "Inode"]

ROOT_INO = 1
# The inode table's columns in Inode's order (alias i), and the query for one inode.
COLUMNS = ("i.ino, i.mode, i.nlink, i.uid, i.gid, i.atime, i.mtime, i.ctime, i.nent, "
           "i.target, i.sbase, i.spcount, i.sssize, i.rdev")
SELECT_INODE = f"SELECT {COLUMNS} FROM inodes i WHERE i.ino = ?"
TYPES = {stat.S_IFREG: "file", stat.S_IFDIR: "dir", stat.S_IFLNK: "symlink",
         stat.S_IFIFO: "fifo", stat.S_IFSOCK: "socket", stat.S_IFCHR: "chr", stat.S_IFBLK: "blk"}
# Special files: an inode with a mode (and a device number) but no data at the I/O daemons;
# the kernel serves their I/O (pipes, sockets, device drivers).
SPECIAL = (stat.S_IFIFO, stat.S_IFSOCK, stat.S_IFCHR, stat.S_IFBLK)

class Inode(NamedTuple):
    """One row of the inode table, in column order."""

    ino: int
    mode: int
    nlink: int
    uid: int
    gid: int
    atime: int
    mtime: int
    ctime: int
    nent: int  # directories: entries besides "." and ".."
    target: str | None
    sbase: int | None
    spcount: int | None
    sssize: int | None
    rdev: int = 0  # device nodes

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.mode)

    @property
    def is_file(self) -> bool:
        return stat.S_ISREG(self.mode)

    @property
    def is_link(self) -> bool:
        return stat.S_ISLNK(self.mode)

    @property
    def is_special(self) -> bool:
        return stat.S_IFMT(self.mode) in SPECIAL

    @property
    def stripe(self) -> Stripe | None:
        """A file's layout, a directory's default layout (None if unset)."""
        if self.sbase is None or self.spcount is None or self.sssize is None:
            return None
        return Stripe(self.sbase, self.spcount, self.sssize)

    @property
    def what(self) -> str:
        return f"inode {self.ino}"

    def attrs(self) -> dict:
        """Wire-ready attributes (ints, str, lists only)."""
        if self.is_dir:
            size = dir_size(self.nent)
        elif self.is_link:
            size = len((self.target or "").encode())
        else:  # files: the server fills in the logical size from the I/O daemons
            size = 0
        return {
            "ino": self.ino, "type": TYPES[stat.S_IFMT(self.mode)], "mode": self.mode,
            "nlink": self.nlink, "uid": self.uid, "gid": self.gid, "size": size,
            "atime_ns": self.atime, "mtime_ns": self.mtime, "ctime_ns": self.ctime,
            "stripe": None if self.sbase is None else [self.sbase, self.spcount, self.sssize],
            "rdev": self.rdev or 0,
        }
