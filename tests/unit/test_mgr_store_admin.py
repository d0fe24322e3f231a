"""The metadata store's layouts (stripes of files and directory defaults) and its
administration side (``store.admin``: ``counts``, ``file_inodes``, ``remove_inode``; statfs,
fsck, the reaper).
The store's namespace, permissions and xattrs are in ``test_mgr_store.py``."""

from __future__ import annotations

import errno

import pytest
from test_mgr_store import (  # tests/unit is on sys.path (rootdir-less layout)
    ALICE,
    BOB,
    ROOT,
    err,
    mkd,
    mkf,
    names,
    new_store,
)

from pvfs.daemons.mgr.store import ROOT_INO
from pvfs.layout.stripe import Stripe


@pytest.fixture
def s(tmp_path):
    store = new_store(str(tmp_path / "meta.sqlite"))
    yield store
    store.close()


def test_stripes(s):
    f = mkf(s, "f")
    assert s.getattr(f)["stripe"] == [0, 4, 65536] and s.layouts.of(f) == Stripe(0, 4, 65536)
    d = mkd(s, "d", cred=ALICE)
    assert s.layouts.of(d) is None
    assert s.layouts.set_dir(d, Stripe(2, -1, 4096), ALICE)["stripe"] == [2, -1, 4096]
    assert s.getattr(mkf(s, "g", d))["stripe"] == [2, 4, 4096]  # pcount -1 resolved
    h, _ = s.create(d, "h", 0o644, ALICE, stripe=Stripe(3, 1, 1 << 20))
    assert h["stripe"] == [3, 1, 1 << 20]
    sub = mkd(s, "sub", d)
    assert s.getattr(sub)["stripe"] == [2, -1, 4096]  # subdirectories inherit the default
    assert s.getattr(mkf(s, "k", sub))["stripe"] == [2, 4, 4096]
    s.layouts.set_dir(d, None, ALICE)
    assert s.getattr(mkf(s, "m", d))["stripe"] == [0, 4, 65536]
    assert s.layouts.of(s.symlink(ROOT_INO, "sl", "f", ROOT)["ino"]) is None
    f, one = mkf(s, "f2", mode=0o666, cred=ALICE), Stripe(0, 1, 8192)
    a = s.layouts.set_file(f, Stripe(1, -1, 8192), ALICE, size_is_zero=True)
    assert a["stripe"] == [1, 4, 8192] and s.layouts.of(f) == Stripe(1, 4, 8192)
    sl = s.symlink(ROOT_INO, "sl2", "f", ROOT)["ino"]
    for i, stripe, cred, empty, code in [
            (f, one, ALICE, False, errno.EBUSY), (f, one, BOB, True, errno.EPERM),
            (ROOT_INO, one, ROOT, True, errno.EISDIR), (sl, one, ROOT, True, errno.EINVAL),
            (f, None, ALICE, True, errno.EINVAL), (f, one, ALICE, 0, errno.EINVAL),
            (f, Stripe(0, 9, 8192), ALICE, True, errno.EINVAL)]:
        err(code, s.layouts.set_file, i, stripe, cred, size_is_zero=empty)
    d = mkd(s, "d2", mode=0o777, cred=ALICE)
    for bad in (Stripe(4, 1, 4096), Stripe(0, 5, 4096), Stripe(0, 1, 100), [0, 1, 4096]):
        err(errno.EINVAL, s.create, d, "x", 0o644, ALICE, stripe=bad)
        err(errno.EINVAL, s.layouts.set_dir, d, bad, ALICE)
    err(errno.EPERM, s.layouts.set_dir, d, Stripe(0, 1, 4096), BOB)
    err(errno.ENOTDIR, s.layouts.set_dir, mkf(s, "g", d), Stripe(0, 1, 4096), ALICE)
    assert names(s, d) == [".", "..", "g"]


def test_counts_file_inodes_and_remove_inode(s):
    d = mkd(s, "d")
    files = [mkf(s, f"f{i}", d) for i in range(600)]
    s.symlink(ROOT_INO, "sl", "d", ROOT)
    s.link(files[0], ROOT_INO, "also", ROOT)
    assert s.admin.counts() == {"files": 600, "dirs": 2, "symlinks": 1, "special": 0,
                              "inodes": 603}
    seen, doomed = [], set(files[1::2])
    for a in s.admin.file_inodes():  # removal while iterating is allowed
        seen.append(a["ino"])
        if a["ino"] in doomed:
            s.admin.remove_inode(a["ino"])
    assert seen == files
    assert s.admin.counts()["files"] == 300
    assert s.getattr(d)["size"] == 4096 * (1 + 302 // 128)
    for i, code in [(files[1], errno.ENOENT), (ROOT_INO, errno.EBUSY), (d, errno.ENOTEMPTY)]:
        err(code, s.admin.remove_inode, i)
    s.admin.remove_inode(files[0])  # both names go
    assert "also" not in names(s, ROOT_INO) and "f0" not in names(s, d)
    s.admin.remove_inode(mkd(s, "e"))
    assert s.getattr(ROOT_INO)["nlink"] == 3

