"""Creates take precreated inode numbers (daemons/mgr/precreate.py) against real daemons; stripe
files are made by first writes (daemons/iod/storage.py)."""

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


def test_a_create_takes_a_pool_number_and_stripe_files_come_with_the_bytes(pvfs_cluster, fs):
    pooled = pool_of(fs, least=4)
    assert pooled, "the manager reserved no numbers ahead of creates"
    iods = [PosixStorage(e.data_dir) for e in pvfs_cluster.config.iods]
    assert not any(Path(st.path(i)).exists() for st in iods for i in pooled)
    a = fs.meta("create", parent=1, name="pooled", mode=0o644, flags=0)
    assert a["created"] and a["ino"] in pooled and a["size"] == 0
    assert fs.stat("/pooled").st_mtime_ns == a["mtime_ns"]
    assert not any(Path(st.path(a["ino"])).exists() for st in iods)  # empty: no file at all
    with fs.open("/pooled", "rb") as f:
        assert f.read() == b""
    with fs.open("/pooled", "r+b") as f:
        f.write(b"x" * 100_000)  # 64 KiB units: the first two daemons' shares only
    with fs.open("/pooled", "rb") as f:
        assert f.read() == b"x" * 100_000
    assert [Path(st.path(a["ino"])).exists() for st in iods] == [True, True, False, False]
    assert fs.stat("/pooled").st_size == 100_000
    assert a["ino"] not in set(fs.meta("precreated")["inos"])
    # A layout on fewer daemons takes a new number; its bytes land on its daemons only.
    with fs.open("/narrow", "wb", stripe=Stripe(1, 2, 65536)) as f:
        f.write(b"y" * 200_000)
    n = fs.stat("/narrow").st_ino
    assert n not in pooled
    assert [Path(st.path(n)).exists() for st in iods] == [False, True, True, False]
    fs.truncate("/narrow", 10)  # to a length inside the first share: the rest empty
    with fs.open("/narrow", "rb") as f:
        assert f.read() == b"y" * 10
    orphans, counts = scan(fs)
    assert not orphans and counts["precreated"] > 0
    fs.unlink("/pooled")
    fs.unlink("/narrow")


def test_many_creates_drain_and_refill_the_pool(pvfs_cluster, fs):
    pool_of(fs, least=64)
    inos = []
    for i in range(600):  # more than two batches: the refill runs while creates go on
        inos.append(fs.meta("create", parent=1, name=f"many{i}", mode=0o644, flags=0)["ino"])
    assert len(set(inos)) == 600
    assert len(pool_of(fs, least=64)) >= 64
    orphans, counts = scan(fs)
    assert not orphans and counts["stripe_files"] == 0  # never written: no stripe file
    for i in range(600):
        fs.unlink(f"/many{i}")
