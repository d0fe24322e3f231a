"""POSIX rules of issue 9 at the manager, without FUSE: setuid/setgid clearing on write,
truncate and chown, ftruncate through a writable handle, special files, name limits,
timestamps. The store is driven the way the mount drives it (a write's kill-suid arrives as
a mode change in the writer's name)."""

from __future__ import annotations

import errno
import stat

import pytest

from pvfs.daemons.mgr.store import ROOT_INO, Cred, MetaStore
from pvfs.layout.stripe import Stripe
from pvfs.protocol import attrrules

ROOT = Cred(0, 0)
ALICE = Cred(1000, 1000)
BOB = Cred(1001, 1001)
CAROL = Cred(1002, 1002, (1000,))  # in alice's group
DEFAULT = Stripe(0, -1, 65536)


@pytest.fixture
def s(tmp_path):
    store = MetaStore(str(tmp_path / "meta.sqlite"), 4, DEFAULT)
    store.setattr(ROOT_INO, ROOT, mode=0o777)
    yield store
    store.close()


def err(code: int, fn, *a, **kw) -> OSError:
    with pytest.raises(OSError) as ei:
        fn(*a, **kw)
    assert ei.value.errno == code, f"{ei.value!r} is not {errno.errorcode[code]}"
    return ei.value


def mkf(s: MetaStore, name: str, mode: int, cred: Cred = ALICE, parent: int = ROOT_INO) -> int:
    ino = s.create(parent, name, 0o600, cred)[0]["ino"]
    s.setattr(ino, ROOT if mode & 0o6000 else cred, mode=mode)
    return ino


def perm(s: MetaStore, ino: int) -> int:
    return stat.S_IMODE(s.getattr(ino)["mode"])


# ---------------------------------------------------------------- setuid / setgid clearing
@pytest.mark.parametrize(("before", "after"), [(0o6777, 0o0777), (0o4777, 0o0777),
                                               (0o2777, 0o0777), (0o6767, 0o2767),
                                               (0o2767, 0o2767)])  # setgid without g+x stays
def test_non_owner_write_clears_suid_as_the_kernel_asks(s, before, after):
    """A write by a non-owner: the kernel sends mode & ~S_ISUID (& ~S_ISGID if g+x)."""
    f = mkf(s, "f", before)
    killed = attrrules.kill_suid(stat.S_IFREG | before) & 0o7777
    assert killed == after
    if killed != before:
        assert perm(s, f) == before
        s.setattr(f, BOB, mode=killed)
    assert perm(s, f) == after


def test_non_owner_may_only_clear_suid_and_only_with_write_permission(s):
    f = mkf(s, "f", 0o6777)
    for mode in (0o6777, 0o0775, 0o4777 | 0o1000, 0o0666):  # same, other bits, sticky, ...
        err(errno.EPERM, s.setattr, f, BOB, mode=mode)
    g = mkf(s, "g", 0o6755)  # bob may not write: he cannot strip the bits either
    err(errno.EACCES, s.setattr, g, BOB, mode=0o0755)
    err(errno.EPERM, s.setattr, mkf(s, "h", 0o0777), BOB, mode=0o0777)  # nothing to clear
    assert perm(s, f) == 0o6777 and perm(s, g) == 0o6755


def test_truncate_by_non_owner_clears_suid(s):
    f = mkf(s, "f", 0o6777)
    s.setattr(f, BOB, size=0)
    assert perm(s, f) == 0o0777
    g = mkf(s, "g", 0o6777)  # the kernel's form: size and the killed mode in one call
    s.setattr(g, BOB, size=0, mode=0o0777)
    assert perm(s, g) == 0o0777
    h = mkf(s, "h", 0o6777)
    s.setattr(h, ROOT, size=0)  # root keeps them (CAP_FSETID)
    assert perm(s, h) == 0o6777
    err(errno.EACCES, s.setattr, mkf(s, "i", 0o6755), BOB, size=0)


def test_chown_clears_suid(s):
    f = mkf(s, "f", 0o6755)
    s.setattr(f, ROOT, uid=BOB.uid)
    assert perm(s, f) == 0o0755
    g = mkf(s, "g", 0o2745)  # setgid without group-exec marks locking: kept
    s.setattr(g, ROOT, gid=5)
    assert perm(s, g) == 0o2745
    d = s.mkdir(ROOT_INO, "d", 0o2755, ALICE)["ino"]  # directories keep theirs
    s.setattr(d, ROOT, uid=BOB.uid)
    assert perm(s, d) == 0o2755


def test_ftruncate_through_a_writable_handle_skips_the_mode_check(s):
    """open(O_CREAT|O_RDWR, 0) then ftruncate: the handle was checked when it was made."""
    a, created = s.create(ROOT_INO, "zero", 0, BOB)
    assert created and perm(s, a["ino"]) == 0
    s.open(a["ino"], 0o2, BOB, created=True)
    err(errno.EACCES, s.setattr, a["ino"], BOB, size=10)  # a path truncate is checked
    assert s.setattr(a["ino"], BOB, size=10, handle=True)["mtime_ns"] >= a["mtime_ns"]
    # handle= vouches for the size only: a chmod or chown is checked as ever
    err(errno.EPERM, s.setattr, a["ino"], ALICE, mode=0o777, handle=True)
    err(errno.EINVAL, s.setattr, a["ino"], BOB, size=1, handle=1)


# ---------------------------------------------------------------- special files
@pytest.mark.parametrize(("ftype", "name"), [(stat.S_IFIFO, "fifo"), (stat.S_IFSOCK, "socket"),
                                             (stat.S_IFCHR, "chr"), (stat.S_IFBLK, "blk")])
def test_mknod_makes_an_inode_without_data(s, ftype, name):
    rdev = (8 << 8) | 1
    a = s.mknod(ROOT_INO, "n", ftype | 0o640, rdev, ROOT)
    assert a["type"] == name and a["mode"] == ftype | 0o640 and a["nlink"] == 1
    assert a["stripe"] is None and a["size"] == 0
    assert a["rdev"] == (rdev if ftype in (stat.S_IFCHR, stat.S_IFBLK) else 0)
    assert s.lookup(ROOT_INO, "n", ROOT) == a and s.admin.counts()["special"] == 1
    assert not list(s.admin.file_inodes())  # nothing for fsck to find at the I/O daemons
    err(errno.ENXIO, s.open, a["ino"], 0, ROOT)  # only a kernel can open it
    err(errno.EINVAL, s.setattr, a["ino"], ROOT, size=0)
    s.link(a["ino"], ROOT_INO, "n2", ROOT)
    assert s.unlink(ROOT_INO, "n", ROOT) is None
    assert s.unlink(ROOT_INO, "n2", ROOT) is None  # last name: the inode goes at once
    err(errno.ENOENT, s.getattr, a["ino"])
    assert s.admin.counts()["special"] == 0 and not s.admin.orphans()


def test_mknod_rules(s):
    d = s.mkdir(ROOT_INO, "d", 0o755, ALICE)["ino"]
    assert s.mknod(d, "p", stat.S_IFIFO | 0o644, 0, ALICE)["uid"] == ALICE.uid
    err(errno.EEXIST, s.mknod, d, "p", stat.S_IFIFO | 0o644, 0, ALICE)
    err(errno.EACCES, s.mknod, d, "q", stat.S_IFIFO | 0o644, 0, BOB)
    err(errno.EPERM, s.mknod, d, "c", stat.S_IFCHR | 0o644, 0x0103, ALICE)  # needs root
    err(errno.EACCES, s.mknod, d, "c", stat.S_IFCHR | 0o644, 0x0103, BOB)  # parent first
    err(errno.EINVAL, s.mknod, d, "r", stat.S_IFREG | 0o644, 0, ALICE)  # files: create
    err(errno.EPERM, s.mknod, d, "r", stat.S_IFDIR | 0o755, 0, ALICE)
    err(errno.EINVAL, s.mknod, d, "r", stat.S_IFCHR | 0o644, 1 << 32, ROOT)
    err(errno.ENAMETOOLONG, s.mknod, d, "x" * 256, stat.S_IFIFO | 0o644, 0, ALICE)
    s.setattr(d, ALICE, mode=0o1777)
    s.mknod(d, "bobs", stat.S_IFSOCK | 0o777, 0, BOB)
    err(errno.EPERM, s.unlink, d, "p", BOB)  # sticky directory
    s.unlink(d, "bobs", BOB)


def test_schema_1_store_is_migrated(tmp_path):
    """A file system made before special files existed still opens (and gains rdev)."""
    import sqlite3

    path = str(tmp_path / "old.sqlite")
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
        CREATE TABLE inodes (ino INTEGER PRIMARY KEY AUTOINCREMENT, mode INTEGER NOT NULL,
            nlink INTEGER NOT NULL, uid INTEGER NOT NULL, gid INTEGER NOT NULL,
            atime INTEGER NOT NULL, mtime INTEGER NOT NULL, ctime INTEGER NOT NULL,
            nent INTEGER NOT NULL DEFAULT 0, target TEXT,
            sbase INTEGER, spcount INTEGER, sssize INTEGER);
        CREATE TABLE dentries (cookie INTEGER PRIMARY KEY AUTOINCREMENT,
            parent INTEGER NOT NULL, name TEXT NOT NULL, ino INTEGER NOT NULL);
        CREATE TABLE xattrs (ino INTEGER NOT NULL, name TEXT NOT NULL, value BLOB NOT NULL,
            PRIMARY KEY (ino, name)) WITHOUT ROWID;
        INSERT INTO meta VALUES ('version', 1);
        INSERT INTO inodes VALUES (1, 16877, 2, 0, 0, 1, 1, 1, 1, NULL, NULL, NULL, NULL);
        INSERT INTO inodes VALUES (2, 33188, 1, 0, 0, 1, 1, 1, 0, NULL, 0, 4, 65536);
        INSERT INTO dentries (parent, name, ino) VALUES (1, 'old', 2);
    """)
    db.close()
    s = MetaStore(path, 4, DEFAULT)
    assert s.lookup(ROOT_INO, "old", ROOT)["rdev"] == 0
    assert s.mknod(ROOT_INO, "dev", stat.S_IFBLK | 0o600, 0x0801, ROOT)["rdev"] == 0x0801
    s.close()
    s = MetaStore(path, 4, DEFAULT)  # opens again at version 2
    assert s.lookup(ROOT_INO, "dev", ROOT)["rdev"] == 0x0801
    s.close()
    db = sqlite3.connect(path)
    db.execute("UPDATE meta SET value = 99 WHERE key = 'version'")
    db.commit()
    db.close()
    err(errno.EINVAL, MetaStore, path, 4, DEFAULT)  # a newer store is refused, not damaged


# ---------------------------------------------------------------- the uid x mode matrix on open
@pytest.mark.parametrize("mode", [0o000, 0o400, 0o200, 0o600, 0o640, 0o604, 0o066, 0o006])
@pytest.mark.parametrize("cred", [ALICE, CAROL, BOB, ROOT], ids=["owner", "group", "other",
                                                                 "root"])
def test_open_matrix(s, mode, cred):
    """open(2) with each access mode, by owner, group member, other and root."""
    f = mkf(s, "f", mode)
    bits = 0o6 if cred is ROOT else (mode >> {ALICE: 6, CAROL: 3, BOB: 0}[cred]) & 7
    for flags, need in [(0, 0o4), (1, 0o2), (2, 0o6), (0o1000 | 1, 0o2)]:  # O_TRUNC|O_WRONLY
        if bits & need == need:
            s.open(f, flags, cred)
            s.release(f)
        else:
            err(errno.EACCES, s.open, f, flags, cred)


@pytest.mark.parametrize("dmode", [0o777, 0o1777, 0o755, 0o733, 0o1733])
@pytest.mark.parametrize("who", ["owner", "dirowner", "other", "root"])
def test_remove_matrix_in_sticky_and_plain_directories(s, dmode, who):
    """unlink/rename/rmdir in a directory owned by carol holding alice's entries."""
    d = s.mkdir(ROOT_INO, "d", 0o777, CAROL)["ino"]
    s.create(d, "f", 0o644, ALICE)
    s.mkdir(d, "sub", 0o755, ALICE)
    s.setattr(d, CAROL, mode=dmode)
    cred = {"owner": ALICE, "dirowner": CAROL, "other": BOB, "root": ROOT}[who]
    dattr = s.getattr(d)
    if not attrrules.permitted(dmode, dattr["uid"], dattr["gid"], 0o3, cred):
        expect = errno.EACCES  # write and search on the directory are needed
    elif dmode & stat.S_ISVTX and cred not in (ALICE, CAROL, ROOT):
        expect = errno.EPERM  # sticky: only the entry's or directory's owner, or root
    else:
        expect = 0
    for fn, args in [(s.rename, (d, "f", d, "g")), (s.unlink, (d, "f")), (s.rmdir, (d, "sub"))]:
        if expect:
            err(expect, fn, *args, cred)
        else:
            fn(*args, cred)
            if args[-1] == "g":
                s.rename(d, "g", d, "f", ROOT)
    assert sorted(n for n, _, _ in s.readdir(d, ROOT))[2:] == ([] if not expect else
                                                               ["f", "sub"])


# ---------------------------------------------------------------- name and path limits
def test_name_limits_on_every_creating_call(s):
    long, ok = "x" * 256, "y" * 255
    f = s.create(ROOT_INO, "f", 0o644, ROOT)[0]["ino"]
    for call in (lambda n: s.create(ROOT_INO, n, 0o644, ROOT),
                 lambda n: s.mkdir(ROOT_INO, n, 0o755, ROOT),
                 lambda n: s.symlink(ROOT_INO, n, "t", ROOT),
                 lambda n: s.mknod(ROOT_INO, n, stat.S_IFIFO | 0o644, 0, ROOT),
                 lambda n: s.link(f, ROOT_INO, n, ROOT),
                 lambda n: s.rename(ROOT_INO, "f", ROOT_INO, n, ROOT),
                 lambda n: s.lookup(ROOT_INO, n, ROOT)):
        err(errno.ENAMETOOLONG, call, long)
        err(errno.ENAMETOOLONG, call, "é" * 128)  # 256 bytes of UTF-8
    s.mkdir(ROOT_INO, ok, 0o755, ROOT)
    deep = "/" + "/".join([ok] * 15) + "/" + "z" * 254  # 4095 bytes: the path limit
    assert len(deep.encode()) == 4095
    err(errno.ENOENT, s.resolve, deep, ROOT)
    err(errno.ENAMETOOLONG, s.resolve, deep + "z", ROOT)


# ---------------------------------------------------------------- timestamps
def test_timestamps_follow_posix(s):
    """Which call moves which time (the rules pjdfstest's */00.t check)."""
    def times(ino: int) -> tuple[int, int, int]:
        a = s.getattr(ino)
        return a["atime_ns"], a["mtime_ns"], a["ctime_ns"]

    d = s.mkdir(ROOT_INO, "d", 0o777, ALICE)["ino"]
    d0 = times(d)
    f = s.create(d, "f", 0o644, ALICE)[0]["ino"]
    f0, d1 = times(f), times(d)
    assert f0[1] == f0[2] and d1[1] > d0[1] and d1[2] > d0[2]  # new entry: parent m+c
    s.setattr(f, ALICE, mode=0o600)
    f1 = times(f)
    assert f1[1] == f0[1] and f1[2] > f0[2]  # chmod: ctime only
    s.setattr(f, ROOT, uid=BOB.uid)
    f2 = times(f)
    assert f2[1] == f1[1] and f2[2] > f1[2]  # chown: ctime only
    s.setattr(f, BOB, size=0)
    f3 = times(f)
    assert f3[1] > f2[1] and f3[2] > f2[2]  # truncate: mtime and ctime
    s.link(f, d, "g", BOB)
    f4, d2 = times(f), times(d)
    assert f4[2] > f3[2] and f4[1] == f3[1] and d2[1] > d1[1]  # link: file c, dir m+c
    s.rename(d, "g", d, "h", BOB)
    f5, d3 = times(f), times(d)
    assert f5[2] > f4[2] and d3[1] > d2[1]  # rename: moved inode c, dir m+c
    s.unlink(d, "h", BOB)
    f6, d4 = times(f), times(d)
    assert f6[2] > f5[2] and d4[1] > d3[1]  # unlink: file c (nlink), dir m+c
    s.setxattr(f, "user.k", b"v", BOB)
    f7 = times(f)
    assert f7[2] > f6[2] and f7[1] == f6[1]  # xattr: ctime only
    s.readdir(d, ALICE)
    s.lookup(d, "f", ALICE)
    assert times(d) == d4 and times(f) == f7  # reading changes nothing (noatime)
    a = s.setattr(f, BOB, atime_ns=7, mtime_ns=8)
    assert (a["atime_ns"], a["mtime_ns"]) == (7, 8) and a["ctime_ns"] > f7[2]
    n = s.mknod(d, "p", stat.S_IFIFO | 0o644, 0, ALICE)
    assert n["mtime_ns"] == n["ctime_ns"] == n["atime_ns"] and times(d)[1] > d4[1]
