"""Darshan DXT text: the output of ``darshan-dxt-parser``.

The parser prints, per file and rank, a block of comment lines followed by one line per
traced operation::

    # DXT, file_id: 7683914722380214, file_name: /scratch/run/out.dat
    # DXT, rank: 0, hostname: node01
    # DXT, write_count: 2, read_count: 1
    # DXT, mnt_pt: /scratch, fs_type: lustre
    # Module    Rank  Wt/Rd  Segment          Offset       Length    Start(s)      End(s)
     X_POSIX       0  write        0               0        1048576      0.0104      0.0139
     X_POSIX       0   read        0               0        1048576      0.0200      0.0230

(Lustre adds an ``[OST]`` column after ``End(s)``, which is ignored.) Both ``X_POSIX`` and
``X_MPIIO`` records may be present; they describe the same data twice, so only ``module``'s
records are used (``X_POSIX`` by default: what the file system saw).

Each rank's operations are ordered by start time; think time is the gap between the end of
the rank's previous operation and the start of this one. An ``open`` is added before a
rank's first operation on a file and a ``close`` after its last.
"""

from __future__ import annotations

import re
from typing import IO

from pvfs.traces.format import Flag, Op, Record, Trace, TraceFormatError
from pvfs.traces.importers._common import Collector

_FILE = re.compile(r"^#\s*DXT,\s*file_id:\s*(\S+),\s*file_name:\s*(.+?)\s*$")


def import_darshan(stream: IO[str], source: str = "darshan", module: str = "X_POSIX") -> Trace:
    """Parse ``darshan-dxt-parser`` output.

    Raises:
        TraceFormatError: for an operation line outside a file block or with bad fields.
    """
    ops: list[tuple[int, float, float, str, str, int, int]] = []
    current: str | None = None
    for lineno, raw in enumerate(stream, start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            m = _FILE.match(line)
            if m:
                current = m.group(2)
            continue
        fields = line.split()
        if not fields[0].startswith("X_"):
            continue
        if fields[0] != module:
            continue
        if current is None:
            raise TraceFormatError(f"line {lineno}: operation before any '# DXT, file_id' line")
        if len(fields) < 8:
            raise TraceFormatError(f"line {lineno}: expected at least 8 fields")
        try:
            rank = int(fields[1])
            kind = fields[2].lower()
            offset, length = int(fields[4]), int(fields[5])
            start, end = float(fields[6]), float(fields[7])
        except ValueError as exc:
            raise TraceFormatError(f"line {lineno}: {exc}") from None
        if kind not in ("read", "write"):
            raise TraceFormatError(f"line {lineno}: Wt/Rd must be read or write, not {kind!r}")
        ops.append((rank, start, end, current, kind, offset, length))
    col = Collector(source)  # ranks keep their Darshan numbers
    ops.sort(key=lambda o: (o[0], o[1], o[2]))
    last_use: dict[tuple[int, str], int] = {}
    for i, (rank, _, _, name, _, _, _) in enumerate(ops):
        last_use[(rank, name)] = i
    opened: set[tuple[int, str]] = set()
    prev_end: dict[int, float] = {}
    for i, (rank, start, end, name, kind, offset, length) in enumerate(ops):
        r = rank
        fid = col.file(name)
        think = max(0.0, start - prev_end[rank]) if rank in prev_end else 0.0
        prev_end[rank] = max(end, prev_end.get(rank, end))
        if (rank, name) not in opened:
            opened.add((rank, name))
            col.add(Record(r, think, Op.OPEN, fid, 0, 0, Flag.RD | Flag.WR | Flag.CREAT))
            think = 0.0
        op = Op.WRITE if kind == "write" else Op.READ
        col.add(Record(r, think, op, fid, offset, length))
        if last_use[(rank, name)] == i:
            col.add(Record(r, 0.0, Op.CLOSE, fid, 0, 0))
    nprocs = max((o[0] for o in ops), default=0) + 1
    return col.build(nprocs, format="darshan-dxt", module=module)
