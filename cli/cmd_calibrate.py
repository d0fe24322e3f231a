"""``pvfs-admin calibrate``: fit the reactive-scheduling model on the live file system
(thesis appendix B; ``pvfs.models.fit``).

Runs, with ``--clients`` synchronised local task processes:

* B.1 single-block reads under opt2, uncached at four sizes (``T_over``, ``B_dr``), cached at
  the smallest (``B_drc``); then cached runs of doubling size until caching stops working,
  and a bisection of that step (``S_cache``); ``S_nocache``, where cached runs are as slow as
  uncached ones, gives ``C_cache``.
* B.2 strided and random 16/32 block reads under opt2, uncached (``C_req``; ``C_dist``,
  ``P_dist``).
* B.3 all four workloads under opt1..opt4, cached and uncached (the ``E_opt`` table).

Sizes are bytes per I/O daemon (the model's ``S_req``). The fit is printed with every run's
residual, stored in the config's ``[model]`` table and handed to the running daemons
(``model_set``), so ``sched set rs`` uses it at once and after restarts.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from pvfs.cli.common import PROG, add_command
from pvfs.cli.output import CliError, emit, note, parse_size, table


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "calibrate", help="fit the reactive-scheduling model to this file "
                    "system (thesis appendix B) and store it in the config", func=cmd_calibrate,
                    example=f"""\
{PROG} calibrate                       # every I/O daemon, 4 local client tasks
{PROG} calibrate --iod 1 --json        # one daemon's disk only
{PROG} calibrate --quick --no-store    # a short run; print the fit, change nothing""")
    p.add_argument("--iod", type=int, default=None, help="calibrate on this I/O daemon only")
    p.add_argument("--clients", type=int, default=4, help="client tasks (default 4)")
    p.add_argument("--quick", action="store_true",
                   help="fewer sizes; the E_opt table from one size")
    p.add_argument("--max-size", default="256M",
                   help="largest cached size per daemon tried when looking for S_cache")
    p.add_argument("--no-store", action="store_true",
                   help="do not write the config nor tell the daemons")


def _render(doc: dict) -> str:
    p = doc["params"]
    lines = [(f"T_over {p['T_over'] * 1e3:.2f} ms   B_dr {p['B_dr'] / 1e6:.2f} MB/s   "
             f"B_drc {p['B_drc'] / 1e6:.2f} MB/s   S_cache {p['S_cache'] / 2**20:.1f} MiB   "
             f"C_cache {p['C_cache']:.3f}"),
             (f"C_req {p['C_req']:.3f}   P_req {p['P_req']:.2f}   C_dist {p['C_dist']:.2f}   "
             f"P_dist {p['P_dist']:.2f}"), ""]
    # Below the "~0" threshold (§5.6) the fitted small-request pick runs instead of the
    # table's: per column when the fit found one.
    zeros = p.get("zero_cols") or [p["zero_s"]] * 6
    picks = p.get("small_algs") or [p["small_alg"]] * 6
    lines.append(table([[a, *(f"{x:.3f}" for x in row)] for a, row in p["E_opt"].items()]
                       + [["~0 below (s)", *(f"{z:.3g}" for z in zeros)],
                          ["then runs", *picks]],
                       ["E_opt", "unc ideal", "unc sparse", "unc disjoint", "c ideal",
                        "c sparse", "c disjoint"]))
    lines.append("")
    lines.append(table([[r["workload"], f"{r['request_bytes'] >> 10}K",
                         "cached" if r["cached"] else "uncached", r["algorithm"],
                         f"{r['observed_s']:.4f}", f"{r['predicted_s']:.4f}",
                         f"{r['residual'] * 100:+.1f}%"] for r in doc["residuals"]],
                       ["workload", "per task", "cache", "algorithm", "observed s",
                        "model s", "residual"]))
    if doc.get("stored"):
        lines.append(f"stored in {doc['stored']} ([model]) and sent to the I/O daemons")
    return "\n".join(lines)


def cmd_calibrate(args: argparse.Namespace) -> int:
    from pvfs import config as cfgmod
    from pvfs.bench.scheduling.calibrate import calibrate
    from pvfs.bench.scheduling.runner import Runner
    from pvfs.models.rs import Params

    cfg = cfgmod.load(args.config)
    if args.iod is not None and not 0 <= args.iod < cfg.niods:
        raise CliError("calibrate", f"--iod {args.iod}: the config has {cfg.niods} I/O "
                       "daemons", status=2)
    try:
        max_size = parse_size(args.max_size)
    except ValueError as exc:
        raise CliError("calibrate", str(exc), status=2) from None
    iods = [args.iod] if args.iod is not None else list(range(cfg.niods))
    with Runner(cfg.path, args.clients, iods) as runner:
        before = [runner.call(i, "sched_get")["algorithm"] for i in iods]
        try:
            doc = calibrate(runner, args.clients, args.quick, max_size, log=note)
        finally:
            for i, alg in zip(iods, before):
                runner.call(i, "sched_set", algorithm=alg, window=None)
        if not args.no_store:
            params = Params.from_wire(doc["params"])
            for i in iods:
                runner.call(i, "model_set", params=params.to_wire())
            new = dataclasses.replace(cfg, extra={**cfg.extra, "model": params.to_table()})
            Path(cfg.path).write_text(cfgmod.dump(new))
            doc["stored"] = cfg.path
    emit(args.json, doc, _render)
    return 0
