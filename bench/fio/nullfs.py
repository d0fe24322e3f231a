"""A file system that does no work, on pyfuse3: the ceiling of any pyfuse3 mount.

Names, attributes and (small) file contents live in this process's memory; every handler
answers at once. What a benchmark measures on it is the cost of the FUSE requests themselves
through pyfuse3 and trio -- the kernel, ``/dev/fuse``, pyfuse3's dispatch and one Python
handler per request -- with the same kernel options as a default pvfs mount (entry and
attribute timeouts of 1 s, ``default_permissions``, ``noatime``). A pvfs mount, which is a
pyfuse3 file system, cannot answer a request mix faster than this one does.

::

    python -m pvfs.bench.fio.nullfs MOUNTPOINT      # until SIGTERM/SIGINT; then unmounts

``bench/meta.py --target null=pyfuse3-null`` mounts it as a target (``bench/fio/run.py``);
``passthrough_hp:BINARY`` mounts libfuse's C example the same way (:func:`fuse_process`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator

import pyfuse3
import trio

_TIMEOUT = 1.0  # entry and attribute timeouts, as a default pvfs mount


class _Node:
    __slots__ = ("children", "data", "gid", "ino", "mode", "nlink", "times", "uid")

    def __init__(self, ino: int, mode: int, uid: int, gid: int) -> None:
        self.ino, self.mode, self.uid, self.gid = ino, mode, uid, gid
        self.nlink = 2 if stat.S_ISDIR(mode) else 1
        self.data = b""
        self.children: dict[bytes, int] | None = {} if stat.S_ISDIR(mode) else None
        now = time.time_ns()
        self.times = [now, now, now]  # atime, mtime, ctime


class NullOperations(pyfuse3.Operations):
    """Every handler answers from memory; nothing is kept after the unmount."""

    def __init__(self) -> None:
        super().__init__()
        root = _Node(pyfuse3.ROOT_INODE, stat.S_IFDIR | 0o777, 0, 0)
        self.nodes: dict[int, _Node] = {root.ino: root}
        self.next_ino = pyfuse3.ROOT_INODE + 1
        self.dirs: dict[int, list[tuple[bytes, int]]] = {}
        self.next_fh = 1

    # --------------------------------------------------------------------- helpers
    def _attr(self, n: _Node) -> pyfuse3.EntryAttributes:
        a = pyfuse3.EntryAttributes()
        a.st_ino, a.st_mode, a.st_nlink = n.ino, n.mode, n.nlink
        a.st_uid, a.st_gid, a.st_size = n.uid, n.gid, len(n.data)
        a.st_atime_ns, a.st_mtime_ns, a.st_ctime_ns = n.times
        a.st_blksize, a.st_blocks = 4096, (len(n.data) + 511) // 512
        a.entry_timeout = a.attr_timeout = _TIMEOUT
        return a

    def _node(self, ino: int) -> _Node:
        try:
            return self.nodes[ino]
        except KeyError:
            raise pyfuse3.FUSEError(errno.ENOENT) from None

    def _dir(self, ino: int) -> _Node:
        d = self._node(ino)
        if d.children is None:
            raise pyfuse3.FUSEError(errno.ENOTDIR)
        return d

    def _make(self, parent: int, name: bytes, mode: int, ctx) -> _Node:
        d = self._dir(parent)
        if name in d.children:
            raise pyfuse3.FUSEError(errno.EEXIST)
        n = _Node(self.next_ino, mode, ctx.uid, ctx.gid)
        self.next_ino += 1
        self.nodes[n.ino] = n
        d.children[name] = n.ino
        if n.children is not None:
            d.nlink += 1
        return n

    def _remove(self, parent: int, name: bytes, want_dir: bool) -> None:
        d = self._dir(parent)
        ino = d.children.get(name)
        if ino is None:
            raise pyfuse3.FUSEError(errno.ENOENT)
        n = self.nodes[ino]
        if want_dir != (n.children is not None):
            raise pyfuse3.FUSEError(errno.ENOTDIR if want_dir else errno.EISDIR)
        if want_dir and n.children:
            raise pyfuse3.FUSEError(errno.ENOTEMPTY)
        del d.children[name]
        if want_dir:
            d.nlink -= 1
        n.nlink = 0
        self.nodes.pop(ino, None)

    # --------------------------------------------------------------------- names
    async def lookup(self, parent_inode, name, ctx=None):
        d = self._dir(parent_inode)
        if name == b".":
            return self._attr(d)
        ino = d.children.get(name)
        if ino is None:
            raise pyfuse3.FUSEError(errno.ENOENT)
        return self._attr(self.nodes[ino])

    async def getattr(self, inode, ctx=None):
        return self._attr(self._node(inode))

    async def setattr(self, inode, attr, fields, fh, ctx):
        n = self._node(inode)
        if fields.update_size:
            n.data = n.data[:attr.st_size].ljust(attr.st_size, b"\0")
        if fields.update_mode:
            n.mode = (n.mode & ~0o7777) | (attr.st_mode & 0o7777)
        if fields.update_uid:
            n.uid = attr.st_uid
        if fields.update_gid:
            n.gid = attr.st_gid
        if fields.update_mtime:
            n.times[1] = attr.st_mtime_ns
        return self._attr(n)

    async def mkdir(self, parent_inode, name, mode, ctx):
        return self._attr(self._make(parent_inode, name, stat.S_IFDIR | (mode & 0o7777), ctx))

    async def create(self, parent_inode, name, mode, flags, ctx):
        n = self._make(parent_inode, name, stat.S_IFREG | (mode & 0o7777), ctx)
        return pyfuse3.FileInfo(fh=n.ino), self._attr(n)

    async def unlink(self, parent_inode, name, ctx):
        self._remove(parent_inode, name, want_dir=False)

    async def rmdir(self, parent_inode, name, ctx):
        self._remove(parent_inode, name, want_dir=True)

    async def opendir(self, inode, ctx):
        d = self._dir(inode)
        fh = self.next_fh
        self.next_fh += 1
        self.dirs[fh] = sorted(d.children.items())
        return fh

    async def readdir(self, fh, start_id, token):
        entries = self.dirs.get(fh, [])
        for i in range(start_id, len(entries)):
            name, ino = entries[i]
            n = self.nodes.get(ino)
            if n is not None and not pyfuse3.readdir_reply(token, name, self._attr(n), i + 1):
                return

    async def releasedir(self, fh):
        self.dirs.pop(fh, None)

    async def statfs(self, ctx):
        s = pyfuse3.StatvfsData()
        s.f_bsize = s.f_frsize = 4096
        s.f_blocks = s.f_bfree = s.f_bavail = 1 << 24
        s.f_files = s.f_ffree = s.f_favail = 1 << 24
        s.f_namemax = 255
        return s

    # --------------------------------------------------------------------- files
    async def open(self, inode, flags, ctx):
        n = self._node(inode)
        if flags & os.O_TRUNC:
            n.data = b""
        return pyfuse3.FileInfo(fh=inode)

    async def read(self, fh, off, size):
        return self._node(fh).data[off:off + size]

    async def write(self, fh, off, buf):
        n = self._node(fh)
        d = n.data
        if off > len(d):
            d = d.ljust(off, b"\0")
        n.data = d[:off] + buf + d[off + len(buf):]
        return len(buf)

    async def flush(self, fh):
        pass

    async def fsync(self, fh, datasync):
        pass

    async def release(self, fh):
        pass


async def _serve() -> None:
    """pyfuse3's loop with a default pvfs mount's task bounds, until SIGTERM or SIGINT."""
    async with trio.open_nursery() as nursery:
        async def stop_on_signal() -> None:
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for _ in signals:
                    pyfuse3.terminate()
                    return

        nursery.start_soon(stop_on_signal)
        await pyfuse3.main(min_tasks=4, max_tasks=64)
        nursery.cancel_scope.cancel()


@contextlib.contextmanager
def fuse_process(argv: list[str], mountpoint: str, timeout: float = 20.0) -> Iterator[str]:
    """Run a FUSE file system's process (``argv``, which mounts ``mountpoint`` itself) until
    the block ends; yield once it is mounted; stop it by its PID and unmount."""
    os.makedirs(mountpoint, exist_ok=True)
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + timeout
        while not os.path.ismount(mountpoint):
            if proc.poll() is not None:
                raise RuntimeError(f"{argv[0]} exited ({proc.returncode}) before mounting")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{argv[0]} did not mount {mountpoint} in {timeout:.0f} s")
            time.sleep(0.05)
        yield mountpoint
    finally:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if os.path.ismount(mountpoint):
            subprocess.run(["fusermount3", "-u", "-z", mountpoint], check=False)


@contextlib.contextmanager
def null_mount(mountpoint: str) -> Iterator[str]:
    """This file system mounted at ``mountpoint`` for the block."""
    with fuse_process([sys.executable, "-m", "pvfs.bench.fio.nullfs", mountpoint],
                      mountpoint) as mnt:
        yield mnt


@contextlib.contextmanager
def passthrough_hp_mount(binary: str, root: str, mountpoint: str) -> Iterator[str]:
    """libfuse's ``example/passthrough_hp`` (built from source outside the repo) over the
    local directory ``root``: a C FUSE file system, the ceiling of any FUSE design here.
    ``--nopassthrough`` (libfuse 3.17+): data through user space, as in issue 30's ceiling;
    without it a kernel with FUSE passthrough (6.9+) serves reads and writes itself."""
    os.makedirs(root, exist_ok=True)
    with fuse_process([binary, "--nopassthrough", "--foreground", root, mountpoint],
                      mountpoint) as mnt:
        yield mnt


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m pvfs.bench.fio.nullfs MOUNTPOINT", file=sys.stderr)
        return 2
    options = {"fsname=pyfuse3-null", "subtype=null", "noatime", "default_permissions",
               "allow_other"}
    pyfuse3.init(NullOperations(), args[0], options)
    try:
        trio.run(_serve)
    finally:
        pyfuse3.close(unmount=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
