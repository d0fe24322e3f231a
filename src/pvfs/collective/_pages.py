"""Page arithmetic shared by the cache, the write-behind buffers and the flush shuffle.

A collectively opened file is cut into equal pages (default: the stripe unit, so a page
never straddles two I/O daemons). A request, a list of ``(offset, length)`` regions, becomes
*pieces*: ``(page, offset in page, length, offset in the caller's buffer)``, grouped by page
in increasing page order — the order in which page locks are taken (two-phase locking).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import NamedTuple


class Piece(NamedTuple):
    """The part of one region that falls in one page."""

    page: int
    off: int  # offset inside the page
    length: int
    buf: int  # offset inside the caller's concatenated buffer


def split(regions: Iterable[tuple[int, int]], page_size: int) -> list[Piece]:
    """Cut regions into per-page pieces, in the caller's buffer order.

    Raises:
        ValueError: for a negative offset or length.
    """
    out: list[Piece] = []
    pos = 0
    for offset, length in regions:
        if offset < 0 or length < 0:
            raise ValueError(f"bad region ({offset}, {length})")
        while length > 0:
            page, within = divmod(offset, page_size)
            n = min(page_size - within, length)
            out.append(Piece(page, within, n, pos))
            offset += n
            length -= n
            pos += n
    return out


def by_page(pieces: Iterable[Piece]) -> list[tuple[int, list[Piece]]]:
    """Pieces grouped by page, pages in increasing order (the lock order)."""
    groups: dict[int, list[Piece]] = {}
    for p in pieces:
        groups.setdefault(p.page, []).append(p)
    return sorted(groups.items())


def total(regions: Sequence[tuple[int, int]]) -> int:
    return sum(n for _, n in regions)


def merge_runs(runs: Iterable[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
    """Sort ``(offset, data)`` runs and join the ones that touch; later runs win overlaps."""
    ordered = sorted(runs, key=lambda r: r[0])
    out: list[tuple[int, bytearray]] = []
    for off, data in ordered:
        if out and off <= out[-1][0] + len(out[-1][1]):
            start, buf = out[-1]
            rel = off - start
            end = rel + len(data)
            if end > len(buf):
                buf.extend(b"\0" * (end - len(buf)))
            buf[rel:end] = data
        else:
            out.append((off, bytearray(data)))
    return [(o, bytes(b)) for o, b in out]


class Dirty:
    """A page's dirty high-water marks ``[lo, hi)``: one range, so a flush is one write.

    Bytes between two separate writes inside the range are flushed too; that is safe because
    a page is always complete in the cache (read from the file before a partial write).
    """

    __slots__ = ("hi", "lo")

    def __init__(self) -> None:
        self.lo = 1 << 62
        self.hi = 0

    def add(self, lo: int, hi: int) -> None:
        self.lo = min(self.lo, lo)
        self.hi = max(self.hi, hi)

    def clear(self) -> None:
        self.lo, self.hi = 1 << 62, 0

    def __bool__(self) -> bool:
        return self.hi > self.lo


class Lru:
    """Locally cached pages, least recently used first (local references only, as DAChe)."""

    def __init__(self) -> None:
        self._pages: OrderedDict[int, int] = OrderedDict()

    def add(self, page: int, slot: int) -> None:
        self._pages[page] = slot
        self._pages.move_to_end(page)

    def touch(self, page: int) -> None:
        if page in self._pages:
            self._pages.move_to_end(page)

    def remove(self, page: int) -> int:
        return self._pages.pop(page)

    def slot_of(self, page: int) -> int | None:
        return self._pages.get(page)

    def oldest(self) -> list[int]:
        return list(self._pages)

    def items(self) -> list[tuple[int, int]]:
        return list(self._pages.items())

    def __len__(self) -> int:
        return len(self._pages)

    def __contains__(self, page: int) -> bool:
        return page in self._pages


class Meta(NamedTuple):
    """What the page's metadata home knows about it: where it is cached, if anywhere.

    ``owner`` is a rank of the caching group or -1; ``flushed`` says the page has been written
    to the file during this open (so a page past the size at open is no longer known zero).
    """

    owner: int
    slot: int
    flushed: bool

    def encode(self) -> int:
        """One int64: ``(owner+1) << 32 | slot << 1 | flushed`` (0 = never cached, not flushed)."""
        if self.owner < 0:
            return int(self.flushed)
        return ((self.owner + 1) << 32) | (self.slot << 1) | int(self.flushed)

    @classmethod
    def decode(cls, word: int) -> Meta:
        owner = (word >> 32) - 1
        return cls(owner, (word & 0xFFFFFFFF) >> 1 if owner >= 0 else -1, bool(word & 1))


UNCACHED = Meta(-1, -1, False)
