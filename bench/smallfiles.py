"""Small files through the native API (issue 29: "native API: small-file creates+writes").

    python bench/smallfiles.py [--procs 1 4] [--files 1000] [--size 3901] [--repeats 3]
                               [--variants pvfs ahead local]

Each process connects (``pvfs.connect``), makes a directory of its own, waits at a barrier,
then creates, writes ``--size`` bytes into and closes ``--files`` files there, one after the
other -- what a program that keeps many small files does (a build, a checkpoint of many
objects, mdtest's hard phase through the library instead of a mount). Rate = all files /
(last finish - first start). After the timed loop each process reads back a sample of its
files and checks the bytes, so a fast wrong answer cannot pass.

Variants, interleaved in one run (each round rotates which goes first): ``pvfs``, a plain
``pvfs.connect``; ``ahead``, ``pvfs.connect(ahead=True)`` (creates made ahead of the manager,
``pvfs.client.ahead``); ``local``, the same loop on a local directory with
``os.open``/``os.write``/``os.close``: not a peer, the scale of the machine (page cache, no
network, no manager). pvfs runs on a file system of its own (4 I/O daemons on this host).
Both keep their files on a journaled ext4 of their own (``--scratch journaled``, a loop
device; ``bench.common.journaled_scratch`` says why: this machine's root ext4 has no journal,
which makes a create cost ~40x more after recent deletions), or in ``/tmp`` (``--scratch tmp``).
Beside the rate, the CPU time per file of the clients and of every daemon together, which a
loaded machine moves far less than the rate. Results: ``bench/results/smallfiles.json`` (or
``--json NAME``): each round's rates and CPU, the medians, the load average before and after.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from pvfs.bench.common import (
    exit_on_sigterm,
    format_table,
    journaled_scratch,
    median,
    write_results,
)

SAMPLE = 16  # files per process read back and checked after the timed loop


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def _pvfs_client(config_path: str, top: str, idx: int, files: int, size: int, barrier,
                 out, ahead: bool = False) -> None:
    import pvfs

    data = bytes((idx * 31 + i) % 251 for i in range(size))
    with pvfs.connect(config_path, ahead=ahead) as fs:
        d = f"{top}/p{idx}"
        fs.makedirs(d, exist_ok=True)
        barrier.wait()
        t0, c0 = time.perf_counter(), _cpu()
        for i in range(files):
            with fs.open(f"{d}/f{i}", "wb") as f:
                f.write(data)
        if fs.ahead is not None:
            fs.ahead.flush()  # every create at the manager before the clock stops
        t1, c1 = time.perf_counter(), _cpu()
        for i in range(0, files, max(1, files // SAMPLE)):
            with fs.open(f"{d}/f{i}", "rb") as f:
                if f.read() != data:
                    raise RuntimeError(f"{d}/f{i}: wrong bytes read back")
    out.put((t0, t1, c1 - c0))


def _ahead_client(*args) -> None:
    _pvfs_client(*args, ahead=True)


def _local_client(root: str, top: str, idx: int, files: int, size: int, barrier,
                  out) -> None:
    data = bytes((idx * 31 + i) % 251 for i in range(size))
    d = os.path.join(root, top.lstrip("/"), f"p{idx}")
    os.makedirs(d)
    barrier.wait()
    t0, c0 = time.perf_counter(), _cpu()
    for i in range(files):
        fd = os.open(os.path.join(d, f"f{i}"), os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        os.write(fd, data)
        os.close(fd)
    t1, c1 = time.perf_counter(), _cpu()
    for i in range(0, files, max(1, files // SAMPLE)):
        with open(os.path.join(d, f"f{i}"), "rb") as fh:
            if fh.read() != data:
                raise RuntimeError(f"{d}/f{i}: wrong bytes read back")
    out.put((t0, t1, c1 - c0))


def _daemons_cpu(pids: list[int]) -> float:
    """CPU seconds the daemons have used (their threads included)."""
    total = 0.0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def run_once(target, where: str, top: str, procs: int, files: int, size: int,
             daemons: list[int] = ()) -> tuple[float, float]:
    """(files per second, CPU ms per file of the clients and ``daemons``) of ``procs``
    processes running ``target`` at once."""
    d0 = _daemons_cpu(daemons)
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
    n = procs * files
    cpu = sum(c for _, _, c in times) + _daemons_cpu(daemons) - d0
    return n / (max(t[1] for t in times) - min(t[0] for t in times)), cpu / n * 1e3


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--procs", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--files", type=int, default=1000, help="files per process")
    ap.add_argument("--size", type=int, default=3901, help="bytes per file (mdtest hard's)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--iods", type=int, default=4)
    ap.add_argument("--variants", nargs="+", choices=list(VARIANTS),
                    default=list(VARIANTS), help="what runs, interleaved (default: all)")
    ap.add_argument("--json", default="smallfiles", help="results name (bench/results/)")
    ap.add_argument("--scratch", choices=["journaled", "tmp"], default="journaled",
                    help="where the files of both go (default: a journaled ext4 of its own)")
    args = ap.parse_args(argv)
    exit_on_sigterm()
    if args.scratch == "tmp":
        return _main(args, None)
    with journaled_scratch() as where:
        if where is None:
            print("no journaled scratch file system (needs root and mkfs.ext4): using /tmp")
        return _main(args, where)


def _main(args, scratch: str | None) -> int:
    from pvfs.cluster.launch import daemons_of, scratch_cluster
    from pvfs.procs import read_pidfile

    load0 = os.getloadavg()
    rounds: list[dict] = []
    local = tempfile.mkdtemp(prefix="pvfs-smallfiles-local-")
    try:
        with scratch_cluster("pvfs-smallfiles-", args.iods) as cfg:
            pids = [read_pidfile(d.pidfile) for d in daemons_of(cfg)]
            for r in range(args.repeats):
                for procs in args.procs:
                    row = _round(r, procs, args, cfg.path, local, [p for p in pids if p])
                    print(f"round {r} procs {procs}: " + ", ".join(
                        f"{v} {row[v]:,.0f}/s ({row['cpu_ms'][v]:.2f} CPU ms/file)"
                        for v in args.variants), flush=True)
                    rounds.append(row)
    finally:
        shutil.rmtree(local, ignore_errors=True)
    medians = {p: {v: median(row[v] for row in rounds if row["procs"] == p)
                   for v in args.variants} for p in args.procs}
    cpu = {p: {v: median(row["cpu_ms"][v] for row in rounds if row["procs"] == p)
               for v in args.variants} for p in args.procs}
    print(format_table(["processes"] + [f"{v} files/s" for v in args.variants]
                       + [f"{v} CPU ms/file" for v in args.variants],
                       [[p] + [f"{m[v]:,.0f}" for v in args.variants]
                        + [f"{cpu[p][v]:.2f}" for v in args.variants]
                        for p, m in medians.items()]))
    path = write_results(args.json, {
        "files_per_process": args.files, "size": args.size, "iods": args.iods,
        "scratch": "journaled ext4 (loop)" if scratch else tempfile.gettempdir(),
        "variants": args.variants, "load_before": list(load0),
        "load_after": list(os.getloadavg()), "rounds": rounds,
        "medians": {str(p): m for p, m in medians.items()},
        "cpu_ms_per_file_medians": {str(p): c for p, c in cpu.items()},
    })
    print(f"results: {path}")
    return 0


def _round(r: int, procs: int, args, config_path: str, local: str, pids: list[int]) -> dict:
    """One round: every variant once, the order rotated by round (no variant always first)."""
    k = (r + procs) % len(args.variants)
    order = args.variants[k:] + args.variants[:k]
    row: dict = {"round": r, "procs": procs, "order": order, "cpu_ms": {},
                 "load": os.getloadavg()[0]}
    for v in order:
        target, where = VARIANTS[v], (local if v == "local" else config_path)
        top = f"/round{r}-p{procs}-{v}"
        row[v], row["cpu_ms"][v] = run_once(target, where, top, procs, args.files, args.size,
                                            [] if v == "local" else pids)
    return row


VARIANTS = {"pvfs": _pvfs_client, "ahead": _ahead_client, "local": _local_client}


if __name__ == "__main__":
    sys.exit(main())
