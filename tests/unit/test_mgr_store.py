"""The manager's metadata store: every method, every errno, POSIX permission rules."""

from __future__ import annotations

import errno
import os
import stat

import pytest

from pvfs.daemons.mgr import store as ms
from pvfs.daemons.mgr.store import ROOT_INO, Cred, MetaStore
from pvfs.layout.stripe import Stripe

ROOT = Cred(0, 0)
ALICE = Cred(1000, 1000)
BOB = Cred(1001, 1001)
CAROL = Cred(1002, 1002, (1000,))  # in alice's group
DEFAULT = Stripe(0, -1, 65536)


@pytest.fixture
def db(tmp_path):
    return str(tmp_path / "meta.sqlite")


def new_store(path: str) -> MetaStore:
    """A store of 4 I/O daemons whose root anyone may create in (tests act as other users)."""
    store = MetaStore(path, 4, DEFAULT)
    store.setattr(ROOT_INO, ROOT, mode=0o777)
    return store


@pytest.fixture
def s(db):
    store = new_store(db)
    yield store
    store.close()


def err(code: int, fn, *a, **kw) -> OSError:
    with pytest.raises(OSError) as ei:
        fn(*a, **kw)
    assert ei.value.errno == code, f"{ei.value!r} is not {errno.errorcode[code]}"
    return ei.value


def home(s: MetaStore, cred: Cred = ALICE, mode: int = 0o755) -> int:
    """A directory owned by ``cred`` under the root."""
    d = s.mkdir(ROOT_INO, f"home{cred.uid}", mode, ROOT)
    s.setattr(d["ino"], ROOT, uid=cred.uid, gid=cred.gid)
    return d["ino"]


def mkf(s: MetaStore, name: str, parent: int = ROOT_INO, mode: int = 0o644,
        cred: Cred = ROOT) -> int:
    return s.create(parent, name, mode, cred)[0]["ino"]


def mkd(s: MetaStore, name: str, parent: int = ROOT_INO, mode: int = 0o755,
        cred: Cred = ROOT) -> int:
    return s.mkdir(parent, name, mode, cred)["ino"]


def ino(s: MetaStore, parent: int, name: str) -> int:
    return s.lookup(parent, name, ROOT)["ino"]


def names(s: MetaStore, ino: int, cred: Cred = ROOT) -> list[str]:
    return [n for n, _, _ in s.readdir(ino, cred)]


def test_new_store_has_root_and_arguments_are_checked(db):
    s = MetaStore(db, 4, DEFAULT)
    r = s.getattr(ROOT_INO)
    assert (r["ino"], r["type"], r["mode"], r["uid"], r["nlink"]) == (1, "dir", 0o40755, 0, 2)
    assert r["stripe"] is None and r["size"] == 4096
    assert s.admin.counts() == {"files": 0, "dirs": 1, "symlinks": 0, "special": 0, "inodes": 1}
    s.close()
    for niods, stripe in [(0, DEFAULT), (4, Stripe(5, 1, 65536)), (4, None)]:
        err(errno.EINVAL, MetaStore, db, niods, stripe)
    for args in [(-1, 0), (0, 1 << 32), (0, 0, ("x",)), (0, 0, 5)]:
        err(errno.EINVAL, Cred, *args)
    assert Cred(1, 2, [3, 4]).groups == (3, 4)


@pytest.mark.parametrize("bad", [0, -1, "1", 1.0, True, None, 1 << 63])
def test_bad_inode_numbers(s, bad):
    err(errno.EINVAL, s.getattr, bad)
    err(errno.EINVAL, s.lookup, bad, "x", ROOT)


@pytest.mark.parametrize("name,code", [("", errno.EINVAL), ("a/b", errno.EINVAL),
                                       ("a\0", errno.EINVAL), (".", errno.EINVAL),
                                       ("..", errno.EINVAL), ("x" * 256, errno.ENAMETOOLONG),
                                       ("é" * 128, errno.ENAMETOOLONG), (b"a", errno.EINVAL)])
def test_bad_names(s, name, code):
    err(code, s.create, ROOT_INO, name, 0o644, ROOT)
    err(code, s.mkdir, ROOT_INO, name, 0o755, ROOT)
    err(code, s.symlink, ROOT_INO, name, "t", ROOT)
    err(errno.EINVAL, s.mkdir, ROOT_INO, "a", 0o755, (0, 0))  # a cred must be a Cred


def test_reopen_keeps_everything(db):
    s = MetaStore(db, 4, DEFAULT)
    s.setattr(ROOT_INO, ROOT, mode=0o777)
    d = mkd(s, "d", mode=0o750, cred=ALICE)
    s.layouts.set_dir(d, Stripe(1, 2, 4096), ALICE)
    f = mkf(s, "f", d, 0o640, ALICE)
    s.link(f, ROOT_INO, "hard", ROOT)
    s.symlink(ROOT_INO, "sl", "/d/f", ROOT)
    s.setxattr(f, "user.k", b"v", ALICE)
    s.admin.remove_inode(gone := mkf(s, "gone"))
    before = {n: a for n, a, _ in s.readdir(ROOT_INO, ROOT)}
    s.close()
    s = MetaStore(db, 4, DEFAULT)
    assert {n: a for n, a, _ in s.readdir(ROOT_INO, ROOT)} == before
    assert s.resolve("/sl", ROOT) == s.getattr(f) and s.getattr(f)["nlink"] == 2
    assert s.layouts.of(d) == Stripe(1, 2, 4096) and s.getxattr(f, "user.k", ALICE) == b"v"
    assert mkf(s, "new") > gone  # inode numbers are never reused
    s.close()


def test_failed_transaction_changes_nothing(s, monkeypatch):
    a, b = mkf(s, "a"), mkf(s, "b")
    monkeypatch.setattr(s, "_drop_link", lambda *_: s.getattr(999))  # fails half-way
    err(errno.ENOENT, s.rename, ROOT_INO, "a", ROOT_INO, "b", ROOT)
    assert (ino(s, ROOT_INO, "a"), ino(s, ROOT_INO, "b")) == (a, b)
    assert s.getattr(ROOT_INO)["nlink"] == 2


def test_resolve_paths_and_symlinks(s):
    a = mkd(s, "a")
    f = mkf(s, "f", b := mkd(s, "b", a))
    for parent, name, target in [(ROOT_INO, "abs", "/a/b"), (a, "rel", "b/f"),
                                 (a, "up", "../a/./b")]:
        s.symlink(parent, name, target, ROOT)
    for p in ["/a/b/f", "//a///b/f", "/a/../a/b/f", "/../../a/b/f", "/abs/f", "/a/rel",
              "/a/up/f", "/abs/../b/f", "/a/b/./f"]:
        assert s.resolve(p, ROOT)["ino"] == f, p
    assert s.resolve("/", ROOT)["ino"] == ROOT_INO
    assert s.resolve("/a/rel", ROOT, follow=False)["type"] == "symlink"
    assert s.resolve("/abs/", ROOT, follow=False)["ino"] == b  # trailing slash follows
    for p, code in [("/a/nope", errno.ENOENT), ("/a/b/f/x", errno.ENOTDIR), ("a/b", errno.EINVAL),
                    ("/a/b/f/", errno.ENOTDIR), ("/" + "x" * 256, errno.ENAMETOOLONG),
                    ("/a" * 2048, errno.ENAMETOOLONG), ("/a\0", errno.EINVAL)]:
        err(code, s.resolve, p, ROOT)
    s.symlink(ROOT_INO, "l1", "/l2", ROOT)
    s.symlink(ROOT_INO, "l2", "l1", ROOT)
    s.symlink(ROOT_INO, "dangling", "/nowhere", ROOT)
    err(errno.ELOOP, s.resolve, "/l1", ROOT)
    err(errno.ELOOP, s.resolve, "/l1/x", ROOT)
    assert s.resolve("/l1", ROOT, follow=False)["type"] == "symlink"
    err(errno.ENOENT, s.resolve, "/dangling", ROOT)
    prev, d = "/", mkd(s, "d")
    for i in range(41):  # a chain of 40 links resolves, 41 is a loop
        s.symlink(d, f"c{i}", prev, ROOT)
        prev = f"c{i}"
    assert s.resolve("/d/c39", ROOT)["ino"] == ROOT_INO
    err(errno.ELOOP, s.resolve, "/d/c40", ROOT)


def test_resolve_parent_and_search_permission(s):
    a = mkd(s, "a")
    assert s.resolve_parent("/a/new", ROOT) == (s.getattr(a), "new")
    assert s.resolve_parent("/a/new/", ROOT)[1] == "new"
    assert s.resolve_parent("/", ROOT) == (s.getattr(ROOT_INO), ".")
    err(errno.ENOENT, s.resolve_parent, "/x/y", ROOT)
    s.create(ROOT_INO, "f", 0o644, ROOT)
    err(errno.ENOTDIR, s.resolve_parent, "/f/y", ROOT)
    h = home(s, ALICE, 0o700)
    s.create(h, "f", 0o644, ALICE)
    err(errno.EACCES, s.resolve, "/home1000/f", BOB)
    err(errno.EACCES, s.resolve_parent, "/home1000/f/x", BOB)
    err(errno.EACCES, s.lookup, h, "f", BOB)
    assert s.resolve("/home1000/f", ALICE)["uid"] == 1000
    assert s.resolve("/home1000/f", ROOT)["uid"] == 1000


def test_lookup(s):
    assert s.create(ROOT_INO, "x" * 255, 0o644, ROOT)[1]  # the longest name
    f = mkf(s, "f", a := mkd(s, "a"))
    assert s.lookup(a, "f", ROOT) == s.getattr(f)
    assert (ino(s, a, "."), ino(s, a, ".."), ino(s, ROOT_INO, "..")) == (a, ROOT_INO, ROOT_INO)
    for parent, code in [(a, errno.ENOENT), (f, errno.ENOTDIR), (999, errno.ENOENT)]:
        err(code, s.lookup, parent, "g", ROOT)


@pytest.mark.parametrize("mode", [0o000, 0o700, 0o070, 0o007, 0o644, 0o640, 0o604, 0o755,
                                  0o111, 0o222, 0o444])
@pytest.mark.parametrize("cred", [ALICE, CAROL, BOB, ROOT], ids=["owner", "group", "other",
                                                                 "root"])
def test_permission_matrix(s, mode, cred):
    f = mkf(s, "f", mode=mode, cred=ALICE)
    if cred is ROOT:
        bits = 0o6 | (0o1 if mode & 0o111 else 0)
    else:
        shift = {ALICE: 6, CAROL: 3, BOB: 0}[cred]
        bits = (mode >> shift) & 7
    for mask in range(8):
        if bits & mask == mask:
            s.access(f, mask, cred)
        else:
            err(errno.EACCES, s.access, f, mask, cred)
    err(errno.EINVAL, s.access, f, 8, cred)


def test_directory_write_and_search(s):
    h = home(s, ALICE, 0o755)
    f = mkf(s, "f", h, 0o666, ALICE)
    for fn, *args in [(s.create, h, "g", 0o644), (s.mkdir, h, "g", 0o755), (s.unlink, h, "f"),
                      (s.symlink, h, "g", "t"), (s.rename, h, "f", h, "g"), (s.link, f, h, "g")]:
        err(errno.EACCES, fn, *args, BOB)
    err(errno.EEXIST, s.mkdir, h, "f", 0o755, BOB)  # existence is seen before write access
    err(errno.ENOENT, s.unlink, h, "nope", BOB)
    s.setattr(h, ALICE, mode=0o733)
    err(errno.EACCES, s.readdir, h, BOB)
    assert s.create(h, "g", 0o644, BOB)[0]["uid"] == BOB.uid


def test_sticky_and_setgid_directories(s):
    tmp = mkd(s, "tmp", mode=0o1777)
    s.setattr(tmp, ROOT, uid=CAROL.uid)
    assert [mkf(s, n, tmp, 0o666, ALICE) for n in "abc"] and mkd(s, "d", tmp, 0o777, ALICE)
    err(errno.EPERM, s.unlink, tmp, "a", BOB)
    err(errno.EPERM, s.rename, tmp, "a", tmp, "z", BOB)
    err(errno.EPERM, s.rmdir, tmp, "d", BOB)
    s.create(tmp, "bobs", 0o666, BOB)
    err(errno.EPERM, s.rename, tmp, "bobs", tmp, "a", BOB)  # may not replace alice's file
    s.unlink(tmp, "a", ALICE)  # the file's owner
    s.unlink(tmp, "b", CAROL)  # the directory's owner
    s.unlink(tmp, "c", ROOT)
    s.rmdir(tmp, "d", ALICE)
    s.setattr(proj := mkd(s, "proj", mode=0o2777), ROOT, gid=500)
    f, _ = s.create(proj, "f", 0o2755, ALICE)
    assert f["gid"] == 500 and not f["mode"] & stat.S_ISGID  # alice is not in group 500
    d = s.mkdir(proj, "d", 0o755, ALICE)
    assert d["gid"] == 500 and d["mode"] & stat.S_ISGID
    assert s.getattr(mkf(s, "g", d["ino"], cred=ALICE))["gid"] == 500
    assert s.getattr(mkf(s, "plain", cred=ALICE))["gid"] == ALICE.gid


def test_chmod_and_chown(s):
    f = mkf(s, "f", cred=ALICE)
    assert s.setattr(f, ALICE, mode=0o100600)["mode"] == 0o100600
    err(errno.EPERM, s.setattr, f, BOB, mode=0o777)
    assert s.setattr(f, ROOT, mode=0o4755)["mode"] == 0o104755
    s.setattr(f, ROOT, gid=500)
    assert s.setattr(f, ALICE, mode=0o2755)["mode"] == 0o100755  # not in group 500
    assert s.setattr(f, ROOT, mode=0o2755)["mode"] == 0o102755
    err(errno.EINVAL, s.setattr, f, ALICE, mode=-1)
    g = mkf(s, "g", mode=0o4755, cred=ALICE)
    for who, kw in [(ALICE, {"uid": BOB.uid}), (ALICE, {"gid": BOB.gid}), (BOB, {"gid": BOB.gid}),
                    (BOB, {"uid": ALICE.uid})]:
        err(errno.EPERM, s.setattr, g, who, **kw)
    s.setattr(g, ALICE, uid=-1, gid=-1)
    a = s.setattr(g, Cred(1000, 1000, (77,)), gid=77)
    assert (a["uid"], a["gid"]) == (1000, 77) and not a["mode"] & stat.S_ISUID  # chown kills suid
    assert s.setattr(g, ROOT, uid=5, gid=6)["uid"] == 5
    err(errno.EINVAL, s.setattr, g, ROOT, uid=1 << 32)


def test_utimens_and_truncate(s):
    f = mkf(s, "f", mode=0o666, cred=ALICE)
    a = s.setattr(f, ALICE, atime_ns=10, mtime_ns=20)
    assert (a["atime_ns"], a["mtime_ns"]) == (10, 20) and a["ctime_ns"] > 20
    a = s.setattr(f, BOB, now=True)  # write permission is enough for "now"
    assert a["atime_ns"] > 20 and a["mtime_ns"] > 20
    a = s.setattr(f, ALICE, mtime_ns=5, now=True)
    assert a["mtime_ns"] == 5 and a["atime_ns"] > 20
    s.setattr(f, ALICE, mode=0o6755)
    for cred, kw, code in [(BOB, {"now": True}, errno.EACCES), (BOB, {"atime_ns": 1}, errno.EPERM),
                           (ROOT, {"atime_ns": 1.5}, errno.EINVAL), (ROOT, {"now": 1}, errno.EINVAL)]:
        err(code, s.setattr, f, cred, **kw)
    a = s.setattr(f, ALICE, size=0)  # truncation: mtime moves, set-id bits go
    assert a["mtime_ns"] > 5 and not a["mode"] & 0o6000
    sl = s.symlink(ROOT_INO, "sl", "f", ROOT)["ino"]
    for i, cred, size, code in [(f, BOB, 0, errno.EACCES), (f, ALICE, -1, errno.EINVAL),
                                (ROOT_INO, ROOT, 0, errno.EISDIR), (sl, ROOT, 0, errno.EINVAL),
                                (999, ROOT, 0, errno.ENOENT)]:
        err(code, s.setattr, i, cred, size=size)


def test_mkdir_and_create(s):
    p = s.setattr(ROOT_INO, ROOT, mtime_ns=1)
    d = s.mkdir(ROOT_INO, "d", 0o40755, ROOT)
    assert d["mode"] == 0o40755 and d["nlink"] == 2 and d["type"] == "dir"
    p2 = s.getattr(ROOT_INO)
    assert p2["nlink"] == 3 and p2["mtime_ns"] > p["mtime_ns"] and p2["ctime_ns"] >= p2["mtime_ns"]
    f, created = s.create(d["ino"], "f", 0o100640, ROOT)
    assert created and f["mode"] == 0o100640 and f["nlink"] == 1 and f["size"] == 0
    assert s.getattr(d["ino"])["nlink"] == 2
    again, created = s.create(d["ino"], "f", 0o600, ROOT)
    assert not created and again == s.getattr(f["ino"])
    for parent, name, excl, code in [(d["ino"], "f", True, errno.EEXIST), (1, "d", False, errno.EISDIR),
                                     (ROOT_INO, "d", True, errno.EEXIST),
                                     (f["ino"], "x", False, errno.ENOTDIR)]:
        err(code, s.create, parent, name, 0o644, ROOT, exclusive=excl)
    for parent, code in [(ROOT_INO, errno.EEXIST), (f["ino"], errno.ENOTDIR), (999, errno.ENOENT)]:
        err(code, s.mkdir, parent, "d", 0o755, ROOT)


def test_hard_links_and_symlinks(s):
    f, d = mkf(s, "f"), mkd(s, "d")
    assert s.link(f, d, "g", ROOT)["nlink"] == 2 and ino(s, d, "g") == f
    for i, name, code in [(d, "dd", errno.EPERM), (f, "d", errno.EEXIST), (999, "x", errno.ENOENT)]:
        err(code, s.link, i, ROOT_INO, name, ROOT)
    assert s.unlink(ROOT_INO, "f", ROOT) is None and s.getattr(f)["nlink"] == 1
    gone = s.unlink(d, "g", ROOT)
    assert gone["ino"] == f and gone["nlink"] == 0 and gone["stripe"] == [0, 4, 65536]
    sl = s.symlink(ROOT_INO, "sl", "target/é", ALICE)
    assert sl["type"] == "symlink" and sl["size"] == len("target/é".encode())
    assert sl["mode"] == 0o120777 and sl["uid"] == ALICE.uid
    assert s.readlink(sl["ino"]) == "target/é"
    err(errno.EINVAL, s.readlink, ROOT_INO)
    for target, code in [("", errno.EINVAL), ("a\0b", errno.EINVAL), ("x" * 4096,
                                                                       errno.ENAMETOOLONG)]:
        err(code, s.symlink, ROOT_INO, "e", target, ROOT)
    err(errno.EEXIST, s.symlink, ROOT_INO, "sl", "t", ROOT)


def test_unlink(s):
    mkd(s, "d")
    for name, code in [("d", errno.EISDIR), ("nope", errno.ENOENT), (".", errno.EISDIR)]:
        err(code, s.unlink, ROOT_INO, name, ROOT)
    sl = s.symlink(ROOT_INO, "sl", "d", ROOT)["ino"]
    assert s.unlink(ROOT_INO, "sl", ROOT) is None
    err(errno.ENOENT, s.getattr, sl)
    f = mkf(s, "f")
    s.setxattr(f, "user.x", b"1", ROOT)
    assert s.unlink(ROOT_INO, "f", ROOT)["ino"] == f
    assert s.admin.orphans() == [s.getattr(f)]
    s.admin.remove_inode(f)
    err(errno.ENOENT, s.getattr, f)
    assert s.admin.orphans() == [] and names(s, ROOT_INO) == [".", "..", "d"]


def test_unlink_while_open_is_reaped_on_last_close(db):
    s = MetaStore(db, 4, DEFAULT)
    f = mkf(s, "f")
    s.open(f, os.O_RDWR, ROOT)
    s.open(f, os.O_RDONLY, ROOT)
    assert s.nfile(f) == 2 and s.open_count() == 2
    assert s.unlink(ROOT_INO, "f", ROOT) is None
    assert s.getattr(f)["nlink"] == 0 and s.admin.orphans() == []
    s.open(f, os.O_RDONLY, ROOT)  # by inode, while a handle exists
    assert s.close(f) is None and s.release(f) is None
    assert s.release(f)["ino"] == f and s.nfile(f) == 0
    err(errno.ENOENT, s.open, f, os.O_RDONLY, ROOT)
    g = mkf(s, "g")  # a restart forgets handles: an unlinked file is then an orphan
    s.open(g, os.O_RDONLY, ROOT)
    s.unlink(ROOT_INO, "g", ROOT)
    s.close()
    s = MetaStore(db, 4, DEFAULT)
    assert sorted(a["ino"] for a in s.admin.orphans()) == [f, g]
    s.close()


def test_rmdir(s):
    d = mkd(s, "d")
    mkd(s, "sub", d)
    mkf(s, "f")
    assert s.getattr(d)["nlink"] == 3
    for parent, name, code in [(ROOT_INO, "d", errno.ENOTEMPTY), (ROOT_INO, "f", errno.ENOTDIR),
                               (ROOT_INO, "nope", errno.ENOENT), (d, ".", errno.EINVAL),
                               (d, "..", errno.ENOTEMPTY), (ROOT_INO, ".", errno.EBUSY)]:
        err(code, s.rmdir, parent, name, ROOT)
    s.rmdir(d, "sub", ROOT)
    assert s.getattr(d)["nlink"] == 2
    s.rmdir(ROOT_INO, "d", ROOT)
    assert s.getattr(ROOT_INO)["nlink"] == 2
    err(errno.ENOENT, s.getattr, d)


def test_rename_files(s):
    a, f = mkd(s, "a"), mkf(s, "f")
    assert s.rename(ROOT_INO, "f", a, "g", ROOT) is None and ino(s, a, "g") == f
    err(errno.ENOENT, s.lookup, ROOT_INO, "f", ROOT)
    h = mkf(s, "h")
    gone = s.rename(a, "g", ROOT_INO, "h", ROOT)  # over an existing file
    assert gone["ino"] == h and gone["nlink"] == 0 and ino(s, ROOT_INO, "h") == f
    assert names(s, a) == [".", ".."]
    err(errno.ENOENT, s.rename, ROOT_INO, "nope", ROOT_INO, "x", ROOT)
    s.link(b := mkf(s, "b"), ROOT_INO, "b2", ROOT)
    assert s.rename(ROOT_INO, "h", ROOT_INO, "b", ROOT) is None  # b2 keeps it
    mkf(s, "c")
    s.open(b, os.O_RDONLY, ROOT)
    assert s.rename(ROOT_INO, "c", ROOT_INO, "b2", ROOT) is None  # still open
    assert s.release(b)["ino"] == b
    s.link(f, ROOT_INO, "f2", ROOT)  # two names of one file: nothing happens
    assert s.rename(ROOT_INO, "b", ROOT_INO, "f2", ROOT) is None
    assert s.rename(ROOT_INO, "b", ROOT_INO, "b", ROOT) is None
    assert names(s, ROOT_INO) == [".", "..", "a", "b", "b2", "f2"]
    err(errno.EEXIST, s.rename, ROOT_INO, "b", ROOT_INO, "f2", ROOT, ms.RENAME_NOREPLACE)


def test_rename_directories_and_their_permissions(s):
    a = mkd(s, "a")
    b = mkd(s, "b", a)
    c = mkd(s, "c", b)
    mkf(s, "f")
    mkd(s, "empty")
    mkd(s, "x", mkd(s, "full"))
    for args, code in [(("a", c, "x"), errno.EINVAL), (("a", a, "x"), errno.EINVAL),
                       (("a", ROOT_INO, "f"), errno.ENOTDIR),
                       (("f", ROOT_INO, "empty"), errno.EISDIR),
                       (("a", ROOT_INO, "full"), errno.ENOTEMPTY)]:
        err(code, s.rename, ROOT_INO, args[0], args[1], args[2], ROOT)
    err(errno.ENOTEMPTY, s.rename, b, "c", ROOT_INO, "a", ROOT)  # onto an ancestor
    assert s.rename(b, "c", ROOT_INO, "empty", ROOT) is None  # dir over empty dir
    assert ino(s, ROOT_INO, "empty") == c and ino(s, c, "..") == ROOT_INO
    assert s.getattr(b)["nlink"] == 2
    assert s.getattr(ROOT_INO)["nlink"] == 2 + 3  # a, full, empty(=c)
    assert s.admin.counts()["dirs"] == 6
    h = home(s, ALICE, 0o777)
    mkd(s, "ro", h, 0o555, ALICE)
    s.setattr(ROOT_INO, ROOT, mode=0o755)
    err(errno.EACCES, s.rename, h, "ro", ROOT_INO, "x", ALICE)  # no write on /
    other = mkd(s, "other", h, 0o777, ALICE)
    mkd(s, "bobs", h, 0o555, BOB)
    err(errno.EACCES, s.rename, h, "bobs", other, "x", ALICE)
    s.rename(h, "bobs", h, "renamed", ALICE)  # same parent: ".." does not change
    err(errno.EACCES, s.rename, h, "ro", other, "x", ALICE)  # mode, not ownership, decides
    s.setattr(ino(s, h, "ro"), ALICE, mode=0o755)
    s.rename(h, "ro", other, "x", ALICE)


def test_rename_flags(s):
    a, f = mkd(s, "a"), mkf(s, "f")
    g = mkf(s, "g", a)
    err(errno.EEXIST, s.rename, ROOT_INO, "f", a, "g", ROOT, ms.RENAME_NOREPLACE)
    err(errno.ENOENT, s.rename, ROOT_INO, "f", a, "x", ROOT, ms.RENAME_EXCHANGE)
    err(errno.EINVAL, s.rename, ROOT_INO, "f", a, "x", ROOT, 3)
    err(errno.EINVAL, s.rename, ROOT_INO, "f", a, "x", ROOT, 4)
    assert s.rename(ROOT_INO, "f", a, "x", ROOT, ms.RENAME_NOREPLACE) is None
    assert s.rename(a, "x", a, "g", ROOT, ms.RENAME_EXCHANGE) is None
    assert ino(s, a, "g") == f and ino(s, a, "x") == g
    d = mkd(s, "d")  # exchange a directory and a file across parents
    err(errno.EINVAL, s.rename, ROOT_INO, "a", a, "g", ROOT, ms.RENAME_EXCHANGE)
    s.rename(ROOT_INO, "d", a, "g", ROOT, ms.RENAME_EXCHANGE)
    assert ino(s, ROOT_INO, "d") == f and ino(s, a, "g") == d and ino(s, d, "..") == a
    assert s.getattr(ROOT_INO)["nlink"] == 3 and s.getattr(a)["nlink"] == 3


def test_readdir_pages_and_stable_cookies(s):
    d = mkd(s, "d")
    files = [mkf(s, f"f{i}", d) for i in range(10)]
    page = s.readdir(d, ROOT)
    assert [n for n, _, _ in page] == [".", "..", *(f"f{i}" for i in range(10))]
    assert page[0][1]["ino"] == d and page[1][1]["ino"] == ROOT_INO
    assert page[2][1] == s.getattr(files[0])
    seen, cookie = [], 0
    while part := s.readdir(d, ROOT, cookie, 3):
        assert len(part) <= 3
        seen += [n for n, _, _ in part]
        cookie = part[-1][2]
    assert seen == [n for n, _, _ in page]
    assert s.readdir(d, ROOT, page[-1][2]) == []
    err(errno.EINVAL, s.readdir, d, ROOT, 0, 0)
    err(errno.EINVAL, s.readdir, d, ROOT, -1)
    err(errno.ENOTDIR, s.readdir, s.lookup(d, "f0", ROOT)["ino"], ROOT)
    err(errno.ENOENT, s.readdir, 999, ROOT)
    big = mkd(s, "big")
    assert s.getattr(big)["size"] == 4096 and [mkf(s, f"f{i}", big) for i in range(200)]
    assert s.getattr(big)["size"] == 8192
    d = mkd(s, "churn")
    assert [mkf(s, f"f{i:02}", d) for i in range(20)]
    first = s.readdir(d, ROOT, 0, 8)
    for i in range(0, 20, 3):  # remove some seen and some unseen entries
        s.unlink(d, f"f{i:02}", ROOT)
    mkf(s, "new", d)
    s.rename(d, "f19", d, "moved", ROOT)
    rest, cookie = [], first[-1][2]
    while part := s.readdir(d, ROOT, cookie, 5):
        rest += [n for n, _, _ in part]
        cookie = part[-1][2]
    seen = [n for n, _, _ in first] + rest
    assert len(seen) == len(set(seen))  # nothing twice
    assert {f"f{i:02}" for i in range(19) if i % 3} <= set(seen)  # present throughout
    assert not {f"f{i:02}" for i in range(6, 20, 3)} & set(rest)  # removed before reached
    assert "new" in rest and "moved" in rest


def test_open_checks_access(s):
    f, sl = mkf(s, "f", mode=0o640, cred=ALICE), s.symlink(ROOT_INO, "sl", "f", ROOT)["ino"]
    s.open(f, os.O_RDWR, ALICE)
    s.open(f, os.O_RDONLY, CAROL)
    s.open(ROOT_INO, os.O_RDONLY | os.O_DIRECTORY, ROOT)
    for i, flags, cred, code in [
            (f, os.O_WRONLY, CAROL, errno.EACCES), (f, os.O_RDONLY | os.O_TRUNC, CAROL, errno.EACCES),
            (f, os.O_RDONLY, BOB, errno.EACCES), (f, os.O_ACCMODE, ALICE, errno.EINVAL),
            (f, -1, ALICE, errno.EINVAL), (ROOT_INO, os.O_WRONLY, ROOT, errno.EISDIR),
            (ROOT_INO, os.O_RDONLY | os.O_TRUNC, ROOT, errno.EISDIR),
            (sl, os.O_RDONLY, ROOT, errno.ELOOP), (999, os.O_RDONLY, ROOT, errno.ENOENT)]:
        err(code, s.open, i, flags, cred)
    ro = mkf(s, "ro", mode=0o444, cred=ALICE)
    err(errno.EACCES, s.open, ro, os.O_WRONLY, ALICE)
    s.open(ro, os.O_WRONLY | os.O_CREAT, ALICE, created=True)  # open(O_CREAT, 0444) may write
    assert s.nfile(f) == 2 and s.nfile(ro) == 1 and s.nfile(ROOT_INO) == 1
    err(errno.EBADF, s.release, sl)
    err(errno.EINVAL, s.nfile, 0)


def test_xattrs(s):
    f = s.create(ROOT_INO, "f", 0o644, ALICE)[0]
    ino = f["ino"]
    s.setxattr(ino, "user.a", b"1", ALICE)
    s.setxattr(ino, "user.b", bytearray(b"\0\xff"), ALICE, ms.XATTR_CREATE)
    assert s.getxattr(ino, "user.b", ALICE) == b"\0\xff"
    err(errno.EEXIST, s.setxattr, ino, "user.a", b"2", ALICE, ms.XATTR_CREATE)
    err(errno.ENODATA, s.setxattr, ino, "user.c", b"2", ALICE, ms.XATTR_REPLACE)
    s.setxattr(ino, "user.a", b"2", ALICE, ms.XATTR_REPLACE)
    assert s.getxattr(ino, "user.a", ALICE) == b"2"
    err(errno.EINVAL, s.setxattr, ino, "user.a", b"2", ALICE, 3)
    assert s.listxattr(ino, ALICE) == ["user.a", "user.b"]
    s.removexattr(ino, "user.a", ALICE)
    err(errno.ENODATA, s.removexattr, ino, "user.a", ALICE)
    err(errno.ENODATA, s.getxattr, ino, "user.a", ALICE)
    s.setxattr(ino, "user.empty", b"", ALICE)
    assert s.getxattr(ino, "user.empty", ALICE) == b""
    assert s.getattr(ino)["ctime_ns"] >= f["ctime_ns"]
    err(errno.ENOENT, s.listxattr, 999, ALICE)
    s.setattr(ino, ALICE, mode=0o666)
    for name, value, code in [("plain", b"v", errno.ENOTSUP), ("user.", b"v", errno.EINVAL),
                              ("", b"v", errno.EINVAL), ("user." + "x" * 251, b"v", errno.ERANGE),
                              ("user.big", b"x" * 65537, errno.E2BIG), ("user.s", "s", errno.EINVAL),
                              ("system.posix_acl_access", b"v", errno.ENOTSUP)]:
        err(code, s.setxattr, ino, name, value, ALICE)
    s.setxattr(ino, "user." + "x" * 250, b"x" * 65536, ALICE)  # the largest name and value
    err(errno.ENOTSUP, s.getxattr, ino, "os2.x", ALICE)
    err(errno.ENODATA, s.getxattr, ino, "system.posix_acl_access", ALICE)
    ino = mkf(s, "p", mode=0o640, cred=ALICE)
    s.setxattr(ino, "user.k", b"v", ALICE)
    assert s.getxattr(ino, "user.k", CAROL) == b"v"
    err(errno.EACCES, s.setxattr, ino, "user.k", b"w", CAROL)
    err(errno.EACCES, s.removexattr, ino, "user.k", CAROL)
    err(errno.EACCES, s.getxattr, ino, "user.k", BOB)
    err(errno.EPERM, s.setxattr, ino, "trusted.t", b"v", ALICE)
    s.setxattr(ino, "trusted.t", b"v", ROOT)
    err(errno.ENODATA, s.getxattr, ino, "trusted.t", ALICE)
    assert s.getxattr(ino, "trusted.t", ROOT) == b"v"
    assert s.listxattr(ino, ALICE) == ["user.k"]
    assert s.listxattr(ino, ROOT) == ["trusted.t", "user.k"]
    err(errno.EPERM, s.setxattr, ino, "security.s", b"v", BOB)
    s.setxattr(ino, "security.s", b"v", ALICE)
    assert s.getxattr(ino, "security.s", BOB) == b"v"
    sl = s.symlink(ROOT_INO, "sl", "f", ALICE)["ino"]
    err(errno.EPERM, s.setxattr, sl, "user.k", b"v", ALICE)
    err(errno.ENODATA, s.getxattr, sl, "user.k", ALICE)
    s.setxattr(ROOT_INO, "user.dir", b"ok", ROOT)


def test_child_ino_names_the_inode_a_change_will_touch(s):
    d = home(s)
    f = mkf(s, "f", d, cred=ALICE)
    sub = mkd(s, "sub", d, cred=ALICE)
    assert s.child_ino(d, "f") == f and s.child_ino(d, "sub") == sub
    assert s.child_ino(d, "none") == 0 and s.child_ino(12345, "f") == 0
    s.unlink(d, "f", ALICE)
    assert s.child_ino(d, "f") == 0
