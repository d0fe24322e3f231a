"""The I/O daemons' memory with many clients (issue 11: each under 200 MiB with 64 clients).

::

    python bench/memory.py --clients 64 --seconds 20 --json memory_iods

A private pvfs (manager + 4 I/O daemons on 127.0.0.1); ``--clients`` native-API clients
(``--procs`` processes of threads, each thread its own ``pvfs.connect``) write and read back
``--request`` bytes at a time to a file of their own, all at once, for ``--seconds``. Every
second the daemons' resident memory is sampled; at the end each daemon's peak (``VmHWM``),
the most client connections an I/O daemon saw at once, and the bytes moved are reported.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

from pvfs.bench.common import exit_on_sigterm, format_table, write_results
from pvfs.bench.fio.pvfs_target import peak_rss, pvfs_cluster, status_bytes

MIB = 1 << 20


def _client(config: str, name: str, request: int, until: float, barrier, out) -> None:
    import pvfs

    moved = 0
    data = os.urandom(request)
    try:
        with pvfs.connect(config) as fs, fs.open(name, "w+b") as f:
            barrier.wait()
            off = 0
            while time.monotonic() < until:
                f.pwrite(data, off)
                if f.pread(request, off) != data:
                    raise RuntimeError(f"{name}: read back other bytes")
                moved += 2 * request
                off = (off + request) % (16 * request)
        out.put((name, moved, None))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which fails
        out.put((name, moved, repr(exc)))


def _process(config: str, rank: int, threads: int, request: int, seconds: float,
             barrier, out) -> None:
    until = time.monotonic() + seconds + 5.0   # + the time to connect and meet
    ts = [threading.Thread(target=_client, args=(config, f"/mem-{rank}-{t}", request, until,
                                                 barrier, out)) for t in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def run(config: str, run_dir: str, clients: int, procs: int, request: int,
        seconds: float) -> dict:
    import pvfs

    per = -(-clients // procs)
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(per * procs)
    out = ctx.Queue()
    ps = [ctx.Process(target=_process, args=(config, r, per, request, seconds, barrier, out))
          for r in range(procs)]
    for p in ps:
        p.start()
    pids = {f.stem: int(f.read_text().split()[0]) for f in Path(run_dir).glob("*.pid")}
    samples: dict[str, list[int]] = {n: [] for n in pids}
    most_conns = 0
    with pvfs.connect(config) as fs:
        while any(p.is_alive() for p in ps):
            for n, pid in pids.items():
                got = status_bytes(pid, "VmRSS")
                if got is not None:
                    samples[n].append(got)
            for i in range(fs.config.niods):
                most_conns = max(most_conns, fs.iod_call(i, "status")["connections"])
            time.sleep(1.0)
    reports = [out.get(timeout=60) for _ in range(per * procs)]
    for p in ps:
        p.join()
    errors = [e for _, _, e in reports if e]
    if errors:
        raise RuntimeError(f"a client failed: {errors[0]}")
    return {"clients": per * procs, "most_connections_at_one_iod": most_conns,
            "moved_bytes": sum(m for _, m, _ in reports),
            "peak_rss": {n: peak_rss(pid) for n, pid in pids.items()},
            "rss_samples": samples}



def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--procs", type=int, default=8, help="client processes (threads in each)")
    ap.add_argument("--request", type=int, default=1, help="MiB per request (1)")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--limit", type=int, default=200, help="MiB each I/O daemon must stay under")
    ap.add_argument("--json", metavar="NAME")
    args = ap.parse_args(argv)
    exit_on_sigterm()
    with tempfile.TemporaryDirectory(prefix="pvfs-memory-") as d, pvfs_cluster(d) as config:
        from pvfs.config import load

        got = run(config, load(config).run_dir, args.clients, args.procs,
                  args.request * MIB, args.seconds)
    rows = [[n, f"{(got['peak_rss'][n] or 0) / MIB:.0f}",
             f"{max(s, default=0) / MIB:.0f}",
             ("yes" if (got["peak_rss"][n] or 0) < args.limit * MIB else "NO")
             if n.startswith("iod") else "-"]
            for n, s in sorted(got["rss_samples"].items())]
    print(format_table(["daemon", "peak RSS (MiB)", "largest sample (MiB)",
                        f"< {args.limit} MiB"], rows))
    print(f"{got['clients']} clients, up to {got['most_connections_at_one_iod']} connections "
          f"at one I/O daemon, {got['moved_bytes'] / MIB:.0f} MiB moved")
    ok = all((got["peak_rss"][n] or 0) < args.limit * MIB for n in got["peak_rss"]
             if n.startswith("iod"))
    if args.json:
        print(f"saved {write_results(args.json, {'params': vars(args), **got, 'within': ok})}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
