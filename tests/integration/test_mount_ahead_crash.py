"""kill -9 of the manager or of an I/O daemon while a leasing mount's creates ahead are
queued or in flight (issue 29, "Done when"): nothing ``fsync``ed is lost (the directory's
``fsync`` makes its names durable), nothing is half made afterwards (``pvfs-admin fsck``
clean: no name without an inode, no inode without a name, no orphan stripe file), and the
mount goes on working once the daemon is back. (A killed mount: test_mount_ahead.py.)"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_mount_ahead import _leasing
from test_mount_support import Mount, needs_fuse

sys.path.insert(0, str(Path(__file__).parent.parent))
from conftest import start_cluster

from pvfs.cluster.launch import down, up

pytestmark = [pytest.mark.fuse, needs_fuse]


def _fsync_dir(d: Path) -> None:
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _settled_and_clean(cluster) -> None:
    """Interrupted removals finished, then ``fsck`` finds nothing (twice if the first raced
    the restarted daemons' pool work, as in test_mgr_crash.py)."""
    cluster.removals_done(120)
    env = {k: v for k, v in os.environ.items() if k != "PVFS_CONFIG"}
    cmd = [sys.executable, "-m", "pvfs.cli.main", "--config", cluster.config_path, "fsck"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)
    if r.returncode != 0:
        time.sleep(2)
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300,
                           check=False)
    assert r.returncode == 0, r.stdout + r.stderr


def _create_then_kill(m: Mount, cluster, victim: str, name: str) -> set[str]:
    """In a directory ``m`` leases alone: 20 creates made durable by the directory's fsync,
    then 300 more (some still queued, some in flight) while ``victim`` is killed -9 and
    started again. Returns the durable names."""
    d = m.path / name
    d.mkdir()
    (d / "warm").touch()
    kept = {f"kept{i}" for i in range(20)}
    for n in sorted(kept):
        (d / n).touch()
    _fsync_dir(d)
    assert m.stats()["creates_ahead"]["sent"] >= len(kept), "the mount did not create ahead"
    for i in range(300):
        if i == 150:
            cluster.kill(victim)
        try:
            (d / f"maybe{i}").touch()
        except OSError:
            pass  # a create the manager could not take while it was down
    up(cluster.config)  # the victim again, on what the crash left
    return kept | {"warm"}


# ahead_delay=60: only the fsync sends the kept creates (and the rest are still queued at the
# kill); the default 5 ms: batches are in flight when the victim dies.
@pytest.mark.parametrize("delay", ["", ",ahead_delay=60"])
@pytest.mark.parametrize("victim", ["mgr", "iod1"])
def test_kill_9_while_creates_ahead_are_in_flight_keeps_what_was_fsynced(tmp_path, victim,
                                                                          delay):
    cluster = start_cluster(tmp_path / "fs", connect_timeout=1.0, request_timeout=5.0,
                            lease_term=3.0)
    try:
        m = Mount(cluster.config_path, tmp_path / "m", "timeout=5" + delay)
        with m:
            _leasing(m)
            durable = _create_then_kill(m, cluster, victim, "crash")
            with cluster.connect() as fs:
                names = set(fs.listdir("/crash"))
            assert durable <= names, f"fsynced creates lost: {sorted(durable - names)[:10]}"
            # the mount goes on: a new directory, created in and read back
            deadline = time.monotonic() + 30
            while True:
                try:
                    (m.path / "after").mkdir(exist_ok=True)
                    (m.path / "after" / "f").write_bytes(b"data")
                    break
                except OSError:
                    assert time.monotonic() < deadline, "the mount did not recover"
                    time.sleep(0.5)
            _fsync_dir(m.path / "after")
            assert (m.path / "after" / "f").read_bytes() == b"data"
        _settled_and_clean(cluster)
    finally:
        down(cluster.config)
