"""The C extension's one error convention (csrc/err.c, pv_raise in module.c): the caller's
misuse is a ValueError, a failing system call an OSError carrying its errno (and the
errno's subclass), and nothing is decided by comparing message strings."""

from __future__ import annotations

import errno
import os
import socket

import pytest

from pvfs import _native as nat


def test_bad_socket_is_oserror_with_its_errno() -> None:
    eng = nat.Engine()
    try:
        r, w = os.pipe()
        os.close(r)
        os.close(w)  # now a closed descriptor number
        with pytest.raises(OSError) as info:
            eng.attach(1, w)
        assert type(info.value) is OSError and info.value.errno == errno.EBADF
        assert f"sock_fd {w}" in info.value.strerror
    finally:
        eng.close()


def test_misuse_is_valueerror() -> None:
    eng = nat.Engine()
    a, b = socket.socketpair()
    try:
        with pytest.raises(ValueError, match="op must be"):
            eng.submit(1, a.fileno(), a.fileno(), 7, b"")
        with pytest.raises(ValueError, match="packed int64 triples"):
            eng.submit(1, a.fileno(), a.fileno(), nat.OP_READ, b"\0" * 5)
        eng.close()
        with pytest.raises(ValueError, match="engine is closed"):
            eng.window = 1 << 20
        with pytest.raises(ValueError, match="engine is closed"):
            eng.attach(2, a.fileno())
    finally:
        eng.close()
        a.close()
        b.close()


def test_disk_parameters_out_of_range_are_valueerror() -> None:
    with pytest.raises(ValueError, match="out of range"):
        nat.Disk(read_bps=0.0, write_bps=1e6, seek_min=0.001, seek_max=0.01, rotation=0.004,
                 span=1 << 30, cache_bytes=1 << 20)
