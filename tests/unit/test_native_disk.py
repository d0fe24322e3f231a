"""The emulated disk (csrc/disk.c, pvfs._native.Disk): the model's computed times for known
patterns -- never wall time -- its LRU page cache, and an Engine that streams through it."""

from __future__ import annotations

import math
import os
import random
import socket

import pytest
from test_native_engine import FILE, READ, acc, recv_exact, wait_done

from pvfs import _native as nat
from pvfs.models.disk import PRESETS, parse_kind, preset

IDE = PRESETS["ide-2000"]
RA = IDE.readahead


def disk(**kw) -> nat.Disk:
    return preset("ide-2000", **kw).build()


def close_all(eng: nat.Engine, fd: int, pairs: list) -> None:
    eng.close()
    os.close(fd)
    for a, b in pairs:
        a.close()
        b.close()


def test_ide_2000_preset_matches_the_thesis_nodes():
    assert (IDE.read_bps, IDE.write_bps, IDE.cache_bytes) == (4.2e6, 4.5e6, 56 << 20)
    assert math.isclose(IDE.avg_seek, 0.009)


def test_sequential_reads_cost_transfer_only_after_the_first():
    d = disk()
    first, _ = d.access(1, 0, RA)
    # the head starts at address 0, the file elsewhere: one positioning + transfer
    pos = d.position(0, d.addr(1, 0))
    assert math.isclose(first, pos + RA / 4.2e6, abs_tol=2e-9)
    for k in range(1, 8):
        t, _ = d.access(1, k * RA, RA)
        assert math.isclose(t, RA / 4.2e6, abs_tol=2e-9)  # no seek, no rotation


def test_seek_grows_with_distance_and_adds_half_a_revolution():
    d = disk()
    far = [d.position(0, dist) for dist in (1 << 20, 64 << 20, 1 << 30, IDE.span)]
    assert far == sorted(far) and len(set(far)) == 4
    half_rot = IDE.rotation / 2
    assert math.isclose(d.position(IDE.span, 0), IDE.seek_max + half_rot, abs_tol=2e-9)
    assert math.isclose(d.position(1 << 30, 0),
                        IDE.seek_min + (IDE.seek_max - IDE.seek_min) * math.sqrt(
                            (1 << 30) / IDE.span) + half_rot, abs_tol=2e-9)
    # a short forward gap is read through: cheaper than a seek
    assert math.isclose(d.position(0, 8192), 8192 / 4.2e6, abs_tol=2e-9)
    assert d.position(8192, 0) > IDE.seek_min  # backwards always seeks


def test_interleaved_streams_pay_a_seek_per_switch():
    """Two tasks' blocks 32 MiB apart read alternately (opt1's pattern) vs one after the other
    (opt4's): the model charges two repositionings per round for the first."""
    a, b = disk(), disk()
    t_inter = sum(a.access(1, k * RA + off, RA)[0] for k in range(8) for off in (0, 32 << 20))
    t_seq = sum(b.access(1, off + k * RA, RA)[0] for off in (0, 32 << 20) for k in range(8))
    switch = a.position(a.addr(1, RA), a.addr(1, 32 << 20))
    assert t_inter > t_seq + 14 * switch * 0.99


def test_writes_use_the_write_rate():
    """A write-back charges the write rate (the write itself returns at once: see
    test_native_writeback.py); 1 MiB right after the head goes out with no positioning."""
    d = disk()
    d.access(1, 0, 4096)
    assert d.access(1, 4096, 1 << 20, write=True, now=1.0) == (0.0, 1.0)
    assert math.isclose(d.sync(1, now=1.0), 1.0 + (1 << 20) / 4.5e6, abs_tol=2e-9)


def test_accesses_queue_behind_each_other():
    d = disk()
    t1, done1 = d.access(1, 0, RA, now=5.0)
    t2, done2 = d.access(2, 0, RA, now=5.0)
    assert math.isclose(done1, 5.0 + t1) and math.isclose(done2, done1 + t2)


def test_lru_cache_is_bounded_and_evicts_oldest():
    d = disk(cache_bytes=64 << 10)
    d.access(1, 0, 64 << 10)
    assert d.cached(1, 0, 64 << 10) == 64 << 10
    d.access(1, 1 << 20, 16 << 10)              # 4 pages more: the 4 oldest go
    assert d.cached(1, 0, 16 << 10) == 0
    assert d.cached(1, 16 << 10, 48 << 10) == 48 << 10
    assert d.info()["cached_bytes"] == 64 << 10
    d.drop()
    assert d.cached(1, 0, 1 << 30) == 0 and d.info()["cached_bytes"] == 0


def test_partial_pages_count_only_the_range():
    d = disk()
    d.access(3, 0, 4096)
    assert d.cached(3, 100, 50) == 50 and d.cached(3, 4000, 200) == 96


def test_bad_parameters_are_refused():
    with pytest.raises(ValueError):
        nat.Disk(0, 1, 0, 0, 0, 1, 0)
    with pytest.raises(ValueError):
        nat.Disk(1, 1, 0.01, 0.001, 0, 1, 0)
    with pytest.raises(TypeError):
        nat.Engine(disk=object())


def test_storage_kinds_parse():
    assert parse_kind("posix") == ("posix", None)
    assert parse_kind("emulated") == ("emulated", "ide-2000")
    assert parse_kind("emulated:today") == ("emulated", "today")
    for bad in ("zfs", "posix:today", "emulated:nope"):
        with pytest.raises(ValueError):
            parse_kind(bad)


def test_engine_reads_through_the_emulated_disk(tmp_path):
    """Right bytes, the misses charged to the model, a second read served from its cache."""
    data = random.Random(5).randbytes(1 << 20)
    path = tmp_path / "stripe"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    d = preset("ide-2000", read_bps=400e6, seek_min=0.0, seek_max=1e-4, rotation=0.0).build()
    eng = nat.Engine(disk=d)
    try:
        for round_ in range(2):
            a, b = socket.socketpair()
            with a, b:
                accs = [(FILE, 1000, 300_000), (FILE, 600_000, 200_000)]
                eng.submit(round_ + 1, a.fileno(), fd, READ, acc(*accs), inode=9)
                body = recv_exact(b, 500_000)
                assert wait_done(eng, 1)[round_ + 1][1:3] == (0, 500_000)
            assert body == data[1000:301_000] + data[600_000:800_000]
            info = d.info()
            if round_ == 0:
                assert info["miss_bytes"] >= 500_000 and info["accesses"] >= 4
                misses = info["miss_bytes"]
            else:
                assert info["miss_bytes"] == misses and info["hit_bytes"] >= 500_000
    finally:
        eng.close()
        os.close(fd)


def test_storage_table_chooses_per_daemon_and_overrides_fields():
    from types import SimpleNamespace

    from pvfs.models.disk import storage_of

    cfg = SimpleNamespace(extra={"storage": {"default": "emulated:ide-2000", "iod1": "posix",
                                             "read_bps": 2e7, "cache_bytes": 8 << 20}})
    kind, params = storage_of(cfg, 0)
    assert kind == "emulated" and params.read_bps == 2e7 and params.cache_bytes == 8 << 20
    assert params.seek_max == IDE.seek_max
    assert storage_of(cfg, 1) == ("posix", None)
    assert storage_of(SimpleNamespace(extra={}), 3) == ("posix", None)
    with pytest.raises(ValueError):
        storage_of(SimpleNamespace(extra={"storage": {"default": "emulated", "span": "x"}}), 0)


def test_a_read_fetches_only_the_pages_not_cached():
    """A miss whose read-ahead window runs into pages a neighbour already read stops there,
    as Linux's read-ahead skips present pages; a read of cached pages costs nothing."""
    d = disk()
    d.access(1, 64 << 10, RA)                       # a neighbour read [64K, 64K+RA)
    t, _ = d.access(1, 0, RA)                       # the window [0, RA) overlaps it
    pos = d.position(d.addr(1, (64 << 10) + RA), d.addr(1, 0))
    assert math.isclose(t, pos + (64 << 10) / 4.2e6, abs_tol=2e-9)   # 64 KiB, not RA
    before = d.info()
    t, done = d.access(1, 16 << 10, 32 << 10, now=7.0)
    assert t == 0 and done == 7.0                   # all cached: no disk access
    assert d.info()["accesses"] == before["accesses"]
    # a cached page in front of a missing run: only the run is read
    t, _ = d.access(1, (64 << 10) + RA - 4096, 8192)
    pos = d.position(d.addr(1, 64 << 10), d.addr(1, (64 << 10) + RA))   # head after [0, 64K)
    assert math.isclose(t, pos + 4096 / 4.2e6, abs_tol=2e-9)          # one page, not two


def test_a_read_of_pages_on_their_way_in_waits_for_them():
    """A miss's pages are cached at once (no second read of them) but there only when the
    miss is done: a read of them finds no disk work and is done when they arrive."""
    d = disk()
    t, done = d.access(1, 0, RA, now=1.0)
    assert done == 1.0 + t
    t2, done2 = d.access(1, 4096, 8192, now=1.0 + t / 2)
    assert t2 == 0 and done2 == done                    # waits for the first read
    assert d.info()["accesses"] == 1
    assert d.access(1, 4096, 8192, now=done + 1.0) == (0.0, done + 1.0)   # there by then
    d.access(1, RA, 4096, write=True, now=2.0)
    assert d.access(1, RA, 4096, now=0.5)[1] == 0.5     # a write's bytes: there at once


def test_engine_reader_of_a_block_under_read_waits_for_the_disk(tmp_path):
    """Two jobs read the same uncached block at once: one miss is charged, and the second
    job is not sent the block before the disk has read it (before, it was sent at once)."""
    data = random.Random(3).randbytes(RA)
    path = tmp_path / "stripe"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    # 0.25 s for the read-ahead window, nearly no positioning
    d = preset("ide-2000", read_bps=RA / 0.25, seek_min=0.0, seek_max=1e-6, rotation=0.0).build()
    eng = nat.Engine(disk=d)
    pairs = [socket.socketpair() for _ in range(2)]
    try:
        for i, (a, _) in enumerate(pairs):
            eng.submit(i + 1, a.fileno(), fd, READ, acc((FILE, 0, 64 << 10)), inode=5)
        done = wait_done(eng, 2)
        first = min(c[3] for c in done.values())
        for jid in (1, 2):
            assert done[jid][1:3] == (0, 64 << 10)
            assert done[jid][5] - first >= 0.2e9, "served before the disk read the block"
        for _, b in pairs:
            assert recv_exact(b, 64 << 10) == data[:64 << 10]
        assert d.info()["accesses"] == 1                    # one miss, not two
    finally:
        close_all(eng, fd, pairs)


@pytest.mark.parametrize("windows", [2, 0])
def test_more_concurrent_misses_than_cache_windows_all_finish(tmp_path, windows):
    """Eight reads that miss at once on a cache of two read-ahead windows (or none): each job
    is sent what its miss read even when later misses evicted it before the disk finished (the
    grant); before, every job missed again on waking and none ever finished."""
    import threading

    data = random.Random(8).randbytes(4 * RA)
    path = tmp_path / "stripe"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    d = preset("ide-2000", read_bps=400e6, seek_min=0.0, seek_max=1e-4, rotation=0.0,
               cache_bytes=windows * RA).build()
    eng = nat.Engine(disk=d)
    pairs = [socket.socketpair() for _ in range(8)]
    bodies: dict[int, bytes] = {}

    def drain(i: int, sock: socket.socket) -> None:
        bodies[i] = recv_exact(sock, len(data))

    readers = [threading.Thread(target=drain, args=(i, b), daemon=True)
               for i, (_, b) in enumerate(pairs)]
    try:
        for r in readers:
            r.start()
        for i, (a, _) in enumerate(pairs):   # one inode each: no job finds another's pages
            eng.submit(i + 1, a.fileno(), fd, READ, acc((FILE, 0, len(data))), inode=100 + i)
        done = wait_done(eng, len(pairs))
        assert all(done[i + 1][1:3] == (0, len(data)) for i in range(len(pairs)))
        for r in readers:
            r.join(10)
        assert bodies == {i: data for i in range(len(pairs))}
        assert d.info()["miss_bytes"] == len(pairs) * len(data)   # each window read once
    finally:
        close_all(eng, fd, pairs)
