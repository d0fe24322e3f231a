"""The mount's write-back of many small files gathered (``-o gather_writes``,
fuse/cachewire.py, pvfs.cache.FilesBackend): one ``writes`` request per I/O daemon for many
files, one ``writing`` and one ``written`` for the delegated ones among them. Every byte
must arrive as if each file had been written back alone, and what cannot be gathered (a
large or scattered file, an emulated disk) still arrives one by one."""

from __future__ import annotations

import os
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


def _payload(i: int, n: int = 3901) -> bytes:
    return bytes((i * 31 + k) % 251 for k in range(n))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = start_cluster(tmp_path_factory.mktemp("gather"))
    try:
        yield c
    finally:
        down(c.config)


def _items(fs) -> int:
    """Files written through ``writes`` requests, over every I/O daemon."""
    return sum(fs.iod_call(i, "status")["small_writes"]["items"]
               for i in range(fs.config.niods))


def _settled(m: Mount) -> dict:
    """The mount's stats once nothing it holds is left to write back."""
    deadline = time.monotonic() + 20
    while True:
        st = m.stats()
        d = st.get("write_delegations", {"held": 0, "flushing": 0})
        if st["dirty_blocks"] == 0 and d["held"] <= 1 and not d["flushing"]:
            return st
        assert time.monotonic() < deadline, st
        time.sleep(0.1)


def test_the_flusher_writes_delegated_small_files_back_gathered(cluster, tmp_path):
    m = Mount(cluster.config_path, tmp_path / "m", "leases,dirty_age=0.5")
    with m, pvfs.connect(cluster.config_path) as fs:
        _leasing(m)
        items = _items(fs)
        d = m.path / "many"
        d.mkdir()
        (d / "warm").touch()
        for i in range(60):
            (d / f"f{i}").write_bytes(_payload(i))
        st = _settled(m)
        assert st["write_delegations"]["written_back"] == 60
        assert st["files_gathered"] >= 40 and st["files_writes"] < 30, st
        assert _items(fs) - items == st["files_gathered"]
        assert st["write_delegations"]["recalled"] == 0
        assert fs.meta("status")["leases"]["writers"] == 1  # ("warm": every other ended)
        for i in range(60):
            assert fs.stat(f"/many/f{i}").st_size == 3901
            with fs.open(f"/many/f{i}", "rb") as f:
                assert f.read() == _payload(i)
    _fsck_clean(cluster)


def test_files_that_are_not_small_go_one_by_one_beside_them(cluster, tmp_path):
    m = Mount(cluster.config_path, tmp_path / "m", "leases=0")
    with m, pvfs.connect(cluster.config_path) as fs:
        d = m.path / "mixed"
        d.mkdir()
        big = _payload(7, 300_000)  # over several stripe units
        with open(d / "big", "wb") as f:
            f.write(big)
        with open(d / "holes", "wb") as f:  # two runs far apart
            f.write(b"a" * 100)
            f.seek(1 << 20)
            f.write(b"b" * 100)
        for i in range(10):
            with open(d / f"s{i}", "wb") as f:
                f.write(_payload(i, 1000 + i))
        os.sync()  # the kernel's pages to the mount; the mount's cache: its unmount
    with pvfs.connect(cluster.config_path) as fs:
        with fs.open("/mixed/big", "rb") as f:
            assert f.read() == big
        with fs.open("/mixed/holes", "rb") as f:
            got = f.read()
        assert got[:100] == b"a" * 100 and got[1 << 20:] == b"b" * 100
        assert got[100:1 << 20] == bytes((1 << 20) - 100)
        for i in range(10):
            with fs.open(f"/mixed/s{i}", "rb") as f:
                assert f.read() == _payload(i, 1000 + i)
    _fsck_clean(cluster)


def test_gathering_can_be_switched_off(cluster, tmp_path):
    m = Mount(cluster.config_path, tmp_path / "m", "leases,dirty_age=0.3,gather_writes=0")
    with m, pvfs.connect(cluster.config_path) as fs:
        _leasing(m)
        items = _items(fs)
        d = m.path / "off"
        d.mkdir()
        for i in range(20):
            (d / f"f{i}").write_bytes(_payload(i))
        st = _settled(m)
        assert st["files_writes"] == 0 and _items(fs) == items
        with fs.open("/off/f3", "rb") as f:
            assert f.read() == _payload(3)


def test_over_an_emulated_disk_the_write_back_goes_one_by_one(tmp_path):
    c = start_cluster(tmp_path / "c", iods=2, extra={"storage": {
        "default": "posix", "iod0": "emulated:ide-2000"}})
    try:
        m = Mount(c.config_path, tmp_path / "m", "leases,dirty_age=0.3")
        with m:
            _leasing(m)
            d = m.path / "emu"
            d.mkdir()
            for i in range(12):
                (d / f"f{i}").write_bytes(_payload(i, 2000))
            st = _settled(m)
            assert st["write_delegations"]["written_back"] == 12
            assert st["write_errors"] == 0
        with pvfs.connect(c.config_path) as fs:
            for i in range(12):
                with fs.open(f"/emu/f{i}", "rb") as f:
                    assert f.read() == _payload(i, 2000)
        _fsck_clean(c)
    finally:
        down(c.config)


def test_a_recall_writes_the_kept_files_back_gathered_before_its_answer(cluster, tmp_path):
    a = Mount(cluster.config_path, tmp_path / "a", "leases,dirty_age=60")
    b = Mount(cluster.config_path, tmp_path / "b", "leases")
    with a, b:
        _leasing(a)
        _leasing(b)
        d = a.path / "recalled"
        d.mkdir()
        (d / "warm").touch()
        for i in range(40):
            (d / f"f{i}").write_bytes(_payload(i, 2000 + i))
        assert a.stats()["write_delegations"]["held"] >= 40
        # B's listing recalls A's directory, B's stats recall the files: every byte first
        sizes = {p.name: p.stat().st_size for p in (b.path / "recalled").iterdir()}
        assert sizes == {"warm": 0, **{f"f{i}": 2000 + i for i in range(40)}}
        for i in range(40):
            assert (b.path / "recalled" / f"f{i}").read_bytes() == _payload(i, 2000 + i)
        st = a.stats()
        assert st["write_delegations"]["recalled"] >= 40
        assert st["files_gathered"] >= 39 and st["files_writes"] <= 3, st
    _fsck_clean(cluster)
