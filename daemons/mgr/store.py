"""The manager's metadata store: the directory tree, inodes, layouts and xattrs in SQLite.

Synchronous and single-connection on purpose: the manager is one trio task loop, so every
call runs to completion between awaits and needs no locking. Each mutating call is one
transaction, or one savepoint of a group commit (``store.txn``, txn.py). WAL,
``synchronous=NORMAL``: a committed call survives ``kill -9`` and the store never corrupts
(SPEC §10); a client's fsync syncs the WAL (server ``sync``).

Data removal is two-phase so a crash never leaks stripe files: when a file's last link and
handle are gone, ``unlink``/``rename``/``release`` return its attrs and keep the inode at
``nlink == 0``; the server removes the stripe files, then calls ``admin.remove_inode``.
After a restart ``admin.orphans()`` lists the removals still pending.
"""

from __future__ import annotations

import errno
import stat
import time

from pvfs.layout.stripe import Stripe
from pvfs.protocol.inodes import new_owner

from . import migrations, perms
from .createrun import CreateRuns
from .inode import COLUMNS, ROOT_INO, SELECT_INODE, Inode
from .layouts import Layouts
from .paths import walk
from .perms import R_OK, W_OK, X_OK, Cred, check_cred, check_ino, check_name, fail
from .store_admin import StoreAdministration
from .txn import BatchHook, Transactions
from .xattrs import XATTR_CREATE, XATTR_REPLACE, Xattrs

__all__ = ["RENAME_EXCHANGE", "RENAME_NOREPLACE", "ROOT_INO", "XATTR_CREATE", "XATTR_REPLACE",
           "BatchHook", "Cred", "MetaStore"]

RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
READDIR_MAX = 65536
# The schema and its upgrades live in migrations.py, the xattrs table in xattrs.py (whose
# XATTR_CREATE/XATTR_REPLACE flags are re-exported here with the store's API).

_SEL_CHILD = (f"SELECT {COLUMNS} FROM dentries d JOIN inodes i ON i.ino = d.ino "
              "WHERE d.parent = ? AND d.name = ?")
# A directory and its entry of one name (NULLs if none) in one query: a search's permission
# check needs the directory, its caller the child.
_SEL_DIR_CHILD = ("SELECT " + COLUMNS.replace("i.", "p.") + ", " + COLUMNS +
                  " FROM inodes p LEFT JOIN dentries d ON d.parent = p.ino AND d.name = ? "
                  "LEFT JOIN inodes i ON i.ino = d.ino WHERE p.ino = ?")
_NCOL = len(Inode._fields)
_SEL_PAGE = (f"SELECT d.cookie, d.name, {COLUMNS} FROM dentries d JOIN inodes i ON i.ino = d.ino "
             "WHERE d.parent = ? AND d.cookie > ? ORDER BY d.cookie LIMIT ?")
_TOUCH_DIR = ("UPDATE inodes SET mtime = ?, ctime = ?, nent = nent + ?, nlink = nlink + ? "
              "WHERE ino = ?")
_INSERT = ("INSERT INTO inodes (mode, nlink, uid, gid, atime, mtime, ctime, target, "
           "sbase, spcount, sssize, rdev) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
_INSERT_INO = _INSERT.replace("(mode,", "(ino, mode,").replace("VALUES (?,", "VALUES (?, ?,")


class MetaStore:
    """All metadata of one file system. See the module docstring for the removal protocol.

    Attributes:
        admin: the side for fsck, removal, the precreate pool and statfs's inode totals
            (:class:`~.store_admin.StoreAdministration`), on the same connection.
        runs: runs of creates made ahead in one directory, stored in one go
            (:class:`~.createrun.CreateRuns`).
    """

    def __init__(self, path: str, niods: int, default_stripe: Stripe) -> None:
        self.niods = perms.check_int(niods, 1, 1 << 16, "niods")
        if default_stripe is None:
            raise fail(errno.EINVAL, "default stripe")
        self.default_stripe = perms.check_stripe(default_stripe, self.niods, resolve=False)
        self._open: dict[int, int] = {}
        # The connection and its transactions, one per call or grouped (txn.py).
        self.txn = Transactions(path)
        self._db, self._tx = self.txn.db, self.txn.tx
        self.layouts = Layouts(self._db, self._get, self._dir, self._tx, self.niods,
                               self.default_stripe)
        self._xattrs = Xattrs(self._db, self._get, self._tx, self._set_ctime)
        self.runs = CreateRuns(self._db, tx=self._tx, directory=self._dir,
                               touch_dir=self._touch_dir, insert_ino=_INSERT_INO,
                               niods=self.niods, default_stripe=self.default_stripe)
        self.admin = StoreAdministration(self._db, inode=self._get, tx=self._tx,
                                         touch_dir=self._touch_dir, delete=self._delete,
                                         handles=self._open)
        migrations.create(self._db)
        with self._tx():
            version = migrations.stored_version(self._db)
            if version is None:  # a new file system: the root directory is inode 1
                now = time.time_ns()
                self._db.execute(_INSERT, (stat.S_IFDIR | 0o755, 2, 0, 0, now, now, now,
                                           None, None, None, None, 0))
            else:
                migrations.upgrade(self._db, version)

    def close(self, ino: int | None = None) -> dict | None:
        """``close()`` closes the store; ``close(ino)`` drops one handle (``release``)."""
        if ino is not None:
            return self.release(ino)
        self.txn.close()
        return None

    def _get(self, ino: int) -> Inode:
        row = self._db.execute(SELECT_INODE, (ino,)).fetchone()
        if row is None:
            raise fail(errno.ENOENT, f"inode {ino}")
        return Inode._make(row)

    def _dir(self, ino: int) -> Inode:
        r = self._get(ino)
        if not r.is_dir:
            raise fail(errno.ENOTDIR, f"inode {ino}")
        return r

    def _child(self, parent: int, name: str) -> Inode | None:
        row = self._db.execute(_SEL_CHILD, (parent, name)).fetchone()
        return None if row is None else Inode._make(row)

    def _parent_of(self, ino: int) -> int:
        if ino == ROOT_INO:
            return ROOT_INO
        row = self._db.execute("SELECT parent FROM dentries WHERE ino = ? LIMIT 1",
                               (ino,)).fetchone()
        if row is None:
            raise fail(errno.ENOENT, f"inode {ino} has no parent")
        return row[0]

    def _within(self, ino: int, ancestor: int) -> bool:
        """Is directory ``ino`` the directory ``ancestor`` or below it?"""
        while True:
            if ino == ancestor:
                return True
            if ino == ROOT_INO:
                return False
            ino = self._parent_of(ino)

    _need = staticmethod(perms.need_inode)

    def _search(self, parent: int, name: str, cred: Cred) -> tuple[Inode, Inode | None]:
        """(parent dir, child or None) after the search permission on the parent: one query
        for both (the errors of ``_dir`` first, then the permission)."""
        row = self._db.execute(_SEL_DIR_CHILD, (name, parent)).fetchone()
        if row is None:
            raise fail(errno.ENOENT, f"inode {parent}")
        d = Inode._make(row[:_NCOL])
        if not d.is_dir:
            raise fail(errno.ENOTDIR, f"inode {parent}")
        self._need(d, X_OK, cred)
        return d, None if row[_NCOL] is None else Inode._make(row[_NCOL:])

    def _touch_dir(self, ino: int, now: int, dnent: int = 0, dnlink: int = 0) -> None:
        self._db.execute(_TOUCH_DIR, (now, now, dnent, dnlink, ino))

    def _set_ctime(self, ino: int, now: int) -> None:
        self._db.execute("UPDATE inodes SET ctime = ? WHERE ino = ?", (now, ino))

    def _delete(self, ino: int) -> None:
        self._xattrs.drop(ino)
        self._db.execute("DELETE FROM inodes WHERE ino = ?", (ino,))

    def _drop_link(self, r: Inode, now: int) -> dict | None:
        """One name of ``r`` is gone (its dentry already deleted). Returns attrs when the
        file's data must be removed now."""
        if r.is_dir or (not r.is_file and r.nlink <= 1):
            self._delete(r.ino)  # no data anywhere else (directories, symlinks, specials)
            return None
        nlink = r.nlink - 1
        self._db.execute("UPDATE inodes SET nlink = ?, ctime = ? WHERE ino = ?",
                         (nlink, now, r.ino))
        if nlink == 0 and not self._open.get(r.ino):
            return r._replace(nlink=0, ctime=now).attrs()  # the row as just written
        return None

    # -- lookup ---------------------------------------------------------------------------

    def _walk(self, path: str, cred: Cred, follow: bool, seen: list[int] | None = None) -> Inode:
        return walk(path, cred, follow, self._get(ROOT_INO), self._child,
                    lambda ino: self._get(self._parent_of(ino)), seen)

    def resolve(self, path: str, cred: Cred, follow: bool = True,
                seen: list[int] | None = None) -> dict:
        """Attributes of the object at absolute ``path``; ``follow`` applies to the last
        component only (symlinks in the middle are always followed). ``seen`` gets the
        directories whose names the walk read, also when it fails."""
        path, cred = perms.check_path(path), check_cred(cred)
        return self._walk(path, cred, bool(follow), seen).attrs()

    def resolve_parent(self, path: str, cred: Cred) -> tuple[dict, str]:
        """(attributes of the directory holding the last component, that component).
        "/" gives (root, ".")."""
        path, cred = perms.check_path(path), check_cred(cred)
        comps = [c for c in path.split("/") if c]
        if not comps:
            return self._get(ROOT_INO).attrs(), "."
        name = check_name(comps[-1])
        d = self._walk("/" + "/".join(comps[:-1]), cred, True)
        if not d.is_dir:
            raise fail(errno.ENOTDIR, path)
        return d.attrs(), name

    def lookup(self, parent: int, name: str, cred: Cred) -> dict:
        parent, name, cred = check_ino(parent), check_name(name), check_cred(cred)
        d, child = self._search(parent, name, cred)
        if name == ".":
            return d.attrs()
        if name == "..":
            return self._get(self._parent_of(parent)).attrs()
        if child is None:
            raise fail(errno.ENOENT, name)
        return child.attrs()

    def getattr(self, ino: int) -> dict:
        return self._get(check_ino(ino)).attrs()

    def child_ino(self, parent: int, name: str) -> int:
        """The inode ``name`` in ``parent`` names, 0 if none (no permission check: only for
        knowing which inode a change will touch, leases.py)."""
        row = self._db.execute("SELECT ino FROM dentries WHERE parent = ? AND name = ?",
                               (parent, name)).fetchone()  # (the name index alone: no join)
        return 0 if row is None else row[0]

    def mark_security(self, attrs: list[dict]) -> None:
        """Set ``secx`` in each: whether the inode has any ``security.*`` extended attribute
        (mounts answer the kernel's probes of those names from it; fuse/xattrs.py)."""
        inos = [a["ino"] for a in attrs]
        have: set[int] = set()
        for i in range(0, len(inos), 500):
            part = inos[i:i + 500]
            have.update(r[0] for r in self._db.execute(
                f"SELECT DISTINCT ino FROM xattrs WHERE ino IN ({','.join('?' * len(part))}) "
                "AND name >= 'security.' AND name < 'security/'", part))
        for a in attrs:
            a["secx"] = a["ino"] in have

    # -- attributes -----------------------------------------------------------------------

    def setattr(self, ino: int, cred: Cred, *, mode: int | None = None, uid: int | None = None,
                gid: int | None = None, atime_ns: int | None = None,
                mtime_ns: int | None = None, size: int | None = None,
                now: bool = False, handle: bool = False, stamp: int | None = None) -> dict:
        """chmod / chown / utimens / truncate bookkeeping in one atomic step. ``now`` sets
        every time not given explicitly to the current time (``stamp``: the time a mount
        showed for a change made ahead, fuse/creates.py). ``size`` only updates
        mtime/ctime (and drops setuid): the server truncates the stripe files. ``handle``:
        the change comes through a handle opened for writing (see ``perms.setattr_rules``)."""
        ino, cred = check_ino(ino), check_cred(cred)
        stamp = time.time_ns() if stamp is None else stamp
        with self._tx():
            vals = perms.setattr_rules(self._get(ino), cred, stamp, mode=mode, uid=uid, gid=gid,
                                       atime_ns=atime_ns, mtime_ns=mtime_ns, size=size, now=now,
                                       handle=handle)
            self._db.execute(
                "UPDATE inodes SET mode = ?, uid = ?, gid = ?, atime = ?, mtime = ?, ctime = ? "
                "WHERE ino = ?", (*vals, stamp, ino))
            return self._get(ino).attrs()

    def stamp(self, ino: int, atime: bool) -> dict:
        """Set mtime and ctime (and atime) to now, after the server changed a file's stripe
        files for it (creation, O_TRUNC): the reported mtime is the newest of the inode's
        and the stripe files', so the inode's must not be the older one. No permission
        check: the caller's request was checked already."""
        ino, now = check_ino(ino), time.time_ns()
        with self._tx():
            sql = "UPDATE inodes SET mtime = ?, ctime = ?" + (", atime = ?" if atime else "")
            self._db.execute(sql + " WHERE ino = ?", (now, now, *([now] if atime else []), ino))
            return self._get(ino).attrs()

    def access(self, ino: int, mask: int, cred: Cred) -> None:
        """os.access: F_OK only checks existence; EACCES if any of R/W/X is refused."""
        ino, mask, cred = check_ino(ino), perms.check_int(mask, 0, 7, "mask"), check_cred(cred)
        r = self._get(ino)
        if mask:
            self._need(r, mask, cred)

    # -- creating names -------------------------------------------------------------------

    def _prepare_new(self, parent: int, name: str, cred: Cred) -> Inode:
        d, child = self._search(parent, name, cred)
        if child is not None:
            raise fail(errno.EEXIST, name)
        self._need(d, W_OK | X_OK, cred)
        return d

    def _insert(self, parent: Inode, name: str, ftype: int, perm: int, cred: Cred, now: int,
                target: str | None = None, stripe: Stripe | None = None, rdev: int = 0,
                ino: int | None = None, parent_out: list | None = None) -> Inode:
        """Insert a new inode and its name; the inode as written (no query back). With
        ``parent_out``, the parent directory's attributes after the change are appended."""
        perm, gid = new_owner(parent.mode, parent.gid, perm, ftype == stat.S_IFDIR, cred)
        is_dir = ftype == stat.S_IFDIR
        nlink = 2 if is_dir else 1
        s = (None, None, None) if stripe is None else (stripe.base, stripe.pcount, stripe.ssize)
        row = (ftype | perm, nlink, cred.uid, gid, now, now, now, target, *s, rdev)
        cur = self._db.execute(_INSERT, row) if ino is None else \
            self._db.execute(_INSERT_INO, (ino, *row))
        ino = cur.lastrowid
        assert ino is not None
        self._db.execute("INSERT INTO dentries (parent, name, ino) VALUES (?, ?, ?)",
                         (parent.ino, name, ino))
        self._touch_dir(parent.ino, now, 1, 1 if is_dir else 0)
        if parent_out is not None:
            parent_out.append(parent._replace(mtime=now, ctime=now, nent=parent.nent + 1,
                                              nlink=parent.nlink + is_dir).attrs())
        return Inode(ino, ftype | perm, nlink, cred.uid, gid, now, now, now, 0, target, *s,
                     rdev)

    def create(self, parent: int, name: str, mode: int, cred: Cred,
               stripe: Stripe | None = None, exclusive: bool = False,
               precreated: int | None = None,
               parent_out: list | None = None, now: int | None = None) -> tuple[dict, bool]:
        """A regular file; an existing non-directory is returned as is (created False) unless
        ``exclusive``. Layout: ``stripe`` > parent's default > file-system default.

        ``precreated`` is a number of the pool (``pool_reserve``) whose stripe files every
        I/O daemon already holds: the new file gets it if its layout spans every daemon
        (the caller sees that in the reply's ``ino``; otherwise the number stays pooled).
        ``parent_out``: a created file's parent directory's new attributes are appended.
        ``now``: the new file's times (a mount's create made ahead of the manager, with the
        times it already showed: fuse/creates.py), else the clock's."""
        parent, name, cred = check_ino(parent), check_name(name, creating=True), check_cred(cred)
        perm = perms.check_mode(mode)
        explicit = perms.check_stripe(stripe, self.niods, resolve=True)
        with self._tx():
            d, child = self._search(parent, name, cred)
            if child is not None:
                if exclusive or child.is_dir:
                    raise fail(errno.EEXIST if exclusive else errno.EISDIR, name)
                return child.attrs(), False
            self._need(d, W_OK | X_OK, cred)
            layout = perms.check_stripe(explicit or d.stripe or self.default_stripe,
                                        self.niods, resolve=True)
            if precreated is not None and (layout.pcount != self.niods or self._db.execute(
                    "DELETE FROM precreated WHERE ino = ? AND ready = 1",
                    (precreated,)).rowcount != 1):
                precreated = None
            r = self._insert(d, name, stat.S_IFREG, perm, cred,
                             time.time_ns() if now is None else now, stripe=layout,
                             ino=precreated, parent_out=parent_out)
            return r.attrs(), True

    def mkdir(self, parent: int, name: str, mode: int, cred: Cred,
              parent_out: list | None = None, ino: int | None = None,
              now: int | None = None) -> dict:
        """A directory; it inherits the parent's default layout (like ``lfs setstripe -d``).
        ``parent_out``: the parent directory's new attributes are appended. ``ino`` and
        ``now``: the number and times a mount made it with ahead of the manager (a number
        ``admin.reserve_numbers`` gave out, mgr/ahead.py)."""
        parent, name, cred = check_ino(parent), check_name(name, creating=True), check_cred(cred)
        perm = perms.check_mode(mode)
        with self._tx():
            d = self._prepare_new(parent, name, cred)
            return self._insert(d, name, stat.S_IFDIR, perm, cred,
                                time.time_ns() if now is None else now, stripe=d.stripe,
                                ino=ino, parent_out=parent_out).attrs()

    def mknod(self, parent: int, name: str, mode: int, rdev: int, cred: Cred) -> dict:
        """A special file (FIFO, socket, character or block device): mode and rdev only, no
        stripe files -- the kernel serves its I/O. Devices need root."""
        parent, name = check_ino(parent), check_name(name, creating=True)
        cred = check_cred(cred)
        perms.check_int(mode, 0, 0o177777, "mode")
        with self._tx():
            d = self._prepare_new(parent, name, cred)
            ftype, rdev = perms.check_special(mode, rdev, cred)
            return self._insert(d, name, ftype, mode & 0o7777, cred, time.time_ns(),
                                rdev=rdev).attrs()

    def symlink(self, parent: int, name: str, target: str, cred: Cred) -> dict:
        parent, name, cred = check_ino(parent), check_name(name, creating=True), check_cred(cred)
        target = perms.check_target(target)
        with self._tx():
            d = self._prepare_new(parent, name, cred)
            return self._insert(d, name, stat.S_IFLNK, 0o777, cred, time.time_ns(),
                                target=target).attrs()

    def readlink(self, ino: int) -> str:
        r = self._get(check_ino(ino))
        if not r.is_link:
            raise fail(errno.EINVAL, f"inode {ino} is not a symlink")
        return r.target or ""

    def link(self, ino: int, new_parent: int, new_name: str, cred: Cred) -> dict:
        """A hard link; directories cannot have one (EPERM)."""
        ino, new_parent = check_ino(ino), check_ino(new_parent)
        new_name, cred = check_name(new_name, creating=True), check_cred(cred)
        with self._tx():
            d = self._prepare_new(new_parent, new_name, cred)
            r = self._get(ino)
            if r.is_dir or r.nlink == 0:
                raise fail(errno.EPERM if r.is_dir else errno.ENOENT, r.what)
            now = time.time_ns()
            self._db.execute("INSERT INTO dentries (parent, name, ino) VALUES (?, ?, ?)",
                             (new_parent, new_name, ino))
            self._db.execute("UPDATE inodes SET nlink = nlink + 1, ctime = ? WHERE ino = ?",
                             (now, ino))
            self._touch_dir(d.ino, now, 1)
            return self._get(ino).attrs()

    # -- removing names -------------------------------------------------------------------

    def _victim(self, parent: int, name: str, cred: Cred) -> tuple[Inode, Inode]:
        d, child = self._search(parent, name, cred)
        if child is None:
            raise fail(errno.ENOENT, name)
        self._need(d, W_OK | X_OK, cred)
        perms.check_sticky(d, child, cred)
        return d, child

    def unlink(self, parent: int, name: str, cred: Cred,
               parent_out: list | None = None, now: int | None = None) -> dict | None:
        """Remove a non-directory name. Returns the inode's attrs (with "stripe") when its
        data must be removed now; the server then calls ``admin.remove_inode``.
        ``parent_out``: the parent directory's new attributes are appended. ``now``: the
        change's time (a mount's unlink made ahead of the manager), else the clock's."""
        parent, name, cred = check_ino(parent), check_name(name), check_cred(cred)
        if name in (".", ".."):
            raise fail(errno.EISDIR, name)
        with self._tx():
            d, child = self._victim(parent, name, cred)
            if child.is_dir:
                raise fail(errno.EISDIR, name)
            now = time.time_ns() if now is None else now
            self._db.execute("DELETE FROM dentries WHERE parent = ? AND name = ?",
                             (parent, name))
            self._touch_dir(d.ino, now, -1)
            if parent_out is not None:
                parent_out.append(d._replace(mtime=now, ctime=now, nent=d.nent - 1).attrs())
            return self._drop_link(child, now)

    def rmdir(self, parent: int, name: str, cred: Cred, parent_out: list | None = None,
              now: int | None = None) -> None:
        """Remove an empty directory. ``parent_out``/``now``: as :meth:`unlink`'s."""
        parent, name, cred = check_ino(parent), check_name(name), check_cred(cred)
        perms.rmdir_name_rule(name, parent == ROOT_INO)
        with self._tx():
            d, child = self._victim(parent, name, cred)
            if not child.is_dir:
                raise fail(errno.ENOTDIR, name)
            if child.nent:
                raise fail(errno.ENOTEMPTY, name)
            now = time.time_ns() if now is None else now
            self._db.execute("DELETE FROM dentries WHERE parent = ? AND name = ?",
                             (parent, name))
            self._touch_dir(d.ino, now, -1, -1)
            self._delete(child.ino)
            if parent_out is not None:
                parent_out.append(d._replace(mtime=now, ctime=now, nent=d.nent - 1,
                                             nlink=d.nlink - 1).attrs())

    def rename(self, parent: int, name: str, new_parent: int, new_name: str, cred: Cred,
               flags: int = 0) -> dict | None:
        """renameat2: atomic move, over an existing entry unless RENAME_NOREPLACE, or a swap
        with RENAME_EXCHANGE. Returns attrs of a replaced file whose data must go."""
        parent, new_parent = check_ino(parent), check_ino(new_parent)
        name, new_name = check_name(name, creating=True), check_name(new_name, creating=True)
        cred = check_cred(cred)
        flags = perms.check_flags(flags, "rename flags")
        with self._tx():
            pd, src = self._search(parent, name, cred)
            npd, dst = self._search(new_parent, new_name, cred)
            if src is None:
                raise fail(errno.ENOENT, name)
            perms.rename_rule(src, dst, flags, new_name,
                              src.is_dir and self._within(new_parent, src.ino),
                              dst is not None and dst.is_dir and self._within(parent, dst.ino))
            if dst is not None and dst.ino == src.ino:
                return None  # two names of one file: POSIX says do nothing
            self._need(pd, W_OK | X_OK, cred)
            self._need(npd, W_OK | X_OK, cred)
            perms.check_sticky(pd, src, cred)
            if dst is not None:
                perms.check_sticky(npd, dst, cred)
            moves_dir = parent != new_parent
            if flags & RENAME_EXCHANGE:
                assert dst is not None
                return self._exchange(pd, src, npd, dst, name, new_name, cred)
            if dst is not None:
                perms.replace_rule(src, dst, new_name)
            if src.is_dir and moves_dir:
                self._need(src, W_OK, cred)  # its ".." changes
            now = time.time_ns()
            reaped = None
            if dst is not None:
                self._db.execute("DELETE FROM dentries WHERE parent = ? AND name = ?",
                                 (new_parent, new_name))
                self._touch_dir(new_parent, now, -1, -1 if dst.is_dir else 0)
                reaped = self._drop_link(dst, now)
            # the entry keeps its cookie: a paged readdir of the old directory neither
            # repeats nor skips the entries that did not move
            self._db.execute("UPDATE dentries SET parent = ?, name = ? WHERE parent = ? "
                             "AND name = ?", (new_parent, new_name, parent, name))
            sub = 1 if src.is_dir else 0
            self._touch_dir(parent, now, -1, -sub)
            self._touch_dir(new_parent, now, 1, sub)
            self._set_ctime(src.ino, now)
            return reaped

    def _exchange(self, pd: Inode, src: Inode, npd: Inode, dst: Inode, name: str, new_name: str,
                  cred: Cred) -> None:
        moves_dir = pd.ino != npd.ino
        for r in (src, dst):
            if r.is_dir and moves_dir:
                self._need(r, W_OK, cred)  # its ".." changes
        now = time.time_ns()
        upd = "UPDATE dentries SET ino = ? WHERE parent = ? AND name = ?"
        self._db.execute(upd, (dst.ino, pd.ino, name))
        self._db.execute(upd, (src.ino, npd.ino, new_name))
        shift = int(dst.is_dir) - int(src.is_dir)
        self._touch_dir(pd.ino, now, 0, shift if moves_dir else 0)
        self._touch_dir(npd.ino, now, 0, -shift if moves_dir else 0)
        self._set_ctime(src.ino, now)
        self._set_ctime(dst.ino, now)

    # -- directories ----------------------------------------------------------------------

    def readdir(self, ino: int, cred: Cred, cookie: int = 0,
                limit: int = 1024) -> list[tuple[str, dict, int]]:
        """A page of (name, attrs, next cookie), "." and ".." first. Cookies are positions in
        a never-reused sequence, so a page boundary stays valid across inserts and removes."""
        ino, cred = check_ino(ino), check_cred(cred)
        cookie = perms.check_int(cookie, 0, perms.MAX_INO, "cookie")
        limit = perms.check_int(limit, 1, READDIR_MAX, "limit")
        d = self._dir(ino)
        self._need(d, R_OK, cred)
        out: list[tuple[str, dict, int]] = []
        if cookie == 0:
            out.append((".", d.attrs(), 1))
        if cookie <= 1 and len(out) < limit:
            out.append(("..", self._get(self._parent_of(ino)).attrs(), 2))
        if len(out) < limit:
            rows = self._db.execute(_SEL_PAGE, (ino, max(cookie - 2, 0), limit - len(out)))
            for row in rows.fetchall():
                out.append((row[1], Inode._make(row[2:]).attrs(), row[0] + 2))
        return out

    # -- open handles (N_file) ------------------------------------------------------------

    def open(self, ino: int, flags: int, cred: Cred, *, created: bool = False) -> dict:
        """Check access for ``flags`` (os.O_*) and count one more handle. ``created=True``
        (the caller just made the file in this request) skips the mode check, as POSIX
        lets ``open(O_CREAT, 0444)`` write to the file it created."""
        ino, cred = check_ino(ino), check_cred(cred)
        r = self._get(ino)
        if r.nlink == 0 and not self._open.get(ino):
            raise fail(errno.ENOENT, f"inode {ino} is unlinked")
        mask = perms.open_mask(r, flags)
        if not created:
            self._need(r, mask, cred)
        self._open[ino] = self._open.get(ino, 0) + 1
        return r.attrs()

    def opened_new(self, inos: list[int]) -> None:
        """Count one handle of each of ``inos``, files this request just made (``open`` with
        ``created``: nothing to check, no row to read)."""
        for ino in inos:
            self._open[ino] = self._open.get(ino, 0) + 1

    def release(self, ino: int) -> dict | None:
        """Drop one handle. Returns attrs when this was the last handle of an unlinked file
        (the server removes the data, then calls ``admin.remove_inode``)."""
        ino = check_ino(ino)
        n = self._open.get(ino, 0)
        if n <= 0:
            raise fail(errno.EBADF, f"inode {ino} is not open")
        if n > 1:
            self._open[ino] = n - 1
            return None
        del self._open[ino]
        row = self._db.execute(SELECT_INODE, (ino,)).fetchone()
        r = None if row is None else Inode._make(row)
        return r.attrs() if r is not None and r.nlink == 0 and r.is_file else None

    def nfile(self, ino: int) -> int:
        """How many handles hold ``ino`` open now (N_file of thesis eq. 5.7)."""
        return self._open.get(check_ino(ino), 0)

    def open_count(self) -> int:
        """Handles open on all files (for status)."""
        return sum(self._open.values())

    # -- extended attributes (xattrs.py) --------------------------------------------------

    def getxattr(self, ino: int, name: str, cred: Cred) -> bytes:
        return self._xattrs.get(ino, name, cred)

    def setxattr(self, ino: int, name: str, value: bytes, cred: Cred, flags: int = 0) -> None:
        self._xattrs.set(ino, name, value, cred, flags)

    def listxattr(self, ino: int, cred: Cred) -> list[str]:
        return self._xattrs.names(ino, cred)

    def removexattr(self, ino: int, name: str, cred: Cred) -> None:
        self._xattrs.remove(ino, name, cred)
