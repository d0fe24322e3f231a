"""Shared bookkeeping of the importers: ranks, file table, pre-existing sizes."""

from __future__ import annotations

import posixpath
import re
from typing import Any

from pvfs.traces.format import FileEntry, Flag, Op, Record, Trace

_UNSAFE = re.compile(r"[^A-Za-z0-9._/+-]")


def relative_name(path: str) -> str:
    """A trace file name (relative, no ``..``) for a path seen in a foreign trace."""
    norm = posixpath.normpath("/" + path.strip())
    parts = [p for p in norm.split("/") if p not in ("", ".", "..")]
    return _UNSAFE.sub("_", "/".join(parts)) or "unnamed"


class Collector:
    """Builds a :class:`Trace` from records in the order an importer meets them.

    It maps foreign process ids to ranks 0..N-1 in order of first appearance, foreign file
    names to ids, and sets each file's pre-existing size to the largest extent any read of it
    reaches (so reads of input data find data when the trace is replayed); a file whose first
    open does not create it is marked as existing beforehand.
    """

    def __init__(self, source: str) -> None:
        self.source = source
        self.ranks: dict[Any, int] = {}
        self.files: dict[str, int] = {}
        self.names: list[str] = []
        self.read_extent: list[int] = []
        self.exists: list[bool | None] = []
        self.records: list[Record] = []

    def rank(self, pid: Any) -> int:
        """The rank of a foreign process id."""
        if pid not in self.ranks:
            self.ranks[pid] = len(self.ranks)
        return self.ranks[pid]

    def file(self, path: str) -> int:
        """The file id of a foreign path."""
        name = relative_name(path)
        if name not in self.files:
            self.files[name] = len(self.names)
            self.names.append(name)
            self.read_extent.append(0)
            self.exists.append(None)
        return self.files[name]

    def add(self, rec: Record) -> None:
        """Append a record (think time rounded to nanoseconds), noting read extents."""
        rec = rec._replace(think=round(rec.think, 9))
        if rec.op == Op.OPEN and self.exists[rec.file] is None:
            self.exists[rec.file] = not rec.flags & Flag.CREAT
        elif rec.is_write and self.exists[rec.file] is None:
            self.exists[rec.file] = False
        if rec.is_read:
            end = max((o + n for o, n in rec.extents()), default=0)
            self.read_extent[rec.file] = max(self.read_extent[rec.file], end)
        self.records.append(rec)

    def build(self, nprocs: int | None = None, **info: Any) -> Trace:
        """The finished trace; ``info`` goes to the header's generator field."""
        n = max(nprocs or 0, len(self.ranks), 1)
        files = [FileEntry(i, name, self.read_extent[i], bool(self.exists[i]))
                 for i, name in enumerate(self.names)]
        trace = Trace(nprocs=n, files=files, records=self.records,
                      generator={"name": "import", "params": {"source": self.source, **info},
                                 "seed": None})
        trace.validate()
        return trace
