"""Helpers every generator shares: a trace builder and typed parameter parsing."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pvfs.traces.format import FileEntry, Flag, Op, Record, Trace
from pvfs.units import parse_size


def _convert(key: str, value: Any, default: Any) -> Any:
    if not isinstance(value, str):
        return value
    if isinstance(default, bool):
        if value.lower() in ("1", "true", "yes", "on"):
            return True
        if value.lower() in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"parameter {key}: not a boolean: {value!r}")
    if isinstance(default, int):
        return parse_size(value)
    if isinstance(default, float):
        return float(value)
    if isinstance(default, (list, tuple)):
        items = [v for v in value.split(",") if v]
        if default and isinstance(default[0], int):
            return [parse_size(v) for v in items]
        return items
    return value


def resolve_params(defaults: Mapping[str, Any], given: Mapping[str, Any] | None) -> dict[str, Any]:
    """Merge ``given`` (strings from the command line, or typed values) into ``defaults``.

    Raises:
        ValueError: for an unknown parameter or a value of the wrong type.
    """
    params = dict(defaults)
    for key, value in (given or {}).items():
        if key not in defaults:
            known = ", ".join(sorted(defaults)) or "none"
            raise ValueError(f"unknown parameter {key!r} (known: {known})")
        params[key] = _convert(key, value, defaults[key])
    return params


class TraceBuilder:
    """Accumulates records rank by rank; barriers are added for all ranks at once.

    Args:
        nprocs: number of ranks.
        name: generator name recorded in the header.
        params: the resolved parameters recorded in the header.
        seed: the seed recorded in the header.
    """

    def __init__(self, nprocs: int, name: str, params: Mapping[str, Any], seed: int) -> None:
        if nprocs < 1:
            raise ValueError("nprocs must be at least 1")
        self.nprocs = nprocs
        self.records: list[Record] = []
        self.files: list[FileEntry] = []
        self._ids: dict[str, int] = {}
        self.phases: list[str] = ["setup"]
        self.generator = {"name": name, "params": dict(params), "seed": seed}

    # -------------------------------------------------------------------------- file table
    def file(self, name: str, size: int = 0) -> int:
        """The id of ``name``, adding it (with pre-existing ``size`` bytes) if new."""
        if name in self._ids:
            fid = self._ids[name]
            self.files[fid].size = max(self.files[fid].size, size)
            return fid
        fid = len(self.files)
        self.files.append(FileEntry(fid, name, size))
        self._ids[name] = fid
        return fid

    # ----------------------------------------------------------------------------- records
    def add(self, rank: int, op: Op, file: int = -1, offset: int = 0, length: int = 0,
            flags: int = 0, regions: Sequence[tuple[int, int]] | None = None,
            think: float = 0.0) -> None:
        """Append one record."""
        regs = tuple((int(o), int(n)) for o, n in regions) if regions is not None else None
        self.records.append(Record(rank, float(think), op, file, int(offset), int(length),
                                   int(flags), regs))

    def open(self, rank: int, fid: int, flags: int = Flag.RD | Flag.WR | Flag.CREAT) -> None:
        """Open ``fid`` on ``rank`` (read-write, created if missing, by default)."""
        self.add(rank, Op.OPEN, fid, flags=flags)

    def close(self, rank: int, fid: int) -> None:
        """Close ``fid`` on ``rank``."""
        self.add(rank, Op.CLOSE, fid)

    def read(self, rank: int, fid: int, offset: int, length: int, think: float = 0.0) -> None:
        """A contiguous read."""
        self.add(rank, Op.READ, fid, offset, length, think=think)

    def write(self, rank: int, fid: int, offset: int, length: int, think: float = 0.0) -> None:
        """A contiguous write."""
        self.add(rank, Op.WRITE, fid, offset, length, think=think)

    def listio(self, rank: int, fid: int, regions: Sequence[tuple[int, int]], write: bool,
               think: float = 0.0) -> None:
        """One list request (read or write) over ``regions``."""
        if not regions:
            return
        total = sum(n for _, n in regions)
        self.add(rank, Op.LISTIO, fid, regions[0][0], total, Flag.WR if write else 0,
                 regions, think)

    def fsync(self, rank: int, fid: int) -> None:
        """Flush ``fid`` on ``rank``."""
        self.add(rank, Op.FSYNC, fid)

    def barrier(self, label: str | None = None) -> None:
        """All ranks synchronise; the operations after it form the phase ``label``."""
        for rank in range(self.nprocs):
            self.add(rank, Op.BARRIER)
        self.phases.append(label or f"phase {len(self.phases)}")

    def open_all(self, fid: int, flags: int = Flag.RD | Flag.WR | Flag.CREAT) -> None:
        """Every rank opens ``fid``."""
        for rank in range(self.nprocs):
            self.open(rank, fid, flags)

    def close_all(self, fid: int) -> None:
        """Every rank closes ``fid``."""
        for rank in range(self.nprocs):
            self.close(rank, fid)

    def build(self) -> Trace:
        """The finished trace (validated)."""
        trace = Trace(nprocs=self.nprocs, files=self.files, records=self.records,
                      generator=self.generator, phases=self.phases)
        trace.validate()
        return trace


def split_even(total: int, parts: int) -> list[tuple[int, int]]:
    """``(start, count)`` of ``parts`` near-equal pieces of ``total`` (first ones larger)."""
    base, extra = divmod(total, parts)
    out, start = [], 0
    for i in range(parts):
        n = base + (1 if i < extra else 0)
        out.append((start, n))
        start += n
    return out


def chunked(offset: int, length: int, chunk: int) -> list[tuple[int, int]]:
    """``(offset, length)`` pieces of at most ``chunk`` bytes covering the range."""
    if chunk <= 0 or length <= chunk:
        return [(offset, length)]
    return [(o, min(chunk, offset + length - o)) for o in range(offset, offset + length, chunk)]
