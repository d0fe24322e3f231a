"""POSIX behaviour of a real mount (issue 9): the mount comes up with zero timeouts, special
files, permission checks on names the kernel has cached, setuid clearing, ``st_blocks``.

Every probe of a mount that might hang runs in a child process with a timeout, and the
teardown kills the mount daemon before a lazy unmount, so a regression fails instead of
hanging the test run.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_mount_support import Mount, needs_fuse

pytestmark = [pytest.mark.fuse, needs_fuse]

PROBE_TIMEOUT = 20


@pytest.fixture(scope="module")
def mnt(pvfs_cluster):
    """A default mount, under a 0755 directory so other uids can reach it."""
    base = Path(tempfile.mkdtemp(prefix="pvfs-posix-"))
    base.chmod(0o755)
    m = Mount(pvfs_cluster.config_path, base / "mnt")
    m.start()
    os.chmod(m.path, 0o777)
    try:
        yield m.path
    finally:
        m.stop()
        shutil.rmtree(base, ignore_errors=True)


def as_user(*argv: str, uid: int = 1234) -> subprocess.CompletedProcess:
    return subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                           *argv], capture_output=True, text=True, check=False,
                          timeout=PROBE_TIMEOUT)


root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to switch users")


def _mounted(path: Path) -> bool:
    """From /proc/self/mountinfo: no system call on the (maybe hung) mount itself."""
    want = str(path)
    with open("/proc/self/mountinfo") as fh:
        return any(line.split()[4] == want for line in fh)


def _pids_with(arg: str) -> list[int]:
    """Processes whose command line names ``arg`` (the mount daemon forked by the CLI)."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            cmd = Path(f"/proc/{d}/cmdline").read_bytes().split(b"\0")
            if arg.encode() in cmd:
                out.append(int(d))
    return out


@contextlib.contextmanager
def daemon_mount(config_path: str, options: str) -> Iterator[Path]:
    """``python -m pvfs.fuse MP -o OPTIONS`` as a user runs it (daemon mode, returns when
    ready). Torn down by killing the daemon, then ``fusermount3 -u -z``."""
    base = Path(tempfile.mkdtemp(prefix="pvfs-posix-"))
    base.chmod(0o755)
    mp = base / "mnt"
    mp.mkdir()
    env = dict(os.environ, PVFS_MOUNT_STATUS_DIR=str(base / "status"))
    try:
        done = subprocess.run([sys.executable, "-m", "pvfs.fuse", "--config", config_path,
                               str(mp), "-o", options], env=env, timeout=PROBE_TIMEOUT * 3,
                              capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
        yield mp
    finally:
        for pid in _pids_with(str(mp)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if _mounted(mp):
            subprocess.run(["fusermount3", "-u", "-z", str(mp)], check=False,
                           capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


def test_mount_with_zero_timeouts_comes_up(pvfs_cluster):
    """The serving thread never makes a system call on its own mount: with attr/entry
    timeouts 0 every lstat of the mount point is a FUSE request only it could answer."""
    with daemon_mount(pvfs_cluster.config_path, "attr_timeout=0,entry_timeout=0") as mp:
        assert _mounted(mp)
        mk = subprocess.run(["sh", "-c", f"mkdir {mp}/d && echo hi > {mp}/d/f"],
                            timeout=PROBE_TIMEOUT, check=False)
        assert mk.returncode == 0
        ls = subprocess.run(["ls", "-la", str(mp), str(mp / "d")], capture_output=True,
                            text=True, timeout=PROBE_TIMEOUT, check=False)
        assert ls.returncode == 0 and " f\n" in ls.stdout


def test_name_and_path_limits_are_enametoolong(mnt, pvfs_cluster):
    for make in (os.mkdir, lambda p: open(p, "w").close(), os.mkfifo):
        with pytest.raises(OSError) as ei:
            make(mnt / ("n" * 256))
        assert ei.value.errno == errno.ENAMETOOLONG
    with pytest.raises(OSError) as ei:
        os.symlink("t" * 4096, mnt / "long-target")
    assert ei.value.errno == errno.ENAMETOOLONG
    (mnt / ("n" * 255)).write_text("ok")
    with pvfs_cluster.connect() as fs:
        assert fs.stat("/" + "n" * 255).st_size == 2
        for call, arg in ((fs.mkdir, "/" + "d" * 256), (fs.stat, "/" + "d" * 256),
                          (fs.stat, "/" + "d/" * 2048)):
            with pytest.raises(OSError) as ei:
                call(arg)
            assert ei.value.errno == errno.ENAMETOOLONG


@root_only
def test_non_owner_write_and_truncate_clear_suid(mnt):
    for name, cmd in (("w", "printf x >> {p}"), ("t", "truncate -s 3 {p}")):
        p = mnt / f"suid-{name}"
        p.write_text("data")
        os.chown(p, 65534, 65534)
        os.chmod(p, 0o6777)
        r = as_user("sh", "-c", cmd.format(p=p))
        assert r.returncode == 0, r.stderr
        assert stat.S_IMODE(os.stat(p).st_mode) == 0o0777, name
    p = mnt / "suid-root"
    p.write_text("data")
    os.chmod(p, 0o6777)
    with open(p, "a") as fh:  # root keeps the bits (CAP_FSETID)
        fh.write("x")
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o6777


@root_only
def test_ftruncate_of_a_file_created_with_mode_0(mnt):
    """open(O_CREAT|O_RDWR, 0) then ftruncate, as a user (pjdfstest ftruncate/00)."""
    script = ("import os,sys; fd = os.open(sys.argv[1], os.O_CREAT | os.O_RDWR, 0); "
              "os.ftruncate(fd, 7); print(os.fstat(fd).st_size)")
    r = as_user(sys.executable, "-c", script, str(mnt / "mode0"))
    assert r.returncode == 0 and r.stdout.strip() == "7", r.stderr
    r = as_user("truncate", "-s", "1", str(mnt / "mode0"))  # by path: checked
    assert r.returncode != 0 and "Permission denied" in r.stderr


def test_special_files_on_the_mount(mnt, pvfs_cluster):
    """FIFOs, sockets and device nodes are inodes at the manager; the kernel serves them."""
    import socket
    import threading

    fifo = mnt / "fifo"
    os.mkfifo(fifo, 0o640)
    st = os.lstat(fifo)
    assert stat.S_ISFIFO(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o640
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    with open(fifo, "wb") as w:
        w.write(b"through the pipe")
    reader.join(PROBE_TIMEOUT)
    assert got == [b"through the pipe"]

    path = str(mnt / "sock")
    with socket.socket(socket.AF_UNIX) as srv:
        srv.bind(path)
        srv.listen(1)
        assert stat.S_ISSOCK(os.lstat(path).st_mode)
        with socket.socket(socket.AF_UNIX) as cli:
            cli.connect(path)
            conn, _ = srv.accept()
            with conn:
                cli.sendall(b"ping")
                assert conn.recv(4) == b"ping"

    os.mknod(mnt / "null", stat.S_IFCHR | 0o666, os.makedev(1, 3))
    os.mknod(mnt / "blk", stat.S_IFBLK | 0o600, os.makedev(7, 200))
    assert os.stat(mnt / "null").st_rdev == os.makedev(1, 3)
    st = os.stat(mnt / "blk")
    assert stat.S_ISBLK(st.st_mode) and (os.major(st.st_rdev), os.minor(st.st_rdev)) == (7, 200)
    ls = subprocess.run(["ls", "-l", str(mnt)], capture_output=True, text=True, check=True)
    assert re.search(r"^c.* 1, +3 .* null$", ls.stdout, re.MULTILINE), ls.stdout
    r = as_user("sh", "-c", f"mknod {mnt}/nodev c 1 3")
    assert r.returncode != 0  # devices need CAP_MKNOD
    with pvfs_cluster.connect() as fs:  # the native API sees the same inodes
        assert fs.stat("/null").st_rdev == os.makedev(1, 3) and fs.stat("/fifo").type == "fifo"
        fs.mkfifo("/fifo2", 0o600)
        fs.mknod("/sock2", stat.S_IFSOCK | 0o600)
        fs.mknod("/reg2")  # like os.mknod: no type bits make a regular file
        assert fs.stat("/reg2").type == "file" and fs.stat("/reg2").stripe is not None
        fs.unlink("/reg2")
    assert stat.S_ISFIFO(os.stat(mnt / "fifo2").st_mode)
    assert stat.S_ISSOCK(os.stat(mnt / "sock2").st_mode)
    for n in ("fifo", "sock", "null", "blk", "fifo2", "sock2"):
        os.unlink(mnt / n)
    assert not [n for n in os.listdir(mnt) if n in ("fifo", "null")]


def test_device_nodes_are_served_by_the_kernel_with_dev(pvfs_cluster, tmp_path):
    """With ``-o dev`` a character device node on pvfs works like /dev/zero and /dev/null
    (the default mount is nodev, as FUSE mounts are)."""
    with Mount(pvfs_cluster.config_path, tmp_path / "devmnt", "dev") as m:
        os.mknod(m.path / "zero", stat.S_IFCHR | 0o666, os.makedev(1, 5))
        with open(m.path / "zero", "rb") as fh:
            assert fh.read(4096) == bytes(4096)
        os.mknod(m.path / "null", stat.S_IFCHR | 0o666, os.makedev(1, 3))
        with open(m.path / "null", "wb") as fh:
            fh.write(b"gone")
        assert os.stat(m.path / "null").st_size == 0
        os.unlink(m.path / "zero")
        os.unlink(m.path / "null")


@root_only
@pytest.mark.parametrize("extra", ["", ",default_permissions=0"])
def test_cached_names_never_skip_a_permission_check(pvfs_cluster, extra):
    """pjdfstest chmod_05 and friends: after ``chmod 0644 DIR`` a user may no longer reach
    ``DIR/FILE`` even though the kernel still holds the name (long entry_timeout here).
    With ``default_permissions=0`` the manager alone decides and cannot see the kernel's
    cached lookups: docs/mount.md promises the change within ``entry_timeout`` (1 s here)."""
    base = Path(tempfile.mkdtemp(prefix="pvfs-perm-"))
    base.chmod(0o755)
    opts = ("entry_timeout=1,attr_timeout=1" if extra else "entry_timeout=60,attr_timeout=60") \
        + extra
    try:
        with Mount(pvfs_cluster.config_path, base / "mnt", opts) as m:
            d = m.path / f"dir{len(extra)}"
            d.mkdir(mode=0o755)
            os.chown(d, 1234, 1234)
            f = d / "file"
            assert as_user("touch", str(f)).returncode == 0
            assert as_user("chmod", "0642", str(f)).returncode == 0  # the name is cached now
            os.chmod(d, 0o644)  # no search permission for anyone but root
            if extra:
                time.sleep(1.5)  # the cached name has expired
            checks = {"chmod": ["chmod", "0620", str(f)], "open": ["cat", str(f)],
                      "truncate": ["truncate", "-s", "0", str(f)],
                      "link": ["ln", str(f), str(m.path / f"l{len(extra)}")]}
            allowed = {k: as_user(*argv).returncode == 0 for k, argv in checks.items()}
            assert allowed == dict.fromkeys(checks, False)
            assert stat.S_IMODE(os.stat(f).st_mode) == 0o642
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_st_blocks_is_the_space_the_stripe_files_use(mnt, pvfs_cluster):
    """``du`` of a sparse file is its data, not its size (issue 9: 960 GB for 3.4 GB)."""
    sparse = mnt / "sparse"
    with open(sparse, "wb") as fh:
        fh.seek(100 << 20)
        fh.write(b"x" * 4096)
    dense = mnt / "dense"
    dense.write_bytes(os.urandom(1 << 20))
    st = os.stat(sparse)
    assert st.st_size == (100 << 20) + 4096 and 0 < st.st_blocks < 1024
    assert 2048 <= os.stat(dense).st_blocks < 2048 + 1024
    du = subprocess.run(["du", "-k", str(sparse), str(dense)], capture_output=True, text=True,
                        check=True, timeout=PROBE_TIMEOUT)
    kib = {Path(p).name: int(n) for n, p in (line.split("\t") for line in du.stdout.splitlines())}
    assert kib["sparse"] < 512 and 1024 <= kib["dense"] < 1536
    with pvfs_cluster.connect() as fs:
        assert fs.stat("/sparse").st_blocks == st.st_blocks
    os.mkfifo(mnt / "blocks-fifo")
    assert os.stat(mnt / "blocks-fifo").st_blocks == 0
    for n in ("sparse", "dense", "blocks-fifo"):
        os.unlink(mnt / n)


def test_a_new_files_mtime_does_not_move(pvfs_cluster):
    """The create reply's times are the file's (pjdfstest utimensat/02: mtime moved by the
    stripe files, created after the inode); also after an O_TRUNC open."""
    with pvfs_cluster.connect() as fs:
        for i in range(8):
            a = fs.meta("create", parent=1, name=f"mt{i}", mode=0o644, flags=os.O_RDWR)
            assert fs.stat(f"/mt{i}").st_mtime_ns == a["mtime_ns"]
            fs.meta("close", ino=a["ino"])
        with fs.open("/mt0", "wb") as fh:
            fh.write(b"data")
        a = fs.meta("create", parent=1, name="mt0", mode=0o644, flags=os.O_RDWR | os.O_TRUNC)
        assert a["size"] == 0 and fs.stat("/mt0").st_mtime_ns == a["mtime_ns"]
        fs.meta("close", ino=a["ino"])
        for i in range(8):
            fs.unlink(f"/mt{i}")
