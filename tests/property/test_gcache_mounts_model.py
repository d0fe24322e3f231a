"""Hypothesis state machines over two FUSE mounts sharing a global cache daemon.

* ``SyncMounts``: two ``coherence=sync`` mounts (local cache each, kernel page cache in
  front) share a global cache; every write is a sync write (``O_SYNC``) from either mount;
  every read, from either mount, must return the bytes of an in-memory model — reads after
  sync writes see the new bytes at both levels (and in the kernel's pages).
* ``KilledGcacheMounts``: two mounts write behind into disjoint byte ranges of one file —
  ranges that share 4 KiB blocks, one mount through the global cache, the other past it
  (``wg`` bits), so a whole-block write-back anywhere would show — and fsync; the global cache (which writes back only every 30 s here, so it holds dirty data)
  is killed (SIGKILL) and restarted at any point. After both mounts' fsync the I/O daemons
  hold every byte either wrote: nothing fsync'd is lost with the daemon.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest
from conftest import start_cluster
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

from pvfs.cluster.launch import down, free_ports, up
from pvfs.gcache.config import gcache_table

sys.path.insert(0, str(Path(__file__).parents[1] / "integration"))
from test_mount_support import Mount, needs_fuse

pytestmark = [pytest.mark.fuse, needs_fuse, pytest.mark.slow]

FILE_MAX = 48 << 10
CHUNK = 3000  # node i writes only in chunks k with k % 2 == i: neighbours share blocks
SETTINGS = settings(max_examples=6, stateful_step_count=14, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

_counter = iter(range(1 << 30))


@pytest.fixture(scope="module")
def gcluster(tmp_path_factory):
    port = free_ports(1)[0]
    cluster = start_cluster(tmp_path_factory.mktemp("gcmm"), iods=2, connect_timeout=1.0,
                            request_timeout=3.0,
                            extra={"gcache": gcache_table([f"127.0.0.1:{port}"],
                                                          capacity=256 << 10,
                                                          flush_interval=30.0)})
    try:
        yield cluster
    finally:
        down(cluster.config)


def _pwrite(path: Path, data: bytes, off: int, flags: int = 0) -> None:
    fd = os.open(path, os.O_WRONLY | flags)
    try:
        os.pwrite(fd, data, off)
    finally:
        os.close(fd)


def _pread(path: Path, n: int, off: int) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.pread(fd, n, off)
    finally:
        os.close(fd)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDWR)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def test_sync_writes_seen_by_both_mounts(gcluster, tmp_path):
    with Mount(gcluster.config_path, tmp_path / "a", "coherence=sync") as a, \
            Mount(gcluster.config_path, tmp_path / "b", "coherence=sync") as b:
        mounts = (a, b)

        class SyncMounts(RuleBasedStateMachine):
            def __init__(self) -> None:
                super().__init__()
                self.model = bytearray()
                self.name = f"sync{next(_counter)}"
                (a.path / self.name).write_bytes(b"")

            @rule(node=st.integers(0, 1), off=st.integers(0, FILE_MAX - 1),
                  data=st.binary(min_size=1, max_size=12_000))
            def sync_write(self, node, off, data):
                _pwrite(mounts[node].path / self.name, data, off, os.O_SYNC)
                if len(self.model) < off:
                    self.model.extend(bytes(off - len(self.model)))
                self.model[off:off + len(data)] = data

            @rule(node=st.integers(0, 1), off=st.integers(0, FILE_MAX - 1),
                  n=st.integers(1, 20_000))
            def read(self, node, off, n):
                got = _pread(mounts[node].path / self.name, n, off)
                assert got == bytes(self.model[off:off + n])

        SyncMounts.TestCase.settings = SETTINGS
        SyncMounts.TestCase().runTest()
        # Generated sequences need not read what the other mount wrote (reads of bytes never
        # written, or of blocks the local cache holds, stay local), so one step that must
        # cross the global cache runs after them: b reads what a sync-wrote.
        data = os.urandom(10_000)
        (a.path / "crossing").write_bytes(b"")
        _pwrite(a.path / "crossing", data, 0, os.O_SYNC)
        assert _pread(b.path / "crossing", len(data), 0) == data
        used = [m.stats()["gcache"] for m in mounts]
        # the global cache was in the path of the mounts' reads and writes
        assert sum(x["global_reads"] for x in used) >= 1, used
        assert sum(x["global_writes"] for x in used) >= 1, used


def test_killed_gcache_loses_nothing_two_mounts(gcluster, tmp_path):
    with Mount(gcluster.config_path, tmp_path / "c") as c, \
            Mount(gcluster.config_path, tmp_path / "d") as d:
        mounts = (c, d)

        class KilledGcacheMounts(RuleBasedStateMachine):
            def __init__(self) -> None:
                super().__init__()
                self.model = bytearray()
                self.name = f"kill{next(_counter)}"
                (c.path / self.name).write_bytes(b"")
                # d writes past the global cache (as after a runtime bypass hint), c through
                # it: their blocks meet only at the I/O daemons
                os.setxattr(d.path / self.name, "user.pvfs.bypass", b"*:wg")
                self.killed = False

            @rule(node=st.integers(0, 1), k=st.integers(0, FILE_MAX // CHUNK // 2 - 1),
                  at=st.integers(0, CHUNK - 1), data=st.binary(min_size=1, max_size=CHUNK))
            def write(self, node, k, at, data):
                chunk = 2 * k + node
                off = chunk * CHUNK + at
                data = data[:CHUNK - at]  # within this node's chunk
                _pwrite(mounts[node].path / self.name, data, off)
                if len(self.model) < off:
                    self.model.extend(bytes(off - len(self.model)))
                self.model[off:off + len(data)] = data

            @rule()
            def fsync_both(self):
                for m in mounts:
                    _fsync(m.path / self.name)
                with gcluster.connect() as fs, fs.open(f"/{self.name}", "rb") as fh:
                    assert fh.read() == bytes(self.model)

            @rule()
            def push(self):
                """c's write-behind data to the global cache, which holds it dirty (its
                flusher runs every 30 s here): only the daemon and c's journal have it."""
                os.setxattr(c.path / self.name, "user.pvfs.drop_cache", b"1")

            @rule(node=st.integers(0, 1))
            def fsync_one(self, node):
                _fsync(mounts[node].path / self.name)

            @precondition(lambda self: not self.killed)
            @rule()
            def kill_gcache(self):
                gcluster.kill("gcache0", signal.SIGKILL)
                self.killed = True

            @precondition(lambda self: self.killed)
            @rule()
            def restart_gcache(self):
                up(gcluster.config)
                self.killed = False

            def teardown(self) -> None:
                if self.killed:
                    up(gcluster.config)

        KilledGcacheMounts.TestCase.settings = SETTINGS
        KilledGcacheMounts.TestCase().runTest()
