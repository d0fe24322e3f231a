"""Titan, Mining and Pgrep: the data-intensive applications of the UMD/MAMBO traces.

The discretionary-caching paper (Vilayannur et al., §5) replays traces of these three
programs (from Uysal, Acharya and Saltz's *Requirements of I/O systems for parallel machines:
an application-driven study*). Each generator reproduces the I/O structure the programs are
known for; sizes are parameters.
"""

from __future__ import annotations

import random
from typing import Any

from pvfs.traces.format import Flag, Trace
from pvfs.traces.generators._build import TraceBuilder, chunked, resolve_params, split_even

TITAN_DEFAULTS: dict[str, Any] = {
    "grid": 16,  # chunks per side of the spatial grid
    "times": 4,  # time steps (the third dimension)
    "chunk": 32 << 10,  # bytes per chunk
    "node": 4096,  # bytes per R-tree node
    "rtree_fanout": 16,
    "queries": 8,
    "query_frac": 0.25,  # side of a query box as a fraction of the grid
    "outstanding": 8,  # chunk requests per listio batch (bounded outstanding requests)
}


def titan(nprocs: int, params: dict[str, Any] | None = None, seed: int = 0) -> Trace:
    """Titan, a parallel scientific database for remote-sensing (AVHRR) data.

    Models Titan's query processing (Chang et al., 1997; Vilayannur et al. §5): the input is
    a 3D grid of chunks (space × space × time) declustered over the processes, one data file
    each; an R-tree over the chunks' bounding boxes (one index file, all processes read it)
    selects the chunks a query box intersects; each process then reads its selected chunks in
    file order as listio batches of at most ``outstanding`` chunk requests (the bounded number
    of outstanding requests). Query boxes are random and overlap, so chunks are re-read.
    """
    p = resolve_params(TITAN_DEFAULTS, params)
    rng = random.Random(seed)
    g, t, chunk, fan = p["grid"], p["times"], p["chunk"], max(2, p["rtree_fanout"])
    cells = [(x, y, z) for z in range(t) for y in range(g) for x in range(g)]
    pos = {c: i for i, c in enumerate(cells)}  # R-tree leaves hold cells in this order
    owner = {c: (c[0] + c[1] * 7 + c[2] * 13) % nprocs for c in cells}  # declustering
    local_index: dict[tuple[int, int, int], int] = {}
    counts = [0] * nprocs
    for c in cells:
        local_index[c] = counts[owner[c]]
        counts[owner[c]] += 1
    b = TraceBuilder(nprocs, "titan", p, seed)
    data = [b.file(f"titan/data{r}", counts[r] * chunk) for r in range(nprocs)]
    leaves = -(-len(cells) // fan)
    levels = [leaves]
    while levels[0] > 1:
        levels.insert(0, -(-levels[0] // fan))
    index = b.file("titan/rtree", sum(levels) * p["node"])
    for r in range(nprocs):
        b.open(r, index, Flag.RD)
        b.open(r, data[r], Flag.RD)
    side = max(1, int(g * p["query_frac"]))
    for q in range(p["queries"]):
        x0, y0 = rng.randrange(g - side + 1), rng.randrange(g - side + 1)
        z0 = rng.randrange(t)
        box = [(x, y, z) for z in range(z0, t) for y in range(y0, y0 + side)
               for x in range(x0, x0 + side)]
        leaf_ids = sorted({pos[c] // fan for c in box})
        b.barrier(f"titan query {q}")
        for r in range(nprocs):
            # R-tree search: root to every intersecting leaf, each node read once per query.
            visited: set[int] = set()
            for leaf in leaf_ids:
                idx, base_pages = leaf, []
                for _ in levels:
                    base_pages.insert(0, idx)
                    idx //= fan
                base = 0
                for count, node in zip(levels, base_pages, strict=True):
                    page = base + node
                    base += count
                    if page not in visited:
                        visited.add(page)
                        b.read(r, index, page * p["node"], p["node"])
            mine = sorted(local_index[c] for c in box if owner[c] == r)
            for first in range(0, len(mine), max(1, p["outstanding"])):
                batch = mine[first:first + max(1, p["outstanding"])]
                b.listio(r, data[r], [(i * chunk, chunk) for i in batch], write=False)
    b.barrier("teardown")
    for r in range(nprocs):
        b.close(r, index)
        b.close(r, data[r])
    return b.build()


MINING_DEFAULTS: dict[str, Any] = {
    "db": 1 << 20,  # bytes of transactions per process
    "passes": 4,  # Apriori passes (k = 1..passes)
    "req": 64 << 10,
    "rules": 4096,  # bytes of rules written by rank 0 at the end
    "think": 0.0,  # seconds of counting per request
}


def mining(nprocs: int, params: dict[str, Any] | None = None, seed: int = 0) -> Trace:
    """Association-rule mining of retail data with Apriori.

    Models the Mining trace of Vilayannur et al. §5 (Agrawal and Shafer's parallel Apriori,
    count distribution): each process owns a file of transactions and makes one full
    sequential scan of it per pass (k-itemset counting); the counts are combined (a barrier)
    between passes; rank 0 writes the rules at the end.
    """
    p = resolve_params(MINING_DEFAULTS, params)
    b = TraceBuilder(nprocs, "mining", p, seed)
    dbs = [b.file(f"mining/transactions{r}", p["db"]) for r in range(nprocs)]
    rules = b.file("mining/rules")
    for r in range(nprocs):
        b.open(r, dbs[r], Flag.RD)
    for k in range(1, p["passes"] + 1):
        b.barrier(f"mining pass {k}")
        for r in range(nprocs):
            for o, n in chunked(0, p["db"], p["req"]):
                b.read(r, dbs[r], o, n, p["think"])
    b.barrier("rules")
    b.open(0, rules, Flag.WR | Flag.CREAT)
    for o, n in chunked(0, p["rules"], p["req"]):
        b.write(0, rules, o, n)
    b.close(0, rules)
    for r in range(nprocs):
        b.close(r, dbs[r])
    return b.build()


PGREP_DEFAULTS: dict[str, Any] = {
    "files": 8,
    "file_min": 64 << 10,
    "file_max": 512 << 10,
    "mode": "files",  # files: whole files round robin; blocks: each file cut in nprocs blocks
    "req": 64 << 10,
    "matches": 1024,  # bytes of matching lines each process writes
}


def pgrep(nprocs: int, params: dict[str, Any] | None = None, seed: int = 0) -> Trace:
    """Parallel agrep: one sequential pass over a set of text files.

    Models the Pgrep trace of Vilayannur et al. §5 (a parallelisation of agrep from the
    University of Arizona): ``mode=files`` deals whole files to the processes round robin,
    ``mode=blocks`` gives every process one contiguous block of each file; every byte is read
    once, sequentially, and each process writes its matches to its own output file.

    Raises:
        ValueError: for an unknown mode.
    """
    p = resolve_params(PGREP_DEFAULTS, params)
    if p["mode"] not in ("files", "blocks"):
        raise ValueError("mode must be files or blocks")
    rng = random.Random(seed)
    b = TraceBuilder(nprocs, "pgrep", p, seed)
    sizes = [rng.randint(p["file_min"], p["file_max"]) for _ in range(p["files"])]
    inputs = [b.file(f"pgrep/input{i}", s) for i, s in enumerate(sizes)]
    outs = [b.file(f"pgrep/matches{r}") for r in range(nprocs)]
    b.barrier("pgrep scan")
    for i, (fid, size) in enumerate(zip(inputs, sizes, strict=True)):
        if p["mode"] == "files":
            pieces = [(i % nprocs, 0, size)]
        else:
            pieces = [(r, start, n) for r, (start, n) in enumerate(split_even(size, nprocs))]
        for r, start, n in pieces:
            if n == 0:
                continue
            b.open(r, fid, Flag.RD)
            for o, ln in chunked(start, n, p["req"]):
                b.read(r, fid, o, ln)
            b.close(r, fid)
    b.barrier("pgrep output")
    for r in range(nprocs):
        b.open(r, outs[r], Flag.WR | Flag.CREAT)
        if p["matches"]:
            b.write(r, outs[r], 0, p["matches"])
        b.close(r, outs[r])
    return b.build()
