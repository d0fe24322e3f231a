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


def test_reads_in_order_are_read_ahead_into_the_callers_buffer(fs):
    payload = os.urandom(6 * MiB + 5000)
    with fs.open("/pipe-ra", "wb") as f:
        f.write(payload)
    with fs.open("/pipe-ra", "rb", pipeline=True) as f:
        ahead = f._ahead
        got = bytearray()
        while chunk := f.read(MiB):              # in order: all but the first two read ahead
            got += chunk
        assert got == payload
        assert ahead.hits >= 4
        buf = bytearray(MiB)
        assert f.preadinto(buf, 0) == MiB and buf == payload[:MiB]       # out of order
        assert f.preadinto(buf, MiB) == MiB and buf == payload[MiB:2 * MiB]
        assert ahead.owing                       # the next piece asked for
        assert f.preadinto(buf, 4 * MiB) == MiB and buf == payload[4 * MiB:5 * MiB]
        assert ahead.dropped >= 1                # the piece at 2 MiB was not wanted


def test_a_write_of_this_client_drops_the_read_ahead_of_the_file(fs):
    with fs.open("/pipe-ra-w", "wb") as f:
        f.write(b"a" * (4 * MiB))
    with fs.open("/pipe-ra-w", "rb", pipeline=True) as r:
        buf = bytearray(MiB)
        r.preadinto(buf, 0)
        r.preadinto(buf, MiB)
        assert r._ahead.owing                    # 2..3 MiB asked for, still "a"
        with fs.open("/pipe-ra-w", "r+b") as w:
            w.pwrite(b"b" * MiB, 2 * MiB)        # settles: the read-ahead is dropped
        assert not r._ahead.owing
        r.preadinto(buf, 2 * MiB)
        assert buf == b"b" * MiB
        fs.truncate("/pipe-ra-w", 3 * MiB)       # a manager call drops it too
        assert not r._ahead.owing
        assert r.preadinto(buf, 3 * MiB) == 0


def test_a_read_ahead_that_fails_is_dropped_and_the_read_goes_the_plain_way(fresh_cluster):
    with fresh_cluster.connect() as fs:
        with fs.open("/pipe-ra-dead", "wb") as f:
            f.write(b"z" * (4 * MiB))
        r = fs.open("/pipe-ra-dead", "rb", pipeline=True)
        buf = bytearray(MiB)
        r.preadinto(buf, 0)
        r.preadinto(buf, MiB)
        for sock in r._ahead._socks:             # the connections break under it
            if sock is not None:
                sock.shutdown(2)
        assert r.preadinto(buf, 2 * MiB) == MiB and buf == b"z" * MiB
        r.close()


def test_pieces_longer_than_max_ahead_are_not_read_ahead(fs):
    from pvfs.client.readahead import MAX_AHEAD

    n = 2 * MAX_AHEAD
    with fs.open("/pipe-ra-big", "wb") as f:
        f.write(b"q" * (3 * n))
    with fs.open("/pipe-ra-big", "rb", pipeline=True) as f:
        buf = bytearray(n)
        for i in range(3):
            assert f.preadinto(buf, i * n) == n
            assert not f._ahead.owing
