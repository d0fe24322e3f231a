"""What the reactive selector's hooks cost the I/O daemon's trio thread per read request
(issue 12), without a network: a synthetic driver that makes, for every request, the calls
``DataRequests._submit_read`` and ``IodServer.on_done`` make around the engine (residency probe,
statistics record, ``on_read``, ``stats.end``), once with the selector off (a fixed
algorithm) and once on (rs), and reports the CPU time per request of each, their
difference, and the decisions made. ``--against DIR`` runs the daemons of another tree
(``git archive <commit> daemons | tar -x -C DIR``) alternately with this one's, in the
same process, so that both see the same machine.

The workload is the study's random16 (or random32) 64 KiB cached cell as one of two I/O
daemons sees it: 14 tasks, each reading its blocks of a file of 64 KiB stripe units one at
a time, blocks dealt at random; on a virtual clock a request arrives every ``--gap-us`` and
``--depth`` are in service at once (each ends when ``depth`` newer ones arrived). Passes
are separated by ``--pass-gap-ms`` of idle file (a barrier). With ``--idle-p P`` each
request is, with probability P, preceded by the file draining and idling for an exponential
time of mean ``--idle-ms``: what a loaded machine does to cached blocks (8-47 ms gaps,
requests 3.5-12 ms apart at load 12-23: docs/scheduling.md, fourteenth session).

    .venv/bin/python bench/rs_hook_cost.py [--workload random16] [--against DIR] [--json]
    .venv/bin/python bench/rs_hook_cost.py --gap-us 3000 --idle-p 0.3 --idle-ms 12  # loaded
"""

from __future__ import annotations

import argparse
import importlib
import json
import random
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path
from types import SimpleNamespace

from pvfs.daemons.iod import rs as iod_rs
from pvfs.daemons.iod import stats as iod_stats
from pvfs.daemons.iod.storage import open_storage
from pvfs.layout.describe import contiguous
from pvfs.layout.intersect import pieces_for_rank
from pvfs.layout.stripe import Stripe

TASKS = 14
PER_TASK = 64 << 10
INO = 7


def load_tree(root: str) -> tuple[types.ModuleType, types.ModuleType]:
    """The rs and stats modules of another tree's daemons/iod, as package ``base_iod``."""
    pkg = types.ModuleType("base_iod")
    pkg.__path__ = [f"{root}/daemons/iod"]
    sys.modules["base_iod"] = pkg
    return importlib.import_module("base_iod.rs"), importlib.import_module("base_iod.stats")


def hook_pcount(rs_mod, stripe: Stripe, niods: int = 2) -> int:
    """The pcount ``_submit_read`` passes: before the fifteenth session it called
    ``Stripe.resolved`` (which validates the stripe again); since, the field itself. (The
    fifteenth session's selector has ``seen`` as a property.)"""
    if isinstance(rs_mod.ReactiveSelector.__dict__.get("seen"), property):
        return stripe.pcount
    return stripe.resolved(niods).pcount


def trace(nblocks: int, passes: int, seed: int) -> list[list[tuple[int, int]]]:
    """Per pass, the requests reaching daemon 0 in arrival order, (offset, length): the
    tasks' block lists interleaved, each task one block at a time."""
    rng = random.Random(seed)
    block = PER_TASK // nblocks
    out = []
    for _ in range(passes):
        perm = list(range(TASKS * nblocks))
        rng.shuffle(perm)
        order = []
        for i in range(nblocks):
            for t in rng.sample(range(TASKS), TASKS):
                off = perm[t * nblocks + i] * block
                if (off // 65536) % 2 == 0:          # its stripe unit lives on daemon 0
                    order.append((off, block))
        out.append(order)
    return out


def run(args, mods, active: bool, passes, idles) -> dict:
    """The whole trace through the hooks of ``mods`` (rs, stats); CPU ns per request."""
    rs_mod, stats_mod = mods
    with tempfile.TemporaryDirectory() as d:
        storage = open_storage("emulated", d)
        storage.disk.access(INO, 0, TASKS * PER_TASK, False, 0.0)   # all of it cached
        srv = SimpleNamespace(config=SimpleNamespace(extra={}, niods=2),
                              stats=stats_mod.WorkloadStats(), storage=storage,
                              engine=SimpleNamespace(algorithm="opt1", gather=0.0),
                              _nursery=None)
        if args.model:
            srv.config.extra["model"] = iod_rs.rs.Params.from_wire(
                json.loads(Path(args.model).read_text())["model"]).to_table()
        sel = srv.selector = rs_mod.ReactiveSelector(srv)
        sel.active = active
        sel.nfile[INO] = (TASKS, 1e18)
        decide, deciding = sel._decide, [0]

        def timed(ino: int) -> None:     # the decisions' CPU (deciding_s is wall time)
            t = time.process_time_ns()
            decide(ino)
            deciding[0] += time.process_time_ns() - t

        sel._decide = timed
        stats, JobRecord = srv.stats, stats_mod.JobRecord
        stripe = Stripe(0, 2, 65536)
        f = {"ino": INO, "stripe": stripe}
        now = [1000.0]
        real = time.monotonic
        time.monotonic = lambda: now[0]    # the virtual clock, for the selector and stats
        try:
            job_id = n = 0
            gap = args.gap_us * 1e-6
            t0 = time.process_time_ns()
            for order, idle in zip(passes, idles):
                now[0] += args.pass_gap_ms * 1e-3
                live: list[int] = []
                for (off, length), wait in zip(order, idle):
                    now[0] += gap
                    if wait:
                        while live:                      # the file idles before this one
                            stats.end(live.pop(0), INO, 0, length, 0.0, 1e-4)
                        now[0] += wait
                    desc = contiguous(off, length)
                    pieces = pieces_for_rank(desc, stripe, 0)
                    job_id += 1
                    # DataRequests._submit_read: the probe before the job is submitted...
                    resident = sel.resident(INO, pieces) if sel.active else None
                    # ..._begin (every setting)...
                    regions = desc.expand()
                    lo = min((o for o, _ in regions), default=0)
                    hi = max((o + m for o, m in regions), default=0)
                    rec = JobRecord(INO, "read", length, len(regions), lo, hi,
                                    sum(m for _, m in regions))
                    stats.begin(job_id, rec)
                    # ...and the selector's hook
                    sel.on_read(INO, pieces, hook_pcount(rs_mod, f["stripe"]), f.get("hint"),
                                rec, resident)
                    live.append(job_id)
                    if len(live) > args.depth:
                        stats.end(live.pop(0), INO, 0, length, 0.0, 1e-4)
                    n += 1
                while live:
                    stats.end(live.pop(0), INO, 0, 4096, 0.0, 1e-4)
            cpu = time.process_time_ns() - t0
        finally:
            time.monotonic = real
        return {"requests": n, "cpu_us": cpu / n / 1e3,
                "decisions": sum(sel.decisions.values()), "deciding_s": deciding[0] / 1e9,
                "picks": dict(sel.picks)}


def summary(args, fixed: list[dict], rs_: list[dict]) -> dict:
    extra = [b["cpu_us"] - a["cpu_us"] for a, b in zip(fixed, rs_)]
    # what is left of it outside the decisions
    books = [x - 1e6 * b["deciding_s"] / b["requests"] for x, b in zip(extra, rs_)]
    last = rs_[-1]
    return {"fixed_us": statistics.median(r["cpu_us"] for r in fixed),
            "rs_us": statistics.median(r["cpu_us"] for r in rs_),
            "rs_extra_us": statistics.median(extra), "rs_extra_us_range": [min(extra), max(extra)],
            "outside_decisions_us": statistics.median(books),
            "decisions_per_pass": last["decisions"] / args.passes,
            "us_per_decision": 1e6 * last["deciding_s"] / max(1, last["decisions"]),
            "picks": last["picks"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", choices=("random16", "random32"), default="random16")
    ap.add_argument("--passes", type=int, default=200)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--gap-us", type=float, default=300.0)
    ap.add_argument("--depth", type=int, default=3)
    ap.add_argument("--pass-gap-ms", type=float, default=100.0)
    ap.add_argument("--idle-p", type=float, default=0.0)
    ap.add_argument("--idle-ms", type=float, default=12.0)
    ap.add_argument("--model", help="a study JSON whose 'model' the selector uses")
    ap.add_argument("--against", metavar="DIR", help="another tree's daemons, alternately")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    passes = trace(16 if args.workload == "random16" else 32, args.passes, args.seed)
    rng = random.Random(args.seed + 1)
    idles = [[rng.expovariate(1e3 / args.idle_ms) if rng.random() < args.idle_p else 0.0
              for _ in order] for order in passes]
    trees = {"this": (iod_rs, iod_stats)}
    if args.against:
        trees = {"against": load_tree(args.against), **trees}
    rows: dict[str, tuple[list, list]] = {k: ([], []) for k in trees}
    for _ in range(args.reps):                 # alternate, so drift hits all alike
        for name, mods in trees.items():
            rows[name][0].append(run(args, mods, False, passes, idles))
            rows[name][1].append(run(args, mods, True, passes, idles))
    out = {"workload": args.workload, "args": vars(args),
           "requests": rows["this"][1][-1]["requests"],
           "trees": {k: summary(args, *v) for k, v in rows.items()}}
    if args.json:
        print(json.dumps(out, indent=1))
        return
    print(f"{args.workload}: {out['requests']} requests at daemon 0 per rep, {args.reps} reps")
    for name, r in out["trees"].items():
        lo, hi = r["rs_extra_us_range"]
        print(f"  {name:8s} fixed {r['fixed_us']:.2f} us, rs {r['rs_us']:.2f} us per request: "
              f"rs extra {r['rs_extra_us']:.2f} us [{lo:.2f}, {hi:.2f}] "
              f"({r['outside_decisions_us']:.2f} outside decisions); "
              f"{r['decisions_per_pass']:.1f} decisions per pass ({r['us_per_decision']:.1f} us "
              f"each); picks {r['picks']}")


if __name__ == "__main__":
    main()
