"""The ``replay`` and ``trace`` subcommands (of ``pvfs-admin``, or ``python -m pvfs.traces``).

``pvfs-admin`` calls :func:`add_subcommands` with its subparsers; every subcommand sets a
``func(args) -> int`` default: 0 ok, 1 failed, 2 usage error. ``--json`` prints one JSON
document on stdout instead of tables.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from pvfs.traces import format as fmt
from pvfs.traces.format import TraceFormatError

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

REPLAY_EXAMPLES = """\
examples:
  pvfs-admin replay --workload thesis --procs 8 --target /tmp/scratch --plot thesis.png
  pvfs-admin replay --workload lu --param n=1024 --param slabs=16 --procs 4 \\
      --target pvfs:///etc/pvfs/pvfs.toml --json
  pvfs-admin replay --trace app.trace --procs 16 --target mount:/mnt/pvfs --think
  mpiexec -n 4 python -m pvfs.traces replay --workload btio --procs 4 --target /scratch/x

targets: pvfs://CONFIG[?root=/dir] (native API), mount:PATH or any directory path.
"""

TRACE_EXAMPLES = """\
examples:
  pvfs-admin trace generate db2 --procs 4 --param scale=0.01 -o db2.trace
  pvfs-admin trace show db2.trace --limit 20
  pvfs-admin trace stats app.strace --json
  pvfs-admin trace import run.darshan.txt -o run.mpk
"""


class UsageError(Exception):
    """A command line that cannot be acted on (exit code 2)."""


def parse_params(items: list[str] | None) -> dict[str, str]:
    """``["k=v", ...]`` into a dict.

    Raises:
        UsageError: for an item without ``=``.
    """
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--param wants k=v, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def _emit_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2, sort_keys=False, default=str)
    sys.stdout.write("\n")


def _guard(func: Any) -> Any:
    """Map exceptions to exit codes and one-line messages on stderr."""

    def run(args: argparse.Namespace) -> int:
        try:
            return int(func(args))
        except (UsageError, ValueError, TraceFormatError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_USAGE
        except (OSError, RuntimeError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_FAILED

    run.__doc__ = func.__doc__
    return run


def _load(path: str, kind: str | None) -> fmt.Trace:
    from pvfs.traces.importers import load_any

    return load_any(path, kind)


# ------------------------------------------------------------------------------------ replay
def _replay_plan(args: argparse.Namespace, trace: fmt.Trace) -> int:
    """``replay --plan``: through the cache stacks, the plan applied per phase."""
    from pvfs.traces.plan import load_plan
    from pvfs.traces.replay.cached import replay_with_plan

    if args.nodes < 1:
        raise UsageError("--nodes must be at least 1")
    result = replay_with_plan(trace, args.target, load_plan(args.plan), nodes=args.nodes)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2, default=str)
    if args.json:
        _emit_json(result)
    else:
        loc = result["local"]
        print(f"time {result['time_s']:.3f} s over {len(result['phase_s'])} phases, "
              f"{result['ops']} ops, local cache hits {loc.get('hits', 0)} "
              f"misses {loc.get('misses', 0)}")
    return EXIT_OK


def cmd_replay(args: argparse.Namespace) -> int:
    """Replay a generated workload or a trace file on a target."""
    from pvfs.traces.generators import generate
    from pvfs.traces.replay.engine import ReplayOptions, can_drop_caches, run_local
    from pvfs.traces.replay.mpi import comm_world, launched_by_mpiexec, run_mpi

    use_mpi = args.mpi or launched_by_mpiexec()
    comm = comm_world() if use_mpi else None
    procs = args.procs
    if procs is not None and procs < 1:
        raise UsageError("--procs must be at least 1")
    if args.workload:
        nprocs = procs or (comm.Get_size() if comm is not None else 4)
        trace = generate(args.workload, nprocs, parse_params(args.param), args.seed)
    else:
        if args.param:
            raise UsageError("--param goes with --workload, not --trace")
        trace = _load(args.trace, args.format)
        if procs is not None and procs != trace.nprocs:
            raise UsageError(f"the trace has {trace.nprocs} ranks; --procs {procs} differs")
    if args.plan:
        return _replay_plan(args, trace)
    if args.drop_caches and not can_drop_caches():
        raise UsageError("--drop-caches needs write access to /proc/sys/vm/drop_caches (root)")
    opts = ReplayOptions(think=args.think, think_scale=args.think_scale, verify=args.verify,
                         digest=not args.no_digest, drop_caches=args.drop_caches,
                         progress=not (args.json or args.no_progress) and comm is None)
    if comm is not None:
        result = run_mpi(trace, args.target, opts, comm)
        if result is None:
            return EXIT_OK
    else:
        result = run_local(trace, args.target, opts)
    if args.label:
        result["label"] = args.label
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2, default=str)
    if args.plot:
        from pvfs.traces.plot import plot_results

        earlier = []
        for path in args.compare or []:
            with open(path, encoding="utf-8") as f:
                earlier.append(json.load(f))
        plot_results([*earlier, result], args.plot)
    if args.json:
        _emit_json(result)
    else:
        from pvfs.traces.metrics import format_result

        print(format_result(result))
        if args.plot:
            print(f"plot written to {args.plot}")
    return EXIT_FAILED if result["errors"] or result["verify_errors"] else EXIT_OK


# ------------------------------------------------------------------------------------- trace
def cmd_show(args: argparse.Namespace) -> int:
    """Print a trace's header and its first records."""
    trace = _load(args.file, args.format)
    limit = None if args.limit < 0 else args.limit
    if args.json:
        recs = trace.records if limit is None else trace.records[:limit]
        _emit_json({"header": trace.header(), "records": [
            {"rank": r.rank, "think": r.think, "op": r.op.label, "file": r.file,
             "offset": r.offset, "length": r.length, "flags": fmt.flags_to_text(r.flags),
             "regions": r.regions} for r in recs]})
        return EXIT_OK
    header = trace.header()
    print(f"pvfs trace version {header['version']}: {header['nprocs']} ranks, "
          f"{len(trace.records)} records, generator {json.dumps(header['generator'])}")
    print("files:")
    for f in trace.files:
        print(f"  {f.id:4d} {f.name}" + (f"  (pre-existing {f.size} B)" if f.size else ""))
    if trace.phases:
        print(f"phases: {len(trace.phases)} ({', '.join(trace.phases[:6])}"
              + (", ..." if len(trace.phases) > 6 else "") + ")")
    print("# rank think op file offset length flags [regions]")
    for line in fmt.iter_lines(trace, limit):
        print(line)
    if limit is not None and len(trace.records) > limit:
        print(f"... {len(trace.records) - limit} more (--limit -1 for all)")
    return EXIT_OK


def cmd_stats(args: argparse.Namespace) -> int:
    """Print a trace's statistics."""
    from pvfs.traces.stats import format_stats, trace_stats

    st = trace_stats(_load(args.file, args.format), block=args.block)
    if args.json:
        _emit_json(st)
    else:
        print(format_stats(st))
    return EXIT_OK


def cmd_generate(args: argparse.Namespace) -> int:
    """Write a generated workload's trace without running it."""
    from pvfs.traces.generators import generate

    if args.procs < 1:
        raise UsageError("--procs must be at least 1")
    trace = generate(args.name, args.procs, parse_params(args.param), args.seed)
    fmt.save(trace, args.output, args.form)
    summary = {"output": args.output, "workload": args.name, "procs": trace.nprocs,
               "records": len(trace.records), "files": len(trace.files),
               "params": trace.generator["params"], "seed": args.seed}
    if args.json:
        _emit_json(summary)
    else:
        print(f"wrote {len(trace.records)} records for {trace.nprocs} ranks to {args.output}")
    return EXIT_OK


def cmd_import(args: argparse.Namespace) -> int:
    """Convert a MAMBO, Darshan DXT or strace trace into a pvfs trace."""
    trace = _load(args.file, args.format)
    fmt.save(trace, args.output, args.form)
    if args.json:
        _emit_json({"output": args.output, "records": len(trace.records),
                    "procs": trace.nprocs, "files": len(trace.files)})
    else:
        print(f"wrote {len(trace.records)} records for {trace.nprocs} ranks to {args.output}")
    return EXIT_OK


def cmd_list(args: argparse.Namespace) -> int:
    """List the workload generators and their parameters."""
    from pvfs.traces.generators import GENERATORS, describe

    if args.json:
        _emit_json({name: {"description": describe(name), "params": dict(defaults)}
                    for name, (_, defaults) in GENERATORS.items()})
        return EXIT_OK
    for name, (_, defaults) in GENERATORS.items():
        print(f"{name:9s} {describe(name)}")
        print(" " * 10 + " ".join(f"{k}={v}" for k, v in defaults.items()))
    return EXIT_OK


# ------------------------------------------------------------------------------ registration
def add_subcommands(subparsers: Any) -> None:
    """Register ``replay`` and ``trace {show,stats,generate,import,list}`` on ``subparsers``."""
    from pvfs.traces.generators import NAMES
    from pvfs.traces.importers import IMPORTERS

    formats = ["pvfs", *IMPORTERS]
    _add_replay(subparsers, formats, NAMES)
    _add_trace(subparsers, formats, NAMES)


def _add_replay(subparsers: Any, formats: list[str], names: tuple[str, ...]) -> None:
    """``replay``: a generated workload or a trace, on a target."""
    raw = argparse.RawDescriptionHelpFormatter
    rp = subparsers.add_parser(
        "replay", help="replay a workload or trace on a target and report service times",
        description="Replay a generated workload or a trace with N processes (or MPI ranks) "
                    "on a target and print the thesis' three metrics, throughput and "
                    "latencies.", epilog=REPLAY_EXAMPLES, formatter_class=raw)
    src = rp.add_mutually_exclusive_group(required=True)
    src.add_argument("--workload", choices=names, metavar="NAME",
                     help=f"generated workload: {', '.join(names)}")
    src.add_argument("--trace", metavar="FILE", help="trace file (pvfs, MAMBO, Darshan, strace)")
    rp.add_argument("--param", action="append", metavar="K=V", help="generator parameter")
    rp.add_argument("--seed", type=int, default=0, help="generator seed (default 0)")
    rp.add_argument("--format", choices=formats, help="format of --trace (default: detect)")
    rp.add_argument("--procs", type=int, help="processes (default: the trace's, 4, or the "
                    "MPI job size)")
    rp.add_argument("--target", required=True, help="pvfs://CONFIG, mount:PATH or a directory")
    rp.add_argument("--json", action="store_true", help="print the result as JSON")
    rp.add_argument("--plot", metavar="PNG", help="draw the three metrics into a PNG")
    rp.add_argument("--compare", action="append", metavar="JSON",
                    help="earlier result (from --output) to draw in the same plot")
    rp.add_argument("--label", help="name of this run in plots and JSON")
    rp.add_argument("-o", "--output", metavar="JSON", help="also write the result to a file")
    rp.add_argument("--think", action="store_true", help="honour think times")
    rp.add_argument("--think-scale", type=float, default=1.0, help="scale think times")
    rp.add_argument("--verify", action="store_true", help="check every byte read")
    rp.add_argument("--drop-caches", action="store_true",
                    help="drop the page cache at every barrier: cold reads (root)")
    rp.add_argument("--no-digest", action="store_true", help="skip hashing the files after")
    rp.add_argument("--mpi", action="store_true", help="run as MPI ranks (under mpiexec)")
    rp.add_argument("--no-progress", action="store_true", help="no progress bar")
    rp.add_argument("--plan", metavar="FILE",
                    help="bypass plan (pvfs-admin plan make): replay through the client "
                    "caches of a pvfs:// target, the plan's bits set at each phase")
    rp.add_argument("--nodes", type=int, default=1,
                    help="with --plan: client cache stacks sharing the ranks (default 1)")
    rp.set_defaults(func=_guard(cmd_replay))


def _add_trace(subparsers: Any, formats: list[str], names: tuple[str, ...]) -> None:
    """``trace {show,stats,generate,import,list}``."""
    raw = argparse.RawDescriptionHelpFormatter
    tp = subparsers.add_parser("trace", help="show, analyse, generate or import traces",
                               description="Work with trace files.", epilog=TRACE_EXAMPLES,
                               formatter_class=raw)
    tsub = tp.add_subparsers(dest="trace_command", metavar="{show,stats,generate,import,list}")
    tsub.required = True

    sp = tsub.add_parser("show", help="header and records of a trace", formatter_class=raw,
                         epilog="example:\n  pvfs-admin trace show lu.trace --limit 50")
    sp.add_argument("file")
    sp.add_argument("--format", choices=formats, help="input format (default: detect)")
    sp.add_argument("--limit", type=int, default=20, help="records to print (-1: all)")
    sp.add_argument("--json", action="store_true")
    sp.set_defaults(func=_guard(cmd_show))

    st = tsub.add_parser("stats", help="ops, bytes, request sizes, sequentiality, reuse",
                         formatter_class=raw,
                         epilog="example:\n  pvfs-admin trace stats db2.trace --json")
    st.add_argument("file")
    st.add_argument("--format", choices=formats, help="input format (default: detect)")
    st.add_argument("--block", type=int, default=4096, help="block size for reuse distances")
    st.add_argument("--json", action="store_true")
    st.set_defaults(func=_guard(cmd_stats))

    gp = tsub.add_parser("generate", help="write a generated workload's trace",
                         formatter_class=raw, epilog="example:\n  pvfs-admin trace generate "
                         "btio --procs 16 --param n=64 -o btio.mpk")
    gp.add_argument("name", choices=names, metavar="NAME", help=", ".join(names))
    gp.add_argument("-o", "--output", required=True, metavar="FILE",
                    help="output (.mpk/.msgpack: msgpack form, else text)")
    gp.add_argument("--procs", type=int, default=4)
    gp.add_argument("--param", action="append", metavar="K=V")
    gp.add_argument("--seed", type=int, default=0)
    gp.add_argument("--form", choices=["text", "msgpack"], help="override the extension")
    gp.add_argument("--json", action="store_true")
    gp.set_defaults(func=_guard(cmd_generate))

    ip = tsub.add_parser("import", help="convert MAMBO, Darshan DXT or strace to a pvfs trace",
                         formatter_class=raw, epilog="example:\n  pvfs-admin trace import "
                         "app.strace -o app.trace")
    ip.add_argument("file")
    ip.add_argument("-o", "--output", required=True, metavar="FILE")
    ip.add_argument("--format", choices=formats, help="input format (default: detect)")
    ip.add_argument("--form", choices=["text", "msgpack"], help="override the extension")
    ip.add_argument("--json", action="store_true")
    ip.set_defaults(func=_guard(cmd_import))

    lp = tsub.add_parser("list", help="workload generators and their parameters",
                         formatter_class=raw, epilog="example:\n  pvfs-admin trace list")
    lp.add_argument("--json", action="store_true")
    lp.set_defaults(func=_guard(cmd_list))


def build_parser(prog: str = "python -m pvfs.traces") -> argparse.ArgumentParser:
    """A stand-alone parser with just these subcommands."""
    parser = argparse.ArgumentParser(prog=prog, description="pvfs trace tools (SPEC §7)")
    sub = parser.add_subparsers(dest="command", metavar="{replay,trace}")
    sub.required = True
    add_subcommands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m pvfs.traces``."""
    args = build_parser().parse_args(argv)
    return int(args.func(args))
