"""Who asks: the one credential type of clients, the mount and the manager.

Every request header carries ``cred = [uid, gid, [groups]]`` (``schema.MAX_GROUPS`` groups at
most on the wire). The native API and the mount build a :class:`Cred` for the caller and send
``to_wire()``; the manager checks the header (``schema.py``) and rebuilds a :class:`Cred` for
its permission rules (``daemons/mgr/perms.py``).
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass

__all__ = ["MAX_GROUPS", "MAX_ID", "ROOT", "WIRE_GROUPS", "Cred"]

MAX_ID = (1 << 32) - 1
#: Supplementary groups a credential may hold (Linux's NGROUPS_MAX).
MAX_GROUPS = 65536
#: Supplementary groups sent on the wire; more are cut (the header stays small).
WIRE_GROUPS = 64


def _is_id(v: object) -> bool:
    return type(v) is int and 0 <= v <= MAX_ID


@dataclass(frozen=True, slots=True)
class Cred:
    """uid, primary gid and supplementary groups. ``uid == 0`` is root.

    Raises:
        OSError: EINVAL for an id outside 0..2**32-1 or too many groups.
    """

    uid: int
    gid: int
    groups: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not _is_id(self.uid) or not _is_id(self.gid):
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL), "credential uid/gid")
        groups = self.groups
        if not isinstance(groups, (tuple, list, frozenset, set)) or len(groups) > MAX_GROUPS:
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL), "credential groups")
        if not all(_is_id(g) for g in groups):
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL), "credential groups")
        # lists (from the wire, from os.getgroups) become tuples so a Cred stays hashable
        object.__setattr__(self, "groups", tuple(groups))

    @property
    def is_root(self) -> bool:
        return self.uid == 0

    def in_group(self, gid: int) -> bool:
        return gid == self.gid or gid in self.groups

    def to_wire(self) -> list:
        """The header's ``cred`` field: ``[uid, gid, [groups]]``, groups cut at WIRE_GROUPS."""
        return [self.uid, self.gid, list(self.groups[:WIRE_GROUPS])]


ROOT = Cred(0, 0, ())

