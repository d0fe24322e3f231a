"""Two mounts of one file system ("two nodes"): ``coherence=none`` vs ``sync`` exactly as
docs/mount.md states them."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_mount_support import Mount, needs_fuse

pytestmark = [pytest.mark.fuse, needs_fuse]


@pytest.fixture(params=["none", "sync"])
def two_nodes(request, pvfs_cluster, tmp_path):
    mode = request.param
    a = Mount(pvfs_cluster.config_path, tmp_path / "a", f"coherence={mode}")
    b = Mount(pvfs_cluster.config_path, tmp_path / "b", f"coherence={mode}")
    with a, b:
        yield mode, a, b


def pread(path: Path, n: int = 4) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.pread(fd, n, 0)
    finally:
        os.close(fd)


def test_sync_write_vs_plain_write(two_nodes):
    mode, a, b = two_nodes
    name = f"shared-{mode}"
    (a.path / name).write_bytes(b"a" * 8192)
    fb = os.open(b.path / name, os.O_RDONLY)  # node B holds the file open and cached
    try:
        assert os.pread(fb, 4, 0) == b"aaaa"
        # A sync write (O_SYNC) on node A
        fa = os.open(a.path / name, os.O_WRONLY | os.O_SYNC)
        os.pwrite(fa, b"bbbb", 0)
        os.close(fa)
        seen = os.pread(fb, 4, 0)
        if mode == "sync":
            assert seen == b"bbbb"  # B's copy was invalidated before the write returned
            assert b.stats()["callbacks_received"] >= 1
        else:
            assert seen == b"aaaa"  # B may read its stale block while it holds it open
        # A plain (write-behind) write, flushed by fsync: no invalidation in either mode
        fa = os.open(a.path / name, os.O_WRONLY)
        os.pwrite(fa, b"cccc", 0)
        os.fsync(fa)
        os.close(fa)
        assert os.pread(fb, 4, 0) == (b"bbbb" if mode == "sync" else b"aaaa")
    finally:
        os.close(fb)
    # Reopening on B after the file changed drops B's blocks: the new data is seen.
    assert pread(b.path / name) == b"cccc"


def test_reopen_sees_the_size_another_node_grew_the_file_to(two_nodes):
    """Close-to-open for the size too: B's kernel holds A's file as empty (``attr_timeout``)
    when A grows it; B's next open must not read only up to the old size."""
    mode, a, b = two_nodes
    name = f"grown-{mode}"
    (a.path / name).write_bytes(b"")
    assert pread(b.path / name) == b""
    fa = os.open(a.path / name, os.O_WRONLY | os.O_SYNC)
    os.pwrite(fa, b"grow", 0)
    os.close(fa)
    assert pread(b.path / name) == b"grow"


def test_user_pvfs_sync_makes_writes_sync(two_nodes):
    mode, a, b = two_nodes
    name = f"xsync-{mode}"
    (a.path / name).write_bytes(b"1" * 4096)
    os.setxattr(a.path / name, "user.pvfs.sync", b"1")
    assert os.getxattr(a.path / name, "user.pvfs.sync") == b"1"
    fb = os.open(b.path / name, os.O_RDONLY)
    try:
        assert os.pread(fb, 1, 0) == b"1"
        fa = os.open(a.path / name, os.O_WRONLY)
        os.pwrite(fa, b"2", 0)  # a sync write: through to the daemons before it returns
        s = a.stats()
        os.close(fa)
        assert s["sync_writes"] >= 1
        assert os.pread(fb, 1, 0) == (b"2" if mode == "sync" else b"1")
    finally:
        os.close(fb)
