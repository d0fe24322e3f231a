"""Unlinks answered by the C front end's workers (csrc/front/unlinks.c,
fuse/workercreates.py): in a directory a leasing mount creates ahead in, the unlink of a file
closed and clean here is answered by a libfuse worker and applied by Python afterwards. The
names must be gone everywhere as if Python had answered; a file open here, or with data not
yet written back, is Python's to unlink; ``-o worker_creates=0`` leaves them all to Python."""

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
    c = start_cluster(tmp_path_factory.mktemp("wunlinks"))
    try:
        yield c
    finally:
        down(c.config)


@pytest.fixture
def nodes(cluster, tmp_path):
    a = Mount(cluster.config_path, tmp_path / "a", "leases,frontend=c,ahead_delay=60")
    b = Mount(cluster.config_path, tmp_path / "b", "leases,frontend=c")
    with a, b:
        yield wait_leasing(a, pool=128), wait_leasing(b, pool=128)


def _front(m: Mount) -> dict:
    return m.stats()["frontend"]


def test_closed_clean_files_are_unlinked_by_the_workers_and_gone_everywhere(nodes, cluster):
    a, b = nodes
    d = a.path / "rm"
    d.mkdir()
    for i in range(40):
        os.close(os.open(d / f"f{i}", os.O_CREAT | os.O_WRONLY, 0o644))
    before = _front(a)["unlinked_here"]
    for i in range(30):
        os.unlink(d / f"f{i}")
    front = _front(a)
    assert front["unlinked_here"] - before >= 29, front
    assert front["created_mismatch"] == 0 and a.stats()["unlinked_mismatch"] == 0
    assert sorted(os.listdir(d)) == sorted(f"f{i}" for i in range(30, 40))
    assert not (d / "f3").exists()
    with pytest.raises(FileNotFoundError):
        os.unlink(d / "f3")
    # a name unlinked here can be made again, and the directory reads the same everywhere
    os.close(os.open(d / "f3", os.O_CREAT | os.O_WRONLY, 0o600))
    want = sorted([*(f"f{i}" for i in range(30, 40)), "f3"])
    assert sorted(os.listdir(b.path / "rm")) == want  # B's listing recalls A's lease
    here, there = os.stat(d), os.stat(b.path / "rm")
    assert (here.st_size, here.st_mtime_ns, here.st_nlink) == \
        (there.st_size, there.st_mtime_ns, there.st_nlink)
    with cluster.connect() as fs:
        assert sorted(fs.listdir("/rm")) == want


def test_an_open_file_or_one_with_unwritten_data_is_unlinked_by_python(nodes, cluster):
    a, _b = nodes
    d = a.path / "busy"
    d.mkdir()
    (d / "first").touch()
    fd = os.open(d / "open", os.O_CREAT | os.O_RDWR, 0o644)
    with open(d / "dirty", "wb") as f:
        f.write(b"x" * 5000)  # kept here past its close (write delegation)
    before = _front(a)["unlinked_here"]
    try:
        os.write(fd, b"still here")
        os.unlink(d / "open")
        os.unlink(d / "dirty")
        assert _front(a)["unlinked_here"] == before
        assert os.pread(fd, 10, 0) == b"still here"  # an open file outlives its name
    finally:
        os.close(fd)
    assert sorted(os.listdir(d)) == ["first"]
    os.unlink(d / "first")  # closed and clean: a worker's
    assert _front(a)["unlinked_here"] == before + 1
    with cluster.connect() as fs:
        assert fs.listdir("/busy") == []


def test_a_file_reopened_is_not_unlinked_by_a_worker_until_closed_again(nodes):
    a, _b = nodes
    d = a.path / "again"
    d.mkdir()
    (d / "first").touch()
    os.close(os.open(d / "f", os.O_CREAT | os.O_WRONLY, 0o644))
    fd = os.open(d / "f", os.O_RDONLY)
    before = _front(a)["unlinked_here"]
    os.unlink(d / "f")
    os.close(fd)
    assert _front(a)["unlinked_here"] == before
    assert os.listdir(d) == ["first"]


def test_a_number_back_from_a_cancelled_create_carries_no_mark_to_its_new_file(nodes):
    """git's pattern: a file made and removed before its create was sent gives its number
    back, and the next file made gets it. A mark the old file left (closed and clean) must
    not let a worker unlink the new one with its data unwritten (git's objects arrived
    empty). Names that are not plain ASCII go to Python, which makes the order certain:
    the probe is unlinked by Python, the new file created by Python under its number."""
    a, _b = nodes
    d = a.path / "git"
    d.mkdir()
    (d / "first").touch()
    for i in range(5):
        os.close(os.open(d / f"\u00e9probe{i}", os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o644))
        time.sleep(0.3)  # (its release served: it is marked closed and clean)
        os.unlink(d / f"\u00e9probe{i}")  # Python's: the create and unlink never sent
        fd = os.open(d / f"\u00e9tmp{i}", os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o444)
        os.write(fd, bytes([65 + i]) * 21)  # kept here past the close: unwritten
        os.close(fd)
        os.link(d / f"\u00e9tmp{i}", d / f"plain{i}")
        os.unlink(d / f"plain{i}")  # a plain name: a worker's to unlink, if marked
        assert (d / f"\u00e9tmp{i}").read_bytes() == bytes([65 + i]) * 21, i
    assert a.stats()["unlinked_mismatch"] == 0


def test_worker_unlinks_go_with_worker_creates_switched_off(cluster, tmp_path):
    m = Mount(cluster.config_path, tmp_path / "off", "leases,frontend=c,worker_creates=0")
    with m:
        wait_leasing(m, pool=128)
        d = m.path / "off"
        d.mkdir()
        for i in range(20):
            (d / f"f{i}").touch()
        for i in range(20):
            os.unlink(d / f"f{i}")
        assert _front(m)["unlinked_here"] == 0
        ahead = m.stats()["creates_ahead"]  # (a create not sent yet goes with its unlink)
        assert ahead["unlinked_ahead"] + ahead["cancelled"] >= 19
        assert os.listdir(d) == []
