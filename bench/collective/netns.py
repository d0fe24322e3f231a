"""DAChe's lock-server scaling (figs. 4-6) over the netns harness: one MPI rank per host.

``pvfs.cluster.netns.Network`` gives every MPI rank a host of its own (a network namespace
with one shaped ``eth0`` link to a bridge) and the four I/O daemons four more hosts (the
manager on the first), so every message between ranks and every file-system call crosses
two shaped links, as between DAChe's Cplant nodes, instead of loopback or shared memory.
``mpiexec`` runs on the first rank's host; hydra reaches the others through a launcher that
enters their namespace (``-launcher rsh -launcher-exec``: ``ip netns exec``), and UCX is
limited to TCP (``UCX_TLS=tcp,self``: without it UCX moves the bytes of ranks on one kernel
through shared memory, whatever host MPICH thinks they are on).

The jobs are the sliding window of :mod:`.mpi` (4 MiB cache per rank, 32 KiB pages, 64 KiB
chunks, 40 loops) with ``independent`` reads and ``servers`` with k dedicated lock servers
(DAChe's mtx-k; ``k=half`` is its 50:50, as many lock servers as clients), each client's
locked accesses timed by phase (``"breakdown"``: fig. 6) and the lock phase per access
standing for fig. 5's queue time (what a client waits for a grant: the server's queue, the
network and the server's CPU, as DAChe's "client service time"). Every job of a rank count
runs once per repeat, the order rotated each repeat; the load is recorded before and after
each job.

    flock /work/scratch/machine.lock .venv/bin/python -m pvfs.bench.collective.netns \\
        --ranks 8,16,32 --servers 1,2 --repeat 3 -o bench/results/X.json --plot X.png
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pvfs.bench.collective.drive import WINDOW, label
from pvfs.bench.collective.mpi import PHASES

#: per-direction link rate: about DAChe's Myrinet (1.28 Gbit/s) rather than the thesis'
#: 100 Mbit/s Ethernet, since the figures are DAChe's
RATE = "1gbit"
#: the clients' connect timeout (the config's default is 5 s): at 32 ranks, all connecting at
#: once on two cores, a first run lost a job to "iod1: no connection within 5 s"
CONNECT_TIMEOUT = 30.0
#: the environment of every rank: TCP only (see the module's docstring)
RANK_ENV = {"UCX_TLS": "tcp,self"}
_RSH = """#!/bin/sh
# hydra's launcher: "$0 HOST CMD..." runs CMD in the namespace of HOST (an address)
host="$1"; shift
ns=$(grep "^$host " {map} | cut -d' ' -f2)
[ -n "$ns" ] || {{ echo "no namespace for $host" >&2; exit 1; }}
exec ip netns exec "$ns" sh -c "$*"
"""


def plan(ranks: list[int], servers: list[str], variants: tuple[str, ...] = (),
         independent: set[int] | None = None,
         cold: bool = False, base: bool = True) -> list[list[tuple[int, dict[str, Any]]]]:
    """The jobs of each rank count, ``(processes, options)``: ``independent`` (at the
    counts in ``independent``; None: at every count), then ``servers`` with each k of
    ``servers`` (``"half"``: as many lock servers as clients), then each of ``variants``
    (a method such as ``servers+ra-evict``, issue 32's A/B) with the first k (``rma`` and
    ``thread`` methods without lock-server ranks: n processes); ``cold``:
    every job empties the I/O daemons' caches after writing its file (``"cold"``); ``base``
    False: no plain ``servers`` jobs, only the variants (issue 32: an A/B of two variants)."""
    out = [_plan_one(n, servers, variants, independent, base) for n in ranks]
    if cold:
        for g in out:
            for _, opts in g:
                opts["cold"] = True
    return out


def _plan_one(n: int, servers: list[str], variants: tuple[str, ...],
              independent: set[int] | None, base: bool = True) -> list[tuple[int, dict[str, Any]]]:
    out = []
    if independent is None or n in independent:
        out.append((n, {"benchmark": "sliding_window", "method": "independent", **WINDOW,
                        "breakdown": True}))
    ks = [n if k == "half" else int(k) for k in servers]
    for kk in ks if base else ():
        out.append((n + kk, {"benchmark": "sliding_window", "method": "servers",
                             **WINDOW, "lock_servers": kk, "breakdown": True}))
    for method in variants:
        if method.partition("+")[0] != "servers":  # rma, thread: no lock-server ranks
            out.append((n, {"benchmark": "sliding_window", "method": method, **WINDOW,
                            "breakdown": True}))
            continue
        out.append((n + ks[0], {"benchmark": "sliding_window", "method": method,
                                **WINDOW, "lock_servers": ks[0], "breakdown": True}))
    return out


def rotated(jobs: list[Any], rep: int) -> list[int]:
    """The indices of ``jobs`` in repeat ``rep``'s order: rotated by ``rep``."""
    n = len(jobs)
    return [(i + rep) % n for i in range(n)]


def _load() -> float:
    return round(os.getloadavg()[0], 2)


@contextlib.contextmanager
def harness(processes: int, rate: str, delay: str | None,
            storage: dict[str, Any] | None = None) -> Iterator[tuple[Any, str, Path]]:
    """``(network, config path, work dir)``: hosts ``iod0..3`` running pvfs and ``r0..`` for
    the ranks, a launcher script; everything removed on exit, also on failure.
    ``storage``: the I/O daemons' ``[storage]`` table (``drive.storage_table``; None:
    posix)."""
    from pvfs.cluster.netns import Network, cleanup_stale

    cleanup_stale()
    hosts = [f"iod{i}" for i in range(4)] + [f"r{i}" for i in range(processes)]
    with tempfile.TemporaryDirectory(prefix="pvfs-collective-netns-") as d, \
            Network(hosts, rate=rate, delay=delay, subnet="10.214.0.0/24") as net:
        work = Path(d)
        static_neighbours(net, hosts)
        extra = {"storage": storage} if storage else {}
        cfg = net.make_config(work / "fs", iods=hosts[:4], connect_timeout=CONNECT_TIMEOUT,
                              extra=extra)
        net.start_daemons(cfg)
        (work / "map").write_text("".join(f"{net.addrs[h]} {net.ns(h)}\n" for h in hosts))
        rsh = work / "nsrsh"
        rsh.write_text(_RSH.format(map=work / "map"))
        rsh.chmod(0o755)
        yield net, cfg.path, work


def static_neighbours(net: Any, hosts: list[str]) -> None:
    """Every host learns every other host's hardware address for good (``nud permanent``):
    with 32+ ranks busy, neighbour (ARP) probes queued behind data in a saturated ``tbf``
    went unanswered three times and connects failed with "No route to host", while the same
    34 hosts connected at once without error when idle."""
    macs = {h: net.run(h, ["cat", "/sys/class/net/eth0/address"]).stdout.strip()
            for h in hosts}
    for h in hosts:
        batch = "".join(f"neigh replace {net.addrs[o]} lladdr {macs[o]} dev eth0 nud permanent\n"
                        for o in hosts if o != h)
        p = net.run(h, ["ip", "-batch", "-"], input=batch)
        if p.returncode != 0:
            raise RuntimeError(f"static neighbours on {h}: {p.stderr.strip()}")


def _kill_ranks(net: Any, nprocs: int) -> None:
    """After a failed job: kill what still runs on the ranks' hosts (orphaned ranks would
    spin on the cores the next job needs); the I/O daemons' hosts are left alone."""
    for i in range(nprocs):
        pids = subprocess.run(["ip", "netns", "pids", net.ns(f"r{i}")], capture_output=True,
                              text=True, check=False).stdout.split()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)


def run_job(net: Any, config: str, work: Path, nprocs: int, opts: dict[str, Any],
            timeout: float = 900) -> dict[str, Any]:
    """One window job on hosts ``r0..r<nprocs-1>``, one rank each; its RESULT.

    Raises:
        RuntimeError: the job failed or printed no result.
    """
    from pvfs.bench.collective.drive import mpiexec

    hosts = [f"r{i}" for i in range(nprocs)]
    hostfile = work / f"hosts-{nprocs}"
    hostfile.write_text("".join(f"{net.addrs[h]}:1\n" for h in hosts))
    cmd = [mpiexec(), "-f", str(hostfile), "-launcher", "rsh", "-launcher-exec",
           str(work / "nsrsh"), "-localhost", net.addrs["r0"], "-n", str(nprocs),
           sys.executable, "-m", "pvfs.bench.collective.mpi", config, json.dumps(opts)]
    proc = net.run("r0", cmd, env={**os.environ, **RANK_ENV}, timeout=timeout, cwd=str(work))
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"{label(opts)} with {nprocs} processes failed (rc {proc.returncode}):"
                       f" {proc.stderr.strip()[-800:]}")


def derived(r: dict[str, Any]) -> dict[str, Any]:
    """Fig. 5's and fig. 6's numbers of one result: the lock phase per access and per lock
    round (µs), and each phase's share of the clients' read time."""
    out: dict[str, Any] = {}
    acc, read = r.get("accesses", 0), r.get("read_us", 0)
    if acc:
        out["lock_us_per_access"] = round(r["phase_lock_us"] / acc, 1)
    if r.get("lock_rounds"):
        out["lock_us_per_round"] = round(r.get("phase_lock_us", 0) / r["lock_rounds"], 1)
    if read and acc:
        shares = {p: r[f"phase_{p}_us"] / read for p in PHASES}
        shares["other"] = max(0.0, 1 - sum(shares.values()))
        out["shares"] = {k: round(v, 4) for k, v in shares.items()}
    return out


def run(ranks: list[int], servers: list[str], repeat: int, rate: str,
        delay: str | None, progress: Any = None, save: Any = None,
        job_timeout: float = 900, variants: tuple[str, ...] = (),
        independent: set[int] | None = None, storage: dict[str, Any] | None = None,
        cold: bool = False, base: bool = True) -> dict[str, Any]:
    """Every rank count's jobs, ``repeat`` times in rotating order, on one harness sized for
    the largest job; results, medians and paired ratios. A job that fails is recorded in
    ``failures`` and the run goes on; ``save(data)`` is called after every job.
    ``storage``/``cold``: emulated disks for the I/O daemons and caches emptied before
    each window (as ``pvfs-admin bench collective --storage/--disk-cache/--cold``)."""
    groups = plan(ranks, servers, variants, independent, cold, base)
    jobs = [j for g in groups for j in g]
    runs: dict[int, dict[int, dict[str, Any]]] = {i: {} for i in range(len(jobs))}
    failures: list[dict[str, Any]] = []
    started, load_before = time.time(), _load()
    extra = {"storage": storage or {"default": "posix"}, "cold": cold}
    with harness(max(p for p, _ in jobs), rate, delay, storage) as (net, config, work):
        base = 0
        for g in groups:
            for rep in range(repeat):
                for i in rotated(g, rep):
                    nprocs, opts = g[i]
                    before = _load()
                    try:
                        r = run_job(net, config, work, nprocs, opts, timeout=job_timeout)
                    except (RuntimeError, subprocess.TimeoutExpired) as exc:
                        failures.append({"processes": nprocs, "method": label(opts),
                                         "repeat": rep, "error": str(exc)[-1500:]})
                        r = None
                        _kill_ranks(net, nprocs)
                    if r is not None:
                        r.update(derived(r), repeat=rep, load_before=before,
                                 load_after=_load())
                        runs[base + i][rep] = r
                    if progress:
                        progress(f"[{rep + 1}/{repeat}] {nprocs} processes {label(opts)}: "
                                 + (f"{r['mib_s']:.1f} MiB/s" if r else "FAILED"))
                    if save:
                        save(_data(jobs, runs, failures, started, load_before) | extra)
            base += len(g)
    return _data(jobs, runs, failures, started, load_before) | extra | {
        "ranks": ranks, "servers": servers, "repeat": repeat, "rate": rate, "delay": delay}


def _data(jobs: list[tuple[int, dict[str, Any]]], runs: dict[int, dict[int, dict[str, Any]]],
          failures: list[dict[str, Any]], started: float, load_before: float) -> dict[str, Any]:
    return {"results": [summary(list(runs[i].values())) for i in range(len(jobs)) if runs[i]],
            "runs": [r for i in range(len(jobs)) for r in runs[i].values()],
            "paired": paired(jobs, runs), "variant_pairs": variant_pairs(jobs, runs),
            "failures": failures, "window": WINDOW,
            "seconds": round(time.time() - started, 1), "load_before": load_before,
            "load_after": _load(), "host_per_rank": True, "rank_env": RANK_ENV}


def paired(jobs: list[tuple[int, dict[str, Any]]],
           runs: dict[int, dict[int, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Each ``servers`` job's MiB/s over ``independent``'s at the same clients *in the same
    repeat* (repeats where either failed are left out): per repeat, median, min, max."""
    base = {n: i for i, (n, o) in enumerate(jobs) if o["method"] == "independent"}
    out = []
    for i, (nprocs, opts) in enumerate(jobs):
        clients = nprocs - opts.get("lock_servers", 0)
        j = base.get(clients)
        if opts["method"] == "independent" or j is None:
            continue
        ratios = [runs[i][k]["mib_s"] / runs[j][k]["mib_s"] for k in sorted(runs[i])
                  if k in runs[j] and runs[j][k]["mib_s"] > 0]
        if ratios:
            out.append({"benchmark": "sliding_window", "ranks": clients,
                        "method": label(opts), "versus": "independent",
                        "ratios": [round(x, 3) for x in ratios],
                        "median": round(statistics.median(ratios), 3),
                        "min": round(min(ratios), 3), "max": round(max(ratios), 3),
                        "wins": sum(x > 1 for x in ratios)})
    return out


def variant_pairs(jobs: list[tuple[int, dict[str, Any]]],
                  runs: dict[int, dict[int, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Each variant (``--variants``, e.g. the code before a change) against the ``servers``
    job with the same clients and k *in the same repeat*: per repeat the ``servers`` job's
    value over the variant's (``ratio_of``: ``versus / method``; with the variant the old
    code, new over old) of MiB/s, pages read from the file and CPU per GiB; median, min,
    max."""
    base = {(n, o.get("lock_servers")): i for i, (n, o) in enumerate(jobs)
            if o["method"] == "servers"}
    out = []
    for i, (nprocs, opts) in enumerate(jobs):
        if opts["method"] in ("servers", "independent"):
            continue
        j = base.get((nprocs, opts.get("lock_servers")))
        if j is None:
            continue
        reps = [k for k in sorted(runs[i]) if k in runs[j]]
        row: dict[str, Any] = {"ranks": nprocs - opts.get("lock_servers", 0),
                               "method": label(opts), "versus": label(jobs[j][1]),
                               "ratio_of": "versus / method", "repeats": reps}
        for key in ("mib_s", "fs_read_pages", "cpu_s_per_gib"):
            xs = [runs[j][k][key] / runs[i][k][key] for k in reps if runs[i][k].get(key)]
            if xs:
                row[key] = {"ratios": [round(x, 3) for x in xs],
                            "median": round(statistics.median(xs), 3),
                            "min": round(min(xs), 3), "max": round(max(xs), 3)}
        out.append(row)
    return out


def summary(rs: list[dict[str, Any]]) -> dict[str, Any]:
    """One job's repeats: the median and range of its throughput, lock time, CPU per byte
    and phase shares (range = the repeats' min-max, the median's interval)."""
    def med(key: str, get: Any = None) -> dict[str, float] | None:
        xs = [get(r) if get else r.get(key) for r in rs]
        xs = [x for x in xs if x is not None]
        if not xs:
            return None
        return {"median": round(statistics.median(xs), 4), "lo": round(min(xs), 4),
                "hi": round(max(xs), 4)}

    first = rs[0]
    out = {"method": label(first), "ranks": first["ranks"],
           "lock_servers": first.get("lock_servers", 0), "n": len(rs),
           "mib_s": med("mib_s"), "cpu_s_per_gib": med("cpu_s_per_gib"),
           "lock_us_per_access": med("lock_us_per_access"),
           "lock_us_per_round": med("lock_us_per_round"),
           "fs_reads": med("fs_reads"), "pages_touched": first.get("pages_touched"),
           # issue 32: pages' worth read from the file (one read per page: pages_touched),
           # the repeats within 1.1 x, and what placed them
           "fs_read_pages": med("fs_read_pages"),
           "read_once": sum(r.get("fs_read_pages", 0) <= 1.1 * r.get("pages_touched", 0)
                            for r in rs),
           "evictions": med("evictions"), "ra_evictions": med("ra_evictions"),
           "ra_room_refused": med("ra_room_refused"),
           # issue 32's victim cache: pages cached from a copy an eviction left at the
           # home, and copies the homes dropped for room
           "victim_hits": med("victim_hits"), "victims_dropped": med("victims_dropped"),
           # the client ranks whose doorbells were on (over UDP: issue 32) and their rings
           "bells_on": med("bells_on"), "bells_udp": med("bells_udp"),
           "bell_rings": med("bell_rings"),
           # the ranks' main threads waiting for a core: share of the ranks' time
           "run_delay_share": med("run_delay_share"),
           "lock_server_queued": med("lock_server_queued"), "locks": med("locks"),
           # on emulated storage: the disks' accesses and modelled busy seconds (summed
           # over the I/O daemons) in the timed part
           "disk_accesses": med("", lambda r: (r.get("disk") or {}).get("accesses")),
           "disk_busy_s": med("", lambda r: (r.get("disk") or {}).get("busy_s"))}
    if "shares" in first:
        out["shares"] = {p: med(p, lambda r, p=p: r.get("shares", {}).get(p))
                         for p in (*PHASES, "other")}
    return out


def plot(data: dict[str, Any], path: str) -> None:
    """Figs. 4-6 side by side: MiB/s, the lock phase per access and the phase shares
    (medians; bars of fig. 4 and 5 span the repeats' range)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    names = sorted({r["method"] for r in data["results"]})
    for ax, key, title in ((axes[0], "mib_s", "fig. 4: MiB/s"),
                           (axes[1], "lock_us_per_access", "fig. 5: lock wait per access, µs")):
        for m in names:
            rows = sorted((r for r in data["results"] if r["method"] == m and r.get(key)),
                          key=lambda r: r["ranks"])
            if not rows:
                continue
            xs = [r["ranks"] for r in rows]
            mid = [r[key]["median"] for r in rows]
            err = [[r[key]["median"] - r[key]["lo"] for r in rows],
                   [r[key]["hi"] - r[key]["median"] for r in rows]]
            ax.errorbar(xs, mid, yerr=err, marker="o", capsize=3, label=m)
        ax.set_xlabel("clients")
        ax.set_title(title)
        ax.set_xscale("log", base=2)
        ax.legend(fontsize=7)
    _plot_shares(axes[2], data)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _plot_shares(ax: Any, data: dict[str, Any]) -> None:
    rows = [r for r in data["results"] if r.get("shares")]
    bottom = [0.0] * len(rows)
    for p in (*PHASES, "other"):
        vals = [r["shares"][p]["median"] if r["shares"][p] else 0 for r in rows]
        ax.bar(range(len(rows)), vals, bottom=bottom, label=p)
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    ax.set_xticks(range(len(rows)), [f"{r['method']}\nn={r['ranks']}" for r in rows],
                  fontsize=6, rotation=60)
    ax.set_title("fig. 6: share of the clients' read time")
    ax.legend(fontsize=7)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", default="8,16,32", help="client counts")
    ap.add_argument("--servers", default="1,2", help="lock servers k (or 'half': 50:50)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rate", default=RATE)
    ap.add_argument("--delay", default=None, help="netem one-way delay per link direction")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--plot", default=None)
    ap.add_argument("--note", default="")
    ap.add_argument("--job-timeout", type=float, default=900, help="seconds per mpiexec job")
    ap.add_argument("--variants", default="",
                    help="more methods with the first k, e.g. servers+ra-evict (issue 32's A/B)")
    ap.add_argument("--independent", default=None,
                    help="client counts that run the independent job (default: all)")
    ap.add_argument("--storage", default=None,
                    help="the I/O daemons' storage, e.g. emulated:ide-2000 (default posix)")
    ap.add_argument("--disk-cache", type=int, default=None,
                    help="bytes of the emulated disk's cache (0: none)")
    ap.add_argument("--no-base", action="store_true",
                    help="leave out the plain servers jobs (an A/B of two variants)")
    ap.add_argument("--cold", action="store_true",
                    help="empty the I/O daemons' caches before each window")
    args = ap.parse_args(argv)
    from pvfs.bench.collective.drive import storage_table

    table = storage_table(args.storage, args.disk_cache)
    command = "python -m pvfs.bench.collective.netns " + " ".join(
        argv if argv is not None else sys.argv[1:])

    def save(data: dict[str, Any]) -> None:
        data.update(command=command, note=args.note)
        Path(args.output).write_text(json.dumps(data, indent=1) + "\n")

    old = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # tear the harness down
    try:
        data = run([int(x) for x in args.ranks.split(",")], args.servers.split(","),
                   args.repeat, args.rate, args.delay,
                   progress=lambda s: print(s, file=sys.stderr, flush=True), save=save,
                   job_timeout=args.job_timeout,
                   variants=tuple(v for v in args.variants.split(",") if v),
                   independent=None if args.independent is None else
                   {int(x) for x in args.independent.split(",") if x},
                   storage=table, cold=args.cold, base=not args.no_base)
    finally:
        signal.signal(signal.SIGTERM, old)
    save(data)
    if args.plot:
        plot(data, args.plot)
    print(json.dumps(data["paired"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
