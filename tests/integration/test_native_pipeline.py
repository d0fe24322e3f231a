"""Pipelined writes of the native API (``fs.open(path, "wb", pipeline=True)``, issue 30)
against real daemons: every byte lands in order (overlapping writes: the last one wins),
the writer's own reads, other handles of the same client and the manager see each write
once ``pwrite`` returned, and a daemon that dies is an error of the next call."""

from __future__ import annotations

import os
import random

import pytest

from pvfs.layout.stripe import Stripe

MiB = 1 << 20


def test_pipelined_writes_land_in_order_overlaps_included(fs):
    rng = random.Random(30)
    model = bytearray()
    with fs.open("/pipe-order", "w+b", pipeline=True) as f:
        for i in range(300):
            off = rng.randrange(0, 3 * MiB)
            n = rng.choice([1, 100, 4096, 65536, 70_001, 300_000])
            data = bytes([i % 251]) * n
            f.pwrite(data, off)
            if len(model) < off + n:
                model.extend(bytes(off + n - len(model)))
            model[off:off + n] = data
        assert f.pread(len(model), 0) == bytes(model)   # its own reads see every write
    with fs.open("/pipe-order", "rb") as f:
        assert f.read() == bytes(model)


def test_list_writes_and_a_file_pointer_are_pipelined_too(fs):
    with fs.open("/pipe-list", "wb", pipeline=True) as f:
        f.write_list([(0, 3), (MiB, 4), (10, 2)], b"abcdefghi")
        f.write(b"XY")                                  # at the pointer: 0
    with fs.open("/pipe-list", "rb") as f:
        got = f.read()
    assert got[:3] == b"XYc" and got[10:12] == b"hi" and got[MiB:MiB + 4] == b"defg"


def test_another_handle_and_the_manager_see_a_write_once_it_returned(fs):
    payload = os.urandom(2 * MiB + 123)
    with fs.open("/pipe-seen", "wb", pipeline=True) as w:
        w.pwrite(payload, 0)
        assert w._pipe.owing                            # the replies are still owed
        with fs.open("/pipe-seen", "rb") as r:
            assert r.pread(len(payload), 0) == payload  # settled first
        assert not w._pipe.owing
        w.pwrite(b"tail", len(payload))
        assert fs.stat("/pipe-seen").st_size == len(payload) + 4   # a manager request


def test_a_file_striped_over_some_daemons_and_a_read_only_open_are_fine(fs):
    with fs.open("/pipe-narrow", "wb", stripe=Stripe(1, 2, 65536), pipeline=True) as f:
        for i in range(20):
            f.pwrite(bytes([i]) * 100_000, i * 100_000)
    with fs.open("/pipe-narrow", "rb", pipeline=True) as f:  # nothing to pipeline
        assert f._pipe is None
        data = f.read()
    assert data == b"".join(bytes([i]) * 100_000 for i in range(20))


def test_a_daemon_that_dies_is_an_error_of_a_later_call(fresh_cluster):
    with fresh_cluster.connect() as fs:
        f = fs.open("/pipe-dead", "wb", pipeline=True)
        f.pwrite(b"a" * MiB, 0)
        fresh_cluster.kill("iod0")
        with pytest.raises(OSError):
            f.pwrite(b"b" * MiB, MiB)
            f.fsync()
        with pytest.raises(OSError):      # its data cannot all be written or synced now
            f.pwrite(b"c" * MiB, 2 * MiB)
            f.fsync()
        try:
            f.close()
        except OSError:
            pass
        assert f.closed
