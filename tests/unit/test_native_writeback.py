"""The emulated disk's write-back (csrc/writeback.c): model times for known patterns -- never
wall time -- of writes into its page cache, the flusher, fsync, the dirty limit, eviction
and drop. Until 2026-11-27 the model wrote through: every one of these fails on that code."""

from __future__ import annotations

import os
import socket

import pytest
from test_native_engine import FILE, WRITE, acc, wait_done

from pvfs import _native as nat
from pvfs.models.disk import preset

PG = 4096
W = 4.5e6  # ide-2000's write rate
R = 4.2e6


def disk(**kw) -> nat.Disk:
    return preset("ide-2000", **kw).build()


def close(a: float, b: float) -> bool:
    return abs(a - b) <= 2e-9


def test_a_write_returns_after_the_copy_and_its_pages_are_dirty():
    d = disk()
    assert d.access(1, 0, 1 << 20, write=True, now=1.0) == (0.0, 1.0)
    info = d.info()
    assert info["accesses"] == 0 and info["write_bytes"] == 0 and info["busy_s"] == 0
    assert info["dirty_bytes"] == 1 << 20 and d.cached(1, 0, 1 << 20) == 1 << 20
    # the dirty pages are cached: reading them back costs no disk
    assert d.access(1, 4096, 8192, now=2.0) == (0.0, 2.0)
    assert (info["dirty_background_ratio"], info["dirty_ratio"], info["dirty_expire"]) == (
        0.1, 0.2, 30.0)


def test_fsync_waits_for_the_files_pages_and_for_its_write_back_on_the_disk():
    d = disk()
    d.access(1, 0, 8 * PG, write=True, now=1.0)
    d.access(2, 0, 4 * PG, write=True, now=1.0)
    pos = d.position(0, d.addr(1, 0), write=True)
    done = d.sync(1, now=1.5)
    assert close(done, 1.5 + pos + 8 * PG / W)   # one transfer, the file's pages only
    assert d.info()["dirty_bytes"] == 4 * PG     # file 2's are still dirty
    assert d.sync(1, now=1.5 + 1e-4) == done     # nothing dirty, but its write is on the disk
    assert d.sync(1, now=done + 1.0) == done + 1.0
    assert d.sync(3, now=1.6) == 1.6             # a file with nothing dirty: no wait


def test_the_flusher_starts_above_the_background_ratio_and_a_read_queues_behind_it():
    """1 MiB cache: background 25 pages, limit 51. 20 pages dirty wait; 10 more at t = 2
    pass the background ratio and the flusher writes all 30 (one run) from t = 2; a read at
    t = 2.001 waits for that write-back, then pays its own positioning and transfer."""
    d = disk(cache_bytes=1 << 20)
    d.access(1, 0, 20 * PG, write=True, now=1.0)
    assert d.access(9, 0, PG, now=1.5)[1] > 1.5 and d.info()["write_bytes"] == 0
    head = d.addr(9, PG)
    assert d.access(1, 20 * PG, 10 * PG, write=True, now=2.0) == (0.0, 2.0)
    wb_end = 2.0 + d.position(head, d.addr(1, 0), write=True) + 30 * PG / W
    _, done = d.access(2, 0, 4 * PG, now=2.001)
    assert close(done, wb_end + d.position(d.addr(1, 30 * PG), d.addr(2, 0)) + 4 * PG / R)
    assert d.info()["write_bytes"] == 30 * PG and d.info()["dirty_bytes"] == 0


def test_a_page_dirty_longer_than_the_expiry_is_written_back_then():
    d = disk(dirty_expire=30.0)
    d.access(1, 0, 4 * PG, write=True, now=0.0)
    d.access(2, 0, PG, now=10.0)                 # a read at 10 s: nothing written yet
    assert d.info()["write_bytes"] == 0
    t, done = d.access(2, 64 * PG, PG, now=31.0)  # at 31 s the 30 s write-back is over
    assert d.info()["write_bytes"] == 4 * PG and d.info()["dirty_bytes"] == 0
    assert close(t, d.position(d.addr(1, 4 * PG), d.addr(2, 64 * PG)) + PG / R)
    assert done == 31.0 + t                      # the head was free again by then


def test_the_dirty_limit_throttles_the_writer_until_the_flusher_is_under_it():
    """A read keeps the head busy; 30 + 30 dirty pages of two files pass the limit (51): the
    second writer waits for the flusher's first run in C-SCAN order from the head."""
    d = disk(cache_bytes=1 << 20)
    _, r_end = d.access(2, 0, 32 * PG, now=1.0)
    assert d.access(1, 0, 30 * PG, write=True, now=1.0) == (0.0, 1.0)
    t, done = d.access(3, 0, 30 * PG, write=True, now=1.0)
    head = d.addr(2, 32 * PG)
    ahead = [ino for ino in (1, 3) if d.addr(ino, 0) >= head]
    first = min(ahead or (1, 3), key=lambda ino: d.addr(ino, 0))
    assert close(done, r_end + d.position(head, d.addr(first, 0), write=True) + 30 * PG / W)
    assert close(t, done - 1.0)
    assert d.info()["dirty_bytes"] == 30 * PG    # the other file's run: under the limit


def test_evicting_a_dirty_page_writes_it_first():
    """A 16-page cache full of dirty pages (ratios 1: no flusher): a 4-page read evicts the 4
    oldest, each written first, then reads."""
    d = disk(cache_bytes=16 * PG, dirty_background_ratio=1.0, dirty_ratio=1.0)
    assert d.access(1, 0, 16 * PG, write=True, now=1.0) == (0.0, 1.0)
    _, done = d.access(2, 0, 4 * PG, now=2.0)
    wb = d.position(0, d.addr(1, 0), write=True) + 4 * PG / W
    assert close(done, 2.0 + wb + d.position(d.addr(1, 4 * PG), d.addr(2, 0)) + 4 * PG / R)
    info = d.info()
    assert info["write_bytes"] == 4 * PG and info["dirty_bytes"] == 12 * PG
    assert d.cached(1, 0, 4 * PG) == 0 and d.cached(1, 4 * PG, 12 * PG) == 12 * PG


def test_drop_writes_the_dirty_pages_back_first():
    d = disk()
    d.access(1, 0, 8 * PG, write=True, now=1.0)
    done = d.drop(now=2.0)
    assert close(done, 2.0 + d.position(0, d.addr(1, 0), write=True) + 8 * PG / W)
    info = d.info()
    assert info["write_bytes"] == 8 * PG and info["dirty_bytes"] == info["cached_bytes"] == 0
    assert d.drop(now=done + 1) == done + 1      # nothing dirty: no wait


def test_a_removed_files_dirty_pages_are_never_written():
    d = disk()
    d.access(1, 0, 8 * PG, write=True, now=1.0)
    d.forget(1)
    assert d.drop(now=2.0) == 2.0 and d.info()["write_bytes"] == 0


def test_dirty_parameters_default_to_linuxs_and_are_overridden_in_storage():
    from types import SimpleNamespace

    from pvfs.models.disk import PRESETS, storage_of

    ide = PRESETS["ide-2000"]
    assert (ide.dirty_background_ratio, ide.dirty_ratio, ide.dirty_expire) == (0.1, 0.2, 30.0)
    cfg = SimpleNamespace(extra={"storage": {"default": "emulated", "dirty_ratio": 0.4,
                                             "dirty_expire": 5}})
    _, params = storage_of(cfg, 0)
    info = params.build().info()
    assert (info["dirty_background_ratio"], info["dirty_ratio"], info["dirty_expire"]) == (
        0.1, 0.4, 5.0)


def test_dirty_parameters_are_checked():
    with pytest.raises(ValueError):
        disk(dirty_ratio=1.5)
    with pytest.raises(ValueError):
        disk(dirty_expire=-1.0)


def test_engine_write_does_not_wait_for_a_slow_disk(tmp_path):
    """1 MiB written through an engine whose disk writes 100 KB/s (10 s to write it through):
    the job is done with no disk time charged to it (a job waits only for what the model
    charges: no access, no busy time, nothing written back), the bytes are in the file, the
    model holds them dirty."""
    path = tmp_path / "stripe"
    path.write_bytes(b"")
    fd = os.open(path, os.O_RDWR)
    d = preset("ide-2000", write_bps=1e5).build()
    eng = nat.Engine(disk=d)
    payload = os.urandom(1 << 20)
    srv, cli = socket.socketpair()
    try:
        eng.submit(1, srv.fileno(), fd, WRITE, acc((FILE, 0, len(payload))), inode=4)
        cli.sendall(payload)
        assert wait_done(eng, 1, timeout=30)[1][1:3] == (0, len(payload))
    finally:
        eng.close()
        srv.close()
        cli.close()
        os.close(fd)
    assert path.read_bytes() == payload
    info = d.info()
    assert info["dirty_bytes"] == 1 << 20 and info["write_bytes"] == 0
    assert info["accesses"] == 0 and info["busy_s"] == 0.0


class _Clocked:
    """A storage's model on the test's clock: ``sync`` at ``now[0]``."""

    def __init__(self, disk: nat.Disk, now: list[float]) -> None:
        self.disk, self.now = disk, now

    def sync(self, ino: int) -> float:
        return self.disk.sync(ino, now=self.now[0])

    def __getattr__(self, name: str):
        return getattr(self.disk, name)


def test_an_emulated_daemons_fsync_waits_for_the_models_write_back(tmp_path, monkeypatch):
    """EmulatedStorage.fsync (the iod's fsync and fdatasync): the real fsync, then a wait
    until the model has written the file's dirty pages (32 KiB at 64 KB/s: 0.512 s here); a
    file with nothing dirty does not wait. The model's clock is time.monotonic(): here a
    frozen one that only the storage's sleeps move on."""
    from pvfs.daemons.iod import storage
    from pvfs.daemons.iod.storage import open_storage

    now, sleeps = [1000.0], []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        now[0] += seconds

    monkeypatch.setattr(storage.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(storage.time, "sleep", sleep)
    st = open_storage("emulated", str(tmp_path), preset(
        "ide-2000", write_bps=64e3, seek_min=0.0, seek_max=1e-6, rotation=0.0))
    st.disk = _Clocked(st.disk, now)
    try:
        st.create(5)
        st.disk.access(5, 0, 32 << 10, write=True, now=now[0])
        st.fsync(5, data_only=True)
        assert sleeps == [pytest.approx((32 << 10) / 64e3, abs=1e-5)]
        assert st.disk.info()["dirty_bytes"] == 0 and st.disk.info()["write_bytes"] == 32 << 10
        st.fsync(5, data_only=False)
        assert len(sleeps) == 1  # nothing dirty, nothing on its way: no wait
    finally:
        st.close()
