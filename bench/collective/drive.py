"""``pvfs-admin bench collective``: start the MPI jobs of :mod:`.mpi` and tabulate them.

Two studies (docs/collective.md):

1. DAChe's sliding window (table 1: 4 MiB cache per rank, 32 KiB pages, 64 KiB chunks, 40
   loops) against the number of ranks: ``independent`` reads against the group cache with
   each coordination, ``servers`` with 1 and 2 dedicated lock servers (figs. 3-6: locks,
   file-system calls, throughput).
2. The checkpoint kernels BTIO, FLASH-IO and S3D-IO (MPI-IO caching paper §5) under
   ``independent``, ``collective`` (two-phase), ``caching`` and ``write_behind``: bandwidth
   and file-system write calls (table 1), the I/O daemons' write requests beside them.

Unless told to use an existing file system, the study starts its own (4 I/O daemons, 64 KiB
stripe unit) in a temporary directory and stops it at the end. Methods are interleaved
(all methods of a point, then the next repeat) so a load change hits them alike.

``storage`` gives that private file system emulated disks (``emulated:ide-2000``: the
thesis' 4.2 MB/s IDE disk with 56 MB of cache in front, ``pvfs.models.disk``) instead of
the posix stripe files whose reads this machine's page cache answers; ``disk_cache``
overrides the emulated disk's cache. ``cold`` empties the I/O daemons' caches (the kernel's
page cache of the stripe files and the emulated disk's) after the sliding window's file is
written, before the timed part, so every first read of a chunk pays the disk.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

WINDOW = {"chunk": 64 << 10, "loops": 40, "page": 32 << 10, "cache": 4 << 20}
WINDOW_METHODS = ("independent", "rma", "thread", "servers")
#: ``PVFS_BENCH_COLLECTIVE_METHODS=independent,rma+ra,rma+nora``: the sliding window's
#: methods instead (a coordination, or ``COORD+ra`` / ``COORD+nora``: read-ahead on / off,
#: e.g. ``servers+ra``, ``thread+ra``)
METHODS_ENV = "PVFS_BENCH_COLLECTIVE_METHODS"


def window_methods() -> tuple[str, ...]:
    env = os.environ.get(METHODS_ENV)
    return tuple(m for m in env.split(",") if m) if env else WINDOW_METHODS


def coordination(method: str) -> str:
    """The coordination of a window method (``servers+ra`` -> ``servers``)."""
    return method.partition("+")[0]

CHECKPOINT_METHODS = ("independent", "collective", "sieving", "caching", "write_behind")
PARAMS = {
    "quick": {"btio": {"n": 36, "dumps": 10}, "flash": {"blocks": 20, "nxb": 8},
              "s3d": {"nx": 16, "checkpoints": 2}},
    "full": {"btio": {"n": 36, "dumps": 40}, "flash": {"blocks": 80, "nxb": 8},
             "s3d": {"nx": 24, "checkpoints": 2}},
}


def mpiexec() -> str:
    """The mpich wheel's ``mpiexec`` beside this Python (the venv), else the one on PATH."""
    here = Path(sys.executable).with_name("mpiexec")
    if here.exists():
        return str(here)
    from shutil import which

    found = which("mpiexec")
    if not found:
        raise RuntimeError("no mpiexec: pip install mpich mpi4py")
    return found


def run_job(config: str, nprocs: int, opts: dict[str, Any], timeout: float = 900) -> dict:
    """One ``mpiexec -n nprocs`` job; its RESULT line.

    Raises:
        RuntimeError: when the job fails or prints no result.
    """
    cmd = [mpiexec(), "-n", str(nprocs), sys.executable, "-m", "pvfs.bench.collective.mpi",
           config, json.dumps(opts)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"{opts.get('benchmark')}/{opts.get('method')} with {nprocs} ranks "
                       f"failed (rc {proc.returncode}): {proc.stderr.strip()[-800:]}")


def storage_table(storage: str | None, disk_cache: int | None = None) -> dict[str, Any] | None:
    """The ``[storage]`` table of the private file system: None for the default (posix),
    else ``{"default": KIND}`` plus ``cache_bytes`` when ``disk_cache`` is given.

    Raises:
        ValueError: an unknown kind or preset, or ``disk_cache`` without an emulated disk.
    """
    from pvfs.models.disk import parse_kind

    kind, name = parse_kind(storage or "posix")
    if kind == "posix":
        if disk_cache is not None:
            raise ValueError("a disk cache size needs emulated storage (emulated:PRESET)")
        return None
    table: dict[str, Any] = {"default": f"{kind}:{name}"}
    if disk_cache is not None:
        if disk_cache < 0:
            raise ValueError("the disk cache size cannot be negative")
        table["cache_bytes"] = int(disk_cache)
    return table


@contextlib.contextmanager
def private_cluster(iods: int = 4, storage: dict[str, Any] | None = None) -> Iterator[str]:
    """A file system of our own in a temporary directory (its config path); ``storage``:
    its ``[storage]`` table (:func:`storage_table`; None: posix)."""
    from pvfs.cluster.launch import down, make_config, up, write_config

    extra = {"storage": storage} if storage else {}
    with tempfile.TemporaryDirectory(prefix="pvfs-bench-collective-") as d:
        cfg = write_config(make_config(d, iods=iods, extra=extra), os.path.join(d, "pvfs.toml"))
        up(cfg)
        try:
            yield cfg.path
        finally:
            down(cfg)


def square_at_most(n: int) -> int:
    return max(1, math.isqrt(n)) ** 2


def plan(quick: bool, ranks: int, window_ranks: list[int] | None = None,
         benchmarks: list[str] | None = None,
         cold: bool = False) -> list[tuple[int, dict[str, Any]]]:
    """``(processes, options)`` of every job, in the order they run; ``cold``: the sliding
    window's jobs empty the I/O daemons' caches before they are timed."""
    jobs: list[tuple[int, dict[str, Any]]] = []
    benchmarks = benchmarks or ["sliding_window", "btio", "flash", "s3d"]
    if "sliding_window" in benchmarks:
        for n in window_ranks or ([2, ranks] if quick else [1, 2, 4, 8]):
            for method in window_methods():
                lockers = coordination(method) == "servers"
                servers = [1] if lockers and (quick or n < 2) else [1, 2] if lockers else [0]
                for k in servers:
                    opts = {"benchmark": "sliding_window", "method": method, **WINDOW}
                    if cold:
                        opts["cold"] = True
                    if lockers:
                        opts["lock_servers"] = k
                    jobs.append((n + k, opts))
    params = PARAMS["quick" if quick else "full"]
    for name in ("btio", "flash", "s3d"):
        if name not in benchmarks:
            continue
        n = square_at_most(ranks) if name == "btio" else ranks
        for method in CHECKPOINT_METHODS:
            jobs.append((n, {"benchmark": name, "method": method, "params": params[name]}))
    return jobs


def run_suite(config: str | None = None, quick: bool = False, ranks: int = 4,
              repeat: int = 1, window_ranks: list[int] | None = None,
              benchmarks: list[str] | None = None,
              progress: Callable[[str], None] | None = None,
              storage: str | None = None, disk_cache: int | None = None,
              cold: bool = False) -> dict[str, Any]:
    """Run every job ``repeat`` times (interleaved); the median run of each is kept.
    ``storage``/``disk_cache`` shape the private file system (:func:`storage_table`; not
    with ``config``), ``cold`` empties the daemons' caches before each window is timed.

    Raises:
        ValueError: ``storage`` or ``disk_cache`` with ``config``, or a bad storage kind.
    """
    table = storage_table(storage, disk_cache)
    if config is not None and table is not None:
        raise ValueError("storage options shape the private file system; the one of a "
                         "config keeps its own [storage]")
    jobs = plan(quick, ranks, window_ranks, benchmarks, cold=cold)
    private = config is None
    runs: dict[int, list[dict[str, Any]]] = {i: [] for i in range(len(jobs))}
    started = time.time()
    load_before = _load()
    with contextlib.ExitStack() as stack:
        if threading.current_thread() is threading.main_thread():
            # A plain SIGTERM would skip the private cluster's shutdown: make it an exit.
            old = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
            stack.callback(signal.signal, signal.SIGTERM, old)
        if config is None:
            config = stack.enter_context(private_cluster(storage=table))
        for rep in range(repeat):
            for i, (nprocs, opts) in enumerate(jobs):
                if progress:
                    progress(f"[{rep + 1}/{repeat}] {opts['benchmark']} {opts['method']}"
                             f"{' k=' + str(opts['lock_servers']) if 'lock_servers' in opts else ''}"
                             f" -n {nprocs}")
                result = run_job(config, nprocs, opts)
                result["load"] = _load()
                runs[i].append(result)
    results = []
    for i in range(len(jobs)):
        ordered = sorted(runs[i], key=lambda r: r["mib_s"])
        best = dict(ordered[len(ordered) // 2])
        best["runs_mib_s"] = [round(r["mib_s"], 3) for r in runs[i]]
        best["runs_load1"] = [r["load"][0] if r["load"] else None for r in runs[i]]
        best["runs_fs_reads"] = [r.get("fs_reads") for r in runs[i]]
        best["runs_cpu_s_per_gib"] = [r.get("cpu_s_per_gib") for r in runs[i]]
        if (target := read_once(best)) is not None:
            # every repeat, not just the median one, must read each page once
            target["repeats_met"] = sum(bool(t and t["pages_met"]) for t in
                                        (read_once(r) for r in runs[i]))
            best["read_once"] = target
        results.append(best)
    return {"results": results, "paired": paired_ratios(jobs, runs), "quick": quick,
            "ranks": ranks, "repeat": repeat,
            "seconds": round(time.time() - started, 1), "load_before": load_before,
            "load_after": _load(),
            "window": WINDOW, "params": PARAMS["quick" if quick else "full"],
            "storage": (table or {"default": "posix"}) if private else "config",
            "cold": cold}


def paired_ratios(jobs: list[tuple[int, dict[str, Any]]],
                  runs: dict[int, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Each method's bandwidth over its baselines' *in the same repeat* (the jobs of one
    repeat run back to back, so a change of load hits both sides of a ratio alike): per
    repeat, then median, min and max. Baselines: ``independent`` always, ``collective``
    (two-phase) for the checkpoints."""
    index: dict[tuple[str, int, str], int] = {}
    for i, (_, opts) in enumerate(jobs):
        r = runs[i][0]
        index[(r["benchmark"], r["ranks"], label(r))] = i
    out = []
    for (bench, ranks, name), i in index.items():
        for base in ("independent", "collective"):
            j = index.get((bench, ranks, base))
            if j is None or j == i:
                continue
            ratios = [a["mib_s"] / b["mib_s"] for a, b in zip(runs[i], runs[j], strict=True)
                      if b["mib_s"] > 0]
            if not ratios:
                continue
            out.append({"benchmark": bench, "ranks": ranks, "method": name, "versus": base,
                        "ratios": [round(x, 3) for x in ratios],
                        "median": round(statistics.median(ratios), 3),
                        "min": round(min(ratios), 3), "max": round(max(ratios), 3),
                        "wins": sum(x > 1 for x in ratios)})
    return out


def paired_rows(data: dict[str, Any]) -> list[list[Any]]:
    """Rows for people from ``data["paired"]``."""
    return [[p["benchmark"], p["method"], p["ranks"], p["versus"], f"{p['median']:.2f}x",
             f"{p['min']:.2f}-{p['max']:.2f}", f"{p['wins']}/{len(p['ratios'])}"]
            for p in data.get("paired", [])]


PAIRED_HEADERS = ["benchmark", "method", "ranks", "versus", "median ratio", "range", "wins"]


def _load() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def label(r: dict[str, Any]) -> str:
    if coordination(r["method"]) == "servers":
        return f"{r['method']}(k={r.get('lock_servers', 1)})"
    return r["method"]


def table_rows(data: dict[str, Any]) -> list[list[Any]]:
    """Rows for people: speed-up against ``independent`` of the same benchmark and ranks."""
    base = {(r["benchmark"], r["ranks"]): r["mib_s"] for r in data["results"]
            if r["method"] == "independent"}
    rows = []
    for r in data["results"]:
        ref = base.get((r["benchmark"], r["ranks"]))
        rows.append([r["benchmark"], label(r), r["ranks"], f"{r['mib_s']:.2f}",
                     f"{r['mib_s'] / ref:.2f}x" if ref else "-", r.get("fs_writes", 0),
                     r.get("fs_reads", 0), r.get("iod_write_requests", 0), r.get("locks", 0),
                     r.get("pages_touched", "-"), r.get("fs_read_pages", "-"),
                     r.get("fs_writes_straddling", "-"),
                     f"{r['cpu_s_per_gib']:.2f}" if "cpu_s_per_gib" in r else "-"])
    return rows


HEADERS = ["benchmark", "method", "ranks", "MiB/s", "vs indep", "fs writes", "fs reads",
           "iod writes", "locks", "pages touched", "fs read pages", "straddling",
           "CPU s/GiB"]


def read_once(r: dict[str, Any], slack: float = 1.1) -> dict[str, Any] | None:
    """Issue 32's target for a caching row of the window: file-system reads at most
    ``slack`` times the distinct pages the ranks read, counted in calls (``fs_reads``,
    the target as written) and in pages' worth of bytes (``fs_read_pages``, the stricter
    reading: one read *per page*). None for rows it does not apply to."""
    if r.get("benchmark") != "sliding_window" or r.get("method") == "independent" \
            or not r.get("pages_touched"):
        return None
    limit = slack * r["pages_touched"]
    return {"calls_met": r["fs_reads"] <= limit,
            "pages_met": r.get("fs_read_pages", float("inf")) <= limit}


def plot(data: dict[str, Any], path: str) -> None:
    """Sliding window against ranks and checkpoint bandwidth by method. With repeats, the
    window panel shows each method's paired ratio over independent reads (median, range) —
    absolute medians of separate runs mislead on a shared machine."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cps = [r for r in data["results"] if r["benchmark"] != "sliding_window"]
    if cps:
        fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
    else:  # a sliding-window run only (--only sliding_window): one panel
        fig, a = plt.subplots(1, 1, figsize=(6.5, 4.5))
    win = [r for r in data["results"] if r["benchmark"] == "sliding_window"]
    paired = [p for p in data.get("paired", []) if p["benchmark"] == "sliding_window"
              and p["versus"] == "independent"]
    if paired and data.get("repeat", 1) > 1:
        for name in sorted({p["method"] for p in paired}):
            pts = sorted((p["ranks"], p["median"], p["min"], p["max"]) for p in paired
                         if p["method"] == name)
            xs = [x[0] for x in pts]
            a.errorbar(xs, [x[1] for x in pts],
                       yerr=[[x[1] - x[2] for x in pts], [x[3] - x[1] for x in pts]],
                       marker="o", capsize=3, label=name)
        a.axhline(1.0, color="grey", lw=1, ls="--")
        a.set_yscale("log")
        a.set_ylabel("ratio to independent, same repeat (median, range)")
    else:
        for name in sorted({label(r) for r in win}):
            pts = sorted((r["ranks"], r["mib_s"]) for r in win if label(r) == name)
            a.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
        a.set_ylabel("MiB/s")
    a.set_xlabel("ranks (clients)")
    a.set_title("sliding window (DAChe table 1)")
    a.legend(fontsize=8)
    if not cps:
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        return
    names = [n for n in ("btio", "flash", "s3d") if any(r["benchmark"] == n for r in cps)]
    width = 0.8 / len(CHECKPOINT_METHODS)
    for k, method in enumerate(CHECKPOINT_METHODS):
        vals = [next((r["mib_s"] for r in cps if r["benchmark"] == n and r["method"] == method),
                     0) for n in names]
        xs = [i + k * width for i in range(len(names))]
        bars = b.bar(xs, vals, width, label=method)
        for bar, n in zip(bars, names, strict=True):
            w = next((r["fs_writes"] for r in cps if r["benchmark"] == n
                      and r["method"] == method), None)
            if w is not None:
                b.annotate(str(w), (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                           ha="center", va="bottom", fontsize=7)
    b.set_xticks([i + 0.4 - width / 2 for i in range(len(names))], names)
    b.set_yscale("log")
    b.set_ylabel("MiB/s (log); labels: file-system write calls")
    b.set_title(f"checkpoints, {cps[0]['ranks'] if cps else '?'} ranks")
    b.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
