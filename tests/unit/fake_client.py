"""An in-memory stand-in for ``pvfs.client.aclient.AsyncClient``, for handler-level tests of
the mount (S3QL's tier: call ``fuse.operations.Operations`` handlers without a kernel).

It keeps one flat directory of regular files with POSIX-ish attributes, file bytes and
xattrs, counts every call by name, and can be told to fail the next call of a name with an
exception (``fail_next``) or to change a file "from another node" (``touch_elsewhere``).
"""

from __future__ import annotations

import errno
import os
import stat
import time
from collections import Counter
from dataclasses import dataclass, field

from pvfs.config import parse
from pvfs.layout.stripe import Stripe
from pvfs.protocol.cred import ROOT, Cred

ROOT_INO = 1


@dataclass
class _Node:
    ino: int
    mode: int
    uid: int = 0
    gid: int = 0
    data: bytearray = field(default_factory=bytearray)
    mtime_ns: int = field(default_factory=time.time_ns)
    atime_ns: int = field(default_factory=time.time_ns)
    ctime_ns: int = field(default_factory=time.time_ns)
    xattrs: dict[str, bytes] = field(default_factory=dict)


def fake_config():
    """A two-daemon config that names no real daemon (nothing here connects)."""
    return parse({"manager": {"address": "127.0.0.1:1", "data_dir": "/nonexistent/mgr"},
                  "iod": [{"address": "127.0.0.1:2", "data_dir": "/nonexistent/i0"},
                          {"address": "127.0.0.1:3", "data_dir": "/nonexistent/i1"}],
                  "stripe": {"pcount": 2, "ssize": 4096}})


class FakeClient:
    """The name space and data of one small file system, in memory."""

    def __init__(self) -> None:
        self.config = fake_config()
        self.key = None
        self.stripe = Stripe(0, 2, 4096)
        self.nodes: dict[int, _Node] = {ROOT_INO: _Node(ROOT_INO, stat.S_IFDIR | 0o755)}
        self.names: dict[str, int] = {}
        self.calls: Counter[str] = Counter()
        self.setattr_calls: list[dict] = []
        self._fail: dict[str, BaseException] = {}
        self._next = ROOT_INO + 1
        self.marks_security = False   # attrs say whether security.* names exist (secx)
        self.before_meta: list = []   # as AsyncClient's (the mount adds its hooks)

    # ------------------------------------------------------------------ test controls
    def fail_next(self, name: str, exc: BaseException) -> None:
        """The next call of method ``name`` raises ``exc``."""
        self._fail[name] = exc

    def touch_elsewhere(self, ino: int, data: bytes) -> None:
        """Another node rewrote the file: new bytes, a later mtime."""
        n = self.nodes[ino]
        n.data[:] = data
        n.mtime_ns += 1_000_000_000

    def _call(self, name: str) -> None:
        self.calls[name] += 1
        exc = self._fail.pop(name, None)
        if exc is not None:
            raise exc

    def _node(self, ino: int) -> _Node:
        try:
            return self.nodes[ino]
        except KeyError:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT)) from None

    def _attrs(self, n: _Node) -> dict:
        is_dir = stat.S_ISDIR(n.mode)
        return {"ino": n.ino, "type": "dir" if is_dir else "file", "mode": n.mode, "nlink": 1,
                "uid": n.uid, "gid": n.gid, "size": 4096 if is_dir else len(n.data),
                "atime_ns": n.atime_ns, "mtime_ns": n.mtime_ns, "ctime_ns": n.ctime_ns,
                "stripe": None if is_dir else [self.stripe.base, self.stripe.pcount,
                                               self.stripe.ssize],
                "rdev": 0, "blocks": (len(n.data) + 511) // 512} | (
                    {"secx": any(k.startswith("security.") for k in n.xattrs)}
                    if self.marks_security else {})

    # ------------------------------------------------------------------ metadata
    async def lookup(self, parent: int, name: str, cred: Cred = ROOT) -> dict:
        self._call("lookup")
        if name not in self.names:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), name)
        return self._attrs(self.nodes[self.names[name]])

    async def getattr(self, ino: int, cred: Cred = ROOT) -> dict:
        self._call("getattr")
        return self._attrs(self._node(ino))

    async def access(self, ino: int, mask: int, cred: Cred = ROOT) -> None:
        self._call("access")
        n = self._node(ino)
        if cred.uid != 0 and cred.uid != n.uid and mask & os.W_OK and not n.mode & 0o002:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))

    async def setattr(self, ino: int, cred: Cred = ROOT, **kw) -> dict:
        self._call("setattr")
        self.setattr_calls.append(kw)
        n = self._node(ino)
        if "mode" in kw:
            n.mode = stat.S_IFMT(n.mode) | kw["mode"]
        if "size" in kw:
            size = kw["size"]
            del n.data[size:]
            n.data.extend(bytes(size - len(n.data)))
            n.mtime_ns = time.time_ns()
        if kw.get("now"):
            n.atime_ns = n.mtime_ns = time.time_ns()
        n.atime_ns = kw.get("atime_ns", n.atime_ns)
        n.mtime_ns = kw.get("mtime_ns", n.mtime_ns)
        return self._attrs(n)

    async def create(self, parent: int, name: str, mode: int, cred: Cred = ROOT, *,
                     exclusive: bool = False, flags: int = 0) -> dict:
        self._call("create")
        if name in self.names:
            if exclusive:
                raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), name)
            return {**self._attrs(self.nodes[self.names[name]]), "created": False}
        n = _Node(self._next, stat.S_IFREG | mode, cred.uid, cred.gid)
        self._next += 1
        self.nodes[n.ino] = n
        self.names[name] = n.ino
        return {**self._attrs(n), "created": True}

    async def open(self, ino: int, flags: int, cred: Cred = ROOT) -> dict:
        self._call("open")
        return self._attrs(self._node(ino))

    async def close_file(self, ino: int, cred: Cred = ROOT) -> None:
        self._call("close_file")

    async def getxattr(self, ino: int, name: str, cred: Cred = ROOT) -> bytes:
        self._call("getxattr")
        try:
            return self._node(ino).xattrs[name]
        except KeyError:
            raise OSError(errno.ENODATA, os.strerror(errno.ENODATA), name) from None

    async def setxattr(self, ino: int, name: str, value: bytes, cred: Cred = ROOT,
                       flags: int = 0) -> None:
        self._call("setxattr")
        self._node(ino).xattrs[name] = bytes(value)

    async def removexattr(self, ino: int, name: str, cred: Cred = ROOT) -> None:
        self._call("removexattr")
        if self._node(ino).xattrs.pop(name, None) is None:
            raise OSError(errno.ENODATA, os.strerror(errno.ENODATA), name)

    async def listxattr(self, ino: int, cred: Cred = ROOT) -> list[str]:
        self._call("listxattr")
        return sorted(self._node(ino).xattrs)

    # ------------------------------------------------------------------ data
    async def read(self, ino: int, stripe: Stripe, offset: int, length: int) -> bytes:
        self._call("read")
        return bytes(self._node(ino).data[offset:offset + length])

    async def write(self, ino: int, stripe: Stripe, offset: int, data,
                    mtime_ns: int | None = None) -> int:
        self._call("write")
        buf = self._node(ino).data
        data = bytes(data)
        if len(buf) < offset:
            buf.extend(bytes(offset - len(buf)))
        buf[offset:offset + len(data)] = data
        self.nodes[ino].mtime_ns = time.time_ns() if mtime_ns is None else mtime_ns
        return len(data)

    async def read_regions(self, ino: int, stripe: Stripe,
                           regions: list[tuple[int, int]]) -> list[bytes]:
        self._call("read_regions")
        data = self._node(ino).data
        return [bytes(data[o:o + n]) for o, n in regions]

    async def write_regions(self, ino: int, stripe: Stripe, regions: list[tuple[int, int]],
                            data, mtime_ns: int | None = None) -> None:
        self._call("write_regions")
        mv = memoryview(bytes(data))
        pos = 0
        for o, n in regions:
            await self.write(ino, stripe, o, mv[pos:pos + n], mtime_ns)
            pos += n

    async def fsync(self, ino: int, stripe: Stripe, data_only: bool = False) -> None:
        self._call("fsync")
