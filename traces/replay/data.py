"""Deterministic file contents: the bytes a replay writes depend only on (file, offset).

Byte ``i`` of file ``name`` is byte ``i mod 8`` (little-endian) of the 64-bit word
``splitmix64(i // 8 + key(name) * golden)``. So any writer of any range, on any target, in any
order, produces the same file, and a reader can check what it got without having to remember
what was written. Pre-existing input files (``FileEntry.size``) are filled the same way.
"""

from __future__ import annotations

import zlib

import numpy as np

_GOLDEN = 0x9E3779B97F4A7C15
_MASK = (1 << 64) - 1
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
CHUNK = 1 << 20


def file_key(name: str) -> int:
    """A stable 64-bit key for a file name (independent of Python's hash seed)."""
    raw = name.encode("utf-8")
    return (zlib.crc32(raw) << 32 | zlib.adler32(raw)) & _MASK


def pattern(key: int, offset: int, length: int) -> bytes:
    """The ``length`` bytes at ``offset`` of the file whose key is ``key``."""
    if length <= 0:
        return b""
    first = offset >> 3
    last = (offset + length + 7) >> 3
    x = np.arange(first, last, dtype=np.uint64)
    x += np.uint64((key * _GOLDEN) & _MASK)
    x ^= x >> np.uint64(30)
    x *= _M1
    x ^= x >> np.uint64(27)
    x *= _M2
    x ^= x >> np.uint64(31)
    raw = x.astype("<u8", copy=False).view(np.uint8)
    skip = offset & 7
    return raw[skip:skip + length].tobytes()


def pattern_list(key: int, regions: list[tuple[int, int]] | tuple[tuple[int, int], ...]) -> bytes:
    """The concatenated pattern bytes of several regions (the data of a list write)."""
    return b"".join(pattern(key, off, n) for off, n in regions)


def iter_pattern(key: int, size: int, chunk: int = CHUNK):
    """``(offset, bytes)`` pieces of the first ``size`` bytes, ``chunk`` at a time."""
    for off in range(0, size, chunk):
        yield off, pattern(key, off, min(chunk, size - off))
