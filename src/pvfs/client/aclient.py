"""The async (trio) client under the mount: inode-based calls, credentials per call.

Metadata calls go to the manager over trio sockets (``rpc.Channel``). Data calls run the same
C scatter/gather path as the sync API (``DataPath``) in a worker thread, so large transfers
never block the trio thread and many requests proceed at once.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Awaitable, Callable

import trio

from pvfs import config as cfgmod
from pvfs.client.buffers import nbytes
from pvfs.client.datapath import DataPath
from pvfs.client.smallwrites import Sent, by_daemon, item, send, unit_daemon
from pvfs.layout.describe import Regions
from pvfs.layout.stripe import Stripe
from pvfs.protocol.auth import key_for
from pvfs.protocol.cred import ROOT, Cred
from pvfs.protocol.rpc import Channel
from pvfs.protocol.schema import LEASE_OPS

ROOT_INO = 1
_LEASE_OPS = frozenset(LEASE_OPS)
_AHEAD_OPS = frozenset({"ahead", "delegate", "ping", "lease_register"})




class Listing(list):
    """A readdir page: (name, attrs, next_cookie) tuples; ``leased``: the inodes the manager
    leased with it (fuse/leases.py), None without."""

    leased: list[int] | None = None


class AsyncClient:
    """Inode-level access to a file system; every method takes the caller's ``cred``."""

    def __init__(self, config: cfgmod.Config, data_threads: int = 16) -> None:
        self.config = config
        self.key = key_for(config)  # None: authentication off (protocol/auth.py)
        self.mgr = Channel(config.manager.host, config.manager.port, config.connect_timeout,
                           config.request_timeout, max_idle=16, name="manager", key=self.key,
                           role="mount")
        self.data = DataPath(config, role="mount")
        self.limiter = trio.CapacityLimiter(data_threads)
        # The lease holder this client names itself as (fuse/leases.py), while its session runs.
        self.lease_name: str | None = None
        self.on_fenced: Callable[[], None] | None = None  # the lease owner's: forget them all
        # Awaited, with the request's op, before every request to the manager but the
        # creates' own: the mount's creates made ahead of the manager go first
        # (fuse/creates.py), its read-only opens answered ahead before an unlink or rename
        # (fuse/closes.py).
        self.before_meta: list[Callable[[str], Awaitable[None]]] = []

    @classmethod
    async def connect(cls, config: str | os.PathLike | cfgmod.Config | None = None) -> AsyncClient:
        cfg = config if isinstance(config, cfgmod.Config) else cfgmod.load(config)
        client = cls(cfg)
        await client.meta("ping", ROOT)
        return client

    def close(self) -> None:
        self.mgr.close()
        self.data.close()

    async def meta(self, op: str, cred: Cred = ROOT, **fields) -> dict:
        if self.before_meta and op not in _AHEAD_OPS:
            for hook in self.before_meta:
                await hook(op)
        if self.lease_name is None or op not in _LEASE_OPS:
            return await self.mgr.call({"op": op, "cred": cred.to_wire(), **fields})
        try:
            return await self.mgr.call({"op": op, "cred": cred.to_wire(), **fields,
                                        "lease": self.lease_name})
        except OSError as exc:
            # ESTALE: the manager fenced this holder (a recall went unanswered); what it
            # leased is forgotten and the request is made again as anyone's.
            if exc.errno != errno.ESTALE or self.on_fenced is None:
                raise
            self.on_fenced()
            if op == "ahead":  # made ahead under the leases it lost: refused, not applied
                raise
            return await self.mgr.call({"op": op, "cred": cred.to_wire(), **fields})

    # ------------------------------------------------------------------ name space
    async def lookup(self, parent: int, name: str, cred: Cred = ROOT,
                     missing: bool = False) -> dict:
        """``missing``: a name not there answers ``{"ino": 0}`` instead of raising ENOENT."""
        if missing:
            return await self.meta("lookup", cred, parent=parent, name=name, missing=True)
        return await self.meta("lookup", cred, parent=parent, name=name)

    async def resolve(self, path: str, cred: Cred = ROOT, follow: bool = True) -> dict:
        return await self.meta("resolve", cred, path=path, follow=follow)

    async def getattr(self, ino: int, cred: Cred = ROOT) -> dict:
        return await self.meta("getattr", cred, ino=ino)

    async def setattr(self, ino: int, cred: Cred = ROOT, *, mode: int | None = None,
                      uid: int | None = None, gid: int | None = None, size: int | None = None,
                      atime_ns: int | None = None, mtime_ns: int | None = None,
                      now: bool = False, handle: bool = False, data_sets_mtime: bool = False,
                      ) -> dict:
        """``handle``: a size change through a handle opened for writing (ftruncate).
        ``data_sets_mtime``: the caller, the file's one writer with none of its data on the
        I/O daemons yet, sets their mtime after them (:meth:`data_mtime`)."""
        return await self.meta("setattr", cred, ino=ino, mode=mode, uid=uid, gid=gid, size=size,
                               atime_ns=atime_ns, mtime_ns=mtime_ns, now=now, handle=handle,
                               data_sets_mtime=data_sets_mtime)

    async def create(self, parent: int, name: str, mode: int, cred: Cred = ROOT, *,
                     stripe: Stripe | None = None, exclusive: bool = False,
                     flags: int = 0) -> dict:
        """Create (or, without ``exclusive``, open an existing) file; with ``flags`` also
        opens it (counted in N_file; pair with ``close``)."""
        return await self.meta("create", cred, parent=parent, name=name, mode=mode,
                               stripe=stripe.to_wire() if stripe else None, exclusive=exclusive,
                               flags=flags)

    async def open(self, ino: int, flags: int, cred: Cred = ROOT) -> dict:
        return await self.meta("open", cred, ino=ino, flags=flags)

    async def close_file(self, ino: int, cred: Cred = ROOT) -> None:
        await self.meta("close", cred, ino=ino)

    async def delegate(self, directory: int, want: int, dirs: int = 0) -> dict:
        """Ask to create in ``directory`` ahead of the manager, with ``want`` numbers for
        files and ``dirs`` for directories."""
        return await self.meta("delegate", ROOT, dir=directory, want=want, dirs=dirs)

    async def ahead(self, items: list[dict]) -> list[dict]:
        """Creates and unlinks made ahead of the manager, in order; each result a reply or
        an error (``errno``)."""
        return (await self.meta("ahead", ROOT, items=items))["results"]

    async def open_files(self, inos: list[int]) -> list[int]:
        """One read-only handle of each of ``inos`` opened (at most 4096; a mount's opens
        answered ahead, fuse/closes.py), in one request; those refused."""
        return (await self.meta("opens", ROOT, inos=inos)).get("refused", [])

    async def close_files(self, inos: list[int]) -> None:
        """One handle of each of ``inos`` closed (at most 4096), in one request."""
        await self.meta("closes", ROOT, inos=inos)

    async def mkdir(self, parent: int, name: str, mode: int, cred: Cred = ROOT) -> dict:
        return await self.meta("mkdir", cred, parent=parent, name=name, mode=mode)

    async def rmdir(self, parent: int, name: str, cred: Cred = ROOT) -> None:
        await self.meta("rmdir", cred, parent=parent, name=name)

    async def unlink(self, parent: int, name: str, cred: Cred = ROOT) -> dict:
        """Remove a name; the reply may carry the directory's new attributes ("parent")."""
        return await self.meta("unlink", cred, parent=parent, name=name)

    async def rename(self, parent: int, name: str, new_parent: int, new_name: str,
                     cred: Cred = ROOT, flags: int = 0) -> None:
        await self.meta("rename", cred, parent=parent, name=name, new_parent=new_parent,
                        new_name=new_name, flags=flags)

    async def mknod(self, parent: int, name: str, mode: int, rdev: int = 0,
                    cred: Cred = ROOT) -> dict:
        """A special file: ``mode`` carries the type (S_IFIFO, S_IFSOCK, S_IFCHR, S_IFBLK)."""
        return await self.meta("mknod", cred, parent=parent, name=name, mode=mode, rdev=rdev)

    async def symlink(self, parent: int, name: str, target: str, cred: Cred = ROOT) -> dict:
        return await self.meta("symlink", cred, parent=parent, name=name, target=target)

    async def readlink(self, ino: int, cred: Cred = ROOT) -> str:
        return (await self.meta("readlink", cred, ino=ino))["target"]

    async def link(self, ino: int, new_parent: int, new_name: str, cred: Cred = ROOT) -> dict:
        return await self.meta("link", cred, ino=ino, new_parent=new_parent, new_name=new_name)

    async def readdir(self, ino: int, cred: Cred = ROOT, cookie: int = 0, limit: int = 1024,
                      attrs: bool = True) -> Listing:
        """Up to ``limit`` (name, attrs, next_cookie) from ``cookie``, "." and ".." included."""
        reply = await self.meta("readdir", cred, ino=ino, cookie=cookie, limit=limit, attrs=attrs)
        out = Listing((n, a, c) for n, a, c in reply["entries"])
        out.leased = reply.get("leased")
        return out

    async def access(self, ino: int, mask: int, cred: Cred = ROOT) -> None:
        await self.meta("access", cred, ino=ino, mask=mask)

    async def statfs(self, cred: Cred = ROOT) -> dict:
        return await self.meta("statfs", cred)

    async def getxattr(self, ino: int, name: str, cred: Cred = ROOT) -> bytes:
        return (await self.meta("getxattr", cred, ino=ino, name=name))["value"]

    async def setxattr(self, ino: int, name: str, value: bytes, cred: Cred = ROOT,
                       flags: int = 0) -> None:
        await self.meta("setxattr", cred, ino=ino, name=name, value=bytes(value), flags=flags)

    async def listxattr(self, ino: int, cred: Cred = ROOT) -> list[str]:
        return (await self.meta("listxattr", cred, ino=ino))["names"]

    async def removexattr(self, ino: int, name: str, cred: Cred = ROOT) -> None:
        await self.meta("removexattr", cred, ino=ino, name=name)

    async def getstripe(self, ino: int, cred: Cred = ROOT) -> Stripe | None:
        st = (await self.meta("getstripe", cred, ino=ino))["stripe"]
        return Stripe(*st) if st else None

    async def setstripe(self, ino: int, stripe: Stripe | None, cred: Cred = ROOT) -> dict:
        return await self.meta("setstripe", cred, ino=ino,
                               stripe=stripe.to_wire() if stripe else None)

    # ------------------------------------------------------------------ data
    async def read(self, ino: int, stripe: Stripe, offset: int, length: int) -> bytes:
        """Up to ``length`` bytes at ``offset``; short at end of file."""
        if length <= 0:
            return b""
        buf = bytearray(length)
        n = await trio.to_thread.run_sync(self._read_sync, ino, stripe, offset, buf,
                                          limiter=self.limiter)
        del buf[n:]
        return bytes(buf)

    def _read_sync(self, ino: int, stripe: Stripe, offset: int, buf: bytearray) -> int:
        result = self.data.read(ino, stripe, Regions(((offset, len(buf)),)), buf)
        if not result.needs_eof_check:
            return len(buf)
        end = self.data.size(ino, stripe, result.local_sizes)
        return max(0, min(len(buf), end - offset))

    async def write(self, ino: int, stripe: Stripe, offset: int, data,
                    mtime_ns: int | None = None) -> int:
        """``mtime_ns``: set on each stripe file written, after the bytes."""
        n = nbytes(data)
        if n == 0:
            return 0
        return await trio.to_thread.run_sync(self.data.write, ino, stripe,
                                             Regions(((offset, n),)), data, mtime_ns,
                                             limiter=self.limiter)

    async def write_files(self, writes: list[tuple[int, Stripe, int, bytes]]) -> Sent:
        """Small writes of many files, each ``(ino, stripe, offset, data)`` within one
        stripe unit, in one ``writes`` request per I/O daemon (client/smallwrites.py)."""
        queued: dict[int, list] = {}
        niods = len(self.config.iods)
        for ino, stripe, offset, data in writes:
            iod = unit_daemon(stripe, offset, len(data), niods)
            if iod is None:
                raise ValueError(f"write of inode {ino} at {offset} is not one unit's piece")
            queued.setdefault(iod, []).append(item(ino, stripe, offset, data, fresh=False))
        return await trio.to_thread.run_sync(send, self.data, by_daemon(queued),
                                             limiter=self.limiter)

    async def write_regions(self, ino: int, stripe: Stripe, regions: list[tuple[int, int]],
                            data, mtime_ns: int | None = None) -> int:
        """One request writing several regions (``data`` is their bytes concatenated)."""
        return await trio.to_thread.run_sync(self.data.write, ino, stripe, Regions(regions), data,
                                             mtime_ns, limiter=self.limiter)

    async def read_regions(self, ino: int, stripe: Stripe,
                           regions: list[tuple[int, int]]) -> list[bytes]:
        """One request per I/O daemon reading several regions; each region's bytes, in order,
        short (or empty) where it reaches past the end of file."""
        total = sum(n for _, n in regions)
        if total <= 0:
            return [b"" for _ in regions]
        buf = bytearray(total)
        end = await trio.to_thread.run_sync(self._read_regions_sync, ino, stripe, regions, buf,
                                            limiter=self.limiter)
        out: list[bytes] = []
        pos = 0
        for off, n in regions:
            out.append(bytes(buf[pos:pos + max(0, min(n, end - off))]))
            pos += n
        return out

    def _read_regions_sync(self, ino: int, stripe: Stripe, regions: list[tuple[int, int]],
                           buf: bytearray) -> int:
        """Fill ``buf``; returns the end of file, or an offset past every region when no
        daemon held less than the request reached."""
        result = self.data.read(ino, stripe, Regions(regions), buf)
        if not result.needs_eof_check:
            return max(off + n for off, n in regions)
        return self.data.size(ino, stripe, result.local_sizes)

    async def size(self, ino: int, stripe: Stripe) -> int:
        return await trio.to_thread.run_sync(self.data.size, ino, stripe, limiter=self.limiter)

    async def fsync(self, ino: int, stripe: Stripe, data_only: bool = False) -> None:
        """Data on every daemon of the file; unless ``data_only``, the metadata too."""
        await trio.to_thread.run_sync(self.data.fsync, ino, stripe, data_only,
                                      limiter=self.limiter)
        if not data_only:
            await self.meta("sync")

    async def data_mtime(self, ino: int, stripe: Stripe, size: int, mtime_ns: int) -> None:
        """Set the mtime of the stripe files that hold a file's first ``size`` bytes (the
        explicit mtime of a file written alone, after its data: fuse/delegations.py)."""
        await trio.to_thread.run_sync(self.data.data_mtime, ino, stripe, size, mtime_ns,
                                      limiter=self.limiter)

    async def iod_call(self, index: int, op: str, **fields) -> dict:
        return await trio.to_thread.run_sync(self.data.call, index, {"op": op, **fields},
                                             limiter=self.limiter)
