"""Writers taking turns on one shared file (IOR hard's write phase) through two mounts of one
file system with different options, interleaved (issue 30).

    python bench/turns_ab.py [--a ""] [--b stream_write_min=128k] [--ranks 2 4]
                             [--segments 3000] [--rounds 5]

One 4-daemon file system, two mounts of it (options ``--a`` and ``--b``). Each round, at
each rank count, ``ranks`` processes write ``--segments`` transfers of 47,008 bytes each to
one new file of a mount -- rank ``r``'s transfer ``s`` at ``(s * ranks + r) * 47008``,
IOR hard's layout -- then ``fsync`` it; the phase is timed from the start barrier to the
last fsync (IOR's write phase with ``-e``). The two mounts alternate which goes first. The
file is read back and checked through the other mount after the round (untimed). Reported:
both mounts' medians, every round's ratio (``a`` ÷ ``b``) and their median, the mount
processes' CPU per GiB. The forty-sixth session's A/B of the gathered stream write-back:
``--a "" --b stream_write_min=128k`` (the mount before it sent IOR hard's transfers through
the 4 KiB blocks). Results: bench/results/turns_ab.json (or ``--json NAME``).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import tempfile
import time
from pathlib import Path

from pvfs.bench.common import exit_on_sigterm, format_table, median, private_cluster, write_results
from pvfs.bench.fio.pvfs_target import pvfs_mount

TRANSFER = 47008
MiB = 1 << 20


def _rank(path: str, rank: int, ranks: int, segments: int, start, done) -> None:
    """One writer: its transfers in order, then fsync (the barrier before the first)."""
    fd = os.open(path, os.O_WRONLY)
    try:
        start.wait()
        for s in range(segments):
            os.pwrite(fd, _fill(s, rank), (s * ranks + rank) * TRANSFER)
        os.fsync(fd)
    finally:
        os.close(fd)
    done.put(rank)


def _fill(seg: int, rank: int) -> bytes:
    return bytes([(seg * 31 + rank * 7) % 251 + 1]) * TRANSFER


def one_run(mnt: str, name: str, ranks: int, segments: int) -> tuple[float, float]:
    """(MiB/s, wall seconds) of the write phase of ``ranks`` writers at ``mnt/name``."""
    path = os.path.join(mnt, name)
    with open(path, "wb"):
        pass
    ctx = mp.get_context("fork")
    start, done = ctx.Barrier(ranks + 1), ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(path, r, ranks, segments, start, done))
             for r in range(ranks)]
    for p in procs:
        p.start()
    start.wait()
    t0 = time.perf_counter()
    for _ in procs:
        done.get(timeout=600)
    wall = time.perf_counter() - t0
    for p in procs:
        p.join()
        if p.exitcode != 0:
            raise RuntimeError(f"a writer failed (exit {p.exitcode})")
    return ranks * segments * TRANSFER / MiB / wall, wall


def check(path: str, ranks: int, segments: int) -> None:
    """The file's bytes are the writers' (read through the other mount)."""
    with open(path, "rb") as fh:
        for s in range(segments):
            for r in range(ranks):
                if fh.read(TRANSFER) != _fill(s, r):
                    raise RuntimeError(f"{path}: transfer {s} of rank {r} differs")


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _mount_pid(mnt: str) -> int:
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                argv = (d / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"pvfs.fuse" in argv and mnt.encode() in argv:
                return int(d.name)
    raise RuntimeError(f"no mount process for {mnt}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", default="", help="mount options of side a")
    ap.add_argument("--b", default="stream_write_min=128k", help="mount options of side b")
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--segments", type=int, default=3000, help="transfers per rank")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", metavar="NAME", default="turns_ab")
    args = ap.parse_args(argv)
    exit_on_sigterm()

    results, rows = [], []
    with private_cluster() as cfg, tempfile.TemporaryDirectory(prefix="pvfs-mnt-") as tmp, \
            pvfs_mount(cfg.path, f"{tmp}/a", args.a) as ma, \
            pvfs_mount(cfg.path, f"{tmp}/b", args.b) as mb:
        mounts = {"a": ma, "b": mb}
        pids = {k: _mount_pid(m) for k, m in mounts.items()}
        for ranks in args.ranks:
            cell = _cell(mounts, pids, ranks, args.segments, args.rounds)
            results.append(cell)
            rows.append([ranks, f"{cell['a_MiBps']:.0f}", f"{cell['b_MiBps']:.0f}",
                         f"{cell['ratio_median']:.2f}",
                         f"{cell['ratios'][0]:.2f}-{cell['ratios'][-1]:.2f}",
                         f"{cell['a_cpu_s_per_gib']:.2f} / {cell['b_cpu_s_per_gib']:.2f}"])
            print(format_table(HEADERS, rows[-1:]), flush=True)
    print()
    print(format_table(HEADERS, rows))
    path = write_results(args.json, {"iods": 4, "a": args.a, "b": args.b,
                                     "transfer": TRANSFER, "segments": args.segments,
                                     "rounds": args.rounds, "results": results})
    print(f"saved {path}")
    return 0


HEADERS = ["ranks", "a MiB/s", "b MiB/s", "a/b (median)", "ratios", "mount CPU s/GiB a / b"]


def _cell(mounts: dict[str, str], pids: dict[str, int], ranks: int, segments: int,
          rounds: int) -> dict:
    """One rank count: the rounds, alternating which mount goes first."""
    runs: dict[str, list[tuple[float, float]]] = {"a": [], "b": []}
    gib = ranks * segments * TRANSFER / (1 << 30)
    for r in range(rounds):
        for side in ("a", "b") if r % 2 == 0 else ("b", "a"):
            c0 = _cpu_s(pids[side])
            bw, _ = one_run(mounts[side], f"turns-{side}-{ranks}-{r}", ranks, segments)
            runs[side].append((bw, (_cpu_s(pids[side]) - c0) / gib))
        for side, other in (("a", "b"), ("b", "a")):
            name = f"turns-{side}-{ranks}-{r}"
            check(os.path.join(mounts[other], name), ranks, segments)
            os.unlink(os.path.join(mounts[side], name))
    a = [bw for bw, _ in runs["a"]]
    b = [bw for bw, _ in runs["b"]]
    ratios = sorted(x / y for x, y in zip(a, b))
    return {"ranks": ranks, "a_MiBps": median(a), "b_MiBps": median(b),
            "ratio_median": median(ratios), "ratios": ratios, "a_runs": a, "b_runs": b,
            "a_cpu_s_per_gib": median(c for _, c in runs["a"]),
            "b_cpu_s_per_gib": median(c for _, c in runs["b"]),
            "load": os.getloadavg()[0]}


if __name__ == "__main__":
    raise SystemExit(main())
