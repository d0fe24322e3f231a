"""Leased files' attributes answered by the C front end's workers (csrc/front/answers.c,
cmirrors.DirMirror): a getattr of a file whose lease entry Python mirrored is answered in C,
and never with a size or mtime older than a write of this node or another's that returned
before it (the workers drop the file at a write's queueing, Python after applying it, a
recall before it is answered)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_mount_support import Mount, needs_fuse, wait_leasing

sys.path.insert(0, str(Path(__file__).parent.parent))
from conftest import start_cluster

from pvfs.cluster.launch import down

pytestmark = [pytest.mark.fuse, needs_fuse,
              pytest.mark.skipif(not __import__("pvfs.fuse.cfront", fromlist=["available"])
                                 .available(), reason="the C front end is not built")]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = start_cluster(tmp_path_factory.mktemp("fileattrs"))
    try:
        yield c
    finally:
        down(c.config)


def _leasing(m: Mount) -> Mount:
    return wait_leasing(m)


def _front(m: Mount) -> dict:
    return m.stats()["frontend"]


def test_a_stat_after_each_write_shows_it(cluster, tmp_path):
    """attr_timeout=0: every stat asks the mount; each follows a write that grew the file."""
    m = Mount(cluster.config_path, tmp_path / "m", "leases,frontend=c,attr_timeout=0")
    with m:
        _leasing(m)
        p = m.path / "grow"
        p.write_bytes(b"")
        before = _front(m)["file_attrs_here"]
        fd = os.open(p, os.O_WRONLY | os.O_APPEND)
        try:
            for i in range(1, 301):
                os.write(fd, b"x")
                assert os.stat(p).st_size == i
                assert os.fstat(fd).st_size == i
        finally:
            os.close(fd)
        os.utime(p, ns=(5_000_000_000, 6_000_000_000))
        assert os.stat(p).st_mtime_ns == 6_000_000_000
        for _ in range(20):  # nothing written now: the workers answer from the mirror
            assert os.stat(p).st_size == 300
        assert _front(m)["file_attrs_here"] > before


def test_another_mounts_write_is_seen_by_the_next_stat(cluster, tmp_path):
    a = Mount(cluster.config_path, tmp_path / "a", "leases,frontend=c,attr_timeout=0")
    b = Mount(cluster.config_path, tmp_path / "b", "leases,frontend=c")
    with a, b:
        _leasing(a), _leasing(b)
        (a.path / "shared").write_bytes(b"1" * 10)
        assert os.stat(a.path / "shared").st_size == 10
        for n in (100, 5000, 70000):
            with open(b.path / "shared", "r+b") as f:
                f.write(b"2" * n)
                f.flush()
                os.fsync(f.fileno())
            # B's write-back recalled A's lease of the file before it returned
            assert os.stat(a.path / "shared").st_size == n
            assert (a.path / "shared").read_bytes() == b"2" * n


def test_files_written_here_are_answered_in_c_once_written_back(cluster, tmp_path):
    m = Mount(cluster.config_path, tmp_path / "wb", "leases,frontend=c,attr_timeout=0")
    with m:
        _leasing(m)
        d = m.path / "many"
        d.mkdir()
        for i in range(50):
            (d / f"f{i}").write_bytes(bytes(100 + i))
        os.sync()  # written back: the manager pushes their attributes again
        deadline = time.monotonic() + 10
        while m.stats()["leases"]["pushed"] < 50 and time.monotonic() < deadline:
            time.sleep(0.1)
        before = _front(m)["file_attrs_here"]
        for _ in range(3):
            assert [os.stat(d / f"f{i}").st_size for i in range(50)] == \
                [100 + i for i in range(50)]
        assert _front(m)["file_attrs_here"] - before >= 100
