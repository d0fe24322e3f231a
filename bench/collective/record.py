"""Collective caching study (SPEC §8, docs/collective.md): run ``pvfs-admin bench collective``
and save its numbers as ``bench/results/collective[-quick].json`` with the machine and load.

    .venv/bin/python bench/collective/record.py --quick            # 4 ranks, < 10 min
    .venv/bin/python bench/collective/record.py --repeat 3 --plot docs/collective.png

The study starts its own 4-daemon file system; the machine's load average before and after
is stored because other work on the host changes absolute numbers (compare within one run).
"""

from __future__ import annotations

import argparse
import sys

from pvfs.bench.collective.drive import (
    HEADERS,
    PAIRED_HEADERS,
    paired_rows,
    plot,
    run_suite,
    table_rows,
)
from pvfs.bench.common import format_table, write_results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("-n", "--ranks", type=int, default=4)
    ap.add_argument("--window-ranks", default=None, help="e.g. 1,2,4,8")
    ap.add_argument("--only", default=None, help="sliding_window,btio,flash,s3d")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--plot", default=None, help="PNG path")
    args = ap.parse_args()
    data = run_suite(quick=args.quick, ranks=args.ranks, repeat=args.repeat,
                     window_ranks=[int(x) for x in args.window_ranks.split(",")]
                     if args.window_ranks else None,
                     benchmarks=args.only.split(",") if args.only else None,
                     progress=lambda s: print(s, file=sys.stderr, flush=True))
    name = "collective-quick" if args.quick else "collective"
    path = write_results(name, data)
    if args.plot:
        plot(data, args.plot)
    print(format_table(HEADERS, table_rows(data)))
    print()
    print("ratios within each repeat (same load for both sides):")
    print(format_table(PAIRED_HEADERS, paired_rows(data)))
    print(f"saved {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
