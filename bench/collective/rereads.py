"""Which pages the sliding window read from the file more than once, and why (issue 32).

Reads the per-rank traces a window job writes with ``PVFS_COLLECTIVE_TRACE=DIR`` (see
:mod:`.mpi`: every file read with the thread that made it — ``r`` the rank's main thread,
``ra`` its read-ahead helper — and every eviction with its time) and prints, per job, the
pages read, the extra reads, how many of them followed an eviction of that page (by any
rank) since its previous read, the kinds of the two reads (``ra``→``ra``: a page read
ahead again), and each rank's pages read and evictions.

    python -m pvfs.bench.collective.rereads DIR [--page 32768] [-o OUT.json]
"""

from __future__ import annotations

import argparse
import collections
import glob
import itertools
import json
import os
import re
import sys
from typing import Any


def analyse(paths: list[str], page: int) -> dict[str, Any]:
    """One job's traces (one file per client rank): its re-read summary."""
    reads: dict[int, list[tuple[float, int, str]]] = collections.defaultdict(list)
    evicted: dict[int, list[float]] = collections.defaultdict(list)
    ranks = []
    for path in paths:
        with open(path) as f:
            d = json.load(f)
        rank, pages_read = d["rank"], 0
        for began, _end, off, n, kind in d["fs"] or []:
            if kind == "w" or n <= 0:
                continue
            for p in range(off // page, (off + n - 1) // page + 1):
                reads[p].append((began, rank, kind))
                pages_read += 1
        for t, p in d.get("evictions") or []:
            evicted[p].append(t)
        ranks.append({"rank": rank, "pages_read": pages_read,
                      "evictions": len(d.get("evictions") or [])})
    extra = after_eviction = 0
    kinds: collections.Counter[str] = collections.Counter()
    for p, rs in reads.items():
        rs.sort()
        for a, b in itertools.pairwise(rs):
            extra += 1
            kinds[f"{a[2]}->{b[2]}"] += 1
            if any(a[0] < t < b[0] for t in evicted.get(p, ())):
                after_eviction += 1
    return {"pages": len(reads), "page_reads": sum(len(v) for v in reads.values()),
            "extra_reads": extra, "extra_after_eviction": after_eviction,
            "extra_by_kind": dict(kinds),
            "ranks": sorted(ranks, key=lambda r: r["rank"])}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--page", type=int, default=32 << 10)
    ap.add_argument("-o", "--output")
    args = ap.parse_args(argv)
    jobs: dict[str, list[str]] = collections.defaultdict(list)
    for path in glob.glob(os.path.join(args.dir, "*-r*.json")):
        m = re.match(r"(.*)-r\d+\.json$", os.path.basename(path))
        if m:
            jobs[m.group(1)].append(path)
    out = {job: analyse(paths, args.page) for job, paths in sorted(jobs.items())}
    text = json.dumps(out, indent=1)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
