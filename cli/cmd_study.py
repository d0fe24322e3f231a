"""``pvfs-admin study scheduling``: the thesis' scheduling study, reproduced (ch. 4-6).

14 client hosts and 2 I/O daemon hosts (network namespaces on a bridge, 100 Mbit/s links for
``--disk ide-2000``, unshaped for ``--disk today``; ``pvfs.cluster.netns``), emulated disks with
the chosen preset. For each of the four workloads, each request size, cached and uncached:
opt1..opt4 (ch. 4). Then the model is fitted to those runs (appendix B, ``pvfs.models.fit``),
handed to the daemons, and every cell is run again under ``rs`` (ch. 5). Last, the
mixed-phase workload (``pvfs.bench.scheduling.runner.MIXED_PHASES``) under every setting. The study needs
root (namespaces); nothing of it is left behind.

``--json`` prints ``{"results": [{"workload", "request_bytes", "cached", "algorithm",
"app_service_s", "mean_task_service_s", "variance"}...], ...}``; mixed-phase rows have
``request_bytes`` and ``cached`` null (they mix both). ``--out`` writes the same document
with the machine, the command and the load, and ``--plot-dir`` the figures.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from pvfs.bench.scheduling.study import CACHES, FULL_SIZES, QUICK_SIZES, machine, run_study
from pvfs.cli.common import PROG, add_command
from pvfs.cli.output import CliError, emit, note, parse_size, table
from pvfs.models.disk import DEFAULT_PRESET, PRESETS


def _studies(sub: argparse._SubParsersAction) -> argparse._SubParsersAction:
    """The ``study`` group's subcommands: another part (``study caching``) may have made the
    group already; join it, or make it."""
    p = sub.choices.get("study")
    if p is None:
        p = add_command(sub, "study", help="studies that reproduce papers' experiments",
                        func=lambda a: _usage(p),
                        example=f"{PROG} study scheduling --quick --json")
        return p.add_subparsers(title="studies", metavar="STUDY")
    return next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))


def register(sub: argparse._SubParsersAction) -> None:
    ssub = _studies(sub)
    q = add_command(ssub, "scheduling", help="opt1..opt4 and rs over the thesis' workloads "
                    "(ch. 4-6) on emulated disks over shaped links", func=cmd_scheduling,
                    example=f"""\
{PROG} study scheduling --quick                       # < 10 min: 64 KiB and 1 MiB per task
{PROG} study scheduling --disk today --out bench/results/study-today.json
{PROG} study scheduling --sizes 64k,1M,4M --reps 3 --plot-dir docs/study""")
    q.add_argument("--quick", action="store_true", help="sizes 64 KiB and 1 MiB, one run each")
    q.add_argument("--disk", choices=tuple(PRESETS), default=DEFAULT_PRESET,
                   help=f"emulated disk preset (default {DEFAULT_PRESET}: the thesis' nodes)")
    q.add_argument("--clients", type=int, default=14, help="client hosts (default 14)")
    q.add_argument("--iods", type=int, default=2, help="I/O daemon hosts (default 2)")
    q.add_argument("--rate", default=None,
                   help="link rate for tc, or 'none' (default: 100mbit for ide-2000, none "
                        "for today)")
    q.add_argument("--sizes", default=None, help="bytes per task, comma separated")
    q.add_argument("--workloads", default=None, metavar="LIST",
                   help="only these workloads, comma separated, of single-block, strided, "
                        "random16, random32, mixed-phase (default all)")
    q.add_argument("--cache", choices=tuple(CACHES), default="both",
                   help="only the uncached or the cached runs of the four workloads (default "
                        "both)")
    q.add_argument("--reps", type=int, default=None, help="runs per cell, averaged "
                   "(default 1 with --quick, else 3)")
    q.add_argument("--reps-short", type=int, default=None, metavar="N",
                   help="runs of the short cells (their first runs under 1 s of application "
                        "time; they scatter most), default --reps")
    q.add_argument("--model", default=None, metavar="JSON",
                   help="use the model of an earlier study or calibration (its \"model\" or "
                        "\"params\"); rs then runs in every cell right beside opt1..opt4")
    q.add_argument("--hints", action="store_true",
                   help="also run rs with every task sending an access hint of the collective "
                        "operation (pvfs.AccessHint), as the setting \"rs+hint\"")
    q.add_argument("--out", default=None, help="write the JSON document here too")
    q.add_argument("--plot-dir", default=None, help="write the figures here")


def _usage(p: argparse.ArgumentParser) -> int:
    p.print_help(sys.stderr)
    return 2



def _render(doc: dict) -> str:
    rows = [[x["workload"], "-" if x["request_bytes"] is None else f"{x['request_bytes'] >> 10}K",
             "mixed" if x["cached"] is None else ("cached" if x["cached"] else "uncached"),
             x["algorithm"], f"{x['app_service_s']:.3f}", f"{x['mean_task_service_s']:.3f}",
             f"{x['variance']:.4f}"] for x in doc["results"]]
    out = [table(rows, ["workload", "size", "cache", "algorithm", "app s", "mean task s",
                        "variance"])]
    for name, t in doc["targets"].items():
        if "misses" in t:
            out.append(f"{name}: {'PASS' if t['pass'] else 'FAIL'} ({t['misses']} of "
                       f"{len(t['cells'])} cells over +5 %, {t['misses_beyond_noise']} beyond "
                       "the runs' 95 % interval)")
        elif "pass" in t:
            out.append(f"{name}: " + ("not run" if t["pass"] is None
                                      else "PASS" if t["pass"] else "FAIL"))
        elif t:                                      # mixed_phase_per_phase_best
            over = ", ".join(f"{a} +{v:.0%}" for a, v in t["fixed_over_best"].items())
            out.append(f"mixed-phase against its per-phase best ({t['per_phase_best_s']:.3f} s):"
                       f" {over}; reactive +{t['reactive_over_best']:.0%}")
    return "\n".join(out)


def cmd_scheduling(args: argparse.Namespace) -> int:
    try:
        sizes = tuple(parse_size(s) for s in args.sizes.split(",")) if args.sizes else (
            QUICK_SIZES if args.quick else FULL_SIZES)
    except ValueError as exc:
        raise CliError("study scheduling", str(exc), status=2) from None
    from pvfs.bench.scheduling.runner import WORKLOADS

    workloads = tuple(w.strip() for w in args.workloads.split(",")) if args.workloads else None
    bad = [w for w in workloads or () if w not in (*WORKLOADS, "mixed-phase")]
    if bad:
        raise CliError("study scheduling", f"--workloads: unknown {', '.join(bad)} (choose "
                       f"from {', '.join((*WORKLOADS, 'mixed-phase'))})", status=2)
    if workloads and not set(WORKLOADS) <= set(workloads) and not args.model:
        raise CliError("study scheduling", "--workloads without all four fixed workloads needs "
                       "--model: the model is fitted to all of them", status=2)
    if os.geteuid() != 0:
        raise CliError("study scheduling", "needs root (network namespaces)", status=1)
    reps = args.reps or (1 if args.quick else 3)
    rate = args.rate or ("100mbit" if args.disk == "ide-2000" else "none")
    model = None
    if args.model:
        import json

        try:
            prior = json.loads(Path(args.model).read_text())
            model = prior.get("model") or prior["params"]
        except (OSError, ValueError, KeyError) as exc:
            raise CliError("study scheduling", f"--model {args.model}: {exc}", status=2) from None
    doc = run_study(args.disk, args.clients, args.iods, None if rate == "none" else rate, sizes,
                    reps, model, log=note, hints=args.hints, reps_short=args.reps_short,
                    workloads=workloads, caches=CACHES[args.cache])
    doc["model_from"] = args.model or "fitted to this run's opt1..opt4 results"
    doc["machine"] = machine()
    doc["command"] = " ".join([PROG, *sys.argv[1:]]) if sys.argv else PROG
    if args.out:
        from pvfs.cli.output import to_json

        Path(args.out).write_text(to_json(doc) + "\n")
    if args.plot_dir:
        from pvfs.bench.scheduling.plot import plot_study

        for path in plot_study(doc, args.plot_dir):
            note(f"wrote {path}")
    emit(args.json, doc, _render)
    return 0
