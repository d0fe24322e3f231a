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
    try:
        nprocs, nfiles, nrecords = (int(x) for x in next(lines).split()[:3])
        names = [next(lines) for _ in range(nfiles)]
    except (StopIteration, ValueError) as exc:
        raise TraceFormatError(f"bad MAMBO header: {exc}") from None
    col = Collector(source)
    fids = [col.file(name) for name in names]
    pos: dict[tuple[int, int], int] = {}
    clock: dict[int, float] = {}
    group_left = 0
    group: list[tuple[int, int, int, float, int, int]] = []

    def think_of(rank: int, pclock: float) -> float:
        prev = clock.get(rank)
        clock[rank] = pclock
        return max(0.0, (pclock - prev) * time_scale) if prev is not None else 0.0

    def flush_group() -> None:
        # Consecutive requests of the same direction become one listio record.
        runs: list[list[tuple[int, int, int, float, int, int]]] = []
        for item in group:
            if runs and runs[-1][0][0] == item[0]:
                runs[-1].append(item)
            else:
                runs.append([item])
        for run in runs:
            op, rank, fid, think, _, _ = run[0]
            regions = tuple((o, n) for _, _, _, _, o, n in run)
            col.add(Record(rank, think, Op.LISTIO, fid, regions[0][0],
                           sum(n for _, n in regions), Flag.WR if op == WRITE else 0, regions))
        group.clear()

    count = 0
    for lineno, line in enumerate(lines, start=2 + nfiles):
        fields = line.split()
        if len(fields) < 8:
            raise TraceFormatError(f"line {lineno}: expected 8 fields")
        try:
            op, nrec, pid, fidx = (int(x) for x in fields[:4])
            pclock = float(fields[5])
            offset, length = int(fields[6]), int(fields[7])
            fid = fids[fidx]
        except (ValueError, IndexError) as exc:
            raise TraceFormatError(f"line {lineno}: {exc}") from None
        count += 1
        rank = col.rank(pid)
        think = think_of(rank, pclock)
        key = (rank, fid)
        if op == LISTIO_HEADER:
            if group:
                flush_group()
            group_left = nrec
            continue
        if offset < 0:
            offset = pos.get(key, 0)
        if op == OPEN:
            col.add(Record(rank, think, Op.OPEN, fid, 0, 0, Flag.RD | Flag.WR | Flag.CREAT))
            pos[key] = 0
        elif op == CLOSE:
            col.add(Record(rank, think, Op.CLOSE, fid, 0, 0))
        elif op == SEEK:
            col.add(Record(rank, think, Op.SEEK, fid, offset, 0))
            pos[key] = offset
        elif op in (READ, WRITE):
            pos[key] = offset + length
            if group_left > 0:
                group.append((op, rank, fid, think, offset, length))
                group_left -= 1
                if group_left == 0:
                    flush_group()
                continue
            col.add(Record(rank, think, Op.READ if op == READ else Op.WRITE, fid, offset,
                           length))
        else:
            raise TraceFormatError(f"line {lineno}: unknown op {op}")
    if group:
        flush_group()
    if count != nrecords:
        raise TraceFormatError(f"header promises {nrecords} records, found {count}")
    return col.build(nprocs, format="mambo")
