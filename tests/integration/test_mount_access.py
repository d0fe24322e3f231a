"""Two users through a real mount: the mode bits decide, for every way in (SPEC §10, issue 9).

Root builds a tree through the mount; a child process that has switched to another uid
(``os.setresuid``) then tries to read, write, truncate, remove, rename, chmod, chown and
re-create what the mode bits deny, including opens that would change the file before failing
(``O_CREAT|O_TRUNC`` on a file the user may not write). Every attempt must fail with the
kernel's errno and leave the file as it was; a few allowed operations prove the user reaches
the mount at all. Run with the kernel checking permissions (``default_permissions``, the
default) and without it, where only the manager's rules stand between the user and the data.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from test_mount_support import Mount, needs_fuse

UID = GID = 4242

# (name, operation, expected errno name); run in order as UID inside the mount.
DENIED = [
    ("read a 0600 file", "read:priv", "EACCES"),
    ("write-open a 0644 file", "open_w:ro", "EACCES"),
    ("O_CREAT|O_TRUNC a 0644 file", "creat_trunc:ro", "EACCES"),
    ("O_TRUNC|O_RDONLY a 0644 file", "trunc_ro:ro", "EACCES"),
    ("O_CREAT|O_TRUNC a 0600 file", "creat_trunc:priv", "EACCES"),
    ("O_APPEND a 0644 file", "append:ro", "EACCES"),
    ("truncate a 0644 file", "truncate:ro", "EACCES"),
    ("ftruncate through a read-only descriptor", "ftruncate_rdonly:ro", "EINVAL"),
    ("unlink in a 0755 root directory", "unlink:locked/f", "EACCES"),
    ("rename out of a 0755 root directory", "rename:locked/f", "EACCES"),
    ("create in a 0755 root directory", "create:locked/new", "EACCES"),
    ("rmdir a root directory in /", "rmdir:locked", "EACCES"),
    ("unlink another's file in a sticky directory", "unlink:sticky/rootfile", "EPERM"),
    ("rename over another's file in a sticky directory", "rename_over:sticky/rootfile",
     "EPERM"),
    ("chmod another's file", "chmod:ro", "EPERM"),
    ("chown a file to oneself", "chown:ro", "EPERM"),
    ("set another's file times", "utime:ro", "EPERM"),
    ("traverse a 0700 directory", "read:private_dir/f", "EACCES"),
    ("list a 0700 directory", "listdir:private_dir", "EACCES"),
    ("write a 0666 file in a 0700 directory", "open_w:private_dir/f", "EACCES"),
    # EPERM where fs.protected_hardlinks refuses first (the user does not own ro)
    ("hard-link into a 0755 root directory", "link:ro>locked/ln", "EACCES|EPERM"),
    ("set a user xattr on a 0644 file", "setxattr:ro", "EACCES"),
]
ALLOWED = [
    ("read a 0644 file", "read:ro"),
    ("create in a sticky directory", "create:sticky/mine"),
    ("write one's own file", "open_w:sticky/mine"),
    ("truncate one's own file", "truncate:sticky/mine"),
    ("remove one's own file in a sticky directory", "unlink:sticky/mine"),
]

CHILD = r"""
import errno, json, os, sys
os.setgroups([])
os.setresgid(GID, GID, GID)
os.setresuid(UID, UID, UID)
root = sys.argv[1]
out = []
for op in json.loads(sys.argv[2]):
    kind, _, arg = op.partition(":")
    p = os.path.join(root, arg.split(">")[0])
    try:
        if kind == "read":
            with open(p, "rb") as f:
                f.read()
        elif kind == "open_w":
            os.close(os.open(p, os.O_WRONLY))
        elif kind == "creat_trunc":
            os.close(os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666))
        elif kind == "trunc_ro":
            os.close(os.open(p, os.O_RDONLY | os.O_TRUNC))
        elif kind == "append":
            os.close(os.open(p, os.O_WRONLY | os.O_APPEND))
        elif kind == "truncate":
            os.truncate(p, 0)
        elif kind == "ftruncate_rdonly":
            fd = os.open(p, os.O_RDONLY)
            try:
                os.ftruncate(fd, 0)
            finally:
                os.close(fd)
        elif kind == "unlink":
            os.unlink(p)
        elif kind == "rename":
            os.rename(p, os.path.join(root, "sticky", "stolen"))
        elif kind == "rename_over":
            mine = os.path.join(root, "sticky", "decoy")
            open(mine, "wb").close()
            try:
                os.rename(mine, p)
            finally:
                if os.path.exists(mine):
                    os.unlink(mine)
        elif kind == "create":
            os.close(os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        elif kind == "rmdir":
            os.rmdir(p)
        elif kind == "chmod":
            os.chmod(p, 0o666)
        elif kind == "chown":
            os.chown(p, UID, GID)
        elif kind == "utime":
            os.utime(p, (1, 1))
        elif kind == "listdir":
            os.listdir(p)
        elif kind == "link":
            os.link(p, os.path.join(root, arg.split(">")[1]))
        elif kind == "setxattr":
            os.setxattr(p, "user.evil", b"1")
        out.append("OK")
    except OSError as exc:
        out.append(errno.errorcode.get(exc.errno, str(exc.errno)))
print(json.dumps(out))
""".replace("UID", str(UID)).replace("GID", str(GID))


def as_user(root: Path, ops: list[str]) -> list[str]:
    r = subprocess.run([sys.executable, "-c", CHILD, str(root), json.dumps(ops)],
                       capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def build_tree(root: Path) -> dict[str, bytes]:
    """As root, through the mount; returns the contents every file must keep."""
    files = {"priv": b"secret" * 1000, "ro": b"readonly" * 1000, "locked/f": b"in locked",
             "sticky/rootfile": b"root's", "private_dir/f": b"hidden"}
    for d, mode in (("locked", 0o755), ("sticky", 0o1777), ("private_dir", 0o700)):
        (root / d).mkdir()
        os.chmod(root / d, mode)
    for name, data in files.items():
        (root / name).write_bytes(data)
    for name, mode in (("priv", 0o600), ("ro", 0o644), ("locked/f", 0o666),
                       ("sticky/rootfile", 0o666), ("private_dir/f", 0o666)):
        os.chmod(root / name, mode)
    return files


@pytest.fixture(scope="module")
def public_dir():
    path = Path(tempfile.mkdtemp(prefix="pvfs-access-", dir="/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@needs_fuse
# Without default_permissions the kernel answers cached names itself (fuse/options.py); with
# zero entry and attribute timeouts every lookup reaches the manager, whose rules are tested.
@pytest.mark.parametrize("options", ["", "default_permissions=0,entry_timeout=0,attr_timeout=0"],
                         ids=["kernel-checks", "manager-checks-only"])
def test_a_second_user_gets_nothing_the_mode_bits_deny(pvfs_cluster, public_dir, options):
    if os.getuid() != 0:
        pytest.skip("needs root to switch uid")
    name = "mnt-" + ("manager" if options else "default")
    with Mount(pvfs_cluster.config_path, public_dir / name, options) as m:
        root = m.path / f"access-{name}"
        root.mkdir()
        os.chmod(root, 0o755)
        files = build_tree(root)
        before = {n: os.stat(root / n) for n in files}
        got = as_user(root, [op for _, op, _ in DENIED])
        wrong = [(what, op, want, have) for (what, op, want), have in zip(DENIED, got)
                 if have not in want.split("|")]
        assert not wrong, "operations not refused as they should be:\n" + "\n".join(
            f"  {what} ({op}): expected {want}, got {have}" for what, op, want, have in wrong)
        got = as_user(root, [op for _, op in ALLOWED])
        assert got == ["OK"] * len(ALLOWED), list(zip([w for w, _ in ALLOWED], got))
        # Nothing the user was refused changed anything: contents, sizes, modes, owners.
        for n, data in files.items():
            st = os.stat(root / n)
            assert (root / n).read_bytes() == data, n
            assert (st.st_size, st.st_mode, st.st_uid, st.st_mtime_ns) == (
                before[n].st_size, before[n].st_mode, before[n].st_uid, before[n].st_mtime_ns), n
        assert sorted(os.listdir(root / "sticky")) == ["rootfile"]
        assert not (root / "locked" / "new").exists() and not (root / "locked" / "ln").exists()
        assert "user.evil" not in os.listxattr(root / "ro")
        shutil.rmtree(root)
