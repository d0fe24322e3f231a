"""POSIX path resolution over the manager's inodes (the store supplies the lookups).

Pure: the walk asks ``child(ino, name)`` and ``parent(ino)`` for inodes and applies the
search-permission rule of ``perms.py`` at every directory, so it runs the same against
SQLite (``store.py``) and against the in-memory model of the tests.
"""

from __future__ import annotations

import errno
from collections import deque
from collections.abc import Callable

from pvfs.protocol.cred import Cred

from .inode import Inode
from .perms import X_OK, check_name, fail, need_inode

__all__ = ["MAX_SYMLINKS", "walk"]

MAX_SYMLINKS = 40


def walk(path: str, cred: Cred, follow: bool, root: Inode,
         child: Callable[[int, str], Inode | None], parent: Callable[[int], Inode],
         seen: list[int] | None = None) -> Inode:
    """POSIX path resolution from ``root``: search permission on every directory, ".." of
    the root is the root, symlinks followed in the middle (and at the end if ``follow`` or a
    trailing slash), at most MAX_SYMLINKS of them (ELOOP). ``seen`` gets every directory
    whose names were read, also when the walk fails."""
    comps = deque(c for c in path.split("/") if c)
    must_dir = path.endswith("/") and bool(comps)
    cur, links = root, 0
    while comps:
        name = comps.popleft()
        if not cur.is_dir:
            raise fail(errno.ENOTDIR, path)
        need_inode(cur, X_OK, cred)
        if name == ".":
            continue
        if name == "..":
            cur = parent(cur.ino)
            continue
        if seen is not None:
            seen.append(cur.ino)
        nxt = child(cur.ino, check_name(name))
        if nxt is None:
            raise fail(errno.ENOENT, path)
        if nxt.is_link and (comps or follow or must_dir):
            links += 1
            if links > MAX_SYMLINKS:
                raise fail(errno.ELOOP, path)
            target = nxt.target or ""
            comps.extendleft(reversed([c for c in target.split("/") if c]))
            if target.startswith("/"):
                cur = root
            continue
        cur = nxt
    if must_dir and not cur.is_dir:
        raise fail(errno.ENOTDIR, path)
    return cur
