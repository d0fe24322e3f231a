"""The scale benchmark's fill (bench/scale.py) makes a real file system, and its probe and
restart measure it.

The fill writes straight into a stopped manager's store and the I/O daemons' directories; a
mistake there (a missing stripe file, a name without an inode, a wrong layout) would make the
benchmark measure a file system nobody could have. So: after a small fill, ``fsck`` is clean,
every filled file stats as an empty file striped over one daemon, listings show them, a new
file is created beside them, and the manager comes back after a restart with all of them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import start_cluster

from pvfs.bench.scale import PER_DIR, fill, probe, restart_manager
from pvfs.cluster.launch import down, up

FILES = 2 * PER_DIR + 37


def _fsck(cfg: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PVFS_CONFIG"}
    return subprocess.run([sys.executable, "-m", "pvfs.cli.main", "--config", cfg, "--json",
                           "fsck"], capture_output=True, text=True, env=env, timeout=300,
                          check=False)


def test_a_filled_file_system_is_whole_and_serves(tmp_path):
    cluster = start_cluster(tmp_path)
    try:
        down(cluster.config)
        got = fill(cluster.config, FILES)
        assert got["files"] == FILES and got["directories"] == 4
        up(cluster.config)
        r = _fsck(cluster.config_path)
        assert r.returncode == 0, r.stdout + r.stderr
        report = json.loads(r.stdout)
        assert report["clean"] and report["checked"]["inodes"] >= FILES
        assert report["checked"]["stripe_files"] >= FILES
        with cluster.connect() as fs:
            assert sorted(fs.listdir("/fill")) == ["d00000", "d00001", "d00002"]
            assert len(fs.listdir("/fill/d00002")) == 37
            for i in (0, 1, PER_DIR + 2, FILES - 1):
                path = f"/fill/d{i // PER_DIR:05d}/f{i % PER_DIR:04d}"
                st = fs.stat(path)
                assert st.st_size == 0 and os.path.basename(path) in fs.listdir(
                    os.path.dirname(path))
                layout = fs.meta("getstripe", ino=st.st_ino)["stripe"]
                assert layout[1] == 1 and layout[0] == i % cluster.config.niods
            with fs.open("/fill/d00000/f0003", "r+b") as f:  # a filled file takes data
                f.write(b"scale")
            assert fs.stat("/fill/d00000/f0003").st_size == 5
        rates = probe(cluster.config_path, "t", 20)
        assert rates["create_per_s"] > 0 and rates["stat_per_s"] > 0
        back = restart_manager(cluster.config)
        assert 0 < back["ping_s"] <= back["serving_s"]
        with cluster.connect() as fs:
            assert len(fs.listdir("/fill/d00001")) == PER_DIR
            assert len(fs.listdir("/probe-t")) == 20
    finally:
        down(cluster.config)
