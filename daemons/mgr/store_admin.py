"""The metadata store's side for the manager's background work and for administration:
files for fsck, the removals pending after a restart (``orphans``), the second phase of a
data removal (``remove_inodes``, after the reaper removed the stripe files), the pool of
precreated inode numbers (``precreate.py``) and the inode totals of ``statfs``.

``StoreAdministration`` is a part of :class:`~.store.MetaStore` (``store.admin``) and shares
its connection; what it needs of the store is handed to it explicitly, as to ``Xattrs``.
"""

from __future__ import annotations

import errno
import sqlite3
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager

from . import perms
from .inode import COLUMNS, ROOT_INO, SELECT_INODE, Inode
from .perms import check_ino, fail

__all__ = ["StoreAdministration"]


class StoreAdministration:
    """fsck's listing, removal, the precreate pool and inode totals of one store.

    Args:
        db: the store's connection.
        inode: the inode of a number (raises ENOENT).
        tx: the store's write transaction (``BEGIN IMMEDIATE`` ... ``COMMIT``).
        touch_dir: a directory changed at a time in ns, with its entry and link counts
            moved by the given deltas (inside ``tx``).
        delete: drop an inode's row and its xattrs (inside ``tx``).
        handles: the store's count of open handles per inode, shared (an inode removed
            here leaves it too).
    """

    def __init__(self, db: sqlite3.Connection, *, inode: Callable[[int], Inode],
                 tx: Callable[[], AbstractContextManager[None]],
                 touch_dir: Callable[[int, int, int, int], None],
                 delete: Callable[[int], None], handles: dict[int, int]) -> None:
        self._db, self._inode, self._tx = db, inode, tx
        self._touch_dir, self._delete, self._handles = touch_dir, delete, handles

    # -- administration (statfs, fsck, recovery) -----------------------------------------

    def file_inodes(self) -> Iterator[dict]:
        """Every regular-file inode, unlinked ones included, in inode order. Fetched in
        batches so callers may modify the store while iterating."""
        last = 0
        while True:
            rows = self._db.execute(
                f"SELECT {COLUMNS} FROM inodes i WHERE i.ino > ? AND (i.mode & ?) = ? "
                "ORDER BY i.ino LIMIT 512", (last, 0o170000, stat.S_IFREG))
            batch = rows.fetchall()
            if not batch:
                return
            for row in batch:
                yield Inode._make(row).attrs()
            last = batch[-1][0]

    def orphans(self) -> list[dict]:
        """Unlinked files no handle holds: their data removal is still pending (after a
        restart, every unlinked file)."""
        rows = self._db.execute(f"SELECT {COLUMNS} FROM inodes i WHERE i.nlink = 0")
        out = [Inode._make(row) for row in rows.fetchall()]
        return [r.attrs() for r in out if r.is_file and not self._handles.get(r.ino)]

    def remove_inode(self, ino: int) -> None:
        """Forget an inode: every name of it, its xattrs, its handle count. Used by fsck
        repair (and, for many at once, after the reaper removed deleted files' data)."""
        self._inode(check_ino(ino))  # ENOENT
        self.remove_inodes([ino])

    def remove_inodes(self, inos: list[int]) -> None:
        """``remove_inode`` of every inode of ``inos`` in one transaction; an inode already
        gone (fsck removed it meanwhile) is skipped."""
        inos = [check_ino(i) for i in inos]
        if ROOT_INO in inos:
            raise fail(errno.EBUSY, "root")
        with self._tx():
            for ino in inos:
                row = self._db.execute(SELECT_INODE, (ino,)).fetchone()
                if row is None:
                    continue
                r = Inode._make(row)
                if r.is_dir and r.nent:
                    raise fail(errno.ENOTEMPTY, f"inode {ino}")
                now = time.time_ns()
                rows = self._db.execute("SELECT parent FROM dentries WHERE ino = ?", (ino,))
                for (parent,) in rows.fetchall():
                    self._touch_dir(parent, now, -1, -1 if r.is_dir else 0)
                self._db.execute("DELETE FROM dentries WHERE ino = ?", (ino,))
                self._delete(ino)
        for ino in inos:
            self._handles.pop(ino, None)

    def removable(self, ino: int) -> bool:
        """Whether a file's data may go: no name and no handle left (the reaper asks just
        before it removes, as a file can be opened by inode after its last unlink)."""
        row = self._db.execute("SELECT nlink FROM inodes WHERE ino = ?", (ino,)).fetchone()
        return row is not None and row[0] == 0 and not self._handles.get(ino)

    # -- the pool of precreated inode numbers (server: precreate.py) -------------------------

    def reserve_numbers(self, n: int) -> list[int]:
        """``n`` new inode numbers no other inode will get, with nothing made for them
        (directories a mount makes ahead, mgr/ahead.py). One never used is only a gap."""
        n = perms.check_int(n, 1, 1 << 16, "numbers")
        with self._tx():
            return self._take_numbers(n)

    def _last_number(self) -> int:
        """The inode sequence's last number given out (AUTOINCREMENT: never reused)."""
        return self._db.execute(
            "SELECT seq FROM sqlite_sequence WHERE name = 'inodes'").fetchone()[0]

    def _take_numbers(self, n: int) -> list[int]:
        """Move the sequence past ``n`` numbers and return them (inside a transaction)."""
        last = self._last_number()
        self._db.execute("UPDATE sqlite_sequence SET seq = ? WHERE name = 'inodes'",
                         (last + n,))
        return list(range(last + 1, last + n + 1))

    def number_unused(self, ino: int) -> bool:
        """Whether ``ino`` was given out (the sequence passed it) and names nothing: no
        inode, not the pool's -- a number reserved by ``reserve_numbers`` and not used."""
        return 0 < ino <= self._last_number() and self._db.execute(
            "SELECT 1 FROM inodes WHERE ino = ? UNION ALL SELECT 1 FROM precreated "
            "WHERE ino = ?", (ino, ino)).fetchone() is None

    def pool_reserve(self, n: int) -> list[int]:
        """Take ``n`` new inode numbers for the pool (never given to any other inode), not
        yet ready: their stripe files are still to be made."""
        n = perms.check_int(n, 1, 1 << 16, "pool size")
        with self._tx():
            inos = self._take_numbers(n)
            self._db.executemany("INSERT INTO precreated (ino, ready) VALUES (?, 0)",
                                 [(i,) for i in inos])
        return inos

    def pool_ready(self, inos: list[int]) -> None:
        """Every I/O daemon has made the stripe files of ``inos``: they may be used."""
        with self._tx():
            self._db.executemany("UPDATE precreated SET ready = 1 WHERE ino = ?",
                                 [(check_ino(i),) for i in inos])

    def pool(self, ready: bool | None = None) -> list[int]:
        """The pooled numbers (all -- those being discarded too: their stripe files are the
        pool's until they are gone --, or only the ready or the unready ones), in order."""
        where = " WHERE ready != 2" if ready is None else f" WHERE ready = {int(ready)}"
        return [i for (i,) in self._db.execute(f"SELECT ino FROM precreated{where} ORDER BY ino")]

    def pool_discard(self, inos: list[int]) -> None:
        """Ready numbers that will never be given to a file (precreate.py's held numbers,
        past their time): marked (``ready`` 3), so a crash before their stripe files are
        gone has them removed at the next start (``pool_discarding``)."""
        with self._tx():
            self._db.executemany("UPDATE precreated SET ready = 3 WHERE ino = ? AND ready = 1",
                                 [(check_ino(i),) for i in inos])

    def pool_discarding(self) -> list[int]:
        """The numbers being discarded, whose stripe files may still be there."""
        return [i for (i,) in self._db.execute(
            "SELECT ino FROM precreated WHERE ready = 3 ORDER BY ino")]

    def pool_forget(self, inos: list[int]) -> None:
        """Discarded numbers whose stripe files every daemon removed: gone from the pool."""
        with self._tx():
            self._db.executemany("DELETE FROM precreated WHERE ino = ? AND ready = 3",
                                 [(check_ino(i),) for i in inos])

    # -- records of older managers ---------------------------------------------------------

    def forget_making(self) -> None:
        """Drop the records (``ready`` 2) by which managers before stripe files were made at
        first write marked a create whose stripe files were being made: no create makes any
        now, and an inode needs none of its own."""
        with self._tx():
            self._db.execute("DELETE FROM precreated WHERE ready = 2")

    def counts(self) -> dict:
        """Inode totals for statfs (unlinked files awaiting removal included)."""
        rows = self._db.execute("SELECT mode & ?, count(*) FROM inodes GROUP BY 1",
                                (0o170000,)).fetchall()
        by = dict(rows)
        out = {"files": by.get(stat.S_IFREG, 0), "dirs": by.get(stat.S_IFDIR, 0),
               "symlinks": by.get(stat.S_IFLNK, 0),
               "special": sum(by.get(t, 0) for t in perms.SPECIAL)}
        return out | {"inodes": sum(out.values())}
