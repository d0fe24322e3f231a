"""``pvfs-admin check``: property-based consistency testing of a live file system.

The work is done by :mod:`pvfs.check`; this module is the command line.
"""

from __future__ import annotations

import argparse
import json
import sys

from pvfs.cli.common import PROG, add_command
from pvfs.client.modes import CHECK_MODES

__all__ = ["register"]


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(
        sub, "check", help="check that the file system keeps what its coherence mode promises",
        func=cmd_check, example=f"""\
{PROG} check --native 2 --examples 100
{PROG} check --mode sync --mounts /mnt/a,/mnt/b --native 1 --examples 200 --seed 7
{PROG} check --target /mnt/glusterfs --examples 50        # any directory, one node
{PROG} check --native 1 --mounts /mnt/a --faults         # kill -9 and restart daemons""",
        description="Drive several clients at once (native API connections and mounted "
        "directories, mixed)\nthrough opens, reads, writes, truncates, renames, links, "
        "unlinks, fsyncs, sync writes,\nxattrs and striping changes, with hypothesis state "
        "machines, and check every result\nagainst what --mode promises (docs/check.md). A "
        "violation is shrunk to a short\nsequence of steps, printed with the expected and "
        "actual bytes, and written as a trace\nfor `pvfs-admin replay`.\n\nexit status: 0 no "
        "violation found, 1 a violation, 2 a setup error")
    p.add_argument("--mounts", metavar="DIR,DIR", default="",
                   help="pvfs mounts of --config to drive (each one a node)")
    p.add_argument("--native", metavar="N", type=int, default=None,
                   help="native API clients (default: 2 without --mounts, else 0; every "
                        "second one creates files ahead of the manager)")
    p.add_argument("--mode", choices=CHECK_MODES, default=CHECK_MODES[0],
                   help="what to hold the file system to (default: none)")
    p.add_argument("--examples", metavar="K", type=int, default=100,
                   help="example runs (default: 100)")
    p.add_argument("--steps", metavar="N", type=int, default=30,
                   help="steps per example at most (default: 30)")
    p.add_argument("--seed", metavar="S", type=int, default=None,
                   help="make the run repeatable (default: random, printed)")
    p.add_argument("--target", metavar="DIR", default=None,
                   help="check any directory (ext4, GlusterFS, MooseFS, ...) with one client")
    p.add_argument("--faults", action="store_true",
                   help="kill -9 and restart daemons of this host between steps")
    p.add_argument("--shrink-seconds", metavar="S", type=int, default=60,
                   help="time allowed for shrinking a violation (default: 60)")
    p.add_argument("--trace-out", metavar="FILE", default=None,
                   help="where a failure's trace goes (default: ./pvfs-check-SEED.trace)")


def cmd_check(args: argparse.Namespace) -> int:
    try:
        from pvfs.check import Options, run
    except ImportError as exc:
        sys.stderr.write(f"{PROG}: check: needs hypothesis ({exc}); "
                         "pip install 'pvfs[check]'\n")
        return 2
    if args.examples < 1 or args.steps < 1 or (args.native is not None and args.native < 0):
        sys.stderr.write(f"{PROG}: check: --examples, --steps and --native must be positive\n")
        return 2
    opts = Options(config=getattr(args, "config", None),
                   mounts=[m for m in args.mounts.split(",") if m], native=args.native,
                   mode=args.mode, examples=args.examples, steps=args.steps, seed=args.seed,
                   target=args.target, faults=args.faults, trace_out=args.trace_out,
                   progress=not args.json, shrink_seconds=args.shrink_seconds)
    result = run(opts)
    if args.json:
        print(json.dumps(result.summary, indent=1, default=str))
    else:
        out = sys.stderr if result.status == 2 else sys.stdout
        prefix = f"{PROG}: check: " if result.status == 2 else ""
        for line in result.text:
            out.write(prefix + line + "\n")
    return result.status
