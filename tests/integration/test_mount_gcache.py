"""Mounts with the global cache (``-o gcache=on|off``): two nodes share it, sync writes reach
both levels, a dead global cache degrades to the I/O daemons."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from pvfs.cluster.launch import down, free_ports, request
from pvfs.config import Endpoint
from pvfs.gcache.config import gcache_table

sys.path.insert(0, str(Path(__file__).parent))
from conftest import start_cluster
from test_mount_support import Mount, needs_fuse

pytestmark = [pytest.mark.fuse, needs_fuse]


@pytest.fixture(scope="module")
def gcluster(tmp_path_factory):
    port = free_ports(1)[0]
    cluster = start_cluster(tmp_path_factory.mktemp("gc"), iods=2, connect_timeout=1.0,
                            request_timeout=3.0,
                            extra={"gcache": gcache_table([f"127.0.0.1:{port}"],
                                                          capacity=4 << 20)})
    try:
        yield cluster, Endpoint("127.0.0.1", port, "")
    finally:
        down(cluster.config)


def test_sync_write_seen_through_both_levels(gcluster, tmp_path):
    cluster, ep = gcluster
    with Mount(cluster.config_path, tmp_path / "a", "coherence=sync") as a, \
            Mount(cluster.config_path, tmp_path / "b", "coherence=sync") as b:
        (a.path / "f").write_bytes(b"a" * 20000)
        fb = os.open(b.path / "f", os.O_RDONLY)
        try:
            assert os.pread(fb, 4, 8192) == b"aaaa"  # B holds it in both caches now
            fa = os.open(a.path / "f", os.O_WRONLY | os.O_SYNC)
            os.pwrite(fa, b"bbbb", 8192)
            os.close(fa)
            assert os.pread(fb, 4, 8192) == b"bbbb"
        finally:
            os.close(fb)
        stats = b.stats()
        assert stats["gcache"]["global_reads"] >= 1
    g = request(ep, {"op": "stats"})
    assert g["reads"] >= 1 and g["invalidations"] >= 1


def test_gcache_off_and_bypass_bits(gcluster, tmp_path):
    cluster, _ = gcluster
    with Mount(cluster.config_path, tmp_path / "n", "gcache=off") as m:
        (m.path / "g").write_bytes(b"x" * 10000)
        assert "gcache" not in m.stats()
    with Mount(cluster.config_path, tmp_path / "o") as m:
        os.setxattr(m.path / "g", "user.pvfs.bypass", b"*:rl,rg")
        assert (m.path / "g").read_bytes() == b"x" * 10000
        st = m.stats()["gcache"]
        assert st["direct_reads"] >= 1 and st["global_reads"] == 0


def test_scattered_writes_keep_list_io_with_gcache(gcluster, tmp_path):
    """The mount's write-back of scattered blocks reaches the global cache as list writes
    (a few requests, not one per block), and the bytes arrive."""
    import random

    cluster, ep = gcluster
    rng = random.Random(3)
    with Mount(cluster.config_path, tmp_path / "l") as m:
        p = m.path / "scattered"
        model = bytearray(rng.randbytes(1 << 20))
        p.write_bytes(model)
        s0, g0 = m.stats(), request(ep, {"op": "stats"})
        fd = os.open(p, os.O_RDWR)
        try:
            for _ in range(200):
                blk = rng.randrange(256)
                data = rng.randbytes(4096)
                model[blk * 4096:(blk + 1) * 4096] = data
                os.pwrite(fd, data, blk * 4096)
            os.fsync(fd)
        finally:
            os.close(fd)
        s1, g1 = m.stats(), request(ep, {"op": "stats"})
        assert s1["list_writes"] > s0["list_writes"]
        assert s1["backend_writes"] - s0["backend_writes"] < 20
        assert g1["writes"] - g0["writes"] < 20  # ~180 distinct blocks
        with open(p, "rb") as fh:
            assert fh.read() == model
    with cluster.connect() as fs, fs.open("/scattered", "rb") as f:
        assert f.read() == model


def test_dead_gcache_degrades_and_keeps_fsynced_data(gcluster, tmp_path):
    cluster, _ = gcluster
    data = os.urandom(50000)
    with Mount(cluster.config_path, tmp_path / "k") as m:
        fd = os.open(m.path / "k", os.O_CREAT | os.O_WRONLY, 0o644)
        os.pwrite(fd, data, 0)
        os.fsync(fd)
        os.close(fd)
        cluster.kill("gcache0", signal.SIGKILL)
        with open(m.path / "k", "rb") as fh:  # served by the I/O daemons now
            assert fh.read() == data
        fd = os.open(m.path / "k", os.O_WRONLY)
        os.pwrite(fd, b"more", 50000)
        os.fsync(fd)
        os.close(fd)
        assert m.stats()["gcache"]["failovers"] >= 1
    with cluster.connect() as fs, fs.open("/k", "rb") as f:
        assert f.read() == data + b"more"
    from pvfs.cluster.launch import up

    up(cluster.config)  # the next test of this module finds it running again


def test_a_gcache_address_of_another_daemon_fails_the_mount(gcluster, tmp_path):
    """A config whose ``[gcache]`` address names an I/O daemon's port: the mount fails at
    once, naming the address and what answered there (it used to mount, and then every
    create failed EINVAL, with only "unknown operation 'flush'" in the mount's log)."""
    import dataclasses
    import subprocess

    from pvfs.cluster.launch import write_config

    cluster, _ = gcluster
    iod = cluster.config.iods[0]
    wrong = write_config(dataclasses.replace(cluster.config, extra={
        **cluster.config.extra, "gcache": gcache_table([iod.address], capacity=4 << 20)}),
        str(tmp_path / "wrong.toml"))
    said = f"{iod.address} is not a pvfs global cache daemon (it answered as an I/O daemon)"
    m = Mount(wrong.path, tmp_path / "w")
    try:
        with pytest.raises(RuntimeError) as failed:
            m.start()
        assert said in str(failed.value)
        assert not m.listed()
    finally:
        m.stop()
    # and as `pvfs-admin mount` says it (the daemonized mount's parent)
    mp = tmp_path / "d"
    mp.mkdir()
    try:
        done = subprocess.run([sys.executable, "-m", "pvfs.cli.main", "--config", wrong.path,
                               "mount", str(mp)], capture_output=True, text=True, timeout=60,
                              check=False)
        assert done.returncode == 1, done
        assert said in done.stderr
        assert not os.path.ismount(mp)
    finally:
        if os.path.ismount(mp):
            subprocess.run(["fusermount3", "-u", "-z", str(mp)], check=False)


@pytest.fixture
def slow_flush(tmp_path):
    """A global cache that writes back only when asked: dirty blocks wait there."""
    port = free_ports(1)[0]
    cluster = start_cluster(tmp_path / "c", iods=2, connect_timeout=1.0, request_timeout=3.0,
                            extra={"gcache": gcache_table([f"127.0.0.1:{port}"],
                                                          capacity=4 << 20,
                                                          flush_interval=60.0)})
    try:
        yield cluster, Endpoint("127.0.0.1", port, "")
    finally:
        down(cluster.config)


def test_removed_files_leave_no_stripe_files_behind(slow_flush, tmp_path):
    """A file removed while the global cache holds its written blocks: the cache writes them
    back before the manager removes the stripe files (or drops them after), never after the
    removal, where they made the stripe files again (fsck found such orphans after
    pjdfstest). A file removed while open, one replaced by a rename, one unlinked."""
    import json
    import subprocess

    cluster, ep = slow_flush
    with Mount(cluster.config_path, tmp_path / "r") as m:
        fd = os.open(m.path / "open", os.O_CREAT | os.O_RDWR, 0o644)
        os.write(fd, b"x" * 13)
        os.unlink(m.path / "open")
        os.close(fd)  # the manager removes it now
        (m.path / "old").write_bytes(b"y" * 13)
        (m.path / "new").write_bytes(b"z")
        os.rename(m.path / "new", m.path / "old")
        (m.path / "gone").write_bytes(b"w" * 13)
        os.unlink(m.path / "gone")
        assert (m.path / "old").read_bytes() == b"z"
        request(ep, {"op": "flush", "ino": 0})  # whatever the global cache still holds
    out = subprocess.run([sys.executable, "-m", "pvfs.cli.main", "--config",
                          str(cluster.config_path), "--json", "fsck"],
                         capture_output=True, text=True, timeout=60, check=False)
    report = json.loads(out.stdout)
    assert report["orphans"] == [] and report["clean"], report


def test_unmount_leaves_what_it_wrote_on_the_io_daemons(slow_flush, tmp_path):
    """After an unmount the file system's bytes are on the I/O daemons, not only in a global
    cache that holds them dirty (killed right after, it takes nothing with it)."""
    cluster, _ = slow_flush
    data = os.urandom(50_000)
    with Mount(cluster.config_path, tmp_path / "u") as m:
        (m.path / "kept").write_bytes(data)
    cluster.kill("gcache0", signal.SIGKILL)
    with cluster.connect() as fs, fs.open("/kept", "rb") as f:
        assert f.read() == data
