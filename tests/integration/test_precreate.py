"""Creates take precreated stripe files (daemons/mgr/precreate.py) against real daemons."""

from __future__ import annotations

import time
from pathlib import Path

from pvfs.cli.cmd_admin import scan
from pvfs.daemons.iod.storage import PosixStorage
from pvfs.layout.stripe import Stripe


def pool_of(fs, least: int = 1, limit: float = 20.0) -> set[int]:
    deadline = time.monotonic() + limit
    while True:
        pooled = set(fs.meta("precreated")["ready"])
        if len(pooled) >= least or time.monotonic() > deadline:
            return pooled
        time.sleep(0.05)


def test_a_create_takes_a_number_whose_stripe_files_exist(pvfs_cluster, fs):
    pooled = pool_of(fs, least=4)
    assert pooled, "the manager made no stripe files ahead of creates"
    iods = [PosixStorage(e.data_dir) for e in pvfs_cluster.config.iods]
    assert all(Path(st.path(i)).exists() for st in iods for i in pooled)
    a = fs.meta("create", parent=1, name="pooled", mode=0o644, flags=0)
    assert a["created"] and a["ino"] in pooled and a["size"] == 0
    assert fs.stat("/pooled").st_mtime_ns == a["mtime_ns"]  # older stripe files: no jump
    with fs.open("/pooled", "r+b") as f:
        f.write(b"x" * 300_000)
    with fs.open("/pooled", "rb") as f:
        assert f.read() == b"x" * 300_000
    assert a["ino"] not in set(fs.meta("precreated")["inos"])
    # A layout on fewer daemons makes its own stripe files, on its daemons only.
    with fs.open("/narrow", "wb", stripe=Stripe(1, 2, 65536)) as f:
        f.write(b"y" * 200_000)
    n = fs.stat("/narrow").st_ino
    assert n not in pooled
    assert [Path(st.path(n)).exists() for st in iods] == [False, True, True, False]
    orphans, dangling, counts = scan(fs)
    assert not orphans and not dangling and counts["precreated"] > 0
    fs.unlink("/pooled")
    fs.unlink("/narrow")


def test_many_creates_drain_and_refill_the_pool(pvfs_cluster, fs):
    pool_of(fs, least=64)
    inos = []
    for i in range(600):  # more than two batches: the refill runs while creates go on
        inos.append(fs.meta("create", parent=1, name=f"many{i}", mode=0o644, flags=0)["ino"])
    assert len(set(inos)) == 600
    assert len(pool_of(fs, least=64)) >= 64
    orphans, dangling, _ = scan(fs)
    assert not orphans and not dangling
    for i in range(600):
        fs.unlink(f"/many{i}")
