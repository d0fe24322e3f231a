"""MAMBO/UMD traces: the application traces behind the discretionary-caching paper.

Layout (ASCII, whitespace-separated)::

    numProcs numFiles numRecords
    <file name>                      (numFiles lines, file id = line order from 0)
    op numRecords pid fileId wallClock processClock offset length     (numRecords lines)

Ops: OPEN=0 CLOSE=1 READ=2 WRITE=3 SEEK=4 LISTIO_HEADER=5. A ``LISTIO_HEADER`` record's
``numRecords`` says how many of the following records (reads or writes) form one list
request; other records carry 1 there. Offsets are absolute (a negative offset means "the
current file position", which the importer tracks through seeks, reads and writes).

Think time: the trace has no durations, so a record's think time is the growth of the
process' ``processClock`` (its CPU time) since its previous record, times ``time_scale``
(clocks in seconds by default). Process ids become ranks in order of first appearance.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO

from pvfs.traces.format import Flag, Op, Record, Trace, TraceFormatError
from pvfs.traces.importers._common import Collector

OPEN, CLOSE, READ, WRITE, SEEK, LISTIO_HEADER = range(6)


def import_mambo(stream: IO[str], source: str = "mambo", time_scale: float = 1.0) -> Trace:
    """Parse a MAMBO/UMD trace.

    Raises:
        TraceFormatError: when the text does not follow the layout.
    """
    lines = (ln for ln in (raw.strip() for raw in stream) if ln and not ln.startswith("#"))
    nprocs, names, nrecords = _header(lines)
    col = Collector(source)
    records = _Records(col, [col.file(name) for name in names], time_scale)
    count = 0
    for lineno, line in enumerate(lines, start=2 + len(names)):
        records.add(lineno, line)
        count += 1
    records.finish()
    if count != nrecords:
        raise TraceFormatError(f"header promises {nrecords} records, found {count}")
    return col.build(nprocs, format="mambo")


def _header(lines: Iterator[str]) -> tuple[int, list[str], int]:
    """``(numProcs, file names, numRecords)`` from the first lines.

    Raises:
        TraceFormatError: the header is short or not numbers.
    """
    try:
        nprocs, nfiles, nrecords = (int(x) for x in next(lines).split()[:3])
        names = [next(lines) for _ in range(nfiles)]
    except (StopIteration, ValueError) as exc:
        raise TraceFormatError(f"bad MAMBO header: {exc}") from None
    return nprocs, names, nrecords


#: a read or write of a list request: (op, rank, file id, think time, offset, length)
_Item = tuple[int, int, int, float, int, int]


class _Records:
    """The record lines of a MAMBO trace, turned into pvfs records in ``col``: it tracks
    each rank's file positions and process clock and gathers list requests."""

    def __init__(self, col: Collector, fids: list[int], time_scale: float) -> None:
        self.col = col
        self.fids = fids
        self.time_scale = time_scale
        self.pos: dict[tuple[int, int], int] = {}
        self.clock: dict[int, float] = {}
        self.group_left = 0
        self.group: list[_Item] = []

    def add(self, lineno: int, line: str) -> None:
        """One record line.

        Raises:
            TraceFormatError: a short or malformed line, an unknown file or op.
        """
        op, nrec, pid, fid, pclock, offset, length = self._parse(lineno, line)
        col = self.col
        rank = col.rank(pid)
        think = self._think(rank, pclock)
        key = (rank, fid)
        if op == LISTIO_HEADER:
            if self.group:
                self._flush_group()
            self.group_left = nrec
            return
        if offset < 0:
            offset = self.pos.get(key, 0)
        if op == OPEN:
            col.add(Record(rank, think, Op.OPEN, fid, 0, 0, Flag.RD | Flag.WR | Flag.CREAT))
            self.pos[key] = 0
        elif op == CLOSE:
            col.add(Record(rank, think, Op.CLOSE, fid, 0, 0))
        elif op == SEEK:
            col.add(Record(rank, think, Op.SEEK, fid, offset, 0))
            self.pos[key] = offset
        elif op in (READ, WRITE):
            self.pos[key] = offset + length
            if self.group_left > 0:
                self.group.append((op, rank, fid, think, offset, length))
                self.group_left -= 1
                if self.group_left == 0:
                    self._flush_group()
                return
            col.add(Record(rank, think, Op.READ if op == READ else Op.WRITE, fid, offset,
                           length))
        else:
            raise TraceFormatError(f"line {lineno}: unknown op {op}")

    def finish(self) -> None:
        """After the last line: the list request still being gathered, if any."""
        if self.group:
            self._flush_group()

    def _parse(self, lineno: int, line: str) -> tuple[int, int, int, int, float, int, int]:
        """``(op, numRecords, pid, file id, processClock, offset, length)`` of a line."""
        fields = line.split()
        if len(fields) < 8:
            raise TraceFormatError(f"line {lineno}: expected 8 fields")
        try:
            op, nrec, pid, fidx = (int(x) for x in fields[:4])
            pclock = float(fields[5])
            offset, length = int(fields[6]), int(fields[7])
            fid = self.fids[fidx]
        except (ValueError, IndexError) as exc:
            raise TraceFormatError(f"line {lineno}: {exc}") from None
        return op, nrec, pid, fid, pclock, offset, length

    def _think(self, rank: int, pclock: float) -> float:
        """The growth of the rank's process clock since its previous record, scaled."""
        prev = self.clock.get(rank)
        self.clock[rank] = pclock
        return max(0.0, (pclock - prev) * self.time_scale) if prev is not None else 0.0

    def _flush_group(self) -> None:
        # Consecutive requests of the same direction become one listio record.
        runs: list[list[_Item]] = []
        for item in self.group:
            if runs and runs[-1][0][0] == item[0]:
                runs[-1].append(item)
            else:
                runs.append([item])
        for run in runs:
            op, rank, fid, think, _, _ = run[0]
            regions = tuple((o, n) for _, _, _, _, o, n in run)
            self.col.add(Record(rank, think, Op.LISTIO, fid, regions[0][0],
                                sum(n for _, n in regions), Flag.WR if op == WRITE else 0,
                                regions))
        self.group.clear()
