"""POSIX rules of attribute changes that the manager and a leasing mount both apply.

The manager checks and applies every change (``daemons/mgr/perms.py``, which validates the
request first); a mount that changes the attributes of a file it created ahead of the
manager and still holds alone (``fuse/creates.py``) answers the program at once with the
same result, so both take the rules from here. Pure functions over plain values; every
refusal is an ``OSError`` with the errno Linux would give.
"""

from __future__ import annotations

import errno
import os
import stat

from .cred import Cred

__all__ = ["check_chown", "check_utimes", "chmod_bits", "fail", "kill_suid", "need",
           "need_owner", "only_kills_suid", "permitted", "setattr_values"]

W_OK, X_OK = os.W_OK, os.X_OK


def fail(code: int, what: object = None) -> OSError:
    """The OSError for ``code``; ``what`` names the object (it becomes ``filename``)."""
    if what is None:
        return OSError(code, os.strerror(code))
    return OSError(code, os.strerror(code), str(what))


def permitted(mode: int, uid: int, gid: int, mask: int, cred: Cred) -> bool:
    """Would ``cred`` get ``mask`` (R_OK|W_OK|X_OK) on an object with these bits?"""
    if cred.uid == 0:
        # root bypasses r/w; x only if someone may execute (or it is a directory)
        return not (mask & X_OK) or stat.S_ISDIR(mode) or bool(mode & 0o111)
    if cred.uid == uid:
        bits = (mode >> 6) & 7
    elif cred.in_group(gid):
        bits = (mode >> 3) & 7
    else:
        bits = mode & 7
    return bits & mask == mask


def need(mode: int, uid: int, gid: int, mask: int, cred: Cred, what: object = None) -> None:
    if not permitted(mode, uid, gid, mask, cred):
        raise fail(errno.EACCES, what)


def need_owner(uid: int, cred: Cred, what: object = None) -> None:
    """Operations reserved to the owner (chmod, explicit utimens, layout): EPERM otherwise."""
    if cred.uid != 0 and cred.uid != uid:
        raise fail(errno.EPERM, what)


def chmod_bits(new_perm: int, file_gid: int, cred: Cred) -> int:
    """Permission bits after chmod: a non-root caller outside the file's group loses
    setgid, so nobody can make a setgid binary for a group they are not in."""
    perm = new_perm & 0o7777
    if cred.uid != 0 and not cred.in_group(file_gid):
        perm &= ~stat.S_ISGID
    return perm


def check_chown(cur_uid: int, cur_gid: int, uid: int | None, gid: int | None,
                cred: Cred) -> None:
    """Root may give anything away; an owner may only move the file to one of its groups."""
    if cred.uid == 0:
        return
    if uid is not None and uid != cur_uid:
        raise fail(errno.EPERM, "chown")
    if gid is not None and gid != cur_gid:
        if cred.uid != cur_uid or not cred.in_group(gid):
            raise fail(errno.EPERM, "chgrp")
    elif uid is not None and cred.uid != cur_uid:
        # chown to the same owner is still only allowed to that owner
        raise fail(errno.EPERM, "chown")


def kill_suid(mode: int) -> int:
    """Mode after a change of owner or contents: setuid goes; setgid goes when it means
    "run as group" (group-exec set), not when it marks mandatory locking."""
    if stat.S_ISDIR(mode):
        return mode
    mode &= ~stat.S_ISUID
    if mode & stat.S_IXGRP:
        mode &= ~stat.S_ISGID
    return mode


def only_kills_suid(old_mode: int, new_perm: int) -> bool:
    """Is ``new_perm`` the old permission bits minus some of S_ISUID/S_ISGID (at least one
    actually set)? That is the mode change the kernel sends for a non-owner's write or
    truncate of a setuid/setgid file (FUSE without handle_killpriv: ``file_remove_privs``
    becomes a SETATTR of the mode in the writer's name)."""
    old = old_mode & 0o7777
    killed = old & ~new_perm
    return (new_perm & ~old) == 0 and killed != 0 and killed & ~(stat.S_ISUID | stat.S_ISGID) == 0


def check_utimes(mode: int, uid: int, gid: int, only_now: bool, cred: Cred) -> None:
    """utimensat: explicit times need ownership (EPERM); "now" also works with write
    permission (EACCES), which is what ``touch`` on a shared file relies on."""
    if cred.uid == 0 or cred.uid == uid:
        return
    if not only_now:
        raise fail(errno.EPERM, "utimens")
    need(mode, uid, gid, W_OK, cred, "utimens")


def setattr_values(cur: tuple[int, int, int, int, int], cred: Cred, stamp: int, *,
                   perm: int | None, uid: int | None, gid: int | None,
                   atime_ns: int | None, mtime_ns: int | None, size: int | None, now: bool,
                   handle: bool = False, what: object = None) -> tuple[int, int, int, int, int]:
    """The (mode, uid, gid, atime, mtime) after a setattr of an object whose are ``cur``
    (values already validated; ``uid``/``gid`` None: unchanged), or the refusal.

    ``handle`` says the size change comes through a handle the caller opened for writing
    (ftruncate): access was checked at open, so W_OK is not asked again -- a file created
    ``O_CREAT|O_RDWR`` with mode 0 can be ftruncated (POSIX). It is honoured for ``size``
    and the kill-suid that comes with it only. A non-owner may change the mode only to
    clear S_ISUID/S_ISGID, and only with write permission (or a writable handle): that is
    the kernel's kill-suid on write."""
    mode0, uid0, gid0, atime, mtime = cur
    fmode, fuid, fgid = mode0, uid0, gid0
    if uid is not None or gid is not None:
        check_chown(uid0, gid0, uid, gid, cred)
        fuid = uid0 if uid is None else uid
        fgid = gid0 if gid is None else gid
        fmode = kill_suid(fmode)
    if perm is not None:
        if cred.is_root or cred.uid == uid0 or not only_kills_suid(fmode, perm):
            need_owner(uid0, cred, what)
            fmode = stat.S_IFMT(fmode) | chmod_bits(perm, fgid, cred)
        else:
            if not handle:  # the kill-suid that comes with an ftruncate
                need(mode0, uid0, gid0, W_OK, cred, what)
            fmode = stat.S_IFMT(fmode) | perm
    if size is not None:
        if not handle:
            need(mode0, uid0, gid0, W_OK, cred, what)
        mtime = stamp
        if not cred.is_root:
            fmode = kill_suid(fmode)
    if now or atime_ns is not None or mtime_ns is not None:
        check_utimes(mode0, uid0, gid0, atime_ns is None and mtime_ns is None, cred)
        atime = atime_ns if atime_ns is not None else (stamp if now else atime)
        mtime = mtime_ns if mtime_ns is not None else (stamp if now else mtime)
    return fmode, fuid, fgid, atime, mtime
