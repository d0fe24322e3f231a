"""The mount answers the kernel's getattr of a directory after its own creates and unlinks
there from the manager's reply (fuse/dirattrs.py), and never shows stale attributes after
any other change it makes to the directory."""

from __future__ import annotations

import os
import time

import pytest
from test_mount_support import Mount, needs_fuse

pytestmark = needs_fuse


def _answered_here(stats: dict) -> int:
    """Directory getattrs the mount answered itself: from what its own creates and unlinks
    returned (dirattrs.py) or, with leases, from the directory's lease (in Python, or in
    the C front end's workers: ``attrs_here``)."""
    return stats["dir_attr_hits"] + stats.get("leases", {}).get("lease_hits", 0) + \
        stats["frontend"].get("attrs_here", 0)


@pytest.mark.parametrize("options", ["attr_timeout=5,leases=0", "attr_timeout=5"])
def test_creates_and_unlinks_need_no_directory_getattr(pvfs_cluster, tmp_path, options):
    with Mount(pvfs_cluster.config_path, tmp_path / "mnt", options) as m:
        d = m.path / "many"
        d.mkdir()
        os.chmod(d, 0o755)
        before = _answered_here(m.stats())
        for i in range(50):
            os.close(os.open(d / f"f{i}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        assert _answered_here(m.stats()) - before >= 40  # the kernel asked; the mount knew
        st = os.stat(d)
        with pvfs_cluster.connect() as fs:
            assert fs.stat("/many").st_mtime_ns == st.st_mtime_ns  # what the manager has
        for i in range(50):
            os.unlink(d / f"f{i}")
        assert os.stat(d).st_mtime_ns >= st.st_mtime_ns and os.stat(d).st_nlink == 2
        d.rmdir()


def test_other_changes_to_a_directory_are_seen_at_once(pvfs_cluster, tmp_path):
    with Mount(pvfs_cluster.config_path, tmp_path / "mnt", "attr_timeout=30") as m:
        d = m.path / "d"
        d.mkdir()
        (d / "x").write_bytes(b"")  # now the mount holds d's attributes
        os.chmod(d, 0o700)
        assert os.stat(d).st_mode & 0o777 == 0o700
        ctime = os.stat(d).st_ctime_ns
        time.sleep(0.01)
        os.setxattr(d, "user.note", b"1")
        assert os.stat(d).st_ctime_ns > ctime
        ctime = os.stat(d).st_ctime_ns
        time.sleep(0.01)
        os.rename(d, m.path / "e")  # a moved directory's ctime changes
        e = m.path / "e"
        assert os.stat(e).st_ctime_ns > ctime
        (e / "sub").mkdir()
        assert os.stat(e).st_nlink == 3
        os.symlink("x", e / "link")
        mtime = os.stat(e).st_mtime_ns
        time.sleep(0.01)
        (e / "sub").rmdir()
        assert os.stat(e).st_nlink == 2 and os.stat(e).st_mtime_ns > mtime
        for n in ("x", "link"):
            os.unlink(e / n)
        e.rmdir()


def test_ls_l_asks_the_manager_for_no_security_probe(pvfs_cluster, tmp_path):
    """readdir/lookup replies say whether an inode has security.* names (secx): `ls -l`'s
    security.selinux of each entry needs no getxattr; a set one is still seen."""
    import subprocess

    def getxattrs(fs) -> float:
        for fam in fs.meta("metrics")["families"]:
            if fam["name"] == "pvfs_requests_total":
                return sum(v for _suffix, labels, v in fam["samples"]
                           if labels.get("op") == "getxattr")
        return 0.0

    with pvfs_cluster.connect() as fs:
        fs.mkdir("/listed")
        for i in range(40):
            fs.open(f"/listed/f{i}", "wb").close()
        fs.setxattr("/listed/f7", "security.selinux", b"system_u:object_r:pvfs_t:s0\0")
        with Mount(pvfs_cluster.config_path, tmp_path / "mnt", "attr_timeout=30") as m:
            before = getxattrs(fs)
            out = subprocess.run(["ls", "-lZ", str(m.path / "listed")], check=True,
                                 capture_output=True, text=True).stdout
            assert getxattrs(fs) - before <= 1      # only f7's label is fetched
            assert "pvfs_t" in out and out.count("\n") == 41
        for i in range(40):
            fs.unlink(f"/listed/f{i}")
        fs.rmdir("/listed")
