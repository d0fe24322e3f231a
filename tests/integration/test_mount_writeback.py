"""``-o writeback_cache`` (the kernel's write-back page cache, issue 11): what still holds.

Writes through handles opened O_SYNC/O_DSYNC and to files with ``user.pvfs.sync=1`` reach
the I/O daemons before ``write(2)`` returns (those handles are direct_io); data is on the
daemons after ``fsync`` even if the mount is killed at once; a write-only file can still be
opened write-only (the kernel reads pages to complete partial ones in this mode). What does *not* hold, and why the option
is off by default, is tested too: the kernel keeps its own size of a file it holds, so another
node's size change is not seen at reopen (docs/mount.md, "writeback_cache"). The durability
test also runs on a default mount, whose block cache holds small writes for write-back.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path

import pytest
from test_mount_support import Mount, needs_fuse

from pvfs.fuse.options import parse_options

pytestmark = needs_fuse


def test_the_option_needs_coherence_none() -> None:
    assert parse_options("writeback_cache").writeback_cache
    assert not parse_options("").writeback_cache  # off by default
    with pytest.raises(ValueError, match="coherence=none"):
        parse_options("writeback_cache,coherence=sync")


@pytest.fixture(scope="module")
def wb_mount(pvfs_cluster):
    # under /tmp with 0755, not pytest's 0700 directories: another user must reach it
    base = Path(tempfile.mkdtemp(prefix="pvfs-wb-", dir="/tmp"))
    base.chmod(0o755)
    try:
        with Mount(pvfs_cluster.config_path, base / "m", "writeback_cache") as m:
            m.path.chmod(0o755)
            yield m
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _on_daemons(fs, name: str) -> bytes:
    with fs.open(f"/{name}", "rb") as f:
        return f.pread(1 << 20, 0)


def _small_writes(mount: Mount, name: str) -> int:
    """256 four-byte pwrites and a close; returns the FUSE writes the mount received."""
    before = mount.stats()["fuse_writes"]
    fd = os.open(mount.path / name, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    try:
        for i in range(256):
            os.pwrite(fd, b"%04d" % i, 4 * i)
    finally:
        os.close(fd)
    assert (mount.path / name).read_bytes() == b"".join(b"%04d" % i for i in range(256))
    return mount.stats()["fuse_writes"] - before


def test_small_writes_are_absorbed_by_the_kernel(wb_mount, pvfs_mount) -> None:
    assert _small_writes(pvfs_mount, "small-default") == 256  # default: each write(2)
    assert _small_writes(wb_mount, "small-wb") <= 4  # written back as whole pages at close


@pytest.mark.parametrize("flag", [os.O_SYNC, os.O_DSYNC])
def test_o_sync_writes_reach_the_daemons_before_returning(wb_mount, fs, flag) -> None:
    name = f"osync{flag}"
    fd = os.open(wb_mount.path / name, os.O_CREAT | os.O_WRONLY | flag, 0o644)
    try:
        os.write(fd, b"through")
        assert _on_daemons(fs, name) == b"through"  # the handle is still open
    finally:
        os.close(fd)


def test_pvfs_sync_files_write_through(wb_mount, fs) -> None:
    p = wb_mount.path / "syncattr"
    p.write_bytes(b"")
    os.setxattr(p, "user.pvfs.sync", b"1")
    fd = os.open(p, os.O_WRONLY)
    try:
        os.write(fd, b"sync-attr")
        assert _on_daemons(fs, "syncattr") == b"sync-attr"
    finally:
        os.close(fd)


@pytest.mark.parametrize("options", ["", "writeback_cache"], ids=["default", "writeback_cache"])
def test_fsync_is_durable_when_the_mount_dies(pvfs_cluster, fs, tmp_path: Path,
                                              options: str) -> None:
    # default: the mount's block cache writes back; writeback_cache: the kernel's pages too
    name = f"durable-{options or 'default'}"
    with Mount(pvfs_cluster.config_path, tmp_path / "m", options) as m:
        # one large write (streamed) and small scattered ones (held for write-back)
        data = bytearray(os.urandom(300_000))
        fd = os.open(m.path / name, os.O_CREAT | os.O_WRONLY, 0o644)
        os.pwrite(fd, data, 0)
        for i in range(64):
            piece = os.urandom(100)
            at = (i * 4679) % (len(data) - 100)
            data[at:at + 100] = piece
            os.pwrite(fd, piece, at)
        os.fsync(fd)
        assert m.proc is not None
        os.kill(m.proc.pid, signal.SIGKILL)  # nothing written back after this point
        m.proc.wait(10)
        with contextlib.suppress(OSError):
            os.close(fd)
    assert _on_daemons(fs, name) == bytes(data)


def test_write_only_files_open_write_only(wb_mount) -> None:
    p = wb_mount.path / "wonly"
    p.write_bytes(b"")
    os.chmod(p, 0o222)
    os.chown(p, 4321, 4321)
    pid = os.fork()
    if pid == 0:  # a user who may write but not read
        code = 1
        try:
            os.setresgid(4321, 4321, 4321)
            os.setresuid(4321, 4321, 4321)
            fd = os.open(p, os.O_WRONLY)
            os.write(fd, b"w")
            os.close(fd)
            try:
                os.open(p, os.O_RDONLY)
            except PermissionError:
                code = 0
        finally:
            os._exit(code)
    assert os.waitpid(pid, 0)[1] == 0
    assert p.stat().st_size == 1


def test_another_nodes_size_change_is_not_seen(pvfs_cluster, wb_mount, tmp_path) -> None:
    """The documented limit: the kernel trusts its own size while it holds the inode (an
    open descriptor here keeps it from being evicted)."""
    p = wb_mount.path / "shared"
    p.write_bytes(b"a" * 1000)
    held = os.open(p, os.O_RDONLY)
    try:
        with Mount(pvfs_cluster.config_path, tmp_path / "other") as other:
            with open(other.path / "shared", "ab") as f:
                f.write(b"b" * 1000)
            assert (other.path / "shared").stat().st_size == 2000
        time.sleep(1.2)  # past attr_timeout
        with open(p, "rb") as f:
            assert len(f.read()) == 1000
    finally:
        os.close(held)
