"""Rules of new inodes that the manager and a mount both apply.

The manager makes every inode (``daemons/mgr/store.py``); a leasing mount that creates files
ahead of it (``fuse/creates.py``) shows the program the same attributes before the manager
has made them, so both take the owner, the permission bits and a directory's size from here.
"""

from __future__ import annotations

import stat

from .cred import Cred

__all__ = ["DIR_BLOCK", "dir_size", "new_owner"]

DIR_BLOCK = 4096  # a directory's size grows by this much per 128 entries


def dir_size(entries: int) -> int:
    """A directory's ``st_size`` with ``entries`` names in it (``.`` and ``..`` not counted)."""
    return DIR_BLOCK * (1 + (entries + 2) // 128)


def new_owner(parent_mode: int, parent_gid: int, perm: int, is_dir: bool,
              cred: Cred) -> tuple[int, int]:
    """(permission bits, gid) of a new inode: a setgid directory hands down its group
    (and, to subdirectories, the setgid bit itself)."""
    perm &= 0o7777
    if not parent_mode & stat.S_ISGID:
        return perm, cred.gid
    gid = parent_gid
    if is_dir:
        perm |= stat.S_ISGID
    elif perm & stat.S_ISGID and cred.uid != 0 and not cred.in_group(gid):
        perm &= ~stat.S_ISGID
    return perm, gid
