"""Writes answered by the C front end once queued (``OP_WROTE``; csrc/front/writes.c,
fuse/cfront.py): which handles' writes are answered there, and that everything after such a
write -- a read of another handle, an fsync, a close, another client after the close -- sees
it."""

from __future__ import annotations

import errno
import os
import random
import shutil
import tempfile
from pathlib import Path

import pytest
from test_mount_support import Mount, needs_fuse

from pvfs.fuse.cfront import available

pytestmark = [pytest.mark.fuse, needs_fuse,
              pytest.mark.skipif(not available(), reason="pvfs._fusefront not built")]

KiB = 1024


@pytest.fixture(scope="module")
def cmount(pvfs_cluster):
    base = Path(tempfile.mkdtemp(prefix="pvfs-cwrites-"))
    base.chmod(0o755)
    m = Mount(pvfs_cluster.config_path, base / "mnt", "")  # default options: frontend=c
    m.start()
    try:
        yield m
    finally:
        m.stop()
        shutil.rmtree(base, ignore_errors=True)


def _front(m: Mount) -> dict:
    return m.stats()["frontend"]


def test_small_writes_are_answered_in_c_and_seen_by_what_follows(cmount, pvfs_cluster):
    size = 1 << 20
    model = bytearray(os.urandom(size))
    p = cmount.path / "behind.bin"
    p.write_bytes(bytes(model))
    rng = random.Random(30)
    before = _front(cmount)
    fd = os.open(p, os.O_RDWR)
    rd = os.open(p, os.O_RDONLY)
    try:
        for i in range(300):
            off = rng.randrange(0, size // (4 * KiB)) * 4 * KiB + rng.choice((0, 100))
            data = os.urandom(rng.choice((4 * KiB, 100, 9000)))
            data = data[:size - off]
            assert os.pwrite(fd, data, off) == len(data)
            model[off:off + len(data)] = data
            if i % 10 == 0:  # through another handle, the kernel's pages dropped: the mount
                os.posix_fadvise(rd, 0, 0, os.POSIX_FADV_DONTNEED)
                assert os.pread(rd, len(data), off) == data
        os.fsync(fd)
        after = _front(cmount)
        assert after["wrote_here"] - before["wrote_here"] >= 300
        os.posix_fadvise(rd, 0, 0, os.POSIX_FADV_DONTNEED)
        assert os.pread(rd, size, 0) == bytes(model)
    finally:
        os.close(rd)
        os.close(fd)
    with pvfs_cluster.connect() as fs, fs.open("/behind.bin", "rb") as f:  # close-to-open
        assert f.read() == bytes(model)
    assert _front(cmount)["behind_handles"] <= before["behind_handles"]  # dropped at release


def test_appends_and_growth_through_writes_answered_in_c(cmount, pvfs_cluster):
    p = cmount.path / "grows.bin"
    want = b""
    with open(p, "ab", buffering=0) as f:
        for i in range(200):
            chunk = bytes([i % 251]) * (i + 1)
            f.write(chunk)
            want += chunk
            if i % 50 == 0:
                assert os.stat(p).st_size == len(want)
    assert p.read_bytes() == want
    with pvfs_cluster.connect() as fs:
        assert fs.stat("/grows.bin").st_size == len(want)


@pytest.mark.parametrize("flag", ["O_SYNC", "O_DSYNC"])
def test_sync_handles_writes_wait_for_the_mount(cmount, pvfs_cluster, flag):
    p = cmount.path / f"sync-{flag}.bin"
    p.write_bytes(b"\0" * 8192)
    before = _front(cmount)["wrote_here"]
    fd = os.open(p, os.O_WRONLY | getattr(os, flag))
    try:
        for i in range(8):
            os.pwrite(fd, b"s" * 1024, i * 1024)
    finally:
        os.close(fd)
    assert _front(cmount)["wrote_here"] == before
    with pvfs_cluster.connect() as fs, fs.open(f"/sync-{flag}.bin", "rb") as f:
        assert f.read(8192) == b"s" * 8192


def test_a_truncation_after_writes_answered_in_c_cuts_them(cmount):
    p = cmount.path / "cut.bin"
    with open(p, "wb", buffering=0) as f:
        f.writelines(b"x" * 4096 for _ in range(64))  # 64 write(2)s (unbuffered)
        os.ftruncate(f.fileno(), 5000)
        f.write(b"y")  # at 64 * 4096: a hole of zeros from 5000
    data = p.read_bytes()
    assert len(data) == 64 * 4096 + 1
    assert data[:5000] == b"x" * 5000 and data[5000:-1] == bytes(len(data) - 5001)
    assert data[-1:] == b"y"


def test_writes_answered_in_c_survive_a_sigterm_while_the_file_is_open(pvfs_cluster, tmp_path):
    """SIGTERM right after the last write(2), the file still open: every write the kernel
    was told is done reaches the I/O daemons (applied before the cache's write-back)."""
    import signal

    m = Mount(pvfs_cluster.config_path, tmp_path / "term", "").start()
    want = bytearray(1024 * 4 * KiB)
    try:
        fd = os.open(m.path / "term.bin", os.O_RDWR | os.O_CREAT, 0o644)
        before = _front(m)["wrote_here"]
        for i in range(1024):
            chunk = os.urandom(4 * KiB)
            os.pwrite(fd, chunk, i * 4 * KiB)
            want[i * 4 * KiB:(i + 1) * 4 * KiB] = chunk
            if i == 255:  # (a request to the mount: the writes before it are applied)
                assert _front(m)["wrote_here"] - before >= 200
        for i in range(32):  # 1 MiB each: C answers them faster than they are applied
            chunk = os.urandom(1 << 20)
            os.pwrite(fd, chunk, (4 << 20) + (i << 20))
            want += chunk
        m.proc.send_signal(signal.SIGTERM)
        assert m.proc.wait(30) == 0
        try:
            os.close(fd)
        except OSError:
            pass
    finally:
        m.stop()
    with pvfs_cluster.connect() as fs, fs.open("/term.bin", "rb") as f:
        assert f.read() == bytes(want)


def test_capability_probes_are_answered_in_c_until_a_capability_is_set(cmount):
    """The kernel's security.capability probe before each write(2) is answered ENODATA by C
    while the mount's probe cache holds that; a capability set on the file drops it, so the
    next write finds it and the kernel removes it (file_remove_privs)."""
    import struct

    p = cmount.path / "caps.bin"
    p.write_bytes(b"\0" * 4096)
    fd = os.open(p, os.O_WRONLY)
    try:
        os.pwrite(fd, b"a", 0)  # (the first probe may go to the mount)
        before = _front(cmount)["caps_here"]
        for i in range(50):
            os.pwrite(fd, b"b", i)
        assert _front(cmount)["caps_here"] - before >= 50
        if os.geteuid() != 0:
            return
        cap = struct.pack("<5I", 0x02000000, 1 << 10, 0, 0, 0)  # v2, cap_net_bind_service
        os.setxattr(p, "security.capability", cap)
        assert os.getxattr(p, "security.capability") == cap
        os.pwrite(fd, b"c", 0)  # a write by root drops the file's capabilities
        with pytest.raises(OSError) as err:
            os.getxattr(p, "security.capability")
        assert err.value.errno == errno.ENODATA
    finally:
        os.close(fd)
    assert p.read_bytes()[:2] == b"cb"


def test_a_new_files_close_after_writes_answered_in_c_needs_no_trip_through_python(cmount):
    """A file the workers made, written through its write-behind handle (creates.c): the
    flush of its close waits in C for Python to apply the writes (ops.c), which keeps the
    file (write delegation), and is then answered in C -- the create, the writes, the
    capability probes and the flush all without a request to Python; its data arrive."""
    d = cmount.path / "kept-new"
    d.mkdir()
    (d / "first").write_bytes(b"1")  # (the first create asks the manager for numbers)
    before = _front(cmount)
    for i in range(30):
        with open(d / f"f{i}", "wb", buffering=0) as f:
            f.write(bytes([i]) * 3901)
    after = _front(cmount)
    made = after["created_here"] - before["created_here"]
    assert made >= 25, after
    assert after["wrote_here"] - before["wrote_here"] >= made, after
    assert after["kept_flushes"] - before["kept_flushes"] >= made, after
    for i in range(30):
        assert (d / f"f{i}").read_bytes() == bytes([i]) * 3901
