"""Directory listings of the mount (``readdir``): pages of the manager's, or, for a directory
the mount leases complete, the names it knows (a part of the mount, ``ops.listings``).

With leases a listing also teaches: its leased names and attributes are kept, and one read
from the start to the end with every page leased and no recall meanwhile makes the
directory *complete* (leases.py), so that later listings, lookups of missing names and
creates there need not ask the manager.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from typing import Any

from pyfuse3 import EntryAttributes

from pvfs.client.aclient import AsyncClient
from pvfs.protocol.cred import Cred

from .guard import errno_of
from .handles import HandleTable
from .kernelview import KernelView
from .leases import MISSING, LeaseCache
from .xattrs import ProbedCache

__all__ = ["Listings"]


class Listings:
    """The listings of open directory handles.

    Args:
        client: the manager (``readdir``, and ``lookup``/``getattr`` of a name a recall
            took mid-listing).
        table: the open handles (a directory handle's inode and credentials).
        leases: what the mount leases, or None.
        view: the kernel's side (``readdir_reply``, entries without a size).
        probed: the inodes' ``security.*`` knowledge, learned from each entry.
        named: the kernel's entry for a name in a directory (``Operations._entry_named``).
        tick: a request's lease tick (``Operations._tick``).
    """

    def __init__(self, *, client: AsyncClient, table: HandleTable, leases: LeaseCache | None,
                 view: KernelView, probed: ProbedCache,
                 named: Callable[[int, str, dict], EntryAttributes],
                 tick: Callable[..., int]) -> None:
        self.client, self.table, self.leases, self.view = client, table, leases, view
        self.probed, self.named, self.tick = probed, named, tick
        self.started: dict[int, tuple[int, bool]] = {}  # fh -> (tick, every page leased)
        self.here: dict[int, list[tuple[str, int]]] = {}  # fh -> a listing's names here

    async def readdir(self, fh: int, start_id: int, token: Any) -> None:
        """One ``readdir`` request: entries from ``start_id`` until the kernel's buffer is
        full or the directory ends."""
        h = self.table.get(fh)
        cookie = start_id
        leases = self.leases
        if leases is not None and start_id == 0:
            self.started[fh] = (leases.tick(), True)
            here = leases.listing(h.ino)  # (a rewind lists afresh, here or at the manager)
            if here is None:
                self.here.pop(fh, None)
            else:
                self.here[fh] = here
        if fh in self.here:
            return await self._here(fh, h.ino, h.cred, start_id, token)
        while True:
            gen = self.probed.gen
            t = self.tick()
            try:
                entries = await self.client.readdir(h.ino, h.cred, cookie=cookie, limit=256)
                sized = True
            except OSError as exc:
                if errno_of(exc) not in (errno.EIO, errno.ETIMEDOUT):
                    raise
                # A daemon holding some file's size is unreachable: the names still list
                # (SPEC §10: the rest keeps serving); a stat of such a file fails on its own.
                entries = await self.client.readdir(h.ino, h.cred, cookie=cookie, limit=256,
                                                    attrs=False)
                sized = False
            if leases is not None:
                self._learn(fh, h.ino, entries, t, sized)
            if not entries:
                return
            for name, a, nxt in entries:
                self.probed.learn(a, gen)
                e = self.named(h.ino, name, a) if sized else self.view.unsized_entry(a)
                if not self.view.kernel.readdir_reply(token, os.fsencode(name), e, nxt):
                    return
                cookie = nxt

    async def _here(self, fh: int, ino: int, cred: Cred, start: int, token: Any) -> None:
        """A listing of a directory this mount leases complete (``leases.listing``), its
        cookies positions in the names as they were at its start. A name removed since is
        left out (POSIX leaves it open), and one the lease no longer covers (a recall) is
        asked of the manager, so the kernel never links a name that is gone."""
        names = self.here[fh]
        gen = self.probed.gen
        for pos in range(start, len(names)):
            name, child = names[pos]
            a = self.leases.current(ino, name, child)
            if a is MISSING:
                continue
            if a is None:
                try:
                    if name in (".", ".."):
                        a = await self.client.getattr(child, cred)
                    else:
                        a = await self.client.lookup(ino, name, cred)
                except FileNotFoundError:
                    continue
            self.probed.learn(a, gen)
            if not self.view.kernel.readdir_reply(token, os.fsencode(name),
                                                  self.named(ino, name, a), pos + 1):
                return

    def _learn(self, fh: int, ino: int, entries: list, t: int, sized: bool) -> None:
        """With leases: keep a readdir page's leased names and attributes; a listing from
        the start whose every page came leased, ending with no recall, makes the directory
        complete (leases.py)."""
        leased = getattr(entries, "leased", None) if sized else None
        kept = self.leases.learn_listing(ino, entries, leased, t)
        since, whole = self.started.get(fh, (0, False))
        if not kept:
            self.started[fh] = (since, False)
        elif not entries and whole and since:
            self.leases.listed(ino, since)

    def closed(self, fh: int) -> None:
        """``releasedir``: the handle's listing is over."""
        self.started.pop(fh, None)
        self.here.pop(fh, None)
