"""Directory attributes the mount learned from its own changes in a directory.

After every create, mkdir or unlink in a directory the kernel drops the directory's cached
attributes (its mtime and ctime moved), and with ``default_permissions`` it needs them again
for the permission check of the next create or unlink there: one manager round trip per
file, a quarter of a create's requests. The manager's reply to those changes carries the
directory's new attributes (``"parent"``); the mount keeps them for ``attr_timeout`` seconds
— the time the kernel itself would have kept them — and answers the kernel's ``getattr``
from them. Every other change this mount makes to a directory (rename, rmdir, link,
symlink, special files, setattr, xattrs) forgets what it held for that directory, so its
next ``getattr`` goes to the manager; a change by another node is seen after at most
``attr_timeout``, as for every attribute the kernel caches.
"""

from __future__ import annotations

import time

__all__ = ["DirAttrs"]


class DirAttrs:
    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self._held: dict[int, tuple[float, dict]] = {}
        self.hits = 0

    def learn(self, ino: int, reply: dict | None) -> None:
        """Take the directory's attributes from a change's reply (or forget them)."""
        attrs = reply.pop("parent", None) if reply else None
        if attrs is None or self.ttl <= 0:
            self._held.pop(ino, None)
            return
        self._held[ino] = (time.monotonic() + self.ttl, attrs)

    def forget(self, *inos: int) -> None:
        for ino in inos:
            self._held.pop(ino, None)

    def forget_all(self) -> None:
        self._held.clear()

    def get(self, ino: int) -> tuple[dict, float] | None:
        """(attributes, seconds they stay valid) or None."""
        held = self._held.get(ino)
        if held is None:
            return None
        left = held[0] - time.monotonic()
        if left <= 0:
            del self._held[ino]
            return None
        self.hits += 1
        return dict(held[1]), left
