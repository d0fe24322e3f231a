"""The native API's file-system object: ``fs = pvfs.connect(CONFIG)`` (SPEC §4).

Metadata calls go to the manager, data straight to the I/O daemons (``DataPath``). Paths are
absolute inside the file system ("/a/b"); errors are ``OSError``s with the right errno.
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat as statmod
from typing import Self

from pvfs import config as cfgmod
from pvfs.client.ahead import CreatesAhead
from pvfs.client.attrs import Stat
from pvfs.client.datapath import MGR, DataPath
from pvfs.client.file import File
from pvfs.client.modes import parse_mode, readable, writable
from pvfs.client.pipeline import Pipes, WritePipe
from pvfs.client.readahead import ReadAhead
from pvfs.layout.stripe import Stripe
from pvfs.protocol.cred import Cred


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


class FileSystem:
    """A connection to one pvfs file system; thread-safe; close it (or use ``with``)."""

    def __init__(self, config: cfgmod.Config, uid: int | None = None, gid: int | None = None,
                 groups: list[int] | None = None) -> None:
        self.config = config
        self.data = DataPath(config)
        self.uid = os.getuid() if uid is None else uid
        self.gid = os.getgid() if gid is None else gid
        if groups is None:
            groups = os.getgroups() if uid is None else []
        # The header's cred field, built (and checked) once by the one Cred type.
        self.creds = Cred(self.uid, self.gid, tuple(groups))
        self.cred = self.creds.to_wire()
        self.umask = _current_umask()
        self.ahead: CreatesAhead | None = None  # creates made ahead (``connect(ahead=True)``)
        self.pipes = Pipes()  # the handles' pipelined writes (``open(..., pipeline=True)``)

    def create_ahead(self) -> bool:
        """Create files ahead of the manager from now on (``ahead.py``); False if the
        manager grants no leases."""
        if self.ahead is None:
            ahead = CreatesAhead(self, self.creds)
            if not ahead.start():
                return False
            self.ahead = ahead
        return True

    # ------------------------------------------------------------------ plumbing
    def meta(self, op: str, **fields) -> dict:
        """One manager call (after the creates made ahead and the writes behind them, and
        the pipelined writes' replies); OSError on failure."""
        if self.ahead is not None and (self.ahead.pending or self.ahead.behind):
            self.ahead.flush()
        if self.pipes:
            self.pipes.settle()
        return self.data.call(MGR, {"op": op, "cred": self.cred, **fields})

    def closing(self, ino: int) -> bool:
        """A handle of ``ino`` closes: whether the manager needs no ``close`` (a create made
        ahead that had not left yet, ``ahead.py``)."""
        return self.ahead is not None and self.ahead.closing(ino)

    def failure(self, ino: int) -> int | None:
        """The errno of the refused create (or write sent behind) of ``ino`` made ahead."""
        return None if self.ahead is None else self.ahead.failure(ino)

    def behind(self, ino: int, stripe, off: int, data) -> bool:
        """Whether a small write of a file made ahead was queued (``behind.py``)."""
        return self.ahead is not None and self.ahead.write_behind(ino, stripe, off, data)

    def settle(self, ino: int, keep: WritePipe | ReadAhead | None = None) -> None:
        """Return once no write of ``ino`` waits to be sent (``behind.py``) or answered
        (``pipeline.py``), and no read-ahead of it is left (``readahead.py``); but
        ``keep``'s."""
        if self.ahead is not None:
            self.ahead.settle(ino)
        if self.pipes:
            self.pipes.settle(ino, keep)

    def unpipe(self, pipe: WritePipe | ReadAhead) -> None:
        """A handle's pipelined writes or reads ended (its close)."""
        self.pipes.remove(pipe)

    def _path(self, path: str) -> str:
        if not isinstance(path, str):
            path = os.fsdecode(path)
        path = path.removeprefix("pvfs:")
        if not path.startswith("/"):
            path = "/" + path
        return path

    def _split(self, path: str) -> tuple[str, str]:
        """(the parent's path, the last name) of an absolute path."""
        path = path.rstrip("/")
        head, name = posixpath.split(path)
        if not name or name in (".", ".."):
            raise OSError(errno.EINVAL, "invalid final path component", path)
        return head or "/", name

    def _at(self, op: str, what: str, /, **fields) -> dict:
        """A manager call naming its inodes by path (``schema.BY_PATH``: the manager walks
        them, one round trip); an error names ``what``, the caller's path."""
        try:
            return self.meta(op, **fields)
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, what) from None

    def _in_parent(self, op: str, path: str, /, **fields) -> dict:
        """A manager call on the last name of ``path`` in its parent (named by its path)."""
        path = self._path(path)
        head, name = self._split(path)
        return self._at(op, path, dir=head, name=name, **fields)

    def _attrs(self, path: str, follow: bool = True) -> dict:
        try:
            if self.ahead is not None and self.ahead.session.valid():
                # the walk names the session: the directories it creates in stay its own
                try:
                    return self.meta("resolve", path=self._path(path), follow=follow,
                                     lease=self.ahead.session.name)
                except OSError as exc:
                    if exc.errno != errno.ESTALE:  # (fenced: the session is ending)
                        raise
            return self.meta("resolve", path=self._path(path), follow=follow)
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, path) from None

    def close(self) -> None:
        try:
            if self.ahead is not None:
                self.ahead.close()
        finally:
            self.data.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ files
    def open(self, path: str, mode: str | int = "rb", stripe: Stripe | None = None,
             perm: int = 0o666, *, pipeline: bool = False) -> File:
        """Open (or create) a file; ``stripe`` sets the distribution of a new file.
        ``pipeline``: a writable handle's writes return once sent, their replies read with
        the next call (``client/pipeline.py``: one write in flight per daemon; an error is
        raised by the handle's next call); a readable one reads ahead once it reads in order
        (``client/readahead.py``)."""
        flags = parse_mode(mode)
        path = self._path(path)
        perm &= ~self.umask & 0o7777
        try:
            if flags & os.O_CREAT and self.ahead is not None and stripe is None:
                head, name = self._split(path)
                attrs = self.ahead.create(head, name, perm, flags)
                if attrs is not None:
                    return File(self, path, attrs, flags)
            if flags & os.O_CREAT:
                # one round trip: the manager walks the parent's path itself
                head, name = self._split(path)
                attrs = self.meta("create", dir=head, name=name, mode=perm,
                                  stripe=stripe.to_wire() if stripe else None,
                                  exclusive=bool(flags & os.O_EXCL), flags=flags & ~os.O_CREAT,
                                  writing=writable(flags))
            else:
                attrs = self.meta("open", path=path, flags=flags)
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, path) from None
        if attrs["type"] == "dir":
            self.meta("close", ino=attrs["ino"])
            raise IsADirectoryError(errno.EISDIR, "is a directory", path)
        pipe = ahead = None
        if pipeline and writable(flags):
            pipe = WritePipe(self.data, attrs["ino"], Stripe(*attrs["stripe"]), path,
                             fresh=bool(attrs.get("fresh")))
            self.pipes.add(pipe)
        if pipeline and readable(flags):
            ahead = ReadAhead(self.data, attrs["ino"], Stripe(*attrs["stripe"]))
            self.pipes.add(ahead)
        return File(self, path, attrs, flags, pipe, ahead)

    def stat(self, path: str, follow_symlinks: bool = True) -> Stat:
        return Stat.from_wire(self._attrs(path, follow_symlinks))

    def lstat(self, path: str) -> Stat:
        return self.stat(path, follow_symlinks=False)

    def exists(self, path: str) -> bool:
        try:
            self.stat(path)
        except FileNotFoundError:
            return False
        return True

    def listdir(self, path: str = "/") -> list[str]:
        return [name for name, _ in self.scandir(path, attrs=False)]

    def scandir(self, path: str = "/", attrs: bool = True) -> list[tuple[str, Stat | None]]:
        """(name, Stat) of every entry but "." and "..", read in pages."""
        ino = self._attrs(path)["ino"]
        out, cookie = [], 0
        while True:
            entries = self.meta("readdir", ino=ino, cookie=cookie, limit=1024, attrs=attrs)["entries"]
            for name, a, cookie in entries:
                if name not in (".", ".."):
                    out.append((name, Stat.from_wire(a) if attrs and a else None))
            if len(entries) < 1024:
                return out

    def mkdir(self, path: str, mode: int = 0o777) -> None:
        self._in_parent("mkdir", path, mode=mode & ~self.umask & 0o7777)

    def mknod(self, path: str, mode: int = 0o600, device: int = 0) -> None:
        """Like ``os.mknod``: a FIFO, UNIX socket or device node is an inode with a mode and
        a device number, no data (the kernel of a mount serves its I/O; devices need root);
        no type bits, or S_IFREG, make an empty regular file."""
        if not statmod.S_IFMT(mode):
            mode |= statmod.S_IFREG
        if statmod.S_ISREG(mode):
            self.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, perm=mode & 0o7777).close()
            return
        self._in_parent("mknod", path, mode=statmod.S_IFMT(mode) | (mode & ~self.umask & 0o7777),
                        rdev=device)

    def mkfifo(self, path: str, mode: int = 0o666) -> None:
        self.mknod(path, statmod.S_IFIFO | (mode & 0o7777))

    def makedirs(self, path: str, mode: int = 0o777, exist_ok: bool = False) -> None:
        parts = [p for p in self._path(path).split("/") if p]
        for i in range(1, len(parts) + 1):
            sub = "/" + "/".join(parts[:i])
            try:
                self.mkdir(sub, mode)
            except FileExistsError:
                if i == len(parts) and not exist_ok:
                    raise

    def rmdir(self, path: str) -> None:
        self._in_parent("rmdir", path)

    def unlink(self, path: str) -> None:
        self._in_parent("unlink", path)

    remove = unlink

    def rename(self, src: str, dst: str, flags: int = 0) -> None:
        sp, sn = self._split(self._path(src))
        dp, dn = self._split(self._path(dst))
        self._at("rename", src, dir=sp, name=sn, new_dir=dp, new_name=dn, flags=flags)

    def symlink(self, target: str, path: str) -> None:
        self._in_parent("symlink", path, target=target)

    def readlink(self, path: str) -> str:
        return self._at("readlink", path, path=self._path(path))["target"]

    def link(self, src: str, dst: str) -> None:
        dp, dn = self._split(self._path(dst))
        self._at("link", src, path=self._path(src), new_dir=dp, new_name=dn)

    def _setattr(self, path: str, /, **fields) -> None:
        self._at("setattr", path, path=self._path(path), **fields)

    def truncate(self, path: str, size: int) -> None:
        self._setattr(path, size=size)

    def chmod(self, path: str, mode: int) -> None:
        self._setattr(path, mode=mode & 0o7777)

    def chown(self, path: str, uid: int = -1, gid: int = -1) -> None:
        self._setattr(path, uid=None if uid < 0 else uid, gid=None if gid < 0 else gid)

    def utime(self, path: str, ns: tuple[int, int] | None = None) -> None:
        if ns is None:
            import time
            now = time.time_ns()
            self._setattr(path, atime_ns=now, mtime_ns=now, now=True)
        else:
            self._setattr(path, atime_ns=ns[0], mtime_ns=ns[1])

    def access(self, path: str, mask: int) -> bool:
        try:
            self._at("access", path, path=self._path(path), mask=mask)
        except (PermissionError, FileNotFoundError):
            return False
        return True

    # ------------------------------------------------------------------ striping, xattrs
    def getstripe(self, path: str) -> Stripe | None:
        """A file's distribution, or a directory's default for new files (None if unset)."""
        st = self._at("getstripe", path, path=self._path(path))["stripe"]
        return Stripe(*st) if st else None

    def setstripe(self, path: str, stripe: Stripe | None) -> None:
        """Set a directory's default distribution, or that of a new, empty file."""
        self._at("setstripe", path, path=self._path(path),
                 stripe=stripe.to_wire() if stripe else None)

    def getxattr(self, path: str, name: str) -> bytes:
        return self._at("getxattr", path, path=self._path(path), name=name)["value"]

    def setxattr(self, path: str, name: str, value: bytes, flags: int = 0) -> None:
        self._at("setxattr", path, path=self._path(path), name=name, value=bytes(value),
                 flags=flags)

    def listxattr(self, path: str) -> list[str]:
        return self._at("listxattr", path, path=self._path(path))["names"]

    def removexattr(self, path: str, name: str) -> None:
        self._at("removexattr", path, path=self._path(path), name=name)

    # ------------------------------------------------------------------ whole file system
    def sync(self) -> None:
        """Everything changed through this file system so far durable at the manager (the
        creates made ahead sent first); ``EIO`` if the manager refused any of those since
        the last ``sync`` (each refused file's own calls fail too)."""
        self.meta("sync")
        refused = self.ahead.refused_since_sync() if self.ahead is not None else 0
        if refused:
            raise OSError(errno.EIO, f"{refused} files made ahead failed: their creates "
                          "or writes were refused (logged)")

    def statfs(self) -> dict:
        return self.meta("statfs")

    def iod_call(self, index: int, op: str, **fields) -> dict:
        return self.data.call(index, {"op": op, "cred": self.cred, **fields})

    def iod_stats(self) -> list[dict]:
        return [self.iod_call(i, "stats") for i in range(self.config.niods)]


def connect(config: str | os.PathLike | cfgmod.Config | None = None, *, uid: int | None = None,
            gid: int | None = None, groups: list[int] | None = None,
            ahead: bool = False) -> FileSystem:
    """Connect to the file system a config file describes (default: ``$PVFS_CONFIG``).

    ``uid``/``gid`` act as another user (the daemons trust the caller's credentials; shared-key
    authentication is SPEC §10). ``ahead``: create new files ahead of the manager where this
    client creates alone (a lease session and a thread; ``pvfs.client.ahead``) -- for
    programs that write many small files; ``fs.ahead`` stays None when the manager grants
    no leases (``[manager] lease_term = 0``).
    """
    cfg = config if isinstance(config, cfgmod.Config) else cfgmod.load(config)
    fs = FileSystem(cfg, uid, gid, groups)
    fs.meta("ping")
    if ahead:
        try:
            fs.create_ahead()
        except BaseException:
            fs.close()
            raise
    return fs
