"""``pvfs-admin plan|study|bench|gcache``: discretionary caching (SPEC §6, docs/caching.md).

* ``plan make TRACE [--coarse]`` — a bypass plan from a trace's profile, per phase;
* ``study caching [--quick] [--json]`` — the paper's trace study over every policy;
* ``bench latency [--json]`` — the paper's table 1 (read latencies and required hit rate),
  table 2 (write latencies), fig. 2 and the micro-benchmark of figs. 3-4;
* ``gcache stats|policy`` — counters of the global caches, switch their admission policy.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from pvfs.bench.caching import setups
from pvfs.cli.common import PROG, add_command, finish_run, load_config, size_arg
from pvfs.cli.output import CliError, emit, note, table
from pvfs.models.bypass import POLICIES as GCACHE_POLICIES


def register(sub: argparse._SubParsersAction) -> None:
    """``plan``, ``study caching``, ``bench latency`` and ``gcache``: each joins its group
    (another module may have made ``study`` or ``bench`` already)."""
    _register_plan(sub)
    _register_study(sub)
    _register_latency(sub)
    _register_gcache(sub)


def _register_plan(sub: argparse._SubParsersAction) -> None:
    if "plan" not in sub.choices:
        p = add_command(sub, "plan", help="bypass plans for the caches (make one from a trace)",
                        func=None, example=f"""\
{PROG} plan make lu.trace -o lu.plan          # segments per phase (fine grain)
{PROG} plan make gen:db2 --coarse --json     # file level, program wide""")
        psub = p.add_subparsers(title="plan commands", metavar="COMMAND")
        m = add_command(psub, "make", help="derive a bypass plan from a trace's profile",
                        func=cmd_plan_make, example=f"{PROG} plan make lu.trace -o lu.plan")
        m.add_argument("trace", help="trace file, or gen:NAME for a generated workload")
        m.add_argument("--coarse", action="store_true", help="whole files, program wide")
        m.add_argument("-o", "--output", metavar="FILE", help="write the plan here")
        m.add_argument("--global-size", type=size_arg, default=4 << 20, metavar="BYTES",
                       help="global cache size the plan fits (default 4M)")
        m.add_argument("--segment-blocks", type=int, default=4, metavar="N")
        m.add_argument("--block-size", type=size_arg, default=4096, metavar="BYTES")
        m.add_argument("--procs", type=int, default=4, help="ranks of a gen: workload")


def _register_study(sub: argparse._SubParsersAction) -> None:
    ssub = _group(sub, "study", "studies that reproduce papers' experiments",
                  f"{PROG} study caching --quick --json > study.json", "studies", "STUDY")
    if "caching" not in ssub.choices:
        c = add_command(ssub, "caching", help="trace study of discretionary caching (paper §5)",
                        func=cmd_study_caching, example=f"""\
{PROG} study caching --quick
{PROG} study caching --traces lu,db2 --policies both,runtime10 --json""")
        c.add_argument("--quick", action="store_true", help="smaller traces (under 10 min)")
        c.add_argument("--traces", default=",".join(setups.TRACES))
        c.add_argument("--policies", default=",".join(setups.POLICIES))
        c.add_argument("--iods", type=int, default=2)
        c.add_argument("--storage", default=setups.STORAGE,
                       help="I/O daemons' storage (posix | emulated:PRESET)")
        c.add_argument("--repeat", type=int, default=None, metavar="N",
                       help="runs per cell, interleaved across the policies (default 6: "
                            "the fewest whose order-statistic interval of the median "
                            "reaches 95 %%; --quick 3: the interval is the range, 75 %%, "
                            "its coverage stated in time_norm_level). time_norm is the "
                            "median, time_norm_lo/hi its interval; every run recorded")
        c.add_argument("--iod-cache", type=size_arg, default=setups.IOD_CACHE, metavar="BYTES",
                       help="page cache of each emulated disk (default 512K: scaled with the "
                            "traces, see docs/caching.md)")
        c.add_argument("--model", choices=("paper",),
                       help="no file system: charge every request the paper's table 1-2 "
                            "latencies (trace-driven model, deterministic, seconds)")
        c.add_argument("--shaped", metavar="RATE",
                       help="over the netns multi-host harness with links of RATE (e.g. "
                            "100mbit: the paper's network; needs root) instead of loopback")
        c.add_argument("--sweep", action="append", default=[], metavar="PARAM=N,N,...",
                       help="fig. 9: runtime bypass at every threshold (threshold=5,10,25,50) "
                            "and segment size in blocks (segment=1,4,16) of the grid, beside "
                            "none and both, instead of --policies; repeatable. Thresholds "
                            "alone use 4-block segments, segments alone threshold 25. "
                            "'--sweep fig9': the paper's two panels, thresholds 3,10,25,50,100 "
                            "at 4 blocks and segments 2-64 blocks at threshold 25")
        c.add_argument("-o", "--output", metavar="JSON", help="also write the result here")
        c.add_argument("--plot", metavar="PNG", help="draw normalized times and hit rates "
                       "(with --sweep: fig. 9's two panels)")


def _register_latency(sub: argparse._SubParsersAction) -> None:
    bsub = _group(sub, "bench", "micro-benchmarks",
                  f"{PROG} bench latency --json > latency.json", "benchmarks", "BENCH")
    if "latency" not in bsub.choices:
        lat = add_command(bsub, "latency", help="read/write latency with and without the "
                          "caches (paper tables 1-2, figs. 2-4)", func=cmd_bench_latency,
                          example=f"{PROG} bench latency --quick --plot latency.png")
        lat.add_argument("--quick", action="store_true", help="fewer repetitions and ops")
        lat.add_argument("--reps", type=int, default=None, help="reads per cell")
        lat.add_argument("--max-iods", type=int, default=4)
        lat.add_argument("--no-micro", action="store_true", help="skip figs. 3-4")
        lat.add_argument("--no-tables", action="store_true",
                         help="skip tables 1-2 (and fig. 2): the micro-benchmark only")
        lat.add_argument("--micro-repeat", type=int, default=None, metavar="N",
                         help="runs of each micro-benchmark cell, interleaved across the "
                              "four setups (default 6: the fewest whose order-statistic "
                              "interval of the median reaches 95 %%; --quick 3: the range, "
                              "75 %%); the median and its interval are shown, every run "
                              "recorded")
        lat.add_argument("--model", choices=("paper",),
                         help="no file system: figs. 3-4 with every request charged the "
                              "paper's table 1-2 latencies (deterministic, seconds), and "
                              "what a local and a global miss cost against a direct read")
        lat.add_argument("--micro-o", default="10,600,25000", metavar="O,O,...",
                         help="the micro-benchmark's largest offsets in blocks (the paper's "
                              "10, 600, 25000)")
        lat.add_argument("--ops", type=int, default=None, metavar="N",
                         help="operations per micro-benchmark run (600 with --quick, else "
                              "2000)")
        lat.add_argument("--storage", default="posix", metavar="STORAGE",
                         help="I/O daemons' storage: posix (default: their page cache holds "
                              "the files) | emulated:PRESET (e.g. emulated:ide-2000: a "
                              "disk of the paper's era, so a global hit saves a disk access)")
        lat.add_argument("--iod-cache", type=size_arg, default=None, metavar="BYTES",
                         help="page cache of each emulated disk (default: the preset's)")
        lat.add_argument("--shaped", metavar="RATE",
                         help="run over the netns multi-host harness with RATE links "
                         "(e.g. 100mbit; root) instead of loopback")
        lat.add_argument("-o", "--output", metavar="JSON", help="also write the result here")
        lat.add_argument("--plot", metavar="PNG",
                         help="draw fig. 2 (required hit rate); with --no-tables figs. 3-4")


def _register_gcache(sub: argparse._SubParsersAction) -> None:
    g = add_command(sub, "gcache", help="global cache daemons: counters and admission policy",
                    func=None, example=f"""\
{PROG} gcache stats
{PROG} gcache policy runtime --threshold 25""")
    gsub = g.add_subparsers(title="gcache commands", metavar="COMMAND")
    gs = add_command(gsub, "stats", help="hits, misses, admissions, bypasses, evictions",
                     func=cmd_gcache_stats, example=f"{PROG} gcache stats --json")
    gs.add_argument("--reset", action="store_true", help="zero the counters after reading")
    gp = add_command(gsub, "policy", help="switch every global cache's admission policy",
                     func=cmd_gcache_policy, example=f"{PROG} gcache policy adaptive")
    gp.add_argument("policy", choices=GCACHE_POLICIES)
    gp.add_argument("--threshold", type=int, default=25)
    gp.add_argument("--drop", action="store_true", help="also write back and empty the caches")


def _group(sub: argparse._SubParsersAction, name: str, help: str, example: str, title: str,
           metavar: str) -> argparse._SubParsersAction:
    """The sub-subcommands of ``name`` (e.g. ``study``): another group may have made it
    already (``study scheduling``); then this group's commands join it."""
    parser = sub.choices.get(name)
    if parser is None:
        parser = add_command(sub, name, help=help, func=None, example=example)
        return parser.add_subparsers(title=title, metavar=metavar)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    return parser.add_subparsers(title=title, metavar=metavar)


# ---------------------------------------------------------------------- plan
def load_trace(spec: str, procs: int = 4):
    """A trace from a file, or ``gen:NAME[:k=v,...]`` for a generated workload."""
    if spec.startswith("gen:"):
        from pvfs.traces.generators import generate

        name, _, params = spec[4:].partition(":")
        kv = dict(item.split("=", 1) for item in params.split(",") if "=" in item)
        return generate(name, procs, kv, seed=1)
    from pvfs.traces.importers import load_any

    return load_any(spec, None)


def cmd_plan_make(args: argparse.Namespace) -> int:
    from pvfs.traces.plan import make_plan, save_plan

    try:
        trace = load_trace(args.trace, args.procs)
    except (ValueError, OSError) as exc:
        raise CliError(f"plan make {args.trace}", str(exc), status=2) from None
    plan = make_plan(trace, global_bytes=args.global_size, block_size=args.block_size,
                     segment_blocks=args.segment_blocks, coarse=args.coarse)
    if args.output:
        save_plan(plan, args.output)
    if args.json or not args.output:
        if args.json:
            print(json.dumps(plan, indent=1))
        else:
            print(_render_plan(plan))
    else:
        note(f"plan of {len(plan['phases'])} phases written to {args.output}")
    return 0


def _render_plan(plan: dict) -> str:
    rows = []
    for ph in plan["phases"]:
        for name, bits in sorted(ph["files"].items()):
            rows.append([ph["phase"], ph["name"], name, bits or "(cache everything)"])
    return table(rows, ["phase", "name", "file", "user.pvfs.bypass"], right=[0])


# ---------------------------------------------------------------------- study
def cmd_study_caching(args: argparse.Namespace) -> int:
    from pvfs.bench.caching.study import run_study

    traces = [t for t in args.traces.split(",") if t]
    policies = [p for p in args.policies.split(",") if p]
    progress = None if args.json else (lambda line: print(line, file=sys.stderr, flush=True))
    try:
        from pvfs.bench.caching.sweep import parse_sweep

        sweep = parse_sweep(args.sweep) if args.sweep else None
        out = run_study(traces, policies, quick=args.quick, iods=args.iods,
                        storage=args.storage, iod_cache=args.iod_cache,
                        repeat=args.repeat, shaped=args.shaped, model=args.model,
                        progress=progress, sweep=sweep)
    except ValueError as exc:
        raise CliError("study caching", str(exc), status=2) from None
    return finish_run(args, out, _render_study, _study_plot)


def _study_plot():
    from pvfs.bench.caching.plot import plot_study

    return plot_study


def _render_sweep(d: dict) -> str:
    def num(x, fmt: str = ".3f") -> str:
        return "-" if x is None else format(x, fmt)

    rows = [[r["trace"], r["policy"], num(r.get("threshold"), "d"), r.get("segment_blocks"),
             f"{r['time_s']:.3f}", num(r["time_norm"]),
             "-" if r.get("time_norm_level") is None else
             f"{r['time_norm_lo']:.3f}-{r['time_norm_hi']:.3f}",
             num(r.get("time_seg4_norm", r.get("time_seg4"))), f"{r['global_hit_rate']:.2f}"]
            for r in d["results"]]
    return (f"traces: {d.get('traces', setups.TRACES_NOTE)}\n"
            "fig. 9 sweep: runtime bypass by threshold and segment size (blocks); ÷ both: "
            "median ratio to cache everything, ÷ seg 4: that ratio ÷ the same threshold's at "
            "4 blocks\n"
            + table(rows, ["trace", "policy", "threshold", "segment", "time s", "÷ both",
                           "interval", "÷ seg 4", "global hits"],
                    right=[2, 3, 4, 5, 6, 7, 8]))


def _render_study(d: dict) -> str:
    if d.get("sweep"):
        return _render_sweep(d)
    bounds = d.get("bounds", {})

    def of_max(r: dict) -> str:  # global hits as a share of the most any policy could get
        most = bounds.get(r["trace"], {}).get("max_hits")
        hits = r.get("global", {}).get("hits")
        return "-" if not most or hits is None else f"{hits / most:.2f}"

    def interval(r: dict) -> str:
        lo, hi = r.get("time_norm_lo"), r.get("time_norm_hi")
        if lo is None or hi is None or r.get("time_norm_level") is None:
            return "-"
        return f"{lo:.3f}-{hi:.3f} ({r['time_norm_level']:.0%})"

    rows = [[r["trace"], r["policy"], f"{r['time_s']:.3f}",
             "-" if r["time_norm"] is None else f"{r['time_norm']:.3f}", interval(r),
             len(r.get("runs_s", [1])),
             f"{r['local_hit_rate']:.2f}", f"{r['global_hit_rate']:.2f}", of_max(r)]
            for r in d["results"]]
    head = (f"traces: {d.get('traces', setups.TRACES_NOTE)}\n"
            "time s and ÷ both: medians over the runs, interval of the median's ratio\n")
    return head + table(rows, ["trace", "policy", "time s", "÷ both", "interval", "runs",
                               "local hits", "global hits", "of max hits"],
                        right=[2, 3, 4, 5, 6, 7, 8])


# ---------------------------------------------------------------------- bench
def cmd_bench_latency(args: argparse.Namespace) -> int:
    from pvfs.bench.latency import render, run_latency

    if args.no_micro and args.no_tables:
        raise CliError("bench latency", "--no-micro and --no-tables leave nothing to run",
                       status=2)
    try:
        micro_o = tuple(int(x) for x in args.micro_o.split(",") if x)
    except ValueError:
        micro_o = ()
    if (args.micro_repeat is not None and args.micro_repeat < 1) or not micro_o or min(micro_o) < 0 or (args.ops or 1) < 1:
        raise CliError("bench latency", "--micro-repeat and --ops must be at least 1, "
                       "--micro-o a list of block offsets (e.g. 10,600,25000)", status=2)
    out = run_latency(quick=args.quick, reps=args.reps, max_iods=args.max_iods,
                      micro=not args.no_micro, tables=not args.no_tables,
                      micro_repeat=args.micro_repeat, micro_o=micro_o, ops=args.ops,
                      shaped=args.shaped,
                      storage=args.storage, iod_cache=args.iod_cache, model=args.model,
                      progress=None if args.json else (lambda s: print(s, file=sys.stderr,
                                                                       flush=True)))
    return finish_run(args, out, render, _latency_plot)


def _latency_plot():
    from pvfs.bench.latency_plot import plot

    return plot


# ---------------------------------------------------------------------- gcache
def gcache_stats(cfg, reset: bool = False) -> list[dict]:
    """One entry per global cache of ``cfg``: its counters, or ``error`` when it is down."""
    from pvfs.cluster import launch
    from pvfs.gcache.config import gcache_config
    from pvfs.protocol.auth import key_for

    g = gcache_config(cfg)
    out = []
    for i, ep in enumerate(g.endpoints if g else ()):
        entry: dict = {"gcache": i, "address": ep.address}
        try:
            reply = launch.request(ep, {"op": "stats", "reset": reset}, 5.0, key_for(cfg))
            if reply.get("err"):
                raise OSError(int(reply["err"]), str(reply.get("msg")))
            entry.update(reply)
            entry["error"] = None
        except (OSError, ValueError) as exc:
            entry["error"] = str(exc)
        out.append(entry)
    return out


def render_gcache_stats(rows: list[dict]) -> str:
    lines = []
    for r in rows:
        if r["error"]:
            lines.append([f"gcache{r['gcache']}", "DOWN"] + [None] * 8)
            continue
        lines.append([f"gcache{r['gcache']}", r["policy"], r["hits"], r["misses"],
                      f"{r['hit_rate']:.2f}", r["admissions"], r["bypasses"], r["evictions"],
                      f"{r['blocks_cached']}/{r['capacity_blocks']}"])
    return table(lines, ["daemon", "policy", "hits", "misses", "hit rate", "admitted",
                         "bypasses", "evictions", "blocks"], right=[2, 3, 4, 5, 6, 7, 8])


def cmd_gcache_stats(args: argparse.Namespace) -> int:
    cfg = load_config(args)
    rows = gcache_stats(cfg, args.reset)
    if not rows:
        raise CliError("gcache stats", "the config has no [gcache] table")
    emit(args.json, {"gcaches": rows}, lambda d: render_gcache_stats(d["gcaches"]))
    return 1 if any(r["error"] for r in rows) else 0


def cmd_gcache_policy(args: argparse.Namespace) -> int:
    from pvfs.cluster import launch
    from pvfs.gcache.config import gcache_config
    from pvfs.protocol.auth import key_for

    cfg = load_config(args)
    g = gcache_config(cfg)
    if g is None:
        raise CliError("gcache policy", "the config has no [gcache] table")
    rows = []
    for i, ep in enumerate(g.endpoints):
        try:
            reply = launch.request(ep, {"op": "policy_set", "policy": args.policy,
                                        "threshold": args.threshold, "drop": args.drop},
                                   60.0, key_for(cfg))
        except (OSError, ValueError) as exc:
            raise CliError(f"gcache{i} ({ep.address})", str(exc)) from None
        if reply.get("err"):
            raise CliError(f"gcache{i}", str(reply.get("msg")))
        rows.append({"gcache": i, **reply})
    emit(args.json, {"gcaches": rows}, lambda d: table(
        [[f"gcache{r['gcache']}", r["policy"], r["threshold"]] for r in d["gcaches"]],
        ["daemon", "policy", "threshold"]))
    return 0


__all__ = ["gcache_stats", "load_trace", "register", "render_gcache_stats"]
_ = os
