"""IO500-style phases with the field's own tools (hpc/ior's ``ior`` and ``mdtest``) on pvfs,
GlusterFS, MooseFS and the FUSE ceiling, side by side (issues 29 and 30).

::

    python bench/ior.py --ior-src SCRATCH/ior --ceiling SCRATCH/libfuse --json ior
    python bench/ior.py --quick                      # a few minutes; sources from the env

Sources, built outside the repository when their programs are missing (nothing of theirs is
committed here): ``--ior-src DIR`` (or ``$PVFS_IOR_SRC``), a clone of
https://github.com/hpc/ior, built with the venv's MPICH (``./bootstrap && ./configure
MPICC=.venv/bin/mpicc && make``); ``--ceiling DIR`` (or ``$PVFS_LIBFUSE_SRC``; used whenever
it names a clone, ``--no-ceiling`` to leave it out), a clone of libfuse 3.17 or later whose
``example/passthrough_hp`` runs with ``--nopassthrough`` over a local directory.

Targets, all started here in a private work directory and stopped at the end (also after a
failure or Ctrl-C): ``pvfs`` (manager + 4 I/O daemons on 127.0.0.1, mounted with default
options), ``gluster`` (a 4-brick distribute volume), ``moosefs`` (master, one chunkserver,
goal 1), ``ceiling`` (``passthrough_hp``).

Steps, at each rank count of ``--ranks`` (MPI ranks, all on this machine), sizes per rank:

* ``mdtest-easy`` — ``mdtest -F -u -L -N 1``: empty files, a directory per rank: create, stat,
  remove;
* ``mdtest-hard`` — ``mdtest -F -w 3901 -e 3901 -N 1``: 3,901-byte files in one shared
  directory: create (+ write), stat, read, remove;
* ``ior-easy`` — ``ior -F -t 1m``: a file per rank, 1 MiB transfers: write (ending with
  fsync), then read;
* ``ior-hard`` — ``ior -t 47008 -b 47008 -s S``: one shared file, 47,008-byte transfers:
  write (fsync), then read;
* ``creates-1p`` (at 1 rank only) — one process creates ``creates`` empty files in one
  directory (``open(O_CREAT|O_EXCL)`` + ``close``; ``bench/meta.py``'s worker).

IOR reads read the neighbour rank's data (``-C``) after the files' pages were dropped from the
kernel's page cache (``posix_fadvise(DONTNEED)`` on each file through the mount, what fio's
``invalidate=1`` does; the servers' caches stay warm); ``--cold`` drops every cache instead.

Order: per repetition, per rank count, per step, every target runs the step back to back, the
targets rotated by the repetition (A B C D, then B C D A, ...). Reported per figure: every
repetition's number, the median with a distribution-free interval (95 %, or the whole range
and its real coverage when there are too few repetitions: 75 % with 3), the best peer, pvfs ÷
best peer and pvfs ÷ ceiling (ratio of medians, interval from the per-repetition ratios).
Beside each IOR figure: the median CPU seconds per GiB the phase moved, of the whole machine
(``/proc/stat``: IOR, the target's processes and the kernel, as the targets run one at a
time), less what an IOR run moving nothing costs at that rank count (``Runner.start_cpu``).
``--json NAME`` saves ``bench/results/NAME.json`` and, with matplotlib, ``NAME.png``.
``--show FILE.json`` prints a saved run's tables (text and Markdown) and redraws its plot.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pvfs.bench.common import (
    SCRATCH_KINDS,
    cpu_per_gib,
    drop_caches,
    exit_on_sigterm,
    machine_cpu_seconds,
    scratch_workdir,
    write_results,
)
from pvfs.bench.ior_build import (
    IOR_ENV,
    IOR_HINT,
    LIBFUSE_ENV,
    build_ior,
    build_passthrough_hp,
    fadvise_dontneed,
    git_head,
    passthrough_mount,
    run_mpi,
    venv_tool,
)
from pvfs.bench.ior_tools import (
    CEILING,
    CPU,
    FULL,
    PEERS,
    PHASES,
    QUICK,
    STEPS,
    SUBJECT,
    Sizes,
    build_report,
    cpu_report,
    format_cpu,
    format_report,
    ior_argv,
    ior_bytes,
    key,
    markdown_table,
    mdtest_argv,
    metadata_geomeans,
    mpiexec_argv,
    parse_ior,
    parse_mdtest,
    schedule,
)

log = logging.getLogger("bench.ior")


# ----------------------------------------------------------------------------- one step
class Runner:
    """Runs one step on one target directory with the built programs."""

    def __init__(self, ior: Path, mdtest: Path, mpiexec: str, sizes: Sizes, *,
                 cold: bool, timeout: float) -> None:
        self.ior, self.mdtest, self.mpiexec = str(ior), str(mdtest), mpiexec
        self.sizes, self.cold, self.timeout = sizes, cold, timeout
        self.commands: dict[str, list[str]] = {}   # one example command line per step
        self._start_cpu: dict[int, float] = {}      # ranks -> CPU seconds of IOR's start

    def _mpi(self, name: str, ranks: int, argv: list[str]) -> str:
        line = mpiexec_argv(self.mpiexec, ranks, argv)
        self.commands.setdefault(name, line)
        return run_mpi(line, self.timeout)

    def step(self, step: str, where: str, ranks: int) -> dict[str, float]:
        """Run ``step`` in the fresh directory ``where``; its phases' numbers."""
        if step in ("mdtest-easy", "mdtest-hard"):
            kind = step.split("-")[1]
            files = self.sizes.easy_files if kind == "easy" else self.sizes.hard_files
            return parse_mdtest(self._mpi(step, ranks, mdtest_argv(
                self.mdtest, os.path.join(where, "md"), kind, files)))
        if step in ("ior-easy", "ior-hard"):
            return self._ior(step, where, ranks)
        if step == "creates-1p":
            from pvfs.bench.meta import run_phases

            # create is the figure; the stat and remove that follow are kept as they come
            return run_phases(os.path.join(where, "c"), 1, self.sizes.creates, "shared")
        raise ValueError(f"unknown step {step!r}")

    def _ior(self, step: str, where: str, ranks: int) -> dict[str, float]:
        """Both phases of an IOR step; each with the machine's CPU seconds per GiB it moved,
        past what starting IOR costs alone (:meth:`start_cpu`)."""
        kind = step.split("-")[1]
        os.makedirs(os.path.join(where, "ior"), exist_ok=True)
        path = os.path.join(where, "ior", "file")
        moved = ior_bytes(kind, self.sizes, ranks)
        start = self.start_cpu(ranks)
        cpu0 = machine_cpu_seconds()
        got = parse_ior(self._mpi(f"{step}-write", ranks,
                                  ior_argv(self.ior, path, kind, "write", self.sizes)))
        got[f"write-{CPU}"] = cpu_per_gib(max(0.0, machine_cpu_seconds() - cpu0 - start), moved)
        if self.cold:
            drop_caches()
        else:
            fadvise_dontneed(os.path.join(where, "ior"))
        cpu0 = machine_cpu_seconds()
        got.update(parse_ior(self._mpi(f"{step}-read", ranks,
                                       ior_argv(self.ior, path, kind, "read", self.sizes))))
        got[f"read-{CPU}"] = cpu_per_gib(max(0.0, machine_cpu_seconds() - cpu0 - start), moved)
        return got

    def start_cpu(self, ranks: int) -> float:
        """CPU seconds the machine spends on an IOR run of ``ranks`` that moves (almost)
        nothing -- MPI's start and IOR's own -- measured once per rank count (the median of
        three runs writing one 4 KiB transfer per rank in a local temporary directory). At
        4 ranks it is about half a CPU second, as much as a small phase's own work."""
        if ranks not in self._start_cpu:
            spent = []
            for _ in range(3):
                with tempfile.TemporaryDirectory(prefix="ior-start-") as d:
                    cpu0 = machine_cpu_seconds()
                    run_mpi(mpiexec_argv(self.mpiexec, ranks, [
                        self.ior, "-a", "POSIX", "-t", "4k", "-b", "4k", "-w", "-o",
                        os.path.join(d, "f")]), self.timeout)
                    spent.append(machine_cpu_seconds() - cpu0)
            self._start_cpu[ranks] = sorted(spent)[1]
        return self._start_cpu[ranks]


# ----------------------------------------------------------------------------- targets
@contextlib.contextmanager
def open_targets(names: list[str], workdir: Path,
                 ceiling: Path | None) -> Iterator[dict[str, str]]:
    """Start every target (pvfs, the peers, the ceiling); yields name -> directory."""
    from pvfs.bench.meta import directory_targets

    with contextlib.ExitStack() as stack:
        named = [(n, n) for n in names]
        dirs = {n: d for n, d, _ in stack.enter_context(directory_targets(named, workdir, ""))}
        if ceiling is not None:
            dirs[CEILING] = stack.enter_context(passthrough_mount(ceiling,
                                                                  workdir / "ceiling"))
        yield dirs


def _device(path: str) -> int | None:
    try:
        return os.stat(path).st_dev
    except OSError:
        return None


class _Targets:
    """The targets' directories, and which of them still live on the file system they
    started on: a mount that died leaves its path on the local disk (or nowhere), and a step
    run there would measure the local disk under the target's name."""

    def __init__(self, dirs: dict[str, str]) -> None:
        self.dirs = dirs
        self.devices = {t: _device(d) for t, d in dirs.items()}
        self.dead: set[str] = set()

    def alive(self, t: str) -> bool:
        if t not in self.dead and _device(self.dirs[t]) != self.devices[t]:
            log.error("%s: %s is no longer on its file system; leaving it out from here on",
                      t, self.dirs[t])
            self.dead.add(t)
        return t not in self.dead


def _run_step(runner: Runner, targets: _Targets, t: str, where: str, step: str,
              n: int) -> tuple[dict[str, float], str | None]:
    """One step on one live target: its numbers, or ``{}`` and the error."""
    if not targets.alive(t):
        return {}, "the target's file system is gone (its mount died earlier)"
    os.makedirs(where)
    try:
        got = runner.step(step, where, n)
    except (RuntimeError, ValueError, OSError, subprocess.TimeoutExpired) as exc:
        return {}, str(exc)[-2000:]
    finally:
        shutil.rmtree(where, ignore_errors=True)
    if not targets.alive(t):
        return {}, "the target's file system went away during the step"
    return got, None


def measure(runner: Runner, dirs: dict[str, str], ranks: list[int], repeats: int,
            record: dict[str, Any], steps: tuple[str, ...] | list[str] = STEPS) -> None:
    """Every step of :func:`schedule` in its order; fills ``record`` as it goes."""
    runs, errors, load = record["runs"], record["errors"], record["load"]["at_each_step"]
    targets = _Targets(dirs)
    tag = f"ior-{os.getpid()}"
    for rep, n, step, order in schedule(list(dirs), ranks, repeats, steps):
        record["order"].append([rep, n, step, order])
        for t in order:
            load.append(round(os.getloadavg()[0], 2))
            t0 = time.monotonic()
            where = os.path.join(dirs[t], tag, f"r{rep}-n{n}-{step}")
            got, error = _run_step(runner, targets, t, where, step, n)
            if error:
                log.error("rep %d, %d rank(s), %s on %s failed: %s", rep + 1, n, step, t,
                          error[-800:])
                errors.append({"rep": rep, "ranks": n, "step": step, "target": t,
                               "error": error})
            # every reported phase gets an entry per repetition (None: failed), so index i
            # is repetition i for every target; mdtest's other rows are kept as they come
            for phase in dict.fromkeys([*PHASES[step], *got]):
                runs[t].setdefault(key(f"{step}-{phase}", n), []).append(got.get(phase))
            log.info("rep %d n=%d %-11s %-8s %s (%.0f s, load %.1f)", rep + 1, n, step, t,
                     " ".join(_logged(p, v) for p, v in got.items() if v is not None)
                     or "failed",
                     time.monotonic() - t0, load[-1])
    for t, d in dirs.items():
        if t not in targets.dead:
            shutil.rmtree(os.path.join(d, tag), ignore_errors=True)


def _logged(phase: str, value: float) -> str:
    """A phase's number as the progress line shows it (CPU seconds per GiB with decimals)."""
    return f"{phase}={value:.2f}" if phase.endswith(f"-{CPU}") else f"{phase}={value:,.0f}"


# ----------------------------------------------------------------------------- output
def plot(report: dict[str, Any], targets: list[str], path: str) -> bool:
    """Each target's median ÷ the best peer's, per figure and rank count (log scale,
    whiskers: the interval). False when matplotlib is missing."""
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ranks = sorted({c["ranks"] for c in report.values()})
    fig, axes = plt.subplots(len(ranks), 1, figsize=(11, 3.2 * len(ranks)), squeeze=False)
    width = 0.8 / max(1, len(targets))
    for ax, n in zip(axes[:, 0], ranks):
        cells = [c for c in report.values() if c["ranks"] == n]
        for j, t in enumerate(targets):
            xs, ys, lo, hi = [], [], [], []
            for i, c in enumerate(cells):
                base, m = c["median"].get(c["best_peer"]), c["median"].get(t)
                if not base or m is None:
                    continue
                a, b = c["interval"][t]
                xs.append(i + (j - len(targets) / 2 + 0.5) * width)
                ys.append(m / base)
                lo.append(max(0.0, (m - a) / base))
                hi.append(max(0.0, (b - m) / base))
            ax.bar(xs, ys, width, yerr=[lo, hi], capsize=2, label=t)
        ax.axhline(1.0, color="grey", lw=0.8, ls="--")
        ax.set_yscale("log")
        ax.set_ylabel("÷ best peer")
        ax.set_title(f"{n} rank(s)", fontsize=9)
        ax.set_xticks(range(len(cells)), [c["figure"] for c in cells], rotation=25,
                      ha="right", fontsize=7)
    axes[0, 0].legend(ncol=len(targets), fontsize=8)
    fig.suptitle("IO500-style phases: median ÷ best peer's median (whiskers: interval)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def show(doc: dict[str, Any], png: str | None) -> None:
    """Print a run's tables (the report rebuilt from its raw numbers) and plot it."""
    targets = list(doc["runs"])
    steps = doc["params"].get("steps", STEPS)
    report = build_report(doc["runs"], doc["params"]["ranks"], steps=steps)
    print(format_report(report, targets))
    cpu = cpu_report(doc["runs"], doc["params"]["ranks"], steps)
    if any(v is not None for per in cpu.values() for v in per.values()):
        print()
        print(format_cpu(cpu, targets))
    print()
    print(markdown_table(report))
    print()
    print("geometric means of the metadata figures:",
          {k: (None if v is None else round(v, 3)) for k, v in metadata_geomeans(report).items()})
    if png and plot(report, targets, png):
        print(f"plot {png}")


# ----------------------------------------------------------------------------- main
def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="example: python bench/ior.py --ior-src SCRATCH/ior "
                                        "--ceiling SCRATCH/libfuse --json ior")
    ap.add_argument("--ior-src", type=Path, default=os.environ.get(IOR_ENV),
                    help=f"clone of hpc/ior, built if needed (default ${IOR_ENV})")
    ap.add_argument("--ceiling", type=Path, default=os.environ.get(LIBFUSE_ENV),
                    help=f"clone of libfuse for passthrough_hp (default ${LIBFUSE_ENV})")
    ap.add_argument("--no-ceiling", action="store_true", help="leave the FUSE ceiling out")
    ap.add_argument("--targets", nargs="+", default=[SUBJECT, *PEERS],
                    choices=[SUBJECT, *PEERS], help="file systems besides the ceiling")
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--steps", nargs="+", default=list(STEPS), choices=STEPS,
                    help="the steps to run (default: all)")
    ap.add_argument("--repeats", type=int, default=None, help="3 (2 with --quick)")
    ap.add_argument("--quick", action="store_true", help="small sizes: a few minutes")
    for f in ("easy_files", "hard_files", "easy_mib", "hard_segments", "creates"):
        ap.add_argument("--" + f.replace("_", "-"), type=int, default=None,
                        help=f"override the size's {f} (per rank)")
    ap.add_argument("--cold", action="store_true",
                    help="drop every cache before IOR reads (default: the files' pages only)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per mpiexec")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--scratch", choices=SCRATCH_KINDS, default="tmp",
                    help="where every target's files go without --workdir: /tmp, or a "
                         "journaled ext4 of its own (bench.common.journaled_scratch says why)")
    ap.add_argument("--json", metavar="NAME")
    ap.add_argument("--plot", metavar="PNG", help="default with --json: results/NAME.png")
    ap.add_argument("--show", metavar="JSON", help="print a saved run's tables, and plot")
    ap.add_argument("-v", "--verbose", action="store_true")
    return ap.parse_args(argv)


def _sizes(args: argparse.Namespace) -> Sizes:
    base = (QUICK if args.quick else FULL).as_dict()
    for f in base:
        if getattr(args, f, None) is not None:
            base[f] = getattr(args, f)
    return Sizes(**base)


def _programs(args: argparse.Namespace) -> tuple[Path, Path, Path | None, dict[str, Any]]:
    if args.ior_src is None:
        raise SystemExit(f"bench/ior.py needs the IOR sources: {IOR_HINT}")
    src = args.ior_src.resolve()
    ior, mdtest = build_ior(src)
    sources = {"ior": {"commit": git_head(src)}}
    ceiling = None
    if args.ceiling is not None and not args.no_ceiling:
        fsrc = args.ceiling.resolve()
        ceiling = build_passthrough_hp(fsrc)
        sources["libfuse"] = {"commit": git_head(fsrc)}
    elif not args.no_ceiling:
        log.warning("no libfuse clone (--ceiling or $%s): running without the FUSE ceiling",
                    LIBFUSE_ENV)
    return ior, mdtest, ceiling, sources


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(name)s %(message)s")
    if args.show:
        doc = json.loads(Path(args.show).read_text())
        show(doc, args.plot or str(Path(args.show).with_suffix(".png")))
        return 0
    exit_on_sigterm()
    sizes = _sizes(args)
    repeats = args.repeats or (2 if args.quick else 3)
    ior, mdtest, ceiling, sources = _programs(args)
    runner = Runner(ior, mdtest, venv_tool("mpiexec"), sizes, cold=args.cold,
                    timeout=args.timeout)
    names = list(args.targets) + ([CEILING] if ceiling else [])
    record: dict[str, Any] = {"runs": {t: {} for t in names}, "errors": [], "order": [],
                              "load": {"before": list(os.getloadavg()), "at_each_step": []}}
    t0 = time.monotonic()
    with scratch_workdir("pvfs-ior-", args.scratch, args.workdir) as (workdir, where), \
            open_targets(list(args.targets), workdir, ceiling) as dirs:
        measure(runner, dirs, args.ranks, repeats, record, args.steps)
    record["load"]["after"] = list(os.getloadavg())
    report = build_report(record["runs"], args.ranks, steps=args.steps)
    doc = {"params": {"ranks": args.ranks, "steps": args.steps, "repeats": repeats,
                      "quick": args.quick,
                      "sizes": sizes.as_dict(), "cold": args.cold, "pvfs_iods": 4,
                      "pvfs_mount_options": "", "gluster_bricks": 4, "scratch": where,
                      "moosefs_chunkservers": 1, "moosefs_goal": 1,
                      "ceiling": "passthrough_hp --nopassthrough" if ceiling else None,
                      "mpiexec": runner.mpiexec, "sources": sources,
                      "wall_seconds": round(time.monotonic() - t0, 1)},
           "commands": runner.commands, "order": record["order"], "load": record["load"],
           "errors": record["errors"], "runs": record["runs"], "results": report,
           "cpu_s_per_gib": cpu_report(record["runs"], args.ranks, args.steps),
           "geomeans": metadata_geomeans(report)}
    show(doc, None)
    if args.json:
        path = write_results(args.json, doc)
        print(f"saved {path}")
        png = args.plot or str(path.with_suffix(".png"))
        if plot(report, names, png):
            print(f"plot {png}")
    elif args.plot:
        plot(report, names, args.plot)
    return 1 if record["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
