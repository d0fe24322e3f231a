"""Runs of creates made ahead in one directory, stored in one go (a part of ``MetaStore``).

A leasing mount's batch (ahead.py) is mostly creates in one directory, one after another
(``tar x``, mdtest, a build's object files). Made one by one, each cost a savepoint, a
search of its name, the precreated number's row, two inserts and an update of the
directory: most of the manager's time per create in the issue-29 profile. A run is made
here with one search of all its names, one delete of its numbers, the inserts of all its
inodes and names in two statements and one update of the directory -- in one transaction,
with the same rows, times and checks as one by one. If any of them would fail, nothing of
the run is kept and :class:`~.perms.fail` says so: the caller then makes them one by one, so
each gets its own result (ahead.py).
"""

from __future__ import annotations

import errno
import stat
from collections.abc import Callable

from pvfs.layout.stripe import Stripe
from pvfs.protocol.inodes import new_owner

from . import perms
from .inode import Inode
from .perms import W_OK, X_OK, Cred, check_cred, check_ino, check_name, fail

__all__ = ["CreateRuns"]

_CHUNK = 500  # names or numbers per IN (...) list (SQLite's bound on variables is 32,766)


def _chunks(values: list, n: int = _CHUNK):
    for i in range(0, len(values), n):
        yield values[i:i + n]


class CreateRuns:
    """``create(parent, items)``: regular files in ``parent``, each (name, mode, cred,
    precreated number, times) -- a create made ahead under a number of the pool."""

    def __init__(self, db, *, tx: Callable, directory: Callable[[int], Inode],
                 touch_dir: Callable[..., None], insert_ino: str, niods: int,
                 default_stripe: Stripe) -> None:
        self._db, self._tx, self._dir, self._touch_dir = db, tx, directory, touch_dir
        self._insert_ino, self.niods, self.default_stripe = insert_ino, niods, default_stripe

    def create(self, parent: int, items: list[tuple[str, int, Cred, int, int]]
               ) -> tuple[Inode, list[Inode]]:
        """The directory before the run and the new files, in order (none made if any
        fails: EEXIST for a name there or twice, ESTALE for a number the pool does not hold
        ready, EXDEV for a layout the pool's numbers do not fit, the checks' errors)."""
        parent = check_ino(parent)
        rows = [(check_name(n, creating=True), perms.check_mode(m), check_cred(c),
                 check_ino(i), int(t)) for n, m, c, i, t in items]
        names = [r[0] for r in rows]
        if len(set(names)) != len(names):
            raise fail(errno.EEXIST, "a name twice in one run")
        with self._tx():
            d = self._dir(parent)
            for cred in {r[2] for r in rows}:
                perms.need_inode(d, W_OK | X_OK, cred)
            layout = perms.check_stripe(d.stripe or self.default_stripe, self.niods,
                                        resolve=True)
            if layout.pcount != self.niods:
                raise fail(errno.EXDEV, "the directory's layout is not the pool's")
            self._no_names(parent, names)
            self._take_numbers([r[3] for r in rows])
            made = [self._inode(d, layout, *r) for r in rows]
            self._db.executemany(self._insert_ino, [
                (r.ino, r.mode, 1, r.uid, r.gid, r.atime, r.mtime, r.ctime, None, layout.base,
                 layout.pcount, layout.ssize, 0) for r in made])
            self._db.executemany("INSERT INTO dentries (parent, name, ino) VALUES (?, ?, ?)",
                                 [(parent, n, r.ino) for n, r in zip(names, made, strict=True)])
            self._touch_dir(parent, rows[-1][4], len(rows), 0)
        return d, made

    def _no_names(self, parent: int, names: list[str]) -> None:
        for chunk in _chunks(names):
            marks = ",".join("?" * len(chunk))
            hit = self._db.execute(f"SELECT name FROM dentries WHERE parent = ? AND name IN "
                                   f"({marks}) LIMIT 1", (parent, *chunk)).fetchone()
            if hit is not None:
                raise fail(errno.EEXIST, hit[0])

    def _take_numbers(self, inos: list[int]) -> None:
        taken = 0
        for chunk in _chunks(inos):
            marks = ",".join("?" * len(chunk))
            taken += self._db.execute(f"DELETE FROM precreated WHERE ready = 1 AND ino IN "
                                      f"({marks})", chunk).rowcount
        if taken != len(inos):
            raise fail(errno.ESTALE, "a number of the run is not the pool's")

    @staticmethod
    def _inode(d: Inode, layout: Stripe, name: str, perm: int, cred: Cred, ino: int,
               now: int) -> Inode:
        perm, gid = new_owner(d.mode, d.gid, perm, False, cred)
        return Inode(ino, stat.S_IFREG | perm, 1, cred.uid, gid, now, now, now, 0, None,
                     layout.base, layout.pcount, layout.ssize, 0)
