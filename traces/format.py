"""The pvfs trace format (version 1): a header and one record per operation.

A trace describes what every process (rank) of a parallel program did to its files, in the
order each rank did it. It is the common currency of this package: the importers produce it,
the generators produce it, the replay engine consumes it and ``pvfs-admin trace stats``
summarises it. ``docs/traces.md`` is the user-facing description; this module is the
authority.

Header (a JSON object in the text form, a msgpack map in the binary form)::

    {"format": "pvfs-trace", "version": 1, "nprocs": 4,
     "files": [{"id": 0, "name": "lu/matrix", "size": 2097152}, ...],
     "generator": {"name": "lu", "params": {...}, "seed": 1},
     "phases": ["setup", "slab 0", ...]}

``files[i].size`` is the number of bytes the file holds *before* the program starts (input
data; the replay engine creates it with deterministic content). A file with size 0 does not
exist beforehand (the engine removes any old copy) unless its optional ``exists`` field is
true (an empty file the program opens without creating it). ``phases[k]`` names the operations that
follow the k-th barrier (``phases[0]`` those before the first one).

Record: ``rank think op file offset length flags regions``

- ``rank``: 0 .. nprocs-1.
- ``think``: seconds the rank computed before issuing this operation (honoured on request).
- ``op``: one of :class:`Op`.
- ``file``: index into the file table (-1 for ``barrier``).
- ``offset``/``length``: the byte range (always absolute: importers resolve file pointers).
  For ``seek`` the offset is the new position; for ``listio`` the first region's offset and
  the total length.
- ``flags``: :class:`Flag` bits. On ``open``: access mode and creation; on ``listio``:
  ``WR`` for a list write, none for a list read; on ``write``: ``SYNC`` for a sync write.
- ``regions``: for ``listio`` only, the ``(offset, length)`` pairs in request order.

Text form: a first line ``# pvfs-trace 1``, a line ``# header <json>``, then one record per line,
fields separated by single spaces; flags as ``rd,wr,creat`` (``-`` for none) and regions as
``off:len,off:len``. Lines starting with ``#`` after the header are comments. The msgpack form
is a stream: the header map, then one array ``[rank, think, opcode, file, offset, length,
flags, regions-or-nil]`` per record.
"""

from __future__ import annotations

import enum
import io
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any, NamedTuple

import msgpack

FORMAT_NAME = "pvfs-trace"
FORMAT_VERSION = 1
TEXT_MAGIC = f"# {FORMAT_NAME} "


class TraceFormatError(ValueError):
    """A trace file that does not follow the documented layout."""


class Op(enum.IntEnum):
    """Operations a record can carry (the numbers are the msgpack opcodes)."""

    OPEN = 0
    CLOSE = 1
    READ = 2
    WRITE = 3
    SEEK = 4
    FSYNC = 5
    BARRIER = 6
    LISTIO = 7

    @property
    def label(self) -> str:
        """The lower-case name used in the text form."""
        return self.name.lower()


class Flag(enum.IntFlag):
    """Record flags: access mode and creation bits of ``open``; direction of ``listio``."""

    NONE = 0
    RD = 1
    WR = 2
    CREAT = 4
    TRUNC = 8
    SYNC = 16
    APPEND = 32
    EXCL = 64


_FLAG_NAMES = {f.name.lower(): f for f in Flag if f.value}


def flags_to_text(flags: int) -> str:
    """``rd,wr`` style text for a flag value (``-`` for none)."""
    names = [name for name, f in _FLAG_NAMES.items() if flags & f]
    return ",".join(names) if names else "-"


def flags_from_text(text: str) -> int:
    """Parse :func:`flags_to_text` output."""
    if text == "-":
        return 0
    value = 0
    for name in text.split(","):
        try:
            value |= _FLAG_NAMES[name]
        except KeyError:
            raise TraceFormatError(f"unknown flag {name!r}") from None
    return value


class Record(NamedTuple):
    """One operation of one rank (see the module docstring for the fields)."""

    rank: int
    think: float
    op: Op
    file: int
    offset: int
    length: int
    flags: int = 0
    regions: tuple[tuple[int, int], ...] | None = None

    @property
    def is_write(self) -> bool:
        """True for data-moving operations that write."""
        return self.op == Op.WRITE or (self.op == Op.LISTIO and bool(self.flags & Flag.WR))

    @property
    def is_read(self) -> bool:
        """True for data-moving operations that read."""
        return self.op == Op.READ or (self.op == Op.LISTIO and not self.flags & Flag.WR)

    def extents(self) -> list[tuple[int, int]]:
        """The byte ranges a data operation touches (empty for other operations)."""
        if self.op == Op.LISTIO:
            return list(self.regions or ())
        if self.op in (Op.READ, Op.WRITE):
            return [(self.offset, self.length)]
        return []


@dataclass
class FileEntry:
    """One row of the file table."""

    id: int
    name: str
    size: int = 0
    exists: bool = False

    @property
    def pre_exists(self) -> bool:
        """True when the file must exist before the replay starts."""
        return self.exists or self.size > 0

    def to_dict(self) -> dict[str, Any]:
        """The header form of the entry."""
        out: dict[str, Any] = {"id": self.id, "name": self.name, "size": self.size}
        if self.exists:
            out["exists"] = True
        return out


@dataclass
class Trace:
    """A whole trace: header fields and the records in trace order."""

    nprocs: int
    files: list[FileEntry]
    records: list[Record] = field(default_factory=list)
    generator: dict[str, Any] = field(default_factory=dict)
    phases: list[str] = field(default_factory=list)
    version: int = FORMAT_VERSION

    def header(self) -> dict[str, Any]:
        """The header as a plain dict (what both forms store)."""
        return {
            "format": FORMAT_NAME,
            "version": self.version,
            "nprocs": self.nprocs,
            "files": [f.to_dict() for f in self.files],
            "generator": self.generator,
            "phases": self.phases,
        }

    def by_rank(self) -> list[list[Record]]:
        """The records split per rank, each list in trace order."""
        out: list[list[Record]] = [[] for _ in range(self.nprocs)]
        for rec in self.records:
            out[rec.rank].append(rec)
        return out

    def validate(self) -> None:
        """Check the structural rules; raise :class:`TraceFormatError` on the first breach.

        Rules: ranks within ``nprocs``; file ids in the table; non-negative offsets and lengths;
        ``listio`` regions present and summing to the length; every rank passes the same number
        of barriers (otherwise a replay would deadlock).
        """
        nfiles = len(self.files)
        for i, f in enumerate(self.files):
            if f.id != i:
                raise TraceFormatError(f"file table entry {i} has id {f.id}")
        barriers = [0] * self.nprocs
        for n, rec in enumerate(self.records):
            if not 0 <= rec.rank < self.nprocs:
                raise TraceFormatError(f"record {n}: rank {rec.rank} out of range")
            if rec.op == Op.BARRIER:
                barriers[rec.rank] += 1
                continue
            if not 0 <= rec.file < nfiles:
                raise TraceFormatError(f"record {n}: file {rec.file} not in the file table")
            if rec.offset < 0 or rec.length < 0 or rec.think < 0:
                raise TraceFormatError(f"record {n}: negative offset, length or think time")
            if rec.op == Op.LISTIO:
                if not rec.regions:
                    raise TraceFormatError(f"record {n}: listio without regions")
                if sum(length for _, length in rec.regions) != rec.length:
                    raise TraceFormatError(f"record {n}: listio length != sum of regions")
        if len(set(barriers)) > 1:
            raise TraceFormatError(f"ranks pass different numbers of barriers: {barriers}")


# ---------------------------------------------------------------------------------- text form
def _record_to_line(rec: Record) -> str:
    think = "0" if rec.think == 0 else repr(float(rec.think))
    regions = ""
    if rec.regions is not None:
        regions = " " + ",".join(f"{o}:{n}" for o, n in rec.regions)
    return (f"{rec.rank} {think} {rec.op.label} {rec.file} {rec.offset} {rec.length} "
            f"{flags_to_text(rec.flags)}{regions}")


_OPS_BY_LABEL = {op.label: op for op in Op}


def _record_from_line(line: str, lineno: int) -> Record:
    parts = line.split()
    if len(parts) not in (7, 8):
        raise TraceFormatError(f"line {lineno}: expected 7 or 8 fields, got {len(parts)}")
    try:
        op = _OPS_BY_LABEL[parts[2]]
        regions = None
        if len(parts) == 8:
            regions = tuple(
                (int(a), int(b)) for a, b in (pair.split(":") for pair in parts[7].split(","))
            )
        return Record(int(parts[0]), float(parts[1]), op, int(parts[3]), int(parts[4]),
                      int(parts[5]), flags_from_text(parts[6]), regions)
    except (KeyError, ValueError) as exc:
        raise TraceFormatError(f"line {lineno}: {exc}") from None


def write_text(trace: Trace, out: IO[str]) -> None:
    """Write the text form of ``trace`` to a text stream."""
    out.write(f"{TEXT_MAGIC}{trace.version}\n")
    out.write("# header " + json.dumps(trace.header(), sort_keys=True) + "\n")
    out.write("# rank think op file offset length flags [regions]\n")
    for rec in trace.records:
        out.write(_record_to_line(rec) + "\n")


def _check_header(header: dict[str, Any]) -> None:
    if header.get("format") != FORMAT_NAME:
        raise TraceFormatError("not a pvfs trace (format field)")
    version = header.get("version")
    if not isinstance(version, int) or version > FORMAT_VERSION or version < 1:
        raise TraceFormatError(f"unsupported trace version {version!r}")


def _trace_from_header(header: dict[str, Any], records: list[Record]) -> Trace:
    _check_header(header)
    files = [FileEntry(int(f["id"]), str(f["name"]), int(f.get("size", 0)),
                       bool(f.get("exists", False))) for f in header.get("files", [])]
    return Trace(nprocs=int(header["nprocs"]), files=files, records=records,
                 generator=dict(header.get("generator") or {}),
                 phases=list(header.get("phases") or []), version=int(header["version"]))


def read_text(stream: IO[str]) -> Trace:
    """Parse the text form."""
    first = stream.readline()
    if not first.startswith(TEXT_MAGIC):
        raise TraceFormatError("missing '# pvfs-trace' first line")
    second = stream.readline()
    if not second.startswith("# header "):
        raise TraceFormatError("missing '# header' line")
    try:
        header = json.loads(second[len("# header "):])
    except json.JSONDecodeError as exc:
        raise TraceFormatError(f"bad header JSON: {exc}") from None
    records = []
    for lineno, line in enumerate(stream, start=3):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        records.append(_record_from_line(line, lineno))
    return _trace_from_header(header, records)


# ------------------------------------------------------------------------------ msgpack form
def write_msgpack(trace: Trace, out: IO[bytes]) -> None:
    """Write the compact msgpack form of ``trace`` to a binary stream."""
    packer = msgpack.Packer()
    out.write(packer.pack(trace.header()))
    for rec in trace.records:
        regions = [list(r) for r in rec.regions] if rec.regions is not None else None
        out.write(packer.pack([rec.rank, rec.think, int(rec.op), rec.file, rec.offset,
                               rec.length, int(rec.flags), regions]))


def read_msgpack(stream: IO[bytes]) -> Trace:
    """Parse the msgpack form."""
    unpacker = msgpack.Unpacker(stream, raw=False, strict_map_key=False)
    try:
        header = next(unpacker)
    except (StopIteration, ValueError, msgpack.UnpackException) as exc:
        raise TraceFormatError(f"bad msgpack header: {exc}") from None
    if not isinstance(header, dict):
        raise TraceFormatError("msgpack trace does not start with a header map")
    _check_header(header)
    records = []
    try:
        for item in unpacker:
            rank, think, op, fid, off, length, flags, regions = item
            regs = tuple((int(a), int(b)) for a, b in regions) if regions is not None else None
            records.append(Record(rank, float(think), Op(op), fid, off, length, flags, regs))
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise TraceFormatError(f"bad msgpack record: {exc}") from None
    return _trace_from_header(header, records)


# ------------------------------------------------------------------------------------ files
def is_msgpack_path(path: str | os.PathLike[str]) -> bool:
    """True when a path's extension asks for the msgpack form (``.mpk``, ``.msgpack``)."""
    return str(path).endswith((".mpk", ".msgpack"))


def save(trace: Trace, path: str | os.PathLike[str], form: str | None = None) -> None:
    """Write ``trace`` to ``path``; ``form`` is ``text`` or ``msgpack`` (default: by extension).

    Raises:
        ValueError: for an unknown form.
    """
    form = form or ("msgpack" if is_msgpack_path(path) else "text")
    if form == "msgpack":
        with open(path, "wb") as fb:
            write_msgpack(trace, fb)
    elif form == "text":
        with open(path, "w", encoding="utf-8") as ft:
            write_text(trace, ft)
    else:
        raise ValueError(f"unknown trace form {form!r} (text or msgpack)")


def load(path: str | os.PathLike[str]) -> Trace:
    """Read a trace in either form (detected from the first bytes).

    Raises:
        TraceFormatError: when the file is neither form.
    """
    with open(path, "rb") as f:
        data = f.read()
    return loads(data)


def loads(data: bytes) -> Trace:
    """Parse a trace held in memory (either form)."""
    if data.startswith(TEXT_MAGIC.encode()):
        return read_text(io.StringIO(data.decode("utf-8")))
    return read_msgpack(io.BytesIO(data))


def dumps(trace: Trace, form: str = "text") -> bytes:
    """Serialise a trace to bytes in the given form."""
    if form == "msgpack":
        buf = io.BytesIO()
        write_msgpack(trace, buf)
        return buf.getvalue()
    sbuf = io.StringIO()
    write_text(trace, sbuf)
    return sbuf.getvalue().encode("utf-8")


def iter_lines(trace: Trace, limit: int | None = None) -> Iterator[str]:
    """Text-form lines of the records (for ``trace show``)."""
    for n, rec in enumerate(trace.records):
        if limit is not None and n >= limit:
            return
        yield _record_to_line(rec)


def renumber_files(names: Iterable[str]) -> list[FileEntry]:
    """A file table for the given names, ids in order."""
    return [FileEntry(i, name) for i, name in enumerate(names)]
