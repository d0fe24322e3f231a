"""Segment bypass bits (discretionary-caching paper §3.4, SPEC §6).

A *segment* is ``segment_blocks`` contiguous file blocks (4 by default). Each segment of each
file carries four bits saying which caches an operation skips:

========  ==========================================================
``rl``    reads bypass the local (node) cache
``wl``    writes bypass the local cache (write straight through)
``rg``    reads bypass the global cache (kept for the global cache)
``wg``    writes bypass the global cache (kept for the global cache)
========  ==========================================================

The default is "no bits": everything goes through both caches, as in the paper.

The ``user.pvfs.bypass`` extended attribute carries a file's bits as text (see
``docs/cache.md``)::

    *:rl;0-3:none;16-31:rl,wl,rg

Entries are ``RANGE:FLAGS`` separated by ``;`` (or whitespace). ``RANGE`` is a segment number
``N``, an inclusive range ``N-M`` or ``*`` (every segment without its own entry, including
segments the file does not have yet). ``FLAGS`` is ``none``, ``all`` or a comma-separated list of
``rl``, ``wl``, ``rg``, ``wg``. Later entries override earlier ones. :func:`format_bypass` writes
the canonical form: the ``*`` entry first (if not ``none``), then maximal runs in ascending order.
"""

from __future__ import annotations

import bisect
import enum
import re
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "Bypass",
    "BypassEntry",
    "BypassTable",
    "format_bypass",
    "parse_bypass",
]

#: Largest segment number accepted in the xattr text (2**48 segments of 16 KiB is far beyond any
#: file offset we can address).
MAX_SEGMENT = (1 << 48) - 1


class Bypass(enum.IntFlag):
    """Bypass bits of one segment. A set bit means "skip that cache for that operation"."""

    NONE = 0
    READ_LOCAL = 1
    WRITE_LOCAL = 2
    READ_GLOBAL = 4
    WRITE_GLOBAL = 8
    ALL = 15


_TOKENS: dict[str, Bypass] = {
    "rl": Bypass.READ_LOCAL,
    "wl": Bypass.WRITE_LOCAL,
    "rg": Bypass.READ_GLOBAL,
    "wg": Bypass.WRITE_GLOBAL,
}
_RANGE_RE = re.compile(r"^(\*|\d+|\d+-\d+)$")


@dataclass(frozen=True, slots=True)
class BypassEntry:
    """One parsed entry: segments ``first..last`` inclusive (``first is None``: the ``*``)."""

    first: int | None
    last: int | None
    flags: Bypass


def _parse_flags(text: str) -> Bypass:
    text = text.strip()
    if text == "none":
        return Bypass.NONE
    if text == "all":
        return Bypass.ALL
    flags = Bypass.NONE
    for tok in text.split(","):
        tok = tok.strip()
        if tok not in _TOKENS:
            raise ValueError(f"unknown bypass flag {tok!r} (use rl, wl, rg, wg, none or all)")
        flags |= _TOKENS[tok]
    return flags


def _format_flags(flags: Bypass) -> str:
    if flags == Bypass.NONE:
        return "none"
    return ",".join(tok for tok, bit in _TOKENS.items() if flags & bit)


def parse_bypass(text: str) -> list[BypassEntry]:
    """Parse a ``user.pvfs.bypass`` value.

    Args:
        text: the attribute value, e.g. ``"0-15:rl,wl;16:none"``. An empty value means no
            entries (everything cached).

    Returns:
        The entries in the order given.

    Raises:
        ValueError: on any syntax error, an unknown flag, a reversed range or a segment number
            above ``MAX_SEGMENT``.
    """
    entries: list[BypassEntry] = []
    for item in re.split(r"[;\s]+", text.strip()):
        if not item:
            continue
        rng, sep, flags_text = item.partition(":")
        if not sep or not _RANGE_RE.match(rng):
            raise ValueError(f"bad bypass entry {item!r} (want RANGE:FLAGS, e.g. 0-3:rl,wl)")
        flags = _parse_flags(flags_text)
        if rng == "*":
            entries.append(BypassEntry(None, None, flags))
            continue
        lo_s, _, hi_s = rng.partition("-")
        lo = int(lo_s)
        hi = int(hi_s) if hi_s else lo
        if hi < lo:
            raise ValueError(f"reversed segment range {rng!r}")
        if hi > MAX_SEGMENT:
            raise ValueError(f"segment number too large in {rng!r}")
        entries.append(BypassEntry(lo, hi, flags))
    return entries


def format_bypass(default: Bypass, runs: Iterable[tuple[int, int, Bypass]]) -> str:
    """Canonical text for a default and ``(first, last_inclusive, flags)`` runs."""
    parts = [] if default == Bypass.NONE else [f"*:{_format_flags(default)}"]
    for first, last, flags in runs:
        rng = str(first) if first == last else f"{first}-{last}"
        parts.append(f"{rng}:{_format_flags(flags)}")
    return ";".join(parts)


class _IntervalMap:
    """Disjoint half-open segment intervals ``[start, end)`` -> flags, sorted by start."""

    __slots__ = ("ends", "flags", "starts")

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.flags: list[Bypass] = []

    def get(self, seg: int) -> Bypass | None:
        i = bisect.bisect_right(self.starts, seg) - 1
        if i >= 0 and seg < self.ends[i]:
            return self.flags[i]
        return None

    def assign(self, start: int, end: int, flags: Bypass) -> None:
        """Give ``[start, end)`` its own entry (replacing whatever overlapped it)."""
        keep: list[tuple[int, int, Bypass]] = []
        for s, e, f in zip(self.starts, self.ends, self.flags):
            if e <= start or s >= end:
                keep.append((s, e, f))
                continue
            if s < start:
                keep.append((s, start, f))
            if e > end:
                keep.append((end, e, f))
        keep.append((start, end, flags))
        keep.sort()
        merged: list[tuple[int, int, Bypass]] = []
        for s, e, f in keep:
            if merged and merged[-1][1] == s and merged[-1][2] == f:
                merged[-1] = (merged[-1][0], e, f)
            else:
                merged.append((s, e, f))
        self.starts = [m[0] for m in merged]
        self.ends = [m[1] for m in merged]
        self.flags = [m[2] for m in merged]

    def runs(self) -> list[tuple[int, int, Bypass]]:
        return list(zip(self.starts, self.ends, self.flags))


class _FileBits:
    __slots__ = ("default", "map")

    def __init__(self) -> None:
        self.default = Bypass.NONE
        self.map = _IntervalMap()


class BypassTable:
    """Per-file segment bypass bits: the default bypass policy of :class:`BlockCache`.

    It answers the cache's two questions (``bypass_read``/``bypass_write`` for a segment) from
    the local bits and stores the global bits for the global cache client. Lookups are a dict
    probe plus a bisect; files without bits cost one dict miss.
    """

    def __init__(self) -> None:
        self._files: dict[int, _FileBits] = {}

    def flags(self, ino: int, segment: int) -> Bypass:
        """The bits of ``segment`` of file ``ino``."""
        fb = self._files.get(ino)
        if fb is None:
            return Bypass.NONE
        f = fb.map.get(segment)
        return fb.default if f is None else f

    def bypass_read(self, ino: int, segment: int) -> bool:
        # hot path (once per block): most files have no bits, and IntFlag ops are slow
        if ino not in self._files:
            return False
        return bool(int(self.flags(ino, segment)) & 1)

    def bypass_write(self, ino: int, segment: int) -> bool:
        if ino not in self._files:
            return False
        return bool(int(self.flags(ino, segment)) & 2)

    def has_bits(self, ino: int) -> bool:
        """Whether any segment of ``ino`` may have a bit set (false: nothing bypasses)."""
        return ino in self._files

    def set_range(self, ino: int, first: int, last: int, flags: Bypass) -> None:
        """Set segments ``first..last`` (inclusive) of ``ino`` to ``flags``."""
        if first < 0 or last < first:
            raise ValueError(f"bad segment range {first}..{last}")
        fb = self._files.setdefault(ino, _FileBits())
        fb.map.assign(first, last + 1, Bypass(flags))

    def set_default(self, ino: int, flags: Bypass) -> None:
        """Bits for every segment of ``ino`` that has no entry of its own."""
        self._files.setdefault(ino, _FileBits()).default = Bypass(flags)

    def apply(self, ino: int, entries: Iterable[BypassEntry], *, replace: bool = True) -> None:
        """Apply parsed entries; with ``replace`` (the setxattr semantics) clear old bits first."""
        entries = list(entries)
        if replace:
            self.clear(ino)
        for ent in entries:
            if ent.first is None or ent.last is None:
                self.set_default(ino, ent.flags)
            else:
                self.set_range(ino, ent.first, ent.last, ent.flags)
        self._prune(ino)

    def set_xattr(self, ino: int, value: str | bytes) -> None:
        """Replace ``ino``'s bits with a ``user.pvfs.bypass`` value (raises ValueError)."""
        if isinstance(value, bytes):
            try:
                value = value.decode("ascii")
            except UnicodeDecodeError as exc:
                raise ValueError("bypass value must be ASCII text") from exc
        self.apply(ino, parse_bypass(value))

    def get_xattr(self, ino: int) -> str:
        """The canonical ``user.pvfs.bypass`` value of ``ino`` (``""`` when nothing is set)."""
        fb = self._files.get(ino)
        if fb is None:
            return ""
        runs = [(s, e - 1, f) for s, e, f in fb.map.runs() if f != fb.default]
        return format_bypass(fb.default, runs)

    def clear(self, ino: int) -> None:
        self._files.pop(ino, None)

    def _prune(self, ino: int) -> None:
        fb = self._files.get(ino)
        if fb is not None and fb.default == Bypass.NONE and all(
            f == Bypass.NONE for f in fb.map.flags
        ):
            del self._files[ino]
