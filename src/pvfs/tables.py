"""Plain text tables for people: what ``pvfs-admin``, the studies and the benchmarks print
(scripts get JSON instead)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any


def table(rows: Iterable[Sequence[Any]], headers: Sequence[str],
          right: Iterable[int] = ()) -> str:
    """Rows as text columns padded to their widest cell; ``right`` columns right-aligned."""
    cells = [[cell(v) for v in row] for row in rows]
    heads = [str(h) for h in headers]
    widths = [len(h) for h in heads]
    for row in cells:
        for i, c in enumerate(row):
            widths[i] = max(widths[i], len(c))
    align = set(right)

    def line(row: Sequence[str]) -> str:
        parts = [c.rjust(widths[i]) if i in align else c.ljust(widths[i])
                 for i, c in enumerate(row)]
        return "  ".join(parts).rstrip()

    return "\n".join([line(heads)] + [line(r) for r in cells])


def cell(v: Any) -> str:
    """One value as a table shows it: None as -, booleans as yes/no, floats to 3 digits."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.3g}"
    return str(v)
