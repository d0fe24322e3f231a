"""The caller's buffer is free again when a call returns, also after a resend or an error.

Found by ``pvfs-admin check --faults`` (docs/check.md): after an I/O daemon was killed and
restarted, the client's resend of a read on a fresh connection (protocol/retry.py) left a
memoryview of the caller's buffer alive in a reference cycle (exception -> traceback -> frame
-> exception), so ``File.pread`` of a file ending before the read's end could not shrink its
buffer and raised ``BufferError: Existing exports of data``. The cycle collector frees such a
cycle only at some later time, so these tests switch it off while they look: no view may
outlive the call, whenever the collector happens to run.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from pvfs import Stripe
from pvfs.cluster.launch import up

ALL_IODS = Stripe(0, 4, 4096)  # every daemon holds a share: every one is met by a read


@contextmanager
def no_cycle_collector() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def restart_every_iod(cluster, fs) -> None:
    """kill -9 and `pvfs-admin up` every I/O daemon, with pooled connections to each left
    behind (so the next request to each meets a dead connection and is resent)."""
    names = [f"iod{i}" for i in range(cluster.config.niods)]
    assert all(fs.data.pool.idle(i) for i in range(cluster.config.niods))
    for name in names:
        cluster.kill(name)
    up(cluster.config)
    assert all(cluster.pid(name) for name in names)


@pytest.mark.parametrize("size", [0, 5000])
def test_pread_past_eof_after_an_iod_restart_is_the_short_read(fresh_cluster, size):
    data = os.urandom(size)
    with fresh_cluster.connect() as fs, fs.open("/short", "w+b", stripe=ALL_IODS) as f:
        f.pwrite(data, 0)
        assert f.pread(65537, 0) == data
        restart_every_iod(fresh_cluster, fs)
        with no_cycle_collector():
            assert f.pread(65537, 0) == data


def test_callers_buffers_resize_after_resent_and_failed_calls(fresh_cluster):
    data = os.urandom(20_000)  # a share on every daemon
    with fresh_cluster.connect() as fs, fs.open("/f", "w+b", stripe=ALL_IODS) as f:
        f.pwrite(data, 0)
        f.pread(len(data), 0)
        with no_cycle_collector():
            # preadinto resent after a restart
            restart_every_iod(fresh_cluster, fs)
            buf = bytearray(40_000)
            assert f.preadinto(buf, 0) == len(data)
            del buf[len(data):]
            assert buf == data

            # pwrite of a bytearray resent after a restart
            restart_every_iod(fresh_cluster, fs)
            out = bytearray(b"x" * 6000)
            assert f.pwrite(out, 0) == 6000
            out.extend(b"y")
            assert f.pread(6001, 0) == b"x" * 6000 + data[6000:6001]

            # a read that fails (the daemon stays dead) and is raised to the caller
            fresh_cluster.kill("iod1")
            buf = bytearray(8192)
            with pytest.raises(OSError):
                f.preadinto(buf, 0)
            buf.extend(b"z")
            out = bytearray(8192)
            with pytest.raises(OSError):
                f.pwrite(out, 0)
            del out[1:]
