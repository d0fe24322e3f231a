"""The I/O daemons' fast path (csrc/fast.c, daemons/iod/data.py) on real daemons.

A read or write of a stripe file a daemon has opened is served by its engine without a
Python turn; each test checks both that it was (the engines' ``fast`` counters moved) and
that what the client and the manager see is what the Python path gives: the bytes, the sizes
the manager keeps (a write after a stat must be reported first), a stripe file unlinked
behind the daemon, a write carrying an mtime, rs deciding per request, the statistics.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pvfs.client.hints import AccessHint
from pvfs.layout.describe import contiguous
from pvfs.layout.stripe import Stripe

STRIPE = Stripe(0, 4, 65536)


def fast_jobs(fs) -> int:
    return sum(fs.iod_call(i, "status")["engine"]["fast"]["jobs"]
               for i in range(fs.config.niods))


@pytest.fixture
def fsys(pvfs_cluster):
    fs = pvfs_cluster.connect()
    yield fs
    fs.close()


def test_reads_and_writes_of_an_open_stripe_file_are_the_engines(fsys):
    data = os.urandom(1 << 20)
    with fsys.open("/fast-rw", "w+b", stripe=STRIPE) as f:
        f.pwrite(data, 0)                     # first: misses, opened in worker threads
        before = fast_jobs(fsys)
        f.pwrite(data[::-1], 0)               # every daemon has it open now
        assert f.pread(1 << 20, 0) == data[::-1]
        assert f.pread(100, (1 << 20) - 50) == data[::-1][-50:]   # short at the end
        assert fast_jobs(fsys) - before == 4 + 4 + 2    # (the last read: ranks 3 and 0)


def test_a_write_after_a_stat_is_reported_to_the_manager_first(fsys):
    """The manager keeps a size it fetched with a promise; the engine must not let a write
    go by while the promise stands (a fast write would leave the old size in the cache)."""
    for i in range(3):
        with fsys.open(f"/fast-size{i}", "w+b", stripe=STRIPE) as f:
            f.pwrite(b"a" * 100, 0)
            f.pwrite(b"b" * 100, 0)           # granted for writes: the engine's
            assert fsys.stat(f"/fast-size{i}").st_size == 100     # fetched, promised
            f.pwrite(b"c" * 100, 5000)        # the promise holds: reported first
            assert fsys.stat(f"/fast-size{i}").st_size == 5100
            f.pwrite(b"d" * 10, 9000)
            assert fsys.stat(f"/fast-size{i}").st_size == 9010


def test_a_stripe_file_unlinked_behind_the_daemon_is_not_served(fsys, pvfs_cluster):
    with fsys.open("/fast-gone", "w+b", stripe=Stripe(0, 1, 65536)) as f:
        f.pwrite(b"x" * 1000, 0)
        assert f.pread(1000, 0) == b"x" * 1000        # granted
        stripe_path(pvfs_cluster, 0, f.ino).unlink()
        # The engine finds its descriptor unlinked; Python reopens: no file, a hole.
        assert f.pread(1000, 0) == b""
        f.pwrite(b"y" * 10, 0)
        assert f.pread(1000, 0) == b"y" * 10


def stripe_path(cluster, iod: int, ino: int) -> Path:
    return Path(cluster.config.iods[iod].data_dir, "stripes", f"{ino & 0xFF:02x}",
                f"{ino:016x}")


def test_a_write_carrying_an_mtime_sets_it(fsys, pvfs_cluster):
    with fsys.open("/fast-mtime", "w+b", stripe=Stripe(0, 1, 65536)) as f:
        f.pwrite(b"x" * 100, 0)
        f.pwrite(b"x" * 100, 0)                       # granted
        fsys.data.write(f.ino, f.stripe, contiguous(0, 10), b"z" * 10,
                        mtime_ns=1_000_000_000_123)
        assert stripe_path(pvfs_cluster, 0, f.ino).stat().st_mtime_ns == 1_000_000_000_123
        assert f.pread(12, 0) == b"z" * 10 + b"xx"


def test_hinted_reads_and_rs_go_through_python(fsys, pvfs_cluster):
    from conftest import schedulers_kept

    data = os.urandom(256 * 1024)
    with fsys.open("/fast-rs", "w+b", stripe=STRIPE) as f:
        f.pwrite(data, 0)
        f.pread(len(data), 0)
        before = fast_jobs(fsys)
        f.set_hint(AccessHint(size=len(data), requests=1, regions=1, range=len(data)))
        assert f.pread(len(data), 0) == data
        f.set_hint(None)
        assert fast_jobs(fsys) == before
        with schedulers_kept(pvfs_cluster.config):
            for i in range(fsys.config.niods):
                fsys.iod_call(i, "sched_set", algorithm="rs")
            assert f.pread(len(data), 0) == data
            f.pwrite(data, 0)
            assert fast_jobs(fsys) == before
            for i in range(fsys.config.niods):
                fsys.iod_call(i, "sched_set", algorithm="opt1")
            assert f.pread(len(data), 0) == data
            assert fast_jobs(fsys) == before + 4


def test_the_statistics_count_the_engines_jobs(fsys):
    with fsys.open("/fast-stats", "w+b", stripe=Stripe(0, 1, 65536)) as f:
        f.pwrite(b"s" * 4096, 0)
        f.pread(4096, 0)
        base = fsys.iod_call(0, "stats")
        jobs0 = fast_jobs(fsys)
        for _ in range(5):
            f.pwrite(b"t" * 4096, 0)
            f.pread(4096, 0)
        assert fast_jobs(fsys) - jobs0 == 10
        after = fsys.iod_call(0, "stats")
        c0, c1 = base["counters"], after["counters"]
        assert c1["read_requests"] - c0["read_requests"] == 5
        assert c1["write_requests"] - c0["write_requests"] == 5
        assert c1["bytes_read"] - c0["bytes_read"] == 5 * 4096
        assert c1["bytes_written"] - c0["bytes_written"] == 5 * 4096
        ino = str(fsys.stat("/fast-stats").st_ino)
        assert after["files"][ino]["total_requests"] - base["files"][ino]["total_requests"] == 10


def test_a_removed_file_keeps_no_descriptor_open(fsys, pvfs_cluster):
    """The grant's dup goes with the daemon's own descriptor: a removed file's blocks are
    freed, not held open by the engine (df would never see them back)."""
    with fsys.open("/fast-removed", "w+b", stripe=STRIPE) as f:
        f.pwrite(os.urandom(1 << 20), 0)
        f.pread(1 << 20, 0)                   # granted on every daemon
        ino = f.ino
    fsys.unlink("/fast-removed")
    pvfs_cluster.removals_done()
    name = f"{ino:016x}"
    for i in range(fsys.config.niods):
        fsys.iod_call(i, "status")            # (a turn of each daemon since the removal)
        pid = pvfs_cluster.pid(f"iod{i}")
        held = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
        assert not [p for p in held if name in p], held
