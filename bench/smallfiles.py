"""Small files through the native API (issue 29: "native API: small-file creates+writes").

    python bench/smallfiles.py [--procs 1 4] [--files 1000] [--size 3901] [--repeats 3]

Each process connects (``pvfs.connect``), makes a directory of its own, waits at a barrier,
then creates, writes ``--size`` bytes into and closes ``--files`` files there, one after the
other -- what a program that keeps many small files does (a build, a checkpoint of many
objects, mdtest's hard phase through the library instead of a mount). Rate = all files /
(last finish - first start). After the timed loop each process reads back a sample of its
files and checks the bytes, so a fast wrong answer cannot pass.

In the same run, interleaved with it (rounds alternate which goes first), the same loop on a
local directory with ``os.open``/``os.write``/``os.close``: not a peer, the scale of the
machine (page cache, no network, no manager). pvfs runs on a file system of its own (4 I/O
daemons on this host). Results: ``bench/results/smallfiles.json`` (or ``--json NAME``): each
round's rates, the medians, the load average before and after.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
import time

from pvfs.bench.common import exit_on_sigterm, format_table, median, write_results

SAMPLE = 16  # files per process read back and checked after the timed loop


def _pvfs_client(config_path: str, top: str, idx: int, files: int, size: int, barrier,
                 out) -> None:
    import pvfs

    data = bytes((idx * 31 + i) % 251 for i in range(size))
    with pvfs.connect(config_path) as fs:
        d = f"{top}/p{idx}"
        fs.makedirs(d, exist_ok=True)
        barrier.wait()
        t0 = time.perf_counter()
        for i in range(files):
            with fs.open(f"{d}/f{i}", "wb") as f:
                f.write(data)
        t1 = time.perf_counter()
        for i in range(0, files, max(1, files // SAMPLE)):
            with fs.open(f"{d}/f{i}", "rb") as f:
                if f.read() != data:
                    raise RuntimeError(f"{d}/f{i}: wrong bytes read back")
    out.put((t0, t1))


def _local_client(root: str, top: str, idx: int, files: int, size: int, barrier,
                  out) -> None:
    data = bytes((idx * 31 + i) % 251 for i in range(size))
    d = os.path.join(root, top.lstrip("/"), f"p{idx}")
    os.makedirs(d)
    barrier.wait()
    t0 = time.perf_counter()
    for i in range(files):
        fd = os.open(os.path.join(d, f"f{i}"), os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        os.write(fd, data)
        os.close(fd)
    t1 = time.perf_counter()
    for i in range(0, files, max(1, files // SAMPLE)):
        with open(os.path.join(d, f"f{i}"), "rb") as fh:
            if fh.read() != data:
                raise RuntimeError(f"{d}/f{i}: wrong bytes read back")
    out.put((t0, t1))


def run_once(target, where: str, top: str, procs: int, files: int, size: int) -> float:
    """Files per second of ``procs`` processes running ``target`` at once."""
    ctx = mp.get_context("fork")
    barrier, out = ctx.Barrier(procs), ctx.Queue()
    ps = [ctx.Process(target=target, args=(where, top, i, files, size, barrier, out))
          for i in range(procs)]
    for p in ps:
        p.start()
    try:
        times = [out.get(timeout=900) for _ in ps]
    finally:
        for p in ps:
            p.join(timeout=60)
    bad = [p.exitcode for p in ps if p.exitcode]
    if bad:
        raise RuntimeError(f"a client exited with {bad[0]}")
    return procs * files / (max(t1 for _, t1 in times) - min(t0 for t0, _ in times))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--procs", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--files", type=int, default=1000, help="files per process")
    ap.add_argument("--size", type=int, default=3901, help="bytes per file (mdtest hard's)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--iods", type=int, default=4)
    ap.add_argument("--json", default="smallfiles", help="results name (bench/results/)")
    args = ap.parse_args(argv)
    exit_on_sigterm()
    from pvfs.cluster.launch import scratch_cluster

    load0 = os.getloadavg()
    rounds: list[dict] = []
    local = tempfile.mkdtemp(prefix="pvfs-smallfiles-local-")
    try:
        with scratch_cluster("pvfs-smallfiles-", args.iods) as cfg:
            for r in range(args.repeats):
                for procs in args.procs:
                    order = ["pvfs", "local"] if (r + procs) % 2 == 0 else ["local", "pvfs"]
                    row = {"round": r, "procs": procs, "first": order[0]}
                    for name in order:
                        top = f"/round{r}-p{procs}"
                        if name == "pvfs":
                            row[name] = run_once(_pvfs_client, cfg.path, top, procs,
                                                 args.files, args.size)
                        else:
                            row[name] = run_once(_local_client, local, top, procs,
                                                 args.files, args.size)
                    print(f"round {r} procs {procs}: pvfs {row['pvfs']:,.0f}/s, "
                          f"local {row['local']:,.0f}/s", flush=True)
                    rounds.append(row)
    finally:
        shutil.rmtree(local, ignore_errors=True)
    medians = {p: {name: median(row[name] for row in rounds if row["procs"] == p)
                   for name in ("pvfs", "local")} for p in args.procs}
    print(format_table(["processes", "pvfs files/s", "local files/s"],
                       [[p, f"{m['pvfs']:,.0f}", f"{m['local']:,.0f}"]
                        for p, m in medians.items()]))
    path = write_results(args.json, {
        "files_per_process": args.files, "size": args.size, "iods": args.iods,
        "load_before": list(load0), "load_after": list(os.getloadavg()),
        "rounds": rounds, "medians": {str(p): m for p, m in medians.items()},
    })
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
