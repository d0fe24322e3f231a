"""Metadata rates on pvfs and its peers (mdtest-style): creates, stats, removes and ``ls -l``.

::

    python bench/meta.py --target gluster --target moosefs --target pvfs \\
        --procs 1 4 --files 2000 --ls-entries 10000 --repeats 3 --json meta

Targets are those of ``bench/fio/run.py`` (``local``, ``gluster``, ``moosefs``, ``pvfs`` — a
private pvfs mounted with ``--pvfs-options`` —, or an existing directory as ``NAME=DIR``).

Phases, for each ``N`` of ``--procs``, each run by ``N`` forked processes that start every
phase together (a barrier) — what mdtest ``-F -n FILES`` does:

* ``own``: each process in its own directory: ``create`` (``open(O_CREAT|O_EXCL|O_WRONLY)`` +
  ``close`` of ``--files`` empty files), then ``stat`` of each, then ``remove`` (``unlink``);
* ``shared``: the same with every process's files in one directory.

A phase's rate is all processes' operations divided by the time from the first process's
start to the last one's end. Then ``ls``: ``--ls-entries`` empty files are made in one
directory (untimed), every cache is dropped (``drop_caches``) and ``ls -l DIR`` is timed
(``ls-cold``), then timed again at once (``ls-warm``); entries per second.

Targets run back to back per repeat, the first rotating each repeat; the table shows medians
and the ratio of ``--subject`` (default ``pvfs``) to the best other target. For a pvfs the
manager's and I/O daemons' request counts per operation over each phase are saved too
(``daemon_ops``: what each file operation costs in requests, and the daemons' time in them).
``--json NAME`` saves ``bench/results/NAME.json`` with the machine, load and command.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pvfs.bench.common import (
    drop_caches,
    exit_on_sigterm,
    format_ratio,
    format_table,
    median,
    ratio,
    write_results,
)
from pvfs.bench.fio.run import open_target, parse_target, pvfs_for

log = logging.getLogger("bench.meta")

OPS = ("create", "stat", "remove")
LAYOUTS = ("own", "shared")


# ----------------------------------------------------------------------------- workers
def _worker(base: str, rank: int, layout: str, files: int, barrier: Any, out: Any) -> None:
    """One mdtest process: create, stat, remove ``files`` names; report (op, t0, t1)."""
    directory = os.path.join(base, f"d{rank}") if layout == "own" else base
    names = [os.path.join(directory, f"f.{rank}.{i}") for i in range(files)]
    flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY
    try:
        if layout == "own":
            os.mkdir(directory)
        times = []
        for op in OPS:
            barrier.wait()
            t0 = time.perf_counter()
            if op == "create":
                for n in names:
                    os.close(os.open(n, flags, 0o644))
            elif op == "stat":
                for n in names:
                    os.stat(n)
            else:
                for n in names:
                    os.unlink(n)
            times.append((op, t0, time.perf_counter()))
        if layout == "own":
            os.rmdir(directory)
        out.put((rank, times, None))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which fails
        barrier.abort()
        out.put((rank, [], repr(exc)))


def run_phases(base: str, procs: int, files: int, layout: str) -> dict[str, float]:
    """``procs`` processes through create/stat/remove; operations per second per op."""
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(procs)
    out = ctx.Queue()
    os.makedirs(base, exist_ok=True)
    workers = [ctx.Process(target=_worker, args=(base, r, layout, files, barrier, out))
               for r in range(procs)]
    for w in workers:
        w.start()
    reports = [out.get(timeout=3600) for _ in workers]
    for w in workers:
        w.join()
    errors = [e for _, _, e in reports if e]
    if errors:
        raise RuntimeError(f"mdtest worker failed: {errors[0]}")
    rates = {}
    for i, op in enumerate(OPS):
        start = min(times[i][1] for _, times, _ in reports)
        end = max(times[i][2] for _, times, _ in reports)
        rates[op] = procs * files / (end - start)
    with contextlib.suppress(OSError):
        os.rmdir(base)
    return rates


def _make_files(directory: str, count: int, procs: int = 4) -> None:
    """``count`` empty files in ``directory`` (untimed), made by ``procs`` processes."""
    os.makedirs(directory, exist_ok=True)

    def part(rank: int) -> None:
        for i in range(rank, count, procs):
            os.close(os.open(os.path.join(directory, f"e{i:06d}"),
                             os.O_CREAT | os.O_WRONLY, 0o644))

    ctx = mp.get_context("fork")
    ps = [ctx.Process(target=part, args=(r,)) for r in range(procs)]
    for p in ps:
        p.start()
    for p in ps:
        p.join()
        if p.exitcode:
            raise RuntimeError(f"making {count} files in {directory} failed")


def time_ls(directory: str, count: int, drop: bool = True) -> dict[str, float]:
    """``ls -l`` of a directory of ``count`` entries, cold (caches dropped unless not
    ``drop``) then warm."""
    out = {}
    for label in ("ls-cold", "ls-warm"):
        if label == "ls-cold" and drop:
            drop_caches()
        t0 = time.perf_counter()
        subprocess.run(["ls", "-l", directory], check=True, stdout=subprocess.DEVNULL)
        out[label] = count / (time.perf_counter() - t0)
    return out


# ----------------------------------------------------------------------------- pvfs probes
def pvfs_op_counts(config: str) -> dict[str, dict[str, list[float]]]:
    """Every pvfs daemon's ``{op: [requests, seconds]}`` from the ``metrics`` request."""
    import pvfs
    from pvfs.client.datapath import MGR

    out: dict[str, dict[str, list[float]]] = {}
    with pvfs.connect(config) as fs:
        for key, name in [(MGR, "mgr")] + [(i, f"iod{i}") for i in range(fs.config.niods)]:
            fams = fs.data.call(key, {"op": "metrics", "cred": fs.cred})["families"]
            ops: dict[str, list[float]] = {}
            for fam in fams:
                for suffix, labels, value in fam["samples"]:
                    op = labels.get("op")
                    if op is None:
                        continue
                    if fam["name"] == "pvfs_requests_total":
                        ops.setdefault(op, [0, 0.0])[0] = value
                    elif fam["name"] == "pvfs_request_duration_seconds" and suffix == "_sum":
                        ops.setdefault(op, [0, 0.0])[1] = value
            out[name] = ops
    return out


def op_delta(before: dict, after: dict) -> dict[str, dict[str, list[float]]]:
    """Requests and seconds per daemon and op between two :func:`pvfs_op_counts`."""
    out: dict[str, dict[str, list[float]]] = {}
    for daemon, ops in after.items():
        prev = before.get(daemon, {})
        for op, (n, s) in ops.items():
            p = prev.get(op, [0, 0.0])
            if n - p[0]:
                out.setdefault(daemon, {})[op] = [n - p[0], round(s - p[1], 6)]
    return out


# ----------------------------------------------------------------------------- the matrix
def measure_target(directory: str, procs: list[int], files: int, ls_entries: int,
                   probe: Callable[[], dict] | None, drop: bool = True) -> dict[str, Any]:
    """Every phase on one target once; ``{phase: rate}`` and, with ``probe``, daemon ops."""
    rates: dict[str, float] = {}
    ops: dict[str, Any] = {}
    tag = f"meta-{os.getpid()}-{time.monotonic_ns()}"
    for n in procs:
        for layout in LAYOUTS:
            before = probe() if probe else None
            got = run_phases(os.path.join(directory, f"{tag}-{layout}{n}"), n, files, layout)
            if probe:
                ops[f"{layout}-p{n}"] = op_delta(before, probe())
            for op, r in got.items():
                rates[f"{op}-{layout}-p{n}"] = r
    if ls_entries:
        where = os.path.join(directory, f"{tag}-ls")
        _make_files(where, ls_entries)
        before = probe() if probe else None
        rates.update(time_ls(where, ls_entries, drop))
        if probe:
            ops["ls"] = op_delta(before, probe())
        shutil.rmtree(where, ignore_errors=True)
    return {"rates": rates, "daemon_ops": ops}


def phase_names(procs: list[int], ls_entries: int) -> list[str]:
    names = [f"{op}-{layout}-p{n}" for n in procs for layout in LAYOUTS for op in OPS]
    return names + (["ls-cold", "ls-warm"] if ls_entries else [])


def build_report(runs: dict[str, list[dict]], phases: list[str], subject: str) -> dict:
    """Medians per target and phase; the subject's ratio to the best other target."""
    report: dict[str, Any] = {}
    for ph in phases:
        med = {t: median(r["rates"].get(ph) for r in rs) for t, rs in runs.items()}
        others = {t: v for t, v in med.items() if t != subject and v is not None}
        best = max(others, key=lambda t: others[t]) if others else None
        report[ph] = {"median": med, "best_peer": best,
                      "ratio_vs_best": ratio(med.get(subject), others.get(best)) if best else None}
    return report


def format_report(report: dict, targets: list[str], subject: str) -> str:
    rows = []
    for ph, cell in report.items():
        row = [ph] + [("-" if cell["median"][t] is None else f"{cell['median'][t]:.0f}")
                      for t in targets]
        row += [cell["best_peer"] or "-", format_ratio(cell["ratio_vs_best"])]
        rows.append(row)
    return format_table(["phase (ops/s)"] + targets + ["best other", f"{subject}/best"], rows)


@contextlib.contextmanager
def directory_targets(named: list[tuple[str, str]], workdir: Path, options: str
             ) -> Iterator[list[tuple[str, str, Callable[[], dict] | None]]]:
    from pvfs.bench.fio.pvfs_target import CONFIG_ENV

    with contextlib.ExitStack() as stack:
        stack.enter_context(pvfs_for(named, workdir, options))
        out = []
        for name, spec in named:
            t = stack.enter_context(open_target(name, spec, workdir))
            if t.directory is None:
                raise ValueError(f"target {name}: needs a directory target")
            probe = None
            if spec == "pvfs":
                config = os.environ[CONFIG_ENV]
                probe = lambda c=config: pvfs_op_counts(c)
            out.append((name, t.directory, probe))
        yield out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="example: python bench/meta.py --target gluster "
                                        "--target moosefs --target pvfs --json meta")
    ap.add_argument("--target", action="append", default=[], metavar="NAME=SPEC",
                    help="local, gluster, moosefs, pvfs or NAME=DIR (repeatable)")
    ap.add_argument("--pvfs-options", default="", help="mount options of the pvfs target")
    ap.add_argument("--procs", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--files", type=int, default=2000, help="files per process (2000)")
    ap.add_argument("--ls-entries", type=int, default=10000, help="0: no ls phase")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--subject", default="pvfs", help="target compared with the best other")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--json", metavar="NAME")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    exit_on_sigterm()
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(name)s %(message)s")
    named = [parse_target(t) for t in args.target]
    if not named:
        ap.error("no target")
    names = [n for n, _ in named]
    own = args.workdir is None
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="pvfs-meta-")).resolve()
    runs: dict[str, list[dict]] = {n: [] for n in names}
    load = []
    try:
        with directory_targets(named, workdir, args.pvfs_options) as targets:
            for rep in range(args.repeats):
                k = rep % len(targets)
                for name, directory, probe in targets[k:] + targets[:k]:
                    load.append(os.getloadavg()[0])
                    r = measure_target(directory, args.procs, args.files, args.ls_entries,
                                       probe)
                    runs[name].append(r)
                    log.info("rep %d %s: %s", rep + 1, name,
                             " ".join(f"{p}={v:.0f}" for p, v in r["rates"].items()))
    finally:
        if own:
            shutil.rmtree(workdir, ignore_errors=True)
    phases = phase_names(args.procs, args.ls_entries)
    report = build_report(runs, phases, args.subject)
    print(format_report(report, names, args.subject))
    if args.json:
        from pvfs.bench.fio import pvfs_target  # peak memory of the pvfs processes, as they stopped
        path = write_results(args.json, {
            "params": {"procs": args.procs, "files": args.files, "ls_entries": args.ls_entries,
                       "repeats": args.repeats, "pvfs_mount_options": args.pvfs_options},
            "targets": dict(named), "subject": args.subject,
            "load_1min_at_each_run": load, "results": report, "runs": runs,
            "pvfs_peak_rss": pvfs_target.PEAK_RSS})
        print(f"saved {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
