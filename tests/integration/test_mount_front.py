"""The C front end (``-o frontend=c``, pvfs._fusefront) on a real mount: test_mount.py's tests
that need only a mount, run again on it, and what is the C front end's own (1 MiB requests,
a directory listed over many readdir pages, xattr sizes, rename flags, forgets, unmounts)."""

from __future__ import annotations

import ctypes
import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_mount import (  # noqa: F401 - collected here again, on the C front end
    test_chmod_chown_utimes_truncate,
    test_cp_tree_in_and_out,
    test_eacces_as_another_uid,
    test_editor_style_save,
    test_errno,
    test_git_inside,
    test_hard_links_and_symlinks,
    test_mmap_read,
    test_statfs,
    test_stripe_xattr,
    test_stripe_xattr_on_new_empty_file,
    test_tar_untar,
    test_unlinked_open_file_stays_readable,
    test_xattrs,
)
from test_mount_support import Mount, needs_fuse

from pvfs.fuse.cfront import available

pytestmark = [pytest.mark.fuse, needs_fuse,
              pytest.mark.skipif(not available(), reason="pvfs._fusefront not built")]


@pytest.fixture(scope="module")
def cmount(pvfs_cluster):
    # Not under pytest's 0700 temp dirs: other uids must reach the mount point.
    base = Path(tempfile.mkdtemp(prefix="pvfs-cfront-"))
    base.chmod(0o755)
    m = Mount(pvfs_cluster.config_path, base / "mnt", "frontend=c")
    m.start()
    try:
        yield m
    finally:
        m.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def mnt(cmount):
    return cmount.path


def test_status_says_frontend_c(cmount):
    assert cmount.stats()["coherence"] == "none"  # served, through getxattr
    opts = [json.loads(p.read_text())["options"] for p in _status_files()
            if json.loads(p.read_text())["mountpoint"] == os.path.realpath(cmount.path)]
    assert opts and opts[0]["frontend"] == "c"


def _status_files() -> list[Path]:
    from pvfs.fuse.mount import status_dir

    return sorted(status_dir().glob("*.json"))


def test_one_mib_writes_and_reads(cmount):
    data = os.urandom(3 << 20) + b"tail"
    p = cmount.path / "big.bin"
    before = cmount.stats()["fuse_writes"]
    with open(p, "wb") as fh:
        fh.write(data)
    writes = cmount.stats()["fuse_writes"] - before
    assert writes <= 4, f"{writes} write requests for 3 MiB: max_pages not 256"
    assert p.read_bytes() == data
    with open(p, "rb") as fh:
        assert os.pread(fh.fileno(), 5, (3 << 20) - 1) == data[(3 << 20) - 1:]


def test_large_directory_lists_over_many_pages(cmount):
    d = cmount.path / "many"
    d.mkdir()
    names = {f"entry-{i:04d}-" + "x" * 40 for i in range(600)}
    for n in names:
        (d / n).write_bytes(n.encode())
    assert set(os.listdir(d)) == names
    for e in os.scandir(d):   # readdirplus gave the kernel each entry's attributes
        assert e.stat().st_size == len(e.name)
    shutil.rmtree(d)
    assert not d.exists()


def test_xattr_sizes_and_flags(cmount):
    p = cmount.path / "xs"
    p.write_bytes(b"")
    os.setxattr(p, "user.a", b"1234")
    with pytest.raises(OSError) as ei:
        os.setxattr(p, "user.a", b"x", os.XATTR_CREATE)
    assert ei.value.errno == errno.EEXIST
    with pytest.raises(OSError) as ei:
        os.setxattr(p, "user.b", b"x", os.XATTR_REPLACE)
    assert ei.value.errno == errno.ENODATA
    libc = ctypes.CDLL(None, use_errno=True)
    small = ctypes.create_string_buffer(2)
    assert libc.getxattr(bytes(p), b"user.a", None, 0) == 4  # size query
    assert libc.getxattr(bytes(p), b"user.a", small, 2) == -1
    assert ctypes.get_errno() == errno.ERANGE
    assert "user.a" in os.listxattr(p)
    os.removexattr(p, "user.a")
    assert "user.a" not in os.listxattr(p)


def test_rename_noreplace_and_exchange(cmount):
    a, b = cmount.path / "ra", cmount.path / "rb"
    a.write_bytes(b"A")
    b.write_bytes(b"B")
    libc = ctypes.CDLL(None, use_errno=True)
    at = -100  # AT_FDCWD
    assert libc.renameat2(at, bytes(a), at, bytes(b), 1) == -1  # RENAME_NOREPLACE
    assert ctypes.get_errno() == errno.EEXIST
    assert libc.renameat2(at, bytes(a), at, bytes(b), 2) == 0   # RENAME_EXCHANGE
    assert (a.read_bytes(), b.read_bytes()) == (b"B", b"A")


def test_symlink_mknod_fifo_access_fsync(cmount):
    d = cmount.path / "misc"
    d.mkdir()
    os.symlink("target-name", d / "sl")
    assert os.readlink(d / "sl") == "target-name"
    os.mkfifo(d / "fifo", 0o600)
    assert (d / "fifo").is_fifo()
    assert os.access(d, os.W_OK | os.X_OK)
    with open(d / "f", "wb") as fh:
        fh.write(b"synced")
        os.fsync(fh.fileno())
        os.fdatasync(fh.fileno())
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)   # fsyncdir
    finally:
        os.close(fd)
    assert (d / "f").read_bytes() == b"synced"


def test_forgets_after_drop_caches(cmount):
    """The kernel's forgets (answered in C) reach the mount's bookkeeping without harm."""
    d = cmount.path / "forget"
    d.mkdir()
    for i in range(50):
        (d / f"f{i}").write_bytes(b"x")
    Path("/proc/sys/vm/drop_caches").write_text("2\n") if os.geteuid() == 0 else None
    assert sorted(os.listdir(d)) == sorted(f"f{i}" for i in range(50))
    assert all((d / f"f{i}").read_bytes() == b"x" for i in range(50))


def test_sigterm_unmounts_cleanly(pvfs_cluster, tmp_path):
    m = Mount(pvfs_cluster.config_path, tmp_path / "term", "frontend=c").start()
    try:
        (m.path / "kept").write_bytes(b"written before SIGTERM")
        m.proc.send_signal(signal.SIGTERM)
        assert m.proc.wait(30) == 0
        assert not m.listed()
    finally:
        m.stop()
    with Mount(pvfs_cluster.config_path, tmp_path / "term", "frontend=c") as again:
        assert (again.path / "kept").read_bytes() == b"written before SIGTERM"


def test_fusermount_u_while_files_are_open(pvfs_cluster, tmp_path):
    m = Mount(pvfs_cluster.config_path, tmp_path / "umnt", "frontend=c").start()
    try:
        with open(m.path / "open-at-umount", "wb") as fh:
            fh.write(b"data")
        done = subprocess.run(["fusermount3", "-u", "-z", str(m.path)], check=False,
                              capture_output=True)
        assert done.returncode == 0
        assert m.proc.wait(30) == 0
    finally:
        m.stop()


def test_read_only_closes_are_answered_in_c(cmount):
    p = cmount.path / "ro"
    p.write_bytes(b"read me")
    before = cmount.stats()["frontend"]
    assert before["name"] == "c"
    for _ in range(5):
        assert p.read_bytes() == b"read me"
    after = cmount.stats()["frontend"]
    assert after["quiet_flushes"] - before["quiet_flushes"] >= 5
    assert after["quiet_handles"] <= before["quiet_handles"] + 1   # dropped at release
    with open(p, "r+b") as fh:   # a writable handle's close still writes back
        fh.write(b"READ")
    assert p.read_bytes() == b"READ me"


def test_leased_directories_attributes_are_answered_in_c_and_follow_changes(
        cmount, pvfs_cluster):
    """The kernel asks for a directory's attributes after every create in it; under the
    lease C answers them from what the mount keeps (csrc/front/answers.c), changed by each
    create made here, dropped by a recall when another client changes the directory."""
    d = cmount.path / "answered"
    d.mkdir()
    before = cmount.stats()["frontend"]
    for i in range(5):
        (d / f"f{i}").touch()
        assert os.stat(d).st_nlink == 2
    after = cmount.stats()["frontend"]
    assert after["attrs_here"] - before["attrs_here"] >= 5
    assert after["quiet_flushes"] - before["quiet_flushes"] >= 5  # touch: nothing written
    here = os.stat(d)
    with pvfs_cluster.connect() as fs:
        there = fs.stat("/answered")  # recalls the mount's lease: its creates go first
        assert (there.st_size, there.st_mtime_ns) == (here.st_size, here.st_mtime_ns)
        with fs.open("/answered/from-elsewhere", "wb") as f:
            f.write(b"x")
        now = fs.stat("/answered")
    seen = os.stat(d)  # not the copy C kept before the recall
    assert (seen.st_size, seen.st_mtime_ns) == (now.st_size, now.st_mtime_ns)
    assert seen.st_mtime_ns != here.st_mtime_ns or seen.st_size != here.st_size
    assert sorted(os.listdir(d)) == ["f0", "f1", "f2", "f3", "f4", "from-elsewhere"]


def test_a_writable_close_writes_back_once_anything_was_written(cmount, pvfs_cluster):
    """Writable handles are quiet only while nothing was written to their inode: a close
    after a write, or after a truncation, still writes back (close-to-open)."""
    p = cmount.path / "written-close"
    with open(p, "wb") as f:
        f.write(b"first")
    with pvfs_cluster.connect() as fs, fs.open("/written-close", "rb") as f:
        assert f.read() == b"first"
    with open(p, "r+b") as f:
        f.truncate(2)
    with pvfs_cluster.connect() as fs:
        assert fs.stat("/written-close").st_size == 2


def test_missing_names_of_leased_directories_are_answered_in_c(cmount, pvfs_cluster):
    """The lookup before each O_CREAT in a directory the mount knows complete is answered
    ENOENT by C; a name another client makes there is found at once (the recall takes the
    directory's names out of C first)."""
    d = cmount.path / "lookups"
    d.mkdir()
    before = cmount.stats()["frontend"]
    for i in range(10):
        (d / f"f{i}").touch()
    assert not (d / "nothing").exists()
    after = cmount.stats()["frontend"]
    assert after["missing_here"] - before["missing_here"] >= 11
    assert [p.name for p in sorted(d.iterdir())] == [f"f{i}" for i in range(10)]
    assert (d / "f3").exists()  # a name that is there: answered by Python
    with pvfs_cluster.connect() as fs, fs.open("/lookups/made-elsewhere", "wb") as f:
        f.write(b"y")
    assert (d / "made-elsewhere").read_bytes() == b"y"
    os.unlink(d / "f3")
    assert not (d / "f3").exists()
    with pvfs_cluster.connect() as fs:
        fs.rename("/lookups/f4", "/lookups/f3")  # (recalls: the names leave C)
    assert (d / "f3").exists() and not (d / "f4").exists()
