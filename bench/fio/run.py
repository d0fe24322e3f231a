"""fio on pvfs and its peers: the same job set on every target, interleaved, as ratios.

::

    python bench/fio/run.py --target local --target gluster --target moosefs \\
        --size 256M --runtime 10 --repeats 3 --baseline local --json fio_peers
    python bench/fio/run.py --all --target pvfs=/mnt/pvfs --baseline gluster --json fio

``--all`` (what ``make bench`` runs) is issue 4's comparison in one run: it starts a private
pvfs (manager + 4 I/O daemons on 127.0.0.1) and adds the targets ``local``, ``gluster``,
``moosefs``, ``pvfs`` (the FUSE mount, options from ``--pvfs-options``) and ``pvfs-native``
(the native API through the Python runner), then prints the ratios of ``pvfs`` to every other
target as well; everything it started is stopped and unmounted at the end.

Targets (``--target NAME=SPEC`` or just ``--target SPEC``, repeatable):

* ``local`` — a fresh directory under ``--workdir`` on the local file system;
* ``gluster`` — a private 4-brick GlusterFS distribute volume (:mod:`bench.peers.gluster`);
* ``moosefs`` — a private MooseFS, one chunkserver, goal 1 (:mod:`bench.peers.moosefs`);
* ``pylocal`` — the Python-callable runner on a local directory (checks that runner);
* ``pvfs`` — a pvfs FUSE mount of a private cluster (:mod:`bench.fio.pvfs_target`);
* ``pvfs-native`` — the same cluster through ``pvfs.connect`` pread/pwrite (the Python runner);
* ``pyfuse3-null`` — a pyfuse3 file system that does no work (:mod:`bench.fio.nullfs`): the
  ceiling of any pyfuse3 mount, pvfs's included;
* ``passthrough_hp:BINARY`` — libfuse's C ``example/passthrough_hp --nopassthrough`` over a
  local directory: the ceiling of any FUSE design on this machine (data through user space);
* ``py:MODULE:FUNC`` — ``FUNC(workdir)`` is a context manager yielding an opener; the job set
  runs through it in Python threads (:mod:`bench.fio.pyjobs`; the pvfs native API hook);
* any other SPEC — an existing directory, e.g. a pvfs mount: ``--target pvfs=/mnt/pvfs``.

Job set (:func:`bench.fio.jobs.default_jobs`): sequential 1 MiB write and read, random 4 KiB
write and cached random 4 KiB read, each with 1 and 4 jobs; buffered ``psync`` I/O, one file
of ``--size`` per job, ``--runtime`` seconds each, writes end with ``fsync``. For every job
the targets run back to back, rotating which goes first each repeat (A/B/C, B/C/A, …); the
median of the repeats is compared with the baseline.

``--only`` may also name a job of :func:`bench.fio.jobs.extra_jobs`: ``randread-64k-cached-j8``
(issue 30's request rate, with ``--direct``).

Cache state: uncached reads start with the client's page cache for the files dropped (fio
``invalidate=1``; servers on this machine keep theirs), or with every cache dropped with
``--cold``. Cached 4 KiB random reads first read the files once and keep them cached
(``invalidate=0``), as issue 4's goal asks.

CPU: every run records the CPU seconds the whole machine spent busy during its timed part
(``/proc/stat``; fio, the target's processes and the kernel alike, since the targets run one
at a time), and the report gives their median per GiB moved beside the figures
(``CPU s/GiB``): what a target's throughput cost the machine.

``--json NAME`` saves ``bench/results/NAME.json`` (machine, command, timestamp, parameters,
every run and the medians and ratios).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pvfs.bench.common import (
    cpu_per_gib,
    drop_caches,
    ensure_apt,
    exit_on_sigterm,
    format_bytes_rate,
    format_ratio,
    format_table,
    machine_cpu_seconds,
    median,
    ratio,
    write_results,
)
from pvfs.bench.fio import pyjobs
from pvfs.bench.fio.jobs import (
    JobResult,
    JobSpec,
    default_jobs,
    extra_jobs,
    fio_args,
    layout_args,
    parse_fio_json,
    preread_args,
)
from pvfs.units import parse_size

log = logging.getLogger("bench.fio")

BUILTIN = ("local", "gluster", "moosefs", "pylocal", "pvfs", "pvfs-native", "pyfuse3-null")
ALL_BASELINES = ("local", "gluster", "moosefs")
ALL_PVFS = ("pvfs", "pvfs-native")
PVFS_SPECS = ("pvfs", "pvfs-native")


@dataclass
class Target:
    """A place the job set runs: a directory (run with fio) or an opener (run in Python)."""

    name: str
    spec: str
    directory: str | None = None
    opener: pyjobs.Opener | None = None

    @property
    def kind(self) -> str:
        return "fio" if self.directory is not None else "python"


def parse_target(text: str) -> tuple[str, str]:
    """``"NAME=SPEC"`` → ``(NAME, SPEC)``; a bare ``"SPEC"`` is named after itself."""
    if "=" in text:
        name, spec = text.split("=", 1)
        if not name or not spec:
            raise ValueError(f"bad --target {text!r}: want NAME=SPEC")
        return name, spec
    return text, text


def _load_factory(spec: str) -> Callable[[str], contextlib.AbstractContextManager[Any]]:
    """``"py:MODULE:FUNC"`` → the callable ``MODULE.FUNC``."""
    try:
        _, module, func = spec.split(":", 2)
    except ValueError:
        raise ValueError(f"bad python target {spec!r}: want py:MODULE:FUNC") from None
    return getattr(importlib.import_module(module), func)


@contextlib.contextmanager
def open_target(name: str, spec: str, workdir: Path) -> Iterator[Target]:
    """Bring up one target (starting a peer if it is one); tear it down on exit."""
    here = workdir / name
    if spec == "local":
        here.mkdir(parents=True, exist_ok=True)
        try:
            yield Target(name, spec, directory=str(here))
        finally:
            shutil.rmtree(here, ignore_errors=True)
    elif spec == "gluster":
        from pvfs.bench.peers.gluster import gluster_volume

        with gluster_volume(here, bricks=4) as mnt:
            yield Target(name, spec, directory=mnt)
        shutil.rmtree(here, ignore_errors=True)
    elif spec == "moosefs":
        from pvfs.bench.peers.moosefs import moosefs_mount

        with moosefs_mount(here, chunkservers=1) as mnt:
            yield Target(name, spec, directory=mnt)
        shutil.rmtree(here, ignore_errors=True)
    elif spec == "pylocal":
        here.mkdir(parents=True, exist_ok=True)
        try:
            with pyjobs.local_opener(str(here)) as opener:
                yield Target(name, spec, opener=opener)
        finally:
            shutil.rmtree(here, ignore_errors=True)
    elif spec == "pvfs":
        from pvfs.bench.fio.pvfs_target import CONFIG_ENV, pvfs_mount

        with pvfs_mount(os.environ[CONFIG_ENV], here, os.environ.get(_OPTS_ENV, "")) as mnt:
            sub = Path(mnt) / "fio"
            sub.mkdir(exist_ok=True)
            yield Target(name, spec, directory=str(sub))
        shutil.rmtree(here, ignore_errors=True)
    elif spec == "pvfs-native":
        from pvfs.bench.fio.pvfs_target import native_opener

        with native_opener(str(here)) as opener:
            yield Target(name, spec, opener=opener)
    elif spec == "pyfuse3-null":
        from pvfs.bench.fio.nullfs import null_mount

        with null_mount(str(here / "mnt")) as mnt:
            yield Target(name, spec, directory=mnt)
        shutil.rmtree(here, ignore_errors=True)
    elif spec.startswith("passthrough_hp:"):
        from pvfs.bench.fio.nullfs import passthrough_hp_mount

        with passthrough_hp_mount(spec.split(":", 1)[1], str(here / "root"),
                                  str(here / "mnt")) as mnt:
            yield Target(name, spec, directory=mnt)
        shutil.rmtree(here, ignore_errors=True)
    elif spec.startswith("py:"):
        here.mkdir(parents=True, exist_ok=True)
        with _load_factory(spec)(str(here)) as opener:
            yield Target(name, spec, opener=opener)
    else:
        if not os.path.isdir(spec):
            raise ValueError(f"target {name}: {spec!r} is neither built in nor a directory")
        sub = Path(spec) / f"fio-bench-{os.getpid()}"
        sub.mkdir(exist_ok=True)
        try:
            yield Target(name, spec, directory=str(sub))
        finally:
            shutil.rmtree(sub, ignore_errors=True)


_OPTS_ENV = "PVFS_BENCH_MOUNT_OPTIONS"


@contextlib.contextmanager
def pvfs_for(named: list[tuple[str, str]], workdir: Path, options: str) -> Iterator[None]:
    """Start the private pvfs the ``pvfs``/``pvfs-native`` targets use (if any is named)."""
    if not any(spec in PVFS_SPECS for _, spec in named):
        yield
        return
    from pvfs.bench.fio.pvfs_target import CONFIG_ENV, pvfs_cluster

    saved = {k: os.environ.get(k) for k in (CONFIG_ENV, _OPTS_ENV)}
    with pvfs_cluster(workdir / "pvfs-fs") as config:
        os.environ[CONFIG_ENV] = config
        os.environ[_OPTS_ENV] = options
        try:
            yield
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def format_subject_ratios(report: dict[str, Any], jobs: list[JobSpec], subject: str,
                          others: list[str]) -> str:
    """Bandwidth of ``subject`` divided by each other target's, per job."""
    rows = []
    for job in jobs:
        mine = report[job.name][subject]["median"]["bw_bytes"]
        rows.append([job.name] + [format_ratio(ratio(mine, report[job.name][o]["median"]
                                                     ["bw_bytes"])) for o in others])
    return format_table(["job"] + [f"{subject}/{o}" for o in others], rows)


def _fio(args: list[str], timeout: float) -> JobResult:
    with tempfile.NamedTemporaryFile("r", suffix=".json", prefix="fio-") as out:
        proc = subprocess.run([*args, "--output-format=json", f"--output={out.name}"],
                              check=False, capture_output=True, text=True, timeout=timeout)
        text = Path(out.name).read_text()
    if proc.returncode != 0:
        raise RuntimeError(f"fio failed ({proc.returncode}): {' '.join(args)}\n"
                           f"{proc.stderr.strip()}\n{text[-2000:]}")
    return parse_fio_json(text)


def prepare(target: Target, size: int, numjobs: int) -> None:
    """Lay out the files ``numjobs`` workers use (untimed)."""
    if target.directory is not None:
        _fio(layout_args(target.directory, size, numjobs), timeout=3600)
    else:
        assert target.opener is not None
        pyjobs.layout(target.opener, size, numjobs)


def run_one(target: Target, job: JobSpec, size: int, runtime: float, *, cold: bool = False,
            direct: bool = False) -> JobResult:
    """One timed run of ``job`` on ``target`` (with the cache preparation it asks for), with
    the CPU time the machine spent on the timed part (``JobResult.cpu_s``)."""
    os.sync()
    if cold and job.is_read and not job.cached:
        drop_caches()
    if target.directory is None:
        assert target.opener is not None
        cpu0 = machine_cpu_seconds()
        r = pyjobs.run_job(target.opener, job, size, runtime)
    else:
        if job.cached:
            _fio(preread_args(target.directory, size, job.numjobs), timeout=3600)
        cpu0 = machine_cpu_seconds()
        r = _fio(fio_args(job, target.directory, size, runtime, direct=direct),
                 timeout=runtime * 4 + 600)
    return dataclasses.replace(r, cpu_s=machine_cpu_seconds() - cpu0)


def summarize(runs: list[JobResult]) -> dict[str, float | None]:
    """Median of every field over the repeats, and of the CPU seconds per GiB moved."""
    keys = ("bw_bytes", "iops", "lat_mean_us", "lat_p99_us")
    out = {k: median(getattr(r, k) for r in runs) for k in keys}
    out["cpu_s_per_gib"] = median(cpu_per_gib(r.cpu_s, r.io_bytes) for r in runs)
    return out


def run_matrix(targets: list[Target], jobs: list[JobSpec], size: int, runtime: float,
               repeats: int, *, cold: bool = False, direct: bool = False,
               progress: Callable[[str], None] | None = None
               ) -> dict[str, dict[str, list[JobResult]]]:
    """Every job on every target, ``repeats`` times, interleaved; ``{job: {target: runs}}``.

    For each job the targets run back to back and the order rotates each repeat, so slow
    drifts of the machine hit every target alike.
    """
    results: dict[str, dict[str, list[JobResult]]] = {}
    for job in jobs:
        per = results.setdefault(job.name, {t.name: [] for t in targets})
        for rep in range(repeats):
            k = rep % len(targets)
            for t in targets[k:] + targets[:k]:
                r = run_one(t, job, size, runtime, cold=cold, direct=direct)
                per[t.name].append(r)
                if progress:
                    progress(f"{job.name:24} {t.name:10} rep {rep + 1}/{repeats}: "
                             f"{format_bytes_rate(r.bw_bytes):>12} {r.iops:10.0f} IOPS")
    return results


def build_report(results: dict[str, dict[str, list[JobResult]]], jobs: list[JobSpec],
                 baseline: str) -> dict[str, Any]:
    """Medians and bandwidth ratios vs. ``baseline`` for every job and target."""
    report: dict[str, Any] = {}
    for job in jobs:
        per = results[job.name]
        medians = {name: summarize(runs) for name, runs in per.items()}
        base_bw = medians[baseline]["bw_bytes"]
        report[job.name] = {
            name: {
                "runs": [r.to_dict() for r in per[name]],
                "median": medians[name],
                "ratio_vs_baseline": ratio(medians[name]["bw_bytes"], base_bw),
            }
            for name in per
        }
    return report


def format_report(report: dict[str, Any], jobs: list[JobSpec], target_names: list[str],
                  baseline: str) -> str:
    """Median MiB/s (sequential) or IOPS (random) per target, and the ratio to baseline."""
    headers = ["job"]
    for n in target_names:
        headers.append(n)
        if n != baseline:
            headers.append(f"{n}/{baseline}")
    rows = []
    for job in jobs:
        row: list[Any] = [job.name]
        for n in target_names:
            cell = report[job.name][n]
            m = cell["median"]
            if job.is_random:
                row.append("-" if m["iops"] is None else f"{m['iops']:.0f} IOPS")
            else:
                row.append(format_bytes_rate(m["bw_bytes"]))
            if n != baseline:
                row.append(format_ratio(cell["ratio_vs_baseline"]))
        rows.append(row)
    return format_table(headers, rows)


def format_cpu(report: dict[str, Any], jobs: list[JobSpec], target_names: list[str]) -> str:
    """Median CPU seconds per GiB moved, per job and target: the whole machine's busy time
    over the timed run (fio, the file system's processes, the kernel) divided by the bytes
    fio moved (issue 30: reported beside each figure)."""
    rows = []
    for job in jobs:
        row: list[Any] = [job.name]
        for n in target_names:
            v = report[job.name][n]["median"].get("cpu_s_per_gib")
            row.append("-" if v is None else f"{v:.2f}")
        rows.append(row)
    return format_table(["CPU s/GiB"] + target_names, rows)


def main(argv: list[str] | None = None) -> int:
    ap = _parser()
    args = ap.parse_args(argv)
    exit_on_sigterm()
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(name)s %(message)s")

    named = _named_targets(ap, args)
    if args.all and args.json is None:
        args.json = "fio"
    names = [n for n, _ in named]
    if len(set(names)) != len(names):
        ap.error("target names must be unique")
    baseline = args.baseline or names[0]
    if baseline not in names:
        ap.error(f"baseline {baseline!r} is not a target")
    size = parse_size(args.size)
    jobs = _chosen_jobs(ap, args)
    if any(spec != "pylocal" and not spec.startswith("py:") for _, spec in named):
        ensure_apt(["fio"], ["fio"])

    results = _run_on_targets(named, jobs, size, args)
    report = build_report(results, jobs, baseline)
    print(format_report(report, jobs, names, baseline))
    print(format_cpu(report, jobs, names))
    if "pvfs" in names and len(names) > 1:
        print(format_subject_ratios(report, jobs, "pvfs", [n for n in names if n != "pvfs"]))
    if args.json:
        _save(args, named, baseline, jobs, size, report)
    return 0


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        description="Run the fio job set on several targets, interleaved; print ratios.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="targets: local, gluster, moosefs, pylocal, py:MODULE:FUNC or a directory")
    ap.add_argument("--target", action="append", default=[], metavar="NAME=SPEC",
                    help="a target (repeatable); see above")
    ap.add_argument("--all", action="store_true",
                    help="issue 4's comparison ('make bench'): a private pvfs started here and "
                         "the targets local, gluster, moosefs, pvfs, pvfs-native, before any "
                         "--target")
    ap.add_argument("--pvfs-options", default="",
                    help="mount options of the pvfs target (-o text; default: none)")
    ap.add_argument("--baseline", help="target the ratios are against (default: the first)")
    ap.add_argument("--size", default="256M", help="file size per job (default 256M)")
    ap.add_argument("--runtime", type=float, default=10, help="seconds per run (default 10)")
    ap.add_argument("--repeats", type=int, default=3, help="runs per job and target")
    ap.add_argument("--numjobs", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--only", nargs="+", metavar="JOB", help="run only these job names")
    ap.add_argument("--cold", action="store_true",
                    help="drop every cache before uncached reads (needs root)")
    ap.add_argument("--direct", action="store_true", help="O_DIRECT for the fio runs")
    ap.add_argument("--workdir", default=None,
                    help="where targets and peers keep their files (default: a temp dir)")
    ap.add_argument("--json", metavar="NAME",
                    help="save bench/results/NAME.json (with --all: default 'fio')")
    ap.add_argument("-v", "--verbose", action="store_true")
    return ap


def _named_targets(ap: argparse.ArgumentParser, args: argparse.Namespace,
                   ) -> list[tuple[str, str]]:
    """``(name, spec)`` of every target: ``--all``'s built-in ones first (unless a
    ``--target`` takes the name), then the ``--target`` ones; none is a usage error."""
    named = [parse_target(t) for t in args.target]
    if args.all:
        named = [(n, n) for n in ALL_BASELINES + ALL_PVFS
                 if n not in {x for x, _ in named}] + named
    if not named:
        ap.error("no target: give --target or --all")
    return named


def _chosen_jobs(ap: argparse.ArgumentParser, args: argparse.Namespace) -> list[JobSpec]:
    """The job set for ``--numjobs``, cut to ``--only``'s names (none left: a usage error)."""
    jobs = default_jobs(tuple(args.numjobs))
    if args.only:
        jobs = [j for j in jobs + extra_jobs() if j.name in args.only]
        if not jobs:
            ap.error("--only matched no job")
    return jobs


def _run_on_targets(named: list[tuple[str, str]], jobs: list[JobSpec], size: int,
                    args: argparse.Namespace) -> dict[str, dict[str, list[JobResult]]]:
    """Bring every target up in the work directory (a temporary one, removed after, unless
    ``--workdir``), lay out the files, run the job matrix and tear everything down."""
    own_workdir = args.workdir is None
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="pvfs-fio-")).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(pvfs_for(named, workdir, args.pvfs_options))
            targets = [stack.enter_context(open_target(n, s, workdir)) for n, s in named]
            max_jobs = max(j.numjobs for j in jobs)
            for t in targets:
                log.info("laying out %d x %s on %s", max_jobs, args.size, t.name)
                prepare(t, size, max_jobs)
            return run_matrix(targets, jobs, size, args.runtime, args.repeats,
                              cold=args.cold, direct=args.direct, progress=log.info)
    finally:
        if own_workdir:
            shutil.rmtree(workdir, ignore_errors=True)


def _save(args: argparse.Namespace, named: list[tuple[str, str]], baseline: str,
          jobs: list[JobSpec], size: int, report: dict[str, Any]) -> None:
    """Write ``bench/results/<--json>.json`` and say where."""
    from pvfs.bench.fio import pvfs_target  # peak memory of the pvfs processes, as they stopped
    path = write_results(args.json, {
        "params": {"size": size, "runtime_s": args.runtime, "repeats": args.repeats,
                   "numjobs": args.numjobs, "cold": args.cold, "direct": args.direct,
                   "ioengine": "psync", "buffered": not args.direct},
        "targets": {n: s for n, s in named},
        "pvfs_mount_options": args.pvfs_options,
        "baseline": baseline,
        "jobs": [asdict(j) for j in jobs],
        "results": report,
        "pvfs_peak_rss": pvfs_target.PEAK_RSS,
    })
    print(f"saved {path}")


if __name__ == "__main__":
    sys.exit(main())
