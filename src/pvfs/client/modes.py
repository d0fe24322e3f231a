"""Open modes: Python-style strings ("rb", "w+", "ab", "x") or ``os.O_*`` flag integers; and
the coherence modes of a mount (light: the CLI's help lists them without loading the mount)."""

from __future__ import annotations

import os

#: ``-o coherence=`` of a mount (fuse/options.py, docs/mount.md): ``none`` (close-to-open) or
#: ``sync`` (write-through and invalidation callbacks, pvfs.client.coherence).
COHERENCE_MODES: tuple[str, ...] = ("none", "sync")
#: What ``pvfs-admin check --mode`` checks: a coherence mode's promises, or the collective
#: library's (``pvfs.collective``: one copy of each page among the ranks).
CHECK_MODES: tuple[str, ...] = (*COHERENCE_MODES, "collective")

_BASE = {"r": os.O_RDONLY, "w": os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
         "a": os.O_WRONLY | os.O_CREAT | os.O_APPEND, "x": os.O_WRONLY | os.O_CREAT | os.O_EXCL}


def parse_mode(mode: str | int) -> int:
    """``os.O_*`` flags for a mode string (or the flags themselves)."""
    if isinstance(mode, int):
        return mode
    chars = set(mode)
    if not chars <= set("rwaxbt+") or len(chars & set("rwax")) != 1 or len(mode) != len(chars):
        raise ValueError(f"invalid mode: {mode!r}")
    (kind,) = chars & set("rwax")
    flags = _BASE[kind]
    if "+" in chars:
        flags = (flags & ~os.O_ACCMODE) | os.O_RDWR
    return flags


def readable(flags: int) -> bool:
    return flags & os.O_ACCMODE in (os.O_RDONLY, os.O_RDWR)


def writable(flags: int) -> bool:
    return flags & os.O_ACCMODE in (os.O_WRONLY, os.O_RDWR)
