"""A DB2-like shared-nothing parallel RDBMS running five decision-support queries.

The DB2 trace of the discretionary-caching paper (Vilayannur et al., §5) comes from IBM's
parallel DB2. Its I/O has the shape every shared-nothing RDBMS has, which is what this
generator reproduces:

- every table is hash-partitioned over the processes (one partition file per table and
  process) — CUSTOMER 1M×256 B, PRODUCT 100K×256 B, EMPLOYEE 10K×128 B, DEPT 200×256 B,
  SALES 100M×32 B rows, times ``scale``; rows do not span pages;
- all I/O is in 4 KiB pages at page-aligned offsets;
- table scans read 128 KiB prefetch extents (32 pages) in order;
- every table has a B-tree index (16-byte entries, 256 per page: root page first, then the
  inner levels, then the leaves); a lookup reads root → inner → leaf → data page, so the root
  and inner pages are hot and the leaves and data pages mostly cold;
- joins and sorts write temporary files in extents and read them back.

The five queries (one phase each, all partitions in parallel): Q1 aggregate scan of SALES;
Q2 index lookups into CUSTOMER; Q3 hybrid hash join SALES ⋈ PRODUCT spilling part of SALES to
a temporary file and re-reading it; Q4 sort of EMPLOYEE into runs written to a temporary file,
merged page by page, plus DEPT lookups; Q5 index nested-loop join CUSTOMER ⋈ SALES.
"""

from __future__ import annotations

import random
from typing import Any

from pvfs.traces.format import Flag, Trace
from pvfs.traces.generators._build import TraceBuilder, resolve_params, split_even

PAGE = 4096
EXTENT = 128 << 10
ENTRY = 16
FANOUT = PAGE // ENTRY

TABLES: dict[str, tuple[int, int]] = {
    "CUSTOMER": (1_000_000, 256),
    "PRODUCT": (100_000, 256),
    "EMPLOYEE": (10_000, 128),
    "DEPT": (200, 256),
    "SALES": (100_000_000, 32),
}

DEFAULTS: dict[str, Any] = {
    "scale": 0.001,
    "lookups": 32,  # index lookups per process in Q2 and Q5
    "spill": 0.5,  # fraction of SALES spilled to temp by the Q3 hash join
    "sortmem": 64 << 10,  # bytes per sorted run in Q4
    "queries": [1, 2, 3, 4, 5],
}


class Partition:
    """One table partition on one process: its data and index files and their geometry."""

    def __init__(self, b: TraceBuilder, rank: int, table: str, rows: int, rowsize: int) -> None:
        self.rows = rows
        self.per_page = max(1, PAGE // rowsize)
        self.pages = max(1, -(-rows // self.per_page))
        self.levels = self._levels(rows)
        index_pages = sum(self.levels)
        self.data = b.file(f"db2/p{rank}/{table}.dat", self.pages * PAGE)
        self.index = b.file(f"db2/p{rank}/{table}.idx", index_pages * PAGE)

    @staticmethod
    def _levels(rows: int) -> list[int]:
        """Pages per index level, root first."""
        levels = [max(1, -(-rows // FANOUT))]
        while levels[0] > 1:
            levels.insert(0, -(-levels[0] // FANOUT))
        return levels

    def lookup_pages(self, key: int) -> list[int]:
        """Index page numbers visited for a key (row number), root first."""
        pages, base = [], 0
        node_per_level = []
        idx = key // FANOUT  # leaf index
        for _ in self.levels:
            node_per_level.insert(0, idx)
            idx //= FANOUT
        for count, node in zip(self.levels, node_per_level, strict=True):
            pages.append(base + min(node, count - 1))
            base += count
        return pages


def _scan(b: TraceBuilder, rank: int, fid: int, pages: int, write: bool = False) -> None:
    """Pages 0..pages-1 in 128 KiB extents."""
    step = EXTENT // PAGE
    for first in range(0, pages, step):
        n = min(step, pages - first)
        (b.write if write else b.read)(rank, fid, first * PAGE, n * PAGE)


def _lookup(b: TraceBuilder, rank: int, part: Partition, key: int) -> None:
    for page in part.lookup_pages(key):
        b.read(rank, part.index, page * PAGE, PAGE)
    b.read(rank, part.data, (key // part.per_page) * PAGE, PAGE)


def db2(nprocs: int, params: dict[str, Any] | None = None, seed: int = 0) -> Trace:
    """A DB2-like parallel RDBMS: partitioned tables, scans, B-tree lookups, temp files.

    Models the DB2 trace of Vilayannur et al. (discretionary caching, §5): IBM DB2 running
    decision-support queries on a shared-nothing cluster; page-aligned 4 KiB I/O, 128 KiB
    prefetch extents, hot index inner pages, temporary files written and re-read.

    Raises:
        ValueError: for a non-positive scale or unknown query numbers.
    """
    p = resolve_params(DEFAULTS, params)
    if p["scale"] <= 0 or set(p["queries"]) - {1, 2, 3, 4, 5}:
        raise ValueError("scale must be > 0 and queries a subset of 1..5")
    b = TraceBuilder(nprocs, "db2", p, seed)
    parts: list[dict[str, Partition]] = [{} for _ in range(nprocs)]
    for table, (rows, rowsize) in TABLES.items():
        total = max(nprocs, round(rows * p["scale"]))
        for rank, (_, count) in enumerate(split_even(total, nprocs)):
            parts[rank][table] = Partition(b, rank, table, count, rowsize)
    temps = [b.file(f"db2/p{rank}/temp") for rank in range(nprocs)]
    for rank in range(nprocs):
        for part in parts[rank].values():
            b.open(rank, part.data, Flag.RD)
            b.open(rank, part.index, Flag.RD)
        b.open(rank, temps[rank], Flag.RD | Flag.WR | Flag.CREAT)
    rngs = [random.Random(seed * 1_000_003 + rank) for rank in range(nprocs)]
    for q in p["queries"]:
        b.barrier(f"db2 Q{q}")
        for rank in range(nprocs):
            mine, rng, temp = parts[rank], rngs[rank], temps[rank]
            if q == 1:
                _scan(b, rank, mine["SALES"].data, mine["SALES"].pages)
            elif q == 2:
                cust = mine["CUSTOMER"]
                for _ in range(p["lookups"]):
                    _lookup(b, rank, cust, rng.randrange(cust.rows))
            elif q == 3:
                _scan(b, rank, mine["PRODUCT"].data, mine["PRODUCT"].pages)
                sales = mine["SALES"]
                _scan(b, rank, sales.data, sales.pages)
                spilled = max(1, int(sales.pages * p["spill"]))
                _scan(b, rank, temp, spilled, write=True)
                _scan(b, rank, temp, spilled)
            elif q == 4:
                emp = mine["EMPLOYEE"]
                _scan(b, rank, emp.data, emp.pages)
                run_pages = max(1, p["sortmem"] // PAGE)
                runs = split_even(emp.pages, max(1, -(-emp.pages // run_pages)))
                _scan(b, rank, temp, emp.pages, write=True)
                cursors = [start for start, _ in runs]
                ends = [start + n for start, n in runs]
                while any(c < e for c, e in zip(cursors, ends, strict=True)):
                    for i, (c, e) in enumerate(zip(cursors, ends, strict=True)):
                        if c < e:
                            b.read(rank, temp, c * PAGE, PAGE)
                            cursors[i] += 1
                dept = mine["DEPT"]
                for _ in range(max(1, p["lookups"] // 4)):
                    _lookup(b, rank, dept, rng.randrange(dept.rows))
            else:
                cust, sales = mine["CUSTOMER"], mine["SALES"]
                _scan(b, rank, cust.data, cust.pages)
                for _ in range(p["lookups"]):
                    _lookup(b, rank, sales, rng.randrange(sales.rows))
    b.barrier("teardown")
    for rank in range(nprocs):
        for part in parts[rank].values():
            b.close(rank, part.data)
            b.close(rank, part.index)
        b.close(rank, temps[rank])
    return b.build()
