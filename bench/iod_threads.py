"""Where the I/O daemons' CPU goes per request: their trio (main) threads against the rest
(the engine's thread, worker threads), while one native client moves fixed-size requests
(issue 30: the daemon's frame -> job path in C).

    python bench/iod_threads.py [--seconds 10] [--size-mib 1] [--ssize 65536] [--ab TREE --rounds 3]

A 4-daemon file system of its own; one client writes then reads a 64 MiB file in requests of
``--size-mib`` for ``--seconds``. Reported: requests, and per request the CPU (utime+stime
from /proc) of the daemons' main threads and of their other threads, and CPU seconds per GiB
at the daemons. ``--ab TREE`` runs it alternately on TREE's code (its venv) and this tree's.
Results: bench/results/iod_threads.json (or ``--json NAME``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from statistics import median

from pvfs.bench.common import format_table, write_results

MiB = 1 << 20


def thread_cpu(pids: list[int]) -> dict[str, float]:
    """CPU seconds of the daemons' main threads and of all their other threads."""
    out = {"main": 0.0, "other": 0.0}
    tick = os.sysconf("SC_CLK_TCK")
    for pid in pids:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            out["main" if tid == str(pid) else "other"] += (int(fields[11]) + int(fields[12])) / tick
    return out


def measure(seconds: float, size: int, ssize: int) -> dict:
    import pvfs
    from pvfs.cluster.launch import daemons_of, scratch_cluster

    with scratch_cluster("/tmp/pvfs-iodthreads-", 4) as cfg:
        pids = [int(Path(d.pidfile).read_text()) for d in daemons_of(cfg)
                if d.name.startswith("iod")]
        fs = pvfs.connect(cfg.path)
        try:
            f = fs.open("/f", "w+b", stripe=pvfs.Stripe(0, 4, ssize))
            buf = bytearray(os.urandom(size))
            view = memoryview(buf)
            count = max(1, 64 * MiB // size)
            for i in range(count):  # every daemon has the file open from here on
                f.pwrite(buf, i * size)
            c0, t0, n = thread_cpu(pids), time.monotonic(), 0
            while time.monotonic() - t0 < seconds:
                for i in range(count):
                    f.pwrite(buf, i * size)
                for i in range(count):
                    f.preadinto(view, i * size)
                n += 2 * count
            c1 = thread_cpu(pids)
            f.close()
        finally:
            fs.close()
    main = (c1["main"] - c0["main"]) / n * 1e6
    other = (c1["other"] - c0["other"]) / n * 1e6
    return {"requests": n, "main_us_per_request": main, "other_us_per_request": other,
            "iods_cpu_s_per_gib": (main + other) / 1e6 * (1 << 30) / size,
            "load": os.getloadavg()[0]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--size-mib", type=float, default=1.0)
    ap.add_argument("--ssize", type=int, default=65536)
    ap.add_argument("--ab", metavar="TREE")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", metavar="NAME", default="iod_threads")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # a child's run
    args = ap.parse_args(argv)
    size = int(args.size_mib * MiB)
    if args.one:
        print(json.dumps(measure(args.seconds, size, args.ssize)))
        return 0
    here = Path(__file__).resolve().parents[1]
    trees = {"after": here} if not args.ab else {"before": Path(args.ab).resolve(), "after": here}
    runs: dict[str, list[dict]] = {k: [] for k in trees}
    for k in range(args.rounds):
        order = list(trees) if k % 2 == 0 else list(reversed(trees))
        for side in order:
            cmd = [str(trees[side] / ".venv/bin/python"), str(Path(__file__).resolve()), "--one",
                   "--seconds", str(args.seconds), "--size-mib", str(args.size_mib),
                   "--ssize", str(args.ssize)]
            done = subprocess.run(cmd, cwd=trees[side], check=True, capture_output=True,
                                  text=True)
            runs[side].append(json.loads(done.stdout.strip().splitlines()[-1]))
    rows = []
    for side, rs in runs.items():
        rows.append([side, len(rs), *(f"{median(r[k] for r in rs):.0f}" for k in
                                      ("requests", "main_us_per_request", "other_us_per_request")),
                     f"{median(r['iods_cpu_s_per_gib'] for r in rs):.2f}",
                     f"{min(r['load'] for r in rs):.1f}-{max(r['load'] for r in rs):.1f}"])
    print(format_table(["tree", "runs", "requests", "main us/req", "other us/req",
                        "iods CPU s/GiB", "load"], rows))
    path = write_results(args.json, {"trees": {k: str(v) for k, v in trees.items()},
                                     "seconds": args.seconds, "request_bytes": size,
                                     "ssize": args.ssize, "runs": runs})
    print(f"saved {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
