"""Layouts in the manager's store: a file's stripe, a directory's default for new files.

``Layouts`` is owned by ``MetaStore`` (``store.layouts``) and shares its connection, as
``Xattrs`` does; what it needs of the store is handed to it. The rules of a valid stripe
(base, count, unit; ``-1`` = every I/O daemon) are ``perms.check_stripe``'s.
"""

from __future__ import annotations

import errno
import sqlite3
import time
from collections.abc import Callable
from contextlib import AbstractContextManager

from pvfs.layout.stripe import Stripe

from . import perms
from .inode import Inode
from .perms import Cred, check_cred, check_ino, fail

__all__ = ["Layouts"]


class Layouts:
    """Read and set layouts.

    Args:
        db: the store's connection.
        inode: the inode of a number (raises ENOENT); ``directory``: the same, a directory
            (raises ENOTDIR).
        tx: the store's write transaction.
        niods, default: the file system's I/O daemons and its default stripe.
    """

    def __init__(self, db: sqlite3.Connection, inode: Callable[[int], Inode],
                 directory: Callable[[int], Inode],
                 tx: Callable[[], AbstractContextManager[None]], niods: int,
                 default: Stripe) -> None:
        self._db, self._inode, self._directory, self._tx = db, inode, directory, tx
        self._niods, self._default = niods, default

    def for_new_file(self, parent: int) -> Stripe:
        """The layout a file created in directory ``parent`` without one of its own takes."""
        d = self._inode(check_ino(parent))
        return perms.check_stripe(d.stripe or self._default, self._niods, resolve=True)

    def of(self, ino: int) -> Stripe | None:
        """A file's layout; a directory's default (None if unset); None for symlinks."""
        return self._inode(check_ino(ino)).stripe

    def set_dir(self, ino: int, stripe: Stripe | None, cred: Cred) -> dict:
        """Set (or with None clear) a directory's default layout; pcount -1 stays "all"."""
        ino, cred = check_ino(ino), check_cred(cred)
        s = perms.check_stripe(stripe, self._niods, resolve=False)
        with self._tx():
            r = self._directory(ino)
            perms.need_owner(r.uid, cred, f"inode {ino}")
            vals = (None, None, None) if s is None else (s.base, s.pcount, s.ssize)
            self._db.execute("UPDATE inodes SET sbase = ?, spcount = ?, sssize = ?, ctime = ? "
                             "WHERE ino = ?", (*vals, time.time_ns(), ino))
            return self._inode(ino).attrs()

    def set_file(self, ino: int, stripe: Stripe, cred: Cred, *, size_is_zero: bool) -> dict:
        """Change a file's layout. Only the server knows the data size, so it must say
        whether the file is empty; data already written would be misplaced (EBUSY)."""
        ino, cred = check_ino(ino), check_cred(cred)
        s = perms.check_stripe(stripe, self._niods, resolve=True)
        if s is None or type(size_is_zero) is not bool:
            raise fail(errno.EINVAL, "stripe and size_is_zero are required")
        with self._tx():
            r = perms.regular(self._inode(ino))
            perms.need_owner(r.uid, cred, f"inode {ino}")
            if not size_is_zero:
                raise fail(errno.EBUSY, f"inode {ino} has data")
            self._db.execute("UPDATE inodes SET sbase = ?, spcount = ?, sssize = ?, ctime = ? "
                             "WHERE ino = ?", (s.base, s.pcount, s.ssize, time.time_ns(), ino))
            return self._inode(ino).attrs()
