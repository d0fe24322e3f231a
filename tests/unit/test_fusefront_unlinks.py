"""Unlinks the C front end's workers answer themselves (csrc/front/unlinks.c), without a
kernel: only of a file Python said was closed and clean when a release of it ended, in a
directory the workers create in; what takes that away (an open or a setattr arriving, an
open behind the release, an unlink done); the record Python applies; the directory's
attributes while records wait."""

from __future__ import annotations

import time

import pytest

ff = pytest.importorskip("pvfs._fusefront")

from test_fusefront_creates import GID, PARENT, UID, dir_entry, ready

from pvfs.protocol.inodes import dir_size

FILE = 300


def unlinkable(s, ino: int = FILE) -> bool:
    """The kernel releases ``ino``'s last handle and Python finds it closed and clean."""
    s._kernel_sends("release", ino)
    return s.release_done(ino, True)


def unlink(s, name=b"f", uid=UID, gid=GID):
    return s._unlink_here(PARENT, name, uid, gid)


def with_file(**kw):
    s = ready(names=[(b"f", FILE), (b"other", 301)], **kw)
    return s


def test_an_unlink_of_a_closed_clean_file_is_answered_and_its_record_queued():
    s = with_file()
    assert unlinkable(s)
    t0 = time.time_ns()
    assert unlink(s)
    (r,), _ = s.drain()
    assert r.op == ff.OP_UNLINKED and r.answered  # never replied to by Python
    parent, name, ino, now = r.args
    assert (parent, name, ino) == (PARENT, b"f", FILE) and t0 <= now <= time.time_ns()
    assert (r.uid, r.gid) == (UID, GID)
    assert s._missing_here(PARENT, b"f") is True  # the name is gone here at once
    st = s.stats()
    assert st["unlinked_here"] == 1 and st["unlinkable"] == 0
    assert not unlink(s)  # once


def test_the_directory_gets_new_times_and_size_until_python_catches_up():
    s = ready(names=[(f"n{i}".encode(), 200 + i) for i in range(125)] + [(b"f", FILE)])
    assert s._getattr_here(PARENT) is not None
    unlinkable(s)
    assert unlink(s)
    (r,), _ = s.drain()
    _mode, size, mtime, _t = s._getattr_here(PARENT)
    assert size == dir_size(125) < dir_size(126) and mtime == r.args[3]
    s.keep_dir(PARENT, dir_entry(size=12288))  # Python's older state meanwhile: not taken
    assert s._getattr_here(PARENT)[1] == dir_size(125)
    newer = dir_entry(size=dir_size(125))
    newer.st_mtime_ns = newer.st_ctime_ns = r.args[3]
    s.created_done(PARENT, newer)
    assert s.stats()["created_mismatch"] == 0


def test_the_files_attributes_kept_here_go_with_it():
    s = with_file()
    f = dir_entry(ino=FILE, mode=0o100644, size=10)
    s.keep_file_attrs(FILE, f)
    assert s._getattr_here(FILE) is not None
    unlinkable(s)
    assert unlink(s)
    assert s._getattr_here(FILE) is None


def test_a_file_python_finds_open_or_dirty_is_not_unlinked_here():
    s = with_file()
    s._kernel_sends("release", FILE)
    assert s.release_done(FILE, False) is False
    assert not unlink(s)
    assert s.stats()["unlinked_here"] == 0


@pytest.mark.parametrize("op", ["open", "setattr"])
def test_an_open_or_setattr_arriving_takes_the_mark_away(op):
    s = with_file()
    unlinkable(s)
    s._kernel_sends(op, FILE)
    assert not unlink(s)


def test_an_open_behind_the_release_leaves_the_file_unmarked():
    """The open arrived after the release did and before Python finished the release: the
    file may be open again when Python says "closed"."""
    s = with_file()
    s._kernel_sends("release", FILE)
    s._kernel_sends("open", FILE)
    assert s.release_done(FILE, True) is False
    assert not unlink(s)


def test_a_release_python_did_not_see_arrive_marks_nothing():
    s = with_file()
    assert s.release_done(FILE, True) is False
    assert not unlink(s)


@pytest.mark.parametrize("why", ["dir off", "session over", "incomplete", "no attributes",
                                 "unknown name", "odd name"])
def test_an_unlink_the_workers_cannot_decide_goes_to_python(why):
    s = with_file()
    unlinkable(s)
    name = b"f"
    if why == "dir off":
        s.create_dir(PARENT, False)
    elif why == "session over":
        s.lease_until(time.monotonic() - 1, 1.0)
    elif why == "incomplete":
        s.dir_complete(PARENT, False)
    elif why == "no attributes":
        s.drop_dir(PARENT)
    elif why == "unknown name":
        name = b"nope"
    else:
        s.name_put(PARENT, "é".encode(), FILE)
        name = "é".encode()
    assert not unlink(s, name)
    assert s.stats()["unlinked_here"] == 0
