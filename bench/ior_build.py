"""The programs ``bench/ior.py`` runs, built from their own sources outside the repository,
and the FUSE ceiling as a mount.

* :func:`build_ior` — hpc/ior's ``ior`` and ``mdtest`` (``./bootstrap && ./configure
  MPICC=<venv>/bin/mpicc && make``) in a clone of https://github.com/hpc/ior;
* :func:`build_passthrough_hp` — libfuse's ``example/passthrough_hp`` (``meson setup build
  -Dexamples=true && ninja -C build example/passthrough_hp``) in a clone of
  https://github.com/libfuse/libfuse (a release with ``--nopassthrough``: 3.17 or later);
* :func:`passthrough_mount` — ``passthrough_hp --nopassthrough --foreground`` over a local
  directory (data through user space, as issue 30 asks), unmounted and reaped on exit;
* :func:`run_mpi` — a command in its own process group, killed as a group on a timeout, an
  error or Ctrl-C, so no MPI rank outlives the benchmark.

Nothing of theirs is committed here; the build logs stay in their source trees
(``pvfs-build.log``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from pvfs.bench.common import ensure_apt, is_mounted, run, unmount, wait_for

log = logging.getLogger("bench.ior")

IOR_ENV = "PVFS_IOR_SRC"
LIBFUSE_ENV = "PVFS_LIBFUSE_SRC"
IOR_HINT = ("git clone https://github.com/hpc/ior SCRATCH/ior, then pass --ior-src "
            f"SCRATCH/ior or set ${IOR_ENV} (docs/benchmarks.md)")


def venv_tool(name: str) -> str:
    """A program of the running Python's environment (``mpicc``, ``mpiexec``)."""
    return str(Path(sys.executable).parent / name)


def git_head(src: Path) -> str | None:
    """The commit a source tree is at (recorded with the results), ``None`` if not a clone."""
    proc = run(["git", "-C", str(src), "rev-parse", "HEAD"], check=False, timeout=30,
               quiet=True)
    return proc.stdout.strip() or None


def ior_binaries(src: Path) -> tuple[Path, Path]:
    """Where a build of hpc/ior in ``src`` leaves ``ior`` and ``mdtest``."""
    return src / "src" / "ior", src / "src" / "mdtest"


def _build_step(argv: Sequence[str], cwd: Path, logfile: Path, timeout: float) -> None:
    with open(logfile, "a") as fh:
        fh.write(f"$ {' '.join(argv)}\n")
        fh.flush()
        done = subprocess.run(list(argv), cwd=cwd, stdout=fh, stderr=subprocess.STDOUT,
                              timeout=timeout, check=False)
    if done.returncode != 0:
        tail = logfile.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{' '.join(argv)} failed in {cwd} ({done.returncode}):\n{tail}")


def build_ior(src: Path, mpicc: str | None = None) -> tuple[Path, Path]:
    """``ior`` and ``mdtest`` of the hpc/ior clone ``src``, built with MPICH's ``mpicc``
    when either is missing.

    Raises:
        FileNotFoundError: ``src`` is not a clone of hpc/ior (the message says how to get one).
        RuntimeError: a build step failed (with the end of its log).
    """
    ior, mdtest = ior_binaries(src)
    if ior.exists() and mdtest.exists():
        return ior, mdtest
    if not (src / "configure.ac").exists():
        raise FileNotFoundError(f"{src} is not a clone of hpc/ior: {IOR_HINT}")
    mpicc = mpicc or venv_tool("mpicc")
    if not os.path.exists(mpicc):
        raise FileNotFoundError(f"no {mpicc}: install the venv's mpi extra (pip install "
                                "'.[mpi]': the mpich wheel)")
    ensure_apt(["autoconf", "automake", "make", "gcc", "pkg-config"],
               ["autoreconf", "automake", "make", "gcc"])
    logfile = src / "pvfs-build.log"
    log.info("building ior and mdtest in %s (log %s)", src, logfile)
    if not (src / "configure").exists():
        _build_step(["./bootstrap"], src, logfile, 600)
    _build_step(["./configure", f"MPICC={mpicc}"], src, logfile, 600)
    _build_step(["make", f"-j{os.cpu_count() or 1}"], src, logfile, 1800)
    if not (ior.exists() and mdtest.exists()):
        raise RuntimeError(f"make in {src} left no {ior} or {mdtest}")
    return ior, mdtest


def passthrough_hp_binary(src: Path) -> Path:
    """Where a meson build of libfuse in ``src`` leaves ``passthrough_hp``."""
    return src / "build" / "example" / "passthrough_hp"


def build_passthrough_hp(src: Path) -> Path:
    """libfuse's ``example/passthrough_hp`` in the clone ``src``, built if missing.

    Raises:
        FileNotFoundError: ``src`` is not a clone of libfuse.
        RuntimeError: a build step failed.
    """
    binary = passthrough_hp_binary(src)
    if binary.exists():
        return binary
    if not (src / "meson.build").exists() or not (src / "example").is_dir():
        raise FileNotFoundError(f"{src} is not a clone of libfuse (git clone "
                                "https://github.com/libfuse/libfuse SCRATCH/libfuse)")
    ensure_apt(["meson", "ninja-build", "g++", "pkg-config"], ["meson", "ninja", "g++"])
    logfile = src / "pvfs-build.log"
    log.info("building passthrough_hp in %s (log %s)", src, logfile)
    if not (src / "build" / "build.ninja").exists():
        _build_step(["meson", "setup", "build", "-Dexamples=true", "-Dutils=false",
                     "-Dtests=false"], src, logfile, 600)
    _build_step(["ninja", "-C", "build", "example/passthrough_hp"], src, logfile, 1800)
    if not binary.exists():
        raise RuntimeError(f"ninja in {src} left no {binary}")
    return binary


def _stop(proc: subprocess.Popen, grace: float = 10) -> None:
    """End a child started in its own session: its whole process group, TERM then KILL."""
    if proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue
    log.error("process group %d did not end", proc.pid)


@contextlib.contextmanager
def passthrough_mount(binary: Path, workdir: Path, timeout: float = 30) -> Iterator[str]:
    """``passthrough_hp --nopassthrough --foreground WORKDIR/src WORKDIR/mnt``; yields the
    mount point; on exit unmounts it (``fusermount3 -u``, lazily if busy) and reaps the
    process (TERM, then KILL by its process group)."""
    src, mnt = workdir / "src", workdir / "mnt"
    src.mkdir(parents=True, exist_ok=True)
    mnt.mkdir(parents=True, exist_ok=True)
    logfile = workdir / "passthrough_hp.log"
    with open(logfile, "ab") as fh:
        proc = subprocess.Popen([str(binary), "--nopassthrough", "--foreground", str(src),
                                 str(mnt)], stdout=fh, stderr=fh, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    try:
        def up() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"passthrough_hp exited: {logfile.read_text()[-2000:]}")
            return is_mounted(mnt)

        wait_for(up, timeout, f"passthrough_hp on {mnt}")
        log.info("FUSE ceiling: passthrough_hp --nopassthrough %s on %s", src, mnt)
        yield str(mnt)
    finally:
        unmount(mnt)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            _stop(proc)


def run_mpi(argv: Sequence[str], timeout: float, cwd: str | None = None) -> str:
    """Run ``argv`` (an ``mpiexec`` line) in a process group of its own; its output.

    On a timeout, an exception or Ctrl-C the whole group (mpiexec, its proxy, every rank) is
    ended before the error goes on.

    Raises:
        RuntimeError: a non-zero exit, with the end of the output.
        subprocess.TimeoutExpired: it ran longer than ``timeout`` seconds.
    """
    log.debug("run: %s", " ".join(argv))
    proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, text=True, cwd=cwd,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except BaseException:
        _stop(proc, grace=2)
        raise
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}):\n{out[-3000:]}")
    return out


def fadvise_dontneed(directory: str) -> int:
    """Drop the kernel's cached pages of every file under ``directory`` (what fio's
    ``invalidate=1`` does per file): reads then go to the file system's client, not to the
    page cache. The servers' own caches stay as they are. Returns the files touched."""
    count = 0
    for root, _dirs, files in os.walk(directory):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
            count += 1
    return count


def wait_quiet(seconds: float) -> None:
    """A short pause between steps (lets the previous target's write-back settle)."""
    time.sleep(seconds)
