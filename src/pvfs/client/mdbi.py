"""The multi-dimensional block interface (MDBI, thesis §3.2.3, fig. 3.5).

A file is described as a D-dimensional row-major matrix of ``record_size``-byte records,
cut into blocks of ``ne[i]`` records per dimension (``nb[i]`` blocks per dimension). Blocks
are read and written by their coordinates, each as one nested-strided request. Superblocks
of ``bf[i]`` blocks per dimension give read-ahead: reading a block reads its whole superblock
in one request into a user-space buffer, so the other blocks of it come from memory.

    m = mdbi.open(f, record_size=500, ne=(2, 3), nb=(6, 3), bf=(2, 1))
    m.read_block(2, 0)   # reads blocks (2,0) and (3,0) together (their superblock)
"""

from __future__ import annotations

from math import prod
from typing import TYPE_CHECKING

from pvfs.layout.describe import Nested

if TYPE_CHECKING:
    from pvfs.client.file import File


class MDBI:
    def __init__(self, file: File, record_size: int, ne: tuple[int, ...], nb: tuple[int, ...],
                 bf: tuple[int, ...] | None = None) -> None:
        d = len(ne)
        if d == 0 or len(nb) != d or (bf is not None and len(bf) != d):
            raise ValueError("ne, nb (and bf) need one entry per dimension")
        if record_size <= 0 or min(ne) <= 0 or min(nb) <= 0 or (bf and min(bf) <= 0):
            raise ValueError("sizes and counts must be positive")
        self.file = file
        self.rs = record_size
        self.ne, self.nb = tuple(ne), tuple(nb)
        self.bf = tuple(bf) if bf else (1,) * d
        self.dims = tuple(e * b for e, b in zip(self.ne, self.nb))  # records per dimension
        # Byte stride of one step along each dimension (row major).
        self.strides = tuple(self.rs * prod(self.dims[i + 1:]) for i in range(d))
        self._buffer: tuple[tuple[int, ...], tuple[int, ...], bytes] | None = None
        self.requests = 0  # requests sent to the file system (read-ahead makes it smaller)

    @property
    def block_bytes(self) -> int:
        return self.rs * prod(self.ne)

    def _check(self, idx: tuple[int, ...]) -> None:
        if len(idx) != len(self.nb) or any(not 0 <= b < n for b, n in zip(idx, self.nb)):
            raise IndexError(f"block {idx} outside {self.nb}")

    def _describe(self, first: tuple[int, ...], counts: tuple[int, ...]) -> Nested:
        """The nested-strided description of ``counts`` blocks from block ``first``."""
        rows = [c * e for c, e in zip(counts, self.ne)]
        offset = sum(b * e * s for b, e, s in zip(first, self.ne, self.strides))
        outer = [(rows[i], self.strides[i]) for i in range(len(rows) - 1)] or [(1, 0)]
        return Nested(offset, rows[-1] * self.rs, outer)

    def _superblock(self, idx: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        first = tuple((b // f) * f for b, f in zip(idx, self.bf))
        counts = tuple(min(f, n - s) for f, n, s in zip(self.bf, self.nb, first))
        return first, counts

    def read_block(self, *idx: int) -> bytes:
        """The block's records, row major (ne[0] x ... x ne[D-1] records)."""
        self._check(idx)
        first, counts = self._superblock(idx)
        if self._buffer is None or self._buffer[:2] != (first, counts):
            data = self.file.read_desc(self._describe(first, counts))
            self.requests += 1
            self._buffer = (first, counts, data)
        return self._extract(self._buffer, idx)

    def _extract(self, buffered, idx: tuple[int, ...]) -> bytes:
        first, counts, data = buffered
        rows = [c * e for c, e in zip(counts, self.ne)]
        # Strides inside the superblock buffer, in records.
        inner = [prod(rows[i + 1:]) for i in range(len(rows))]
        rel = [(b - f) * e for b, f, e in zip(idx, first, self.ne)]
        out = bytearray()
        last = self.ne[-1] * self.rs
        for pos in _positions(self.ne[:-1]):
            rec = sum((r + p) * s for r, p, s in zip(rel, pos, inner)) + rel[-1]
            out += data[rec * self.rs: rec * self.rs + last]
        return bytes(out)

    def write_block(self, idx: tuple[int, ...], data: bytes) -> None:
        """Write one block (its records row major); drops a stale read-ahead buffer."""
        idx = tuple(idx)
        self._check(idx)
        if len(data) != self.block_bytes:
            raise ValueError(f"a block is {self.block_bytes} bytes, got {len(data)}")
        self.file.write_desc(self._describe(idx, (1,) * len(idx)), data)
        self.requests += 1
        self._buffer = None


def _positions(extents: tuple[int, ...]):
    """Every index tuple of the given extents, row major (one empty tuple if none)."""
    if not extents:
        yield ()
        return
    for head in range(extents[0]):
        for rest in _positions(extents[1:]):
            yield (head, *rest)


def open(file: File, record_size: int, ne, nb, bf=None) -> MDBI:
    """Describe an open file as a blocked N-dim matrix (see module docstring)."""
    return MDBI(file, record_size, tuple(ne), tuple(nb), tuple(bf) if bf else None)
