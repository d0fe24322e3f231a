"""The C front end and write delegations (``-o frontend=c``, fuse/delegations.py): the flush
of each close(2) of a small file the mount writes alone is answered in C
(csrc/front/writes.c), and nothing else changes. Another mount and a native client read
every byte; ``fsync``, a truncate and a rename over such a file behave as with pyfuse3; a
recall takes the file out of C before its write-back, so a close after it is Python's."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_mount_ahead import _fsck_clean, _leasing
from test_mount_support import Mount, needs_fuse

sys.path.insert(0, str(Path(__file__).parent.parent))
from conftest import start_cluster

import pvfs
from pvfs.cluster.launch import down
from pvfs.fuse.cfront import available

pytestmark = [pytest.mark.fuse, needs_fuse,
              pytest.mark.skipif(not available(), reason="pvfs._fusefront not built")]


def _data(name: str) -> bytes:
    """3,901 bytes (mdtest's hard files), different for each name."""
    return ((name.encode() + bytes(range(256))) * 16)[:3901]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = start_cluster(tmp_path_factory.mktemp("cdeleg"))
    try:
        yield c
    finally:
        down(c.config)


@pytest.fixture
def nodes(cluster, tmp_path):
    # A's flusher waits a minute: what others see, they see by the recall
    a = Mount(cluster.config_path, tmp_path / "a", "leases,dirty_age=60,frontend=c")
    b = Mount(cluster.config_path, tmp_path / "b", "leases,frontend=c")
    with a, b:
        yield _leasing(a), _leasing(b)


def _front(m: Mount) -> dict:
    return m.stats()["frontend"]


def _deleg(m: Mount) -> dict:
    return m.stats()["write_delegations"]


def _fresh_dir(m: Mount, name: str) -> Path:
    d = m.path / name
    d.mkdir()
    (d / "warm").touch()  # the first create asks for the delegation of the directory
    return d


def _open_written(d: Path, name: str) -> int:
    fd = os.open(d / name, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644)
    os.write(fd, _data(name))
    return fd


def test_closes_of_delegated_small_files_are_answered_in_c_and_others_read_every_byte(
        nodes, cluster):
    a, b = nodes
    d = _fresh_dir(a, "hard")
    names = [f"file.mdtest.{i}" for i in range(24)]
    before, flushed = _front(a), a.stats()["flushed_bytes"]
    for n in names:
        (d / n).write_bytes(_data(n))
    after = _front(a)
    assert after["kept_flushes"] - before["kept_flushes"] >= len(names), after
    assert after["kept_files"] >= len(names)
    assert a.stats()["flushed_bytes"] == flushed  # nothing written back at the closes
    assert _deleg(a)["kept_closes"] >= len(names)
    for n in names:  # this mount's own reads: its data
        assert (d / n).read_bytes() == _data(n)
    for n in names[:12]:  # the other mount's reads recall A first
        assert (b.path / "hard" / n).read_bytes() == _data(n)
    with pvfs.connect(cluster.config_path) as fs:
        for n in names[12:]:
            assert fs.stat(f"/hard/{n}").st_size == 3901
            with fs.open(f"/hard/{n}", "rb") as f:
                assert f.read() == _data(n)
    assert _front(a)["kept_files"] == 0  # every one recalled: none kept in C any more
    _fsck_clean(cluster)


def test_a_recall_takes_the_file_out_of_c_before_the_close(nodes):
    """Recalled while open: written back and no longer held, its close is Python's (a
    write-back error parked by the recall is reported there)."""
    a, b = nodes
    d = _fresh_dir(a, "recalled")
    fd = _open_written(d, "r")
    try:
        assert _front(a)["kept_files"] == 1
        assert os.stat(b.path / "recalled" / "r").st_size == 3901  # recalls A's lease
        assert _deleg(a)["recalled"] >= 1
        before = _front(a)
    finally:
        os.close(fd)
    after = _front(a)
    assert after["kept_flushes"] == before["kept_flushes"]  # the close's flush: Python's
    assert after["kept_files"] == 0
    assert (b.path / "recalled" / "r").read_bytes() == _data("r")


def test_fsync_still_writes_back_and_its_close_goes_to_python(nodes, cluster):
    a, _b = nodes
    d = _fresh_dir(a, "synced")
    fd = _open_written(d, "s")
    try:
        written_back = _deleg(a)["written_back"]
        assert _front(a)["kept_files"] == 1
        os.fsync(fd)  # ends the delegation: the data are on the I/O daemons
        assert _deleg(a)["written_back"] == written_back + 1
        before = _front(a)
    finally:
        os.close(fd)
    after = _front(a)
    assert after["kept_flushes"] == before["kept_flushes"] and after["kept_files"] == 0
    with pvfs.connect(cluster.config_path) as fs, fs.open("/synced/s", "rb") as f:
        assert f.read() == _data("s")


def test_a_truncate_and_a_rename_over_a_kept_file_still_behave(nodes, cluster):
    a, b = nodes
    d = _fresh_dir(a, "changed")
    for n in ("cut", "old", "new"):
        (d / n).write_bytes(_data(n))
    assert _front(a)["kept_files"] == 3
    os.truncate(d / "cut", 100)  # written back first, then cut at the manager
    assert (b.path / "changed" / "cut").read_bytes() == _data("cut")[:100]
    fd = _open_written(d, "ftrunc")
    try:
        os.ftruncate(fd, 10)  # through the handle: its close is Python's after that
        before = _front(a)
    finally:
        os.close(fd)
    assert _front(a)["kept_flushes"] == before["kept_flushes"]
    assert (b.path / "changed" / "ftrunc").read_bytes() == _data("ftrunc")[:10]
    (d / "new").write_bytes(b"second")
    dropped, flushed = _deleg(a)["dropped"], a.stats()["flushed_bytes"]
    (d / "new").rename(d / "old")  # the old data never leave
    assert _deleg(a)["dropped"] == dropped + 1 and a.stats()["flushed_bytes"] == flushed
    assert (b.path / "changed" / "old").read_bytes() == b"second"
    assert sorted(os.listdir(b.path / "changed")) == ["cut", "ftrunc", "old", "warm"]
    _fsck_clean(cluster)
