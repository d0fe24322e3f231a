"""Whole programs on pvfs and its peers: ``git clone`` of a real repository, ``tar x`` of a
source tree, and ``rm -r`` of what they made.

::

    python bench/apps.py --target gluster --target moosefs --target pvfs --repeats 3 \\
        --json apps

Targets are those of ``bench/fio/run.py`` (``local``, ``gluster``, ``moosefs``, ``pvfs`` — a
private pvfs mounted with ``--pvfs-options`` —, or an existing directory as ``NAME=DIR``).

Phases, each timed on every target in turn (the first target rotating each repeat):

* ``git-clone``: ``git clone --no-local --no-hardlinks`` of ``--repo`` (default: this
  repository) into the target: objects come through the pack protocol, as from a server, and
  the work tree is written file by file;
* ``tar-x``: ``tar -xf`` of a tarball of ``--tree`` (default: the running Python's standard
  library without ``site-packages``, a real source tree of ~2,500 files and ~100 MB; made
  once, untimed, outside the targets);
* ``rm-r``: ``rm -rf`` of both.

Caches are dropped before each phase. The table shows median seconds and the best other
target's time divided by the subject's (``--subject``, default ``pvfs``: above 1 the subject
is faster). ``--json NAME`` saves ``bench/results/NAME.json``; a pvfs target adds the mount's
and the daemons' peak resident memory (``pvfs_peak_rss``).
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any

from pvfs.bench.common import (
    REPO_ROOT,
    SCRATCH_KINDS,
    drop_caches,
    exit_on_sigterm,
    format_ratio,
    format_table,
    median,
    ratio,
    scratch_workdir,
    write_results,
)
from pvfs.bench.fio.run import parse_target
from pvfs.bench.meta import directory_targets

log = logging.getLogger("bench.apps")

PHASES = ("git-clone", "tar-x", "rm-r")


def make_tarball(tree: Path, out: Path) -> dict[str, int]:
    """A tarball of ``tree`` (``__pycache__`` and ``site-packages`` left out); its file
    count and bytes."""
    subprocess.run(["tar", "-cf", str(out), "--exclude=__pycache__", "--exclude=site-packages",
                    "-C", str(tree.parent), tree.name], check=True)
    listing = subprocess.run(["tar", "-tvf", str(out)], check=True, capture_output=True,
                             text=True).stdout.splitlines()
    files = [ln for ln in listing if ln.startswith("-")]
    return {"files": len(files), "bytes": sum(int(ln.split()[2]) for ln in files)}


def _timed(argv: list[str], cwd: str) -> float:
    drop_caches()
    t0 = time.perf_counter()
    subprocess.run(argv, cwd=cwd, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def measure_target(directory: str, repo: Path, tarball: Path) -> dict[str, float]:
    """Every phase once in a fresh subdirectory of ``directory``; seconds per phase."""
    here = Path(directory) / f"apps-{os.getpid()}-{time.monotonic_ns()}"
    here.mkdir()
    try:
        return {
            "git-clone": _timed(["git", "clone", "-q", "--no-local", "--no-hardlinks",
                                 str(repo), "clone"], str(here)),
            "tar-x": _timed(["tar", "-xf", str(tarball)], str(here)),
            "rm-r": _timed(["rm", "-rf", *os.listdir(here)], str(here)),
        }
    finally:
        shutil.rmtree(here, ignore_errors=True)


def build_report(runs: dict[str, list[dict]], subject: str) -> dict:
    """Median seconds per target and phase; best other's time ÷ the subject's."""
    report: dict[str, Any] = {}
    for ph in PHASES:
        med = {t: median(r[ph] for r in rs) for t, rs in runs.items()}
        others = {t: v for t, v in med.items() if t != subject and v is not None}
        best = min(others, key=lambda t: others[t]) if others else None
        report[ph] = {"median_s": med, "best_peer": best,
                      "speed_vs_best": ratio(others.get(best), med.get(subject)) if best else None}
    return report


def format_report(report: dict, targets: list[str], subject: str) -> str:
    rows = [[ph] + [("-" if c["median_s"][t] is None else f"{c['median_s'][t]:.2f}")
                    for t in targets] + [c["best_peer"] or "-", format_ratio(c["speed_vs_best"])]
            for ph, c in report.items()]
    return format_table(["phase (s)"] + targets + ["best other", f"best/{subject}"], rows)




def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="example: python bench/apps.py --target gluster "
                                        "--target moosefs --target pvfs --json apps")
    ap.add_argument("--target", action="append", default=[], metavar="NAME=SPEC",
                    help="local, gluster, moosefs, pvfs or NAME=DIR (repeatable)")
    ap.add_argument("--pvfs-options", default="", help="mount options of the pvfs target")
    ap.add_argument("--repo", type=Path, default=REPO_ROOT,
                    help="repository to clone (default: this one)")
    ap.add_argument("--tree", type=Path, default=Path(sysconfig.get_paths()["stdlib"]),
                    help="source tree to tar and extract (default: Python's standard library)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--subject", default="pvfs", help="target compared with the best other")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--scratch", choices=SCRATCH_KINDS, default="tmp",
                    help="where every target's files go without --workdir: /tmp, or a "
                         "journaled ext4 of its own (bench.common.journaled_scratch says why)")
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
    runs: dict[str, list[dict]] = {n: [] for n in names}
    load: list[float] = []
    from pvfs.bench.fio import pvfs_target

    with scratch_workdir("pvfs-apps-", args.scratch, args.workdir) as (workdir, where), \
            tempfile.TemporaryDirectory(prefix="pvfs-apps-src-") as src:
        tarball = Path(src) / "tree.tar"
        tree = make_tarball(args.tree.resolve(), tarball)
        objects = subprocess.run(["git", "count-objects", "-v"], cwd=args.repo, check=True,
                                 capture_output=True, text=True).stdout
        files = len(subprocess.run(["git", "ls-files"], cwd=args.repo, check=True,
                                   capture_output=True, text=True).stdout.splitlines())
        log.info("clone %s (%d files); extract %s (%d files, %.0f MiB)", args.repo, files,
                 args.tree, tree["files"], tree["bytes"] / 2**20)
        with directory_targets(named, workdir, args.pvfs_options) as targets:
            for rep in range(args.repeats):
                k = rep % len(targets)
                for name, directory, _probe in targets[k:] + targets[:k]:
                    load.append(os.getloadavg()[0])
                    r = measure_target(directory, args.repo.resolve(), tarball)
                    runs[name].append(r)
                    log.info("rep %d %s: %s", rep + 1, name,
                             " ".join(f"{p}={v:.2f}s" for p, v in r.items()))
    report = build_report(runs, args.subject)
    print(format_report(report, names, args.subject))
    if args.json:
        path = write_results(args.json, {
            "params": {"repo": str(args.repo), "repo_files": files, "repo_objects": objects,
                       "tree": str(args.tree), "tree_files": tree["files"],
                       "tree_bytes": tree["bytes"], "repeats": args.repeats,
                       "scratch": where,
                       "pvfs_mount_options": args.pvfs_options},
            "targets": dict(named), "subject": args.subject,
            "load_1min_at_each_run": load, "results": report, "runs": runs,
            "pvfs_peak_rss": pvfs_target.PEAK_RSS})
        print(f"saved {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
