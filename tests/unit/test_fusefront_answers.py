"""What the C front end's workers answer themselves (csrc/front/answers.c, writes.c), without
a kernel: leased directories' attributes until the session's end, with the timeout Python
would give, flushes of handles whose inode nothing was written to and of files kept by their
write delegation; and the mirror of fuse/leases.py that keeps the directories' attributes
there."""

from __future__ import annotations

import time

import pyfuse3
import pytest

ff = pytest.importorskip("pvfs._fusefront")

from pvfs.fuse.cfront import DirMirror
from pvfs.fuse.leases import LeaseCache


def dir_entry(ino: int, size: int = 4096, mtime_ns: int = 7) -> pyfuse3.EntryAttributes:
    e = pyfuse3.EntryAttributes()
    e.st_ino, e.st_mode, e.st_nlink, e.st_size, e.st_mtime_ns = ino, 0o40755, 2, size, mtime_ns
    return e


def test_a_kept_directory_is_answered_until_the_session_ends():
    s = ff.Session()
    s.keep_dir(5, dir_entry(5, size=8192, mtime_ns=123))
    assert s._getattr_here(5) is None  # no session yet
    s.lease_until(time.monotonic() + 30, 1.0)
    mode, size, mtime, timeout = s._getattr_here(5)
    assert (mode, size, mtime) == (0o40755, 8192, 123) and 29 < timeout <= 30
    assert s._getattr_here(6) is None
    s.keep_dir(5, dir_entry(5, size=12288))  # changed: the new attributes
    assert s._getattr_here(5)[1] == 12288
    s.lease_until(time.monotonic() - 1, 1.0)  # the session ended
    assert s._getattr_here(5) is None
    assert s.stats()["attrs_here"] == 2


def test_attr_timeout_zero_stays_zero_and_the_floor_holds():
    s = ff.Session()
    s.keep_dir(5, dir_entry(5))
    s.lease_until(time.monotonic() + 0.5, 0.0)
    assert s._getattr_here(5)[3] == 0.0
    s.lease_until(time.monotonic() + 0.5, 2.0)
    assert s._getattr_here(5)[3] == 2.0


def test_only_directories_are_kept():
    s = ff.Session()
    f = dir_entry(9)
    f.st_mode = 0o100644
    with pytest.raises(ValueError):
        s.keep_dir(9, f)
    with pytest.raises(ValueError):
        s.keep_dir(8, dir_entry(9))  # the entry names another inode


def test_the_directory_table_survives_growth_and_deletion():
    s = ff.Session()
    s.lease_until(time.monotonic() + 30, 1.0)
    inos = list(range(1, 5000, 7)) + [2**62]
    for i in inos:
        s.keep_dir(i, dir_entry(i, mtime_ns=i))
    assert s.stats()["dirs_here"] == len(inos)
    for i in inos[::2]:
        s.drop_dir(i)
    for n, i in enumerate(inos):
        got = s._getattr_here(i)
        assert (got is None) == (n % 2 == 0), i
        if got is not None:
            assert got[2] == i
    s.drop_dir(3)  # not there: nothing
    s.drop_dirs()
    assert s.stats()["dirs_here"] == 0 and s._getattr_here(inos[1]) is None


def test_a_writable_handles_flush_is_answered_here_while_its_inode_is_unwritten():
    s = ff.Session()
    s.quiet(10, True)   # writable, inode 3
    s.quiet(11)         # read-only, inode 3
    assert s._flush_here(10, 3) and s._flush_here(11, 3)
    s._written(3, True)  # a write or truncation of inode 3 passed (any handle)
    assert not s._flush_here(10, 3)
    assert s._flush_here(11, 3)  # a reader's close writes back nothing in either case
    s._written(3, False)  # the kernel forgot inode 3
    assert s._flush_here(10, 3)
    assert s.is_quiet(10, True) and not s._flush_here(10, 3)  # released
    assert not s._flush_here(12, 4)  # never marked
    assert s.stats()["quiet_flushes"] == 4


def test_a_file_kept_by_its_delegation_has_its_flushes_answered_here_while_marked():
    """Any handle's flush of a marked inode (fuse/delegations.py marks it), only while the
    session's end is ahead; a write or size change, a forget, an unmark drop the mark."""
    s = ff.Session()
    assert s.keep_file(7) and not s.keep_file(0)
    assert not s._flush_here(20, 7)  # no lease session yet
    s.lease_until(time.monotonic() + 30, 1.0)
    assert s._flush_here(20, 7) and s._flush_here(21, 7)  # any handle of it (not quiet)
    assert not s._flush_here(20, 8)
    s._written(7, True)  # a write came in: Python decides until it marks it again
    assert not s._flush_here(20, 7)
    s.keep_file(7)
    s._written(7, False)  # the kernel forgot it
    assert not s._flush_here(20, 7)
    s.keep_file(7)
    s.drop_file(7)
    assert not s._flush_here(20, 7)
    s.keep_file(7)
    s.lease_until(time.monotonic() - 1, 1.0)  # the session ended by time alone
    assert not s._flush_here(20, 7)
    s.lease_until(time.monotonic() + 30, 1.0)
    assert s._flush_here(20, 7)
    st = s.stats()
    assert st["kept_flushes"] == 3 and st["quiet_flushes"] == 0 and st["kept_files"] == 1
    s.quiet(22)  # a quiet handle is counted as such
    assert s._flush_here(22, 7) and s.stats()["quiet_flushes"] == 1


def test_the_kept_set_survives_growth_and_is_dropped_whole():
    s = ff.Session()
    s.lease_until(time.monotonic() + 30, 1.0)
    inos = list(range(3, 9000, 3)) + [2**63]
    for i in inos:
        assert s.keep_file(i)
    for i in inos[1::2]:
        s.drop_file(i)
    assert [s._flush_here(1, i) for i in inos] == [n % 2 == 0 for n in range(len(inos))]
    assert s.stats()["kept_files"] == (len(inos) + 1) // 2
    s.drop_files()
    assert s.stats()["kept_files"] == 0 and not s._flush_here(1, inos[0])


class _View:
    def entry(self, a: dict) -> pyfuse3.EntryAttributes:
        e = dir_entry(a["ino"], size=a["size"], mtime_ns=a["mtime_ns"])
        if a["type"] == "file":
            e.st_mode, e.st_nlink = 0o100644, 1
        return e


class _Opts:
    attr_timeout = 1.0


class _OpsStub:
    view, opts = _View(), _Opts()


def _dir(ino: int, size: int = 4096, mtime_ns: int = 1) -> dict:
    return {"ino": ino, "type": "dir", "size": size, "mtime_ns": mtime_ns}


def test_every_change_of_the_leased_table_reaches_the_c_side():
    s = ff.Session()
    leases = LeaseCache(client=type("C", (), {"on_fenced": None})(), on_recall=None)
    leases.attrs[2] = _dir(2)  # leased before the mirror: pushed when it starts
    leases.until = time.monotonic() + 30
    leases.mirror_to(DirMirror(s, _OpsStub()))
    assert s._getattr_here(2) is not None
    leases.attrs[4] = _dir(4, size=8192)
    leases.attrs[5] = {"ino": 5, "type": "file", "size": 1, "mtime_ns": 3}
    assert s._getattr_here(4)[1] == 8192 and s._getattr_here(5)[:3] == (0o100644, 1, 3)
    s._written(5, True)  # a write of the file queued: Python answers until it mirrors again
    assert s._getattr_here(5) is None
    leases.attrs[5] = {"ino": 5, "type": "file", "size": 9, "mtime_ns": 4}
    assert s._getattr_here(5)[1] == 9
    leases.changed_here(5)  # Python applied a write of it
    assert s._getattr_here(5) is None
    leases.attrs[5] = {"ino": 5, "type": "symlink", "size": 1, "mtime_ns": 3}
    assert s._getattr_here(5) is None  # (only directories and regular files)
    st = s.stats()
    assert st["file_attrs_here"] == 2 and st["attrs_here"] == 2
    leases.attrs[4] = _dir(4, size=12288)  # (a create in it, made here)
    assert s._getattr_here(4)[1] == 12288
    leases.attrs.pop(4, None)  # recalled
    assert s._getattr_here(4) is None
    leases.attrs[6] = _dir(6)
    del leases.attrs[6]
    assert s._getattr_here(6) is None
    leases.until = 0.0  # the session ended
    assert s._getattr_here(2) is None
    leases.until = time.monotonic() + 30
    leases.attrs.clear()
    assert s._getattr_here(2) is None and s.stats()["dirs_here"] == 0
    leases.attrs.update({7: _dir(7)})  # (every changing method goes through the mirror)
    assert s._getattr_here(7) is not None
    assert leases.attrs.popitem()[0] == 7 and s._getattr_here(7) is None
    leases.attrs[8] = _dir(8)
    leases.mirror_to(None)  # the front end closes: nothing answered there any more
    assert s._getattr_here(8) is None


def test_missing_names_of_complete_directories_are_answered_here():
    s = ff.Session()
    s.lease_until(time.monotonic() + 30, 1.0)
    s.dir_names(5, True, [(b"a", 10), (b"gone", 0)])
    assert s._missing_here(5, b"new") and s._missing_here(5, b"gone")
    assert not s._missing_here(5, b"a")  # there: Python answers with its attributes
    assert not s._missing_here(6, b"new")  # a directory not kept here
    for name in (b".", b"..", b"x" * 256):
        assert not s._missing_here(5, name)
    s.name_put(5, b"new", 11)  # created
    assert not s._missing_here(5, b"new")
    s.name_pop(5, b"a")  # no longer known: absent from a complete directory
    assert s._missing_here(5, b"a")
    s.dir_complete(5, False)  # not every name known any more
    assert not s._missing_here(5, b"a") and s._missing_here(5, b"gone")
    s.dir_forget(5)
    assert not s._missing_here(5, b"gone")
    s.dir_names(5, True, [])
    s.lease_until(time.monotonic() - 1, 1.0)  # the session ended
    assert not s._missing_here(5, b"new")
    s.lease_until(time.monotonic() + 30, 1.0)
    s.dirs_forget()
    assert not s._missing_here(5, b"new")
    with pytest.raises(TypeError):
        s.dir_names(7, True, [("not bytes", 1)])
    assert not s._missing_here(7, b"x")  # (a failed push leaves nothing half made)


def test_known_names_whose_attributes_are_kept_here_are_answered_here():
    s = ff.Session()
    s.create_settings(2.0, 1 << 48)  # (the mount's entry_timeout)
    s.lease_until(time.monotonic() + 30, 1.0)
    s.dir_names(5, False, [(b"f", 10), (b"d", 11), (b"gone", 0), (b"bare", 12)])
    f = dir_entry(10, size=3901)
    f.st_mode = 0o100644
    s.keep_file_attrs(10, f)
    s.keep_dir(11, dir_entry(11))
    entry, entry_timeout, attr_timeout = s._found_here(5, b"f")
    assert entry[0] == 10 and entry[4] == 0o100644 and entry[9] == 3901
    assert 29 < entry_timeout <= 30 and 29 < attr_timeout <= 30  # the session's time left
    assert s._found_here(5, b"d")[0][0] == 11
    assert s._found_here(5, b"bare") is None  # no attributes here: Python answers
    assert s._found_here(5, b"gone") is None and s._found_here(5, b"new") is None
    assert s._found_here(6, b"f") is None  # a directory not kept here
    s._written(10, True)  # a write of it queued: its size is Python's to say
    assert s._found_here(5, b"f") is None
    s.lease_until(time.monotonic() - 1, 1.0)  # the session ended
    assert s._found_here(5, b"d") is None
    s.lease_until(time.monotonic() + 30, 0.0)
    s.create_settings(0.0, 1 << 48)  # entry_timeout=0 and attr_timeout=0 stay 0
    assert s._found_here(5, b"d")[1:] == (0.0, 0.0)
    assert s.stats()["found_here"] == 3


def test_the_names_tables_survive_growth_and_deletion():
    s = ff.Session()
    s.lease_until(time.monotonic() + 30, 1.0)
    for d in range(1, 300):
        s.dir_names(d, True, [(b"seed", d)])
    names = [f"n{i}".encode() for i in range(3000)]
    for n in names:
        s.name_put(7, n, 1)
    for n in names[::2]:
        s.name_pop(7, n)
    for i, n in enumerate(names):
        assert s._missing_here(7, n) == (i % 2 == 0), n
    for d in range(1, 300, 2):
        s.dir_forget(d)
    for d in range(1, 300):
        assert s._missing_here(d, b"other") == (d % 2 == 0), d
        assert not s._missing_here(d, b"seed")


class _Mirror:
    """A LeaseMirror that records what it is told."""

    def __init__(self) -> None:
        self.calls: list = []

    def __getattr__(self, name):
        return lambda *args: self.calls.append(
            (name, *(dict(a) if isinstance(a, dict) else a for a in args)))


def test_every_change_of_a_leased_directorys_names_reaches_the_mirror():
    from pvfs.fuse.leasetables import _Dir

    leases = LeaseCache(client=type("C", (), {"on_fenced": None})(), on_recall=None)
    leases.dirs[3] = _Dir(complete=True)
    leases.dirs[3].put("a", 9)
    m = _Mirror()
    leases.mirror_to(m)
    assert ("dir", 3, True, {"a": 9}) in m.calls
    d = leases.dirs[3]
    d.put("b", 0)
    d.pop("a")
    d.complete = False
    leases.dirs[4] = _Dir()
    gone = leases.dirs.pop(4)
    gone.put("late", 1)  # a stale reference changes nothing mirrored
    del leases.dirs[3]
    leases.dirs.clear()
    assert m.calls[-7:] == [("name", 3, "b", 0), ("unname", 3, "a"), ("complete", 3, False),
                            ("dir", 4, False, {}), ("forget_dir", 4), ("forget_dir", 3),
                            ("forget_dirs",)]


def test_a_file_with_a_write_answered_in_c_and_not_applied_has_no_attributes_answered_here():
    # The stale size fsx's racing reader found (CI, stop 51): Python mirrored a file's
    # attributes between a write C answered (behind) and its application; a getattr then
    # answered here told the kernel the size from before a write(2) that had returned.
    s = ff.Session()
    s.create_settings(2.0, 1 << 48)
    s.lease_until(time.monotonic() + 30, 1.0)
    s.behind_limit(1 << 20)
    s.behind(3)
    s.dir_names(5, False, [(b"f", 10)])
    f = dir_entry(10, size=100)
    f.st_mode = 0o100644
    assert s._wrote(3, 10, 50)  # answered here, not applied
    s.keep_file_attrs(10, f)  # a mirror made before Python applied it
    assert s._getattr_here(10) is None and s._found_here(5, b"f") is None
    assert s._wrote(3, 11, 50)  # another file's, also pending
    s.behind_applied(50)  # the first applied; the second not: 10 still waits (no per-write
    s.keep_file_attrs(10, f)  # bookkeeping: the inodes go when every write is applied)
    assert s._getattr_here(10) is None
    s.behind_applied(50)
    s.keep_file_attrs(10, f)  # mirrored after: answered here again
    assert s._getattr_here(10)[1] == 100 and s._found_here(5, b"f")[0][0] == 10
    assert not s._wrote(4, 10, 50)  # an unmarked handle: Python applies it before answering
    assert s._getattr_here(10) is None  # (its queueing dropped the mirror, as before)
