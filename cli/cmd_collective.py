"""``pvfs-admin bench collective``: collective caching for MPI programs (SPEC §8).

Runs DAChe's sliding window and the BTIO, FLASH-IO and S3D-IO checkpoint kernels as
``mpiexec`` jobs (:mod:`pvfs.bench.collective.drive`) and prints bandwidth, file-system calls,
I/O-daemon requests and locks per benchmark and method. The subcommand joins the ``bench``
group if another part made one, else makes it.
"""

from __future__ import annotations

import argparse
import sys

from pvfs.cli.common import PROG, add_command, finish_run
from pvfs.cli.output import CliError, table
from pvfs.models.disk import PRESETS


def _bench_group(sub: argparse._SubParsersAction) -> argparse._SubParsersAction:
    """The ``bench`` group's subcommands, made here if no other part has made the group."""
    parser = sub.choices.get("bench")
    if parser is None:
        parser = add_command(sub, "bench", help="benchmarks", func=None,
                             example=f"{PROG} bench collective --quick")
        return parser.add_subparsers(title="benchmarks", metavar="BENCH")
    for action in parser._actions:  # argparse keeps a group's subparsers only here
        if isinstance(action, argparse._SubParsersAction):
            return action
    return parser.add_subparsers(title="benchmarks", metavar="BENCH")


def register(sub: argparse._SubParsersAction) -> None:
    bsub = _bench_group(sub)
    p = add_command(bsub, "collective", help="collective caching and write-behind for MPI "
                    "programs: sliding window, BTIO, FLASH-IO, S3D-IO", func=cmd_bench_collective,
                    example=f"""\
{PROG} bench collective --quick                 # 4 ranks, under 10 minutes
{PROG} bench collective -n 4 --repeat 3 --json -o collective.json --plot collective.png
{PROG} bench collective --only btio --use-config   # on the --config file system
{PROG} bench collective --only sliding_window --storage emulated:ide-2000 --cold
                                          # disks that cost time, caches emptied first""",
                    description="Run DAChe's sliding window (4 MiB cache, 32 KiB pages, 64 KiB "
                    "chunks, 40 loops) with\nindependent reads and the group cache under each "
                    "coordination (rma, thread, servers),\nand the BTIO, FLASH-IO and S3D-IO "
                    "checkpoints under independent, collective\n(two-phase), caching and "
                    "write_behind, as mpiexec jobs (mpich wheel). Prints MiB/s,\nfile-system "
                    "write/read calls, I/O-daemon write requests and page locks.\nUnless "
                    "--use-config is given it starts a private 4-daemon file system; by "
                    "default\nits I/O daemons store posix files, whose reads this machine's "
                    "page cache answers.\n--storage emulated:ide-2000 charges every read "
                    "that misses the daemons' (emulated)\ncache the time of the thesis' "
                    "4.2 MB/s disk; --cold empties those caches after the\nwindow's file "
                    "is written, so first reads pay the disk (docs/collective.md).")
    p.add_argument("--quick", action="store_true", help="smaller runs (under 10 min, 4 ranks)")
    p.add_argument("-n", "--ranks", type=int, default=4, metavar="N",
                   help="MPI ranks of the checkpoint kernels (BTIO uses the largest square)")
    p.add_argument("--window-ranks", metavar="LIST",
                   help="client counts of the sliding window, e.g. 1,2,4,8")
    p.add_argument("--only", metavar="LIST",
                   help="benchmarks: sliding_window,btio,flash,s3d (default all)")
    p.add_argument("--repeat", type=int, default=1, help="runs per point (median kept)")
    p.add_argument("--use-config", action="store_true",
                   help="run on the file system of --config instead of a private one")
    p.add_argument("--storage", metavar="KIND", default=None,
                   help="I/O daemons' storage of the private file system: posix (default) "
                   f"or emulated[:PRESET] ({', '.join(PRESETS)}; pvfs.models.disk)")
    p.add_argument("--disk-cache", metavar="BYTES", default=None,
                   help="cache of each emulated disk, e.g. 0 or 1M (default: the preset's, "
                   "56M for ide-2000)")
    p.add_argument("--cold", action="store_true",
                   help="empty the I/O daemons' caches (page cache, emulated disk) after "
                   "the sliding window's file is written, before it is timed")
    p.add_argument("-o", "--output", metavar="JSON", help="also write the result here")
    p.add_argument("--plot", metavar="PNG", help="draw throughput and write calls")


def _ints(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        return [int(x) for x in text.split(",") if x]
    except ValueError:
        raise CliError("bench collective", f"not a list of numbers: {text!r}", 2) from None


def render(data: dict) -> str:
    from pvfs.bench.collective.drive import HEADERS, PAIRED_HEADERS, paired_rows, table_rows

    out = table(table_rows(data), HEADERS, right=list(range(2, len(HEADERS))))
    if data.get("repeat", 1) > 1 and data.get("paired"):
        out += "\n\nratios within each repeat (same load for both sides):\n"
        out += table(paired_rows(data), PAIRED_HEADERS, right=[2, 4, 5, 6])
    return out


def cmd_bench_collective(args: argparse.Namespace) -> int:
    from pvfs.bench.collective.drive import run_suite

    if args.ranks < 1 or args.repeat < 1:
        raise CliError("bench collective", "--ranks and --repeat must be at least 1", 2)
    only = args.only.split(",") if args.only else None
    known = {"sliding_window", "btio", "flash", "s3d"}
    if only and not set(only) <= known:
        raise CliError("bench collective", f"--only takes {', '.join(sorted(known))}", 2)
    disk_cache = None
    if args.disk_cache is not None:
        from pvfs.units import parse_size

        try:
            disk_cache = parse_size(args.disk_cache)
        except ValueError as exc:
            raise CliError("bench collective", f"--disk-cache: {exc}", 2) from None
    try:
        from pvfs.bench.collective.drive import storage_table

        storage_table(args.storage, disk_cache)
    except ValueError as exc:
        raise CliError("bench collective", f"--storage: {exc}", 2) from None
    config = None
    if args.use_config:
        if args.storage or disk_cache is not None:
            raise CliError("bench collective", "--storage and --disk-cache shape the private "
                           "file system, not the one of --use-config", 2)
        from pvfs.cli.common import load_config

        config = load_config(args).path
    out = run_suite(config=config, quick=args.quick, ranks=args.ranks, repeat=args.repeat,
                    window_ranks=_ints(args.window_ranks), benchmarks=only,
                    progress=None if args.json else
                    (lambda s: print(s, file=sys.stderr, flush=True)),
                    storage=args.storage, disk_cache=disk_cache, cold=args.cold)
    return finish_run(args, out, render, _plot)


def _plot():
    from pvfs.bench.collective.drive import plot

    return plot
