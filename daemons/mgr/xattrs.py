"""Extended attributes of the manager's inodes: the ``xattrs`` table of the metadata store.

``Xattrs`` is owned by ``MetaStore`` and shares its connection; what it needs of the store is
handed to it explicitly (the inode by number, the store's transaction, the ctime update), so
it reads on its own. The namespace rules (``user.`` on files and directories for their owner,
``trusted.`` for root, ...) are ``perms.xattr_rule``'s.
"""

from __future__ import annotations

import errno
import sqlite3
import time
from collections.abc import Callable
from contextlib import AbstractContextManager

from . import perms
from .inode import Inode
from .perms import Cred, check_cred, check_ino, fail

__all__ = ["XATTR_CREATE", "XATTR_REPLACE", "Xattrs"]

XATTR_CREATE = 1
XATTR_REPLACE = 2


class Xattrs:
    """get/set/list/remove of one store's extended attributes.

    Args:
        db: the store's connection.
        inode: the inode of a number (raises ENOENT).
        tx: the store's write transaction (``BEGIN IMMEDIATE`` ... ``COMMIT``).
        set_ctime: record a change of the inode at a time in ns (inside ``tx``).
    """

    def __init__(self, db: sqlite3.Connection, inode: Callable[[int], Inode],
                 tx: Callable[[], AbstractContextManager[None]],
                 set_ctime: Callable[[int, int], None]) -> None:
        self._db, self._inode, self._tx, self._set_ctime = db, inode, tx, set_ctime

    def get(self, ino: int, name: str, cred: Cred) -> bytes:
        ino, cred = check_ino(ino), check_cred(cred)
        name = perms.xattr_rule(self._inode(ino), name, cred, False)
        row = self._db.execute("SELECT value FROM xattrs WHERE ino = ? AND name = ?",
                               (ino, name)).fetchone()
        if row is None:
            raise fail(errno.ENODATA, name)
        return bytes(row[0])

    def set(self, ino: int, name: str, value: bytes, cred: Cred, flags: int = 0) -> None:
        ino, cred = check_ino(ino), check_cred(cred)
        value = perms.xattr_value(value)
        flags = perms.check_flags(flags, "xattr flags")
        with self._tx():
            name = perms.xattr_rule(self._inode(ino), name, cred, True)
            exists = self._db.execute("SELECT 1 FROM xattrs WHERE ino = ? AND name = ?",
                                      (ino, name)).fetchone() is not None
            if flags & (XATTR_CREATE if exists else XATTR_REPLACE):
                raise fail(errno.EEXIST if exists else errno.ENODATA, name)
            self._db.execute("INSERT OR REPLACE INTO xattrs VALUES (?, ?, ?)",
                             (ino, name, value))
            self._set_ctime(ino, time.time_ns())

    def names(self, ino: int, cred: Cred) -> list[str]:
        ino, cred = check_ino(ino), check_cred(cred)
        self._inode(ino)
        rows = self._db.execute("SELECT name FROM xattrs WHERE ino = ? ORDER BY name", (ino,))
        names = [row[0] for row in rows]
        return names if cred.is_root else [n for n in names if not n.startswith("trusted.")]

    def remove(self, ino: int, name: str, cred: Cred) -> None:
        ino, cred = check_ino(ino), check_cred(cred)
        with self._tx():
            name = perms.xattr_rule(self._inode(ino), name, cred, True)
            cur = self._db.execute("DELETE FROM xattrs WHERE ino = ? AND name = ?", (ino, name))
            if cur.rowcount == 0:
                raise fail(errno.ENODATA, name)
            self._set_ctime(ino, time.time_ns())

    def drop(self, ino: int) -> None:
        """Forget every attribute of a removed inode (inside the store's transaction)."""
        self._db.execute("DELETE FROM xattrs WHERE ino = ?", (ino,))
