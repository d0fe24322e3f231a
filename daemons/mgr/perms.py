"""POSIX rules the manager enforces: credentials, mode-bit checks, ownership changes, names,
applied to the inode record of ``inode.py`` (path resolution is ``paths.py``).

Pure functions over plain values so the store (and tests) can call them without a
database. Every refusal is an ``OSError`` with the errno Linux would give for the same
request, raised where the rule is found (S3QL style).
"""

from __future__ import annotations

import errno
import os
import stat

from pvfs.layout.stripe import Stripe
from pvfs.protocol.attrrules import fail, need, need_owner, setattr_values
from pvfs.protocol.cred import MAX_ID, Cred

from .inode import SPECIAL, Inode

R_OK, W_OK, X_OK = os.R_OK, os.W_OK, os.X_OK
NAME_MAX = 255
PATH_MAX = 4096
MAX_INO = (1 << 63) - 1
MAX_SIZE = (1 << 63) - 1
XATTR_SIZE_MAX = 65536
XATTR_NAMESPACES = ("user.", "trusted.", "security.", "system.")
MAX_RDEV = (1 << 32) - 1  # FUSE carries a 32-bit (new_encode_dev) device number




def check_cred(cred: object) -> Cred:
    if not isinstance(cred, Cred):
        raise fail(errno.EINVAL, "cred must be a Cred")
    return cred








def sticky_allows(dir_mode: int, dir_uid: int, victim_uid: int, cred: Cred) -> bool:
    """In a sticky directory only root, the directory's owner or the entry's owner may
    remove or rename an entry (``/tmp`` rule)."""
    if not dir_mode & stat.S_ISVTX or cred.uid == 0:
        return True
    return cred.uid == dir_uid or cred.uid == victim_uid


def check_sticky(d: Inode, victim: Inode, cred: Cred) -> None:
    if not sticky_allows(d.mode, d.uid, victim.uid, cred):
        raise fail(errno.EPERM, f"sticky directory {d.ino}")












def check_name(name: object, *, creating: bool = False) -> str:
    """One path component: 1..255 bytes of UTF-8, no '/' or NUL; '.'/'..' may be looked up
    but never created or removed by name."""
    if type(name) is not str or not name:
        raise fail(errno.EINVAL, "name")
    try:
        raw = name.encode("utf-8")
    except UnicodeEncodeError:
        raise fail(errno.EINVAL, "name is not UTF-8") from None
    if len(raw) > NAME_MAX:
        raise fail(errno.ENAMETOOLONG, name[:32] + "...")
    if "/" in name or "\0" in name:
        raise fail(errno.EINVAL, name)
    if creating and name in (".", ".."):
        raise fail(errno.EINVAL, name)
    return name


def check_path(path: object) -> str:
    """An absolute path of at most PATH_MAX bytes without NULs."""
    if type(path) is not str or not path.startswith("/") or "\0" in path:
        raise fail(errno.EINVAL, "path must be absolute")
    try:
        size = len(path.encode("utf-8"))
    except UnicodeEncodeError:
        raise fail(errno.EINVAL, "path is not UTF-8") from None
    if size >= PATH_MAX:
        raise fail(errno.ENAMETOOLONG, path[:32] + "...")
    return path


def check_int(v: object, lo: int, hi: int, what: str) -> int:
    if type(v) is not int or not lo <= v <= hi:
        raise fail(errno.EINVAL, what)
    return v


def check_ino(v: object) -> int:
    return check_int(v, 1, MAX_INO, "inode number")


def check_mode(v: object) -> int:
    """Permission bits of a mode argument (type bits, as FUSE sends them, are ignored)."""
    return check_int(v, 0, 0o177777, "mode") & 0o7777


def check_special(mode: object, rdev: object, cred: Cred) -> tuple[int, int]:
    """mknod(2) of a special file: (file type, rdev). Regular files are made by ``create``
    (they need stripe files); devices need root (CAP_MKNOD), like Linux after the parent
    checks; rdev only means something for devices."""
    m = check_int(mode, 0, 0o177777, "mode")
    ftype = stat.S_IFMT(m)
    if ftype not in SPECIAL:
        raise fail(errno.EPERM if ftype == stat.S_IFDIR else errno.EINVAL, "mknod type")
    dev = check_int(rdev, 0, MAX_RDEV, "rdev")
    if ftype in (stat.S_IFCHR, stat.S_IFBLK):
        if not cred.is_root:
            raise fail(errno.EPERM, "device node")
    else:
        dev = 0
    return ftype, dev


def check_target(target: object) -> str:
    """A symlink target: 1..4095 bytes of UTF-8 without NUL."""
    if type(target) is not str or not target or "\0" in target:
        raise fail(errno.EINVAL, "symlink target")
    try:
        size = len(target.encode("utf-8"))
    except UnicodeEncodeError:
        raise fail(errno.EINVAL, "symlink target is not UTF-8") from None
    if size >= PATH_MAX:
        raise fail(errno.ENAMETOOLONG, "symlink target")
    return target


def need_inode(r: Inode, mask: int, cred: Cred) -> None:
    need(r.mode, r.uid, r.gid, mask, cred, r.what)


def setattr_rules(r: Inode, cred: Cred, stamp: int, *, mode: int | None, uid: int | None,
                  gid: int | None, atime_ns: int | None, mtime_ns: int | None,
                  size: int | None, now: bool,
                  handle: bool = False) -> tuple[int, int, int, int, int]:
    """Validate a setattr and apply the POSIX rules (``pvfs.protocol.attrrules``, which a
    leasing mount applies too): the new (mode, uid, gid, atime, mtime). ``uid``/``gid`` of
    -1 mean "unchanged", as in chown(2)."""
    perm = None if mode is None else check_mode(mode)
    uid = None if uid is None or uid == -1 else check_int(uid, 0, MAX_ID, "uid")
    gid = None if gid is None or gid == -1 else check_int(gid, 0, MAX_ID, "gid")
    for t in (atime_ns, mtime_ns):
        if t is not None:
            check_int(t, -(1 << 63), (1 << 63) - 1, "time")
    if size is not None:
        check_int(size, 0, MAX_SIZE, "size")
        regular(r)
    if type(now) is not bool or type(handle) is not bool:
        raise fail(errno.EINVAL, "now/handle")
    return setattr_values((r.mode, r.uid, r.gid, r.atime, r.mtime), cred, stamp, perm=perm,
                          uid=uid, gid=gid, atime_ns=atime_ns, mtime_ns=mtime_ns, size=size,
                          now=now, handle=handle, what=r.what)


def open_mask(r: Inode, flags: object) -> int:
    """The access an open(2) with ``flags`` needs (O_TRUNC needs write too)."""
    flags = check_int(flags, 0, (1 << 32) - 1, "open flags")
    if r.is_link:
        raise fail(errno.ELOOP, r.what)
    if r.is_special:  # no data here: on a mount the kernel opens them itself
        raise fail(errno.ENXIO, r.what)
    acc = flags & os.O_ACCMODE
    if acc == os.O_ACCMODE:
        raise fail(errno.EINVAL, "open flags")
    mask = {os.O_RDONLY: R_OK, os.O_WRONLY: W_OK, os.O_RDWR: R_OK | W_OK}[acc]
    if flags & os.O_TRUNC:
        mask |= W_OK
    if r.is_dir and mask & W_OK:
        raise fail(errno.EISDIR, r.what)
    return mask


def regular(r: Inode) -> Inode:
    """Only regular files have data: EISDIR for a directory, EINVAL for a symlink."""
    if not r.is_file:
        raise fail(errno.EISDIR if r.is_dir else errno.EINVAL, r.what)
    return r


def rename_rule(src: Inode, dst: Inode | None, flags: int, new_name: str,
                src_above_target: bool, dst_above_source: bool) -> None:
    """renameat2 checks in Linux's order: NOREPLACE/EXCHANGE against the target's existence,
    a directory into its own subtree (EINVAL), a target that contains the source."""
    if dst is not None and flags & 1:
        raise fail(errno.EEXIST, new_name)
    if dst is None and flags & 2:
        raise fail(errno.ENOENT, new_name)
    if src_above_target:
        raise fail(errno.EINVAL, "directory into its own subtree")
    if dst_above_source:
        raise fail(errno.EINVAL if flags & 2 else errno.ENOTEMPTY, new_name)


def replace_rule(src: Inode, dst: Inode, name: str) -> None:
    """rename over an existing entry: like replaces like, and only empty directories."""
    if src.is_dir and not dst.is_dir:
        raise fail(errno.ENOTDIR, name)
    if not src.is_dir and dst.is_dir:
        raise fail(errno.EISDIR, name)
    if dst.is_dir and dst.nent:
        raise fail(errno.ENOTEMPTY, name)


def xattr_rule(r: Inode, name: object, cred: Cred, write: bool) -> str:
    """Check an xattr name and whether ``cred`` may read (or write) it on ``r``, with
    Linux's namespace rules."""
    if type(name) is not str or not name or "\0" in name:
        raise fail(errno.EINVAL, "xattr name")
    if len(name.encode("utf-8", "surrogatepass")) > NAME_MAX:
        raise fail(errno.ERANGE, "xattr name")
    ns = next((p for p in XATTR_NAMESPACES if name.startswith(p)), None)
    if ns is None:
        raise fail(errno.ENOTSUP, name)
    if name == ns:
        raise fail(errno.EINVAL, name)
    if ns == "system.":
        # POSIX ACLs live here; storing them without enforcing them would lie
        raise fail(errno.ENOTSUP if write else errno.ENODATA, name)
    if ns == "trusted." and not cred.is_root:
        raise fail(errno.EPERM if write else errno.ENODATA, name)
    if ns == "user.":
        if not (r.is_file or r.is_dir):
            raise fail(errno.EPERM if write else errno.ENODATA, name)
        need_inode(r, W_OK if write else R_OK, cred)
    if ns == "security." and write:
        need_owner(r.uid, cred, name)
    return name


def xattr_value(value: object) -> bytes:
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise fail(errno.EINVAL, "xattr value must be bytes")
    value = bytes(value)
    if len(value) > XATTR_SIZE_MAX:
        raise fail(errno.E2BIG, "xattr value")
    return value


def check_stripe(stripe: object, niods: int, *, resolve: bool) -> Stripe | None:
    """A layout argument checked against ``niods``; ``resolve`` turns pcount -1 into
    ``niods`` (files store a resolved layout, directory defaults keep -1)."""
    if stripe is None:
        return None
    if not isinstance(stripe, Stripe):
        raise fail(errno.EINVAL, "stripe must be a Stripe")
    try:
        if resolve:
            return stripe.resolved(niods)
        stripe.validate(niods)
    except ValueError as exc:
        raise fail(errno.EINVAL, str(exc)) from None
    return stripe


def rmdir_name_rule(name: str, parent_is_root: bool) -> None:
    """rmdir of "." or "..": the root is busy; elsewhere Linux says EINVAL / ENOTEMPTY."""
    if name == "." or name == "..":
        if parent_is_root:
            raise fail(errno.EBUSY, name)
        raise fail(errno.EINVAL if name == "." else errno.ENOTEMPTY, name)


def check_flags(flags: object, what: str) -> int:
    """renameat2 / setxattr flags: 0, 1 or 2; both bits together make no sense."""
    return check_int(flags, 0, 2, what)
