"""The manager's walks of the paths requests name (``resolve`` and ``schema.BY_PATH``).

A part the server holds as ``server.walks``. A walk reads the store (``store.resolve``,
over ``paths.py``) and first has every directory on the way that a holder creates in ahead
send what it made there (``leases.py``), so the names it queued are found.
"""

from __future__ import annotations

import errno

from pvfs.protocol.schema import BY_PATH

from .leases import LeaseTable
from .store import Cred, MetaStore

__all__ = ["PathWalks"]

_WALK_TRIES = 8  # walks of a path between recalls of directories created in ahead on it


class PathWalks:
    """Walks of request paths over ``store``, recalling through ``leases`` the directories
    created in ahead that a walk reads."""

    def __init__(self, store: MetaStore, leases: LeaseTable) -> None:
        self.store = store
        self.leases = leases

    async def by_path(self, op: str, f: dict, cred: Cred) -> None:
        """Fill the inodes a request named by path (``schema.BY_PATH``), each walked as
        ``resolve`` walks; exactly one of the two must be given."""
        for path, ino, follow in BY_PATH[op]:
            p = f.pop(path)
            if (p is None) == (not f[ino]):
                raise OSError(errno.EINVAL, f"{op} needs its {ino}: an inode or a path")
            if p is not None:
                f[ino] = (await self.walk(p, cred, follow, f.get("lease")))["ino"]

    async def walk(self, path: str, cred: Cred, follow: bool = True,
                   actor: str | None = None) -> dict:
        """The inode ``path`` names, once every directory on the way that a holder creates
        in ahead has sent what it made there (a name may not be here yet): the walk is
        tried, those it read are recalled, and it is walked again -- a few times, then
        every such directory is recalled (a path through directories made ahead, each
        found once its parent's holder answered). ``actor``'s own are not recalled."""
        for _ in range(_WALK_TRIES):
            seen: list[int] = []
            try:
                attrs = self.store.resolve(path, cred, follow, seen)
            except OSError:
                attrs = None
            busy = self.leases.created_in(seen, actor)
            if not busy:
                return attrs if attrs is not None else self.store.resolve(path, cred, follow)
            await self.leases.reading(busy, actor)
        await self.leases.reading_all(actor)
        return self.store.resolve(path, cred, follow)
