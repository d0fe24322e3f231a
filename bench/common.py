"""Shared helpers for the benchmark scripts in ``bench/``.

Every benchmark saves its numbers through :func:`write_results`, which wraps them with a
description of the machine (CPUs, memory, kernel, git commit), the command line that produced
them and a UTC timestamp, as ``bench/results/NAME.json``.

Buffered I/O numbers on this kind of machine vary by up to ~50 % run to run, so benchmarks
interleave their variants (A/B/A/B), report the median of the repeats (:func:`median`) and
print ratios against a baseline (:func:`ratio`, :func:`format_table`).
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import math
import os
import platform
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

log = logging.getLogger("bench")

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO_ROOT / "bench" / "results"


# --------------------------------------------------------------------------- machine


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def _cpu_model() -> str:
    for line in _read_text("/proc/cpuinfo").splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _mem_total_bytes() -> int:
    for line in _read_text("/proc/meminfo").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return 0


def git_commit(repo: Path = REPO_ROOT) -> dict[str, Any]:
    """The commit the work tree is at and whether it has local changes."""
    def git(*args: str) -> str:
        out = subprocess.run(["git", "-C", str(repo), *args], check=False,
                             capture_output=True,
                             text=True, timeout=30)
        return out.stdout.strip() if out.returncode == 0 else ""

    commit = git("rev-parse", "HEAD")
    dirty = bool(git("status", "--porcelain", "--untracked-files=no")) if commit else False
    return {"commit": commit or None, "dirty": dirty}


def machine_info() -> dict[str, Any]:
    """Describe the machine a benchmark ran on (saved with every result)."""
    uname = platform.uname()
    return {
        "hostname": socket.gethostname(),
        "cpus": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "memory_bytes": _mem_total_bytes(),
        "kernel": uname.release,
        "os": _read_os_release(),
        "python": platform.python_version(),
        "loadavg": list(os.getloadavg()),
        "git": git_commit(),
    }


def _read_os_release() -> str:
    for line in _read_text("/etc/os-release").splitlines():
        if line.startswith("PRETTY_NAME="):
            return line.split("=", 1)[1].strip().strip('"')
    return platform.system()


# --------------------------------------------------------------------------- results


def write_results(name: str, data: dict[str, Any], command: Sequence[str] | str | None = None,
                  results_dir: Path | None = None) -> Path:
    """Save ``data`` as ``bench/results/NAME.json`` with machine, command and timestamp.

    Args:
        name: file stem, e.g. ``"fio_peers"``.
        data: the benchmark's own numbers (must be JSON-serialisable).
        command: the command line; defaults to ``sys.argv``.
        results_dir: where to write; defaults to ``bench/results`` in the repository.

    Returns:
        The path written.
    """
    if command is None:
        command = [Path(sys.executable).name, *sys.argv]
    if not isinstance(command, str):
        command = " ".join(command)
    doc = {
        "name": name,
        "timestamp": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "command": command,
        "machine": machine_info(),
        **data,
    }
    out_dir = results_dir or RESULTS_DIR
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


# --------------------------------------------------------------------------- CPU time


def machine_cpu_seconds() -> float:
    """CPU seconds the whole machine has spent busy since boot (``/proc/stat``: user, nice,
    system, irq and softirq of every CPU; not idle, iowait or steal). The difference over a
    run is what everything on the machine spent on it -- the benchmark's client, the file
    system's processes and the kernel alike -- when nothing else runs."""
    fields = _read_text("/proc/stat").split("\n", 1)[0].split()
    if not fields or fields[0] != "cpu":
        raise RuntimeError("unexpected /proc/stat")
    user, nice, system, _idle, _iowait, irq, softirq = (int(x) for x in fields[1:8])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def cpu_per_gib(cpu_s: float | None, nbytes: float) -> float | None:
    """CPU seconds per GiB moved (None without a measure or without bytes)."""
    if cpu_s is None or nbytes <= 0:
        return None
    return cpu_s / (nbytes / (1 << 30))


# --------------------------------------------------------------------------- statistics


def median(values: Iterable[float | None]) -> float | None:
    """Median of the values that are not ``None``/NaN; ``None`` when there are none."""
    xs = sorted(float(v) for v in values if v is not None and not math.isnan(float(v)))
    if not xs:
        return None
    mid = len(xs) // 2
    if len(xs) % 2:
        return xs[mid]
    return (xs[mid - 1] + xs[mid]) / 2.0


def ratio(value: float | None, baseline: float | None) -> float | None:
    """``value / baseline``, or ``None`` when either is missing or the baseline is zero."""
    if value is None or baseline is None:
        return None
    if baseline == 0 or math.isnan(baseline) or math.isnan(value):
        return None
    return value / baseline


def ratios(values: dict[str, float | None], baseline: str) -> dict[str, float | None]:
    """Each entry of ``values`` divided by the entry named ``baseline``.

    Raises:
        KeyError: ``baseline`` is not one of the keys.
    """
    base = values[baseline]
    return {k: ratio(v, base) for k, v in values.items()}


def format_ratio(r: float | None) -> str:
    return "-" if r is None else f"{r:.2f}x"


def format_bytes_rate(bps: float | None) -> str:
    """Bytes per second as MiB/s (or GiB/s above 10 GiB/s)."""
    if bps is None:
        return "-"
    if bps >= 10 * 2**30:
        return f"{bps / 2**30:.1f} GiB/s"
    return f"{bps / 2**20:.1f} MiB/s"


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain left-aligned text table (first column left, others right-aligned)."""
    cells = [[str(h) for h in headers]] + [["-" if c is None else str(c) for c in r]
                                            for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def fmt(row: list[str]) -> str:
        parts = [row[0].ljust(widths[0])]
        parts += [c.rjust(w) for c, w in zip(row[1:], widths[1:])]
        return "  ".join(parts).rstrip()

    lines = [fmt(cells[0]), "  ".join("-" * w for w in widths)]
    lines += [fmt(r) for r in cells[1:]]
    return "\n".join(lines)


# --------------------------------------------------------------------------- system


def exit_on_sigterm() -> None:
    """Turn SIGTERM (a timeout, a kill) into SystemExit, so the ``with`` blocks that started
    peers, pvfs daemons and mounts tear them down as after Ctrl-C."""
    import signal

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


def drop_caches() -> bool:
    """Flush dirty pages and drop the page, dentry and inode caches (needs root).

    Returns:
        True when the caches were dropped, False when not permitted.
    """
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError as e:
        log.warning("cannot drop caches: %s", e)
        return False
    return True


@contextmanager
def private_cluster(iods: int = 4) -> Iterator[Any]:
    """A file system of its own for one benchmark: manager and ``iods`` I/O daemons in a
    temporary directory, up for the block and down (and removed) after it; yields its
    config (``.path`` is the config file)."""
    import tempfile

    from pvfs.cluster.launch import down, make_config, up, write_config

    with tempfile.TemporaryDirectory(prefix="pvfs-bench-") as tmp:
        cfg = write_config(make_config(tmp, iods=iods), f"{tmp}/pvfs.toml")
        up(cfg)
        try:
            yield cfg
        finally:
            down(cfg)


@contextmanager
def journaled_scratch(size_gib: int = 8) -> Iterator[str | None]:
    """Temporary files (``tempfile``'s directory) on a journaled ext4 file system of their
    own, a loop device over a sparse image, for the block; None (and nothing changed) when
    it cannot be made (not root, no ``mkfs.ext4``).

    Why: this machine's root ext4 has no journal, and without one ext4 skips every inode
    freed in the last minute when it allocates a new one (``recently_deleted``, read from
    the inode table one by one): after the churn of earlier runs a file create costs
    ~400 us of kernel CPU there against ~10 us on a journaled file system. Every
    create-heavy benchmark on it measures that, for pvfs and the local baseline alike.
    """
    import tempfile

    if os.geteuid() != 0 or shutil.which("mkfs.ext4") is None:
        yield None
        return
    work = Path(tempfile.mkdtemp(prefix="pvfs-jscratch-"))
    image, mnt = work / "fs.img", work / "mnt"
    mnt.mkdir()
    with open(image, "wb") as f:
        f.truncate(size_gib << 30)
    try:
        run(["mkfs.ext4", "-q", "-F", str(image)], timeout=300)
        run(["mount", "-o", "loop", str(image), str(mnt)])
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:  # no loop devices?
        log.warning("no journaled scratch file system: %s", exc)
        shutil.rmtree(work, ignore_errors=True)
        yield None
        return
    old = tempfile.tempdir
    try:
        tempfile.tempdir = str(mnt)
        yield str(mnt)
    finally:
        tempfile.tempdir = old
        if run(["umount", str(mnt)], check=False).returncode:
            run(["umount", "-l", str(mnt)], check=False)
        shutil.rmtree(work, ignore_errors=True)


SCRATCH_KINDS = ("tmp", "journaled")


@contextmanager
def scratch_workdir(prefix: str, kind: str = "tmp",
                    given: str | None = None) -> Iterator[tuple[Path, str]]:
    """A benchmark's working directory for every target's files, and where it is: ``given``
    (kept afterwards), or a new directory in ``/tmp`` (``kind="tmp"``) or on a journaled ext4
    of its own (``"journaled"``, :func:`journaled_scratch`; ``/tmp`` if it cannot be made),
    removed afterwards."""
    import tempfile

    if given is not None:
        yield Path(given).resolve(), f"given: {given}"
        return
    with journaled_scratch() if kind == "journaled" else _no_scratch() as mnt:
        work = Path(tempfile.mkdtemp(prefix=prefix)).resolve()
        try:
            yield work, "journaled ext4 (loop)" if mnt else tempfile.gettempdir()
        finally:
            shutil.rmtree(work, ignore_errors=True)


@contextmanager
def _no_scratch() -> Iterator[None]:
    yield None


def run(cmd: Sequence[str], *, check: bool = True, timeout: float = 120,
        quiet: bool = False, **kw: Any) -> subprocess.CompletedProcess[str]:
    """Run a command, capture its output, raise with the output on failure."""
    if not quiet:
        log.debug("run: %s", " ".join(cmd))
    proc = subprocess.run(list(cmd), check=False, capture_output=True, text=True, timeout=timeout, **kw)
    if check and proc.returncode != 0:
        raise RuntimeError(f"command failed ({proc.returncode}): {' '.join(cmd)}\n"
                           f"stdout: {proc.stdout.strip()}\nstderr: {proc.stderr.strip()}")
    return proc


_apt_updated = False


def ensure_apt(packages: Sequence[str], binaries: Sequence[str]) -> None:
    """Install Debian ``packages`` with apt-get unless every one of ``binaries`` exists."""
    global _apt_updated
    missing = [b for b in binaries if shutil.which(b) is None and not os.path.exists(b)]
    if not missing:
        return
    log.info("installing %s (missing %s)", " ".join(packages), " ".join(missing))
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    if not _apt_updated:
        run(["apt-get", "update", "-qq"], timeout=600, env=env)
        _apt_updated = True
    run(["apt-get", "install", "-y", "-qq", *packages], timeout=1200, env=env)
    still = [b for b in binaries if shutil.which(b) is None and not os.path.exists(b)]
    if still:
        raise RuntimeError(f"apt-get installed {packages} but {still} are still missing")


def wait_for(predicate: Any, timeout: float, what: str, interval: float = 0.1) -> None:
    """Poll ``predicate()`` until it is true; raise ``TimeoutError`` naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def is_mounted(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` is a mount point listed in /proc/self/mountinfo."""
    target = os.path.realpath(path)
    for line in _read_text("/proc/self/mountinfo").splitlines():
        fields = line.split()
        if len(fields) > 4 and _unescape_mount(fields[4]) == target:
            return True
    return False


def _unescape_mount(s: str) -> str:
    return (s.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n")
            .replace("\\134", "\\"))


def unmount(path: str | os.PathLike[str], timeout: float = 30) -> None:
    """Unmount ``path``: plain umount first, then fusermount3, lazily as the last resort."""
    path = str(path)
    if not is_mounted(path):
        return
    for cmd in (["umount", path], ["fusermount3", "-u", path], ["umount", "-l", path],
                ["fusermount3", "-u", "-z", path]):
        if shutil.which(cmd[0]) is None:
            continue
        try:
            run(cmd, check=False, timeout=timeout)
        except subprocess.TimeoutExpired:
            log.warning("%s timed out", " ".join(cmd))
        if not is_mounted(path):
            return
    if is_mounted(path):
        log.error("could not unmount %s", path)


def pids_with_arg(fragment: str) -> list[int]:
    """PIDs of processes whose command line contains ``fragment``.

    Used only with fragments unique to one benchmark run (its private work directory), to
    find the daemons that run started when they keep no pidfile.
    """
    skip = _ancestors()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in skip:
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if fragment in cmdline:
            found.append(int(entry))
    return found


def _ancestors() -> set[int]:
    """This process and its ancestors (their command lines may name our work directory)."""
    pids = set()
    pid = os.getpid()
    while pid > 1 and pid not in pids:
        pids.add(pid)
        stat = _read_text(f"/proc/{pid}/stat")
        if not stat:
            break
        pid = int(stat.rsplit(")", 1)[-1].split()[1])
    return pids
