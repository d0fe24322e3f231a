"""What the handlers get from a C session (``-o frontend=c``) in place of pyfuse3's objects:
the fields a setattr changes, and the kernel's notifications and readdir replies
(``kernel.Kernel``) -- both over ``pvfs._fusefront``'s session, for ``cfront.CFront``."""

from __future__ import annotations

import errno
from typing import Any

__all__ = ["CKernel", "SetattrFields"]


class SetattrFields:
    """Which attributes a setattr changes (pyfuse3's ``SetattrFields`` cannot be made from
    Python; the handlers read only these names)."""

    __slots__ = ("update_atime", "update_ctime", "update_gid", "update_mode", "update_mtime",
                 "update_size", "update_uid")

    def __init__(self, bits: int, ff: Any) -> None:
        self.update_mode = bool(bits & ff.SET_MODE)
        self.update_uid = bool(bits & ff.SET_UID)
        self.update_gid = bool(bits & ff.SET_GID)
        self.update_size = bool(bits & ff.SET_SIZE)
        self.update_atime = bool(bits & ff.SET_ATIME)
        self.update_mtime = bool(bits & ff.SET_MTIME)
        self.update_ctime = bool(bits & ff.SET_CTIME)


class CKernel:
    """The notifications and readdir replies of one C session (``kernel.Kernel``)."""

    def __init__(self, session: Any, ff: Any) -> None:
        self.readdir_reply = ff.readdir_reply
        self._session = session

    # A notification after the session closed (the write-back at unmount gives leases up)
    # finds no kernel to tell: ENOTCONN, as the notification of an ended session.
    def invalidate_inode(self, ino: int, attr_only: bool = False) -> None:
        try:
            self._session.invalidate_inode(ino, attr_only)
        except ValueError as exc:
            raise OSError(errno.ENOTCONN, f"invalidate_inode: {exc}") from None

    def invalidate_entry(self, parent: int, name: bytes) -> None:
        try:
            self._session.invalidate_entry(parent, name)
        except ValueError as exc:
            raise OSError(errno.ENOTCONN, f"invalidate_entry: {exc}") from None

    def stats(self) -> dict:
        return {"name": "c", **self._session.stats()}
