"""The mount's teardown (fuse/mount.py: each part's undo registered on one exit stack): a
SIGTERM while a file is open with dirty blocks in the cache still writes them back, removes
the status file and ends the process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_mount_support import needs_fuse

pytestmark = [pytest.mark.fuse, needs_fuse]


def test_sigterm_with_dirty_blocks_writes_them_back(fresh_cluster, tmp_path):
    mp = tmp_path / "mnt"
    mp.mkdir()
    status = tmp_path / "status"
    env = dict(os.environ, PVFS_MOUNT_STATUS_DIR=str(status))
    log = open(tmp_path / "mount.log", "ab")  # noqa: SIM115 - closed in finally
    # Nothing is written back on its own for ten minutes: only the teardown can do it.
    proc = subprocess.Popen([sys.executable, "-m", "pvfs.fuse", "--config",
                             fresh_cluster.config_path, str(mp), "--foreground", "-o",
                             "dirty_age=600,flush_interval=600"],
                            stdout=log, stderr=log, stdin=subprocess.DEVNULL, env=env)
    fd = -1
    try:
        deadline = time.monotonic() + 30
        while not os.path.ismount(mp):
            assert proc.poll() is None and time.monotonic() < deadline, \
                (tmp_path / "mount.log").read_text()[-2000:]
            time.sleep(0.05)
        os.stat(mp)
        data = os.urandom(20 * 4096)
        fd = os.open(mp / "dirty", os.O_WRONLY | os.O_CREAT, 0o644)
        for off in range(0, len(data), 4096):  # small writes stay in the cache, dirty
            assert os.write(fd, data[off:off + 4096]) == 4096
        with fresh_cluster.connect() as fs:
            assert fs.stat("/dirty").st_size < len(data)  # still only in the mount's cache
        assert list(status.glob("*.json"))
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        assert not os.path.ismount(mp)
        assert not list(status.glob("*.json"))
        with fresh_cluster.connect() as fs, fs.open("/dirty", "rb") as f:
            assert f.read() == data
    finally:
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass  # the mount under it is gone
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        # Not os.path.ismount: a mount whose daemon died answers ENOTCONN, and ismount says
        # False; the lazy unmount of a path that is not mounted just fails quietly.
        subprocess.run(["fusermount3", "-u", "-z", str(mp)], check=False, capture_output=True)
        log.close()
