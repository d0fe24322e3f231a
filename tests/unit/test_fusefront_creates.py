"""Creates the C front end's workers answer themselves (csrc/front/creates.c), without a
kernel: what they need (a directory lent, leased and complete, numbers), what they decline
(and leave to Python), what they reply, the record Python applies, and the directory's
attributes while records wait."""

from __future__ import annotations

import os
import time

import pyfuse3
import pytest

ff = pytest.importorskip("pvfs._fusefront")

from pvfs.fuse.handles import WORKER_FH
from pvfs.protocol.inodes import dir_size

PARENT = 5
UID, GID = 1000, 1000


def dir_entry(ino: int = PARENT, mode: int = 0o40755, uid: int = UID, gid: int = GID,
              size: int = 4096) -> pyfuse3.EntryAttributes:
    e = pyfuse3.EntryAttributes()
    e.st_ino, e.st_mode, e.st_nlink, e.st_size = ino, mode, 2, size
    e.st_uid, e.st_gid, e.st_mtime_ns, e.st_ctime_ns = uid, gid, 7, 7
    e.st_blocks = (size + 511) // 512
    return e


def ready(mode: int = 0o40755, names=(), numbers=(101, 102, 103)) -> ff.Session:
    """A bridge whose workers may create in PARENT: leased, complete, lent numbers."""
    s = ff.Session()
    s.keep_dir(PARENT, dir_entry(mode=mode))
    s.dir_names(PARENT, True, list(names))
    s.lease_until(time.monotonic() + 30, 1.0)
    s.create_settings(1.0, WORKER_FH)
    s.create_dir(PARENT, True)
    s.lend_numbers(list(numbers))
    return s


def create(s, name=b"new", mode=0o100644, flags=os.O_WRONLY | os.O_CREAT, uid=UID, gid=GID):
    return s._create_here(PARENT, name, mode, flags, uid, gid)


def test_a_create_is_answered_with_the_last_number_and_a_worker_handle():
    s = ready()
    t0 = time.time_ns()
    entry, fh, entry_timeout, attr_timeout = create(s)
    ino, _gen, _et, _at, mode, nlink, uid, gid, _rdev, size, blksize, blocks, at, mt, ct = entry
    assert ino == 103 and fh == WORKER_FH
    assert (mode, nlink, uid, gid, size, blocks, blksize) == (0o100644, 1, UID, GID, 0, 0, 1 << 20)
    assert t0 <= mt <= time.time_ns() and at == mt == ct
    assert 29 < entry_timeout <= 30 and 29 < attr_timeout <= 30  # the session's remaining time
    assert create(s, b"second")[1] == WORKER_FH + 1
    st = s.stats()
    assert st["created_here"] == 2 and st["numbers_here"] == 1
    assert s._missing_here(PARENT, b"new") is False  # the name is there now
    assert s.is_quiet(WORKER_FH)  # its flush needs nothing until a write names the inode


def test_the_record_carries_what_python_applies():
    s = ready()
    create(s, b"rec", mode=0o100640)
    reqs, _ = s.drain()
    (r,) = reqs
    assert r.op == ff.OP_CREATED and r.answered  # never replied to by Python
    parent, name, mode, flags, ino, fh, now, perm, gid = r.args
    assert (parent, name, ino, fh, perm, gid) == (PARENT, b"rec", 103, WORKER_FH, 0o640, GID)
    assert mode == 0o100640 and flags & os.O_ACCMODE == os.O_WRONLY and now > 0
    assert (r.uid, r.gid) == (UID, GID)


def test_the_directory_gets_new_times_and_size_and_keeps_them_until_python_catches_up():
    s = ready(names=[(f"n{i}".encode(), 200 + i) for i in range(125)] + [(b"gone", 0)])
    entry, *_ = create(s)
    _mode, size, mtime, _timeout = s._getattr_here(PARENT)
    assert size == dir_size(126) > dir_size(125) and mtime == entry[13]
    s.keep_dir(PARENT, dir_entry())  # Python's older state, mirrored meanwhile: not taken
    assert s._getattr_here(PARENT)[1] == dir_size(126)
    newer = dir_entry(size=dir_size(126))
    newer.st_mtime_ns = newer.st_ctime_ns = entry[13]
    s.created_done(PARENT, newer)  # applied: Python's again, and equal
    assert s.stats()["created_mismatch"] == 0
    s.keep_dir(PARENT, dir_entry(size=8192))
    assert s._getattr_here(PARENT)[1] == 8192


def test_a_difference_when_python_catches_up_is_counted_and_pythons_kept():
    s = ready()
    create(s)
    s.created_done(PARENT, dir_entry(size=12288))
    assert s.stats()["created_mismatch"] == 1
    assert s._getattr_here(PARENT)[1] == 12288


@pytest.mark.parametrize("why", ["no numbers", "dir off", "not leased", "name there",
                                 "incomplete", "session over", "no attributes"])
def test_a_create_the_workers_cannot_decide_goes_to_python(why):
    s = ready(names=[(b"taken", 42)], numbers=() if why == "no numbers" else (101,))
    if why == "dir off":
        s.create_dir(PARENT, False)
    elif why == "not leased":
        s.dir_forget(PARENT)
    elif why == "incomplete":
        s.dir_complete(PARENT, False)
    elif why == "session over":
        s.lease_until(time.monotonic() - 1, 1.0)
    elif why == "no attributes":
        s.drop_dir(PARENT)
    assert create(s, b"taken" if why == "name there" else b"new") is None
    assert s.drain() == ([], []) and s.stats()["created_here"] == 0


@pytest.mark.parametrize("name", [b"caf\xc3\xa9", b"\xff", b".", b"..", b"x" * 256])
def test_names_python_must_judge_go_to_python(name):
    assert create(ready(), name) is None


def test_sync_opens_go_to_python():
    s = ready()
    assert create(s, flags=os.O_WRONLY | os.O_CREAT | os.O_SYNC) is None
    assert create(s, flags=os.O_WRONLY | os.O_CREAT | os.O_DSYNC) is None
    assert create(s) is not None


def test_callers_allowed_only_through_another_group_go_to_python():
    s = ready(mode=0o40775)  # group-writable, group GID
    assert create(s, uid=2000, gid=3000) is None  # neither owner nor the group: "other" bits
    assert create(s, uid=2000, gid=GID) is not None  # the directory's group
    assert create(s, b"root", uid=0, gid=0) is not None


def test_a_setgid_directory_hands_its_group_down():
    s = ready(mode=0o42777)
    entry, *_ = create(s, uid=2000, gid=3000)
    assert entry[7] == GID  # the directory's group
    # S_ISGID asked by a caller outside that group: Python decides (clears it or not)
    assert create(s, b"sgid", mode=0o102755, uid=2000, gid=3000) is None


def test_lent_numbers_come_back_and_a_zero_is_refused():
    s = ready(numbers=(7, 8, 9))
    create(s)
    assert s.numbers_left() == 2
    assert sorted(s.take_numbers()) == [7, 8]
    assert s.numbers_left() == 0 and create(s, b"more") is None
    with pytest.raises(ValueError):
        s.lend_numbers([0])


def test_turning_every_directory_off():
    s = ready()
    s.create_dirs_off()
    assert create(s) is None


def test_a_file_made_here_has_its_capability_probes_answered_and_writes_behind_if_set():
    # create_settings' caps_ttl and behind: a file a worker made has no extended attribute,
    # and its writable handle's writes are write-behind (fuse/cfront.py says when).
    s = ready()
    s.create_settings(1.0, WORKER_FH, 5.0, True)
    s.behind_limit(1 << 20)
    entry, fh, *_ = create(s, b"w")
    ino = entry[0]
    assert s._caps_here(ino)  # the kernel's probe before the first write(2): answered
    assert s.stats()["behind_handles"] == 1 and s.behind_drop(fh)  # marked, and only once
    assert not s.behind_drop(fh)
    entry, rfh, *_ = create(s, b"r", flags=os.O_RDONLY | os.O_CREAT)
    assert s._caps_here(entry[0]) and not s.behind_drop(rfh)  # read-only: nothing to write


def test_without_the_settings_a_file_made_here_leaves_probes_and_writes_to_python():
    s = ready()  # create_settings(entry_timeout, first_fh): caps_ttl 0, behind off
    entry, fh, *_ = create(s, b"w")
    assert not s._caps_here(entry[0])
    assert s.stats()["behind_handles"] == 0 and not s.behind_drop(fh)


def test_create_settings_refuses_a_negative_capability_time():
    with pytest.raises(ValueError):
        ff.Session().create_settings(1.0, WORKER_FH, -1.0, False)
