"""Attributes as the client hands them out: a ``stat``-like record built from a wire dict."""

from __future__ import annotations

import stat as statmod
from dataclasses import dataclass

from pvfs.layout.stripe import Stripe

BLKSIZE = 65536
_SPECIAL = {statmod.S_IFIFO: "fifo", statmod.S_IFSOCK: "socket", statmod.S_IFCHR: "chr",
            statmod.S_IFBLK: "blk"}


@dataclass(frozen=True)
class Stat:
    """What ``os.stat`` gives, plus the file's distribution (``stripe``)."""

    st_ino: int
    st_mode: int
    st_nlink: int
    st_uid: int
    st_gid: int
    st_size: int
    st_atime_ns: int
    st_mtime_ns: int
    st_ctime_ns: int
    stripe: Stripe | None = None
    st_rdev: int = 0  # device nodes
    blocks: int | None = None  # 512-byte blocks the stripe files use (from the manager)

    @property
    def st_atime(self) -> float:
        return self.st_atime_ns / 1e9

    @property
    def st_mtime(self) -> float:
        return self.st_mtime_ns / 1e9

    @property
    def st_ctime(self) -> float:
        return self.st_ctime_ns / 1e9

    @property
    def st_blksize(self) -> int:
        return self.stripe.ssize if self.stripe else BLKSIZE

    @property
    def st_blocks(self) -> int:
        """Space really used (holes are free), in 512-byte units, as ``du`` wants it."""
        if self.blocks is not None:
            return self.blocks
        return 0 if self.type in _SPECIAL.values() else (self.st_size + 511) // 512

    @property
    def type(self) -> str:
        if statmod.S_ISDIR(self.st_mode):
            return "dir"
        if statmod.S_ISLNK(self.st_mode):
            return "symlink"
        return _SPECIAL.get(statmod.S_IFMT(self.st_mode), "file")

    @classmethod
    def from_wire(cls, a: dict) -> Stat:
        st = a.get("stripe")
        return cls(a["ino"], a["mode"], a["nlink"], a["uid"], a["gid"], a.get("size", 0),
                   a["atime_ns"], a["mtime_ns"], a["ctime_ns"],
                   Stripe(*st) if isinstance(st, list) else None, a.get("rdev", 0),
                   a.get("blocks"))

    def to_dict(self) -> dict:
        return {"ino": self.st_ino, "type": self.type, "mode": self.st_mode, "nlink": self.st_nlink,
                "uid": self.st_uid, "gid": self.st_gid, "size": self.st_size,
                "atime_ns": self.st_atime_ns, "mtime_ns": self.st_mtime_ns,
                "ctime_ns": self.st_ctime_ns,
                "stripe": self.stripe.to_wire() if self.stripe else None}
