"""Aggregate read/write bandwidth of N native clients x 4 I/O daemons on loopback, beside
iperf3 with the same number of streams, in one run (issue 2).

    python bench/stream.py [--clients 1 4] [--sizes 1 4 16 64] [--per-client 256] [--repeats 3]

Each client is a process with its own file striped over all four daemons (64 KiB units, or
``--ssize``);
it writes ``--per-client`` MiB in requests of each size, then reads it back (from the
daemons' page cache: the network path is what is measured). Clients start together at a
barrier; bandwidth = total bytes / (last finish - start). Results: bench/results/stream.json
(or ``--json NAME``).

``--pipeline`` opens the files with ``pipeline=True``: each write sent without waiting for
its replies, read with the next (``client/pipeline.py``), and the reads in order read ahead
(``client/readahead.py``). A phase is timed from the
barrier to the file's close, so a pipelined write's last replies count.

``--ab TREE`` compares two trees in one run (issue 30): each round runs this script on
``TREE``'s code (a checkout with its own ``make setup``: its venv, its build) and on this tree's,
alternating which goes first, each with its own iperf3 baseline, and saves every round's
cells, the ratios to iperf3 and their medians over the rounds, with the load average.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pvfs.bench.common import (
    exit_on_sigterm,
    format_bytes_rate,
    format_table,
    median,
    write_results,
)
from pvfs.bench.peers.iperf import iperf3_bandwidth

MiB = 1 << 20


def client(config_path: str, idx: int, op: str, req: int, total: int, barrier, out,
           ssize: int, pipeline: bool = False) -> None:
    import pvfs

    fs = pvfs.connect(config_path)
    path = f"/stream-{idx}"
    buf = bytearray(b"\xa5" * req)
    with fs.open(path, "r+b" if op == "read" else "wb", pipeline=pipeline,
                 stripe=pvfs.Stripe(0, -1, ssize).resolved(fs.config.niods)) as f:
        barrier.wait()
        t0, c0 = time.perf_counter(), time.process_time()
        for off in range(0, total, req):
            if op == "write":
                f.pwrite(buf, off)
            else:
                f.preadinto(buf, off)
    # timed to the close: a pipelined write's last replies are read there
    out.put((idx, t0, time.perf_counter(), time.process_time() - c0))
    fs.close()


def daemons_cpu(pids: list[int]) -> float:
    """CPU seconds (user + system, every thread) the processes have used so far."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def run_phase(config_path: str, nclients: int, op: str, req: int, total: int,
              ssize: int, iod_pids: list[int], pipeline: bool = False
              ) -> tuple[float, float, float]:
    """Aggregate bytes/s, and the clients' and the I/O daemons' CPU seconds per GiB moved."""
    ctx = mp.get_context("fork")
    d0 = daemons_cpu(iod_pids)
    barrier, out = ctx.Barrier(nclients), ctx.Queue()
    procs = [ctx.Process(target=client, args=(config_path, i, op, req, total, barrier, out, ssize,
                                              pipeline))
             for i in range(nclients)]
    for p in procs:
        p.start()
    times = [out.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
        if p.exitcode:
            raise RuntimeError(f"client exited with {p.exitcode}")
    start = min(t0 for _, t0, _, _ in times)
    end = max(t1 for _, _, t1, _ in times)
    gib = nclients * total / (1 << 30)
    return (nclients * total / (end - start), sum(c for *_, c in times) / gib,
            (daemons_cpu(iod_pids) - d0) / gib)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1, 4, 16, 64], help="request MiB")
    ap.add_argument("--per-client", type=int, default=256, help="MiB per client per phase")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--iperf-seconds", type=float, default=3.0)
    ap.add_argument("--ssize", type=int, default=65536, help="stripe unit of the files (bytes)")
    ap.add_argument("--pipeline", action="store_true",
                    help="open the files with pipeline=True (client/pipeline.py, readahead.py)")
    ap.add_argument("--json", metavar="NAME",
                    help="results file bench/results/NAME.json (default: stream, or "
                         "stream-ssizeN for another stripe unit)")
    ap.add_argument("--ab", metavar="TREE", help="compare with the checkout TREE, alternating")
    ap.add_argument("--rounds", type=int, default=3, help="--ab: rounds (one run of each tree)")
    args = ap.parse_args(argv)
    exit_on_sigterm()
    if args.ab:
        return ab_main(args)

    from pvfs.cluster.launch import daemons_of, down, make_config, up, write_config

    rows, results = [], []
    with tempfile.TemporaryDirectory(prefix="pvfs-bench-") as tmp:
        cfg = write_config(make_config(tmp, iods=4), f"{tmp}/pvfs.toml")
        up(cfg)
        iod_pids = [int(Path(d.pidfile).read_text()) for d in daemons_of(cfg)
                    if d.name.startswith("iod")]
        try:
            for n in args.clients:
                net_w = median(iperf3_bandwidth(n, args.iperf_seconds, reverse=False)
                               for _ in range(args.repeats))
                net_r = median(iperf3_bandwidth(n, args.iperf_seconds, reverse=True)
                               for _ in range(args.repeats))
                for size in args.sizes:
                    req, total = size * MiB, max(size, args.per_client) * MiB
                    runs: dict[str, list[tuple[float, float, float]]] = {"write": [], "read": []}
                    for _ in range(args.repeats):  # interleave write/read runs
                        for op in ("write", "read"):
                            runs[op].append(run_phase(cfg.path, n, op, req, total, args.ssize,
                                                      iod_pids, args.pipeline))
                    w, r = [x[0] for x in runs["write"]], [x[0] for x in runs["read"]]
                    mw, mr = median(w), median(r)
                    cpu = {f"{op}_{who}_cpu_s_per_gib": median(x[k] for x in runs[op])
                           for op in ("write", "read") for k, who in ((1, "clients"), (2, "iods"))}
                    results.append({"clients": n, "request_mib": size, "write_Bps": mw,
                                    "read_Bps": mr, "iperf3_Bps": net_w, "iperf3_reverse_Bps": net_r,
                                    "write_ratio": mw / net_w, "read_ratio": mr / net_r,
                                    "write_runs": w, "read_runs": r, **cpu,
                                    "load": os.getloadavg()[0]})
                    rows.append([n, f"{size} MiB", format_bytes_rate(mw), format_bytes_rate(mr),
                                 format_bytes_rate(net_w), f"{mw / net_w:.2f}", f"{mr / net_r:.2f}"])
                    print(format_table(["clients", "request", "write", "read", "iperf3",
                                        "write/iperf3", "read/iperf3"], rows[-1:]), flush=True)
        finally:
            down(cfg)
    print()
    print(format_table(["clients", "request", "write", "read", "iperf3", "write/iperf3",
                        "read/iperf3"], rows))
    name = args.json or ("stream" if args.ssize == 65536 else f"stream-ssize{args.ssize}")
    path = write_results(name, {"iods": 4, "stripe_ssize": args.ssize, "pipeline": args.pipeline,
                                    "per_client_mib": args.per_client, "results": results})
    print(f"saved {path}")
    return 0


def _tree_run(tree: Path, args: argparse.Namespace, name: str) -> dict:
    """One run of this script on TREE's code (its venv's python, whose editable install is
    that tree: client, daemons, build) with this run's options; its saved results."""
    cmd = [str(tree / ".venv/bin/python"), str(Path(__file__).resolve()),
           "--clients", *map(str, args.clients), "--sizes", *map(str, args.sizes),
           "--per-client", str(args.per_client), "--repeats", str(args.repeats),
           "--iperf-seconds", str(args.iperf_seconds), "--ssize", str(args.ssize), "--json", name]
    load = os.getloadavg()[0]
    subprocess.run(cmd, cwd=tree, check=True, stdout=subprocess.DEVNULL)
    path = tree / "bench/results" / f"{name}.json"
    doc = json.loads(path.read_text())
    path.unlink()
    return {"load_before": load, "load_after": os.getloadavg()[0], "results": doc["results"]}


def ab_main(args: argparse.Namespace) -> int:
    """Rounds of (TREE, this tree) runs, alternating who goes first; medians of the ratios."""
    trees = {"before": Path(args.ab).resolve(), "after": Path(__file__).resolve().parents[1]}
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    for k in range(args.rounds):
        for side in (("before", "after") if k % 2 == 0 else ("after", "before")):
            runs[side].append(_tree_run(trees[side], args, f"_ab_{side}_{os.getpid()}"))
            print(f"round {k + 1} {side}: load {runs[side][-1]['load_before']:.1f}", flush=True)
    cells, rows = [], []
    for i, cell in enumerate(runs["after"][0]["results"]):
        out = {"clients": cell["clients"], "request_mib": cell["request_mib"]}
        for side in ("before", "after"):
            for d in ("write", "read"):
                vals = [r["results"][i][f"{d}_ratio"] for r in runs[side]]
                out[f"{side}_{d}_ratios"] = vals
                out[f"{side}_{d}_ratio"] = median(vals)
                for who in ("clients", "iods"):
                    key = f"{d}_{who}_cpu_s_per_gib"
                    out[f"{side}_{key}"] = median(r["results"][i][key] for r in runs[side])
        cells.append(out)
        rows.append([out["clients"], f"{out['request_mib']} MiB",
                     *(f"{out[f'{s}_{d}_ratio']:.2f}" for d in ("write", "read")
                       for s in ("before", "after"))])
    print(format_table(["clients", "request", "write before", "write after", "read before",
                        "read after"], rows))
    print("CPU seconds per GiB, clients + I/O daemons (before -> after):")
    print(format_table(["clients", "request", "write", "read"], [
        [c["clients"], f"{c['request_mib']} MiB",
         *(" -> ".join(f"{c[f'{s}_{d}_clients_cpu_s_per_gib']:.2f} + "
                       f"{c[f'{s}_{d}_iods_cpu_s_per_gib']:.2f}" for s in ("before", "after"))
           for d in ("write", "read"))] for c in cells]))
    path = write_results(args.json or "stream-ab", {
        "iods": 4, "stripe_ssize": args.ssize, "per_client_mib": args.per_client,
        "trees": {k: str(v) for k, v in trees.items()}, "rounds": args.rounds,
        "cells": cells, "runs": runs})
    print(f"saved {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
