"""``pvfs-admin study scheduling``: the thesis' scheduling study, reproduced (ch. 4-6), held out.

14 client hosts and 2 I/O daemon hosts (network namespaces on a bridge, 100 Mbit/s links for
``--disk ide-2000``, unshaped for ``--disk today``; ``pvfs.cluster.netns``), emulated disks with
the chosen preset. The model (appendix B) is fitted on one set of runs -- a fitting pass
(opt1..opt4, reads of ``--fit-sizes``), or an earlier study's or a calibration's (``--model``)
-- and rs is scored on fresh runs it never saw (``--sizes`` reads, ``--write-sizes`` writes,
cached and uncached), opt1..opt4 and rs side by side in every cell, then the mixed-phase
workload (``pvfs.bench.scheduling.runner.MIXED_PHASES``) with its per-phase oracle. The
study needs root (namespaces); nothing of it is left behind. Everything runs in
``pvfs.bench.scheduling.study``; scoring in ``pvfs.bench.scheduling.score``.

``--json`` prints ``{"results": [{"workload", "request_bytes", "cached", "operation",
"algorithm", "app_service_s", "mean_task_service_s", "variance", "runs": [...]}...],
"model_fit_on": {...}, "fit_results": [...], "targets": {...}, "load_before",
"load_after", ...}``; mixed-phase rows have ``request_bytes`` and ``cached`` null (they mix
both), and one of them ``"algorithm": "oracle"``. ``--out`` writes the same document with the
machine and the command, and ``--plot-dir`` the figures.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from pvfs.bench.scheduling.study import (
    CACHES,
    FULL_FIT_SIZES,
    FULL_SIZES,
    FULL_WRITE_SIZES,
    QUICK_FIT_SIZES,
    QUICK_SIZES,
    QUICK_WRITE_SIZES,
    machine,
    run_study,
)
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
    q.add_argument("--quick", action="store_true", help="fit on 64 KiB and 1 MiB reads; score "
                   "reads of 64 KiB, 512 KiB, 2 MiB and writes of 64 KiB, 512 KiB, 3 runs")
    q.add_argument("--disk", choices=tuple(PRESETS), default=DEFAULT_PRESET,
                   help=f"emulated disk preset (default {DEFAULT_PRESET}: the thesis' nodes)")
    q.add_argument("--clients", type=int, default=14, help="client hosts (default 14)")
    q.add_argument("--iods", type=int, default=2, help="I/O daemon hosts (default 2)")
    q.add_argument("--rate", default=None,
                   help="link rate for tc, or 'none' (default: 100mbit for ide-2000, none "
                        "for today)")
    q.add_argument("--sizes", default=None, help="scored reads: bytes per task, comma separated")
    q.add_argument("--write-sizes", default=None, metavar="LIST",
                   help="scored writes: bytes per task, comma separated ('none': no writes)")
    q.add_argument("--fit-sizes", default=None, metavar="LIST",
                   help="the fitting pass' reads (without --model): bytes per task")
    q.add_argument("--workloads", default=None, metavar="LIST",
                   help="only these workloads, comma separated, of single-block, strided, "
                        "random16, random32, mixed-phase (default all)")
    q.add_argument("--cache", choices=tuple(CACHES), default="both",
                   help="only the uncached or the cached runs of the four workloads (default "
                        "both)")
    q.add_argument("--reps", type=int, default=None, help="scored runs per cell and setting "
                   "(default 3)")
    q.add_argument("--reps-short", type=int, default=None, metavar="N",
                   help="runs of the short cells (their first runs under 1 s of application "
                        "time; they scatter most), default --reps")
    q.add_argument("--fit-reps", type=int, default=1, metavar="N",
                   help="runs of each fitting-pass cell and setting; the model is fitted "
                        "on their medians (default 1)")
    q.add_argument("--fit-reps-short", type=int, default=None, metavar="N",
                   help="runs of the fitting pass' short cells (first runs under 1 s of "
                        "application time), default --fit-reps")
    q.add_argument("--fit-spread", dest="fit_spread", action="store_true", default=True,
                   help="the fit's small-request rule weighs how much the fitting runs "
                        "agree: each algorithm's expected excess over bootstrap resamples "
                        "of the runs, in place of its medians' excess (the default, "
                        "docs/scheduling.md)")
    q.add_argument("--fit-medians", dest="fit_spread", action="store_false",
                   help="the earlier fit: the small-request rule on the medians' excess")
    q.add_argument("--model", default=None, metavar="JSON",
                   help="use the model of an earlier study or calibration (its \"model\" or "
                        "\"params\") in place of the fitting pass")
    q.add_argument("--cache-reports", default=None, metavar="LIST",
                   help="also run rs told the cache size, side by side: 'right' (the I/O "
                        "daemon's cache, as S_req < S_cache decides), 'zero' (no cache), "
                        "comma separated, as the settings rs@right and rs@zero; plain rs "
                        "goes by the resident fraction it measures (figs. 5.7-5.11)")
    q.add_argument("--hints", action="store_true",
                   help="also run rs with every task sending an access hint of the collective "
                        "operation (pvfs.AccessHint), as the setting \"rs+hint\"")
    q.add_argument("--out", default=None, help="write the JSON document here too")
    q.add_argument("--checkpoint", default=None, metavar="FILE",
                   help="write the rows so far here after every cell")
    q.add_argument("--plot-dir", default=None, help="write the figures here")


def _usage(p: argparse.ArgumentParser) -> int:
    p.print_help(sys.stderr)
    return 2



def _sizes(text: str | None, default: tuple[int, ...]) -> tuple[int, ...]:
    if text is None:
        return default
    if text.strip().lower() == "none":
        return ()
    return tuple(parse_size(x) for x in text.split(","))


def _render(doc: dict) -> str:
    def size(x: dict) -> str:
        return "-" if x["request_bytes"] is None else f"{x['request_bytes'] >> 10}K"

    def num(v) -> str:
        return "-" if v is None else f"{v:.3f}"

    rows = [[x["workload"], size(x),
             "mixed" if x["cached"] is None else ("cached" if x["cached"] else "uncached"),
             x.get("operation", "read"), x["algorithm"], num(x["app_service_s"]),
             num(x.get("median_mean_task_service_s", x["mean_task_service_s"])),
             "-" if x.get("variance") is None else f"{x['variance']:.4f}"]
            for x in doc["results"]]
    out = [table(rows, ["workload", "size", "cache", "op", "algorithm", "app s",
                        "median mean task s", "variance"])]
    if doc.get("model_fit_on"):
        f = doc["model_fit_on"]
        out.append(f"model fitted on: {f['source']} ({len(f.get('runs', []))} runs; none "
                   "scored)")
    for name, t in doc["targets"].items():
        out.append(_render_target(name, t))
    if doc.get("load_before") is not None:
        out.append(f"load before {doc['load_before']}, after {doc.get('load_after')}")
    return "\n".join(out)


def _render_target(name: str, t: dict) -> str:
    result = t.get("result")
    if result is None:
        return f"{name}: not run"
    head = f"{name}: {result.upper()}"
    if "decided_within" in t:
        return (head + f" ({t['decided_within']} of {len(t['cells'])} cells decided within "
                f"+5 %, {t['decided_miss']} decided over, {t['undecided']} undecided; "
                f"{t['decided_over_10pct']} decided over +10 %; on the medians alone "
                f"{t['point_within']} within)")
    if "cells" in t:
        return head + "".join(f"; {c['request_bytes'] >> 10} KiB {c['rs_below_opt1']:+.1%} "
                              f"{_ci(c['ci95'])}" for c in t["cells"])
    if t.get("over_oracle"):
        over = ", ".join(f"{a} {v:.3f}x {_ci(t['ci95'][a], pct=False)}"
                         for a, v in t["over_oracle"].items())
        return head + f" (oracle {t['oracle_s']:.3f} s, {'/'.join(t['schedule'])}): {over}"
    return head


def _ci(ci: list[float] | None, pct: bool = True) -> str:
    if ci is None:
        return "[no interval]"
    return f"[{ci[0]:+.1%}, {ci[1]:+.1%}]" if pct else f"[{ci[0]:.3f}, {ci[1]:.3f}]"


def cmd_scheduling(args: argparse.Namespace) -> int:
    try:
        sizes = _sizes(args.sizes, QUICK_SIZES if args.quick else FULL_SIZES)
        write_sizes = _sizes(args.write_sizes,
                             QUICK_WRITE_SIZES if args.quick else FULL_WRITE_SIZES)
        fit_sizes = _sizes(args.fit_sizes, QUICK_FIT_SIZES if args.quick else FULL_FIT_SIZES)
    except ValueError as exc:
        raise CliError("study scheduling", str(exc), status=2) from None
    from pvfs.bench.scheduling.runner import WORKLOADS

    workloads = tuple(w.strip() for w in args.workloads.split(",")) if args.workloads else None
    bad = [w for w in workloads or () if w not in (*WORKLOADS, "mixed-phase")]
    if bad:
        raise CliError("study scheduling", f"--workloads: unknown {', '.join(bad)} (choose "
                       f"from {', '.join((*WORKLOADS, 'mixed-phase'))})", status=2)
    if not args.model and not fit_sizes:
        raise CliError("study scheduling", "no --fit-sizes and no --model: nothing to fit the "
                       "model on", status=2)
    if os.geteuid() != 0:
        raise CliError("study scheduling", "needs root (network namespaces)", status=1)
    reps = args.reps or 3
    if args.fit_reps < 1:
        raise CliError("study scheduling", "--fit-reps must be >= 1", status=2)
    if args.fit_reps_short is not None and args.fit_reps_short < 1:
        raise CliError("study scheduling", "--fit-reps-short must be >= 1", status=2)
    reports = tuple(r.strip() for r in args.cache_reports.split(",")) \
        if args.cache_reports else ()
    if set(reports) - {"right", "zero"} or len(set(reports)) != len(reports):
        raise CliError("study scheduling", "--cache-reports: right and/or zero", status=2)
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
                    workloads=workloads, caches=CACHES[args.cache], fit_sizes=fit_sizes,
                    write_sizes=write_sizes, model_source=args.model,
                    checkpoint=args.checkpoint, fit_reps=args.fit_reps,
                    fit_spread=args.fit_spread, fit_reps_short=args.fit_reps_short,
                    cache_reports=reports)
    doc["model_from"] = doc["model_fit_on"]["source"]
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
