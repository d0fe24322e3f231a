"""kill -9 of the manager while many creates (and removes) are in flight (issue 29, group commit).

What must hold after the manager is started again: every create that got a reply exists
(group commit answers only after the batch is committed), every remove that got a reply is
gone, and nothing is half made -- no name without an inode, no inode without a name (once
the pending removals are done), no orphan stripe files and no inode without its stripe
files (``pvfs-admin fsck`` clean).
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
import time

import pytest
from conftest import start_cluster

from pvfs.cluster.launch import down, up

CLIENTS = 8


def _fsck(cfg: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PVFS_CONFIG"}
    return subprocess.run([sys.executable, "-m", "pvfs.cli.main", "--config", cfg, "--json",
                           "fsck"], capture_output=True, text=True, env=env, timeout=300,
                          check=False)


class Creator(threading.Thread):
    """Creates (and removes every third of) files in its own directory until a call fails;
    remembers what the manager acknowledged."""

    def __init__(self, cluster, k: int, start: threading.Event) -> None:
        super().__init__(daemon=True)
        self.cluster, self.k, self.go = cluster, k, start
        self.created: set[str] = set()
        self.removed: set[str] = set()
        self.unanswered: str | None = None  # a remove in flight at the kill may or may not be
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with self.cluster.connect() as fs:
                parent = fs.meta("resolve", path=f"/c{self.k}")["ino"]
                self.go.wait()
                i = 0
                while True:
                    name = f"f{i}"
                    fs.meta("create", parent=parent, name=name, mode=0o644, exclusive=True,
                            flags=os.O_WRONLY)
                    self.created.add(name)
                    if i % 3 == 2:
                        victim = self.unanswered = f"f{i - 1}"
                        fs.meta("unlink", parent=parent, name=victim)
                        self.removed.add(victim)
                        self.unanswered = None
                    i += 1
        except OSError as exc:  # the manager died: expected
            self.error = exc


def _db_problems(path: str) -> dict[str, int]:
    """Names without an inode, and inodes (besides the root) without a name that are not
    pending removals, straight from the manager's store (a reader beside it, WAL)."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        nameless = db.execute(
            "SELECT count(*) FROM inodes i WHERE i.ino != 1 AND i.nlink > 0 AND NOT EXISTS "
            "(SELECT 1 FROM dentries d WHERE d.ino = i.ino)").fetchone()[0]
        dangling_names = db.execute(
            "SELECT count(*) FROM dentries d LEFT JOIN inodes i ON i.ino = d.ino "
            "WHERE i.ino IS NULL").fetchone()[0]
    finally:
        db.close()
    return {"inodes without a name": nameless, "names without an inode": dangling_names}


@pytest.mark.slow
@pytest.mark.parametrize("precreate", [256, 0], ids=["pooled", "no-pool"])
def test_kill_9_of_the_manager_during_creates_loses_no_reply_and_leaves_nothing_half_made(
        tmp_path, precreate):
    cluster = start_cluster(tmp_path, iods=4, connect_timeout=1.0, request_timeout=5.0,
                            precreate=precreate)
    try:
        with cluster.connect() as fs:
            for k in range(CLIENTS):
                fs.mkdir(f"/c{k}")
        go = threading.Event()
        creators = [Creator(cluster, k, go) for k in range(CLIENTS)]
        for c in creators:
            c.start()
        go.set()
        # Let them run until a few hundred creates are acknowledged, then kill -9.
        deadline = time.monotonic() + 60
        while sum(len(c.created) for c in creators) < 300 and time.monotonic() < deadline:
            time.sleep(0.01)
        cluster.kill("mgr")
        for c in creators:
            c.join(timeout=60)
            assert not c.is_alive()
            assert c.error is not None, "a creator stopped without an error"
        acknowledged = sum(len(c.created) for c in creators)
        assert acknowledged >= 300
        up(cluster.config)  # the manager again, on the store the crash left
        with cluster.connect() as fs:
            for c in creators:
                names = set(fs.listdir(f"/c{c.k}"))
                lost = (c.created - c.removed - {c.unanswered}) - names
                assert not lost, f"acknowledged creates lost in /c{c.k}: {sorted(lost)[:10]}"
                back = c.removed & names
                assert not back, f"acknowledged removes undone in /c{c.k}: {sorted(back)[:10]}"
        cluster.removals_done(120)
        db = os.path.join(cluster.config.manager.data_dir, "meta.sqlite")
        assert _db_problems(db) == {"inodes without a name": 0, "names without an inode": 0}
        # Stripe files: none without an inode (an interrupted remove's are removed at the
        # start); fsck must find nothing (run it twice: the first may race the reaper).
        r = _fsck(cluster.config_path)
        if r.returncode != 0:
            time.sleep(2)
            r = _fsck(cluster.config_path)
        assert r.returncode == 0, r.stdout + r.stderr
    finally:
        down(cluster.config)
