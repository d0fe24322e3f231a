"""Write delegations (``-o write_delegations``: fuse/delegations.py, daemons/mgr/leases.py).

A file a leasing mount creates ahead is written by it alone until it writes the data back:
its close writes nothing back. Nobody else may see the file without its data: another
mount's read or stat, a native client's stat or open, must find every byte written before
the close; an unlink before the write-back writes nothing and leaves nothing behind
(``fsck`` clean); ``fsync`` and the flusher end the delegation; this mount's own truncate
and rename over the file write it back first."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_mount_ahead import _fsck_clean, _leasing
from test_mount_support import Mount, needs_fuse

sys.path.insert(0, str(Path(__file__).parent.parent))
from conftest import start_cluster

import pvfs
from pvfs.cluster.launch import down

pytestmark = [pytest.mark.fuse, needs_fuse]

DATA = bytes(range(256)) * 15 + b"tail"  # 3,844 bytes, like mdtest's hard files


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = start_cluster(tmp_path_factory.mktemp("deleg"))
    try:
        yield c
    finally:
        down(c.config)


@pytest.fixture
def nodes(cluster, tmp_path):
    # A's flusher waits a minute: what others see, they see by the recall
    a = Mount(cluster.config_path, tmp_path / "a", "leases,dirty_age=60")
    b = Mount(cluster.config_path, tmp_path / "b", "leases")
    with a, b:
        yield _leasing(a), _leasing(b)


def _deleg(m: Mount) -> dict:
    return m.stats()["write_delegations"]


def _fresh_dir(m: Mount, name: str) -> Path:
    d = m.path / name
    d.mkdir()
    (d / "warm").touch()  # the first create asks for the delegation of the directory
    return d


def _kept(m: Mount, d: Path, names: list[str]) -> None:
    for n in names:
        (d / n).write_bytes(DATA)
    st = _deleg(m)
    assert st["kept_closes"] >= len(names) and st["held"] >= len(names), st


def test_a_close_keeps_the_data_and_another_node_sees_them_at_once(nodes):
    a, b = nodes
    d = _fresh_dir(a, "seen")
    before = a.stats()["flushed_bytes"]
    _kept(a, d, ["f", "g"])
    assert a.stats()["flushed_bytes"] == before  # the closes wrote nothing back
    assert (d / "f").stat().st_size == len(DATA)  # this node's stat: its own data
    assert (b.path / "seen" / "f").read_bytes() == DATA  # the other's read recalls A
    assert os.stat(b.path / "seen" / "g").st_size == len(DATA)
    st = _deleg(a)
    assert st["recalled"] >= 2 and st["written_back"] >= 2, st


def test_a_native_client_sees_the_data_by_path_stat_and_open(nodes, cluster):
    a, _b = nodes
    d = _fresh_dir(a, "native")
    _kept(a, d, ["f", "g"])
    with pvfs.connect(cluster.config_path) as fs:
        assert fs.stat("/native/f").st_size == len(DATA)
        with fs.open("/native/g", "rb") as f:
            assert f.read() == DATA


def test_files_removed_before_their_write_back_write_nothing(nodes, cluster):
    a, b = nodes
    d = _fresh_dir(a, "gone")
    before = a.stats()["flushed_bytes"]
    names = [f"f{i}" for i in range(20)]
    _kept(a, d, names)
    for n in names:
        (d / n).unlink()
    fd = os.open(d / "open", os.O_CREAT | os.O_WRONLY, 0o644)  # removed while open
    os.write(fd, DATA)
    (d / "open").unlink()
    os.close(fd)
    assert a.stats()["flushed_bytes"] == before
    assert _deleg(a)["dropped"] >= 21, _deleg(a)
    assert sorted(os.listdir(b.path / "gone")) == ["warm"]
    _fsck_clean(cluster)  # no stripe file left behind


def test_fsync_writes_back_and_survives_a_killed_mount(cluster, tmp_path):
    a = Mount(cluster.config_path, tmp_path / "k", "leases,dirty_age=60")
    a.start()
    _leasing(a)
    try:
        d = _fresh_dir(a, "synced")
        with open(d / "f", "wb") as f:
            f.write(DATA)
            f.flush()
            os.fsync(f.fileno())
        assert _deleg(a)["written_back"] == 1 and _deleg(a)["held"] == 1  # ("warm")
        os.kill(a.proc.pid, signal.SIGKILL)
        a.proc.wait(10)
    finally:
        a.stop()
    with pvfs.connect(cluster.config_path) as fs, fs.open("/synced/f", "rb") as f:
        assert f.read() == DATA
    _fsck_clean(cluster)


def test_the_flusher_writes_delegated_files_back_within_dirty_age(cluster, tmp_path):
    a = Mount(cluster.config_path, tmp_path / "age", "leases,dirty_age=0.5")
    with a:
        _leasing(a)
        d = _fresh_dir(a, "aged")
        _kept(a, d, ["f"])
        deadline = time.monotonic() + 10
        while _deleg(a)["held"] > 1 or _deleg(a)["flushing"]:  # ("warm" has no data)
            assert time.monotonic() < deadline, _deleg(a)
            time.sleep(0.1)
        assert _deleg(a)["recalled"] == 0 and _deleg(a)["written_back"] == 1
        with pvfs.connect(cluster.config_path) as fs:
            assert fs.meta("status")["leases"]["writers"] == 1  # ("warm")
            with fs.open("/aged/f", "rb") as f:
                assert f.read() == DATA
        assert _deleg(a)["recalled"] == 0  # nothing was left to recall


def test_files_written_back_by_their_writer_are_fetched_once_and_stay_cached(cluster,
                                                                             tmp_path):
    """The manager fetches a delegated file's size once its writer says ``written``, not
    also on the I/O daemons' reports of the same write-back (server.op_sizes_changed): a
    fetch per file, and afterwards every file's size cached, so a stat elsewhere asks no
    I/O daemon."""
    a = Mount(cluster.config_path, tmp_path / "once", "leases,dirty_age=0.5")
    with a, pvfs.connect(cluster.config_path) as fs:
        _leasing(a)
        d = _fresh_dir(a, "once")
        names = [f"f{i}" for i in range(40)]
        before = fs.meta("status")["size_cache"]
        _kept(a, d, names)
        deadline = time.monotonic() + 20
        while _deleg(a)["held"] > 1 or _deleg(a)["flushing"]:  # ("warm" has no data)
            assert time.monotonic() < deadline, _deleg(a)
            time.sleep(0.1)
        time.sleep(0.5)  # (the fetch follows ``written`` by the refetcher's delay)
        after = fs.meta("status")["size_cache"]
        assert after["refetched"] - before["refetched"] <= len(names) + 4, (before, after)
        misses = after["misses"]
        for n in names:
            assert fs.stat(f"/once/{n}").st_size == len(DATA)
        assert fs.meta("status")["size_cache"]["misses"] == misses  # all cached


def test_a_truncate_writes_a_delegated_file_back_and_a_rename_over_one_drops_it(nodes,
                                                                                  cluster):
    a, b = nodes
    d = _fresh_dir(a, "changed")
    _kept(a, d, ["cut", "old", "new"])
    os.truncate(d / "cut", 100)
    assert (b.path / "changed" / "cut").read_bytes() == DATA[:100]
    (d / "new").write_bytes(b"second")
    dropped, flushed = _deleg(a)["dropped"], a.stats()["flushed_bytes"]
    (d / "new").rename(d / "old")  # git's lock files, editors: the old data never leave
    assert _deleg(a)["dropped"] == dropped + 1 and a.stats()["flushed_bytes"] == flushed
    assert (b.path / "changed" / "old").read_bytes() == b"second"
    assert sorted(os.listdir(b.path / "changed")) == ["cut", "old", "warm"]
    _fsck_clean(cluster)


def test_write_delegations_can_be_switched_off(cluster, tmp_path):
    m = Mount(cluster.config_path, tmp_path / "off", "leases,write_delegations=0")
    with m:
        _leasing(m)
        d = _fresh_dir(m, "off")
        (d / "f").write_bytes(DATA)
        assert "write_delegations" not in m.stats()
        assert m.stats()["flushed_bytes"] >= len(DATA)  # written back at close


def test_an_explicit_mtime_outlives_the_write_back(nodes, cluster):
    """``tar x``, ``cp -p``, ``rsync -t`` set a file's times after writing it. None of its
    data left yet: the times answer at once and go with the data, whose stripe files get
    the mtime after them (else their arrival would move it on)."""
    a, b = nodes
    d = _fresh_dir(a, "times")
    _kept(a, d, ["f", "g"])
    (d / "empty").touch()  # created here, never written: its stripe files all empty
    before = _deleg(a)
    for n in ("f", "g", "empty"):
        os.utime(d / n, ns=(1_000_000_000_000_000_000, 1_500_000_000_000_000_000))
    st = _deleg(a)
    assert st["written_back"] == before["written_back"], st  # nothing written back yet
    assert st["times_later"] == before["times_later"] + 3, st
    assert os.stat(d / "f").st_mtime_ns == 1_500_000_000_000_000_000
    for n, size in (("f", len(DATA)), ("empty", 0)):  # the other recalls: data, then mtime
        st = os.stat(b.path / "times" / n)
        assert (st.st_mtime_ns, st.st_size) == (1_500_000_000_000_000_000, size)
    with pvfs.connect(cluster.config_path) as fs:
        st = fs.stat("/times/g")
        assert (st.st_mtime_ns, st.st_size) == (1_500_000_000_000_000_000, len(DATA))
    assert os.stat(d / "f").st_mtime_ns == 1_500_000_000_000_000_000
    with open(d / "g", "ab") as f:  # a later write moves it on, as anywhere
        f.write(b"more")
    assert os.stat(b.path / "times" / "g").st_mtime_ns > 1_500_000_000_000_000_000


@pytest.mark.parametrize("how", ["flusher", "unmount", "fsync-kill"])
def test_explicit_times_outlast_the_flusher_and_the_unmount(cluster, tmp_path, how):
    age = "0.5" if how == "flusher" else "60"
    a = Mount(cluster.config_path, tmp_path / "t", f"leases,dirty_age={age}")
    with a:
        _leasing(a)
        d = _fresh_dir(a, f"times-{how}")
        _kept(a, d, ["f"])
        os.utime(d / "f", ns=(1_000_000_000_000_000_000, 1_500_000_000_000_000_000))
        assert _deleg(a)["times_later"] == 1
        if how == "flusher":
            deadline = time.monotonic() + 10
            while _deleg(a)["written_back"] < 1:
                assert time.monotonic() < deadline, _deleg(a)
                time.sleep(0.1)
            time.sleep(0.3)
        if how == "fsync-kill":  # fsync returns once the data and their mtime are set
            fd = os.open(d / "f", os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            os.kill(a.proc.pid, signal.SIGKILL)
            a.proc.wait(10)
    with pvfs.connect(cluster.config_path) as fs:
        st = fs.stat(f"/times-{how}/f")
        assert (st.st_mtime_ns, st.st_size) == (1_500_000_000_000_000_000, len(DATA))


def test_times_set_through_a_handle_with_unwritten_data_stay(nodes, cluster):
    """tar x sets a file's times through its handle before it closes it: the data still in
    the cache (a large file's write-behind) go first, or their arrival moves the mtime on."""
    a, b = nodes
    d = _fresh_dir(a, "handle-times")
    for size in (3000, 2 << 20):
        fd = os.open(d / f"f{size}", os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644)
        try:
            for off in range(0, size, 1 << 20):
                os.write(fd, b"x" * min(1 << 20, size - off))
            os.utime(fd, ns=(1_000_000_000_000_000_000, 1_500_000_000_000_000_000))
        finally:
            os.close(fd)
    with pvfs.connect(cluster.config_path) as fs:
        for size in (3000, 2 << 20):
            for st in (os.stat(d / f"f{size}"), os.stat(b.path / "handle-times" / f"f{size}"),
                       fs.stat(f"/handle-times/f{size}")):
                assert (st.st_size, st.st_mtime_ns) == (size, 1_500_000_000_000_000_000)


def test_mode_owner_and_times_of_a_new_file_are_set_ahead_as_the_manager_sets_them(nodes,
                                                                                   cluster):
    """``tar x`` sets each new file's owner, mode and times through its handle: answered by
    the mount (its create and data are its alone), sent after the create. What the mount
    showed is what the manager made: another node and a native client see the same."""
    a, b = nodes
    d = _fresh_dir(a, "set-ahead")
    before = a.stats()["creates_ahead"]["set_ahead"]
    cases = {"tar": (0o644, 0, 0), "suid": (0o4755, 65534, 65534), "sgid": (0o2775, 0, 100)}
    shown = {}
    for n, (mode, uid, gid) in cases.items():
        fd = os.open(d / n, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o600)
        try:
            os.write(fd, DATA)
            os.utime(fd, ns=(1_000_000_000_000_000_000, 1_500_000_000_000_000_000))
            os.fchmod(fd, mode)
            os.fchown(fd, uid, gid)  # (after the mode: a chown drops setuid)
        finally:
            os.close(fd)
        st = os.stat(d / n)
        shown[n] = (st.st_mode, st.st_uid, st.st_gid, st.st_atime_ns, st.st_mtime_ns,
                    st.st_size)
    assert a.stats()["creates_ahead"]["set_ahead"] == before + 3 * len(cases)
    assert shown["suid"][0] & 0o7777 == 0o755  # kill-suid on chown, as the manager does
    assert shown["tar"][3:] == (1_000_000_000_000_000_000, 1_500_000_000_000_000_000,
                                len(DATA))
    for n in cases:  # the other's stat recalls a: creates, changes, data, then the mtime
        st = os.stat(b.path / "set-ahead" / n)
        assert (st.st_mode, st.st_uid, st.st_gid, st.st_atime_ns, st.st_mtime_ns,
                st.st_size) == shown[n], n
        assert (b.path / "set-ahead" / n).read_bytes() == DATA
    with pvfs.connect(cluster.config_path) as fs:
        st = fs.stat("/set-ahead/sgid")
        assert (st.st_mode, st.st_uid, st.st_gid, st.st_mtime_ns) == shown["sgid"][:3] + (
            1_500_000_000_000_000_000,)
    assert a.stats()["creates_ahead"]["failed_sets"] == 0
    _fsck_clean(cluster)


def test_a_directory_created_in_ahead_has_its_mode_owner_and_times_set_ahead(nodes):
    """``tar x`` sets each directory's times, owner and mode once its files are out: the
    mount creates in it alone, so these are answered by it and sent after the creates."""
    a, b = nodes
    d = _fresh_dir(a, "dir-ahead")
    (d / "f").write_bytes(DATA)  # (d is a directory this mount creates in now)
    before = a.stats()["creates_ahead"]["set_ahead"]
    os.utime(d, ns=(1_000_000_000_000_000_000, 1_200_000_000_000_000_000))
    os.chown(d, 65534, 65534)
    os.chmod(d, 0o2750)
    assert a.stats()["creates_ahead"]["set_ahead"] == before + 3
    st = os.stat(d)
    shown = (st.st_mode, st.st_uid, st.st_gid, st.st_atime_ns, st.st_mtime_ns)
    assert shown[1:] == (65534, 65534, 1_000_000_000_000_000_000, 1_200_000_000_000_000_000)
    st = os.stat(b.path / "dir-ahead")  # recalls a: its creates and changes go first
    assert (st.st_mode, st.st_uid, st.st_gid, st.st_atime_ns, st.st_mtime_ns) == shown
    assert sorted(os.listdir(b.path / "dir-ahead")) == ["f", "warm"]


def test_changes_made_ahead_to_a_file_removed_before_its_create_was_sent_go_with_it(
        cluster, tmp_path):
    """A file made, changed and removed before its create left: none of it is sent, and
    its number, given to the next file, carries nothing of the first (pjdfstest found the
    changes sent alone)."""
    a = Mount(cluster.config_path, tmp_path / "q", "leases,ahead_delay=0.5")
    with a:
        _leasing(a)
        d = _fresh_dir(a, "cancelled")
        time.sleep(0.6)  # ("warm" sent)
        for n in ("f", "g"):
            fd = os.open(d / n, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o600)
            os.fchmod(fd, 0o640 if n == "f" else 0o604)
            os.close(fd)
            if n == "f":
                (d / n).unlink()
        ahead = a.stats()["creates_ahead"]
        assert ahead["cancelled"] == 1 and ahead["set_ahead"] == 2, ahead
        with pvfs.connect(cluster.config_path) as fs:
            assert fs.stat("/cancelled/g").st_mode & 0o7777 == 0o604
            assert sorted(fs.listdir("/cancelled")) == ["g", "warm"]
        assert a.stats()["creates_ahead"]["failed_sets"] == 0
