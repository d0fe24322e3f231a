"""Aggregate read/write bandwidth of N native clients x 4 I/O daemons on loopback, beside
iperf3 with the same number of streams, in one run (issue 2).

    python bench/stream.py [--clients 1 4] [--sizes 1 4 16 64] [--per-client 256] [--repeats 3]

Each client is a process with its own file striped over all four daemons (64 KiB units, or
``--ssize``);
it writes ``--per-client`` MiB in requests of each size, then reads it back (from the
daemons' page cache: the network path is what is measured). Clients start together at a
barrier; bandwidth = total bytes / (last finish - start). Results: bench/results/stream.json
(or ``--json NAME``).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import tempfile
import time

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
           ssize: int) -> None:
    import pvfs

    fs = pvfs.connect(config_path)
    path = f"/stream-{idx}"
    buf = bytearray(b"\xa5" * req)
    with fs.open(path, "r+b" if op == "read" else "wb",
                 stripe=pvfs.Stripe(0, -1, ssize).resolved(fs.config.niods)) as f:
        barrier.wait()
        t0 = time.perf_counter()
        for off in range(0, total, req):
            if op == "write":
                f.pwrite(buf, off)
            else:
                f.preadinto(buf, off)
        out.put((idx, t0, time.perf_counter()))
    fs.close()


def run_phase(config_path: str, nclients: int, op: str, req: int, total: int,
              ssize: int) -> float:
    ctx = mp.get_context("fork")
    barrier, out = ctx.Barrier(nclients), ctx.Queue()
    procs = [ctx.Process(target=client, args=(config_path, i, op, req, total, barrier, out, ssize))
             for i in range(nclients)]
    for p in procs:
        p.start()
    times = [out.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
        if p.exitcode:
            raise RuntimeError(f"client exited with {p.exitcode}")
    start = min(t0 for _, t0, _ in times)
    end = max(t1 for _, _, t1 in times)
    return nclients * total / (end - start)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1, 4, 16, 64], help="request MiB")
    ap.add_argument("--per-client", type=int, default=256, help="MiB per client per phase")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--iperf-seconds", type=float, default=3.0)
    ap.add_argument("--ssize", type=int, default=65536, help="stripe unit of the files (bytes)")
    ap.add_argument("--json", metavar="NAME",
                    help="results file bench/results/NAME.json (default: stream, or "
                         "stream-ssizeN for another stripe unit)")
    args = ap.parse_args(argv)
    exit_on_sigterm()

    from pvfs.cluster.launch import down, make_config, up, write_config

    rows, results = [], []
    with tempfile.TemporaryDirectory(prefix="pvfs-bench-") as tmp:
        cfg = write_config(make_config(tmp, iods=4), f"{tmp}/pvfs.toml")
        up(cfg)
        try:
            for n in args.clients:
                net_w = median(iperf3_bandwidth(n, args.iperf_seconds, reverse=False)
                               for _ in range(args.repeats))
                net_r = median(iperf3_bandwidth(n, args.iperf_seconds, reverse=True)
                               for _ in range(args.repeats))
                for size in args.sizes:
                    req, total = size * MiB, max(size, args.per_client) * MiB
                    w, r = [], []
                    for _ in range(args.repeats):  # interleave write/read runs
                        w.append(run_phase(cfg.path, n, "write", req, total, args.ssize))
                        r.append(run_phase(cfg.path, n, "read", req, total, args.ssize))
                    mw, mr = median(w), median(r)
                    results.append({"clients": n, "request_mib": size, "write_Bps": mw,
                                    "read_Bps": mr, "iperf3_Bps": net_w, "iperf3_reverse_Bps": net_r,
                                    "write_ratio": mw / net_w, "read_ratio": mr / net_r,
                                    "write_runs": w, "read_runs": r})
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
    path = write_results(name, {"iods": 4, "stripe_ssize": args.ssize,
                                    "per_client_mib": args.per_client, "results": results})
    print(f"saved {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
