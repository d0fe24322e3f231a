"""The mount's malloc thresholds (fuse/mount.py ``_tune_malloc``): a 1 MiB request's buffer
comes from the heap, not from pages mapped for it and unmapped after.

Run in a fresh interpreter: the thresholds are the whole process's, and a fresh process
still has glibc's defaults, under which an 8 MiB block is mapped alone (``hblks``).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = r"""
import ctypes
from fuse.mount import _tune_malloc


class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2


def mapped_while_held(n):
    before = libc.mallinfo2().hblks
    buf = bytearray(n)
    during = libc.mallinfo2().hblks
    del buf
    return during - before


print(mapped_while_held(8 << 20), _tune_malloc(), mapped_while_held(8 << 20))
"""


def test_large_buffers_come_from_the_heap_after_tuning() -> None:
    try:
        import ctypes
        ctypes.CDLL(None).mallinfo2  # noqa: B018 -- glibc 2.33 or later
    except (OSError, AttributeError):
        pytest.skip("not glibc with mallinfo2")
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["1", "True", "0"]  # mapped alone before; from the heap after
