"""Where one native client's time goes per request (issue 30, thirty-eighth session): a
4-daemon file system of its own, one client moving fixed-size requests (write, then read,
alternating phases), per request: wall time, the time inside ``_native.stripe_transfer``
(the C exchange, GIL released), the client thread's CPU inside and outside it, the
daemons' CPU, and the client's voluntary context switches; iperf3 (1 stream) in the same
minute for scale.

    python bench/stream_profile.py [--seconds 5] [--size-mib 1] [--ssize 65536] [--rounds 3]

``--pause`` waits for a key after the cluster is up and the client pid is printed, so
``perf record -p PID`` / ``strace -c -f -p PID`` / ``py-spy`` can be attached by hand.
Results: bench/results/stream_profile.json (or ``--json NAME``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from statistics import median

from pvfs.bench.common import format_table, write_results
from pvfs.bench.peers.iperf import iperf3_bandwidth

MiB = 1 << 20


def proc_cpu(pids: list[int]) -> float:
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / tick


def ctx_switches() -> tuple[int, int]:
    vol = invol = 0
    with open(f"/proc/self/task/{os.getpid()}/status") as f:
        for line in f:
            if line.startswith("voluntary_ctxt_switches"):
                vol = int(line.split()[1])
            elif line.startswith("nonvoluntary_ctxt_switches"):
                invol = int(line.split()[1])
    return vol, invol


class Timed:
    """Stands in for ``pvfs._native`` in datapath: times each stripe_transfer call."""

    def __init__(self, native) -> None:
        self._native = native
        self.wall = self.cpu = 0.0
        self.calls = 0

    def __getattr__(self, name):
        return getattr(self._native, name)

    def stripe_transfer(self, *args):
        c0, t0 = time.thread_time(), time.perf_counter()
        try:
            return self._native.stripe_transfer(*args)
        finally:
            self.wall += time.perf_counter() - t0
            self.cpu += time.thread_time() - c0
            self.calls += 1


def phase(f, op: str, buf, size: int, count: int, seconds: float, iod_pids, timed) -> dict:
    view = memoryview(buf)
    timed.wall = timed.cpu = 0.0
    timed.calls = 0
    d0, v0 = proc_cpu(iod_pids), ctx_switches()
    c0, t0, n = time.thread_time(), time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        for i in range(count):
            if op == "write":
                f.pwrite(view, i * size)
            else:
                f.preadinto(view, i * size)
            n += 1
    wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
    d1, v1 = proc_cpu(iod_pids), ctx_switches()
    us = 1e6 / n
    return {"op": op, "requests": n, "MiBps": n * size / MiB / wall,
            "wall_us": wall * us, "in_c_wall_us": timed.wall * us,
            "outside_c_wall_us": (wall - timed.wall) * us,
            "client_cpu_us": cpu * us, "in_c_cpu_us": timed.cpu * us,
            "outside_c_cpu_us": (cpu - timed.cpu) * us,
            "daemons_cpu_us": (d1 - d0) * us,
            "vol_ctxsw": (v1[0] - v0[0]) / n, "invol_ctxsw": (v1[1] - v0[1]) / n}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--size-mib", type=int, default=1)
    ap.add_argument("--ssize", type=int, default=65536)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--file-mib", type=int, default=64)
    ap.add_argument("--pause", action="store_true")
    ap.add_argument("--no-iperf", action="store_true")
    ap.add_argument("--json", default="stream_profile")
    args = ap.parse_args(argv)

    import pvfs
    from pvfs.client import datapath
    from pvfs.cluster.launch import daemons_of, scratch_cluster

    timed = Timed(datapath._native)
    datapath._native = timed
    size = args.size_mib * MiB
    count = max(1, args.file_mib * MiB // size)
    rounds = []
    with scratch_cluster("/tmp/pvfs-streamprof-", 4) as cfg:
        iod_pids = [int(Path(d.pidfile).read_text()) for d in daemons_of(cfg)
                    if d.name.startswith("iod")]
        fs = pvfs.connect(cfg.path)
        try:
            f = fs.open("/f", "w+b", stripe=pvfs.Stripe(0, 4, args.ssize))
            buf = bytearray(os.urandom(size))
            for i in range(count):
                f.pwrite(buf, i * size)
            if args.pause:
                print(f"client pid {os.getpid()}, daemons {iod_pids}; press enter", flush=True)
                sys.stdin.readline()
            for k in range(args.rounds):
                r = {"load": os.getloadavg()[0]}
                for op in ("write", "read"):
                    r[op] = phase(f, op, buf, size, count, args.seconds, iod_pids, timed)
                if not args.no_iperf:
                    r["iperf3_MiBps"] = iperf3_bandwidth(1, 2.0) / MiB
                    r["iperf3_reverse_MiBps"] = iperf3_bandwidth(1, 2.0, reverse=True) / MiB
                rounds.append(r)
                print(f"round {k + 1}: load {r['load']:.1f}", flush=True)
            f.close()
        finally:
            fs.close()
    keys = ["MiBps", "wall_us", "in_c_wall_us", "outside_c_wall_us", "client_cpu_us",
            "in_c_cpu_us", "outside_c_cpu_us", "daemons_cpu_us", "vol_ctxsw", "invol_ctxsw"]
    rows = [[op, k, *(f"{r[op][k]:.1f}" for r in rounds), f"{median(r[op][k] for r in rounds):.1f}"]
            for op in ("write", "read") for k in keys]
    if not args.no_iperf:
        rows += [["iperf3", k, *(f"{r[k]:.0f}" for r in rounds), f"{median(r[k] for r in rounds):.0f}"]
                 for k in ("iperf3_MiBps", "iperf3_reverse_MiBps")]
    print(format_table(["op", "per request", *(f"r{i + 1}" for i in range(len(rounds))),
                        "median"], rows))
    path = write_results(args.json, {"size_mib": args.size_mib, "ssize": args.ssize,
                                     "seconds": args.seconds, "rounds": rounds})
    print(f"saved {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
