"""Plain against pipelined writes and reads of the native API, interleaved on one file system
(issue 30).

    python bench/pipeline_ab.py [--sizes 1 16] [--rounds 10] [--mib 256]

One 4-daemon file system, one client: each round writes ``--mib`` MiB in requests of each
size once with ``open(..., pipeline=False)`` and once with ``pipeline=True``
(``client/pipeline.py``), alternating which goes first, then reads them back in order the
same two ways (``client/readahead.py``); each run is timed to its file's close (a pipelined
write's last replies are read there). Medians, every round's ratio (pipelined ÷ plain) and
the client's CPU per GiB. Results: bench/results/pipeline_ab.json (or
``--json NAME``).
"""

from __future__ import annotations

import argparse
import os
import time

from pvfs.bench.common import exit_on_sigterm, format_table, median, private_cluster, write_results

MiB = 1 << 20


def one_run(fs, path: str, op: str, req: int, total: int, pipeline: bool
            ) -> tuple[float, float]:
    """(MiB/s, client CPU seconds per GiB) of writing (over an existing file) or reading
    ``total`` bytes in ``req``-byte requests, in order."""
    buf = bytearray(b"\xa5" * req)
    t0, c0 = time.perf_counter(), time.process_time()
    with fs.open(path, "r+b" if op == "write" else "rb", pipeline=pipeline) as f:
        for off in range(0, total, req):
            if op == "write":
                f.pwrite(buf, off)
            else:
                f.preadinto(buf, off)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return total / MiB / wall, cpu / (total / (1 << 30))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1, 16], help="request MiB")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--mib", type=int, default=256, help="MiB written per run")
    ap.add_argument("--json", metavar="NAME", default="pipeline_ab")
    args = ap.parse_args(argv)
    exit_on_sigterm()

    import pvfs

    results, rows = [], []
    with private_cluster() as cfg, pvfs.connect(cfg.path) as fs:
        for size in args.sizes:
            req, total = size * MiB, max(size, args.mib) * MiB
            for mode in ("plain", "pipelined"):  # the files exist before the rounds
                with fs.open(f"/ab-{mode}", "wb") as f:
                    f.truncate(total)
            for op in ("write", "read"):
                cell = _cell(fs, op, size, req, total, args.rounds)
                results.append(cell)
                rows.append([op, f"{size} MiB", f"{cell['plain_MiBps']:.0f}",
                             f"{cell['pipelined_MiBps']:.0f}",
                             f"{cell['ratio_median']:.2f}",
                             f"{cell['ratios'][0]:.2f}-{cell['ratios'][-1]:.2f}"])
                print(format_table(HEADERS, rows[-1:]), flush=True)
    print()
    print(format_table(HEADERS, rows))
    path = write_results(args.json, {"iods": 4, "rounds": args.rounds, "mib": args.mib,
                                     "results": results})
    print(f"saved {path}")
    return 0


HEADERS = ["op", "request", "plain MiB/s", "pipelined MiB/s", "ratio (median)", "ratios"]


def _cell(fs, op: str, size: int, req: int, total: int, rounds: int) -> dict:
    """One (op, request size) cell: the rounds, alternating which mode goes first."""
    runs: dict[str, list[tuple[float, float]]] = {"plain": [], "pipelined": []}
    for r in range(rounds):
        for mode in ("plain", "pipelined") if r % 2 == 0 else ("pipelined", "plain"):
            runs[mode].append(one_run(fs, f"/ab-{mode}", op, req, total, mode == "pipelined"))
    plain = [bw for bw, _ in runs["plain"]]
    piped = [bw for bw, _ in runs["pipelined"]]
    ratios = sorted(b / a for a, b in zip(plain, piped))
    return {"op": op, "request_mib": size, "plain_MiBps": median(plain),
            "pipelined_MiBps": median(piped), "ratio_median": median(ratios), "ratios": ratios,
            "plain_runs": plain, "pipelined_runs": piped,
            "plain_cpu_s_per_gib": median(c for _, c in runs["plain"]),
            "pipelined_cpu_s_per_gib": median(c for _, c in runs["pipelined"]),
            "load": os.getloadavg()[0]}


if __name__ == "__main__":
    raise SystemExit(main())
